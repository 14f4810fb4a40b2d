//! Running programs through a container's resident init ([`Init::Resident`]):
//! the caller's side of the conversation that `process::resident` describes.
//!
//! Nothing is locked and no config or state record is parsed: `create`
//! wrote down, beside the container's record, the cgroup directory under
//! which each program gets a leaf of its own (`cgroups::leaf`), so a
//! [`Resident`] is one small read, and a supervisor that keeps one makes
//! no read at all per program. The request goes straight to the socket in
//! the state directory. Init, which holds the container's whole set-up,
//! forks the program: no setns, no seccomp load per program. A program may
//! also run on a terminal of the container's own, which we relay
//! (`terminal`).
//!
//! [`Init::Resident`]: crate::Init::Resident

use std::cell::Cell;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Instant;

use nix::sys::socket::{sendmsg, setsockopt, sockopt, ControlMessage, MsgFlags};

use serde::{Deserialize, Serialize};

use super::{check_id, Runtime};
use crate::cgroups::{Leaf, Survivors};
use crate::error::{Result, RuntimeError};
use crate::process::resident::wire::{Reply, Request, MAX_REQUEST};
use crate::seccomp::refusals::Refusals;
use crate::state::{AGENT_SOCKET, RESIDENT_FILE};

mod terminal;
pub use terminal::ResidentTerminal;

/// What `create` writes down for a resident init (`resident.json`, 0600,
/// in the state directory): where its programs' cgroups go.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ResidentRecord {
    /// The directory leaves are made in (v1: the container's freezer
    /// cgroup), and whether it is cgroup v2; `None` for a container
    /// without a cgroup of its own.
    pub leaves: Option<(PathBuf, bool)>,
}

/// A container whose init is resident ([`crate::Init::Resident`]), ready to
/// run programs.
#[derive(Debug, Clone)]
pub struct Resident {
    id: String,
    /// The container's state directory.
    dir: PathBuf,
    rec: ResidentRecord,
}

/// A program for a resident init to run.
#[derive(Debug, Clone, Default)]
pub struct ResidentCommand {
    /// The program and its arguments; `args[0]` is looked up in the
    /// container as execvp would.
    pub args: Vec<String>,
    /// `NAME=VALUE` entries merged over the container's `process.env`
    /// (see [`crate::merge_env`]: the last entry of a name wins).
    pub env: Vec<String>,
    /// The working directory, instead of `process.cwd`.
    pub cwd: Option<PathBuf>,
    /// Kill what the program leaves running as soon as it exits; otherwise
    /// that lives on until the container ends.
    pub kill_children: bool,
    /// By when the program must have started: connecting, sending and
    /// waiting for init's answer all end then, with
    /// [`RuntimeError::DeadlinePassed`].
    pub deadline: Option<Instant>,
}

/// The program's stdio, and the read ends (of pipes among its stdout and
/// stderr, at most two) that init should empty once the caller is done, so
/// that what the program leaves running can go on writing.
#[derive(Debug, Clone, Copy, Default)]
pub struct ResidentStdio<'a> {
    /// What become the program's fds 0, 1 and 2.
    pub fds: [RawFd; 3],
    /// Read ends of the pipes among `fds` that init empties once the
    /// caller is done.
    pub drain: &'a [RawFd],
}

/// How a program run by a resident init ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResidentExit {
    /// It exited with this status.
    Exited(i32),
    /// This signal ended it.
    Signaled(i32),
}

/// A program a resident init runs for us, in a cgroup of its own.
/// Dropping this before its status is read (or our process dying) kills
/// everything in that cgroup; dropping it afterwards leaves what the
/// program started running in the container.
pub struct ResidentProcess {
    /// Read a line at a time and never past one, so that a status init
    /// has sent always leaves the socket readable (see [`Self::as_fd`]).
    conn: UnixStream,
    pid: i32,
    /// The socket it came through, for errors.
    path: PathBuf,
    leaf: Option<Leaf>,
    /// Its status has been read.
    ended: bool,
    killed: Cell<bool>,
    /// The container's record of refused calls when it started, and what
    /// was added until it ended.
    refused_before: Refusals,
    refused: Refusals,
}

impl Runtime {
    /// Container `id`'s resident init. A container without one is
    /// [`RuntimeError::InvalidState`], and only that is.
    pub fn resident(&self, id: &str) -> Result<Resident> {
        check_id(id)?;
        let dir = self.root().join(id);
        let path = dir.join(RESIDENT_FILE);
        let rec = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                RuntimeError::io("read", &path, std::io::Error::new(std::io::ErrorKind::InvalidData, e))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if !dir.exists() {
                    return Err(RuntimeError::NotFound(id.to_string()));
                }
                if !dir.join(AGENT_SOCKET).exists() {
                    return Err(RuntimeError::InvalidState(format!("container {id} has no resident init")));
                }
                // Made before the record was: its cgroup from its state.
                let c = self.peek(id)?;
                ResidentRecord { leaves: c.cgroup()?.map(|cg| cg.leaf_parent()) }
            }
            Err(e) => return Err(RuntimeError::io("read", &path, e)),
        };
        Ok(Resident { id: id.to_string(), dir, rec })
    }
}

impl Resident {
    /// The container's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Runs `cmd` in the container, which must have a cgroup, with
    /// `stdio`. Returns once the program has been exec'd; a program that
    /// can't be run is an [`RuntimeError::Exec`], as for `exec`.
    pub fn spawn(&self, cmd: &ResidentCommand, stdio: &ResidentStdio<'_>) -> Result<ResidentProcess> {
        let mut fds = stdio.fds.to_vec();
        fds.extend_from_slice(stdio.drain);
        self.start(cmd, &fds, stdio.drain.len(), None)
    }

    /// Runs `cmd` with `fds` (its stdio and `drain` pipes to drain, or
    /// with `terminal`, of that size, a console socket).
    fn start(
        &self,
        cmd: &ResidentCommand,
        fds: &[RawFd],
        drain: usize,
        terminal: Option<Option<(u16, u16)>>,
    ) -> Result<ResidentProcess> {
        if cmd.args.is_empty() {
            return Err(RuntimeError::InvalidArgument("a program to run needs args".into()));
        }
        let (dir, id) = (&self.dir, &self.id);
        let path = dir.join(AGENT_SOCKET);
        let conn = connect(dir, cmd.deadline).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound if dir.exists() => {
                RuntimeError::InvalidState(format!("container {id} has no resident init"))
            }
            std::io::ErrorKind::NotFound => RuntimeError::NotFound(id.to_string()),
            std::io::ErrorKind::ConnectionRefused => RuntimeError::NotRunning,
            std::io::ErrorKind::WouldBlock => RuntimeError::DeadlinePassed(format!("connect to {}", path.display())),
            _ => RuntimeError::io("connect to", &path, e),
        })?;
        // A container without a cgroup (an unprivileged caller's where
        // none is delegated) runs its programs in init's; init kills each
        // by its process group.
        let leaf = match &self.rec.leaves {
            Some((parent, v2)) => Some(Leaf::make(parent, *v2)?),
            None => None,
        };
        let mut fds = fds.to_vec();
        if let Some(leaf) = &leaf {
            fds.extend([leaf.fds().procs.as_raw_fd(), leaf.fds().ctl.as_raw_fd()]);
        }
        let req = Request {
            args: cmd.args.clone(),
            env: cmd.env.clone(),
            cwd: cmd.cwd.as_ref().map(|c| c.to_string_lossy().into_owned()),
            kill_children: cmd.kill_children,
            drain,
            cgroup_v2: leaf.as_ref().is_some_and(|l| l.fds().v2),
            no_cgroup: leaf.is_none(),
            report: false,
            terminal: terminal.is_some(),
            console_size: terminal.flatten(),
        };
        let mut proc = ResidentProcess::new(conn, path, leaf);
        proc.send(&req, &fds, cmd.deadline)?;
        match proc.reply()? {
            Some(Reply::Started { pid, refused }) => {
                proc.pid = pid;
                proc.refused_before = refused;
                // From here the caller waits on its own terms.
                let _ = proc.set_timeouts(None);
                Ok(proc)
            }
            Some(Reply::Failed(e)) => Err(RuntimeError::Exec(e)),
            Some(other) => Err(proc.bad_reply(format!("{other:?} before the program started"))),
            None => Err(RuntimeError::NotRunning),
        }
    }
}

impl Resident {
    /// The system calls the container's seccomp filter refused since it
    /// was made, as its resident init recorded them (empty when its filter
    /// does not record them: `Supervised::record_refusals`). Asked by
    /// `deadline`.
    pub fn refused(&self, deadline: Option<Instant>) -> Result<Refusals> {
        let path = self.dir.join(AGENT_SOCKET);
        let conn = connect(&self.dir, deadline).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => RuntimeError::NotFound(self.id.clone()),
            std::io::ErrorKind::ConnectionRefused => RuntimeError::NotRunning,
            _ => RuntimeError::io("connect to", &path, e),
        })?;
        let mut proc = ResidentProcess::new(conn, path, None);
        proc.ended = true;
        let req = Request {
            args: Vec::new(),
            env: Vec::new(),
            cwd: None,
            kill_children: false,
            drain: 0,
            cgroup_v2: false,
            no_cgroup: false,
            report: true,
            terminal: false,
            console_size: None,
        };
        proc.send(&req, &[], deadline)?;
        match proc.reply()? {
            Some(Reply::Refused(r)) => Ok(r),
            Some(Reply::Failed(e)) => Err(RuntimeError::Exec(e)),
            Some(other) => Err(proc.bad_reply(format!("{other:?} for a report"))),
            None => Err(RuntimeError::NotRunning),
        }
    }
}

/// A connection to the resident init's socket in `dir`, given up at `deadline` (a
/// full listen backlog makes connect wait: init is paused or busy).
fn connect(dir: &Path, deadline: Option<Instant>) -> std::io::Result<UnixStream> {
    use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType, UnixAddr};
    let sock = socket(AddressFamily::Unix, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)?;
    if let Some(d) = deadline {
        setsockopt(&sock, sockopt::SendTimeout, &time_left(d)?)?;
    }
    crate::state::via_socket(dir, AGENT_SOCKET, |p| {
        let addr = UnixAddr::new(p)?;
        match nix::sys::socket::connect(sock.as_raw_fd(), &addr) {
            // A timed-out connect says EAGAIN, as a full backlog does.
            Err(nix::errno::Errno::EAGAIN) => Err(std::io::ErrorKind::WouldBlock.into()),
            r => r.map_err(std::io::Error::from),
        }
    })?;
    Ok(UnixStream::from(sock))
}

/// What is left until `deadline`, as a socket timeout (at least 1 µs: zero
/// would mean none); an error when nothing is.
fn time_left(deadline: Instant) -> std::io::Result<nix::sys::time::TimeVal> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(std::io::ErrorKind::WouldBlock.into());
    }
    let us = i64::try_from(left.as_micros()).unwrap_or(i64::MAX).max(1);
    Ok(nix::sys::time::TimeVal::new(us / 1_000_000, us % 1_000_000))
}

impl ResidentProcess {
    fn new(conn: UnixStream, path: PathBuf, leaf: Option<Leaf>) -> ResidentProcess {
        ResidentProcess {
            conn,
            pid: 0,
            path,
            leaf,
            ended: false,
            killed: Cell::new(false),
            refused_before: Refusals::default(),
            refused: Refusals::default(),
        }
    }

    /// The system calls the container's filter refused from the
    /// program's start to its end (known once [`Self::wait`] has its
    /// status), as the resident init recorded them: the program's own,
    /// and those of anything else running in the container meanwhile.
    pub fn refused(&self) -> &Refusals {
        &self.refused
    }

    /// The program's pid in the container's pid namespace.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Readable once the program has ended (its status can then be read
    /// without blocking) or init is gone.
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.conn.as_fd()
    }

    /// SIGKILLs the program and everything in its cgroup, from here: it
    /// works in a paused container too (its processes die once it
    /// resumes) and needs nothing from init.
    pub fn kill(&self) {
        match &self.leaf {
            Some(leaf) => leaf.fds().kill(),
            // Without a cgroup: a byte asks init to kill it (its process
            // group; a paused container has no such case, pausing needs
            // the freezer).
            None => {
                use std::io::Write;
                let _ = (&self.conn).write_all(b"k");
            }
        }
        self.killed.set(true);
    }

    /// Waits until the program ends. `None` if init went away first (the
    /// container was killed), so no status is known.
    pub fn wait(&mut self) -> Result<Option<ResidentExit>> {
        loop {
            let (exit, refused) = match self.reply()? {
                Some(Reply::Exited { code, refused }) => (ResidentExit::Exited(code), refused),
                Some(Reply::Signaled { signal, refused }) => (ResidentExit::Signaled(signal), refused),
                Some(_) => continue,
                None => return Ok(None),
            };
            self.refused = refused.since(&self.refused_before);
            self.ended = true;
            return Ok(Some(exit));
        }
    }

    /// The request, its fds on the first bytes, all sent by `deadline`.
    fn send(&mut self, req: &Request, fds: &[RawFd], deadline: Option<Instant>) -> Result<()> {
        let body = serde_json::to_vec(req).map_err(|e| RuntimeError::InvalidArgument(format!("request: {e}")))?;
        if body.len() > MAX_REQUEST {
            return Err(RuntimeError::InvalidArgument(format!(
                "args and env take {} bytes, more than {MAX_REQUEST}",
                body.len()
            )));
        }
        self.set_timeouts(deadline)?;
        let head = u32::try_from(body.len()).unwrap_or(u32::MAX).to_le_bytes();
        let conn = &self.conn;
        send_with_fds(conn, &head, fds).map_err(|e| self.io_err("send request to", e.into()))?;
        (&*conn).write_all(&body).map_err(|e| self.io_err("send request to", e))
    }

    /// Send and receive timeouts for what is left until `deadline`, or none.
    fn set_timeouts(&self, deadline: Option<Instant>) -> Result<()> {
        let t = match deadline {
            Some(d) => time_left(d).map_err(|e| self.io_err("send request to", e))?,
            None => nix::sys::time::TimeVal::new(0, 0),
        };
        let conn = &self.conn;
        let set =
            setsockopt(conn, sockopt::SendTimeout, &t).and_then(|()| setsockopt(conn, sockopt::ReceiveTimeout, &t));
        set.map_err(|e| self.io_err("set timeouts on", e.into()))
    }

    /// The next line from init; `None` at the end of the connection.
    fn reply(&mut self) -> Result<Option<Reply>> {
        let mut line = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            // Peeked first: only the bytes up to the newline are taken.
            let n = nix::sys::socket::recv(self.conn.as_raw_fd(), &mut buf, MsgFlags::MSG_PEEK)
                .map_err(|e| self.io_err("read from", e.into()))?;
            if n == 0 {
                return Ok(None);
            }
            let peeked = buf.get(..n).unwrap_or_default();
            let take = peeked.iter().position(|b| *b == b'\n').map_or(n, |i| i + 1);
            let mut part = vec![0u8; take];
            (&self.conn).read_exact(&mut part).map_err(|e| self.io_err("read from", e))?;
            line.extend_from_slice(&part);
            if line.ends_with(b"\n") {
                break;
            }
        }
        serde_json::from_slice(&line).map(Some).map_err(|e| self.bad_reply(e.to_string()))
    }

    fn bad_reply(&self, why: String) -> RuntimeError {
        RuntimeError::io("read from", &self.path, std::io::Error::new(std::io::ErrorKind::InvalidData, why))
    }

    /// A timed-out send or receive is the deadline's doing.
    fn io_err(&self, op: &'static str, e: std::io::Error) -> RuntimeError {
        match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                RuntimeError::DeadlinePassed(format!("start the program through {}", self.path.display()))
            }
            _ => RuntimeError::io(op, &self.path, e),
        }
    }
}

impl Drop for ResidentProcess {
    /// Before its status: the program and what it started are killed
    /// (init does the same when the connection closes, unless it is
    /// paused). After: what it left running moves up into the
    /// container's cgroup. Either way its leaf goes.
    fn drop(&mut self) {
        if !self.ended && !self.killed.get() {
            self.kill();
        }
        if let Some(leaf) = self.leaf.take() {
            leaf.release(if self.killed.get() { Survivors::Dying } else { Survivors::Keep });
        }
    }
}

/// The four length bytes, with `fds` on them.
fn send_with_fds(conn: &UnixStream, head: &[u8; 4], fds: &[RawFd]) -> nix::Result<()> {
    let cmsg = [ControlMessage::ScmRights(fds)];
    let iov = [std::io::IoSlice::new(head)];
    loop {
        match sendmsg::<()>(conn.as_raw_fd(), &iov, &cmsg, MsgFlags::MSG_NOSIGNAL, None) {
            Err(nix::errno::Errno::EINTR) => continue,
            Ok(4) => return Ok(()),
            Ok(_) => return Err(nix::errno::Errno::EMSGSIZE),
            Err(e) => return Err(e),
        }
    }
}
