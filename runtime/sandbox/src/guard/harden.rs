//! What every container of the guarded class gets, whatever its config
//! asks: [`check`] refuses what can't be made safe, naming the field;
//! [`harden`] rewrites the rest. Runs in the runtime process, on the config
//! as containerd wrote it (a `serde_json::Value`), before anything exists.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::policy::Policy;
use crate::error::{Error, Result};

/// The capabilities a guarded container may hold without the policy
/// naming them: containerd's default set less NET_RAW (forged packets),
/// MKNOD, AUDIT_WRITE and SETFCAP. Held only in the pod's user namespace.
pub(crate) const BASE_CAPS: [&str; 10] = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
];

/// containerd's default capabilities the guard drops without refusing
/// the container: every pod asks for them.
const DROPPED_DEFAULTS: [&str; 4] = ["CAP_NET_RAW", "CAP_MKNOD", "CAP_AUDIT_WRITE", "CAP_SETFCAP"];

/// Capabilities whose presence together means a privileged container.
const PRIVILEGED_MARKS: [&str; 3] = ["CAP_SYS_ADMIN", "CAP_SYS_MODULE", "CAP_SYS_RAWIO"];

/// Filesystem types a guarded container may mount; binds are checked by
/// source instead.
const VIRTUAL_FS: [&str; 8] = ["proc", "sysfs", "tmpfs", "devpts", "mqueue", "cgroup", "cgroup2", "shm"];

fn refused(msg: String) -> Error {
    Error::Refused(msg)
}

fn strs(v: &Value) -> Vec<&str> {
    v.as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default()
}

/// Refuses what the guarded class never gives: privileged, the host's
/// namespaces, a user namespace of the config's own, host devices, mounts
/// of real filesystems or of host paths outside the policy, capabilities
/// outside it.
pub(crate) fn check(spec: &Value, policy: &Policy) -> Result<()> {
    privileged(spec)?;
    namespaces(spec)?;
    if spec["linux"]["devices"].as_array().is_some_and(|d| !d.is_empty()) {
        return Err(refused("linux.devices: host devices are not given to a guarded container".into()));
    }
    for m in spec["mounts"].as_array().map(Vec::as_slice).unwrap_or_default() {
        mount(m, policy)?;
    }
    let allowed =
        |c: &str| BASE_CAPS.contains(&c) || DROPPED_DEFAULTS.contains(&c) || policy.capabilities.iter().any(|p| p == c);
    for set in ["bounding", "effective", "permitted", "inheritable", "ambient"] {
        if let Some(c) = strs(&spec["process"]["capabilities"][set]).into_iter().find(|c| !allowed(c)) {
            return Err(refused(format!(
                "process.capabilities.{set}: {c} is not allowed (allowed beyond the base set: {})",
                if policy.capabilities.is_empty() { "none".to_string() } else { policy.capabilities.join(", ") }
            )));
        }
    }
    Ok(())
}

/// A privileged container as runc sees one: the capabilities that make it,
/// every device allowed, or a writable /sys.
fn privileged(spec: &Value) -> Result<()> {
    let bounding = strs(&spec["process"]["capabilities"]["bounding"]);
    let all_devices = spec["linux"]["resources"]["devices"].as_array().is_some_and(|rules| {
        rules.iter().any(|r| r["allow"] == true && r["type"].as_str().is_none_or(|t| t == "a") && r["major"].is_null())
    });
    let rw_sys = spec["mounts"]
        .as_array()
        .is_some_and(|ms| ms.iter().any(|m| m["type"] == "sysfs" && !strs(&m["options"]).contains(&"ro")));
    let why = if PRIVILEGED_MARKS.iter().all(|c| bounding.contains(c)) {
        "every capability"
    } else if all_devices {
        "every device (linux.resources.devices)"
    } else if rw_sys {
        "a writable /sys"
    } else {
        return Ok(());
    };
    Err(refused(format!("privileged: the config asks for {why}; a guarded container is never privileged")))
}

/// The pod's own network, pid, ipc and uts namespaces, new or the pod's:
/// never the host's. The user namespace is the guard's to make.
fn namespaces(spec: &Value) -> Result<()> {
    let nss = spec["linux"]["namespaces"].as_array().map(Vec::as_slice).unwrap_or_default();
    for (typ, proc_name, k8s) in [
        ("network", "net", "hostNetwork"),
        ("pid", "pid", "hostPID"),
        ("ipc", "ipc", "hostIPC"),
        ("uts", "uts", "hostNetwork"),
    ] {
        let ns = nss.iter().find(|n| n["type"] == typ);
        let host = match ns.map(|n| n["path"].as_str()) {
            None => true,
            Some(None) => false,
            Some(Some(path)) => same_file(Path::new(path), &Path::new("/proc/self/ns").join(proc_name)),
        };
        if host {
            return Err(refused(format!("linux.namespaces: the host's {typ} namespace ({k8s}) is not given")));
        }
    }
    if nss.iter().any(|n| n["type"] == "user") || !spec["linux"]["uidMappings"].is_null() {
        return Err(refused(
            "linux.namespaces: user: the guarded class gives each pod a user namespace of its own".into(),
        ));
    }
    Ok(())
}

fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

fn mount(m: &Value, policy: &Policy) -> Result<()> {
    let dest = m["destination"].as_str().unwrap_or("?");
    let typ = m["type"].as_str().unwrap_or("");
    let opts = strs(&m["options"]);
    if !m["uidMappings"].is_null()
        || !m["gidMappings"].is_null()
        || opts.iter().any(|o| *o == "idmap" || *o == "ridmap")
    {
        return Err(refused(format!(
            "mounts[{dest}]: id-mapped mounts are the guarded class's to make (with the pod's mappings)"
        )));
    }
    if typ == "bind" || opts.contains(&"bind") || opts.contains(&"rbind") {
        let source = m["source"].as_str().unwrap_or("");
        let canon = std::fs::canonicalize(source).unwrap_or_else(|_| PathBuf::from(source));
        if !policy.host_path_allowed(&canon) {
            return Err(refused(format!(
                "mounts[{dest}]: host path {source} is outside the policy's hostPaths ({})",
                policy.host_paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
            )));
        }
        return Ok(());
    }
    if !VIRTUAL_FS.contains(&typ) {
        return Err(refused(format!("mounts[{dest}]: a {typ:?} filesystem is not mounted in a guarded container")));
    }
    Ok(())
}

/// The guard's rewrite: no_new_privs, capabilities capped, the sandbox's
/// masked and read-only paths, /sys and cgroupfs read-only, bind sources
/// made canonical (what was checked is what is mounted), the policy's
/// limits where the config sets none, and the seccomp intersection.
pub(crate) fn harden(spec: &mut Value, policy: &Policy) -> Result<()> {
    process(&mut spec["process"], policy);
    let masked = crate::spec::MASKED_PATHS.iter().filter(|p| **p != "/sys/fs/cgroup");
    // The container's own cgroup stays visible (read-only): it is where
    // runtimes such as the JVM's learn their limits.
    union(&mut spec["linux"]["maskedPaths"], masked.copied());
    union(&mut spec["linux"]["readonlyPaths"], crate::spec::READONLY_PATHS.iter().copied());
    if let Some(ms) = spec["mounts"].as_array_mut() {
        for m in ms {
            let typ = m["type"].as_str().unwrap_or("").to_string();
            if matches!(typ.as_str(), "sysfs" | "cgroup" | "cgroup2") {
                union(&mut m["options"], ["ro"].into_iter());
            }
            let bind = typ == "bind" || strs(&m["options"]).iter().any(|o| *o == "bind" || *o == "rbind");
            if let (true, Some(src)) = (bind, m["source"].as_str()) {
                if let Ok(canon) = std::fs::canonicalize(src) {
                    m["source"] = json!(canon);
                }
                union(&mut m["options"], ["nosuid", "nodev"].into_iter());
            }
        }
    }
    limits(&mut spec["linux"]["resources"], policy);
    let requested = spec["linux"]["seccomp"].take();
    let base = super::seccomp::for_pods(crate::spec::seccomp_profile()?);
    spec["linux"]["seccomp"] = super::seccomp::intersect(&requested, &base);
    Ok(())
}

/// A process of a guarded container (init's, or an exec'd one's):
/// no_new_privs and the capabilities the policy allows.
pub(crate) fn process(p: &mut Value, policy: &Policy) {
    if !p.is_object() {
        return;
    }
    p["noNewPrivileges"] = json!(true);
    let allowed = |c: &str| BASE_CAPS.contains(&c) || policy.capabilities.iter().any(|p| p == c);
    for set in ["bounding", "effective", "permitted", "inheritable", "ambient"] {
        let kept: Vec<String> =
            strs(&p["capabilities"][set]).into_iter().filter(|c| allowed(c)).map(str::to_string).collect();
        if !p["capabilities"].is_object() {
            p["capabilities"] = json!({});
        }
        p["capabilities"][set] = json!(kept);
    }
}

fn limits(res: &mut Value, policy: &Policy) {
    if res["memory"]["limit"].as_i64().is_none_or(|l| l <= 0) {
        res["memory"]["limit"] = json!(policy.memory);
    }
    if res["pids"]["limit"].as_i64().is_none_or(|l| l <= 0) {
        res["pids"]["limit"] = json!(policy.pids);
    }
}

/// Adds the `extra` strings missing from array `v` (made if absent).
fn union<'a>(v: &mut Value, extra: impl Iterator<Item = &'a str>) {
    if !v.is_array() {
        *v = json!([]);
    }
    let Some(a) = v.as_array_mut() else { return };
    for e in extra {
        if !a.iter().any(|x| x == e) {
            a.push(json!(e));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(extra: Value) -> Value {
        let mut s = json!({
            "process": {"capabilities": {"bounding": ["CAP_CHOWN", "CAP_NET_RAW"], "effective": ["CAP_CHOWN"]}},
            "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
                       {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "ro"]}],
            "linux": {"namespaces": [{"type": "network", "path": "/nonexistent/netns"}, {"type": "pid"}, {"type": "ipc"},
                                     {"type": "uts"}, {"type": "mount"}]}
        });
        crate::guard::tests::merge(&mut s, extra);
        s
    }

    fn refusal(extra: Value, policy: &Policy) -> String {
        check(&pod(extra), policy).unwrap_err().to_string()
    }

    #[test]
    fn an_ordinary_pod_passes_and_each_ask_for_less_is_refused_by_name() {
        let p = Policy::default();
        check(&pod(json!({})), &p).unwrap();
        let all: Vec<String> = ["CAP_SYS_ADMIN", "CAP_SYS_MODULE", "CAP_SYS_RAWIO"].map(String::from).to_vec();
        let cases = [
            (json!({"process": {"capabilities": {"bounding": all}}}), "privileged"),
            (
                json!({"mounts": [{"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": []}]}),
                "privileged",
            ),
            (
                json!({"process": {"capabilities": {"effective": ["CAP_NET_ADMIN"]}}}),
                "process.capabilities.effective: CAP_NET_ADMIN",
            ),
            (json!({"linux": {"namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}]}}), "hostNetwork"),
            (json!({"linux": {"namespaces": [{"type": "network", "path": "/proc/self/ns/net"}]}}), "hostNetwork"),
            (json!({"linux": {"namespaces": [{"type": "network"}, {"type": "ipc"}, {"type": "uts"}]}}), "hostPID"),
            (
                json!({"linux": {"devices": [{"path": "/dev/sda", "type": "b", "major": 8, "minor": 0}]}}),
                "linux.devices",
            ),
            (
                json!({"mounts": [{"destination": "/host", "type": "bind", "source": "/etc", "options": ["rbind"]}]}),
                "mounts[/host]: host path /etc",
            ),
            (json!({"mounts": [{"destination": "/d", "type": "ext4", "source": "/dev/sda"}]}), "\"ext4\""),
            (
                json!({"mounts": [{"destination": "/m", "type": "bind", "source": "/tmp",
                                   "uidMappings": [{"containerID": 0, "hostID": 0, "size": 1}]}]}),
                "mounts[/m]: id-mapped mounts are the guarded class's",
            ),
            (
                json!({"mounts": [{"destination": "/m", "type": "bind", "source": "/tmp", "options": ["ridmap"]}]}),
                "mounts[/m]: id-mapped",
            ),
        ];
        for (extra, want) in cases {
            let e = refusal(extra.clone(), &p);
            assert!(e.contains("refused by the guarded runtime class") && e.contains(want), "{extra}: {e}");
        }
        let loose = Policy { capabilities: vec!["CAP_NET_ADMIN".into()], host_paths: vec!["/etc".into()], ..p };
        check(&pod(json!({"process": {"capabilities": {"effective": ["CAP_NET_ADMIN"]}}})), &loose).unwrap();
        check(&pod(json!({"mounts": [{"destination": "/h", "type": "bind", "source": "/etc/hostname"}]})), &loose)
            .unwrap();
    }

    #[test]
    fn hardening_caps_what_it_does_not_refuse() {
        let mut s = pod(json!({"linux": {"maskedPaths": ["/proc/kcore"], "resources": {"memory": {"limit": 0}}}}));
        harden(&mut s, &Policy::default()).unwrap();
        assert_eq!(s["process"]["noNewPrivileges"], true);
        assert_eq!(s["process"]["capabilities"]["bounding"], json!(["CAP_CHOWN"]), "NET_RAW dropped");
        let masked = strs(&s["linux"]["maskedPaths"]);
        assert!(masked.contains(&"/sys/kernel") && masked.iter().filter(|m| **m == "/proc/kcore").count() == 1);
        assert!(!masked.contains(&"/sys/fs/cgroup"));
        assert_eq!(s["linux"]["resources"]["memory"]["limit"], json!(Policy::default().memory));
        assert_eq!(s["linux"]["resources"]["pids"]["limit"], json!(Policy::default().pids));
        assert_eq!(s["linux"]["seccomp"]["defaultAction"], "SCMP_ACT_ERRNO", "Unconfined got the sandbox's profile");
    }
}
