//! A synchronous netlink socket, for both families egress speaks:
//! `NETLINK_ROUTE` (links, addresses, routes) and `NETLINK_NETFILTER`
//! (nftables). One request at a time, read back before the next is sent:
//! no runtime, no thread, and the kernel's answer is known when a call
//! returns. Every read is bounded, so a kernel that never answers is an
//! error (`EAGAIN`), not a hang.
//!
//! Messages are bytes here: link.rs has them encoded by
//! `netlink-packet-route`, nft.rs encodes its own.

use nix::errno::Errno;
use nix::sys::socket::{setsockopt, sockopt};
use nix::sys::time::TimeVal;

pub(super) use netlink_sys::protocols::{NETLINK_NETFILTER, NETLINK_ROUTE};

/// `struct nlmsghdr`'s size, and the types every family shares.
const HEADER: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;

pub(super) const NLM_F_REQUEST: u16 = 0x1;
pub(super) const NLM_F_ACK: u16 = 0x4;
pub(super) const NLM_F_DUMP: u16 = 0x300;
pub(super) const NLM_F_CREATE: u16 = 0x400;
pub(super) const NLM_F_EXCL: u16 = 0x200;
pub(super) const NLM_F_APPEND: u16 = 0x800;

/// How long the kernel may take to answer one read.
const TIMEOUT_S: i64 = 5;

pub(super) struct Netlink {
    socket: netlink_sys::Socket,
    buf: Vec<u8>,
}

impl Netlink {
    /// A socket of `protocol` in the calling thread's network namespace.
    pub(super) fn open(protocol: isize) -> nix::Result<Netlink> {
        let io = |e: std::io::Error| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO));
        let mut socket = netlink_sys::Socket::new(protocol).map_err(io)?;
        socket.bind_auto().map_err(io)?;
        socket.connect(&netlink_sys::SocketAddr::new(0, 0)).map_err(io)?;
        setsockopt(&socket, sockopt::ReceiveTimeout, &TimeVal::new(TIMEOUT_S, 0))?;
        Ok(Netlink { socket, buf: Vec::with_capacity(64 * 1024) })
    }

    fn send(&self, msgs: &[u8]) -> nix::Result<()> {
        let sent = self.socket.send(msgs, 0).map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?;
        if sent == msgs.len() {
            Ok(())
        } else {
            Err(Errno::EMSGSIZE)
        }
    }

    /// Reads one datagram and hands each message in it to `each` as
    /// (type, whole message), until `each` says it has all it wants.
    fn read(&mut self, mut each: impl FnMut(u16, &[u8]) -> nix::Result<bool>) -> nix::Result<()> {
        loop {
            self.buf.clear();
            let n = match self.socket.recv(&mut self.buf, 0) {
                Ok(n) => n,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Err(Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))),
            };
            let mut rest = &self.buf[..n.min(self.buf.len())];
            while rest.len() >= HEADER {
                let len = u32::from_ne_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
                if len < HEADER || len > rest.len() {
                    return Err(Errno::EBADMSG);
                }
                let kind = u16::from_ne_bytes([rest[4], rest[5]]);
                if each(kind, &rest[..len])? {
                    return Ok(());
                }
                rest = &rest[align(len).min(rest.len())..];
            }
        }
    }

    /// Sends `msgs`, in which `acks` messages ask for an acknowledgement,
    /// and waits for them: the first error the kernel answers with ends it.
    pub(super) fn request(&mut self, msgs: &[u8], acks: usize) -> nix::Result<()> {
        self.send(msgs)?;
        let mut left = acks;
        if left == 0 {
            return Ok(());
        }
        self.read(|kind, msg| match kind {
            NLMSG_ERROR => {
                error_of(msg)?;
                left -= 1;
                Ok(left == 0)
            }
            _ => Ok(false),
        })
    }

    /// Sends one request and returns the messages it is answered with (one
    /// for a get, many for a dump), each whole with its header.
    pub(super) fn fetch(&mut self, msg: &[u8]) -> nix::Result<Vec<Vec<u8>>> {
        let dump = flags_of(msg) & NLM_F_DUMP == NLM_F_DUMP;
        self.send(msg)?;
        let mut out = Vec::new();
        self.read(|kind, m| match kind {
            NLMSG_ERROR => error_of(m).map(|()| true),
            NLMSG_DONE => Ok(true),
            _ => {
                out.push(m.to_vec());
                Ok(!dump)
            }
        })?;
        Ok(out)
    }
}

fn flags_of(msg: &[u8]) -> u16 {
    msg.get(6..8).map_or(0, |f| u16::from_ne_bytes([f[0], f[1]]))
}

/// The errno an `NLMSG_ERROR` carries; 0 is an acknowledgement.
fn error_of(msg: &[u8]) -> nix::Result<()> {
    let code = msg.get(HEADER..HEADER + 4).ok_or(Errno::EBADMSG)?;
    match i32::from_ne_bytes([code[0], code[1], code[2], code[3]]) {
        0 => Ok(()),
        e => Err(Errno::from_raw(-e)),
    }
}

pub(super) fn align(n: usize) -> usize {
    (n + 3) & !3
}

/// Builds netlink messages into one buffer: a header, a fixed family
/// header, then attributes, nested or not.
#[derive(Default)]
pub(super) struct Writer {
    pub(super) buf: Vec<u8>,
    seq: u32,
    start: usize,
}

impl Writer {
    /// Starts a message of `kind` with `flags`, followed by `fixed` (the
    /// family's own header).
    pub(super) fn begin(&mut self, kind: u16, flags: u16, fixed: &[u8]) {
        self.start = self.buf.len();
        self.seq += 1;
        self.buf.extend_from_slice(&0u32.to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(&flags.to_ne_bytes());
        self.buf.extend_from_slice(&self.seq.to_ne_bytes());
        self.buf.extend_from_slice(&0u32.to_ne_bytes());
        self.buf.extend_from_slice(fixed);
        self.pad();
    }

    /// Ends the message [`Writer::begin`] started: its length goes in.
    pub(super) fn end(&mut self) {
        self.set_len(self.start);
    }

    pub(super) fn attr(&mut self, kind: u16, payload: &[u8]) {
        let at = self.buf.len();
        self.buf.extend_from_slice(&[0; 4]);
        self.buf.extend_from_slice(payload);
        self.set_attr_len(at, kind);
        self.pad();
    }

    pub(super) fn str(&mut self, kind: u16, s: &str) {
        let mut z = s.as_bytes().to_vec();
        z.push(0);
        self.attr(kind, &z);
    }

    /// A 32-bit value, in network order as nftables wants its numbers.
    pub(super) fn be32(&mut self, kind: u16, v: u32) {
        self.attr(kind, &v.to_be_bytes());
    }

    /// A nested attribute holding what `f` writes.
    pub(super) fn nest(&mut self, kind: u16, f: impl FnOnce(&mut Writer)) {
        const NLA_F_NESTED: u16 = 1 << 15;
        let at = self.buf.len();
        self.buf.extend_from_slice(&[0; 4]);
        f(self);
        self.set_attr_len(at, kind | NLA_F_NESTED);
    }

    fn set_attr_len(&mut self, at: usize, kind: u16) {
        let len = u16::try_from(self.buf.len() - at).unwrap_or(u16::MAX);
        self.buf[at..at + 2].copy_from_slice(&len.to_ne_bytes());
        self.buf[at + 2..at + 4].copy_from_slice(&kind.to_ne_bytes());
    }

    fn set_len(&mut self, at: usize) {
        let len = u32::try_from(self.buf.len() - at).unwrap_or(u32::MAX);
        self.buf[at..at + 4].copy_from_slice(&len.to_ne_bytes());
    }

    fn pad(&mut self) {
        self.buf.resize(align(self.buf.len()), 0);
    }
}

/// The attributes of a message past its netlink header and `fixed` bytes
/// of family header: (type without flags, payload).
pub(super) fn attrs(msg: &[u8], fixed: usize) -> impl Iterator<Item = (u16, &[u8])> + Clone {
    nested(msg.get(HEADER + fixed..).unwrap_or_default())
}

/// The attributes a nested attribute's payload holds.
pub(super) fn nested(payload: &[u8]) -> impl Iterator<Item = (u16, &[u8])> + Clone {
    let mut rest = payload;
    std::iter::from_fn(move || {
        if rest.len() < 4 {
            return None;
        }
        let len = usize::from(u16::from_ne_bytes([rest[0], rest[1]]));
        let kind = u16::from_ne_bytes([rest[2], rest[3]]) & 0x3fff;
        if len < 4 || len > rest.len() {
            return None;
        }
        let payload = &rest[4..len];
        rest = &rest[align(len).min(rest.len())..];
        Some((kind, payload))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_and_attributes_round_trip() {
        let mut w = Writer::default();
        w.begin(16, NLM_F_REQUEST, &[1, 0, 0, 10]);
        w.str(1, "tinyrun");
        w.nest(2, |w| w.be32(1, 7));
        w.end();
        assert_eq!(w.buf.len() % 4, 0);
        assert_eq!(u32::from_ne_bytes(w.buf[..4].try_into().unwrap()) as usize, w.buf.len());
        let got: Vec<(u16, Vec<u8>)> = attrs(&w.buf, 4).map(|(k, p)| (k, p.to_vec())).collect();
        assert_eq!(got[0], (1, b"tinyrun\0".to_vec()));
        assert_eq!(got[1], (2, vec![8, 0, 1, 0, 0, 0, 0, 7]));
        assert_eq!(flags_of(&w.buf), NLM_F_REQUEST);
    }
}
