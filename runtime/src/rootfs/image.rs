//! Files of the container's image that init reads for itself, after
//! pivot_root: `/etc/passwd` (for `HOME`) and the `#!` line of the program
//! and its interpreters (to refuse the runtime's own binary).
//!
//! The image is hostile. A FIFO there would block `open` forever and hang
//! `create`; a device or a magic link to one of init's fds would read
//! something else; a file can be huge. So only regular files are read,
//! opened non-blocking, without following magic links, and up to a bound.

use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::Path;

use nix::fcntl::OFlag;

fn open_regular(path: &Path) -> Option<std::fs::File> {
    let flags = OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY;
    let fd: OwnedFd = crate::sys::fs::open_no_magiclinks(path, flags).ok()?;
    let st = nix::sys::stat::fstat(std::os::fd::AsRawFd::as_raw_fd(&fd)).ok()?;
    (st.st_mode & libc::S_IFMT == libc::S_IFREG).then(|| std::fs::File::from(fd))
}

/// The whole file, if it is a regular file of at most `max` bytes.
pub(crate) fn read_small(path: &Path, max: u64) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    open_regular(path)?.take(max + 1).read_to_end(&mut buf).ok()?;
    (buf.len() as u64 <= max).then_some(buf)
}

/// Up to `n` bytes from the start of a regular file.
pub(crate) fn read_head(path: &Path, n: u64) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    open_regular(path)?.take(n).read_to_end(&mut buf).ok()?;
    Some(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_small_regular_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("passwd");
        std::fs::write(&file, "root:x:0:0::/root:/bin/sh\n").unwrap();
        assert_eq!(read_small(&file, 1024).unwrap(), b"root:x:0:0::/root:/bin/sh\n");
        assert!(read_small(&file, 4).is_none(), "over the bound");
        assert_eq!(read_head(&file, 4).unwrap(), b"root");
        // A FIFO nobody writes to: open must not block, and it is not read.
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        assert!(read_small(&fifo, 1024).is_none());
        assert!(read_head(&fifo, 256).is_none());
        assert!(read_small(Path::new("/dev/zero"), 1024).is_none(), "a device");
        assert!(read_small(&dir.path().join("missing"), 1024).is_none());
        // A magic link to one of our fds is refused, not followed.
        let held = std::fs::File::open(&file).unwrap();
        let magic = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&held));
        assert!(read_small(Path::new(&magic), 1024).is_none());
    }
}
