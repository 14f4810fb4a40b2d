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

/// The whole transaction that sets up box `n`'s table: all of it or none.
/// A table of the same name already there is an error (ids are new, and a
/// box's table is never replaced: that would be another box's).
///
/// - input: from the box, nothing reaches the host itself (its veth
///   address, its uplink address, any of its addresses), except port 53 of
///   the named resolver when that is the host;
/// - forward, from the box: see [`egress_rules`];
/// - forward, to the box: replies only;
/// - postrouting: the box's address is masqueraded to the uplink's.
pub(super) fn ruleset(n: &Names, link: Link, dns: Option<Ipv4Addr>, allow: &[Allowed]) -> Vec<Cmd> {
    let (family, table) = (Family::Inet, n.table.clone());
    let chain = |name, hook: Option<(&'static str, u32, i32)>| Cmd::AddChain {
        family,
        table: table.clone(),
        name,
        hook: hook.map(|(kind, hook, prio)| Hook { kind, hook, prio, policy: Verdict::Accept }),
    };
    let mut cmds = vec![
        Cmd::NewTable(family, table.clone()),
        chain("input", Some(("filter", nft::NF_INET_LOCAL_IN, -10))),
        chain("forward", Some(("filter", nft::NF_INET_FORWARD, -10))),
        chain("egress", None),
        chain("postrouting", Some(("nat", nft::NF_INET_POST_ROUTING, 100))),
    ];
    let mut rules: Vec<(&'static str, Vec<Expr>)> = Vec::new();
    if let Some(d) = dns {
        rules.extend(resolver(iifname(&n.host), d).into_iter().map(|r| ("input", r)));
    }
    rules.push(("input", then(iifname(&n.host), Expr::Reject)));
    rules.push(("forward", then(iifname(&n.host), Expr::Verdict(Verdict::Jump("egress")))));
    rules.push(("forward", then([oifname(&n.host), reply()].concat(), ACCEPT)));
    rules.push(("forward", then(oifname(&n.host), DROP)));
    rules.extend(egress_rules(link, dns, allow).into_iter().map(|r| ("egress", r)));
    let not_back = ifname(Meta::OifName, &n.host, true, Expr::Ne);
    rules.push(("postrouting", then([saddr(link.addr), not_back].concat(), Expr::Masquerade)));
    cmds.extend(rules.into_iter().map(|(chain, exprs)| Cmd::AddRule { family, table: table.clone(), chain, exprs }));
    cmds
}

/// `pre`, then: to port 53 (TCP, then UDP) of resolver `d`, accept.
fn resolver(pre: Vec<Expr>, d: Ipv4Addr) -> Vec<Vec<Expr>> {
    [TCP, UDP].map(|p| then([pre.clone(), daddr(d), port(p, 53)].concat(), ACCEPT)).to_vec()
}

/// The rules for what the box sends on, in order: anything but IPv4 is
/// dropped (so fc00::/7 and fe80::/10 too), and so is a source address not
/// the box's own; port 53 of the named resolver is accepted; every refused
/// range is rejected; then, with an allowlist, only what it names passes.
/// Rejected rather than dropped: a refused connection fails at once.
pub(super) fn egress_rules(link: Link, dns: Option<Ipv4Addr>, allow: &[Allowed]) -> Vec<Vec<Expr>> {
    let mut rules =
        vec![vec![Expr::Meta(Meta::NfProto), Expr::Ne(vec![NFPROTO_IPV4]), DROP], then(saddr_not(link.addr), DROP)];
    if let Some(d) = dns {
        rules.extend(resolver(Vec::new(), d));
    }
    rules.extend(REFUSED.iter().map(|&(addr, len)| then(daddr_in(Cidr { addr, len }), Expr::Reject)));
    if !allow.is_empty() {
        for a in allow {
            match a.port {
                Some(p) => rules.extend([TCP, UDP].map(|proto| then([daddr(a.addr), port(proto, p)].concat(), ACCEPT))),
                None => rules.push(then(daddr(a.addr), ACCEPT)),
            }
        }
        rules.push(vec![Expr::Reject]);
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
