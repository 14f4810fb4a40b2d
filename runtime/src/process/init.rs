//! The container's init: everything between `clone3` and `execve`.
//!
//! Runs in the cloned child (and, when a late pid namespace needs it, in its
//! own child). The runtime prepared every input in [`InitConfig`] before
//! cloning, so this is a linear script of kernel calls. It reports the first
//! failure to the runtime as an [`InitError`] (the step, its object, the
//! errno), and never returns into the runtime's code: it ends in `execve` or
//! `_exit`.
//!
//! Order (runtime-spec "Lifecycle", runc's standard init):
//!  1. a session of its own, stdio; wait for the runtime's Go (maps
//!     written, cgroup joined); oom_score_adj
//!  2. namespaces: join, unshare, maybe fork once more for a late pid ns;
//!     then close every fd of the runtime's it no longer needs
//!  3. hostname, domainname, session keyring
//!  4. rootfs: propagation, mounts in order, /dev
//!  5. prestart + createRuntime hooks (in the runtime), createContainer hooks
//!  6. sysctl, readonlyPaths, maskedPaths, pivot_root, read-only root
//!  7. the path every container process shares with `exec`
//!     ([`super::finalize`]): terminal, rlimits, cwd, LSM labels, seccomp,
//!     user and capabilities, no_new_privs, `args[0]`; Ready
//!  8. wait on start.sock; startContainer hooks; execve (or, for a
//!     resident init, serve requests: [`super::resident`])

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::sched::CloneFlags;
use nix::sys::signal::Signal;
use nix::unistd::{Gid, Uid};
use oci_spec::runtime::{LinuxNamespaceType, Spec};

use super::finalize::{self, ProcessConfig, Step};
use super::sync::{self, Channel, Msg, StartReply};
use crate::error::InitError;
use crate::hooks::{self, Kind};
use crate::namespaces::{self, Plan};
use crate::rootfs;
use crate::sys::{self, Forked};
use crate::tree::Tree;

/// Everything init needs, built by the runtime before cloning.
pub(crate) struct InitConfig<'a> {
    pub id: &'a str,
    pub bundle: &'a Path,
    pub rootfs: &'a Path,
    pub spec: &'a Spec,
    pub plan: &'a Plan,
    /// The container's process: credentials, limits, program.
    pub process: ProcessConfig,
    pub no_pivot: bool,
    pub no_new_keyring: bool,
    pub oom_score_adj: Option<i32>,
    /// Hooks exist that need the runtime's help (or the init's pid).
    pub wants_hooks: bool,
    /// Listening socket that `start` connects to.
    pub start_listener: &'a OwnedFd,
    /// With a resident init, the socket it takes requests on once started
    /// (module `resident`); it then never execs `process.args`.
    pub agent_listener: Option<&'a OwnedFd>,
    /// fds to move to 0, 1 and 2 first.
    pub stdio: Option<[std::os::fd::RawFd; 3]>,
    /// Keep PDEATHSIG for good: the container dies with its supervisor.
    pub die_with_runtime: bool,
    /// Bring `lo` up in a new network namespace.
    pub loopback: bool,
    /// The runtime's fd holding the state directory's lock: init closes its
    /// copy at once, or the lock would outlive a runtime killed mid-create.
    pub lock_fd: Option<std::os::fd::RawFd>,
    /// v1 `tasks` files init writes "0" to, moving itself into its cgroup.
    pub cgroup_tasks: Vec<PathBuf>,
    /// The hybrid cgroup2 `cgroup.procs` and the cgroup path: joined the
    /// same way unless clone3 already placed init there.
    pub cgroup_unified: Option<(PathBuf, String)>,
    /// The host's cgroup hierarchies (`cgroup` mounts are built from them).
    pub cgroup_hierarchies: Vec<crate::cgroups::Mount>,
    /// The runtime can write init's id maps only while init is dumpable
    /// (`idmap::needs_dumpable_child`): init asks for them, dumpable, and
    /// turns non-dumpable again before anything else.
    pub maps_dumpable: bool,
    /// The runtime itself runs in a user namespace other than the initial
    /// one (rootless podman runs it as root of its own).
    pub runtime_in_user_ns: bool,
    /// Bind mounts the runtime made detached for init to attach (see
    /// `rootfs::sources`).
    pub bind_sources: Vec<crate::rootfs::sources::Source>,
}

/// Child entry point. Never returns.
pub(crate) fn main(cfg: &InitConfig, chan: &Channel) -> ! {
    // setup only comes back on failure: success ends in execve.
    let err = match setup(cfg, chan) {
        Ok(()) => InitError::other("init", "returned without exec"),
        Err(e) => e,
    };
    let _ = chan.send(&Msg::Error(err));
    sys::exit_child(1)
}

/// The script, in the order of the module doc.
fn setup(cfg: &InitConfig, chan: &Channel) -> Step {
    // 1. Our own session and stdio. If the runtime dies before the
    //    container is committed, so do we.
    if let Some(fd) = cfg.lock_fd {
        let _ = nix::unistd::close(fd);
    }
    finalize::begin(cfg.stdio)?;
    finalize::die_with_parent(Some(Signal::SIGKILL))?;
    if cfg.agent_listener.is_some() {
        // Still the host's root, with the host's /proc: later, our own
        // /proc/self/mem belongs to a user the container doesn't map. An
        // unprivileged runtime's init owns it only while dumpable (born
        // non-dumpable, its /proc files are the host root's): it opens it
        // in that moment, as it does for its maps, before anything of the
        // container runs.
        let window = cfg.maps_dumpable;
        if window {
            nix::sys::prctl::set_dumpable(true).map_err(|e| InitError::value("prctl", "PR_SET_DUMPABLE 1", e))?;
        }
        let concealed = super::title::conceal_cmdline(c"tinyrun-init")
            .map_err(|e| InitError::other("conceal the runtime's command line", e.to_string()));
        if window {
            nix::sys::prctl::set_dumpable(false).map_err(|e| InitError::value("prctl", "PR_SET_DUMPABLE 0", e))?;
        }
        concealed?;
    }
    if cfg.maps_dumpable && cfg.plan.clone_flags.contains(CloneFlags::CLONE_NEWUSER) {
        maps_while_dumpable(chan, Msg::Go)?;
    } else {
        chan.expect(Msg::Go)?;
    }
    finalize::join_own_cgroup(&cfg.cgroup_tasks, cfg.cgroup_unified.as_ref())?;
    // Still with the host's credentials (unless clone made our user
    // namespace): in a user namespace entered later, a non-dumpable
    // process's /proc files are no longer its own.
    oom_score_adj(cfg.oom_score_adj)?;
    // 2. Namespaces; then nothing of the host's stays open.
    enter_namespaces(cfg.plan, chan, cfg.maps_dumpable)?;
    close_host_fds(cfg, chan)?;
    // 3. What the new namespaces hold: lo, names, keyring, OOM score.
    set_up_namespaces(cfg)?;
    // 4. The mounts, in order, and /dev.
    let root = build_rootfs(cfg, chan)?;
    // 5. prestart and createRuntime hooks in the runtime; createContainer here.
    let host_pid = run_create_hooks(cfg, chan)?;
    // 6. What comes last in the root, then it becomes `/`.
    rootfs::apply_sysctl(&root, cfg.spec)?;
    rootfs::protect_paths(&rootfs::Real, &root, cfg.spec)?;
    root.mkdir_all(&cfg.process.cwd, 0o755).map_err(|e| InitError::from(e).field("process.cwd"))?;
    rootfs::enter(&rootfs::Real, root, cfg.spec, cfg.no_pivot, cfg.plan.own_mount_ns())?;
    // 7. The path every container process shares with `exec`.
    let (program, refusals) = finalize::prepare(&cfg.process, chan, true, cfg.agent_listener.is_some())?;
    // 8. Ready; outlive the runtime once it has recorded us; wait for start.
    chan.send(&Msg::Ready)?;
    chan.expect(Msg::Committed)?;
    if !cfg.die_with_runtime {
        finalize::die_with_parent(None)?;
    }
    chan.send(&Msg::Detached)?;
    wait_for_start_and_exec(cfg, host_pid, &program, refusals)
}

/// `process.oomScoreAdj`.
fn oom_score_adj(adj: Option<i32>) -> Step {
    let Some(adj) = adj else { return Ok(()) };
    std::fs::write("/proc/self/oom_score_adj", adj.to_string()).map_err(|e| {
        InitError::value("write", format_args!("{adj} to /proc/self/oom_score_adj"), sys::io_errno(&e))
            .field("process.oomScoreAdj")
    })
}

/// Step 3: loopback in a new network namespace, hostname and domainname in
/// the container's UTS namespace (new or joined), a session
/// keyring of our own; then umask 0 for what init makes.
fn set_up_namespaces(cfg: &InitConfig) -> Step {
    let plan = cfg.plan;
    if plan.is_new(LinuxNamespaceType::Network) && cfg.loopback {
        sys::loopback_up()?;
    }
    // A UTS namespace joined by path gets the names too, as under runc.
    if plan.is_new(LinuxNamespaceType::Uts) || plan.joins.iter().any(|j| j.typ == LinuxNamespaceType::Uts) {
        if let Some(h) = cfg.spec.hostname().as_deref() {
            nix::unistd::sethostname(h).map_err(|e| InitError::value("sethostname", format_args!("{h:?}"), e))?;
        }
        if let Some(d) = cfg.spec.domainname().as_deref() {
            sys::setdomainname(d)?;
        }
    }
    if !cfg.no_new_keyring {
        match sys::join_session_keyring(&format!("_ses.{}", cfg.id)) {
            Err(e) if e.errno == nix::errno::Errno::ENOSYS => {}
            r => r?,
        }
    }
    // Device nodes and created directories take their modes literally.
    nix::sys::stat::umask(nix::sys::stat::Mode::empty());
    Ok(())
}

/// Step 4. The cgroup namespace is made only once the runtime says init
/// is in its cgroup (`Joined`), and as late as the first cgroup mount.
fn build_rootfs(cfg: &InitConfig, chan: &Channel) -> Result<Tree, InitError> {
    let plan = cfg.plan;
    let opts = rootfs::Options {
        spec: cfg.spec,
        rootfs: cfg.rootfs,
        bundle: cfg.bundle,
        // Devices are bind-mounted, not made, in a user namespace: the
        // container's, or the one a rootless engine runs the runtime in.
        in_user_ns: plan.user_ns() || cfg.runtime_in_user_ns,
        cgroup_ns: plan.is_new(LinuxNamespaceType::Cgroup),
        cgroup_hierarchies: &cfg.cgroup_hierarchies,
        kernel: &rootfs::Real,
        own_mount_ns: plan.own_mount_ns(),
        bind_sources: &cfg.bind_sources,
    };
    let mut in_cgroup = || -> Result<String, InitError> {
        chan.expect(Msg::Joined)?;
        // Where init's cgroups are on the host, before the namespace made
        // next shows each as "/": a cgroup mount that can't be fresh binds
        // these, never a hierarchy's root.
        let own = crate::sys::fs::read_proc("/proc/self/cgroup")
            .map_err(|e| InitError::path("read", "/proc/self/cgroup", crate::sys::io_errno(&e)))?;
        if plan.is_new(LinuxNamespaceType::Cgroup) {
            namespaces::unshare(CloneFlags::CLONE_NEWCGROUP)?;
        }
        Ok(own)
    };
    rootfs::prepare(&opts, &mut in_cgroup)
}

/// Step 5: asks the runtime to run prestart and createRuntime hooks, then
/// runs createContainer hooks. Returns init's host pid (0 without hooks).
fn run_create_hooks(cfg: &InitConfig, chan: &Channel) -> Result<i32, InitError> {
    if !cfg.wants_hooks {
        return Ok(0);
    }
    chan.send(&Msg::HooksPlease)?;
    let host_pid = match chan.recv()? {
        Some(Msg::HooksDone(pid)) => pid,
        Some(Msg::Error(e)) => return Err(e),
        Some(other) => return Err(sync::unexpected(&other, Some(&Msg::HooksDone(0)))),
        None => return Err(InitError::other("sync with the runtime", "it went away while running hooks")),
    };
    // The process's environment as runc's init holds it then: HOME comes later.
    let env: Vec<std::ffi::CString> =
        cfg.process.env.iter().filter_map(|e| std::ffi::CString::new(e.as_str()).ok()).collect();
    hooks::run_all_in_container(cfg.spec, Kind::CreateContainer, &hook_state(cfg, host_pid, "created"), Some(&env))?;
    Ok(host_pid)
}

/// Closes every fd init no longer needs before anything of the image can
/// run: handles on namespaces and cgroups, the runtime's own namespaces,
/// the pipes behind the stdio it was given, whatever the caller leaked.
/// Only stdio, the preserved fds, the start listener, the console socket
/// and init's end of the channel stay (close-on-exec alone would leave the
/// rest open to startContainer hooks' parent and to /proc/1/fd).
///
/// # Preconditions
/// Nothing init will drop later owns one of the closed fds: what it holds
/// here belongs to the runtime's stack frames, which init never returns to.
fn close_host_fds(cfg: &InitConfig, chan: &Channel) -> Step {
    let mut keep = vec![chan.as_raw_fd(), cfg.start_listener.as_raw_fd()];
    keep.extend(cfg.process.console);
    keep.extend(cfg.agent_listener.map(AsRawFd::as_raw_fd));
    keep.extend(cfg.bind_sources.iter().map(|s| s.fd.as_raw_fd()));
    Ok(sys::close_fds_except(3 + cfg.process.preserved_fds, &keep)?)
}

/// In a user namespace made by clone: take uid/gid 0 of it, now that the
/// runtime has written the maps. Unmapped 0 is left alone (the config may
/// map only the user it runs as).
pub(super) fn become_ns_root() -> Step {
    match nix::unistd::setresgid(Gid::from_raw(0), Gid::from_raw(0), Gid::from_raw(0)) {
        Ok(()) | Err(nix::errno::Errno::EINVAL) => {}
        Err(e) => return Err(InitError::value("setresgid", "0 in the user namespace", e)),
    }
    match nix::unistd::setresuid(Uid::from_raw(0), Uid::from_raw(0), Uid::from_raw(0)) {
        Ok(()) | Err(nix::errno::Errno::EINVAL) => Ok(()),
        Err(e) => Err(InitError::value("setresuid", "0 in the user namespace", e)),
    }
}

/// Step 2: the user namespace first (root in it), then the others.
fn enter_namespaces(plan: &Plan, chan: &Channel, maps_dumpable: bool) -> Step {
    if plan.clone_flags.contains(CloneFlags::CLONE_NEWUSER) {
        become_ns_root()?;
    }
    // A joined user namespace keeps our host ids, which it may not map:
    // take its root, as after a clone into a new one.
    namespaces::join_all(&plan.joins, become_ns_root)?;
    if plan.child_unshares_user {
        namespaces::unshare(CloneFlags::CLONE_NEWUSER)?;
        if maps_dumpable {
            maps_while_dumpable(chan, Msg::MapsDone)?;
        } else {
            chan.send(&Msg::MapsPlease)?;
            chan.expect(Msg::MapsDone)?;
        }
        become_ns_root()?;
    }
    namespaces::unshare(plan.unshare_flags)?;
    if plan.needs_second_fork {
        namespaces::unshare(CloneFlags::CLONE_NEWPID)?;
        second_fork(chan)?;
    }
    Ok(())
}

/// Asks for our id maps and waits for `reply`, dumpable in between: only
/// then may an unprivileged runtime (or newuidmap on its behalf) open our
/// `uid_map`. Nothing of the container runs yet, and no process but the
/// caller's own could attach meanwhile.
fn maps_while_dumpable(chan: &Channel, reply: Msg) -> Step {
    nix::sys::prctl::set_dumpable(true).map_err(|e| InitError::value("prctl", "PR_SET_DUMPABLE 1", e))?;
    chan.send(&Msg::MapsPlease)?;
    chan.expect(reply)?;
    nix::sys::prctl::set_dumpable(false).map_err(|e| InitError::value("prctl", "PR_SET_DUMPABLE 0", e))
}

/// Forks the real init into the pid namespace just made. The intermediate
/// reports its pid and leaves; CLONE_PARENT makes the runtime its parent, so
/// PDEATHSIG and reaping work as for a direct child. A pipe holds the new
/// init back until the runtime has its pid.
pub(super) fn second_fork(chan: &Channel) -> Step {
    let (rd, wr) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| InitError::sys("pipe2", e))?;
    match sys::clone_fork(libc::CLONE_PARENT as u64, None)? {
        Forked::Parent(pid) => {
            let _ = chan.send(&Msg::Pid(pid.as_raw()));
            drop(wr);
            sys::exit_child(0)
        }
        Forked::Child => {
            drop(wr);
            let mut b = [0u8; 1];
            let _ = nix::unistd::read(rd.as_raw_fd(), &mut b);
            finalize::die_with_parent(Some(Signal::SIGKILL))
        }
    }
}

/// The State JSON a hook (or the seccomp agent) gets about this container.
pub(crate) fn hook_state(cfg: &InitConfig, pid: i32, status: &str) -> Vec<u8> {
    hooks::State {
        oci_version: cfg.spec.version(),
        id: cfg.id,
        status,
        pid,
        bundle: cfg.bundle,
        annotations: cfg.spec.annotations().as_ref(),
    }
    .to_json()
}

/// Blocks until `start` connects, then runs startContainer hooks and execs.
/// A failure is written back on the connection (a [`StartReply`], errno and
/// all) so `start` can report it; on success the connection closes with
/// execve (it is close-on-exec).
/// A resident init serves requests instead, answering the refusals of the
/// filter's listener `refusals` when it records them.
fn wait_for_start_and_exec(
    cfg: &InitConfig,
    host_pid: i32,
    program: &finalize::Program,
    refusals: Option<OwnedFd>,
) -> Step {
    // Only a `start` that says so releases us: a connection that closes
    // without the byte (a start killed half-way) is not a start.
    let conn = loop {
        let conn = sys::accept(cfg.start_listener, false).map_err(|e| InitError::from(e).field("start socket"))?;
        let mut b = [0u8; 1];
        if matches!(nix::unistd::read(conn.as_raw_fd(), &mut b), Ok(1)) && b[0] == b's' {
            break conn;
        }
    };
    // Nobody else may start us, and no hook needs the listener.
    let _ = nix::unistd::close(cfg.start_listener.as_raw_fd());
    let reply = |r: StartReply, code: i32| -> Step {
        let _ = nix::unistd::write(&conn, &serde_json::to_vec(&r).unwrap_or_default());
        sys::exit_child(code)
    };
    let fail = |e: InitError| reply(StartReply::Failed(e), 127);
    let st = hook_state(cfg, host_pid, "created");
    if let Err(e) = hooks::run_all_in_container(cfg.spec, Kind::StartContainer, &st, Some(program.env())) {
        // As runc's init: the error on the container's stderr, where its
        // log collector finds it, and exit status 1.
        let _ = nix::unistd::write(std::io::stderr(), format!("{e}\n").as_bytes());
        return reply(StartReply::HookFailed(e), 1);
    }
    if let Some(agent) = cfg.agent_listener {
        // Started: `start` reads the end of the connection as success, as
        // it would read an execve.
        drop(conn);
        return Err(super::resident::serve(agent, &cfg.process, refusals));
    }
    fail(finalize::exec(&cfg.process, program))
}
