//! The sandbox's spec as a whole: the pool key follows every option that
//! shapes a box, and the shipped seccomp profile compiles and, loaded for
//! real in a forked child, refuses TIOCSTI and TIOCLINUX but no other ioctl.
#![allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "errno values and test pids")]

use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use nix::sys::wait::{waitpid, WaitStatus};
use serde_json::json;
use tinyrun::oci_spec::runtime::LinuxSeccomp;
use tinyrun::SeccompFilter as Filter;

use super::options::SandboxOptions;
use super::spec::{isolation_digest, parse_profile, seccomp_profile};
use crate::sys::{self, Forked};

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

fn shipped() -> Filter {
    let profile: LinuxSeccomp = serde_json::from_value(seccomp_profile().unwrap()).unwrap();
    Filter::compile(&profile).unwrap()
}

/// Forks; the child loads `f` (if any, after no_new_privs), then reports
/// the errno (0 for success) of `ioctl(pipe, request, buf)` for each
/// request, through another pipe. Returns the child's report.
fn ioctl_errnos(f: Option<&Filter>, requests: &[u64]) -> Vec<i32> {
    let (target_r, _target_w) = nix::unistd::pipe().unwrap();
    let (report_r, report_w) = nix::unistd::pipe().unwrap();
    match sys::fork_for_test().unwrap() {
        Forked::Child => {
            drop(report_r);
            if let Some(f) = f {
                if nix::sys::prctl::set_no_new_privs().is_err() || f.load().is_err() {
                    sys::exit_child(101);
                }
            }
            let mut out = String::new();
            for r in requests {
                out.push_str(&format!("{} ", ioctl(&target_r, *r)));
            }
            let ok = nix::unistd::write(&report_w, out.as_bytes()).is_ok();
            sys::exit_child(if ok { 0 } else { 102 })
        }
        Forked::Parent(pid) => {
            drop(report_w);
            let mut text = String::new();
            std::fs::File::from(report_r).read_to_string(&mut text).unwrap();
            assert_eq!(waitpid(pid, None).unwrap(), WaitStatus::Exited(pid, 0), "report: {text:?}");
            text.split_whitespace().map(|e| e.parse().unwrap()).collect()
        }
    }
}

/// `ioctl(fd, request, buf)` with a zeroed buffer; the errno or 0.
fn ioctl(fd: &OwnedFd, request: u64) -> i32 {
    let mut buf = [0u8; 256];
    let ret = sys::raw_ioctl(fd.as_raw_fd(), request, &mut buf);
    if ret < 0 {
        nix::errno::Errno::last() as i32
    } else {
        0
    }
}

const TIOCSTI: u64 = 0x5412;
const TIOCLINUX: u64 = 0x541C;
const FIONREAD: u64 = 0x541B;
const TIOCGWINSZ: u64 = 0x5413;

#[test]
fn the_shipped_profile_refuses_tiocsti_and_tioclinux_on_their_low_32_bits() {
    let f = shipped();
    let refused = [TIOCSTI, 0x1_0000_5412, 0xFFFF_FFFF_0000_5412, TIOCLINUX, 0x1_0000_541C];
    // Every request one bit away from a refused one, and a few real ones.
    let mut others = vec![FIONREAD, 0x1_0000_541B, TIOCGWINSZ, 0x5401];
    for b in 0..32 {
        others.extend([TIOCSTI ^ (1 << b), TIOCLINUX ^ (1 << b)]);
    }
    others.retain(|r| !refused.contains(r));
    let all: Vec<u64> = refused.iter().chain(&others).copied().collect();
    let control = ioctl_errnos(None, &all);
    let filtered = ioctl_errnos(Some(&f), &all);
    let eperm = libc::EPERM;
    for (i, r) in all.iter().enumerate() {
        if refused.contains(r) {
            assert_eq!(filtered[i], eperm, "request {r:#x} must be refused (without the filter: {})", control[i]);
            assert_ne!(control[i], eperm, "control: {r:#x} on a pipe fails without the filter too, but not EPERM");
        } else {
            assert_eq!(filtered[i], control[i], "request {r:#x}: the filter must not change its outcome");
        }
    }
    let fionread = all.iter().position(|r| *r == FIONREAD).unwrap();
    assert_eq!(filtered[fionread], 0, "FIONREAD on a pipe works under the filter");
    let winsz = all.iter().position(|r| *r == TIOCGWINSZ).unwrap();
    assert_eq!(filtered[winsz], libc::ENOTTY, "TIOCGWINSZ reaches the kernel (a pipe is no tty)");
}

/// Why the profile splits its ioctl allow: under an unconditional allow,
/// libseccomp drops a conditional refusal of the same call without a word.
#[test]
fn an_unconditional_allow_would_swallow_the_refusal() {
    let naive: LinuxSeccomp = serde_json::from_value(json!({
        "defaultAction": "SCMP_ACT_ERRNO",
        "syscalls": [
            {"names": ["ioctl", "write", "exit_group", "exit", "close", "munmap"], "action": "SCMP_ACT_ALLOW"},
            {"names": ["ioctl"], "action": "SCMP_ACT_ERRNO", "args": [
                {"index": 1, "value": 0xFFFF_FFFF_u32, "valueTwo": TIOCSTI, "op": "SCMP_CMP_MASKED_EQ"}]}
        ]
    }))
    .unwrap();
    let Ok(f) = Filter::compile(&naive) else { return };
    let got = ioctl_errnos(Some(&f), &[TIOCSTI]);
    assert_ne!(got, vec![libc::EPERM], "libseccomp now keeps the refusal: the profile's ioctl rules can be simpler");
}

#[test]
fn the_shipped_profile_parses_and_loads() {
    let f = shipped();
    // The child loads it and makes an allowed call.
    let got = ioctl_errnos(Some(&f), &[FIONREAD]);
    assert_eq!(got, vec![0]);
}

#[test]
fn a_profile_that_does_not_parse_is_an_error() {
    let e = parse_profile("{\"defaultAction\": ").unwrap_err().to_string();
    assert!(e.contains("sandbox seccomp profile does not parse"), "{e}");
}

#[test]
fn output_is_utf8_text_or_lossless_base64() {
    use crate::run::Output;
    let json =
        |bytes: &[u8], truncated: bool| serde_json::to_value(Output { bytes: bytes.to_vec(), truncated }).unwrap();
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
