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
    /// A rootless container without a cgroup of its own asks for a limit
    /// (runc's words).
    #[error("{0}")]
    Rootless(String),
    /// `--systemd-cgroup` without systemd.
    #[error("--systemd-cgroup: systemd is not running on this host (no /run/systemd/system); drop the flag to use the cgroupfs driver")]
    NoSystemd,
    /// A call to systemd (the systemd driver) failed.
    #[error("systemd: {op} unit {unit}: {why}")]
    Systemd { op: &'static str, unit: String, why: String },
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
    Init(InitError),
    /// An exec'd process failed before its program ran.
    #[error("exec failed: {0}")]
    Exec(InitError),
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
    /// The caller's deadline passed while waiting for this (a paused or
    /// busy container's resident init).
    #[error("deadline passed while waiting to {0}")]
    DeadlinePassed(String),
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

/// A failure inside a container process (init, or an `exec`'d process)
/// between its clone and its execve: the operation, what it was applied
/// to, and why (the errno, when the kernel said no). It crosses from the
/// child to the runtime as data, so callers get the errno back.
///
/// Shown on one line: `[field: ]op[ object]: reason[ (hint)]`, e.g.
/// `mount src=proc, dst=/proc, type=proc, flags=MS_NOSUID|MS_NODEV: EPERM: Operation not permitted`,
/// `process.cwd: chdir /data: ENOENT: No such file or directory`. A failed
/// look-up of `args[0]` is worded as runc words it (`exec: "/etc/passwd":
/// permission denied`), since podman and Docker read 126 or 127 from it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InitError {
    /// The config field, or entry, the step implements (`process.cwd`,
    /// `linux.sysctl net.ipv4.ip_forward`, `mounts /dev/pts`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// The operation: a system call or a step (`mount`, `setresuid`).
    pub op: String,
    /// What the operation was applied to (boxed: errors travel by value
    /// through every step of init, and most have no mount to describe).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<Box<Object>>,
    /// Why it failed.
    pub reason: Reason,
    /// What may help, shown last in parentheses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

/// What an [`InitError`]'s operation was applied to.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Object {
    /// A path, as the container sees it unless said otherwise.
    Path(PathBuf),
    /// A `mount(2)` call.
    Mount(MountCall),
    /// A file descriptor.
    Fd(i32),
    /// Anything else: an id, a limit, a capability, a namespace.
    Value(String),
    /// `process.args[0]`, as given: shown quoted, the way runc shows it.
    Program(String),
}

/// The arguments of a failed `mount(2)`, as runc's `mountError` has them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MountCall {
    pub src: Option<String>,
    /// The destination, as the container sees it.
    pub dst: String,
    pub fstype: Option<String>,
    /// `MS_*` bits.
    pub flags: u64,
    pub data: Option<String>,
}

/// Why an [`InitError`] happened.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// The kernel's answer (a raw errno).
    Errno(i32),
    /// The program could not be run: `args[0]` is no runnable file (a
    /// look-up like execvp's), or execve itself failed. The errno says
    /// which, EACCES (it exists, but can't be executed) or ENOENT (it, or
    /// what it needs, is missing); shown in runc's (Go's) words.
    Exec(i32),
    /// Not a failed system call: what was wrong.
    Other(String),
}

impl InitError {
    fn with(op: impl Into<String>, object: Option<Object>, reason: Reason) -> Self {
        InitError { field: None, op: op.into(), object: object.map(Box::new), reason, hint: None }
    }
    /// `op` failed with `errno`, on nothing in particular.
    pub(crate) fn sys(op: impl Into<String>, errno: Errno) -> Self {
        Self::with(op, None, Reason::Errno(errno as i32))
    }
    /// `op` on `path` failed with `errno`.
    pub(crate) fn path(op: impl Into<String>, path: impl Into<PathBuf>, errno: Errno) -> Self {
        Self::with(op, Some(Object::Path(path.into())), Reason::Errno(errno as i32))
    }
    /// `op` on `value` (an id, a limit, a name) failed with `errno`.
    pub(crate) fn value(op: impl Into<String>, value: impl std::fmt::Display, errno: Errno) -> Self {
        Self::with(op, Some(Object::Value(value.to_string())), Reason::Errno(errno as i32))
    }
    /// `op` on `fd` failed with `errno`.
    pub(crate) fn fd(op: impl Into<String>, fd: i32, errno: Errno) -> Self {
        Self::with(op, Some(Object::Fd(fd)), Reason::Errno(errno as i32))
    }
    /// `mount(2)` failed with `errno`.
    pub(crate) fn mount(call: MountCall, errno: Errno) -> Self {
        Self::with("mount", Some(Object::Mount(call)), Reason::Errno(errno as i32))
    }
    /// `op` could not be done, for a reason that is no errno.
    pub(crate) fn other(op: impl Into<String>, why: impl Into<String>) -> Self {
        Self::with(op, None, Reason::Other(why.into()))
    }
    /// A failure that is only a message (no operation of its own).
    pub(crate) fn msg(why: impl Into<String>) -> Self {
        Self::with("", None, Reason::Other(why.into()))
    }
    /// `program` (args[0]) is missing (ENOENT) or not executable (EACCES).
    pub(crate) fn lookup(program: impl Into<String>, errno: Errno) -> Self {
        Self::with("exec", Some(Object::Program(program.into())), Reason::Exec(errno as i32))
    }
    /// execve of `path` failed with `errno`.
    pub(crate) fn execve(path: impl Into<PathBuf>, errno: Errno) -> Self {
        Self::with("exec", Some(Object::Path(path.into())), Reason::Exec(errno as i32))
    }
    /// Names the config field the failed step implements (kept if set).
    pub(crate) fn field(mut self, field: impl Into<String>) -> Self {
        self.field.get_or_insert_with(|| field.into());
        self
    }
    /// Adds a hint shown after the reason.
    pub(crate) fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// The kernel's answer, when the failure was a refused system call (or
    /// a look-up of the program: ENOENT or EACCES).
    pub fn errno(&self) -> Option<Errno> {
        match self.reason {
            Reason::Errno(e) | Reason::Exec(e) => Some(Errno::from_raw(e)),
            Reason::Other(_) => None,
        }
    }
}

/// Turns a failed system call of the shared syscall layer into an init
/// failure, keeping its operation, target and errno.
impl From<SysError> for InitError {
    fn from(e: SysError) -> Self {
        Self::with(e.op, e.target.map(Object::Value), Reason::Errno(e.errno as i32))
    }
}

impl std::fmt::Display for MountCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "src={}, dst={}", self.src.as_deref().unwrap_or("none"), self.dst)?;
        if let Some(t) = &self.fstype {
            write!(f, ", type={t}")?;
        }
        write!(f, ", flags={}", ms_flags(self.flags))?;
        match self.data.as_deref().filter(|d| !d.is_empty()) {
            Some(d) => write!(f, ", data={d}"),
            None => Ok(()),
        }
    }
}

/// `MS_NOSUID|MS_NODEV`, or `0`; unnamed bits in hex.
fn ms_flags(bits: u64) -> String {
    #[allow(irrefutable_let_patterns, reason = "c_ulong is narrower than u64 on 32-bit targets")]
    let Ok(b) = libc::c_ulong::try_from(bits) else {
        return format!("{bits:#x}");
    };
    let flags = nix::mount::MsFlags::from_bits_retain(b);
    let mut names: Vec<String> = flags.iter_names().map(|(n, _)| n.to_string()).collect();
    let rest = flags.bits() & !nix::mount::MsFlags::all().bits();
    if rest != 0 {
        names.push(format!("{rest:#x}"));
    }
    if names.is_empty() {
        "0".into()
    } else {
        names.join("|")
    }
}

/// An errno as Go (and so runc) words it: `permission denied`.
fn go_errno(e: Errno) -> String {
    let desc = e.desc();
    let mut c = desc.chars();
    c.next().map(|first| first.to_lowercase().chain(c).collect()).unwrap_or_default()
}

impl std::fmt::Display for InitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(field) = &self.field {
            write!(f, "{field}: ")?;
        }
        f.write_str(&self.op)?;
        match self.object.as_deref() {
            Some(Object::Path(p)) => write!(f, " {}", p.display())?,
            Some(Object::Mount(m)) => write!(f, " {m}")?,
            Some(Object::Fd(fd)) => write!(f, " fd {fd}")?,
            Some(Object::Value(v)) => write!(f, " {v}")?,
            Some(Object::Program(p)) => write!(f, ": {p:?}")?,
            None => {}
        }
        if !self.op.is_empty() || self.object.is_some() {
            f.write_str(": ")?;
        }
        match &self.reason {
            Reason::Errno(e) => write!(f, "{}", Errno::from_raw(*e))?,
            // runc's words, which podman and Docker map to 127 and 126.
            Reason::Exec(e) => match (Errno::from_raw(*e), self.object.as_deref()) {
                (Errno::ENOENT, Some(Object::Program(p))) if !p.contains('/') => {
                    f.write_str("executable file not found in $PATH")?
                }
                (Errno::EACCES, _) => f.write_str(&go_errno(Errno::EACCES))?,
                (e, Some(Object::Program(p))) => write!(f, "stat {p}: {}", go_errno(e))?,
                (e, _) => f.write_str(&go_errno(e))?,
            },
            Reason::Other(why) => f.write_str(why)?,
        }
        match &self.hint {
            Some(h) => write!(f, " ({h})"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for InitError {}

impl RuntimeError {
    /// The container process's own failure, when this is one (`Init` or
    /// `Exec`): its errno tells, say, EACCES from ENOENT.
    pub fn init_error(&self) -> Option<&InitError> {
        match self {
            RuntimeError::Init(e) | RuntimeError::Exec(e) => Some(e),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mount_failure_reads_like_runcs() {
        let flags = nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV;
        let call = MountCall {
            src: Some("proc".into()),
            dst: "/proc".into(),
            fstype: Some("proc".into()),
            flags: flags.bits(),
            data: None,
        };
        let e = InitError::mount(call, Errno::EPERM);
        assert_eq!(
            e.to_string(),
            "mount src=proc, dst=/proc, type=proc, flags=MS_NOSUID|MS_NODEV: EPERM: Operation not permitted"
        );
    }

    #[test]
    fn field_hint_and_plain_reasons_are_shown() {
        let e = InitError::value("setrlimit", "RLIMIT_NOFILE soft=1 hard=2", Errno::EPERM)
            .field("process.rlimits")
            .hint("raising a hard limit needs CAP_SYS_RESOURCE");
        assert_eq!(
            e.to_string(),
            "process.rlimits: setrlimit RLIMIT_NOFILE soft=1 hard=2: EPERM: Operation not permitted \
             (raising a hard limit needs CAP_SYS_RESOURCE)"
        );
        assert_eq!(InitError::msg("init exited during set-up").to_string(), "init exited during set-up");
        assert_eq!(InitError::other("remount / read-only", "still writable").errno(), None);
    }

    /// execve's own failures read as runc's do too (`exec /x: no such file
    /// or directory`), and the errno is kept.
    #[test]
    fn an_execve_failure_keeps_its_errno() {
        let e = InitError::execve("/x/script", Errno::ENOENT);
        assert_eq!(e.to_string(), "exec /x/script: no such file or directory");
        assert_eq!(e.errno(), Some(Errno::ENOENT));
        let e = InitError::execve("/x/script", Errno::EACCES);
        assert_eq!(e.to_string(), "exec /x/script: permission denied");
    }

    /// It crosses the sync channel and the start socket as JSON.
    #[test]
    fn it_round_trips_through_json() {
        let e = InitError::fd("dup2 pty slave to", 2, Errno::EBADF).field("process.terminal");
        let back: InitError = serde_json::from_slice(&serde_json::to_vec(&e).unwrap()).unwrap();
        assert_eq!(back, e);
        let r = RuntimeError::Exec(back);
        assert_eq!(r.init_error().and_then(InitError::errno), Some(Errno::EBADF));
        assert_eq!(r.to_string(), "exec failed: process.terminal: dup2 pty slave to fd 2: EBADF: Bad file number");
    }
}
