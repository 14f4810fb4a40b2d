//! `kill`: signal the container's init (or, with `all`, every process of
//! the container).

use nix::sys::signal::Signal;
use nix::unistd::Pid;

use super::state::Status;
use super::Container;
use crate::error::{Result, RuntimeError};

/// Parses a signal as runc does: a number, `KILL` or `SIGKILL`, any case.
pub fn parse_signal(s: &str) -> Result<i32> {
    if let Ok(n) = s.parse::<i32>() {
        return if (1..=64).contains(&n) {
            Ok(n)
        } else {
            Err(RuntimeError::InvalidArgument(format!("invalid signal {s:?}")))
        };
    }
    let up = s.to_ascii_uppercase();
    let name = if up.starts_with("SIG") { up } else { format!("SIG{up}") };
    name.parse::<Signal>().map(|s| s as i32).map_err(|_| RuntimeError::InvalidArgument(format!("unknown signal {s:?}")))
}

impl Container {
    /// Sends `sig`. Fails with `container not running` unless the container
    /// is created, running or paused; with `all`, the processes left in the
    /// cgroup of a stopped container are signalled too (containerd sweeps
    /// them up that way).
    pub fn kill(&self, sig: i32, all: bool) -> Result<()> {
        match self.status() {
            Status::Stopped if !all => Err(RuntimeError::NotRunning),
            _ => self.signal(sig, all),
        }
    }

    /// Signals init through a pidfd opened after checking its start time,
    /// so a recycled pid can't be hit. With `all`, or for SIGKILL when the
    /// container shares the host's pid namespace (killing init then would
    /// not take the rest with it), every process in the cgroup instead.
    pub(crate) fn signal(&self, sig: i32, all: bool) -> Result<()> {
        if all || (sig == libc::SIGKILL && !self.rec.own_pid_ns) {
            if let Some(cg) = self.cgroup()? {
                return Ok(cg.signal_all(sig)?);
            }
        }
        let pid = Pid::from_raw(self.rec.pid);
        let fd = crate::sys::pidfd_open(pid).map_err(|_| RuntimeError::NotRunning)?;
        if super::state::status_of(&self.lock, &self.rec) == Status::Stopped {
            return Err(RuntimeError::NotRunning);
        }
        crate::sys::pidfd_send_signal(&fd, sig).map_err(|e| match e {
            nix::errno::Errno::ESRCH => RuntimeError::NotRunning,
            e => RuntimeError::Sys(crate::error::SysError::new("kill", format_args!("pid {pid} signal {sig}"), e)),
        })
    }

    /// SIGKILLs every process of the container in the session `leader`
    /// (a host pid) leads: a command [`Container::exec_spawn`] made, with
    /// what it started, the rest of the container left alone. Best effort;
    /// nothing to do for a container without a cgroup.
    pub fn kill_session(&self, leader: i32) -> Result<()> {
        if let Some(cg) = self.cgroup()? {
            crate::cgroups::kill_session(&cg, leader);
        }
        Ok(())
    }

    /// Waits up to `timeout` for init to exit.
    pub(crate) fn wait_stopped(&self, timeout: std::time::Duration) -> bool {
        let Ok(fd) = crate::sys::pidfd_open(Pid::from_raw(self.rec.pid)) else { return true };
        if self.status() == Status::Stopped {
            return true;
        }
        let mut fds = [nix::poll::PollFd::new(std::os::fd::AsFd::as_fd(&fd), nix::poll::PollFlags::POLLIN)];
        let ms = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
        matches!(nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ms)), Ok(n) if n > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_parse_like_runc() {
        assert_eq!(parse_signal("9").unwrap(), 9);
        assert_eq!(parse_signal("KILL").unwrap(), 9);
        assert_eq!(parse_signal("sigterm").unwrap(), 15);
        assert_eq!(parse_signal("SIGUSR1").unwrap(), 10);
        assert!(parse_signal("NOPE").is_err());
        assert!(parse_signal("0").is_err());
    }
}
