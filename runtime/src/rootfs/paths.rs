//! `readonlyPaths` and `maskedPaths`.

use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::mount::MsFlags;
use nix::sys::stat::fstat;

use super::kernel::{locked_flags, Kernel};
use super::Result;
use crate::error::InitError;
use crate::sys::fs::{fd_path, open_path};
use crate::tree::Tree;

/// Bind `p` onto itself and remount it read-only. A path the image lacks is
/// skipped, as the spec allows.
pub(super) fn make_readonly(k: &dyn Kernel, root: &Tree, p: &Path) -> Result<()> {
    let field = |e: InitError| e.field("linux.readonlyPaths");
    let fd = match root.open_in(p, OFlag::O_PATH) {
        Ok(fd) => fd,
        Err(e) if e.errno == Errno::ENOENT => return Ok(()),
        Err(e) => return Err(field(e.into())),
    };
    let target = fd_path(&fd);
    let shown = p.to_string_lossy();
    k.mount_at(Some(&target), &target, None, MsFlags::MS_BIND | MsFlags::MS_REC, None, &shown).map_err(field)?;
    let fresh = root.open_in(p, OFlag::O_PATH).map_err(|e| field(e.into()))?;
    let flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | MsFlags::MS_REC | locked_flags(&fresh);
    k.mount_at(None, &fd_path(&fresh), None, flags, None, &shown).map_err(field)
}

/// Hide `p`: a directory gets an empty read-only tmpfs, anything else the
/// host's /dev/null, checked to really be the null device first.
pub(super) fn mask(k: &dyn Kernel, root: &Tree, p: &Path) -> Result<()> {
    let field = |e: InitError| e.field("linux.maskedPaths");
    let fd = match root.open_in(p, OFlag::O_PATH) {
        Ok(fd) => fd,
        Err(e) if e.errno == Errno::ENOENT => return Ok(()),
        Err(e) => return Err(field(e.into())),
    };
    let st = fstat(std::os::fd::AsRawFd::as_raw_fd(&fd)).map_err(|e| field(InitError::path("fstat", p, e)))?;
    let target = fd_path(&fd);
    let shown = p.to_string_lossy();
    if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
        k.mount_at(Some("tmpfs"), &target, Some("tmpfs"), MsFlags::MS_RDONLY, None, &shown).map_err(field)
    } else {
        let null = open_path(Path::new("/dev/null"), OFlag::O_PATH).map_err(|e| field(e.into()))?;
        verify_null(&null).map_err(field)?;
        k.mount_at(Some(&fd_path(&null)), &target, None, MsFlags::MS_BIND, None, &shown).map_err(field)
    }
}

fn verify_null(fd: &std::os::fd::OwnedFd) -> Result<()> {
    let host_null = "/dev/null (host)";
    let st = fstat(std::os::fd::AsRawFd::as_raw_fd(fd)).map_err(|e| InitError::path("fstat", host_null, e))?;
    if st.st_mode & libc::S_IFMT != libc::S_IFCHR
        || nix::sys::stat::major(st.st_rdev) != 1
        || nix::sys::stat::minor(st.st_rdev) != 3
    {
        return Err(InitError::other(format!("check {host_null}"), "it is not the null device"));
    }
    Ok(())
}
