//! OCI hooks: run a program with the container's state on its stdin.
//!
//! prestart, createRuntime, poststart and poststop run in the runtime
//! process; createContainer and startContainer run in the container's init,
//! so they inherit its namespaces. Each hook gets its own `env` (without
//! one, as under runc, the runtime's environment, or in init the container
//! process's), its `args` (with `args[0]` as argv[0]) and an optional
//! timeout after which it is killed. Its stdout and stderr are read while it runs (a hook that
//! writes more than a pipe holds must not block on it), and the last few
//! KiB of each are kept for the error message.

use std::collections::HashMap;
use std::ffi::{CString, OsStr};
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use oci_spec::runtime::Hook;
use serde::Serialize;

use crate::error::{InitError, Result, RuntimeError};

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

/// The runtime-spec State, as hooks (and a seccomp agent) receive it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct State<'a> {
    pub oci_version: &'a str,
    pub id: &'a str,
    pub status: &'a str,
    pub pid: i32,
    pub bundle: &'a Path,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub annotations: Option<&'a HashMap<String, String>>,
}

impl State<'_> {
    /// The JSON a hook reads on its stdin.
    pub(crate) fn to_json(&self) -> Vec<u8> {
        // Strings, a number and a map of strings: serialising can't fail.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// The hooks of one kind in `spec`.
pub(crate) fn list(spec: &oci_spec::runtime::Spec, kind: Kind) -> &[Hook] {
    list_in(spec.hooks().as_ref(), kind)
}

/// The hooks of one kind in a config's `hooks`.
fn list_in(hooks: Option<&oci_spec::runtime::Hooks>, kind: Kind) -> &[Hook] {
    let Some(h) = hooks else { return &[] };
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
    each(spec, kind, state_json, None).map_err(|f| RuntimeError::Hook(f.to_string()))
}

/// Runs every hook of `kind` in order, each failure a warning that stops
/// none of the rest: the spec's rule for poststart and poststop.
pub(crate) fn run_all_warn(hooks: Option<&oci_spec::runtime::Hooks>, kind: Kind, state_json: &[u8]) {
    for (index, hook) in list_in(hooks, kind).iter().enumerate() {
        if let Err(why) = run(hook, state_json, None) {
            crate::warn::warn(&Failure { kind, index, path: hook.path().clone(), why }.to_string());
        }
    }
}

/// [`run_all`] from a container's init (createContainer, startContainer).
/// A hook without an `env` of its own gets `inherited`, the container
/// process's environment, as under runc.
pub(crate) fn run_all_in_container(
    spec: &oci_spec::runtime::Spec,
    kind: Kind,
    state_json: &[u8],
    inherited: Option<&[CString]>,
) -> std::result::Result<(), InitError> {
    each(spec, kind, state_json, inherited).map_err(InitError::from)
}

fn each(
    spec: &oci_spec::runtime::Spec,
    kind: Kind,
    state_json: &[u8],
    inherited: Option<&[CString]>,
) -> std::result::Result<(), Failure> {
    for (index, hook) in list(spec, kind).iter().enumerate() {
        run(hook, state_json, inherited).map_err(|why| Failure { kind, index, path: hook.path().clone(), why })?;
    }
    Ok(())
}

/// A hook that failed: which one, and how.
#[derive(Debug)]
struct Failure {
    kind: Kind,
    index: usize,
    path: PathBuf,
    why: Why,
}

#[derive(Debug)]
enum Why {
    /// The program could not be started (or watched).
    Start(&'static str, Errno),
    TimedOut(i64),
    /// It exited unsuccessfully: the status and the tails of its output.
    Failed(ExitStatus, String, String),
}

impl std::fmt::Display for Why {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Why::Start(op, e) => write!(f, "{op}: {e}"),
            Why::TimedOut(secs) => write!(f, "timed out after {secs}s"),
            Why::Failed(status, out, err) => write!(f, "{status}, stdout: {out:?}, stderr: {err:?}"),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} hook #{} ({}) failed: {}", self.kind.name(), self.index, self.path.display(), self.why)
    }
}

impl From<Failure> for InitError {
    fn from(f: Failure) -> Self {
        let op = format!("{} hook #{}", f.kind.name(), f.index);
        match f.why {
            Why::Start(what, errno) => InitError::path(format!("{op}: {what}"), f.path, errno),
            why => InitError::other(format!("{op} {}", f.path.display()), why.to_string()),
        }
        .field(format!("hooks.{}", f.kind.name()))
    }
}

fn run(hook: &Hook, state_json: &[u8], inherited: Option<&[CString]>) -> std::result::Result<(), Why> {
    let mut cmd = Command::new(hook.path());
    if let Some(args) = hook.args() {
        if let Some((argv0, rest)) = args.split_first() {
            cmd.arg0(argv0).args(rest);
        }
    }
    // A hook's own `env` is all it gets. Without one it gets what runc's
    // would: the runtime's environment for the hooks the runtime runs, the
    // container process's for those init runs (runc's init has loaded the
    // process's environment into its own by then).
    if hook.env().is_some() || inherited.is_some() {
        cmd.env_clear();
    }
    match (hook.env(), inherited) {
        (Some(env), _) => {
            for kv in env {
                if let Some((k, v)) = kv.split_once('=') {
                    cmd.env(k, v);
                }
            }
        }
        (None, Some(env)) => {
            for kv in env {
                let kv = kv.as_bytes();
                if let Some(eq) = kv.iter().position(|b| *b == b'=') {
                    cmd.env(OsStr::from_bytes(&kv[..eq]), OsStr::from_bytes(&kv[eq + 1..]));
                }
            }
        }
        (None, None) => {}
    }
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| Why::Start("start", crate::sys::io_errno(&e)))?;
    let deadline = hook.timeout().and_then(|t| u64::try_from(t).ok()).map(|t| Instant::now() + Duration::from_secs(t));
    let mut io = Pipes::take(&mut child, state_json);
    match io.pump_until_exit(&mut child, deadline) {
        Ok(Some(status)) if status.success() => Ok(()),
        Ok(Some(status)) => Err(Why::Failed(status, io.out.text(), io.err.text())),
        Ok(None) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(Why::TimedOut(hook.timeout().unwrap_or_default()))
        }
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(e)
        }
    }
}

/// Bytes of each output stream kept for the error message.
const TAIL: usize = 4096;

/// The last [`TAIL`] bytes written to a stream.
#[derive(Default)]
struct Tail(Vec<u8>);

impl Tail {
    fn push(&mut self, data: &[u8]) {
        self.0.extend_from_slice(data);
        if self.0.len() > TAIL {
            let cut = self.0.len() - TAIL;
            self.0.drain(..cut);
        }
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0).trim().to_string()
    }
}

/// A running hook's three pipes, non-blocking; each is dropped (closed) at
/// its end: stdin once the state is written, the others at EOF.
struct Pipes<'a> {
    stdin: Option<std::process::ChildStdin>,
    state: &'a [u8],
    stdout: Option<std::process::ChildStdout>,
    stderr: Option<std::process::ChildStderr>,
    out: Tail,
    err: Tail,
}

impl<'a> Pipes<'a> {
    fn take(child: &mut Child, state: &'a [u8]) -> Pipes<'a> {
        for fd in [child.stdin.as_ref().map(|p| p.as_raw_fd()), child.stdout.as_ref().map(|p| p.as_raw_fd())]
            .into_iter()
            .chain([child.stderr.as_ref().map(|p| p.as_raw_fd())])
            .flatten()
        {
            let _ = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK));
        }
        Pipes {
            stdin: child.stdin.take(),
            state,
            stdout: child.stdout.take(),
            stderr: child.stderr.take(),
            out: Tail::default(),
            err: Tail::default(),
        }
    }

    /// Feeds stdin and drains stdout and stderr until the hook exits
    /// (`Some(status)`) or the deadline passes (`None`). Sleeps in poll on
    /// the pipes and a pidfd: no busy loop, and the deadline is exact.
    fn pump_until_exit(
        &mut self,
        child: &mut Child,
        deadline: Option<Instant>,
    ) -> std::result::Result<Option<ExitStatus>, Why> {
        let pid = i32::try_from(child.id()).unwrap_or(i32::MAX);
        // Without pidfds (kernels before 5.3), poll wakes every 20 ms to
        // look at the child instead.
        let pidfd: Option<OwnedFd> = crate::sys::pidfd_open(nix::unistd::Pid::from_raw(pid)).ok();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            if let Some(status) = child.try_wait().map_err(|e| Why::Start("wait", crate::sys::io_errno(&e)))? {
                // What is still in the pipes (not waiting for EOF: a
                // process the hook left behind may hold them open).
                self.read_ready(&mut buf, true, true);
                return Ok(Some(status));
            }
            let mut wait = match deadline {
                None => None,
                Some(d) if Instant::now() >= d => return Ok(None),
                Some(d) => Some(d - Instant::now()),
            };
            if pidfd.is_none() {
                wait = Some(wait.map_or(Duration::from_millis(20), |w| w.min(Duration::from_millis(20))));
            }
            let (write, out, err) = self.poll(pidfd.as_ref(), wait)?;
            if write {
                self.feed();
            }
            self.read_ready(&mut buf, out, err);
        }
    }

    /// Waits for any pipe or the pidfd; says which pipes are ready.
    fn poll(&self, pidfd: Option<&OwnedFd>, wait: Option<Duration>) -> std::result::Result<(bool, bool, bool), Why> {
        let timeout = match wait {
            None => PollTimeout::NONE,
            // Rounded up, so a wake-up never comes before the deadline.
            Some(w) => PollTimeout::try_from(w.as_millis().saturating_add(1)).unwrap_or(PollTimeout::MAX),
        };
        let ready = PollFlags::POLLIN | PollFlags::POLLOUT | PollFlags::POLLHUP | PollFlags::POLLERR;
        let mut fds = Vec::with_capacity(4);
        let mut slots = [None; 3];
        if let Some(s) = &self.stdin {
            slots[0] = Some(fds.len());
            fds.push(PollFd::new(s.as_fd(), PollFlags::POLLOUT));
        }
        if let Some(s) = &self.stdout {
            slots[1] = Some(fds.len());
            fds.push(PollFd::new(s.as_fd(), PollFlags::POLLIN));
        }
        if let Some(s) = &self.stderr {
            slots[2] = Some(fds.len());
            fds.push(PollFd::new(s.as_fd(), PollFlags::POLLIN));
        }
        if let Some(p) = pidfd {
            fds.push(PollFd::new(p.as_fd(), PollFlags::POLLIN));
        }
        match poll(&mut fds, timeout) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => return Err(Why::Start("poll", e)),
        }
        let is_ready = |slot: Option<usize>| slot.and_then(|i| fds[i].revents()).is_some_and(|r| r.intersects(ready));
        Ok((is_ready(slots[0]), is_ready(slots[1]), is_ready(slots[2])))
    }

    /// Writes what the pipe takes of the state; closes stdin when all of it
    /// is written or the hook closed its end (that's its business).
    fn feed(&mut self) {
        let Some(stdin) = &mut self.stdin else { return };
        loop {
            if self.state.is_empty() {
                self.stdin = None;
                return;
            }
            match stdin.write(self.state) {
                Ok(n) => self.state = &self.state[n..],
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(_) => {
                    self.stdin = None;
                    return;
                }
            }
        }
    }

    fn read_ready(&mut self, buf: &mut [u8], out: bool, err: bool) {
        if out && !drain(&mut self.stdout, &mut self.out, buf) {
            self.stdout = None;
        }
        if err && !drain(&mut self.stderr, &mut self.err, buf) {
            self.stderr = None;
        }
    }
}

/// Reads `pipe` until it would block; false at EOF (or a read error).
fn drain(pipe: &mut Option<impl Read>, tail: &mut Tail, buf: &mut [u8]) -> bool {
    let Some(p) = pipe else { return true };
    loop {
        match p.read(buf) {
            Ok(0) => return false,
            Ok(n) => tail.push(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
            Err(_) => return false,
        }
    }
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
        let inherited = [CString::new("FOO=not-this").unwrap()];
        run(&h, b"{\"id\":\"x\"}\n", Some(&inherited)).unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "{\"id\":\"x\"}\nbar:\n");
    }

    #[test]
    fn a_hook_without_env_gets_the_inherited_one() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let h = hook(serde_json::json!({
            "path": "/bin/sh",
            "args": ["sh", "-c", format!("echo \"$FOO:$BAR\" > {}", out.display())],
        }));
        let inherited = [CString::new("FOO=a=b").unwrap(), CString::new("BAR=c").unwrap()];
        run(&h, b"{}", Some(&inherited)).unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "a=b:c\n");
        // None: the runtime's own environment, which has neither.
        run(&h, b"{}", None).unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), ":\n");
    }

    #[test]
    fn failure_carries_status_and_output() {
        let h = hook(serde_json::json!({"path": "/bin/sh", "args": ["sh", "-c", "echo oops >&2; exit 3"]}));
        let e = run(&h, b"{}", None).unwrap_err().to_string();
        assert!(e.contains("exit status: 3") && e.contains("oops"), "{e}");
    }

    #[test]
    fn timeout_kills_the_hook() {
        let h = hook(serde_json::json!({"path": "/bin/sleep", "args": ["sleep", "10"], "timeout": 1}));
        let t = Instant::now();
        let e = run(&h, b"{}", None).unwrap_err().to_string();
        assert!(e.contains("timed out"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    /// 1 MiB on each of stdout and stderr is far more than a pipe holds: a
    /// hook writing it must not block until its timeout (or forever).
    #[test]
    fn a_hook_with_much_output_finishes_at_once() {
        let script = "head -c 1048576 /dev/zero; head -c 1048576 /dev/zero >&2; exit 0";
        let h = hook(serde_json::json!({"path": "/bin/sh", "args": ["sh", "-c", script], "timeout": 10}));
        let t = Instant::now();
        run(&h, b"{}", None).unwrap();
        assert!(t.elapsed() < Duration::from_secs(3), "took {:?}", t.elapsed());
    }

    /// The output is drained while the hook sleeps, the timeout still
    /// holds, and the error keeps only a bounded tail of the output.
    #[test]
    fn a_hook_with_much_output_is_killed_at_its_timeout() {
        let script = "head -c 1048576 /dev/zero | tr '\\0' x; echo END-OF-OUTPUT >&2; exec sleep 30";
        let h = hook(serde_json::json!({"path": "/bin/sh", "args": ["sh", "-c", script], "timeout": 1}));
        let t = Instant::now();
        let e = run(&h, b"{}", None).unwrap_err();
        let took = t.elapsed();
        assert!(matches!(e, Why::TimedOut(1)), "{e}");
        assert!(took >= Duration::from_secs(1) && took < Duration::from_secs(3), "took {took:?}");
        let h = hook(
            serde_json::json!({"path": "/bin/sh", "args": ["sh", "-c", "head -c 1048576 /dev/zero | tr '\\0' x; exit 4"]}),
        );
        let e = run(&h, b"{}", None).unwrap_err().to_string();
        assert!(e.contains("exit status: 4") && e.len() < 2 * TAIL + 200, "{} bytes", e.len());
    }

    #[test]
    fn a_hook_that_cannot_start_keeps_its_errno() {
        let h = hook(serde_json::json!({"path": "/nonexistent/hook"}));
        let why = run(&h, b"{}", None).unwrap_err();
        let f = Failure { kind: Kind::CreateContainer, index: 0, path: "/nonexistent/hook".into(), why };
        let e = InitError::from(f);
        assert_eq!(e.errno(), Some(Errno::ENOENT));
        assert!(
            e.to_string().starts_with("hooks.createContainer: createContainer hook #0: start /nonexistent/hook"),
            "{e}"
        );
    }

    #[test]
    fn state_is_the_runtime_spec_shape() {
        let ann = HashMap::from([("k".to_string(), "v".to_string())]);
        let st = State {
            oci_version: "1.0.2",
            id: "c",
            status: "created",
            pid: 7,
            bundle: Path::new("/b"),
            annotations: Some(&ann),
        };
        let v: serde_json::Value = serde_json::from_slice(&st.to_json()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"ociVersion": "1.0.2", "id": "c", "status": "created", "pid": 7, "bundle": "/b", "annotations": {"k": "v"}})
        );
        let none = State { annotations: None, ..st };
        assert!(!String::from_utf8(none.to_json()).unwrap().contains("annotations"));
    }
}
