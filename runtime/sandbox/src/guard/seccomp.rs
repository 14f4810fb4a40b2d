//! The seccomp profile of a guarded container: the sandbox's allowlist,
//! less what the config's own profile refuses. An `Unconfined` request
//! (no profile) gets the sandbox's; `RuntimeDefault` or a `Localhost`
//! profile gets the intersection, so the result never allows a call the
//! sandbox's profile refuses.
//!
//! Per system call name: one the request refuses outright (not named by
//! an allowlist, or named without conditions by a rule that does not
//! allow) is dropped; one the sandbox allows outright and the request only
//! under argument conditions gets the request's conditions; where both
//! have conditions, the sandbox's are kept (they are the ones that must
//! hold). A request's conditional refusal of a call the sandbox allows
//! outright is not carried over.

use serde_json::{json, Value};

/// Actions under which a call goes ahead.
fn allows(action: &str) -> bool {
    matches!(action, "SCMP_ACT_ALLOW" | "SCMP_ACT_LOG")
}

/// What the request lets through for one name.
enum Verdict<'a> {
    All,
    Only(Vec<&'a Value>),
    None,
}

fn verdict<'a>(req: &'a Value, name: &str) -> Verdict<'a> {
    let rules: Vec<&Value> = req["syscalls"]
        .as_array()
        .map(|rs| rs.iter().filter(|r| r["names"].as_array().is_some_and(|ns| ns.iter().any(|n| n == name))).collect())
        .unwrap_or_default();
    let no_args = |r: &Value| r["args"].as_array().is_none_or(Vec::is_empty);
    let allowing = |r: &Value| allows(r["action"].as_str().unwrap_or(""));
    if rules.iter().any(|r| no_args(r) && !allowing(r)) {
        return Verdict::None;
    }
    if rules.iter().any(|r| no_args(r) && allowing(r)) {
        return Verdict::All;
    }
    let conditional: Vec<&Value> = rules.into_iter().filter(|r| allowing(r)).collect();
    match (allows(req["defaultAction"].as_str().unwrap_or("")), conditional.is_empty()) {
        (true, _) => Verdict::All,
        (false, true) => Verdict::None,
        (false, false) => Verdict::Only(conditional),
    }
}

/// The sandbox's profile as a pod's base: it also lets a pod open
/// NETLINK_ROUTE sockets, through which its programs list their interfaces
/// and addresses (`ip`, getifaddrs(3), Go's `net.Interfaces`), as ordinary
/// workloads do. What they can do there is read: a change (an address, a
/// link, a route) takes CAP_NET_ADMIN over the pod's network namespace,
/// which belongs to the node's user namespace, not the pod's. Every other
/// netlink family (audit, uevents, netfilter, sock_diag, ...) stays
/// refused, as in a box.
pub(crate) fn for_pods(mut sandbox: Value) -> Value {
    if let Some(rules) = sandbox["syscalls"].as_array_mut() {
        rules.push(json!({
            "names": ["socket"],
            "action": "SCMP_ACT_ALLOW",
            "args": [
                {"index": 0, "value": libc::AF_NETLINK, "op": "SCMP_CMP_EQ"},
                {"index": 2, "value": libc::NETLINK_ROUTE, "op": "SCMP_CMP_EQ"}
            ]
        }));
    }
    sandbox
}

/// The profile a guarded container gets for `requested` (`null` when the
/// config has none).
pub(crate) fn intersect(requested: &Value, sandbox: &Value) -> Value {
    if requested.is_null() {
        return sandbox.clone();
    }
    let mut out = sandbox.clone();
    let mut rules = Vec::new();
    for rule in sandbox["syscalls"].as_array().map(Vec::as_slice).unwrap_or_default() {
        let names = rule["names"].as_array().map(Vec::as_slice).unwrap_or_default();
        if !allows(rule["action"].as_str().unwrap_or("")) {
            rules.push(rule.clone());
            continue;
        }
        let unconditional = rule["args"].as_array().is_none_or(Vec::is_empty);
        let mut kept = Vec::new();
        for name in names.iter().filter_map(Value::as_str) {
            match verdict(requested, name) {
                Verdict::None => {}
                Verdict::All => kept.push(name),
                Verdict::Only(req) if unconditional => {
                    rules.extend(
                        req.into_iter()
                            .map(|r| json!({"names": [name], "action": "SCMP_ACT_ALLOW", "args": r["args"].clone()})),
                    );
                }
                Verdict::Only(_) => kept.push(name),
            }
        }
        if !kept.is_empty() {
            let mut r = rule.clone();
            r["names"] = json!(kept);
            rules.push(r);
        }
    }
    out["syscalls"] = json!(rules);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names_allowed(p: &Value) -> Vec<String> {
        let mut v: Vec<String> = p["syscalls"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["action"] == "SCMP_ACT_ALLOW")
            .flat_map(|r| r["names"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string()))
            .collect();
        v.sort();
        v.dedup();
        v
    }

    #[test]
    fn unconfined_gets_the_sandbox_profile_and_an_intersection_never_allows_more() {
        let sandbox = crate::spec::seccomp_profile().unwrap();
        assert_eq!(intersect(&Value::Null, &sandbox), sandbox);
        let req = json!({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [
            {"names": ["read", "write", "unshare", "mount"], "action": "SCMP_ACT_ALLOW"},
            {"names": ["personality"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 8, "op": "SCMP_CMP_EQ"}]},
            {"names": ["ioctl"], "action": "SCMP_ACT_ALLOW"}]});
        let got = intersect(&req, &sandbox);
        let allowed = names_allowed(&got);
        let in_sandbox = names_allowed(&sandbox);
        assert!(allowed.iter().all(|n| in_sandbox.contains(n)), "more than the sandbox allows: {allowed:?}");
        assert!(allowed.contains(&"read".into()) && allowed.contains(&"ioctl".into()));
        assert!(!allowed.contains(&"mount".into()) && !allowed.contains(&"openat".into()), "{allowed:?}");
        // ioctl keeps the sandbox's conditions (TIOCSTI refused).
        let ioctl: Vec<&Value> =
            got["syscalls"].as_array().unwrap().iter().filter(|r| r["names"] == json!(["ioctl"])).collect();
        assert!(
            !ioctl.is_empty() && ioctl.iter().all(|r| r["args"].as_array().is_some_and(|a| !a.is_empty())),
            "{ioctl:?}"
        );
        // A denylist: the sandbox's allowlist less what it refuses.
        let deny =
            json!({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ERRNO"}]});
        let got = names_allowed(&intersect(&deny, &sandbox));
        assert!(!got.contains(&"read".into()) && got.contains(&"write".into()));
    }

    #[test]
    fn a_pod_may_open_route_netlink_sockets_only() {
        let sandbox = crate::spec::seccomp_profile().unwrap();
        let netlink = |p: &Value| -> Vec<Value> {
            p["syscalls"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| r["names"] == json!(["socket"]) && r["args"][0]["value"] == libc::AF_NETLINK)
                .cloned()
                .collect()
        };
        assert!(netlink(&sandbox).is_empty(), "a box opens no netlink socket");
        // Whatever the pod asked for, the rule holds the protocol to NETLINK_ROUTE.
        for req in [Value::Null, json!({"defaultAction": "SCMP_ACT_ALLOW"})] {
            let got = netlink(&intersect(&req, &for_pods(sandbox.clone())));
            assert_eq!(got.len(), 1, "{got:?}");
            assert_eq!(got[0]["args"][1], json!({"index": 2, "value": 0, "op": "SCMP_CMP_EQ"}), "{got:?}");
        }
    }
}
