//! `create`: build the container and leave its init waiting for `start`.
//!
//! Returns only once init is fully set up and blocked just before execve;
//! then nothing of the runtime stays behind. Any failure undoes everything:
//! init is killed, and the state directory removed.

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use nix::unistd::Pid;
use oci_spec::runtime::{LinuxDevice, LinuxNamespaceType, LinuxResources};

use super::resident::ResidentRecord;
use super::{check_id, Container, Init, Runtime, Supervised};
use crate::cgroups::Cgroup;
use crate::error::{InitError, Result, RuntimeError};
use crate::hooks::{self, Kind};
use crate::namespaces::Plan;
use crate::process::init::InitConfig;
use crate::process::launch::{self, Host};
use crate::seccomp::refusals::RefusalListener;
use crate::spec::{self, Bundle};
use crate::state::{
    now_rfc3339, proc_start_time, write_atomic, Record, StateDir, AGENT_SOCKET, CONFIG_FILE, RESIDENT_FILE,
    START_SOCKET,
};

/// What `create` (and `run`) take besides the id.
#[derive(Debug, Default, Clone)]
pub struct CreateOptions {
    /// The bundle directory (config.json + rootfs).
    pub bundle: PathBuf,
    /// Where to write init's host pid (absolute).
    pub pid_file: Option<PathBuf>,
    /// `--console-socket`.
    pub console_socket: Option<PathBuf>,
    /// MS_MOVE + chroot instead of pivot_root.
    pub no_pivot: bool,
    /// Keep the caller's session keyring.
    pub no_new_keyring: bool,
    /// Extra fds, after the LISTEN_FDS ones, passed to the program.
    pub preserve_fds: u32,
    /// Socket-activation fds the caller got (LISTEN_FDS for our pid).
    pub listen_fds: u32,
    /// `--systemd-cgroup`: recorded so later commands behave the same.
    pub systemd_cgroup: bool,
    /// The caller may lack permission for cgroups (runc's `--rootless`):
    /// with no `cgroupsPath`, the container then runs without a cgroup of
    /// its own, and a limit is refused.
    pub rootless_cgroups: bool,
    /// The runtime returns while the container runs (create, run -d).
    pub detach: bool,
}

impl Runtime {
    /// Creates container `id` from `opts.bundle`.
    pub fn create(&self, id: &str, opts: &CreateOptions) -> Result<Container> {
        check_id(id)?;
        let bundle = spec::load(&opts.bundle)?;
        self.create_from(id, &bundle, opts, &Supervised::default(), None)
    }

    /// Creates container `id` from `bundle`, loaded by the caller with
    /// [`spec::load`] and maybe changed since (a config hardened before
    /// use), with what a supervisor adds (`how`); `opts.bundle` is not
    /// read.
    pub fn create_bundle(
        &self,
        id: &str,
        bundle: &Bundle,
        opts: &CreateOptions,
        how: &Supervised,
    ) -> Result<Container> {
        check_id(id)?;
        self.create_from(id, bundle, opts, how, None)
    }

    /// `create` from an already loaded bundle, with what a supervisor adds
    /// (`how`; none for runc's `create`), and the pty master sent to
    /// `console` (the runtime's own end for a foreground terminal) unless
    /// `--console-socket` names one. The caller has checked `id`.
    pub(crate) fn create_from(
        &self,
        id: &str,
        bundle: &Bundle,
        opts: &CreateOptions,
        how: &Supervised,
        console: Option<&std::os::fd::OwnedFd>,
    ) -> Result<Container> {
        crate::process::ensure_single_threaded()?;
        crate::exe::require_sealed(crate::exe::needed_for_create(&bundle.spec)?)?;
        let terminal = bundle.spec.process().as_ref().and_then(|p| p.terminal()).unwrap_or(false);
        super::check_terminal(terminal, opts.detach, opts.console_socket.is_some())?;
        if how.init == Init::Resident && (terminal || !opts.detach) {
            return Err(RuntimeError::InvalidArgument(
                "a resident init needs a detached container without a terminal".into(),
            ));
        }
        // Connect before anything exists: a bad socket path is the
        // caller's error and must leave nothing behind.
        let socket = super::connect_console_socket(opts.console_socket.as_deref())?;
        let console = socket.as_ref().or(console).map(std::os::fd::AsRawFd::as_raw_fd);
        let lock = StateDir::create(self.root(), id)?;
        match build(&lock, id, bundle, (opts, how), console) {
            Ok((rec, refusals)) => Ok(Container { lock, rec, refusals }),
            Err(e) => Err(match lock.remove() {
                Ok(()) => e,
                Err(c) => RuntimeError::WithCleanup { error: Box::new(e), cleanup: Box::new(c) },
            }),
        }
    }
}

struct CreateHost<'a> {
    id: &'a str,
    bundle: &'a Bundle,
    cgroup: Option<&'a Cgroup>,
    resources: &'a LinuxResources,
    devices: &'a [LinuxDevice],
    /// The hybrid cgroup2 directory to clone init into, when init joins the
    /// v1 hierarchies itself.
    clone_into: Option<std::os::fd::OwnedFd>,
}

impl Host for CreateHost<'_> {
    fn cgroup_fd(&mut self) -> Result<Option<std::os::fd::OwnedFd>> {
        if let Some(fd) = self.clone_into.take() {
            return Ok(Some(fd));
        }
        let Some(cg) = self.cgroup else { return Ok(None) };
        Ok(cg.prepare(self.resources, self.devices)?)
    }

    /// Makes the cgroup (if `cgroup_fd` did not), applies linux.resources
    /// and moves init in, while init still waits for Go.
    fn join_cgroup(&mut self, pid: Pid) -> Result<()> {
        let Some(cg) = self.cgroup else { return Ok(()) };
        Ok(cg.join(pid, self.resources, self.devices)?)
    }

    /// prestart hooks read the status `created` (crun, and the spec's
    /// validation suite, expect it; prestart is the old name of a hook
    /// that runs once the container is made), createRuntime `creating`.
    fn runtime_hooks(&mut self, pid: Pid) -> Result<()> {
        let state = |status| {
            hooks::State {
                oci_version: self.bundle.spec.version(),
                id: self.id,
                status,
                pid: pid.as_raw(),
                bundle: &self.bundle.dir,
                annotations: self.bundle.spec.annotations().as_ref(),
            }
            .to_json()
        };
        hooks::run_all(&self.bundle.spec, Kind::Prestart, &state("created"))?;
        hooks::run_all(&self.bundle.spec, Kind::CreateRuntime, &state("creating"))
    }
}

/// Makes the container: config snapshot, start socket, cgroup, init (set
/// up and waiting for `start`), and the record of it. On failure, undoes
/// what it made but the state directory (the caller removes that). With
/// the listener of a filter whose refusals the caller answers.
fn build(
    lock: &StateDir,
    id: &str,
    bundle: &Bundle,
    (opts, how): (&CreateOptions, &Supervised),
    console: Option<i32>,
) -> Result<(Record, Option<RefusalListener>)> {
    let created = now_rfc3339();
    let spec = &bundle.spec;
    let config = serde_json::to_vec(spec).map_err(|e| RuntimeError::InvalidSpec(format!("encode config: {e}")))?;
    write_atomic(&lock.path(CONFIG_FILE), &config, 0o600)?;
    let plan = Plan::new(spec)?;
    // No mount namespace (runc accepts that): init mounts in the host's,
    // under a bind of the rootfs, which is undone by `delete` or below.
    let host_root = HostRoot::before(&plan, &bundle.rootfs);
    let listener = bind_socket(lock, START_SOCKET)?;
    let agent = (how.init == Init::Resident).then(|| bind_socket(lock, AGENT_SOCKET)).transpose()?;
    let mut cfg = init_config(id, bundle, &plan, (opts, how), &listener)?;
    cfg.agent_listener = agent.as_ref();
    if let Some(f) = &cfg.process.seccomp {
        f.cache(spec, &lock.path(crate::state::SECCOMP_FILE));
    }
    cfg.process.console = console;
    cfg.lock_fd = lock.lock_fd();
    let linux = spec.linux().as_ref();
    let resources = linux.and_then(|l| l.resources().clone()).unwrap_or_default();
    let devices = linux.and_then(|l| l.devices().clone()).unwrap_or_default();
    let cgroups_path = linux.and_then(|l| l.cgroups_path().as_ref()).map(|p| p.to_string_lossy().into_owned());
    let cgroup = if opts.rootless_cgroups && !opts.systemd_cgroup {
        Cgroup::for_rootless_create(cgroups_path.as_deref(), id, &resources)?
    } else {
        Some(Cgroup::for_create(cgroups_path.as_deref(), id, opts.systemd_cgroup, Some(&resources))?)
    };
    let cgroup = match (cgroup, &how.cgroup_v1_controllers) {
        (Some(cg), Some(only)) => {
            let cg = cg.keep_only(&crate::cgroups::normalise_v1_controllers(only)?);
            cg.check_only(&resources, &devices)?;
            Some(cg)
        }
        (cg, _) => cg,
    };
    // A failed create leaves no cgroup (init is already dead then), and no
    // mount on the host, behind.
    let undo_cgroup = |e: RuntimeError| {
        if let Some(h) = &host_root {
            h.undo();
        }
        match cgroup.as_ref().map_or(Ok(()), Cgroup::destroy) {
            Ok(()) => e,
            Err(c) => RuntimeError::WithCleanup { error: Box::new(e), cleanup: Box::new(c.into()) },
        }
    };
    let clone_into = match &cgroup {
        Some(cg) => self_join(cg, &resources, &devices, &mut cfg).map_err(undo_cgroup)?,
        None => None,
    };
    let mut host =
        CreateHost { id, bundle, cgroup: cgroup.as_ref(), resources: &resources, devices: &devices, clone_into };
    let launched = launch::launch(&cfg, &mut host).map_err(undo_cgroup)?;
    let host_root_mount = host_root.as_ref().and_then(HostRoot::made);
    match record(lock, &cfg, opts, cgroup.as_ref(), launched.pid, created, host_root_mount) {
        Ok(rec) => {
            let refusals = launched.commit().map_err(undo_cgroup)?;
            Ok((rec, refusals))
        }
        Err(e) => {
            launched.abort();
            if let Some(p) = &opts.pid_file {
                let _ = std::fs::remove_file(p);
            }
            Err(undo_cgroup(e))
        }
    }
}

/// The rootfs of a container without a mount namespace of its own, as the
/// host's mount table had it before init ran.
struct HostRoot {
    path: PathBuf,
    before: Option<u64>,
}

impl HostRoot {
    fn before(plan: &Plan, rootfs: &Path) -> Option<HostRoot> {
        if plan.own_mount_ns() {
            return None;
        }
        let path = std::fs::canonicalize(rootfs).unwrap_or_else(|_| rootfs.to_path_buf());
        let before = crate::rootfs::top_mount_id(&path);
        Some(HostRoot { path, before })
    }

    /// The bind init made at the rootfs, if it made one.
    fn made(&self) -> Option<(PathBuf, u64)> {
        let now = crate::rootfs::top_mount_id(&self.path)?;
        (Some(now) != self.before).then(|| (self.path.clone(), now))
    }

    fn undo(&self) {
        if let Some((path, id)) = self.made() {
            let _ = crate::rootfs::detach_host_root(&path, id);
        }
    }
}

/// On v1, init moves itself into its cgroup (cheaper: see
/// `Cgroup::prepare_self_join`). It does so first thing, still with the
/// host's root uid even when it was cloned into a new user namespace, so
/// the host's files let it. Returns the hybrid cgroup2 directory to clone
/// init into, when there is one.
fn self_join(
    cgroup: &Cgroup,
    resources: &LinuxResources,
    devices: &[LinuxDevice],
    cfg: &mut InitConfig,
) -> Result<Option<OwnedFd>> {
    let self_join = cgroup.prepare_self_join(resources, devices)?;
    cfg.cgroup_hierarchies = cgroup.hierarchies().to_vec();
    let Some(sj) = self_join else { return Ok(None) };
    cfg.cgroup_tasks = sj.tasks;
    Ok(sj.unified.map(|(fd, procs)| {
        cfg.cgroup_unified = Some((procs, cgroup.unified_path().to_string()));
        fd
    }))
}

/// Writes the container's record (and `--pid-file`) for a ready init.
fn record(
    lock: &StateDir,
    cfg: &InitConfig,
    opts: &CreateOptions,
    cgroup: Option<&Cgroup>,
    pid: Pid,
    created: String,
    host_root_mount: Option<(PathBuf, u64)>,
) -> Result<Record> {
    let start_time = proc_start_time(pid.as_raw())
        .map(|(t, _)| t)
        .ok_or_else(|| RuntimeError::Init(InitError::msg("init exited right after set-up")))?;
    let rec = Record {
        id: cfg.id.to_string(),
        bundle: cfg.bundle.to_path_buf(),
        rootfs: cfg.rootfs.to_path_buf(),
        pid: pid.as_raw(),
        start_time,
        created,
        annotations: cfg.spec.annotations().clone().unwrap_or_default(),
        systemd_cgroup: opts.systemd_cgroup,
        own_pid_ns: cfg.plan.is_new(LinuxNamespaceType::Pid),
        cgroup_path: cgroup.map(|c| c.recorded().to_string()),
        cgroup_paths: cgroup.map(|c| c.per_hierarchy().clone()).unwrap_or_default(),
        cgroup_controllers: cgroup.and_then(Cgroup::kept_to).cloned(),
        // A resident init never execs: its start socket, gone once it is
        // started, is all that tells created from running.
        init_exe: if cfg.agent_listener.is_some() { None } else { crate::state::proc_exe(pid.as_raw()) },
        ptrace_possible: crate::exe::could_ptrace_runtime(&cfg.process.caps, cfg.plan.other_user_ns()),
        host_root_mount,
    };
    lock.save(&rec)?;
    if cfg.agent_listener.is_some() {
        let resident = ResidentRecord { leaves: cgroup.map(Cgroup::leaf_parent) };
        let bytes = serde_json::to_vec(&resident)
            .map_err(|e| RuntimeError::InvalidSpec(format!("encode the resident init's record: {e}")))?;
        write_atomic(&lock.path(RESIDENT_FILE), &bytes, 0o600)?;
    }
    if let Some(p) = &opts.pid_file {
        write_atomic(p, pid.as_raw().to_string().as_bytes(), 0o644)?;
    }
    Ok(rec)
}

/// Binds socket `name` (start or agent) of the state directory.
fn bind_socket(lock: &StateDir, name: &str) -> Result<OwnedFd> {
    // A connection starts the container, or runs a program in it: only
    // our own user may make one, whatever umask the caller has (the state
    // dir is 0711).
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
    let bound = crate::state::via_socket(&lock.dir, name, |p| UnixListener::bind(p));
    nix::sys::stat::umask(old);
    let l = bound.map_err(|e| RuntimeError::io("bind socket", lock.path(name), e))?;
    Ok(l.into())
}

fn init_config<'a>(
    id: &'a str,
    b: &'a Bundle,
    plan: &'a Plan,
    (opts, how): (&CreateOptions, &Supervised),
    listener: &'a OwnedFd,
) -> Result<InitConfig<'a>> {
    let spec = &b.spec;
    let process = spec.process().as_ref().ok_or_else(|| RuntimeError::InvalidSpec("process is not set".into()))?;
    let mut p = super::process_config(process, opts.listen_fds + opts.preserve_fds)?;
    p.umask = Some(process.user().umask().unwrap_or(0o022));
    if opts.listen_fds > 0 {
        p.env.retain(|e| !e.starts_with("LISTEN_FDS=") && !e.starts_with("LISTEN_PID="));
        p.env.push(format!("LISTEN_FDS={}", opts.listen_fds));
        p.env.push("LISTEN_PID=1".into());
    }
    p.seccomp = match &how.seccomp_cache {
        Some(dir) => crate::seccomp::Filter::from_shared_cache(spec, dir)?,
        None => crate::seccomp::Filter::from_spec(spec)?,
    };
    if let (true, Some(f)) = (how.record_refusals, p.seccomp.as_mut()) {
        f.record_refusals()?;
    }
    p.personality = crate::personality::from_spec(spec);
    p.mempolicy = crate::mempolicy::from_spec(spec)?;
    let wants_hooks = [Kind::Prestart, Kind::CreateRuntime, Kind::CreateContainer, Kind::StartContainer]
        .iter()
        .any(|k| !hooks::list(spec, *k).is_empty());
    Ok(InitConfig {
        id,
        bundle: &b.dir,
        rootfs: &b.rootfs,
        spec,
        plan,
        process: p,
        no_pivot: opts.no_pivot,
        no_new_keyring: opts.no_new_keyring,
        oom_score_adj: process.oom_score_adj(),
        wants_hooks,
        start_listener: listener,
        agent_listener: None,
        stdio: how.stdio,
        die_with_runtime: how.die_with_runtime,
        loopback: how.loopback,
        lock_fd: None,
        cgroup_tasks: Vec::new(),
        cgroup_unified: None,
        cgroup_hierarchies: Vec::new(),
        maps_dumpable: crate::idmap::needs_dumpable_child(),
        runtime_in_user_ns: crate::idmap::in_user_namespace(),
        bind_sources: crate::rootfs::sources::detached(
            spec,
            &b.dir,
            plan,
            plan.other_user_ns() && !crate::idmap::needs_dumpable_child(),
        )?,
    })
}
