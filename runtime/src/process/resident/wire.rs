//! What a caller and a resident init say to each other: the [`Request`]
//! (length-prefixed JSON with its fds), read without blocking and within a
//! deadline, and the [`Reply`] lines. Shared by both sides.

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use nix::errno::Errno;

use crate::cgroups::LeafFds;
use crate::error::InitError;
use crate::seccomp::refusals::Refusals;
use crate::sys;

/// Largest request accepted: args and env as execve takes them (ARG_MAX
/// is 2 MiB with the default stack limit), with room for JSON's escapes.
pub(crate) const MAX_REQUEST: usize = 4 << 20;

/// How long a caller has, from being accepted, to send its whole request.
pub(crate) const REQUEST_PATIENCE: Duration = Duration::from_secs(2);

/// Most read ends of output pipes a request may hand over for draining.
const MAX_DRAINED: usize = 2;

/// What to run. `env` is merged over the container's `process.env` (an
/// entry per name, the caller's winning), `cwd` replaces its `process.cwd`.
///
/// The fds on its first bytes, in order: the program's stdin, stdout and
/// stderr (with `terminal`, one console socket instead); `drain` read ends of its output pipes, which init empties once
/// the caller is done so that what the program left running can go on
/// writing; the program's cgroup, `cgroup.procs` then `cgroup.kill` (v2),
/// or `tasks` then `freezer.state` (v1).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Request {
    pub args: Vec<String>,
    #[serde(default)]
    pub env: Vec<String>,
    #[serde(default)]
    pub cwd: Option<String>,
    /// Kill what the program left running as soon as it exits.
    #[serde(default)]
    pub kill_children: bool,
    #[serde(default)]
    pub drain: usize,
    /// The program's cgroup is a v2 one.
    pub cgroup_v2: bool,
    /// The container has no cgroup (an unprivileged caller's, where none
    /// is delegated to it): no cgroup fds come, the program stays in
    /// init's cgroup, and killing it kills its process group. Every other
    /// request runs its program in a cgroup of its own.
    #[serde(default)]
    pub no_cgroup: bool,
    /// Nothing to run, no fds: init answers with its record of refused
    /// calls ([`Reply::Refused`]) and closes.
    #[serde(default)]
    pub report: bool,
    /// The program runs on a terminal of the container's own, never one
    /// of the caller's: its forked child opens a pty from the container's
    /// /dev/ptmx, sends the master on the console socket that comes in
    /// place of the three stdio fds (as to a `--console-socket`), and
    /// takes the slave as its stdio and controlling terminal before it
    /// execs. Nothing to drain: its output is on the terminal.
    #[serde(default)]
    pub terminal: bool,
    /// With `terminal`: its size as (rows, columns).
    #[serde(default)]
    pub console_size: Option<(u16, u16)>,
}

/// What init answers, one JSON object per line.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Reply {
    /// The program runs, as this pid of the container's pid namespace.
    /// `refused`, here and below: the container's record of refused calls
    /// then (empty when init does not answer them).
    Started {
        pid: i32,
        #[serde(default, skip_serializing_if = "Refusals::is_empty")]
        refused: Refusals,
    },
    /// It could not be run.
    Failed(InitError),
    /// It exited with this status.
    Exited {
        code: i32,
        #[serde(default, skip_serializing_if = "Refusals::is_empty")]
        refused: Refusals,
    },
    /// A signal ended it.
    Signaled {
        signal: i32,
        #[serde(default, skip_serializing_if = "Refusals::is_empty")]
        refused: Refusals,
    },
    /// The answer to a [`Request::report`].
    Refused(Refusals),
}

/// What a whole request asks for.
#[derive(Debug)]
pub(crate) enum Asked {
    /// A program to run.
    Run(Received),
    /// The record of refused calls.
    Report,
}

/// What a program's stdio is made of.
#[derive(Debug)]
pub(crate) enum Stdio {
    /// Its fds 0, 1 and 2.
    Fds([OwnedFd; 3]),
    /// Where its terminal's master goes ([`Request::terminal`]).
    Console(OwnedFd),
}

/// A whole request and the fds that came with it, sorted.
#[derive(Debug)]
pub(crate) struct Received {
    pub req: Request,
    pub stdio: Stdio,
    pub drain: Vec<OwnedFd>,
    /// `None` only with [`Request::no_cgroup`].
    pub leaf: Option<LeafFds>,
}

fn bad_request(why: impl Into<String>) -> InitError {
    InitError::other("read the request", why)
}

/// A connection whose request is still arriving.
pub(crate) struct Incoming {
    pub conn: OwnedFd,
    pub deadline: Instant,
    bytes: Vec<u8>,
    fds: Vec<OwnedFd>,
}

impl Incoming {
    /// `conn` must be non-blocking.
    pub(crate) fn new(conn: OwnedFd, now: Instant) -> Incoming {
        Incoming { conn, deadline: now + REQUEST_PATIENCE, bytes: Vec::new(), fds: Vec::new() }
    }

    /// Reads what has arrived; the request once it is whole. Never blocks.
    pub(crate) fn advance(&mut self) -> Result<Option<Asked>, InitError> {
        loop {
            let want = self.missing()?;
            if want == 0 {
                return self.finish().map(Some);
            }
            let mut buf = vec![0u8; want.min(64 << 10)];
            let (fds, n) = match sys::recv_fds(&self.conn, &mut buf) {
                Err(Errno::EAGAIN) => return Ok(None),
                Err(e) => return Err(InitError::sys("read the request", e)),
                Ok(got) => got,
            };
            self.fds.extend(fds);
            if n == 0 {
                return Err(bad_request("the caller left before sending it whole"));
            }
            self.bytes.extend_from_slice(buf.get(..n).unwrap_or_default());
        }
    }

    /// Bytes still to come: the length prefix, then the body it names.
    fn missing(&self) -> Result<usize, InitError> {
        let Some(head) = self.bytes.get(..4).and_then(|h| <[u8; 4]>::try_from(h).ok()) else {
            return Ok(4 - self.bytes.len());
        };
        let len = usize::try_from(u32::from_le_bytes(head)).unwrap_or(usize::MAX);
        if len > MAX_REQUEST {
            return Err(bad_request(format!("{len} bytes is more than {MAX_REQUEST}")));
        }
        Ok((4 + len).saturating_sub(self.bytes.len()))
    }

    fn finish(&mut self) -> Result<Asked, InitError> {
        let body = self.bytes.get(4..).unwrap_or_default();
        let req: Request = serde_json::from_slice(body).map_err(|e| bad_request(e.to_string()))?;
        if req.report {
            if !self.fds.is_empty() {
                return Err(bad_request("a report request carries no fds"));
            }
            return Ok(Asked::Report);
        }
        sort_fds(req, std::mem::take(&mut self.fds)).map(Asked::Run)
    }
}

/// Splits `fds` as `req` says they come.
fn sort_fds(req: Request, fds: Vec<OwnedFd>) -> Result<Received, InitError> {
    if req.terminal && req.drain > 0 {
        return Err(bad_request("a program on a terminal has no output pipes to drain"));
    }
    let cgroup = if req.no_cgroup { 0 } else { 2 };
    let (stdio, what) = if req.terminal { (1, "1 console socket") } else { (3, "3 fds of stdio") };
    if req.drain > MAX_DRAINED || fds.len() != stdio + req.drain + cgroup {
        let want = format!("it must carry {what}, {} to drain and {cgroup} of its cgroup", req.drain);
        return Err(bad_request(format!("{want}; it carries {}", fds.len())));
    }
    let mut it = fds.into_iter();
    let mut next = || it.next().ok_or_else(|| bad_request("fds missing"));
    let stdio = if req.terminal { Stdio::Console(next()?) } else { Stdio::Fds([next()?, next()?, next()?]) };
    let drain = (0..req.drain).map(|_| next()).collect::<Result<Vec<_>, _>>()?;
    let leaf = if req.no_cgroup { None } else { Some(LeafFds { procs: next()?, ctl: next()?, v2: req.cgroup_v2 }) };
    Ok(Received { req, stdio, drain, leaf })
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::fd::{AsRawFd, OwnedFd};
    use std::os::unix::net::UnixStream;
    use std::time::Instant;

    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};

    use super::{Asked, Incoming, MAX_REQUEST, REQUEST_PATIENCE};

    fn null() -> OwnedFd {
        std::fs::File::open("/dev/null").unwrap().into()
    }

    fn nulls(n: usize) -> Vec<OwnedFd> {
        (0..n).map(|_| null()).collect()
    }

    /// Sends `head` with `fds` on it, then `body` in a write of its own.
    fn send(conn: &UnixStream, head: &[u8], fds: &[OwnedFd], body: &[u8]) {
        let raw: Vec<i32> = fds.iter().map(AsRawFd::as_raw_fd).collect();
        let cmsg = [ControlMessage::ScmRights(&raw)];
        sendmsg::<()>(conn.as_raw_fd(), &[std::io::IoSlice::new(head)], &cmsg, MsgFlags::empty(), None).unwrap();
        (&*conn).write_all(body).unwrap();
    }

    fn head(len: usize) -> [u8; 4] {
        u32::try_from(len).unwrap().to_le_bytes()
    }

    fn incoming() -> (UnixStream, Incoming) {
        let (a, b) = UnixStream::pair().unwrap();
        b.set_nonblocking(true).unwrap();
        (a, Incoming::new(OwnedFd::from(b), Instant::now()))
    }

    #[test]
    fn a_request_is_read_as_it_trickles_in() {
        let (a, mut inc) = incoming();
        assert!(inc.advance().unwrap().is_none(), "nothing sent yet");
        let body = br#"{"args":["/bin/echo","hi"],"env":["A=1"],"cwd":"/work","drain":2,"cgroup_v2":true}"#;
        send(&a, &head(body.len()), &nulls(7), &body[..10]);
        assert!(inc.advance().unwrap().is_none(), "a part of the body");
        (&a).write_all(&body[10..]).unwrap();
        let Asked::Run(got) = inc.advance().unwrap().unwrap() else { panic!("not a program") };
        assert_eq!((got.req.args.len(), got.req.env, got.req.cwd.as_deref()), (2, vec!["A=1".into()], Some("/work")));
        assert_eq!(got.drain.len(), 2);
        assert!(got.leaf.is_some_and(|l| l.v2) && !got.req.kill_children);
        assert!(inc.deadline <= Instant::now() + REQUEST_PATIENCE);
    }

    #[test]
    fn a_request_without_its_fds_or_cgroup_is_refused() {
        for (body, fds) in [(&br#"{"args":["true"],"cgroup_v2":false}"#[..], 3), (br#"{"args":["true"]}"#, 5)] {
            let (a, mut inc) = incoming();
            send(&a, &head(body.len()), &nulls(fds), body);
            let e = inc.advance().unwrap_err().to_string();
            assert!(e.contains("fds") || e.contains("cgroup_v2"), "{e}");
        }
    }

    #[test]
    fn a_request_without_a_cgroup_carries_no_cgroup_fds() {
        let body = br#"{"args":["true"],"cgroup_v2":false,"no_cgroup":true}"#;
        let (a, mut inc) = incoming();
        send(&a, &head(body.len()), &nulls(3), body);
        let Asked::Run(got) = inc.advance().unwrap().unwrap() else { panic!("not a program") };
        assert!(got.leaf.is_none());
        // Cgroup fds where it says there is no cgroup: refused.
        let (a, mut inc) = incoming();
        send(&a, &head(body.len()), &nulls(5), body);
        assert!(inc.advance().unwrap_err().to_string().contains("0 of its cgroup"));
    }

    #[test]
    fn a_request_for_a_terminal_carries_one_console_socket_and_nothing_to_drain() {
        let body = br#"{"args":["sh"],"cgroup_v2":false,"no_cgroup":true,"terminal":true,"console_size":[24,80]}"#;
        let (a, mut inc) = incoming();
        send(&a, &head(body.len()), &nulls(1), body);
        let Asked::Run(got) = inc.advance().unwrap().unwrap() else { panic!("not a program") };
        assert!(matches!(got.stdio, super::Stdio::Console(_)) && got.req.console_size == Some((24, 80)));
        // Three stdio fds, or pipes to drain, with a terminal: refused.
        let (a, mut inc) = incoming();
        send(&a, &head(body.len()), &nulls(3), body);
        assert!(inc.advance().unwrap_err().to_string().contains("1 console socket"));
        let body = br#"{"args":["sh"],"cgroup_v2":false,"no_cgroup":true,"terminal":true,"drain":1}"#;
        let (a, mut inc) = incoming();
        send(&a, &head(body.len()), &nulls(2), body);
        assert!(inc.advance().unwrap_err().to_string().contains("no output pipes"));
    }

    #[test]
    fn a_report_request_carries_nothing_else() {
        let body = br#"{"args":[],"cgroup_v2":false,"report":true}"#;
        let (a, mut inc) = incoming();
        send(&a, &head(body.len()), &[], body);
        assert!(matches!(inc.advance().unwrap(), Some(Asked::Report)));
        let (a, mut inc) = incoming();
        send(&a, &head(body.len()), &nulls(1), body);
        assert!(inc.advance().unwrap_err().to_string().contains("no fds"));
    }

    #[test]
    fn an_oversized_request_is_refused_unread() {
        let (a, mut inc) = incoming();
        send(&a, &head(MAX_REQUEST + 1), &nulls(5), b"");
        let e = inc.advance().unwrap_err().to_string();
        assert!(e.contains("more than"), "{e}");
    }

    #[test]
    fn a_caller_that_leaves_midway_is_an_error_not_a_wait() {
        let (a, mut inc) = incoming();
        send(&a, &head(100), &nulls(5), b"{\"args\"");
        assert!(inc.advance().unwrap().is_none());
        drop(a);
        let e = inc.advance().unwrap_err().to_string();
        assert!(e.contains("left before"), "{e}");
    }
}
