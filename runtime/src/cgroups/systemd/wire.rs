//! The D-Bus message format (the D-Bus specification, "Message
//! Protocol"), only as far as the driver's calls to systemd need it:
//! method calls out with arguments of the types systemd's unit properties
//! use (`s b t as au ay a(ss)`, in `a(sv)`), and replies, errors and signals
//! in, read as far as strings, object paths, a variant holding one, and
//! the `uoss` of JobRemoved. Messages go out in the host's byte order;
//! either order is read, as the specification asks.
//!
//! Every read is bounds-checked: a short or malformed message is an
//! error, never a panic.

/// The most a message may take (the specification allows 128 MiB);
/// systemd's replies to these calls are a few hundred bytes.
pub(super) const MAX_MESSAGE: usize = 8 << 20;

/// Message types.
pub(super) const METHOD_CALL: u8 = 1;
pub(super) const METHOD_RETURN: u8 = 2;
pub(super) const ERROR: u8 = 3;
pub(super) const SIGNAL: u8 = 4;

/// Header flag: the caller wants no reply (AddMatch, sent ahead of the
/// call whose job it watches).
pub(super) const NO_REPLY_EXPECTED: u8 = 0x1;

/// Header field codes.
const PATH: u8 = 1;
const INTERFACE: u8 = 2;
const MEMBER: u8 = 3;
const ERROR_NAME: u8 = 4;
const REPLY_SERIAL: u8 = 5;
const DESTINATION: u8 = 6;
const SIGNATURE: u8 = 8;

/// A value the driver sends: a unit property's, or a method argument.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Value {
    Str(String),
    Bool(bool),
    U64(u64),
    /// `as`: a list of units (Wants).
    Strs(Vec<String>),
    U32s(Vec<u32>),
    Bytes(Vec<u8>),
    /// `a(ss)`: DeviceAllow's (path, permissions) pairs.
    Pairs(Vec<(String, String)>),
}

impl Value {
    fn signature(&self) -> &'static str {
        match self {
            Value::Str(_) => "s",
            Value::Bool(_) => "b",
            Value::U64(_) => "t",
            Value::Strs(_) => "as",
            Value::U32s(_) => "au",
            Value::Bytes(_) => "ay",
            Value::Pairs(_) => "a(ss)",
        }
    }
}

/// A unit property as StartTransientUnit and SetUnitProperties take it.
pub(super) type Prop = (&'static str, Value);

/// Marshals values at the alignments the format asks, counted from the
/// start of the buffer (a body starts 8-aligned in its message, so a
/// body's own buffer counts the same).
#[derive(Default)]
pub(super) struct Writer {
    pub(super) buf: Vec<u8>,
}

impl Writer {
    fn pad(&mut self, align: usize) {
        while !self.buf.len().is_multiple_of(align) {
            self.buf.push(0);
        }
    }

    fn len32(n: usize) -> u32 {
        // Nothing the driver sends comes near 4 GiB; the bus refuses an
        // oversized message whatever this says.
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    pub(super) fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }

    pub(super) fn u32(&mut self, v: u32) {
        self.pad(4);
        self.buf.extend_from_slice(&v.to_ne_bytes());
    }

    pub(super) fn u64(&mut self, v: u64) {
        self.pad(8);
        self.buf.extend_from_slice(&v.to_ne_bytes());
    }

    pub(super) fn bool(&mut self, v: bool) {
        self.u32(u32::from(v));
    }

    /// A string or an object path.
    pub(super) fn str(&mut self, s: &str) {
        self.u32(Self::len32(s.len()));
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
    }

    pub(super) fn sig(&mut self, s: &str) {
        self.buf.push(u8::try_from(s.len()).unwrap_or(u8::MAX));
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
    }

    /// An array whose elements align to `align`, written by `each`. The
    /// length counts the elements only, not the padding before the first.
    pub(super) fn array(&mut self, align: usize, each: impl FnOnce(&mut Self)) {
        self.u32(0);
        let at = self.buf.len() - 4;
        self.pad(align);
        let start = self.buf.len();
        each(self);
        let len = Self::len32(self.buf.len() - start);
        self.buf[at..at + 4].copy_from_slice(&len.to_ne_bytes());
    }

    fn value(&mut self, v: &Value) {
        match v {
            Value::Str(s) => self.str(s),
            Value::Bool(b) => self.bool(*b),
            Value::U64(n) => self.u64(*n),
            Value::Strs(ss) => self.array(4, |w| ss.iter().for_each(|s| w.str(s))),
            Value::U32s(ns) => self.array(4, |w| ns.iter().for_each(|n| w.u32(*n))),
            Value::Bytes(bs) => self.array(1, |w| w.buf.extend_from_slice(bs)),
            Value::Pairs(ps) => self.array(8, |w| {
                for (a, b) in ps {
                    w.pad(8);
                    w.str(a);
                    w.str(b);
                }
            }),
        }
    }

    /// `a(sv)`.
    pub(super) fn props(&mut self, props: &[Prop]) {
        self.array(8, |w| {
            for (name, v) in props {
                w.pad(8);
                w.str(name);
                w.sig(v.signature());
                w.value(v);
            }
        });
    }
}

/// An outgoing method call.
pub(super) struct Call<'a> {
    pub(super) destination: Option<&'a str>,
    pub(super) path: &'a str,
    pub(super) interface: &'a str,
    pub(super) member: &'a str,
    /// The body's signature, and the body.
    pub(super) signature: &'a str,
    pub(super) body: Vec<u8>,
    pub(super) flags: u8,
}

impl Call<'_> {
    /// The whole message, numbered `serial`.
    pub(super) fn encode(&self, serial: u32) -> Vec<u8> {
        let mut w = Writer::default();
        w.u8(if cfg!(target_endian = "big") { b'B' } else { b'l' });
        w.u8(METHOD_CALL);
        w.u8(self.flags);
        w.u8(1);
        w.u32(Writer::len32(self.body.len()));
        w.u32(serial);
        let mut fields: Vec<(u8, &str, &str)> =
            vec![(PATH, "o", self.path), (INTERFACE, "s", self.interface), (MEMBER, "s", self.member)];
        fields.extend(self.destination.map(|d| (DESTINATION, "s", d)));
        if !self.signature.is_empty() {
            fields.push((SIGNATURE, "g", self.signature));
        }
        w.array(8, |w| {
            for (code, sig, v) in fields {
                w.pad(8);
                w.u8(code);
                w.sig(sig);
                if sig == "g" {
                    w.sig(v);
                } else {
                    w.str(v);
                }
            }
        });
        w.pad(8);
        w.buf.extend_from_slice(&self.body);
        w.buf
    }
}

/// An incoming message, its header read.
#[derive(Debug, Default)]
pub(super) struct Message {
    pub(super) kind: u8,
    pub(super) reply_to: Option<u32>,
    pub(super) error_name: Option<String>,
    pub(super) path: Option<String>,
    pub(super) interface: Option<String>,
    pub(super) member: Option<String>,
    pub(super) signature: String,
    big: bool,
    body: Vec<u8>,
}

/// How long the message whose first 16 bytes are `fixed` is in all.
pub(super) fn message_len(fixed: &[u8; 16]) -> Result<usize, String> {
    let big = match fixed[0] {
        b'l' => false,
        b'B' => true,
        b => return Err(format!("a message with byte order mark {b:#04x}")),
    };
    let num = |at: usize| {
        let b = [fixed[at], fixed[at + 1], fixed[at + 2], fixed[at + 3]];
        usize::try_from(if big { u32::from_be_bytes(b) } else { u32::from_le_bytes(b) }).unwrap_or(usize::MAX)
    };
    let fields = num(12).checked_add(7).map(|n| n & !7);
    let total = fields.and_then(|f| f.checked_add(16)).and_then(|n| n.checked_add(num(4)));
    match total {
        Some(n) if n <= MAX_MESSAGE => Ok(n),
        _ => Err(format!("a message longer than {MAX_MESSAGE} bytes")),
    }
}

impl Message {
    /// Reads a whole message (`message_len` bytes).
    pub(super) fn decode(buf: &[u8]) -> Result<Message, String> {
        let mut r = Reader { buf, pos: 0, big: buf.first() == Some(&b'B') };
        r.u8()?;
        let mut m = Message { kind: r.u8()?, big: r.big, ..Message::default() };
        r.u8()?; // flags
        if r.u8()? != 1 {
            return Err("a message of another protocol version".into());
        }
        let body_len = usize::try_from(r.u32()?).map_err(|_| "a body too long")?;
        r.u32()?; // serial
        let fields_len = usize::try_from(r.u32()?).map_err(|_| "a header too long")?;
        let end = r.pos.checked_add(fields_len).ok_or("a header too long")?;
        while r.pos < end {
            r.align(8)?;
            let code = r.u8()?;
            let sig = r.sig()?;
            let text = match sig.as_str() {
                "s" | "o" => Some(r.str()?),
                "g" => Some(r.sig()?),
                "u" => {
                    let n = r.u32()?;
                    if code == REPLY_SERIAL {
                        m.reply_to = Some(n);
                    }
                    None
                }
                other => return Err(format!("a header field of type {other:?}")),
            };
            match (code, text) {
                (PATH, t) => m.path = t,
                (INTERFACE, t) => m.interface = t,
                (MEMBER, t) => m.member = t,
                (ERROR_NAME, t) => m.error_name = t,
                (SIGNATURE, Some(t)) => m.signature = t,
                _ => {}
            }
        }
        r.align(8)?;
        m.body = r.take(body_len)?.to_vec();
        Ok(m)
    }

    /// The body, for reading its arguments in order.
    pub(super) fn args(&self) -> Reader<'_> {
        Reader { buf: &self.body, pos: 0, big: self.big }
    }
}

/// Reads a body's values in order.
pub(super) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    big: bool,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self.pos.checked_add(n).filter(|e| *e <= self.buf.len()).ok_or("a message cut short")?;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn align(&mut self, n: usize) -> Result<(), String> {
        let pad = (n - self.pos % n) % n;
        self.take(pad).map(|_| ())
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    pub(super) fn u32(&mut self) -> Result<u32, String> {
        self.align(4)?;
        let b: [u8; 4] = self.take(4)?.try_into().map_err(|_| "a message cut short")?;
        Ok(if self.big { u32::from_be_bytes(b) } else { u32::from_le_bytes(b) })
    }

    fn text(&mut self, len: usize) -> Result<String, String> {
        let bytes = self.take(len)?.to_vec();
        if self.u8()? != 0 {
            return Err("a string without its terminating NUL".into());
        }
        String::from_utf8(bytes).map_err(|_| "a string that is not UTF-8".into())
    }

    /// A string or an object path.
    pub(super) fn str(&mut self) -> Result<String, String> {
        let len = usize::try_from(self.u32()?).map_err(|_| "a string too long")?;
        self.text(len)
    }

    fn sig(&mut self) -> Result<String, String> {
        let len = usize::from(self.u8()?);
        self.text(len)
    }

    /// A variant holding a string or an object path (a property's value).
    pub(super) fn variant_str(&mut self) -> Result<String, String> {
        match self.sig()?.as_str() {
            "s" | "o" => self.str(),
            other => Err(format!("a value of type {other:?} where a string was expected")),
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A message as a bus would send it, with `fields` (code, value of
    /// type `sig`) and `body`.
    pub(crate) fn incoming(kind: u8, fields: &[(u8, &str, &str)], body: &[u8]) -> Vec<u8> {
        let mut w = Writer::default();
        w.u8(if cfg!(target_endian = "big") { b'B' } else { b'l' });
        w.u8(kind);
        w.u8(0);
        w.u8(1);
        w.u32(Writer::len32(body.len()));
        w.u32(9);
        w.array(8, |w| {
            for (code, sig, v) in fields {
                w.pad(8);
                w.u8(*code);
                w.sig(sig);
                match *sig {
                    "g" => w.sig(v),
                    "u" => w.u32(v.parse().unwrap()),
                    _ => w.str(v),
                }
            }
        });
        w.pad(8);
        w.buf.extend_from_slice(body);
        w.buf
    }

    #[test]
    fn a_call_encodes_as_the_specification_lays_it_out() {
        let mut body = Writer::default();
        body.str("x.scope");
        body.bool(true);
        let call = Call {
            destination: Some("org.freedesktop.systemd1"),
            path: "/org/freedesktop/systemd1",
            interface: "org.freedesktop.systemd1.Manager",
            member: "M",
            signature: "sb",
            body: body.buf,
            flags: 0,
        };
        let msg = call.encode(7);
        assert_eq!(&msg[1..4], &[METHOD_CALL, 0, 1]);
        let fixed: [u8; 16] = msg[..16].try_into().unwrap();
        assert_eq!(message_len(&fixed).unwrap(), msg.len());
        let back = Message::decode(&msg).unwrap();
        assert_eq!(back.path.as_deref(), Some("/org/freedesktop/systemd1"));
        assert_eq!((back.member.as_deref(), back.signature.as_str()), (Some("M"), "sb"));
        let mut args = back.args();
        assert_eq!(args.str().unwrap(), "x.scope");
        assert_eq!(args.u32().unwrap(), 1, "a boolean is a u32");
        assert!(args.u32().is_err(), "nothing past the body");
    }

    #[test]
    fn properties_marshal_with_their_signatures_and_padding() {
        let mut w = Writer::default();
        w.props(&[
            ("A", Value::Bytes(vec![0b1011])),
            ("B", Value::U64(5)),
            ("C", Value::Pairs(vec![("/dev/null".into(), "rw".into())])),
            ("D", Value::U32s(vec![42])),
            ("E", Value::Strs(vec!["system.slice".into()])),
        ]);
        let b = &w.buf;
        let ne = |n: u32| n.to_ne_bytes();
        // Array length, then (pad to 8) struct "A", variant "ay" [len 1, byte].
        assert_eq!(&b[4..8], &[0; 4], "padding before the first struct");
        assert_eq!(&b[8..12], &ne(1));
        assert_eq!(&b[12..14], b"A\0");
        assert_eq!(&b[14..18], b"\x02ay\0");
        assert_eq!(&b[18..20], &[0, 0], "padding before the array's length");
        assert_eq!((&b[20..24], b[24]), (&ne(1)[..], 0b1011));
        let len = u32::from_ne_bytes(b[..4].try_into().unwrap());
        assert_eq!(usize::try_from(len).unwrap(), b.len() - 8, "the length counts from the first struct");
        assert!(b.windows(7).any(|x| x == b"\x05a(ss)\0"));
        assert!(b.windows(10).any(|x| x == b"/dev/null\0"));
        assert!(b.windows(4).any(|x| x == b"\x02as\0") && b.windows(13).any(|x| x == b"system.slice\0"));
    }

    #[test]
    fn replies_errors_and_signals_are_read_with_their_header() {
        let mut body = Writer::default();
        body.u32(3);
        body.str("/org/freedesktop/systemd1/job/3");
        body.str("x.scope");
        body.str("done");
        let fields = [
            (PATH, "o", "/org/freedesktop/systemd1"),
            (INTERFACE, "s", "org.freedesktop.systemd1.Manager"),
            (MEMBER, "s", "JobRemoved"),
            (SIGNATURE, "g", "uoss"),
        ];
        let m = Message::decode(&incoming(SIGNAL, &fields, &body.buf)).unwrap();
        assert_eq!((m.kind, m.member.as_deref()), (SIGNAL, Some("JobRemoved")));
        let mut a = m.args();
        assert_eq!(a.u32().unwrap(), 3);
        assert_eq!(a.str().unwrap(), "/org/freedesktop/systemd1/job/3");
        assert_eq!((a.str().unwrap(), a.str().unwrap()), ("x.scope".into(), "done".into()));

        let mut body = Writer::default();
        body.str("Unit x.scope already exists.");
        let fields =
            [(ERROR_NAME, "s", "org.freedesktop.systemd1.UnitExists"), (REPLY_SERIAL, "u", "4"), (SIGNATURE, "g", "s")];
        let m = Message::decode(&incoming(ERROR, &fields, &body.buf)).unwrap();
        assert_eq!((m.kind, m.reply_to), (ERROR, Some(4)));
        assert_eq!(m.error_name.as_deref(), Some("org.freedesktop.systemd1.UnitExists"));
    }

    #[test]
    fn malformed_messages_are_errors_not_panics() {
        let mut body = Writer::default();
        body.sig("s");
        body.str("active");
        let good = incoming(METHOD_RETURN, &[(REPLY_SERIAL, "u", "2"), (SIGNATURE, "g", "v")], &body.buf);
        assert_eq!(Message::decode(&good).unwrap().args().variant_str().unwrap(), "active");
        for cut in 0..good.len() {
            assert!(Message::decode(&good[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad = good.clone();
        bad[3] = 2;
        assert!(Message::decode(&bad).is_err(), "protocol version 2");
        let mut huge = [0u8; 16];
        huge[0] = b'l';
        huge[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(message_len(&huge).unwrap_err().contains("longer"));
        huge[0] = b'x';
        assert!(message_len(&huge).is_err());
        let mut body = Writer::default();
        body.sig("t");
        body.u64(1);
        let m = Message::decode(&incoming(METHOD_RETURN, &[(SIGNATURE, "g", "v")], &body.buf)).unwrap();
        assert!(m.args().variant_str().unwrap_err().contains("\"t\""));
    }
}
