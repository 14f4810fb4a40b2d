//! OCI hooks: run a program with the container's state on its stdin.
//!
//! prestart, createRuntime, poststart and poststop run in the runtime
//! process; createContainer and startContainer run in the container's init,
//! so they inherit its namespaces. Each hook gets only its own `env`, its
//! `args` (with `args[0]` as argv[0]) and an optional timeout after which it
//! is killed.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use oci_spec::runtime::Hook;

use crate::error::{Result, RuntimeError};

/// Hook lists by their config.json names.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Kind {
    Prestart,
    CreateRuntime,
    CreateContainer,
    StartContainer,
    Poststart,
    Poststop,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Prestart => "prestart",
            Kind::CreateRuntime => "createRuntime",
            Kind::CreateContainer => "createContainer",
            Kind::StartContainer => "startContainer",
            Kind::Poststart => "poststart",
            Kind::Poststop => "poststop",
        }
    }
}

/// The hooks of one kind in `spec`.
pub(crate) fn list(spec: &oci_spec::runtime::Spec, kind: Kind) -> &[Hook] {
    let Some(h) = spec.hooks() else { return &[] };
    #[allow(deprecated)]
    let v = match kind {
        Kind::Prestart => h.prestart(),
        Kind::CreateRuntime => h.create_runtime(),
        Kind::CreateContainer => h.create_container(),
        Kind::StartContainer => h.start_container(),
        Kind::Poststart => h.poststart(),
        Kind::Poststop => h.poststop(),
    };
    v.as_deref().unwrap_or(&[])
}

/// Runs every hook of `kind` in order; the first failure stops the rest.
pub(crate) fn run_all(spec: &oci_spec::runtime::Spec, kind: Kind, state_json: &[u8]) -> Result<()> {
    for (i, hook) in list(spec, kind).iter().enumerate() {
        run(hook, state_json).map_err(|why| {
            RuntimeError::Hook(format!("{} hook #{i} ({}) failed: {why}", kind.name(), hook.path().display()))
        })?;
    }
    Ok(())
}

fn run(hook: &Hook, state_json: &[u8]) -> std::result::Result<(), String> {
    let mut cmd = Command::new(hook.path());
    if let Some(args) = hook.args() {
        if let Some((argv0, rest)) = args.split_first() {
            cmd.arg0(argv0).args(rest);
        }
    }
    cmd.env_clear();
    for kv in hook.env().as_deref().unwrap_or(&[]) {
        if let Some((k, v)) = kv.split_once('=') {
            cmd.env(k, v);
        }
    }
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| format!("start: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A hook that ignores its stdin and exits early closes the pipe:
        // that's its business, not an error.
        let _ = stdin.write_all(state_json);
    }
    let deadline = hook.timeout().and_then(|t| u64::try_from(t).ok()).map(|t| Instant::now() + Duration::from_secs(t));
    let status = loop {
        match child.try_wait().map_err(|e| format!("wait: {e}"))? {
            Some(s) => break s,
            None if deadline.is_some_and(|d| Instant::now() >= d) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("timed out after {}s", hook.timeout().unwrap_or_default()));
            }
            None => std::thread::sleep(Duration::from_millis(2)),
        }
    };
    if status.success() {
        return Ok(());
    }
    let mut out = String::new();
    let mut err = String::new();
    if let Some(mut s) = child.stdout.take() {
        let _ = s.read_to_string(&mut out);
    }
    if let Some(mut s) = child.stderr.take() {
        let _ = s.read_to_string(&mut err);
    }
    Err(format!("{status}, stdout: {:?}, stderr: {:?}", out.trim(), err.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(json: serde_json::Value) -> Hook {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn hook_reads_state_and_gets_only_its_env() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let h = hook(serde_json::json!({
            "path": "/bin/sh",
            "args": ["sh", "-c", format!("cat > {}; echo \"$FOO:$HOME\" >> {}", out.display(), out.display())],
            "env": ["FOO=bar"]
        }));
        run(&h, b"{\"id\":\"x\"}\n").unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "{\"id\":\"x\"}\nbar:\n");
    }

    #[test]
    fn failure_carries_status_and_output() {
        let h = hook(serde_json::json!({"path": "/bin/sh", "args": ["sh", "-c", "echo oops >&2; exit 3"]}));
        let e = run(&h, b"{}").unwrap_err();
        assert!(e.contains("exit status: 3") && e.contains("oops"), "{e}");
    }

    #[test]
    fn timeout_kills_the_hook() {
        let h = hook(serde_json::json!({"path": "/bin/sleep", "args": ["sleep", "10"], "timeout": 1}));
        let t = Instant::now();
        let e = run(&h, b"{}").unwrap_err();
        assert!(e.contains("timed out"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(5));
    }
}
