//! A launched box's lifetime, as records in its bundle dir: its deadline
//! (`expires`, unix milliseconds), and when it may be purged given a run's
//! claim on it (module `claim`). Who enforces them: every sandbox command
//! of the root purges the boxes past theirs first (module `expiry`), and
//! the root's reaper purges each at its deadline (module `reaper`); so one
//! mechanism failing leaves the other. A box that no command has touched
//! for its idle timeout goes the same way (module `idle`).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::claim::{self, Claim};
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

pub(crate) fn now_ms() -> u64 {
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
    crate::layout::bundle(root, id).join(EXPIRES)
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
pub(crate) fn purge_at(root: &Path, id: &str) -> Option<u64> {
    let own = expires(root, id)?;
    Some(match claim::read(root, id) {
        Claim::Free => own,
        Claim::Until(t) => own.max(t.saturating_add(u64::try_from(CLAIM_GRACE.as_millis()).unwrap_or(0))),
        // Nobody will use it, nor remove it.
        Claim::Abandoned => 0,
    })
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
