//! The system calls the sandbox makes itself that neither std nor nix
//! offers safely: `fork`, `pidfd_open`, `_exit`, the new
//! mount API for image overlays (`open_tree`, `mount_setattr` with an id
//! map, `fsopen`/`fsconfig`/`fsmount`), and for tests an
//! `ioctl` whose request is wider than the kernel's 32 bits. File
//! operations in hostile trees go through the runtime's `tinyrun::tree`;
//! everything else through the runtime's API, std or nix.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

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

/// A user namespace whose uid and gid maps are both `0 base count`, held
/// by the returned fd: what `MOUNT_ATTR_IDMAP` takes to show a mount's
/// files with their owners moved into a box's range of host ids.
///
/// A child cloned into a new user namespace holds it while we write its
/// maps and open its `ns/user`; then it exits, and the fd keeps the
/// namespace. The child shares our memory (`CLONE_VM`, on a small stack of
/// its own) instead of copying it as fork would, which costs a few hundred
/// microseconds per box; all it does is wait for EOF on a pipe.
///
/// # Preconditions
/// The caller is single-threaded (another thread could be mid-way through
/// something the child's shared memory would see torn; it touches none).
pub(crate) fn userns_with_map(base: u32, count: u32) -> Result<OwnedFd, Errno> {
    let (hold_r, hold_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let fds = [hold_r.as_raw_fd(), hold_w.as_raw_fd()];
    // u128: the stack's top must be 16-byte aligned.
    let mut stack = vec![0u128; 1024];
    let top = stack.as_mut_ptr_range().end.cast::<libc::c_void>();
    let all = nix::sys::signal::SigSet::all();
    let mut old = nix::sys::signal::SigSet::empty();
    // The child starts with every signal blocked: no handler of ours may
    // run on its stack.
    nix::sys::signal::pthread_sigmask(nix::sys::signal::SigmaskHow::SIG_SETMASK, Some(&all), Some(&mut old))?;
    // SAFETY: `hold` only makes system calls on the fds `fds` names, which
    // outlives the child (we wait for it below before returning); `stack`
    // is the child's alone and also outlives it. Without CLONE_FILES the
    // child has its own copy of our fds.
    let pid = unsafe {
        libc::clone(hold, top, libc::CLONE_VM | libc::CLONE_NEWUSER | libc::SIGCHLD, fds.as_ptr().cast_mut().cast())
    };
    let cloned = Errno::result(pid);
    nix::sys::signal::pthread_sigmask(nix::sys::signal::SigmaskHow::SIG_SETMASK, Some(&old), None)?;
    let pid = Pid::from_raw(cloned?);
    let ns = map_and_open(pid, base, count);
    // The child exits at EOF; reaped here whatever happened, before its
    // stack goes.
    drop((hold_r, hold_w));
    let _ = nix::sys::wait::waitpid(pid, None);
    drop(stack);
    ns
}

/// The child of [`userns_with_map`]: closes its copy of the pipe's write
/// end, then waits for EOF (the parent closing its own).
extern "C" fn hold(fds: *mut libc::c_void) -> libc::c_int {
    let fds = fds.cast::<RawFd>();
    let mut byte = 0u8;
    // SAFETY: `fds` points at two fds the parent keeps alive until this
    // child has exited. Neither call can fail here (the fds are the
    // child's own copies, signals are blocked), so neither writes errno,
    // the one thread-local the child shares with the thread that cloned it.
    unsafe {
        libc::close(*fds.add(1));
        libc::read(*fds, (&raw mut byte).cast(), 1);
    }
    0
}

/// The parent's half of [`userns_with_map`].
fn map_and_open(pid: Pid, base: u32, count: u32) -> Result<OwnedFd, Errno> {
    let io = |e: std::io::Error| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO));
    let map = format!("0 {base} {count}\n");
    for file in ["uid_map", "gid_map"] {
        std::fs::write(format!("/proc/{pid}/{file}"), &map).map_err(io)?;
    }
    let ns = std::fs::File::open(format!("/proc/{pid}/ns/user")).map_err(io)?;
    Ok(OwnedFd::from(ns))
}

/// Which step of a mount made with the new mount API failed, the kernel's
/// answer, and what the file system wrote to its context's log.
#[derive(Debug)]
pub(crate) struct MountApiError {
    pub(crate) op: &'static str,
    pub(crate) errno: Errno,
    pub(crate) log: String,
}

impl MountApiError {
    fn new(op: &'static str) -> impl FnOnce(Errno) -> MountApiError {
        move |errno| MountApiError { op, errno, log: String::new() }
    }
}

impl std::fmt::Display for MountApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.op, self.errno)?;
        if !self.log.is_empty() {
            write!(f, " ({})", self.log)?;
        }
        Ok(())
    }
}

fn fd_result(ret: libc::c_long) -> Result<OwnedFd, Errno> {
    if ret < 0 {
        return Err(Errno::last());
    }
    let fd = RawFd::try_from(ret).map_err(|_| Errno::EBADF)?;
    // SAFETY: on success the kernel returned a fresh fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A detached bind mount of directory `dir` (`open_tree(OPEN_TREE_CLONE)`:
/// attached to no mount namespace, gone with its last fd) whose files'
/// owners are seen through the maps of `userns` (`MOUNT_ATTR_IDMAP`).
pub(crate) fn idmapped_tree(dir: &Path, userns: &impl AsRawFd) -> Result<OwnedFd, MountApiError> {
    let path = CString::new(dir.as_os_str().as_bytes()).map_err(|_| MountApiError::new("open_tree")(Errno::EINVAL))?;
    let flags = libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC;
    // SAFETY: `path` is NUL-terminated and outlives the call.
    let ret = unsafe { libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, path.as_ptr(), flags) };
    let tree = fd_result(ret).map_err(MountApiError::new("open_tree"))?;
    let userns = u64::try_from(userns.as_raw_fd()).map_err(|_| MountApiError::new("mount_setattr")(Errno::EBADF))?;
    let attr = libc::mount_attr { attr_set: libc::MOUNT_ATTR_IDMAP, attr_clr: 0, propagation: 0, userns_fd: userns };
    // SAFETY: the empty path is NUL-terminated, `attr` lives on our stack for
    // the call and its size is passed.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    Errno::result(ret).map_err(MountApiError::new("mount_setattr"))?;
    Ok(tree)
}

/// What an overlay mount is made of: each lower layer (top first) and the
/// upper and work directories as fds of directories (`O_RDONLY`), and
/// more `key=value` options.
pub(crate) struct OverlayParts<'a> {
    pub(crate) lowers: Vec<BorrowedFd<'a>>,
    pub(crate) upper: (BorrowedFd<'a>, BorrowedFd<'a>),
    pub(crate) options: &'a [(&'a CStr, &'a CStr)],
}

/// An overlay mount made with the new mount API (`fsopen`, `fsconfig`
/// with `lowerdir+` etc. given as fds, `fsmount`) and attached nowhere:
/// the returned fd is its root. Layers given as fds need Linux 6.13.
/// `attrs` are `MOUNT_ATTR_*` flags.
pub(crate) fn overlay(parts: &OverlayParts<'_>, attrs: u64) -> Result<OwnedFd, MountApiError> {
    // SAFETY: the name is NUL-terminated; the result is checked.
    let fs = fd_result(unsafe { libc::syscall(libc::SYS_fsopen, c"overlay".as_ptr(), libc::FSOPEN_CLOEXEC) })
        .map_err(MountApiError::new("fsopen overlay"))?;
    let with_log = |e: MountApiError| MountApiError { log: fs_log(&fs), ..e };
    let upper = [(c"upperdir", parts.upper.0), (c"workdir", parts.upper.1)];
    for (key, fd) in parts.lowers.iter().map(|l| (c"lowerdir+", *l)).chain(upper) {
        fsconfig(&fs, libc::FSCONFIG_SET_FD, key, None, fd.as_raw_fd()).map_err(with_log)?;
    }
    for (key, value) in parts.options {
        fsconfig(&fs, libc::FSCONFIG_SET_STRING, key, Some(value), 0).map_err(with_log)?;
    }
    fsconfig(&fs, libc::FSCONFIG_CMD_CREATE, c"", None, 0).map_err(with_log)?;
    // SAFETY: plain system call on an fd we own.
    let ret = unsafe { libc::syscall(libc::SYS_fsmount, fs.as_raw_fd(), libc::FSMOUNT_CLOEXEC, attrs) };
    fd_result(ret).map_err(MountApiError::new("fsmount")).map_err(with_log)
}

/// `fsconfig(fs, cmd, key, value, aux)`; an empty key is passed as NULL.
fn fsconfig(
    fs: &OwnedFd,
    cmd: libc::c_uint,
    key: &CStr,
    value: Option<&CStr>,
    aux: RawFd,
) -> Result<(), MountApiError> {
    let key_ptr = if key.is_empty() { std::ptr::null() } else { key.as_ptr() };
    let value_ptr = value.map_or(std::ptr::null(), CStr::as_ptr);
    // SAFETY: key and value are NUL-terminated (or NULL where the command
    // takes none) and outlive the call; `aux` is an fd or 0.
    let ret = unsafe { libc::syscall(libc::SYS_fsconfig, fs.as_raw_fd(), cmd, key_ptr, value_ptr, aux) };
    let op = match key.to_bytes() {
        b"" => "fsconfig create",
        b"lowerdir+" => "fsconfig lowerdir+",
        b"upperdir" => "fsconfig upperdir",
        b"workdir" => "fsconfig workdir",
        _ => "fsconfig",
    };
    Errno::result(ret).map(drop).map_err(MountApiError::new(op))
}

/// The messages a file system context logged (`e ...`, `w ...`), joined.
fn fs_log(fs: &OwnedFd) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 1024];
    // Each read returns one message; ENODATA when none is left.
    while let Ok(n) = nix::unistd::read(fs.as_raw_fd(), &mut buf) {
        if n == 0 || out.len() > 8 {
            break;
        }
        out.push(String::from_utf8_lossy(&buf[..n]).trim().to_string());
    }
    out.join("; ")
}
