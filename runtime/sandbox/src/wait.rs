//! Waiting for a sandboxed command: its output captured or passed on
//! (`stdio`), the wall-clock limit enforced from outside, and the usage
//! read at the end. Runs in the runtime process (`tinyrun sandbox run`).
//!
//! A command a resident init runs is done when it exits, whatever it left
//! running: the wait ends with its status and the output there is then. A
//! one-shot box's init is the command, and the box ends with it: its
//! output is read to the end.

use std::os::fd::{AsFd, OwnedFd};
use std::time::Instant;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;

use crate::error::{Error, Result};
use crate::refused::Refused;
use crate::result::{Output, SandboxResult};
use crate::stdio::{drain, Stdio};
use tinyrun::{Runtime, RuntimeError};

/// The process a box runs the command as.
pub(crate) enum Child {
    /// Ours: the box's init, or a process `exec` made.
    Own(Pid),
    /// One the box's resident init forked for us.
    Resident(tinyrun::ResidentProcess),
}

/// How the command ended.
enum Ended {
    Exited(i32),
    Signaled(String),
}

impl Child {
    /// Blocks until the command has ended (a resident init's program: its
    /// status is readable); `None` if that can't be known (the box was
    /// killed under it).
    fn wait(&mut self) -> Option<Ended> {
        match self {
            Child::Own(pid) => match waitpid(*pid, None).ok()? {
                WaitStatus::Exited(_, code) => Some(Ended::Exited(code)),
                WaitStatus::Signaled(_, sig, _) => Some(Ended::Signaled(sig.as_str().to_string())),
                _ => None,
            },
            Child::Resident(p) => match p.wait().ok()?? {
                tinyrun::ResidentExit::Exited(code) => Some(Ended::Exited(code)),
                tinyrun::ResidentExit::Signaled(n) => Some(Ended::Signaled(
                    nix::sys::signal::Signal::try_from(n)
                        .map_or_else(|_| format!("signal {n}"), |s| s.as_str().to_string()),
                )),
            },
        }
    }
}

enum Waited {
    Exited(Option<Ended>),
    TimedOut,
    Interrupted(nix::sys::signal::Signal),
}

/// What one pass of the wait polls, in this order.
struct Polled {
    pipes: usize,
    end: bool,
    stdin: bool,
    feed: bool,
    refusals: bool,
}

/// What a wait records besides the status.
#[derive(Default)]
pub(crate) struct Watch {
    /// A one-shot box's filter listener: its refused calls are answered
    /// (and recorded) here, captured or not, or they would wait for good.
    pub(crate) refusals: Option<tinyrun::RefusalListener>,
    /// The box's limits hit before the command started.
    pub(crate) limits_before: tinyrun::LimitsHit,
    /// With a captured result: where the box's network record is read,
    /// and the record before the command started.
    pub(crate) net: Option<(crate::net::NetWatch, crate::net::NetRefusals)>,
    /// Make the whole result (usage and what was refused), not just the
    /// status: a captured result, or a streamed one's last event.
    pub(crate) report: bool,
}

/// Waits for `child` until `deadline`, taking its output from `io` into
/// `res` (or passing it on) and feeding it our stdin. Without a pidfd or
/// a signalfd there would be no timeout or no way to stop: either is an
/// error, and the caller kills the box.
fn wait_capturing(
    child: &mut Child,
    deadline: Instant,
    io: &mut Stdio,
    cap: usize,
    res: &mut SandboxResult,
    refusals: (Option<&mut tinyrun::RefusalListener>, &mut tinyrun::Refusals),
) -> Result<Waited> {
    let (mut listener, record) = refusals;
    // Readable once the command has ended.
    let pidfd = match &*child {
        Child::Own(pid) => Some(tinyrun::os::pidfd_open(*pid).map_err(|e| Error::sys("pidfd_open")(e.errno))?),
        Child::Resident(_) => None,
    };
    let sigfd = nix::sys::signalfd::SignalFd::with_flags(
        &Interrupts::set(),
        nix::sys::signalfd::SfdFlags::SFD_CLOEXEC | nix::sys::signalfd::SfdFlags::SFD_NONBLOCK,
    )
    .map_err(Error::sys("signalfd"))?;
    let mut pipes: Vec<(OwnedFd, bool)> =
        [(io.out.take(), false), (io.err.take(), true)].into_iter().filter_map(|(f, e)| f.map(|f| (f, e))).collect();
    let mut ended: Option<Option<Ended>> = None;
    let stdin = std::io::stdin();
    loop {
        if let Some(e) = ended.take() {
            // A resident init's program: the output there is now, no more.
            if matches!(child, Child::Resident(_)) {
                for (fd, is_err) in &pipes {
                    let sink = if *is_err { &mut res.stderr } else { &mut res.stdout };
                    for _ in 0..64 {
                        if !drain_now(fd, sink, cap, io.capture, *is_err) {
                            break;
                        }
                    }
                }
                return Ok(Waited::Exited(e));
            }
            if pipes.is_empty() {
                return Ok(Waited::Exited(e));
            }
            ended = Some(e);
        }
        if let Ok(Some(info)) = sigfd.read_signal() {
            if let Ok(sig) = nix::sys::signal::Signal::try_from(info.ssi_signo as i32) {
                return Ok(Waited::Interrupted(sig));
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(Waited::TimedOut);
        }
        let ms = u16::try_from(left.as_millis().max(1)).unwrap_or(u16::MAX);
        let mut fds: Vec<PollFd> = pipes.iter().map(|(f, _)| PollFd::new(f.as_fd(), PollFlags::POLLIN)).collect();
        let mut polled = Polled { pipes: pipes.len(), end: false, stdin: false, feed: false, refusals: false };
        if ended.is_none() {
            let end = match (&pidfd, &*child) {
                (Some(fd), _) => fd.as_fd(),
                (None, Child::Resident(p)) => p.as_fd(),
                (None, Child::Own(_)) => return Err(Error::InvalidState("no handle on the command".into())),
            };
            fds.push(PollFd::new(end, PollFlags::POLLIN));
            polled.end = true;
        }
        let (want_stdin, want_pipe) = io.feed.as_ref().map_or((false, false), |f| f.wants());
        if want_stdin {
            fds.push(PollFd::new(stdin.as_fd(), PollFlags::POLLIN));
            polled.stdin = true;
        }
        if let (true, Some(pipe)) = (want_pipe, io.feed.as_ref().and_then(|f| f.pipe())) {
            fds.push(PollFd::new(pipe, PollFlags::POLLOUT));
            polled.feed = true;
        }
        fds.push(PollFd::new(sigfd.as_fd(), PollFlags::POLLIN));
        if let Some(l) = listener.as_deref().filter(|l| !l.is_closed()) {
            fds.push(PollFd::new(l.as_fd(), PollFlags::POLLIN));
            polled.refusals = true;
        }
        if poll(&mut fds, PollTimeout::from(ms)).is_err() {
            continue;
        }
        let ready: Vec<bool> = fds.iter().map(|f| f.revents().is_some_and(|r| !r.is_empty())).collect();
        drop(fds);
        if polled.refusals && ready.last().copied().unwrap_or(false) {
            if let Some(l) = listener.as_deref_mut() {
                l.answer(record);
            }
        }
        let mut at = polled.pipes;
        if polled.end {
            if ready.get(at).copied().unwrap_or(false) {
                ended = Some(child.wait());
            }
            at += 1;
        }
        if let Some(feed) = io.feed.as_mut() {
            if polled.stdin && ready.get(at).copied().unwrap_or(false) {
                feed.read_ours();
            }
            at += usize::from(polled.stdin);
            if polled.feed && ready.get(at).copied().unwrap_or(false) {
                feed.write_box();
            }
        }
        let mut i = 0;
        let mut k = 0;
        while i < pipes.len() {
            let was_ready = ready.get(k).copied().unwrap_or(false);
            k += 1;
            let (fd, is_err) = &pipes[i];
            let sink = if *is_err { &mut res.stderr } else { &mut res.stdout };
            if was_ready && !drain(fd, sink, cap, io.capture, *is_err) {
                pipes.remove(i);
                continue;
            }
            i += 1;
        }
    }
}

/// One read of what is there now; false when nothing more is.
fn drain_now(fd: &OwnedFd, sink: &mut Output, cap: usize, capture: bool, is_err: bool) -> bool {
    let before = sink.bytes.len();
    let mut readable = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
    let ready = poll(&mut readable, PollTimeout::ZERO).is_ok_and(|n| n > 0);
    ready && drain(fd, sink, cap, capture, is_err) && (sink.bytes.len() > before || !capture)
}

/// What to kill when the deadline passes or we are told to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// The whole box (a one-shot or pooled run).
    Box,
    /// The command's own: its cgroup, for a program of the box's resident
    /// init (everything it started, `setsid` or not); its session, for
    /// one `exec` made in a box without one.
    Command,
}

/// Waits until `child` exits, the deadline passes or we are told to
/// stop; in the last two cases `scope` is killed. Then reads the box's
/// usage.
#[allow(clippy::too_many_arguments)]
pub(crate) fn finish(
    rt: &Runtime,
    id: &str,
    mut child: Child,
    started: Instant,
    deadline: Instant,
    io: &mut Stdio,
    cap: usize,
    scope: Scope,
    mut watch: Watch,
) -> Result<SandboxResult> {
    let mut res = SandboxResult::default();
    // Only a reported result is shown whole (captured, or the last event
    // of a stream): otherwise the caller sees the status alone, and the
    // usage isn't worth its reads.
    let reporting = watch.report;
    let mut calls = tinyrun::Refusals::default();
    let waited = wait_capturing(&mut child, deadline, io, cap, &mut res, (watch.refusals.as_mut(), &mut calls));
    let interrupted = match &waited {
        Ok(Waited::Exited(_)) => None,
        Ok(Waited::TimedOut) => {
            res.timed_out = true;
            None
        }
        Ok(Waited::Interrupted(sig)) => Some(*sig),
        Err(_) => None,
    };
    let ended = match waited {
        Ok(Waited::Exited(e)) => e,
        Ok(_) | Err(_) => {
            // Killed from outside: the whole box by its cgroup, or the
            // command's own. A box that can't be killed is an error, not a
            // result.
            let killed = kill_scope(rt, id, scope, &child);
            if let Child::Own(pid) = child {
                let _ = waitpid(pid, None);
            }
            killed?;
            waited?;
            if let Some(sig) = interrupted {
                return Err(Error::Stopped { id: id.to_string(), signal: sig });
            }
            // Our SIGKILL is what ended it (a resident init's program is
            // not waited for: a paused box would hold us).
            Some(Ended::Signaled("SIGKILL".into()))
        }
    };
    match ended {
        Some(Ended::Exited(code)) => res.exit_code = Some(code),
        Some(Ended::Signaled(sig)) => res.signal = Some(sig),
        // The box was killed under the command (its lifetime ended, or it
        // was terminated) before its init could report: it died with the
        // box, by SIGKILL. Never a result with neither, which reads as a
        // failure of ours with nothing said.
        None => res.signal = Some("SIGKILL".into()),
    }
    res.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    // A box whose lifetime ended meanwhile is gone, and its usage with it.
    if let Some(c) = reporting.then(|| rt.peek(id).ok()).flatten() {
        let usage = c.usage();
        res.cpu_ms = usage.cpu_ns / 1_000_000;
        res.peak_memory_bytes = usage.peak_memory;
        res.oom_killed = usage.oom_kills > 0;
        if let Child::Resident(p) = &child {
            calls.merge(p.refused());
        }
        let limits = c.limits_hit().since(&watch.limits_before);
        let net = watch.net.as_ref().map(|(w, before)| w.read().since(before)).unwrap_or_default();
        res.refused = Refused::of(&calls, limits, &net, res.stdout.cut.saturating_add(res.stderr.cut));
    }
    Ok(res)
}

/// Kills what `scope` says of box `id`: all of it, or the command's own
/// (`child`'s cgroup, or the session of our own `child`).
fn kill_scope(rt: &Runtime, id: &str, scope: Scope, child: &Child) -> Result<()> {
    match (scope, child) {
        (Scope::Command, Child::Resident(p)) => p.kill(),
        // A box gone meanwhile took the command with it.
        (Scope::Command, Child::Own(pid)) => {
            if let Ok(c) = rt.peek(id) {
                c.kill_session(pid.as_raw())?;
            }
        }
        (Scope::Box, _) => match rt.load(id)?.kill(nix::sys::signal::Signal::SIGKILL as i32, true) {
            Ok(()) | Err(RuntimeError::NotRunning) => {}
            Err(e) => return Err(e.into()),
        },
    }
    Ok(())
}

/// SIGINT, SIGTERM and SIGHUP, blocked while a box runs so they can be
/// read from a signalfd and turned into "kill the box and clean up".
pub(crate) struct Interrupts(nix::sys::signal::SigSet);

impl Interrupts {
    fn set() -> nix::sys::signal::SigSet {
        let mut s = nix::sys::signal::SigSet::empty();
        for sig in [nix::sys::signal::SIGINT, nix::sys::signal::SIGTERM, nix::sys::signal::SIGHUP] {
            s.add(sig);
        }
        s
    }

    pub(crate) fn block() -> Result<Interrupts> {
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
