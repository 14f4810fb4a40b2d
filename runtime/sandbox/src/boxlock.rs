//! One lock per box, held by whoever makes it or removes it, so that the
//! garbage collection can tell a box that is half made or half removed
//! because its maker died from one whose maker is still at work.
//!
//! A box's state dir and bundle dir come and go at different moments
//! (the bundle before the runtime's state when it is made, after it when
//! it is removed), and its bundle dir is a mount point for most of its
//! life, so neither can carry the lock. Instead every box has one byte of
//! a file that outlives all of them, `<root>/sandbox-boxes.lock`, at an
//! offset derived from its id, locked with an open-file-description
//! record lock (`F_OFD_SETLK`): it belongs to the open file, not the
//! process, and goes when the holder closes it or dies. Making a box holds
//! the lock from its bundle dir until the box runs (a one-shot run: until
//! it is removed again), removing one holds it throughout; a box whose
//! lock is free while only part of it is there has no maker left.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// A box's lock, held until dropped.
#[derive(Debug)]
pub(crate) struct BoxLock {
    _file: File,
}

fn lock_file(root: &Path) -> PathBuf {
    root.join("sandbox-boxes.lock")
}

/// Where box `id`'s byte is: 63 bits of a hash of the id (an `off_t` is
/// signed), so two ids share one only by a collision of those bits.
fn offset(id: &str) -> i64 {
    let sum = Sha256::digest(id.as_bytes());
    let mut b = [0u8; 8];
    b.copy_from_slice(&sum[..8]);
    i64::from_ne_bytes(b) & i64::MAX
}

fn open(root: &Path) -> Result<File> {
    // The root as the runtime makes it: searchable, not listable (0711).
    std::fs::DirBuilder::new().recursive(true).mode(0o711).create(root).map_err(|e| Error::io("create", root, e))?;
    let path = lock_file(root);
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| Error::io("open", path, e))
}

#[allow(clippy::cast_possible_truncation, reason = "F_WRLCK and SEEK_SET are small; struct flock holds them as shorts")]
fn request(id: &str) -> libc::flock {
    libc::flock {
        l_type: libc::F_WRLCK as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: offset(id),
        l_len: 1,
        // Must be 0 for an open-file-description lock.
        l_pid: 0,
    }
}

/// Takes box `id`'s lock, waiting for any holder.
pub(crate) fn lock(root: &Path, id: &str) -> Result<BoxLock> {
    let file = open(root)?;
    let req = request(id);
    loop {
        match fcntl(file.as_raw_fd(), FcntlArg::F_OFD_SETLKW(&req)) {
            Ok(_) => return Ok(BoxLock { _file: file }),
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(Error::io("lock", lock_file(root), e.into())),
        }
    }
}

/// Takes box `id`'s lock if nobody holds it.
pub(crate) fn try_lock(root: &Path, id: &str) -> Result<Option<BoxLock>> {
    let file = open(root)?;
    match fcntl(file.as_raw_fd(), FcntlArg::F_OFD_SETLK(&request(id))) {
        Ok(_) => Ok(Some(BoxLock { _file: file })),
        Err(Errno::EAGAIN | Errno::EACCES) => Ok(None),
        Err(e) => Err(Error::io("lock", lock_file(root), e.into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_box_lock_is_held_until_dropped_and_is_per_box() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        let held = lock(root, "sbx-1").unwrap();
        assert!(try_lock(root, "sbx-1").unwrap().is_none(), "taken twice");
        let other = try_lock(root, "sbx-2").unwrap();
        assert!(other.is_some(), "another box's lock is its own");
        drop(held);
        assert!(try_lock(root, "sbx-1").unwrap().is_some(), "free once dropped");
        assert_ne!(offset("sbx-1"), offset("sbx-2"));
        assert!(offset("sbx-1") >= 0);
    }
}
