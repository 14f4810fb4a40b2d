//! Errors returned by the runtime library.
//!
//! Every variant names the operation and the object it failed on, so the one
//! line the CLI prints (and that containerd or podman surface to their users)
//! makes sense on its own. Callers match on a few phrases that runc uses
//! (`container with given ID already exists`, `container does not exist`,
//! `container not running`): those are kept verbatim here.

use std::path::PathBuf;

use nix::errno::Errno;

/// A failed system call, with the object it was applied to.
#[derive(Debug, thiserror::Error)]
#[error("{op}{}: {errno}", fmt_target(.target))]
pub struct SysError {
    /// The operation, e.g. `mount` or `openat2`.
    pub op: String,
    /// What it was applied to (a path, a pid, a mount description).
    pub target: Option<String>,
    /// The kernel's answer.
    #[source]
    pub errno: Errno,
}

fn fmt_target(t: &Option<String>) -> String {
    t.as_ref().map(|t| format!(" {t}")).unwrap_or_default()
}

impl SysError {
    pub(crate) fn new(op: impl Into<String>, target: impl std::fmt::Display, errno: Errno) -> Self {
        SysError { op: op.into(), target: Some(target.to_string()), errno }
    }
    pub(crate) fn bare(op: impl Into<String>, errno: Errno) -> Self {
        SysError { op: op.into(), target: None, errno }
    }
}

/// A cgroup operation that failed, naming the field, file or controller.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// A `linux.resources` field this host can't enforce.
    #[error("unsupported config field {field}: {why}")]
    Refused { field: String, why: String },
    /// `linux.cgroupsPath` can't be used.
    #[error("{0}")]
    Path(String),
    /// `--systemd-cgroup` without systemd.
    #[error("--systemd-cgroup: systemd is not running on this host (no /run/systemd/system); drop the flag to use the cgroupfs driver")]
    NoSystemd,
    /// libcgroups failed; its message names the controller file.
    #[error("cgroup {path}: {op}: {source}")]
    Manager {
        op: &'static str,
        path: String,
        /// Boxed: libcgroups' error is several hundred bytes.
        #[source]
        source: Box<libcgroups::common::AnyManagerError>,
    },
    /// A cgroupfs file or directory the cgroups module handles itself.
    #[error("cgroup: {op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Everything the runtime library can fail with.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The id names no container in this root.
    #[error("container does not exist: {0}")]
    NotFound(String),
    /// `create` with an id that is taken.
    #[error("container with given ID already exists: {0}")]
    AlreadyExists(String),
    /// The id is empty, too long, or has characters a path must not have.
    #[error("invalid container id {0:?}: {1}")]
    InvalidId(String, &'static str),
    /// The container is in the wrong state for the operation.
    #[error("{0}")]
    InvalidState(String),
    /// The container's init is not alive (kill, pause, exec).
    #[error("container not running")]
    NotRunning,
    /// config.json is missing, malformed or asks for something impossible.
    #[error("{0}")]
    InvalidSpec(String),
    /// A config field that tinyrun does not implement.
    #[error("unsupported config field {field}: {why}")]
    Unsupported { field: String, why: String },
    /// A file operation on the host.
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A system call on the host side.
    #[error(transparent)]
    Sys(#[from] SysError),
    /// The container's init reported a failure while setting itself up.
    #[error("container init: {0}")]
    Init(String),
    /// An exec'd process failed before its program ran.
    #[error("exec failed: {0}")]
    Exec(String),
    /// A hook failed or timed out.
    #[error("{0}")]
    Hook(String),
    /// Making, limiting, freezing, reading or removing the container's cgroup.
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    /// A failure followed by a failed clean-up: both are reported.
    #[error("{error} (clean-up also failed: {cleanup})")]
    WithCleanup { error: Box<RuntimeError>, cleanup: Box<RuntimeError> },
    /// The container could reach the runtime's binary and the binary is
    /// writable: call [`crate::reexec_sealed`] and try again (see `exe`).
    #[error("the container could reach the runtime's binary (CVE-2019-5736): it must run from a sealed copy")]
    NeedsSealedBinary,
    /// The calling process has threads: cloning it would copy locks that
    /// another thread holds into a child that can never release them.
    #[error(
        "tinyrun creates processes by cloning its caller, which must be single-threaded; this process has {0} threads"
    )]
    NotSingleThreaded(u64),
    /// Bad arguments from the caller (a signal name, a pid file path).
    #[error("{0}")]
    InvalidArgument(String),
}

impl RuntimeError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        RuntimeError::Io { op, path: path.into(), source }
    }
    pub(crate) fn unsupported(field: impl Into<String>, why: impl Into<String>) -> Self {
        RuntimeError::Unsupported { field: field.into(), why: why.into() }
    }
}

/// The library's result type.
pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;
