//! What a box tried and was refused, as a result reports it (`refused`,
//! documented in tinyrun-sandbox(8)): the system calls its seccomp filter
//! refused (recorded by the filter's supervisor: `tinyrun::Refusals`),
//! the times its pids, memory and CPU limits held it back (its cgroup's
//! counters), the connections its network refused (its egress table's
//! record, its namespace's no-route counter: `net::NetRefusals`), and the
//! output cut by the capture cap.
//!
//! What it can be trusted for: every entry comes from the kernel (a
//! seccomp notification, a cgroup counter, an nftables set and counter in
//! the host's namespace, a namespace's SNMP counter) or from our own
//! reads, never from the box, so a box can't add to it except by trying;
//! it can't hide a refused call or connection either, only make the record
//! full (after [`tinyrun::MAX_REFUSED_CALLS`] distinct calls, or 64
//! distinct destinations, the rest are counted in `syscalls_unlisted` and
//! `connections_unlisted`). It says what was refused, not why, nor that
//! nothing else was tried.

use serde::Serialize;
use tinyrun::{LimitsHit, Refusals};

use crate::net::NetRefusals;

/// The `refused` object of a result; absent when nothing was refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Refused {
    /// System calls the filter refused, the first distinct ones in the
    /// order first seen.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub syscalls: Vec<RefusedSyscall>,
    /// Refusals of calls beyond those listed (the record is full).
    #[serde(skip_serializing_if = "is_zero")]
    pub syscalls_unlisted: u64,
    /// Limits of the box's cgroup that held it back.
    #[serde(skip_serializing_if = "LimitsHit::is_empty", serialize_with = "nonzero")]
    pub limits: LimitsHit,
    /// Destinations the egress rules rejected, the first distinct ones,
    /// by address.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub connections: Vec<RefusedConnection>,
    /// Packets rejected to destinations beyond those listed (the record is
    /// full).
    #[serde(skip_serializing_if = "is_zero")]
    pub connections_unlisted: u64,
    /// Connections and datagrams that failed for want of a route
    /// (ENETUNREACH): without `--network egress`, each one off the box.
    #[serde(skip_serializing_if = "is_zero")]
    pub network_unreachable: u64,
    /// Bytes of stdout and stderr written beyond the capture cap.
    #[serde(skip_serializing_if = "is_zero")]
    pub output_cut_bytes: u64,
}

/// One destination the egress rules rejected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RefusedConnection {
    /// The IPv4 address.
    pub address: String,
    /// `tcp`, `udp`, `icmp`, or the protocol's number.
    pub protocol: String,
    /// The TCP or UDP port; absent for other protocols.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// Packets rejected (saturating at 2^32-1): a TCP connection's
    /// attempt is one (its SYN), each datagram one.
    pub count: u32,
}

impl RefusedConnection {
    fn of(d: &crate::net::Destination) -> RefusedConnection {
        let (protocol, port) = match d.proto {
            6 => ("tcp".to_string(), Some(d.port)),
            17 => ("udp".to_string(), Some(d.port)),
            1 => ("icmp".to_string(), None),
            p => (p.to_string(), None),
        };
        let count = u32::try_from(d.count).unwrap_or(u32::MAX);
        RefusedConnection { address: d.addr.to_string(), protocol, port, count }
    }
}

/// One system call the filter refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RefusedSyscall {
    /// Its name, e.g. `ptrace`.
    pub name: String,
    /// Times refused (saturating at 2^32-1).
    pub count: u32,
    /// The argument whose first distinct values `values` holds, for calls
    /// that have a telling one (`request` of ioctl, `flags` of unshare).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arg: Option<&'static str>,
    /// Those values, in hex.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The counters that are not zero.
fn nonzero<S: serde::Serializer>(l: &LimitsHit, s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let all = [
        ("pids_max", l.pids_max),
        ("memory_high", l.memory_high),
        ("memory_max", l.memory_max),
        ("memory_oom", l.memory_oom),
        ("oom_kills", l.oom_kills),
        ("cpu_throttled_periods", l.cpu_throttled_periods),
        ("cpu_throttled_us", l.cpu_throttled_us),
    ];
    let mut m = s.serialize_map(None)?;
    for (k, v) in all.iter().filter(|(_, v)| *v > 0) {
        m.serialize_entry(k, v)?;
    }
    m.end()
}

impl Refused {
    /// The report of `calls` refused, `limits` hit, `net` refused and
    /// `cut` bytes of output dropped; `None` when there is nothing to
    /// report.
    pub(crate) fn of(calls: &Refusals, limits: LimitsHit, net: &NetRefusals, cut: u64) -> Option<Refused> {
        let syscalls = calls
            .calls
            .iter()
            .map(|c| RefusedSyscall {
                name: c.name(),
                count: c.count,
                arg: c.arg_name(),
                values: match c.arg_name() {
                    Some(_) => c.args.iter().map(|v| format!("{v:#x}")).collect(),
                    None => Vec::new(),
                },
            })
            .collect();
        let r = Refused {
            syscalls,
            syscalls_unlisted: calls.unlisted.into(),
            limits,
            connections: net.destinations.iter().map(RefusedConnection::of).collect(),
            connections_unlisted: net.unlisted,
            network_unreachable: net.unreachable,
            output_cut_bytes: cut,
        };
        (r != Refused::default()).then_some(r)
    }
}

/// A sandbox as `list` shows it, with what it tried and was refused so far.
#[derive(Debug, Clone, Serialize)]
pub struct Listed {
    /// Its state, as `tinyrun list` gives a container's.
    #[serde(flatten)]
    pub state: tinyrun::ContainerState,
    /// What it tried and was refused; absent when nothing was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<Refused>,
}

/// The sandboxes that exist now ([`crate::list`]), each with its record
/// ([`of_box`]): `sandbox list --format json` and the API's box list.
///
/// # Errors
/// As [`crate::list`].
pub fn list_with_refused(root: &std::path::Path) -> crate::error::Result<Vec<Listed>> {
    Ok(crate::expiry::list(root)?
        .into_iter()
        .map(|state| {
            // A box that ended meanwhile has no record, and is listed as it was.
            let refused = of_box(root, &state.id).ok().flatten();
            Listed { state, refused }
        })
        .collect())
}

/// Everything launched box `id` tried and was refused since it was made:
/// its resident init's record and its cgroup's counters; `None` when
/// nothing was (or the box has no resident init to ask).
///
/// # Errors
/// A box that does not exist.
pub fn of_box(root: &std::path::Path, id: &str) -> crate::error::Result<Option<Refused>> {
    let rt = crate::layout::runtime(root);
    let c = rt.peek(id)?;
    let limits = c.limits_hit();
    let net = crate::net::NetWatch::open(root, id, c.pid()).read();
    // A stopped or paused init can't answer: its calls are then unknown,
    // not an error of the listing.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    let calls = rt.resident(id).and_then(|r| r.refused(Some(deadline))).unwrap_or_default();
    Ok(Refused::of(&calls, limits, &net, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_refused_is_no_report() {
        assert_eq!(Refused::of(&Refusals::default(), LimitsHit::default(), &NetRefusals::default(), 0), None);
    }

    #[test]
    fn only_what_was_hit_is_shown() {
        let limits = LimitsHit { pids_max: 5, oom_kills: 1, ..LimitsHit::default() };
        let r = Refused::of(&Refusals::default(), limits, &NetRefusals::default(), 7).unwrap();
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v, serde_json::json!({"limits": {"pids_max": 5, "oom_kills": 1}, "output_cut_bytes": 7}));
    }

    #[test]
    fn connections_are_named_by_address_protocol_and_port() {
        use crate::net::Destination;
        let d = |a: [u8; 4], proto, port, count| Destination { addr: a.into(), proto, port, count };
        let net = NetRefusals {
            destinations: vec![d([169, 254, 169, 254], 6, 80, 1), d([10, 0, 0, 1], 1, 0, u64::MAX)],
            unlisted: 3,
            unreachable: 0,
        };
        let r = Refused::of(&Refusals::default(), LimitsHit::default(), &net, 0).unwrap();
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            serde_json::json!({"connections": [
                {"address": "169.254.169.254", "protocol": "tcp", "port": 80, "count": 1},
                {"address": "10.0.0.1", "protocol": "icmp", "count": u32::MAX}],
                "connections_unlisted": 3})
        );
        let loopback_only = NetRefusals { unreachable: 2, ..NetRefusals::default() };
        let r = Refused::of(&Refusals::default(), LimitsHit::default(), &loopback_only, 0).unwrap();
        assert_eq!(serde_json::to_value(&r).unwrap(), serde_json::json!({"network_unreachable": 2}));
    }
}
