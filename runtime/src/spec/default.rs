//! The config.json that `spec` writes: runc's default, which callers and
//! tutorials expect, plus a cgroup namespace as newer runc has.

use oci_spec::runtime::Spec;
use serde_json::{json, Value};

/// A default spec; with `rootless`, one an unprivileged user can run: a
/// user namespace mapping only the caller, no network namespace, no
/// resource limits, and host bind mounts where a fresh mount needs privilege.
pub fn default_spec(rootless: bool) -> Spec {
    let caps = json!(["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"]);
    let mut v = json!({
        "ociVersion": oci_spec::runtime::VERSION,
        "process": {
            "terminal": true,
            "user": {"uid": 0, "gid": 0},
            "args": ["sh"],
            "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "TERM=xterm"],
            "cwd": "/",
            "capabilities": {"bounding": caps, "effective": caps, "permitted": caps, "ambient": caps},
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
            "noNewPrivileges": true
        },
        "root": {"path": "rootfs", "readonly": true},
        "hostname": "tinyrun",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
             "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]},
            {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
             "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
            {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"]},
            {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]},
            {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup",
             "options": ["nosuid", "noexec", "nodev", "relatime", "ro"]}
        ],
        "linux": {
            "resources": {"devices": [{"allow": false, "access": "rwm"}]},
            "namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"},
                           {"type": "cgroup"}],
            "maskedPaths": ["/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                            "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware",
                            "/proc/scsi"],
            "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]
        }
    });
    if rootless {
        make_rootless(&mut v);
    }
    serde_json::from_value(v).unwrap_or_default()
}

fn make_rootless(v: &mut Value) {
    let uid = nix::unistd::geteuid().as_raw();
    let gid = nix::unistd::getegid().as_raw();
    let linux = &mut v["linux"];
    linux["resources"] = Value::Null;
    if let Some(nss) = linux["namespaces"].as_array_mut() {
        nss.retain(|n| n["type"] != "network");
        nss.push(json!({"type": "user"}));
    }
    linux["uidMappings"] = json!([{"containerID": 0, "hostID": uid, "size": 1}]);
    linux["gidMappings"] = json!([{"containerID": 0, "hostID": gid, "size": 1}]);
    if let Some(obj) = linux.as_object_mut() {
        obj.remove("resources");
    }
    if let Some(mounts) = v["mounts"].as_array_mut() {
        // sysfs and cgroup can't be mounted fresh without privilege over the
        // network namespace and the cgroup tree: bind the host's instead.
        mounts.retain(|m| m["type"] != "cgroup");
        for m in mounts.iter_mut() {
            if m["type"] == "sysfs" {
                *m = json!({"destination": "/sys", "type": "none", "source": "/sys",
                            "options": ["rbind", "nosuid", "noexec", "nodev", "ro"]});
            }
            if let Some(opts) = m["options"].as_array_mut() {
                opts.retain(|o| o != "gid=5");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_spec_validates_and_rootless_maps_the_caller() {
        let s = default_spec(false);
        crate::spec::validate(&s).unwrap();
        let r = default_spec(true);
        crate::spec::validate(&r).unwrap();
        let l = r.linux().as_ref().unwrap();
        assert_eq!(l.uid_mappings().as_ref().unwrap()[0].host_id(), nix::unistd::geteuid().as_raw());
        assert!(l
            .namespaces()
            .as_ref()
            .unwrap()
            .iter()
            .all(|n| n.typ() != oci_spec::runtime::LinuxNamespaceType::Network));
    }
}
