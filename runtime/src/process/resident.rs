//! A resident init (`CreateOptions::agent`): once started, init does not
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
//! The conversation, one connection per program:
//! - the caller sends a [`Request`], length-prefixed (u32, little-endian)
//!   JSON, with the program's stdin, stdout and stderr as `SCM_RIGHTS` on
//!   its first bytes;
//! - init answers one line of JSON, a [`Reply`]: `started` (with the pid in
//!   the container's pid namespace) once the program has been exec'd, or
//!   `failed` (an [`InitError`], as `exec` reports it);
//! - any byte from the caller afterwards, or its end of the connection
//!   closing, makes init SIGKILL the program's session (a timeout, or a
//!   caller that died);
//! - when the program ends, init sends `exited` or `signaled` and closes
//!   the connection.
//!
//! Runs between fork and exec for as long as the container lives: nothing
//! here may panic, and every failure of one request is answered on its
//! connection, never by leaving the loop. Only a failure of the loop
//! itself (poll, signalfd) ends init, and with it the container: it fails
//! closed.

use std::ffi::CString;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::socket::{send, MsgFlags};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use super::finalize::{self, ProcessConfig};
use crate::error::InitError;
use crate::sys::{self, Forked};

/// Largest request accepted: args and env as execve takes them (ARG_MAX
/// is 2 MiB with the default stack limit), with room for JSON's escapes.
pub(crate) const MAX_REQUEST: usize = 4 << 20;

/// How long a caller may take to send its whole request, once connected:
/// init serves one connection at a time while it reads.
const REQUEST_TIMEOUT: nix::sys::time::TimeVal = nix::sys::time::TimeVal::new(2, 0);

/// What to run. `env` is added to the container's `process.env`, `cwd`
/// replaces its `process.cwd`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Request {
    pub args: Vec<String>,
    #[serde(default)]
    pub env: Vec<String>,
    #[serde(default)]
    pub cwd: Option<String>,
}

/// What init answers, one JSON object per line.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Reply {
    /// The program runs, as this pid of the container's pid namespace.
    Started { pid: i32 },
    /// It could not be run.
    Failed(InitError),
    /// It exited with this status.
    Exited { code: i32 },
    /// A signal ended it.
    Signaled { signal: i32 },
}

/// A program init runs for a caller still connected.
struct Running {
    pid: Pid,
    conn: OwnedFd,
    /// Its session was killed; the connection now only waits for the status.
    killed: bool,
}

/// Serves requests on `listener` until the container is killed. Returns
/// only when the loop itself can't go on.
pub(crate) fn serve(listener: &OwnedFd, p: &ProcessConfig) -> InitError {
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
    let mut running: Vec<Running> = Vec::new();
    loop {
        let mut fds =
            vec![PollFd::new(listener.as_fd(), PollFlags::POLLIN), PollFd::new(sigfd.as_fd(), PollFlags::POLLIN)];
        let watched: Vec<usize> = (0..running.len()).filter(|&i| running.get(i).is_some_and(|r| !r.killed)).collect();
        for &i in &watched {
            if let Some(r) = running.get(i) {
                fds.push(PollFd::new(r.conn.as_fd(), PollFlags::POLLIN));
            }
        }
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => return InitError::sys("poll", e),
        }
        let ready: Vec<bool> = fds.iter().map(|f| f.revents().is_some_and(|r| !r.is_empty())).collect();
        drop(fds);
        // Callers that gave up: their programs' sessions go.
        for (slot, &i) in watched.iter().enumerate() {
            if ready.get(slot + 2).copied().unwrap_or(false) {
                if let Some(r) = running.get_mut(i) {
                    kill_session(r.pid);
                    r.killed = true;
                }
            }
        }
        if ready.get(1).copied().unwrap_or(false) {
            while let Ok(Some(_)) = sigfd.read_signal() {}
            reap(&mut running);
        }
        if ready.first().copied().unwrap_or(false) {
            if let Ok(conn) = sys::accept(listener) {
                if let Some(r) = handle(conn, p) {
                    running.push(r);
                }
            }
        }
    }
}

/// Collects every child that ended (orphans of the container included: we
/// are its pid 1) and tells the callers waiting for theirs.
fn reap(running: &mut Vec<Running>) {
    loop {
        let (pid, reply) = match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) => (pid, Reply::Exited { code }),
            Ok(WaitStatus::Signaled(pid, sig, _)) => (pid, Reply::Signaled { signal: sig as i32 }),
            Ok(WaitStatus::StillAlive) | Err(_) => return,
            Ok(_) => continue,
        };
        if let Some(i) = running.iter().position(|r| r.pid == pid) {
            let r = running.swap_remove(i);
            answer(&r.conn, &reply);
        }
    }
}

/// Writes `reply` as one line; a caller that is gone is no error of ours.
fn answer(conn: &OwnedFd, reply: &Reply) {
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

/// Reads one request from `conn` and starts its program; the program's
/// entry, if it runs. A request that fails is answered here.
fn handle(conn: OwnedFd, p: &ProcessConfig) -> Option<Running> {
    let started = read_request(&conn).and_then(|(req, stdio)| spawn(&req, &stdio, p));
    match started {
        Ok(pid) => {
            answer(&conn, &Reply::Started { pid: pid.as_raw() });
            Some(Running { pid, conn, killed: false })
        }
        Err(e) => {
            answer(&conn, &Reply::Failed(e));
            None
        }
    }
}

fn bad_request(why: impl Into<String>) -> InitError {
    InitError::other("read the request", why)
}

/// The request and the three fds that came with it.
fn read_request(conn: &OwnedFd) -> Result<(Request, [OwnedFd; 3]), InitError> {
    nix::sys::socket::setsockopt(conn, nix::sys::socket::sockopt::ReceiveTimeout, &REQUEST_TIMEOUT)
        .map_err(|e| InitError::value("setsockopt", "SO_RCVTIMEO", e))?;
    let mut head = [0u8; 4];
    let (fds, n) = sys::recv_fds(conn, &mut head).map_err(|e| InitError::sys("recvmsg", e))?;
    let stdio: [OwnedFd; 3] = fds.try_into().map_err(|_| bad_request("it must carry exactly three fds"))?;
    let mut file = std::fs::File::from(conn.try_clone().map_err(|e| InitError::sys("dup", sys::io_errno(&e)))?);
    if let Some(rest) = head.get_mut(n..) {
        file.read_exact(rest).map_err(|e| InitError::sys("read the request", sys::io_errno(&e)))?;
    }
    let len = usize::try_from(u32::from_le_bytes(head)).unwrap_or(usize::MAX);
    if len > MAX_REQUEST {
        return Err(bad_request(format!("{len} bytes is more than {MAX_REQUEST}")));
    }
    let mut body = vec![0u8; len];
    file.read_exact(&mut body).map_err(|e| InitError::sys("read the request", sys::io_errno(&e)))?;
    let req: Request = serde_json::from_slice(&body).map_err(|e| bad_request(e.to_string()))?;
    Ok((req, stdio))
}

/// Forks the program of `req` and waits until it has been exec'd (or
/// failed to be: the child writes why on a close-on-exec pipe).
fn spawn(req: &Request, stdio: &[OwnedFd; 3], p: &ProcessConfig) -> Result<Pid, InitError> {
    let cstrings = |v: &[String], what: &str| -> Result<Vec<CString>, InitError> {
        v.iter()
            .map(|a| CString::new(a.as_str()).map_err(|_| bad_request(format!("{what} holds a NUL byte"))))
            .collect()
    };
    let args = cstrings(&req.args, "args")?;
    if args.is_empty() {
        return Err(bad_request("args is empty").field("process.args"));
    }
    cstrings(&req.env, "env")?;
    let mut env = p.env.clone();
    env.extend(req.env.iter().cloned());
    let cwd = req.cwd.as_deref().map_or_else(|| p.cwd.clone(), std::path::PathBuf::from);
    let (rd, wr) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| InitError::sys("pipe2", e))?;
    let fds = [stdio[0].as_raw_fd(), stdio[1].as_raw_fd(), stdio[2].as_raw_fd()];
    match sys::fork()? {
        Forked::Child => {
            drop(rd);
            let e = start(fds, &cwd, &args, &env, p);
            let _ = nix::unistd::write(&wr, &serde_json::to_vec(&e).unwrap_or_default());
            sys::exit_child(127)
        }
        Forked::Parent(pid) => {
            drop(wr);
            let mut why = Vec::new();
            let _ = std::fs::File::from(rd).read_to_end(&mut why);
            if why.is_empty() {
                return Ok(pid);
            }
            Err(serde_json::from_slice(&why).unwrap_or_else(|_| InitError::msg("the program failed to start")))
        }
    }
}

/// In the forked child: what `exec` does for a new process once it is in
/// the container, less what init already is. Returns only on failure.
fn start(stdio: [RawFd; 3], cwd: &std::path::Path, args: &[CString], env: &[String], p: &ProcessConfig) -> InitError {
    let run = || -> Result<InitError, InitError> {
        // Its own session, as every exec'd process: a timeout kills it.
        finalize::begin(Some(stdio))?;
        nix::unistd::chdir(cwd).map_err(|e| InitError::path("chdir", cwd, e).field("process.cwd"))?;
        super::program::verify_cwd()?;
        let program = finalize::program(args, env, p.ids.uid)?;
        Ok(finalize::exec(p, &program))
    };
    run().unwrap_or_else(|e| e)
}

/// SIGKILLs `leader` and every process in its session, a few rounds so
/// one forked meanwhile goes too. Pids are the container's: init sees its
/// own /proc.
fn kill_session(leader: Pid) {
    let _ = nix::sys::signal::kill(leader, Signal::SIGKILL);
    for _ in 0..5 {
        let Ok(dir) = std::fs::read_dir("/proc") else { return };
        let mut found = false;
        for pid in dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok()) {
            if session_of(pid) == Some(leader.as_raw()) {
                let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
                found = true;
            }
        }
        if !found {
            return;
        }
    }
}

/// Field 6 of /proc/PID/stat: the session id.
fn session_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name, which is in parentheses and may hold anything.
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    rest.split_whitespace().nth(3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::fd::{AsRawFd, OwnedFd};
    use std::os::unix::net::UnixStream;

    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};

    use super::{read_request, MAX_REQUEST};

    fn null() -> OwnedFd {
        std::fs::File::open("/dev/null").unwrap().into()
    }

    /// Sends `head` with `fds` on it, then `body` in a write of its own.
    fn send(conn: &UnixStream, head: &[u8], fds: &[OwnedFd], body: &[u8]) {
        let raw: Vec<i32> = fds.iter().map(AsRawFd::as_raw_fd).collect();
        let cmsg = [ControlMessage::ScmRights(&raw)];
        sendmsg::<()>(conn.as_raw_fd(), &[std::io::IoSlice::new(head)], &cmsg, MsgFlags::empty(), None).unwrap();
        (&*conn).write_all(body).unwrap();
    }

    fn request(len: usize) -> [u8; 4] {
        u32::try_from(len).unwrap().to_le_bytes()
    }

    #[test]
    fn a_request_split_over_writes_is_read_whole() {
        let (a, b) = UnixStream::pair().unwrap();
        let body = br#"{"args":["/bin/echo","hi"],"env":["A=1"],"cwd":"/work"}"#;
        send(&a, &request(body.len()), &[null(), null(), null()], body);
        let (req, stdio) = read_request(&OwnedFd::from(b)).unwrap();
        assert_eq!((req.args.len(), req.env, req.cwd.as_deref()), (2, vec!["A=1".to_string()], Some("/work")));
        assert_eq!(stdio.len(), 3);
    }

    #[test]
    fn a_request_without_three_fds_is_refused() {
        let (a, b) = UnixStream::pair().unwrap();
        let body = br#"{"args":["true"]}"#;
        send(&a, &request(body.len()), &[null()], body);
        let e = read_request(&OwnedFd::from(b)).unwrap_err().to_string();
        assert!(e.contains("three fds"), "{e}");
    }

    #[test]
    fn an_oversized_request_is_refused_unread() {
        let (a, b) = UnixStream::pair().unwrap();
        send(&a, &request(MAX_REQUEST + 1), &[null(), null(), null()], b"");
        let e = read_request(&OwnedFd::from(b)).unwrap_err().to_string();
        assert!(e.contains("more than"), "{e}");
    }

    #[test]
    fn a_request_cut_short_times_out() {
        let (a, b) = UnixStream::pair().unwrap();
        send(&a, &request(100), &[null(), null(), null()], b"{\"args\"");
        let t = std::time::Instant::now();
        let e = read_request(&OwnedFd::from(b)).unwrap_err().to_string();
        assert!(t.elapsed() < std::time::Duration::from_secs(5), "waited {:?}", t.elapsed());
        assert!(e.contains("read the request"), "{e}");
        drop(a);
    }
}
