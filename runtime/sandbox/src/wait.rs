//! Waiting for a sandboxed command: its output captured through pipes, the
//! wall-clock limit enforced from outside, and the usage read at the end.
//! Runs in the runtime process (`tinyrun sandbox run`).

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::time::Instant;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;

use super::run::{Output, SandboxResult};
use crate::error::{Error, Result};
use tinyrun::{Runtime, RuntimeError};

/// The box's stdio when its output is captured: our stdin (or /dev/null if
/// we have none), a pipe for each of stdout and stderr. Without capture the
/// box shares ours.
pub(super) struct Capture {
    stdin: Option<OwnedFd>,
    out: Option<(OwnedFd, OwnedFd)>,
    err: Option<(OwnedFd, OwnedFd)>,
}

impl Capture {
    pub(super) fn new(capture: bool) -> Result<Capture> {
        if !capture {
            return Ok(Capture { stdin: None, out: None, err: None });
        }
        let pipe = || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(Error::sys("pipe"));
        let stdin = match std::io::stdin().as_fd().try_clone_to_owned() {
            Ok(fd) => fd,
            Err(_) => {
                let null = Path::new("/dev/null");
                OwnedFd::from(std::fs::File::open(null).map_err(|e| Error::io("open", null, e))?)
            }
        };
        Ok(Capture { stdin: Some(stdin), out: Some(pipe()?), err: Some(pipe()?) })
    }

    /// What the box's fds 0, 1 and 2 become, if captured.
    pub(super) fn stdio(&self) -> Option<[std::os::fd::RawFd; 3]> {
        let (stdin, out, err) = (self.stdin.as_ref()?, self.out.as_ref()?, self.err.as_ref()?);
        Some([stdin.as_raw_fd(), out.1.as_raw_fd(), err.1.as_raw_fd()])
    }

    /// Our read ends, once the box has its copies of the write ends: ours
    /// are closed here, so the reads see EOF when the box is done.
    pub(super) fn readers(&mut self) -> (Option<OwnedFd>, Option<OwnedFd>) {
        self.stdin = None;
        (self.out.take().map(|(r, _)| r), self.err.take().map(|(r, _)| r))
    }
}

/// The process a box runs the command as.
pub(super) enum Child {
    /// Ours: the box's init, or a process `exec` made.
    Own(Pid),
    /// One the box's resident init forked for us.
    Agent(tinyrun::AgentProcess),
}

/// How the command ended.
enum Ended {
    Exited(i32),
    Signaled(String),
}

impl Child {
    /// Blocks until the command has ended; `None` if that can't be known
    /// (the box was killed under it).
    fn wait(self) -> Option<Ended> {
        match self {
            Child::Own(pid) => match waitpid(pid, None).ok()? {
                WaitStatus::Exited(_, code) => Some(Ended::Exited(code)),
                WaitStatus::Signaled(_, sig, _) => Some(Ended::Signaled(sig.as_str().to_string())),
                _ => None,
            },
            Child::Agent(p) => match p.wait().ok()?? {
                tinyrun::AgentExit::Exited(code) => Some(Ended::Exited(code)),
                tinyrun::AgentExit::Signaled(n) => Some(Ended::Signaled(
                    nix::sys::signal::Signal::try_from(n)
                        .map_or_else(|_| format!("signal {n}"), |s| s.as_str().to_string()),
                )),
            },
        }
    }
}

enum Waited {
    Exited(Option<Ended>),
    TimedOut(Child),
    Interrupted(Child, nix::sys::signal::Signal),
}

/// Waits for `child` until `deadline`, draining the output pipes into
/// `res`. Without a pidfd or a signalfd there would be no timeout or no
/// way to stop: either is an error, and the caller kills the box.
fn wait_capturing(
    child: Child,
    deadline: Instant,
    out: Option<OwnedFd>,
    err: Option<OwnedFd>,
    cap: usize,
    res: &mut SandboxResult,
) -> Result<Waited> {
    // Readable once the command has ended.
    let pidfd = match &child {
        Child::Own(pid) => Some(crate::sys::pidfd_open(*pid).map_err(Error::sys("pidfd_open"))?),
        Child::Agent(_) => None,
    };
    let sigfd = nix::sys::signalfd::SignalFd::with_flags(
        &Interrupts::set(),
        nix::sys::signalfd::SfdFlags::SFD_CLOEXEC | nix::sys::signalfd::SfdFlags::SFD_NONBLOCK,
    )
    .map_err(Error::sys("signalfd"))?;
    let mut pipes: Vec<(OwnedFd, bool)> =
        [(out, false), (err, true)].into_iter().filter_map(|(f, is_err)| f.map(|f| (f, is_err))).collect();
    let mut exited = false;
    loop {
        if exited && pipes.is_empty() {
            return Ok(Waited::Exited(child.wait()));
        }
        if let Ok(Some(info)) = sigfd.read_signal() {
            if let Ok(sig) = nix::sys::signal::Signal::try_from(info.ssi_signo as i32) {
                return Ok(Waited::Interrupted(child, sig));
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(Waited::TimedOut(child));
        }
        let ms = u16::try_from(left.as_millis().max(1)).unwrap_or(u16::MAX);
        let mut fds: Vec<PollFd> = pipes.iter().map(|(f, _)| PollFd::new(f.as_fd(), PollFlags::POLLIN)).collect();
        if !exited {
            let end = match (&pidfd, &child) {
                (Some(fd), _) => fd.as_fd(),
                (None, Child::Agent(p)) => p.as_fd(),
                (None, Child::Own(_)) => return Err(Error::InvalidState("no handle on the command".into())),
            };
            fds.push(PollFd::new(end, PollFlags::POLLIN));
        }
        fds.push(PollFd::new(sigfd.as_fd(), PollFlags::POLLIN));
        if poll(&mut fds, PollTimeout::from(ms)).is_err() {
            continue;
        }
        let ready: Vec<bool> = fds.iter().map(|f| f.revents().is_some_and(|r| !r.is_empty())).collect();
        drop(fds);
        if !exited && ready.get(pipes.len()).copied().unwrap_or(false) {
            exited = true;
        }
        let mut i = 0;
        while i < pipes.len() {
            if ready[i] {
                let (fd, is_err) = &pipes[i];
                let sink = if *is_err { &mut res.stderr } else { &mut res.stdout };
                if !drain(fd, sink, cap) {
                    pipes.remove(i);
                    continue;
                }
            }
            i += 1;
        }
    }
}

/// Reads what's there; false at end of file.
fn drain(fd: &OwnedFd, sink: &mut Output, cap: usize) -> bool {
    let mut buf = [0u8; 16 * 1024];
    match nix::unistd::read(fd.as_raw_fd(), &mut buf) {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            let room = cap.saturating_sub(sink.bytes.len());
            if n > room {
                sink.truncated = true;
            }
            sink.bytes.extend_from_slice(&buf[..n.min(room)]);
            true
        }
    }
}

/// What to kill when the deadline passes or we are told to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scope {
    /// The whole box (a one-shot or pooled run).
    Box,
    /// The command's session only (an `exec` into a box that lives on):
    /// the command is a session leader, and what it started is in its
    /// session unless it left with setsid (that lives on until the box's
    /// lifetime ends).
    Session,
}

/// Waits (capturing output) until `child` exits, the deadline passes or
/// we are told to stop; in the last two cases `scope` is killed. Then
/// reads the box's usage.
#[allow(clippy::too_many_arguments)]
pub(super) fn finish(
    rt: &Runtime,
    id: &str,
    child: Child,
    started: Instant,
    deadline: Instant,
    out: Option<OwnedFd>,
    err: Option<OwnedFd>,
    cap: usize,
    scope: Scope,
) -> Result<SandboxResult> {
    let mut res = SandboxResult::default();
    // Only a captured result is shown whole: without capture the caller
    // sees the status alone, and the usage isn't worth its reads.
    let capturing = out.is_some();
    // Our own child is reaped even when waiting failed.
    let own = match &child {
        Child::Own(pid) => Some(*pid),
        Child::Agent(_) => None,
    };
    let (child, interrupted) = match wait_capturing(child, deadline, out, err, cap, &mut res) {
        Ok(Waited::Exited(s)) => (Ok(s), None),
        Ok(Waited::TimedOut(c)) => {
            res.timed_out = true;
            (Err(Some(c)), None)
        }
        Ok(Waited::Interrupted(c, sig)) => (Err(Some(c)), Some(sig)),
        Err(e) => {
            // A command of the resident init's went with its connection.
            if own.is_some() || scope == Scope::Box {
                kill_scope(rt, id, scope, None, own)?;
            }
            if let Some(pid) = own {
                let _ = waitpid(pid, None);
            }
            return Err(e);
        }
    };
    let ended = match child {
        Ok(ended) => ended,
        Err(c) => {
            // Killed from outside: the whole box by its cgroup, or the
            // command's session. A box that can't be killed is an error,
            // not a result.
            kill_scope(rt, id, scope, c.as_ref(), own)?;
            // A resident init killed with its box can't tell: our SIGKILL
            // is what ended the command.
            let ended = c.and_then(Child::wait).or_else(|| Some(Ended::Signaled("SIGKILL".into())));
            if let Some(sig) = interrupted {
                return Err(Error::Stopped { id: id.to_string(), signal: sig });
            }
            ended
        }
    };
    match ended {
        Some(Ended::Exited(code)) => res.exit_code = Some(code),
        Some(Ended::Signaled(sig)) => res.signal = Some(sig),
        None => {}
    }
    res.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    // A box whose lifetime ended meanwhile is gone, and its usage with it.
    if let Some(c) = capturing.then(|| rt.peek(id).ok()).flatten() {
        let usage = c.usage();
        res.cpu_ms = usage.cpu_ns / 1_000_000;
        res.peak_memory_bytes = usage.peak_memory;
        res.oom_killed = usage.oom_kills > 0;
    }
    Ok(res)
}

/// Kills what `scope` says of box `id`: all of it, or the session of the
/// command (`child`, or our own `pid`).
fn kill_scope(rt: &Runtime, id: &str, scope: Scope, child: Option<&Child>, own: Option<Pid>) -> Result<()> {
    match (scope, child, own) {
        (Scope::Session, Some(Child::Agent(p)), _) => p.kill()?,
        (Scope::Session, _, Some(pid)) => kill_session(rt, id, pid),
        _ => match rt.load(id)?.kill(nix::sys::signal::Signal::SIGKILL as i32, true) {
            Ok(()) | Err(RuntimeError::NotRunning) => {}
            Err(e) => return Err(e.into()),
        },
    }
    Ok(())
}

/// SIGKILLs every process of box `id` in `leader`'s session, a few rounds
/// so one forked meanwhile goes too.
fn kill_session(rt: &Runtime, id: &str, leader: Pid) {
    for _ in 0..5 {
        let Ok(pids) = rt.peek(id).and_then(|c| c.pids()) else { return };
        let mine: Vec<i32> = pids.into_iter().filter(|p| session_of(*p) == Some(leader.as_raw())).collect();
        if mine.is_empty() {
            return;
        }
        for p in mine {
            let _ = nix::sys::signal::kill(Pid::from_raw(p), nix::sys::signal::Signal::SIGKILL);
        }
    }
}

/// Field 6 of /proc/PID/stat: the session id, as the host sees it.
fn session_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name, which is in parentheses and may hold anything.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(3)?.parse().ok()
}

/// SIGINT, SIGTERM and SIGHUP, blocked while a box runs so they can be
/// read from a signalfd and turned into "kill the box and clean up".
pub(super) struct Interrupts(nix::sys::signal::SigSet);

impl Interrupts {
    fn set() -> nix::sys::signal::SigSet {
        let mut s = nix::sys::signal::SigSet::empty();
        for sig in [nix::sys::signal::SIGINT, nix::sys::signal::SIGTERM, nix::sys::signal::SIGHUP] {
            s.add(sig);
        }
        s
    }

    pub(super) fn block() -> Result<Interrupts> {
        let mut old = nix::sys::signal::SigSet::empty();
        nix::sys::signal::sigprocmask(nix::sys::signal::SigmaskHow::SIG_BLOCK, Some(&Self::set()), Some(&mut old))
            .map_err(Error::sys("sigprocmask"))?;
        Ok(Interrupts(old))
    }
}

impl Drop for Interrupts {
    fn drop(&mut self) {
        let _ = nix::sys::signal::sigprocmask(nix::sys::signal::SigmaskHow::SIG_SETMASK, Some(&self.0), None);
    }
}
