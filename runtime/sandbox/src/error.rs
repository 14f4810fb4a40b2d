//! What the sandbox can fail with: the runtime's errors, passed on as they
//! are, and the sandbox's own.

use std::path::PathBuf;

use nix::errno::Errno;
use tinyrun::RuntimeError;

/// Everything the sandbox can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The runtime failed an operation on a box (create, exec, kill, ...).
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// A file operation on the host: a bundle, an id record, the pool.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// What was done, e.g. `create sandbox bundle`.
        op: &'static str,
        /// The file it was done to.
        path: PathBuf,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// A system call with no file to name (`pipe`, `signalfd`, `pidfd_open`).
    #[error("{op}: {errno}")]
    Sys {
        /// The call.
        op: &'static str,
        /// The kernel's answer.
        #[source]
        errno: Errno,
    },
    /// Bad options from the caller (a size, a duration, a preset, an id range).
    #[error("{0}")]
    InvalidArgument(String),
    /// The sandbox can't do what was asked now (no free host ids, stopped by
    /// a signal).
    #[error("{0}")]
    InvalidState(String),
    /// tinyrun was told to stop (SIGINT, SIGTERM, SIGHUP) while a command
    /// ran: the command was killed.
    #[error("the command in sandbox {id} was killed: tinyrun got {signal}")]
    Stopped {
        /// The box.
        id: String,
        /// What we got.
        signal: nix::sys::signal::Signal,
    },
    /// An image could not be used: it doesn't parse, doesn't match its
    /// digests, or breaks a rule or a cap of unpacking.
    #[error("{0}")]
    Image(String),
    /// A copy into or out of a box was refused or failed.
    #[error("{0}")]
    Copy(String),
    /// The box's guarded egress (`--network egress`) could not be set up or
    /// removed: the box does not start without it.
    #[error("sandbox network: {0}")]
    Network(String),
    /// A container's config asks for what the guarded class refuses: the
    /// field, and why.
    #[error("refused by the guarded runtime class: {0}")]
    Refused(String),
    /// The box's spec or the shipped seccomp profile could not be made.
    #[error("{0}")]
    InvalidSpec(String),
    /// A launched box that no longer exists because its lifetime or its
    /// idle timeout ended (told for a while after, see module `tombstone`).
    #[error("sandbox {id} expired at {at} ({why})")]
    Expired {
        /// The box.
        id: String,
        /// When, in RFC 3339.
        at: String,
        /// Which of its limits ended it.
        why: String,
    },
    /// A failure followed by a failed clean-up: both are reported.
    #[error("{error} (clean-up also failed: {cleanup})")]
    WithCleanup {
        /// What failed first.
        error: Box<Error>,
        /// What failed while undoing it.
        cleanup: Box<Error>,
    },
}

impl Error {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { op, path: path.into(), source }
    }

    pub(crate) fn sys(op: &'static str) -> impl FnOnce(Errno) -> Self {
        move |errno| Error::Sys { op, errno }
    }

    /// The status to exit with for this error instead of 125: 128+N when
    /// signal N stopped us (as a shell reports an interrupted command), or
    /// [`Error::exec_status`].
    pub fn exit_status(&self) -> Option<i32> {
        match self {
            Error::Stopped { signal, .. } => Some(128 + *signal as i32),
            e => e.exec_status(),
        }
    }

    /// 127 if the command was not found, 126 if it could not be executed
    /// (as a shell, and podman, tell these from other failures); `None`
    /// for every other error.
    pub fn exec_status(&self) -> Option<i32> {
        use tinyrun::Reason;
        let (RuntimeError::Init(e) | RuntimeError::Exec(e)) = (match self {
            Error::Runtime(e) => e,
            _ => return None,
        }) else {
            return None;
        };
        match e.reason {
            Reason::Exec(errno) if errno == Errno::ENOENT as i32 => Some(127),
            Reason::Exec(_) => Some(126),
            _ => None,
        }
    }
}

impl From<tinyrun::SysError> for Error {
    fn from(e: tinyrun::SysError) -> Self {
        Error::Runtime(e.into())
    }
}

/// The sandbox's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
