//! A box's writable storage, kept on the host side so the runtime can copy
//! files into and out of a box through its own paths, never through the
//! box's live /proc. Runs in the runtime process.
//!
//! The bundle dir itself is a tmpfs of its own ([`mount_bundle`]): the
//! default root's skeleton, its mount points and config.json are a few
//! dozen small files made and removed with every box, and on a disk
//! filesystem each creation can cost a millisecond (a journal commit
//! under load), more than the rest of a box's set-up together.
//!
//! Every box gets one more tmpfs, `<bundle>/scratch`, of `--tmpfs-size`
//! ([`RootKind`] says what it holds):
//! - with the default root, `scratch/work` and `scratch/tmp` are bound at
//!   /work and /tmp, so the scratch directory is the box's writable world
//!   seen from `/`;
//! - with `--rootfs` (or `--bundle`), the same, and the caller's directory
//!   is the read-only lower layer of an overlay at `<bundle>/rootfs` whose
//!   upper layer is `scratch/upper` (and overlay's `scratch/ovl`): mount
//!   points are made there, never in the caller's directory;
//! - with an image, `scratch/upper` is the upper layer of an overlay over
//!   the image's read-only layers: every write in the box, /work and /tmp
//!   included, lands in the tmpfs, and the image is never written.
//!
//! An image's layers are seen through id-mapped mounts ([`Lower::Mapped`]):
//! a detached bind mount of the layers' directory (`open_tree`) whose
//! owners show moved into the box's range (`mount_setattr` with
//! `MOUNT_ATTR_IDMAP` and a user namespace holding the box's map), given
//! to overlayfs by fd (`/proc/self/fd/N`) and attached nowhere. So one copy of each layer,
//! with the image's own owners, serves boxes of every range, and a file
//! the image gives to 1000 is the box user's. That takes Linux 6.15
//! (overlayfs layers on detached mounts) and a file system that id-maps
//! (ext4, xfs, btrfs; tmpfs from 6.3); elsewhere an image box fails with
//! an error naming the step.
//!
//! An ordinary user's box gets the same mounts, in the mount namespace its
//! commands share (module `unprivileged`): tmpfs mounts from there with
//! their sizes, and the overlay takes the layers as they are (its cache is
//! its own, module `image`), with `userxattr`, from Linux 5.11.
//!
//! The mounts live as long as the box: made when its bundle is written,
//! detached by [`release`] when it is removed (terminate, the end of a
//! one-shot run, or the garbage collection of a crashed run's box). They
//! are private mounts, so none propagates to another mount namespace.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::mount::{MntFlags, MsFlags};
use nix::sys::stat::{Mode, SFlag};

use crate::error::{Error, Result};
use crate::ids::{BoxIds, BLOCK, SANDBOX_UID};
use tinyrun::tree::{self, Tree};

/// The tmpfs under a box's bundle dir.
pub(crate) const SCRATCH: &str = "scratch";
const UPPER: &str = "upper";
const OVL_WORK: &str = "ovl";
const WORK: &str = "work";

fn mount_error<'a>(what: &'static str, target: &'a Path) -> impl FnOnce(Errno) -> Error + 'a {
    move |e| Error::io(what, target, e.into())
}

/// Mounts a tmpfs of at most `size` bytes on the (empty) bundle dir `dir`
/// of a box whose ids start at host id `base`. It holds what the runtime
/// writes for the box (config.json, the default root's skeleton, mount
/// points, the scratch tmpfs); with `--writable-root`, the box's writes to
/// that skeleton land here too, bounded like /work's.
///
/// It is the box's own and nobody else's: `0700`, owned by the box's root
/// (host id `base`), which has to walk through it to its root filesystem
/// while its init sets up the mounts. Every other local user is stopped
/// here, whatever the modes below (the box's `tmp` is 1777 inside).
///
/// An ordinary user's box gets the same, mounted in the mount namespace
/// its commands share (module `unprivileged`), where the caller is root:
/// tmpfs may be mounted from a user namespace, and the size holds there as
/// on the host. Its root is the caller, so the tmpfs is the caller's.
pub(crate) fn mount_bundle(dir: &Path, size: u64, base: u32) -> Result<()> {
    let data = format!("size={size},mode=0700,uid={base},gid={base}");
    nix::mount::mount(Some("tmpfs"), dir, Some("tmpfs"), MsFlags::MS_NOSUID | MsFlags::MS_NODEV, Some(data.as_str()))
        .map_err(mount_error("mount sandbox bundle (tmpfs) on", dir))?;
    private(dir)
}

/// What a box's root is, and so what its scratch tmpfs holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RootKind {
    /// The default root: `work` and `tmp`, bound at /work and /tmp.
    Skeleton,
    /// `--rootfs` or `--bundle`'s root: an overlay over the caller's
    /// directory (`upper`, `ovl`), with `work` and `tmp` bound as above.
    Given,
    /// `--image`: an overlay (`upper`, `ovl`) that is the box's whole
    /// writable root, /work and /tmp included.
    Image,
}

/// Mounts `dir/scratch`: a tmpfs of `size` bytes for a box of host ids
/// `ids`, with the directories a root of `kind` needs (an ordinary user's
/// as root's, see [`mount_bundle`]).
pub(crate) fn mount_scratch(dir: &Path, size: u64, ids: BoxIds, kind: RootKind) -> Result<PathBuf> {
    let scratch = dir.join(SCRATCH);
    std::fs::DirBuilder::new().mode(0o711).create(&scratch).map_err(|e| Error::io("create", &scratch, e))?;
    // 0711: the box's root, an unprivileged host uid, must reach the binds'
    // sources; nobody may list or read what the box wrote.
    let data = format!("size={size},mode=0711");
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    nix::mount::mount(Some("tmpfs"), &scratch, Some("tmpfs"), flags, Some(data.as_str()))
        .map_err(mount_error("mount sandbox storage (tmpfs) on", &scratch))?;
    private(&scratch)?;
    let overlay = [(UPPER, 0, 0o755), (OVL_WORK, 0, 0o700)];
    // /work is given to the box's user once it is known (`box_dirs`).
    let binds = [(WORK, SANDBOX_UID, 0o755), ("tmp", 0, 0o1777)];
    let dirs: Vec<&(&str, u32, u32)> = match kind {
        RootKind::Skeleton => binds.iter().collect(),
        RootKind::Given => overlay.iter().chain(&binds).collect(),
        RootKind::Image => overlay.iter().collect(),
    };
    for (name, owner, mode) in dirs {
        let p = scratch.join(name);
        std::fs::create_dir(&p).map_err(|e| Error::io("create", &p, e))?;
        // A box of one id (no subordinate range) has no user 1000 yet.
        let owner = if *owner < ids.size { ids.host(*owner) } else { ids.root };
        std::os::unix::fs::chown(&p, Some(owner), Some(owner)).map_err(|e| Error::io("chown", &p, e))?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(*mode)).map_err(|e| Error::io("chmod", &p, e))?;
    }
    Ok(scratch)
}

/// Gives /work to the box's user `user` (ids inside the box whose ids
/// start at host id `base`); with an image, makes /work and /tmp in its
/// overlay at `rootfs` first (in the upper layer: the image is untouched).
pub(crate) fn box_dirs(dir: &Path, rootfs: &Path, kind: RootKind, ids: BoxIds, user: (u32, u32)) -> Result<()> {
    let owner = (ids.host(user.0), ids.host(user.1));
    if kind != RootKind::Image {
        let work = dir.join(SCRATCH).join(WORK);
        return std::os::unix::fs::chown(&work, Some(owner.0), Some(owner.1)).map_err(|e| Error::io("chown", &work, e));
    }
    let tree = Tree::open_one_mount(rootfs)?;
    writable_dir(&tree, WORK, owner, 0o755)?;
    writable_dir(&tree, "tmp", (ids.root, ids.root), 0o1777)
}

fn private(target: &Path) -> Result<()> {
    nix::mount::mount(None::<&str>, target, None::<&str>, MsFlags::MS_PRIVATE, None::<&str>)
        .map_err(mount_error("make private", target))
}

/// The read-only layers of a box's overlay root.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Lower<'a> {
    /// The caller's directory (`--rootfs`), owners as they are on the host.
    Host(&'a Path),
    /// An image: the directories `layers` in `dir`, top first (or `dir`
    /// itself if there are none), seen with their ids moved into the range
    /// of host ids that starts at `base`.
    Mapped { dir: &'a Path, layers: &'a [OsString], base: u32 },
}

/// Mounts an overlay of `lower` at `dir/rootfs`, its upper layer in the
/// scratch tmpfs (see [`mount_scratch`]); returns the root's path.
///
/// # Preconditions
/// The caller is single-threaded: an id map's user namespace is made by a
/// cloned child (`tinyrun::os::userns_with_map`).
pub(crate) fn mount_overlay(dir: &Path, lower: Lower<'_>) -> Result<PathBuf> {
    let scratch = dir.join(SCRATCH);
    let rootfs = dir.join("rootfs");
    let open = |p: &Path| crate::image::open_dir(p).map_err(|e| Error::io("open", p, e));
    // The id-mapped mount must stay open until overlayfs has taken its
    // layers: closing it would unmount it under them.
    let unprivileged = crate::unprivileged::active();
    let (_mapped, lowers): (Option<OwnedFd>, Vec<OwnedFd>) = match lower {
        Lower::Host(p) => (None, vec![open(p)?]),
        Lower::Mapped { dir, layers, .. } if unprivileged => (None, plain_layers(dir, layers)?),
        Lower::Mapped { dir, layers, base } => mapped_layers(dir, layers, base).map(|(m, l)| (Some(m), l))?,
    };
    let (upper, ovl) = (open(&scratch.join(UPPER))?, open(&scratch.join(OVL_WORK))?);
    // The merged root takes the upper directory's owner and mode: give it
    // the top layer's.
    let top = lowers.first().ok_or_else(|| Error::Image("image has no layers".into()))?;
    let st = nix::sys::stat::fstat(top.as_raw_fd()).map_err(|e| Error::io("stat", &rootfs, e.into()))?;
    nix::unistd::fchown(upper.as_raw_fd(), Some(st.st_uid.into()), Some(st.st_gid.into()))
        .map_err(|e| Error::io("chown", scratch.join(UPPER), e.into()))?;
    nix::sys::stat::fchmod(upper.as_raw_fd(), Mode::from_bits_truncate(st.st_mode & 0o7777))
        .map_err(|e| Error::io("chmod", scratch.join(UPPER), e.into()))?;
    // Every layer by its fd, so no path of ours or the caller's (commas,
    // colons, length) has to survive overlay's option syntax.
    let fd_path = |fd: &OwnedFd| format!("/proc/self/fd/{}", fd.as_raw_fd());
    let paths: Vec<String> = lowers.iter().map(fd_path).collect();
    let mut data = format!("lowerdir={},upperdir={},workdir={}", paths.join(":"), fd_path(&upper), fd_path(&ovl));
    if unprivileged {
        // Its own marks in user.overlay.*: trusted.* is the initial namespace's.
        data.push_str(",userxattr");
    }
    std::fs::create_dir_all(&rootfs).map_err(|e| Error::io("create", &rootfs, e))?;
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    nix::mount::mount(Some("overlay"), &rootfs, Some("overlay"), flags, Some(data.as_str())).map_err(|e| {
        let why = if unprivileged {
            " (an ordinary user may mount overlayfs in its own namespaces from Linux 5.11, where the distribution \
             allows it)"
        } else if matches!(lower, Lower::Mapped { .. }) {
            " (overlayfs takes id-mapped layers on detached mounts from Linux 6.15)"
        } else {
            ""
        };
        Error::Image(format!("mount the overlay root on {}: {e}{why}", rootfs.display()))
    })?;
    private(&rootfs)?;
    Ok(rootfs)
}

/// One id-mapped, detached mount of `dir`, and each layer as an fd on it
/// (one mount for them all: each mount costs a grace period when it goes).
fn mapped_layers(dir: &Path, layers: &[OsString], base: u32) -> Result<(OwnedFd, Vec<OwnedFd>)> {
    let userns = tinyrun::os::userns_with_map(base, BLOCK)
        .map_err(|e| Error::Sys { op: "make a user namespace holding the box's id map", errno: e.errno })?;
    let tree = tinyrun::os::idmapped_tree(dir, userns.as_fd()).map_err(|e| {
        Error::Image(format!(
            "id-map {} for the box: {e} (the kernel or the file system refuses id-mapped mounts: tmpfs takes them \
             from Linux 6.3, ext4, xfs and btrfs from 5.12)",
            dir.display()
        ))
    })?;
    let at = |name: &OsStr| {
        tree::open_at(&tree, name, OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW, 0)
            .map_err(|e| Error::io("open image layer", dir.join(name), e.into()))
    };
    let fds = if layers.is_empty() {
        vec![at(OsStr::new("."))?]
    } else {
        layers.iter().map(|l| at(l)).collect::<Result<_>>()?
    };
    Ok((tree, fds))
}

/// Each of `layers` in `dir` (or `dir` itself if there are none) as an fd,
/// owners as they are: an ordinary user's, whose cache is all its own
/// (module `image`), and which may not id-map a file system it does not
/// own.
fn plain_layers(dir: &Path, layers: &[OsString]) -> Result<Vec<OwnedFd>> {
    let open = |p: &Path| crate::image::open_dir(p).map_err(|e| Error::io("open image layer", p, e));
    if layers.is_empty() {
        return Ok(vec![open(dir)?]);
    }
    layers.iter().map(|l| open(&dir.join(l))).collect()
}

/// Makes `/name` a directory owned by `owner` with `mode` (in the upper
/// layer, so the image is untouched); anything else by that name in the
/// image is an error.
fn writable_dir(tree: &Tree, name: &str, (uid, gid): (u32, u32), mode: u32) -> Result<()> {
    let root = tree.fd();
    let n = OsStr::new(name);
    let at = || tree.path().join(name);
    match tree::lstat_at(&root, n) {
        Ok(st) if tree::kind(&st) == SFlag::S_IFDIR => {}
        Ok(_) => return Err(Error::Image(format!("the image's /{name} is not a directory"))),
        Err(Errno::ENOENT) => nix::sys::stat::mkdirat(Some(root.as_raw_fd()), n, Mode::from_bits_truncate(0o700))
            .map_err(|e| Error::io("create", at(), e.into()))?,
        Err(e) => return Err(Error::io("stat", at(), e.into())),
    }
    let d = tree::subdir(&root, n).map_err(|e| Error::io("open", at(), e.into()))?;
    nix::unistd::fchown(d.as_raw_fd(), Some(uid.into()), Some(gid.into()))
        .map_err(|e| Error::io("chown", at(), e.into()))?;
    nix::sys::stat::fchmod(d.as_raw_fd(), Mode::from_bits_truncate(mode))
        .map_err(|e| Error::io("chmod", at(), e.into()))
}

/// Detaches every mount at or below `dir` (a box's bundle dir), so
/// removing the dir afterwards can't reach into a box's files. A dir that
/// is gone has nothing mounted.
///
/// Only the outermost mounts are named: a lazy unmount takes the mounts
/// below along, and each unmount call waits for an RCU grace period, so
/// one call for the bundle's tmpfs replaces three (bundle, scratch,
/// overlay). Then the list is read again, and whatever is still there
/// (a mount stacked on another at the same point) is detached too, until
/// nothing is left or a pass achieves nothing.
pub(crate) fn release(dir: &Path) -> Result<()> {
    let Ok(dir) = std::fs::canonicalize(dir) else { return Ok(()) };
    let mut before = usize::MAX;
    loop {
        let points = mounts_below(&dir)?;
        if points.is_empty() {
            return Ok(());
        }
        if points.len() >= before {
            let p = &points[0];
            return Err(Error::io("unmount sandbox storage", p, Errno::EBUSY.into()));
        }
        before = points.len();
        detach_outermost(&points)?;
    }
}

/// The mount points at or below `dir`, outermost first.
fn mounts_below(dir: &Path) -> Result<Vec<PathBuf>> {
    let table = tinyrun::mountinfo::read().map_err(|e| Error::io("read", "/proc/self/mountinfo", e))?;
    let mut points: Vec<PathBuf> = table.into_iter().map(|m| m.mount_point).filter(|p| p.starts_with(dir)).collect();
    points.sort_by_key(|p| p.components().count());
    Ok(points)
}

/// Lazily unmounts each of `points` (outermost first) that no other one
/// contains.
fn detach_outermost(points: &[PathBuf]) -> Result<()> {
    let mut done: Vec<&PathBuf> = Vec::new();
    for p in points {
        if done.iter().any(|d| p.starts_with(d)) {
            continue;
        }
        done.push(p);
        match nix::mount::umount2(p.as_path(), MntFlags::MNT_DETACH) {
            Ok(()) | Err(Errno::EINVAL | Errno::ENOENT) => {}
            Err(e) => return Err(Error::io("unmount sandbox storage", p, e.into())),
        }
    }
    Ok(())
}
