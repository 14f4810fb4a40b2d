//! The runtime's half of making init: clone it into its namespaces, serve
//! its requests (id maps, hooks), and hand back its pid once it is ready.
//!
//! Runs in the runtime process. See [`super::sync`] for the conversation.

use nix::sys::signal::{kill, Signal};
use nix::sys::wait::waitpid;
use nix::unistd::Pid;
use oci_spec::runtime::{LinuxNamespaceType, Spec};

use super::init::{self, InitConfig};
use super::sync::{self, Channel, Msg};
use crate::error::{InitError, Result, RuntimeError};
use crate::namespaces;
use crate::seccomp::refusals::RefusalListener;
use crate::sys::{self, Forked};

/// An init that reported Ready and waits for [`Launched::commit`].
pub(crate) struct Launched {
    pub pid: Pid,
    chan: Channel,
    /// The listener of a filter whose refusals the caller answers.
    refusals: Option<RefusalListener>,
}

impl Launched {
    /// Tells init the container is recorded; it then detaches from the
    /// runtime. Returns once init no longer dies with the runtime, with
    /// the listener of a filter whose refusals the caller answers.
    pub(crate) fn commit(self) -> Result<Option<RefusalListener>> {
        self.chan.send(&Msg::Committed)?;
        match self.chan.recv()? {
            Some(Msg::Detached) => Ok(self.refusals),
            None => Err(RuntimeError::Init(died(self.pid))),
            Some(Msg::Error(e)) => Err(RuntimeError::Init(e)),
            Some(m) => Err(RuntimeError::Init(sync::unexpected(&m, Some(&Msg::Detached)))),
        }
    }

    /// Kills a half-made init (and waits for it, when it is our child).
    pub(crate) fn abort(self) {
        kill_and_reap(self.pid);
    }
}

fn kill_and_reap(pid: Pid) {
    let _ = kill(pid, Signal::SIGKILL);
    let _ = waitpid(pid, None);
}

/// Callbacks into the lifecycle code while init is being set up.
pub(crate) trait Host {
    /// A cgroup2 directory to clone init straight into (`CLONE_INTO_CGROUP`),
    /// already limited; `None` when the host or driver can't.
    fn cgroup_fd(&mut self) -> Result<Option<std::os::fd::OwnedFd>> {
        Ok(None)
    }
    /// Put the new process into the container's cgroup before it runs.
    fn join_cgroup(&mut self, pid: Pid) -> Result<()>;
    /// Run prestart and createRuntime hooks.
    fn runtime_hooks(&mut self, pid: Pid) -> Result<()>;
}

/// Clones init and drives it to Ready.
pub(crate) fn launch(cfg: &InitConfig, host: &mut dyn Host) -> Result<Launched> {
    let (ours, theirs) = sync::pair()?;
    let cgroup = host.cgroup_fd()?;
    // CVE-2019-5736: init runs the runtime's binary inside the container
    // until its execve; it is born non-dumpable, so no process there ever
    // sees it dumpable (/proc/<pid>/exe, /proc/<pid>/mem) even for a moment.
    sys::set_non_dumpable()?;
    let forked = clone_init(cfg.spec, cfg.plan, cgroup.as_ref().map(std::os::fd::AsRawFd::as_raw_fd))?;
    let child = match forked {
        Forked::Child => {
            drop(ours);
            init::main(cfg, &theirs)
        }
        Forked::Parent(pid) => pid,
    };
    drop(theirs);
    let mut init_pid = child;
    let result = release(cfg, child, &ours, host).and_then(|()| serve(cfg, child, &mut init_pid, &ours, host));
    match result {
        Ok(refusals) => Ok(Launched { pid: init_pid, chan: ours, refusals }),
        Err(e) => {
            kill_and_reap(init_pid);
            if init_pid != child {
                kill_and_reap(child);
            }
            Err(e)
        }
    }
}

/// Writes init's id maps, puts it in its cgroup, and lets it go on.
fn release(cfg: &InitConfig, child: Pid, ours: &Channel, host: &mut dyn Host) -> Result<()> {
    let plan = cfg.plan;
    if plan.clone_flags.contains(nix::sched::CloneFlags::CLONE_NEWUSER) {
        if cfg.maps_dumpable {
            // Init is dumpable until it has its maps (see idmap).
            match ours.recv()? {
                Some(Msg::MapsPlease) => {}
                Some(Msg::Error(e)) => return Err(RuntimeError::Init(e)),
                Some(m) => return Err(RuntimeError::Init(sync::unexpected(&m, Some(&Msg::MapsPlease)))),
                None => return Err(RuntimeError::Init(died(child))),
            }
        }
        crate::idmap::write(child, cfg.spec)?;
    }
    // The one place init joins its cgroup: before it runs any program
    // of the user's. On v1 the write to cgroup.procs can wait for an RCU
    // grace period; init meanwhile builds its mounts, and waits for
    // Joined only before its cgroup namespace. When init must fork once
    // more, the fork has to inherit the cgroup: join first.
    if plan.needs_second_fork {
        host.join_cgroup(child)?;
        ours.send(&Msg::Go)?;
    } else {
        ours.send(&Msg::Go)?;
        host.join_cgroup(child)?;
    }
    // Joined must not overtake the reply init waits for first.
    if !plan.child_unshares_user {
        ours.send(&Msg::Joined)?;
    }
    Ok(())
}

/// Answers init's requests until it is Ready; `init_pid` follows the real
/// init when an intermediate forked it. Returns the listener of a filter
/// whose refusals the caller answers.
fn serve(
    cfg: &InitConfig,
    child: Pid,
    init_pid: &mut Pid,
    ours: &Channel,
    host: &mut dyn Host,
) -> Result<Option<RefusalListener>> {
    let mut refusals = None;
    loop {
        match ours.recv()? {
            Some(Msg::MapsPlease) => {
                crate::idmap::write(child, cfg.spec)?;
                ours.send(&Msg::MapsDone)?;
                ours.send(&Msg::Joined)?;
            }
            Some(Msg::Pid(p)) => {
                // The intermediate is done once it has told us.
                let _ = waitpid(child, None);
                *init_pid = Pid::from_raw(p);
            }
            Some(Msg::HooksPlease) => {
                if let Err(e) = host.runtime_hooks(*init_pid) {
                    let _ = ours.send(&Msg::Error(InitError::msg(e.to_string())));
                    return Err(e);
                }
                ours.send(&Msg::HooksDone(init_pid.as_raw()))?;
            }
            Some(Msg::SeccompFd) => {
                let fd = ours.recv_fd()?;
                match cfg.process.seccomp.as_ref().and_then(crate::seccomp::Filter::refusal_errno) {
                    Some(errno) => refusals = Some(RefusalListener::new(fd, errno)),
                    None => seccomp_agent(cfg, *init_pid, &fd)?,
                }
                ours.send(&Msg::SeccompDone)?;
            }
            Some(Msg::Ready) => return Ok(refusals),
            Some(Msg::Error(e)) => return Err(RuntimeError::Init(e)),
            Some(m) => return Err(RuntimeError::Init(sync::unexpected(&m, None))),
            None => return Err(RuntimeError::Init(died(*init_pid))),
        }
    }
}

/// Hands init's seccomp notification fd to the agent at `listenerPath`,
/// with the state of the container being created.
fn seccomp_agent(cfg: &InitConfig, pid: Pid, fd: &std::os::fd::OwnedFd) -> Result<()> {
    let Some(listener) = cfg.process.seccomp.as_ref().and_then(|f| f.listener()) else {
        let why = "init sent a notification fd, but no listenerPath is configured";
        return Err(RuntimeError::Init(InitError::other("seccomp", why).field("linux.seccomp")));
    };
    let state = init::hook_state(cfg, pid.as_raw(), "creating");
    let payload = crate::seccomp::notify::process_state(listener, pid.as_raw(), &state)?;
    crate::seccomp::notify::send(listener, std::os::fd::AsFd::as_fd(fd), &payload)
}

/// Why init ended during set-up without a word.
fn died(pid: Pid) -> InitError {
    let why = match waitpid(pid, None) {
        Ok(nix::sys::wait::WaitStatus::Exited(_, c)) => format!("init exited with status {c} during set-up"),
        Ok(nix::sys::wait::WaitStatus::Signaled(_, s, _)) => format!("init was killed by {s} during set-up"),
        _ => "init exited during set-up".into(),
    };
    InitError::msg(why)
}

/// clone3 with the planned flags; the pid or time namespace joined (or, for
/// time with offsets, made) by the runtime only for the duration of the call.
fn clone_init(spec: &Spec, plan: &namespaces::Plan, cgroup: Option<std::os::fd::RawFd>) -> Result<Forked> {
    let mut restore = Vec::new();
    for j in &plan.parent_joins {
        restore.push(namespaces::Join { typ: j.typ, fd: namespaces::open_own(namespaces::proc_name(j.typ))? });
        namespaces::setns(j)?;
    }
    #[allow(clippy::cast_sign_loss, reason = "flag bits, none of them the sign bit")]
    let mut flags = plan.clone_flags.bits() as u64;
    if plan.is_new(LinuxNamespaceType::Time) {
        match spec.linux().as_ref().and_then(|l| l.time_offsets().as_ref()) {
            Some(offsets) => {
                restore.push(namespaces::Join { typ: LinuxNamespaceType::Time, fd: namespaces::open_own("time")? });
                namespaces::unshare(namespaces::flag(LinuxNamespaceType::Time))?;
                write_time_offsets(offsets)?;
            }
            None => flags |= libc::CLONE_NEWTIME as u64,
        }
    }
    let mut forked = sys::clone_fork(flags, cgroup);
    if forked.is_err() && cgroup.is_some() {
        // No CLONE_INTO_CGROUP here: Host::join_cgroup moves init instead.
        forked = sys::clone_fork(flags, None);
    }
    if let Ok(Forked::Child) = forked {
        return Ok(Forked::Child);
    }
    for j in &restore {
        namespaces::setns(j)?;
    }
    Ok(forked?)
}

fn write_time_offsets(offsets: &std::collections::HashMap<String, oci_spec::runtime::LinuxTimeOffset>) -> Result<()> {
    let mut text = String::new();
    for (clock, off) in offsets {
        text.push_str(&format!("{clock} {} {}\n", off.secs().unwrap_or(0), off.nanosecs().unwrap_or(0)));
    }
    std::fs::write("/proc/self/timens_offsets", text)
        .map_err(|e| RuntimeError::io("write linux.timeOffsets to", "/proc/self/timens_offsets", e))
}
