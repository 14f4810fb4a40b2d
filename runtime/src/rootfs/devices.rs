//! /dev: the default device nodes every container gets, `linux.devices`,
//! and the usual symlinks.

use std::os::fd::{AsFd, AsRawFd};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::AtFlags;
use nix::mount::MsFlags;
use nix::sys::stat::{makedev, Mode, SFlag};
use oci_spec::runtime::LinuxDeviceType;

use super::kernel::Kernel;
use super::{Options, Result};
use crate::devices::DEFAULT_DEVICES as DEFAULTS;
use crate::error::InitError;
use crate::sys::fs::{fd_path, reopen_dir};
use crate::tree::Tree;

struct Node {
    path: String,
    kind: SFlag,
    major: u64,
    minor: u64,
    mode: u32,
    uid: u32,
    gid: u32,
}

const LINKS: [(&str, &str); 5] = [
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
    ("ptmx", "pts/ptmx"),
];

pub(super) fn populate(root: &Tree, o: &Options) -> Result<()> {
    let mut nodes: Vec<Node> = DEFAULTS
        .iter()
        .map(|(n, major, minor)| Node {
            path: format!("/dev/{n}"),
            kind: SFlag::S_IFCHR,
            major: *major,
            minor: *minor,
            mode: 0o666,
            uid: 0,
            gid: 0,
        })
        .collect();
    for d in o.spec.linux().as_ref().and_then(|l| l.devices().as_ref()).into_iter().flatten() {
        let kind = match d.typ() {
            LinuxDeviceType::C | LinuxDeviceType::U => SFlag::S_IFCHR,
            LinuxDeviceType::B => SFlag::S_IFBLK,
            LinuxDeviceType::P => SFlag::S_IFIFO,
            LinuxDeviceType::A => return Err(bad_device(d.path(), "type \"a\" is not a device".into())),
        };
        let path = d.path().to_str().ok_or_else(|| bad_device(d.path(), "the path is not UTF-8".into()))?.to_string();
        let major =
            u64::try_from(d.major()).map_err(|_| bad_device(d.path(), format!("major {} is negative", d.major())))?;
        let minor =
            u64::try_from(d.minor()).map_err(|_| bad_device(d.path(), format!("minor {} is negative", d.minor())))?;
        nodes.retain(|n| n.path != path);
        nodes.push(Node {
            path,
            kind,
            major,
            minor,
            mode: d.file_mode().unwrap_or(0o666),
            uid: d.uid().unwrap_or(0),
            gid: d.gid().unwrap_or(0),
        });
    }
    for n in &nodes {
        make_node(o.kernel, root, n, o.in_user_ns)?;
    }
    let dev = root.mkdir_all(Path::new("/dev"), 0o755)?;
    let dev = reopen_dir(&dev).map_err(|e| InitError::path("open", "/dev", e))?;
    for (name, target) in LINKS {
        match nix::unistd::symlinkat(target, Some(dev.as_raw_fd()), name) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(InitError::path("symlink", format!("/dev/{name}"), e)),
        }
    }
    Ok(())
}

fn bad_device(path: &Path, why: String) -> InitError {
    InitError::other(format!("device {}", path.display()), why).field("linux.devices")
}

fn make_node(k: &dyn Kernel, root: &Tree, n: &Node, in_user_ns: bool) -> Result<()> {
    let path = Path::new(&n.path);
    // The spec wants the real device here; an image's symlink (or file) in
    // its place must not be kept, or followed to the host.
    super::replace_symlink(root, path)?;
    let parent = path.parent().unwrap_or(Path::new("/"));
    let name = path.file_name().ok_or_else(|| bad_device(path, "the path has no file name".into()))?;
    if in_user_ns && n.kind != SFlag::S_IFIFO {
        // mknod of a device is refused in a user namespace: bind the
        // host's node over an empty file instead.
        let target = root.ensure(path, true)?;
        return k.mount_at(Some(&n.path), &fd_path(&target), None, MsFlags::MS_BIND, None, &n.path);
    }
    let dir = root.mkdir_all(parent, 0o755)?;
    let dir = reopen_dir(&dir).map_err(|e| InitError::path("open", parent, e))?;
    let node = |op: &str, e: Errno| InitError::path(op.to_string(), path, e);
    let mode = Mode::from_bits_truncate(n.mode & 0o7777);
    let dev = makedev(n.major, n.minor);
    match k.mknodat(dir.as_fd(), name, n.kind, mode, dev) {
        Ok(()) => {}
        Err(Errno::EEXIST) => {
            // The image has something there (a /dev that isn't a tmpfs):
            // keep it only if it is this very device.
            let st = nix::sys::stat::fstatat(Some(dir.as_raw_fd()), name, AtFlags::AT_SYMLINK_NOFOLLOW)
                .map_err(|e| node("stat", e))?;
            if st.st_mode & libc::S_IFMT == n.kind.bits() && st.st_rdev == dev {
                return Ok(());
            }
            nix::unistd::unlinkat(Some(dir.as_raw_fd()), name, nix::unistd::UnlinkatFlags::NoRemoveDir)
                .map_err(|e| node("remove the existing entry at", e))?;
            k.mknodat(dir.as_fd(), name, n.kind, mode, dev).map_err(|e| node("mknod", e))?;
        }
        Err(e) => return Err(node("mknod", e)),
    }
    // Init runs with umask 0, so the mode above is taken literally.
    k.fchownat(dir.as_fd(), name, n.uid, n.gid).map_err(|e| node("chown", e))
}
