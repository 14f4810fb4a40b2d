//! A caller's terminal: runs a command the way an interactive shell runs one, for tests about
//! what a container can do to the terminal it was started from.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::pty::openpty;

/// Kills a runtime we spawned if the test fails before it exits.
pub struct ChildGuard(pub Child);
impl Drop for ChildGuard {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// What happened on the caller's terminal.
pub struct OnTerminal {
    pub code: Option<i32>,
    /// What the command wrote to the terminal.
    pub output: String,
    /// What was left in the terminal's input queue afterwards: what the caller's shell would
    /// read and run next.
    pub typed: String,
    /// The terminal was in canonical mode with echo afterwards, as it was given: whatever put it
    /// in raw mode meanwhile restored it.
    pub canonical: bool,
}

/// Runs `cmd` as an interactive shell runs a foreground command: a new session whose controlling terminal
/// is a fresh pty, which is also its stdin, stdout and stderr. `during` is called once, with
/// the command's pid, while it runs, when its output contains `ready`.
pub fn on_terminal(cmd: Command, ready: &str, during: impl FnMut(i32)) -> OnTerminal {
    on_terminal_with(cmd, ready, during, None)
}

fn on_terminal_with(
    mut cmd: Command,
    ready: &str,
    mut during: impl FnMut(i32),
    typing: Option<(&[u8], &std::cell::Cell<bool>)>,
) -> OnTerminal {
    let pty = openpty(None, None).expect("openpty");
    let slave = || Stdio::from(pty.slave.try_clone().expect("dup pty slave"));
    cmd.stdin(slave()).stdout(slave()).stderr(slave());
    // SAFETY: setsid and ioctl are async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            if libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = ChildGuard(cmd.spawn().expect("spawn the runtime on a terminal"));
    let master = pty.master;
    let mut out = Vec::new();
    let mut seen_ready = ready.is_empty();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        drain(&master, &mut out);
        if !seen_ready && String::from_utf8_lossy(&out).contains(ready) {
            seen_ready = true;
            during(child.0.id() as i32);
            if let Some((input, done)) = typing {
                nix::unistd::write(&master, input).expect("type on the terminal");
                done.set(true);
            }
        }
        if let Some(st) = child.0.try_wait().expect("wait") {
            break st;
        }
        assert!(Instant::now() < deadline, "the command did not finish; terminal: {:?}", String::from_utf8_lossy(&out));
    };
    drain(&master, &mut out);
    let modes = nix::sys::termios::tcgetattr(&pty.slave).expect("tcgetattr").local_flags;
    OnTerminal {
        code: status.code(),
        output: String::from_utf8_lossy(&out).replace("\r\n", "\n"),
        typed: pending_input(&pty.slave),
        canonical: modes.contains(nix::sys::termios::LocalFlags::ICANON | nix::sys::termios::LocalFlags::ECHO),
    }
}

/// [`on_terminal`], with `input` typed on the terminal once the command's output contains
/// `ready` (a prompt): an interactive session driven from the keyboard.
pub fn on_terminal_typing(cmd: Command, ready: &str, input: &[u8]) -> OnTerminal {
    // Typed on the terminal's master, as a keyboard would.
    let typed = std::cell::Cell::new(false);
    let t = on_terminal_with(cmd, ready, |_| {}, Some((input, &typed)));
    assert!(typed.get(), "never saw {ready:?} to type after; terminal: {:?}", t.output);
    t
}

/// Reads what the terminal shows, for up to 50 ms.
fn drain(master: &OwnedFd, out: &mut Vec<u8>) {
    let mut fds = [PollFd::new(master.as_fd(), PollFlags::POLLIN)];
    if poll(&mut fds, PollTimeout::from(50u16)).unwrap_or(0) > 0 {
        let mut buf = [0u8; 4096];
        if let Ok(n) = nix::unistd::read(master.as_raw_fd(), &mut buf) {
            out.extend_from_slice(&buf[..n]);
        }
    }
}

/// The terminal's pending input, read from its slave side without waiting.
fn pending_input(slave: &OwnedFd) -> String {
    let flags = OFlag::from_bits_truncate(fcntl(slave.as_raw_fd(), FcntlArg::F_GETFL).expect("F_GETFL"));
    fcntl(slave.as_raw_fd(), FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK)).expect("F_SETFL");
    let mut typed = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = nix::unistd::read(slave.as_raw_fd(), &mut buf) {
        if n == 0 {
            break;
        }
        typed.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&typed).into_owned()
}

/// Field 7 of /proc/<pid>/stat: the controlling terminal's device number, 0 for none.
pub fn tty_nr(pid: i32) -> Option<i64> {
    crate::host::proc_stat_fields(pid)?.get(4)?.parse().ok()
}

/// The kernel lets a process TIOCSTI its own controlling terminal without privilege
/// (`dev.tty.legacy_tiocsti`, 1 where the file is missing: older kernels).
pub fn legacy_tiocsti() -> bool {
    std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti").map_or(true, |s| s.trim() == "1")
}
