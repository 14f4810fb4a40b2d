//! The result of a command in a box, as `--json` prints it: a stable,
//! versioned format documented in tinyrun-sandbox(8).

use std::time::Instant;

use serde::Serialize;

use crate::error::{Error, Result};

/// The version of the `--json` result's format. Raised when a field
/// changes meaning or goes away, and for `refused` (2).
pub const SCHEMA_VERSION: u32 = 2;

/// Captured output, cut at the cap.
#[derive(Debug, Clone, Default)]
pub struct Output {
    /// The bytes, as written.
    pub bytes: Vec<u8>,
    /// More was written than was kept.
    pub truncated: bool,
    /// How many bytes more (not in the JSON: `refused.output_cut_bytes`
    /// has both streams').
    pub cut: u64,
}

impl Output {
    /// The bytes as text if they are UTF-8, or UTF-8 cut short by the cap
    /// in the middle of a character (the partial character dropped).
    pub fn text(&self) -> Option<&str> {
        match std::str::from_utf8(&self.bytes) {
            Ok(t) => Some(t),
            Err(e) if self.truncated && e.error_len().is_none() => {
                std::str::from_utf8(&self.bytes[..e.valid_up_to()]).ok()
            }
            Err(_) => None,
        }
    }
}

/// `{"text": ..., "encoding": "utf-8" | "base64", "truncated": ...}`: output
/// that isn't UTF-8 is carried as base64, so no byte is lost or replaced.
impl Serialize for Output {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use base64::Engine as _;
        use serde::ser::SerializeStruct;
        let (text, encoding) = match self.text() {
            Some(t) => (std::borrow::Cow::Borrowed(t), "utf-8"),
            None => (base64::engine::general_purpose::STANDARD.encode(&self.bytes).into(), "base64"),
        };
        let mut st = s.serialize_struct("Output", 3)?;
        st.serialize_field("text", &text)?;
        st.serialize_field("encoding", encoding)?;
        st.serialize_field("truncated", &self.truncated)?;
        st.end()
    }
}

/// Whether a `--pool` run found a box waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PoolUse {
    /// It took a pre-started box.
    Hit,
    /// None was waiting: it made a fresh one.
    Miss,
}

/// What happened to a sandboxed command (`--json`). See
/// tinyrun-sandbox(8) for the fields and an example of each outcome.
#[derive(Debug, Clone, Serialize)]
pub struct SandboxResult {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Why the command could not be run at all (the box could not be made,
    /// a bad option, ...); every other field is then empty.
    pub error: Option<String>,
    /// The exit status, when the command exited (126: it could not be
    /// executed, 127: it was not found, as a shell reports them).
    pub exit_code: Option<i32>,
    /// The signal that killed it, when one did (e.g. "SIGKILL").
    pub signal: Option<String>,
    /// Killed at the wall-clock limit.
    pub timed_out: bool,
    /// The kernel's OOM killer acted in the box. Like `cpu_ms` and
    /// `peak_memory_bytes`, read from the box's cgroup only when output is
    /// captured (`--json`): otherwise only the status is used.
    pub oom_killed: bool,
    /// Wall time from create to exit.
    pub duration_ms: u64,
    /// CPU time used by the whole box (captured results only).
    pub cpu_ms: u64,
    /// Highest memory use of the box (captured results only).
    pub peak_memory_bytes: u64,
    /// The command's stdout.
    pub stdout: Output,
    /// The command's stderr.
    pub stderr: Output,
    /// With `--pool`: whether a pre-started box was taken.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<PoolUse>,
    /// With `--report-writes`: the files the command wrote there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub writes: Option<crate::writes::Writes>,
    /// What the box tried and was refused while the command ran (captured
    /// results only); absent when nothing was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<crate::refused::Refused>,
    /// An ordinary user's box: `limits` (`"enforced"` or `"best-effort"`),
    /// with best-effort `limits_applied` and `limits_not_applied`, and
    /// `ids` (`"caller-only"`) when the box maps only the caller's id.
    #[serde(flatten)]
    pub limits: Option<crate::limits::Report>,
}

impl Default for SandboxResult {
    fn default() -> SandboxResult {
        SandboxResult {
            schema_version: SCHEMA_VERSION,
            error: None,
            exit_code: None,
            signal: None,
            timed_out: false,
            oom_killed: false,
            duration_ms: 0,
            cpu_ms: 0,
            peak_memory_bytes: 0,
            stdout: Output::default(),
            stderr: Output::default(),
            pool: None,
            writes: None,
            refused: None,
            limits: None,
        }
    }
}

/// The status `sandbox run` and `exec` exit with when the wall-clock limit
/// killed the command (as timeout(1) does).
pub const TIMED_OUT: i32 = 124;
/// The status for a failure of tinyrun itself (as podman does).
pub const TINYRUN_FAILED: i32 = 125;

impl SandboxResult {
    /// The result of a command that never ran: `error` says why.
    pub fn failed(error: &Error) -> SandboxResult {
        SandboxResult { error: Some(error.to_string()), ..SandboxResult::default() }
    }

    /// A command that could not be executed: 126 or 127, the reason on its
    /// stderr, as a shell reports it.
    pub(crate) fn not_run(status: i32, error: &Error) -> SandboxResult {
        let msg = format!("tinyrun: {error}\n").into_bytes();
        SandboxResult {
            exit_code: Some(status),
            stderr: Output { bytes: msg, ..Output::default() },
            ..Default::default()
        }
    }

    /// The status a shell would report: the exit code, 128+N for signal
    /// N, [`TIMED_OUT`], or [`TINYRUN_FAILED`].
    pub fn status(&self) -> i32 {
        if self.timed_out {
            return TIMED_OUT;
        }
        match (&self.exit_code, &self.signal) {
            (Some(c), _) => *c,
            (None, Some(s)) => 128 + s.parse::<nix::sys::signal::Signal>().map(|s| s as i32).unwrap_or(9),
            _ => TINYRUN_FAILED,
        }
    }
}
/// With `--json`, a command that could not be executed (126) or was not
/// found (127) is a result, as a shell reports it, not a failure of ours.
pub(crate) fn not_run_as_result(r: Result<SandboxResult>, capture: bool, started: Instant) -> Result<SandboxResult> {
    match r {
        Err(e) if capture => match e.exec_status() {
            Some(status) => {
                let mut res = SandboxResult::not_run(status, &e);
                res.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                Ok(res)
            }
            None => Err(e),
        },
        r => r,
    }
}

/// `res` with what `--report-writes` saw, if it watched, and how the box
/// whose bundle dir is `bundle` is limited, if an ordinary user made it.
pub(crate) fn with_writes(
    mut res: SandboxResult,
    watch: Option<crate::writes::Watch>,
    bundle: &std::path::Path,
) -> Result<SandboxResult> {
    res.writes = watch.map(crate::writes::Watch::report).transpose()?;
    res.limits = crate::limits::report(bundle);
    Ok(res)
}
