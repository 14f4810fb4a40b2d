//! The one place where tinyrun talks to the kernel through `unsafe` code.
//!
//! Everything here is a thin, typed wrapper that names the operation and the
//! object in its error. `nix` covers most calls; raw `libc` is used only for
//! what `nix` lacks (clone3, openat2, close_range, pidfd_open, setdomainname).
#![allow(unsafe_code)]

mod build_id;
pub(crate) mod fs;
mod sched;
pub(crate) mod seccomp;
mod userns;

pub(crate) use build_id::build_id;
pub(crate) use sched::{ioprio_set, sched_setattr, set_mempolicy, set_personality, SchedAttr};
pub use userns::userns_with_map;
pub(crate) use userns::{open_userns, userns_held, userns_with_maps};

use std::ffi::CStr;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::unistd::Pid;

use crate::error::SysError;

/// From linux/sched.h; libc declares it with a type too narrow for it.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// Which side of a fork-like clone we are on.
pub enum Forked {
    /// The caller, with the child's pid.
    Parent(Pid),
    /// The child.
    Child,
}

/// Fork-like `clone3`: the child continues from this call on a copy of the
/// address space, exactly as after `fork(2)`, but in the namespaces `flags`
/// asks for and, when `cgroup` is given, already inside that cgroup
/// (`CLONE_INTO_CGROUP`), so no instruction of it ever runs outside.
///
/// Falls back to `clone(2)` (no cgroup placement, no `CLONE_NEWTIME`) on
/// kernels without clone3.
///
/// # Preconditions
/// The caller is single-threaded: the child gets only the calling thread, so
/// any lock held by another thread would stay locked forever in the child.
pub(crate) fn clone_fork(flags: u64, cgroup: Option<RawFd>) -> Result<Forked, SysError> {
    let mut args = libc::clone_args {
        flags,
        pidfd: 0,
        child_tid: 0,
        parent_tid: 0,
        // With CLONE_PARENT, clone3 wants 0 here and the child inherits the
        // caller's own exit signal (SIGCHLD: we are a fork-like child too).
        exit_signal: if flags & libc::CLONE_PARENT as u64 != 0 { 0 } else { libc::SIGCHLD as u64 },
        stack: 0,
        stack_size: 0,
        tls: 0,
        set_tid: 0,
        set_tid_size: 0,
        cgroup: 0,
    };
    if let Some(fd) = cgroup {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup =
            u64::try_from(fd).map_err(|_| SysError::new("clone3", format_args!("cgroup fd {fd}"), Errno::EBADF))?;
    }
    // SAFETY: with a zero stack, clone3 behaves like fork: the child resumes
    // here on a private copy of this (single-threaded) process. `args` lives
    // on our stack for the duration of the call and its size is passed.
    let ret = unsafe {
        libc::syscall(libc::SYS_clone3, &mut args as *mut libc::clone_args, std::mem::size_of::<libc::clone_args>())
    };
    let ret = if ret == -1 && Errno::last() == Errno::ENOSYS && cgroup.is_none() {
        // SAFETY: as above: a NULL stack makes clone(2) fork-like. The flag
        // word of clone(2) is an unsigned long carrying the exit signal in
        // its low byte.
        unsafe {
            libc::syscall(
                libc::SYS_clone,
                (flags as libc::c_ulong) | libc::SIGCHLD as libc::c_ulong,
                std::ptr::null_mut::<libc::c_void>(),
                std::ptr::null_mut::<libc::c_int>(),
                std::ptr::null_mut::<libc::c_int>(),
                0 as libc::c_ulong,
            )
        }
    } else {
        ret
    };
    match ret {
        -1 => Err(SysError::new("clone3", format_args!("flags={flags:#x}"), Errno::last())),
        0 => Ok(Forked::Child),
        pid => {
            #[allow(clippy::cast_possible_truncation, reason = "the kernel returns an int pid")]
            let pid = pid as libc::pid_t;
            Ok(Forked::Parent(Pid::from_raw(pid)))
        }
    }
}

/// Plain `fork`: `clone(2)` with SIGCHLD and nothing else. It is not
/// glibc's `fork`, so no atfork handler runs; not `clone3`, which a
/// container's seccomp profile may deny while allowing `clone`. The child
/// may go on running any code of the caller's (it allocates, takes locks):
/// with a single thread, no lock was held by anyone else when it was made.
///
/// # Preconditions
/// The caller is single-threaded (see [`clone_fork`]).
pub fn fork() -> Result<Forked, SysError> {
    // SAFETY: a NULL stack makes clone(2) fork-like: the child resumes here
    // on a private copy of this single-threaded process.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone,
            libc::SIGCHLD as libc::c_ulong,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_int>(),
            std::ptr::null_mut::<libc::c_int>(),
            0 as libc::c_ulong,
        )
    };
    match ret {
        -1 => Err(SysError::bare("fork", Errno::last())),
        0 => Ok(Forked::Child),
        pid => {
            #[allow(clippy::cast_possible_truncation, reason = "the kernel returns an int pid")]
            let pid = pid as libc::pid_t;
            Ok(Forked::Parent(Pid::from_raw(pid)))
        }
    }
}

/// Gives the heap's free pages back to the kernel (`malloc_trim(0)`): a
/// process that stays long after a burst of work keeps only what it uses.
/// musl's allocator unmaps freed groups of pages by itself and has no such
/// call.
pub(crate) fn trim_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only walks glibc's own arenas; any pad is valid.
    unsafe {
        libc::malloc_trim(0)
    };
}

/// `pidfd_open(2)`: a handle on a process that can't be confused with a later
/// process reusing the same pid, and that polls readable once it exits.
pub fn pidfd_open(pid: Pid) -> Result<OwnedFd, SysError> {
    // SAFETY: plain syscall with integer arguments.
    let ret = unsafe { libc::syscall(libc::SYS_pidfd_open, pid.as_raw(), 0) };
    if ret < 0 {
        return Err(SysError::new("pidfd_open", pid, Errno::last()));
    }
    #[allow(clippy::cast_possible_truncation, reason = "the kernel returns an int fd")]
    let fd = ret as RawFd;
    // SAFETY: on success the kernel returned a fresh fd that we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sends `sig` through a pidfd, so the signal can't reach a recycled pid.
pub(crate) fn pidfd_send_signal(pidfd: &OwnedFd, sig: i32) -> Result<(), Errno> {
    // SAFETY: plain syscall; a NULL siginfo means "like kill(2)".
    let ret = unsafe {
        libc::syscall(libc::SYS_pidfd_send_signal, pidfd.as_raw_fd(), sig, std::ptr::null::<libc::siginfo_t>(), 0)
    };
    if ret < 0 {
        Err(Errno::last())
    } else {
        Ok(())
    }
}

/// Marks every fd from `first` on close-on-exec, so nothing the runtime
/// opened (or inherited) survives into the container's program.
pub(crate) fn cloexec_from(first: u32) -> Result<(), SysError> {
    // SAFETY: plain syscall with integer arguments.
    let ret = unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, libc::CLOSE_RANGE_CLOEXEC) };
    if ret == 0 {
        return Ok(());
    }
    // Kernels before 5.11 lack CLOSE_RANGE_CLOEXEC: walk /proc/self/fd.
    let dir =
        std::fs::read_dir("/proc/self/fd").map_err(|e| SysError::new("read_dir", "/proc/self/fd", io_errno(&e)))?;
    let fds: Vec<RawFd> = dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect();
    for fd in fds.into_iter().filter(|fd| *fd >= first as RawFd) {
        // SAFETY: F_SETFD on an fd number; a stale number only yields EBADF.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    Ok(())
}

/// Closes every fd from `first` on except those in `keep`, with
/// `close_range(2)` over the gaps between them.
///
/// # Preconditions
/// No value that will still be dropped owns a closed fd (it would close a
/// later fd that reused the number).
pub(crate) fn close_fds_except(first: u32, keep: &[RawFd]) -> Result<(), SysError> {
    let mut keep: Vec<u32> = keep.iter().filter_map(|fd| u32::try_from(*fd).ok()).filter(|fd| *fd >= first).collect();
    keep.sort_unstable();
    keep.dedup();
    let mut from = first;
    for k in keep {
        if k > from {
            close_range(from, k - 1)?;
        }
        from = k + 1;
    }
    close_range(from, u32::MAX)
}

fn close_range(first: u32, last: u32) -> Result<(), SysError> {
    // SAFETY: plain syscall with integer arguments; the caller vouches that
    // nothing it will use again refers to these fds.
    let ret = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) };
    if ret < 0 {
        return Err(SysError::new("close_range", format_args!("{first}..={last}"), Errno::last()));
    }
    Ok(())
}

/// `open_tree(path, OPEN_TREE_CLONE)`: a detached bind mount of `path` (a
/// file or a directory), seen by no mount namespace, alive while the fd (or
/// a file opened through it, or a process executing it) is.
pub(crate) fn open_tree_clone(path: &CStr) -> Result<OwnedFd, SysError> {
    open_tree(path, false)
}

/// [`open_tree_clone`], with every mount below `path` too when `recursive`
/// (`AT_RECURSIVE`: an `rbind`).
pub(crate) fn open_tree(path: &CStr, recursive: bool) -> Result<OwnedFd, SysError> {
    const OPEN_TREE_CLONE: libc::c_uint = 1;
    #[allow(clippy::cast_sign_loss, reason = "O_CLOEXEC and AT_RECURSIVE are positive flag bits")]
    let flags = OPEN_TREE_CLONE
        | libc::O_CLOEXEC as libc::c_uint
        | if recursive { libc::AT_RECURSIVE as libc::c_uint } else { 0 };
    // SAFETY: `path` is NUL-terminated and outlives the call.
    let ret = unsafe { libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, path.as_ptr(), flags) };
    if ret < 0 {
        return Err(SysError::new("open_tree", path.to_string_lossy(), Errno::last()));
    }
    #[allow(clippy::cast_possible_truncation, reason = "the kernel returns an int fd")]
    let fd = ret as RawFd;
    // SAFETY: a fresh fd from the kernel.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `move_mount(fd, "", target, "", MOVE_MOUNT_F_EMPTY_PATH |
/// MOVE_MOUNT_T_EMPTY_PATH)`: attaches the detached mount `fd` (from
/// [`open_tree`]) on the directory or file `target` is open on.
pub(crate) fn move_mount(fd: impl AsFd, target: impl AsFd, shown: &str) -> Result<(), SysError> {
    const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
    const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;
    // SAFETY: both paths are empty NUL-terminated strings; the fds are open.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            fd.as_fd().as_raw_fd(),
            c"".as_ptr(),
            target.as_fd().as_raw_fd(),
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    if ret < 0 {
        return Err(SysError::new("move_mount", shown, Errno::last()));
    }
    Ok(())
}

/// `mount_setattr(fd, "", AT_EMPTY_PATH)`: sets and clears MOUNT_ATTR_*
/// bits on the mount `fd` refers to, and with `recursive` (AT_RECURSIVE)
/// on every mount below it.
pub(crate) fn mount_setattr(fd: impl AsFd, set: u64, clear: u64, recursive: bool) -> Result<(), SysError> {
    mount_setattr_with(fd.as_fd(), MountAttrs { set, clear, userns: None }, recursive)
}

/// What [`mount_setattr_with`] changes: `MOUNT_ATTR_*` bits to set and to
/// clear, and with `MOUNT_ATTR_IDMAP` the user namespace whose maps the
/// mount's owners are seen through.
pub(crate) struct MountAttrs<'a> {
    pub set: u64,
    pub clear: u64,
    pub userns: Option<std::os::fd::BorrowedFd<'a>>,
}

/// `mount_setattr(2)` with every field of its `mount_attr`.
pub(crate) fn mount_setattr_with(fd: impl AsFd, a: MountAttrs<'_>, recursive: bool) -> Result<(), SysError> {
    let (set, clear) = (a.set, a.clear);
    #[repr(C)]
    struct MountAttr {
        attr_set: u64,
        attr_clr: u64,
        propagation: u64,
        userns_fd: u64,
    }
    let userns_fd = match a.userns {
        Some(fd) => u64::try_from(fd.as_raw_fd()).map_err(|_| SysError::bare("mount_setattr", Errno::EBADF))?,
        None => 0,
    };
    let attr = MountAttr { attr_set: set, attr_clr: clear, propagation: 0, userns_fd };
    let flags = libc::AT_EMPTY_PATH | if recursive { libc::AT_RECURSIVE } else { 0 };
    // SAFETY: the empty path is NUL-terminated, `attr` lives on our stack for
    // the call and its size is passed.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd.as_fd().as_raw_fd(),
            c"".as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if ret < 0 {
        return Err(SysError::new("mount_setattr", format_args!("set={set:#x} clear={clear:#x}"), Errno::last()));
    }
    Ok(())
}

/// `execveat(fd, "", argv, envp, AT_EMPTY_PATH)`: runs the file `fd`
/// refers to. Returns only on failure.
pub(crate) fn execveat_fd(fd: &OwnedFd, argv: &[&CStr], envp: &[&CStr]) -> Errno {
    let argv: Vec<*const libc::c_char> =
        argv.iter().map(|a| a.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
    let envp: Vec<*const libc::c_char> =
        envp.iter().map(|e| e.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
    // SAFETY: both arrays are NULL-terminated and point at NUL-terminated
    // strings that outlive the call (which replaces this process on success).
    unsafe {
        libc::syscall(
            libc::SYS_execveat,
            fd.as_raw_fd(),
            c"".as_ptr(),
            argv.as_ptr(),
            envp.as_ptr(),
            libc::AT_EMPTY_PATH,
        )
    };
    Errno::last()
}

/// A sealed, read-only in-memory copy of the file open at `src`: an
/// executable nobody can write (`memfd_create` + the four seals).
pub(crate) fn memfd_sealed_copy(src: &std::fs::File) -> Result<OwnedFd, SysError> {
    // SAFETY: the name is NUL-terminated; a fresh fd is returned or -1.
    let fd = unsafe { libc::memfd_create(c"tinyrun".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(SysError::bare("memfd_create", Errno::last()));
    }
    // SAFETY: a fresh fd from the kernel.
    let mem = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut from = src;
    let mut to = std::fs::File::from(mem.try_clone().map_err(|e| SysError::bare("dup memfd", io_errno(&e)))?);
    std::io::copy(&mut from, &mut to)
        .map_err(|e| SysError::bare("copy the runtime binary to a memfd", io_errno(&e)))?;
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    // SAFETY: F_ADD_SEALS takes an int.
    if unsafe { libc::fcntl(mem.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
        return Err(SysError::bare("seal the memfd copy", Errno::last()));
    }
    Ok(mem)
}

/// The seals on `fd` (0 for a file that can't have any).
pub(crate) fn seals(fd: &impl AsRawFd) -> i32 {
    // SAFETY: F_GET_SEALS takes no argument.
    unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) }.max(0)
}

/// `setdomainname(2)`, which nix does not wrap.
pub(crate) fn setdomainname(name: &str) -> Result<(), SysError> {
    // SAFETY: the pointer and length describe `name`'s bytes, which outlive the call.
    let ret = unsafe { libc::setdomainname(name.as_ptr().cast(), name.len()) };
    if ret < 0 {
        return Err(SysError::new("setdomainname", name, Errno::last()));
    }
    Ok(())
}

/// `execve(2)`; returns only on failure.
pub(crate) fn execve(path: &CStr, argv: &[&CStr], envp: &[&CStr]) -> Errno {
    match nix::unistd::execve(path, argv, envp) {
        Err(e) => e,
        Ok(never) => match never {},
    }
}

/// Ends a forked child without running any of the parent's exit handlers or
/// flushing buffers that belong to the parent.
pub fn exit_child(code: i32) -> ! {
    // SAFETY: _exit is async-signal-safe and never returns.
    unsafe { libc::_exit(code) }
}

pub(crate) fn io_errno(e: &std::io::Error) -> Errno {
    Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))
}

const KEYCTL_JOIN_SESSION_KEYRING: libc::c_int = 1;

/// Joins a new session keyring named `name`, so the container can't read
/// the host session's keys.
pub(crate) fn join_session_keyring(name: &str) -> Result<(), SysError> {
    let cname = std::ffi::CString::new(name).map_err(|_| SysError::new("keyctl", name, Errno::EINVAL))?;
    // SAFETY: KEYCTL_JOIN_SESSION_KEYRING takes a NUL-terminated name that
    // outlives the call.
    let ret = unsafe { libc::syscall(libc::SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, cname.as_ptr()) };
    if ret < 0 {
        return Err(SysError::new("keyctl join session keyring", name, Errno::last()));
    }
    Ok(())
}

/// Puts every signal back to its default action and unblocks them all, so
/// the container's program doesn't inherit the runtime's choices (Rust
/// ignores SIGPIPE; a foreground `run` blocks everything).
pub fn reset_signals() {
    for sig in 1..libc::SIGRTMAX() {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: installing SIG_DFL is always valid; errors (invalid signal
        // numbers reserved by libc) are harmless and ignored.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
    }
    let _ = nix::sys::signal::sigprocmask(
        nix::sys::signal::SigmaskHow::SIG_SETMASK,
        Some(&nix::sys::signal::SigSet::empty()),
        None,
    );
}

/// Sets O_NONBLOCK on `fd`'s open file description (shared with every
/// copy of it, in this process or another).
pub(crate) fn set_nonblocking(fd: impl AsFd) -> Result<(), SysError> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let raw = fd.as_fd().as_raw_fd();
    let flags = fcntl(raw, FcntlArg::F_GETFL).map_err(|e| SysError::bare("fcntl F_GETFL", e))?;
    let flags = OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK;
    fcntl(raw, FcntlArg::F_SETFL(flags)).map(drop).map_err(|e| SysError::bare("fcntl F_SETFL O_NONBLOCK", e))
}

/// `accept4(2)` with close-on-exec, retried on EINTR.
pub(crate) fn accept(listener: &OwnedFd, nonblock: bool) -> Result<OwnedFd, SysError> {
    use nix::sys::socket::SockFlag;
    let flags = if nonblock { SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK } else { SockFlag::SOCK_CLOEXEC };
    loop {
        match nix::sys::socket::accept4(listener.as_raw_fd(), flags) {
            // SAFETY: accept4 returned a fresh fd that we now own.
            Ok(fd) => return Ok(unsafe { OwnedFd::from_raw_fd(fd) }),
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(SysError::bare("accept", e)),
        }
    }
}

nix::ioctl_write_ptr_bad!(ioctl_set_winsize, libc::TIOCSWINSZ, nix::pty::Winsize);
nix::ioctl_read_bad!(ioctl_get_winsize, libc::TIOCGWINSZ, nix::pty::Winsize);
nix::ioctl_write_int_bad!(ioctl_set_ctty, libc::TIOCSCTTY);

/// TIOCSWINSZ on a terminal fd.
pub(crate) fn set_winsize(fd: RawFd, ws: &nix::pty::Winsize) -> Result<(), Errno> {
    // SAFETY: TIOCSWINSZ reads one Winsize through a pointer that is valid
    // for the call.
    unsafe { ioctl_set_winsize(fd, ws) }.map(|_| ())
}

/// TIOCGWINSZ on a terminal fd.
pub(crate) fn get_winsize(fd: RawFd) -> Result<nix::pty::Winsize, Errno> {
    let mut ws = nix::pty::Winsize { ws_row: 0, ws_col: 0, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCGWINSZ writes one Winsize through a valid pointer.
    unsafe { ioctl_get_winsize(fd, &mut ws) }?;
    Ok(ws)
}

nix::ioctl_write_int_bad!(ioctl_get_peer, libc::TIOCGPTPEER);

/// TIOCGPTPEER: opens the slave of pty master `master` from the master
/// itself, read-write, without making it a controlling terminal.
pub(crate) fn pty_peer(master: RawFd) -> Result<OwnedFd, Errno> {
    let flags = libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC;
    // SAFETY: TIOCGPTPEER takes open flags as an integer and returns a new fd.
    let fd = unsafe { ioctl_get_peer(master, flags) }?;
    // SAFETY: the kernel just returned this fd to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Makes this process non-dumpable: its /proc files become root's, and
/// /proc/<pid>/exe, /mem and the like can't be opened by others without
/// CAP_SYS_PTRACE. A clone inherits it.
pub(crate) fn set_non_dumpable() -> Result<(), SysError> {
    nix::sys::prctl::set_dumpable(false).map_err(|e| SysError::bare("prctl(PR_SET_DUMPABLE, 0)", e))
}

/// TIOCSCTTY: make `fd` (a pty slave) the session's controlling terminal.
pub(crate) fn set_ctty(fd: RawFd) -> Result<(), Errno> {
    // SAFETY: TIOCSCTTY takes an integer argument, not a pointer.
    unsafe { ioctl_set_ctty(fd, 0) }.map(|_| ())
}

/// Receives one datagram or stream chunk into `buf` with the fds sent
/// alongside it (`SCM_RIGHTS`, up to 8, close-on-exec), retrying EINTR.
/// Returns the fds and the number of bytes read; EMSGSIZE (the fds that
/// did come closed again) when more were sent.
pub(crate) fn recv_fds(socket: impl AsFd, buf: &mut [u8]) -> Result<(Vec<OwnedFd>, usize), Errno> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut space = nix::cmsg_space!([RawFd; 8]);
    let mut iov = [std::io::IoSliceMut::new(buf)];
    let msg = loop {
        match recvmsg::<()>(socket.as_fd().as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC) {
            Err(Errno::EINTR) => continue,
            r => break r?,
        }
    };
    let mut fds = Vec::new();
    for c in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(raw) = c {
            // SAFETY: SCM_RIGHTS hands us new fds of our own, which nothing
            // else in this process refers to.
            fds.extend(raw.into_iter().map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }));
        }
    }
    if msg.flags.contains(MsgFlags::MSG_CTRUNC) {
        return Err(Errno::EMSGSIZE);
    }
    Ok((fds, msg.bytes))
}

/// [`recv_fds`] of a message that must carry exactly one fd (else EBADMSG).
pub(crate) fn recv_fd(socket: impl AsFd, buf: &mut [u8]) -> Result<OwnedFd, Errno> {
    let (mut fds, _) = recv_fds(socket, buf)?;
    match (fds.pop(), fds.is_empty()) {
        (Some(fd), true) => Ok(fd),
        _ => Err(Errno::EBADMSG),
    }
}

/// `openat(2)` relative to `dir`, close-on-exec, as an owned fd.
pub(crate) fn openat<P: ?Sized + nix::NixPath>(
    dir: impl AsFd,
    name: &P,
    flags: nix::fcntl::OFlag,
    mode: nix::sys::stat::Mode,
) -> Result<OwnedFd, Errno> {
    let fd = nix::fcntl::openat(Some(dir.as_fd().as_raw_fd()), name, flags | nix::fcntl::OFlag::O_CLOEXEC, mode)?;
    // SAFETY: openat returned a fresh fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

// ioctl's request is an unsigned long in glibc and an int in musl.
#[allow(clippy::unnecessary_cast, clippy::cast_possible_truncation, reason = "0x8913 fits either type")]
const SIOCGIFFLAGS: libc::Ioctl = libc::SIOCGIFFLAGS as libc::Ioctl;
#[allow(clippy::unnecessary_cast, clippy::cast_possible_truncation, reason = "0x8914 fits either type")]
const SIOCSIFFLAGS: libc::Ioctl = libc::SIOCSIFFLAGS as libc::Ioctl;

/// Brings `lo` up in the calling process's network namespace.
pub(crate) fn loopback_up() -> Result<(), SysError> {
    let sock = nix::sys::socket::socket(
        nix::sys::socket::AddressFamily::Inet,
        nix::sys::socket::SockType::Datagram,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(|e| SysError::new("socket", "AF_INET for lo", e))?;
    // SAFETY: ifreq is a plain C struct; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS fills ifr_flags of the ifreq we pass by pointer.
    if unsafe { libc::ioctl(sock.as_raw_fd(), SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(SysError::new("ioctl SIOCGIFFLAGS", "lo", Errno::last()));
    }
    #[allow(clippy::cast_possible_truncation, reason = "interface flags in the low 16 bits")]
    let up = (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    // SAFETY: the union member ifru_flags is the one SIOCGIFFLAGS just set.
    unsafe { req.ifr_ifru.ifru_flags |= up };
    // SAFETY: SIOCSIFFLAGS reads the ifreq we pass by pointer.
    if unsafe { libc::ioctl(sock.as_raw_fd(), SIOCSIFFLAGS, &req) } < 0 {
        return Err(SysError::new("ioctl SIOCSIFFLAGS", "lo", Errno::last()));
    }
    Ok(())
}
