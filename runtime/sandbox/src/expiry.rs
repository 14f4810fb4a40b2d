//! Every sandbox command of a root enforces its boxes' ends first: a box
//! whose lifetime (module `lifetime`) or idle timeout (module `idle`) has
//! ended is purged, leaving a tombstone (module `tombstone`), before the
//! command looks at any box. So a box past its deadline is gone even when
//! the root's reaper (module `reaper`) is not there to purge it. Runs in
//! the runtime process.

use std::path::Path;
use std::time::Duration;

use tinyrun::{ContainerState, Runtime};

use crate::error::{Error, Result};
use crate::idle::{self, Touch};
use crate::layout;
use crate::lifetime::{self, now_ms};
use crate::teardown::{gone, terminate};

/// Purges every box of `root` whose lifetime or idle timeout has ended,
/// leaving a tombstone for each launched one. Errors are left for the next
/// command: one box that can't be purged must not stop the others, or the
/// caller's command.
pub(crate) fn reap_expired(root: &Path) {
    let now = now_ms();
    for id in layout::names(&layout::bundles(root)) {
        let launched = layout::pool_key(&id).is_none();
        if lifetime::purge_at(root, &id).is_some_and(|t| t <= now) {
            if launched {
                let at = lifetime::expires(root, &id).unwrap_or(now);
                crate::tombstone::record(root, &id, at, "its lifetime ended");
            }
            let _ = terminate(root, &id);
        } else if let Some((at, timeout)) = idle::deadline(root, &id).filter(|(t, _)| *t <= now) {
            // Not while a command runs in it; held until it is gone, so
            // none starts meanwhile.
            let Some(_quiet) = idle::quiet(root, &id) else { continue };
            let why = format!("no command touched it for {}", humantime::format_duration(timeout));
            crate::tombstone::record(root, &id, at, &why);
            let _ = terminate(root, &id);
        }
    }
}

/// The runtime holding box `id`, the lifetime the box has left, and the
/// box touched for as long as the caller keeps the last (module `idle`);
/// unless the box has expired (then it is purged, and the error says
/// when). Whether the box exists is otherwise left to what comes next.
pub(crate) fn live_box(root: &Path, id: &str) -> Result<(Runtime, Option<Duration>, Touch)> {
    tinyrun::check_id(id)?;
    let left = lifetime::remaining(root, id);
    if left.is_some_and(|d| d.is_zero()) {
        reap_expired(root);
        let ended = || Error::InvalidState(format!("sandbox {id} has reached the end of its lifetime"));
        return Err(crate::tombstone::expired(root, id).unwrap_or_else(ended));
    }
    let touch = idle::touch(root, id)?;
    // Gone, maybe while we waited for the box's end to be over: say why.
    if !layout::state(root, id).exists() {
        return Err(gone(root, id));
    }
    Ok((layout::runtime(root), left, touch))
}

/// The sandboxes that exist now.
pub fn list(root: &Path) -> Result<Vec<ContainerState>> {
    reap_expired(root);
    Ok(layout::runtime(root).list()?)
}

/// Sets the lifetime launched box `id` has left to `lifetime` from now
/// (longer or shorter than before), and touches it; returns its new
/// deadline in unix milliseconds. A box that has expired stays expired.
pub fn extend(root: &Path, id: &str, lifetime: Duration) -> Result<u64> {
    let _touch = live_box(root, id)?.2;
    if lifetime::expires(root, id).is_none() {
        return Err(Error::InvalidArgument(format!(
            "sandbox {id} has no lifetime to extend (it is not a launched box)"
        )));
    }
    lifetime::set(root, id, lifetime)
}
