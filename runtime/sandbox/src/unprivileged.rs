//! The sandbox for an ordinary user: the same boxes, made by the same code,
//! from inside a user namespace of the caller's own. Runs in the runtime
//! process, first thing, before anything else of the command.
//!
//! A caller that is not root of the initial user namespace enters
//! ([`enter`]) a user namespace that maps its uid and gid to 0 and its
//! `/etc/subuid`/`/etc/subgid` ranges from id [`BLOCK`] on, through the
//! set-uid helpers `newuidmap`/`newgidmap` (the only privileged programs it
//! uses). In there it is root over its own ids only: it writes each box's
//! id map itself, chowns a box's files to the box's ids and removes them,
//! as root does on the host. Each box gets [`BLOCK`] of those ids (module
//! `ids`), so two boxes of one user never share a host id; a box's root is
//! the caller itself, which can walk to the box's bundle under its
//! `$XDG_RUNTIME_DIR`. Without a subordinate range only the caller's own
//! id is mapped, and every box runs its command as that id (0 inside).
//!
//! Its commands share a mount namespace too, made with the user namespace
//! and kept by the same holder: a box's storage (its bundle dir and
//! scratch tmpfs, of `--tmpfs-size`) and overlay root (`--image`,
//! `--rootfs`) are mounted there, as root's are on the host, so a later
//! `cp` or `exec` finds them and `terminate` (or the garbage collection of
//! a crashed box) removes them; none of it reaches the host's (the host's
//! mounts are slaves there).
//!
//! What the namespaces can't give is made a variation of the same path,
//! never a second one: a box's limits come from a delegated cgroup v2
//! subtree or, asked for, from rlimits (module `limits`), its cgroup is
//! made only where the caller may (the runtime's rootless cgroups), and
//! its `--network egress` goes through pasta instead of a veth, under the
//! same rules, loaded into a network namespace of this user namespace that
//! the box joins (module `net::pasta`).

use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::sync::OnceLock;

use rustix::fs::{flock, FlockOperation};

use crate::error::{Error, Result};
use crate::ids::IdRange;

/// Host ids per box for an ordinary user: its subordinate ids are few
/// (`useradd` gives 65536), so a box gets 4096 of them (ids 0 to 4095
/// inside; id 1000 is the box's user), and 65536 make 16 boxes.
pub(crate) const BLOCK: u32 = 4096;

/// Who runs the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Root of the initial user namespace.
    Root,
    /// An ordinary user, `count` subordinate ids mapped from [`BLOCK`] on.
    Ranges {
        /// How many.
        count: u32,
    },
    /// An ordinary user without a subordinate range: only its own id.
    SingleId,
}

static MODE: OnceLock<Mode> = OnceLock::new();

/// Enters the caller's own user namespace for root `root` if it is not
/// root (see the module doc), once per process; returns who runs the
/// sandbox.
///
/// Every command of one root works in one namespace: a box's own user
/// namespace is a child of the one it was made in, and only from there may
/// a later command signal the box or join it. The first command makes the
/// namespace and leaves a holder in it ([`hold`]), recorded in
/// `<root>/sandbox-userns`; later ones join it through the holder. Each
/// command keeps a shared lock on `<root>/sandbox-userns.lock` for as long
/// as it (and any child it leaves, such as a reaper) runs, and the holder
/// leaves only when it can take that lock exclusively and the root has no
/// box; a command that finds no holder makes a new namespace under the
/// exclusive lock. Commands that join hold it shared only, so they never
/// wait for each other.
///
/// # Preconditions
/// The caller is single-threaded.
pub fn enter(root: &Path) -> Result<Mode> {
    if let Some(m) = MODE.get() {
        return Ok(*m);
    }
    if nix::unistd::geteuid().is_root() {
        return Ok(*MODE.get_or_init(|| Mode::Root));
    }
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(root).map_err(|e| Error::io("create", root, e))?;
    let path = root.join(LOCK);
    let file = crate::lockdir::open_lock_file(&path)?;
    let lock = |how| flock(&file, how).map_err(|e| Error::io("lock", &path, e.into()));
    // Shared while joining: the holder can't leave under it, and commands
    // that join don't wait for each other (an exclusive lock here made a
    // second command wait for the first, whole, to end). Only making a
    // holder takes it exclusively (a conversion drops the shared lock
    // first, so two commands that found none don't deadlock), and looks
    // again: another may have made one meanwhile.
    lock(FlockOperation::LockShared)?;
    let mut found = holder(root);
    if found.is_none() {
        lock(FlockOperation::LockExclusive)?;
        found = holder(root);
    }
    let own = match found {
        Some((pid, start)) => {
            let own = tinyrun::join_own_user_namespace(pid, start, BLOCK)?;
            join_mounts(pid, start)?;
            own
        }
        None => {
            let own = tinyrun::enter_own_user_namespace(BLOCK)?;
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS)
                .map_err(|e| Error::Sys { op: "unshare the mount namespace", errno: e })?;
            hold(root)?;
            own
        }
    };
    // Held until this process and every child that keeps the fd exit.
    lock(FlockOperation::LockShared)?;
    std::mem::forget(file);
    let mode = match own.subordinate {
        0 => Mode::SingleId,
        count => Mode::Ranges { count },
    };
    Ok(*MODE.get_or_init(|| mode))
}

/// Moves this process into the mount namespace of the holder `pid`
/// (started at `start`), keeping its working directory: the mounts a
/// command makes for a box (its overlay root) are there for every later
/// command, as the host's are for root's. A holder left by an older
/// version has none of its own, and there is nothing to join.
fn join_mounts(pid: i32, start: u64) -> Result<()> {
    use nix::fcntl::OFlag;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let ns = std::path::PathBuf::from(format!("/proc/{pid}/ns/mnt"));
    let file = std::fs::File::open(&ns).map_err(|e| Error::io("open", &ns, e))?;
    // The fd is the holder's only if the holder still runs.
    if crate::claim::start_time(pid) != Some(start) {
        return Err(Error::io("open", &ns, nix::errno::Errno::ESRCH.into()));
    }
    let own = std::fs::metadata("/proc/self/ns/mnt").map_err(|e| Error::io("stat", "/proc/self/ns/mnt", e))?;
    let theirs = file.metadata().map_err(|e| Error::io("stat", &ns, e))?;
    if (own.dev(), own.ino()) == (theirs.dev(), theirs.ino()) {
        return Ok(());
    }
    // setns moves the working directory to the namespace's root: paths the
    // caller gave relative to its own stay as they were.
    let cwd = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_PATH | OFlag::O_DIRECTORY).bits())
        .open(".")
        .map_err(|e| Error::io("open", ".", e))?;
    nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNS)
        .map_err(|e| Error::Sys { op: "setns CLONE_NEWNS (the caller's own mount namespace)", errno: e })?;
    nix::unistd::fchdir(cwd.as_raw_fd()).map_err(|e| Error::io("return to", ".", e.into()))
}

/// The lock every command of an ordinary user holds shared.
const LOCK: &str = "sandbox-userns.lock";
/// The holder's pid and start time.
const RECORD: &str = "sandbox-userns";

/// The recorded holder, if it still runs.
fn holder(root: &Path) -> Option<(i32, u64)> {
    let text = std::fs::read_to_string(root.join(RECORD)).ok()?;
    let (pid, start) = text.trim().split_once(' ')?;
    let (pid, start) = (pid.parse().ok()?, start.parse().ok()?);
    (crate::claim::start_time(pid) == Some(start)).then_some((pid, start))
}

/// Leaves a child in this namespace that keeps it for later commands, and
/// records it. The child leaves once no command holds the lock and the
/// root has no box.
///
/// # Preconditions
/// The caller is single-threaded and holds the lock exclusively.
fn hold(root: &Path) -> Result<()> {
    let record = root.join(RECORD);
    match tinyrun::os::fork() {
        Ok(tinyrun::os::Forked::Parent(pid)) => {
            let start = crate::claim::start_time(pid.as_raw()).unwrap_or(0);
            let tmp = root.join(format!(".{RECORD}.{pid}"));
            std::fs::write(&tmp, format!("{pid} {start}\n")).map_err(|e| Error::io("write", &tmp, e))?;
            return std::fs::rename(&tmp, &record).map_err(|e| Error::io("rename", &record, e));
        }
        Ok(tinyrun::os::Forked::Child) => {}
        Err(e) => return Err(Error::Sys { op: "fork", errno: e.errno }),
    }
    // The parent's lock fd is closed here: its lock is the parent's.
    crate::detach::detach(&[]);
    // Our command line is the caller's, secrets and all.
    if tinyrun::conceal_cmdline(c"tinyrun-userns").is_err() {
        crate::detach::exit(1);
    }
    let _ = nix::unistd::chdir("/");
    let _ = nix::sys::signal::sigprocmask(
        nix::sys::signal::SigmaskHow::SIG_SETMASK,
        Some(&nix::sys::signal::SigSet::empty()),
        None,
    );
    let path = root.join(LOCK);
    loop {
        std::thread::sleep(std::time::Duration::from_secs(1));
        // A root removed under us has no box left to keep.
        let Ok(file) = crate::lockdir::open_lock_file(&path) else { crate::detach::exit(0) };
        if flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
            continue;
        }
        if crate::layout::names(&crate::layout::bundles(root)).is_empty() {
            let _ = std::fs::remove_file(&record);
            crate::detach::exit(0);
        }
    }
}

/// Who runs the sandbox: [`Mode::Root`] unless [`enter`] found otherwise.
pub fn mode() -> Mode {
    MODE.get().copied().unwrap_or(Mode::Root)
}

/// Whether an ordinary user runs the sandbox.
pub(crate) fn active() -> bool {
    mode() != Mode::Root
}

/// The ids boxes take theirs from: `None` for root, whose pool the
/// options say (`--id-range`).
pub(crate) fn pool() -> Option<IdRange> {
    match mode() {
        Mode::Root => None,
        Mode::Ranges { count } => Some(IdRange { first: BLOCK, count: count / BLOCK * BLOCK }),
        Mode::SingleId => Some(IdRange { first: 0, count: 0 }),
    }
}
