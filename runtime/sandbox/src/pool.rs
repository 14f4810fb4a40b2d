//! A pool of idle sandboxes: `pool fill` makes them ahead of time, and
//! `run --pool` takes one, so the caller skips the start-up.

use std::path::Path;

use super::options::SandboxOptions;
use super::run::launch;
use crate::error::{Error, Result};
use crate::sys::{self, Forked};

/// Pool sandboxes' ids start with this, followed by the key.
const PREFIX: &str = "pool";

/// A key for everything that shapes a box's isolation (limits, seccomp,
/// network, root, mounts, env, ...), so a run only takes a box made exactly
/// as it would make one itself: never one with a looser filter or another
/// root.
pub(crate) fn key(o: &SandboxOptions) -> Result<String> {
    Ok(format!("{PREFIX}{}", super::spec::isolation_digest(o)?))
}

/// Marks a pool sandbox as taken; created with O_EXCL, so only one caller
/// ever gets a given sandbox.
const CLAIM: &str = "claimed";

/// Where the claim on pool box `id` is recorded: the claiming run's
/// deadline, in unix milliseconds (see module `lifetime`).
pub(crate) fn claim_file(root: &Path, id: &str) -> std::path::PathBuf {
    root.join("sandbox").join(id).join(CLAIM)
}

fn idle(root: &Path, key: &str) -> Result<Vec<String>> {
    crate::lifetime::reap_expired(root);
    let k = format!("{key}-");
    idle_from(root, key, || Ok(states(root, |id| id.starts_with(&k))))
}

/// The states of the boxes whose ids `wanted` takes, each read on its own:
/// a pool's boxes of one key, not every box of the root with its owner.
fn states(root: &Path, wanted: impl Fn(&str) -> bool) -> Vec<tinyrun::ContainerState> {
    let rt = tinyrun::Runtime::new(root.join("sandbox"));
    let ids: Vec<String> = std::fs::read_dir(rt.root())
        .map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
        .unwrap_or_default();
    ids.iter().filter(|id| wanted(id)).filter_map(|id| rt.peek(id).ok().map(|c| c.state())).collect()
}

/// [`idle`], with `boxes` for the boxes and their status (listed after the
/// claims were read).
///
/// Claims are read first and statuses after. A used box is removed by
/// killing it and then deleting its state dir, claim included: read the
/// other way round, such a box could be seen running before the kill and
/// unclaimed after the delete, and pass for idle (a run would take a box
/// that is going, and a refill would not replace it). Seen unclaimed and
/// then running, a box was idle when its claim was read.
fn idle_from(
    root: &Path,
    key: &str,
    boxes: impl FnOnce() -> Result<Vec<tinyrun::ContainerState>>,
) -> Result<Vec<String>> {
    let k = format!("{key}-");
    let claims = claims(root, |id| id.starts_with(&k));
    Ok(boxes()?.into_iter().filter(|s| usable(root, s, claims.get(&s.id).copied())).map(|s| s.id).collect())
}

/// Whether a box, seen in state `s` after its claim (`claimed`: `None` if
/// its state dir was not there) was read, is idle and may be taken.
fn usable(root: &Path, s: &tinyrun::ContainerState, claimed: Option<bool>) -> bool {
    s.status == tinyrun::Status::Running
        && claimed == Some(false)
        // One about to reach the end of its idle lifetime may be purged
        // before a claim could be seen: leave it.
        && crate::lifetime::remaining(root, &s.id).is_none_or(|d| d > CLAIM_MARGIN)
}

/// The boxes (of those `wanted`) whose state dir exists, each with whether
/// it holds a claim.
fn claims(root: &Path, wanted: impl Fn(&str) -> bool) -> std::collections::HashMap<String, bool> {
    let ids: Vec<String> = std::fs::read_dir(root.join("sandbox"))
        .map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
        .unwrap_or_default();
    ids.into_iter().filter(|id| wanted(id)).map(|id| (id.clone(), claim_file(root, &id).exists())).collect()
}

/// See [`idle_from`].
const CLAIM_MARGIN: std::time::Duration = std::time::Duration::from_secs(1);

/// A box of the pool, as `pool list` shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PoolBox {
    /// The box's id.
    pub id: String,
    /// The key of the options it was made with (boxes of one key are
    /// interchangeable).
    pub key: String,
    /// `idle` (waiting), `in-use` (taken by a run), or the box's status
    /// if it is not running.
    pub state: String,
    /// When it was made (RFC 3339).
    pub created: String,
    /// Seconds left before an idle box is purged.
    pub expires_in_s: Option<u64>,
    /// How many boxes of its key `pool fill` asked for.
    pub target: Option<usize>,
}

/// Every box of the pool.
pub fn list(root: &Path) -> Result<Vec<PoolBox>> {
    crate::lifetime::reap_expired(root);
    // Claims before statuses, as in [`idle_from`]: a used box being
    // removed is never shown idle.
    let claims = claims(root, |id| id.starts_with(PREFIX));
    let mut out = Vec::new();
    for s in super::run::list(root)?.into_iter().filter(|s| s.id.starts_with(PREFIX)) {
        let key = s.id.rsplit_once('-').map_or(s.id.as_str(), |(k, _)| k).to_string();
        let state = if s.status != tinyrun::Status::Running {
            s.status.to_string()
        } else if claims.get(&s.id) == Some(&true) || claim_file(root, &s.id).exists() {
            "in-use".to_string()
        } else {
            "idle".to_string()
        };
        let expires_in_s = crate::lifetime::remaining(root, &s.id).map(|d| d.as_secs());
        let target = target(root, &key).map(|(n, _)| n);
        out.push(PoolBox { id: s.id, key, state, created: s.created, expires_in_s, target });
    }
    Ok(out)
}

/// Empties the pool: forgets every `pool fill` target (so nothing refills
/// it) and terminates every idle box; a box in use is terminated by its
/// run when done. Returns the ids terminated.
pub fn drain(root: &Path) -> Result<Vec<String>> {
    let dir = root.join("sandbox-pool");
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for e in entries.flatten() {
            let p = e.path();
            std::fs::remove_file(&p).map_err(|e| Error::io("remove", &p, e))?;
        }
    }
    let mut gone = Vec::new();
    for b in list(root)?.into_iter().filter(|b| b.state != "in-use") {
        // Claimed first, so no run takes it while it goes; the claim's
        // deadline is now, so a reaper may purge it if we can't.
        let claimed = std::fs::OpenOptions::new().write(true).create_new(true).open(claim_file(root, &b.id));
        if let Ok(mut f) = claimed.as_ref() {
            use std::io::Write;
            let _ = f.write_all(crate::lifetime::deadline_ms(std::time::Duration::ZERO).to_string().as_bytes());
        }
        if claimed.is_ok() || b.state != "idle" {
            super::run::terminate(root, &b.id)?;
            gone.push(b.id);
        }
    }
    Ok(gone)
}

/// Where `pool fill` remembers how many boxes of a key to keep.
fn target_file(root: &Path, key: &str) -> std::path::PathBuf {
    root.join("sandbox-pool").join(key)
}

/// How long a pooled box waits unused before it is purged, unless `pool
/// fill --idle-lifetime` says otherwise.
pub const DEFAULT_IDLE_LIFETIME: std::time::Duration = std::time::Duration::from_secs(600);

/// Makes idle sandboxes until `n` of these options are waiting, and
/// remembers `n` for later refills. Each waits at most `opts.lifetime`
/// (default [`DEFAULT_IDLE_LIFETIME`]) unused.
pub fn fill(root: &Path, opts: &SandboxOptions, n: usize) -> Result<Vec<String>> {
    opts.validate()?;
    let opts = &SandboxOptions { lifetime: Some(opts.lifetime.unwrap_or(DEFAULT_IDLE_LIFETIME)), ..opts.clone() };
    let key = key(opts)?;
    let target = target_file(root, &key);
    if let Some(dir) = target.parent() {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| Error::io("create", dir, e))?;
    }
    write_atomic(&target, &format!("{n} {}", opts.lifetime.unwrap_or(DEFAULT_IDLE_LIFETIME).as_millis()))?;
    top_up(root, opts, &key, n)
}

/// What `pool fill` asked for a key: how many boxes, and their idle
/// lifetime.
fn target(root: &Path, key: &str) -> Option<(usize, Option<std::time::Duration>)> {
    let text = std::fs::read_to_string(target_file(root, key)).ok()?;
    let mut words = text.split_whitespace();
    let n = words.next()?.parse().ok()?;
    Some((n, words.next().and_then(|w| w.parse().ok()).map(std::time::Duration::from_millis)))
}

/// Replaces `path` with `text` in one rename, so a reader (a refill) sees
/// the old number or the new one, never a partial write.
fn write_atomic(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| Error::io("create", dir, e))?;
    tmp.write_all(text.as_bytes()).map_err(|e| Error::io("write", tmp.path().to_path_buf(), e))?;
    tmp.as_file().sync_all().map_err(|e| Error::io("sync", tmp.path().to_path_buf(), e))?;
    tmp.persist(path).map_err(|e| Error::io("rename", path, e.error))?;
    Ok(())
}

fn top_up(root: &Path, opts: &SandboxOptions, key: &str, n: usize) -> Result<Vec<String>> {
    let have = idle(root, key)?.len();
    let mut made = Vec::new();
    for _ in have..n {
        // Drained meanwhile: stop (a box made just before still goes at
        // the end of its idle lifetime).
        if target(root, key).is_none() {
            break;
        }
        made.push(launch(root, opts, key)?);
    }
    Ok(made)
}

/// Claims one idle sandbox made with these options, if there is one; the
/// claim holds the run's deadline (`opts.timeout` from now).
pub fn take(root: &Path, opts: &SandboxOptions) -> Result<Option<String>> {
    take_keyed(root, &key(opts)?, opts.timeout)
}

/// [`take`] for options whose [`key`] is `key`. Boxes are looked at one by
/// one, each claimed as soon as it is seen idle: a run needs one box, not
/// the status of all of them. Claims are still read before statuses (see
/// [`idle_from`]).
pub(crate) fn take_keyed(root: &Path, key: &str, timeout: std::time::Duration) -> Result<Option<String>> {
    use std::io::Write;
    crate::lifetime::reap_expired(root);
    let k = format!("{key}-");
    let claims = claims(root, |id| id.starts_with(&k));
    let rt = tinyrun::Runtime::new(root.join("sandbox"));
    for (id, claimed) in &claims {
        let Ok(state) = rt.peek(id).map(|c| c.state()) else { continue };
        if !usable(root, &state, Some(*claimed)) {
            continue;
        }
        let marker = claim_file(root, id);
        if let Ok(mut f) = std::fs::OpenOptions::new().write(true).create_new(true).open(&marker) {
            f.write_all(crate::lifetime::deadline_ms(timeout).to_string().as_bytes())
                .map_err(|e| Error::io("write", &marker, e))?;
            return Ok(Some(id.clone()));
        }
    }
    Ok(None)
}

/// Removes a used pool sandbox (`used`; none after a miss) and tops the
/// pool back up, in a detached child, so the caller that just used it
/// waits for neither. After a miss the pool is empty (its boxes expired
/// unused, or all are taken): it is topped up as after a hit, where `pool
/// fill` set a target for these options.
///
/// # Preconditions
/// The caller is single-threaded (see `sys::fork`).
pub(crate) fn recycle_detached(root: &Path, opts: &SandboxOptions, key: &str, used: Option<&str>) -> Result<()> {
    let target = target(root, key).map(|t| (key, t));
    if used.is_none() && target.is_none() {
        return Ok(());
    }
    let remove = || used.map_or(Ok(()), |id| super::run::terminate(root, id));
    let forked = match sys::fork() {
        Ok(f) => f,
        // No child to do it: remove the used box here, so it never lingers.
        Err(_) => return remove(),
    };
    if let Forked::Child = forked {
        // Nothing is left to report to: the caller has its answer.
        let _ = nix::unistd::setsid();
        // The caller's command line (its --env values too) is not ours to
        // show for as long as a refill takes: without a title of our own,
        // the used box is removed but nothing is refilled.
        let concealed = tinyrun::conceal_cmdline(c"tinyrun-pool").is_ok();
        // Our stdout may be the caller's pipe: don't hold it open.
        sys::detach_stdio(&[]);
        let removed = remove();
        // A key nobody filled (or one drained since) is not refilled.
        let refilled = match target {
            Some((key, (n, lifetime))) if concealed => {
                let lifetime = Some(lifetime.unwrap_or(DEFAULT_IDLE_LIFETIME));
                top_up(root, &SandboxOptions { lifetime, ..opts.clone() }, key, n)
            }
            Some(_) => Err(Error::InvalidState("no refill: our command line could not be concealed".into())),
            None => Ok(Vec::new()),
        };
        sys::exit_child(i32::from(removed.is_err() || refilled.is_err()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(id: &str) -> tinyrun::ContainerState {
        tinyrun::ContainerState {
            oci_version: String::new(),
            id: id.to_string(),
            pid: 1,
            status: tinyrun::Status::Running,
            bundle: Default::default(),
            rootfs: Default::default(),
            created: String::new(),
            annotations: Default::default(),
            owner: String::new(),
        }
    }

    /// A run's used box is killed and then its state dir (claim included)
    /// removed while another command looks for idle boxes: read running
    /// before the kill and unclaimed after the removal, it must not count
    /// as idle.
    #[test]
    fn a_used_box_removed_while_looking_is_not_idle() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        let (used, free) = ("poolk-used", "poolk-free");
        for id in [used, free] {
            std::fs::create_dir_all(root.join("sandbox").join(id)).unwrap();
        }
        std::fs::write(claim_file(root, used), "0").unwrap();
        let idle = idle_from(root, "poolk", || {
            // Both inits were alive when the statuses were read; the used
            // box's removal lands right after.
            std::fs::remove_dir_all(root.join("sandbox").join(used)).unwrap();
            Ok(vec![running(used), running(free)])
        })
        .unwrap();
        assert_eq!(idle, [free]);
        // Boxes of another key are never idle for this one.
        assert!(idle_from(root, "poolz", || Ok(vec![running(free)])).unwrap().is_empty());
    }
}
