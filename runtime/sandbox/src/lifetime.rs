//! A launched box's lifetime: when it ends the box is terminated and
//! purged, whether or not any tinyrun command is running then. So is a box
//! that no command has touched for its idle timeout (module `idle`). A
//! box that ends so leaves a tombstone (module `tombstone`), so commands
//! that name it later say when and why it went.
//!
//! Two mechanisms, so one failing leaves the other:
//! - the deadline is written into the box's bundle dir (`expires`, unix
//!   milliseconds), where every later sandbox command of the root looks
//!   (`reap_expired`): a box past it is purged before anything else;
//! - `launch` makes sure the root has a reaper: one small forked child per
//!   root, in a session of its own, which purges each box at its deadline
//!   and exits when no box of the root has one left.
//!
//! A pooled box taken by a run is claimed (module `pool`); the claim holds
//! the run's own deadline, and the box lives until that one too has passed,
//! or until the run is seen dead. The reaper also refills the root's pools
//! (replacing boxes that expired unused) and collects the garbage of boxes
//! whose maker died (module `gc`).

use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::detach;
use crate::error::{Error, Result};

const EXPIRES: &str = "expires";

/// How long a launched box lives unless `--lifetime` says otherwise: long
/// enough for a session of an agent's or a person's work.
pub const DEFAULT_LIFETIME: Duration = Duration::from_secs(30 * 60);

/// The idle timeout `sandbox launch` gives a box unless `--idle-timeout`
/// says otherwise.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(10 * 60);

/// Time added to a claimed box's own deadline before it is purged: the run
/// that holds it kills it at that deadline and purges it itself.
const CLAIM_GRACE: Duration = Duration::from_secs(5);

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Unix milliseconds `d` from now.
pub(crate) fn deadline_ms(d: Duration) -> u64 {
    now_ms().saturating_add(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn read_ms(p: &Path) -> Option<u64> {
    std::fs::read_to_string(p).ok()?.trim().parse().ok()
}

fn expires_file(root: &Path, id: &str) -> PathBuf {
    root.join("sandbox-bundles").join(id).join(EXPIRES)
}

/// Records box `id`'s deadline, `lifetime` from now; returns it (unix
/// milliseconds). Replaced in one rename: a reader never sees no deadline.
pub(crate) fn set(root: &Path, id: &str, lifetime: Duration) -> Result<u64> {
    use std::io::Write;
    let p = expires_file(root, id);
    let dir = p.parent().unwrap_or(root);
    let at = deadline_ms(lifetime);
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| Error::io("create", dir, e))?;
    tmp.write_all(at.to_string().as_bytes()).map_err(|e| Error::io("write", tmp.path().to_path_buf(), e))?;
    tmp.persist(&p).map_err(|e| Error::io("rename", &p, e.error))?;
    Ok(at)
}

/// Sets the lifetime launched box `id` has left to `lifetime` from now
/// (longer or shorter than before), and touches it; returns its new
/// deadline in unix milliseconds. A box that has expired stays expired.
pub fn extend(root: &Path, id: &str, lifetime: Duration) -> Result<u64> {
    let _touch = crate::run::live_box(root, id)?.2;
    if expires(root, id).is_none() {
        return Err(Error::InvalidArgument(format!(
            "sandbox {id} has no lifetime to extend (it is not a launched box)"
        )));
    }
    set(root, id, lifetime)
}

/// Box `id`'s deadline in unix milliseconds, if it has one.
pub(crate) fn expires(root: &Path, id: &str) -> Option<u64> {
    read_ms(&expires_file(root, id))
}

/// How long box `id` has left; `None` if it has no deadline.
pub(crate) fn remaining(root: &Path, id: &str) -> Option<Duration> {
    expires(root, id).map(|t| Duration::from_millis(t.saturating_sub(now_ms())))
}

/// When box `id` may be purged: its deadline, or later while a run that
/// claimed it may still be using it. `None` if it has no deadline.
fn purge_at(root: &Path, id: &str) -> Option<u64> {
    let own = expires(root, id)?;
    Some(match crate::pool::claim(root, id) {
        crate::pool::Claim::Free => own,
        crate::pool::Claim::Until(t) => own.max(t.saturating_add(u64::try_from(CLAIM_GRACE.as_millis()).unwrap_or(0))),
        // Nobody will use it, nor remove it.
        crate::pool::Claim::Abandoned => 0,
    })
}

/// The next moment box `id` may have to be purged: [`purge_at`], or the
/// end of its idle timeout if sooner.
fn next_at(root: &Path, id: &str) -> Option<u64> {
    let idle = crate::idle::deadline(root, id).map(|(t, _)| t);
    match (purge_at(root, id), idle) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Purges every box of `root` whose lifetime or idle timeout has ended,
/// leaving a tombstone for each launched one. Errors are left for the next
/// command: one box that can't be purged must not stop the others, or the
/// caller's command.
pub(crate) fn reap_expired(root: &Path) {
    let now = now_ms();
    for id in names(&root.join("sandbox-bundles")) {
        let launched = crate::pool::key_of(&id).is_none();
        if purge_at(root, &id).is_some_and(|t| t <= now) {
            if launched {
                let at = expires(root, &id).unwrap_or(now);
                crate::tombstone::record(root, &id, at, "its lifetime ended");
            }
            let _ = crate::run::terminate(root, &id);
        } else if let Some((at, timeout)) = crate::idle::deadline(root, &id).filter(|(t, _)| *t <= now) {
            // Not while a command runs in it; held until it is gone, so
            // none starts meanwhile.
            let Some(_quiet) = crate::idle::quiet(root, &id) else { continue };
            let why = format!("no command touched it for {}", humantime::format_duration(timeout));
            crate::tombstone::record(root, &id, at, &why);
            let _ = crate::run::terminate(root, &id);
        }
    }
}

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
pub(crate) fn ensure_reaper(root: &Path) -> Result<()> {
    let path = lock_file(root);
    // 0600: a file others could open, they could flock, and keep the
    // root from ever having a reaper.
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| Error::io("open", &path, e))?;
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

/// The reaper's loop: purge what has expired, refill the pools, sleep
/// until the next deadline (or a tick), and leave when no box has a
/// deadline.
fn reap_until_none_left(root: &Path, lock: &std::fs::File) -> ! {
    let deadlines = || names(&root.join("sandbox-bundles")).iter().filter_map(|id| next_at(root, id)).min();
    let mut collected = std::time::Instant::now();
    let mut failed = crate::pool::Backoff::new();
    loop {
        if collected.elapsed() >= GC_EVERY {
            crate::gc::collect(root);
            collected = std::time::Instant::now();
        } else {
            reap_expired(root);
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

/// The entries of `dir` (none if it can't be read).
fn names(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A root with box `id`'s bundle and state dirs.
    fn root_with(id: &str) -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("sandbox-bundles").join(id)).unwrap();
        std::fs::create_dir_all(t.path().join("sandbox").join(id)).unwrap();
        t
    }

    #[test]
    fn a_box_is_purged_at_its_deadline_or_after_its_claim() {
        let t = root_with("b");
        let root = t.path();
        assert_eq!(purge_at(root, "b"), None, "no deadline: never purged by lifetime");
        set(root, "b", Duration::from_secs(60)).unwrap();
        let at = purge_at(root, "b").unwrap();
        assert!(at > now_ms() + 59_000 && at <= now_ms() + 60_000, "{at}");
        assert!(remaining(root, "b").is_some_and(|d| d > Duration::from_secs(59)));

        std::fs::write(expires_file(root, "b"), (now_ms() - 1).to_string()).unwrap();
        assert!(purge_at(root, "b").unwrap() <= now_ms(), "past its deadline");
        assert_eq!(remaining(root, "b"), Some(Duration::ZERO));

        // Claimed by a live run: not before the run's own deadline and
        // the grace.
        let claim = root.join("sandbox").join("b").join("claimed");
        let me = std::process::id();
        let start = std::fs::read_to_string("/proc/self/stat").unwrap();
        let start = start.rsplit_once(')').unwrap().1.split_whitespace().nth(19).unwrap().to_string();
        std::fs::write(&claim, format!("{} {me} {start}", deadline_ms(Duration::from_secs(30)))).unwrap();
        assert!(purge_at(root, "b").unwrap() >= now_ms() + 34_000);
        // Claimed by a run that has died: now.
        std::fs::write(&claim, format!("{} {me} 1", deadline_ms(Duration::from_secs(30)))).unwrap();
        assert_eq!(purge_at(root, "b"), Some(0));
    }
}
