//! A launched box's lifetime: when it ends the box is terminated and
//! purged, whether or not any tinyrun command is running then.
//!
//! Two mechanisms, so one failing leaves the other:
//! - the deadline is written into the box's bundle dir (`expires`, unix
//!   milliseconds), where every later sandbox command of the root looks
//!   (`reap_expired`): a box past it is purged before anything else;
//! - `launch` leaves a small reaper behind, a forked child in a session of
//!   its own holding a pidfd of the box's init, which wakes at the deadline
//!   (or when init dies) and purges the box.
//!
//! A pooled box taken by a run is claimed (module `pool`); the claim holds
//! the run's own deadline, and the box lives until that one too has passed.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::unistd::Pid;

use crate::error::{Error, Result};
use crate::sys::{self, Forked};

const EXPIRES: &str = "expires";

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

/// Records box `id`'s deadline, `lifetime` from now.
pub(crate) fn set(root: &Path, id: &str, lifetime: Duration) -> Result<()> {
    let p = expires_file(root, id);
    std::fs::write(&p, deadline_ms(lifetime).to_string()).map_err(|e| Error::io("write", &p, e))
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
    let claim = crate::pool::claim_file(root, id);
    let claimed = match read_ms(&claim) {
        Some(t) => t.saturating_add(u64::try_from(CLAIM_GRACE.as_millis()).unwrap_or(0)),
        // Claimed a moment ago, deadline not yet written: look again soon.
        None if claim.exists() => now_ms().saturating_add(1000),
        None => 0,
    };
    Some(own.max(claimed))
}

/// Purges every box of `root` whose lifetime has ended. Errors are left
/// for the next command: one box that can't be purged must not stop the
/// others, or the caller's command.
pub(crate) fn reap_expired(root: &Path) {
    let now = now_ms();
    for id in names(&root.join("sandbox-bundles")) {
        if purge_at(root, &id).is_some_and(|t| t <= now) {
            let _ = crate::run::terminate(root, &id);
        }
    }
}

/// Leaves a reaper for box `id`, whose init is `init`: a detached child
/// that purges the box when its lifetime ends or its init dies.
///
/// # Preconditions
/// The caller is single-threaded (see `sys::fork`).
pub(crate) fn spawn_reaper(root: &Path, id: &str, init: Pid) -> Result<()> {
    // Opened here, so the reaper can't mistake a later process for init.
    let pidfd = sys::pidfd_open(init).map_err(Error::sys("pidfd_open"))?;
    match sys::fork().map_err(Error::sys("fork"))? {
        Forked::Parent(_) => Ok(()),
        Forked::Child => {
            // Nobody waits for us: our own session, no terminal, none of
            // the caller's files (its stdout may be a pipe it reads to EOF).
            let _ = nix::unistd::setsid();
            sys::detach_stdio(&[pidfd.as_fd()]);
            let _ = nix::sys::prctl::set_name(c"tinyrun-reaper");
            loop {
                let Some(at) = purge_at(root, id) else { sys::exit_child(0) };
                let left = at.saturating_sub(now_ms());
                if left == 0 {
                    break;
                }
                let ms = PollTimeout::try_from(left.min(60_000)).unwrap_or(PollTimeout::MAX);
                let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
                if poll(&mut fds, ms).is_ok_and(|n| n > 0) {
                    // Init died: the box is no use any more. Most likely a
                    // `terminate` killed it and is purging it now: give it
                    // time to finish, and purge only what it left.
                    for _ in 0..40 {
                        if expires(root, id).is_none() {
                            sys::exit_child(0);
                        }
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    break;
                }
            }
            sys::exit_child(i32::from(crate::run::terminate(root, id).is_err()))
        }
    }
}

/// The entries of `dir` (none if it can't be read).
fn names(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
        .unwrap_or_default()
}
