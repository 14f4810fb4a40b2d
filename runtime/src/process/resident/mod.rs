//! A resident init (`Init::Resident`): once started, init does not
//! exec `process.args` but stays as the container's pid 1 and runs
//! programs on request, each one forked from it.
//!
//! Init is then exactly where every container process is just before
//! execve: in all its namespaces and its cgroup, in its root, with its
//! user, capabilities, rlimits, no_new_privs and seccomp filter applied, and
//! non-dumpable. A fork of it needs none of that done again, so a request
//! costs a fork and an execve where `exec` costs a new runtime process,
//! setns into each namespace, cgroup joins and a seccomp load.
//!
//! Who can ask: whoever can connect to `agent.sock` in the state directory
//! (0600, the runtime's user), which the container cannot see. Nothing
//! inside the container can reach init either: it is non-dumpable (no
//! ptrace, no /proc/1/mem or /proc/1/fd), as pid 1 it gets no signal from
//! inside that it doesn't handle (SIGCHLD only), and its fds are all
//! close-on-exec, so no program it runs inherits one.
//!
//! The conversation, one connection per program (see `wire`):
//! - the caller, having made the program a cgroup of its own (a leaf of
//!   the container's: `cgroups::leaf`), sends a request with the
//!   program's stdio, the read ends of its output pipes and the leaf's
//!   files as `SCM_RIGHTS`;
//! - init forks; the child moves itself into the leaf through the
//!   caller's `cgroup.procs` (v1: `tasks`) fd, or does not run at all; a
//!   program on a terminal gets a pty from the container's devpts, whose
//!   master the child sends on the console socket the request carried in
//!   place of stdio (`wire::Request::terminal`); init answers
//!   `started` (with the pid in the container's pid namespace) once the
//!   program has been exec'd, or `failed` (an [`InitError`], as `exec`
//!   reports it);
//! - any byte from the caller before the program ends, or its end of the
//!   connection closing, makes init kill the leaf (the caller's deadline,
//!   or a caller that died);
//! - when the program ends, init sends `exited` or `signaled` (killing
//!   the leaf first if the request said so). What the program left running
//!   lives on; once the caller closes, init empties the output pipes into
//!   nothing until their last writer is gone, so those processes never see
//!   EPIPE.
//!
//! Init serves every connection at once from one poll loop, never
//! blocking on a caller: a request must arrive whole within
//! [`wire::REQUEST_PATIENCE`] of its accept, and a caller that sends
//! slowly holds no one else up. A failed accept (out of fds) pauses
//! accepting briefly instead of spinning.
//!
//! When the container's filter records its refusals
//! (`seccomp::refusals`), init holds the filter's listener and answers
//! each refused call itself, with the profile's errno, keeping the
//! container's record: every reply carries it, and a request for it alone
//! gets it. Init is under the filter too, and would wait on itself for a
//! call the profile refuses: the profile must allow what init does (it
//! must already, or init would fail). While it waits for a program's
//! execve, it answers that child's refused calls. Init's CPU time is the
//! container's: a flood of refusals costs the container, and only it.
//!
//! Runs between fork and exec for as long as the container lives: nothing
//! here may panic, and every failure of one request is answered on its
//! connection, never by leaving the loop. Only a failure of the loop
//! itself (poll, signalfd) ends init, and with it the container: it fails
//! closed.

mod program;
pub(crate) mod wire;

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};

use super::finalize::ProcessConfig;
use crate::error::InitError;
use crate::seccomp::refusals::Refusals;
use crate::sys;
use program::{answer, Program};
use wire::{Asked, Incoming, Reply};

/// Requests being received at once; more wait in the listen backlog.
const MAX_INCOMING: usize = 64;

/// How long accepting pauses after it failed for want of fds or memory.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// Everything init looks after.
#[derive(Default)]
struct Served {
    incoming: Vec<Incoming>,
    programs: Vec<Program>,
    /// Accepting is paused until then.
    accept_after: Option<Instant>,
    refusing: Refusing,
}

/// The filter's listener, when init answers the refused calls, and the
/// record of them.
#[derive(Default)]
pub(super) struct Refusing {
    listener: Option<(OwnedFd, i32)>,
    pub(super) record: Refusals,
}

impl Refusing {
    pub(super) fn listener(&self) -> Option<BorrowedFd<'_>> {
        self.listener.as_ref().map(|(fd, _)| fd.as_fd())
    }

    /// Answers the refused calls waiting.
    pub(super) fn answer(&mut self) {
        if let Some((fd, errno)) = &self.listener {
            // Init itself uses the filter: it never reports no users.
            crate::seccomp::refusals::answer(fd.as_fd(), *errno, &mut self.record);
        }
    }
}

/// What a polled fd belongs to.
#[derive(Clone, Copy)]
enum Slot {
    Listener,
    Signals,
    Incoming(usize),
    Program(usize, usize),
    Refusals,
}

/// Serves requests on `listener` until the container is killed, and
/// answers the refused calls of the filter's listener `refusals`, if it
/// records them. Returns only when the loop itself can't go on.
pub(crate) fn serve(listener: &OwnedFd, p: &ProcessConfig, refusals: Option<OwnedFd>) -> InitError {
    // What exec does just before execve, done once for every program.
    if let Err(e) = crate::rlimits::apply_final(&p.rlimits) {
        return e;
    }
    let mut chld = SigSet::empty();
    chld.add(Signal::SIGCHLD);
    if let Err(e) = chld.thread_block() {
        return InitError::value("sigprocmask", "block SIGCHLD", e);
    }
    let sigfd = match SignalFd::with_flags(&chld, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK) {
        Ok(fd) => fd,
        Err(e) => return InitError::sys("signalfd", e),
    };
    // What setting up the container freed stays ours otherwise, in every
    // idle box.
    sys::trim_heap();
    if let Err(e) = sys::set_nonblocking(listener) {
        return InitError::from(e);
    }
    let mut s = Served::default();
    let errno = p.seccomp.as_ref().and_then(crate::seccomp::Filter::refusal_errno);
    s.refusing.listener = refusals.zip(errno);
    loop {
        let now = Instant::now();
        let (slots, ready) = {
            let mut fds = Vec::new();
            let slots = s.poll_set(listener, &sigfd, now, &mut fds);
            match poll(&mut fds, s.timeout(now)) {
                Ok(_) | Err(Errno::EINTR) => {}
                Err(e) => return InitError::sys("poll", e),
            }
            let ready: Vec<bool> = fds.iter().map(|f| f.revents().is_some_and(|r| !r.is_empty())).collect();
            (slots, ready)
        };
        // Indices stay valid through the pass: entries go only after it.
        let mut received = Vec::new();
        for (slot, _) in slots.iter().zip(&ready).filter(|(_, r)| **r) {
            match *slot {
                Slot::Signals => {
                    while let Ok(Some(_)) = sigfd.read_signal() {}
                    reap(&mut s.programs, &s.refusing.record);
                }
                Slot::Program(i, j) => {
                    if let Some(prog) = s.programs.get_mut(i) {
                        prog.ready(j);
                    }
                }
                Slot::Incoming(i) => received.extend(s.receive(i)),
                Slot::Listener => s.accept(listener),
                Slot::Refusals => s.refusing.answer(),
            }
        }
        s.start(received, p);
        s.expire(Instant::now());
        for prog in &mut s.programs {
            prog.tidy();
        }
        s.programs.retain(|prog| !prog.done());
    }
}

impl Served {
    /// The fds to poll, into `fds`, and what each belongs to.
    fn poll_set<'a>(
        &'a self,
        listener: &'a OwnedFd,
        sigfd: &'a SignalFd,
        now: Instant,
        fds: &mut Vec<PollFd<'a>>,
    ) -> Vec<Slot> {
        let mut slots = vec![Slot::Signals];
        fds.push(PollFd::new(sigfd.as_fd(), PollFlags::POLLIN));
        if let Some(fd) = self.refusing.listener() {
            slots.push(Slot::Refusals);
            fds.push(PollFd::new(fd, PollFlags::POLLIN));
        }
        let paused = self.accept_after.is_some_and(|t| t > now);
        if !paused && self.incoming.len() < MAX_INCOMING {
            slots.push(Slot::Listener);
            fds.push(PollFd::new(listener.as_fd(), PollFlags::POLLIN));
        }
        for (i, inc) in self.incoming.iter().enumerate() {
            slots.push(Slot::Incoming(i));
            fds.push(PollFd::new(inc.conn.as_fd(), PollFlags::POLLIN));
        }
        for (i, prog) in self.programs.iter().enumerate() {
            for (j, fd) in prog.watched() {
                slots.push(Slot::Program(i, j));
                fds.push(PollFd::new(fd, PollFlags::POLLIN));
            }
        }
        slots
    }

    /// Until the next request's deadline or the end of an accept pause.
    fn timeout(&self, now: Instant) -> PollTimeout {
        let next = self.incoming.iter().map(|i| i.deadline).chain(self.accept_after).min();
        let Some(next) = next else { return PollTimeout::NONE };
        let ms = next.saturating_duration_since(now).as_millis().saturating_add(1);
        PollTimeout::from(u16::try_from(ms).unwrap_or(u16::MAX))
    }

    /// Takes the connections waiting; pauses accepting when out of fds.
    fn accept(&mut self, listener: &OwnedFd) {
        while self.incoming.len() < MAX_INCOMING {
            match sys::accept(listener, true) {
                Ok(conn) => self.incoming.push(Incoming::new(conn, Instant::now())),
                Err(e) if matches!(e.errno, Errno::EMFILE | Errno::ENFILE | Errno::ENOBUFS | Errno::ENOMEM) => {
                    self.accept_after = Some(Instant::now() + ACCEPT_PAUSE);
                    return;
                }
                // EAGAIN: none left; ECONNABORTED and the like: that one.
                Err(e) if e.errno == Errno::EAGAIN => return,
                Err(_) => {}
            }
        }
    }

    /// Reads on from request `i`: its index and outcome once it is whole
    /// or has failed.
    fn receive(&mut self, i: usize) -> Option<(usize, Result<Asked, InitError>)> {
        let inc = self.incoming.get_mut(i)?;
        match inc.advance() {
            Ok(None) => None,
            Ok(Some(r)) => Some((i, Ok(r))),
            Err(e) => Some((i, Err(e))),
        }
    }

    /// Runs the requests `received` whole (or answers their failure).
    fn start(&mut self, mut received: Vec<(usize, Result<Asked, InitError>)>, p: &ProcessConfig) {
        // Highest index first: each removal leaves the lower ones in place.
        received.sort_by_key(|(i, _)| std::cmp::Reverse(*i));
        for (i, got) in received {
            if i >= self.incoming.len() {
                continue;
            }
            let inc = self.incoming.swap_remove(i);
            match got {
                Ok(Asked::Run(r)) => self.programs.extend(Program::start(inc.conn, r, p, &mut self.refusing)),
                Ok(Asked::Report) => answer(&inc.conn, &Reply::Refused(self.refusing.record.clone())),
                Err(e) => answer(&inc.conn, &Reply::Failed(e)),
            }
        }
    }

    /// Refuses the requests whose deadline has passed.
    fn expire(&mut self, now: Instant) {
        let late = |inc: &Incoming| inc.deadline <= now;
        for inc in self.incoming.iter().filter(|i| late(i)) {
            let why = format!("not sent whole within {} s", wire::REQUEST_PATIENCE.as_secs());
            answer(&inc.conn, &Reply::Failed(InitError::other("read the request", why)));
        }
        self.incoming.retain(|i| !late(i));
    }
}

/// Collects every child that ended (orphans of the container included: we
/// are its pid 1) and tells the callers waiting for theirs, with the
/// `record` of refused calls.
fn reap(programs: &mut [Program], record: &Refusals) {
    loop {
        let (pid, status) = match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) => (pid, Ok(code)),
            Ok(WaitStatus::Signaled(pid, sig, _)) => (pid, Err(sig as i32)),
            Ok(WaitStatus::StillAlive) | Err(_) => return,
            Ok(_) => continue,
        };
        if let Some(prog) = programs.iter_mut().find(|r| r.pid == pid) {
            let refused = record.clone();
            prog.ended(&match status {
                Ok(code) => Reply::Exited { code, refused },
                Err(signal) => Reply::Signaled { signal, refused },
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;
    use std::time::{Duration, Instant};

    use super::{wire, Incoming, Served};

    #[test]
    fn a_request_past_its_deadline_is_answered_and_dropped() {
        let (mut caller, init_end) = UnixStream::pair().unwrap();
        init_end.set_nonblocking(true).unwrap();
        let now = Instant::now();
        let mut s = Served::default();
        s.incoming.push(Incoming::new(OwnedFd::from(init_end), now));
        s.expire(now + wire::REQUEST_PATIENCE - Duration::from_millis(1));
        assert_eq!(s.incoming.len(), 1, "still within its time");
        s.expire(now + wire::REQUEST_PATIENCE);
        assert!(s.incoming.is_empty());
        let mut answer = String::new();
        caller.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("{\"failed\"") && answer.contains("not sent whole"), "{answer}");
    }
}
