//! The system calls the sandbox makes itself that neither std nor nix
//! offers safely: `fork`, `pidfd_open`, `_exit`, `fsetxattr`, and for
//! tests an `ioctl` whose request is wider than the kernel's 32 bits. File
//! operations in hostile trees go through the runtime's `tinyrun::tree`;
//! everything else through the runtime's API, std or nix.
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::unistd::Pid;

/// Which side of a fork this is.
pub(crate) enum Forked {
    #[cfg_attr(not(test), allow(dead_code, reason = "only tests wait for their child"))]
    Parent(Pid),
    Child,
}

/// Plain `fork(2)`, through glibc so its fork handlers run: the child goes
/// on running the sandbox's own code (allocating, taking locks).
///
/// # Preconditions
/// The caller is single-threaded: the child gets only the calling thread,
/// so a lock held by another thread would stay locked forever in the child.
pub(crate) fn fork() -> Result<Forked, Errno> {
    // SAFETY: the precondition above makes the child's copy of the address
    // space consistent: no other thread was mid-way through anything.
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Child => Ok(Forked::Child),
        nix::unistd::ForkResult::Parent { child } => Ok(Forked::Parent(child)),
    }
}

/// `fork(2)` for tests that load a seccomp filter in a child. The test
/// harness has other threads; glibc's fork handlers still leave malloc
/// usable in the child, and the child only runs test code and `_exit`s.
#[cfg(test)]
pub(crate) fn fork_for_test() -> Result<Forked, Errno> {
    // SAFETY: see above: the child ends in `_exit` without returning into
    // the harness, and takes no lock but malloc's, which glibc resets.
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Child => Ok(Forked::Child),
        nix::unistd::ForkResult::Parent { child } => Ok(Forked::Parent(child)),
    }
}

/// `pidfd_open(2)`: a handle on a process that can't be confused with a
/// later process reusing the same pid, and that polls readable when it
/// exits.
pub(crate) fn pidfd_open(pid: Pid) -> Result<OwnedFd, Errno> {
    // SAFETY: a plain system call with integer arguments.
    let ret = unsafe { libc::syscall(libc::SYS_pidfd_open, pid.as_raw(), 0) };
    if ret < 0 {
        return Err(Errno::last());
    }
    let fd = RawFd::try_from(ret).map_err(|_| Errno::EBADF)?;
    // SAFETY: on success the kernel returned a fresh fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `ioctl(fd, request, buf)` with any request number, even one wider than
/// the kernel's 32 bits, so the whole value reaches a seccomp filter.
/// Returns the raw result (-1 with errno set on failure).
#[cfg(test)]
pub(crate) fn raw_ioctl(fd: RawFd, request: u64, buf: &mut [u8; 256]) -> i64 {
    // SAFETY: a raw system call; `buf` is larger than anything the requests
    // the tests name write.
    unsafe { libc::syscall(libc::SYS_ioctl, fd, request, buf.as_mut_ptr()) }
}

/// Ends a forked child without running the parent's exit handlers or
/// flushing buffers that belong to the parent.
pub(crate) fn exit_child(code: i32) -> ! {
    // SAFETY: _exit is async-signal-safe and never returns.
    unsafe { libc::_exit(code) }
}

/// `fsetxattr(fd, name, value, 0)`.
pub(crate) fn fsetxattr(fd: &impl AsRawFd, name: &std::ffi::CStr, value: &[u8]) -> Result<(), Errno> {
    // SAFETY: `name` is NUL-terminated and `value` valid for its length,
    // both outliving the call.
    let ret = unsafe { libc::fsetxattr(fd.as_raw_fd(), name.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    Errno::result(ret).map(drop)
}

/// `lgetxattr(path, name)`: the value, at most 256 bytes.
#[cfg(test)]
pub(crate) fn lgetxattr(path: &std::ffi::CStr, name: &std::ffi::CStr) -> Result<Vec<u8>, Errno> {
    let mut buf = vec![0u8; 256];
    // SAFETY: both strings are NUL-terminated and `buf` is valid for its
    // length; all outlive the call.
    let n = unsafe { libc::lgetxattr(path.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    let n = usize::try_from(n).map_err(|_| Errno::last())?;
    buf.truncate(n);
    Ok(buf)
}

/// In a forked child that outlives its caller: /dev/null as stdin, stdout
/// and stderr, and every other fd but `keep` closed, so the child holds
/// none of the caller's pipes or files open.
pub(crate) fn detach_stdio(keep: &[std::os::fd::BorrowedFd<'_>]) {
    if let Ok(null) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null") {
        for fd in 0..3 {
            let _ = nix::unistd::dup2(null.as_raw_fd(), fd);
        }
    }
    let keep: Vec<RawFd> = keep.iter().map(AsRawFd::as_raw_fd).collect();
    let open: Vec<RawFd> = std::fs::read_dir("/proc/self/fd")
        .map(|d| d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default();
    for fd in open.into_iter().filter(|fd| *fd > 2 && !keep.contains(fd)) {
        // Closing an fd we don't own (the directory listing's, already
        // gone) fails harmlessly with EBADF.
        let _ = nix::unistd::close(fd);
    }
}

/// `flock(fd, LOCK_EX | LOCK_NB)`: true if we now hold the lock, false if
/// another open file holds it. The lock belongs to the open file, so it
/// lasts while any duplicate of `fd` (a forked child's) stays open.
pub(crate) fn try_lock(fd: &impl AsRawFd) -> Result<bool, Errno> {
    // SAFETY: a plain system call with integer arguments.
    let ret = unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    match Errno::result(ret) {
        Ok(_) => Ok(true),
        Err(Errno::EWOULDBLOCK) => Ok(false),
        Err(e) => Err(e),
    }
}

/// `flock(fd, LOCK_UN)`: releases the lock for every duplicate of `fd`.
pub(crate) fn unlock(fd: &impl AsRawFd) -> Result<(), Errno> {
    // SAFETY: a plain system call with integer arguments.
    Errno::result(unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_UN) }).map(drop)
}
