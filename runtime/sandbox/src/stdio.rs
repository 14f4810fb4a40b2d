//! A sandboxed command's stdin, stdout and stderr, seen from the runtime
//! process (`tinyrun sandbox run/exec`).
//!
//! stdin is /dev/null unless the caller asked for it (`-i`), as with
//! `docker exec`. Output is captured into the result (`--json`), or goes
//! to our own stdout and stderr.
//!
//! A one-shot box's init is the command, and the box dies with it: it may
//! hold our fds directly. A program a launched box's resident init runs
//! may leave processes behind that outlive this call, so it never gets
//! our fds: its output comes through pipes that we copy on (or capture),
//! and with `-i` its stdin is a pipe we feed. Once we have the command's
//! status, init takes over the output pipes and empties them into nothing,
//! and the stdin pipe closes: what the command left running never writes
//! to our terminal, never reads our input and never sees EPIPE.

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::Path;

use nix::errno::Errno;

use crate::error::{Error, Result};
use crate::result::Output;

/// Most bytes of our stdin held while the box's stdin pipe is full.
const FEED_BUF: usize = 64 << 10;

/// The command's stdio, and our ends of it.
pub(crate) struct Stdio {
    /// The box's fds 0, 1 and 2, as raw numbers (some may be ours).
    fds: [RawFd; 3],
    /// The box's ends that we made, closed once the box has its copies.
    given: Vec<OwnedFd>,
    /// Read ends of the output pipes (non-blocking), stdout then stderr.
    pub out: Option<OwnedFd>,
    pub err: Option<OwnedFd>,
    /// Copies our stdin into the box's stdin pipe.
    pub feed: Option<Feed>,
    /// Output goes into the result, not to our stdout and stderr.
    pub capture: bool,
}

fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(Error::sys("pipe"))
}

fn dev_null() -> Result<OwnedFd> {
    let null = Path::new("/dev/null");
    Ok(std::fs::File::open(null).map_err(|e| Error::io("open", null, e))?.into())
}

/// Our read end of `p`, non-blocking (its write end stays blocking: it is
/// another open file, and the box's programs expect a blocking stdout).
fn reader(p: &(OwnedFd, OwnedFd)) -> Result<OwnedFd> {
    let r = p.0.try_clone().map_err(|e| Error::io("dup", "pipe", e))?;
    set_nonblocking(&r)?;
    Ok(r)
}

fn set_nonblocking(fd: &OwnedFd) -> Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let flags = fcntl(fd.as_raw_fd(), FcntlArg::F_GETFL).map_err(Error::sys("fcntl"))?;
    let flags = OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK;
    fcntl(fd.as_raw_fd(), FcntlArg::F_SETFL(flags)).map(drop).map_err(Error::sys("fcntl"))
}

impl Stdio {
    /// For a one-shot box's init: our fds when not capturing, pipes when
    /// capturing; stdin ours only if `interactive`.
    pub(crate) fn direct(capture: bool, interactive: bool) -> Result<Stdio> {
        let mut s = Stdio { fds: [0, 1, 2], given: Vec::new(), out: None, err: None, feed: None, capture };
        if !interactive {
            let null = dev_null()?;
            s.fds[0] = null.as_raw_fd();
            s.given.push(null);
        }
        if capture {
            s.outputs()?;
        }
        Ok(s)
    }

    /// For a program a resident init runs: pipes only (see the module
    /// doc).
    pub(crate) fn piped(capture: bool, interactive: bool) -> Result<Stdio> {
        let mut s = Stdio { fds: [0, 1, 2], given: Vec::new(), out: None, err: None, feed: None, capture };
        let stdin = if interactive {
            let (r, w) = pipe()?;
            set_nonblocking(&w)?;
            s.feed = Some(Feed { to: Some(w), buf: Vec::new(), eof: false });
            r
        } else {
            dev_null()?
        };
        s.fds[0] = stdin.as_raw_fd();
        s.given.push(stdin);
        s.outputs()?;
        Ok(s)
    }

    fn outputs(&mut self) -> Result<()> {
        let (out, err) = (pipe()?, pipe()?);
        self.out = Some(reader(&out)?);
        self.err = Some(reader(&err)?);
        self.fds[1] = out.1.as_raw_fd();
        self.fds[2] = err.1.as_raw_fd();
        self.given.extend([out.0, out.1, err.0, err.1]);
        Ok(())
    }

    /// What the box's fds 0, 1 and 2 become.
    pub(crate) fn fds(&self) -> [RawFd; 3] {
        self.fds
    }

    /// The read ends a resident init empties once we are done.
    pub(crate) fn drained(&self) -> Vec<RawFd> {
        [&self.out, &self.err].into_iter().flatten().map(AsRawFd::as_raw_fd).collect()
    }

    /// The box has its copies: ours of its ends close, so reads see end
    /// of file once the box is done with them.
    pub(crate) fn started(&mut self) {
        self.given.clear();
    }
}

/// Copies what is readable on `fd` into `sink` (kept up to `cap`), or
/// onto our own stdout (stderr if `is_err`) when not capturing; false at
/// end of file.
pub(crate) fn drain(fd: &OwnedFd, sink: &mut Output, cap: usize, capture: bool, is_err: bool) -> bool {
    use std::io::Write;
    let mut buf = [0u8; 16 * 1024];
    match nix::unistd::read(fd.as_raw_fd(), &mut buf) {
        Ok(0) => false,
        Err(Errno::EAGAIN) | Err(Errno::EINTR) => true,
        Err(_) => false,
        Ok(n) => {
            let got = buf.get(..n).unwrap_or_default();
            if capture {
                let room = cap.saturating_sub(sink.bytes.len());
                if n > room {
                    sink.truncated = true;
                    sink.cut = sink.cut.saturating_add(u64::try_from(n - room).unwrap_or(u64::MAX));
                }
                sink.bytes.extend_from_slice(got.get(..room.min(n)).unwrap_or_default());
            } else {
                // A reader of ours that went away loses the rest.
                let _ = if is_err {
                    std::io::stderr().write_all(got)
                } else {
                    let mut out = std::io::stdout().lock();
                    out.write_all(got).and_then(|()| out.flush())
                };
            }
            true
        }
    }
}

/// Our stdin, copied into the box's stdin pipe as the box reads it.
pub(crate) struct Feed {
    /// The pipe's write end (non-blocking); `None` once closed.
    to: Option<OwnedFd>,
    buf: Vec<u8>,
    /// Our stdin reached its end.
    eof: bool,
}

impl Feed {
    /// Whether to poll our stdin (room to read into) or the pipe (bytes
    /// to write).
    pub(crate) fn wants(&self) -> (bool, bool) {
        let open = self.to.is_some();
        (open && !self.eof && self.buf.is_empty(), open && !self.buf.is_empty())
    }

    /// The pipe's write end, while open.
    pub(crate) fn pipe(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.to.as_ref().map(AsFd::as_fd)
    }

    /// Our stdin is readable.
    pub(crate) fn read_ours(&mut self) {
        let mut buf = vec![0u8; FEED_BUF];
        match nix::unistd::read(0, &mut buf) {
            Ok(0) | Err(Errno::EBADF) => self.eof = true,
            Ok(n) => self.buf.extend_from_slice(buf.get(..n).unwrap_or_default()),
            Err(_) => {}
        }
        self.close_if_done();
    }

    /// The pipe has room.
    pub(crate) fn write_box(&mut self) {
        let Some(to) = &self.to else { return };
        match nix::unistd::write(to, &self.buf) {
            Ok(n) => {
                self.buf.drain(..n.min(self.buf.len()));
            }
            Err(Errno::EAGAIN) | Err(Errno::EINTR) => {}
            // The box closed its stdin: nothing more to give it.
            Err(_) => {
                self.to = None;
                self.buf.clear();
            }
        }
        self.close_if_done();
    }

    /// At our end of file, once all is written, the box sees its own.
    fn close_if_done(&mut self) {
        if self.eof && self.buf.is_empty() {
            self.to = None;
        }
    }
}
