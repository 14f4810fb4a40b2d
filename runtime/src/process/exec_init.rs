//! An `exec`'d process: joins a running container and becomes a new
//! program in it (runc's "setns init").
//!
//! Runs in the cloned child. The runtime has already put it into the
//! container's pid and time namespaces (they take effect at clone) and
//! opened every other namespace; the child joins them (`join_all`), waits
//! while the runtime adds it to the container's cgroup, then goes down the
//! same path to the program as init ([`super::finalize`]). Success is seen by
//! the runtime as the sync channel closing at execve (it is close-on-exec); a
//! failure is sent on it.

use std::os::fd::AsRawFd;
use std::path::PathBuf;

use nix::sys::signal::Signal;

use super::finalize::{self, ProcessConfig, Step};
use super::sync::{Channel, Msg};
use crate::error::InitError;
use crate::namespaces::Join;
use crate::sys;

/// Everything the exec'd process needs, prepared before cloning.
pub(crate) struct ExecConfig {
    pub joins: Vec<Join>,
    /// The pid (and time) namespace, when the runtime may not join it
    /// itself (a rootless runtime has no privilege over the container's
    /// user namespace's pid namespace): joined after the user namespace,
    /// then a second fork puts the program in it, as for init.
    pub late_joins: Vec<Join>,
    /// fds to move to 0, 1 and 2 first.
    pub stdio: Option<[std::os::fd::RawFd; 3]>,
    /// v1 `tasks` files (and the hybrid cgroup2 `cgroup.procs` with the
    /// cgroup's path) to move ourselves into the container's cgroup.
    pub cgroup_tasks: Vec<PathBuf>,
    pub cgroup_unified: Option<(PathBuf, String)>,
    /// The process to run.
    pub process: ProcessConfig,
    /// The container's root (`/proc/<init>/root`) to chroot into, when the
    /// container has no mount namespace of its own to join.
    pub root: Option<std::os::fd::OwnedFd>,
}

/// Child entry point. Never returns.
pub(crate) fn main(cfg: &ExecConfig, chan: &Channel) -> ! {
    let err = match setup(cfg, chan) {
        Ok(()) => InitError::other("exec", "returned without running the program"),
        Err(e) => e,
    };
    let _ = chan.send(&Msg::Error(err));
    sys::exit_child(255)
}

fn setup(cfg: &ExecConfig, chan: &Channel) -> Step {
    finalize::begin(cfg.stdio)?;
    finalize::die_with_parent(Some(Signal::SIGKILL))?;
    // With the host's credentials still: a user namespace joined next
    // would not be allowed to write the host's cgroup files.
    finalize::join_own_cgroup(&cfg.cgroup_tasks, cfg.cgroup_unified.as_ref())?;
    // Joining a user namespace keeps the host's ids, which it does not map:
    // files this process makes (a pty slave) would have no owner inside, and
    // it could not chown them to the process's user.
    crate::namespaces::join_all(&cfg.joins, super::init::become_ns_root)?;
    for j in &cfg.late_joins {
        crate::namespaces::setns(j)?;
    }
    if let Some(root) = &cfg.root {
        nix::unistd::fchdir(root.as_raw_fd()).map_err(|e| InitError::path("chdir", "the container's root", e))?;
        nix::unistd::chroot(".").map_err(|e| InitError::path("chroot", "the container's root", e))?;
    }
    // Nothing of the host may stay open once inside: see init's close_host_fds.
    let mut keep = vec![chan.as_raw_fd()];
    keep.extend(cfg.process.console);
    sys::close_fds_except(3 + cfg.process.preserved_fds, &keep)?;
    chan.expect(Msg::Go)?;
    if !cfg.late_joins.is_empty() {
        super::init::second_fork(chan)?;
    }
    let (program, _) = finalize::prepare(&cfg.process, chan, false, false)?;
    // The program must outlive a detached `exec` (PDEATHSIG survives execve).
    finalize::die_with_parent(None)?;
    Err(finalize::exec(&cfg.process, &program))
}
