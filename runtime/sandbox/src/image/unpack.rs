//! Applying one image layer, a tar stream from an archive nobody
//! reviewed, onto the view of the layers below it, as an engine applies
//! it: containerd mounts the parent layers' overlay with a fresh upper
//! directory and unpacks through the merged view, and so do we (module
//! `layer` makes the view). So a layer that adds `lib/x` over a lower
//! layer's `lib -> usr/lib` puts `x` in `usr/lib`, and a whiteout is a
//! deletion in that view (overlayfs records it in the upper directory in
//! its own format). Runs in the runtime process, as the host's root, so
//! every step assumes a hostile archive:
//!
//! - names are checked before use: absolute names and `..` components are
//!   refused, never cleaned up into something else;
//! - an entry's parent directory is resolved inside the view
//!   (`openat2(RESOLVE_IN_ROOT)`, `tinyrun::tree`): a symlink on the way,
//!   the archive's own or a lower layer's, is followed as the box would
//!   follow it, and an absolute or `..` link stays inside the image;
//!   directories missing on the way are made;
//! - the entry itself is made relative to that parent's fd and never
//!   followed: whatever had its name is removed without following it,
//!   files are made `O_EXCL | O_NOFOLLOW`;
//! - device nodes are skipped (the box's /dev is its own tmpfs), extended
//!   attributes are ignored (no `security.capability`, no `trusted.overlay.*`
//!   from an archive), and only permission bits are kept;
//! - the entries, and the bytes they hold, are capped ([`Limits`]);
//! - owners are the image's own ids, 0 to 65535 (a larger one becomes
//!   65534, nobody): the cache is the host root's alone, and each box sees
//!   the layers through an id-mapped mount (module `storage`).
//!
//! Whiteouts follow the image spec: `.wh.NAME` hides `NAME` of the layers
//! below, `.wh..wh..opq` every entry of its directory from the layers
//! below; neither hides what the same layer adds. The bottom layer has
//! nothing below it, so its whiteouts hide nothing.

use std::collections::hash_map::RandomState;
use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::hash::BuildHasher;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::{Mode, SFlag};
use tar::EntryType;

use crate::ids::BLOCK;
use tinyrun::tree::{self, Tree};

/// Caps on one layer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Most bytes of file content (uncompressed).
    pub(crate) max_bytes: u64,
    /// Most archive entries.
    pub(crate) max_entries: u64,
}

impl Default for Limits {
    /// 8 GiB and a million entries: well above real images (a full Debian
    /// with Python is under 1 GiB and 50,000 files), far below a full disk.
    fn default() -> Limits {
        Limits { max_bytes: 8 << 30, max_entries: 1_000_000 }
    }
}

/// Longest entry name accepted (PATH_MAX).
const MAX_NAME: usize = 4096;

/// An archive's id as the cache keeps it: the image's own, if a box's map
/// (65536 ids) holds it, else nobody.
fn image_id(id: u64) -> u32 {
    u32::try_from(id).ok().filter(|i| *i < BLOCK).unwrap_or(65_534)
}

/// An entry's owner in the cache. An ordinary user's cache is all its own
/// (id 0 of its namespace): it may own no other id every box of its could
/// map (module `storage`).
fn owner(h: &tar::Header) -> (u32, u32) {
    if crate::unprivileged::active() {
        return (0, 0);
    }
    (image_id(h.uid().unwrap_or(0)), image_id(h.gid().unwrap_or(0)))
}

/// An entry's mode in the cache: an ordinary user's cache has no set-id
/// file (they would be set to the user itself).
fn mode_of(h: &tar::Header) -> Mode {
    let keep = if crate::unprivileged::active() { 0o1777 } else { 0o7777 };
    Mode::from_bits_truncate(h.mode().unwrap_or(0o644) & keep)
}

/// What an unpack did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stats {
    pub(crate) entries: u64,
    pub(crate) bytes: u64,
    /// Device nodes in the archive, not made.
    pub(crate) devices_skipped: u64,
}

/// Where a layer is applied: the view (the layer's own directory, or the
/// overlay of it over the layers below), and whether there are layers
/// below for whiteouts to hide.
pub(crate) struct View<'a> {
    pub(crate) tree: &'a Tree,
    pub(crate) has_lower: bool,
}

/// What this layer made so far, by entry name: a whiteout hides only what
/// the layers below have. Names are kept as a keyed hash (a million names
/// of 4 KiB each would not fit in memory); a collision, which only the
/// archive's own author could aim for, only keeps one of its own entries
/// from being hidden.
struct Made {
    seen: HashSet<u64>,
    keys: RandomState,
}

impl Made {
    fn key<'a>(&self, names: impl IntoIterator<Item = &'a OsStr>) -> u64 {
        let joined: Vec<&[u8]> = names.into_iter().map(OsStrExt::as_bytes).collect();
        self.keys.hash_one(joined)
    }
}

/// Applies the tar stream `r` onto `view`.
pub(crate) fn unpack(r: impl Read, view: &View<'_>, limits: Limits) -> Result<Stats, String> {
    let mut archive = tar::Archive::new(r);
    let mut stats = Stats::default();
    let mut made = Made { seen: HashSet::new(), keys: RandomState::new() };
    for entry in archive.entries().map_err(|e| format!("not a tar archive: {e}"))? {
        let mut entry = entry.map_err(|e| format!("bad tar archive: {e}"))?;
        stats.entries += 1;
        if stats.entries > limits.max_entries {
            return Err(format!("more than {} entries (the cap on entries per layer)", limits.max_entries));
        }
        stats.bytes = stats.bytes.saturating_add(entry.size());
        if stats.bytes > limits.max_bytes {
            return Err(format!("more than {} bytes of files (the cap on bytes per layer)", limits.max_bytes));
        }
        let raw = entry.path_bytes().into_owned();
        let names = entry_names(&raw)?;
        apply(view, &mut entry, &names, &mut made, &mut stats)
            .map_err(|e| format!("entry {:?}: {e}", String::from_utf8_lossy(&raw)))?;
    }
    Ok(stats)
}

/// The components of an entry name; absolute names and `..` are refused.
pub(crate) fn entry_names(raw: &[u8]) -> Result<Vec<OsString>, String> {
    let shown = || String::from_utf8_lossy(raw).into_owned();
    if raw.len() > MAX_NAME {
        return Err(format!("entry name longer than {MAX_NAME} bytes"));
    }
    if raw.first() == Some(&b'/') {
        return Err(format!("entry {:?} has an absolute name", shown()));
    }
    let mut names = Vec::new();
    for part in raw.split(|b| *b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => return Err(format!("entry {:?} has a `..` component", shown())),
            p => names.push(OsString::from_vec(p.to_vec())),
        }
    }
    Ok(names)
}

fn errno(op: &'static str) -> impl Fn(Errno) -> String {
    move |e| format!("{op}: {e}")
}

fn apply(
    view: &View<'_>,
    entry: &mut tar::Entry<'_, impl Read>,
    names: &[OsString],
    made: &mut Made,
    stats: &mut Stats,
) -> Result<(), String> {
    let h = entry.header().clone();
    let owner = owner(&h);
    let mode = mode_of(&h);
    let kind = h.entry_type();
    let Some((name, parents)) = names.split_last() else {
        // "./": the layer's root directory itself.
        if kind.is_dir() {
            set_owner_mode(&view.tree.dir(Path::new("/")).map_err(|e| e.to_string())?, owner, mode)?;
        }
        return Ok(());
    };
    if let Some(hidden) = name.as_bytes().strip_prefix(b".wh.") {
        return whiteout(view, parents, hidden, made);
    }
    if matches!(kind, EntryType::Char | EntryType::Block) {
        stats.devices_skipped += 1;
        return Ok(());
    }
    let parent = parent_dir(view.tree, parents)?;
    made.seen.insert(made.key(names.iter().map(OsString::as_os_str)));
    match kind {
        EntryType::Directory => make_dir(&parent, name, owner, mode),
        EntryType::Regular | EntryType::Continuous | EntryType::GNUSparse => {
            write_file(&parent, name, entry, h.mtime().unwrap_or(0), owner, mode)
        }
        EntryType::Symlink => {
            let target = entry.link_name_bytes().ok_or("symlink without a target")?.into_owned();
            replace(&parent, name)?;
            nix::unistd::symlinkat(target.as_slice(), Some(parent.as_raw_fd()), name.as_os_str())
                .map_err(errno("symlink"))?;
            tree::chown_at(&parent, name, owner).map_err(errno("chown"))
        }
        EntryType::Link => {
            let target = entry.link_name_bytes().ok_or("hard link without a target")?.into_owned();
            hard_link(view.tree, &target, &parent, name)
        }
        EntryType::Fifo => {
            replace(&parent, name)?;
            let perm = Mode::from_bits_truncate(mode.bits() & 0o777);
            nix::sys::stat::mknodat(Some(parent.as_raw_fd()), name.as_os_str(), SFlag::S_IFIFO, perm, 0)
                .map_err(errno("mkfifo"))?;
            tree::chown_at(&parent, name, owner).map_err(errno("chown"))
        }
        // Metadata entries (pax, GNU long names) are read by the tar crate
        // itself; anything else carries nothing a root filesystem needs.
        _ => Ok(()),
    }
}

/// A directory entry: an existing directory is kept (layers add to it),
/// anything else in its place, a symlink included, is replaced (as
/// containerd and Docker do).
fn make_dir(parent: &OwnedFd, name: &OsString, owner: (u32, u32), mode: Mode) -> Result<(), String> {
    match tree::lstat_at(parent, name) {
        Ok(st) if tree::kind(&st) == SFlag::S_IFDIR => {}
        Ok(_) => replace(parent, name)?,
        Err(_) => {}
    }
    match nix::sys::stat::mkdirat(Some(parent.as_raw_fd()), name.as_os_str(), Mode::from_bits_truncate(0o700)) {
        Ok(()) | Err(Errno::EEXIST) => {}
        Err(e) => return Err(errno("mkdir")(e)),
    }
    let dir = tree::subdir(parent, name).map_err(errno("open directory"))?;
    set_owner_mode(&dir, owner, mode)
}

/// A regular file, made afresh (O_EXCL, no symlink followed) and owned and
/// moded only once its contents are in.
fn write_file(
    parent: &OwnedFd,
    name: &OsString,
    contents: &mut impl Read,
    mtime: u64,
    owner: (u32, u32),
    mode: Mode,
) -> Result<(), String> {
    replace(parent, name)?;
    let flags = OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_NOFOLLOW;
    let fd = tree::open_at(parent, name, flags, 0o600).map_err(errno("create"))?;
    let mut file = std::fs::File::from(fd);
    std::io::copy(contents, &mut file).map_err(|e| format!("write: {e}"))?;
    let t = nix::sys::time::TimeSpec::new(i64::try_from(mtime).unwrap_or(0), 0);
    nix::sys::stat::futimens(file.as_raw_fd(), &t, &t).map_err(errno("set times"))?;
    set_owner_mode(&OwnedFd::from(file), owner, mode)
}

/// chown before chmod: chown clears set-id bits.
fn set_owner_mode(fd: &OwnedFd, (uid, gid): (u32, u32), mode: Mode) -> Result<(), String> {
    nix::unistd::fchown(fd.as_raw_fd(), Some(uid.into()), Some(gid.into())).map_err(errno("chown"))?;
    nix::sys::stat::fchmod(fd.as_raw_fd(), mode).map_err(errno("chmod"))
}

/// The directory an entry goes in, resolved inside the view (symlinks
/// followed there, never out of it); directories missing on the way are
/// made (0755, root's), as engines make them.
fn parent_dir(view: &Tree, parents: &[OsString]) -> Result<OwnedFd, String> {
    let path: PathBuf = std::iter::once(OsStr::new("/")).chain(parents.iter().map(OsString::as_os_str)).collect();
    let shown = || path.display().to_string();
    match view.dir(&path) {
        Ok(d) => Ok(d),
        Err(e) if e.errno == Errno::ENOENT => {
            view.mkdir_all(&path, 0o755).map_err(|e| format!("make its parent {}: {}", shown(), e.errno))?;
            view.dir(&path).map_err(|e| format!("open its parent {}: {}", shown(), e.errno))
        }
        Err(e) if e.errno == Errno::ENOTDIR => Err(format!("its parent {} is not a directory", shown())),
        Err(e) => Err(format!("open its parent {}: {}", shown(), e.errno)),
    }
}

/// Clears the way for a new entry: whatever has the name goes (a later
/// entry replaces an earlier one, as tar does).
fn replace(parent: &OwnedFd, name: &OsString) -> Result<(), String> {
    tree::remove_at(parent, name).map_err(errno("replace"))
}

/// `.wh.NAME` removes `NAME` from the view, `.wh..wh..opq` every entry of
/// its directory, except what this layer made itself.
fn whiteout(view: &View<'_>, parents: &[OsString], hidden: &[u8], made: &Made) -> Result<(), String> {
    let opaque = hidden == b".wh..opq";
    if !opaque && (hidden.is_empty() || hidden == b"." || hidden == b".." || hidden.starts_with(b".wh.")) {
        return Err("a whiteout of no valid name".into());
    }
    if !view.has_lower {
        return Ok(());
    }
    let path: PathBuf = std::iter::once(OsStr::new("/")).chain(parents.iter().map(OsString::as_os_str)).collect();
    let dir = match view.tree.dir(&path) {
        Ok(d) => d,
        // Nothing there to hide.
        Err(e) if matches!(e.errno, Errno::ENOENT | Errno::ENOTDIR) => return Ok(()),
        Err(e) => return Err(format!("open {}: {}", path.display(), e.errno)),
    };
    let names =
        if opaque { tree::entries(&dir).map_err(errno("list"))? } else { vec![OsString::from_vec(hidden.to_vec())] };
    for name in names {
        let key = made.key(parents.iter().map(OsString::as_os_str).chain([name.as_os_str()]));
        if !made.seen.contains(&key) {
            replace(&dir, &name)?;
        }
    }
    Ok(())
}

/// A hard link to an earlier entry (of this layer or one below), found as
/// an entry's parent is; `linkat` without AT_SYMLINK_FOLLOW links a
/// symlink itself, never its target.
fn hard_link(view: &Tree, target: &[u8], parent: &OwnedFd, name: &OsString) -> Result<(), String> {
    let tnames = entry_names(target)?;
    let (tname, tparents) = tnames.split_last().ok_or("hard link to the layer's root")?;
    let tpath: PathBuf = std::iter::once(OsStr::new("/")).chain(tparents.iter().map(OsString::as_os_str)).collect();
    let tdir =
        view.dir(&tpath).map_err(|e| format!("hard link to {:?}: {}", String::from_utf8_lossy(target), e.errno))?;
    match tree::lstat_at(&tdir, tname) {
        Ok(st) if tree::kind(&st) != SFlag::S_IFDIR => {}
        Ok(_) => return Err("hard link to a directory".into()),
        Err(e) => return Err(format!("hard link to {:?}: {e}", String::from_utf8_lossy(target))),
    }
    replace(parent, name)?;
    nix::unistd::linkat(
        Some(tdir.as_raw_fd()),
        tname.as_os_str(),
        Some(parent.as_raw_fd()),
        name.as_os_str(),
        nix::fcntl::AtFlags::empty(),
    )
    .map_err(errno("link"))
}
