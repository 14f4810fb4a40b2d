//! A root's reaper: one small forked child per root, in a session of its
//! own, that purges each launched or pooled box of the root at its
//! deadline or idle timeout (modules `lifetime`, `idle`, `expiry`),
//! refills the root's pools (replacing boxes that expired unused, module
//! `pool`), collects the garbage of boxes whose maker died (module `gc`),
//! and exits when no box of the root has a deadline left. Whoever makes a
//! box with a deadline makes sure the root has one ([`ensure`]).
//!
//! A pooled box taken by a run is claimed (module `claim`); the claim
//! holds the run's own deadline, and the box lives until that one too has
//! passed, or until the run is seen dead.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::detach;
use crate::error::{Error, Result};
use crate::layout;
use crate::lifetime::{now_ms, purge_at};

/// Where the root's reaper holds its lock (an `flock`, for as long as it
/// runs).
fn lock_file(root: &Path) -> PathBuf {
    root.join("sandbox-reaper.lock")
}

/// How often the reaper looks for a deadline it doesn't know yet (a box
/// launched since it last looked).
const TICK: Duration = Duration::from_millis(500);

/// Makes sure the root has a reaper running: a detached child, one per
/// root, that purges each box of the root when its lifetime ends, and
/// exits once no box of the root has a deadline. Call it after writing a
/// box's deadline.
///
/// The reaper holds an exclusive `flock` on [`lock_file`] while it runs.
/// If the lock is free here, there is no reaper and one is started; if it
/// is held, the reaper will see this box's deadline: it only exits after
/// releasing the lock and finding no deadline left, and ours was written
/// before we tried the lock.
///
/// # Preconditions
/// The caller is single-threaded (see `detach::fork`).
pub(crate) fn ensure(root: &Path) -> Result<()> {
    let path = lock_file(root);
    // Private: others holding it would keep the root from ever having a
    // reaper.
    let file = crate::lockdir::open_lock_file(&path)?;
    if !try_lock(&file).map_err(|e| Error::io("lock", &path, e))? {
        // Held: a reaper runs.
        return Ok(());
    }
    // The child holds the lock through its copy of the open file; ours
    // is closed without unlocking (that would release it for both).
    if !detach::fork()? {
        return Ok(());
    }
    // Nobody waits for us.
    detach::detach(&[file.as_fd()]);
    // Our command line is the caller's, secrets and all, and we
    // may live for hours: no reaper rather than one that shows it.
    if tinyrun::conceal_cmdline(c"tinyrun-reaper").is_err() {
        detach::exit(1);
    }
    // Nor the caller's working directory, which it may unmount.
    let _ = nix::unistd::chdir("/");
    // A caller waiting for a box may have blocked SIGTERM and
    // friends; the reaper answers them as any process does.
    let _ = nix::sys::signal::sigprocmask(
        nix::sys::signal::SigmaskHow::SIG_SETMASK,
        Some(&nix::sys::signal::SigSet::empty()),
        None,
    );
    reap_until_none_left(root, &file)
}

/// `flock(LOCK_EX | LOCK_NB)`: true if we now hold the lock, false if
/// another open file holds it. The lock belongs to the open file, so it
/// lasts while any duplicate of it (a forked child's) stays open.
fn try_lock(file: &std::fs::File) -> std::io::Result<bool> {
    use rustix::fs::{flock, FlockOperation};
    match flock(file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// `flock(LOCK_UN)`: releases the lock for every duplicate of the file.
fn unlock(file: &std::fs::File) -> std::io::Result<()> {
    Ok(rustix::fs::flock(file, rustix::fs::FlockOperation::Unlock)?)
}

/// How often the reaper collects the root's garbage (module `gc`).
const GC_EVERY: Duration = Duration::from_secs(5);

/// The next moment box `id` may have to be purged: [`purge_at`], or the
/// end of its idle timeout if sooner.
fn next_at(root: &Path, id: &str) -> Option<u64> {
    let idle = crate::idle::deadline(root, id).map(|(t, _)| t);
    match (purge_at(root, id), idle) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The reaper's loop: purge what has expired, refill the pools, sleep
/// until the next deadline (or a tick), and leave when no box has a
/// deadline.
fn reap_until_none_left(root: &Path, lock: &std::fs::File) -> ! {
    let deadlines = || layout::names(&layout::bundles(root)).iter().filter_map(|id| next_at(root, id)).min();
    let mut collected = std::time::Instant::now();
    let mut failed = crate::pool::Backoff::new();
    loop {
        if collected.elapsed() >= GC_EVERY {
            crate::gc::collect(root);
            collected = std::time::Instant::now();
        } else {
            crate::expiry::reap_expired(root);
        }
        crate::pool::refill_all(root, &mut failed);
        let Some(next) = deadlines() else {
            // Leave; but a box launched while we looked saw our lock and
            // relies on us: look again once the lock is released.
            if unlock(lock).is_err() || deadlines().is_none() {
                detach::exit(0);
            }
            match try_lock(lock) {
                Ok(true) => continue,
                // Another reaper has started: it sees the box.
                _ => detach::exit(0),
            }
        };
        // A box still past its deadline is one that could not be purged:
        // try again at the next tick, not at once.
        let left = match next.saturating_sub(now_ms()) {
            0 => TICK,
            ms => Duration::from_millis(ms).min(TICK),
        };
        std::thread::sleep(left);
    }
}
