//! One program a resident init runs: forked into its own cgroup, then
//! followed until its caller has its status and its output pipes have no
//! writer left. Runs in init (and, in [`start`], in its forked child):
//! nothing here may panic.

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::sys::socket::{recv, send, MsgFlags};
use nix::unistd::Pid;

use super::wire::{self, Received, Reply};
use super::Refusing;
use crate::cgroups::LeafFds;
use crate::error::InitError;
use crate::process::finalize::{self, ProcessConfig};
use crate::sys::{self, Forked};

/// A program init started, from its start until nothing is left of it to
/// look after.
pub(super) struct Program {
    pub pid: Pid,
    /// The caller, until it is done (it has the status and closed, or it
    /// went away before).
    conn: Option<OwnedFd>,
    /// The program's cgroup, while the caller may still want it killed.
    leaf: Option<LeafFds>,
    /// Without a cgroup (`Request::no_cgroup`): kill its process group
    /// instead, while the caller may still want it killed.
    by_group: bool,
    /// Read ends of the program's output pipes, emptied into nothing once
    /// the caller is done, so what the program left running can still
    /// write; each goes at its end of file.
    drain: Vec<Option<OwnedFd>>,
    kill_children: bool,
    ended: bool,
}

impl Program {
    /// Starts the program of `r`, answering on `conn` either way; `None`
    /// if it did not start.
    pub(super) fn start(conn: OwnedFd, r: Received, p: &ProcessConfig, refusing: &mut Refusing) -> Option<Program> {
        match spawn(&r, p, refusing) {
            Ok(pid) => {
                answer(&conn, &Reply::Started { pid: pid.as_raw(), refused: refusing.record.clone() });
                let kill_children = r.req.kill_children;
                // Shared with the caller's read ends: neither side blocks.
                let drain = r.drain.into_iter().filter(|fd| sys::set_nonblocking(fd).is_ok()).map(Some).collect();
                let by_group = r.leaf.is_none();
                Some(Program { pid, conn: Some(conn), leaf: r.leaf, by_group, drain, kill_children, ended: false })
            }
            Err(e) => {
                answer(&conn, &Reply::Failed(e));
                None
            }
        }
    }

    /// The fds to watch, each with the index [`Program::ready`] takes:
    /// the caller's connection, or the pipes to drain once the caller is
    /// done.
    pub(super) fn watched(&self) -> Vec<(usize, BorrowedFd<'_>)> {
        match &self.conn {
            Some(c) => vec![(0, c.as_fd())],
            None => self.drain.iter().enumerate().filter_map(|(j, fd)| Some((j, fd.as_ref()?.as_fd()))).collect(),
        }
    }

    /// The fd `watched` gave index `j` is ready.
    pub(super) fn ready(&mut self, j: usize) {
        if self.conn.is_some() {
            self.caller_spoke();
            return;
        }
        let Some(slot) = self.drain.get_mut(j) else { return };
        let Some(fd) = slot else { return };
        let mut buf = [0u8; 16 << 10];
        match nix::unistd::read(fd.as_raw_fd(), &mut buf) {
            Ok(0) => {}
            Ok(_) | Err(Errno::EAGAIN) | Err(Errno::EINTR) => return,
            Err(_) => {}
        }
        *slot = None;
    }

    /// Forgets the pipes that reached their end.
    pub(super) fn tidy(&mut self) {
        self.drain.retain(Option::is_some);
    }

    /// Before the program's end, a byte or the caller's leaving means
    /// "kill it" (a deadline, or a caller that died). After it, the caller
    /// has what it came for: what the program left runs on.
    fn caller_spoke(&mut self) {
        let Some(conn) = &self.conn else { return };
        let mut b = [0u8; 64];
        let gone = match recv(conn.as_raw_fd(), &mut b, MsgFlags::MSG_DONTWAIT) {
            Ok(0) => true,
            Ok(_) => false,
            Err(Errno::EAGAIN) | Err(Errno::EINTR) => return,
            Err(_) => true,
        };
        if !self.ended {
            self.kill_all();
        }
        if gone {
            self.conn = None;
            self.leaf = None;
            self.by_group = false;
        }
    }

    /// The program ended with `reply`: the caller is told.
    pub(super) fn ended(&mut self, reply: &Reply) {
        self.ended = true;
        if self.kill_children {
            self.kill_all();
        }
        if let Some(c) = &self.conn {
            answer(c, reply);
        }
    }

    /// SIGKILLs the program's cgroup, or its process group (it leads one,
    /// in a session of its own) where it has no cgroup: what left the
    /// group lives on until the container ends.
    fn kill_all(&self) {
        match &self.leaf {
            Some(leaf) => leaf.kill(),
            None if self.by_group => {
                let _ = nix::sys::signal::killpg(self.pid, nix::sys::signal::Signal::SIGKILL);
            }
            None => {}
        }
    }

    /// Nothing left to look after.
    pub(super) fn done(&self) -> bool {
        self.ended && self.conn.is_none() && self.drain.is_empty()
    }
}

/// Writes `reply` as one line; a caller that is gone (or reads nothing)
/// is no error of ours.
pub(super) fn answer(conn: &OwnedFd, reply: &Reply) {
    let Ok(mut line) = serde_json::to_vec(reply) else { return };
    line.push(b'\n');
    let mut sent = 0;
    while sent < line.len() {
        match send(conn.as_raw_fd(), line.get(sent..).unwrap_or_default(), MsgFlags::MSG_NOSIGNAL) {
            Ok(n) if n > 0 => sent += n,
            Err(Errno::EINTR) => {}
            _ => return,
        }
    }
}

fn bad_request(why: impl Into<String>) -> InitError {
    InitError::other("read the request", why)
}

/// Forks the program of `r` and waits until it has been exec'd (or
/// failed to be: the child writes why on a close-on-exec pipe). The
/// child's refused calls meanwhile are answered.
fn spawn(r: &Received, p: &ProcessConfig, refusing: &mut Refusing) -> Result<Pid, InitError> {
    let req = &r.req;
    let args: Vec<CString> = req
        .args
        .iter()
        .map(|a| CString::new(a.as_str()).map_err(|_| bad_request("args holds a NUL byte")))
        .collect::<Result<_, _>>()?;
    if args.is_empty() {
        return Err(bad_request("args is empty").field("process.args"));
    }
    let env = crate::env::merge(&p.env, &req.env).map_err(|e| bad_request(e.to_string()))?;
    let cwd = req.cwd.as_deref().map_or_else(|| p.cwd.clone(), std::path::PathBuf::from);
    let (rd, wr) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| InitError::sys("pipe2", e))?;
    let stdio = match &r.stdio {
        wire::Stdio::Fds(f) => ChildStdio::Fds([f[0].as_raw_fd(), f[1].as_raw_fd(), f[2].as_raw_fd()]),
        wire::Stdio::Console(socket) => ChildStdio::Terminal { socket: socket.as_raw_fd(), size: req.console_size },
    };
    match sys::fork()? {
        Forked::Child => {
            drop(rd);
            let e = start(stdio, r.leaf.as_ref(), &cwd, &args, &env, p);
            let _ = nix::unistd::write(&wr, &serde_json::to_vec(&e).unwrap_or_default());
            sys::exit_child(127)
        }
        Forked::Parent(pid) => {
            drop(wr);
            let why = read_to_end_answering(&rd, refusing);
            if why.is_empty() {
                return Ok(pid);
            }
            Err(serde_json::from_slice(&why).unwrap_or_else(|_| InitError::msg("the program failed to start")))
        }
    }
}

/// Everything the child writes on `rd` until its end, answering refused
/// calls meanwhile: one of the child's own, before its execve, must not
/// wait for us while we wait for it.
fn read_to_end_answering(rd: &OwnedFd, refusing: &mut Refusing) -> Vec<u8> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut out = Vec::new();
    loop {
        let (pipe_ready, refused) = {
            let mut fds = vec![PollFd::new(rd.as_fd(), PollFlags::POLLIN)];
            fds.extend(refusing.listener().map(|fd| PollFd::new(fd, PollFlags::POLLIN)));
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) | Err(Errno::EINTR) => {}
                Err(_) => return out,
            }
            let ready = |f: &PollFd| f.revents().is_some_and(|r| !r.is_empty());
            (ready(&fds[0]), fds.get(1).is_some_and(ready))
        };
        if refused {
            refusing.answer();
        }
        if !pipe_ready {
            continue;
        }
        let mut buf = [0u8; 4096];
        match nix::unistd::read(rd.as_raw_fd(), &mut buf) {
            Ok(0) => return out,
            Ok(n) => out.extend_from_slice(buf.get(..n).unwrap_or_default()),
            Err(Errno::EINTR) => {}
            Err(_) => return out,
        }
    }
}

/// A program's stdio, as its forked child takes it.
#[derive(Clone, Copy)]
enum ChildStdio {
    /// These fds become 0, 1 and 2.
    Fds([RawFd; 3]),
    /// A pty of the container's own, its master sent on `socket`.
    Terminal { socket: RawFd, size: Option<(u16, u16)> },
}

/// In the forked child: into the program's cgroup first (no program runs
/// outside it), then what `exec` does for a new process once it is in the
/// container, less what init already is. Returns only on failure.
fn start(
    stdio: ChildStdio,
    leaf: Option<&LeafFds>,
    cwd: &std::path::Path,
    args: &[CString],
    env: &[String],
    p: &ProcessConfig,
) -> InitError {
    let run = || -> Result<InitError, InitError> {
        if let Some(leaf) = leaf {
            leaf.join().map_err(|e| InitError::sys("join the program's cgroup", e))?;
        }
        // Its own session, as every exec'd process.
        match stdio {
            ChildStdio::Fds(fds) => finalize::begin(Some(fds))?,
            ChildStdio::Terminal { socket, size } => {
                finalize::begin(None)?;
                // Made here, from the container's own devpts, so the
                // program never holds a terminal of the caller's; the
                // slave is on 0, 1 and 2 and the controlling terminal of
                // the session begun above, its own fd close-on-exec.
                drop(crate::tty::setup_console(socket, size, p.ids.uid, p.ids.gid)?);
            }
        }
        nix::unistd::chdir(cwd).map_err(|e| InitError::path("chdir", cwd, e).field("process.cwd"))?;
        crate::process::program::verify_cwd()?;
        let program = finalize::program(args, env, p.ids.uid)?;
        Ok(finalize::exec(p, &program))
    };
    run().unwrap_or_else(|e| e)
}
