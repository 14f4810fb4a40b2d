//! `features` (runtime-spec `features.md`, `features-linux.md`; cli-contract.md §1.4): the
//! document parses, has the required fields, is printed with runc's 4-space indent, and what it
//! claims holds: a listed seccomp action, operator and supported flag really work in a
//! container, and the listed mount options are accepted.

use serde_json::{json, Value};
use tinyrun_conformance::{require_root, Runtime};

fn features(rt: &Runtime) -> (Value, String) {
    let o = rt.run_raw(&["features"]).expect_ok("features");
    let v: Value = serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("features is not JSON ({e})\n{o}"));
    (v, o.stdout)
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default()
}

#[test]
fn document_shape() {
    let rt = Runtime::new("features");
    let (v, text) = features(&rt);
    assert_eq!(v["ociVersionMin"], "1.0.0");
    assert!(v["ociVersionMax"].as_str().is_some_and(|s| s.starts_with("1.")), "{v}");
    assert!(text.starts_with("{\n    \"ociVersionMin\""), "4-space indent like runc:\n{text}");
    let hooks = strings(&v["hooks"]);
    for h in ["prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"] {
        assert!(hooks.contains(&h), "hook {h}: {hooks:?}");
    }
    let opts = strings(&v["mountOptions"]);
    for o in ["ro", "rw", "nosuid", "nodev", "noexec", "bind", "rbind", "rprivate", "rslave"] {
        assert!(opts.contains(&o), "mount option {o}: {opts:?}");
    }
    let linux = &v["linux"];
    let ns = strings(&linux["namespaces"]);
    for n in ["cgroup", "ipc", "mount", "network", "pid", "user", "uts"] {
        assert!(ns.contains(&n), "namespace {n}: {ns:?}");
    }
    let caps = strings(&linux["capabilities"]);
    assert!(caps.contains(&"CAP_SYS_ADMIN") && caps.contains(&"CAP_CHOWN"), "{caps:?}");
    let sc = &linux["seccomp"];
    assert_eq!(sc["enabled"], true);
    let actions = strings(&sc["actions"]);
    for a in [
        "SCMP_ACT_ALLOW",
        "SCMP_ACT_ERRNO",
        "SCMP_ACT_KILL",
        "SCMP_ACT_KILL_PROCESS",
        "SCMP_ACT_LOG",
        "SCMP_ACT_NOTIFY",
        "SCMP_ACT_TRACE",
        "SCMP_ACT_TRAP",
    ] {
        assert!(actions.contains(&a), "action {a}: {actions:?}");
    }
    assert_eq!(strings(&sc["operators"]).len(), 7, "{sc}");
    assert!(strings(&sc["archs"]).contains(&"SCMP_ARCH_X86_64"), "{sc}");
    let known = strings(&sc["knownFlags"]);
    assert!(strings(&sc["supportedFlags"]).iter().all(|f| known.contains(f)), "supported ⊆ known: {sc}");
    assert!(v["annotations"]["io.github.seccomp.libseccomp.version"].is_string(), "{v}");
    if rt.is_runc() {
        eprintln!("runc: not checking the tinyrun-only claims (cgroup drivers, idmap)");
        return;
    }
    assert_eq!(linux["cgroup"]["systemd"], true, "the systemd driver (--systemd-cgroup): {v}");
    assert_eq!(linux["cgroup"]["systemdUser"], true, "the user-manager driver (rootless --systemd-cgroup): {v}");
    assert_eq!(linux["mountExtensions"]["idmap"]["enabled"], true, "id-mapped mounts (mounts.rs tests them): {v}");
    assert!(opts.contains(&"idmap") && opts.contains(&"ridmap"), "idmap/ridmap are applied, so listed: {v}");
    let policy = &linux["memoryPolicy"];
    assert!(strings(&policy["modes"]).contains(&"MPOL_INTERLEAVE"), "linux.memoryPolicy is applied: {v}");
    assert!(strings(&policy["flags"]).contains(&"MPOL_F_STATIC_NODES"), "{v}");
    for o in ["rro", "rrw", "rnosuid", "rnodev", "rnoexec", "rnoatime", "rrelatime", "rnosymfollow"] {
        assert!(opts.contains(&o), "recursive mount attribute {o} is applied, so listed: {v}");
    }
}

/// What the document lists, a container gets: each supported flag, an argument operator and
/// an action from the lists, used together.
#[test]
fn listed_seccomp_features_work() {
    require_root!();
    let rt = Runtime::new("featuresuse");
    let (v, _) = features(&rt);
    let sc = &v["linux"]["seccomp"];
    let flags = strings(&sc["supportedFlags"]);
    assert!(strings(&sc["operators"]).contains(&"SCMP_CMP_MASKED_EQ"));
    let b = rt.bundle(&["/bin/mkdir", "/tmp/x"]);
    let usable: Vec<&str> = flags.into_iter().filter(|f| *f != "SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV").collect();
    let mut profile = json!({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
        {"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO", "errnoRet": libc::EXDEV,
         "args": [{"index": 0, "value": 0, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}]}]});
    if rt.is_runc() {
        eprintln!("runc: not passing flags (runc 1.1.5 refuses every seccomp flag)");
    } else {
        profile["flags"] = json!(usable);
    }
    b.config_mut(|c| c["linux"]["seccomp"] = profile);
    let o = rt.run_bundle(&b);
    assert_eq!(o.code(), Some(1), "{o}");
    assert!(o.stderr.contains("Invalid cross-device link"), "{o}");
    rt.assert_nothing_left(&b.id);
}
