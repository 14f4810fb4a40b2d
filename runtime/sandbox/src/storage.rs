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
//! Every box gets one more tmpfs, `<bundle>/scratch`, of `--tmpfs-size`:
//! - with the default root (or `--rootfs`/`--bundle`), `scratch/work` and
//!   `scratch/tmp` are bound at /work and /tmp, so the scratch directory
//!   is the box's writable world seen from `/`;
//! - with an image, `scratch/upper` (and overlay's `scratch/ovl`) is the
//!   upper layer of an overlay mounted at `<bundle>/rootfs` over the
//!   image's read-only layers: every write in the box, /work and /tmp
//!   included, lands in the tmpfs, and the image is never written.
//!
//! The mounts live as long as the box: made when its bundle is written,
//! detached by [`release`] when it is removed (terminate, the end of a
//! one-shot run, or the garbage collection of a crashed run's box). They
//! are private mounts, so none propagates to another mount namespace.

use std::ffi::OsStr;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::mount::{MntFlags, MsFlags};
use nix::sys::stat::{Mode, SFlag};

use crate::error::{Error, Result};
use crate::image::Prepared;
use crate::spec::SANDBOX_UID;
use tinyrun::tree::{self, Tree};

/// The tmpfs under a box's bundle dir.
pub(crate) const SCRATCH: &str = "scratch";
const UPPER: &str = "upper";
const OVL_WORK: &str = "ovl";

/// Where bundles live: `<root>/sandbox-bundles/<id>`; the runtime root of
/// a bundle dir.
pub(crate) fn state_root(bundle: &Path) -> &Path {
    bundle.parent().and_then(Path::parent).unwrap_or(Path::new("/"))
}

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
pub(crate) fn mount_bundle(dir: &Path, size: u64, base: u32) -> Result<()> {
    let data = format!("size={size},mode=0700,uid={base},gid={base}");
    nix::mount::mount(Some("tmpfs"), dir, Some("tmpfs"), MsFlags::MS_NOSUID | MsFlags::MS_NODEV, Some(data.as_str()))
        .map_err(mount_error("mount sandbox bundle (tmpfs) on", dir))?;
    private(dir)
}

/// Mounts `dir/scratch`: a tmpfs of `size` bytes for a box whose ids start
/// at host id `base`; without `image`, its `work` and `tmp` are made.
pub(crate) fn mount_scratch(dir: &Path, size: u64, base: u32, image: bool) -> Result<PathBuf> {
    let scratch = dir.join(SCRATCH);
    std::fs::DirBuilder::new().mode(0o711).create(&scratch).map_err(|e| Error::io("create", &scratch, e))?;
    // 0711: the box's root, an unprivileged host uid, must reach the binds'
    // sources; nobody may list or read what the box wrote.
    let data = format!("size={size},mode=0711");
    nix::mount::mount(
        Some("tmpfs"),
        &scratch,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(data.as_str()),
    )
    .map_err(mount_error("mount sandbox storage (tmpfs) on", &scratch))?;
    private(&scratch)?;
    let dirs: &[(&str, u32, u32)] = if image {
        &[(UPPER, 0, 0o755), (OVL_WORK, 0, 0o700)]
    } else {
        &[("work", SANDBOX_UID, 0o755), ("tmp", 0, 0o1777)]
    };
    for (name, owner, mode) in dirs {
        let p = scratch.join(name);
        std::fs::create_dir(&p).map_err(|e| Error::io("create", &p, e))?;
        std::os::unix::fs::chown(&p, Some(base + owner), Some(base + owner)).map_err(|e| Error::io("chown", &p, e))?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(*mode)).map_err(|e| Error::io("chmod", &p, e))?;
    }
    Ok(scratch)
}

fn private(target: &Path) -> Result<()> {
    nix::mount::mount(None::<&str>, target, None::<&str>, MsFlags::MS_PRIVATE, None::<&str>)
        .map_err(mount_error("make private", target))
}

/// Mounts the overlay of image `img` at `dir/rootfs` over the scratch
/// tmpfs (see [`mount_scratch`]) and makes its /work and /tmp; returns the
/// root filesystem's path.
pub(crate) fn mount_image(dir: &Path, img: &Prepared, base: u32) -> Result<PathBuf> {
    let scratch = dir.join(SCRATCH);
    let (upper, ovl) = (scratch.join(UPPER), scratch.join(OVL_WORK));
    // The merged root takes the upper directory's owner and mode: give it
    // the image's.
    let top = img.lowers.first().ok_or_else(|| Error::Image("image has no layers".into()))?;
    let meta = std::fs::metadata(top).map_err(|e| Error::io("stat", top, e))?;
    std::os::unix::fs::chown(&upper, Some(meta.uid()), Some(meta.gid())).map_err(|e| Error::io("chown", &upper, e))?;
    std::fs::set_permissions(&upper, std::fs::Permissions::from_mode(meta.mode() & 0o7777))
        .map_err(|e| Error::io("chmod", &upper, e))?;
    let data = overlay_options(&img.lowers, &upper, &ovl)?;
    let rootfs = dir.join("rootfs");
    std::fs::create_dir_all(&rootfs).map_err(|e| Error::io("create", &rootfs, e))?;
    nix::mount::mount(
        Some("overlay"),
        &rootfs,
        Some("overlay"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(data.as_str()),
    )
    .map_err(mount_error("mount image overlay on", &rootfs))?;
    private(&rootfs)?;
    let tree = Tree::open_one_mount(&rootfs)?;
    writable_dir(&tree, "work", (base + SANDBOX_UID, base + SANDBOX_UID), 0o755)?;
    writable_dir(&tree, "tmp", (base, base), 0o1777)?;
    Ok(rootfs)
}

/// The overlay's mount data; paths that would break its syntax, or more
/// layers than one page of options holds, are refused.
fn overlay_options(lowers: &[PathBuf], upper: &Path, work: &Path) -> Result<String> {
    let all = lowers.iter().map(PathBuf::as_path).chain([upper, work]);
    for p in all {
        if p.to_str().is_none_or(|s| s.contains([',', ':', '\\'])) {
            return Err(Error::Image(format!(
                "path {} can't be an overlay layer (it has a comma, colon or backslash, or isn't UTF-8)",
                p.display()
            )));
        }
    }
    let lower: Vec<String> = lowers.iter().map(|p| p.display().to_string()).collect();
    let data = format!("lowerdir={},upperdir={},workdir={}", lower.join(":"), upper.display(), work.display());
    if data.len() >= 4096 {
        return Err(Error::Image(format!(
            "the image's {} layers don't fit in one overlay mount's options (4095 bytes); use a shorter --root",
            lowers.len()
        )));
    }
    Ok(data)
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
    let info = Path::new("/proc/self/mountinfo");
    let text = std::fs::read_to_string(info).map_err(|e| Error::io("read", info, e))?;
    let mut points: Vec<PathBuf> =
        text.lines().filter_map(|l| l.split(' ').nth(4)).map(unescape).filter(|p| p.starts_with(dir)).collect();
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

/// mountinfo's octal escapes (`\040` for a space, ...).
fn unescape(field: &str) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct =
            b.get(i + 1..i + 4).and_then(|d| std::str::from_utf8(d).ok()).and_then(|d| u8::from_str_radix(d, 8).ok());
        match (b[i], oct) {
            (b'\\', Some(c)) => {
                out.push(c);
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_read() {
        assert_eq!(unescape("/a\\040b/c\\134d"), PathBuf::from("/a b/c\\d"));
        assert_eq!(unescape("/plain"), PathBuf::from("/plain"));
    }

    #[test]
    fn overlay_options_refuse_bad_paths_and_overflow() {
        let (u, w) = (Path::new("/s/upper"), Path::new("/s/ovl"));
        let ok = overlay_options(&[PathBuf::from("/l/2"), PathBuf::from("/l/1")], u, w).unwrap();
        assert_eq!(ok, "lowerdir=/l/2:/l/1,upperdir=/s/upper,workdir=/s/ovl");
        let e = overlay_options(&[PathBuf::from("/l/a:b")], u, w).unwrap_err().to_string();
        assert!(e.contains("colon"), "{e}");
        let many: Vec<PathBuf> = (0..100).map(|i| PathBuf::from(format!("/{}/{i}", "x".repeat(60)))).collect();
        assert!(overlay_options(&many, u, w).unwrap_err().to_string().contains("100 layers"));
    }
}
