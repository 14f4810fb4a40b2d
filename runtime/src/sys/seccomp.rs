//! The `seccomp(2)` calls: install a BPF program, probe for filter flags.
//!
//! libseccomp compiles the filter in the runtime process; init installs the
//! resulting program with one raw `seccomp(SECCOMP_SET_MODE_FILTER)` call, so
//! nothing is allocated and no library code runs in the container's process
//! at that point, and the flags passed are exactly the ones asked for.
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;

use crate::error::SysError;

/// `seccomp(SECCOMP_SET_MODE_FILTER, flags, prog)`. With
/// `SECCOMP_FILTER_FLAG_NEW_LISTENER` in `flags` the kernel returns the
/// notification fd (close-on-exec), which is handed back.
///
/// # Preconditions
/// The caller has set no_new_privs or holds CAP_SYS_ADMIN in its user
/// namespace; otherwise the kernel answers EACCES.
pub(crate) fn set_filter(prog: &[libc::sock_filter], flags: u32) -> Result<Option<OwnedFd>, SysError> {
    let len = u16::try_from(prog.len()).map_err(|_| SysError::new("seccomp", "program too long", Errno::E2BIG))?;
    let fprog = libc::sock_fprog { len, filter: prog.as_ptr().cast_mut() };
    // SAFETY: `fprog` points at `prog`, which outlives the call; the kernel
    // copies the program and never writes through the pointer.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            flags as libc::c_ulong,
            &fprog as *const libc::sock_fprog,
        )
    };
    if ret < 0 {
        return Err(SysError::new("seccomp(SECCOMP_SET_MODE_FILTER)", format_args!("flags={flags:#x}"), Errno::last()));
    }
    if flags as libc::c_ulong & libc::SECCOMP_FILTER_FLAG_NEW_LISTENER == 0 {
        return Ok(None);
    }
    #[allow(clippy::cast_possible_truncation, reason = "the kernel returns an int fd")]
    let fd = ret as RawFd;
    // SAFETY: with NEW_LISTENER a successful call returns a fresh fd we own.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Whether the running kernel accepts filter `flags`: a NULL program makes
/// a call with known flags fail with EFAULT (before anything is installed),
/// and one with unknown flags with EINVAL. libseccomp probes the same way.
pub(crate) fn flags_supported(flags: u32) -> bool {
    // SAFETY: a NULL program is never dereferenced by a successful call: the
    // kernel fails the copy from user memory with EFAULT.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            flags as libc::c_ulong,
            std::ptr::null::<libc::sock_fprog>(),
        )
    };
    ret < 0 && Errno::last() == Errno::EFAULT
}

/// `ioctl(SECCOMP_IOCTL_NOTIF_RECV)`: the next notification of listener
/// `fd`.
///
/// # Preconditions
/// One is pending (the fd polled readable): otherwise the call blocks
/// until a filtered process makes one.
///
/// # Errors
/// ENOENT when the process that made it has gone meanwhile (a signal or
/// its death withdrew it); EINTR.
pub(crate) fn notif_recv(fd: BorrowedFd<'_>) -> Result<libc::seccomp_notif, Errno> {
    // SAFETY: an all-zero seccomp_notif is valid (plain integers), and the
    // kernel insists on a zeroed buffer.
    let mut n: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: `n` is a seccomp_notif, the size the request number encodes;
    // the kernel writes only into it.
    let ret =
        unsafe { libc::ioctl(fd.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_RECV, &mut n as *mut libc::seccomp_notif) };
    if ret < 0 {
        return Err(Errno::last());
    }
    Ok(n)
}

/// `ioctl(SECCOMP_IOCTL_NOTIF_SEND)`: notification `id` fails with
/// `errno` (a positive number), as the filter's ERRNO action would.
///
/// # Errors
/// ENOENT when the process has gone (nothing to answer).
pub(crate) fn notif_fail(fd: BorrowedFd<'_>, id: u64, errno: i32) -> Result<(), Errno> {
    let mut r = libc::seccomp_notif_resp { id, val: 0, error: -errno, flags: 0 };
    // SAFETY: `r` is a seccomp_notif_resp, the size the request encodes;
    // the kernel only reads it.
    let ret =
        unsafe { libc::ioctl(fd.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_SEND, &mut r as *mut libc::seccomp_notif_resp) };
    if ret < 0 {
        return Err(Errno::last());
    }
    Ok(())
}

/// `fork(2)` through libc, for tests that load a filter in a child: unlike
/// a raw clone, glibc's fork handlers leave malloc usable in the child even
/// though other test threads may hold its locks.
#[cfg(test)]
pub(crate) fn fork_for_test() -> Result<super::Forked, SysError> {
    // SAFETY: the child only runs test code and ends in `exit_child`.
    match unsafe { libc::fork() } {
        -1 => Err(SysError::bare("fork", Errno::last())),
        0 => Ok(super::Forked::Child),
        pid => Ok(super::Forked::Parent(nix::unistd::Pid::from_raw(pid))),
    }
}

/// `ioctl(fd, request, buf)` with any request number, even one wider than
/// the kernel's 32 bits, so the whole value reaches a seccomp filter.
/// Returns the errno, or 0 on success.
#[cfg(test)]
pub(crate) fn raw_ioctl(fd: std::os::fd::RawFd, request: u64, buf: &mut [u8; 256]) -> i32 {
    // SAFETY: a raw system call; `buf` is larger than anything the requests
    // the tests name write.
    let ret = unsafe { libc::syscall(libc::SYS_ioctl, fd, request, buf.as_mut_ptr()) };
    if ret < 0 {
        Errno::last() as i32
    } else {
        0
    }
}
