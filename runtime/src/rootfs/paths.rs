//! `readonlyPaths` and `maskedPaths`.

use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::mount::MsFlags;
use nix::sys::stat::fstat;

use super::Result;
use crate::sys::fs::{fd_path, open_path, Root};
use crate::sys::mount::{locked_flags, mount};

/// Bind `p` onto itself and remount it read-only. A path the image lacks is
/// skipped, as the spec allows.
pub(super) fn make_readonly(root: &Root, p: &Path) -> Result<()> {
    let what = |e: &dyn std::fmt::Display| format!("readonlyPaths {}: {e}", p.display());
    let fd = match root.open_in(p, OFlag::O_PATH) {
        Ok(fd) => fd,
        Err(e) if e.errno == Errno::ENOENT => return Ok(()),
        Err(e) => return Err(what(&e)),
    };
    let target = fd_path(&fd);
    mount(Some(&target), &target, None, MsFlags::MS_BIND | MsFlags::MS_REC, None, &root.describe(p))
        .map_err(|e| what(&e))?;
    let fresh = root.open_in(p, OFlag::O_PATH).map_err(|e| what(&e))?;
    let flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | MsFlags::MS_REC | locked_flags(&fresh);
    mount(None, &fd_path(&fresh), None, flags, None, &root.describe(p)).map_err(|e| what(&e))
}

/// Hide `p`: a directory gets an empty read-only tmpfs, anything else the
/// host's /dev/null, checked to really be the null device first.
pub(super) fn mask(root: &Root, p: &Path) -> Result<()> {
    let what = |e: &dyn std::fmt::Display| format!("maskedPaths {}: {e}", p.display());
    let fd = match root.open_in(p, OFlag::O_PATH) {
        Ok(fd) => fd,
        Err(e) if e.errno == Errno::ENOENT => return Ok(()),
        Err(e) => return Err(what(&e)),
    };
    let st = fstat(std::os::fd::AsRawFd::as_raw_fd(&fd)).map_err(|e| what(&e))?;
    let target = fd_path(&fd);
    if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
        mount(Some("tmpfs"), &target, Some("tmpfs"), MsFlags::MS_RDONLY, None, &root.describe(p)).map_err(|e| what(&e))
    } else {
        let null = open_path(Path::new("/dev/null"), OFlag::O_PATH).map_err(|e| what(&e))?;
        verify_null(&null).map_err(|e| what(&e))?;
        mount(Some(&fd_path(&null)), &target, None, MsFlags::MS_BIND, None, &root.describe(p)).map_err(|e| what(&e))
    }
}

fn verify_null(fd: &std::os::fd::OwnedFd) -> Result<()> {
    let st = fstat(std::os::fd::AsRawFd::as_raw_fd(fd)).map_err(|e| e.to_string())?;
    if st.st_mode & libc::S_IFMT != libc::S_IFCHR
        || nix::sys::stat::major(st.st_rdev) != 1
        || nix::sys::stat::minor(st.st_rdev) != 3
    {
        return Err("/dev/null is not the null device".into());
    }
    Ok(())
}
