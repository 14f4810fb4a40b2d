//! What is left of a box that expired: for a while, a command naming it is
//! told when and why it went ("sandbox ID expired at T"), not that no such
//! box exists. `<root>/sandbox-expired/<id>` (0700 dir, 0600 files) holds
//! the time (unix milliseconds) and the reason. Kept for [`KEEP`], and at
//! most [`MOST`] of them: the oldest go first.

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::error::Error;

const DIR: &str = "sandbox-expired";

/// How long an expired box's id keeps its tombstone.
const KEEP: Duration = Duration::from_secs(3600);

/// The most tombstones a root keeps.
const MOST: usize = 1000;

fn file(root: &Path, id: &str) -> PathBuf {
    root.join(DIR).join(id)
}

/// Records that box `id` expired at `at_ms` because `why`. Best effort:
/// without it a command only says the box does not exist.
pub(crate) fn record(root: &Path, id: &str, at_ms: u64, why: &str) {
    let dir = root.join(DIR);
    if std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir).is_err() {
        return;
    }
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(file(root, id))
        .and_then(|mut f| std::io::Write::write_all(&mut f, format!("{at_ms}\n{why}").as_bytes()));
    let mut all = entries(root);
    if all.len() > MOST {
        all.sort_by_key(|(_, t)| *t);
        for (p, _) in &all[..all.len() - MOST] {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// The error for box `id`, which does not exist: that it expired, if it
/// did lately.
pub(crate) fn expired(root: &Path, id: &str) -> Option<Error> {
    let text = std::fs::read_to_string(file(root, id)).ok()?;
    let (at, why) = text.split_once('\n')?;
    let at = SystemTime::UNIX_EPOCH + Duration::from_millis(at.trim().parse().ok()?);
    Some(Error::Expired {
        id: id.to_string(),
        at: humantime::format_rfc3339_millis(at).to_string(),
        why: why.to_string(),
    })
}

/// Removes the tombstones older than [`KEEP`].
pub(crate) fn prune(root: &Path) {
    let now = SystemTime::now();
    for (p, t) in entries(root) {
        if now.duration_since(t).is_ok_and(|age| age > KEEP) {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Each tombstone with its time of writing.
fn entries(root: &Path) -> Vec<(PathBuf, SystemTime)> {
    std::fs::read_dir(root.join(DIR))
        .map(|d| {
            d.filter_map(|e| {
                let e = e.ok()?;
                Some((e.path(), e.metadata().ok()?.modified().ok()?))
            })
            .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_expired_box_says_when_for_a_while() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        assert!(expired(root, "sbx-1").is_none());
        record(root, "sbx-1", 1_700_000_000_123, "its lifetime ended");
        let e = expired(root, "sbx-1").unwrap().to_string();
        assert_eq!(e, "sandbox sbx-1 expired at 2023-11-14T22:13:20.123Z (its lifetime ended)");
        prune(root);
        assert!(expired(root, "sbx-1").is_some(), "pruned before its time");
        let old = SystemTime::now() - KEEP - Duration::from_secs(1);
        std::fs::File::options().write(true).open(file(root, "sbx-1")).unwrap().set_modified(old).unwrap();
        prune(root);
        assert!(expired(root, "sbx-1").is_none(), "kept past its time");
    }

    #[test]
    fn tombstones_are_bounded() {
        let t = tempfile::tempdir().unwrap();
        for i in 0..MOST + 5 {
            record(t.path(), &format!("sbx-{i}"), 1, "x");
        }
        assert_eq!(entries(t.path()).len(), MOST);
    }
}
