//! Terminals: `process.terminal`.
//!
//! The pty is made by init *inside* the container (from its own devpts
//! instance, after pivot_root), so the container never holds a host pty.
//! The master goes, as exactly one `SCM_RIGHTS` fd, to the console socket
//! the caller named (`--console-socket`), or to the runtime itself for a
//! foreground `run`/`exec -t` or a program a resident init runs on a
//! terminal, which then relays it to its own stdio. The
//! slave becomes the process's stdio and controlling terminal (and init
//! binds it over `/dev/console` through the rootfs layer).

use std::io::IoSlice;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use nix::fcntl::OFlag;
use nix::pty::{grantpt, posix_openpt, ptsname_r, unlockpt, Winsize};
use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};

use crate::error::{InitError, SysError};
use crate::sys;

/// Container side: make the pty, hand the master over `socket`, and take
/// the slave as stdio and controlling terminal. `uid`/`gid` will own the
/// slave, which is returned (init binds it over /dev/console: see
/// [`crate::rootfs::bind_console`]).
///
/// # Preconditions
/// Runs after pivot_root (or setns into the container's mount namespace),
/// before the user switch (or, in a resident init's child, as the user
/// that will own the slave anyway), in a new session without a
/// controlling terminal ([`crate::process::finalize::begin`]); /dev/ptmx
/// and /dev/pts are the container's own.
pub(crate) fn setup_console(socket: RawFd, size: Option<(u16, u16)>, uid: u32, gid: u32) -> Result<OwnedFd, InitError> {
    let master = posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)
        .map_err(|e| InitError::path("open", "/dev/ptmx", e))?;
    let pty = master.as_raw_fd();
    grantpt(&master).map_err(|e| InitError::fd("grantpt", pty, e))?;
    unlockpt(&master).map_err(|e| InitError::fd("unlockpt", pty, e))?;
    // The slave is opened from the master, not by its /dev/pts name, which
    // a process in the container could have replaced.
    let slave = sys::pty_peer(pty).map_err(|e| InitError::fd("open pty slave (TIOCGPTPEER) of", pty, e))?;
    let (owner, group) = (nix::unistd::Uid::from_raw(uid), nix::unistd::Gid::from_raw(gid));
    nix::unistd::fchown(slave.as_raw_fd(), Some(owner), Some(group))
        .map_err(|e| InitError::value("chown pty slave to", format_args!("{uid}:{gid}"), e))?;
    if let Some((rows, cols)) = size {
        let ws = Winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
        sys::set_winsize(pty, &ws).map_err(|e| {
            InitError::value("set console size", format_args!("{rows}x{cols}"), e).field("process.consoleSize")
        })?;
    }
    let name = ptsname_r(&master).map_err(|e| InitError::fd("ptsname", pty, e))?;
    send_fd(socket, pty, name.as_bytes())
        .map_err(|e| InitError::fd("send pty master to console socket", socket, e.errno))?;
    drop(master);
    sys::set_ctty(slave.as_raw_fd()).map_err(|e| InitError::sys("make the pty the controlling terminal", e))?;
    for fd in 0..3 {
        nix::unistd::dup2(slave.as_raw_fd(), fd).map_err(|e| InitError::fd("dup2 pty slave to", fd, e))?;
    }
    Ok(slave)
}

/// A connected pair for a foreground terminal: init sends the pty master
/// on one end, the runtime receives it on the other (runtime's end first).
pub(crate) fn console_pair() -> Result<(OwnedFd, OwnedFd), SysError> {
    nix::sys::socket::socketpair(
        nix::sys::socket::AddressFamily::Unix,
        nix::sys::socket::SockType::Stream,
        None,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
    )
    .map_err(|e| SysError::bare("socketpair", e))
}

/// Sends `fd` as the one and only `SCM_RIGHTS` fd, with `payload` as data
/// (go-runc and conmon insist on exactly one fd in one message).
pub(crate) fn send_fd(socket: RawFd, fd: RawFd, payload: &[u8]) -> Result<(), SysError> {
    let fds = [fd];
    let cmsg = [ControlMessage::ScmRights(&fds)];
    let iov = [IoSlice::new(if payload.is_empty() { b"\0" } else { payload })];
    sendmsg::<()>(socket, &iov, &cmsg, MsgFlags::empty(), None).map_err(|e| SysError::bare("sendmsg", e))?;
    Ok(())
}

/// Receives one fd sent by [`send_fd`].
pub(crate) fn recv_fd(socket: impl std::os::fd::AsFd) -> Result<OwnedFd, SysError> {
    let mut buf = [0u8; 4096];
    sys::recv_fd(socket, &mut buf).map_err(|e| SysError::bare("receive pty master", e))
}

/// Copies the window size of `from` (our terminal) to `to` (the pty
/// master); a failure (not a terminal) is ignored.
pub(crate) fn copy_winsize(from: RawFd, to: RawFd) {
    if let Ok(ws) = sys::get_winsize(from) {
        let _ = sys::set_winsize(to, &ws);
    }
}

/// `process.consoleSize` as (rows, columns); a terminal can't be larger
/// than 65535 either way.
pub(crate) fn console_size(b: &oci_spec::runtime::Box) -> (u16, u16) {
    let clamp = |n: u64| u16::try_from(n).unwrap_or(u16::MAX);
    (clamp(b.height()), clamp(b.width()))
}
