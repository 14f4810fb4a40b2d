//! The OCI operations, one module each: load the container, check its
//! state, act, persist.

mod create;
mod delete;
mod events;
mod exec;
pub(crate) mod kill;
mod pause;
mod ps;
mod run;
mod start;
mod state;
mod update;
mod usage;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{Result, RuntimeError};
use crate::state::{Record, StateDir};

pub use create::CreateOptions;
pub use exec::{load_process, ExecOptions, ProcessOverrides};
pub use run::RunOptions;
pub use state::{ContainerState, Status};
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
        Ok(Container { lock, rec })
    }
}

impl Container {
    /// The container's id.
    pub fn id(&self) -> &str {
        &self.rec.id
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

/// The runtime-spec State, as hooks receive it on stdin.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HookState<'a> {
    pub oci_version: &'a str,
    pub id: &'a str,
    pub status: &'a str,
    pub pid: i32,
    pub bundle: &'a Path,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub annotations: Option<&'a HashMap<String, String>>,
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
