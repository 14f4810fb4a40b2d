//! The garbage collection: what is left under the root of boxes whose
//! maker or remover died (SIGKILL, a crash, a power cut), found and
//! removed by every `sandbox run` and, while the root has launched boxes,
//! by its reaper. A failure here leaves garbage for the next pass, never a
//! looser box.
//!
//! What it looks for:
//! - a one-shot box that has stopped while nobody holds its lock: its
//!   supervisor died (and its init with it, by PDEATHSIG);
//! - a box only partly there (a state dir without a bundle dir or without
//!   a record, a bundle dir without a state dir) while nobody holds its
//!   lock (module `boxlock`): half made or half removed by a process that
//!   is gone;
//! - boxes past their lifetime or idle timeout, claims whose claimer died
//!   (module `lifetime`), old tombstones (module `tombstone`);
//! - host id records and egress records whose box is gone, and pool key
//!   directories that a fill killed midway left without a record.

use std::collections::BTreeSet;
use std::path::Path;

use crate::boxlock;
use crate::ids::Allocator;
use crate::layout::{self, names};
use crate::teardown::remove_box;

/// One pass over the root.
pub(crate) fn collect(root: &Path) {
    stopped_one_shots(root);
    partial_boxes(root);
    crate::expiry::reap_expired(root);
    crate::tombstone::prune(root);
    crate::keys::collect(root);
    let _ = Allocator::new(root).collect(&layout::box_exists(root));
    let _ = crate::net::collect(root, &layout::box_exists(root));
}

/// Removes one-shot boxes that have stopped and whose supervisor is gone
/// (a live one holds the box's lock until it has removed the box).
fn stopped_one_shots(root: &Path) {
    let Ok(all) = layout::runtime(root).list() else { return };
    for s in all.into_iter().filter(|s| s.id.starts_with(layout::ONE_SHOT) && s.status == tinyrun::Status::Stopped) {
        if let Ok(Some(lock)) = boxlock::try_lock(root, &s.id) {
            let _ = remove_box(root, &s.id, &lock);
        }
    }
}

/// Removes every box that is only partly there and that nobody is making
/// or removing.
fn partial_boxes(root: &Path) {
    let (state, bundles) = (root.join("sandbox"), layout::bundles(root));
    let ids: BTreeSet<String> = names(&state).into_iter().chain(names(&bundles)).collect();
    for id in ids.iter().filter(|id| tinyrun::check_id(id).is_ok() && !whole(root, id)) {
        let Ok(Some(lock)) = boxlock::try_lock(root, id) else { continue };
        // Made whole (or removed) between the look and the lock.
        if whole(root, id) {
            continue;
        }
        let _ = remove_box(root, id, &lock);
    }
}

/// Whether box `id` has all its parts: a bundle dir, and a state dir with
/// the runtime's record.
fn whole(root: &Path, id: &str) -> bool {
    layout::state(root, id).join("state.json").exists() && layout::bundle(root, id).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bundle dir without state, and a state dir without a record or a
    /// bundle: removed once nobody holds their lock, kept while someone
    /// does (a box being made).
    #[test]
    fn partial_boxes_go_unless_someone_is_at_work_on_them() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        for d in ["sandbox-bundles/run-aa", "sandbox/sbx-bb", "sandbox-bundles/sbx-cc", "sandbox/sbx-cc"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let making = boxlock::lock(root, "sbx-cc").unwrap();
        partial_boxes(root);
        assert_eq!(names(&root.join("sandbox-bundles")), ["sbx-cc"]);
        assert_eq!(names(&root.join("sandbox")), ["sbx-cc"]);
        drop(making);
        partial_boxes(root);
        assert!(names(&root.join("sandbox-bundles")).is_empty());
        assert!(names(&root.join("sandbox")).is_empty());
    }
}
