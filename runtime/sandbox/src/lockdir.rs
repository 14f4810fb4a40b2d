//! Directories of per-box records under the root (host id ranges, link
//! networks), each guarded by one exclusive lock file so that two sandbox
//! commands never hand out the same thing.

use std::fs::File;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

use nix::fcntl::{Flock, FlockArg};

use crate::error::{Error, Result};

/// The lock file's name inside a records directory.
const LOCK: &str = ".lock";

/// Makes `dir` if needed and takes its lock, waiting for any holder.
/// Only the runtime reads these records, nothing in a box needs them:
/// the directory is `0700` and the lock file `0600`.
pub(crate) fn lock(dir: &Path) -> Result<Flock<File>> {
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| Error::io("create", dir, e))?;
    let path = dir.join(LOCK);
    let f = open_lock_file(&path)?;
    Flock::lock(f, FlockArg::LockExclusive).map_err(|(_, e)| Error::io("lock", &path, e.into()))
}

/// Opens (making it if needed) a lock file only root may open: one that
/// others could open, they could flock, and hold everyone else off.
pub(crate) fn open_lock_file(path: &Path) -> Result<File> {
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io("open", path, e))
}
