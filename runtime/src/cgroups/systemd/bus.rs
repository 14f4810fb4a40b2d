//! A blocking connection to a D-Bus bus, or straight to systemd's private
//! socket, for the driver's few calls: connect, authenticate (SASL
//! EXTERNAL: the peer credentials of the socket), `Hello`, then method
//! calls, each answered in order, and the signals a match asks for.
//!
//! Everything is bounded by a deadline: the connect (`SO_SNDTIMEO` bounds
//! a unix `connect` waiting on a full backlog), the authentication, and
//! each call with its reply. A bus or systemd that stops answering makes
//! the call fail naming the wait, never hangs `create` or `delete`.
//!
//! Written here rather than taken from a crate: the calls are few, and
//! the D-Bus crates either bring an async runtime (zbus), link libdbus
//! and its dependencies into every start of the binary (dbus), or block
//! without a deadline in their authentication (rustbus); libcgroups'
//! client is private to its own systemd manager.

use std::io::{ErrorKind, Read};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::socket::{self, sockopt, AddressFamily, MsgFlags, SockFlag, SockType, UnixAddr};
use nix::sys::time::{TimeVal, TimeValLike};

use super::wire::{self, Call, Message, Writer};

/// Where a bus listens: one entry of a D-Bus address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Addr {
    Path(PathBuf),
    Abstract(Vec<u8>),
}

/// A call that failed: systemd's (or the bus's) error reply, or no usable
/// answer at all.
#[derive(Debug)]
pub(super) struct Failure {
    /// The error reply's name (`org.freedesktop.systemd1.NoSuchUnit`).
    pub(super) name: Option<String>,
    pub(super) why: String,
}

impl Failure {
    fn bus(why: impl Into<String>) -> Failure {
        Failure { name: None, why: why.into() }
    }
}

/// Signals kept while waiting for a reply, at most (a flood of matching
/// signals must not grow memory without end).
const MAX_KEPT: usize = 256;

pub(super) struct Conn {
    stream: UnixStream,
    /// Bytes read past the last message or line.
    inbuf: Vec<u8>,
    serial: u32,
    /// How long the connect, and then each call, may take.
    patience: Duration,
    /// The (interface, member) of the signals to keep, and those kept.
    watch: Option<(&'static str, &'static str)>,
    signals: Vec<Message>,
}

impl Conn {
    /// Connects to `addr`, authenticates and, on a bus (not `direct` to
    /// systemd, which has no `Hello`), says Hello.
    pub(super) fn open(addr: &Addr, direct: bool, patience: Duration) -> Result<Conn, Failure> {
        let deadline = Deadline::after(patience);
        let stream = connect(addr, patience).map_err(|e| Failure::bus(format!("connect to {addr:?}: {e}")))?;
        let mut conn = Conn { stream, inbuf: Vec::new(), serial: 0, patience, watch: None, signals: Vec::new() };
        conn.auth(deadline)?;
        if !direct {
            let hello = Call {
                destination: Some("org.freedesktop.DBus"),
                path: "/org/freedesktop/DBus",
                interface: "org.freedesktop.DBus",
                member: "Hello",
                signature: "",
                body: Vec::new(),
                flags: 0,
            };
            conn.call(&hello)?;
        }
        Ok(conn)
    }

    /// SASL EXTERNAL with no identity given: the bus takes the socket's
    /// peer credentials, which are right inside a user namespace too
    /// (where our uid is not the one the bus sees).
    fn auth(&mut self, deadline: Deadline) -> Result<(), Failure> {
        self.send(b"\0AUTH EXTERNAL\r\n", deadline)?;
        let mut line = self.line(deadline)?;
        if line == "DATA" {
            self.send(b"DATA\r\n", deadline)?;
            line = self.line(deadline)?;
        }
        if !line.starts_with("OK ") {
            return Err(Failure::bus(format!("the bus refused to authenticate us: {line:?}")));
        }
        self.send(b"BEGIN\r\n", deadline)
    }

    /// Makes the bus pass on the signals `rule` matches (on a `direct`
    /// connection systemd sends them all), and keeps those of `member`.
    pub(super) fn watch(&mut self, rule: &str, direct: bool, interface: &'static str, member: &'static str) {
        self.watch = Some((interface, member));
        if direct {
            return;
        }
        let mut body = Writer::default();
        body.str(rule);
        // No reply wanted: the bus handles our messages in order, so the
        // match is in place before the call that follows is passed on.
        let call = Call {
            destination: Some("org.freedesktop.DBus"),
            path: "/org/freedesktop/DBus",
            interface: "org.freedesktop.DBus",
            member: "AddMatch",
            signature: "s",
            body: body.buf,
            flags: wire::NO_REPLY_EXPECTED,
        };
        let deadline = Deadline::after(self.patience);
        self.serial += 1;
        // A failed send shows up as a failed call right after.
        let _ = self.send(&call.encode(self.serial), deadline);
    }

    /// Sends `call` and returns its reply; an error reply is a `Failure`
    /// with its name and message.
    pub(super) fn call(&mut self, call: &Call) -> Result<Message, Failure> {
        let deadline = Deadline::after(self.patience);
        self.serial += 1;
        let serial = self.serial;
        self.send(&call.encode(serial), deadline)?;
        loop {
            let m = self.message(deadline)?;
            match m.kind {
                wire::METHOD_RETURN if m.reply_to == Some(serial) => return Ok(m),
                wire::ERROR if m.reply_to == Some(serial) => {
                    let text = if m.signature.starts_with('s') { m.args().str().ok() } else { None };
                    let name = m.error_name.clone().unwrap_or_default();
                    return Err(Failure { why: format!("{name}: {}", text.unwrap_or_default()), name: Some(name) });
                }
                wire::SIGNAL => self.keep(m),
                // NameAcquired and the like.
                _ => {}
            }
        }
    }

    fn keep(&mut self, m: Message) {
        let Some((iface, member)) = self.watch else { return };
        if m.interface.as_deref() == Some(iface) && m.member.as_deref() == Some(member) {
            if self.signals.len() == MAX_KEPT {
                self.signals.remove(0);
            }
            self.signals.push(m);
        }
    }

    /// The first watched signal `want` accepts, kept or still to come,
    /// waiting at most `patience`.
    pub(super) fn signal(&mut self, patience: Duration, want: impl Fn(&Message) -> bool) -> Result<Message, Failure> {
        let deadline = Deadline::after(patience);
        loop {
            if let Some(i) = self.signals.iter().position(&want) {
                return Ok(self.signals.remove(i));
            }
            let m = self.message(deadline)?;
            if m.kind == wire::SIGNAL {
                self.keep(m);
            }
        }
    }

    fn message(&mut self, deadline: Deadline) -> Result<Message, Failure> {
        self.fill(16, deadline)?;
        let fixed: [u8; 16] = self.inbuf[..16].try_into().map_err(|_| Failure::bus("a short message"))?;
        let len = wire::message_len(&fixed).map_err(|e| Failure::bus(format!("the bus sent {e}")))?;
        self.fill(len, deadline)?;
        let m = Message::decode(&self.inbuf[..len]).map_err(|e| Failure::bus(format!("the bus sent {e}")));
        self.inbuf.drain(..len);
        m
    }

    /// One `\r\n`-ended line of the authentication exchange.
    fn line(&mut self, deadline: Deadline) -> Result<String, Failure> {
        loop {
            if let Some(end) = self.inbuf.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&self.inbuf[..end]).into_owned();
                self.inbuf.drain(..end + 2);
                return Ok(line);
            }
            if self.inbuf.len() > 1024 {
                return Err(Failure::bus("the bus sent an authentication line over 1 KiB"));
            }
            let want = self.inbuf.len() + 1;
            self.fill(want, deadline)?;
        }
    }

    /// Reads until `inbuf` holds at least `n` bytes.
    fn fill(&mut self, n: usize, deadline: Deadline) -> Result<(), Failure> {
        let mut chunk = [0u8; 4096];
        while self.inbuf.len() < n {
            let left = deadline.left()?;
            self.stream.set_read_timeout(Some(left)).map_err(|e| Failure::bus(format!("set a read timeout: {e}")))?;
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err(Failure::bus("the bus closed the connection")),
                Ok(got) => self.inbuf.extend_from_slice(&chunk[..got]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Err(deadline.passed())
                }
                Err(e) => return Err(Failure::bus(format!("read from the bus: {e}"))),
            }
        }
        Ok(())
    }

    /// Writes all of `buf`; MSG_NOSIGNAL: a bus gone away is an error
    /// here, not a SIGPIPE.
    fn send(&mut self, mut buf: &[u8], deadline: Deadline) -> Result<(), Failure> {
        while !buf.is_empty() {
            let left = deadline.left()?;
            self.stream.set_write_timeout(Some(left)).map_err(|e| Failure::bus(format!("set a write timeout: {e}")))?;
            match socket::send(self.stream.as_raw_fd(), buf, MsgFlags::MSG_NOSIGNAL) {
                Ok(n) => buf = &buf[n..],
                Err(Errno::EINTR) => {}
                Err(Errno::EAGAIN) => return Err(deadline.passed()),
                Err(e) => return Err(Failure::bus(format!("write to the bus: {e}"))),
            }
        }
        Ok(())
    }
}

/// When a wait ends, and how long it was given (for the message).
#[derive(Clone, Copy)]
struct Deadline {
    at: Instant,
    patience: Duration,
}

impl Deadline {
    fn after(patience: Duration) -> Deadline {
        Deadline { at: Instant::now() + patience, patience }
    }

    /// The time left, or the failure saying none is.
    fn left(&self) -> Result<Duration, Failure> {
        match self.at.checked_duration_since(Instant::now()) {
            Some(d) if !d.is_zero() => Ok(d),
            _ => Err(self.passed()),
        }
    }

    fn passed(&self) -> Failure {
        Failure::bus(format!("no answer from systemd within {} ms", self.patience.as_millis()))
    }
}

/// A unix stream socket connected to `addr`, the connect given up after
/// `patience` (it waits only while the listener's backlog is full).
fn connect(addr: &Addr, patience: Duration) -> nix::Result<UnixStream> {
    let fd = socket::socket(AddressFamily::Unix, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)?;
    // A zero timeout would mean none: at least a microsecond.
    let micros = i64::try_from(patience.as_micros()).unwrap_or(i64::MAX).max(1);
    socket::setsockopt(&fd, sockopt::SendTimeout, &TimeVal::microseconds(micros))?;
    let sa = match addr {
        Addr::Path(p) => UnixAddr::new(p.as_path())?,
        Addr::Abstract(name) => UnixAddr::new_abstract(name)?,
    };
    socket::connect(fd.as_raw_fd(), &sa)?;
    Ok(UnixStream::from(fd))
}

/// The unix addresses in a D-Bus address list (`unix:path=/run/user/1000/bus;...`),
/// in order; other transports are left out.
pub(super) fn parse_addresses(list: &str) -> Vec<Addr> {
    let mut out = Vec::new();
    for entry in list.split(';') {
        let Some(params) = entry.strip_prefix("unix:") else { continue };
        for kv in params.split(',') {
            match kv.split_once('=') {
                Some(("path", v)) => out.push(Addr::Path(PathBuf::from(unescape(v)))),
                Some(("abstract", v)) => out.push(Addr::Abstract(unescape_bytes(v))),
                _ => {}
            }
        }
    }
    out
}

fn unescape(v: &str) -> String {
    String::from_utf8_lossy(&unescape_bytes(v)).into_owned()
}

/// D-Bus addresses escape bytes as `%XX`.
fn unescape_bytes(v: &str) -> Vec<u8> {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (b[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::wire::tests::incoming;
    use super::*;
    use std::io::Write;
    use std::os::unix::net::UnixListener;

    fn get_unit() -> Call<'static> {
        let mut body = Writer::default();
        body.str("x.scope");
        Call {
            destination: Some("org.freedesktop.systemd1"),
            path: "/org/freedesktop/systemd1",
            interface: "org.freedesktop.systemd1.Manager",
            member: "GetUnit",
            signature: "s",
            body: body.buf,
            flags: 0,
        }
    }

    /// A bus that authenticates and answers Hello (serial 1), then reads
    /// what comes and answers nothing more.
    fn silent_bus(dir: &std::path::Path) -> (Addr, std::thread::JoinHandle<()>) {
        let path = dir.join("bus");
        let listener = UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 4096];
            let mut got = Vec::new();
            let mut wait_for = |s: &mut UnixStream, what: &[u8]| {
                while !got.windows(what.len()).any(|w| w == what) {
                    let n = s.read(&mut buf).unwrap();
                    assert!(n > 0, "client went away before sending {what:?}");
                    got.extend_from_slice(&buf[..n]);
                }
                got.clear();
            };
            wait_for(&mut s, b"AUTH EXTERNAL\r\n");
            s.write_all(b"DATA\r\n").unwrap();
            wait_for(&mut s, b"DATA\r\n");
            s.write_all(b"OK 0123456789abcdef\r\n").unwrap();
            wait_for(&mut s, b"Hello");
            s.write_all(&incoming(wire::METHOD_RETURN, &[(5, "u", "1"), (8, "g", "s")], b"\x04\0\0\0:1.9\0")).unwrap();
            // Hold the connection open, unanswered, until the client hangs up.
            while s.read(&mut buf).is_ok_and(|n| n > 0) {}
        });
        (Addr::Path(path), server)
    }

    #[test]
    fn a_call_without_an_answer_is_given_up_at_its_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let (addr, server) = silent_bus(dir.path());
        let mut conn = Conn::open(&addr, false, Duration::from_millis(300)).expect("authenticated and said Hello");
        let t = Instant::now();
        let e = conn.call(&get_unit()).unwrap_err();
        let took = t.elapsed();
        assert!(took >= Duration::from_millis(250) && took < Duration::from_secs(5), "{took:?}");
        assert!(e.why.contains("no answer from systemd within 300 ms") && e.name.is_none(), "{e:?}");
        let e = conn.signal(Duration::from_millis(50), |_| true).unwrap_err();
        assert!(e.why.contains("no answer from systemd within 50 ms"), "a signal's wait has its own deadline: {e:?}");
        drop(conn);
        server.join().unwrap();
    }

    #[test]
    fn a_bus_that_never_speaks_fails_the_connect_in_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bus");
        // Listening, never accepting: the connect lands in the backlog and
        // the authentication then waits for an answer that never comes.
        let _listener = UnixListener::bind(&path).unwrap();
        let t = Instant::now();
        let e = Conn::open(&Addr::Path(path), false, Duration::from_millis(200)).err().expect("no answer");
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        assert!(e.why.contains("no answer from systemd"), "{e:?}");
        let e = Conn::open(&Addr::Path(dir.path().join("none")), false, Duration::from_millis(200)).err().unwrap();
        assert!(e.why.contains("connect to") && e.why.contains("none"), "{e:?}");
    }

    #[test]
    fn a_refused_authentication_names_the_answer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bus");
        let listener = UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 64];
            let _ = s.read(&mut buf).unwrap();
            s.write_all(b"REJECTED EXTERNAL\r\n").unwrap();
        });
        let e = Conn::open(&Addr::Path(path), false, Duration::from_secs(5)).err().unwrap();
        assert!(e.why.contains("refused") && e.why.contains("REJECTED"), "{e:?}");
        server.join().unwrap();
    }

    #[test]
    fn addresses_are_read_as_the_specification_writes_them() {
        let got = parse_addresses("tcp:host=x,port=1;unix:path=/run/user/1000/bus,guid=ab;unix:abstract=%2ftmp%2Fd");
        assert_eq!(got, vec![Addr::Path("/run/user/1000/bus".into()), Addr::Abstract(b"/tmp/d".to_vec())]);
        assert!(parse_addresses("unix:runtime=yes").is_empty());
        assert_eq!(unescape("a%2"), "a%2", "a cut escape stays as it is");
    }
}
