//! nftables over netlink: the few objects and expressions the egress rules
//! use, encoded as the kernel reads them (`linux/netfilter/nf_tables.h`),
//! and sent as one batch, which the kernel applies whole or not at all.
//!
//! Each expression is the kernel's own building block, as `nft --debug=netlink`
//! prints them: a match is a load into register 1 (`meta`, `payload`, `ct`),
//! maybe a mask (`bitwise`), then a comparison (`cmp`) that ends the rule
//! for this packet when it fails; a rule ends with a verdict (`immediate`)
//! or a statement (`reject`, `masq`).

use std::fmt;

use nix::errno::Errno;

use super::netlink::{self, Netlink, Writer};

/// `nfgenmsg.nfgen_family`: the table families used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Family {
    /// `inet`: IPv4 and IPv6.
    Inet = 1,
    /// `ip`: IPv4 only.
    Ip = 2,
}

/// A base chain's hook (`NF_INET_*`), and what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Hook {
    pub(super) kind: &'static str,
    pub(super) hook: u32,
    pub(super) prio: i32,
    pub(super) policy: Verdict,
}

pub(super) const NF_INET_LOCAL_IN: u32 = 1;
pub(super) const NF_INET_FORWARD: u32 = 2;
pub(super) const NF_INET_LOCAL_OUT: u32 = 3;
pub(super) const NF_INET_POST_ROUTING: u32 = 4;

/// What a rule or a chain's policy decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    Drop,
    Accept,
    Jump(&'static str),
}

/// A `meta` key (`NFT_META_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Meta {
    IifName = 6,
    OifName = 7,
    NfProto = 15,
    L4Proto = 16,
}

/// Where a `payload` load reads (`NFT_PAYLOAD_*_HEADER`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Base {
    Network = 1,
    Transport = 2,
}

/// One expression of a rule; loads go to register 1, which the mask and
/// the comparisons that follow read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Expr {
    Meta(Meta),
    Payload {
        base: Base,
        offset: u32,
        len: u32,
    },
    /// The connection's tracking state (`ct state`), a bit set.
    CtState,
    /// register 1 &= the mask (as long as the mask).
    And(Vec<u8>),
    Eq(Vec<u8>),
    Ne(Vec<u8>),
    Verdict(Verdict),
    /// `reject with icmpx admin-prohibited`: refused at once, for IPv4
    /// and IPv6, TCP or not.
    Reject,
    Masquerade,
    /// The load that follows goes to 32-bit register `n` (`NFT_REG32_00`
    /// is 8, the first four bytes of register 1) instead of register 1:
    /// how a concatenated key is laid out.
    At(u32, Box<Expr>),
    /// Loads a constant (into register 1, or the one [`Expr::At`] names).
    Imm(Vec<u8>),
    /// `update @SET { key counter }`: adds the key in register 1 on to
    /// set `SET`, or counts the packet on its element. Fails, ending the
    /// rule, when the set is full.
    CountIn(&'static str),
    /// `counter name NAME`: counts the packet on a named counter.
    Counter(&'static str),
}

/// One command of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Cmd {
    /// Makes the table if it isn't there (no error if it is).
    AddTable(Family, String),
    /// Makes the table; it is an error if it is there.
    NewTable(Family, String),
    DelTable(Family, String),
    AddChain {
        family: Family,
        table: String,
        name: &'static str,
        hook: Option<Hook>,
    },
    /// A set the rules add elements to (`flags dynamic`), of at most
    /// `size` elements, keyed by fields of `fields` bytes each (each in a
    /// register of its own) of nft's datatype `key_type`.
    AddSet {
        family: Family,
        table: String,
        name: &'static str,
        fields: Vec<u32>,
        key_type: u32,
        size: u32,
    },
    /// A named counter.
    AddCounter {
        family: Family,
        table: String,
        name: &'static str,
    },
    /// Appends a rule to the chain.
    AddRule {
        family: Family,
        table: String,
        chain: &'static str,
        exprs: Vec<Expr>,
    },
}

const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
const NFNL_MSG_BATCH_END: u16 = 0x11;
const NFT_MSG_NEWTABLE: u16 = 0;
const NFT_MSG_GETTABLE: u16 = 1;
const NFT_MSG_DELTABLE: u16 = 2;
const NFT_MSG_NEWCHAIN: u16 = 3;
const NFT_MSG_NEWRULE: u16 = 6;
const NFT_MSG_NEWSET: u16 = 9;
const NFT_MSG_GETSETELEM: u16 = 13;
const NFT_MSG_NEWOBJ: u16 = 18;
const NFT_MSG_GETOBJ: u16 = 19;
/// `NFT_OBJECT_COUNTER`.
const OBJ_COUNTER: u32 = 1;

/// `struct nfgenmsg`: family, version 0, resource id (big-endian).
fn nfgen(family: u8, res_id: u16) -> [u8; 4] {
    let r = res_id.to_be_bytes();
    [family, 0, r[0], r[1]]
}

fn msg_type(msg: u16) -> u16 {
    (NFNL_SUBSYS_NFTABLES << 8) | msg
}

/// A netfilter socket of the calling thread's network namespace.
///
/// Closing one while a transaction's removals (a box's table) are still to
/// be freed waits for the kernel to free them, an RCU grace period of
/// several milliseconds: on the release of any netfilter socket the kernel
/// flushes its pending destroy work. So a dropped socket is not closed but
/// parked, and closed when the next one is opened (before that one's
/// transaction) or when the process exits, by when the work has run.
pub(super) struct Nft(Option<Netlink>);

static PARKED: std::sync::Mutex<Option<Netlink>> = std::sync::Mutex::new(None);

impl Drop for Nft {
    fn drop(&mut self) {
        if let (Some(sock), Ok(mut parked)) = (self.0.take(), PARKED.lock()) {
            *parked = Some(sock);
        }
    }
}

impl Nft {
    pub(super) fn open() -> nix::Result<Nft> {
        if let Ok(mut parked) = PARKED.lock() {
            parked.take();
        }
        Netlink::open(netlink::NETLINK_NETFILTER).map(|s| Nft(Some(s)))
    }

    fn sock(&mut self) -> nix::Result<&mut Netlink> {
        self.0.as_mut().ok_or(Errno::EBADF)
    }

    /// Applies `cmds` as one transaction: all of it, or none.
    pub(super) fn apply(&mut self, cmds: &[Cmd]) -> nix::Result<()> {
        let (bytes, acks) = encode(cmds);
        self.sock()?.request(&bytes, acks)
    }

    /// Every table: (family, name).
    pub(super) fn tables(&mut self) -> nix::Result<Vec<(u8, String)>> {
        const NFTA_TABLE_NAME: u16 = 1;
        let mut w = Writer::default();
        w.begin(msg_type(NFT_MSG_GETTABLE), netlink::NLM_F_REQUEST | netlink::NLM_F_DUMP, &nfgen(0, 0));
        w.end();
        let mut out = Vec::new();
        for m in self.sock()?.fetch(&w.buf)? {
            let family = *m.get(16).ok_or(Errno::EBADMSG)?;
            if let Some((_, name)) = netlink::attrs(&m, 4).find(|(k, _)| *k == NFTA_TABLE_NAME) {
                let name = name.strip_suffix(&[0]).unwrap_or(name);
                out.push((family, String::from_utf8_lossy(name).into_owned()));
            }
        }
        Ok(out)
    }

    /// The elements of set `set` of table `table`: (key, packets counted).
    pub(super) fn counted_elements(
        &mut self,
        family: Family,
        table: &str,
        set: &str,
    ) -> nix::Result<Vec<(Vec<u8>, u64)>> {
        let mut w = Writer::default();
        let flags = netlink::NLM_F_REQUEST | netlink::NLM_F_DUMP;
        w.begin(msg_type(NFT_MSG_GETSETELEM), flags, &nfgen(family as u8, 0));
        w.str(1, table); // NFTA_SET_ELEM_LIST_TABLE
        w.str(2, set); // NFTA_SET_ELEM_LIST_SET
        w.end();
        let mut out = Vec::new();
        for m in self.sock()?.fetch(&w.buf)? {
            // NFTA_SET_ELEM_LIST_ELEMENTS, each an NFTA_LIST_ELEM
            for (_, elems) in netlink::attrs(&m, 4).filter(|(k, _)| *k == 3) {
                out.extend(netlink::nested(elems).filter(|(k, _)| *k == 1).filter_map(|(_, e)| counted_element(e)));
            }
        }
        Ok(out)
    }

    /// The packets named counter `name` of table `table` has counted.
    pub(super) fn counter(&mut self, family: Family, table: &str, name: &str) -> nix::Result<u64> {
        let mut w = Writer::default();
        w.begin(msg_type(NFT_MSG_GETOBJ), netlink::NLM_F_REQUEST, &nfgen(family as u8, 0));
        w.str(1, table); // NFTA_OBJ_TABLE
        w.str(2, name); // NFTA_OBJ_NAME
        w.be32(3, OBJ_COUNTER); // NFTA_OBJ_TYPE
        w.end();
        let reply = self.sock()?.fetch(&w.buf)?;
        // NFTA_OBJ_DATA
        let data = reply.iter().flat_map(|m| netlink::attrs(m, 4)).find(|(k, _)| *k == 4).map(|(_, d)| d.to_vec());
        data.as_deref().and_then(packets).ok_or(Errno::EBADMSG)
    }
}

/// An `NFTA_LIST_ELEM` of a set element dump: its key
/// (`NFTA_SET_ELEM_KEY`'s `NFTA_DATA_VALUE`) and its counter's packets
/// (`NFTA_SET_ELEM_EXPR`, or the first of `NFTA_SET_ELEM_EXPRESSIONS`);
/// an element without both is not one the rules made.
fn counted_element(elem: &[u8]) -> Option<(Vec<u8>, u64)> {
    let (mut key, mut count) = (None, None);
    for (k, v) in netlink::nested(elem) {
        match k {
            1 => key = netlink::nested(v).find(|(k, _)| *k == 1).map(|(_, v)| v.to_vec()),
            7 => count = counter_expr(v),
            11 => count = netlink::nested(v).find_map(|(_, e)| counter_expr(e)),
            _ => {}
        }
    }
    Some((key?, count?))
}

/// The packets of a `counter` expression (`NFTA_EXPR_NAME`, `NFTA_EXPR_DATA`).
fn counter_expr(e: &[u8]) -> Option<u64> {
    let mut it = netlink::nested(e);
    let name = it.clone().find(|(k, _)| *k == 1).map(|(_, v)| v)?;
    if name != b"counter\0" {
        return None;
    }
    it.find(|(k, _)| *k == 2).and_then(|(_, d)| packets(d))
}

/// `NFTA_COUNTER_PACKETS` of a counter's data, big-endian.
fn packets(data: &[u8]) -> Option<u64> {
    let (_, v) = netlink::nested(data).find(|(k, _)| *k == 2)?;
    Some(u64::from_be_bytes(v.try_into().ok()?))
}

/// The batch's bytes, and how many of its messages are acknowledged.
fn encode(cmds: &[Cmd]) -> (Vec<u8>, usize) {
    use netlink::{NLM_F_ACK, NLM_F_APPEND, NLM_F_CREATE, NLM_F_REQUEST};
    let mut w = Writer::default();
    w.begin(NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, &nfgen(0, NFNL_SUBSYS_NFTABLES));
    w.end();
    for c in cmds {
        let ack = NLM_F_REQUEST | NLM_F_ACK;
        match c {
            Cmd::AddTable(f, name) | Cmd::NewTable(f, name) | Cmd::DelTable(f, name) => {
                let (kind, flags) = match c {
                    Cmd::AddTable(..) => (NFT_MSG_NEWTABLE, ack | NLM_F_CREATE),
                    Cmd::NewTable(..) => (NFT_MSG_NEWTABLE, ack | NLM_F_CREATE | netlink::NLM_F_EXCL),
                    _ => (NFT_MSG_DELTABLE, ack),
                };
                w.begin(msg_type(kind), flags, &nfgen(*f as u8, 0));
                w.str(1, name); // NFTA_TABLE_NAME
            }
            Cmd::AddChain { family, table, name, hook } => {
                w.begin(msg_type(NFT_MSG_NEWCHAIN), ack | NLM_F_CREATE, &nfgen(*family as u8, 0));
                w.str(1, table); // NFTA_CHAIN_TABLE
                w.str(3, name); // NFTA_CHAIN_NAME
                if let Some(h) = hook {
                    w.nest(4, |w| {
                        w.be32(1, h.hook); // NFTA_HOOK_HOOKNUM
                        w.attr(2, &h.prio.to_be_bytes()); // NFTA_HOOK_PRIORITY
                    });
                    w.be32(5, verdict_code(h.policy)); // NFTA_CHAIN_POLICY
                    w.str(7, h.kind); // NFTA_CHAIN_TYPE
                }
            }
            Cmd::AddSet { family, table, name, fields, key_type, size } => {
                const NFT_SET_EVAL: u32 = 0x20;
                w.begin(msg_type(NFT_MSG_NEWSET), ack | NLM_F_CREATE, &nfgen(*family as u8, 0));
                w.str(1, table); // NFTA_SET_TABLE
                w.str(2, name); // NFTA_SET_NAME
                w.be32(3, NFT_SET_EVAL); // NFTA_SET_FLAGS
                w.be32(4, *key_type); // NFTA_SET_KEY_TYPE
                w.be32(5, fields.iter().map(|f| f.next_multiple_of(4)).sum()); // NFTA_SET_KEY_LEN
                w.be32(10, 1); // NFTA_SET_ID
                               // NFTA_SET_DESC: NFTA_SET_DESC_SIZE. No NFTA_SET_DESC_CONCAT:
                               // that is for interval sets (NFT_SET_CONCAT), as nft has it.
                w.nest(9, |w| w.be32(1, *size));
            }
            Cmd::AddCounter { family, table, name } => {
                w.begin(msg_type(NFT_MSG_NEWOBJ), ack | NLM_F_CREATE, &nfgen(*family as u8, 0));
                w.str(1, table); // NFTA_OBJ_TABLE
                w.str(2, name); // NFTA_OBJ_NAME
                w.be32(3, OBJ_COUNTER); // NFTA_OBJ_TYPE
                w.nest(4, |_| {}); // NFTA_OBJ_DATA: from zero
            }
            Cmd::AddRule { family, table, chain, exprs } => {
                w.begin(msg_type(NFT_MSG_NEWRULE), ack | NLM_F_CREATE | NLM_F_APPEND, &nfgen(*family as u8, 0));
                w.str(1, table); // NFTA_RULE_TABLE
                w.str(2, chain); // NFTA_RULE_CHAIN
                w.nest(4, |w| exprs.iter().for_each(|e| w.nest(1, |w| expr(w, e, REG))));
                // NFTA_RULE_EXPRESSIONS
            }
        }
        w.end();
    }
    w.begin(NFNL_MSG_BATCH_END, NLM_F_REQUEST, &nfgen(0, NFNL_SUBSYS_NFTABLES));
    w.end();
    (w.buf, cmds.len())
}

/// `NF_DROP`, `NF_ACCEPT`, `NFT_JUMP` (negative, as the kernel has it).
fn verdict_code(v: Verdict) -> u32 {
    match v {
        Verdict::Drop => 0,
        Verdict::Accept => 1,
        Verdict::Jump(_) => u32::from_ne_bytes((-3i32).to_ne_bytes()),
    }
}

/// Register 1 (`NFT_REG_1`) for loads and comparisons; verdicts go to
/// `NFT_REG_VERDICT` (0).
const REG: u32 = 1;

/// One `NFTA_LIST_ELEM`'s content: `NFTA_EXPR_NAME`, `NFTA_EXPR_DATA`;
/// a load goes to register `to`.
fn expr(w: &mut Writer, e: &Expr, to: u32) {
    let data = |w: &mut Writer, name: &str, f: &dyn Fn(&mut Writer)| {
        w.str(1, name);
        w.nest(2, f);
    };
    let value = |w: &mut Writer, kind: u16, v: &[u8]| w.nest(kind, |w| w.attr(1, v)); // NFTA_DATA_VALUE
    match e {
        // NFTA_META_DREG, NFTA_META_KEY
        Expr::Meta(k) => data(w, "meta", &|w| {
            w.be32(1, to);
            w.be32(2, *k as u32);
        }),
        // NFTA_PAYLOAD_DREG, _BASE, _OFFSET, _LEN
        Expr::Payload { base, offset, len } => data(w, "payload", &|w| {
            w.be32(1, to);
            w.be32(2, *base as u32);
            w.be32(3, *offset);
            w.be32(4, *len);
        }),
        // NFTA_CT_DREG, NFTA_CT_KEY (NFT_CT_STATE)
        Expr::CtState => data(w, "ct", &|w| {
            w.be32(1, REG);
            w.be32(2, 0);
        }),
        // NFTA_BITWISE_SREG, _DREG, _LEN, _MASK, _XOR: reg = (reg & mask) ^ 0
        Expr::And(mask) => data(w, "bitwise", &|w| {
            w.be32(1, REG);
            w.be32(2, REG);
            w.be32(3, u32::try_from(mask.len()).unwrap_or(u32::MAX));
            value(w, 4, mask);
            value(w, 5, &vec![0; mask.len()]);
        }),
        // NFTA_CMP_SREG, _OP (NFT_CMP_EQ 0, NFT_CMP_NEQ 1), _DATA
        Expr::Eq(v) | Expr::Ne(v) => data(w, "cmp", &|w| {
            w.be32(1, REG);
            w.be32(2, u32::from(matches!(e, Expr::Ne(_))));
            value(w, 3, v);
        }),
        // NFTA_IMMEDIATE_DREG (NFT_REG_VERDICT), NFTA_IMMEDIATE_DATA holding
        // NFTA_DATA_VERDICT: NFTA_VERDICT_CODE, NFTA_VERDICT_CHAIN
        Expr::Verdict(v) => data(w, "immediate", &|w| {
            w.be32(1, 0);
            w.nest(2, |w| {
                w.nest(2, |w| {
                    w.be32(1, verdict_code(*v));
                    if let Verdict::Jump(chain) = v {
                        w.str(2, chain);
                    }
                })
            });
        }),
        // NFTA_REJECT_TYPE (NFT_REJECT_ICMPX_UNREACH), NFTA_REJECT_ICMP_CODE
        // (NFT_REJECT_ICMPX_ADMIN_PROHIBITED, one byte)
        Expr::Reject => data(w, "reject", &|w| {
            w.be32(1, 2);
            w.attr(2, &[3]);
        }),
        Expr::Masquerade => data(w, "masq", &|_| {}),
        Expr::At(reg, load) => expr(w, load, *reg),
        // NFTA_IMMEDIATE_DREG, NFTA_IMMEDIATE_DATA
        Expr::Imm(v) => data(w, "immediate", &|w| {
            w.be32(1, to);
            value(w, 2, v);
        }),
        // NFTA_DYNSET_SET_NAME, _OP (NFT_DYNSET_OP_UPDATE), _SREG_KEY, and
        // _EXPR: a counter of the element's own
        Expr::CountIn(set) => data(w, "dynset", &|w| {
            w.str(1, set);
            w.be32(3, 1);
            w.be32(4, REG);
            w.nest(7, |w| data(w, "counter", &|_| {}));
        }),
        // NFTA_OBJREF_IMM_TYPE, NFTA_OBJREF_IMM_NAME
        Expr::Counter(name) => data(w, "objref", &|w| {
            w.be32(1, OBJ_COUNTER);
            w.str(2, name);
        }),
    }
}

/// As `nft --debug=netlink` would show it, near enough to read a rule by.
impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hex = |v: &[u8]| v.iter().map(|b| format!("{b:02x}")).collect::<String>();
        match self {
            Expr::Meta(k) => write!(f, "meta {k:?}"),
            Expr::Payload { base, offset, len } => write!(f, "payload {base:?}+{offset}/{len}"),
            Expr::CtState => write!(f, "ct state"),
            Expr::And(m) => write!(f, "& {}", hex(m)),
            Expr::Eq(v) => write!(f, "== {}", hex(v)),
            Expr::Ne(v) => write!(f, "!= {}", hex(v)),
            Expr::Verdict(v) => write!(f, "{v:?}"),
            Expr::Reject => write!(f, "reject"),
            Expr::Masquerade => write!(f, "masquerade"),
            Expr::At(reg, load) => write!(f, "{load} => reg {reg}"),
            Expr::Imm(v) => write!(f, "immediate {}", hex(v)),
            Expr::CountIn(set) => write!(f, "update @{set} counter"),
            Expr::Counter(name) => write!(f, "counter name {name}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_framed_and_acknowledged_per_command() {
        let cmds = [
            Cmd::AddTable(Family::Ip, "t".into()),
            Cmd::AddRule {
                family: Family::Ip,
                table: "t".into(),
                chain: "c",
                exprs: vec![Expr::Meta(Meta::IifName), Expr::Eq(b"trb-".to_vec()), Expr::Verdict(Verdict::Accept)],
            },
        ];
        let (bytes, acks) = encode(&cmds);
        assert_eq!(acks, 2);
        let mut types = Vec::new();
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            let len = u32::from_ne_bytes(rest[..4].try_into().unwrap()) as usize;
            types.push(u16::from_ne_bytes([rest[4], rest[5]]));
            rest = &rest[len..];
        }
        assert_eq!(types, [0x10, 0x0a00, 0x0a06, 0x11]);
        for name in ["meta", "cmp", "immediate"] {
            assert!(bytes.windows(name.len()).any(|w| w == name.as_bytes()), "{name}");
        }
    }

    /// An element as the kernel dumps it (`nf_tables_fill_setelem`): NFTA_SET_ELEM_KEY (1) holding
    /// NFTA_DATA_VALUE (1), NFTA_SET_ELEM_EXPR (7) holding a counter's NFTA_COUNTER_BYTES (1) and
    /// NFTA_COUNTER_PACKETS (2).
    #[test]
    fn a_dumped_element_gives_its_key_and_packets() {
        let mut w = Writer::default();
        w.nest(1, |w| w.attr(1, &[10, 0, 0, 1, 17, 0, 0, 0, 0, 53, 0, 0]));
        w.nest(7, |w| {
            w.str(1, "counter");
            w.nest(2, |w| {
                w.attr(1, &300u64.to_be_bytes());
                w.attr(2, &3u64.to_be_bytes());
            });
        });
        let (key, packets) = counted_element(&w.buf).expect("an element");
        assert_eq!((key.len(), key[4], packets), (12, 17, 3));
        let mut other = Writer::default();
        other.nest(1, |w| w.attr(1, &[0; 12]));
        assert_eq!(counted_element(&other.buf), None, "no counter: not one the rules made");
    }

    /// The set and its update as `nft --debug=netlink` shows `set refused { type ipv4_addr .
    /// inet_proto . inet_service; size 64; flags dynamic; }` and `update @refused { ... counter }`:
    /// `refused tt 20 size 64` (NFT_SET_EVAL), `dynset update reg_key 1 set refused expr [ counter ]`.
    #[test]
    fn the_record_set_is_encoded_as_nft_makes_it() {
        let set = Cmd::AddSet {
            family: Family::Inet,
            table: "t".into(),
            name: "refused",
            fields: vec![4, 1, 2],
            key_type: 29453,
            size: 64,
        };
        let (bytes, _) = encode(&[set]);
        let msg = &bytes[20..bytes.len() - 20];
        let attrs: Vec<(u16, Vec<u8>)> = netlink::attrs(msg, 4).map(|(k, v)| (k, v.to_vec())).collect();
        let get = |k: u16| attrs.iter().find(|(a, _)| *a == k).map(|(_, v)| v.clone()).unwrap();
        assert_eq!(get(3), 0x20u32.to_be_bytes(), "flags: dynamic (NFT_SET_EVAL)");
        assert_eq!(get(4), 29453u32.to_be_bytes(), "key type: ipv4_addr . inet_proto . inet_service");
        assert_eq!(get(5), 12u32.to_be_bytes(), "key length: three registers");
        assert_eq!(get(9), [8, 0, 1, 0, 0, 0, 0, 64], "desc: size 64 only");
        let mut w = Writer::default();
        expr(&mut w, &Expr::CountIn("refused"), REG);
        let top: Vec<(u16, Vec<u8>)> = netlink::nested(&w.buf).map(|(k, v)| (k, v.to_vec())).collect();
        assert_eq!(top[0], (1, b"dynset\0".to_vec()));
        let dynset: Vec<(u16, Vec<u8>)> = netlink::nested(&top[1].1).map(|(k, v)| (k, v.to_vec())).collect();
        assert_eq!(dynset[0], (1, b"refused\0".to_vec()));
        assert_eq!(dynset[1], (3, 1u32.to_be_bytes().to_vec()), "op: update");
        assert_eq!(dynset[2], (4, 1u32.to_be_bytes().to_vec()), "key from register 1");
        assert_eq!(
            netlink::nested(&dynset[3].1).next().map(|(k, v)| (k, v.to_vec())),
            Some((1, b"counter\0".to_vec()))
        );
    }
}
