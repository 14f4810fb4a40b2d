//! A foreground `run` or `exec`: wait for the process, forwarding signals to
//! it, and relay its terminal when it has one. A program a resident init
//! runs on a terminal is waited for the same way ([`Awaited`]).
//!
//! # Preconditions
//! Every signal is blocked in the calling thread (since before the process
//! was cloned), so none — SIGCHLD above all — can be lost: they are read
//! from a signalfd here.

use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::termios::{cfmakeraw, tcgetattr, tcsetattr, SetArg, Termios};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use crate::tty;

/// Restores the caller's terminal mode when the relay ends.
struct RawMode(Option<Termios>);

impl RawMode {
    fn enter(console: bool) -> RawMode {
        let stdin = std::io::stdin();
        if !console || !nix::unistd::isatty(stdin.as_raw_fd()).unwrap_or(false) {
            return RawMode(None);
        }
        let Ok(saved) = tcgetattr(stdin.as_fd()) else { return RawMode(None) };
        let mut raw = saved.clone();
        cfmakeraw(&mut raw);
        let _ = tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &raw);
        RawMode(Some(saved))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if let Some(t) = &self.0 {
            let _ = tcsetattr(std::io::stdin().as_fd(), SetArg::TCSANOW, t);
        }
    }
}

/// What a foreground wait waits for: a child of ours, or a program a
/// resident init runs for us.
pub(crate) trait Awaited {
    /// Readable once it may have ended; `None` when SIGCHLD tells (a child
    /// of ours).
    fn end_fd(&self) -> Option<BorrowedFd<'_>>;
    /// Its status once it has ended (128+N if signal N ended it), without
    /// blocking.
    fn status(&mut self) -> Option<i32>;
    /// Passes on `sig`, which we received.
    fn signal(&self, sig: Signal);
}

impl Awaited for Pid {
    fn end_fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }

    fn status(&mut self) -> Option<i32> {
        reap(*self)
    }

    fn signal(&self, sig: Signal) {
        let _ = kill(*self, sig);
    }
}

/// Waits for `child`; returns its exit status, or 128+N if signal N killed it.
pub(crate) fn wait(mut child: Pid, console: Option<OwnedFd>) -> i32 {
    relay(&mut child, console)
}

/// Waits for `child`, relaying its terminal's master `console` (if it has
/// one) to our stdio, our stdin raw meanwhile when it is a terminal;
/// returns its status as [`Awaited::status`] gives it.
pub(crate) fn relay(child: &mut impl Awaited, console: Option<OwnedFd>) -> i32 {
    let sfd = SignalFd::with_flags(&SigSet::all(), SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK).ok();
    let _raw = RawMode::enter(console.is_some());
    if let Some(m) = &console {
        let _ = nix::fcntl::fcntl(m.as_raw_fd(), nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK));
        tty::copy_winsize(0, m.as_raw_fd());
    }
    let mut relay = Relay {
        child,
        stdin_open: console.is_some(),
        master_open: console.is_some(),
        console,
        sfd,
        buf: vec![0u8; 32 * 1024],
    };
    loop {
        if let Some(code) = relay.child.status() {
            if let Some(m) = &relay.console {
                pump(m.as_raw_fd(), &mut relay.buf);
            }
            return code;
        }
        relay.step();
    }
}

/// What a foreground wait watches: signals for the child, its end, and
/// the pty master with our stdin when the child has a terminal.
struct Relay<'a, A: Awaited> {
    child: &'a mut A,
    console: Option<OwnedFd>,
    sfd: Option<SignalFd>,
    stdin_open: bool,
    master_open: bool,
    buf: Vec<u8>,
}

impl<A: Awaited> Relay<'_, A> {
    /// Waits for a signal, the child's end, input or output, and handles
    /// what came (the end is the caller's to see).
    fn step(&mut self) {
        let stdin = std::io::stdin();
        let mut fds = Vec::with_capacity(4);
        if let Some(end) = self.child.end_fd() {
            fds.push(PollFd::new(end, PollFlags::POLLIN));
        }
        let skip = fds.len();
        if let Some(s) = &self.sfd {
            fds.push(PollFd::new(s.as_fd(), PollFlags::POLLIN));
        }
        if self.stdin_open {
            fds.push(PollFd::new(stdin.as_fd(), PollFlags::POLLIN));
        }
        if let (true, Some(m)) = (self.master_open, &self.console) {
            fds.push(PollFd::new(m.as_fd(), PollFlags::POLLIN));
        }
        if poll(&mut fds, PollTimeout::NONE).is_err() {
            return;
        }
        let ready: Vec<bool> = fds.iter().map(|f| f.revents().is_some_and(|r| !r.is_empty())).collect();
        drop(fds);
        let mut i = skip;
        if self.sfd.is_some() {
            if ready[i] {
                self.on_signals();
            }
            i += 1;
        }
        if self.stdin_open {
            if ready[i] {
                self.on_stdin();
            }
            i += 1;
        }
        if self.master_open && ready.get(i).copied().unwrap_or(false) {
            if let Some(m) = &self.console {
                self.master_open = pump(m.as_raw_fd(), &mut self.buf);
            }
        }
    }

    /// Forwards every pending signal to the child (a window change goes to
    /// the pty instead).
    fn on_signals(&self) {
        let Some(s) = &self.sfd else { return };
        while let Ok(Some(info)) = s.read_signal() {
            match Signal::try_from(info.ssi_signo as i32) {
                Ok(Signal::SIGCHLD) | Ok(Signal::SIGURG) => {}
                Ok(Signal::SIGWINCH) => {
                    if let Some(m) = &self.console {
                        tty::copy_winsize(0, m.as_raw_fd());
                    }
                }
                Ok(sig) => self.child.signal(sig),
                Err(_) => {}
            }
        }
    }

    /// Copies what our stdin has to the pty master.
    fn on_stdin(&mut self) {
        let Some(m) = &self.console else { return };
        match nix::unistd::read(0, &mut self.buf) {
            Ok(0) | Err(_) => self.stdin_open = false,
            Ok(n) => {
                let _ = write_all(m, &self.buf[..n]);
            }
        }
    }
}

/// Reaps every exited child; returns `child`'s status once it is among them.
fn reap(child: Pid) -> Option<i32> {
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(p, code)) if p == child => return Some(code),
            Ok(WaitStatus::Signaled(p, sig, _)) if p == child => return Some(128 + sig as i32),
            Ok(WaitStatus::StillAlive) | Err(_) => return None,
            Ok(_) => continue,
        }
    }
}

/// Copies what the master has to stdout; false once the pty is closed.
fn pump(master: i32, buf: &mut [u8]) -> bool {
    let mut out = std::io::stdout().lock();
    loop {
        match nix::unistd::read(master, buf) {
            Ok(0) => return false,
            Ok(n) => {
                let _ = out.write_all(&buf[..n]);
                let _ = out.flush();
            }
            Err(nix::errno::Errno::EAGAIN) => return true,
            Err(nix::errno::Errno::EINTR) => continue,
            // EIO: every slave fd is closed.
            Err(_) => return false,
        }
    }
}

fn write_all(fd: &OwnedFd, mut data: &[u8]) -> nix::Result<()> {
    while !data.is_empty() {
        match nix::unistd::write(fd, data) {
            Ok(n) => data = &data[n..],
            Err(nix::errno::Errno::EINTR) | Err(nix::errno::Errno::EAGAIN) => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
