//! The system calls a caller of the runtime makes beside it, as the
//! runtime's own wrappers (module `sys`, which holds all of tinyrun's
//! `unsafe`), so that a caller needs no `unsafe` and no second set: the
//! sandbox forks its detached children with them (a box's reaper, a pool's
//! refill, an ordinary user's pasta, whose signals it resets), waits on a box's init through a pidfd, and shows an image's
//! layers to a box through an id-mapped mount. What `rustix` offers safely
//! (`flock`, the new mount API's `fsopen`/`fsconfig`/`fsmount`), callers
//! take from there.
//!
//! Each runs in the process that calls it.

use std::ffi::CString;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::errno::Errno;

use crate::error::SysError;
pub use crate::sys::{exit_child, fork, pidfd_open, reset_signals, userns_with_map, Forked};

/// Receives one message on `socket` into `buf` with the fds sent alongside
/// it (`SCM_RIGHTS`, up to 8, close-on-exec, owned by the caller); returns
/// them and the bytes read. More fds than that fail with EMSGSIZE.
pub fn recv_fds(socket: BorrowedFd<'_>, buf: &mut [u8]) -> Result<(Vec<OwnedFd>, usize), SysError> {
    crate::sys::recv_fds(socket, buf).map_err(|e| SysError::bare("recvmsg SCM_RIGHTS", e))
}

/// A detached bind mount of directory `dir` (`open_tree(OPEN_TREE_CLONE)`:
/// attached to no mount namespace, gone with its last fd) whose files'
/// owners are seen through the maps of user namespace `userns`
/// (`mount_setattr` with `MOUNT_ATTR_IDMAP`; see [`userns_with_map`]).
pub fn idmapped_tree(dir: &Path, userns: BorrowedFd<'_>) -> Result<OwnedFd, SysError> {
    let path = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| SysError::new("open_tree", dir.display(), Errno::EINVAL))?;
    let tree = crate::sys::open_tree_clone(&path)?;
    let idmap = crate::sys::MountAttrs { set: libc::MOUNT_ATTR_IDMAP, clear: 0, userns: Some(userns) };
    crate::sys::mount_setattr_with(&tree, idmap, false)
        .map_err(|e| SysError::new("mount_setattr MOUNT_ATTR_IDMAP", dir.display(), e.errno))?;
    Ok(tree)
}
