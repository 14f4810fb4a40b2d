//! The sandbox's spec as a whole: the pool key follows every option that
//! shapes a box, and a seccomp profile that does not parse is an error
//! (the runtime's `seccomp` tests load the shipped one for real).

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use tinyrun::oci_spec::runtime::LinuxSeccomp;
use tinyrun::SeccompFilter as Filter;

use super::options::SandboxOptions;
use super::spec::{isolation_digest, parse_profile, seccomp_profile};

fn digest(o: &SandboxOptions) -> String {
    isolation_digest(o).unwrap()
}

/// A bundle whose config names `rootfs` (made inside it).
fn bundle(dir: &Path) -> std::path::PathBuf {
    std::fs::create_dir_all(dir.join("rootfs")).unwrap();
    let config = json!({"ociVersion": "1.0.2", "root": {"path": "rootfs"}, "process": {"user": {"uid": 0, "gid": 0}, "args": ["sh"], "cwd": "/"}});
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    dir.to_path_buf()
}

#[test]
fn same_options_same_key_and_every_isolation_option_changes_it() {
    let t = tempfile::tempdir().unwrap();
    let (ra, rb) = (t.path().join("ra"), t.path().join("rb"));
    std::fs::create_dir_all(&ra).unwrap();
    std::fs::create_dir_all(&rb).unwrap();
    let (ba, bb) = (bundle(&t.path().join("ba")), bundle(&t.path().join("bb")));
    let base = SandboxOptions::default();
    let key = digest(&base);
    assert_eq!(key.len(), 16, "a short hex prefix: {key}");
    assert!(key.bytes().all(|b| b.is_ascii_hexdigit()), "{key}");
    assert_eq!(digest(&SandboxOptions::default()), key, "the same options give the same key");
    // Applied per run, or only where the box's own ids come from: same box.
    let same = [
        SandboxOptions { timeout: Duration::from_secs(99), ..base.clone() },
        SandboxOptions { output_cap: 7, ..base.clone() },
        SandboxOptions { host_ids: "65536:65536".parse().unwrap(), ..base.clone() },
        SandboxOptions { lifetime: Some(Duration::from_secs(5)), ..base.clone() },
    ];
    for o in &same {
        assert_eq!(digest(o), key, "{o:?}");
    }
    let with_rootfs = |r: &Path| SandboxOptions { rootfs: Some(r.to_path_buf()), ..base.clone() };
    let with_bundle = |b: &Path| SandboxOptions { bundle: Some(b.to_path_buf()), ..base.clone() };
    let changed = [
        ("memory", SandboxOptions { memory: base.memory * 2, ..base.clone() }),
        ("cpus", SandboxOptions { cpus: 1.5, ..base.clone() }),
        ("pids", SandboxOptions { pids: 7, ..base.clone() }),
        ("seccomp", SandboxOptions { no_seccomp: true, ..base.clone() }),
        ("network", SandboxOptions { loopback: false, ..base.clone() }),
        ("writable root", SandboxOptions { writable_root: true, ..base.clone() }),
        ("tmpfs size", SandboxOptions { tmpfs_size: base.tmpfs_size + 4096, ..base.clone() }),
        ("env", SandboxOptions { env: vec!["A=1".into()], ..base.clone() }),
        ("cgroup parent", SandboxOptions { cgroup_parent: "/elsewhere".into(), ..base.clone() }),
        ("rootfs a", with_rootfs(&ra)),
        ("rootfs b", with_rootfs(&rb)),
        ("bundle a", with_bundle(&ba)),
        ("bundle b", with_bundle(&bb)),
        ("user root", SandboxOptions { user: Some("root".into()), ..base.clone() }),
        ("user by name", SandboxOptions { user: Some("app".into()), ..base.clone() }),
    ];
    let mut seen = vec![("defaults", key)];
    for (what, o) in &changed {
        let k = digest(o);
        if let Some((other, _)) = seen.iter().find(|(_, s)| *s == k) {
            panic!("{what} gives the same key as {other}: {k}");
        }
        seen.push((what, k));
    }
}

#[test]
fn a_missing_rootfs_is_an_error_not_a_key() {
    let o = SandboxOptions { rootfs: Some("/nonexistent-tinyrun-rootfs".into()), ..SandboxOptions::default() };
    let e = isolation_digest(&o).unwrap_err().to_string();
    assert!(e.contains("--rootfs"), "{e}");
}

/// What the box's spec embeds is a profile the runtime compiles.
#[test]
fn the_shipped_profile_compiles() {
    let profile: LinuxSeccomp = serde_json::from_value(seccomp_profile().unwrap()).unwrap();
    Filter::compile(&profile).unwrap();
}

#[test]
fn a_profile_that_does_not_parse_is_an_error() {
    let e = parse_profile("{\"defaultAction\": ").unwrap_err().to_string();
    assert!(e.contains("sandbox seccomp profile does not parse"), "{e}");
}

#[test]
fn output_is_utf8_text_or_lossless_base64() {
    use crate::result::Output;
    let json = |bytes: &[u8], truncated: bool| {
        serde_json::to_value(Output { bytes: bytes.to_vec(), truncated, cut: 0 }).unwrap()
    };
    assert_eq!(json(b"hi\n", false), json!({"text": "hi\n", "encoding": "utf-8", "truncated": false}));
    assert_eq!(json(b"\xff\xfeok", false), json!({"text": "//5vaw==", "encoding": "base64", "truncated": false}));
    // Cut by the cap inside a character: the whole ones are text.
    assert_eq!(json("\u{e9}\u{e9}".as_bytes()[..3].as_ref(), true)["text"], "\u{e9}");
    // The same bytes not cut by the cap are not UTF-8.
    assert_eq!(json("\u{e9}\u{e9}".as_bytes()[..3].as_ref(), false)["encoding"], "base64");
}

#[test]
fn options_no_box_could_start_with_are_refused_by_name() {
    let base = SandboxOptions::default();
    let err = |o: SandboxOptions| o.validate().unwrap_err().to_string();
    assert!(err(SandboxOptions { memory: 1024, ..base.clone() }).contains("--memory"));
    assert!(err(SandboxOptions { env: vec!["FOO".into()], ..base.clone() }).contains("--env \"FOO\""));
    assert!(err(SandboxOptions { env: vec!["=x".into()], ..base.clone() }).contains("--env"));
    for bad in ["relative", "/", "/a/../b", "/a//b", "/a/./b", "/a:b"] {
        assert!(err(SandboxOptions { cgroup_parent: bad.into(), ..base.clone() }).contains("--cgroup-parent"), "{bad}");
    }
    assert!(SandboxOptions { cgroup_parent: "/a/b".into(), ..base }.validate().is_ok());
}
