//! Shared by `sandbox_egress.rs` and `sandbox_blocked.rs`: the namespaces an egress test runs in
//! (see [`Net`]), their servers, and the probe a box runs. No packet leaves the machine.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use tinyrun_conformance::sandbox::Sbx;
use tinyrun_conformance::{kv, Out};

/// Root, and `nft` (the tests look at the tables with it; the runtime doesn't run it).
macro_rules! require_root_and_nft {
    () => {
        tinyrun_conformance::require_root!();
        if !std::path::Path::new("/usr/sbin/nft").exists() {
            tinyrun_conformance::missing_prerequisite!("nft (conformance/install-deps installs nftables)");
        }
    };
}

/// Addresses of the internet namespace (all on its `lo`).
pub const PUBLIC: &str = "198.51.100.10";
pub const PUBLIC2: &str = "198.51.100.11";
pub const METADATA: &str = "169.254.169.254";
pub const PRIVATE: [&str; 4] = ["10.55.0.1", "172.16.5.1", "192.168.7.1", "100.64.3.1"];
pub const RESOLVER: &str = "10.55.0.53";
/// The host namespace's uplink address, and the first box's gateway (the default link range's
/// first /30).
pub const HOST_UPLINK: &str = "203.0.113.2";
pub const GATEWAY: &str = "169.254.64.1";
/// lan b's address, and the host namespace's address on lan a's link (see [`Net::lan`]).
pub const LAN_B: &str = "10.201.2.2";
pub const LAN_A_GATEWAY: &str = "10.201.1.1";

/// `server.py UDPADDR PORT...`: serves HTTP on each PORT (all addresses; `6:PORT` on IPv6), answering `hello from
/// <address> to <client's address>`, and echoes UDP on UDPADDR:53 (bound to that address, so replies come from it);
/// prints `ready` once bound.
pub const SERVER: &str = r#"
import http.server, socket, sys, threading
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = ("hello from %s to %s\n" % (self.connection.getsockname()[0], self.client_address[0])).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(b))); self.end_headers()
        self.wfile.write(b)
    def log_message(self, *a): pass
class H6(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6
for p in sys.argv[2:]:
    if p.startswith("6:"):
        s = H6(("::", int(p[2:])), H)
    else:
        s = http.server.ThreadingHTTPServer(("0.0.0.0", int(p)), H)
    threading.Thread(target=s.serve_forever, daemon=True).start()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind((sys.argv[1], 53))
print("ready", flush=True)
while True:
    d, a = u.recvfrom(512); u.sendto(b"echo:" + d, a)
"#;

/// Tries each `tcp:IP:PORT` (an HTTP GET) or `udp:IP:PORT` (one datagram) at once, 3 s each;
/// prints `TARGET=<body or error class>`.
pub const PROBE: &str = r#"
import socket, sys, threading
res = {}
def go(t):
    proto, ip, port = t.split(":")
    try:
        if proto == "tcp":
            s = socket.create_connection((ip, int(port)), timeout=3)
            s.sendall(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n")
            d = b""
            while True:
                c = s.recv(4096)
                if not c: break
                d += c
            res[t] = d.decode(errors="replace").strip().splitlines()[-1].replace(" ", "_")
        else:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3)
            s.sendto(b"q", (ip, int(port))); res[t] = s.recvfrom(512)[0].decode()
    except OSError as e:
        res[t] = "refused:" + type(e).__name__
ts = [threading.Thread(target=go, args=(t,)) for t in sys.argv[1:]]
[t.start() for t in ts]; [t.join() for t in ts]
for t in sys.argv[1:]: print(t + "=" + res[t])
"#;

/// The two namespaces, their servers, and the probe script; `Drop` terminates every box from
/// inside the host namespace (where its veth and table are), then kills the servers. The
/// namespaces themselves are bind mounts the harness removes, and with them every link, route
/// and table made in them.
pub struct Net {
    pub host: PathBuf,
    pub internet: PathBuf,
    pub probe: PathBuf,
    pub server: PathBuf,
    pub servers: Vec<Child>,
    /// The host namespace's `net.ipv4.ip_forward` as the test set it, and as it found it (put back on drop).
    pub forwarding: bool,
    pub forwarding_found: Option<String>,
    pub sb: Sbx,
}

pub const IP_FORWARD: &str = "/proc/sys/net/ipv4/ip_forward";

/// Reads `net.ipv4.ip_forward` of namespace `ns` (/proc/sys/net is the reader's namespace's).
pub fn ip_forward(ns: &Path) -> String {
    out(ns, &["cat", IP_FORWARD]).trim().to_string()
}

pub fn sh(ns: &Path, cmd: &str) {
    let o = Command::new("nsenter").arg(format!("--net={}", ns.display())).args(["sh", "-ec", cmd]).output();
    let o = o.expect("nsenter");
    assert!(o.status.success(), "{cmd}: {}", String::from_utf8_lossy(&o.stderr));
}

pub fn out(ns: &Path, args: &[&str]) -> String {
    let o = Command::new("nsenter").arg(format!("--net={}", ns.display())).args(args).output().expect("nsenter");
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

impl Net {
    /// The topology, with forwarding off in the host namespace, as on a host that is not a router.
    pub fn new(name: &'static str) -> Net {
        Net::with_forwarding(name, false)
    }

    pub fn with_forwarding(name: &'static str, forwarding: bool) -> Net {
        let sb = Sbx::new(name);
        let (host, _) = sb.rt.bound_netns();
        let (internet, _) = sb.rt.bound_netns();
        let dir = sb.rt.tempdir();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).expect("chmod");
        let probe = dir.join("probe.py");
        fs::write(&probe, PROBE).expect("probe");
        let server = dir.join("server.py");
        fs::write(&server, SERVER).expect("server");
        let mut net =
            Net { host, internet, probe, server, servers: Vec::new(), forwarding, forwarding_found: None, sb };
        net.forwarding_found = Some(ip_forward(&net.host));
        sh(&net.host, &format!("echo {} > {IP_FORWARD}", u8::from(forwarding)));
        let (h, i) = (net.host.display().to_string(), net.internet.display().to_string());
        sh(
            &net.host,
            &format!(
                "ip link set lo up; ip link add up0 type veth peer name inet0; exec 9<{i}; \
                 ip link set inet0 netns /proc/self/fd/9; ip addr add {HOST_UPLINK}/24 dev up0; ip link set up0 up; \
                 ip route add default via 203.0.113.1"
            ),
        );
        let mut lo_addrs = vec![PUBLIC, PUBLIC2, METADATA, RESOLVER];
        lo_addrs.extend(PRIVATE);
        let adds: String = lo_addrs.iter().map(|a| format!("ip addr add {a}/32 dev lo; ")).collect();
        sh(
            &net.internet,
            &format!("ip link set lo up; ip addr add 203.0.113.1/24 dev inet0; ip link set inet0 up; {adds}"),
        );
        net.serve(&h, &[HOST_UPLINK, "80", "6:8081"]);
        net.serve(&i, &[RESOLVER, "80", "8080"]);
        net
    }

    /// Starts `server.py ARGS` in namespace `ns` and waits until it serves.
    pub fn serve(&mut self, ns: &str, args: &[&str]) {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net={ns}")).arg("python3").arg(&self.server).args(args);
        let mut child = c.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("server output");
        self.servers.push(child);
        assert_eq!(line.trim(), "ready", "the test server in {ns} did not start");
    }

    /// `tinyrun --root R sandbox ARGS...` in the host namespace.
    pub fn tinyrun(&self, args: &[&str]) -> Command {
        let mut v = vec!["sandbox"];
        v.extend_from_slice(args);
        let inner = self.sb.rt.command(&v);
        let mut c = Command::new("nsenter");
        c.arg(format!("--net={}", self.host.display())).arg("--").arg(inner.get_program()).args(inner.get_args());
        for (k, val) in inner.get_envs() {
            if let Some(val) = val {
                c.env(k, val);
            }
        }
        c.stdin(Stdio::null());
        c
    }

    pub fn sandbox(&self, args: &[&str]) -> Out {
        self.sb.rt.output(self.tinyrun(args))
    }

    /// `sandbox run [tag] OPTS --copy-in probe -- python3 probe TARGETS`: target => outcome.
    #[track_caller]
    pub fn run_probe(&self, opts: &[&str], targets: &[String]) -> (BTreeMap<String, String>, Out) {
        let copy = format!("{}:/work/probe.py", self.probe.display());
        let mut v = vec!["run"];
        v.extend(self.sb.common());
        v.extend_from_slice(opts);
        v.extend(["--copy-in", &copy, "--", "python3", "/work/probe.py"]);
        v.extend(targets.iter().map(String::as_str));
        let o = self.sandbox(&v);
        (kv(&o.stdout), o)
    }

    /// The same probe from the host namespace itself: the control.
    pub fn control(&self, targets: &[String]) -> BTreeMap<String, String> {
        self.probe_in(&self.host, targets)
    }

    /// The probe run in namespace `ns`.
    pub fn probe_in(&self, ns: &Path, targets: &[String]) -> BTreeMap<String, String> {
        let mut args = vec!["python3", self.probe.to_str().expect("utf-8")];
        args.extend(targets.iter().map(String::as_str));
        kv(&out(ns, &args))
    }

    /// Two more namespaces, lan a and lan b, each linked to the host namespace by a veth (`lana`,
    /// `lanb` on the host's side; 10.201.1.0/24 and 10.201.2.0/24) with its default route via the
    /// host; b serves HTTP on [`LAN_B`]. a reaches b only if the host forwards between them.
    /// Returns a.
    pub fn lan(&mut self) -> PathBuf {
        let (a, _) = self.sb.rt.bound_netns();
        let (b, _) = self.sb.rt.bound_netns();
        for (ns, side, net) in [(&a, "a", 1), (&b, "b", 2)] {
            sh(
                &self.host,
                &format!(
                    "ip link add lan{side} type veth peer name lan0; exec 9<{}; ip link set lan0 netns \
                     /proc/self/fd/9; ip addr add 10.201.{net}.1/24 dev lan{side}; ip link set lan{side} up",
                    ns.display()
                ),
            );
            sh(
                ns,
                &format!(
                    "ip link set lo up; ip addr add 10.201.{net}.2/24 dev lan0; ip link set lan0 up; \
                     ip route add default via 10.201.{net}.1"
                ),
            );
        }
        self.serve(&b.display().to_string(), &[LAN_B, "80"]);
        a
    }

    /// `sandbox launch OPTS` with a lifetime a loaded host can't run out: the box's id.
    pub fn launch(&self, opts: &[&str]) -> String {
        let mut v = vec!["launch"];
        v.extend(self.sb.common());
        v.extend(["--lifetime", "10m"]);
        v.extend_from_slice(opts);
        let o = self.sandbox(&v);
        assert!(o.ok(), "{o}");
        o.stdout.trim().to_string()
    }

    /// The probe run in launched box `id`.
    pub fn exec_probe(&self, id: &str, targets: &[String]) -> BTreeMap<String, String> {
        let mut v = vec!["exec", id, "--", "python3", "-c", PROBE];
        v.extend(targets.iter().map(String::as_str));
        kv(&self.sandbox(&v).stdout)
    }

    /// What of the boxes' networking is in the host namespace: links other than lo, up0 and the
    /// LAN's (`lan*`), nftables tables, routes other than the uplink's two and the LAN's, and
    /// `ip_forward` if it is not as the test set it.
    pub fn net_leftovers(&self) -> Vec<String> {
        let mut left = Vec::new();
        let forwarding = ip_forward(&self.host);
        if forwarding != u8::from(self.forwarding).to_string() {
            left.push(format!("ip_forward {forwarding}"));
        }
        for l in out(&self.host, &["ip", "-o", "link", "show"]).lines() {
            let name = l.split(':').nth(1).unwrap_or("").trim().split('@').next().unwrap_or("").to_string();
            if name != "lo" && name != "up0" && !name.starts_with("lan") {
                left.push(format!("link {name}"));
            }
        }
        for t in out(&self.host, &["nft", "list", "tables"]).lines().filter(|l| !l.trim().is_empty()) {
            left.push(format!("nftables {t}"));
        }
        for r in out(&self.host, &["ip", "-4", "route", "show", "table", "all"]).lines() {
            let ours = r.starts_with("default via 203.0.113.1 dev up0")
                || r.starts_with("203.0.113.0/24 dev up0")
                || r.contains(" dev lan")
                || r.contains("table local");
            if !ours {
                left.push(format!("route {r}"));
            }
        }
        left
    }

    pub fn ruleset(&self) -> String {
        out(&self.host, &["nft", "list", "ruleset"])
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        let state = self.sb.rt.root().join("sandbox");
        for id in tinyrun_conformance::sandbox::names_in(&state) {
            let mut c = self.tinyrun(&["terminate", &id]);
            c.stdout(Stdio::null()).stderr(Stdio::null());
            let _ = c.status();
        }
        for s in &mut self.servers {
            let _ = s.kill();
            let _ = s.wait();
        }
        if let Some(v) = &self.forwarding_found {
            let _ = Command::new("nsenter")
                .arg(format!("--net={}", self.host.display()))
                .args(["sh", "-c", &format!("echo {v} > {IP_FORWARD}")])
                .status();
        }
    }
}

pub fn tcp(ip: &str, port: u16) -> String {
    format!("tcp:{ip}:{port}")
}

pub fn reached(res: &BTreeMap<String, String>, t: &str) -> bool {
    res.get(t).is_some_and(|v| v.starts_with("hello_from_") || v.starts_with("echo:"))
}
