//! `tmpcopyup`: a tmpfs mounted over a directory of the image starts with a
//! copy of what that directory held (podman asks it for `--read-only` and
//! `--tmpfs`). The copy goes fd to fd and never follows a symlink, so the
//! image can't point it anywhere.

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::dir::Dir;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{fchmodat, fstatat, mkdirat, FchmodatFlags, FileStat, Mode};
use nix::unistd::{fchownat, Gid, Uid};

use super::Result;
use crate::error::InitError;

/// Copies every entry of `from` into `to`, keeping modes and owners;
/// `dest` (the mount's destination) names them in errors.
pub(super) fn copy_tree(from: &OwnedFd, to: &OwnedFd, dest: &Path) -> Result<()> {
    copy_dir(from, to, dest, 0).map_err(|e| InitError { op: format!("tmpcopyup: {}", e.op), ..e })
}

fn copy_dir(from: &OwnedFd, to: &OwnedFd, at: &Path, depth: u32) -> Result<()> {
    if depth > 64 {
        return Err(InitError::other(format!("copy {}", at.display()), "directory tree too deep"));
    }
    let dup = nix::unistd::dup(from.as_raw_fd()).map_err(|e| InitError::path("dup fd of", at, e))?;
    let mut dir = Dir::from_fd(dup).map_err(|e| InitError::path("read directory", at, e))?;
    let names: Vec<CString> = dir
        .iter()
        .filter_map(|e| e.ok())
        .filter(|e| !matches!(e.file_name().to_bytes(), b"." | b".."))
        .map(|e| e.file_name().to_owned())
        .collect();
    for name in names {
        copy_entry(from, to, &name, at.join(name.to_string_lossy().as_ref()), depth)?;
    }
    Ok(())
}

/// Copies one entry `name` of `from` (shown as `path`) into `to`.
fn copy_entry(from: &OwnedFd, to: &OwnedFd, name: &CStr, path: PathBuf, depth: u32) -> Result<()> {
    let st = fstatat(Some(from.as_raw_fd()), name, AtFlags::AT_SYMLINK_NOFOLLOW)
        .map_err(|e| InitError::path("stat", &path, e))?;
    let mode = Mode::from_bits_truncate(st.st_mode & 0o7777);
    match st.st_mode & libc::S_IFMT {
        libc::S_IFDIR => {
            mkdirat(Some(to.as_raw_fd()), name, mode).map_err(|e| InitError::path("mkdir", &path, e))?;
            let sub_from = openat(from, name, OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW, &path)?;
            let sub_to = openat(to, name, OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW, &path)?;
            copy_dir(&sub_from, &sub_to, &path, depth + 1)?;
        }
        libc::S_IFREG => copy_file(from, to, name, mode, &path)?,
        libc::S_IFLNK => {
            let target = nix::fcntl::readlinkat(Some(from.as_raw_fd()), name)
                .map_err(|e| InitError::path("readlink", &path, e))?;
            nix::unistd::symlinkat(target.as_os_str(), Some(to.as_raw_fd()), name)
                .map_err(|e| InitError::path("symlink", &path, e))?;
        }
        // Devices, fifos and sockets in a directory meant for scratch
        // space are left out, as runc's copy does.
        _ => return Ok(()),
    }
    keep_owner_and_mode(to, name, &st, mode, &path)
}

fn copy_file(from: &OwnedFd, to: &OwnedFd, name: &CStr, mode: Mode, path: &Path) -> Result<()> {
    let src = openat(from, name, OFlag::O_RDONLY | OFlag::O_NOFOLLOW, path)?;
    let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let dst = crate::sys::openat(to, name, flags, mode).map_err(|e| InitError::path("create", path, e))?;
    let mut r = std::fs::File::from(src);
    let mut w = std::fs::File::from(dst);
    std::io::copy(&mut r, &mut w).map_err(|e| InitError::path("copy", path, crate::sys::io_errno(&e)))?;
    Ok(())
}

fn keep_owner_and_mode(to: &OwnedFd, name: &CStr, st: &FileStat, mode: Mode, path: &Path) -> Result<()> {
    let (uid, gid) = (Some(Uid::from_raw(st.st_uid)), Some(Gid::from_raw(st.st_gid)));
    fchownat(Some(to.as_raw_fd()), name, uid, gid, AtFlags::AT_SYMLINK_NOFOLLOW)
        .map_err(|e| InitError::path("chown", path, e))?;
    if st.st_mode & libc::S_IFMT != libc::S_IFLNK {
        // chown clears set-id bits; put the mode back as it was.
        fchmodat(Some(to.as_raw_fd()), name, mode, FchmodatFlags::FollowSymlink)
            .map_err(|e| InitError::path("chmod", path, e))?;
    }
    Ok(())
}

fn openat(dir: &OwnedFd, name: &CStr, flags: OFlag, path: &Path) -> Result<OwnedFd> {
    crate::sys::openat(dir, name, flags, Mode::empty()).map_err(|e| InitError::path("open", path, e))
}
