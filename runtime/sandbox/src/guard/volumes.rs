//! A pod's volumes, usable by the pod's ids. In its user namespace the
//! pod's root is an unprivileged host id: a volume kubelet or containerd
//! made as the host's root would be nobody's to it.
//!
//! Each bind mount of a guarded container (its volumes: emptyDir,
//! configMap, secret, a hostPath the policy allows; containerd's
//! /etc/hosts and the like) is id-mapped with the pod's own mappings where
//! the source's file system allows it (the runtime's `idmap` option): the
//! pod sees the host's ids as a pod without a user namespace would, and
//! what it writes there is stored with the ids it used inside. Where the
//! file system can't (ramfs, some network file systems), an emptyDir, a
//! directory kubelet made empty for this pod alone, is given to the pod's
//! root instead: chowned to its host id. Any other bind stays the host's.
//!
//! Runs in the runtime process, on the hardened config (bind sources made
//! canonical: what was checked against the policy is what is mapped).

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::fs::{Mode, OFlags, ResolveFlags};
use serde_json::{json, Value};

use crate::error::{Error, Result};
use crate::ids::BLOCK;

/// Where kubelet keeps a pod's emptyDir volumes:
/// `<kubelet root>/pods/<pod uid>/volumes/kubernetes.io~empty-dir/<name>`.
const EMPTY_DIR: &str = "kubernetes.io~empty-dir";

/// Makes the binds of `spec` usable by the pod whose host ids start at
/// `first` (see the module's comment).
pub(crate) fn make_usable(spec: &mut Value, first: u32) -> Result<()> {
    let Some(mounts) = spec["mounts"].as_array_mut() else { return Ok(()) };
    let mut binds = mounts.iter_mut().filter(|m| is_bind(m)).peekable();
    if binds.peek().is_none() {
        return Ok(());
    }
    // The question is asked of the kernel: a throw-away id-mapped clone of
    // each source, through a namespace with the pod's mappings.
    let probe = tinyrun::os::userns_with_map(first, BLOCK)?;
    for m in binds {
        let Some(src) = m["source"].as_str().map(str::to_string) else { continue };
        let src = Path::new(&src);
        if tinyrun::os::idmapped_tree(src, probe.as_fd()).is_ok() {
            add_option(m, "idmap");
        } else if is_empty_dir(src) {
            give_to_pod(src, first)?;
        }
    }
    Ok(())
}

fn is_bind(m: &Value) -> bool {
    let opts = m["options"].as_array().map(Vec::as_slice).unwrap_or_default();
    m["type"] == "bind" || opts.iter().any(|o| o == "bind" || o == "rbind")
}

fn add_option(m: &mut Value, opt: &str) {
    if !m["options"].is_array() {
        m["options"] = json!([]);
    }
    if let Some(a) = m["options"].as_array_mut() {
        if !a.iter().any(|o| o == opt) {
            a.push(json!(opt));
        }
    }
}

/// Whether `path` is where kubelet keeps an emptyDir, by name: its parent
/// is `kubernetes.io~empty-dir` of a pod's `volumes`.
fn is_empty_dir(path: &Path) -> bool {
    let parent = path.parent();
    parent.and_then(Path::file_name).is_some_and(|n| n == EMPTY_DIR)
        && parent.and_then(Path::parent).and_then(Path::file_name).is_some_and(|n| n == "volumes")
}

/// Chowns the emptyDir at `path` to the pod's root (host id `first`), if
/// it is as kubelet made it: a directory of the host's root, still empty.
/// One already the pod's (a container before this one, or a restart) is
/// left as it is; anything else (not empty, another owner) is not given
/// away. Opened without following any symlink, and changed through that
/// fd: the path checked is the directory chowned.
fn give_to_pod(path: &Path, first: u32) -> Result<()> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let resolve = ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    let dir = rustix::fs::openat2(rustix::fs::CWD, path, flags, Mode::empty(), resolve)
        .map_err(|e| Error::io("open the emptyDir", path, e.into()))?;
    let st = rustix::fs::fstat(&dir).map_err(|e| Error::io("stat the emptyDir", path, e.into()))?;
    if (st.st_uid, st.st_gid) == (first, first) || st.st_uid != 0 || !is_empty(&dir, path)? {
        return Ok(());
    }
    let id = Some(rustix::fs::Uid::from_raw(first));
    rustix::fs::fchown(&dir, id, Some(rustix::fs::Gid::from_raw(first)))
        .map_err(|e| Error::io("chown the emptyDir to the pod's root", path, e.into()))
}

/// Whether directory `dir` has no entry but `.` and `..`.
fn is_empty(dir: &OwnedFd, path: &Path) -> Result<bool> {
    let entries = rustix::fs::Dir::read_from(dir).map_err(|e| Error::io("read the emptyDir", path, e.into()))?;
    for e in entries {
        let e = e.map_err(|e| Error::io("read the emptyDir", path, e.into()))?;
        if !matches!(e.file_name().to_bytes(), b"." | b"..") {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_dir_is_known_by_kubelets_layout() {
        assert!(is_empty_dir(Path::new("/var/lib/kubelet/pods/u1/volumes/kubernetes.io~empty-dir/cache")));
        assert!(!is_empty_dir(Path::new("/var/lib/kubelet/pods/u1/volumes/kubernetes.io~configmap/cfg")));
        assert!(!is_empty_dir(Path::new("/srv/kubernetes.io~empty-dir/cache")), "not under a pod's volumes");
        assert!(!is_empty_dir(Path::new("/")));
    }

    #[test]
    fn only_an_empty_dir_of_roots_is_given_away_and_never_through_a_symlink() {
        use std::os::unix::fs::MetadataExt;
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let own = |p: &Path| std::fs::symlink_metadata(p).map(|m| (m.uid(), m.gid())).unwrap();
        let empty = t.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        give_to_pod(&empty, 0x6000_0000).unwrap();
        assert_eq!(own(&empty), (0x6000_0000, 0x6000_0000));
        let full = t.path().join("full");
        std::fs::create_dir(&full).unwrap();
        std::fs::write(full.join("f"), "").unwrap();
        give_to_pod(&full, 0x6000_0000).unwrap();
        assert_eq!(own(&full), (0, 0), "a directory with something in it is not the pod's");
        let target = t.path().join("target");
        std::fs::create_dir(&target).unwrap();
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(give_to_pod(&link, 0x6000_0000).is_err(), "a symlink is not followed");
        assert_eq!(own(&target), (0, 0));
    }
}
