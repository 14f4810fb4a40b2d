//! Path resolution that can't be led out of a root.
//!
//! Every path taken from config.json or found in the container's image is
//! resolved with `openat2(RESOLVE_IN_ROOT)`: `..`, absolute symlinks and
//! relative symlinks all stay inside the root, and magic links such as
//! `/proc/self/root` are refused. The result is an fd; callers then act on
//! `/proc/self/fd/N` (mount) or on the fd itself (mknodat, fchown), so the
//! path is never walked a second time. Runs in init (and, for `exec`'s
//! checks, in the runtime).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use crate::error::SysError;
use crate::sys::fs::{open_path, openat2, reopen_dir};

/// An `O_PATH` directory fd that paths are resolved under.
pub(crate) struct Root {
    fd: OwnedFd,
    path: PathBuf,
}

impl Root {
    /// Opens `path` (already trusted: the bundle's rootfs) as a resolution root.
    pub(crate) fn open(path: &Path) -> Result<Root, SysError> {
        let fd = open_path(path, OFlag::O_PATH | OFlag::O_DIRECTORY)?;
        Ok(Root { fd, path: path.to_path_buf() })
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Resolves `path` inside the root and opens it with `flags`.
    pub(crate) fn open_in(&self, path: &Path, flags: OFlag) -> Result<OwnedFd, SysError> {
        openat2(self.fd.as_raw_fd(), path, flags, libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS)
            .map_err(|e| SysError::new("openat2", self.describe(path), e))
    }

    /// `mkdir -p` inside the root; returns an `O_PATH` fd on the directory.
    /// A symlink on the way is followed inside the root, and what it names
    /// is created there (as the kernel would resolve it once the root is `/`).
    pub(crate) fn mkdir_all(&self, path: &Path, mode: u32) -> Result<OwnedFd, SysError> {
        self.mkdir_all_depth(path, mode, 0)
    }

    fn mkdir_all_depth(&self, path: &Path, mode: u32, depth: u32) -> Result<OwnedFd, SysError> {
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
                Ok(()) => {}
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
                    return self.mkdir_all_depth(&next, mode, depth + 1);
                }
                Err(e) => return Err(SysError::new("mkdirat", self.describe(&so_far), e)),
            }
            cur = self.open_in(&so_far, OFlag::O_PATH | OFlag::O_DIRECTORY)?;
        }
        Ok(cur)
    }

    /// Makes sure `path` exists inside the root as a directory or (when `file`)
    /// as a regular file, creating parents; returns an `O_PATH` fd on it.
    pub(crate) fn ensure(&self, path: &Path, file: bool) -> Result<OwnedFd, SysError> {
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
        match crate::sys::openat(
            &dirfd,
            name,
            OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_WRONLY,
            Mode::from_bits_truncate(0o644),
        ) {
            Ok(fd) => drop(fd),
            Err(Errno::EEXIST) => {}
            Err(e) => return Err(SysError::new("create", self.describe(path), e)),
        }
        self.open_in(path, OFlag::O_PATH)
    }

    /// The host-side spelling of an in-root path, for error messages only.
    pub(crate) fn describe(&self, path: &Path) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::fs::open_no_magiclinks;

    /// A root with hostile symlinks: absolute, relative past the top, and a
    /// dangling one, all pointing outside.
    fn hostile() -> (tempfile::TempDir, tempfile::TempDir, Root) {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("abs")).unwrap();
        std::os::unix::fs::symlink("../../../../../..", root.path().join("up")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("nope"), root.path().join("dangling")).unwrap();
        let r = Root::open(root.path()).unwrap();
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
        let r = Root::open(Path::new("/")).unwrap();
        let link = format!("/proc/self/fd/{}/x", held.as_raw_fd());
        let e = r.open_in(Path::new(&link), OFlag::O_PATH).unwrap_err();
        assert!(matches!(e.errno, Errno::ELOOP | Errno::EXDEV), "{e}");
        assert!(open_no_magiclinks(Path::new(&link), OFlag::O_PATH).is_err());
        // The same file by its real path opens: the refusal is the link's.
        r.open_in(&dir.path().join("x"), OFlag::O_PATH).unwrap();
    }
}
