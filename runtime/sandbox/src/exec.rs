//! Commands in a launched box: `exec` (one command, its output passed on
//! or captured, its own timeout enforced from outside and the box's
//! lifetime in any case), `shell` (on a terminal of the box's own, which
//! we relay), and the command of a run that took a pool's box. A box with
//! a resident init forks the command ([`tinyrun::Resident`]); a box made
//! before them gets an `exec`. Runs in the runtime process.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tinyrun::{ExecOptions, ProcessOverrides, ResidentCommand, ResidentStdio, Runtime, RuntimeError};

use crate::error::{Error, Result};
use crate::layout;
use crate::options::SandboxOptions;
use crate::result::{not_run_as_result, with_writes, SandboxResult};
use crate::stdio::Stdio;
use crate::wait::{finish, Child, Interrupts, Scope, Watch};

/// How to run a command in a launched box.
#[derive(Debug, Clone)]
pub struct ExecRequest {
    /// Extra `NAME=VALUE` variables.
    pub env: Vec<String>,
    /// The command's own wall-clock limit; the box's lifetime applies in
    /// any case.
    pub timeout: Option<std::time::Duration>,
    /// Collect output into the result (`--json`) instead of passing ours.
    pub capture: bool,
    /// Make the whole result (usage, limits hit, refused calls) while the
    /// output passes through, as a streamed command's last event needs it;
    /// `capture` implies it. Without either, the status alone is worth the
    /// reads.
    pub report: bool,
    /// Most bytes of stdout and of stderr kept when capturing.
    pub output_cap: usize,
    /// Give the command our stdin (otherwise /dev/null).
    pub interactive: bool,
    /// Kill what the command leaves running when it exits (otherwise that
    /// runs on until the box ends).
    pub kill_children: bool,
    /// List the files the command wrote under this box directory.
    pub report_writes: Option<PathBuf>,
    /// The working directory in the box (absolute, without `..`), instead
    /// of the box's own.
    pub cwd: Option<PathBuf>,
}

/// `cwd` as a command's working directory: absolute, and no `..` (a path
/// in the box, resolved there; refused here so that what a caller asked
/// for reads as what runs).
pub fn check_cwd(cwd: &Path) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    use std::path::Component;
    let plain = cwd.components().all(|c| matches!(c, Component::RootDir | Component::Normal(_) | Component::CurDir));
    if !cwd.is_absolute() || !plain || cwd.as_os_str().as_bytes().contains(&0) {
        return Err(Error::InvalidArgument(format!(
            "--cwd {}: an absolute path in the box, without ..",
            cwd.display()
        )));
    }
    Ok(())
}

fn box_process(
    c: &tinyrun::Container,
    cmd: &[String],
    env: &[String],
    cwd: Option<&Path>,
    tty: bool,
) -> Result<tinyrun::oci_spec::runtime::Process> {
    // The box's own user and working directory (its image's, or the
    // sandbox's user in /work), as `docker exec` keeps them, unless the
    // caller names another directory.
    let over = ProcessOverrides {
        args: cmd.to_vec(),
        env: env.to_vec(),
        cwd: cwd.map(Path::to_path_buf),
        tty,
        ..Default::default()
    };
    Ok(c.exec_process(&over)?)
}

/// Runs `cmd` in sandbox `id` (its files persist between calls) until it
/// exits, its timeout passes (it and everything it started are killed by
/// its cgroup, the box lives on) or the box's lifetime ends. What it
/// leaves running lives on until the box ends, unless
/// `req.kill_children`. The timeout counts from this call on, so a paused
/// or busy box can't stretch it.
///
/// # Preconditions
/// The caller is single-threaded.
pub fn exec(root: &Path, id: &str, cmd: &[String], req: &ExecRequest) -> Result<SandboxResult> {
    if let Some(e) = req.env.iter().find_map(|e| tinyrun::check_env(e).err()) {
        return Err(Error::InvalidArgument(format!("--env: {e}: use NAME=VALUE")));
    }
    if let Some(cwd) = &req.cwd {
        check_cwd(cwd)?;
    }
    let (rt, lifetime, _touch) = crate::expiry::live_box(root, id)?;
    let started = Instant::now();
    let limit = match (req.timeout, lifetime) {
        (Some(t), Some(l)) => Some(t.min(l)),
        (t, l) => t.or(l),
    };
    // No limit at all only for a box made before lifetimes: a century.
    let deadline = started + limit.unwrap_or(Duration::from_secs(100 * 365 * 86400));
    let _signals = Interrupts::block()?;
    let result = (|| {
        let bundle = layout::bundle(root, id);
        let watch = req.report_writes.as_deref().map(|d| crate::writes::watch(&bundle, d)).transpose()?;
        let mut io = Stdio::piped(req.capture, req.interactive)?;
        let how = Spawn { env: &req.env, cwd: req.cwd.as_deref(), kill_children: req.kill_children, deadline };
        let recorded = recording(root, &rt, id, req.capture || req.report);
        let Some(child) = spawned(spawn_in(&rt, id, cmd, &how, &io))? else { return Ok(timed_out(started)) };
        io.started();
        let mut res = finish(&rt, id, child, started, deadline, &mut io, req.output_cap, Scope::Command, recorded)?;
        // The box's end killed it: that is its timeout too.
        if lifetime.is_some_and(|l| started.elapsed() >= l) && res.signal.is_some() {
            res.timed_out = true;
        }
        with_writes(res, watch, &bundle)
    })();
    not_run_as_result(result, req.capture, started)
}

/// The limits box `id` had hit and its network record before a command,
/// when its whole result is wanted: the command's result has what grew.
fn recording(root: &Path, rt: &Runtime, id: &str, report: bool) -> Watch {
    let Some(c) = report.then(|| rt.peek(id).ok()).flatten() else { return Watch::default() };
    let net = crate::net::NetWatch::open(root, id, c.pid());
    let before = net.read();
    Watch { refusals: None, limits_before: c.limits_hit(), net: Some((net, before)), report: true }
}

/// How [`spawn_in`] starts a command.
struct Spawn<'a> {
    env: &'a [String],
    cwd: Option<&'a Path>,
    kill_children: bool,
    /// Until the command runs, too (a paused or busy box).
    deadline: Instant,
}

/// `None` when the deadline passed before the command started.
fn spawned(r: Result<Child>) -> Result<Option<Child>> {
    match r {
        Err(Error::Runtime(RuntimeError::DeadlinePassed(_))) => Ok(None),
        r => r.map(Some),
    }
}

/// The result of a command whose deadline passed before it started: it is
/// killed whenever it would have (see `tinyrun::ResidentProcess`).
fn timed_out(started: Instant) -> SandboxResult {
    SandboxResult {
        timed_out: true,
        signal: Some("SIGKILL".into()),
        duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        ..SandboxResult::default()
    }
}

/// Starts `cmd` in launched box `id`, as its user in its working directory, with `io`:
/// forked by the box's resident init, or, in a box without one, made by
/// `exec`.
fn spawn_in(rt: &Runtime, id: &str, cmd: &[String], how: &Spawn<'_>, io: &Stdio) -> Result<Child> {
    let program = ResidentCommand {
        args: cmd.to_vec(),
        env: how.env.to_vec(),
        cwd: how.cwd.map(Path::to_path_buf),
        kill_children: how.kill_children,
        deadline: Some(how.deadline),
    };
    let drain = io.drained();
    let stdio = ResidentStdio { fds: io.fds(), drain: &drain };
    match rt.resident(id).and_then(|r| r.spawn(&program, &stdio)) {
        Ok(p) => return Ok(Child::Resident(p)),
        // A box made before resident inits: `exec`.
        Err(RuntimeError::InvalidState(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let c = rt.load(id)?;
    let process = box_process(&c, cmd, how.env, how.cwd, false)?;
    let pid = c.exec_spawn(&ExecOptions {
        process,
        detach: true,
        pid_file: None,
        console_socket: None,
        preserve_fds: 0,
        cgroups: Vec::new(),
        ignore_paused: false,
        stdio: Some(io.fds()),
    })?;
    Ok(Child::Own(pid))
}

/// An interactive /bin/sh in sandbox `id`, on a terminal of the box's own
/// (never ours: we relay ours to it); returns its status. The box's
/// resident init forks it, for root and an ordinary user alike; a box made
/// before resident inits gets an `exec -t`, for root only (an ordinary
/// user's commands can't join a box's namespaces: the /proc ns files of
/// its init, which is not dumpable, give them EACCES).
pub fn shell(root: &Path, id: &str) -> Result<i32> {
    let (rt, lifetime, _touch) = crate::expiry::live_box(root, id)?;
    let sh = vec!["/bin/sh".to_string()];
    // It must start within the box's lifetime; once it runs, the box's
    // end ends it.
    let deadline = lifetime.map(|l| Instant::now() + l);
    let program = ResidentCommand { args: sh.clone(), deadline, ..ResidentCommand::default() };
    match rt.resident(id).and_then(|r| r.spawn_terminal(&program)) {
        Ok(t) => return Ok(t.relay()),
        Err(RuntimeError::InvalidState(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let c = rt.load(id)?;
    let process = box_process(&c, &sh, &[], None, true)?;
    Ok(c.exec(&ExecOptions {
        process,
        detach: false,
        pid_file: None,
        console_socket: None,
        preserve_fds: 0,
        cgroups: Vec::new(),
        ignore_paused: false,
        stdio: None,
    })?)
}

/// Runs `cmd` in pool box `id`, which this process has claimed, as `run
/// --pool` does: `opts`' files put in, its environment added, its timeout
/// enforced on the whole box.
pub(crate) fn run_in_pooled(
    root: &Path,
    id: &str,
    opts: &SandboxOptions,
    cmd: &[String],
    capture: bool,
) -> Result<SandboxResult> {
    let rt = layout::runtime(root);
    let started = Instant::now();
    let _signals = Interrupts::block()?;
    let result = (|| {
        let bundle = layout::bundle(root, id);
        let watch = crate::make::files_in(&bundle, opts)?;
        let mut io = Stdio::piped(capture, opts.interactive)?;
        let deadline = started + opts.timeout;
        let how = Spawn { env: &opts.env, cwd: None, kill_children: false, deadline };
        let recorded = recording(root, &rt, id, capture);
        let Some(child) = spawned(spawn_in(&rt, id, cmd, &how, &io))? else { return Ok(timed_out(started)) };
        io.started();
        let res = finish(&rt, id, child, started, deadline, &mut io, opts.output_cap, Scope::Box, recorded)?;
        with_writes(res, watch, &bundle)
    })();
    not_run_as_result(result, capture, started)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    #[test]
    fn a_cwd_is_absolute_without_dotdot() {
        for ok in ["/", "/work", "/tmp/./x", "/a b/c"] {
            assert!(super::check_cwd(Path::new(ok)).is_ok(), "{ok}");
        }
        for bad in ["work", "./work", "", "/tmp/../etc", "/..", "/a\0b"] {
            let e = super::check_cwd(Path::new(bad)).expect_err(bad).to_string();
            assert!(e.contains("--cwd"), "{bad}: {e}");
        }
    }
}
