//! `create`: build the container and leave its init waiting for `start`.
//!
//! Returns only once init is fully set up and blocked just before execve;
//! then nothing of the runtime stays behind. Any failure undoes everything:
//! init is killed, and the state directory removed.

use std::ffi::CString;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use nix::unistd::Pid;
use oci_spec::runtime::{LinuxDevice, LinuxNamespaceType, LinuxResources};

use super::{check_id, Container, HookState, Runtime};
use crate::capabilities::Sets;
use crate::cgroups::Cgroup;
use crate::error::{Result, RuntimeError};
use crate::hooks::{self, Kind};
use crate::namespaces::Plan;
use crate::process::finalize::ProcessConfig;
use crate::process::init::InitConfig;
use crate::process::launch::{self, Host};
use crate::spec::{self, Bundle};
use crate::state::{now_rfc3339, proc_start_time, write_atomic, Record, StateDir, CONFIG_FILE, START_SOCKET};
use crate::user::Ids;

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
    /// The runtime returns while the container runs (create, run -d).
    pub detach: bool,
    /// fds to become init's stdin, stdout and stderr (default: ours).
    pub stdio: Option<[std::os::fd::RawFd; 3]>,
    /// The container is killed if the calling process dies, even after
    /// `create` returned (a supervisor that enforces limits from outside).
    pub die_with_runtime: bool,
    /// Bring `lo` up when the container gets a new network namespace
    /// (runc leaves it down): loopback-only networking with no other setup.
    pub loopback: bool,
}

impl Runtime {
    /// Creates container `id` from `opts.bundle`.
    pub fn create(&self, id: &str, opts: &CreateOptions) -> Result<Container> {
        check_id(id)?;
        let bundle = spec::load(&opts.bundle)?;
        self.create_from(id, &bundle, opts, None)
    }

    /// `create` from an already loaded bundle, with the pty master sent to
    /// `console` (the runtime's own end for a foreground terminal) unless
    /// `--console-socket` names one. The caller has checked `id`.
    pub(crate) fn create_from(
        &self,
        id: &str,
        bundle: &Bundle,
        opts: &CreateOptions,
        console: Option<&std::os::fd::OwnedFd>,
    ) -> Result<Container> {
        crate::process::ensure_single_threaded()?;
        crate::exe::require_sealed(crate::exe::needed_for_create(&bundle.spec)?)?;
        check_terminal(bundle, opts)?;
        // Connect before anything exists: a bad socket path is the
        // caller's error and must leave nothing behind.
        let socket = match &opts.console_socket {
            Some(p) => Some(std::os::fd::OwnedFd::from(
                std::os::unix::net::UnixStream::connect(p)
                    .map_err(|e| RuntimeError::io("connect to console socket", p, e))?,
            )),
            None => None,
        };
        let console = socket.as_ref().or(console).map(std::os::fd::AsRawFd::as_raw_fd);
        let lock = StateDir::create(self.root(), id)?;
        match build(&lock, id, bundle, opts, console) {
            Ok(rec) => Ok(Container { lock, rec }),
            Err(e) => Err(match lock.remove() {
                Ok(()) => e,
                Err(c) => RuntimeError::WithCleanup { error: Box::new(e), cleanup: Box::new(c) },
            }),
        }
    }
}

/// runc's rules for a terminal: the pty master goes to a console socket when
/// the runtime detaches, and a socket without a terminal makes no sense.
fn check_terminal(b: &Bundle, opts: &CreateOptions) -> Result<()> {
    let terminal = b.spec.process().as_ref().and_then(|p| p.terminal()).unwrap_or(false);
    match (terminal, opts.detach, opts.console_socket.is_some()) {
        (true, true, false) => Err(RuntimeError::InvalidArgument(
            "cannot allocate tty if tinyrun will detach without setting console socket".into(),
        )),
        (false, _, true) | (true, false, true) => Err(RuntimeError::InvalidArgument(
            "cannot use console socket if tinyrun will not detach or allocate tty".into(),
        )),
        _ => Ok(()),
    }
}

struct CreateHost<'a> {
    id: &'a str,
    bundle: &'a Bundle,
    cgroup: &'a Cgroup,
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
        Ok(self.cgroup.prepare(self.resources, self.devices)?)
    }

    /// Makes the cgroup (if `cgroup_fd` did not), applies linux.resources
    /// and moves init in, while init still waits for Go.
    fn join_cgroup(&mut self, pid: Pid) -> Result<()> {
        Ok(self.cgroup.join(pid, self.resources, self.devices)?)
    }

    fn runtime_hooks(&mut self, pid: Pid) -> Result<()> {
        let st = hook_state(self.id, self.bundle, pid.as_raw(), "creating");
        hooks::run_all(&self.bundle.spec, Kind::Prestart, &st)?;
        hooks::run_all(&self.bundle.spec, Kind::CreateRuntime, &st)
    }
}

pub(crate) fn hook_state(id: &str, b: &Bundle, pid: i32, status: &str) -> Vec<u8> {
    serde_json::to_vec(&HookState {
        oci_version: b.spec.version(),
        id,
        status,
        pid,
        bundle: &b.dir,
        annotations: b.spec.annotations().as_ref(),
    })
    .unwrap_or_default()
}

fn build(lock: &StateDir, id: &str, bundle: &Bundle, opts: &CreateOptions, console: Option<i32>) -> Result<Record> {
    let created = now_rfc3339();
    let spec = &bundle.spec;
    let config = serde_json::to_vec(spec).map_err(|e| RuntimeError::InvalidSpec(format!("encode config: {e}")))?;
    write_atomic(&lock.path(CONFIG_FILE), &config, 0o600)?;

    let plan = Plan::new(spec)?;
    if !plan.is_new(LinuxNamespaceType::Mount) && !plan.joins.iter().any(|j| j.typ == LinuxNamespaceType::Mount) {
        return Err(RuntimeError::InvalidSpec(
            "linux.namespaces: a mount namespace is required (mounts must not reach the host)".into(),
        ));
    }
    let listener = bind_start_socket(&lock.path(START_SOCKET), &lock.dir)?;
    let mut cfg = init_config(id, bundle, &plan, opts, &listener)?;
    cfg.process.console = console;
    cfg.lock_fd = lock.lock_fd();
    let linux = spec.linux().as_ref();
    let resources = linux.and_then(|l| l.resources().clone()).unwrap_or_default();
    let devices = linux.and_then(|l| l.devices().clone()).unwrap_or_default();
    let cgroups_path = linux.and_then(|l| l.cgroups_path().as_ref()).map(|p| p.to_string_lossy().into_owned());
    let cgroup = Cgroup::for_create(cgroups_path.as_deref(), id, opts.systemd_cgroup, Some(&resources))?;
    // A failed create leaves no cgroup behind (init is already dead then).
    let undo_cgroup = |e: RuntimeError| match cgroup.destroy() {
        Ok(()) => e,
        Err(c) => RuntimeError::WithCleanup { error: Box::new(e), cleanup: Box::new(c.into()) },
    };
    // On v1, init moves itself in (cheaper: see Cgroup::prepare_self_join).
    // It does so first thing, still with the host's root uid even when it
    // was cloned into a new user namespace, so the host's files let it.
    let self_join = cgroup.prepare_self_join(&resources, &devices).map_err(|e| undo_cgroup(e.into()))?;
    cfg.cgroup_hierarchies = cgroup.hierarchies().to_vec();
    let mut clone_into = None;
    if let Some(sj) = self_join {
        cfg.cgroup_tasks = sj.tasks;
        if let Some((fd, procs)) = sj.unified {
            cfg.cgroup_unified = Some((procs, cgroup.recorded().to_string()));
            clone_into = Some(fd);
        }
    }
    let mut host = CreateHost { id, bundle, cgroup: &cgroup, resources: &resources, devices: &devices, clone_into };
    let launched = launch::launch(&cfg, &mut host).map_err(undo_cgroup)?;
    let pid = launched.pid;
    let result = (|| -> Result<Record> {
        let start_time = proc_start_time(pid.as_raw())
            .map(|(t, _)| t)
            .ok_or_else(|| RuntimeError::Init("init exited right after set-up".into()))?;
        let rec = Record {
            id: id.to_string(),
            bundle: bundle.dir.clone(),
            rootfs: bundle.rootfs.clone(),
            pid: pid.as_raw(),
            start_time,
            created,
            annotations: spec.annotations().clone().unwrap_or_default(),
            systemd_cgroup: opts.systemd_cgroup,
            own_pid_ns: plan.is_new(LinuxNamespaceType::Pid),
            cgroup_path: Some(cgroup.recorded().to_string()),
            init_exe: crate::state::proc_exe(pid.as_raw()),
            ptrace_possible: crate::exe::could_ptrace_runtime(&cfg.process.caps, plan.other_user_ns()),
        };
        lock.save(&rec)?;
        if let Some(p) = &opts.pid_file {
            write_atomic(p, pid.as_raw().to_string().as_bytes(), 0o644)?;
        }
        Ok(rec)
    })();
    match result {
        Ok(rec) => {
            launched.commit().map_err(undo_cgroup)?;
            Ok(rec)
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

/// Binds `<state>/start.sock` through the directory's `/proc/self/fd` name,
/// so a long state root can't overflow `sun_path`.
fn bind_start_socket(path: &Path, dir: &Path) -> Result<std::os::fd::OwnedFd> {
    let dirfd = std::fs::File::open(dir).map_err(|e| RuntimeError::io("open", dir, e))?;
    let short = format!("{}/{START_SOCKET}", crate::sys::fs::fd_path(&dirfd));
    // A connection is what starts the container: only our own user may
    // make one, whatever umask the caller has (the state dir is 0711).
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
    let bound = UnixListener::bind(&short);
    nix::sys::stat::umask(old);
    let l = bound.map_err(|e| RuntimeError::io("bind start socket", path, e))?;
    Ok(l.into())
}

fn init_config<'a>(
    id: &'a str,
    b: &'a Bundle,
    plan: &'a Plan,
    opts: &CreateOptions,
    listener: &'a std::os::fd::OwnedFd,
) -> Result<InitConfig<'a>> {
    let spec = &b.spec;
    let process = spec.process().as_ref().ok_or_else(|| RuntimeError::InvalidSpec("process is not set".into()))?;
    let args = process
        .args()
        .iter()
        .flatten()
        .map(|a| CString::new(a.as_str()))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|_| RuntimeError::InvalidSpec("process.args: an argument contains a NUL byte".into()))?;
    let mut env = process.env().clone().unwrap_or_default();
    if opts.listen_fds > 0 {
        env.retain(|e| !e.starts_with("LISTEN_FDS=") && !e.starts_with("LISTEN_PID="));
        env.push(format!("LISTEN_FDS={}", opts.listen_fds));
        env.push("LISTEN_PID=1".into());
    }
    let user = process.user();
    let wants_hooks = [Kind::Prestart, Kind::CreateRuntime, Kind::CreateContainer, Kind::StartContainer]
        .iter()
        .any(|k| !hooks::list(spec, *k).is_empty());
    Ok(InitConfig {
        id,
        bundle: &b.dir,
        rootfs: &b.rootfs,
        spec,
        plan,
        process: ProcessConfig {
            caps: Sets::from_spec(process.capabilities().as_ref())?,
            rlimits: crate::rlimits::from_spec(process.rlimits().as_ref())?,
            ids: Ids {
                uid: user.uid(),
                gid: user.gid(),
                additional_gids: user.additional_gids().clone().unwrap_or_default(),
            },
            umask: Some(user.umask().unwrap_or(0o022)),
            args,
            env,
            cwd: process.cwd().clone(),
            no_new_privs: process.no_new_privileges().unwrap_or(false),
            preserved_fds: opts.listen_fds + opts.preserve_fds,
            console: None,
            console_size: process.console_size().as_ref().map(crate::tty::console_size),
            seccomp: crate::seccomp::Filter::from_spec(spec)?,
            apparmor: process.apparmor_profile().clone().filter(|s| !s.is_empty()),
            selinux: process.selinux_label().clone().filter(|s| !s.is_empty()),
        },
        no_pivot: opts.no_pivot,
        no_new_keyring: opts.no_new_keyring,
        oom_score_adj: process.oom_score_adj(),
        wants_hooks,
        start_listener: listener,
        stdio: opts.stdio,
        die_with_runtime: opts.die_with_runtime,
        loopback: opts.loopback,
        lock_fd: None,
        cgroup_tasks: Vec::new(),
        cgroup_unified: None,
        cgroup_hierarchies: Vec::new(),
    })
}
