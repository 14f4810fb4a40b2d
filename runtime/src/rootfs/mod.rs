//! The container's root filesystem, built by init inside its new mount
//! namespace (runtime-spec "Root", "Mounts", "Linux: devices, maskedPaths,
//! readonlyPaths, rootfsPropagation").
//!
//! Every destination is resolved inside the rootfs by fd (see
//! [`crate::tree`]), so a symlink in the image can't send a mount, a
//! device node or a write out to the host.

mod cgroupfs;
mod copyup;
mod devices;
pub(crate) mod image;
mod kernel;
mod mounts;
pub(crate) mod options;
mod paths;
pub(crate) mod sources;
#[cfg(test)]
mod tests;

use std::os::fd::{AsFd, AsRawFd};
use std::path::Path;

use nix::fcntl::OFlag;
use nix::mount::MsFlags;
use oci_spec::runtime::Spec;

use crate::error::InitError;
pub(crate) use crate::tree::Tree;
pub(crate) use kernel::{Kernel, Real};
use options::propagation_flag;

/// Init-side failure, naming the step, its object and the errno.
pub(crate) type Result<T> = std::result::Result<T, InitError>;

/// Options that shape the rootfs, decided by the runtime before cloning.
pub(crate) struct Options<'a> {
    pub spec: &'a Spec,
    pub rootfs: &'a Path,
    pub bundle: &'a Path,
    /// Device nodes can't be made in a user namespace: bind them instead.
    pub in_user_ns: bool,
    /// A private cgroup namespace: `cgroup` mounts show its root.
    pub cgroup_ns: bool,
    /// The host's cgroup hierarchies, for `cgroup` mounts on v1.
    pub cgroup_hierarchies: &'a [crate::cgroups::Mount],
    /// Mounts, device nodes, pivot_root: [`Real`], or a fake in tests.
    pub kernel: &'a dyn Kernel,
    /// The container has a mount namespace (new or joined). Without one, as
    /// runc allows, the mounts are made in the host's namespace under a
    /// private bind of the rootfs that `delete` detaches whole, and the
    /// root is entered with chroot.
    pub own_mount_ns: bool,
    /// Bind mounts the runtime made detached (see [`sources`]): attached
    /// as they are.
    pub bind_sources: &'a [sources::Source],
}

/// Turns the bundle's rootfs into a populated mount tree: propagation, the
/// rootfs bind, every mount in order, and /dev. Returns the resolution root.
/// `in_cgroup` is called once (by then init must be in its final cgroup, with
/// its cgroup namespace made) before the first cgroup mount, and in any case
/// before returning; it returns `/proc/self/cgroup` as init read it just
/// before its cgroup namespace was made: where its cgroups are on the host.
pub(crate) fn prepare(o: &Options, in_cgroup: &mut dyn FnMut() -> Result<String>) -> Result<Tree> {
    let k = o.kernel;
    let rootfs = o.rootfs.to_str().ok_or_else(|| InitError::other("bind rootfs", "the path is not UTF-8"))?;
    let first = first_propagation(o.spec)?;
    if o.own_mount_ns {
        k.mount_at(None, "/", None, first, None, "/")?;
        if first.contains(MsFlags::MS_SHARED) {
            make_holder_private(k, o.rootfs)?;
        }
    }
    // pivot_root needs the new root to be a mount point; without a mount
    // namespace, it is what `delete` unmounts to take every mount away.
    k.mount_at(Some(rootfs), rootfs, None, MsFlags::MS_BIND | MsFlags::MS_REC, None, rootfs)?;
    if !o.own_mount_ns {
        // The host's propagation stays as it is; only the container's tree
        // is cut off from the host's peers, both ways.
        k.mount_at(None, rootfs, None, MsFlags::MS_PRIVATE | MsFlags::MS_REC, None, rootfs)?;
    }
    let root = Tree::open(o.rootfs)?;

    let mut dev_is_bind = false;
    let mut own_cgroups = None;
    for (i, m) in o.spec.mounts().as_deref().unwrap_or(&[]).iter().enumerate() {
        if m.destination() == Path::new("/dev") && sources::is_bind(m) {
            dev_is_bind = true;
        }
        if own_cgroups.is_none() && matches!(m.typ().as_deref(), Some("cgroup" | "cgroup2")) {
            own_cgroups = Some(in_cgroup()?);
        }
        mounts::mount_one(&root, m, i, o, own_cgroups.as_deref().unwrap_or_default())?;
    }
    if own_cgroups.is_none() {
        in_cgroup()?;
    }
    if !dev_is_bind {
        devices::populate(&root, o)?;
    }
    Ok(root)
}

/// The propagation the mounts copied into the container's namespace get
/// first. By default they become slaves: nothing mounted in the container
/// leaks back to the host. `rootfsPropagation` private or slave is applied
/// to the whole tree; shared as asked, as runc does: the copies stay peers
/// of the host's mounts, so a bind of a shared host directory (an `rshared`
/// bind, Kubernetes' Bidirectional) carries the container's mounts out and
/// the host's in. Unbindable is applied only after pivot_root (a bind of
/// the rootfs would refuse it), with shared again for the container's root.
fn first_propagation(spec: &Spec) -> Result<MsFlags> {
    let prop = spec.linux().as_ref().and_then(|l| l.rootfs_propagation().as_deref()).filter(|p| !p.is_empty());
    let Some(prop) = prop else { return Ok(MsFlags::MS_SLAVE | MsFlags::MS_REC) };
    let Some(flag) = propagation_flag(prop) else {
        let why = format!("unknown value {prop:?}");
        return Err(InitError::other("set propagation", why).field("linux.rootfsPropagation"));
    };
    Ok(if flag.intersects(MsFlags::MS_PRIVATE | MsFlags::MS_SLAVE) {
        flag | MsFlags::MS_REC
    } else if flag.contains(MsFlags::MS_SHARED) {
        flag
    } else {
        MsFlags::MS_SLAVE | MsFlags::MS_REC
    })
}

/// Makes the mount that holds `rootfs` (the rootfs itself when it is a
/// mount point) private, that mount alone, as runc does under a shared
/// root: the bind of the rootfs below would otherwise appear in the host's
/// peers of that mount, and pivot_root refuses a shared parent. The mount
/// is found by walking up: a propagation change on a path that is no mount
/// point fails with EINVAL.
fn make_holder_private(k: &dyn Kernel, rootfs: &Path) -> Result<()> {
    let mut at = rootfs;
    loop {
        let shown = at.to_string_lossy();
        match k.mount_at(None, &shown, None, MsFlags::MS_PRIVATE, None, &shown) {
            Err(e) if e.errno() == Some(nix::errno::Errno::EINVAL) && at.parent().is_some() => {
                at = at.parent().unwrap_or(Path::new("/"));
            }
            r => return r.map_err(|e| e.field("linux.rootfsPropagation")),
        }
    }
}

/// Writes `linux.sysctl` through the container's own /proc.
pub(crate) fn apply_sysctl(root: &Tree, spec: &Spec) -> Result<()> {
    let Some(sysctl) = spec.linux().as_ref().and_then(|l| l.sysctl().as_ref()) else { return Ok(()) };
    for (k, v) in sysctl {
        let path = Path::new("/proc/sys").join(k.replace('.', "/"));
        let field = format!("linux.sysctl {k}");
        let fd = root.open_in(&path, OFlag::O_WRONLY).map_err(|e| InitError::from(e).field(&field))?;
        // A mount over /proc/sys (a config's, or the image's) must not take
        // the write somewhere else and let the setting silently not apply.
        let fs = nix::sys::statfs::fstatfs(&fd).map_err(|e| InitError::path("fstatfs", &path, e).field(&field))?;
        if fs.filesystem_type() != nix::sys::statfs::PROC_SUPER_MAGIC {
            return Err(InitError::other(format!("write {}", path.display()), "it is not on procfs").field(&field));
        }
        nix::unistd::write(&fd, v.as_bytes())
            .map_err(|e| InitError::value("write", format_args!("{v:?} to {}", path.display()), e).field(&field))?;
    }
    Ok(())
}

/// readonlyPaths, then maskedPaths (runtime-spec order).
pub(crate) fn protect_paths(k: &dyn Kernel, root: &Tree, spec: &Spec) -> Result<()> {
    let Some(linux) = spec.linux().as_ref() else { return Ok(()) };
    for p in linux.readonly_paths().as_deref().unwrap_or(&[]) {
        paths::make_readonly(k, root, Path::new(p))?;
    }
    for p in linux.masked_paths().as_deref().unwrap_or(&[]) {
        paths::mask(k, root, Path::new(p))?;
    }
    Ok(())
}

/// Makes the rootfs `/`: `pivot_root` and a lazy unmount of the old root,
/// or, with `no_pivot`, MS_MOVE + chroot (for roots on a ramfs).
/// Without a mount namespace of the container's own (`own_mount_ns`
/// false), chroot only: the host's root must stay where it is.
pub(crate) fn enter(k: &dyn Kernel, root: Tree, spec: &Spec, no_pivot: bool, own_mount_ns: bool) -> Result<()> {
    let rootfs = root.describe(Path::new("/"));
    let dir = crate::sys::fs::reopen_dir(&root_fd(&root)?).map_err(|e| InitError::path("open", &rootfs, e))?;
    k.fchdir(dir.as_fd()).map_err(|e| InitError::path("chdir", &rootfs, e))?;
    if !own_mount_ns {
        k.chroot_here().map_err(|e| InitError::path("chroot", &rootfs, e))?;
    } else if no_pivot {
        if shared_root(spec) {
            // Moved onto a shared "/", the rootfs would appear on the
            // host's "/" too (and on its every peer).
            k.mount_at(None, "/", None, MsFlags::MS_PRIVATE, None, "/")
                .map_err(|e| e.field("linux.rootfsPropagation"))?;
        }
        k.mount_at(Some("."), "/", None, MsFlags::MS_MOVE, None, "/")?;
        k.chroot_here().map_err(|e| InitError::path("chroot", &rootfs, e))?;
    } else {
        // pivot_root(".", ".") stacks the old root on top of the new one.
        // The old root is made a slave (so its unmount does not reach the
        // host) and unmounted from inside it: "." must name the old root,
        // not the new one the cwd is still on, whose shared mounts (an
        // `rshared` bind) would lose their host peers to that rslave.
        let old = crate::sys::fs::open_path(Path::new("/"), OFlag::O_PATH | OFlag::O_DIRECTORY)?;
        k.pivot_root_here().map_err(|e| InitError::path("pivot_root", &rootfs, e))?;
        k.fchdir(old.as_fd()).map_err(|e| InitError::value("chdir", "old root", e))?;
        k.mount_at(None, ".", None, MsFlags::MS_SLAVE | MsFlags::MS_REC, None, "old root")?;
        k.umount_detach(".").map_err(|e| InitError::value("unmount", "old root", e))?;
    }
    k.chdir("/").map_err(|e| InitError::path("chdir", "/", e))?;

    let linux = spec.linux().as_ref();
    if let Some(f) = linux.and_then(|l| l.rootfs_propagation().as_deref()).and_then(propagation_flag) {
        if f.intersects(MsFlags::MS_SHARED | MsFlags::MS_UNBINDABLE) {
            k.mount_at(None, "/", None, f | MsFlags::MS_REC, None, "/")
                .map_err(|e| e.field("linux.rootfsPropagation"))?;
        }
    }
    if spec.root().as_ref().and_then(|r| r.readonly()).unwrap_or(false) {
        let root_fd = crate::sys::fs::open_path(Path::new("/"), OFlag::O_PATH)?;
        let locked = kernel::locked_flags(&root_fd);
        let flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | locked;
        k.mount_at(None, "/", None, flags, None, "/").map_err(|e| e.field("root.readonly"))?;
        // Fail closed: a root that is still writable must not run anything.
        if !k.is_read_only("/").map_err(|e| InitError::path("statvfs", "/", e))? {
            let why = "the root is still writable after the read-only remount";
            return Err(InitError::other("remount / read-only", why).field("root.readonly"));
        }
    }
    Ok(())
}

/// Whether `rootfsPropagation` asks for shared mounts.
fn shared_root(spec: &Spec) -> bool {
    let prop = spec.linux().as_ref().and_then(|l| l.rootfs_propagation().as_deref());
    prop.and_then(propagation_flag).is_some_and(|f| f.contains(MsFlags::MS_SHARED))
}

fn root_fd(root: &Tree) -> Result<std::os::fd::OwnedFd> {
    root.fd()
        .try_clone_to_owned()
        .map_err(|e| InitError::path("dup fd of", root.describe(Path::new("/")), crate::sys::io_errno(&e)))
}

/// The id of the mount on top at `path` in the caller's mount namespace
/// (the last `/proc/self/mountinfo` line mounted there), if any. The
/// runtime compares it before and after `create` to know whether the
/// rootfs bind on the host is the container's, before unmounting it.
pub(crate) fn top_mount_id(path: &Path) -> Option<u64> {
    let table = crate::mountinfo::read().ok()?;
    table.into_iter().rev().find(|m| m.mount_point == path).map(|m| m.id)
}

/// Detaches the container's rootfs bind from the host's mount namespace
/// (and every mount under it), if the mount on top there is still
/// `mount_id`: a container made without a mount namespace of its own.
pub(crate) fn detach_host_root(rootfs: &Path, mount_id: u64) -> std::result::Result<(), crate::error::SysError> {
    if top_mount_id(rootfs) != Some(mount_id) {
        return Ok(());
    }
    match nix::mount::umount2(rootfs, nix::mount::MntFlags::MNT_DETACH) {
        Ok(()) | Err(nix::errno::Errno::EINVAL | nix::errno::Errno::ENOENT) => Ok(()),
        Err(e) => Err(crate::error::SysError::new("unmount", rootfs.display(), e)),
    }
}

/// Removes `path` if the image has a symlink there, so that what the runtime
/// makes at that path is a real file or node, not whatever the link names.
pub(crate) fn replace_symlink(root: &Tree, path: &Path) -> Result<()> {
    let parent = path.parent().unwrap_or(Path::new("/"));
    let Some(name) = path.file_name() else { return Ok(()) };
    let dir = match root.open_in(parent, OFlag::O_PATH | OFlag::O_DIRECTORY) {
        Ok(d) => d,
        Err(e) if e.errno == nix::errno::Errno::ENOENT => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let dir = crate::sys::fs::reopen_dir(&dir).map_err(|e| InitError::path("open", parent, e))?;
    match nix::sys::stat::fstatat(Some(dir.as_raw_fd()), name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFLNK => {
            nix::unistd::unlinkat(Some(dir.as_raw_fd()), name, nix::unistd::UnlinkatFlags::NoRemoveDir)
                .map_err(|e| InitError::path("remove symlink", path, e))
        }
        _ => Ok(()),
    }
}

/// Binds the pty `slave` over `/dev/console`. Runs in init after
/// pivot_root, so `/` is the container's root.
pub(crate) fn bind_console(k: &dyn Kernel, slave: &std::os::fd::OwnedFd) -> Result<()> {
    let console = Path::new("/dev/console");
    // An empty file to bind the slave over, made through the root so a
    // symlink planted at /dev/console can't redirect it.
    let root = Tree::open(Path::new("/"))?;
    // A symlink in the image at /dev/console must not choose what the
    // pty is mounted over (CVE-2025-52565): replace it with a file.
    replace_symlink(&root, console)?;
    let target = root.ensure(console, true)?;
    let (target, source) = (crate::sys::fs::fd_path(&target), crate::sys::fs::fd_path(slave));
    k.mount_at(Some(&source), &target, None, MsFlags::MS_BIND, None, "/dev/console")
}
