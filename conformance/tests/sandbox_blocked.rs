//! The connections a box was refused, in the `refused` object of its results: for an egress box
//! the destinations its rules rejected (`connections`: address, protocol, port, count; beyond the
//! first 64 distinct ones, `connections_unlisted`), for a loopback-only box the attempts that had
//! no route (`network_unreachable`). Driven through the binary in the namespaces of
//! `egress_common` (no packet leaves the machine), or, for loopback-only boxes, in none at all.
//!
//! Checked: an SSRF to the metadata address (169.254.169.254:80), a UDP datagram to a private
//! address and a connection to the host's own address are each named with protocol, port and
//! count, and the allowed destination is not; a clean box reports nothing refused; a launched
//! box's record is its commands' (each exec's result has its own share) and is whole in `list`
//! and `terminate --json`; a flood of 10,000 destinations fills the record (64 listed, the rest
//! counted), lets nothing through and keeps `list` prompt.
//!
//! Each test prints `SANDBOX <name>: <what it saw>` before it asserts.

#[macro_use]
mod egress_common;

use std::time::{Duration, Instant};

use egress_common::*;
use serde_json::{json, Value};
use tinyrun_conformance::sandbox::{saw, Sbx};
use tinyrun_conformance::{kv, require_root};

/// `udp:IP:PORT` for the probe.
fn udp(ip: &str, port: u16) -> String {
    format!("udp:{ip}:{port}")
}

/// The `connections` of a `refused` object, as (address, protocol, port, count), sorted.
fn connections(refused: &Value) -> Vec<(String, String, Option<u64>, u64)> {
    let mut out: Vec<_> = refused["connections"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| {
                    (
                        c["address"].as_str().unwrap_or("?").to_string(),
                        c["protocol"].as_str().unwrap_or("?").to_string(),
                        c["port"].as_u64(),
                        c["count"].as_u64().unwrap_or(0),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

fn conn(addr: &str, proto: &str, port: u64, count: u64) -> (String, String, Option<u64>, u64) {
    (addr.to_string(), proto.to_string(), Some(port), count)
}

/// The probe's outcomes in a `--json` result's stdout.
fn probed(result: &Value) -> std::collections::BTreeMap<String, String> {
    kv(result["stdout"]["text"].as_str().unwrap_or(""))
}

impl Net {
    /// `sandbox run --json --network egress OPTS` of the probe: the parsed result.
    #[track_caller]
    fn run_json_probe(&self, opts: &[&str], targets: &[String]) -> Value {
        let copy = format!("{}:/work/probe.py", self.probe.display());
        let mut v = vec!["run", "--json", "--network", "egress"];
        v.extend(self.sb.common());
        v.extend_from_slice(opts);
        v.extend(["--copy-in", &copy, "--", "python3", "/work/probe.py"]);
        v.extend(targets.iter().map(String::as_str));
        let o = self.sandbox(&v);
        assert!(o.ok(), "{o}");
        serde_json::from_str(o.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {o}"))
    }

    /// `sandbox exec --json ID -- python3 -c PROGRAM ARGS`: the parsed result.
    #[track_caller]
    fn exec_json(&self, id: &str, program: &str, args: &[String]) -> Value {
        let mut v = vec!["exec", "--json", id, "--", "python3", "-c", program];
        v.extend(args.iter().map(String::as_str));
        let o = self.sandbox(&v);
        assert!(o.ok(), "{o}");
        serde_json::from_str(o.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {o}"))
    }

    /// Box `id`'s `refused` in `sandbox list --format json`, and how long the listing took.
    #[track_caller]
    fn listed_refused(&self, id: &str) -> (Value, Duration) {
        let t = Instant::now();
        let o = self.sandbox(&["list", "--format", "json"]);
        let took = t.elapsed();
        assert!(o.ok(), "{o}");
        let all: Value = serde_json::from_str(o.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {o}"));
        let one = all.as_array().and_then(|a| a.iter().find(|b| b["id"] == id)).cloned();
        (one.unwrap_or_else(|| panic!("{id} not listed: {o}"))["refused"].clone(), took)
    }
}

/// The seed attack: a box's SSRF to the metadata address is named in its result, with a UDP
/// datagram to a private address and a connection to the host's own uplink address; the public
/// address it reached is not listed. A box that only reaches the public address reports nothing.
#[test]
fn refused_destinations_are_named_in_the_result() {
    require_root_and_nft!();
    let net = Net::new("sbx_blocked_named");
    let targets = [tcp(PUBLIC, 80), tcp(METADATA, 80), udp(PRIVATE[0], 9), tcp(HOST_UPLINK, 80)];
    let res = net.run_json_probe(&[], &targets);
    let clean = net.run_json_probe(&[], &[tcp(PUBLIC, 80)]);
    let seen = connections(&res["refused"]);
    saw(net.sb.name, format!("probe {:?}, connections {seen:?}; clean box: {}", probed(&res), clean["refused"]));
    let out = probed(&res);
    assert!(out[&tcp(PUBLIC, 80)].starts_with("hello_from_"), "the public address is reached: {res}");
    for t in &targets[1..] {
        assert!(out[t].starts_with("refused:"), "{t} is refused: {res}");
    }
    let want = vec![conn(PRIVATE[0], "udp", 9, 1), conn(METADATA, "tcp", 80, 1), conn(HOST_UPLINK, "tcp", 80, 1)];
    let mut want = want;
    want.sort();
    assert_eq!(seen, want, "each refused destination once, the allowed one not at all: {res}");
    assert_eq!(res["refused"].get("connections_unlisted"), None, "{res}");
    assert!(probed(&clean)[&tcp(PUBLIC, 80)].starts_with("hello_from_"), "{clean}");
    assert_eq!(clean.get("refused"), None, "a clean box reports nothing refused: {clean}");
    net.sb.assert_clean("blocked run");
}

/// A launched egress box: each exec's result has the connections refused while it ran, `list`
/// has the box's whole record so far, and `terminate --json` the same.
#[test]
fn a_launched_boxs_record_is_cumulative() {
    require_root_and_nft!();
    let net = Net::new("sbx_blocked_cumulative");
    let id = net.launch(&["--network", "egress"]);
    let first = net.exec_json(&id, PROBE, &[tcp(METADATA, 80)]);
    let second = net.exec_json(&id, PROBE, &[tcp(METADATA, 80), udp(PRIVATE[1], 5353)]);
    let (listed, _) = net.listed_refused(&id);
    let o = net.sandbox(&["terminate", "--json", &id]);
    saw(
        net.sb.name,
        format!(
            "first exec {}, second {}, listed {listed}, terminate {}",
            first["refused"], second["refused"], o.stdout
        ),
    );
    assert!(o.ok(), "{o}");
    assert_eq!(connections(&first["refused"]), vec![conn(METADATA, "tcp", 80, 1)], "{first}");
    let mut second_want = vec![conn(METADATA, "tcp", 80, 1), conn(PRIVATE[1], "udp", 5353, 1)];
    second_want.sort();
    assert_eq!(connections(&second["refused"]), second_want, "the second exec's own share: {second}");
    let mut whole = vec![conn(METADATA, "tcp", 80, 2), conn(PRIVATE[1], "udp", 5353, 1)];
    whole.sort();
    assert_eq!(connections(&listed), whole, "list: the box's whole record");
    let term: Value = serde_json::from_str(o.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {o}"));
    assert_eq!(term["id"], json!(id));
    assert_eq!(connections(&term["refused"]), whole, "terminate: the same record");
    assert!(net.net_leftovers().is_empty(), "{:?}", net.net_leftovers());
}

/// 10,000 datagrams to as many private destinations: the record keeps 64, counts the rest as
/// unlisted, the metadata address is still refused once the record is full, and `list` stays
/// prompt.
const FLOOD: &str = r#"
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(10000):
    s.sendto(b"x", ("10.%d.%d.%d" % (i >> 16, (i >> 8) & 255, i & 255), 1000 + i % 7))
    if i % 50 == 49: time.sleep(0.001)
print("sent")
"#;

#[test]
fn a_flood_of_destinations_is_capped() {
    require_root_and_nft!();
    let net = Net::new("sbx_blocked_flood");
    let id = net.launch(&["--network", "egress"]);
    let flood = net.exec_json(&id, FLOOD, &[]);
    // Let the last datagrams cross the link before the record is read.
    std::thread::sleep(Duration::from_millis(300));
    let after = net.exec_json(&id, PROBE, &[tcp(METADATA, 80)]);
    let (listed, took) = net.listed_refused(&id);
    let seen = connections(&listed);
    let total: u64 = seen.iter().map(|c| c.3).sum::<u64>() + listed["connections_unlisted"].as_u64().unwrap_or(0);
    saw(
        net.sb.name,
        format!(
            "flood: {} listed, {} unlisted ({total} in all), list took {took:?}; metadata after: {:?} {}",
            seen.len(),
            listed["connections_unlisted"],
            probed(&after),
            after["refused"]
        ),
    );
    assert_eq!(flood["stdout"]["text"], json!("sent\n"), "{flood}");
    assert_eq!(seen.len(), 64, "the first 64 destinations are listed: {listed}");
    assert!(seen.iter().all(|c| c.3 == 1 && c.0.starts_with("10.")), "{listed}");
    // Packets are what is counted: a connect's SYN is sent again when the refusal reaches the
    // socket while its owner holds it (the kernel then keeps the error as a soft one), so the
    // metadata attempt may count twice. Every datagram counts once.
    assert!((10_001..=10_002).contains(&total), "every datagram and the metadata attempt counted: {listed}");
    assert!(probed(&after)[&tcp(METADATA, 80)].starts_with("refused:"), "a full record lets nothing through");
    let unlisted = after["refused"]["connections_unlisted"].as_u64();
    assert!(matches!(unlisted, Some(1 | 2)), "the metadata attempt, unlisted: {after}");
    assert_eq!(total - unlisted.unwrap_or(0), 10_000, "every datagram once: {listed}");
    assert!(took < Duration::from_secs(2), "list took {took:?}");
}

/// Without `--network egress` a box has loopback only: its connections and datagrams off the box
/// fail with ENETUNREACH, as before, and are counted; a box that only uses loopback reports
/// nothing.
#[test]
fn a_loopback_only_box_counts_what_had_no_route() {
    require_root!();
    let sb = Sbx::new("sbx_blocked_loopback");
    let program = "import socket, errno\n\
         out = []\n\
         for a in [('169.254.169.254', 80), ('10.1.2.3', 443)]:\n\
         \x20   try: socket.create_connection(a, timeout=3)\n\
         \x20   except OSError as e: out.append(errno.errorcode[e.errno])\n\
         try: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('8.8.8.8', 53))\n\
         except OSError as e: out.append(errno.errorcode[e.errno])\n\
         print(' '.join(out))";
    let (res, o) = sb.run_json(&[], &["python3", "-c", program]);
    let clean = "import socket\n\
         s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n\
         socket.create_connection(s.getsockname()).close()";
    let (quiet, _) = sb.run_json(&[], &["python3", "-c", clean]);
    saw(sb.name, format!("stdout {}, refused {}; loopback only: {}", res["stdout"]["text"], res["refused"], quiet));
    assert_eq!(res["stdout"]["text"], json!("ENETUNREACH ENETUNREACH ENETUNREACH\n"), "errno as before\n{o}");
    assert_eq!(res["refused"]["network_unreachable"], json!(3), "{res}");
    assert_eq!(quiet["exit_code"], json!(0), "{quiet}");
    assert_eq!(quiet.get("refused"), None, "loopback use is nothing refused: {quiet}");
    sb.assert_clean("loopback run");
}
