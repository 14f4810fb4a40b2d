//! Host uid/gid ranges for sandboxes: every box gets 65536 host ids of its
//! own, the same range for its uid and its gid map, so no two boxes (and no
//! box and a user's rootless containers) share a host identity.
//!
//! The ranges come from a pool, by default `0x70000000` up to `0x7FFE0000`
//! (exclusive), in 64Ki-aligned blocks. That pool lies above Debian's
//! `SUB_UID_MAX`/`SUB_GID_MAX` default (600100000), so `useradd` never hands
//! it out as a subordinate range; above systemd's container range
//! (`0x00080000`-`0x6FFFFFFF`, where systemd-nspawn picks its ranges) and
//! below its foreign-image range (from `0x7FFE0000`); and below 2^31, so no
//! tool that reads a uid as a signed 32-bit number sees it negative. With
//! 64Ki alignment a host id reads as "box base + id inside" in hex.
//! `--id-range FIRST:COUNT` or `TINYRUN_SANDBOX_ID_RANGE` choose another pool.
//!
//! Runs in the runtime process. Allocation holds an `flock` on
//! `<root>/sandbox-ids/.lock`; each range in use is a file
//! `<root>/sandbox-ids/<first host id>` holding the box's id. A range is
//! skipped if it overlaps a line of `/etc/subuid` or `/etc/subgid` or a
//! record whose box still exists; a record whose box is gone is reclaimed.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::fcntl::Flock;

use crate::error::{Error, Result};

/// Host ids per box: container ids 0..65535.
pub(crate) const BLOCK: u32 = 65_536;

/// Inside the box the program runs as this user, mapped (with the rest of
/// ids 0..65535) to the box's own range of host ids (the rest of this module).
pub(crate) const SANDBOX_UID: u32 = 1000;

/// The host ids of one box: its id `n` is host id `base + n`, except its
/// root (id 0), which is host id `root`: `base` for root's boxes, the
/// caller itself for an ordinary user's (module `unprivileged`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BoxIds {
    pub(crate) base: u32,
    /// Ids 0 to `size - 1` are mapped.
    pub(crate) size: u32,
    pub(crate) root: u32,
}

impl BoxIds {
    /// A root-made box's ids: a whole block of its own.
    pub(crate) fn block(base: u32) -> BoxIds {
        BoxIds { base, size: BLOCK, root: base }
    }

    /// The host id of the box's id `n`.
    pub(crate) fn host(&self, n: u32) -> u32 {
        if n == 0 {
            self.root
        } else {
            self.base + n
        }
    }

    /// `linux.uidMappings` (and `gidMappings`) of the box.
    pub(crate) fn map(&self) -> serde_json::Value {
        if self.root == self.base {
            return serde_json::json!([{"containerID": 0, "hostID": self.base, "size": self.size}]);
        }
        let mut m = vec![serde_json::json!({"containerID": 0, "hostID": self.root, "size": 1})];
        if self.size > 1 {
            m.push(serde_json::json!({"containerID": 1, "hostID": self.base + 1, "size": self.size - 1}));
        }
        serde_json::Value::Array(m)
    }

    /// The ids of a box from its `linux.uidMappings`, as [`BoxIds::map`]
    /// wrote them.
    pub(crate) fn from_map(map: &serde_json::Value) -> Option<BoxIds> {
        let field = |i: usize, f: &str| map.get(i)?.get(f)?.as_u64().and_then(|v| u32::try_from(v).ok());
        let root = field(0, "hostID")?;
        match field(1, "hostID") {
            Some(next) => Some(BoxIds { base: next.checked_sub(1)?, size: field(1, "size")? + 1, root }),
            None => Some(BoxIds { base: root, size: field(0, "size")?, root }),
        }
    }
}

/// Where the records live under the runtime root.
const DIR: &str = "sandbox-ids";

/// A pool of host ids, `first` up to `first + count` (exclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdRange {
    /// The lowest host id of the pool (a multiple of 65536).
    pub first: u32,
    /// How many host ids the pool holds (a multiple of 65536).
    pub count: u32,
}

impl Default for IdRange {
    /// `0x70000000` up to `0x7FFE0000`: 4094 boxes.
    fn default() -> IdRange {
        IdRange { first: 0x7000_0000, count: 0x7FFE_0000 - 0x7000_0000 }
    }
}

impl std::fmt::Display for IdRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.first, self.count)
    }
}

impl std::str::FromStr for IdRange {
    type Err = Error;

    /// `FIRST:COUNT`, each a decimal number or `0x` and hex digits.
    fn from_str(s: &str) -> Result<IdRange> {
        let bad = |why: &str| {
            Error::InvalidArgument(format!(
                "invalid id range {s:?}: {why} (use FIRST:COUNT, e.g. 1879048192:268304384)"
            ))
        };
        let (first, count) = s.trim().split_once(':').ok_or_else(|| bad("no colon"))?;
        let (first, count) =
            (number(first).ok_or_else(|| bad("bad FIRST"))?, number(count).ok_or_else(|| bad("bad COUNT"))?);
        if first % BLOCK != 0 || count % BLOCK != 0 {
            return Err(bad("FIRST and COUNT must be multiples of 65536"));
        }
        if first == 0 {
            return Err(bad("the pool must not start at host id 0"));
        }
        if count == 0 {
            return Err(bad("COUNT must be at least 65536"));
        }
        // The last block would hold 4294967295, which is no uid ("-1").
        if u64::from(first) + u64::from(count) > u64::from(u32::MAX - BLOCK + 1) {
            return Err(bad("the pool must end at or below 4294901760"));
        }
        Ok(IdRange { first, count })
    }
}

fn number(s: &str) -> Option<u32> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// Host id ranges `(first, count)` named in an `/etc/subuid`-style file:
/// `NAME_OR_UID:FIRST:COUNT` lines. A missing file means none; lines that
/// don't parse are skipped, as shadow-utils skips them.
pub(crate) fn subordinate_ranges(path: &Path) -> Result<Vec<(u64, u64)>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("read", path, e)),
    };
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let mut f = l.split(':');
            let (_owner, first, count) = (f.next()?, f.next()?.trim().parse().ok()?, f.next()?.trim().parse().ok()?);
            Some((first, count))
        })
        .collect())
}

pub(crate) fn overlaps(a: (u64, u64), b: (u64, u64)) -> bool {
    a.1 > 0 && b.1 > 0 && a.0 < b.0 + b.1 && b.0 < a.0 + a.1
}

/// Hands out and takes back host id ranges under one runtime root.
pub(crate) struct Allocator {
    dir: PathBuf,
    /// The files whose ranges are never used (`/etc/subuid`, `/etc/subgid`).
    reserved: Vec<PathBuf>,
    /// Ids per box.
    block: u32,
}

impl Allocator {
    /// The allocator of `<root>/sandbox-ids`, keeping clear of the host's
    /// `/etc/subuid` and `/etc/subgid`.
    pub(crate) fn new(root: &Path) -> Allocator {
        Allocator::with_reserved(root, vec!["/etc/subuid".into(), "/etc/subgid".into()])
    }

    pub(crate) fn with_reserved(root: &Path, reserved: Vec<PathBuf>) -> Allocator {
        Allocator { dir: root.join(DIR), reserved, block: BLOCK }
    }

    /// The allocator of an ordinary user's boxes: blocks of `block` of the
    /// ids its own user namespace maps, which are all its own (no file to
    /// keep clear of).
    pub(crate) fn unprivileged(root: &Path, block: u32) -> Allocator {
        Allocator { dir: root.join(DIR), reserved: Vec::new(), block }
    }

    fn lock(&self) -> Result<Flock<File>> {
        crate::lockdir::lock(&self.dir)
    }

    /// `(first host id, box id)` of every record.
    fn records(&self) -> Result<Vec<(u32, String, PathBuf)>> {
        let dir = std::fs::read_dir(&self.dir).map_err(|e| Error::io("read", &self.dir, e))?;
        let mut out = Vec::new();
        for entry in dir {
            let entry = entry.map_err(|e| Error::io("read", &self.dir, e))?;
            let Some(first) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
            let path = entry.path();
            let owner = std::fs::read_to_string(&path).map_err(|e| Error::io("read", &path, e))?;
            out.push((first, owner.trim().to_string(), path));
        }
        Ok(out)
    }

    /// Drops the records of boxes for which `alive` is false; returns the
    /// ranges still in use. Call with the lock held.
    fn live(&self, alive: &dyn Fn(&str) -> bool) -> Result<Vec<(u32, String)>> {
        let mut live = Vec::new();
        for (first, owner, path) in self.records()? {
            if alive(&owner) {
                live.push((first, owner));
            } else {
                remove(&path)?;
            }
        }
        Ok(live)
    }

    /// A free range of `pool` for box `id`: its first host id. `alive`
    /// tells whether the box of an existing record still exists.
    pub(crate) fn allocate(&self, pool: IdRange, id: &str, alive: &dyn Fn(&str) -> bool) -> Result<u32> {
        let _lock = self.lock()?;
        let live = self.live(alive)?;
        let block = u64::from(self.block);
        let mut taken: Vec<(u64, u64)> = live.iter().map(|(f, _)| (u64::from(*f), block)).collect();
        for file in &self.reserved {
            taken.extend(subordinate_ranges(file)?);
        }
        let end = u64::from(pool.first) + u64::from(pool.count);
        let free = (u64::from(pool.first)..end)
            .step_by(self.block as usize)
            .find(|f| *f + block <= end && !taken.iter().any(|t| overlaps((*f, block), *t)))
            .and_then(|f| u32::try_from(f).ok());
        let Some(first) = free else {
            let remedy = if self.reserved.is_empty() {
                "; terminate sandboxes, or ask for a larger range in /etc/subuid and /etc/subgid".to_string()
            } else {
                format!(
                    " or listed in {}; terminate sandboxes or choose another pool with --id-range",
                    self.reserved.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(" or ")
                )
            };
            return Err(Error::InvalidState(format!(
                "no free host id range for sandbox {id}: each of the {} blocks of {} ids in the pool {} is in use{remedy}",
                pool.count / self.block,
                self.block,
                pool,
            )));
        };
        let path = self.dir.join(first.to_string());
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| Error::io("create", &path, e))?;
        f.write_all(format!("{id}\n").as_bytes()).map_err(|e| Error::io("write", &path, e))?;
        Ok(first)
    }

    /// Frees whatever range box `id` holds (none is fine).
    pub(crate) fn release(&self, id: &str) -> Result<()> {
        if !self.dir.exists() {
            return Ok(());
        }
        let _lock = self.lock()?;
        for (_, owner, path) in self.records()? {
            if owner == id {
                remove(&path)?;
            }
        }
        Ok(())
    }

    /// Frees the ranges of boxes that no longer exist.
    pub(crate) fn collect(&self, alive: &dyn Fn(&str) -> bool) -> Result<()> {
        if !self.dir.exists() {
            return Ok(());
        }
        let _lock = self.lock()?;
        self.live(alive).map(drop)
    }
}

fn remove(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("remove id record", path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULT_FIRST: u32 = 0x7000_0000;

    fn fixture(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn range_syntax() {
        assert_eq!("1879048192:268304384".parse::<IdRange>().unwrap(), IdRange::default());
        assert_eq!(IdRange::default(), POOL);
        assert_eq!(
            "0x70000000:0x20000".parse::<IdRange>().unwrap(),
            IdRange { first: DEFAULT_FIRST, count: 2 * BLOCK }
        );
        for bad in ["", "65536", "65536:", "0:65536", "65537:65536", "65536:1000", "65536:0", "0xFFFF0000:65536", "x:y"]
        {
            let e = bad.parse::<IdRange>().unwrap_err().to_string();
            assert!(e.contains("invalid id range") && e.contains("FIRST:COUNT"), "{bad}: {e}");
        }
        assert_eq!("4294836224:65536".parse::<IdRange>().unwrap().first, 0xFFFE_0000);
    }

    #[test]
    fn default_pool_is_clear_of_debian_and_systemd() {
        let p = IdRange::default();
        assert!(p.first > 600_100_000, "above Debian's SUB_UID_MAX");
        assert!(p.first > 0x6FFF_FFFF, "above systemd's container range");
        assert!(u64::from(p.first) + u64::from(p.count) <= 1 << 31, "below 2^31");
        assert_eq!((p.first % BLOCK, p.count % BLOCK), (0, 0));
    }

    #[test]
    fn subuid_files_are_read_tolerantly() {
        let t = tempfile::tempdir().unwrap();
        let f = fixture(
            t.path(),
            "subuid",
            "alice:100000:65536\n1001:165536:65536\n\n# a comment\nbroken line\nbob:x:1\n  carol:300000:10  \n",
        );
        assert_eq!(subordinate_ranges(&f).unwrap(), vec![(100_000, 65_536), (165_536, 65_536), (300_000, 10)]);
        assert_eq!(subordinate_ranges(&t.path().join("missing")).unwrap(), vec![]);
        let e = subordinate_ranges(t.path()).unwrap_err().to_string();
        assert!(e.contains("read"), "a directory is an error, not an empty list: {e}");
    }

    fn alloc(t: &Path, subuid: &str, subgid: &str) -> Allocator {
        let reserved = vec![fixture(t, "subuid", subuid), fixture(t, "subgid", subgid)];
        Allocator::with_reserved(&t.join("root"), reserved)
    }

    const ALL: &dyn Fn(&str) -> bool = &|_| true;
    const POOL: IdRange = IdRange { first: DEFAULT_FIRST, count: 0x7FFE_0000 - DEFAULT_FIRST };

    #[test]
    fn boxes_get_disjoint_ranges_and_free_them() {
        let t = tempfile::tempdir().unwrap();
        let a = alloc(t.path(), "", "");
        let one = a.allocate(POOL, "one", ALL).unwrap();
        let two = a.allocate(POOL, "two", ALL).unwrap();
        assert_eq!((one, two), (DEFAULT_FIRST, DEFAULT_FIRST + BLOCK));
        let rec = std::fs::read_to_string(t.path().join("root/sandbox-ids").join(one.to_string())).unwrap();
        assert_eq!(rec, "one\n");
        a.release("one").unwrap();
        assert_eq!(a.allocate(POOL, "three", ALL).unwrap(), DEFAULT_FIRST, "a released range is reused");
        a.release("nobody").unwrap();
        assert_eq!(a.allocate(POOL, "four", ALL).unwrap(), DEFAULT_FIRST + 2 * BLOCK);
    }

    #[test]
    fn subordinate_ranges_are_skipped() {
        let t = tempfile::tempdir().unwrap();
        // subuid covers the first block partly, subgid the third by a uid owner.
        let subuid = format!("alice:{}:10\n", DEFAULT_FIRST + 100);
        let subgid = format!("1000:{}:65536\n", DEFAULT_FIRST + BLOCK);
        let a = alloc(t.path(), &subuid, &subgid);
        assert_eq!(a.allocate(POOL, "x", ALL).unwrap(), DEFAULT_FIRST + 2 * BLOCK);
    }

    #[test]
    fn records_of_gone_boxes_are_reclaimed() {
        let t = tempfile::tempdir().unwrap();
        let a = alloc(t.path(), "", "");
        a.allocate(POOL, "gone", ALL).unwrap();
        a.allocate(POOL, "here", ALL).unwrap();
        let alive = |id: &str| id == "here";
        a.collect(&alive).unwrap();
        let names: Vec<String> = std::fs::read_dir(t.path().join("root/sandbox-ids"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| !n.starts_with('.'))
            .collect();
        assert_eq!(names, vec![(DEFAULT_FIRST + BLOCK).to_string()]);
        assert_eq!(a.allocate(POOL, "new", &alive).unwrap(), DEFAULT_FIRST);
    }

    #[test]
    fn box_ids_round_trip_through_their_map() {
        let root_made = BoxIds::block(DEFAULT_FIRST);
        assert_eq!(root_made.map(), serde_json::json!([{"containerID": 0, "hostID": DEFAULT_FIRST, "size": BLOCK}]));
        let own = BoxIds { base: 8192, size: 4096, root: 0 };
        assert_eq!((own.host(0), own.host(1000)), (0, 9192));
        assert_eq!(
            own.map(),
            serde_json::json!([{"containerID": 0, "hostID": 0, "size": 1}, {"containerID": 1, "hostID": 8193, "size": 4095}])
        );
        let single = BoxIds { base: 0, size: 1, root: 0 };
        for ids in [root_made, own, single] {
            assert_eq!(BoxIds::from_map(&ids.map()), Some(ids));
        }
    }

    #[test]
    fn an_unprivileged_pool_is_cut_in_its_own_blocks() {
        let t = tempfile::tempdir().unwrap();
        let a = Allocator::unprivileged(t.path(), 4096);
        let pool = IdRange { first: 4096, count: 2 * 4096 };
        assert_eq!(a.allocate(pool, "a", ALL).unwrap(), 4096);
        assert_eq!(a.allocate(pool, "b", ALL).unwrap(), 8192);
        let e = a.allocate(pool, "c", ALL).unwrap_err().to_string();
        assert!(e.contains("2 blocks of 4096 ids") && e.contains("/etc/subuid"), "{e}");
    }

    #[test]
    fn an_exhausted_pool_is_a_clear_error() {
        let t = tempfile::tempdir().unwrap();
        let pool = IdRange { first: DEFAULT_FIRST, count: 2 * BLOCK };
        let a = alloc(t.path(), &format!("u:{DEFAULT_FIRST}:1\n"), "");
        a.allocate(pool, "a", ALL).unwrap();
        let e = a.allocate(pool, "b", ALL).unwrap_err().to_string();
        assert!(e.contains("no free host id range for sandbox b") && e.contains("--id-range"), "{e}");
        assert!(e.contains(&pool.to_string()), "{e}");
    }
}
