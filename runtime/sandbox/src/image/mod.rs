//! Image root filesystems (`--image`): a root filesystem directory, or an
//! OCI image layout directory (`LAYOUT`, or `LAYOUT:TAG` for one of its
//! images) whose layers are applied into a cache shared by every box.
//! Runs in the runtime process.
//!
//! Each layer is applied onto the view of the layers below it, as an
//! engine applies it (modules `layer` and `unpack`), verified while it is
//! read (the blob's size and sha256, and the tar's sha256 against the
//! config's `diff_ids`), and kept under its chain id (module `cache`):
//! what a layer holds once applied depends on the layers below it, and
//! the chain id names exactly that stack. Files keep the image's own
//! owners; a box sees them through id-mapped mounts of its own range
//! (module `storage`), so one copy serves every box. A root filesystem
//! directory is used in place the same way: its owners (0 to 65535) are
//! the box's, and nothing is ever written into it.
//!
//! An ordinary user (module `unprivileged`) may id-map no file system of
//! the host's, so its cache, in its own state root, is all its own: every
//! file owned by the user, which is each of its boxes' root, set-id bits
//! dropped. Its boxes see the image's files as their root's, whatever
//! owner the archive gave them; a root filesystem directory it names must
//! be its own for the same reason.
//!
//! The image config's `Env`, `User`, `WorkingDir`, `Entrypoint` and `Cmd`
//! are what module `process` makes the box's process from.

mod cache;
mod layer;
mod layout;
mod overlay;
mod unpack;

#[cfg(test)]
mod tests;

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
pub(crate) use cache::default_size as default_cache_size;
pub(crate) use layer::open_dir;
pub(crate) use unpack::Limits;

/// The fields of an image config's `config` a box's process is made from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Config {
    /// `Env`: `NAME=VALUE` entries.
    pub(crate) env: Vec<String>,
    /// `User`: `user[:group]`, names or ids.
    pub(crate) user: Option<String>,
    /// `WorkingDir`.
    pub(crate) working_dir: Option<String>,
    /// `Entrypoint`.
    pub(crate) entrypoint: Vec<String>,
    /// `Cmd`.
    pub(crate) cmd: Vec<String>,
}

/// What `--image` names.
#[derive(Debug, Clone)]
pub(crate) enum Source {
    /// A root filesystem directory.
    Dir(PathBuf),
    /// An OCI image layout directory, and the tag of the image to use.
    Layout { path: PathBuf, tag: Option<String> },
}

fn is_layout(p: &Path) -> bool {
    p.is_dir() && (p.join("oci-layout").exists() || p.join("index.json").exists())
}

impl Source {
    /// Reads `--image`'s value. A path that exists is taken whole, colons
    /// and all: a layout (it has `oci-layout` or `index.json`) or a root
    /// filesystem directory. Otherwise the text after its last colon is a
    /// tag, if what comes before it is a layout directory.
    pub(crate) fn open(arg: &Path) -> Result<Source> {
        let whole = match std::fs::canonicalize(arg) {
            Ok(p) => p,
            Err(e) => return Source::tagged(arg).ok_or_else(|| Error::io("open --image", arg, e)),
        };
        if !whole.is_dir() {
            return Err(image_error(
                &whole,
                "not a directory (give a root filesystem or an OCI image layout directory)",
            ));
        }
        Ok(if is_layout(&whole) { Source::Layout { path: whole, tag: None } } else { Source::Dir(whole) })
    }

    /// `LAYOUT:TAG`, if LAYOUT is a layout directory.
    fn tagged(arg: &Path) -> Option<Source> {
        let bytes = arg.as_os_str().as_bytes();
        let colon = bytes.iter().rposition(|b| *b == b':')?;
        let tag = std::str::from_utf8(&bytes[colon + 1..]).ok().filter(|t| !t.is_empty() && !t.contains('/'))?;
        let path = std::fs::canonicalize(Path::new(std::ffi::OsStr::from_bytes(&bytes[..colon]))).ok()?;
        is_layout(&path).then(|| Source::Layout { path, tag: Some(tag.to_string()) })
    }

    /// What makes two boxes' images the same: the directory, or the
    /// manifest's digest (a layout rewritten in place, or another tag, is
    /// another image; the digest covers the config); and the config.
    pub(crate) fn identity(&self) -> Result<(String, Option<Config>)> {
        Ok(match self {
            Source::Dir(p) => (format!("dir:{}", p.display()), None),
            Source::Layout { path, tag } => {
                let image = read(path, tag.as_deref())?;
                (format!("oci:{}", image.manifest), Some(image.config))
            }
        })
    }

    /// The image's config; a root filesystem directory has none.
    pub(crate) fn config(&self) -> Result<Option<Config>> {
        match self {
            Source::Dir(_) => Ok(None),
            Source::Layout { path, tag } => Ok(Some(read(path, tag.as_deref())?.config)),
        }
    }
}

fn read(path: &Path, tag: Option<&str>) -> Result<layout::Image> {
    layout::read(path, tag).map_err(|e| image_error(path, &e))
}

fn image_error(image: &Path, reason: &str) -> Error {
    Error::Image(format!("image {}: {reason}", image.display()))
}

/// An image made ready for one box.
#[derive(Debug, Clone)]
pub(crate) struct Prepared {
    /// The directory the read-only layers are in.
    pub(crate) dir: PathBuf,
    /// The layers, top first: directories in `dir`; none when `dir` itself
    /// is the one layer (a root filesystem directory).
    pub(crate) layers: Vec<OsString>,
    /// The image config's fields for the box's process.
    pub(crate) config: Option<Config>,
}

/// What [`prepare`] works with: the runtime root, the box's bundle dir
/// (where the layers it uses are recorded), the caps on each layer and
/// the cache's size cap in bytes.
pub(crate) struct Target<'a> {
    pub(crate) root: &'a Path,
    pub(crate) bundle: &'a Path,
    pub(crate) limits: Limits,
    pub(crate) cache_size: u64,
}

/// Makes `src` ready for the box of `t.bundle`: applies the layers not in
/// the cache yet, records that the box uses its layers, and evicts the
/// least recently used layers no box uses while the cache is over its cap.
pub(crate) fn prepare(src: &Source, t: &Target<'_>) -> Result<Prepared> {
    let (path, tag) = match src {
        Source::Dir(p) => {
            check_own(p)?;
            return Ok(Prepared { dir: p.clone(), layers: Vec::new(), config: None });
        }
        Source::Layout { path, tag } => (path, tag),
    };
    let image = read(path, tag.as_deref())?;
    let chains = chain_ids(&image.layers);
    let cache = cache::Cache::open(t.root)?;
    let present = cache.claim(t.bundle, &chains)?;
    for (i, chain) in chains.iter().enumerate().filter(|(i, _)| !present[*i]) {
        layer::apply(&cache, path, &image.layers[i], &chains[..i], chain, t.limits)
            .map_err(|e| image_error(path, &e))?;
    }
    cache.evict(t.root, t.cache_size)?;
    let layers = chains.iter().rev().map(OsString::from).collect();
    Ok(Prepared { dir: cache.layers_dir(), layers, config: Some(image.config) })
}

/// An ordinary user's root filesystem directory must be its own: the
/// box's overlay shows other users' files owned by nobody, and makes no
/// /work or /tmp over them (an image layout is unpacked as the user's).
fn check_own(p: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    if !crate::unprivileged::active() {
        return Ok(());
    }
    // Seen from the user's own namespace, where the user is 0.
    let st = std::fs::metadata(p).map_err(|e| Error::io("stat", p, e))?;
    if st.uid() != 0 {
        return Err(image_error(
            p,
            "not yours: an ordinary user's --image directory must be owned by that user (or give an OCI image \
             layout, which is unpacked as yours)",
        ));
    }
    Ok(())
}

/// The chain id of each layer, bottom first, as the image spec defines
/// it: the first layer's is its diff_id, each next one's the sha256 of
/// `"<chain id below> <diff_id>"` (both as `sha256:<hex>`).
fn chain_ids(layers: &[layout::Layer]) -> Vec<String> {
    use sha2::{Digest, Sha256};
    let mut out: Vec<String> = Vec::new();
    for l in layers {
        let next = match out.last() {
            None => l.diff_id.clone(),
            Some(below) => {
                let sum = Sha256::digest(format!("sha256:{below} sha256:{}", l.diff_id));
                sum.iter().map(|b| format!("{b:02x}")).collect()
            }
        };
        out.push(next);
    }
    out
}
