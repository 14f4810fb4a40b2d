//! The container's record on disk: `<root>/<id>/state.json`.
//!
//! Written atomically (temporary file + rename) so a reader never sees half a
//! file, and guarded by an `flock` on the container directory so concurrent
//! commands on one id take turns. The record keeps the init's pid *and* its
//! start time: a pid the kernel has since handed to another process is never
//! taken for the container's init.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::error::{Result, RuntimeError};

/// File names inside a container's state directory.
pub(crate) const STATE_FILE: &str = "state.json";
/// Snapshot of config.json taken at create: later edits to the bundle must
/// not change the container.
pub(crate) const CONFIG_FILE: &str = "config.json";
/// The socket init waits on until `start`; it exists only while `created`.
pub(crate) const START_SOCKET: &str = "start.sock";
/// The socket a resident init (`Init::Resident`) takes requests on,
/// for as long as it lives.
pub(crate) const AGENT_SOCKET: &str = "agent.sock";
/// Where a resident init's programs' cgroups go (`lifecycle::resident`),
/// written by `create` so that running a program reads nothing else.
pub(crate) const RESIDENT_FILE: &str = "resident.json";
/// The compiled seccomp filter of config.json's profile, for `exec` to
/// reuse (see `seccomp::Filter::from_cache`).
pub(crate) const SECCOMP_FILE: &str = "seccomp.bpf";

/// What tinyrun remembers about a container between commands.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Record {
    pub id: String,
    pub bundle: PathBuf,
    pub rootfs: PathBuf,
    /// Host pid of the container's init.
    pub pid: i32,
    /// Field 22 of `/proc/<pid>/stat` when init was made.
    pub start_time: u64,
    /// RFC 3339 creation time.
    pub created: String,
    #[serde(default)]
    pub annotations: HashMap<String, String>,
    /// Whether `--systemd-cgroup` was given at create; later commands that
    /// omit the flag (podman's `state`) must behave the same.
    #[serde(default)]
    pub systemd_cgroup: bool,
    /// The container has a pid namespace of its own: killing init kills all.
    #[serde(default)]
    pub own_pid_ns: bool,
    /// The cgroup path the container was placed in, when cgroups are managed.
    #[serde(default)]
    pub cgroup_path: Option<String>,
    /// v1 hierarchies where the cgroup's path is not `cgroup_path`, by
    /// mount directory name (a relative cgroupsPath from a caller whose
    /// cgroups differ per hierarchy). With the systemd driver, `unified`
    /// is a rootless caller's unit's cgroup below its own systemd, and
    /// says the unit is that systemd's. Absent from older records: none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cgroup_paths: BTreeMap<String, String>,
    /// The v1 controllers whose hierarchies the cgroup was kept to
    /// (`Supervised::cgroup_v1_controllers`); absent: every mounted one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup_controllers: Option<Vec<String>>,
    /// Device and inode of init's executable while it waits for `start`
    /// (the runtime's own binary): once init has exec'd the program it
    /// differs, which is what "running" means.
    #[serde(default)]
    pub init_exe: Option<(u64, u64)>,
    /// Some process of the container may hold CAP_SYS_PTRACE in the
    /// runtime's user namespace (see `exe`); a record from before this
    /// field existed is taken to say yes.
    #[serde(default = "yes")]
    pub ptrace_possible: bool,
    /// Without a mount namespace of its own, the container's mounts live in
    /// the host's under a bind of the rootfs: its path and mount id, which
    /// `delete` detaches (only if that mount is still the one on top).
    #[serde(default)]
    pub host_root_mount: Option<(PathBuf, u64)>,
}

fn yes() -> bool {
    true
}

/// A container's state directory, held under an exclusive lock by every
/// command that changes the container, and read without one by `state`
/// and `list` (the record is replaced atomically, so a reader never sees
/// half of it, and a reader never waits behind a long `delete --force`).
pub(crate) struct StateDir {
    pub dir: PathBuf,
    _lock: Option<Flock<File>>,
}

impl StateDir {
    /// Makes `<root>/<id>` and locks it; fails if it already exists.
    pub(crate) fn create(root: &Path, id: &str) -> Result<StateDir> {
        ensure_root(root)?;
        let dir = root.join(id);
        std::fs::DirBuilder::new().mode(0o711).create(&dir).map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => RuntimeError::AlreadyExists(id.to_string()),
            _ => RuntimeError::io("create state dir", &dir, e),
        })?;
        let lock = match lock_dir(&dir)? {
            Locked::Held(l) => l,
            // A delete --force took it before our lock did, and maybe a
            // create made it again: it is not ours to fill.
            Locked::Gone => {
                return Err(RuntimeError::io("lock state dir", &dir, std::io::Error::from_raw_os_error(libc::ENOENT)))
            }
            Locked::Replaced => return Err(RuntimeError::AlreadyExists(id.to_string())),
        };
        Ok(StateDir { dir, _lock: Some(lock) })
    }

    /// An existing `<root>/<id>`, not locked: for reading only.
    pub(crate) fn peek(root: &Path, id: &str) -> Result<StateDir> {
        let dir = root.join(id);
        match std::fs::symlink_metadata(&dir) {
            Ok(m) if m.is_dir() => Ok(StateDir { dir, _lock: None }),
            Ok(_) => Err(RuntimeError::NotFound(id.to_string())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(RuntimeError::NotFound(id.to_string())),
            Err(e) => Err(RuntimeError::io("open state dir", &dir, e)),
        }
    }

    /// Locks an existing `<root>/<id>`.
    pub(crate) fn open(root: &Path, id: &str) -> Result<StateDir> {
        let dir = root.join(id);
        let lock = lock_dir(&dir).map_err(|e| match e {
            RuntimeError::Io { ref source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                RuntimeError::NotFound(id.to_string())
            }
            e => e,
        })?;
        match lock {
            Locked::Held(l) => Ok(StateDir { dir, _lock: Some(l) }),
            // Removed while we waited (and maybe made again for another
            // container): the one asked about is gone.
            Locked::Gone | Locked::Replaced => Err(RuntimeError::NotFound(id.to_string())),
        }
    }

    pub(crate) fn load(&self) -> Result<Record> {
        let path = self.dir.join(STATE_FILE);
        let bytes = std::fs::read(&path).map_err(|e| RuntimeError::io("read", &path, e))?;
        serde_json::from_slice(&bytes)
            .map_err(|e| RuntimeError::InvalidSpec(format!("corrupt state file {}: {e}", path.display())))
    }

    pub(crate) fn save(&self, rec: &Record) -> Result<()> {
        let bytes = serde_json::to_vec(rec).map_err(|e| RuntimeError::InvalidSpec(format!("encode state: {e}")))?;
        write_atomic(&self.dir.join(STATE_FILE), &bytes, 0o600)
    }

    /// The fd that holds the lock, for a forked child to close.
    pub(crate) fn lock_fd(&self) -> Option<std::os::fd::RawFd> {
        self._lock.as_ref().map(|l| std::os::fd::AsRawFd::as_raw_fd(&**l))
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Lets other commands have the container while this one goes on
    /// without changing it: a command about to wait on the container's
    /// processes (which a pause may freeze for as long as it lasts) must
    /// not keep `resume` or `kill` out meanwhile. `flock`'s unlock acts on
    /// the open file, so copies of the fd a child inherited let go too.
    pub(crate) fn unlock(&mut self) {
        if let Some(l) = self._lock.take() {
            let _ = l.unlock();
        }
    }

    /// Removes the directory and everything in it; the lock goes with it.
    pub(crate) fn remove(self) -> Result<()> {
        let result = std::fs::remove_dir_all(&self.dir).or_else(|e| match e.raw_os_error() {
            // Out of fds (a create that failed for that very reason): the
            // files tinyrun makes here are known, and unlink and rmdir
            // need no fd.
            Some(libc::EMFILE | libc::ENFILE) => self.remove_known(),
            _ => Err(e),
        });
        result.or_else(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Ok(()),
            _ => Err(RuntimeError::io("remove state dir", &self.dir, e)),
        })
    }

    fn remove_known(&self) -> std::io::Result<()> {
        let pid = std::process::id();
        for name in [STATE_FILE, CONFIG_FILE, START_SOCKET, AGENT_SOCKET, RESIDENT_FILE, SECCOMP_FILE] {
            for file in [name.to_string(), format!(".{name}.{pid}")] {
                match std::fs::remove_file(self.dir.join(file)) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
            }
        }
        std::fs::remove_dir(&self.dir)
    }
}

enum Locked {
    Held(Flock<File>),
    /// The directory was removed while we waited for its lock.
    Gone,
    /// ... and another one now stands at the same path.
    Replaced,
}

/// Locks the directory at `dir`, and checks that it still stands there
/// once the lock is ours: every later step names files by path, so a lock
/// on a directory that a `delete --force` removed meanwhile would let this
/// command read, fill or remove the next container made under that id.
fn lock_dir(dir: &Path) -> Result<Locked> {
    let f = File::open(dir).map_err(|e| RuntimeError::io("open state dir", dir, e))?;
    let lock = Flock::lock(f, FlockArg::LockExclusive)
        .map_err(|(_, e)| RuntimeError::io("lock state dir", dir, std::io::Error::from(e)))?;
    let held = lock.metadata().map_err(|e| RuntimeError::io("stat state dir", dir, e))?;
    Ok(match std::fs::symlink_metadata(dir) {
        Ok(now) if (now.dev(), now.ino()) == (held.dev(), held.ino()) => Locked::Held(lock),
        Ok(_) => Locked::Replaced,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Locked::Gone,
        Err(e) => return Err(RuntimeError::io("stat state dir", dir, e)),
    })
}

/// Creates the state root: searchable but not listable by others (0711),
/// because a container in a user namespace runs as another host uid and
/// must reach its bundle under this root; every file in it is 0600.
fn ensure_root(root: &Path) -> Result<()> {
    match std::fs::DirBuilder::new().recursive(true).mode(0o711).create(root) {
        Ok(()) => Ok(()),
        Err(e) => Err(RuntimeError::io("create state root", root, e)),
    }
}

/// Writes `path` so that readers see either the old or the new content.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp)?;
        f.write_all(bytes)?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        RuntimeError::io("write", path, e)
    })
}

/// Calls `f` (a bind or a connect) with a short name for socket `name` of
/// state dir `dir`: the directory's `/proc/self/fd/<N>` path, so a state
/// root of any length can't overflow `sun_path` (108 bytes).
pub(crate) fn via_socket<T>(dir: &Path, name: &str, f: impl FnOnce(&str) -> std::io::Result<T>) -> std::io::Result<T> {
    let dirfd = File::open(dir)?;
    f(&format!("{}/{name}", crate::sys::fs::fd_path(&dirfd)))
}

/// Field 22 of `/proc/<pid>/stat` and whether the process is a zombie.
/// Parsed by procfs from one plain read: this runs on every command, and
/// opening /proc through procfs' hardened path costs dozens of syscalls.
pub(crate) fn proc_start_time(pid: i32) -> Option<(u64, bool)> {
    use procfs::FromRead;
    let file = std::fs::File::open(format!("/proc/{pid}/stat")).ok()?;
    let stat = procfs::process::Stat::from_read(file).ok()?;
    Some((stat.starttime, stat.state == 'Z' || stat.state == 'X'))
}

/// Device and inode of `/proc/<pid>/exe`.
pub(crate) fn proc_exe(pid: i32) -> Option<(u64, u64)> {
    let st = nix::sys::stat::stat(format!("/proc/{pid}/exe").as_str()).ok()?;
    Some((st.st_dev, st.st_ino))
}

/// The time now, RFC 3339 with nanoseconds in UTC (what runc prints).
pub(crate) fn now_rfc3339() -> String {
    humantime::format_rfc3339_nanos(std::time::SystemTime::now()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command waiting for the lock of a directory that is removed and made
    /// again meanwhile must not go on with the new one (it would read, fill
    /// or remove another container's files).
    #[test]
    fn a_lock_won_on_a_replaced_directory_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("state");
        let first = StateDir::create(&root, "a").unwrap();
        let waiter = {
            let root = root.clone();
            std::thread::spawn(move || StateDir::open(&root, "a").map(|_| ()))
        };
        std::thread::sleep(std::time::Duration::from_millis(100)); // the waiter blocks in flock
        std::fs::remove_dir_all(&first.dir).unwrap();
        let second = StateDir::create(&root, "a").unwrap();
        drop(first);
        assert!(matches!(waiter.join().unwrap(), Err(RuntimeError::NotFound(_))));
        assert!(second.dir.is_dir(), "the new container's directory is left alone");
    }

    #[test]
    fn create_refuses_an_existing_id_and_remove_frees_it() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("state");
        let l = StateDir::create(&root, "a").unwrap();
        drop(l);
        assert!(matches!(StateDir::create(&root, "a"), Err(RuntimeError::AlreadyExists(_))));
        StateDir::open(&root, "a").unwrap().remove().unwrap();
        assert!(matches!(StateDir::open(&root, "a"), Err(RuntimeError::NotFound(_))));
        StateDir::create(&root, "a").unwrap();
    }

    #[test]
    fn save_then_load_round_trips() {
        let tmp = tempfile::tempdir().unwrap();
        let l = StateDir::create(tmp.path(), "b").unwrap();
        let rec = Record {
            id: "b".into(),
            bundle: "/x".into(),
            rootfs: "/x/rootfs".into(),
            pid: 42,
            start_time: 7,
            created: now_rfc3339(),
            annotations: HashMap::new(),
            systemd_cgroup: true,
            own_pid_ns: true,
            cgroup_path: None,
            cgroup_paths: BTreeMap::new(),
            cgroup_controllers: Some(vec!["pids".into()]),
            init_exe: None,
            ptrace_possible: false,
            host_root_mount: Some(("/x/rootfs".into(), 99)),
        };
        l.save(&rec).unwrap();
        let back = l.load().unwrap();
        assert_eq!((back.pid, back.start_time, back.systemd_cgroup, back.ptrace_possible), (42, 7, true, false));
        assert_eq!(back.host_root_mount, Some(("/x/rootfs".into(), 99)));
        // No temporary file is left next to the record.
        let names: Vec<_> = std::fs::read_dir(&l.dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from(STATE_FILE)]);
    }

    /// A state root far longer than `sun_path` still gets its start socket.
    #[test]
    fn the_start_socket_fits_under_a_long_root() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("r".repeat(200));
        let l = StateDir::create(&root, "c").unwrap();
        let listener = via_socket(&l.dir, START_SOCKET, |p| std::os::unix::net::UnixListener::bind(p)).unwrap();
        via_socket(&l.dir, START_SOCKET, |p| std::os::unix::net::UnixStream::connect(p)).unwrap();
        listener.accept().unwrap();
        assert!(l.path(START_SOCKET).exists());
    }

    #[test]
    fn own_process_start_time_is_read() {
        let (t, zombie) = proc_start_time(std::process::id() as i32).unwrap();
        assert!(t > 0 && !zombie);
    }
}
