//! A pool box's claim: what makes a box taken, by the run that uses it (or
//! by `pool drain`, which removes it), so that no other run takes it.
//!
//! The claim is the file `claimed` in the box's state dir, made (`O_EXCL`)
//! and written while the claimer holds the state dir's lock
//! ([`tinyrun::Runtime::load`]). A `delete` of the box takes that lock
//! too, so a claim is never written into a directory being removed (which
//! would fail the removal with ENOTEMPTY and leave the directory behind).
//!
//! It holds `DEADLINE PID START`: the claimer's deadline in unix
//! milliseconds, its pid, and that pid's start time (field 22 of
//! `/proc/PID/stat`, as the runtime records its inits), so a claim whose
//! claimer has died is told from a live one even after the pid is reused.
//! A claim seen empty is either being written or was left by a claimer
//! that died between making and writing it; seen empty under the lock,
//! which a live claimer holds until it has written, it is the latter.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use tinyrun::{RuntimeError, Status};

use crate::error::{Error, Result};

const CLAIM: &str = "claimed";

/// Where the claim on pool box `id` is.
pub(crate) fn file(root: &Path, id: &str) -> PathBuf {
    crate::layout::state(root, id).join(CLAIM)
}

/// What a box's claim says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claim {
    /// Nobody has claimed it.
    Free,
    /// Claimed by a live claimer (or one of an older layout) until this
    /// deadline, in unix milliseconds.
    Until(u64),
    /// Its claimer is dead: nobody will use the box, or remove it.
    Abandoned,
}

/// Reads box `id`'s claim. An empty one is looked at again under the
/// state lock (see the module's doc).
pub(crate) fn read(root: &Path, id: &str) -> Claim {
    match parse(root, id) {
        Some(c) => c,
        None => {
            let rt = crate::layout::runtime(root);
            // Gone meanwhile: nothing is claimed any more.
            let Ok(locked) = rt.load(id) else { return Claim::Free };
            let again = parse(root, id).unwrap_or(Claim::Abandoned);
            drop(locked);
            again
        }
    }
}

/// The claim as it stands; `None` if it is empty (or unreadable).
fn parse(root: &Path, id: &str) -> Option<Claim> {
    let text = match std::fs::read_to_string(file(root, id)) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Some(Claim::Free),
        Err(_) => return None,
    };
    let mut words = text.split_whitespace();
    let until: u64 = words.next()?.parse().ok()?;
    let owner = match (words.next(), words.next()) {
        (Some(pid), Some(start)) => Some((pid.parse::<i32>().ok()?, start.parse::<u64>().ok()?)),
        // A claim of the layout before owners: its deadline is all there is.
        _ => None,
    };
    Some(match owner {
        Some((pid, start)) if start_time(pid) != Some(start) => Claim::Abandoned,
        _ => Claim::Until(until),
    })
}

/// Claims pool box `id` for this process until `deadline_ms`: true if it
/// was running and unclaimed and is ours now.
pub(crate) fn take(root: &Path, id: &str, deadline_ms: u64) -> Result<bool> {
    let rt = crate::layout::runtime(root);
    let locked = match rt.load(id) {
        Ok(c) => c,
        // Removed since it was seen, or half made by a maker that died.
        Err(RuntimeError::NotFound(_)) => return Ok(false),
        Err(e) => return Err(e.into()),
    };
    if locked.status() != Status::Running {
        return Ok(false);
    }
    let path = file(root, id);
    let mut f = match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(false),
        Err(e) => return Err(Error::io("create", path, e)),
    };
    let me = std::process::id();
    let start = i32::try_from(me).ok().and_then(start_time).unwrap_or(0);
    f.write_all(format!("{deadline_ms} {me} {start}").as_bytes()).map_err(|e| Error::io("write", &path, e))?;
    drop(locked);
    Ok(true)
}

/// Field 22 of `/proc/PID/stat`, the process's start time; `None` if no
/// such process.
pub(crate) fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name (field 2) may hold spaces and parentheses: count from the
    // last ')'. Field 3 is the first after it.
    stat.rsplit_once(')')?.1.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_names_a_live_owner_or_is_abandoned() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        std::fs::create_dir_all(root.join("sandbox").join("poolk-a")).unwrap();
        assert_eq!(read(root, "poolk-a"), Claim::Free);
        let me = std::process::id();
        let start = start_time(i32::try_from(me).unwrap()).unwrap();
        std::fs::write(file(root, "poolk-a"), format!("1234 {me} {start}")).unwrap();
        assert_eq!(read(root, "poolk-a"), Claim::Until(1234));
        // The pid is ours, the start time another process's: a dead owner
        // whose pid was reused.
        std::fs::write(file(root, "poolk-a"), format!("1234 {me} {}", start + 1)).unwrap();
        assert_eq!(read(root, "poolk-a"), Claim::Abandoned);
        // A claim of the older layout keeps its deadline.
        std::fs::write(file(root, "poolk-a"), "99").unwrap();
        assert_eq!(read(root, "poolk-a"), Claim::Until(99));
        // Empty, and the box has no state to lock: gone, so free.
        std::fs::write(file(root, "poolk-a"), "").unwrap();
        assert_eq!(read(root, "poolk-a"), Claim::Free);
    }
}
