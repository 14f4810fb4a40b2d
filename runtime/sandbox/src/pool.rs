//! A pool of idle sandboxes: `pool fill` makes them ahead of time, and
//! `run --pool` takes one, so the caller skips the start-up.
//!
//! A box is taken by claiming it (module `claim`); what to keep of each key,
//! and who may make boxes for it, is the key's record and lock (module
//! `keys`). Boxes are made for a key only under its lock, by a fill, the
//! refill after a run, or the reaper replacing expired ones; each counts
//! the idle boxes and makes the missing ones, so together they never keep
//! more than asked for, and a drain (which takes the lock too) leaves
//! nothing that a refill made behind its back.

use std::path::Path;
use std::time::Duration;

use crate::claim;
use crate::error::{Error, Result};
use crate::keys::{self, PoolOptions, Record, Take, DEFAULT_IDLE_LIFETIME};
use crate::layout::{self, POOL};
use crate::lifetime::deadline_ms;
use crate::make::launch;
use crate::options::SandboxOptions;
use crate::teardown::terminate;

/// A key for everything that shapes a box's isolation (limits, seccomp,
/// network, root, mounts, env, ...), so a run only takes a box made exactly
/// as it would make one itself: never one with a looser filter or another
/// root.
pub(crate) fn key(o: &SandboxOptions) -> Result<String> {
    Ok(format!("{POOL}{}", crate::spec::isolation_digest(o)?))
}

/// The boxes of `key` seen running and unclaimed, with more than `margin`
/// of their idle lifetime left.
fn idle(root: &Path, key: &str, margin: Duration) -> Result<Vec<String>> {
    let k = format!("{key}-");
    idle_from(root, key, margin, || Ok(states(root, |id| id.starts_with(&k))))
}

/// The states of the boxes whose ids `wanted` takes, each read on its own:
/// a pool's boxes of one key, not every box of the root with its owner.
fn states(root: &Path, wanted: impl Fn(&str) -> bool) -> Vec<tinyrun::ContainerState> {
    let rt = layout::runtime(root);
    let ids = layout::names(rt.root());
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
    margin: Duration,
    boxes: impl FnOnce() -> Result<Vec<tinyrun::ContainerState>>,
) -> Result<Vec<String>> {
    let k = format!("{key}-");
    let claims = claims(root, |id| id.starts_with(&k));
    Ok(boxes()?.into_iter().filter(|s| usable(root, s, claims.get(&s.id).copied(), margin)).map(|s| s.id).collect())
}

/// Whether a box, seen in state `s` after its claim (`claimed`: `None` if
/// its state dir was not there) was read, is idle with more than `margin`
/// of its idle lifetime left.
fn usable(root: &Path, s: &tinyrun::ContainerState, claimed: Option<bool>, margin: Duration) -> bool {
    s.status == tinyrun::Status::Running
        && claimed == Some(false)
        && crate::lifetime::remaining(root, &s.id).is_none_or(|d| d > margin)
}

/// The boxes (of those `wanted`) whose state dir exists, each with whether
/// it holds a claim.
fn claims(root: &Path, wanted: impl Fn(&str) -> bool) -> std::collections::HashMap<String, bool> {
    let ids = layout::names(&root.join("sandbox"));
    ids.into_iter().filter(|id| wanted(id)).map(|id| (id.clone(), claim::file(root, &id).exists())).collect()
}

/// A box about to reach the end of its idle lifetime may be purged before
/// a run's claim could be seen: a run leaves it.
const CLAIM_MARGIN: Duration = Duration::from_secs(1);

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
    /// The options `pool fill` made its key's boxes with (variables by
    /// name only).
    pub options: Option<PoolOptions>,
}

/// Every box of the pool.
pub fn list(root: &Path) -> Result<Vec<PoolBox>> {
    crate::expiry::reap_expired(root);
    // Claims before statuses, as in [`idle_from`]: a used box being
    // removed is never shown idle.
    let claims = claims(root, |id| id.starts_with(POOL));
    let mut records = std::collections::HashMap::new();
    let mut out = Vec::new();
    for s in crate::expiry::list(root)?.into_iter() {
        let Some(key) = layout::pool_key(&s.id).map(str::to_string) else { continue };
        let state = if s.status != tinyrun::Status::Running {
            s.status.to_string()
        } else if claims.get(&s.id) == Some(&true) || claim::file(root, &s.id).exists() {
            "in-use".to_string()
        } else {
            "idle".to_string()
        };
        let expires_in_s = crate::lifetime::remaining(root, &s.id).map(|d| d.as_secs());
        let rec: &Option<Record> = records.entry(key.clone()).or_insert_with(|| keys::read(root, &key));
        let (target, options) = (rec.as_ref().map(|r| r.count), rec.as_ref().map(|r| r.options.shown()));
        out.push(PoolBox { id: s.id, key, state, created: s.created, expires_in_s, target, options });
    }
    Ok(out)
}

/// Empties the pool of `key`, or with `None` every pool of the root:
/// forgets what `pool fill` asked for (so nothing refills it) and
/// terminates every idle box; a box in use is terminated by its run when
/// done. Returns the ids terminated.
pub fn drain(root: &Path, key: Option<&str>) -> Result<Vec<String>> {
    let Some(key) = key else {
        let mut gone = Vec::new();
        for key in keys::keys(root) {
            if !keys::remove_old_layout(root, &key)? {
                gone.extend(drain_key(root, &key)?.unwrap_or_default());
            }
        }
        // Boxes of a key whose record is gone.
        gone.extend(remove_unused(root, |_| true)?);
        return Ok(gone);
    };
    tinyrun::check_id(key)?;
    let had_old = keys::remove_old_layout(root, key)?;
    match drain_key(root, key)? {
        Some(gone) => Ok(gone),
        None if had_old => Ok(Vec::new()),
        None => Err(Error::InvalidArgument(format!("no sandbox pool has the key {key} (pool list shows the keys)"))),
    }
}

/// Drains one key, holding its lock throughout; `None` if the key has
/// neither a record nor a box.
fn drain_key(root: &Path, key: &str) -> Result<Option<Vec<String>>> {
    let lock = keys::lock(root, key, Take::Wait)?;
    let gone = remove_unused(root, |k| k == key)?;
    let known = lock.is_some() || !gone.is_empty();
    if let Some(l) = lock {
        l.remove()?;
    }
    Ok(known.then_some(gone))
}

/// Terminates the pool boxes of the keys `wanted` takes that no run uses.
fn remove_unused(root: &Path, wanted: impl Fn(&str) -> bool) -> Result<Vec<String>> {
    let mut gone = Vec::new();
    for b in list(root)?.into_iter().filter(|b| wanted(&b.key) && b.state != "in-use") {
        // Claimed first, so no run takes it while it goes; the claim's
        // deadline is now, so a reaper may purge it if we can't.
        if b.state != "idle" || claim::take(root, &b.id, deadline_ms(Duration::ZERO))? {
            match terminate(root, &b.id) {
                Ok(()) => gone.push(b.id),
                // Purged meanwhile (its idle lifetime ended).
                Err(Error::Runtime(tinyrun::RuntimeError::NotFound(_))) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(gone)
}

/// Makes idle sandboxes until `n` of these options are waiting (or removes
/// idle ones until only `n` are), and records the options and `n` for
/// later refills. Each waits at most `opts.lifetime` (default
/// [`DEFAULT_IDLE_LIFETIME`]) unused.
pub fn fill(root: &Path, opts: &SandboxOptions, n: usize) -> Result<Vec<String>> {
    opts.validate()?;
    let opts = &SandboxOptions { lifetime: Some(opts.lifetime.unwrap_or(DEFAULT_IDLE_LIFETIME)), ..opts.clone() };
    let key = key(opts)?;
    let Some(lock) = keys::lock(root, &key, Take::Make)? else {
        return Err(Error::InvalidState(format!("sandbox pool {key}: its record could not be made")));
    };
    lock.write(&Record { count: n, options: PoolOptions::of(opts) })?;
    top_up(root, opts, &key, n, &lock)
}

/// Makes boxes of `key` until `n` are idle, or removes idle ones until
/// only `n` are. The caller holds the key's lock: nobody else makes boxes
/// of the key meanwhile.
fn top_up(root: &Path, opts: &SandboxOptions, key: &str, n: usize, _held: &keys::KeyLock) -> Result<Vec<String>> {
    let idle = idle(root, key, Duration::ZERO)?;
    for id in idle.iter().skip(n) {
        if claim::take(root, id, deadline_ms(Duration::ZERO))? {
            terminate(root, id)?;
        }
    }
    // Runs that take boxes meanwhile start refills of their own, which
    // count again once we are done.
    (idle.len()..n).map(|_| launch(root, opts, key)).collect()
}

/// Tops up the pool of `key` from its record, taking its lock as `how`
/// says; nothing if the key has no record (never filled, or drained).
pub(crate) fn refill(root: &Path, key: &str, how: Take) -> Result<Vec<String>> {
    let Some(lock) = keys::lock(root, key, how)? else { return Ok(Vec::new()) };
    let Some(rec) = lock.read() else { return Ok(Vec::new()) };
    if idle(root, key, Duration::ZERO)?.len() == rec.count {
        return Ok(Vec::new());
    }
    let opts = rec.options.options()?;
    // Options that no longer make boxes of this key (the image changed
    // since the fill) make none: a run of the key expects its isolation.
    if self::key(&opts)? != key {
        return Ok(Vec::new());
    }
    top_up(root, &opts, key, rec.count, &lock)
}

/// The keys whose last refill by the reaper failed, each with when to try
/// again.
pub(crate) type Backoff = std::collections::HashMap<String, std::time::Instant>;

/// How long the reaper leaves a key alone after its refill failed (a box
/// that can't be made now, say an image gone, would fail every tick).
const RETRY: Duration = Duration::from_secs(30);

/// Replaces what is missing from every pool of the root, in the reaper (so
/// boxes that expired unused come back without waiting for a run). A key
/// someone is filling is left to them.
pub(crate) fn refill_all(root: &Path, failed: &mut Backoff) {
    let now = std::time::Instant::now();
    failed.retain(|_, again| *again > now);
    for key in keys::keys(root) {
        if !failed.contains_key(&key) && refill(root, &key, Take::IfFree).is_err() {
            failed.insert(key, now + RETRY);
        }
    }
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
pub(crate) fn take_keyed(root: &Path, key: &str, timeout: Duration) -> Result<Option<String>> {
    crate::expiry::reap_expired(root);
    let k = format!("{key}-");
    let claims = claims(root, |id| id.starts_with(&k));
    let rt = layout::runtime(root);
    let deadline = deadline_ms(timeout);
    for (id, claimed) in &claims {
        let Ok(state) = rt.peek(id).map(|c| c.state()) else { continue };
        if usable(root, &state, Some(*claimed), CLAIM_MARGIN) && claim::take(root, id, deadline)? {
            return Ok(Some(id.clone()));
        }
    }
    Ok(None)
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
        std::fs::write(claim::file(root, used), "0").unwrap();
        let idle = idle_from(root, "poolk", CLAIM_MARGIN, || {
            // Both inits were alive when the statuses were read; the used
            // box's removal lands right after.
            std::fs::remove_dir_all(root.join("sandbox").join(used)).unwrap();
            Ok(vec![running(used), running(free)])
        })
        .unwrap();
        assert_eq!(idle, [free]);
        // Boxes of another key are never idle for this one.
        assert!(idle_from(root, "poolz", CLAIM_MARGIN, || Ok(vec![running(free)])).unwrap().is_empty());
    }

    /// What a fill records gives back the options it was given, and the
    /// same key; `pool list` sees the variables' names, not their values.
    #[test]
    fn a_record_makes_boxes_of_its_key() {
        let mut o = SandboxOptions::preset(crate::options::Preset::Small);
        o.env = vec!["API_KEY=secret".into(), "MODE=x".into()];
        o.loopback = false;
        o.lifetime = Some(Duration::from_secs(90));
        let rec = PoolOptions::of(&o);
        let back = rec.options().unwrap();
        assert_eq!(key(&back).unwrap(), key(&o).unwrap());
        assert_eq!((back.env.clone(), back.lifetime, back.loopback), (o.env.clone(), o.lifetime, false));
        assert_eq!(rec.shown().env, ["API_KEY", "MODE"]);
        assert!(!rec.summary().contains("secret"), "{}", rec.summary());
        let mut e = o.clone();
        e.loopback = true;
        e.egress = Some(crate::net::Egress {
            allow: vec!["example.com:443".parse().unwrap()],
            dns: Some("192.0.2.53".parse().unwrap()),
            ..Default::default()
        });
        let back = PoolOptions::of(&e).options().unwrap();
        assert_eq!(back.egress, e.egress);
        assert_eq!(key(&back).unwrap(), key(&e).unwrap());
    }
}
