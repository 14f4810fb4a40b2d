//! The OCI operations, one module each: load the container, check its
//! state, act, persist.

mod create;
mod delete;
mod events;
mod exec;
pub(crate) mod kill;
mod pause;
mod ps;
pub(crate) mod resident;
mod run;
mod start;
mod state;
mod supervised;
mod update;
mod usage;

use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use oci_spec::runtime::Process;

use crate::capabilities::Sets;
use crate::error::{Result, RuntimeError};
use crate::process::finalize::ProcessConfig;
use crate::state::{Record, StateDir};
use crate::user::Ids;

pub use create::CreateOptions;
pub use exec::{load_process, ExecOptions, ProcessOverrides};
pub use resident::{Resident, ResidentCommand, ResidentExit, ResidentProcess, ResidentStdio, ResidentTerminal};
pub use run::RunOptions;
pub use state::{ContainerState, Status};
pub use supervised::{Init, Supervised};
pub use update::{parse_bytes, UpdateFlags};
pub use usage::Usage;

/// A state root (`--root`) holding containers, one directory each.
///
/// # Preconditions
/// `create`, `run` and `exec` clone the calling process, and the clone runs
/// tinyrun's code until execve: call them from a single-threaded process.
/// They check, and fail with [`RuntimeError::NotSingleThreaded`] otherwise.
pub struct Runtime {
    root: PathBuf,
}

/// A container loaded from the state root, locked while this value lives.
pub struct Container {
    lock: StateDir,
    rec: Record,
    /// Made by `create_supervised` with `record_refusals` and an init
    /// that execs: the filter's listener, until taken.
    refusals: Option<crate::seccomp::refusals::RefusalListener>,
}

impl Runtime {
    /// A runtime keeping its state under `root`.
    pub fn new(root: impl Into<PathBuf>) -> Runtime {
        Runtime { root: root.into() }
    }

    /// The state root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Loads container `id`, locked against other commands for as long as
    /// the value lives, or fails with `container does not exist`.
    pub fn load(&self, id: &str) -> Result<Container> {
        check_id(id)?;
        Self::load_from(StateDir::open(&self.root, id)?, id)
    }

    /// Loads container `id` for reading only (`state`, `list`), without
    /// waiting for commands that hold its lock.
    pub fn peek(&self, id: &str) -> Result<Container> {
        check_id(id)?;
        Self::load_from(StateDir::peek(&self.root, id)?, id)
    }

    fn load_from(lock: StateDir, id: &str) -> Result<Container> {
        if !lock.path(crate::state::STATE_FILE).exists() {
            // A create that was killed before it recorded anything (or one
            // still under way, seen without the lock).
            return Err(RuntimeError::NotFound(id.to_string()));
        }
        let rec = lock.load()?;
        Ok(Container { lock, rec, refusals: None })
    }
}

impl Container {
    /// The container's id.
    pub fn id(&self) -> &str {
        &self.rec.id
    }

    /// The listener of the container's seccomp filter, when it was made
    /// with `Supervised::record_refusals` and an init that execs: the
    /// caller now answers each refused call ([`crate::RefusalListener::answer`]),
    /// and keeps the record. `None` the second time. A refused call waits
    /// until it is answered, or fails with ENOSYS once the listener is
    /// closed.
    pub fn refusals(&mut self) -> Option<crate::RefusalListener> {
        self.refusals.take()
    }

    /// Host pid of the container's init.
    pub fn pid(&self) -> i32 {
        self.rec.pid
    }
}

/// Checks that `id` can name a container: every operation takes the id as
/// a directory name under the state root, so it has no separators, no
/// dot-dot, nothing a shell or a path would read differently. A caller that
/// makes its own files named after an id checks it here first.
///
/// # Errors
/// [`RuntimeError::InvalidId`], saying what is wrong with it.
pub fn check_id(id: &str) -> Result<()> {
    let bad = |why| Err(RuntimeError::InvalidId(id.to_string(), why));
    if id.is_empty() {
        return bad("it is empty");
    }
    if id.len() > 1024 {
        return bad("it is longer than 1024 bytes");
    }
    if id == "." || id == ".." {
        return bad("it is a dot path");
    }
    if !id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '+' | '-' | '.')) {
        return bad("only letters, digits, '_', '+', '-' and '.' are allowed");
    }
    Ok(())
}

/// runc's rules for a terminal: the pty master goes to a console socket when
/// the runtime detaches, and a socket without a terminal makes no sense.
pub(crate) fn check_terminal(terminal: bool, detach: bool, console_socket: bool) -> Result<()> {
    match (terminal, detach, console_socket) {
        (true, true, false) => Err(RuntimeError::InvalidArgument(
            "cannot allocate tty if tinyrun will detach without setting console socket".into(),
        )),
        (false, _, true) | (true, false, true) => Err(RuntimeError::InvalidArgument(
            "cannot use console socket if tinyrun will not detach or allocate tty".into(),
        )),
        _ => Ok(()),
    }
}

/// Connects to `--console-socket`, before anything exists: a bad path is
/// the caller's error and must leave nothing behind.
pub(crate) fn connect_console_socket(path: Option<&Path>) -> Result<Option<OwnedFd>> {
    let Some(p) = path else { return Ok(None) };
    let s = UnixStream::connect(p).map_err(|e| RuntimeError::io("connect to console socket", p, e))?;
    Ok(Some(s.into()))
}

/// The parts of a config's `process` that every container process applies
/// alike ([`ProcessConfig`]), converted and checked before cloning. `umask`
/// is the config's (init defaults it), no console, no seccomp yet.
pub(crate) fn process_config(p: &Process, preserved_fds: u32) -> Result<ProcessConfig> {
    let args = p
        .args()
        .iter()
        .flatten()
        .map(|a| CString::new(a.as_str()))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|_| RuntimeError::InvalidSpec("process.args: an argument contains a NUL byte".into()))?;
    let user = p.user();
    Ok(ProcessConfig {
        caps: Sets::from_spec(p.capabilities().as_ref())?,
        rlimits: crate::rlimits::from_spec(p.rlimits().as_ref())?,
        ids: Ids {
            uid: user.uid(),
            gid: user.gid(),
            additional_gids: user.additional_gids().clone().unwrap_or_default(),
        },
        umask: user.umask(),
        args,
        env: crate::env::prepare(p.env().iter().flatten())
            .map_err(|e| RuntimeError::InvalidSpec(format!("process.env: {e}")))?,
        cwd: p.cwd().clone(),
        no_new_privs: p.no_new_privileges().unwrap_or(false),
        preserved_fds,
        console: None,
        console_size: p.console_size().as_ref().map(crate::tty::console_size),
        seccomp: None,
        apparmor: p.apparmor_profile().clone().filter(|s| !s.is_empty()),
        selinux: p.selinux_label().clone().filter(|s| !s.is_empty()),
        personality: None,
        mempolicy: None,
        scheduler: crate::sched::scheduler(p)?,
        io_priority: crate::sched::io_priority(p)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_that_would_escape_or_confuse_are_refused() {
        for bad in ["", ".", "..", "a/b", "../x", "a b", "x\n"] {
            assert!(check_id(bad).is_err(), "{bad:?} accepted");
        }
        for good in ["a", "ct-1.2_x+y", &"x".repeat(64)] {
            check_id(good).unwrap();
        }
    }
}
