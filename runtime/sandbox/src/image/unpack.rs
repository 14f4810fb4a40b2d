//! Unpacking one image layer, a tar stream from an archive nobody
//! reviewed, into a fresh directory of the cache. Runs in the runtime
//! process, as the host's root, so every step assumes a hostile archive:
//!
//! - names are checked before use: absolute names and `..` components are
//!   refused, never cleaned up into something else;
//! - every entry is made relative to its parent's fd, reached from the
//!   layer's root one `O_NOFOLLOW` directory at a time, so a symlink the
//!   archive planted earlier (`a -> /etc`, then `a/passwd`) is refused, not
//!   followed; files are made `O_EXCL`, symlinks never followed;
//! - device nodes are skipped (the box's /dev is its own tmpfs), extended
//!   attributes are ignored (no `security.capability`, no `trusted.overlay.*`
//!   from an archive), and only permission bits are kept;
//! - the entries, and the bytes they hold, are capped ([`Limits`]);
//! - owners are shifted into the box's range of host ids ([`IdShift`]), so
//!   a file owned by 0 in the image is owned by the box's root inside it.
//!
//! Whiteouts become overlayfs's own markers, since layers are stacked as
//! overlay lower directories: `.wh.NAME` a 0:0 character device `NAME`
//! (which opens nothing: no driver has major 0), `.wh..wh..opq` the
//! `trusted.overlay.opaque` attribute on its directory.

use std::ffi::OsString;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::{Mode, SFlag};
use tar::EntryType;

use crate::ids::BLOCK;
use crate::sys;
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

/// Maps an archive's ids into a box's range of host ids: `id` inside is
/// host id `base + id`; an id above the range becomes the box's nobody.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IdShift {
    pub(crate) base: u32,
}

impl IdShift {
    pub(crate) fn map(self, id: u64) -> u32 {
        let inside = u32::try_from(id).ok().filter(|i| *i < BLOCK).unwrap_or(65_534);
        self.base + inside
    }

    fn owner(self, h: &tar::Header) -> (u32, u32) {
        (self.map(h.uid().unwrap_or(0)), self.map(h.gid().unwrap_or(0)))
    }
}

/// What an unpack did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stats {
    pub(crate) entries: u64,
    pub(crate) bytes: u64,
    /// Device nodes in the archive, not made.
    pub(crate) devices_skipped: u64,
}

/// Unpacks the tar stream `r` into the existing, empty directory `dest`.
pub(crate) fn unpack(r: impl Read, dest: &Path, ids: IdShift, limits: Limits) -> Result<Stats, String> {
    let root = Tree::open_one_mount(dest).map_err(|e| e.to_string())?;
    let mut archive = tar::Archive::new(r);
    let mut stats = Stats::default();
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
        apply(&root, &mut entry, &names, ids, &mut stats)
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
    root: &Tree,
    entry: &mut tar::Entry<'_, impl Read>,
    names: &[OsString],
    ids: IdShift,
    stats: &mut Stats,
) -> Result<(), String> {
    let h = entry.header().clone();
    let owner = ids.owner(&h);
    let mode = Mode::from_bits_truncate(h.mode().unwrap_or(0o644) & 0o7777);
    let kind = h.entry_type();
    let Some((name, parents)) = names.split_last() else {
        // "./": the layer's root directory itself.
        if kind.is_dir() {
            set_owner_mode(&root.dir(Path::new("/")).map_err(|e| e.to_string())?, owner, mode)?;
        }
        return Ok(());
    };
    let parent = parent_dir(root, parents, ids.map(0))?;
    if let Some(hidden) = name.as_bytes().strip_prefix(b".wh.") {
        return whiteout(&parent, hidden, owner);
    }
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
            hard_link(root, &target, &parent, name, ids)
        }
        EntryType::Fifo => {
            replace(&parent, name)?;
            let perm = Mode::from_bits_truncate(mode.bits() & 0o777);
            nix::sys::stat::mknodat(Some(parent.as_raw_fd()), name.as_os_str(), SFlag::S_IFIFO, perm, 0)
                .map_err(errno("mkfifo"))?;
            tree::chown_at(&parent, name, owner).map_err(errno("chown"))
        }
        EntryType::Char | EntryType::Block => {
            stats.devices_skipped += 1;
            Ok(())
        }
        // Metadata entries (pax, GNU long names) are read by the tar crate
        // itself; anything else carries nothing a root filesystem needs.
        _ => Ok(()),
    }
}

/// A directory entry: an existing directory is kept (layers add to it),
/// anything else in its place is replaced.
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

/// The directory an entry goes in, reached without following any symlink;
/// directories the archive didn't list are made (0755, the box's root's).
fn parent_dir(root: &Tree, parents: &[OsString], root_id: u32) -> Result<OwnedFd, String> {
    let mut dir = root.dir(Path::new("/")).map_err(|e| e.to_string())?;
    for p in parents {
        dir = match tree::subdir(&dir, p) {
            Ok(d) => d,
            Err(Errno::ENOENT) => {
                nix::sys::stat::mkdirat(Some(dir.as_raw_fd()), p.as_os_str(), Mode::from_bits_truncate(0o755))
                    .map_err(errno("mkdir"))?;
                tree::chown_at(&dir, p, (root_id, root_id)).map_err(errno("chown"))?;
                tree::subdir(&dir, p).map_err(errno("open directory"))?
            }
            Err(Errno::ELOOP | Errno::ENOTDIR) => {
                return Err(format!("its parent {:?} is a symlink or not a directory", p.to_string_lossy()))
            }
            Err(e) => return Err(errno("open directory")(e)),
        };
    }
    Ok(dir)
}

/// Clears the way for a new entry: whatever has the name goes (a later
/// entry replaces an earlier one, as tar does).
fn replace(parent: &OwnedFd, name: &OsString) -> Result<(), String> {
    tree::remove_at(parent, name).map_err(errno("replace"))
}

fn whiteout(parent: &OwnedFd, hidden: &[u8], owner: (u32, u32)) -> Result<(), String> {
    if hidden == b".wh..opq" {
        return sys::fsetxattr(parent, c"trusted.overlay.opaque", b"y").map_err(errno("mark opaque"));
    }
    if hidden.is_empty() || hidden == b"." || hidden == b".." || hidden.starts_with(b".wh.") {
        return Err("a whiteout of no valid name".into());
    }
    let name = OsString::from_vec(hidden.to_vec());
    replace(parent, &name)?;
    let dev = nix::sys::stat::makedev(0, 0);
    nix::sys::stat::mknodat(Some(parent.as_raw_fd()), name.as_os_str(), SFlag::S_IFCHR, Mode::empty(), dev)
        .map_err(errno("make whiteout"))?;
    tree::chown_at(parent, &name, owner).map_err(errno("chown"))
}

/// A hard link to an earlier entry of the same layer, found without
/// following symlinks; `linkat` without AT_SYMLINK_FOLLOW links a symlink
/// itself, never its target.
fn hard_link(root: &Tree, target: &[u8], parent: &OwnedFd, name: &OsString, ids: IdShift) -> Result<(), String> {
    let tnames = entry_names(target)?;
    let (tname, tparents) = tnames.split_last().ok_or("hard link to the layer's root")?;
    let tdir = parent_dir(root, tparents, ids.map(0))?;
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
