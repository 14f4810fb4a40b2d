//! SIGKILL for every process of a cgroup, those forked meanwhile
//! included: the one way the runtime kills a cgroup whole, for a program
//! of a resident init (its leaf, module `leaf`, through the leaf's fds,
//! also in init) and for a container that `delete` or `kill --all KILL`
//! ends. Runs in the runtime process and in init: nothing here panics.
//!
//! v2 writes `cgroup.kill`: the kernel kills the cgroup and everything
//! below it at once. v1 freezes the cgroup, SIGKILLs each process listed,
//! and thaws it, a few rounds: a frozen process can't fork past the
//! signal, which it gets once it runs again (in a paused container too,
//! which is thawed for that, as runc does). Without a freezer to use,
//! each process listed is killed as it is, a few rounds; so are the
//! processes of one session (a command `exec` made in a box without a
//! resident init).

use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::Cgroup;

impl Cgroup {
    /// SIGKILLs every process of the container's cgroup and its
    /// sub-cgroups (a resident init's leaves, those the container made)
    /// through the cgroup's own `cgroup.kill` or freezer, as [`kill_all`].
    pub(crate) fn kill_all(&self) {
        let (dir, v2) = self.leaf_parent();
        let file = dir.join(if v2 { "cgroup.kill" } else { "freezer.state" });
        // `cgroup.kill` can't be opened for reading (kernfs has no read
        // for it); `freezer.state` is read back while it freezes.
        let opened = std::fs::OpenOptions::new().read(!v2).write(true).open(file).ok();
        let ctl = opened.as_ref().map(|f| Control { fd: f.as_fd(), v2 });
        kill_all(ctl, || self.pids().unwrap_or_default());
    }
}

/// The file a cgroup is killed through: v2 `cgroup.kill`, or v1
/// `freezer.state` (open for reading and writing).
#[derive(Clone, Copy)]
pub(crate) struct Control<'a> {
    pub fd: BorrowedFd<'a>,
    pub v2: bool,
}

/// SIGKILLs every process of the cgroup `ctl` controls, or, without
/// one, every process `members` lists (a few rounds, so one forked
/// meanwhile goes too). `members` lists them as the caller's pid namespace
/// numbers them (v1 and without a control only). Best effort and bounded.
pub(crate) fn kill_all(ctl: Option<Control<'_>>, members: impl Fn() -> Vec<i32>) {
    if let Some(Control { fd, v2: true }) = ctl {
        let _ = nix::unistd::write(fd, b"1");
        return;
    }
    for _ in 0..5 {
        if let Some(c) = ctl {
            let _ = nix::sys::uio::pwrite(c.fd, b"FROZEN", 0);
            wait_frozen(c.fd, Duration::from_millis(50));
        }
        let pids = members();
        pids.iter().copied().for_each(sigkill);
        // SIGKILL is delivered once the processes run again.
        if let Some(c) = ctl {
            let _ = nix::sys::uio::pwrite(c.fd, b"THAWED", 0);
        }
        if pids.is_empty() {
            return;
        }
    }
}

/// SIGKILLs every process of the cgroup `cg` lists in `leader`'s session
/// (as the host numbers sessions), a few rounds: a command that `exec`
/// made, with what it started.
pub(crate) fn kill_session(cg: &Cgroup, leader: i32) {
    let members = || {
        let pids = cg.pids().unwrap_or_default();
        pids.into_iter().filter(|&p| session_of(p) == Some(leader)).collect()
    };
    kill_all(None, members);
}

/// Field 6 of /proc/PID/stat: the session id, as the host sees it.
fn session_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name, which is in parentheses and may hold anything.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(3)?.parse().ok()
}

fn sigkill(pid: i32) {
    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
}

/// v1: until the freezer says FROZEN, or `patience` is over.
fn wait_frozen(state: BorrowedFd<'_>, patience: Duration) {
    let deadline = Instant::now() + patience;
    let mut buf = [0u8; 16];
    while Instant::now() < deadline {
        match nix::sys::uio::pread(state, &mut buf, 0) {
            Ok(n) if buf.get(..n).is_some_and(|b| b.starts_with(b"FROZEN")) => return,
            Ok(_) => std::thread::sleep(Duration::from_millis(1)),
            Err(_) => return,
        }
    }
}
