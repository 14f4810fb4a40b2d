//! Children the sandbox leaves running once the command that forked them
//! has returned: a root's reaper (module `reaper`) and a pool's refill
//! after a run. Runs in the runtime process and in the child.

use std::os::fd::{AsRawFd, BorrowedFd, RawFd};

use tinyrun::os::Forked;

use crate::error::{Error, Result};

/// Forks (`tinyrun::os::fork`): `true` in the child.
///
/// # Preconditions
/// The caller is single-threaded.
pub(crate) fn fork() -> Result<bool> {
    match tinyrun::os::fork() {
        Ok(Forked::Child) => Ok(true),
        Ok(Forked::Parent(_)) => Ok(false),
        Err(e) => Err(Error::Sys { op: "fork", errno: e.errno }),
    }
}

/// In a forked child that outlives its caller: a session of its own (no
/// terminal, nobody's job), /dev/null as stdin, stdout and stderr, and
/// every other fd but `keep` closed, so the child holds none of the
/// caller's pipes or files open (the caller's stdout may be a pipe that
/// its own caller reads to EOF).
pub(crate) fn detach(keep: &[BorrowedFd<'_>]) {
    let _ = nix::unistd::setsid();
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

/// Ends the child without running the caller's exit handlers or flushing
/// buffers that are the caller's.
pub(crate) fn exit(code: i32) -> ! {
    tinyrun::os::exit_child(code)
}
