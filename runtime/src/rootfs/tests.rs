//! The mount sequence init runs (prepare, protect_paths, enter) against a
//! fake kernel, on a rootfs in a temporary directory: its order and its
//! failure paths, without root.

use std::path::{Path, PathBuf};

use nix::mount::MsFlags;
use oci_spec::runtime::Spec;

use super::kernel::fake::{Call, Fake};
use super::kernel::Attrs;
use super::*;

struct World {
    _dir: tempfile::TempDir,
    rootfs: PathBuf,
    bundle: PathBuf,
    spec: Spec,
}

/// A bundle with a rootfs holding what the spec below names, and a spec
/// with the usual mounts, a recursive read-only bind, a tmpfs made
/// read-only after it is populated, readonly and masked paths.
fn world(extra: serde_json::Value) -> World {
    let dir = tempfile::tempdir().unwrap();
    let (rootfs, bundle) = (dir.path().join("rootfs"), dir.path().to_path_buf());
    for d in ["proc/sys", "dev", "sys/firmware", "tmp"] {
        std::fs::create_dir_all(rootfs.join(d)).unwrap();
    }
    std::fs::write(rootfs.join("proc/kcore"), "").unwrap();
    std::fs::create_dir_all(bundle.join("data")).unwrap();
    let mut v = serde_json::json!({
        "ociVersion": "1.1.0",
        "root": {"path": "rootfs", "readonly": true},
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "mode=755"]},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["newinstance"]},
            {"destination": "/data", "type": "bind", "source": "data", "options": ["rbind", "rro"]},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["ro"]}
        ],
        "linux": {"readonlyPaths": ["/proc/sys"], "maskedPaths": ["/proc/kcore", "/sys/firmware"]}
    });
    merge(&mut v, extra);
    World { _dir: dir, rootfs, bundle, spec: serde_json::from_value(v).unwrap() }
}

fn merge(a: &mut serde_json::Value, b: serde_json::Value) {
    if let (Some(a), serde_json::Value::Object(b)) = (a.as_object_mut(), &b) {
        for (k, v) in b {
            match a.get_mut(k) {
                Some(x) if x.is_object() => merge(x, v.clone()),
                _ => {
                    a.insert(k.clone(), v.clone());
                }
            }
        }
    }
}

fn options<'a>(w: &'a World, k: &'a Fake, in_user_ns: bool) -> Options<'a> {
    Options {
        spec: &w.spec,
        rootfs: &w.rootfs,
        bundle: &w.bundle,
        in_user_ns,
        cgroup_ns: false,
        cgroup_hierarchies: &[],
        kernel: k,
        own_mount_ns: true,
        bind_sources: &[],
    }
}

/// prepare, protect_paths, enter: what init does, in its order.
fn run(w: &World, k: &Fake, in_user_ns: bool, no_pivot: bool) -> Result<()> {
    let mut joined = 0;
    let root = prepare(&options(w, k, in_user_ns), &mut || {
        joined += 1;
        Ok(String::new())
    })?;
    assert_eq!(joined, 1, "in_cgroup runs once, before prepare returns");
    protect_paths(k, &root, &w.spec)?;
    enter(k, root, &w.spec, no_pivot, true)
}

fn mount_flags(k: &Fake, dst: &str) -> Vec<MsFlags> {
    k.calls
        .borrow()
        .iter()
        .filter_map(|c| match c {
            Call::Mount { dst: d, flags, .. } if d == dst => Some(*flags),
            _ => None,
        })
        .collect()
}

#[test]
fn the_sequence_runs_in_spec_order() {
    let w = world(serde_json::json!({}));
    let k = Fake { read_only: true, ..Fake::default() };
    run(&w, &k, false, false).unwrap();
    let rootfs = w.rootfs.to_str().unwrap().to_string();
    let expected: Vec<String> = [
        "/",
        &rootfs,
        "/proc",
        "/dev",
        "/dev/pts",
        "/data",
        "/tmp",
        "/tmp", // config mounts
        "/proc/sys",
        "/proc/sys",
        "/proc/kcore",
        "/sys/firmware", // readonly, then masked
        "old root",
        "/", // after pivot_root: the old root, then the read-only root
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(k.mounted(), expected);
    // Nothing mounted may propagate back to the host: the first call.
    assert_eq!(mount_flags(&k, "/")[0], MsFlags::MS_SLAVE | MsFlags::MS_REC);
    // A read-only tmpfs is mounted writable, populated, then remounted.
    let tmp = mount_flags(&k, "/tmp");
    assert!(!tmp[0].contains(MsFlags::MS_RDONLY) && tmp[1].contains(MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY));
    // rro: the bind and every mount below it, after the bind.
    let calls = k.calls.borrow().clone();
    let bind = calls.iter().position(|c| matches!(c, Call::Mount { dst, .. } if dst == "/data")).unwrap();
    assert_eq!(calls[bind + 1], Call::SetAttrs { dst: "/data".into(), attrs: Attrs { set: 0x1, clear: 0 } });
    // Default devices are made and chowned, between the mounts and the pivot.
    let made: Vec<&str> = calls
        .iter()
        .filter_map(|c| if let Call::Mknod { name, .. } = c { Some(name.as_str()) } else { None })
        .collect();
    assert_eq!(made, ["null", "zero", "full", "random", "urandom", "tty"]);
    let pivot = calls.iter().position(|c| *c == Call::PivotRoot).unwrap();
    assert_eq!(calls[pivot - 1], Call::Fchdir, "pivot_root(\".\", \".\") from inside the new root");
    assert_eq!(calls[pivot + 1], Call::Fchdir, "into the old root, opened before the pivot");
    assert_eq!(calls[pivot + 3], Call::Umount(".".into()), "the old root goes right after");
    assert_eq!(calls[pivot + 4], Call::Chdir("/".into()));
    let last = mount_flags(&k, "/").pop().unwrap();
    assert!(last.contains(MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY), "{last:?}");
}

#[test]
fn a_failed_mount_stops_the_sequence_and_names_its_entry() {
    let w = world(serde_json::json!({}));
    // The fourth call: "/", the rootfs, /proc, then /dev.
    let k = Fake { fail_at: Some(3), ..Fake::default() };
    let e = run(&w, &k, false, false).unwrap_err().to_string();
    assert!(e.contains("mounts /dev") && e.contains("EPERM"), "{e}");
    assert_eq!(k.mounted().last().map(String::as_str), Some("/dev"), "nothing after the failed mount");
    assert!(!k.calls.borrow().contains(&Call::PivotRoot));
}

#[test]
fn a_root_still_writable_after_the_remount_fails_closed() {
    let w = world(serde_json::json!({}));
    let k = Fake { read_only: false, ..Fake::default() };
    let e = run(&w, &k, false, false).unwrap_err().to_string();
    assert!(e.contains("root.readonly") && e.contains("still writable"), "{e}");
}

#[test]
fn without_pivot_root_the_root_is_moved_and_chrooted() {
    let w = world(serde_json::json!({"root": {"readonly": false}, "linux": {"rootfsPropagation": "shared"}}));
    let k = Fake::default();
    run(&w, &k, false, true).unwrap();
    let calls = k.calls.borrow().clone();
    assert!(!calls.contains(&Call::PivotRoot));
    let chroot = calls.iter().position(|c| *c == Call::Chroot).unwrap();
    assert!(matches!(&calls[chroot - 1], Call::Mount { flags, .. } if flags.contains(MsFlags::MS_MOVE)));
    // Shared as asked from the start (mounts copied from the host stay its
    // peers), the rootfs's own mount private before it is bound, and "/"
    // private before the rootfs is moved onto it: neither may show up on
    // the host. Shared again once inside.
    let flags = mount_flags(&k, "/");
    assert_eq!(flags.first(), Some(&MsFlags::MS_SHARED));
    let rootfs = w.rootfs.to_str().unwrap();
    assert_eq!(mount_flags(&k, rootfs)[..2], [MsFlags::MS_PRIVATE, MsFlags::MS_BIND | MsFlags::MS_REC]);
    let moved = calls.iter().position(|c| matches!(c, Call::Mount { flags, .. } if flags.contains(MsFlags::MS_MOVE)));
    assert!(matches!(&calls[moved.unwrap() - 1], Call::Mount { dst, flags, .. }
        if dst == "/" && *flags == MsFlags::MS_PRIVATE));
    assert_eq!(flags.last(), Some(&(MsFlags::MS_SHARED | MsFlags::MS_REC)));
}

/// `rootfsPropagation: rshared` (what containerd sets for a Bidirectional
/// mount): the tree stays shared with the host's, the rootfs's own mount is
/// made private before its bind, and after pivot_root the root is rshared.
#[test]
fn rshared_keeps_host_peers_and_cuts_off_the_rootfs_mount() {
    let w = world(serde_json::json!({"linux": {"rootfsPropagation": "rshared"}}));
    let k = Fake { read_only: true, ..Fake::default() };
    run(&w, &k, false, false).unwrap();
    let rootfs = w.rootfs.to_str().unwrap().to_string();
    assert_eq!(k.mounted()[..3], ["/".to_string(), rootfs.clone(), rootfs.clone()]);
    let rshared = MsFlags::MS_SHARED | MsFlags::MS_REC;
    assert_eq!(mount_flags(&k, "/")[0], rshared, "no slave step: the host's peers stay peers");
    assert_eq!(mount_flags(&k, &rootfs), [MsFlags::MS_PRIVATE, MsFlags::MS_BIND | MsFlags::MS_REC]);
    let calls = k.calls.borrow().clone();
    let pivot = calls.iter().position(|c| *c == Call::PivotRoot).unwrap();
    let after: Vec<MsFlags> = calls[pivot..]
        .iter()
        .filter_map(|c| match c {
            Call::Mount { dst, flags, .. } if dst == "/" => Some(*flags),
            _ => None,
        })
        .collect();
    assert_eq!(after[0], rshared, "the container's root is made rshared once it is /");
    // The default stays a recursive slave, with no private step.
    let w = world(serde_json::json!({}));
    let k = Fake { read_only: true, ..Fake::default() };
    run(&w, &k, false, false).unwrap();
    assert_eq!(mount_flags(&k, w.rootfs.to_str().unwrap()), [MsFlags::MS_BIND | MsFlags::MS_REC]);
}

#[test]
fn in_a_user_namespace_devices_are_bound_not_made() {
    let w = world(serde_json::json!({"root": {"readonly": false}}));
    let k = Fake::default();
    run(&w, &k, true, false).unwrap();
    let calls = k.calls.borrow().clone();
    assert!(!calls.iter().any(|c| matches!(c, Call::Mknod { .. })), "mknod is refused in a user namespace");
    for dev in ["/dev/null", "/dev/tty"] {
        let bound = calls.iter().any(|c| {
            matches!(c, Call::Mount { source: Some(s), dst, flags, .. }
                if s == dev && dst == dev && flags.contains(MsFlags::MS_BIND))
        });
        assert!(bound, "{dev} is the host's node bound over an empty file");
        assert!(Path::new(&w.rootfs).join(&dev[1..]).is_file());
    }
}
