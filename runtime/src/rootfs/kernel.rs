//! The mount calls init makes, with errors that say what was mounted where
//! and how.
//!
//! Every mount target here is an fd-resolved `/proc/self/fd/N` path (see
//! [`super::root`]): the kernel follows the magic link to the object that was
//! resolved inside the rootfs, so a symlink swapped in later can't redirect it.

use std::os::fd::AsFd;

use nix::mount::MsFlags;
use nix::sys::statvfs::{fstatvfs, FsFlags};

use crate::error::{InitError, MountCall};

/// `mount(2)` with an error that says what was mounted where and how;
/// `shown_target` is the destination as the container will see it.
pub(crate) fn mount(
    source: Option<&str>,
    target: &str,
    fstype: Option<&str>,
    flags: MsFlags,
    data: Option<&str>,
    shown_target: &str,
) -> Result<(), InitError> {
    let data = data.filter(|d| !d.is_empty());
    nix::mount::mount(source, target, fstype, flags, data).map_err(|e| {
        let call = MountCall {
            src: source.map(str::to_string),
            dst: shown_target.to_string(),
            fstype: fstype.map(str::to_string),
            flags: flags.bits(),
            data: data.map(str::to_string),
        };
        InitError::mount(call, e)
    })
}

/// Flags a bind remount must repeat: in a user namespace the kernel refuses a
/// remount that would clear a flag locked on the original mount.
pub(crate) fn locked_flags(fd: &impl AsFd) -> MsFlags {
    // A failure just means "nothing known to be locked".
    let Ok(st) = fstatvfs(fd) else { return MsFlags::empty() };
    let f = st.flags();
    let mut out = MsFlags::empty();
    for (fs, ms) in [
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_RDONLY, MsFlags::MS_RDONLY),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
    ] {
        if f.contains(fs) {
            out |= ms;
        }
    }
    out
}
