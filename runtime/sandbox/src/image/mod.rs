//! Image root filesystems (`--image`): a root filesystem directory, or an
//! OCI image layout directory whose layers are unpacked into a cache.
//! Runs in the runtime process.
//!
//! The cache is `<root>/sandbox-images/<base>/sha256/<hex>`: layer `hex`
//! unpacked (module `unpack`) with its owners shifted into the box range
//! that starts at host id `base`, so a file the image gives to uid 0 is
//! owned by that box's root. Owners are shifted at unpack time, not by an
//! id-mapped mount, because that works on every kernel and file system the
//! runtime supports (tmpfs took id-mapped mounts only in 6.3, and /run,
//! the default root, is a tmpfs on Debian 12), and needs no user namespace
//! made up front. The price is one copy per layer per range in use; ranges
//! are handed out lowest first, so consecutive boxes reuse range 0 and its
//! copies. A layer is verified while it is unpacked (the blob's size and
//! sha256, and the tar's sha256 against the config's `diff_ids`) into a
//! temporary directory, renamed into place only when everything matched:
//! a directory in the cache is complete and verified, and is never written
//! again. Layers are stacked as overlay lower directories (whiteouts
//! become overlay's markers), so each is unpacked once and shared by
//! every image that has it.
//!
//! A root filesystem directory is used as it is, as the one lower layer:
//! it is not copied, so its owners are the host's (a file of the host's
//! root shows as nobody in the box).

mod layout;
mod unpack;

#[cfg(test)]
mod tests;

use std::io::{BufRead, Read};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
pub(crate) use unpack::{IdShift, Limits};

/// Where the cache lives under the runtime root.
pub(crate) const CACHE: &str = "sandbox-images";

/// What `--image` names.
#[derive(Debug, Clone)]
pub(crate) enum Source {
    /// A root filesystem directory.
    Dir(PathBuf),
    /// An OCI image layout directory.
    Layout(PathBuf),
}

impl Source {
    /// Looks at `path`: a layout has `oci-layout` or `index.json`.
    pub(crate) fn open(path: &Path) -> Result<Source> {
        let p = std::fs::canonicalize(path).map_err(|e| Error::io("open --image", path, e))?;
        if !p.is_dir() {
            return Err(image_error(&p, "not a directory (give a root filesystem or an OCI image layout directory)"));
        }
        if p.join("oci-layout").exists() || p.join("index.json").exists() {
            Ok(Source::Layout(p))
        } else {
            Ok(Source::Dir(p))
        }
    }

    /// What makes two boxes' images the same: the directory, or the
    /// layout's manifest digest (a layout rewritten in place is another
    /// image).
    pub(crate) fn identity(&self) -> Result<String> {
        Ok(match self {
            Source::Dir(p) => format!("dir:{}", p.display()),
            Source::Layout(p) => format!("oci:{}", layout::read(p).map_err(|e| image_error(p, &e))?.manifest),
        })
    }
}

fn image_error(image: &Path, reason: &str) -> Error {
    Error::Image(format!("image {}: {reason}", image.display()))
}

/// An image made ready for one box range.
#[derive(Debug, Clone)]
pub(crate) struct Prepared {
    /// The overlay's lower directories, top layer first.
    pub(crate) lowers: Vec<PathBuf>,
    /// The image config's environment.
    pub(crate) env: Vec<String>,
}

/// Makes `src` ready for a box whose ids start at host id `base`,
/// unpacking the layers not in the cache yet.
pub(crate) fn prepare(root: &Path, src: &Source, base: u32, limits: Limits) -> Result<Prepared> {
    match src {
        Source::Dir(p) => Ok(Prepared { lowers: vec![p.clone()], env: Vec::new() }),
        Source::Layout(p) => {
            let image = layout::read(p).map_err(|e| image_error(p, &e))?;
            let dir = root.join(CACHE).join(base.to_string()).join("sha256");
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)
                .map_err(|e| Error::io("create", &dir, e))?;
            let mut lowers = Vec::new();
            for l in &image.layers {
                lowers.push(ensure_layer(p, &dir, l, IdShift { base }, limits).map_err(|e| image_error(p, &e))?);
            }
            lowers.reverse();
            Ok(Prepared { lowers, env: image.env })
        }
    }
}

/// The cached directory of layer `l`, unpacked and verified first if it
/// isn't there.
fn ensure_layer(layout: &Path, dir: &Path, l: &layout::Layer, ids: IdShift, limits: Limits) -> Result<PathBuf, String> {
    let done = dir.join(&l.digest);
    if done.is_dir() {
        return Ok(done);
    }
    let tmp = dir.join(format!(".tmp-{}-{}", l.digest, std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::DirBuilder::new().mode(0o755).create(&tmp).map_err(|e| format!("create {}: {e}", tmp.display()))?;
    let unpacked = std::os::unix::fs::chown(&tmp, Some(ids.map(0)), Some(ids.map(0)))
        .map_err(|e| format!("chown {}: {e}", tmp.display()))
        .and_then(|()| unpack_verified(layout, l, &tmp, ids, limits));
    if let Err(e) = unpacked {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(format!("layer sha256:{}: {e}", l.digest));
    }
    if std::fs::rename(&tmp, &done).is_err() {
        // Another box unpacked the same layer first: use its copy.
        let _ = std::fs::remove_dir_all(&tmp);
        if !done.is_dir() {
            return Err(format!("layer sha256:{}: could not move it into {}", l.digest, done.display()));
        }
    }
    Ok(done)
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

/// Unpacks layer `l` into `dest`, then checks the blob's size and digest
/// and the tar's digest (`diff_id`); a mismatch is an error, and the
/// caller removes `dest`.
fn unpack_verified(layout: &Path, l: &layout::Layer, dest: &Path, ids: IdShift, limits: Limits) -> Result<(), String> {
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
        unpack::unpack(&mut tar, dest, ids, limits)?;
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
    match &l.diff_id {
        Some(d) if *d != tar_hex => {
            Err(format!("the unpacked tar does not match the config's diff_id sha256:{d} (it is sha256:{tar_hex})"))
        }
        _ => Ok(()),
    }
}
