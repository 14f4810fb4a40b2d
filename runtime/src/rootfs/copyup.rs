//! `tmpcopyup`: a tmpfs mounted over a directory of the image starts with a
//! copy of what that directory held (podman asks it for `--read-only` and
//! `--tmpfs`). The copy goes fd to fd and never follows a symlink, so the
//! image can't point it anywhere.

use std::os::fd::{AsRawFd, OwnedFd};

use nix::dir::{Dir, Type};
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{fchmodat, fstatat, mkdirat, FchmodatFlags, Mode};
use nix::unistd::{fchownat, Gid, Uid};

/// Copies every entry of `from` into `to`, keeping modes and owners.
pub(super) fn copy_tree(from: &OwnedFd, to: &OwnedFd) -> Result<(), String> {
    copy_dir(from, to, 0)
}

fn copy_dir(from: &OwnedFd, to: &OwnedFd, depth: u32) -> Result<(), String> {
    if depth > 64 {
        return Err("directory tree too deep".into());
    }
    let mut dir = Dir::from_fd(nix::unistd::dup(from.as_raw_fd()).map_err(|e| format!("dup: {e}"))?)
        .map_err(|e| format!("read directory: {e}"))?;
    let names: Vec<(std::ffi::CString, Option<Type>)> = dir
        .iter()
        .filter_map(|e| e.ok())
        .filter(|e| !matches!(e.file_name().to_bytes(), b"." | b".."))
        .map(|e| (e.file_name().to_owned(), e.file_type()))
        .collect();
    for (name, _) in names {
        let shown = name.to_string_lossy().into_owned();
        let st = fstatat(Some(from.as_raw_fd()), name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
            .map_err(|e| format!("stat {shown}: {e}"))?;
        let mode = Mode::from_bits_truncate(st.st_mode & 0o7777);
        match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => {
                mkdirat(Some(to.as_raw_fd()), name.as_c_str(), mode).map_err(|e| format!("mkdir {shown}: {e}"))?;
                let sub_from = openat(from, &name, OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW)?;
                let sub_to = openat(to, &name, OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW)?;
                copy_dir(&sub_from, &sub_to, depth + 1).map_err(|e| format!("{shown}/{e}"))?;
            }
            libc::S_IFREG => {
                let src = openat(from, &name, OFlag::O_RDONLY | OFlag::O_NOFOLLOW)?;
                let dst = nix::fcntl::openat(
                    Some(to.as_raw_fd()),
                    name.as_c_str(),
                    OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                    mode,
                )
                .map_err(|e| format!("create {shown}: {e}"))?;
                let dst = own(dst);
                let mut r = std::fs::File::from(src);
                let mut w = std::fs::File::from(dst);
                std::io::copy(&mut r, &mut w).map_err(|e| format!("copy {shown}: {e}"))?;
            }
            libc::S_IFLNK => {
                let target = nix::fcntl::readlinkat(Some(from.as_raw_fd()), name.as_c_str())
                    .map_err(|e| format!("readlink {shown}: {e}"))?;
                nix::unistd::symlinkat(target.as_os_str(), Some(to.as_raw_fd()), name.as_c_str())
                    .map_err(|e| format!("symlink {shown}: {e}"))?;
            }
            // Devices, fifos and sockets in a directory meant for scratch
            // space are left out, as runc's copy does.
            _ => continue,
        }
        fchownat(
            Some(to.as_raw_fd()),
            name.as_c_str(),
            Some(Uid::from_raw(st.st_uid)),
            Some(Gid::from_raw(st.st_gid)),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .map_err(|e| format!("chown {shown}: {e}"))?;
        if st.st_mode & libc::S_IFMT != libc::S_IFLNK {
            // chown clears set-id bits; put the mode back as it was.
            fchmodat(Some(to.as_raw_fd()), name.as_c_str(), mode, FchmodatFlags::FollowSymlink)
                .map_err(|e| format!("chmod {shown}: {e}"))?;
        }
    }
    Ok(())
}

fn openat(dir: &OwnedFd, name: &std::ffi::CStr, flags: OFlag) -> Result<OwnedFd, String> {
    nix::fcntl::openat(Some(dir.as_raw_fd()), name, flags | OFlag::O_CLOEXEC, Mode::empty())
        .map(own)
        .map_err(|e| format!("open {}: {e}", name.to_string_lossy()))
}

fn own(fd: std::os::fd::RawFd) -> OwnedFd {
    crate::sys::own_fd(fd)
}
