//! The pod network: Debian's CNI plugins (bridge with host-local IPAM, loopback) on a bridge
//! and subnet of the test's own, and what must be gone afterwards.
//!
//! Nothing can leave the machine: the bridge gets no address (`isGateway` false), so the host
//! has no route into the subnet; the pods get no default route, only the subnet's link route
//! and one to 169.254.169.254 through `.254` of the subnet (a fake metadata server that the
//! guarded tests put on the bridge, in a namespace of their own); `ipMasq` is false, so no NAT rule is written. The tests only talk to
//! 127.0.0.1 inside a pod.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where Debian's containernetworking-plugins installs the plugins.
pub const PLUGIN_DIR: &str = "/usr/lib/cni";
pub const PLUGINS: [&str; 3] = ["bridge", "host-local", "loopback"];
/// libcni's cache of ADD results (containerd 1.6 gives no way to move it): one file per
/// attachment, `<network>-<sandbox id>-<ifname>`, removed on DEL. Besides the test's network
/// each pod has containerd's own `cni-loopback` (the loopback plugin on `lo`).
pub const CNI_CACHE: &str = "/var/lib/cni";

pub struct Net {
    /// The CNI network name; also the prefix of its cache files.
    pub name: String,
    pub bridge: String,
    /// `10.213.N.0/24`
    pub cidr: String,
    prefix: String,
    ipam_dir: PathBuf,
}

impl Net {
    /// Network `n` of test process `pid`: bridge `trc<pid>n<n>` (at most 15 characters), subnet
    /// `10.213.<n>.0/24`. Two test processes may pick the same subnet: each bridge is its own
    /// segment with no host address, so they never meet.
    pub fn new(tag: &str, pid: u32, n: u32, work: &Path) -> Net {
        let octet = n % 250 + 1;
        let bridge = format!("trc{pid}n{}", n % 100);
        assert!(bridge.len() <= 15, "bridge name {bridge} too long for the kernel");
        Net {
            name: tag.to_string(),
            bridge,
            cidr: format!("10.213.{octet}.0/24"),
            prefix: format!("10.213.{octet}."),
            ipam_dir: work.join("cni/ipam"),
        }
    }

    /// The conflist in `conf_dir` and the three plugins linked into `bin_dir`. The conflist
    /// holds only the bridge: containerd brings `lo` up itself, with the loopback plugin from
    /// the same bin dir (its built-in network `cni-loopback`).
    pub fn write(&self, bin_dir: &Path, conf_dir: &Path) {
        fs::create_dir_all(bin_dir).expect("mkdir cni bin");
        fs::create_dir_all(conf_dir).expect("mkdir cni conf");
        for p in PLUGINS {
            symlink(Path::new(PLUGIN_DIR).join(p), bin_dir.join(p)).expect("link cni plugin");
        }
        let conf = serde_json::json!({
            "cniVersion": "1.0.0",
            "name": self.name,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": self.bridge,
                    "isGateway": false,
                    "ipMasq": false,
                    "hairpinMode": false,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": self.cidr, "rangeEnd": format!("{}250", self.prefix)}]],
                        // To a fake metadata server the guarded tests put on the bridge at
                        // .254 (FakeMetadata); nowhere otherwise.
                        "routes": [{"dst": "169.254.169.254/32", "gw": self.server()}],
                        "dataDir": self.ipam_dir,
                    },
                },
            ],
        });
        let text = serde_json::to_string_pretty(&conf).expect("serialize conflist");
        fs::write(conf_dir.join(format!("10-{}.conflist", self.name)), text).expect("write conflist");
    }

    /// The address a test's own server takes on the bridge: `.254`.
    pub fn server(&self) -> String {
        format!("{}254", self.prefix)
    }

    pub fn contains(&self, ip: &str) -> bool {
        ip.strip_prefix(&self.prefix).and_then(|h| h.parse::<u8>().ok()).is_some_and(|h| (1..255).contains(&h))
    }

    /// Host ends of veths still attached to the bridge.
    pub fn veths(&self) -> Vec<String> {
        let out = Command::new("ip").args(["-o", "link", "show", "master", &self.bridge]).output();
        let text = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
        // "7: vethabc@if3: <...> ..." -> "vethabc"
        text.lines()
            .filter_map(|l| l.split(": ").nth(1))
            .map(|n| n.split('@').next().unwrap_or(n).to_string())
            .collect()
    }

    /// Addresses host-local still holds (one file per address in its data dir).
    pub fn reservations(&self) -> Vec<String> {
        let dir = self.ipam_dir.join(&self.name);
        let names = fs::read_dir(dir).map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect());
        names.unwrap_or_else(|_| Vec::new()).into_iter().filter(|n: &String| self.contains(n)).collect()
    }

    /// libcni cache files of this network, or of pod sandboxes `sandboxes` (their
    /// `cni-loopback` attachment).
    pub fn cache_files(&self, sandboxes: &[String]) -> Vec<PathBuf> {
        let dir = Path::new(CNI_CACHE).join("results");
        let ours = |n: &str| {
            n.starts_with(&format!("{}-", self.name)) || sandboxes.iter().any(|id| n.contains(&format!("-{id}-")))
        };
        let mine = |p: &PathBuf| p.file_name().and_then(|n| n.to_str()).is_some_and(ours);
        fs::read_dir(dir).map(|d| d.filter_map(|e| Some(e.ok()?.path())).filter(mine).collect()).unwrap_or_default()
    }

    /// iptables rules (the nft-backed `iptables-save` shows nft tables too) naming the bridge
    /// or the subnet; the config asks for none, so any is a leak.
    pub fn rules(&self) -> Vec<String> {
        let out = Command::new("iptables-save").output();
        let text = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
        text.lines().filter(|l| l.contains(&self.bridge) || l.contains(&self.prefix)).map(str::to_string).collect()
    }

    pub fn bridge_exists(&self) -> bool {
        Path::new("/sys/class/net").join(&self.bridge).exists()
    }

    /// Everything the network left on the host for pods `sandboxes`, as readable lines
    /// (empty: nothing).
    pub fn leftovers(&self, sandboxes: &[String]) -> Vec<String> {
        let mut v: Vec<String> = self.veths().into_iter().map(|n| format!("veth {n} on {}", self.bridge)).collect();
        v.extend(self.reservations().into_iter().map(|a| format!("host-local reservation {a}")));
        v.extend(self.cache_files(sandboxes).into_iter().map(|p| format!("cni cache {}", p.display())));
        v.extend(self.rules().into_iter().map(|r| format!("iptables rule {r}")));
        v
    }

    /// Remove what is left: veths, the bridge, cache files (also those of pods `sandboxes`),
    /// rules. The IPAM data dir goes with the work dir.
    pub fn teardown(&self, sandboxes: &[String]) -> Vec<String> {
        let mut notes = Vec::new();
        for veth in self.veths() {
            notes.push(format!("deleted leftover veth {veth}"));
            let _ = Command::new("ip").args(["link", "del", &veth]).status();
        }
        if self.bridge_exists() {
            let _ = Command::new("ip").args(["link", "del", &self.bridge]).status();
        }
        for f in self.cache_files(sandboxes) {
            notes.push(format!("removed leftover {}", f.display()));
            let _ = fs::remove_file(f);
        }
        notes.extend(self.delete_rules());
        notes
    }

    fn delete_rules(&self) -> Vec<String> {
        let out = Command::new("iptables-save").output();
        let text = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
        let mut table = String::new();
        let mut notes = Vec::new();
        for line in text.lines() {
            if let Some(t) = line.strip_prefix('*') {
                table = t.to_string();
            } else if let Some(rule) = line.strip_prefix("-A ") {
                if line.contains(&self.bridge) || line.contains(&self.prefix) {
                    let mut cmd = Command::new("iptables");
                    cmd.args(["-t", &table, "-D"]).args(rule.split_whitespace());
                    let _ = cmd.status();
                    notes.push(format!("deleted leftover iptables rule {line}"));
                }
            }
        }
        notes
    }
}
