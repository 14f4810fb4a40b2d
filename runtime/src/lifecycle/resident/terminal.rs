//! A program a resident init runs on a terminal (an interactive shell):
//! the caller's side of `Request::terminal`.
//!
//! The terminal is the container's own: init's forked child opens it from
//! the container's devpts, takes its slave as stdio and controlling
//! terminal, and sends its master back on a console socket that came in
//! the request, before it execs. The container never holds a terminal of
//! ours (TIOCSTI on it types only into its own input), its slave has a
//! name there (`tty` says /dev/pts/N), and we relay ours to it as a
//! foreground `exec -t` does (`process::foreground`).

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{sigprocmask, SigSet, SigmaskHow, Signal};

use super::{Resident, ResidentCommand, ResidentExit, ResidentProcess};
use crate::error::Result;
use crate::process::foreground::{self, Awaited};

/// A program a resident init runs on a terminal of the container's own,
/// and that terminal's master. Dropped before [`Self::relay`], the program
/// is killed.
pub struct ResidentTerminal {
    process: ResidentProcess,
    master: OwnedFd,
}

impl Resident {
    /// Runs `cmd` in the container on a new terminal of its own, of our
    /// terminal's size (our stdin's, if it is one). Returns once the
    /// program has been exec'd, as [`Resident::spawn`] does.
    pub fn spawn_terminal(&self, cmd: &ResidentCommand) -> Result<ResidentTerminal> {
        let (ours, theirs) = crate::tty::console_pair()?;
        let size = crate::sys::get_winsize(0).ok().map(|w| (w.ws_row, w.ws_col));
        let process = self.start(cmd, &[theirs.as_raw_fd()], 0, Some(size))?;
        drop(theirs);
        // The child sent it before its execve, so before init said the
        // program started: it is there now, or never comes.
        crate::sys::set_nonblocking(&ours)?;
        let master = crate::tty::recv_fd(&ours)?;
        Ok(ResidentTerminal { process, master })
    }
}

impl ResidentTerminal {
    /// Relays our stdin to the terminal and the terminal to our stdout
    /// until the program ends, our stdin raw meanwhile if it is a terminal
    /// (restored on the way out) and our window size passed on as it
    /// changes. Returns its status as a shell gives it: its exit status,
    /// 128+N if signal N ended it, 137 if the container ended under it
    /// (everything in it is SIGKILLed). SIGHUP, SIGINT, SIGTERM or SIGQUIT
    /// sent to us kill it: init passes no signal on.
    pub fn relay(self) -> i32 {
        let ResidentTerminal { mut process, master } = self;
        // Read from a signalfd while the relay runs, as for a foreground
        // `exec`: none acts on us meanwhile.
        let mut old = SigSet::empty();
        let blocked = sigprocmask(SigmaskHow::SIG_BLOCK, Some(&SigSet::all()), Some(&mut old)).is_ok();
        let code = foreground::relay(&mut process, Some(master));
        if blocked {
            let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
        }
        code
    }
}

impl Awaited for ResidentProcess {
    fn end_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.as_fd())
    }

    fn status(&mut self) -> Option<i32> {
        // Readable once init has sent the status, or is gone.
        let mut fds = [PollFd::new(self.as_fd(), PollFlags::POLLIN)];
        let ended = poll(&mut fds, PollTimeout::ZERO).is_ok_and(|n| n > 0);
        if !ended {
            return None;
        }
        Some(match self.wait() {
            Ok(Some(ResidentExit::Exited(code))) => code,
            Ok(Some(ResidentExit::Signaled(n))) => 128 + n,
            Ok(None) | Err(_) => 128 + Signal::SIGKILL as i32,
        })
    }

    fn signal(&self, sig: Signal) {
        // One that would end us ends the program, rather than leave it on
        // a terminal nobody relays.
        if matches!(sig, Signal::SIGHUP | Signal::SIGINT | Signal::SIGTERM | Signal::SIGQUIT) {
            self.kill();
        }
    }
}
