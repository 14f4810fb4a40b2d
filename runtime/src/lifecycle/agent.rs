//! Running a program through a container's resident init
//! (`CreateOptions::agent`): the caller's side of the conversation that
//! `process::resident` describes.
//!
//! Nothing is loaded or locked: the request goes straight to the socket in
//! the state directory, and init, which holds the container's whole set-up,
//! forks the program. That is the point of it: no config parse, no setns,
//! no cgroup join, no seccomp load per program.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};

use super::{check_id, Runtime};
use crate::error::{Result, RuntimeError};
use crate::process::resident::{Reply, Request, MAX_REQUEST};
use crate::state::AGENT_SOCKET;

/// A program for a resident init to run.
#[derive(Debug, Clone, Default)]
pub struct AgentCommand {
    /// The program and its arguments; `args[0]` is looked up in the
    /// container as execvp would.
    pub args: Vec<String>,
    /// `NAME=VALUE` entries added to the container's `process.env`.
    pub env: Vec<String>,
    /// The working directory, instead of `process.cwd`.
    pub cwd: Option<PathBuf>,
}

/// How a program run by a resident init ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentExit {
    /// It exited with this status.
    Exited(i32),
    /// This signal ended it.
    Signaled(i32),
}

/// A program a resident init runs for us, in its own session. Dropping
/// this (or our process dying) makes init SIGKILL that session.
pub struct AgentProcess {
    conn: BufReader<UnixStream>,
    pid: i32,
    /// The socket it came through, for errors.
    path: PathBuf,
}

impl Runtime {
    /// Runs `cmd` in container `id`, which must have a resident init, with
    /// `stdio` as its stdin, stdout and stderr. Returns once the program
    /// has been exec'd; a program that can't be run is an
    /// [`RuntimeError::Exec`], as for `exec`. A container without a
    /// resident init is [`RuntimeError::InvalidState`], and only that is.
    pub fn agent_spawn(&self, id: &str, cmd: &AgentCommand, stdio: [RawFd; 3]) -> Result<AgentProcess> {
        check_id(id)?;
        if cmd.args.is_empty() {
            return Err(RuntimeError::InvalidArgument("a program to run needs args".into()));
        }
        let dir = self.root().join(id);
        let path = dir.join(AGENT_SOCKET);
        let conn =
            crate::state::via_socket(&dir, AGENT_SOCKET, |p| UnixStream::connect(p)).map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound if dir.exists() => {
                    RuntimeError::InvalidState(format!("container {id} has no resident init"))
                }
                std::io::ErrorKind::NotFound => RuntimeError::NotFound(id.to_string()),
                std::io::ErrorKind::ConnectionRefused => RuntimeError::NotRunning,
                _ => RuntimeError::io("connect to", &path, e),
            })?;
        let req = Request {
            args: cmd.args.clone(),
            env: cmd.env.clone(),
            cwd: cmd.cwd.as_ref().map(|c| c.to_string_lossy().into_owned()),
        };
        let body = serde_json::to_vec(&req).map_err(|e| RuntimeError::InvalidArgument(format!("request: {e}")))?;
        if body.len() > MAX_REQUEST {
            return Err(RuntimeError::InvalidArgument(format!(
                "args and env take {} bytes, more than {MAX_REQUEST}",
                body.len()
            )));
        }
        let len = u32::try_from(body.len()).unwrap_or(u32::MAX).to_le_bytes();
        send_with_fds(&conn, &len, stdio).map_err(|e| RuntimeError::io("send request to", &path, e.into()))?;
        (&conn).write_all(&body).map_err(|e| RuntimeError::io("send request to", &path, e))?;
        let mut proc = AgentProcess { conn: BufReader::new(conn), pid: 0, path };
        match proc.reply()? {
            Some(Reply::Started { pid }) => {
                proc.pid = pid;
                Ok(proc)
            }
            Some(Reply::Failed(e)) => Err(RuntimeError::Exec(e)),
            Some(other) => Err(RuntimeError::io(
                "read from",
                &proc.path,
                std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{other:?} before the program started")),
            )),
            None => Err(RuntimeError::NotRunning),
        }
    }
}

/// The four length bytes, with the three fds on them.
fn send_with_fds(conn: &UnixStream, head: &[u8; 4], fds: [RawFd; 3]) -> nix::Result<()> {
    let cmsg = [ControlMessage::ScmRights(&fds)];
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

impl AgentProcess {
    /// The program's pid in the container's pid namespace.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Readable once the program has ended (its status can then be read
    /// without blocking) or init is gone.
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.conn.get_ref().as_fd()
    }

    /// Asks init to SIGKILL the program and everything in its session.
    pub fn kill(&self) -> Result<()> {
        match (self.conn.get_ref()).write_all(b"k") {
            Ok(()) => Ok(()),
            // Init is gone, and the program with it.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
            Err(e) => Err(RuntimeError::io("write to", &self.path, e)),
        }
    }

    /// Waits until the program ends. `None` if init went away first (the
    /// container was killed), so no status is known.
    pub fn wait(mut self) -> Result<Option<AgentExit>> {
        loop {
            match self.reply()? {
                Some(Reply::Exited { code }) => return Ok(Some(AgentExit::Exited(code))),
                Some(Reply::Signaled { signal }) => return Ok(Some(AgentExit::Signaled(signal))),
                Some(_) => continue,
                None => return Ok(None),
            }
        }
    }

    /// The next line from init; `None` at the end of the connection.
    fn reply(&mut self) -> Result<Option<Reply>> {
        let mut line = String::new();
        let n = self.conn.read_line(&mut line).map_err(|e| RuntimeError::io("read from", &self.path, e))?;
        if n == 0 {
            return Ok(None);
        }
        serde_json::from_str(&line).map(Some).map_err(|e| {
            RuntimeError::io("read from", &self.path, std::io::Error::new(std::io::ErrorKind::InvalidData, e))
        })
    }
}
