//! A user namespace that holds an id map and nothing else: what
//! `MOUNT_ATTR_IDMAP` takes to show a mount's files with their owners moved.
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::unistd::Pid;

use crate::error::SysError;

/// A user namespace whose uid and gid maps are both `0 base count`, held
/// by the returned fd.
///
/// A child cloned into a new user namespace holds it while we write its
/// maps and open its `ns/user`; then it exits, and the fd keeps the
/// namespace. The child shares our memory (`CLONE_VM`, on a small stack of
/// its own) instead of copying it as fork would, which costs a few hundred
/// microseconds per namespace; all it does is wait for EOF on a pipe.
///
/// # Preconditions
/// The caller is single-threaded (another thread could be mid-way through
/// something the child's shared memory would see torn; it touches none).
pub fn userns_with_map(base: u32, count: u32) -> Result<OwnedFd, SysError> {
    let map = format!("0 {base} {count}\n");
    userns_with_maps(&map, &map)
}

/// A user namespace with `uid_map` and `gid_map` (in the text
/// `/proc/<pid>/uid_map` takes: `inside outside count` lines), held by the
/// returned fd; see [`userns_with_map`].
///
/// # Preconditions
/// The caller is single-threaded.
pub(crate) fn userns_with_maps(uid_map: &str, gid_map: &str) -> Result<OwnedFd, SysError> {
    userns_held(&uid_map.trim().replace('\n', ", "), |pid| map_and_open(pid, uid_map, gid_map))
}

/// A new user namespace, held by a child while `map` (which `what` names
/// in errors) writes its maps and opens its `ns/user`; returns what `map`
/// returned. The child shares our memory (see [`userns_with_map`]).
///
/// # Preconditions
/// The caller is single-threaded.
pub(crate) fn userns_held<T, E: From<SysError>>(what: &str, map: impl FnOnce(Pid) -> Result<T, E>) -> Result<T, E> {
    let fail = |op: &'static str| move |e: Errno| SysError::new(op, what, e);
    let (hold_r, hold_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(fail("pipe2"))?;
    let fds = [hold_r.as_raw_fd(), hold_w.as_raw_fd()];
    // u128: the stack's top must be 16-byte aligned.
    let mut stack = vec![0u128; 1024];
    let top = stack.as_mut_ptr_range().end.cast::<libc::c_void>();
    let all = nix::sys::signal::SigSet::all();
    let mut old = nix::sys::signal::SigSet::empty();
    // The child starts with every signal blocked: no handler of ours may
    // run on its stack.
    nix::sys::signal::pthread_sigmask(nix::sys::signal::SigmaskHow::SIG_SETMASK, Some(&all), Some(&mut old))
        .map_err(fail("sigprocmask"))?;
    // SAFETY: `hold` only makes system calls on the fds `fds` names, which
    // outlives the child (we wait for it below before returning); `stack`
    // is the child's alone and also outlives it. Without CLONE_FILES the
    // child has its own copy of our fds.
    let pid = unsafe {
        libc::clone(hold, top, libc::CLONE_VM | libc::CLONE_NEWUSER | libc::SIGCHLD, fds.as_ptr().cast_mut().cast())
    };
    let cloned = Errno::result(pid);
    nix::sys::signal::pthread_sigmask(nix::sys::signal::SigmaskHow::SIG_SETMASK, Some(&old), None)
        .map_err(fail("sigprocmask"))?;
    let pid = Pid::from_raw(cloned.map_err(fail("clone CLONE_NEWUSER"))?);
    let ns = map(pid);
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

/// The parent's half of [`userns_with_maps`].
fn map_and_open(pid: Pid, uid_map: &str, gid_map: &str) -> Result<OwnedFd, SysError> {
    for (file, map) in [("uid_map", uid_map), ("gid_map", gid_map)] {
        let path = format!("/proc/{pid}/{file}");
        // One write: the kernel takes a map whole, once.
        std::fs::write(&path, map).map_err(|e| SysError::new("write", &path, super::io_errno(&e)))?;
    }
    open_userns(pid)
}

/// `pid`'s user namespace.
pub(crate) fn open_userns(pid: Pid) -> Result<OwnedFd, SysError> {
    let path = format!("/proc/{pid}/ns/user");
    let ns = std::fs::File::open(&path).map_err(|e| SysError::new("open", &path, super::io_errno(&e)))?;
    Ok(OwnedFd::from(ns))
}
