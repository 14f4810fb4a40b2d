//! File operations on trees that something hostile wrote or still writes
//! to: a container's image, a sandbox box's storage, an image layer being
//! unpacked, a caller's directory an agent can write. One layer for all of
//! them, used by init (mount points, device nodes, masked paths) and by the
//! sandbox on the host (mount points, copies, layers).
//!
//! - A path is resolved inside a root with `openat2(RESOLVE_IN_ROOT |
//!   RESOLVE_NO_MAGICLINKS)`: `..`, absolute symlinks and relative symlinks
//!   all stay inside the root, and magic links such as `/proc/self/root`
//!   are refused. The result is an fd; callers then act on the fd (`*at`
//!   calls, `/proc/self/fd/N` for mounts), so the path is never walked a
//!   second time.
//! - Below a directory fd, last components are never followed
//!   ([`lstat_at`], [`subdir`], [`open_at`] with `O_NOFOLLOW`,
//!   [`remove_at`]), so walks go from directory fd to directory fd and a
//!   symlink planted or swapped in mid-walk never leads anywhere.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{FileStat, Mode, SFlag};

use crate::error::SysError;
use crate::sys::fs::{open_path, openat2, reopen_dir};

/// A directory that paths are resolved under, as if it were `/`.
pub struct Tree {
    fd: OwnedFd,
    path: PathBuf,
    resolve: u64,
}

impl Tree {
    /// Opens `path` (already trusted: a bundle's rootfs, a directory the
    /// runtime made) as a resolution root.
    pub fn open(path: &Path) -> Result<Tree, SysError> {
        let fd = open_path(path, OFlag::O_PATH | OFlag::O_DIRECTORY)?;
        Ok(Tree { fd, path: path.to_path_buf(), resolve: libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS })
    }

    /// Like [`Tree::open`], for a tree that is one mount: resolution also
    /// refuses to cross onto another mount (`RESOLVE_NO_XDEV`), so nothing
    /// mounted inside it later can be reached through it.
    pub fn open_one_mount(path: &Path) -> Result<Tree, SysError> {
        let mut t = Tree::open(path)?;
        t.resolve |= libc::RESOLVE_NO_XDEV;
        Ok(t)
    }

    /// A tree rooted at a mount the caller holds only as an fd (a detached
    /// mount made by `fsmount` or `open_tree`, attached nowhere), resolved
    /// as one mount ([`Tree::open_one_mount`]); `shown` names it in
    /// messages.
    pub fn from_mount(fd: OwnedFd, shown: &Path) -> Tree {
        let resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS | libc::RESOLVE_NO_XDEV;
        Tree { fd, path: shown.to_path_buf(), resolve }
    }

    /// The root's `O_PATH` fd.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Where the root is on the host, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Resolves `path` inside the root and opens it with `flags`.
    pub fn open_in(&self, path: &Path, flags: OFlag) -> Result<OwnedFd, SysError> {
        let path = if path.as_os_str().is_empty() { Path::new("/") } else { path };
        openat2(self.fd.as_raw_fd(), path, flags, self.resolve)
            .map_err(|e| SysError::new("openat2", self.describe(path), e))
    }

    /// Opens directory `path` for reading (listing, `*at` calls, fchown).
    pub fn dir(&self, path: &Path) -> Result<OwnedFd, SysError> {
        self.open_in(path, OFlag::O_DIRECTORY | OFlag::O_RDONLY)
    }

    /// `mkdir -p` inside the root; returns an `O_PATH` fd on the directory.
    /// A symlink on the way is followed inside the root, and what it names
    /// is created there (as the kernel would resolve it once the root is `/`).
    pub fn mkdir_all(&self, path: &Path, mode: u32) -> Result<OwnedFd, SysError> {
        self.mkdir_all_depth(path, mode, None, 0)
    }

    /// [`Tree::mkdir_all`], giving each directory it makes to `owner`.
    pub fn mkdir_all_owned(&self, path: &Path, mode: u32, owner: (u32, u32)) -> Result<OwnedFd, SysError> {
        self.mkdir_all_depth(path, mode, Some(owner), 0)
    }

    fn mkdir_all_depth(
        &self,
        path: &Path,
        mode: u32,
        owner: Option<(u32, u32)>,
        depth: u32,
    ) -> Result<OwnedFd, SysError> {
        // The kernel gives up after 40 links; so do we.
        if depth > 40 {
            return Err(SysError::new("mkdir", self.describe(path), Errno::ELOOP));
        }
        let comps: Vec<&std::ffi::OsStr> = normal_components(path).collect();
        let mut cur = self.open_in(Path::new("/"), OFlag::O_PATH | OFlag::O_DIRECTORY)?;
        let mut so_far = PathBuf::from("/");
        for (i, comp) in comps.iter().enumerate() {
            let parent = so_far.clone();
            so_far.push(comp);
            match self.open_in(&so_far, OFlag::O_PATH | OFlag::O_DIRECTORY) {
                Ok(fd) => {
                    cur = fd;
                    continue;
                }
                Err(e) if e.errno != Errno::ENOENT => return Err(e),
                Err(_) => {}
            }
            // The name is a plain component and `cur` was resolved safely,
            // so mkdirat can't be redirected.
            match nix::sys::stat::mkdirat(Some(cur.as_raw_fd()), *comp, Mode::from_bits_truncate(mode)) {
                Ok(()) => {
                    if let Some(owner) = owner {
                        chown_at(&cur, comp, owner).map_err(|e| SysError::new("chown", self.describe(&so_far), e))?;
                    }
                }
                Err(Errno::EEXIST) => {
                    // A symlink whose target is missing: make the target,
                    // read relative to where the link is, inside the root.
                    let target = nix::fcntl::readlinkat(Some(cur.as_raw_fd()), *comp)
                        .map_err(|e| SysError::new("readlink", self.describe(&so_far), e))?;
                    let target = Path::new(&target);
                    let mut next = if target.is_absolute() { target.to_path_buf() } else { parent.join(target) };
                    for rest in &comps[i + 1..] {
                        next.push(rest);
                    }
                    return self.mkdir_all_depth(&next, mode, owner, depth + 1);
                }
                Err(e) => return Err(SysError::new("mkdirat", self.describe(&so_far), e)),
            }
            cur = self.open_in(&so_far, OFlag::O_PATH | OFlag::O_DIRECTORY)?;
        }
        Ok(cur)
    }

    /// Makes sure `path` exists inside the root as a directory or (when `file`)
    /// as a regular file, creating parents; returns an `O_PATH` fd on it.
    pub fn ensure(&self, path: &Path, file: bool) -> Result<OwnedFd, SysError> {
        if !file {
            return self.mkdir_all(path, 0o755);
        }
        if let Ok(fd) = self.open_in(path, OFlag::O_PATH) {
            return Ok(fd);
        }
        let parent = path.parent().unwrap_or(Path::new("/"));
        let name = path.file_name().ok_or_else(|| SysError::new("create", self.describe(path), Errno::EINVAL))?;
        let dir = self.mkdir_all(parent, 0o755)?;
        let dirfd = reopen_dir(&dir).map_err(|e| SysError::new("open", self.describe(parent), e))?;
        match open_at(&dirfd, name, OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_WRONLY, 0o644) {
            Ok(fd) => drop(fd),
            Err(Errno::EEXIST) => {}
            Err(e) => return Err(SysError::new("create", self.describe(path), e)),
        }
        self.open_in(path, OFlag::O_PATH)
    }

    /// What directory `dir` (an fd of one inside the root) is inside of:
    /// the [`FileId`]s of `dir` and of each directory above it, up to and
    /// without the root. Walked with `..` from the fd, never by path; an
    /// error if the walk never meets the root (`dir` was moved out of it).
    pub fn ancestry(&self, dir: &impl AsFd) -> Result<Vec<FileId>, SysError> {
        let fail = |e| SysError::new("walk up from", self.describe(Path::new("")), e);
        let root = file_id(&nix::sys::stat::fstat(self.fd.as_raw_fd()).map_err(fail)?);
        let mut cur = open_at(dir, OsStr::new("."), OFlag::O_PATH | OFlag::O_DIRECTORY, 0).map_err(fail)?;
        let mut out = Vec::new();
        loop {
            let id = file_id(&nix::sys::stat::fstat(cur.as_raw_fd()).map_err(fail)?);
            if id == root {
                return Ok(out);
            }
            // `/` is its own parent: the root was not on the way.
            if out.last() == Some(&id) || out.len() > 4096 {
                return Err(fail(Errno::EXDEV));
            }
            out.push(id);
            cur = open_at(&cur, OsStr::new(".."), OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW, 0)
                .map_err(fail)?;
        }
    }

    /// The host-side spelling of an in-root path, for error messages only.
    pub fn describe(&self, path: &Path) -> String {
        let rel = path.strip_prefix("/").unwrap_or(path);
        self.path.join(rel).display().to_string()
    }
}

/// The plain names in `path`, with `.` dropped and `..` left to the kernel's
/// in-root resolution (it is kept as a component so `a/../b` means the same
/// as it does to the kernel).
fn normal_components(path: &Path) -> impl Iterator<Item = &std::ffi::OsStr> {
    path.components().filter_map(|c| match c {
        Component::Normal(n) => Some(n),
        Component::ParentDir => Some(std::ffi::OsStr::new("..")),
        _ => None,
    })
}

/// The normal components of `p`, for a caller's or an archive's path:
/// `..` is refused (neither has a need of it), not left to resolution.
pub fn components(p: &Path) -> Result<Vec<OsString>, String> {
    let mut out = Vec::new();
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n.to_os_string()),
            Component::RootDir | Component::CurDir => {}
            Component::ParentDir => return Err(format!("{} has a `..` component", p.display())),
            Component::Prefix(_) => return Err(format!("{} is not a unix path", p.display())),
        }
    }
    Ok(out)
}

/// `p`'s parent and last component ([`components`]' rules); `p` must name
/// something below `/`.
pub fn split(p: &Path) -> Result<(PathBuf, OsString), String> {
    let mut names = components(p)?;
    let name = names.pop().ok_or_else(|| format!("{} names no file", p.display()))?;
    Ok((names.iter().collect::<PathBuf>(), name))
}

/// `openat(dir, name, flags | O_CLOEXEC, mode)` as an owned fd. Add
/// `O_NOFOLLOW` to keep a symlink at `name` from being followed.
pub fn open_at(dir: &impl AsFd, name: &OsStr, flags: OFlag, mode: u32) -> Result<OwnedFd, Errno> {
    crate::sys::openat(dir, name, flags, Mode::from_bits_truncate(mode))
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`.
pub fn lstat_at(dir: &impl AsFd, name: &OsStr) -> Result<FileStat, Errno> {
    nix::sys::stat::fstatat(Some(dir.as_fd().as_raw_fd()), name, AtFlags::AT_SYMLINK_NOFOLLOW)
}

/// Which file a stat is of: its device and inode.
pub type FileId = (u64, u64);

/// The [`FileId`] of a stat.
pub fn file_id(st: &FileStat) -> FileId {
    (st.st_dev, st.st_ino)
}

/// The file type bits of a stat.
pub fn kind(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits())
}

/// Opens directory `name` in `dir` for reading, refusing a symlink.
pub fn subdir(dir: &impl AsFd, name: &OsStr) -> Result<OwnedFd, Errno> {
    open_at(dir, name, OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_NOFOLLOW, 0)
}

/// `fchownat(dir, name, AT_SYMLINK_NOFOLLOW)`.
pub fn chown_at(dir: &impl AsFd, name: &OsStr, (uid, gid): (u32, u32)) -> Result<(), Errno> {
    let at = Some(dir.as_fd().as_raw_fd());
    nix::unistd::fchownat(at, name, Some(uid.into()), Some(gid.into()), AtFlags::AT_SYMLINK_NOFOLLOW)
}

/// The names in directory `dir` (an fd of it), without `.` and `..`.
pub fn entries(dir: &impl AsFd) -> Result<Vec<OsString>, Errno> {
    let flags = OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC;
    let d = nix::dir::Dir::openat(Some(dir.as_fd().as_raw_fd()), ".", flags, Mode::empty())?;
    let mut out = Vec::new();
    for e in d {
        let e = e?;
        let n = e.file_name().to_bytes();
        if n != b"." && n != b".." {
            out.push(OsStr::from_bytes(n).to_os_string());
        }
    }
    Ok(out)
}

/// Removes `name` from `dir`, recursively for a directory, never following
/// a symlink.
pub fn remove_at(dir: &impl AsFd, name: &OsStr) -> Result<(), Errno> {
    let st = match lstat_at(dir, name) {
        Ok(st) => st,
        Err(Errno::ENOENT) => return Ok(()),
        Err(e) => return Err(e),
    };
    let at = Some(dir.as_fd().as_raw_fd());
    if kind(&st) == SFlag::S_IFDIR {
        let sub = subdir(dir, name)?;
        for child in entries(&sub)? {
            remove_at(&sub, &child)?;
        }
        nix::unistd::unlinkat(at, name, nix::unistd::UnlinkatFlags::RemoveDir)
    } else {
        nix::unistd::unlinkat(at, name, nix::unistd::UnlinkatFlags::NoRemoveDir)
    }
}

/// A name for a temporary entry next to `name`: hidden, unique to this
/// process and call.
pub fn temp_name(name: &OsStr) -> OsString {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let mut t = OsString::from(format!(".tinyrun-{}-{}-", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
    let short: Vec<u8> = name.as_bytes().iter().take(64).copied().collect();
    t.push(OsStr::from_bytes(&short));
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::fs::open_no_magiclinks;

    /// A root with hostile symlinks: absolute, relative past the top, and a
    /// dangling one, all pointing outside.
    fn hostile() -> (tempfile::TempDir, tempfile::TempDir, Tree) {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("abs")).unwrap();
        std::os::unix::fs::symlink("../../../../../..", root.path().join("up")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("nope"), root.path().join("dangling")).unwrap();
        let r = Tree::open(root.path()).unwrap();
        (root, outside, r)
    }

    #[test]
    fn symlinks_resolve_inside_the_root() {
        let (root, outside, r) = hostile();
        // "abs/x" means <root>/<outside path>/x: created inside, never outside.
        r.mkdir_all(Path::new("/abs/x"), 0o755).unwrap();
        assert!(root.path().join(outside.path().strip_prefix("/").unwrap()).join("x").is_dir());
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
        r.ensure(Path::new("/up/etc/evil"), true).unwrap();
        assert!(root.path().join("etc/evil").is_file());
        assert!(!Path::new("/etc/evil").exists());
    }

    #[test]
    fn dangling_symlink_is_created_inside_or_refused() {
        let (_root, outside, r) = hostile();
        let _ = r.ensure(Path::new("/dangling"), true);
        let _ = r.mkdir_all(Path::new("/dangling/sub"), 0o755);
        assert!(!outside.path().join("nope").exists());
    }

    #[test]
    fn magic_links_are_refused() {
        // A real magic link: /proc/self/fd/N, N an fd we hold on a directory
        // with a file in it. Resolved under the host's own root, where
        // /proc/self/fd exists, following it would reach the file.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("x"), "").unwrap();
        let held = std::fs::File::open(dir.path()).unwrap();
        let r = Tree::open(Path::new("/")).unwrap();
        let link = format!("/proc/self/fd/{}/x", held.as_raw_fd());
        let e = r.open_in(Path::new(&link), OFlag::O_PATH).unwrap_err();
        assert!(matches!(e.errno, Errno::ELOOP | Errno::EXDEV), "{e}");
        assert!(open_no_magiclinks(Path::new(&link), OFlag::O_PATH).is_err());
        // The same file by its real path opens: the refusal is the link's.
        r.open_in(&dir.path().join("x"), OFlag::O_PATH).unwrap();
    }

    #[test]
    fn components_refuse_parent_dirs() {
        assert_eq!(components(Path::new("/a/./b/")).unwrap(), vec![OsString::from("a"), OsString::from("b")]);
        assert!(components(Path::new("a/../b")).unwrap_err().contains("`..`"));
        assert_eq!(split(Path::new("/work/x")).unwrap(), (PathBuf::from("work"), OsString::from("x")));
        assert!(split(Path::new("/")).is_err());
    }

    #[test]
    fn resolution_stays_in_the_tree() {
        let t = tempfile::tempdir().unwrap();
        let inside = t.path().join("root");
        std::fs::create_dir_all(inside.join("real")).unwrap();
        std::os::unix::fs::symlink("/", inside.join("up")).unwrap();
        std::os::unix::fs::symlink("../../..", inside.join("real/dots")).unwrap();
        std::fs::write(t.path().join("outside"), "host").unwrap();
        let tree = Tree::open_one_mount(&inside).unwrap();
        // Both links resolve to the tree's own root, where "outside" isn't.
        for p in ["/up/outside", "real/dots/outside"] {
            let (parent, name) = split(Path::new(p)).unwrap();
            let dir = tree.dir(&parent).unwrap();
            assert_eq!(lstat_at(&dir, &name).unwrap_err(), Errno::ENOENT, "{p}");
        }
    }

    #[test]
    fn made_directories_get_their_owner() {
        let t = tempfile::tempdir().unwrap();
        let tree = Tree::open(t.path()).unwrap();
        let me = (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw());
        tree.mkdir_all_owned(Path::new("/a/b"), 0o700, me).unwrap();
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(t.path().join("a/b")).unwrap();
        assert_eq!((m.uid(), m.gid()), me);
    }

    #[test]
    fn ancestry_names_what_a_directory_is_inside_of() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("a/b")).unwrap();
        std::os::unix::fs::symlink("a/b", t.path().join("l")).unwrap();
        let tree = Tree::open(t.path()).unwrap();
        let id = |p: &str| file_id(&nix::sys::stat::stat(&t.path().join(p)).unwrap());
        // Reached through a symlink, the directory is still inside a/.
        let b = tree.dir(Path::new("/l")).unwrap();
        assert_eq!(tree.ancestry(&b).unwrap(), vec![id("a/b"), id("a")]);
        assert_eq!(tree.ancestry(&tree.dir(Path::new("/")).unwrap()).unwrap(), vec![]);
        // A directory outside the root never meets it.
        let other = tempfile::tempdir().unwrap();
        let outside = open_path(other.path(), OFlag::O_PATH | OFlag::O_DIRECTORY).unwrap();
        assert_eq!(tree.ancestry(&outside).unwrap_err().errno, Errno::EXDEV);
    }

    #[test]
    fn remove_at_does_not_follow_links() {
        let t = tempfile::tempdir().unwrap();
        let keep = t.path().join("keep");
        std::fs::create_dir_all(&keep).unwrap();
        std::fs::write(keep.join("f"), "x").unwrap();
        let d = t.path().join("d");
        std::fs::create_dir_all(d.join("sub")).unwrap();
        std::os::unix::fs::symlink(&keep, d.join("sub/link")).unwrap();
        let top = Tree::open(t.path()).unwrap();
        remove_at(&top.dir(Path::new("/")).unwrap(), OsStr::new("d")).unwrap();
        assert!(!d.exists() && keep.join("f").exists());
    }
}
