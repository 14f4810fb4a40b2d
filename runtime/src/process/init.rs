//! The container's init: everything between `clone3` and `execve`.
//!
//! Runs in the cloned child (and, when a late pid namespace needs it, in its
//! own child). The runtime prepared every input in [`InitConfig`] before
//! cloning, so this is a linear script of kernel calls. It reports the first
//! failure to the runtime as one message naming the step, and never returns
//! into the runtime's code: it ends in `execve` or `_exit`.
//!
//! Order (runtime-spec "Lifecycle", runc's standard init):
//!  1. a session of its own, stdio; wait for the runtime's Go (maps
//!     written, cgroup joined)
//!  2. namespaces: join, unshare, maybe fork once more for a late pid ns;
//!     then close every fd of the runtime's it no longer needs
//!  3. hostname, domainname, session keyring, oom_score_adj
//!  4. rootfs: propagation, mounts in order, /dev
//!  5. prestart + createRuntime hooks (in the runtime), createContainer hooks
//!  6. sysctl, readonlyPaths, maskedPaths, pivot_root, read-only root
//!  7. the path every container process shares with `exec`
//!     ([`super::finalize`]): terminal, rlimits, cwd, LSM labels, seccomp,
//!     user and capabilities, no_new_privs, `args[0]`; Ready
//!  8. wait on start.sock; startContainer hooks; execve

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::sched::CloneFlags;
use nix::sys::signal::Signal;
use nix::unistd::{Gid, Uid};
use oci_spec::runtime::{LinuxNamespaceType, Spec};

use super::finalize::ProcessConfig;
use super::sync::{Channel, Msg};
use crate::namespaces::{self, Plan};
use crate::sys::{self, Forked};
use crate::{hooks, rootfs, user};

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
}

/// Child entry point. Never returns.
pub(crate) fn main(cfg: &InitConfig, chan: &Channel) -> ! {
    // setup only comes back on failure: success ends in execve.
    let err = match setup(cfg, chan) {
        Ok(()) => "init returned without exec".to_string(),
        Err(e) => e,
    };
    let _ = chan.send(&Msg::Error(err));
    sys::exit_child(1)
}

pub(crate) type Step = Result<(), String>;

fn setup(cfg: &InitConfig, chan: &Channel) -> Step {
    if let Some(fd) = cfg.lock_fd {
        let _ = nix::unistd::close(fd);
    }
    super::finalize::begin(cfg.stdio)?;
    // If the runtime dies before the container is committed, so do we.
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(|e| format!("prctl(PR_SET_PDEATHSIG): {e}"))?;
    expect(chan, Msg::Go)?;
    join_own_cgroup(&cfg.cgroup_tasks, cfg.cgroup_unified.as_ref())?;
    let plan = cfg.plan;
    if plan.clone_flags.contains(CloneFlags::CLONE_NEWUSER) {
        become_ns_root()?;
    }
    enter_namespaces(plan, chan)?;
    close_host_fds(cfg, chan)?;

    if plan.is_new(LinuxNamespaceType::Network) && cfg.loopback {
        sys::loopback_up().map_err(|e| e.to_string())?;
    }
    if plan.is_new(LinuxNamespaceType::Uts) {
        if let Some(h) = cfg.spec.hostname().as_deref() {
            nix::unistd::sethostname(h).map_err(|e| format!("sethostname {h:?}: {e}"))?;
        }
        if let Some(d) = cfg.spec.domainname().as_deref() {
            sys::setdomainname(d).map_err(|e| e.to_string())?;
        }
    }
    if !cfg.no_new_keyring {
        match sys::join_session_keyring(&format!("_ses.{}", cfg.id)) {
            Err(e) if e.errno == nix::errno::Errno::ENOSYS => {}
            r => r.map_err(|e| e.to_string())?,
        }
    }
    if let Some(adj) = cfg.oom_score_adj {
        std::fs::write("/proc/self/oom_score_adj", adj.to_string())
            .map_err(|e| format!("process.oomScoreAdj: write {adj} to /proc/self/oom_score_adj: {e}"))?;
    }
    // Device nodes and created directories take their modes literally.
    nix::sys::stat::umask(nix::sys::stat::Mode::empty());

    let opts = rootfs::Options {
        spec: cfg.spec,
        rootfs: cfg.rootfs,
        bundle: cfg.bundle,
        in_user_ns: plan.user_ns(),
        cgroup_ns: plan.is_new(LinuxNamespaceType::Cgroup),
        cgroup_hierarchies: &cfg.cgroup_hierarchies,
    };
    let mut joined = false;
    let mut in_cgroup = || -> Step {
        if !joined {
            expect(chan, Msg::Joined)?;
            if plan.is_new(LinuxNamespaceType::Cgroup) {
                namespaces::unshare(CloneFlags::CLONE_NEWCGROUP).map_err(|e| e.to_string())?;
            }
            joined = true;
        }
        Ok(())
    };
    let root = rootfs::prepare(&opts, &mut in_cgroup)?;

    let mut host_pid = 0;
    if cfg.wants_hooks {
        chan.send(&Msg::HooksPlease).map_err(|e| e.to_string())?;
        match chan.recv().map_err(|e| e.to_string())? {
            Some(Msg::HooksDone(pid)) => host_pid = pid,
            Some(Msg::Error(e)) => return Err(e),
            other => return Err(format!("unexpected message from runtime: {other:?}")),
        }
        hooks::run_all(cfg.spec, hooks::Kind::CreateContainer, &state_json(cfg, host_pid, "created"))
            .map_err(|e| e.to_string())?;
    }

    rootfs::apply_sysctl(&root, cfg.spec)?;
    rootfs::protect_paths(&root, cfg.spec)?;
    root.mkdir_all(&cfg.process.cwd, 0o755).map_err(|e| format!("process.cwd: {e}"))?;
    rootfs::enter(root, cfg.spec, cfg.no_pivot)?;
    let program = super::finalize::prepare(&cfg.process, chan, true)?;

    chan.send(&Msg::Ready).map_err(|e| e.to_string())?;
    expect(chan, Msg::Committed)?;
    // From here the container outlives the runtime (unless asked not to).
    if !cfg.die_with_runtime {
        nix::sys::prctl::set_pdeathsig(None).map_err(|e| format!("prctl(PR_SET_PDEATHSIG): {e}"))?;
    }
    chan.send(&Msg::Detached).map_err(|e| e.to_string())?;
    wait_for_start_and_exec(cfg, host_pid, &program)
}

pub(crate) fn expect(chan: &Channel, want: Msg) -> Step {
    match chan.recv().map_err(|e| e.to_string())? {
        Some(m) if m == want => Ok(()),
        // The runtime is gone (killed, or it gave up): nothing to report to.
        None => sys::exit_child(1),
        Some(Msg::Error(e)) => Err(e),
        Some(other) => Err(format!("unexpected message from runtime: {other:?} (wanted {want:?})")),
    }
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
    sys::close_fds_except(3 + cfg.process.preserved_fds, &keep).map_err(|e| e.to_string())
}

/// Moves this (single-threaded) process into its cgroup itself: see
/// `Cgroup::prepare_self_join`. Empty lists when the runtime does it.
pub(crate) fn join_own_cgroup(tasks: &[PathBuf], unified: Option<&(PathBuf, String)>) -> Step {
    for f in tasks {
        std::fs::write(f, "0").map_err(|e| format!("join cgroup: write 0 to {}: {e}", f.display()))?;
    }
    if let Some((procs, path)) = unified {
        let own = crate::sys::fs::read_proc("/proc/self/cgroup").unwrap_or_default();
        let placed = own.lines().any(|l| l.strip_prefix("0::").is_some_and(|p| p == path));
        if !placed {
            std::fs::write(procs, "0").map_err(|e| format!("join cgroup: write 0 to {}: {e}", procs.display()))?;
        }
    }
    Ok(())
}

/// In a user namespace made by clone: take uid/gid 0 of it, now that the
/// runtime has written the maps. Unmapped 0 is left alone (the config may
/// map only the user it runs as).
fn become_ns_root() -> Step {
    match nix::unistd::setresgid(Gid::from_raw(0), Gid::from_raw(0), Gid::from_raw(0)) {
        Ok(()) | Err(nix::errno::Errno::EINVAL) => {}
        Err(e) => return Err(format!("setresgid 0 in user namespace: {e}")),
    }
    match nix::unistd::setresuid(Uid::from_raw(0), Uid::from_raw(0), Uid::from_raw(0)) {
        Ok(()) | Err(nix::errno::Errno::EINVAL) => Ok(()),
        Err(e) => Err(format!("setresuid 0 in user namespace: {e}")),
    }
}

fn enter_namespaces(plan: &Plan, chan: &Channel) -> Step {
    for j in &plan.joins {
        namespaces::setns(j).map_err(|e| e.to_string())?;
    }
    if plan.child_unshares_user {
        namespaces::unshare(CloneFlags::CLONE_NEWUSER).map_err(|e| e.to_string())?;
        chan.send(&Msg::MapsPlease).map_err(|e| e.to_string())?;
        expect(chan, Msg::MapsDone)?;
        become_ns_root()?;
    }
    namespaces::unshare(plan.unshare_flags).map_err(|e| e.to_string())?;
    if plan.needs_second_fork {
        namespaces::unshare(CloneFlags::CLONE_NEWPID).map_err(|e| e.to_string())?;
        second_fork(chan)?;
    }
    Ok(())
}

/// Forks the real init into the pid namespace just made. The intermediate
/// reports its pid and leaves; CLONE_PARENT makes the runtime its parent, so
/// PDEATHSIG and reaping work as for a direct child. A pipe holds the new
/// init back until the runtime has its pid.
fn second_fork(chan: &Channel) -> Step {
    let (rd, wr) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| format!("pipe: {e}"))?;
    match sys::clone_fork(libc::CLONE_PARENT as u64, None).map_err(|e| e.to_string())? {
        Forked::Parent(pid) => {
            let _ = chan.send(&Msg::Pid(pid.as_raw()));
            drop(wr);
            sys::exit_child(0)
        }
        Forked::Child => {
            drop(wr);
            let mut b = [0u8; 1];
            let _ = nix::unistd::read(rd.as_raw_fd(), &mut b);
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(|e| format!("prctl(PR_SET_PDEATHSIG): {e}"))
        }
    }
}

/// CVE-2024-21626: a cwd reached through a leaked fd would be outside the
/// root, and getcwd then reports it as unreachable.
pub(crate) fn verify_cwd() -> Step {
    match nix::unistd::getcwd() {
        Ok(p) if p.is_absolute() => Ok(()),
        Ok(p) => Err(format!("process.cwd resolved outside the container root ({})", p.display())),
        Err(e) => Err(format!("process.cwd is not reachable inside the container: {e}")),
    }
}

/// The program's environment: the configured one, plus `HOME` from the
/// container's /etc/passwd when it is missing (as runc does).
pub(crate) fn with_home(env: &[String], uid: u32) -> Vec<String> {
    let mut env = env.to_vec();
    if !env.iter().any(|e| e.starts_with("HOME=")) {
        env.push(format!("HOME={}", user::home_of(uid)));
    }
    env
}

/// Resolves args[0] as execvp would, in the container, against the
/// process's own PATH; a missing program fails `create`, not `start`.
pub(crate) fn find_executable(arg0: &CString, env: &[String]) -> Result<CString, String> {
    let name = arg0.to_str().map_err(|_| "process.args[0] is not UTF-8".to_string())?;
    let runnable = |p: &Path| {
        nix::unistd::access(p, nix::unistd::AccessFlags::X_OK).is_ok() && p.metadata().is_ok_and(|m| m.is_file())
    };
    if name.contains('/') {
        return if runnable(Path::new(name)) {
            Ok(arg0.clone())
        } else {
            Err(format!("exec: {name:?}: no such file or directory, or not executable"))
        };
    }
    let path = env
        .iter()
        .rev()
        .find_map(|e| e.strip_prefix("PATH="))
        .unwrap_or("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
    for dir in path.split(':').filter(|d| !d.is_empty()) {
        let p = Path::new(dir).join(name);
        if runnable(&p) {
            return CString::new(p.into_os_string().into_encoded_bytes()).map_err(|e| e.to_string());
        }
    }
    Err(format!("exec: {name:?}: executable file not found in $PATH"))
}

/// CVE-2019-5736: refuse to start the runtime's own binary inside the
/// container, directly or as a script's interpreter (`#!/proc/self/exe`).
/// A container process could otherwise open it through /proc/<pid>/exe
/// and overwrite the host's copy once it exits. Compared by device and
/// inode, so no path spelling gets around it; a few stats, no copy.
pub(crate) fn refuse_runtime_binary(exe: &CString) -> Step {
    let own = nix::sys::stat::stat("/proc/self/exe").map_err(|e| format!("stat /proc/self/exe: {e}"))?;
    let mut path = PathBuf::from(std::ffi::OsStr::from_bytes(exe.as_bytes()));
    // The kernel follows at most 4 levels of interpreters (BINPRM_MAX_RECURSION).
    for _ in 0..5 {
        let Ok(st) = nix::sys::stat::stat(&path) else { return Ok(()) };
        if (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino) {
            return Err(format!("refusing to run the runtime's own binary ({}) inside the container", path.display()));
        }
        match interpreter(&path) {
            Some(next) => path = next,
            None => return Ok(()),
        }
    }
    Ok(())
}

/// The interpreter named by a `#!` line, if `path` starts with one.
fn interpreter(path: &Path) -> Option<PathBuf> {
    let head = rootfs::image::read_head(path, 256)?;
    let line = head.strip_prefix(b"#!")?;
    let line = line.split(|b| *b == b'\n').next()?;
    let word = line.split(|b| *b == b' ' || *b == b'\t').find(|w| !w.is_empty())?;
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(word)))
}

/// The State JSON a hook gets on stdin.
pub(crate) fn state_json(cfg: &InitConfig, pid: i32, status: &str) -> Vec<u8> {
    let st = crate::lifecycle::HookState {
        oci_version: cfg.spec.version(),
        id: cfg.id,
        status,
        pid,
        bundle: cfg.bundle,
        annotations: cfg.spec.annotations().as_ref(),
    };
    serde_json::to_vec(&st).unwrap_or_default()
}

/// Blocks until `start` connects, then runs startContainer hooks and execs.
/// A failure is written back on the connection so `start` can report it;
/// on success the connection closes with execve (it is close-on-exec).
fn wait_for_start_and_exec(cfg: &InitConfig, host_pid: i32, program: &super::finalize::Program) -> Step {
    // Only a `start` that says so releases us: a connection that closes
    // without the byte (a start killed half-way) is not a start.
    let conn = loop {
        let conn = sys::accept(cfg.start_listener).map_err(|e| format!("start socket: {e}"))?;
        let mut b = [0u8; 1];
        if matches!(nix::unistd::read(conn.as_raw_fd(), &mut b), Ok(1)) && b[0] == b's' {
            break conn;
        }
    };
    // Nobody else may start us, and no hook needs the listener.
    let _ = nix::unistd::close(cfg.start_listener.as_raw_fd());
    let fail = |msg: String| -> Step {
        let _ = nix::unistd::write(&conn, msg.as_bytes());
        sys::exit_child(127)
    };
    if let Err(e) = hooks::run_all(cfg.spec, hooks::Kind::StartContainer, &state_json(cfg, host_pid, "created")) {
        return fail(e.to_string());
    }
    fail(super::finalize::exec(&cfg.process, program))
}
