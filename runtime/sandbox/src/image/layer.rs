//! Applying one layer into the cache: the view it is applied onto, its
//! verification, and its move into place. Runs in the runtime process.
//!
//! The view is what containerd's overlay snapshotter gives a layer: an
//! overlay of the layers below (read-only) with a fresh, empty upper
//! directory, in which the tar is unpacked (module `unpack`); the upper
//! directory is then the layer. It is made with the new mount API and
//! attached nowhere (only its fd reaches it), so nothing else sees it and
//! a crash leaves no mount behind. Features that would make the upper
//! directory depend on more than its own files (`redirect_dir`,
//! `metacopy`, `index`) are off. The bottom layer has nothing below: it is
//! unpacked into the empty directory itself.
//!
//! Everything is unpacked into `.tmp-<chain>-<pid>` and moved into place
//! only once the blob's size and sha256 and the tar's sha256 (the
//! config's `diff_id`) matched: a layer in the cache is complete and
//! verified, and is never written again.

use std::io::{BufRead, Read};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

use sha2::{Digest, Sha256};

use super::cache::{disk_usage, remove_tree, Cache};
use super::layout::{self, Layer};
use super::overlay;
use super::unpack::{self, Limits, View};
use tinyrun::tree::Tree;

/// Applies layer `l` of the layout at `layout`, whose chain id is `chain`,
/// onto the cached layers `below` (chain ids, bottom first), and moves it
/// into the cache. The caller has recorded that it uses `below`, so they
/// stay while it works.
pub(crate) fn apply(
    cache: &Cache,
    layout: &Path,
    l: &Layer,
    below: &[String],
    chain: &str,
    limits: Limits,
) -> Result<(), String> {
    let tmp = cache.temp_dir(chain);
    let _ = remove_tree(&tmp);
    let (upper, work) = (tmp.join("upper"), tmp.join("work"));
    let made = (|| {
        let mut b = std::fs::DirBuilder::new();
        for d in [&tmp, &upper, &work] {
            b.mode(if *d == upper { 0o755 } else { 0o700 })
                .create(d)
                .map_err(|e| format!("create {}: {e}", d.display()))?;
        }
        let view = view(cache, below, &upper, &work)?;
        unpack_verified(layout, l, &View { tree: &view, has_lower: !below.is_empty() }, limits)?;
        // Unmounted when the last fd of the view goes, before the move.
        drop(view);
        disk_usage(&upper).map_err(|e| format!("measure {}: {e}", upper.display()))
    })();
    let done = made.and_then(|bytes| cache.commit(&upper, chain, bytes).map_err(|e| e.to_string()));
    let _ = remove_tree(&tmp);
    done.map_err(|e| format!("layer sha256:{}: {e}", l.digest))
}

/// The tree a layer is unpacked through: `upper` itself for the bottom
/// layer, else an overlay of `below` under it. The upper directory's root
/// takes the merged root's owner and mode first (an overlay shows the
/// upper's), so the layer changes them only if its archive does.
fn view(cache: &Cache, below: &[String], upper: &Path, work: &Path) -> Result<Tree, String> {
    if below.is_empty() {
        return Tree::open_one_mount(upper).map_err(|e| e.to_string());
    }
    let open = |p: &Path| open_dir(p).map_err(|e| format!("open {}: {e}", p.display()));
    let lowers = below.iter().rev().map(|c| open(&cache.layers_dir().join(c))).collect::<Result<Vec<_>, _>>()?;
    let (up, wk) = (open(upper)?, open(work)?);
    let top = nix::sys::stat::fstat(lowers[0].as_raw_fd()).map_err(|e| format!("stat a lower layer: {e}"))?;
    nix::unistd::fchown(up.as_raw_fd(), Some(top.st_uid.into()), Some(top.st_gid.into()))
        .map_err(|e| format!("chown {}: {e}", upper.display()))?;
    nix::sys::stat::fchmod(up.as_raw_fd(), nix::sys::stat::Mode::from_bits_truncate(top.st_mode & 0o7777))
        .map_err(|e| format!("chmod {}: {e}", upper.display()))?;
    // In an ordinary user's namespace overlayfs keeps its own marks in
    // user.overlay.* (trusted.* is the initial namespace's), and redirects
    // are then never followed (an explicit redirect_dir=off conflicts).
    let off: &[(&std::ffi::CStr, &std::ffi::CStr)] = if crate::unprivileged::active() {
        &[(c"userxattr", c""), (c"metacopy", c"off"), (c"index", c"off")]
    } else {
        &[(c"redirect_dir", c"off"), (c"metacopy", c"off"), (c"index", c"off")]
    };
    let parts = overlay::Parts {
        lowers: lowers.iter().map(AsFd::as_fd).collect(),
        upper: (up.as_fd(), wk.as_fd()),
        options: off,
    };
    let attrs = rustix::mount::MountAttrFlags::MOUNT_ATTR_NOSUID | rustix::mount::MountAttrFlags::MOUNT_ATTR_NODEV;
    let mnt = overlay::mount(&parts, attrs).map_err(|e| {
        let own =
            if crate::unprivileged::active() { "; an ordinary user's, 5.11 and the distribution's leave" } else { "" };
        format!("mount the layers below as an overlay to apply it onto: {e} (needs Linux 6.13{own})")
    })?;
    Ok(Tree::from_mount(mnt, upper))
}

/// A directory of ours opened for reading (overlay takes layers as such
/// fds, not `O_PATH` ones), refusing a symlink.
pub(crate) fn open_dir(p: &Path) -> std::io::Result<OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW).open(p)?;
    Ok(OwnedFd::from(f))
}

/// Counts and hashes what is read through it.
struct Hashing<R> {
    inner: R,
    hash: Sha256,
    bytes: u64,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hash.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
}

impl<R> Hashing<R> {
    fn new(inner: R) -> Hashing<R> {
        Hashing { inner, hash: Sha256::new(), bytes: 0 }
    }

    fn hex(&self) -> String {
        self.hash.clone().finalize().iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// Unpacks layer `l` onto `view`, then checks the blob's size and digest
/// and the tar's digest (`diff_id`); a mismatch is an error, and the
/// caller throws the upper directory away.
fn unpack_verified(layout: &Path, l: &Layer, view: &View<'_>, limits: Limits) -> Result<(), String> {
    let file = layout::open_blob(layout, &l.digest)?;
    let mut blob = Hashing::new(file);
    let tar_hex = {
        let mut buffered = std::io::BufReader::new(&mut blob);
        let magic = buffered.fill_buf().map_err(|e| format!("read: {e}"))?.to_vec();
        let decoded: Box<dyn Read + '_> = if magic.starts_with(&[0x1f, 0x8b]) {
            Box::new(flate2::read::MultiGzDecoder::new(buffered))
        } else if magic.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Box::new(ruzstd::StreamingDecoder::new(buffered).map_err(|e| format!("zstd: {e}"))?)
        } else {
            Box::new(buffered)
        };
        let mut tar = Hashing::new(decoded);
        unpack::unpack(&mut tar, view, limits)?;
        // The tar's end-of-archive padding counts toward its digest; a
        // stream that goes on past the byte cap is refused.
        let rest = std::io::copy(&mut (&mut tar).take(limits.max_bytes), &mut std::io::sink())
            .map_err(|e| format!("read: {e}"))?;
        if rest >= limits.max_bytes {
            return Err(format!("more than {} bytes after the archive's end", limits.max_bytes));
        }
        tar.hex()
    };
    std::io::copy(&mut (&mut blob).take(l.size.saturating_add(1)), &mut std::io::sink())
        .map_err(|e| format!("read: {e}"))?;
    if blob.bytes != l.size {
        return Err(format!("the blob has {} bytes or more, its descriptor says {}", blob.bytes, l.size));
    }
    if blob.hex() != l.digest {
        return Err(format!("the blob does not match its digest (it hashes to sha256:{})", blob.hex()));
    }
    if l.diff_id != tar_hex {
        return Err(format!(
            "the unpacked tar does not match the config's diff_id sha256:{} (it is sha256:{tar_hex})",
            l.diff_id
        ));
    }
    Ok(())
}
