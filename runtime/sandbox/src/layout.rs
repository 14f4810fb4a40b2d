//! Where a root keeps its boxes, and what boxes are called. Under a
//! runtime root (`--root`):
//! - `sandbox/<id>`: the runtime's state of box `id` (a [`Runtime`] of
//!   its own, so `tinyrun list` on the root shows no box);
//! - `sandbox-bundles/<id>`: the box's bundle dir, its storage's mount
//!   point (module `storage`), holding its deadline and idle timeout;
//! - `sandbox-seccomp`: the compiled seccomp programs boxes share;
//! - beside them the records of other modules (`ids`, `boxlock`,
//!   `tombstone`, `keys`, `reaper`, `net`, `image`).
//!
//! A box's id is a prefix and 12 random hex digits: `run-` for a one-shot
//! run's box, the caller's for a launched one, a pool key for a pool's.

use std::io::Read;
use std::path::{Path, PathBuf};

use tinyrun::Runtime;

use crate::error::{Error, Result};

/// One-shot boxes' ids start with this; a stopped one whose supervisor is
/// gone is garbage (module `gc`).
pub(crate) const ONE_SHOT: &str = "run";

/// Pool boxes' ids start with this, followed by the rest of the key.
pub(crate) const POOL: &str = "pool";

/// The runtime that holds the root's boxes.
pub(crate) fn runtime(root: &Path) -> Runtime {
    Runtime::new(root.join("sandbox"))
}

/// Where the root's boxes' bundle dirs are.
pub(crate) fn bundles(root: &Path) -> PathBuf {
    root.join("sandbox-bundles")
}

/// Box `id`'s bundle dir.
pub(crate) fn bundle(root: &Path, id: &str) -> PathBuf {
    bundles(root).join(id)
}

/// Box `id`'s state dir (the runtime's).
pub(crate) fn state(root: &Path, id: &str) -> PathBuf {
    root.join("sandbox").join(id)
}

/// The runtime root of bundle dir `bundle`.
pub(crate) fn root_of(bundle: &Path) -> &Path {
    bundle.parent().and_then(Path::parent).unwrap_or(Path::new("/"))
}

/// Where boxes' compiled seccomp programs are kept, one per profile: every
/// box of the default profile after the first skips libseccomp.
pub(crate) fn seccomp_cache(root: &Path) -> PathBuf {
    root.join("sandbox-seccomp")
}

/// Whether box `id` still exists: while its state or its bundle dir does,
/// its range of host ids (and its network) stays taken.
pub(crate) fn box_exists(root: &Path) -> impl Fn(&str) -> bool + '_ {
    move |id| tinyrun::check_id(id).is_ok() && (state(root, id).exists() || bundle(root, id).exists())
}

/// A new box id: `prefix` and 12 random hex digits.
pub(crate) fn new_id(prefix: &str) -> Result<String> {
    let mut b = [0u8; 6];
    let urandom = Path::new("/dev/urandom");
    std::fs::File::open(urandom).and_then(|mut f| f.read_exact(&mut b)).map_err(|e| Error::io("read", urandom, e))?;
    Ok(format!("{prefix}-{}", b.iter().map(|x| format!("{x:02x}")).collect::<String>()))
}

/// The pool key of box `id` (`<key>-<random>`); `None` for another box.
pub(crate) fn pool_key(id: &str) -> Option<&str> {
    id.strip_prefix(POOL)?;
    id.rsplit_once('-').map(|(k, _)| k)
}

/// The entries of `dir` (none if it can't be read), less dot files.
pub(crate) fn names(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).filter(|n| !n.starts_with('.')).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_comes_from_a_pool_box_id_only() {
        assert_eq!(pool_key("pool0123abcd-00aa11bb22cc"), Some("pool0123abcd"));
        assert_eq!(pool_key("sbx-00aa11bb22cc"), None);
        assert_eq!(pool_key("run-00aa11bb22cc"), None);
    }
}
