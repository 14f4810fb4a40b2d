//! What the network refused a box, as its results report it: the
//! destinations its egress table rejected (the table's set and counter,
//! [`rules`]), and the attempts its own namespace had no route for (how a
//! loopback-only box's connections off the box fail).
//!
//! Both are the kernel's counts, read when a result is made: nothing is
//! added to the path of a packet that is let through. The box can't write
//! either: its table is in the host's namespace (root's boxes) or in its
//! own where it has no CAP_NET_ADMIN (an ordinary user's, module `pasta`),
//! and a namespace's `OutNoRoutes` only grows.

use std::io::Read;
use std::os::unix::fs::FileExt;

use super::*;

/// What a box was refused on the network, counted since it was made.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetRefusals {
    /// The destinations its egress rules rejected, the first
    /// [`MAX_DESTINATIONS`] distinct ones.
    pub destinations: Vec<Destination>,
    /// Rejected packets to destinations beyond those.
    pub unlisted: u64,
    /// Connections and datagrams that failed for want of a route
    /// (`ENETUNREACH`): in a box without `--network egress`, every one off
    /// the box.
    pub unreachable: u64,
}

/// One destination the egress rules rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Destination {
    /// Its address.
    pub addr: Ipv4Addr,
    /// The IP protocol number (6 TCP, 17 UDP, 1 ICMP, ...).
    pub proto: u8,
    /// The TCP or UDP port; 0 for other protocols.
    pub port: u16,
    /// Packets rejected.
    pub count: u64,
}

/// The most destinations a record lists.
pub const MAX_DESTINATIONS: usize = rules::RECORDED as usize;

impl NetRefusals {
    /// What grew since `before` was read (a command's share of the
    /// box's record).
    pub fn since(&self, before: &NetRefusals) -> NetRefusals {
        let was = |d: &Destination| {
            before.destinations.iter().find(|b| (b.addr, b.proto, b.port) == (d.addr, d.proto, d.port))
        };
        let destinations = self
            .destinations
            .iter()
            .filter_map(|d| {
                let count = d.count.saturating_sub(was(d).map_or(0, |b| b.count));
                (count > 0).then_some(Destination { count, ..*d })
            })
            .collect();
        NetRefusals {
            destinations,
            unlisted: self.unlisted.saturating_sub(before.unlisted),
            unreachable: self.unreachable.saturating_sub(before.unreachable),
        }
    }
}

/// Where box `id`'s record is read from: its egress table, if it has one,
/// and its namespace's counters, kept open so they can still be read once
/// its last process is gone (an open file of /proc/PID/net holds the
/// namespace).
pub struct NetWatch {
    table: Option<String>,
    /// The box's network namespace, where its table is when it is there
    /// rather than in ours.
    netns: Option<File>,
    snmp: Vec<File>,
}

impl NetWatch {
    /// Box `id`, whose init (or any process in its network namespace) is
    /// `pid`, in state root `root`. What can't be opened is not read (a box
    /// gone meanwhile): the record is then empty, not an error.
    pub fn open(root: &Path, id: &str, pid: i32) -> NetWatch {
        let pasta = super::pasta::has(root, id);
        let egress = pasta || Records::new(root).all().is_ok_and(|all| all.iter().any(|(_, owner, _)| owner == id));
        let bundle = crate::layout::bundle(root, id);
        let netns = pasta.then(|| File::open(super::pasta::netns_path(&bundle)).ok()).flatten();
        let snmp = ["snmp", "snmp6"].iter().filter_map(|f| File::open(format!("/proc/{pid}/net/{f}")).ok()).collect();
        NetWatch { table: egress.then(|| names(id).table), netns, snmp }
    }

    /// The record as it is now.
    pub fn read(&self) -> NetRefusals {
        let (destinations, unlisted) =
            self.table.as_deref().map(|t| table_record(t, self.netns.as_ref())).unwrap_or_default();
        let unreachable = self.snmp.iter().filter_map(|f| read_all(f).map(|t| out_no_routes(&t))).sum();
        NetRefusals { destinations, unlisted, unreachable }
    }
}

/// The whole file, from its start (a /proc file's text is made anew by
/// each read from 0).
fn read_all(f: &File) -> Option<String> {
    let mut buf = vec![0; 16 * 1024];
    let mut n = 0;
    while n < buf.len() {
        match f.read_at(&mut buf[n..], n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    buf.truncate(n);
    let mut s = String::new();
    buf.as_slice().read_to_string(&mut s).ok()?;
    Some(s)
}

/// `OutNoRoutes` of /proc/net/snmp (a line of `Ip:` names, then one of
/// values) or `Ip6OutNoRoutes` of /proc/net/snmp6 (`name value` lines).
fn out_no_routes(text: &str) -> u64 {
    let mut lines = text.lines();
    while let Some(l) = lines.next() {
        if let Some(v) = l.strip_prefix("Ip6OutNoRoutes") {
            return v.trim().parse().unwrap_or(0);
        }
        if l.starts_with("Ip: ") && l.contains("OutNoRoutes") {
            let values = lines.next().unwrap_or("");
            let at = l.split_whitespace().position(|n| n == "OutNoRoutes");
            return at.and_then(|i| values.split_whitespace().nth(i)).and_then(|v| v.parse().ok()).unwrap_or(0);
        }
    }
    0
}

/// The destinations and unlisted count of table `table`, in network
/// namespace `netns` or else ours; nothing when it can't be read (a box's
/// table removed meanwhile).
fn table_record(table: &str, netns: Option<&File>) -> (Vec<Destination>, u64) {
    let open = || nft::Nft::open().map_err(|e| Error::Network(e.to_string()));
    let nft = match netns {
        Some(ns) => link::open_in(ns, open),
        None => open(),
    };
    let Ok(mut nft) = nft else { return Default::default() };
    let elements = nft.counted_elements(nft::Family::Inet, table, rules::RECORD_SET).unwrap_or_default();
    let mut destinations: Vec<Destination> = elements.iter().filter_map(|(k, n)| destination(k, *n)).collect();
    destinations.truncate(MAX_DESTINATIONS);
    destinations.sort_by_key(|d| (d.addr, d.proto, d.port));
    let unlisted = nft.counter(nft::Family::Inet, table, rules::UNLISTED_COUNTER).unwrap_or(0);
    (destinations, unlisted)
}

/// A key of the set: the address, then the protocol and the port (each in
/// 32 bits of its own, the port big-endian), as the rules load them.
fn destination(key: &[u8], count: u64) -> Option<Destination> {
    let key: &[u8; 12] = key.try_into().ok()?;
    Some(Destination {
        addr: Ipv4Addr::new(key[0], key[1], key[2], key[3]),
        proto: key[4],
        port: u16::from_be_bytes([key[8], key[9]]),
        count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_decode_as_the_rules_load_them() {
        let key = [169, 254, 169, 254, 6, 0, 0, 0, 0, 80, 0, 0];
        let d = destination(&key, 3).unwrap();
        assert_eq!((d.addr, d.proto, d.port, d.count), (Ipv4Addr::new(169, 254, 169, 254), 6, 80, 3));
        assert_eq!(destination(&key[..8], 1), None);
    }

    #[test]
    fn no_route_counters_are_found_in_both_files() {
        let v4 = "Ip: Forwarding DefaultTTL OutRequests OutNoRoutes\nIp: 2 64 7 5\nIcmp: InMsgs\nIcmp: 0\n";
        assert_eq!(out_no_routes(v4), 5);
        assert_eq!(out_no_routes("Ip6InReceives    4\nIp6OutNoRoutes \t 2\n"), 2);
        assert_eq!(out_no_routes("nothing"), 0);
    }

    #[test]
    fn a_commands_share_is_what_grew() {
        let d = |port, count| Destination { addr: Ipv4Addr::new(10, 0, 0, 1), proto: 17, port, count };
        let before = NetRefusals { destinations: vec![d(53, 2), d(80, 1)], unlisted: 1, unreachable: 4 };
        let now = NetRefusals { destinations: vec![d(53, 5), d(80, 1), d(443, 1)], unlisted: 1, unreachable: 6 };
        let got = now.since(&before);
        assert_eq!(got, NetRefusals { destinations: vec![d(53, 3), d(443, 1)], unlisted: 0, unreachable: 2 });
        assert_eq!(now.since(&now), NetRefusals::default());
    }
}
