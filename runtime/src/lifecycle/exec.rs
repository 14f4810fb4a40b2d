//! `exec`: run another program inside a created or running container.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::sys::signal::{SigSet, SigmaskHow};
use nix::unistd::Pid;
use oci_spec::runtime::{LinuxNamespaceType, Process};

use super::state::Status;
use super::Container;
use crate::capabilities::Sets;
use crate::error::{InitError, Result, RuntimeError, SysError};
use crate::hooks;
use crate::namespaces::{self, Join};
use crate::process::exec_init::{self, ExecConfig};
use crate::process::finalize::ProcessConfig;
use crate::process::sync::{self, Msg};
use crate::sys::{self, Forked};

/// How to run the new process.
#[derive(Debug, Clone)]
pub struct ExecOptions {
    /// The process to run (from `--process`, or the container's own with
    /// the command-line overrides applied: see [`Container::exec_process`]).
    pub process: Process,
    /// Return once the program runs instead of waiting for it.
    pub detach: bool,
    /// Where to write the new process's host pid.
    pub pid_file: Option<PathBuf>,
    /// Where to send the pty master (detached with a terminal).
    pub console_socket: Option<PathBuf>,
    /// Extra fds from 3 on passed to the program.
    pub preserve_fds: u32,
    /// `--cgroup [controller:]path`: a sub-cgroup of the container's.
    pub cgroups: Vec<String>,
    /// Allow exec into a paused container.
    pub ignore_paused: bool,
    /// fds to become the process's stdin, stdout and stderr (default: ours).
    pub stdio: Option<[std::os::fd::RawFd; 3]>,
}

/// Overrides from exec's command-line flags.
#[derive(Debug, Clone, Default)]
pub struct ProcessOverrides {
    /// The command and its arguments.
    pub args: Vec<String>,
    /// Extra `NAME=VALUE` variables.
    pub env: Vec<String>,
    /// Working directory.
    pub cwd: Option<PathBuf>,
    /// `uid[:gid]`.
    pub user: Option<(u32, Option<u32>)>,
    /// Additional group ids.
    pub additional_gids: Vec<u32>,
    /// Capabilities added to every set.
    pub caps: Vec<String>,
    /// Set no_new_privs.
    pub no_new_privs: bool,
    /// Allocate a terminal.
    pub tty: bool,
}

impl Container {
    /// The container's process with exec's overrides applied, as runc
    /// builds it when no `--process` file is given.
    pub fn exec_process(&self, o: &ProcessOverrides) -> Result<Process> {
        let spec = self.config()?;
        let mut p = spec.process().clone().ok_or_else(|| RuntimeError::InvalidSpec("process is not set".into()))?;
        if o.args.is_empty() {
            return Err(RuntimeError::InvalidArgument("exec needs a command, or --process".into()));
        }
        p.set_args(Some(o.args.clone()));
        // `--env` over the config's, by runc's rules (an entry per name).
        let env = crate::env::merge(p.env().as_deref().unwrap_or_default(), &o.env)
            .map_err(|e| RuntimeError::InvalidArgument(format!("--env: {e}")))?;
        p.set_env(Some(env));
        if let Some(cwd) = &o.cwd {
            p.set_cwd(cwd.clone());
        }
        if let Some((uid, gid)) = o.user {
            p.user_mut().set_uid(uid);
            if let Some(g) = gid {
                p.user_mut().set_gid(g);
            }
        }
        if !o.additional_gids.is_empty() {
            p.user_mut().set_additional_gids(Some(o.additional_gids.clone()));
        }
        if o.no_new_privs {
            p.set_no_new_privileges(Some(true));
        }
        p.set_terminal(Some(o.tty));
        if !o.caps.is_empty() {
            let mut c = p.capabilities().clone().unwrap_or_default();
            for name in &o.caps {
                let cap: oci_spec::runtime::Capability =
                    serde_json::from_value(serde_json::Value::String(name.clone()))
                        .map_err(|_| RuntimeError::InvalidArgument(format!("unknown capability {name:?}")))?;
                let add = |s: Option<oci_spec::runtime::Capabilities>| {
                    let mut s = s.unwrap_or_default();
                    s.insert(cap);
                    Some(s)
                };
                c.set_bounding(add(c.bounding().clone()));
                c.set_effective(add(c.effective().clone()));
                c.set_permitted(add(c.permitted().clone()));
                c.set_ambient(add(c.ambient().clone()));
            }
            p.set_capabilities(Some(c));
        }
        Ok(p)
    }

    /// Runs `opts.process` in the container. Detached, returns 0 once the
    /// program runs; otherwise its exit status (128+N for signal N). The
    /// container's lock is released once the process is in the container's
    /// cgroup, before waiting on it: a process exec'd into a paused
    /// container stays frozen until `resume`, which must get through, as
    /// must `kill` and `delete`.
    pub fn exec(self, opts: &ExecOptions) -> Result<i32> {
        self.exec_inner(opts).map(|(_, code)| code)
    }

    /// Starts `opts.process` in the container and returns its host pid
    /// without waiting (`opts.detach` is implied): it is the caller's child,
    /// so the caller can wait for it with a deadline of its own, and reaps it.
    pub fn exec_spawn(self, opts: &ExecOptions) -> Result<Pid> {
        self.exec_inner(&ExecOptions { detach: true, ..opts.clone() }).map(|(pid, _)| pid)
    }

    fn exec_inner(mut self, opts: &ExecOptions) -> Result<(Pid, i32)> {
        crate::process::ensure_single_threaded()?;
        self.check_can_exec(opts.ignore_paused)?;
        check_process(&opts.process)?;
        let affinity = crate::sched::exec_affinity(&opts.process)?;
        let spec = self.config()?;
        self.seal_if_needed(&spec, &opts.process)?;
        let terminal = opts.process.terminal().unwrap_or(false);
        super::check_terminal(terminal, opts.detach, opts.console_socket.is_some())?;
        let (joins, mut parent_joins) = self.namespace_fds(&spec)?;
        // Without privilege in the initial user namespace, the runtime may
        // not join the container's pid namespace (no CAP_SYS_ADMIN over its
        // user namespace) or not return to its own (owned by the initial
        // one): the child joins it, after the user namespace.
        let late_joins =
            if crate::idmap::needs_dumpable_child() { std::mem::take(&mut parent_joins) } else { Vec::new() };
        let socket = super::connect_console_socket(opts.console_socket.as_deref())?;
        // A foreground terminal: the process sends the pty master to us.
        let pair = if terminal && socket.is_none() { Some(crate::tty::console_pair()?) } else { None };
        let console = socket.as_ref().or(pair.as_ref().map(|p| &p.1)).map(|f| f.as_raw_fd());
        let process = self.exec_process_config(&spec, opts, console, pair.is_some())?;
        let root = self.init_root()?;
        let mut cfg = ExecConfig {
            joins,
            late_joins,
            stdio: opts.stdio,
            cgroup_tasks: Vec::new(),
            cgroup_unified: None,
            process,
            root,
        };
        let cgroup = self.cgroup()?;
        let joins_cgroup = JoinCgroup { cgroup: cgroup.as_ref(), sub_dirs: sub_dirs(cgroup.as_ref(), &opts.cgroups)? };
        // A process bound for sub-cgroups is moved there by us, after the
        // clone, not by itself into the container's own.
        let clone_into = if joins_cgroup.sub_dirs.is_some() { None } else { self.self_join(cgroup.as_ref(), &mut cfg) };

        let mut old = SigSet::empty();
        if !opts.detach {
            nix::sys::signal::sigprocmask(SigmaskHow::SIG_BLOCK, Some(&SigSet::all()), Some(&mut old))
                .map_err(|e| SysError::bare("sigprocmask", e))?;
        }
        let result =
            self.spawn(&cfg, &parent_joins, opts, clone_into.as_ref(), &joins_cgroup, &affinity).and_then(|pid| {
                drop(self);
                if opts.detach {
                    return Ok((pid, 0));
                }
                let master = match &pair {
                    Some((ours, _)) => Some(crate::tty::recv_fd(ours)?),
                    None => None,
                };
                Ok((pid, crate::process::foreground::wait(pid, master)))
            });
        if !opts.detach {
            let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
        }
        result
    }

    /// What the exec'd process is given, all computed here, before the
    /// clone: the child only applies it.
    fn exec_process_config(
        &self,
        spec: &oci_spec::runtime::Spec,
        opts: &ExecOptions,
        console: Option<std::os::fd::RawFd>,
        foreground_tty: bool,
    ) -> Result<ProcessConfig> {
        let mut process = super::process_config(&opts.process, opts.preserve_fds)?;
        process.console = console;
        // A foreground terminal takes our window size before the program
        // runs (the relay would copy it only afterwards).
        if foreground_tty && process.console_size.is_none() {
            process.console_size = crate::sys::get_winsize(0).ok().map(|w| (w.ws_row, w.ws_col));
        }
        process.seccomp = crate::seccomp::Filter::from_spec_cached(spec, &self.lock.path(crate::state::SECCOMP_FILE))?;
        process.personality = crate::personality::from_spec(spec);
        process.mempolicy = crate::mempolicy::from_spec(spec)?;
        Ok(process)
    }

    /// Without a mount namespace to join, the process goes into init's root.
    fn init_root(&self) -> Result<Option<OwnedFd>> {
        if self.rec.host_root_mount.is_none() {
            return Ok(None);
        }
        let root = sys::fs::open_path(
            Path::new(&format!("/proc/{}/root", self.rec.pid)),
            nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY,
        )?;
        Ok(Some(root))
    }

    /// An exec needs a live container, and a paused one only when asked.
    fn check_can_exec(&self, ignore_paused: bool) -> Result<()> {
        match self.status() {
            Status::Stopped => Err(RuntimeError::InvalidState("cannot exec in a stopped container".into())),
            Status::Paused if !ignore_paused => Err(RuntimeError::InvalidState(
                "cannot exec in a paused container (use --ignore-paused to override)".into(),
            )),
            _ => Ok(()),
        }
    }

    /// The new process moves itself into the container's cgroup (see
    /// `Cgroup::prepare_self_join`); the hybrid cgroup2 part by clone3,
    /// into the directory returned.
    fn self_join(&self, cgroup: Option<&crate::cgroups::Cgroup>, cfg: &mut ExecConfig) -> Option<OwnedFd> {
        let sj = cgroup.and_then(|cg| cg.existing_self_join())?;
        cfg.cgroup_tasks = sj.tasks;
        let (fd, procs) = sj.unified?;
        let path = self.rec.cgroup_paths.get("unified").or(self.rec.cgroup_path.as_ref());
        cfg.cgroup_unified = Some((procs, path.cloned().unwrap_or_default()));
        Some(fd)
    }

    /// CVE-2019-5736 (see `exe`): the exec'd process runs the runtime's
    /// binary in the container until its execve. It must be a sealed copy
    /// when the container has no pid namespace of its own, or when some
    /// process of it (this one included: recorded first) may hold
    /// CAP_SYS_PTRACE over the runtime.
    fn seal_if_needed(&mut self, spec: &oci_spec::runtime::Spec, p: &Process) -> Result<()> {
        let caps = Sets::from_spec(p.capabilities().as_ref())?;
        let ptrace = crate::exe::could_ptrace_runtime(&caps, crate::exe::other_user_ns(spec));
        crate::exe::require_sealed(!self.rec.own_pid_ns || self.rec.ptrace_possible || ptrace)?;
        if ptrace && !self.rec.ptrace_possible {
            self.rec.ptrace_possible = true;
            self.lock.save(&self.rec)?;
        }
        Ok(())
    }

    /// Opens the init's namespaces: (joined by the child, joined by us
    /// around the clone). A user namespace we are already in is skipped:
    /// setns into one's own user namespace is an error.
    fn namespace_fds(&self, spec: &oci_spec::runtime::Spec) -> Result<(Vec<Join>, Vec<Join>)> {
        let nss = spec.linux().as_ref().and_then(|l| l.namespaces().clone()).unwrap_or_default();
        let mut joins = Vec::new();
        let mut parent = Vec::new();
        for ns in nss {
            let name = namespaces::proc_name(ns.typ());
            let theirs = PathBuf::from(format!("/proc/{}/ns/{name}", self.rec.pid));
            if ns.typ() == LinuxNamespaceType::User && same_ns(&theirs, name) {
                continue;
            }
            let fd = sys::fs::open_path(&theirs, nix::fcntl::OFlag::O_RDONLY)?;
            let j = Join { typ: ns.typ(), fd };
            if matches!(ns.typ(), LinuxNamespaceType::Pid | LinuxNamespaceType::Time) {
                parent.push(j);
            } else {
                joins.push(j);
            }
        }
        // User first, mount last (it moves our root and cwd).
        joins.sort_by_key(|j| match j.typ {
            LinuxNamespaceType::User => 0,
            LinuxNamespaceType::Mount => 2,
            _ => 1,
        });
        Ok((joins, parent))
    }

    fn spawn(
        &mut self,
        cfg: &ExecConfig,
        parent_joins: &[Join],
        opts: &ExecOptions,
        clone_into: Option<&OwnedFd>,
        cgroup: &JoinCgroup,
        affinity: &crate::sched::ExecAffinity,
    ) -> Result<Pid> {
        let (ours, theirs) = sync::pair()?;
        // The process is cloned on the initial CPUs (it inherits ours for
        // the time being), and we go back to our own right after.
        let own_cpus = enter_initial_cpus(affinity)?;
        let mut restore = Vec::new();
        for j in parent_joins {
            restore.push(Join { typ: j.typ, fd: namespaces::open_own(namespaces::proc_name(j.typ))? });
            namespaces::setns(j)?;
        }
        // Born non-dumpable: see launch::launch (CVE-2019-5736).
        sys::set_non_dumpable()?;
        let mut forked = sys::clone_fork(0, clone_into.map(|f| f.as_raw_fd()));
        if forked.is_err() && clone_into.is_some() {
            // The child then joins that hierarchy by writing cgroup.procs.
            forked = sys::clone_fork(0, None);
        }
        if let Ok(Forked::Child) = forked {
            drop(ours);
            exec_init::main(cfg, &theirs);
        }
        if let Some(own) = &own_cpus {
            let _ = nix::sched::sched_setaffinity(Pid::from_raw(0), own);
        }
        for j in &restore {
            namespaces::setns(j)?;
        }
        let Forked::Parent(pid) = forked? else { unreachable_child() };
        drop(theirs);
        let mut pid = pid;
        let outcome = self.converse(cfg, &mut pid, &ours, cgroup, affinity);
        if let Err(e) = outcome {
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            let _ = nix::sys::wait::waitpid(pid, None);
            return Err(e);
        }
        if let Some(p) = &opts.pid_file {
            crate::state::write_atomic(p, pid.as_raw().to_string().as_bytes(), 0o644)?;
        }
        Ok(pid)
    }

    /// The parent's side once the process exists: into its cgroup and onto
    /// its final CPUs, then the go-ahead, then a seccomp fd to pass on,
    /// until the channel closes at its exec.
    fn converse(
        &mut self,
        cfg: &ExecConfig,
        pid: &mut Pid,
        ours: &sync::Channel,
        cgroup: &JoinCgroup,
        affinity: &crate::sched::ExecAffinity,
    ) -> Result<()> {
        let child = *pid;
        cgroup.join(child)?;
        if let Some(cpus) = &affinity.final_ {
            nix::sched::sched_setaffinity(child, cpus)
                .map_err(|e| RuntimeError::Sys(SysError::new("sched_setaffinity", format_args!("pid {child}"), e)))?;
        }
        // From here on the process's set-up is its own, and may be
        // frozen: nothing below changes the record.
        self.lock.unlock();
        ours.send(&Msg::Go)?;
        loop {
            match ours.recv()? {
                None => return Ok(()),
                // The intermediate of a late pid join: done once it told us.
                Some(Msg::Pid(p)) if *pid == child && !cfg.late_joins.is_empty() => {
                    let _ = nix::sys::wait::waitpid(child, None);
                    *pid = Pid::from_raw(p);
                }
                Some(Msg::SeccompFd) => {
                    let fd = ours.recv_fd()?;
                    self.seccomp_agent(cfg, *pid, &fd)?;
                    ours.send(&Msg::SeccompDone)?;
                }
                Some(Msg::Error(e)) => return Err(RuntimeError::Exec(e)),
                Some(m) => return Err(RuntimeError::Exec(sync::unexpected(&m, None))),
            }
        }
    }

    /// Hands an exec'd process's seccomp notification fd to the agent, with
    /// the container's state (as runc does for `exec`).
    fn seccomp_agent(&self, cfg: &ExecConfig, pid: Pid, fd: &OwnedFd) -> Result<()> {
        let Some(listener) = cfg.process.seccomp.as_ref().and_then(|f| f.listener()) else {
            let why = "the process sent a notification fd, but no listenerPath is configured";
            return Err(RuntimeError::Exec(InitError::other("seccomp", why).field("linux.seccomp")));
        };
        let status = self.status().to_string();
        let state = hooks::State {
            oci_version: oci_spec::runtime::VERSION,
            id: &self.rec.id,
            status: &status,
            pid: self.rec.pid,
            bundle: &self.rec.bundle,
            annotations: (!self.rec.annotations.is_empty()).then_some(&self.rec.annotations),
        }
        .to_json();
        let payload = crate::seccomp::notify::process_state(listener, pid.as_raw(), &state)?;
        crate::seccomp::notify::send(listener, std::os::fd::AsFd::as_fd(fd), &payload)
    }
}

/// Where an exec'd process goes: the container's cgroup, or the
/// sub-cgroups of it that `--cgroup` named.
struct JoinCgroup<'a> {
    cgroup: Option<&'a crate::cgroups::Cgroup>,
    sub_dirs: Option<Vec<PathBuf>>,
}

impl JoinCgroup<'_> {
    /// Puts the process there before it runs anything of its own (a
    /// no-op for the container's cgroup when the process moves itself).
    fn join(&self, pid: Pid) -> Result<()> {
        match (self.cgroup, &self.sub_dirs) {
            (Some(cg), Some(dirs)) => cg.add_to(pid, dirs)?,
            (Some(cg), None) => cg.add(pid)?,
            (None, _) => {}
        }
        Ok(())
    }
}

/// `--cgroup`'s sub-cgroups of `cgroup`, checked before anything is made.
fn sub_dirs(cgroup: Option<&crate::cgroups::Cgroup>, args: &[String]) -> Result<Option<Vec<PathBuf>>> {
    let sub = crate::cgroups::SubCgroups::parse(args)?;
    if sub.is_empty() {
        return Ok(None);
    }
    let cg = cgroup.ok_or_else(|| {
        RuntimeError::InvalidArgument("--cgroup: the container has no cgroup of its own to have sub-cgroups".into())
    })?;
    Ok(Some(cg.sub_dirs(&sub)?))
}

fn unreachable_child() -> ! {
    // clone_fork returned Child above and that branch never returns.
    sys::exit_child(255)
}

fn same_ns(theirs: &Path, name: &str) -> bool {
    let ours = format!("/proc/self/ns/{name}");
    matches!((std::fs::read_link(theirs), std::fs::read_link(ours)), (Ok(a), Ok(b)) if a == b)
}

/// runc's checks on an exec process: non-empty args, absolute cwd.
fn check_process(p: &Process) -> Result<()> {
    if p.args().as_ref().is_none_or(|a| a.is_empty()) {
        return Err(RuntimeError::InvalidArgument("process.args must not be empty".into()));
    }
    if !p.cwd().is_absolute() {
        return Err(RuntimeError::InvalidArgument(format!("process.cwd {:?} is not an absolute path", p.cwd())));
    }
    // Applied like init's (runc's exec runs under the container's profile
    // and label), so refused only where the host can't apply them.
    crate::lsm::check_process(p)
}

/// Reads a `--process` file: a full OCI Process object.
pub fn load_process(path: &Path) -> Result<Process> {
    let bytes = std::fs::read(path).map_err(|e| RuntimeError::io("read process file", path, e))?;
    crate::spec::parse_compat(&bytes, crate::spec::PROCESS_FLAGS)
        .map_err(|(e, _)| RuntimeError::InvalidSpec(format!("parse {}: {e}", path.display())))
}

/// Moves the runtime onto `process.execCPUAffinity.initial` for the clone,
/// returning the CPUs to go back to.
fn enter_initial_cpus(affinity: &crate::sched::ExecAffinity) -> Result<Option<nix::sched::CpuSet>> {
    let Some(initial) = &affinity.initial else { return Ok(None) };
    let own = nix::sched::sched_getaffinity(Pid::from_raw(0)).map_err(|e| SysError::bare("sched_getaffinity", e))?;
    nix::sched::sched_setaffinity(Pid::from_raw(0), initial)
        .map_err(|e| RuntimeError::Sys(SysError::bare("sched_setaffinity (process.execCPUAffinity.initial)", e)))?;
    Ok(Some(own))
}
