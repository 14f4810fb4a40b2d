//! The image cache, `<root>/sandbox-images`: the host root's alone (0700),
//! since its files keep the image's own owners, set-id bits included.
//!
//! ```text
//! layers/<chain>        a layer applied onto the layers below it; never written again
//! layers/<chain>.used   its size in bytes; its mtime is when a box last used it
//! usage                 the bytes of all layers (recounted at each eviction)
//! .lock                 held while the above changes (flock)
//! .tmp-<chain>-<pid>    a layer being applied; a dead process's is reclaimed
//! .evict-<chain>-<pid>  a layer being removed
//! ```
//!
//! A box records the layers it uses in its bundle dir (`image-layers`,
//! written under the lock before the layers are looked at) and the record
//! goes with the bundle dir: eviction, under the same lock, never takes a
//! layer a box of the root records. While `usage` is over the cap
//! (`--image-cache-size`), the least recently used of the other layers go.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::Flock;
use nix::sys::stat::SFlag;

use crate::error::{Error, Result};
use tinyrun::tree::{self, Tree};

/// Where the cache lives under the runtime root.
const CACHE: &str = "sandbox-images";
const LAYERS: &str = "layers";
const USED: &str = ".used";
const USAGE: &str = "usage";
/// The record in a box's bundle dir of the layers it uses.
const RECORD: &str = "image-layers";

/// The cap when `--image-cache-size` is not given: 4 GiB, or half the
/// file system the cache is on if that is smaller (the default root,
/// /run, is a tmpfs in memory on most systems).
pub(crate) fn default_size(root: &Path) -> u64 {
    let half =
        nix::sys::statvfs::statvfs(root).map(|s| s.blocks().saturating_mul(s.fragment_size()) / 2).unwrap_or(u64::MAX);
    half.min(4 << 30)
}

/// The cache of one runtime root.
pub(crate) struct Cache {
    dir: PathBuf,
}

impl Cache {
    /// Opens the cache of `root`, making it if needed; refuses a cache
    /// directory that is not the host root's and private.
    pub(crate) fn open(root: &Path) -> Result<Cache> {
        let dir = root.join(CACHE);
        let layers = dir.join(LAYERS);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&layers)
            .map_err(|e| Error::io("create", &layers, e))?;
        let meta = std::fs::symlink_metadata(&dir).map_err(|e| Error::io("stat", &dir, e))?;
        if !meta.is_dir() || meta.uid() != 0 {
            return Err(Error::Image(format!("image cache {} is not a directory of root's", dir.display())));
        }
        if meta.mode() & 0o077 != 0 {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| Error::io("chmod", &dir, e))?;
        }
        Ok(Cache { dir })
    }

    fn lock(&self) -> Result<Flock<File>> {
        crate::lockdir::lock(&self.dir)
    }

    /// The directory the layers are in.
    pub(crate) fn layers_dir(&self) -> PathBuf {
        self.dir.join(LAYERS)
    }

    fn used_file(&self, chain: &str) -> PathBuf {
        self.dir.join(LAYERS).join(format!("{chain}{USED}"))
    }

    /// Records that the box of `bundle` uses layers `chains`, marks those
    /// in the cache as used now, and says which are there.
    pub(crate) fn claim(&self, bundle: &Path, chains: &[String]) -> Result<Vec<bool>> {
        let _lock = self.lock()?;
        let record = bundle.join(RECORD);
        write_file(&record, chains.join("\n").as_bytes())?;
        let now = nix::sys::time::TimeSpec::UTIME_NOW;
        let flag = nix::sys::stat::UtimensatFlags::NoFollowSymlink;
        Ok(chains
            .iter()
            .map(|c| nix::sys::stat::utimensat(None, &self.used_file(c), &now, &now, flag).is_ok())
            .collect())
    }

    /// A directory for applying layer `chain` in, unique to this process.
    pub(crate) fn temp_dir(&self, chain: &str) -> PathBuf {
        self.dir.join(format!(".tmp-{chain}-{}", std::process::id()))
    }

    /// Moves layer `chain`, applied and verified in `upper` (`bytes` on
    /// disk), into place, unless another process put it there first.
    pub(crate) fn commit(&self, upper: &Path, chain: &str, bytes: u64) -> Result<()> {
        let _lock = self.lock()?;
        let done = self.layers_dir().join(chain);
        if done.is_dir() {
            return Ok(());
        }
        std::fs::rename(upper, &done).map_err(|e| Error::io("move into the image cache", upper, e))?;
        write_file(&self.used_file(chain), bytes.to_string().as_bytes())?;
        self.set_usage(self.usage().saturating_add(bytes))
    }

    fn usage(&self) -> u64 {
        std::fs::read_to_string(self.dir.join(USAGE)).ok().and_then(|t| t.trim().parse().ok()).unwrap_or(0)
    }

    fn set_usage(&self, bytes: u64) -> Result<()> {
        let tmp = self.dir.join(format!(".{USAGE}-{}", std::process::id()));
        write_file(&tmp, bytes.to_string().as_bytes())?;
        let path = self.dir.join(USAGE);
        std::fs::rename(&tmp, &path).map_err(|e| Error::io("write", &path, e))
    }

    /// While the cache holds more than `cap` bytes, removes the least
    /// recently used layer no box of `root` records; also reclaims what a
    /// dead process left half made. A cache within its cap costs one read.
    pub(crate) fn evict(&self, root: &Path, cap: u64) -> Result<()> {
        if self.usage() <= cap {
            return Ok(());
        }
        let doomed = {
            let _lock = self.lock()?;
            let layers = self.layers()?;
            let in_use = recorded(root);
            let total: u64 = layers.iter().map(|l| l.bytes).sum();
            let victims = victims(&layers, &in_use, cap);
            let mut doomed = self.reclaimable()?;
            for v in &victims {
                let to = self.dir.join(format!(".evict-{}-{}", v.chain, std::process::id()));
                let from = self.layers_dir().join(&v.chain);
                std::fs::rename(&from, &to).map_err(|e| Error::io("evict", &from, e))?;
                let _ = std::fs::remove_file(self.used_file(&v.chain));
                doomed.push(to);
            }
            self.set_usage(total - victims.iter().map(|v| v.bytes).sum::<u64>())?;
            doomed
        };
        // Outside the lock: removing a large tree takes time.
        for d in doomed {
            remove_tree(&d)?;
        }
        Ok(())
    }

    /// Every layer in the cache, with its size and last use.
    fn layers(&self) -> Result<Vec<Entry>> {
        let dir = self.layers_dir();
        let mut out = Vec::new();
        for e in std::fs::read_dir(&dir).map_err(|e| Error::io("read", &dir, e))? {
            let e = e.map_err(|e| Error::io("read", &dir, e))?;
            let Some(chain) = e.file_name().to_str().filter(|n| !n.contains('.')).map(str::to_string) else { continue };
            let used = std::fs::metadata(self.used_file(&chain));
            let bytes = std::fs::read_to_string(self.used_file(&chain)).ok().and_then(|t| t.trim().parse().ok());
            // A layer whose size was never written (a crash between the
            // two) is measured now, and counts as the oldest.
            let bytes = match bytes {
                Some(b) => b,
                None => disk_usage(&e.path()).map_err(|err| Error::io("measure", e.path(), err.into()))?,
            };
            let last_used = used.map_or(0, |m| m.mtime());
            out.push(Entry { chain, bytes, last_used });
        }
        Ok(out)
    }

    /// Temporary directories of processes that are gone, and evictions a
    /// crash interrupted.
    fn reclaimable(&self) -> Result<Vec<PathBuf>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(&self.dir).map_err(|e| Error::io("read", &self.dir, e))?.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let pid = name.rsplit('-').next().and_then(|p| p.parse::<i32>().ok());
            let dead =
                pid.is_some_and(|p| p != std::process::id() as i32 && !Path::new(&format!("/proc/{p}")).exists());
            if dead && [".tmp-", ".evict-", ".usage-"].iter().any(|p| name.starts_with(p)) {
                out.push(e.path());
            }
        }
        Ok(out)
    }
}

/// A layer of the cache as eviction sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    chain: String,
    bytes: u64,
    /// Unix seconds.
    last_used: i64,
}

/// The layers to remove to bring `layers` within `cap` bytes: least
/// recently used first, never one in `in_use`. If those that are in use
/// are over the cap by themselves, every other one goes.
fn victims<'a>(layers: &'a [Entry], in_use: &std::collections::HashSet<String>, cap: u64) -> Vec<&'a Entry> {
    let mut total: u64 = layers.iter().map(|l| l.bytes).sum();
    let mut free: Vec<&Entry> = layers.iter().filter(|l| !in_use.contains(&l.chain)).collect();
    free.sort_by_key(|l| (l.last_used, l.chain.clone()));
    let mut out = Vec::new();
    for l in free {
        if total <= cap {
            break;
        }
        total -= l.bytes;
        out.push(l);
    }
    out
}

/// The layers every box of `root` records (module doc). A record that
/// can't be read pins nothing; its box's layers are found again by the
/// next eviction once it can.
fn recorded(root: &Path) -> std::collections::HashSet<String> {
    let bundles = crate::layout::bundles(root);
    let Ok(dir) = std::fs::read_dir(&bundles) else { return Default::default() };
    dir.flatten()
        .filter_map(|b| std::fs::read_to_string(b.path().join(RECORD)).ok())
        .flat_map(|t| t.lines().map(str::to_string).collect::<Vec<_>>())
        .collect()
}

/// Writes a small file only root may read.
fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| Error::io("create", path, e))?;
    f.write_all(bytes).map_err(|e| Error::io("write", path, e))
}

/// Removes `path` and everything below it, never following a symlink.
pub(crate) fn remove_tree(path: &Path) -> Result<()> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else { return Ok(()) };
    let dir = tinyrun::tree::Tree::open(parent)?.dir(Path::new("/"))?;
    tinyrun::tree::remove_at(&dir, name).map_err(|e| Error::io("remove", path, e.into()))
}

/// Bytes on disk of the tree at `dir` (blocks, as `du` counts them),
/// walked without following links.
pub(crate) fn disk_usage(dir: &Path) -> Result<u64, Errno> {
    let top = Tree::open(dir).map_err(|e| e.errno)?.dir(Path::new("/")).map_err(|e| e.errno)?;
    let mut total = 0u64;
    let mut stack = vec![top];
    while let Some(d) = stack.pop() {
        total += nix::sys::stat::fstat(d.as_raw_fd()).map(|s| blocks(&s))?;
        for name in tree::entries(&d)? {
            let st = tree::lstat_at(&d, &name)?;
            if tree::kind(&st) == SFlag::S_IFDIR {
                stack.push(tree::subdir(&d, &name)?);
            } else {
                total += blocks(&st);
            }
        }
    }
    Ok(total)
}

fn blocks(st: &nix::sys::stat::FileStat) -> u64 {
    u64::try_from(st.st_blocks).unwrap_or(0).saturating_mul(512)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(chain: &str, bytes: u64, last_used: i64) -> Entry {
        Entry { chain: chain.into(), bytes, last_used }
    }

    #[test]
    fn the_least_recently_used_free_layers_go_first() {
        let layers = [e("a", 10, 5), e("b", 10, 1), e("c", 10, 3), e("d", 10, 2)];
        let pinned: std::collections::HashSet<String> = ["b".to_string()].into();
        let names = |v: Vec<&Entry>| v.iter().map(|l| l.chain.clone()).collect::<Vec<_>>();
        assert_eq!(names(victims(&layers, &pinned, 40)), Vec::<String>::new(), "within the cap");
        assert_eq!(names(victims(&layers, &pinned, 25)), ["d", "c"], "b is in use, d and c are the oldest free");
        assert_eq!(names(victims(&layers, &pinned, 0)), ["d", "c", "a"], "never one in use");
    }
}
