//! Taking a box apart: its state (killing what runs in it), its network,
//! its storage, its bundle dir and its host ids, each even if one before
//! failed. Runs in the runtime process, by whoever holds the box's lock
//! (module `boxlock`): its maker when it failed or its run ended, a
//! `terminate`, the garbage collection.

use std::path::Path;

use tinyrun::RuntimeError;

use crate::boxlock::{self, BoxLock};
use crate::error::{Error, Result};
use crate::ids::Allocator;
use crate::layout;

/// Removes box `id` entirely: its state (killing what runs in it), its
/// bundle and its host ids, in that order, each even if one before failed.
/// The caller holds the box's lock.
pub(crate) fn remove_box(root: &Path, id: &str, _held: &BoxLock) -> Result<()> {
    let deleted = layout::runtime(root).delete(id, true).map_err(Error::from);
    deleted.and(remove_rest(root, id))
}

/// What is left of box `id` once its state is gone: its bundle, then its
/// host ids.
fn remove_rest(root: &Path, id: &str) -> Result<()> {
    let bundle = layout::bundle(root, id);
    // Its network first: while the bundle dir is there, a crash before
    // this leaves a box that still counts as alive, never a leak no one
    // looks for.
    let net = crate::net::teardown(root, id);
    // Unmounted first: removing the dir must not reach into the box's files.
    crate::storage::release(&bundle)?;
    let removed = remove_dir(&bundle);
    net.and(removed).and(Allocator::new(root).release(id))
}

fn remove_dir(p: &Path) -> Result<()> {
    match std::fs::remove_dir_all(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("remove sandbox bundle", p, e)),
    }
}

/// Removes sandbox `id`: kills everything in it and deletes every trace.
pub fn terminate(root: &Path, id: &str) -> Result<()> {
    let rt = layout::runtime(root);
    tinyrun::check_id(id)?;
    let (_lock, waited) = match boxlock::try_lock(root, id)? {
        Some(l) => (l, false),
        None => {
            // Held by its maker (a one-shot run, a launch under way): end
            // what runs in it, and the maker removes it as any box that
            // ends; or by another removal.
            if let Ok(c) = rt.load(id) {
                let _ = c.kill(nix::sys::signal::Signal::SIGKILL as i32, true);
            }
            (boxlock::lock(root, id)?, true)
        }
    };
    let deleted = rt.delete(id, false).or_else(|e| match e {
        RuntimeError::InvalidState(_) => rt.delete(id, true),
        e => Err(e),
    });
    match deleted {
        Ok(()) => remove_rest(root, id),
        // Removed by the one we waited for: done.
        Err(RuntimeError::NotFound(_)) if waited => Ok(()),
        Err(RuntimeError::NotFound(_)) => Err(gone(root, id)),
        Err(e) => Err(e.into()),
    }
}

/// The error for box `id`, which does not exist: when it expired, if it
/// did lately, else that it does not exist.
pub(crate) fn gone(root: &Path, id: &str) -> Error {
    crate::tombstone::expired(root, id).unwrap_or_else(|| RuntimeError::NotFound(id.to_string()).into())
}
