//! The box's nftables table, as the commands of one transaction ([`nft`]).

use super::nft::{self, Cmd, Expr, Family, Hook, Meta, Verdict};
use super::*;

/// `meta nfproto ipv4`, `meta l4proto tcp` / `udp` values.
const NFPROTO_IPV4: u8 = 2;
const TCP: u8 = 6;
const UDP: u8 = 17;

/// `meta iifname NAME` / `oifname NAME`: the name as the kernel keeps it,
/// NUL-padded to IFNAMSIZ. A bare prefix (no NUL) matches every name that
/// starts with it, as nft's `"trb-*"` does.
fn ifname(key: Meta, name: &str, whole: bool, cmp: fn(Vec<u8>) -> Expr) -> Vec<Expr> {
    let mut v = name.as_bytes().to_vec();
    if whole {
        v.resize(16, 0);
    }
    vec![Expr::Meta(key), cmp(v)]
}

fn iifname(name: &str) -> Vec<Expr> {
    ifname(Meta::IifName, name, true, Expr::Eq)
}

fn oifname(name: &str) -> Vec<Expr> {
    ifname(Meta::OifName, name, true, Expr::Eq)
}

/// Names starting with `prefix`, in or out.
pub(super) fn ifname_prefix(key: Meta, prefix: &str) -> Vec<Expr> {
    ifname(key, prefix, false, Expr::Eq)
}

fn ipv4() -> Vec<Expr> {
    vec![Expr::Meta(Meta::NfProto), Expr::Eq(vec![NFPROTO_IPV4])]
}

/// IPv4's source (12) or destination (16) address, loaded; in an `inet`
/// table only after [`ipv4`], as nft puts it, so an IPv6 header is never
/// read as one.
fn addr(offset: u32) -> Vec<Expr> {
    let mut v = ipv4();
    v.push(Expr::Payload { base: nft::Base::Network, offset, len: 4 });
    v
}

fn saddr(ip: Ipv4Addr) -> Vec<Expr> {
    [addr(12), vec![Expr::Eq(ip.octets().to_vec())]].concat()
}

fn saddr_not(ip: Ipv4Addr) -> Vec<Expr> {
    [addr(12), vec![Expr::Ne(ip.octets().to_vec())]].concat()
}

fn daddr(ip: Ipv4Addr) -> Vec<Expr> {
    [addr(16), vec![Expr::Eq(ip.octets().to_vec())]].concat()
}

fn daddr_in(c: Cidr) -> Vec<Expr> {
    let mask = c.mask().to_be_bytes().to_vec();
    [addr(16), vec![Expr::And(mask), Expr::Eq(c.addr.octets().to_vec())]].concat()
}

/// `meta l4proto P th dport PORT`.
fn port(proto: u8, port: u16) -> Vec<Expr> {
    vec![
        Expr::Meta(Meta::L4Proto),
        Expr::Eq(vec![proto]),
        Expr::Payload { base: nft::Base::Transport, offset: 2, len: 2 },
        Expr::Eq(port.to_be_bytes().to_vec()),
    ]
}

/// `ct state established,related`: those bits (host order) not all clear.
fn reply() -> Vec<Expr> {
    const ESTABLISHED: u32 = 1 << 1;
    const RELATED: u32 = 1 << 2;
    vec![Expr::CtState, Expr::And((ESTABLISHED | RELATED).to_ne_bytes().to_vec()), Expr::Ne(vec![0; 4])]
}

fn then(mut m: Vec<Expr>, last: Expr) -> Vec<Expr> {
    m.push(last);
    m
}

const ACCEPT: Expr = Expr::Verdict(Verdict::Accept);
const DROP: Expr = Expr::Verdict(Verdict::Drop);
/// What the box is refused goes through [`refuse_chain`], which records
/// it and rejects it.
const REFUSE: Expr = Expr::Verdict(Verdict::Jump(REFUSE_CHAIN));
const REFUSE_CHAIN: &str = "refuse";

/// The set of the box's table that records what it was refused, keyed by
/// `ip daddr . meta l4proto . th dport` (0 for a protocol without ports),
/// with a counter per element; the kernel adds no element past
/// [`RECORDED`], so a flood of destinations can't grow it.
pub(super) const RECORD_SET: &str = "refused";
/// The named counter of the refusals the full set could not record.
pub(super) const UNLISTED_COUNTER: &str = "unlisted";
/// The most destinations recorded per box, the first ones refused.
pub(super) const RECORDED: u32 = 64;

/// nft's datatype for the key, so `nft list` shows it: ipv4_addr (7),
/// inet_proto (12), inet_service (13), concatenated 6 bits apart.
const RECORD_KEY_TYPE: u32 = (((7 << 6) | 12) << 6) | 13;

/// The chain every refusal of the box's table jumps to: anything but IPv4
/// is rejected unrecorded (the key is an IPv4 address, and a box's IPv6
/// neighbour discovery is no attempt of its own); an IPv4 packet counts on
/// its destination's element of [`RECORD_SET`], or, when the set is full
/// and has none for it, on [`UNLISTED_COUNTER`]; each is rejected. A rule
/// whose `update` fails (the set full) goes no further, so the next one
/// still rejects: a full record never lets a packet through.
fn refuse_chain() -> Vec<Vec<Expr>> {
    let l4 = |cmp: fn(Vec<u8>) -> Expr, p: u8| [Expr::Meta(Meta::L4Proto), cmp(vec![p])];
    // The key: the address in register 1, the protocol in the next 32
    // bits, the port (or `port`) in the next.
    let record = |proto: &[Expr], port: Expr| -> Vec<Expr> {
        let mut r = proto.to_vec();
        r.extend(addr(16));
        r.push(Expr::At(9, Box::new(Expr::Meta(Meta::L4Proto))));
        r.extend([Expr::At(10, Box::new(port)), Expr::CountIn(RECORD_SET), Expr::Reject]);
        r
    };
    let dport = || Expr::Payload { base: nft::Base::Transport, offset: 2, len: 2 };
    let (tcp, udp) = (l4(Expr::Eq, TCP), l4(Expr::Eq, UDP));
    let other = [l4(Expr::Ne, TCP), l4(Expr::Ne, UDP)].concat();
    vec![
        vec![Expr::Meta(Meta::NfProto), Expr::Ne(vec![NFPROTO_IPV4]), Expr::Reject],
        record(&tcp, dport()),
        record(&udp, dport()),
        record(&other, Expr::Imm(vec![0; 4])),
        vec![Expr::Counter(UNLISTED_COUNTER), Expr::Reject],
    ]
}

/// The start of box `n`'s table, whichever namespace holds it: the table
/// (new: one of the name already there is an error, as ids are new and a
/// box's table is never replaced: that would be another box's), its
/// `egress` and [`REFUSE_CHAIN`] chains, the set and counter the refusal
/// record reads, and the base chains `hooks` names.
fn table(n: &Names, hooks: &[(&'static str, &'static str, u32, i32)]) -> Vec<Cmd> {
    let (family, table) = (Family::Inet, n.table.clone());
    let chain = |name, hook: Option<(&'static str, u32, i32)>| Cmd::AddChain {
        family,
        table: table.clone(),
        name,
        hook: hook.map(|(kind, hook, prio)| Hook { kind, hook, prio, policy: Verdict::Accept }),
    };
    let mut cmds = vec![Cmd::NewTable(family, table.clone())];
    cmds.extend(hooks.iter().map(|&(name, kind, hook, prio)| chain(name, Some((kind, hook, prio)))));
    cmds.extend([
        chain("egress", None),
        chain(REFUSE_CHAIN, None),
        Cmd::AddSet {
            family,
            table: table.clone(),
            name: RECORD_SET,
            fields: vec![4, 1, 2],
            key_type: RECORD_KEY_TYPE,
            size: RECORDED,
        },
        Cmd::AddCounter { family, table: table.clone(), name: UNLISTED_COUNTER },
    ]);
    cmds
}

/// `rules`, as `(chain, exprs)`, added to box `n`'s table.
fn add_rules<'a>(n: &'a Names, rules: Vec<(&'static str, Vec<Expr>)>) -> impl Iterator<Item = Cmd> + 'a {
    rules.into_iter().map(|(chain, exprs)| Cmd::AddRule { family: Family::Inet, table: n.table.clone(), chain, exprs })
}

/// The whole transaction that sets up box `n`'s table in the host's
/// namespace (root's boxes, on a veth): all of it or none.
///
/// - input: from the box, nothing reaches the host itself (its veth
///   address, its uplink address, any of its addresses), except port 53 of
///   the named resolver when that is the host;
/// - forward, from the box: see [`egress_rules`];
/// - forward, to the box: replies only;
/// - postrouting: the box's address is masqueraded to the uplink's.
pub(super) fn ruleset(n: &Names, link: Link, dns: Option<Ipv4Addr>, allow: &[Allowed]) -> Vec<Cmd> {
    let mut cmds = table(
        n,
        &[
            ("input", "filter", nft::NF_INET_LOCAL_IN, -10),
            ("forward", "filter", nft::NF_INET_FORWARD, -10),
            ("postrouting", "nat", nft::NF_INET_POST_ROUTING, 100),
        ],
    );
    let mut rules: Vec<(&'static str, Vec<Expr>)> = Vec::new();
    if let Some(d) = dns {
        rules.extend(resolver(iifname(&n.host), d).into_iter().map(|r| ("input", r)));
    }
    rules.push(("input", then(iifname(&n.host), REFUSE)));
    rules.push(("forward", then(iifname(&n.host), Expr::Verdict(Verdict::Jump("egress")))));
    rules.push(("forward", then([oifname(&n.host), reply()].concat(), ACCEPT)));
    rules.push(("forward", then(oifname(&n.host), DROP)));
    rules.extend(egress_rules(Some(link.addr), dns, &[], allow).into_iter().map(|r| ("egress", r)));
    rules.extend(refuse_chain().into_iter().map(|r| (REFUSE_CHAIN, r)));
    let not_back = ifname(Meta::OifName, &n.host, true, Expr::Ne);
    rules.push(("postrouting", then([saddr(link.addr), not_back].concat(), Expr::Masquerade)));
    cmds.extend(add_rules(n, rules));
    cmds
}

/// The whole transaction that sets up box `n`'s table in the box's own
/// network namespace (an ordinary user's boxes, whose packets pasta sends
/// on from the host's sockets): what the box sends (the output hook) on
/// its own loopback passes, the rest goes through [`egress_rules`], with
/// the host's own addresses and its gateways (`host`) refused as the
/// private ranges are: pasta would connect to them from the host itself.
/// The box holds no CAP_NET_ADMIN in the user namespace that owns its
/// network namespace: it can't change the table.
pub(super) fn output_ruleset(n: &Names, host: &[Ipv4Addr], dns: Option<Ipv4Addr>, allow: &[Allowed]) -> Vec<Cmd> {
    let mut cmds = table(n, &[("output", "filter", nft::NF_INET_LOCAL_OUT, -10)]);
    let mut rules =
        vec![("output", then(oifname("lo"), ACCEPT)), ("output", vec![Expr::Verdict(Verdict::Jump("egress"))])];
    rules.extend(egress_rules(None, dns, host, allow).into_iter().map(|r| ("egress", r)));
    rules.extend(refuse_chain().into_iter().map(|r| (REFUSE_CHAIN, r)));
    cmds.extend(add_rules(n, rules));
    cmds
}

/// `pre`, then: to port 53 (TCP, then UDP) of resolver `d`, accept.
fn resolver(pre: Vec<Expr>, d: Ipv4Addr) -> Vec<Vec<Expr>> {
    [TCP, UDP].map(|p| then([pre.clone(), daddr(d), port(p, 53)].concat(), ACCEPT)).to_vec()
}

/// The rules for what the box sends on, in order: anything but IPv4 is
/// dropped (so fc00::/7 and fe80::/10 too), and so is a source address not
/// the box's own (`source`, where the box has one of its own); port 53 of
/// the named resolver is accepted; the addresses `host` and every refused
/// range are rejected; then, with an allowlist, only what it names passes.
/// Rejected rather than dropped: a refused connection fails at once; and
/// recorded ([`refuse_chain`]).
pub(super) fn egress_rules(
    source: Option<Ipv4Addr>,
    dns: Option<Ipv4Addr>,
    host: &[Ipv4Addr],
    allow: &[Allowed],
) -> Vec<Vec<Expr>> {
    let mut rules = vec![vec![Expr::Meta(Meta::NfProto), Expr::Ne(vec![NFPROTO_IPV4]), DROP]];
    rules.extend(source.map(|s| then(saddr_not(s), DROP)));
    if let Some(d) = dns {
        rules.extend(resolver(Vec::new(), d));
    }
    rules.extend(host.iter().map(|&a| then(daddr(a), REFUSE)));
    rules.extend(REFUSED.iter().map(|&(addr, len)| then(daddr_in(Cidr { addr, len }), REFUSE)));
    if !allow.is_empty() {
        for a in allow {
            match a.port {
                Some(p) => rules.extend([TCP, UDP].map(|proto| then([daddr(a.addr), port(proto, p)].concat(), ACCEPT))),
                None => rules.push(then(daddr(a.addr), ACCEPT)),
            }
        }
        rules.push(vec![REFUSE]);
    }
    rules
}

/// The guarded pod's table, in the pod's own network namespace: what the
/// pod's processes send (the output hook), in order: replies to
/// connections made to the pod (a kubelet probe from the node) and
/// loopback pass; anything but IPv4 is dropped (ICMPv6 aside, for
/// neighbour discovery); port 53 of the named resolvers is accepted; the
/// link-local range (cloud metadata) and the node's own addresses are
/// refused; the allowed ranges (pods, services) are accepted; the other
/// refused ranges (private, shared, multicast) are refused; the rest
/// passes. The pod has no CAP_NET_ADMIN in the user namespace that owns
/// the network namespace: it can't change the table.
pub(super) fn pod_ruleset(table: &str, dns: &[Ipv4Addr], node: &[Ipv4Addr], allow: &[Cidr]) -> Vec<Cmd> {
    const ICMPV6: u8 = 58;
    let family = Family::Inet;
    let hook = Hook { kind: "filter", hook: nft::NF_INET_LOCAL_OUT, prio: 0, policy: Verdict::Accept };
    let mut cmds = vec![
        // Replaces a table of the name left in the namespace: all in one
        // transaction, so the pod is never without one.
        Cmd::AddTable(family, table.to_string()),
        Cmd::DelTable(family, table.to_string()),
        Cmd::NewTable(family, table.to_string()),
        Cmd::AddChain { family, table: table.to_string(), name: "output", hook: Some(hook) },
    ];
    let mut rules = vec![
        then(reply(), ACCEPT),
        then(oifname("lo"), ACCEPT),
        vec![Expr::Meta(Meta::L4Proto), Expr::Eq(vec![ICMPV6]), ACCEPT],
        vec![Expr::Meta(Meta::NfProto), Expr::Ne(vec![NFPROTO_IPV4]), DROP],
    ];
    for d in dns {
        rules.extend(resolver(Vec::new(), *d));
    }
    rules.push(then(daddr_in(Cidr { addr: Ipv4Addr::new(169, 254, 0, 0), len: 16 }), Expr::Reject));
    rules.extend(node.iter().filter(|a| !a.is_loopback()).map(|a| then(daddr(*a), Expr::Reject)));
    rules.extend(allow.iter().map(|c| then(daddr_in(*c), ACCEPT)));
    rules.extend(REFUSED.iter().map(|&(addr, len)| then(daddr_in(Cidr { addr, len }), Expr::Reject)));
    let table = table.to_string();
    cmds.extend(rules.into_iter().map(|exprs| Cmd::AddRule { family, table: table.clone(), chain: "output", exprs }));
    cmds
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules_of(cmds: &[Cmd], chain: &str) -> Vec<String> {
        let line = |exprs: &Vec<Expr>| exprs.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
        cmds.iter()
            .filter_map(|c| match c {
                Cmd::AddRule { chain: ch, exprs, .. } if *ch == chain => Some(line(exprs)),
                _ => None,
            })
            .collect()
    }

    /// As `nft --debug=netlink` shows the refuse chain's rules, e.g. `meta l4proto tcp update @refused
    /// { ip daddr . meta l4proto . th dport counter } reject`: `meta load l4proto => reg 1; cmp eq reg 1
    /// 0x06; meta load nfproto => reg 1; cmp eq reg 1 0x02; payload load 4b @ network header + 16 => reg 1;
    /// meta load l4proto => reg 9; payload load 2b @ transport header + 2 => reg 10; dynset update reg_key 1
    /// set refused expr [ counter ]; reject type 2 code 3`.
    #[test]
    fn every_refusal_is_recorded_then_rejected() {
        let n = names("x");
        let link = link_of(u32::from(Ipv4Addr::new(169, 254, 64, 0)));
        let allow = [Allowed { addr: Ipv4Addr::new(198, 51, 100, 10), port: None }];
        let cmds = ruleset(&n, link, None, &allow);
        let refuse = rules_of(&cmds, REFUSE_CHAIN);
        let key = "meta NfProto; == 02; payload Network+16/4; meta L4Proto => reg 9";
        assert_eq!(
            refuse,
            [
                "meta NfProto; != 02; reject".to_string(),
                format!("meta L4Proto; == 06; {key}; payload Transport+2/2 => reg 10; update @refused counter; reject"),
                format!("meta L4Proto; == 11; {key}; payload Transport+2/2 => reg 10; update @refused counter; reject"),
                format!(
                    "meta L4Proto; != 06; meta L4Proto; != 11; {key}; immediate 00000000 => reg 10; update @refused \
                     counter; reject"
                ),
                "counter name unlisted; reject".to_string(),
            ]
        );
        // Nothing else in the table rejects on its own: every refusal is recorded.
        for chain in ["input", "forward", "egress"] {
            for r in rules_of(&cmds, chain) {
                assert!(!r.ends_with("reject"), "{chain}: {r}");
            }
        }
        let egress = rules_of(&cmds, "egress");
        assert_eq!(egress.last().map(String::as_str), Some("Jump(\"refuse\")"), "the allowlist's end: {egress:?}");
        assert_eq!(egress.iter().filter(|r| r.ends_with("Jump(\"refuse\")")).count(), REFUSED.len() + 1);
        let set = cmds.iter().find_map(|c| match c {
            Cmd::AddSet { name, fields, size, key_type, .. } => Some((*name, fields.clone(), *size, *key_type)),
            _ => None,
        });
        assert_eq!(
            set,
            Some((RECORD_SET, vec![4, 1, 2], RECORDED, 29453)),
            "nft's ipv4_addr . inet_proto . inet_service"
        );
        assert!(cmds.contains(&Cmd::AddCounter {
            family: Family::Inet,
            table: n.table.clone(),
            name: UNLISTED_COUNTER
        }));
    }

    /// The variant in the box's own namespace: its loopback passes, then
    /// the same egress rules, with the host's addresses refused after the
    /// resolver and before the allowlist, and no source check (the box's
    /// address is a copy of the host's); the same refuse chain and set.
    #[test]
    fn the_output_ruleset_guards_the_boxs_own_namespace() {
        let n = names("x");
        let host = [Ipv4Addr::new(203, 0, 113, 2), Ipv4Addr::new(203, 0, 113, 1)];
        let allow = [Allowed { addr: Ipv4Addr::new(198, 51, 100, 10), port: None }];
        let cmds = output_ruleset(&n, &host, Some(Ipv4Addr::new(10, 0, 0, 53)), &allow);
        let hooks: Vec<u32> = cmds
            .iter()
            .filter_map(|c| match c {
                Cmd::AddChain { hook: Some(h), .. } => Some(h.hook),
                _ => None,
            })
            .collect();
        assert_eq!(hooks, [nft::NF_INET_LOCAL_OUT], "one base chain, on output");
        let output = rules_of(&cmds, "output");
        assert_eq!(output.len(), 2, "{output:?}");
        assert!(output[0].starts_with("meta OifName; == 6c6f00") && output[0].ends_with("Accept"), "{output:?}");
        assert_eq!(output[1], "Jump(\"egress\")");
        let egress = rules_of(&cmds, "egress").join("\n");
        let pos = |s: &str| egress.find(s).unwrap_or_else(|| panic!("{s} not in {egress}"));
        assert!(!egress.contains("Network+12/4"), "no source check: {egress}");
        let (resolver, host0, host1, metadata, allowed) =
            ("== 0a000035", "== cb007102; Jump", "== cb007101; Jump", "== a9fe0000; Jump", "== c633640a; Accept");
        assert!(pos(resolver) < pos(host0) && pos(host0) < pos(host1) && pos(host1) < pos(metadata));
        assert!(pos(metadata) < pos(allowed), "{egress}");
        assert_eq!(rules_of(&cmds, REFUSE_CHAIN), rules_of(&ruleset(&n, link_of(0xa9fe4000), None, &[]), REFUSE_CHAIN));
    }
}
