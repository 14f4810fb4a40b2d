//! The box's nftables table, as `nft -j` JSON, and the one place `nft` runs.

use super::*;

pub(super) fn prefix(c: Cidr) -> Value {
    json!({"prefix": {"addr": c.addr.to_string(), "len": c.len}})
}

pub(super) fn is(left: Value, right: Value) -> Value {
    json!({"match": {"op": "==", "left": left, "right": right}})
}

pub(super) fn isnt(left: Value, right: Value) -> Value {
    json!({"match": {"op": "!=", "left": left, "right": right}})
}

pub(super) fn meta(key: &str) -> Value {
    json!({"meta": {"key": key}})
}

pub(super) fn ip(field: &str) -> Value {
    json!({"payload": {"protocol": "ip", "field": field}})
}

pub(super) fn dport() -> Value {
    json!({"payload": {"protocol": "th", "field": "dport"}})
}

pub(super) fn tcp_or_udp() -> Value {
    is(meta("l4proto"), json!({"set": ["tcp", "udp"]}))
}

/// The whole nftables transaction that sets up box `n`'s table: run as one
/// `nft -j -f -`, it installs all of it or none. `add` then `delete` then
/// `add` of the table replaces a leftover of the same name.
///
/// - input: from the box, nothing reaches the host itself (its veth
///   address, its uplink address, any of its addresses), except port 53 of
///   the named resolver when that is the host;
/// - forward, from the box: see [`egress_rules`];
/// - forward, to the box: replies only;
/// - postrouting: the box's address is masqueraded to the uplink's.
pub(super) fn ruleset(n: &Names, link: Link, dns: Option<Ipv4Addr>, allow: &[Allowed]) -> Value {
    let table = json!({"family": "inet", "name": n.table});
    let chain = |name: &str, hook: Option<(&str, &str, i32)>| {
        let mut c = json!({"family": "inet", "table": n.table, "name": name});
        if let Some((kind, hook, prio)) = hook {
            c["type"] = json!(kind);
            c["hook"] = json!(hook);
            c["prio"] = json!(prio);
            c["policy"] = json!("accept");
        }
        json!({"add": {"chain": c}})
    };
    let mut cmds = vec![
        json!({"add": {"table": table}}),
        json!({"delete": {"table": table}}),
        json!({"add": {"table": table}}),
        chain("input", Some(("filter", "input", -10))),
        chain("forward", Some(("filter", "forward", -10))),
        chain("egress", None),
        chain("postrouting", Some(("nat", "postrouting", 100))),
    ];
    let rule = |chain: &str, expr: Vec<Value>| json!({"add": {"rule": {"family": "inet", "table": n.table, "chain": chain, "expr": expr}}});
    let from_box = is(meta("iifname"), json!(n.host));
    let to_box = is(meta("oifname"), json!(n.host));
    if let Some(d) = dns {
        cmds.push(rule("input", resolver(vec![from_box.clone()], d)));
    }
    cmds.push(rule("input", vec![from_box.clone(), reject()]));
    cmds.push(rule("forward", vec![from_box, json!({"jump": {"target": "egress"}})]));
    let reply = json!({"match": {"op": "in", "left": {"ct": {"key": "state"}}, "right": ["established", "related"]}});
    cmds.push(rule("forward", vec![to_box.clone(), reply, json!({"accept": null})]));
    cmds.push(rule("forward", vec![to_box, json!({"drop": null})]));
    cmds.extend(egress_rules(link, dns, allow).into_iter().map(|e| rule("egress", e)));
    let masquerade = vec![
        is(ip("saddr"), json!(link.addr.to_string())),
        isnt(meta("oifname"), json!(n.host)),
        json!({"masquerade": null}),
    ];
    cmds.push(rule("postrouting", masquerade));
    json!({"nftables": cmds})
}

pub(super) fn reject() -> Value {
    json!({"reject": {"type": "icmpx", "expr": "admin-prohibited"}})
}

/// `pre`, then: to port 53 (TCP or UDP) of resolver `d`, accept.
pub(super) fn resolver(mut pre: Vec<Value>, d: Ipv4Addr) -> Vec<Value> {
    pre.extend([is(ip("daddr"), json!(d.to_string())), tcp_or_udp(), is(dport(), json!(53)), json!({"accept": null})]);
    pre
}

/// The rules for what the box sends on, in order: anything but IPv4 is
/// dropped (so fc00::/7 and fe80::/10 too), and so is a source address not
/// the box's own; port 53 of the named resolver is accepted; every refused
/// range is rejected; then, with an allowlist, only what it names passes.
/// Rejected rather than dropped: a refused connection fails at once.
pub(super) fn egress_rules(link: Link, dns: Option<Ipv4Addr>, allow: &[Allowed]) -> Vec<Vec<Value>> {
    let drop = json!({"drop": null});
    let mut rules = vec![
        vec![isnt(meta("nfproto"), json!("ipv4")), drop.clone()],
        vec![isnt(ip("saddr"), json!(link.addr.to_string())), drop],
    ];
    if let Some(d) = dns {
        rules.push(resolver(Vec::new(), d));
    }
    let refused: Vec<Value> = REFUSED.iter().map(|&(addr, len)| prefix(Cidr { addr, len })).collect();
    rules.push(vec![is(ip("daddr"), json!({"set": refused})), reject()]);
    if !allow.is_empty() {
        for a in allow {
            let mut e = vec![is(ip("daddr"), json!(a.addr.to_string()))];
            if let Some(p) = a.port {
                e.extend([tcp_or_udp(), is(dport(), json!(p))]);
            }
            e.push(json!({"accept": null}));
            rules.push(e);
        }
        rules.push(vec![reject()]);
    }
    rules
}

/// The nft binary, from the system's directories only: the runtime runs
/// as root and must not take one from the caller's PATH.
pub(super) fn nft_bin() -> Result<&'static Path> {
    ["/usr/sbin/nft", "/sbin/nft", "/usr/bin/nft", "/bin/nft"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.exists())
        .ok_or_else(|| Error::Network("--network egress needs nft (install nftables)".into()))
}

/// Runs one nftables JSON transaction.
pub(super) fn nft(what: &str, commands: &Value) -> Result<()> {
    let bin = nft_bin()?;
    let mut child = Command::new(bin)
        .args(["-j", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::io("run", bin, e))?;
    let text = commands.to_string();
    let wrote = child.stdin.take().map(|mut s| s.write_all(text.as_bytes()));
    let out = child.wait_with_output().map_err(|e| Error::io("run", bin, e))?;
    // nft's own complaint first: a write cut short (EPIPE) only says it
    // stopped reading.
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(Error::Network(format!("{what}: nft failed ({}): {}", out.status, err.trim())));
    }
    match wrote {
        Some(Err(e)) => Err(Error::io("write to", bin, e)),
        _ => Ok(()),
    }
}
