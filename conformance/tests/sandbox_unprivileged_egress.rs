//! `tinyrun sandbox --network egress` run by an ordinary user: its box reaches the network
//! through pasta, guarded by a table the runtime loads into the box's own network namespace.
//! Driven through the binary as a throw-away user (`unprivileged_common`), entirely inside
//! network namespaces this test makes (`egress_common`'s topology: the user's tinyrun runs in
//! the "host" namespace, whose default route leads to the "internet" namespace with a public
//! 198.51.100.10, the metadata address and private addresses); no packet leaves the machine.
//!
//! Each of the user's commands runs in a mount namespace of its own where `/dev/net/tun` is a
//! 0666 node, as Debian's udev makes it (this host's is 0600, and pasta opens it as the user).
//! The host namespace gets a second address of its own (192.0.2.77, outside every refused range)
//! and a service on its loopback only.
//!
//! Checked, each probe also run from the host namespace as a control: the public address is
//! reached (the server sees the host's address: pasta's sockets are the host's); the metadata
//! address, a private one, the host's own second address and its gateway are refused and listed
//! in the result's `refused`, and the host's loopback-only service is unreachable; the box can't
//! remove its rules or change its routes (EPERM, with and without the seccomp filter; the guard
//! still holds afterwards and the table is still there); a pool's boxes each wait with a pasta of
//! their own, ended with the box that a run took, and by drain; after a run, a terminate, a failed
//! start and a killed supervisor (then the next command) no pasta, record, bundle or process is
//! left, and nothing was made in the host namespace; without pasta, an error naming the package.
//!
//! Each test prints `SANDBOX <name>: <what it saw>` before it asserts.

#[macro_use]
mod egress_common;
mod unprivileged_common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use egress_common::*;
use serde_json::Value;
use tinyrun_conformance::kv;
use tinyrun_conformance::sandbox::{saw, wait_for};
use unprivileged_common::{parse, text, Host, User, PATH};

const BE: &str = "--limits=best-effort";
/// The host namespace's second address, and its loopback-only service's port.
const HOST_OTHER: &str = "192.0.2.77";
const LOOPBACK_PORT: u16 = 9099;
/// The host namespace's gateway (the internet namespace's side of the link).
const UPLINK_GATEWAY: &str = "203.0.113.1";

/// Serves HTTP on 127.0.0.1:PORT only; prints `ready` once bound.
const LOOPBACK_SERVER: &str = r#"
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = b"hello from the host's loopback\n"
        self.send_response(200); self.send_header("Content-Length", str(len(b))); self.end_headers()
        self.wfile.write(b)
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H)
print("ready", flush=True)
s.serve_forever()
"#;

macro_rules! require_pasta {
    () => {
        require_root_and_nft!();
        if !Path::new("/usr/bin/pasta").exists() {
            tinyrun_conformance::missing_prerequisite!("pasta (conformance/install-deps installs passt)");
        }
        let Some(host) = Host::here() else { return };
        if host != Host::Refused {
            tinyrun_conformance::skip!("the egress topology runs the user's commands with nsenter, not in its manager");
        }
    };
}

/// The topology, the user, and the probe where the user can read it.
struct Setup {
    /// First: dropped first, it kills the user's processes (pastas too) before the namespaces go.
    u: User,
    net: Net,
    probe: PathBuf,
}

fn setup(name: &'static str, tag: &str) -> Setup {
    let mut net = Net::new(name);
    sh(&net.host, &format!("ip addr add {HOST_OTHER}/32 dev lo"));
    let loopback = net.sb.rt.tempdir().join("loopback.py");
    fs::write(&loopback, LOOPBACK_SERVER).expect("loopback server");
    let mut c = Command::new("nsenter");
    c.arg(format!("--net={}", net.host.display())).arg("python3").arg(&loopback).arg(LOOPBACK_PORT.to_string());
    let mut child = c.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("loopback server");
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().expect("stdout")), &mut line)
        .expect("loopback server output");
    net.servers.push(child);
    assert_eq!(line.trim(), "ready", "the loopback-only server did not start");
    let u = User::new(Host::Refused, tag, true);
    let probe = u.work.join("probe.py");
    fs::write(&probe, PROBE).expect("probe");
    Setup { u, net, probe }
}

impl Setup {
    /// `tinyrun sandbox ARGS` as the user with `PATH` `path`, in the host namespace, in a mount
    /// namespace of its own where /dev/net/tun is a 0666 node (see the module doc).
    fn command(&self, path: &str, tun: bool, args: &[&str]) -> Command {
        let inner = self.u.command(path, false, args);
        let tun_dir = self.u.work.join("tun");
        let _ = fs::create_dir(&tun_dir);
        let script = if tun {
            "/usr/bin/mount -t tmpfs -o mode=755,size=16k tmpfs \"$TUN\"; /usr/bin/mknod -m 666 \"$TUN/tun\" c 10 200; \
             /usr/bin/mount --bind \"$TUN/tun\" /dev/net/tun; exec \"$@\""
        } else {
            "exec \"$@\""
        };
        let mut c = Command::new("/usr/bin/nsenter");
        c.arg(format!("--net={}", self.net.host.display()))
            .args(["--", "/usr/bin/unshare", "-m", "--propagation", "private", "/bin/sh", "-ec", script, "sh"])
            .arg(inner.get_program())
            .args(inner.get_args())
            .env_clear()
            .env("TUN", &tun_dir)
            .current_dir(&self.u.work)
            .stdin(Stdio::null());
        for (k, v) in inner.get_envs() {
            if let Some(v) = v {
                c.env(k, v);
            }
        }
        c
    }

    fn sandbox(&self, args: &[&str]) -> (bool, String, String) {
        self.u.output(self.command(PATH, true, args))
    }

    /// `run --json --network egress OPTS --copy-in probe -- python3 probe TARGETS`: the result,
    /// and target => outcome.
    fn probe(&self, opts: &[&str], targets: &[String]) -> (Value, std::collections::BTreeMap<String, String>) {
        let copy = format!("{}:/work/probe.py", self.probe.display());
        let mut v = vec!["run", "--json", BE, "--network", "egress"];
        v.extend_from_slice(opts);
        v.extend(["--copy-in", &copy, "--", "python3", "/work/probe.py"]);
        v.extend(targets.iter().map(String::as_str));
        let res = parse(self.sandbox(&v));
        let outcomes = kv(&text(&res, "stdout"));
        (res, outcomes)
    }

    /// The user's pasta processes.
    fn pastas(&self) -> Vec<i32> {
        self.u.processes().into_iter().filter(|p| comm(*p).starts_with("pass")).collect()
    }

    /// A process of the user's in a network namespace other than the host's (its box's).
    fn in_the_box(&self) -> Option<i32> {
        let ns = |p: &str| fs::read_link(format!("{p}/ns/net")).ok();
        let host = ns(&format!("/proc/{}", self.net.servers.first().map_or(0, std::process::Child::id)));
        self.u.processes().into_iter().find(|p| ns(&format!("/proc/{p}")) != host)
    }

    /// What is left of the user's egress: files under sandbox-net (but its lock), pastas, and
    /// anything in the host namespace.
    fn leftovers(&self) -> Vec<String> {
        let mut left: Vec<String> = tinyrun_conformance::sandbox::names_in(&self.u.root().join("sandbox-net"))
            .into_iter()
            .map(|n| format!("record {n}"))
            .collect();
        left.extend(self.pastas().iter().map(|p| format!("pasta {p}")));
        left.extend(self.net.net_leftovers());
        left
    }

    fn assert_clean(&self, when: &str) {
        wait_for(&format!("no pasta left {when}"), 10, || self.pastas().is_empty());
        assert_eq!(self.leftovers(), Vec::<String>::new(), "{when}");
        self.u.assert_nothing_left();
    }
}

fn comm(pid: i32) -> String {
    fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default().trim().to_string()
}

/// The result's `refused.connections` as `ADDR:PORT`.
fn refused(res: &Value) -> Vec<String> {
    let all = res["refused"]["connections"].as_array().cloned().unwrap_or_default();
    all.iter().map(|c| format!("{}:{}", c["address"].as_str().unwrap_or("?"), c["port"])).collect()
}

/// The public address is reached, through the host's sockets; the metadata address, a private
/// address, the host's own second address and its gateway are refused by the box's rules and
/// reported; the host's loopback-only service is not reachable (the box's loopback is its own,
/// and no port of it leads to the host's). Each answers the host namespace itself. Nothing is
/// left afterwards, and nothing was made in the host namespace.
#[test]
fn an_ordinary_users_egress_reaches_public_addresses_only() {
    require_pasta!();
    let s = setup("sbx_unpriv_egress_public", "p");
    let guarded = [tcp(METADATA, 80), tcp(PRIVATE[0], 80), tcp(HOST_OTHER, 80), tcp(UPLINK_GATEWAY, 80)];
    let loopback = [tcp("127.0.0.1", LOOPBACK_PORT)];
    let mut targets = vec![tcp(PUBLIC, 80)];
    targets.extend(guarded.iter().chain(&loopback).cloned());
    let control = s.net.control(&targets);
    let (res, got) = s.probe(&[], &targets);
    let listed = refused(&res);
    let left = s.leftovers();
    saw(s.net.sb.name, format!("control: {control:?}; from the box: {got:?}; refused: {listed:?}; left: {left:?}"));
    for t in &targets {
        assert!(reached(&control, t), "control: {t} must answer the host namespace: {control:?}");
    }
    assert_eq!(res["exit_code"], 0, "{res}");
    let through_host = format!("hello_from_{PUBLIC}_to_{HOST_UPLINK}");
    assert_eq!(got.get(&tcp(PUBLIC, 80)), Some(&through_host), "{res}");
    for t in guarded.iter().chain(&loopback) {
        let v = got.get(t).unwrap_or_else(|| panic!("no result for {t}: {res}"));
        assert!(v.starts_with("refused:"), "{t} must not be reached from the box, got {v}");
    }
    for t in &guarded {
        let addr_port = t.trim_start_matches("tcp:");
        assert!(listed.iter().any(|l| l == addr_port), "{addr_port} must be in refused: {listed:?}");
    }
    s.assert_clean("after the run");
}

/// A launched box tries to take its guard down: flush the ruleset, delete its table, remove its
/// default route, take its link down, with and without the seccomp filter (which stops the
/// netlink socket itself). Each fails with EPERM: the namespace is owned by the caller's user
/// namespace, where the box holds nothing. Afterwards the metadata address is still refused,
/// the public one still reached, and the box's table is still in its namespace.
#[test]
fn the_box_cannot_remove_its_rules() {
    require_pasta!();
    let s = setup("sbx_unpriv_egress_attack", "a");
    let attack = "nft flush ruleset; echo flush=$?; ip route del default; echo route=$?; \
                  dev=$(ip -o link show | grep -v ': lo:' | cut -d: -f2 | tr -d ' '); \
                  ip link set \"$dev\" down; echo link=$?";
    for seccomp in [true, false] {
        let copy = format!("{}:/work/probe.py", s.probe.display());
        let mut opts = vec!["launch", BE, "--network", "egress", "--lifetime", "5m", "--copy-in", &copy];
        if !seccomp {
            opts.push("--no-seccomp");
        }
        let (ok, id, err) = s.sandbox(&opts);
        assert!(ok, "launch: {err}");
        let id = id.trim().to_string();
        let (_, out, errs) = s.sandbox(&["exec", &id, "--", "sh", "-c", attack]);
        let targets = [tcp(METADATA, 80), tcp(PUBLIC, 80)];
        let (_, after, _) = s.sandbox(&["exec", &id, "--", "python3", "/work/probe.py", &targets[0], &targets[1]]);
        let after = kv(&after);
        let table = out_of(s.in_the_box().expect("a process in the box"), &["nft", "list", "ruleset"]);
        let (ok_t, _, t_err) = s.sandbox(&["terminate", &id]);
        saw(
            s.net.sb.name,
            format!("seccomp {seccomp}: attack said {out:?} {errs:?}; then {after:?}; the box's table: {table}"),
        );
        assert!(ok_t, "terminate: {t_err}");
        let codes = kv(&out);
        for k in ["flush", "route", "link"] {
            assert!(codes.get(k).is_some_and(|c| c != "0"), "{k} must fail: {out} {errs}");
        }
        assert!(errs.contains("Operation not permitted"), "EPERM: {errs}");
        assert!(after[&targets[0]].starts_with("refused:"), "the guard still holds: {after:?}");
        assert!(reached(&after, &targets[1]), "the box still reaches the public address: {after:?}");
        assert!(table.contains("hook output") && table.contains("169.254.0.0/16"), "the table is still there: {table}");
    }
    s.assert_clean("after terminate");
}

/// `nsenter --net` into process `pid`'s namespace, as root: the command's stdout.
fn out_of(pid: i32, args: &[&str]) -> String {
    let o = Command::new("nsenter").arg("-t").arg(pid.to_string()).arg("-n").args(args).output().expect("nsenter");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Nothing is left when the box can't start (pasta finds no route in a namespace with none, after
/// the namespace and its table were made), nor after a supervisor killed while its box runs
/// (the next command finds its pasta and ends it); without pasta on PATH the error names the
/// package, and with --egress-range (a veth's setting) the option.
#[test]
fn nothing_is_left_after_a_failed_start_or_a_killed_supervisor() {
    require_pasta!();
    let s = setup("sbx_unpriv_egress_leftovers", "l");
    // No pasta on PATH: newuidmap and newgidmap only.
    let bin = s.u.work.join("bin");
    fs::create_dir(&bin).expect("bin");
    for t in ["newuidmap", "newgidmap"] {
        std::os::unix::fs::symlink(format!("/usr/bin/{t}"), bin.join(t)).expect("symlink");
    }
    let path = bin.display().to_string();
    let v = parse(s.u.output(s.command(&path, true, &["run", "--json", BE, "--network", "egress", "--", "true"])));
    let no_pasta = v["error"].as_str().unwrap_or_default().to_string();
    let v = s.u.run_json(&[BE, "--network", "egress", "--egress-range", "169.254.128.0/24", "--", "true"]);
    let range = v["error"].as_str().unwrap_or_default().to_string();
    // A namespace without a route: pasta gives up after the table was loaded.
    let (empty, _) = s.net.sb.rt.bound_netns();
    let mut c = s.command(PATH, true, &["run", "--json", BE, "--network", "egress", "--", "true"]);
    let args: Vec<_> = c.get_args().skip(1).map(ToOwned::to_owned).collect();
    let mut in_empty = Command::new("/usr/bin/nsenter");
    in_empty.arg(format!("--net={}", empty.display())).args(args).env_clear().current_dir(&s.u.work);
    for (k, v) in c.get_envs() {
        if let Some(v) = v {
            in_empty.env(k, v);
        }
    }
    let failed = parse(s.u.output(in_empty));
    let failed_err = failed["error"].as_str().unwrap_or_default().to_string();
    let after_failed = s.leftovers();
    // A supervisor killed while its box runs.
    c = s.command(PATH, true, &["run", BE, "--network", "egress", "--", "sleep", "60"]);
    let mut sup = c.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("run");
    wait_for("the box's pasta", 30, || !s.pastas().is_empty());
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(sup.id() as i32), nix::sys::signal::Signal::SIGKILL);
    let _ = sup.wait();
    let orphaned = s.pastas();
    let (ok, _, err) = s.sandbox(&["run", BE, "--", "true"]);
    saw(
        s.net.sb.name,
        format!(
            "no pasta: {no_pasta:?}; --egress-range: {range:?}; no route: {failed_err:?}, left {after_failed:?}; \
             killed supervisor left pasta {orphaned:?}, next run ok {ok} {err}"
        ),
    );
    assert!(no_pasta.contains("pasta") && no_pasta.contains("apt-get install passt"), "{no_pasta}");
    assert!(range.contains("--egress-range"), "{range}");
    assert!(failed["exit_code"].is_null() && failed_err.contains("pasta"), "the box did not start: {failed}");
    assert_eq!(after_failed, Vec::<String>::new(), "left after the failed start");
    assert!(!orphaned.is_empty(), "the killed supervisor's pasta outlives it until collected");
    assert!(ok, "{err}");
    s.assert_clean("after the next command");
}

/// A pool's egress boxes: each waits with a pasta of its own; a run taken from the pool reaches
/// the public address and is refused the metadata address, its box's pasta ends with it and the
/// refill's starts; drain ends the last.
#[test]
fn a_pooled_box_has_a_pasta_of_its_own_until_it_goes() {
    require_pasta!();
    let s = setup("sbx_unpriv_egress_pool", "o");
    let opts = [BE, "--network", "egress"];
    let (ok, _, err) = s.sandbox(&[&["pool", "fill"][..], &opts, &["1"]].concat());
    assert!(ok, "fill: {err}");
    let waiting = s.pastas();
    let targets = [tcp(PUBLIC, 80), tcp(METADATA, 80)];
    let (res, got) = s.probe(&["--pool"], &targets);
    wait_for("the refill's pasta", 30, || s.pastas().len() == 1 && s.pastas() != waiting);
    let refilled = s.pastas();
    let (ok, _, err) = s.sandbox(&["pool", "drain", "--all"]);
    saw(s.net.sb.name, format!("waiting {waiting:?}; run {got:?} pool {}; refilled {refilled:?}", res["pool"]));
    assert!(ok, "drain: {err}");
    assert_eq!(waiting.len(), 1, "one pasta per waiting box");
    assert_eq!(res["pool"], "hit", "{res}");
    assert!(reached(&got, &targets[0]) && got[&targets[1]].starts_with("refused:"), "{got:?}");
    s.assert_clean("after drain");
}
