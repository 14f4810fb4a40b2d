//! One config.json mount at a time, in order.

use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;
use nix::mount::MsFlags;
use oci_spec::runtime::Mount;

use super::kernel::{locked_flags, Attrs, Kernel};
use super::options::{parse_options, MountOptions};
use super::{Options, Result};
use crate::error::InitError;
use crate::sys::fs::fd_path;
use crate::tree::Tree;

/// Mounts `m` at its destination resolved inside `root`; a failure names
/// the entry (`mounts /dev/pts: ...`); `index` is its place in `mounts`.
/// `own_cgroups`: init's `/proc/self/cgroup` as the host sees it (for a
/// cgroup mount).
pub(super) fn mount_one(root: &Tree, m: &Mount, index: usize, o: &Options, own_cgroups: &str) -> Result<()> {
    mount_entry(root, m, index, o, own_cgroups).map_err(|e| e.field(format!("mounts {}", m.destination().display())))
}

fn mount_entry(root: &Tree, m: &Mount, index: usize, o: &Options, own_cgroups: &str) -> Result<()> {
    let k = o.kernel;
    let dest = m.destination();
    let shown = dest.to_string_lossy();
    let opts = parse_options(m.options().as_deref().unwrap_or(&[]));
    let typ = m.typ().as_deref().unwrap_or("");
    if typ == "cgroup" || typ == "cgroup2" {
        return super::cgroupfs::mount_cgroup(root, dest, &opts, o, own_cgroups);
    }
    if opts.is_bind() || typ == "bind" {
        return bind(root, m, index, &opts, o);
    }
    if typ == "proc" || typ == "sysfs" {
        ordinary_directory(root, dest, typ)?;
    }
    let target = root.mkdir_all(dest, 0o755)?;
    if opts.copy_up && typ != "tmpfs" {
        return Err(InitError::other("mount", "tmpcopyup applies only to tmpfs mounts"));
    }
    // What the directory held, kept open to copy into the new tmpfs.
    let below = if opts.copy_up {
        Some(crate::sys::fs::reopen_dir(&target).map_err(|e| InitError::path("open", dest, e))?)
    } else {
        None
    };
    let source = m.source().as_ref().and_then(|s| s.to_str()).unwrap_or(typ);
    let (flags, data) = (opts.flags, opts.data.as_str());
    // The kernel won't create a read-only mount of a fresh tmpfs/devpts and
    // then let us populate it; like runc, mount rw and remount ro afterwards
    // only for tmpfs, which is where /dev lives.
    let later_ro = typ == "tmpfs" && flags.contains(MsFlags::MS_RDONLY);
    let first = if later_ro { flags & !MsFlags::MS_RDONLY } else { flags };
    match k.mount_at(Some(source), &fd_path(&target), Some(typ), first, Some(data), &shown) {
        // sysfs can be mounted only by the user namespace that owns the
        // network namespace: with a joined or the host's one, bind the
        // host's /sys instead, read-only as asked (runc does the same).
        Err(e) if typ == "sysfs" && o.in_user_ns && e.errno() == Some(nix::errno::Errno::EPERM) => {
            let flags = MsFlags::MS_BIND | MsFlags::MS_REC;
            k.mount_at(Some("/sys"), &fd_path(&target), None, flags, None, &shown)?;
            let fresh = root.open_in(dest, OFlag::O_PATH)?;
            let ro = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | opts.flags | locked_flags(&fresh);
            k.mount_at(None, &fd_path(&fresh), None, ro, None, &shown)?;
        }
        r => r?,
    }
    if let Some(below) = below {
        let fresh = root.open_in(dest, OFlag::O_PATH | OFlag::O_DIRECTORY)?;
        let fresh = crate::sys::fs::reopen_dir(&fresh).map_err(|e| InitError::path("open", dest, e))?;
        super::copyup::copy_tree(&below, &fresh, dest)?;
    }
    after_mount(k, root, dest, &opts, later_ro)
}

/// procfs and sysfs go only on a real directory of the image (or where
/// there is nothing yet), never through a symlink the image put there: what
/// the runtime later writes under /proc and /sys (sysctls, LSM attributes)
/// must reach the kernel's files, and runc refuses the same.
fn ordinary_directory(root: &Tree, dest: &Path, typ: &str) -> Result<()> {
    let parent = dest.parent().unwrap_or(Path::new("/"));
    let Some(name) = dest.file_name() else { return Ok(()) };
    let dir = match root.open_in(parent, OFlag::O_PATH | OFlag::O_DIRECTORY) {
        Ok(d) => d,
        Err(e) if e.errno == nix::errno::Errno::ENOENT => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    match nix::sys::stat::fstatat(Some(dir.as_raw_fd()), name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
        // runc's words, which callers match.
        Ok(st) if st.st_mode & libc::S_IFMT != libc::S_IFDIR => {
            Err(InitError::other("mount", format!("filesystem {typ:?} must be mounted on ordinary directory")))
        }
        Ok(_) | Err(nix::errno::Errno::ENOENT) => Ok(()),
        Err(e) => Err(InitError::path("stat", dest, e)),
    }
}

fn bind(root: &Tree, m: &Mount, index: usize, opts: &MountOptions, o: &Options) -> Result<()> {
    let k = o.kernel;
    let dest = m.destination();
    let shown = dest.to_string_lossy();
    let bad = |why: &str| InitError::other("bind mount", why);
    let src = m.source().as_ref().ok_or_else(|| bad("a bind mount needs a source"))?;
    // A relative source is relative to the bundle, as runc reads it.
    let src: PathBuf = if src.is_absolute() { src.clone() } else { o.bundle.join(src) };
    // Made detached by the runtime (see `Options::bind_sources`).
    let made = o.bind_sources.iter().find(|s| s.index == index).map(|s| &s.fd);
    if made.is_none() && super::sources::is_idmapped(m) {
        // Bound here, it would show the files with their owners unmapped.
        return Err(bad("the runtime made no id-mapped mount for it"));
    }
    let shown_src = match made {
        Some(fd) => PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd())),
        None => src.clone(),
    };
    let meta = std::fs::metadata(&shown_src)
        .map_err(|e| InitError::path("stat bind mount source", &src, crate::sys::io_errno(&e)))?;
    let target = root.ensure(dest, !meta.is_dir())?;
    if let Some(fd) = made {
        crate::sys::move_mount(fd, &target, &shown)?;
    } else {
        let src_str = src.to_str().ok_or_else(|| bad("the source path is not UTF-8"))?;
        let flags = MsFlags::MS_BIND | (opts.flags & MsFlags::MS_REC);
        k.mount_at(Some(src_str), &fd_path(&target), None, flags, None, &shown)?;
    }
    let rest = opts.flags & !(MsFlags::MS_BIND | MsFlags::MS_REC | MsFlags::MS_REMOUNT);
    if !rest.is_empty() {
        // Remount the new mount, found again through the root, so the
        // remount can't hit the mount underneath it.
        let fresh = root.open_in(dest, OFlag::O_PATH)?;
        let flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | rest | locked_flags(&fresh);
        k.mount_at(None, &fd_path(&fresh), None, flags, None, &shown)?;
    }
    after_mount(k, root, dest, opts, false)
}

/// Propagation changes, the deferred read-only remount of a tmpfs, and
/// recursive attributes (after the remount, so `rro` covers submounts too).
fn after_mount(k: &dyn Kernel, root: &Tree, dest: &Path, opts: &MountOptions, remount_ro: bool) -> Result<()> {
    if opts.propagation.is_empty() && !remount_ro && opts.recursive == Attrs::default() {
        return Ok(());
    }
    let fresh = root.open_in(dest, OFlag::O_PATH)?;
    let target = fd_path(&fresh);
    let shown = dest.to_string_lossy();
    for p in &opts.propagation {
        k.mount_at(None, &target, None, *p, None, &shown)?;
    }
    if remount_ro {
        let flags = MsFlags::MS_REMOUNT | opts.flags;
        k.mount_at(None, &target, None, flags, Some(&opts.data), &shown)?;
    }
    if opts.recursive != Attrs::default() {
        k.set_attrs_recursive(fresh.as_fd(), opts.recursive, &shown)?;
    }
    Ok(())
}
