//! A launched box's idle timeout: a box that no command has touched for
//! that long is terminated, as one whose lifetime has ended.
//!
//! Touching a box is running `exec`, `shell`, `cp` or `extend` on it. The
//! box's bundle dir holds `idle`: the timeout in milliseconds, and as its
//! modification time the last touch, set when a command starts and again
//! when it ends. While a command runs it holds a shared `flock` on the
//! file, and the reaper terminates an idle box only under an exclusive one:
//! a box is never idle while a command of it runs, however long, and a
//! command that starts while the box is being removed waits and then finds
//! it gone.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::fcntl::{Flock, FlockArg};
use nix::sys::stat::futimens;
use nix::sys::time::TimeSpec;

use crate::error::{Error, Result};

fn file(root: &Path, id: &str) -> PathBuf {
    crate::layout::bundle(root, id).join("idle")
}

/// Gives box `id` an idle timeout of `timeout`, counted from now.
pub(crate) fn set(root: &Path, id: &str, timeout: Duration) -> Result<()> {
    let p = file(root, id);
    std::fs::write(&p, timeout.as_millis().to_string()).map_err(|e| Error::io("write", &p, e))
}

/// A command at work in a box: the box is touched again and released
/// when it is dropped.
pub(crate) struct Touch {
    lock: Option<Flock<File>>,
}

impl Drop for Touch {
    fn drop(&mut self) {
        if let Some(l) = &self.lock {
            let _ = futimens(l.as_raw_fd(), &TimeSpec::UTIME_NOW, &TimeSpec::UTIME_NOW);
        }
    }
}

/// Touches box `id` for as long as the value lives. A box without an idle
/// timeout (a pool box, or one made before them) has nothing to touch.
pub(crate) fn touch(root: &Path, id: &str) -> Result<Touch> {
    let p = file(root, id);
    let f = match File::open(&p) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Touch { lock: None }),
        Err(e) => return Err(Error::io("open", p, e)),
    };
    let lock = Flock::lock(f, FlockArg::LockShared).map_err(|(_, e)| Error::io("lock", &p, e.into()))?;
    futimens(lock.as_raw_fd(), &TimeSpec::UTIME_NOW, &TimeSpec::UTIME_NOW)
        .map_err(|e| Error::io("touch", &p, e.into()))?;
    Ok(Touch { lock: Some(lock) })
}

/// When box `id` becomes idle for good (its last touch plus its timeout,
/// unix milliseconds), and its timeout; `None` if it has no idle timeout.
pub(crate) fn deadline(root: &Path, id: &str) -> Option<(u64, Duration)> {
    let p = file(root, id);
    let timeout: u64 = std::fs::read_to_string(&p).ok()?.trim().parse().ok()?;
    let touched = std::fs::metadata(&p).ok()?;
    let touched_ms = u64::try_from(touched.mtime()).ok()?.saturating_mul(1000)
        + u64::try_from(touched.mtime_nsec()).ok()? / 1_000_000;
    Some((touched_ms.saturating_add(timeout), Duration::from_millis(timeout)))
}

/// Box `id` with no command at work in it, held so until dropped; `None`
/// while a command runs.
pub(crate) fn quiet(root: &Path, id: &str) -> Option<Flock<File>> {
    let f = File::open(file(root, id)).ok()?;
    Flock::lock(f, FlockArg::LockExclusiveNonblock).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_keeps_a_box_from_being_idle_and_touches_it() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        std::fs::create_dir_all(root.join("sandbox-bundles/b")).unwrap();
        assert!(deadline(root, "b").is_none());
        set(root, "b", Duration::from_secs(60)).unwrap();
        let old = std::time::SystemTime::now() - Duration::from_secs(3600);
        std::fs::File::options().write(true).open(file(root, "b")).unwrap().set_modified(old).unwrap();
        let (at, timeout) = deadline(root, "b").unwrap();
        assert_eq!(timeout, Duration::from_secs(60));
        let now = crate::lifetime::deadline_ms(Duration::ZERO);
        assert!(at < now, "touched an hour ago, idle for a minute: {at} {now}");
        let running = touch(root, "b").unwrap();
        assert!(deadline(root, "b").unwrap().0 > now, "a command touches the box");
        assert!(quiet(root, "b").is_none(), "a box is not idle while a command runs");
        drop(running);
        assert!(quiet(root, "b").is_some());
    }
}
