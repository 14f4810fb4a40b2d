//! The tar side of `PUT/GET /v1/boxes/{id}/archive`, on host directories
//! private to the server (`<root>/sandbox-api/tmp`); what goes into or out
//! of the box then goes through `sandbox cp`, with its symlink rules and
//! caps. Runs in the server, on a blocking thread (it forks nothing).
//!
//! Unpacking a client's archive: only regular files, directories and
//! symlinks are made (a hard link, a device or a fifo is refused), each
//! entry's path must stay inside the directory (no `..`, no absolute
//! path), and the tar crate refuses to write through a symlink an earlier
//! entry made. Owners and modes beyond the permission bits are dropped: the
//! copy into the box makes everything the box user's.

use std::path::{Component, Path};

use crate::error::{ApiError, ApiResult};

/// The cap on entries, as `sandbox cp` has.
const MAX_ENTRIES: u64 = 100_000;

fn bad(what: impl Into<String>) -> ApiError {
    ApiError::field(crate::error::Code::BadRequest, "archive", what)
}

/// Unpacks `tar` into `dir` (made); returns the entries made.
pub(crate) fn unpack(tar: &Path, dir: &Path, limit: u64) -> ApiResult<u64> {
    let f = std::fs::File::open(tar).map_err(|e| ApiError::internal(format!("open {}: {e}", tar.display())))?;
    std::fs::create_dir_all(dir).map_err(|e| ApiError::internal(format!("mkdir {}: {e}", dir.display())))?;
    let mut a = tar::Archive::new(f);
    a.set_preserve_permissions(false);
    a.set_preserve_ownerships(false);
    a.set_unpack_xattrs(false);
    let (mut n, mut bytes) = (0u64, 0u64);
    for entry in a.entries().map_err(|e| bad(format!("not a tar archive: {e}")))? {
        let mut entry = entry.map_err(|e| bad(format!("a broken tar archive: {e}")))?;
        let path = entry.path().map_err(|e| bad(format!("an entry's path: {e}")))?.into_owned();
        if !path.components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir)) {
            return Err(bad(format!("the entry {} leads out of the directory", path.display())));
        }
        let kind = entry.header().entry_type();
        if !(kind.is_file() || kind.is_dir() || kind.is_symlink()) {
            return Err(bad(format!(
                "the entry {} is a {kind:?}: only files, directories and symlinks",
                path.display()
            )));
        }
        n += 1;
        bytes = bytes.saturating_add(entry.size());
        if n > MAX_ENTRIES || bytes > limit {
            return Err(ApiError::new(
                crate::error::Code::TooLarge,
                format!("the archive is over the copy cap of {limit} bytes or {MAX_ENTRIES} entries"),
            ));
        }
        // unpack_in refuses a path that would land outside `dir` through a
        // symlink an earlier entry made.
        match entry.unpack_in(dir) {
            Ok(true) => {}
            Ok(false) => return Err(bad(format!("the entry {} leads out of the directory", path.display()))),
            Err(e) => return Err(bad(format!("unpack {}: {e}", path.display()))),
        }
    }
    Ok(n)
}

/// Packs `dir`'s entries (relative to it, symlinks as they are) into `tar`.
pub(crate) fn pack(dir: &Path, tar: &Path) -> ApiResult<()> {
    let f = std::fs::File::create(tar).map_err(|e| ApiError::internal(format!("create {}: {e}", tar.display())))?;
    let mut b = tar::Builder::new(f);
    b.follow_symlinks(false);
    b.append_dir_all(".", dir).map_err(|e| ApiError::internal(format!("pack {}: {e}", dir.display())))?;
    b.into_inner().map_err(|e| ApiError::internal(format!("pack: {e}")))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archive(add: impl FnOnce(&mut tar::Builder<Vec<u8>>)) -> tempfile::NamedTempFile {
        let mut b = tar::Builder::new(Vec::new());
        add(&mut b);
        let t = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(t.path(), b.into_inner().unwrap()).unwrap();
        t
    }

    fn header(kind: tar::EntryType, size: u64) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(size);
        h.set_mode(0o644);
        h
    }

    #[test]
    fn escapes_and_links_out_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let t = archive(|b| {
            let mut h = header(tar::EntryType::Symlink, 0);
            b.append_link(&mut h, "out", "/etc").unwrap();
            let mut h = header(tar::EntryType::Regular, 1);
            b.append_data(&mut h, "out/shadow", &b"x"[..]).unwrap();
        });
        assert!(unpack(t.path(), &d.path().join("a"), 1 << 20).is_err());
        let t = archive(|b| {
            let mut h = header(tar::EntryType::Link, 0);
            b.append_link(&mut h, "hard", "/etc/shadow").unwrap();
        });
        assert!(unpack(t.path(), &d.path().join("b"), 1 << 20).is_err());
        let t = archive(|b| {
            let mut h = header(tar::EntryType::Regular, 3);
            b.append_data(&mut h, "ok/f", &b"abc"[..]).unwrap();
        });
        assert_eq!(unpack(t.path(), &d.path().join("c"), 1 << 20).unwrap(), 1);
        assert_eq!(std::fs::read(d.path().join("c/ok/f")).unwrap(), b"abc");
        assert!(unpack(t.path(), &d.path().join("e"), 2).is_err(), "over the cap");
    }
}
