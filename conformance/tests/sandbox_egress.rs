//! `tinyrun sandbox --network egress`, driven through the binary, entirely inside network
//! namespaces this test makes; no packet leaves the machine.
//!
//! The topology: tinyrun itself runs in a test namespace "host" (`nsenter --net`), whose default
//! route goes over a veth pair to a second test namespace "internet". The internet namespace
//! serves HTTP on every address it has: a public-looking 198.51.100.10 and .11, the metadata
//! address 169.254.169.254, and private addresses in 10/8, 172.16/12, 192.168/16 and 100.64/10;
//! a UDP echo on port 53 stands in for a resolver at 10.55.0.53. The host namespace serves HTTP
//! on its own uplink address (203.0.113.2) and so on the box's gateway address too.
//!
//! Every probe first runs from the host namespace itself, as a control: each server answers
//! there, so a refusal seen from the box is the box's rules, not a dead server. Checked: the
//! public address is reached (through NAT) and nothing else is; `--allow-host` narrows to one
//! address and port; `--dns` writes the box's resolv.conf and opens port 53 of the resolver and
//! nothing else there; IPv6 from the box reaches not even the host's link-local address on its
//! link; the default stays loopback only; after `run`, `terminate` and a killed
//! supervisor (also one killed mid set-up, then the next run) no veth, nftables table or route is
//! left; bad egress options fail with nothing left; a box whose set-up fails (no free link, rules
//! the kernel refuses) does not start; a pooled egress box serves only runs with the same egress
//! options.
//!
//! Forwarding: the host namespace starts with `ip_forward` 0 (and gets back whatever it had when
//! the test ends); every check of what is left includes `ip_forward` back at 0. With two more
//! namespaces routed through the host (lan a and lan b), an egress box does not make the host
//! forward a to b, and a host that forwards already keeps forwarding, during and after a box.
//!
//! Each test prints `SANDBOX <name>: <what it saw>` before it asserts.

#[macro_use]
mod egress_common;

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use egress_common::*;
use tinyrun_conformance::kv;
use tinyrun_conformance::sandbox::{saw, wait_for};

/// The box reaches the public address through NAT (the server sees the host's uplink address,
/// not the box's), and none of: the metadata address, an address in each private range, the
/// host's own uplink address, the box's gateway. Every one of them answers the host namespace.
/// Then: nothing of the box's networking is left. And without `--network egress` the box has
/// loopback only.
#[test]
fn egress_reaches_public_addresses_only() {
    require_root_and_nft!();
    let net = Net::new("sbx_egress_public");
    let mut refused: Vec<String> = vec![tcp(METADATA, 80), tcp(HOST_UPLINK, 80), tcp(GATEWAY, 80)];
    refused.extend(PRIVATE.iter().map(|a| tcp(a, 80)));
    let mut targets = vec![tcp(PUBLIC, 80)];
    targets.extend(refused.iter().cloned());
    // The gateway exists only while a box does: the control for it is the uplink address, the
    // same host namespace's server.
    let control_targets: Vec<String> = targets.iter().filter(|t| !t.contains(GATEWAY)).cloned().collect();
    let control = net.control(&control_targets);
    let before = net.net_leftovers();
    let (res, o) = net.run_probe(&["--network", "egress"], &targets);
    let after = net.net_leftovers();
    let (plain, po) = net.run_probe(&[], &[tcp(PUBLIC, 80)]);
    saw(
        net.sb.name,
        format!(
            "control from the host namespace: {control:?}; from the box: exit {:?} {res:?}; networking left \
             before: {before:?}, after: {after:?}; default network: {plain:?}",
            o.code()
        ),
    );
    for t in &control_targets {
        assert!(reached(&control, t), "control: {t} must answer the host namespace: {control:?}");
    }
    assert!(o.ok(), "{o}");
    let nat = format!("hello_from_{PUBLIC}_to_{HOST_UPLINK}");
    assert_eq!(res.get(&tcp(PUBLIC, 80)), Some(&nat), "reached through NAT to the uplink's address\n{o}");
    for t in &refused {
        let v = res.get(t).unwrap_or_else(|| panic!("no result for {t}\n{o}"));
        assert!(v.starts_with("refused:"), "{t} must be refused from the box, got {v}\n{o}");
    }
    assert!(before.is_empty() && after.is_empty(), "left behind: {after:?} (before: {before:?})");
    assert!(po.ok(), "{po}");
    assert!(plain[&tcp(PUBLIC, 80)].starts_with("refused:"), "the default network is loopback only: {plain:?}");
    net.sb.assert_clean("egress run");
}

/// A launched box with `--allow-host 198.51.100.11:80 --dns 10.55.0.53`: it reaches that address
/// and port only (not port 8080 there, not the other public address), its resolv.conf names the
/// resolver, port 53 of the resolver answers (UDP) though it is private, and its HTTP port does
/// not. The allowlist set-up survives between execs; terminate removes every link, table, route.
#[test]
fn allow_host_narrows_and_dns_opens_port_53_only() {
    require_root_and_nft!();
    let net = Net::new("sbx_egress_allow");
    let targets = vec![
        tcp(PUBLIC2, 80),
        tcp(PUBLIC2, 8080),
        tcp(PUBLIC, 80),
        format!("udp:{RESOLVER}:53"),
        tcp(RESOLVER, 80),
        tcp(METADATA, 80),
    ];
    let control = net.control(&targets);
    let mut v = vec!["launch"];
    v.extend(net.sb.common());
    let allow = format!("{PUBLIC2}:80");
    // A lifetime longer than the preset's 10 s, which a loaded host can spend here.
    v.extend(["--lifetime", "10m", "--network", "egress", "--allow-host", &allow, "--dns", RESOLVER]);
    let o = net.sandbox(&v);
    assert!(o.ok(), "{o}");
    let id = o.stdout.trim().to_string();
    let copy = format!("{}", net.probe.display());
    let cp = net.sandbox(&["cp", &copy, &format!("{id}:/work/probe.py")]);
    assert!(cp.ok(), "{cp}");
    let mut e = vec!["exec", id.as_str(), "--", "python3", "/work/probe.py"];
    e.extend(targets.iter().map(String::as_str));
    let first = net.sandbox(&e);
    let again = net.sandbox(&e);
    let conf = net.sandbox(&["exec", &id, "--", "cat", "/etc/resolv.conf"]);
    let rules = net.ruleset();
    let term = net.sandbox(&["terminate", &id]);
    let after = net.net_leftovers();
    let (res, res2) = (kv(&first.stdout), kv(&again.stdout));
    saw(
        net.sb.name,
        format!(
            "control: {control:?}; box: {res:?}; again: {res2:?}; resolv.conf {:?}; terminate exit {:?}; left: \
             {after:?}",
            conf.stdout,
            term.code()
        ),
    );
    for t in &targets {
        assert!(reached(&control, t), "control: {t} must answer the host namespace: {control:?}");
    }
    assert!(first.ok() && again.ok(), "{first}\n{again}");
    assert_eq!(res, res2, "the same rules on every exec");
    assert!(res[&tcp(PUBLIC2, 80)].starts_with(&format!("hello_from_{PUBLIC2}_to_")), "{rules}");
    assert_eq!(res[&format!("udp:{RESOLVER}:53")], "echo:q", "port 53 of the named resolver: {rules}");
    for t in [tcp(PUBLIC2, 8080), tcp(PUBLIC, 80), tcp(RESOLVER, 80), tcp(METADATA, 80)] {
        assert!(res[&t].starts_with("refused:"), "{t} must be refused, got {}\n{rules}", res[&t]);
    }
    assert!(conf.ok() && conf.stdout.lines().any(|l| l.trim() == format!("nameserver {RESOLVER}")), "{conf}");
    assert!(term.ok(), "{term}");
    assert!(after.is_empty(), "left behind after terminate: {after:?}");
    net.sb.assert_clean("terminate");
}

/// `sandbox run --network egress -- sleep 60`, its supervisor killed with SIGKILL: the box dies
/// with it, and the next `sandbox run` removes the table it left; nothing of it remains.
#[test]
fn a_killed_supervisor_leaks_no_network() {
    require_root_and_nft!();
    let net = Net::new("sbx_egress_crash");
    let mut v = vec!["run"];
    v.extend(net.sb.common());
    v.extend(["--network", "egress", "--", "sleep", "60"]);
    let running = net.sb.rt.spawn_cmd(net.tinyrun(&v));
    // Set-up is done once both are there: the table first, then the link.
    wait_for("the box's veth and table", 20, || {
        let left = net.net_leftovers();
        left.iter().any(|l| l.starts_with("nftables")) && left.iter().any(|l| l.starts_with("link trb-"))
    });
    let during = net.net_leftovers();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(running.child.id() as i32), nix::sys::signal::SIGKILL)
        .expect("kill");
    let killed = running.wait();
    // The box's namespace goes with its init, and the pair with it; the table is ours to remove.
    std::thread::sleep(Duration::from_millis(500));
    let after_kill = net.net_leftovers();
    let mut next = vec!["run"];
    next.extend(net.sb.common());
    next.extend(["--", "true"]);
    let o = net.sandbox(&next);
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut after = net.net_leftovers();
    while !after.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        after = net.net_leftovers();
    }
    saw(
        net.sb.name,
        format!(
            "while running: {during:?}; supervisor killed ({:?}); left then: {after_kill:?}; after the next run \
             (exit {:?}): {after:?}",
            killed.code(),
            o.code()
        ),
    );
    assert!(during.iter().any(|l| l.starts_with("link trb-")), "{during:?}");
    assert!(o.ok(), "{o}");
    assert!(after.is_empty(), "a killed box's networking left behind: {after:?}");
    net.sb.assert_clean("killed supervisor, then a run");
}

/// Egress options that can't be honoured fail before anything is made, naming the flag: `--dns`
/// or `--allow-host` without `--network egress`, an allowed host in a refused range, a loopback
/// resolver, a link range that covers the metadata address. And a box whose set-up fails (its
/// link range has no free /30: the host already uses it) does not start, and leaves nothing.
#[test]
fn bad_egress_options_and_failed_setup_leave_nothing() {
    require_root_and_nft!();
    let net = Net::new("sbx_egress_bad");
    let cases: [(&[&str], &str); 5] = [
        (&["--dns", "198.51.100.53"], "--dns"),
        (&["--allow-host", PUBLIC], "--allow-host"),
        (&["--network", "egress", "--allow-host", "10.1.2.3:443"], "10.0.0.0/8"),
        (&["--network", "egress", "--dns", "127.0.0.53"], "--dns"),
        (&["--network", "egress", "--egress-range", "169.254.0.0/16"], "169.254.169.254"),
    ];
    let mut seen = Vec::new();
    for (opts, needle) in cases {
        let mut v = vec!["run"];
        v.extend(net.sb.common());
        v.extend_from_slice(opts);
        v.extend(["--", "touch", "/work/started"]);
        let o = net.sandbox(&v);
        seen.push(format!("{opts:?}: exit {:?} {:?}", o.code(), o.stderr.trim()));
        assert!(!o.ok() && o.stderr.contains(needle), "{opts:?} must fail naming {needle}\n{o}");
    }
    // The whole range is taken by an address the host has: no /30 is free.
    sh(&net.host, "ip addr add 169.254.99.1/30 dev lo");
    let mut v = vec!["run"];
    v.extend(net.sb.common());
    v.extend(["--network", "egress", "--egress-range", "169.254.99.0/30", "--", "sh", "-c", "echo started"]);
    let o = net.sandbox(&v);
    sh(&net.host, "ip addr del 169.254.99.1/30 dev lo");
    let left = net.net_leftovers();
    seen.push(format!("full range: exit {:?} {:?}; left {left:?}", o.code(), o.stderr.trim()));
    saw(net.sb.name, seen.join("; "));
    assert!(!o.ok() && o.stderr.contains("no free /30") && !o.stdout.contains("started"), "{o}");
    assert!(left.is_empty(), "{left:?}");
    net.sb.assert_clean("failed egress set-up");
}

/// `pool fill 1 --network egress --allow-host PUBLIC:80`: a plain `run --pool` does not take that
/// box (it stays loopback only), a `run --pool` with the same egress options does and reaches
/// PUBLIC but not the metadata address; once the pool's refill is done and every box terminated,
/// no link, table or route is left.
#[test]
fn pooled_egress_boxes_serve_only_matching_runs() {
    require_root_and_nft!();
    let net = Net::new("sbx_egress_pool");
    let allow = format!("{PUBLIC}:80");
    let egress = ["--network", "egress", "--allow-host", allow.as_str()];
    let mut fill = vec!["pool", "fill", "1"];
    fill.extend(net.sb.common());
    fill.extend(egress);
    let filled = net.sandbox(&fill);
    assert!(filled.ok(), "{filled}");
    let pooled = filled.stdout.trim().to_string();
    let mut plain_opts = vec!["--pool"];
    let (plain, po) = net.run_probe(&plain_opts, &[tcp(PUBLIC, 80)]);
    let still_there = net.sb.rt.root().join("sandbox").join(&pooled).join("claimed").exists();
    plain_opts.extend(egress);
    let (res, o) = net.run_probe(&plain_opts, &[tcp(PUBLIC, 80), tcp(METADATA, 80)]);
    let taken = net.sb.rt.root().join("sandbox").join(&pooled).join("claimed").exists()
        || !net.sb.rt.root().join("sandbox").join(&pooled).exists();
    net.sb.wait_for_refills(10);
    // The pool first: terminating its boxes would only have them refilled.
    let drained = net.sandbox(&["pool", "drain", "--all"]);
    let mut terminated = vec![format!("pool drain --all: {:?}", drained.code())];
    for id in tinyrun_conformance::sandbox::names_in(&net.sb.rt.root().join("sandbox")) {
        let t = net.sandbox(&["terminate", &id]);
        terminated.push(format!("{id}: {:?}", t.code()));
    }
    let after = net.net_leftovers();
    saw(
        net.sb.name,
        format!(
            "filled {pooled}; plain run --pool: {plain:?} (pool box claimed: {still_there}); egress run --pool: \
             {res:?} (pool box taken: {taken}); terminated {terminated:?}; left: {after:?}"
        ),
    );
    assert!(po.ok() && o.ok(), "{po}\n{o}");
    assert!(plain[&tcp(PUBLIC, 80)].starts_with("refused:"), "a plain run got egress: {plain:?}");
    assert!(!still_there, "a plain run --pool claimed the egress box");
    assert!(taken, "the matching run --pool did not take the egress box");
    assert!(res[&tcp(PUBLIC, 80)].starts_with(&format!("hello_from_{PUBLIC}_to_")), "{res:?}");
    assert!(res[&tcp(METADATA, 80)].starts_with("refused:"), "{res:?}");
    assert!(after.is_empty(), "left behind: {after:?}");
}

/// `--image` whose /etc/resolv.conf is a symlink into /run (as images made for a booted system
/// have it): with `--dns` the box reads the named resolver there, and the image's symlink is
/// untouched. `--rootfs` of the same tree is the read-only lower layer of an overlay: the same
/// holds, and the caller's directory is not changed.
#[test]
fn dns_over_an_images_resolv_conf_symlink() {
    require_root_and_nft!();
    let net = Net::new("sbx_egress_image_dns");
    let dir = net.sb.rt.tempdir();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).expect("chmod");
    let img = dir.join("rootfs");
    let st = Command::new(tinyrun_conformance::workspace_root().join("bundles/mkrootfs"))
        .arg(&img)
        .stdout(Stdio::null())
        .status();
    assert!(st.expect("mkrootfs").success(), "mkrootfs failed");
    let link = img.join("etc/resolv.conf");
    let _ = fs::remove_file(&link);
    std::os::unix::fs::symlink("../run/systemd/resolve/stub-resolv.conf", &link).expect("symlink");
    let img_s = img.display().to_string();
    let run = |root_flag: &str| {
        let mut v = vec!["run"];
        v.extend(net.sb.common());
        v.extend([
            root_flag,
            img_s.as_str(),
            "--network",
            "egress",
            "--dns",
            RESOLVER,
            "--",
            "cat",
            "/etc/resolv.conf",
        ]);
        net.sandbox(&v)
    };
    let image = run("--image");
    let rootfs = run("--rootfs");
    let target = fs::read_link(&link).ok();
    saw(
        net.sb.name,
        format!(
            "--image: exit {:?} {:?}; --rootfs: exit {:?} {:?}; the image's link after: {target:?}",
            image.code(),
            image.stdout,
            rootfs.code(),
            rootfs.stdout
        ),
    );
    assert!(image.ok() && image.stdout.contains(&format!("nameserver {RESOLVER}")), "{image}");
    assert_eq!(target.as_deref(), Some(Path::new("../run/systemd/resolve/stub-resolv.conf")), "the image was changed");
    assert!(rootfs.ok() && rootfs.stdout.contains(&format!("nameserver {RESOLVER}")), "{rootfs}");
    assert!(net.net_leftovers().is_empty(), "{:?}", net.net_leftovers());
    net.sb.assert_clean("runs with --dns");
}

/// `owner.py`: makes the nftables table `ip tinyrun` (the name of tinyrun's forward guard) with
/// the owner flag, so that only this process's netlink socket may change it, and holds it until
/// killed (the kernel removes an owned table with its socket); prints `ready` once it is there.
const OWNER: &str = r#"
import socket, struct, sys
def msg(kind, flags, family, res, attrs=b""):
    body = struct.pack("BBH", family, 0, socket.htons(res)) + attrs
    return struct.pack("=IHHII", 16 + len(body), kind, flags, 0, 0) + body
def attr(kind, data):
    a = struct.pack("=HH", 4 + len(data), kind) + data
    return a + b"\0" * (-len(a) % 4)
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 12)
s.bind((0, 0))
table = attr(1, b"tinyrun\0") + attr(2, struct.pack(">I", 2))
s.send(msg(0x10, 1, 0, 10) + msg(0xa00, 1 | 4 | 0x400, 2, 0, table) + msg(0x11, 1, 0, 10))
err = struct.unpack("=i", s.recv(4096)[16:20])[0]
print("ready" if err == 0 else "error %d" % err, flush=True)
sys.stdin.read()
"#;

/// The rules fail to install: the forward guard's table is held by another process (an owned
/// table, which the kernel lets no one else change), so the box's one transaction is refused
/// whole. The box does not start, and no link, table of its own or forwarding is left.
#[test]
fn a_rule_that_fails_to_install_starts_nothing() {
    require_root_and_nft!();
    let net = Net::new("sbx_egress_rules_fail");
    let mut owner = Command::new("nsenter")
        .arg(format!("--net={}", net.host.display()))
        .args(["python3", "-c", OWNER])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("owner.py");
    let mut line = String::new();
    BufReader::new(owner.stdout.take().expect("stdout")).read_line(&mut line).expect("owner.py output");
    let held = net.net_leftovers();
    let mut v = vec!["run"];
    v.extend(net.sb.common());
    v.extend(["--network", "egress", "--", "sh", "-c", "echo started"]);
    let o = net.sandbox(&v);
    let while_held = net.net_leftovers();
    let _ = owner.kill();
    let _ = owner.wait();
    let left = net.net_leftovers();
    saw(
        net.sb.name,
        format!(
            "owner: {:?}, held {held:?}; run: exit {:?}, stderr {:?}, stdout {:?}; left while held {while_held:?}, \
             after {left:?}",
            line.trim(),
            o.code(),
            o.stderr.trim(),
            o.stdout
        ),
    );
    assert_eq!(line.trim(), "ready", "the owned table was not made");
    assert_eq!(held, ["nftables table ip tinyrun"], "only the owned table is there");
    assert!(!o.ok() && o.stderr.contains("install the box's egress rules"), "{o}");
    assert!(!o.stdout.contains("started"), "the box ran without its rules\n{o}");
    assert_eq!(while_held, held, "the refused run left something");
    assert!(left.is_empty(), "{left:?}");
    net.sb.assert_clean("a failed rule install");
}

/// The supervisor is killed the moment the box's table is in (somewhere in set-up, or just
/// after): the next `sandbox run` removes whatever it left, the forward guard with the table,
/// and forwarding is off again.
#[test]
fn a_supervisor_killed_mid_setup_leaks_no_network() {
    require_root_and_nft!();
    let net = Net::new("sbx_egress_killed_setup");
    let mut v = vec!["run"];
    v.extend(net.sb.common());
    v.extend(["--network", "egress", "--", "sleep", "60"]);
    let running = net.sb.rt.spawn_cmd(net.tinyrun(&v));
    let table = || out(&net.host, &["nft", "list", "tables"]).contains("inet tinyrun-");
    wait_for("the box's table", 20, table);
    let pid = nix::unistd::Pid::from_raw(running.child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::SIGKILL).expect("kill");
    let killed = running.wait();
    let after_kill = net.net_leftovers();
    let mut next = vec!["run"];
    next.extend(net.sb.common());
    next.extend(["--", "true"]);
    let n = net.sandbox(&next);
    let after = net.net_leftovers();
    saw(
        net.sb.name,
        format!(
            "killed run: {:?}; left then: {after_kill:?}; next run exit {:?}; left: {after:?}",
            killed.code(),
            n.code()
        ),
    );
    assert!(!killed.ok(), "the run was not killed: {killed}");
    assert!(after_kill.iter().any(|l| l.starts_with("nftables")), "the rules were installed: {after_kill:?}");
    assert!(n.ok(), "{n}");
    assert!(after.is_empty(), "a killed set-up's networking left behind: {after:?}");
    net.sb.assert_clean("a set-up killed, then a run");
}

/// One HTTP GET to `[ADDR%DEV]:8081` over IPv6, 2 s at most: `v6=<body or error class>`.
const PROBE6: &str = r#"
import socket, sys
try:
    s = socket.create_connection((sys.argv[1], 8081), timeout=2)
    s.sendall(b"GET / HTTP/1.0\r\n\r\n")
    d = b""
    while True:
        c = s.recv(4096)
        if not c: break
        d += c
    print("v6=" + d.decode(errors="replace").strip().splitlines()[-1].replace(" ", "_"))
except OSError as e:
    print("v6=refused:" + type(e).__name__)
"#;

/// The host's end of the box's link has an IPv6 link-local address, as every link does, and the
/// host serves HTTP on IPv6 there: from the box it is refused (IPv6 from a box reaches nothing,
/// fe80::/10 with the rest). Both ends' addresses are waited for until usable (past duplicate
/// address detection), so a refusal is the rules'; the control is the host namespace reaching the
/// same address itself.
#[test]
fn ipv6_from_the_box_reaches_nothing() {
    require_root_and_nft!();
    let net = Net::new("sbx_egress_ipv6");
    let mut v = vec!["launch"];
    v.extend(net.sb.common());
    v.extend(["--lifetime", "10m", "--network", "egress"]);
    let o = net.sandbox(&v);
    assert!(o.ok(), "{o}");
    let id = o.stdout.trim().to_string();
    let link = net
        .net_leftovers()
        .into_iter()
        .find_map(|l| l.strip_prefix("link ").map(str::to_string))
        .expect("the box's link");
    let pid = net.sb.list().into_iter().find(|(i, _, _)| *i == id).map(|(_, _, p)| p).expect("box pid");
    let boxns = PathBuf::from(format!("/proc/{pid}/ns/net"));
    let usable = |ns: &Path, dev: &str| {
        let a = out(ns, &["ip", "-6", "addr", "show", "dev", dev, "scope", "link"]);
        a.contains("inet6 fe80") && !a.contains("tentative")
    };
    wait_for("both ends' link-local addresses", 10, || usable(&net.host, &link) && usable(&boxns, "eth0"));
    let a = out(&net.host, &["ip", "-6", "-o", "addr", "show", "dev", &link, "scope", "link"]);
    let addr = a.split_whitespace().skip_while(|w| *w != "inet6").nth(1).and_then(|c| c.split('/').next());
    let addr = addr.expect("link-local address").to_string();
    let control = out(&net.host, &["python3", "-c", PROBE6, &format!("{addr}%{link}")]);
    let probe = net.sandbox(&["exec", &id, "--", "python3", "-c", PROBE6, &format!("{addr}%eth0")]);
    saw(net.sb.name, format!("host link {link} at {addr}: control {control:?}, from the box {:?}", probe.stdout));
    assert!(control.trim().starts_with("v6=hello_from_"), "control: {control}");
    assert!(probe.ok() && probe.stdout.trim().starts_with("v6=refused:"), "{probe}");
}

/// The host namespace does not forward (`ip_forward` 0), and two LAN namespaces are routed
/// through it. An egress box needs forwarding and gets it: while the box runs, `ip_forward` is 1
/// and the box reaches the public address, yet lan a still does not reach lan b through the host
/// (only the boxes' traffic is forwarded). Once the box is terminated, `ip_forward` is 0 again
/// and no table is left, not even the empty guard table a crash left before the box. Controls: b
/// answers the host namespace, a reaches the host.
#[test]
fn egress_does_not_make_the_host_a_router() {
    require_root_and_nft!();
    let mut net = Net::new("sbx_egress_no_router");
    let a = net.lan();
    let b = tcp(LAN_B, 80);
    let control = net.control(std::slice::from_ref(&b));
    let a_to_host = net.probe_in(&a, &[tcp(LAN_A_GATEWAY, 80)]);
    // A guard left by a crash between turning forwarding off and removing the guard: replaced.
    sh(&net.host, "nft add table ip tinyrun");
    let id = net.launch(&["--network", "egress"]);
    let forwarding = ip_forward(&net.host);
    let from_box = net.exec_probe(&id, &[tcp(PUBLIC, 80)]);
    let a_to_b = net.probe_in(&a, std::slice::from_ref(&b));
    let tables = out(&net.host, &["nft", "list", "tables"]);
    let term = net.sandbox(&["terminate", &id]);
    let after = ip_forward(&net.host);
    let left = net.net_leftovers();
    saw(
        net.sb.name,
        format!(
            "control: {control:?}, a to the host: {a_to_host:?}; with the box: ip_forward {forwarding}, the box \
             {from_box:?}, a to b {a_to_b:?}, tables {tables:?}; after terminate (exit {:?}): ip_forward {after}, \
             left {left:?}",
            term.code()
        ),
    );
    assert!(reached(&control, &b), "control: b must answer the host namespace: {control:?}");
    assert!(reached(&a_to_host, &tcp(LAN_A_GATEWAY, 80)), "control: a must reach the host: {a_to_host:?}");
    assert_eq!(forwarding, "1", "the box's traffic is forwarded");
    assert!(reached(&from_box, &tcp(PUBLIC, 80)), "the box reaches the public address: {from_box:?}");
    assert!(a_to_b[&b].starts_with("refused:"), "the host forwarded a to b: {a_to_b:?}");
    assert!(term.ok(), "{term}");
    assert_eq!(after, "0", "forwarding goes off with the last box");
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// A host namespace that forwards already (`ip_forward` 1) is a router on purpose: lan a reaches
/// lan b before, while an egress box runs (and reaches the public address), and after it is
/// terminated; `ip_forward` stays 1, and tinyrun adds no table but the box's own.
#[test]
fn a_host_that_forwards_keeps_forwarding() {
    require_root_and_nft!();
    let mut net = Net::with_forwarding("sbx_egress_router", true);
    let a = net.lan();
    let b = tcp(LAN_B, 80);
    let before = net.probe_in(&a, std::slice::from_ref(&b));
    let id = net.launch(&["--network", "egress"]);
    let from_box = net.exec_probe(&id, &[tcp(PUBLIC, 80)]);
    let during = net.probe_in(&a, std::slice::from_ref(&b));
    let tables = out(&net.host, &["nft", "list", "tables"]);
    let term = net.sandbox(&["terminate", &id]);
    let after = net.probe_in(&a, std::slice::from_ref(&b));
    let forwarding = ip_forward(&net.host);
    let left = net.net_leftovers();
    saw(
        net.sb.name,
        format!(
            "a to b before: {before:?}; with the box: the box {from_box:?}, a to b {during:?}, tables {tables:?}; \
             after terminate (exit {:?}): a to b {after:?}, ip_forward {forwarding}, left {left:?}",
            term.code()
        ),
    );
    assert!(reached(&before, &b), "control: a reaches b through a forwarding host: {before:?}");
    assert!(reached(&from_box, &tcp(PUBLIC, 80)), "the box reaches the public address: {from_box:?}");
    assert!(reached(&during, &b), "a box stopped the host's forwarding: {during:?}");
    assert_eq!(tables.lines().filter(|l| !l.trim().is_empty()).count(), 1, "the box's table only: {tables}");
    assert!(term.ok(), "{term}");
    assert!(reached(&after, &b), "the host stopped forwarding after the box: {after:?}");
    assert_eq!(forwarding, "1");
    assert!(left.is_empty(), "left behind: {left:?}");
}
