//! A leaf cgroup of its own for each program a resident init runs
//! (`Resident::spawn`), so that the program and everything it starts
//! (a `setsid`, a double fork, a daemon) can be told apart from the rest of
//! the container and killed as one: cgroup v2's `cgroup.kill`, or on v1 a
//! freezer leaf frozen, SIGKILLed member by member and thawed.
//!
//! The runtime (host root) makes the leaf and opens its files; init gets
//! the fds with the request ([`LeafFds`]). Since Linux 5.16 a write to
//! `cgroup.procs` is checked against the credentials and cgroup namespace
//! of whoever opened the file, so init's forked child, unprivileged inside
//! the container, can move itself in through the runtime's fd, and does so
//! before execve or does not run at all. With the other fd init can kill
//! the leaf when its caller goes away. Init calls only [`LeafFds`]' methods;
//! the rest runs in the runtime process.
//!
//! A leaf is removed once its program's result is known: what the program
//! left running moves up into the container's own cgroup and lives on. A
//! leaf that could not go (its caller was killed, or its processes were
//! still dying) is removed by the next leaf made in the same container:
//! the caller holds a lock on its leaf's directory while it lives, so an
//! unlocked leaf is no one's. Leaves are swept, made and locked under a
//! lock on their parent, so a leaf is never seen unlocked between its
//! making and its locking.

use std::io::ErrorKind;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::fcntl::{Flock, FlockArg};

use super::check::Layout;
use super::{io_err, Cgroup, Result};

/// Leaves' names start with this.
const PREFIX: &str = "exec-";

/// The two files of a leaf that init works through.
#[derive(Debug)]
pub(crate) struct LeafFds {
    /// v2 `cgroup.procs`, or v1 `tasks`: joined by writing "0". On v1 also
    /// read for the members (thread ids, in the reader's pid namespace;
    /// a kill of any of them is a kill of its process). Moving the caller's
    /// own thread through `tasks` skips the lock a `cgroup.procs` write
    /// takes for every cgroup of the host, which waits for an RCU grace
    /// period: 0.2 ms instead of 5 ms and more. Init's child is
    /// single-threaded, so its thread is all of it.
    pub procs: OwnedFd,
    /// v2 `cgroup.kill`, or v1 `freezer.state`.
    pub ctl: OwnedFd,
    pub v2: bool,
}

impl LeafFds {
    /// Moves the calling process into the leaf. Runs in init's forked
    /// child, between fork and exec: no allocation.
    pub(crate) fn join(&self) -> std::result::Result<(), nix::errno::Errno> {
        nix::unistd::write(&self.procs, b"0").map(drop)
    }

    /// SIGKILLs every process in the leaf, those it forks meanwhile
    /// included (module `kill`). Best effort and bounded: init calls this
    /// too.
    pub(crate) fn kill(&self) {
        let ctl = super::kill::Control { fd: self.ctl.as_fd(), v2: self.v2 };
        super::kill::kill_all(Some(ctl), || self.members());
    }

    /// v1: the threads in the leaf, as the caller's pid namespace numbers
    /// them.
    fn members(&self) -> Vec<i32> {
        let mut text = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let off = i64::try_from(text.len()).unwrap_or(i64::MAX);
            match nix::sys::uio::pread(&self.procs, &mut buf, off) {
                Ok(0) | Err(_) => break,
                Ok(n) => text.extend_from_slice(buf.get(..n).unwrap_or_default()),
            }
        }
        parse_pids(&text)
    }
}

/// The numbers of a `cgroup.procs` listing.
fn parse_pids(text: &[u8]) -> Vec<i32> {
    let text = String::from_utf8_lossy(text);
    text.lines().filter_map(|l| l.trim().parse().ok()).collect()
}

/// A leaf the runtime made, held (locked) while its program runs.
#[derive(Debug)]
pub(crate) struct Leaf {
    dir: PathBuf,
    /// The directory itself, flocked: see the module doc.
    _lock: Flock<std::fs::File>,
    fds: LeafFds,
}

impl Cgroup {
    /// Where leaves of the container's cgroup are made (v1: under its
    /// freezer cgroup), and whether that is cgroup v2.
    pub(crate) fn leaf_parent(&self) -> (PathBuf, bool) {
        let v2 = self.layout == Layout::Unified;
        (if v2 { self.v2_dir() } else { self.v1_dir("freezer") }, v2)
    }
}

impl Leaf {
    /// Makes a new leaf under `parent` (a [`Cgroup::leaf_parent`]) and
    /// opens it for init; removes leaves no one holds.
    pub(crate) fn make(parent: &Path, v2: bool) -> Result<Leaf> {
        // Sweep, make and lock under the parent's lock: otherwise a sweep
        // by another caller could take a leaf made but not yet locked for
        // no one's and remove it under its maker (concurrent execs in one
        // container). Held for microseconds.
        let parent_dir = std::fs::File::open(parent).map_err(io_err("open", parent))?;
        let _making =
            Flock::lock(parent_dir, FlockArg::LockExclusive).map_err(|(_, e)| io_err("lock", parent)(e.into()))?;
        sweep(parent);
        let dir = new_dir(parent)?;
        let made = (|| {
            let file = std::fs::File::open(&dir).map_err(io_err("open", &dir))?;
            let lock = Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, e)| io_err("lock", &dir)(e.into()))?;
            let open = |name: &str, read: bool| -> Result<OwnedFd> {
                let p = dir.join(name);
                let f = std::fs::OpenOptions::new().read(read).write(true).open(&p).map_err(io_err("open", &p))?;
                Ok(f.into())
            };
            let fds = if v2 {
                LeafFds { procs: open("cgroup.procs", false)?, ctl: open("cgroup.kill", false)?, v2 }
            } else {
                LeafFds { procs: open("tasks", true)?, ctl: open("freezer.state", true)?, v2 }
            };
            Ok(Leaf { dir: dir.clone(), _lock: lock, fds })
        })();
        if made.is_err() {
            let _ = std::fs::remove_dir(&dir);
        }
        made
    }
}

/// A fresh `exec-*` directory under `parent`.
fn new_dir(parent: &Path) -> Result<PathBuf> {
    let pid = std::process::id();
    for n in 0u32.. {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let dir = parent.join(format!("{PREFIX}{pid}-{}{n}", nanos.subsec_nanos()));
        match std::fs::create_dir(&dir) {
            Err(e) if e.kind() == ErrorKind::AlreadyExists && n < 16 => continue,
            r => return r.map(|()| dir.clone()).map_err(io_err("make the program's cgroup", &dir)),
        }
    }
    Err(io_err("make the program's cgroup", parent)(ErrorKind::AlreadyExists.into()))
}

/// Removes the leaves under `parent` whose maker is gone (no lock) and
/// that are empty; a populated one stays for a later sweep.
fn sweep(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    for e in entries.flatten() {
        let name = e.file_name();
        if !name.to_str().is_some_and(|n| n.starts_with(PREFIX)) || !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let Ok(dir) = std::fs::File::open(e.path()) else { continue };
        if Flock::lock(dir, FlockArg::LockExclusiveNonblock).is_ok() {
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

/// What to do with processes still in a leaf when it is released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Survivors {
    /// They live on in the container's cgroup (children a program left).
    Keep,
    /// They were killed and are on their way out: wait a little for them.
    Dying,
}

impl Leaf {
    pub(crate) fn fds(&self) -> &LeafFds {
        &self.fds
    }

    /// Removes the leaf. Survivors to keep move up into the container's
    /// cgroup first (a few rounds: one may fork meanwhile); dying ones are
    /// waited for briefly. A leaf that still can't go is left to a sweep.
    pub(crate) fn release(self, survivors: Survivors) {
        let procs = self.dir.join("cgroup.procs");
        let parent = self.dir.parent().map(|p| p.join("cgroup.procs"));
        for round in 0..20 {
            match std::fs::remove_dir(&self.dir) {
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {}
                _ => return,
            }
            match (survivors, &parent) {
                (Survivors::Keep, Some(up)) if round < 10 => {
                    let listed = crate::sys::fs::read_proc(&procs).unwrap_or_default();
                    for pid in parse_pids(listed.as_bytes()) {
                        let _ = std::fs::write(up, pid.to_string());
                    }
                }
                _ => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture;
    use super::*;

    #[test]
    fn pids_are_read_from_a_listing() {
        assert_eq!(parse_pids(b"12\n345\n\nx\n7"), [12, 345, 7]);
        assert!(parse_pids(b"").is_empty());
    }

    #[test]
    fn a_leaf_is_made_under_the_freezer_or_the_unified_cgroup() {
        let root = tempfile::tempdir().unwrap();
        for (layout, under) in [(Layout::Hybrid, "freezer/t/ct"), (Layout::Unified, "t/ct")] {
            let cg = fixture::cgroup(root.path(), layout, "/t/ct");
            let parent = root.path().join(under);
            std::fs::create_dir_all(&parent).unwrap();
            // A tempdir has no cgroupfs files: opening them fails, and the
            // leaf made meanwhile is removed again.
            let (at, v2) = cg.leaf_parent();
            assert_eq!((at.as_path(), v2), (parent.as_path(), layout == Layout::Unified));
            let e = Leaf::make(&at, v2).unwrap_err().to_string();
            let want = if layout == Layout::Unified { "cgroup.procs" } else { "tasks" };
            assert!(e.contains(want), "{e}");
            assert_eq!(std::fs::read_dir(&parent).unwrap().count(), 0, "{layout:?}: nothing left");
        }
    }

    #[test]
    fn a_sweep_removes_only_unheld_leaves() {
        let root = tempfile::tempdir().unwrap();
        let parent = root.path();
        for d in ["exec-1-1", "exec-2-2", "other"] {
            std::fs::create_dir(parent.join(d)).unwrap();
        }
        let held = std::fs::File::open(parent.join("exec-2-2")).unwrap();
        let _held = Flock::lock(held, FlockArg::LockExclusive).unwrap();
        sweep(parent);
        let mut left: Vec<String> =
            std::fs::read_dir(parent).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        left.sort();
        assert_eq!(left, ["exec-2-2", "other"]);
    }
}
