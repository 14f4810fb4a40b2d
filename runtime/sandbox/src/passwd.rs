//! Reading a box root's `/etc/passwd` and `/etc/group`, to turn user and
//! group names into ids as an engine does. In an image they are files
//! nobody reviewed: each is opened inside the root (`tinyrun::tree`, a
//! link followed as the box would follow it, never out of the root), read
//! only if it is a regular file (a FIFO would block us), and at most
//! [`MAX_FILE`] bytes of it. Lines that don't parse are skipped, as glibc
//! skips them. Runs in the runtime process.

use std::io::Read;
use std::path::Path;

use nix::fcntl::OFlag;
use nix::sys::stat::SFlag;
use tinyrun::tree::Tree;

use crate::error::{Error, Result};

/// The most bytes read of either file (a real one is a few KiB).
const MAX_FILE: u64 = 1 << 20;

/// A line of /etc/passwd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct User {
    pub(crate) name: String,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) home: String,
}

/// A line of /etc/group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Group {
    pub(crate) name: String,
    pub(crate) gid: u32,
    pub(crate) members: Vec<String>,
}

/// The users of `root`'s /etc/passwd (none if it has none).
pub(crate) fn users(root: &Tree) -> Result<Vec<User>> {
    let text = read_small(root, "/etc/passwd")?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            let (name, uid, gid, home) = (f.first()?, f.get(2)?.parse().ok()?, f.get(3)?.parse().ok()?, f.get(5)?);
            Some(User { name: name.to_string(), uid, gid, home: home.to_string() })
        })
        .collect())
}

/// The groups of `root`'s /etc/group (none if it has none).
pub(crate) fn groups(root: &Tree) -> Result<Vec<Group>> {
    let text = read_small(root, "/etc/group")?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            let (name, gid, members) = (f.first()?, f.get(2)?.parse().ok()?, f.get(3).unwrap_or(&""));
            let members = members.split(',').filter(|m| !m.is_empty()).map(str::to_string).collect();
            Some(Group { name: name.to_string(), gid, members })
        })
        .collect())
}

/// The text of the regular file `path` in `root`, empty if there is none.
fn read_small(root: &Tree, path: &str) -> Result<String> {
    let shown = || root.describe(Path::new(path));
    let flags = OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY;
    let fd = match root.open_in(Path::new(path), flags) {
        Ok(fd) => fd,
        Err(e) if matches!(e.errno, nix::errno::Errno::ENOENT | nix::errno::Errno::ENOTDIR) => return Ok(String::new()),
        Err(e) => return Err(e.into()),
    };
    let st = nix::sys::stat::fstat(std::os::fd::AsRawFd::as_raw_fd(&fd))
        .map_err(|e| Error::io("stat", shown(), e.into()))?;
    if SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) != SFlag::S_IFREG {
        return Err(Error::InvalidArgument(format!("{} is not a regular file", shown())));
    }
    let mut bytes = Vec::new();
    std::fs::File::from(fd).take(MAX_FILE + 1).read_to_end(&mut bytes).map_err(|e| Error::io("read", shown(), e))?;
    if bytes.len() as u64 > MAX_FILE {
        return Err(Error::InvalidArgument(format!("{} is larger than {MAX_FILE} bytes", shown())));
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_read_inside_the_root_and_tolerantly() {
        let t = tempfile::tempdir().unwrap();
        let outside = t.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("passwd"), "evil:x:0:0::/:/bin/sh\n").unwrap();
        let root = t.path().join("root");
        std::fs::create_dir_all(root.join("etc")).unwrap();
        let tree = Tree::open(&root).unwrap();
        assert_eq!(users(&tree).unwrap(), vec![], "no file, no users");
        // An absolute link to the host's directory stays in the root.
        std::os::unix::fs::symlink(outside.join("passwd"), root.join("etc/passwd")).unwrap();
        assert_eq!(users(&tree).unwrap(), vec![]);
        std::fs::remove_file(root.join("etc/passwd")).unwrap();
        std::fs::write(root.join("etc/passwd"), "app:x:1001:1002:App:/home/app:/bin/sh\nbroken\nx:x:y:1::/\n").unwrap();
        let app = User { name: "app".into(), uid: 1001, gid: 1002, home: "/home/app".into() };
        assert_eq!(users(&tree).unwrap(), vec![app]);
        std::fs::write(root.join("etc/group"), "staff:x:50:app,bob\nnone:x:51:\n").unwrap();
        let g = groups(&tree).unwrap();
        assert_eq!(g[0].members, ["app", "bob"]);
        assert!(g[1].members.is_empty());
        nix::unistd::mkfifo(&root.join("etc/fifo"), nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        let e = read_small(&tree, "/etc/fifo").unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
    }
}
