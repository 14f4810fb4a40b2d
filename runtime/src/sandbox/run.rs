//! Running a sandbox: one-shot (`run`), persistent (`launch`, `exec`,
//! `shell`, `terminate`, `list`), with the timeout enforced from outside and
//! a structured result.

use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;
use serde::Serialize;

use super::options::SandboxOptions;
use super::spec::{self, SANDBOX_UID};
use crate::error::{Result, RuntimeError};
use crate::{CreateOptions, ExecOptions, Runtime};

/// Captured output, cut at the cap.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Output {
    /// The bytes, lossily decoded as UTF-8.
    pub text: String,
    /// More was written than was kept.
    pub truncated: bool,
}

/// What happened to a sandboxed command (`--json`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct SandboxResult {
    /// The exit status, when the command exited.
    pub exit_code: Option<i32>,
    /// The signal that killed it, when one did (e.g. "SIGKILL").
    pub signal: Option<String>,
    /// Killed at the wall-clock limit.
    pub timed_out: bool,
    /// The kernel's OOM killer acted in the box.
    pub oom_killed: bool,
    /// Wall time from create to exit.
    pub duration_ms: u64,
    /// CPU time used by the whole box.
    pub cpu_ms: u64,
    /// Highest memory use of the box.
    pub peak_memory_bytes: u64,
    /// The command's stdout.
    pub stdout: Output,
    /// The command's stderr.
    pub stderr: Output,
}

impl SandboxResult {
    /// The status a shell would report: the exit code, or 128+N.
    pub fn status(&self) -> i32 {
        match (&self.exit_code, &self.signal) {
            (Some(c), _) => *c,
            (None, Some(s)) => 128 + s.parse::<nix::sys::signal::Signal>().map(|s| s as i32).unwrap_or(9),
            _ => 255,
        }
    }
}

/// Where sandboxes keep their state and bundles under a runtime root.
fn dirs(root: &Path) -> (Runtime, PathBuf) {
    (Runtime::new(root.join("sandbox")), root.join("sandbox-bundles"))
}

fn new_id(prefix: &str) -> String {
    let mut b = [0u8; 6];
    let _ = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b));
    format!("{prefix}-{}", b.iter().map(|x| format!("{x:02x}")).collect::<String>())
}

/// Runs `cmd` in a fresh sandbox and removes it. With `capture`, output is
/// collected into the result; otherwise it goes to our stdout/stderr.
pub fn run(root: &Path, opts: &SandboxOptions, cmd: &[String], capture: bool) -> Result<SandboxResult> {
    let (rt, bundles) = dirs(root);
    collect_garbage(root);
    let id = new_id(ONE_SHOT);
    let bundle = bundles.join(&id);
    let started = Instant::now();
    let _signals = Interrupts::block()?;
    let result = (|| {
        spec::write_bundle(&bundle, &id, opts, cmd)?;
        let mut io = Capture::new(capture)?;
        let stdio = io.stdio();
        // The box dies with this process, even by SIGKILL: nothing would
        // be left to enforce its timeout.
        let create =
            CreateOptions { bundle: bundle.clone(), detach: true, stdio, die_with_runtime: true, ..Default::default() };
        let mut c = rt.create(&id, &create)?;
        let (out_r, err_r) = io.readers();
        let pid = Pid::from_raw(c.pid());
        c.start()?;
        drop(c);
        finish(&rt, &id, pid, started, started + opts.timeout, out_r, err_r, opts.output_cap)
    })();
    let cleanup = rt.delete(&id, true).and(remove_dir(&bundle));
    match (result, cleanup) {
        (Ok(r), Ok(())) => Ok(r),
        (Err(e), _) => Err(e),
        (Ok(_), Err(e)) => Err(e),
    }
}

fn remove_dir(p: &Path) -> Result<()> {
    match std::fs::remove_dir_all(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(RuntimeError::io("remove sandbox bundle", p, e)),
    }
}

/// The box's stdio when its output is captured: /dev/null in, a pipe for
/// each of stdout and stderr. Without capture the box shares ours.
struct Capture {
    devnull: Option<OwnedFd>,
    out: Option<(OwnedFd, OwnedFd)>,
    err: Option<(OwnedFd, OwnedFd)>,
}

impl Capture {
    fn new(capture: bool) -> Result<Capture> {
        if !capture {
            return Ok(Capture { devnull: None, out: None, err: None });
        }
        let pipe = || {
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
                .map_err(|e| RuntimeError::Sys(crate::error::SysError::bare("pipe", e)))
        };
        let devnull = crate::sys::fs::open_path(Path::new("/dev/null"), nix::fcntl::OFlag::O_RDONLY)?;
        Ok(Capture { devnull: Some(devnull), out: Some(pipe()?), err: Some(pipe()?) })
    }

    /// What the box's fds 0, 1 and 2 become, if captured.
    fn stdio(&self) -> Option<[std::os::fd::RawFd; 3]> {
        let (null, out, err) = (self.devnull.as_ref()?, self.out.as_ref()?, self.err.as_ref()?);
        Some([null.as_raw_fd(), out.1.as_raw_fd(), err.1.as_raw_fd()])
    }

    /// Our read ends, once the box has its copies of the write ends: ours
    /// are closed here, so the reads see EOF when the box is done.
    fn readers(&mut self) -> (Option<OwnedFd>, Option<OwnedFd>) {
        self.devnull = None;
        (self.out.take().map(|(r, _)| r), self.err.take().map(|(r, _)| r))
    }
}

enum Waited {
    Exited(WaitStatus),
    TimedOut,
    Interrupted(nix::sys::signal::Signal),
}

/// Waits for `pid` until `deadline`, draining the output pipes into `res`.
fn wait_capturing(
    pid: Pid,
    deadline: Instant,
    out: Option<OwnedFd>,
    err: Option<OwnedFd>,
    cap: usize,
    res: &mut SandboxResult,
) -> Waited {
    let outcome = |s: Option<WaitStatus>| s.map_or(Waited::TimedOut, Waited::Exited);
    let Ok(pidfd) = crate::sys::pidfd_open(pid) else { return outcome(waitpid(pid, None).ok()) };
    let sigfd = nix::sys::signalfd::SignalFd::with_flags(
        &Interrupts::set(),
        nix::sys::signalfd::SfdFlags::SFD_CLOEXEC | nix::sys::signalfd::SfdFlags::SFD_NONBLOCK,
    )
    .ok();
    let mut pipes: Vec<(OwnedFd, bool)> =
        [(out, false), (err, true)].into_iter().filter_map(|(f, is_err)| f.map(|f| (f, is_err))).collect();
    let mut exited = false;
    loop {
        if exited && pipes.is_empty() {
            return outcome(waitpid(pid, None).ok());
        }
        if let Some(Ok(Some(info))) = sigfd.as_ref().map(|s| s.read_signal()) {
            if let Ok(sig) = nix::sys::signal::Signal::try_from(info.ssi_signo as i32) {
                return Waited::Interrupted(sig);
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Waited::TimedOut;
        }
        let ms = u16::try_from(left.as_millis().max(1)).unwrap_or(u16::MAX);
        let mut fds: Vec<PollFd> = pipes.iter().map(|(f, _)| PollFd::new(f.as_fd(), PollFlags::POLLIN)).collect();
        if !exited {
            fds.push(PollFd::new(pidfd.as_fd(), PollFlags::POLLIN));
        }
        if let Some(s) = &sigfd {
            fds.push(PollFd::new(s.as_fd(), PollFlags::POLLIN));
        }
        if poll(&mut fds, PollTimeout::from(ms)).is_err() {
            continue;
        }
        let ready: Vec<bool> = fds.iter().map(|f| f.revents().is_some_and(|r| !r.is_empty())).collect();
        drop(fds);
        if !exited && ready.get(pipes.len()).copied().unwrap_or(false) {
            exited = true;
        }
        let mut i = 0;
        while i < pipes.len() {
            if ready[i] {
                let (fd, is_err) = &pipes[i];
                let sink = if *is_err { &mut res.stderr } else { &mut res.stdout };
                if !drain(fd, sink, cap) {
                    pipes.remove(i);
                    continue;
                }
            }
            i += 1;
        }
    }
}

/// Reads what's there; false at end of file.
fn drain(fd: &OwnedFd, sink: &mut Output, cap: usize) -> bool {
    let mut buf = [0u8; 16 * 1024];
    match nix::unistd::read(fd.as_raw_fd(), &mut buf) {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            let room = cap.saturating_sub(sink.text.len());
            if n > room {
                sink.truncated = true;
            }
            sink.text.push_str(&String::from_utf8_lossy(&buf[..n.min(room)]));
            true
        }
    }
}

/// Runs `cmd` in a sandbox taken from the pool (a fresh one if the pool is
/// empty), removes it, and starts a detached refill.
pub fn run_pooled(root: &Path, opts: &SandboxOptions, cmd: &[String], capture: bool) -> Result<SandboxResult> {
    let Some(id) = super::pool::take(root, opts)? else {
        return run(root, opts, cmd, capture);
    };
    let (rt, _) = dirs(root);
    let started = Instant::now();
    let _signals = Interrupts::block()?;
    let result = (|| {
        let c = rt.load(&id)?;
        let mut p = c.exec_process(&crate::ProcessOverrides {
            args: cmd.to_vec(),
            env: opts.env.clone(),
            user: Some((SANDBOX_UID, Some(SANDBOX_UID))),
            ..Default::default()
        })?;
        p.set_cwd("/work".into());
        let mut io = Capture::new(capture)?;
        let stdio = io.stdio();
        let pid = c.exec_spawn(&ExecOptions {
            process: p,
            detach: true,
            pid_file: None,
            console_socket: None,
            preserve_fds: 0,
            cgroups: Vec::new(),
            ignore_paused: false,
            stdio,
        })?;
        let (out_r, err_r) = io.readers();
        finish(&rt, &id, pid, started, started + opts.timeout, out_r, err_r, opts.output_cap)
    })();
    // Removing the used box and starting its replacement happen after the
    // caller has its answer: that is the point of a pool.
    super::pool::recycle_detached(root, opts, &id);
    result
}

/// Waits (capturing output) until `pid` exits, the deadline passes or we
/// are told to stop; in the last two cases everything in the box is killed.
/// Then reads the box's usage.
#[allow(clippy::too_many_arguments)]
fn finish(
    rt: &Runtime,
    id: &str,
    pid: Pid,
    started: Instant,
    deadline: Instant,
    out: Option<OwnedFd>,
    err: Option<OwnedFd>,
    cap: usize,
) -> Result<SandboxResult> {
    let mut res = SandboxResult::default();
    let status = match wait_capturing(pid, deadline, out, err, cap, &mut res) {
        Waited::Exited(s) => Some(s),
        stop => {
            // Killed from outside: the whole tree, by its cgroup.
            res.timed_out = matches!(stop, Waited::TimedOut);
            let _ = rt.load(id)?.kill(nix::sys::signal::Signal::SIGKILL as i32, true);
            let status = waitpid(pid, None).ok();
            if let Waited::Interrupted(sig) = stop {
                return Err(RuntimeError::InvalidState(format!("sandbox {id} stopped: tinyrun got {sig}")));
            }
            status
        }
    };
    match status {
        Some(WaitStatus::Exited(_, code)) => res.exit_code = Some(code),
        Some(WaitStatus::Signaled(_, sig, _)) => res.signal = Some(sig.as_str().to_string()),
        _ => {}
    }
    res.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let usage = rt.peek(id)?.usage();
    res.cpu_ms = usage.cpu_ns / 1_000_000;
    res.peak_memory_bytes = usage.peak_memory;
    res.oom_killed = usage.oom_kills > 0;
    Ok(res)
}

/// One-shot sandboxes' ids start with this; a stopped one is garbage.
const ONE_SHOT: &str = "run";

/// Removes one-shot sandboxes whose supervisor died (SIGKILL, a crash):
/// their init went with it (PDEATHSIG), and this cleans what remains.
fn collect_garbage(root: &Path) {
    let (rt, bundles) = dirs(root);
    let Ok(all) = rt.list() else { return };
    for s in all.into_iter().filter(|s| s.id.starts_with(ONE_SHOT) && s.status == crate::Status::Stopped) {
        if rt.delete(&s.id, true).is_ok() {
            let _ = remove_dir(&bundles.join(&s.id));
        }
    }
}

/// SIGINT, SIGTERM and SIGHUP, blocked while a box runs so they can be
/// read from a signalfd and turned into "kill the box and clean up".
struct Interrupts(nix::sys::signal::SigSet);

impl Interrupts {
    fn set() -> nix::sys::signal::SigSet {
        let mut s = nix::sys::signal::SigSet::empty();
        for sig in [nix::sys::signal::SIGINT, nix::sys::signal::SIGTERM, nix::sys::signal::SIGHUP] {
            s.add(sig);
        }
        s
    }

    fn block() -> Result<Interrupts> {
        let mut old = nix::sys::signal::SigSet::empty();
        nix::sys::signal::sigprocmask(nix::sys::signal::SigmaskHow::SIG_BLOCK, Some(&Self::set()), Some(&mut old))
            .map_err(|e| RuntimeError::Sys(crate::error::SysError::bare("sigprocmask", e)))?;
        Ok(Interrupts(old))
    }
}

impl Drop for Interrupts {
    fn drop(&mut self) {
        let _ = nix::sys::signal::sigprocmask(nix::sys::signal::SigmaskHow::SIG_SETMASK, Some(&self.0), None);
    }
}

/// Makes a persistent sandbox whose init idles until terminated; returns its id.
pub fn launch(root: &Path, opts: &SandboxOptions, prefix: &str) -> Result<String> {
    let (rt, bundles) = dirs(root);
    let id = new_id(prefix);
    let bundle = bundles.join(&id);
    // pid 1 of the box only waits; it reaps whatever exec'd processes leave.
    let idle = ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done"].map(String::from);
    let made = (|| {
        spec::write_bundle(&bundle, &id, &SandboxOptions { timeout: Duration::MAX, ..opts.clone() }, &idle)?;
        let devnull = crate::sys::fs::open_path(Path::new("/dev/null"), nix::fcntl::OFlag::O_RDWR)?;
        let fd = devnull.as_raw_fd();
        let mut c = rt.create(
            &id,
            &CreateOptions { bundle: bundle.clone(), detach: true, stdio: Some([fd, fd, fd]), ..Default::default() },
        )?;
        c.start()
    })();
    if let Err(e) = made {
        let _ = rt.delete(&id, true);
        let _ = remove_dir(&bundle);
        return Err(e);
    }
    Ok(id)
}

/// Runs `cmd` in sandbox `id` (state persists between calls); returns its status.
pub fn exec(root: &Path, id: &str, cmd: &[String], env: &[String], tty: bool) -> Result<i32> {
    let (rt, _) = dirs(root);
    let c = rt.load(id)?;
    let mut p = c.exec_process(&crate::ProcessOverrides {
        args: cmd.to_vec(),
        env: env.to_vec(),
        tty,
        user: Some((SANDBOX_UID, Some(SANDBOX_UID))),
        ..Default::default()
    })?;
    p.set_cwd("/work".into());
    c.exec(&ExecOptions {
        process: p,
        detach: false,
        pid_file: None,
        console_socket: None,
        preserve_fds: 0,
        cgroups: Vec::new(),
        ignore_paused: false,
        stdio: None,
    })
}

/// An interactive shell in sandbox `id`, on a terminal.
pub fn shell(root: &Path, id: &str) -> Result<i32> {
    exec(root, id, &["/bin/sh".to_string()], &[], true)
}

/// Removes sandbox `id`: kills everything in it and deletes every trace.
pub fn terminate(root: &Path, id: &str) -> Result<()> {
    let (rt, bundles) = dirs(root);
    crate::lifecycle::check_id(id)?;
    rt.delete(id, false).or_else(|e| match e {
        RuntimeError::InvalidState(_) => rt.delete(id, true),
        e => Err(e),
    })?;
    remove_dir(&bundles.join(id))
}

/// The sandboxes that exist now.
pub fn list(root: &Path) -> Result<Vec<crate::ContainerState>> {
    dirs(root).0.list()
}
