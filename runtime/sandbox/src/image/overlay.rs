//! An overlay made with the new mount API (`fsopen`, `fsconfig` with
//! `lowerdir+` and the others given as fds, `fsmount`) and attached
//! nowhere: its fd is its root, and it goes with its last fd. Runs in the
//! runtime process; the calls are rustix's.

use std::ffi::CStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use nix::errno::Errno;
use rustix::mount::{FsMountFlags, FsOpenFlags, MountAttrFlags};

/// What an overlay mount is made of: each lower layer (top first) and the
/// upper and work directories as fds of directories (`O_RDONLY`), and
/// more `key=value` options (a flag where the value is empty).
pub(super) struct Parts<'a> {
    pub(super) lowers: Vec<BorrowedFd<'a>>,
    pub(super) upper: (BorrowedFd<'a>, BorrowedFd<'a>),
    pub(super) options: &'a [(&'a CStr, &'a CStr)],
}

/// Which step of the mount failed, the kernel's answer, and what the file
/// system wrote to its context's log.
#[derive(Debug)]
pub(super) struct MountApiError {
    op: &'static str,
    errno: Errno,
    log: String,
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

fn failed(op: &'static str) -> impl FnOnce(rustix::io::Errno) -> MountApiError {
    move |e| MountApiError { op, errno: Errno::from_raw(e.raw_os_error()), log: String::new() }
}

/// The overlay of `parts`, with the mount's `MOUNT_ATTR_*` flags `attrs`.
/// Layers given as fds need Linux 6.13.
pub(super) fn mount(parts: &Parts<'_>, attrs: MountAttrFlags) -> Result<OwnedFd, MountApiError> {
    let fs = rustix::mount::fsopen("overlay", FsOpenFlags::FSOPEN_CLOEXEC).map_err(failed("fsopen overlay"))?;
    let with_log = |e: MountApiError| MountApiError { log: log(&fs), ..e };
    let upper = [("upperdir", "fsconfig upperdir", parts.upper.0), ("workdir", "fsconfig workdir", parts.upper.1)];
    let lowers = parts.lowers.iter().map(|l| ("lowerdir+", "fsconfig lowerdir+", *l));
    for (key, op, fd) in lowers.chain(upper) {
        rustix::mount::fsconfig_set_fd(&fs, key, fd).map_err(failed(op)).map_err(with_log)?;
    }
    for (key, value) in parts.options {
        let set = if value.is_empty() {
            rustix::mount::fsconfig_set_flag(&fs, *key)
        } else {
            rustix::mount::fsconfig_set_string(&fs, *key, *value)
        };
        set.map_err(failed("fsconfig")).map_err(with_log)?;
    }
    rustix::mount::fsconfig_create(&fs).map_err(failed("fsconfig create")).map_err(with_log)?;
    rustix::mount::fsmount(&fs, FsMountFlags::FSMOUNT_CLOEXEC, attrs).map_err(failed("fsmount")).map_err(with_log)
}

/// The messages a file system context logged (`e ...`, `w ...`), joined.
fn log(fs: &OwnedFd) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 1024];
    // Each read returns one message; ENODATA when none is left.
    while let Ok(n) = rustix::io::read(fs.as_fd(), &mut buf) {
        if n == 0 || out.len() > 8 {
            break;
        }
        out.push(String::from_utf8_lossy(buf.get(..n).unwrap_or_default()).trim().to_string());
    }
    out.join("; ")
}
