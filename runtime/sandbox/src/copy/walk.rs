//! Reading a source tree entry by entry, from directory fd to directory
//! fd, and writing it into a staging directory: the walk of both
//! directions. What an entry is comes from `fstat` of the fd that was
//! opened, never from a look at its name beforehand.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::{FileStat, Mode, SFlag};

use super::Budget;
use crate::boxfs::{self, BoxFs, Mounted, Region};
use crate::error::{Error, Result};
use tinyrun::tree::{self, FileId};

/// Deeper directories are refused: each level holds two fds open.
const MAX_DEPTH: usize = 256;

/// One entry of a source, opened.
pub(super) enum Item {
    File(File, FileStat),
    Dir(OwnedFd, FileStat),
    Link(OsString),
    /// A fifo, socket or device: nothing to copy.
    Other,
}

/// Opens `name` in `dir` without following it, and tells what it is by
/// what was opened: an `O_PATH` fd first (so a fifo or a device is never
/// opened for reading), then, for a file or a directory, an fd to read,
/// which must be of the same file: one swapped in between (for a symlink
/// to the host's /etc/shadow, say) is looked at again, and after a few
/// tries fails with `ESTALE`.
pub(super) fn open_item(dir: &impl AsFd, name: &OsStr) -> Result<Item, Errno> {
    // A file saved by renaming a new one over it is a change too: worth
    // another look, not a failed copy.
    for _ in 0..3 {
        match open_once(dir, name) {
            Err(Errno::ESTALE) => continue,
            r => return r,
        }
    }
    Err(Errno::ESTALE)
}

fn open_once(dir: &impl AsFd, name: &OsStr) -> Result<Item, Errno> {
    let at = tree::open_at(dir, name, OFlag::O_PATH | OFlag::O_NOFOLLOW, 0)?;
    let st = nix::sys::stat::fstat(at.as_raw_fd())?;
    let again = |flags: OFlag| -> Result<(OwnedFd, FileStat), Errno> {
        let fd = tree::open_at(dir, name, flags | OFlag::O_NOFOLLOW | OFlag::O_NOCTTY | OFlag::O_NONBLOCK, 0)
            .map_err(|e| if matches!(e, Errno::ELOOP | Errno::ENOTDIR) { Errno::ESTALE } else { e })?;
        let now = nix::sys::stat::fstat(fd.as_raw_fd())?;
        if tree::file_id(&now) != tree::file_id(&st) || tree::kind(&now) != tree::kind(&st) {
            return Err(Errno::ESTALE);
        }
        Ok((fd, now))
    };
    Ok(match tree::kind(&st) {
        // An O_PATH fd of a symlink reads the link itself.
        SFlag::S_IFLNK => Item::Link(nix::fcntl::readlinkat(Some(at.as_raw_fd()), "")?),
        SFlag::S_IFREG => {
            let (fd, st) = again(OFlag::O_RDONLY)?;
            Item::File(File::from(fd), st)
        }
        SFlag::S_IFDIR => {
            let (fd, st) = again(OFlag::O_RDONLY | OFlag::O_DIRECTORY)?;
            Item::Dir(fd, st)
        }
        _ => Item::Other,
    })
}

/// `op path: why`, the copy's error for a failed call.
pub(super) fn fail<'a>(op: &str, path: &'a Path) -> impl FnOnce(Errno) -> Error + 'a {
    let op = op.to_string();
    move |e| {
        let why = match e {
            Errno::ESTALE => "it changed while it was copied".to_string(),
            Errno::ENOENT => "no such file or directory".to_string(),
            e => boxfs::why(e),
        };
        Error::Copy(format!("{op} {}: {why}", path.display()))
    }
}

/// Counts a source against the caps before anything is written. Nothing
/// is followed, so a symlink loop is only a link.
pub(super) fn prescan(item: &Item, path: &Path, depth: usize, budget: &mut Budget) -> Result<()> {
    budget.entry()?;
    match item {
        Item::File(_, st) => budget.bytes(size(st)),
        Item::Dir(fd, _) => {
            deep(depth, path)?;
            for name in tree::entries(fd).map_err(fail("read", path))? {
                let child = path.join(&name);
                match open_item(fd, &name) {
                    Ok(it) => prescan(&it, &child, depth + 1, budget)?,
                    // Gone since it was listed: not copied either.
                    Err(Errno::ENOENT) => {}
                    Err(e) => return Err(fail("open", &child)(e)),
                }
            }
            Ok(())
        }
        Item::Link(_) => Ok(()),
        Item::Other => top_only(depth, path),
    }
}

fn size(st: &FileStat) -> u64 {
    u64::try_from(st.st_size).unwrap_or(0)
}

fn deep(depth: usize, path: &Path) -> Result<()> {
    if depth >= MAX_DEPTH {
        return Err(Error::Copy(format!("{}: more than {MAX_DEPTH} directories deep", path.display())));
    }
    Ok(())
}

/// A fifo, socket or device inside a copied directory is left out; named
/// by itself, it is an error.
fn top_only(depth: usize, path: &Path) -> Result<()> {
    match depth {
        0 => Err(Error::Copy(format!("{}: not a file, directory or symlink", path.display()))),
        _ => Ok(()),
    }
}

/// Where the entry being copied is: its path (on the host, or in the box)
/// for messages and links, and in a box the tree that holds it.
#[derive(Clone)]
pub(super) struct At<'a> {
    pub(super) path: PathBuf,
    pub(super) region: Option<&'a Region>,
}

/// Copies a source into a directory, entry by entry.
pub(super) struct Copier<'a> {
    /// When copying out: the box, and whether a symlink out of the copy
    /// is followed in it (`-L`) rather than refused.
    from_box: Option<(&'a BoxFs, bool)>,
    /// Who owns what is written (the box's user when copying in); `None`:
    /// we do.
    owner: Option<(u32, u32)>,
    budget: &'a mut Budget,
    /// The directories being copied, outermost first: a followed symlink
    /// back into one of them is a loop.
    open_dirs: Vec<FileId>,
    /// Bytes written.
    pub(super) copied: u64,
}

impl<'a> Copier<'a> {
    /// Copying the caller's files into a box: every symlink as it is (the
    /// box resolves it in its own root).
    pub(super) fn into_box(owner: (u32, u32), budget: &'a mut Budget) -> Copier<'a> {
        Copier { from_box: None, owner: Some(owner), budget, open_dirs: Vec::new(), copied: 0 }
    }

    /// Copying a box's files out: symlinks must stay inside the copy.
    pub(super) fn out_of_box(fs: &'a BoxFs, follow: bool, budget: &'a mut Budget) -> Copier<'a> {
        Copier { from_box: Some((fs, follow)), owner: None, budget, open_dirs: Vec::new(), copied: 0 }
    }

    /// Copies `item` (at `at`, `depth` directories below the top of the
    /// copy) to `name` in `dir`.
    pub(super) fn copy(&mut self, item: Item, at: &At<'a>, depth: usize, dir: &OwnedFd, name: &OsStr) -> Result<()> {
        self.budget.entry()?;
        match item {
            Item::File(f, st) => self.file(f, &st, at, dir, name),
            Item::Dir(fd, st) => self.dir(&fd, &st, at, depth, dir, name),
            Item::Link(target) => self.link(&target, at, depth, dir, name),
            Item::Other => top_only(depth, &at.path),
        }
    }

    fn file(&mut self, mut from: File, st: &FileStat, at: &At<'_>, dir: &OwnedFd, name: &OsStr) -> Result<()> {
        // At most what was counted, even if it grows meanwhile.
        let len = size(st);
        self.budget.bytes(len)?;
        let flags = OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_NOFOLLOW;
        let fd = tree::open_at(dir, name, flags, 0o600).map_err(fail("create a copy of", &at.path))?;
        let mut to = File::from(fd);
        let n = std::io::copy(&mut (&mut from).take(len), &mut to).map_err(|e| Error::io("copy", &at.path, e))?;
        self.copied += n;
        self.finish(&to, st, at)
    }

    /// Gives a copied file or directory its owner and its mode, less
    /// set-id and sticky bits.
    fn finish(&self, fd: &impl AsRawFd, st: &FileStat, at: &At<'_>) -> Result<()> {
        if let Some((uid, gid)) = self.owner {
            nix::unistd::fchown(fd.as_raw_fd(), Some(uid.into()), Some(gid.into()))
                .map_err(fail("chown the copy of", &at.path))?;
        }
        nix::sys::stat::fchmod(fd.as_raw_fd(), Mode::from_bits_truncate(st.st_mode & 0o777))
            .map_err(fail("chmod the copy of", &at.path))
    }

    fn dir(
        &mut self,
        from: &OwnedFd,
        st: &FileStat,
        at: &At<'a>,
        depth: usize,
        dir: &OwnedFd,
        name: &OsStr,
    ) -> Result<()> {
        deep(depth, &at.path)?;
        nix::sys::stat::mkdirat(Some(dir.as_raw_fd()), name, Mode::from_bits_truncate(0o700))
            .map_err(fail("create a copy of", &at.path))?;
        let to = tree::subdir(dir, name).map_err(fail("open the copy of", &at.path))?;
        self.open_dirs.push(tree::file_id(st));
        for child in tree::entries(from).map_err(fail("read", &at.path))? {
            let child_at = At { path: at.path.join(&child), region: at.region };
            let item = match open_item(from, &child) {
                Ok(item) => item,
                Err(Errno::ENOENT) => continue,
                Err(e) => return Err(fail("open", &child_at.path)(e)),
            };
            if let Some((item, child_at)) = self.cross(item, child_at)? {
                self.copy(item, &child_at, depth + 1, &to, &child)?;
            }
        }
        self.open_dirs.pop();
        self.finish(&to, st, at)
    }

    /// In a box, a mount point inside a copied directory holds what the
    /// box sees there: its /work or /tmp, read from where they are, or
    /// something not the box's, left out.
    fn cross(&self, item: Item, at: At<'a>) -> Result<Option<(Item, At<'a>)>> {
        let (Some((fs, _)), Some(region)) = (self.from_box, at.region) else { return Ok(Some((item, at))) };
        let (Item::File(_, st) | Item::Dir(_, st)) = &item else { return Ok(Some((item, at))) };
        match fs.mounted(region, &tree::file_id(st)) {
            None => Ok(Some((item, at))),
            Some(Mounted::Foreign(_)) => Ok(None),
            Some(Mounted::Own { region, path, .. }) => {
                let fd = region.tree.dir(path)?;
                let st = nix::sys::stat::fstat(fd.as_raw_fd()).map_err(fail("stat", &at.path))?;
                Ok(Some((Item::Dir(fd, st), At { path: at.path, region: Some(region) })))
            }
        }
    }

    fn link(&mut self, target: &OsStr, at: &At<'a>, depth: usize, dir: &OwnedFd, name: &OsStr) -> Result<()> {
        if let Some((fs, follow)) = self.from_box.filter(|_| !stays_inside(Path::new(target), depth)) {
            if !follow {
                return Err(outside(&at.path, target));
            }
            let (item, to) = open_in_box(fs, &at.path, Some(target))?;
            if let Item::Dir(_, st) = &item {
                if self.open_dirs.contains(&tree::file_id(st)) {
                    return Err(Error::Copy(format!(
                        "{}: a symlink loop: it leads to {}, which holds it",
                        at.path.display(),
                        to.path.display()
                    )));
                }
            }
            return self.copy(item, &to, depth, dir, name);
        }
        nix::unistd::symlinkat(target, Some(dir.as_raw_fd()), name).map_err(fail("copy the symlink", &at.path))?;
        match self.owner {
            Some(owner) => tree::chown_at(dir, name, owner).map_err(fail("chown the copy of", &at.path)),
            None => Ok(()),
        }
    }
}

/// Whether a symlink `depth` directories below the top of a copy, with
/// `target`, names something inside the copy wherever the copy is put:
/// relative, and its `..`s all first and no more than the directories
/// above it in the copy (a `..` after a name would climb from wherever
/// that name leads). The top itself (depth 0) has nothing around it.
pub(super) fn stays_inside(target: &Path, depth: usize) -> bool {
    let mut ups = 0;
    let mut named = false;
    for c in target.components() {
        match c {
            Component::ParentDir if !named => ups += 1,
            Component::Normal(_) => named = true,
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    ups < depth
}

/// Opens box path `path` for reading, its last name not followed; with
/// `target`, `path` is a symlink to it, and what it names is opened,
/// following further symlinks as the box would, inside the box.
pub(super) fn open_in_box<'a>(fs: &'a BoxFs, path: &Path, target: Option<&OsStr>) -> Result<(Item, At<'a>)> {
    let mut path = path.to_path_buf();
    let following = target.is_some();
    let mut target = target.map(OsStr::to_os_string);
    let mut via = String::new();
    for _ in 0..40 {
        if let Some(t) = target.take() {
            via = format!("{} -> {}: ", path.display(), Path::new(&t).display());
            path = Path::new("/").join(boxfs::through(&path, Path::new(&t)).iter().collect::<PathBuf>());
        }
        let fellow = |e: Error| Error::Copy(format!("{via}{e}"));
        let r = fs.reach(&path, false).map_err(fellow)?;
        if !r.missing.is_empty() {
            return Err(fellow(fail("copy from", &r.path)(Errno::ENOENT)));
        }
        let item = match &r.name {
            None => {
                let st = nix::sys::stat::fstat(r.dir.as_raw_fd()).map_err(fail("stat", &r.path))?;
                Item::Dir(r.dir.try_clone().map_err(|e| Error::io("dup", &r.path, e))?, st)
            }
            Some(n) => open_item(&r.dir, n).map_err(fail("copy from", &r.path)).map_err(fellow)?,
        };
        match &item {
            Item::Dir(fd, _) => fs.admit(r.region, fd, &r.path),
            _ => fs.admit(r.region, &r.dir, &r.path),
        }
        .map_err(fellow)?;
        match item {
            Item::Link(t) if following => target = Some(t),
            item => return Ok((item, At { path: r.path, region: Some(r.region) })),
        }
    }
    Err(Error::Copy(format!("{}: too many levels of symbolic links", path.display())))
}

/// The refusal of a symlink out of the copy.
pub(super) fn outside(path: &Path, target: &OsStr) -> Error {
    Error::Copy(format!(
        "{} is a symlink to {}, outside what is copied: not copied, as the copy would name a path on the host \
         (-L copies what it names in the box)",
        path.display(),
        Path::new(target).display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_stay_inside_only_when_they_cannot_climb_out() {
        let inside = |t: &str, d| stays_inside(Path::new(t), d);
        assert!(inside("b", 1) && inside("./sub/c", 1) && inside("../x", 2) && inside("..", 2));
        // The top itself, absolute targets, climbing past the top, and a
        // `..` after a name that may itself be a link.
        assert!(!inside("b", 0) && !inside("/etc/shadow", 3) && !inside("../x", 1) && !inside("a/../../b", 3));
        assert!(!inside("a/../b", 3));
    }
}
