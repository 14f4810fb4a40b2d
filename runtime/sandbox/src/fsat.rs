//! File operations on trees that something hostile wrote or still writes
//! to (a layer being unpacked, a box's storage): paths are resolved inside
//! a root directory with `openat2(RESOLVE_IN_ROOT)`, last components are
//! never followed, and walks go from directory fd to directory fd, so a
//! symlink planted (or swapped in mid-walk) never leads out of the tree.
//! Runs in the runtime process.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, ResolveFlag};
use nix::sys::stat::{FileStat, Mode, SFlag};

use crate::error::{Error, Result};
use crate::sys;

/// A directory every path is resolved in, as if it were `/`.
pub(crate) struct Tree {
    fd: OwnedFd,
    /// Where it is on the host, for messages.
    pub(crate) host: PathBuf,
}

/// How paths are resolved in a [`Tree`]: in its root, never through a
/// magic link (`/proc/self/...`), never onto another mount.
fn in_root() -> ResolveFlag {
    ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS | ResolveFlag::RESOLVE_NO_XDEV
}

impl Tree {
    /// Opens `host`, a directory the runtime made (its own path is trusted).
    pub(crate) fn open(host: &Path) -> Result<Tree> {
        let flags = OFlag::O_DIRECTORY | OFlag::O_RDONLY;
        let fd =
            sys::openat(libc::AT_FDCWD, host, flags, Mode::empty()).map_err(|e| Error::io("open", host, e.into()))?;
        Ok(Tree { fd, host: host.to_path_buf() })
    }

    /// The tree's root directory.
    pub(crate) fn root_fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// Opens directory `rel` (relative or absolute, inside the tree);
    /// symlinks on the way are followed inside the tree.
    pub(crate) fn dir(&self, rel: &Path) -> Result<OwnedFd, Errno> {
        let rel = if rel.as_os_str().is_empty() { Path::new("/") } else { rel };
        sys::openat2(self.fd.as_raw_fd(), rel, OFlag::O_DIRECTORY | OFlag::O_RDONLY, in_root())
    }

    /// Like [`Tree::dir`], creating missing directories (mode 0755, owned
    /// by `owner`) on the way.
    pub(crate) fn dir_all(&self, rel: &Path, owner: (u32, u32)) -> Result<OwnedFd, Errno> {
        let names = components(rel).map_err(|_| Errno::EINVAL)?;
        let mut at = PathBuf::from("/");
        let mut fd = self.dir(&at)?;
        for name in names {
            at.push(&name);
            fd = match self.dir(&at) {
                Ok(fd) => fd,
                Err(Errno::ENOENT) => {
                    match nix::sys::stat::mkdirat(
                        Some(fd.as_raw_fd()),
                        name.as_os_str(),
                        Mode::from_bits_truncate(0o755),
                    ) {
                        Ok(()) => chown_at(&fd, &name, owner)?,
                        Err(Errno::EEXIST) => {}
                        Err(e) => return Err(e),
                    }
                    self.dir(&at)?
                }
                Err(e) => return Err(e),
            };
        }
        Ok(fd)
    }
}

/// The normal components of `p`; `..` is refused (a caller's path has no
/// need of it, and an archive's must not have it).
pub(crate) fn components(p: &Path) -> Result<Vec<OsString>, String> {
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

/// `p`'s parent and last component; `p` must name something below `/`.
pub(crate) fn split(p: &Path) -> Result<(PathBuf, OsString), String> {
    let mut names = components(p)?;
    let name = names.pop().ok_or_else(|| format!("{} names no file", p.display()))?;
    Ok((names.iter().collect::<PathBuf>(), name))
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`.
pub(crate) fn lstat_at(dir: &OwnedFd, name: &OsStr) -> Result<FileStat, Errno> {
    nix::sys::stat::fstatat(Some(dir.as_raw_fd()), name, AtFlags::AT_SYMLINK_NOFOLLOW)
}

/// The file type bits of a stat.
pub(crate) fn kind(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits())
}

/// Opens directory `name` in `dir`, refusing a symlink.
pub(crate) fn subdir(dir: &OwnedFd, name: &OsStr) -> Result<OwnedFd, Errno> {
    let flags = OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_NOFOLLOW;
    sys::openat(dir.as_raw_fd(), Path::new(name), flags, Mode::empty())
}

/// `fchownat(dir, name, AT_SYMLINK_NOFOLLOW)`.
pub(crate) fn chown_at(dir: &OwnedFd, name: &OsStr, (uid, gid): (u32, u32)) -> Result<(), Errno> {
    nix::unistd::fchownat(Some(dir.as_raw_fd()), name, Some(uid.into()), Some(gid.into()), AtFlags::AT_SYMLINK_NOFOLLOW)
}

/// The names in directory `dir` (an fd of it), without `.` and `..`.
pub(crate) fn entries(dir: &OwnedFd) -> Result<Vec<OsString>, Errno> {
    let d = nix::dir::Dir::openat(Some(dir.as_raw_fd()), ".", OFlag::O_DIRECTORY | OFlag::O_RDONLY, Mode::empty())?;
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
pub(crate) fn remove_at(dir: &OwnedFd, name: &OsStr) -> Result<(), Errno> {
    let st = match lstat_at(dir, name) {
        Ok(st) => st,
        Err(Errno::ENOENT) => return Ok(()),
        Err(e) => return Err(e),
    };
    if kind(&st) == SFlag::S_IFDIR {
        let sub = subdir(dir, name)?;
        for child in entries(&sub)? {
            remove_at(&sub, &child)?;
        }
        nix::unistd::unlinkat(Some(dir.as_raw_fd()), name, nix::unistd::UnlinkatFlags::RemoveDir)
    } else {
        nix::unistd::unlinkat(Some(dir.as_raw_fd()), name, nix::unistd::UnlinkatFlags::NoRemoveDir)
    }
}

/// A name for a temporary entry next to `name`: hidden, unique to this
/// process and call.
pub(crate) fn temp_name(name: &OsStr) -> OsString {
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
        let tree = Tree::open(&inside).unwrap();
        // Both links resolve to the tree's own root, where "outside" isn't.
        for p in ["/up/outside", "real/dots/outside"] {
            let (parent, name) = split(Path::new(p)).unwrap();
            let dir = tree.dir(&parent).unwrap();
            assert_eq!(lstat_at(&dir, &name).unwrap_err(), Errno::ENOENT, "{p}");
        }
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
        remove_at(top.root_fd(), OsStr::new("d")).unwrap();
        assert!(!d.exists() && keep.join("f").exists());
    }
}
