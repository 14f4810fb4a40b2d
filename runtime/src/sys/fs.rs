//! File-descriptor calls: `openat2`, opening and reopening paths as owned
//! fds, and the `/proc/self/fd/N` name of an fd. The policy of resolving
//! paths inside a root lives in `tree`.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use crate::error::SysError;

/// Turns an `O_PATH` directory fd into one that `*at` calls can create in.
pub(crate) fn reopen_dir(fd: &OwnedFd) -> Result<OwnedFd, Errno> {
    let raw = nix::fcntl::openat(
        Some(fd.as_raw_fd()),
        ".",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    // SAFETY: openat returned a fresh fd.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Opens a host path (one the runtime trusts) as an owned fd.
pub(crate) fn open_path(path: &Path, flags: OFlag) -> Result<OwnedFd, SysError> {
    let fd = nix::fcntl::open(path, flags | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(|e| SysError::new("open", path.display(), e))?;
    // SAFETY: open returned a fresh fd that nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens `path` (resolved from the cwd and root as usual) without following
/// magic links such as `/proc/self/fd/N`.
pub(crate) fn open_no_magiclinks(path: &Path, flags: OFlag) -> Result<OwnedFd, Errno> {
    openat2(libc::AT_FDCWD, path, flags, libc::RESOLVE_NO_MAGICLINKS)
}

/// Reads a procfs or cgroupfs file whole. They report a size of 0, so
/// `read_to_string` would start from a 32-byte probe and grow, paying a
/// system call per doubling; one page-sized buffer takes most in one read.
pub(crate) fn read_proc(path: impl AsRef<Path>) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = String::with_capacity(8192);
    std::fs::File::open(path)?.read_to_string(&mut text)?;
    Ok(text)
}

/// `/proc/self/fd/N`: how a mount or a re-open names an fd-resolved object.
pub(crate) fn fd_path(fd: &impl AsRawFd) -> String {
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

pub(crate) fn openat2(dirfd: RawFd, path: &Path, flags: OFlag, resolve: u64) -> Result<OwnedFd, Errno> {
    let cpath = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| Errno::EINVAL)?;
    // SAFETY: open_how is a plain C struct; zeroing it gives mode 0.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    #[allow(clippy::cast_sign_loss, reason = "open flag bits, none of them the sign bit")]
    let flag_bits = (flags | OFlag::O_CLOEXEC).bits() as u64;
    how.flags = flag_bits;
    how.resolve = resolve;
    loop {
        // SAFETY: cpath and how outlive the call, and the size matches the struct.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dirfd,
                cpath.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if ret >= 0 {
            #[allow(clippy::cast_possible_truncation, reason = "the kernel returns an int fd")]
            let fd = ret as RawFd;
            // SAFETY: a fresh fd from the kernel.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        match Errno::last() {
            // RESOLVE_IN_ROOT asks to retry when a rename raced the walk.
            Errno::EAGAIN | Errno::EINTR => continue,
            e => return Err(e),
        }
    }
}
