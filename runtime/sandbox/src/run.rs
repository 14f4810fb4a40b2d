//! Running a sandbox: one-shot (`run`), persistent (`launch`, `exec`,
//! `shell`, `terminate`, `list`), with the timeout enforced from outside and
//! a structured result.

use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::unistd::Pid;

use super::boxlock::{self, BoxLock};
use super::ids::Allocator;
use super::options::SandboxOptions;
use super::spec;
use super::stdio::Stdio;
use super::wait::{finish, Child, Interrupts, Scope};
use crate::error::{Error, Result};
pub use crate::result::{Output, PoolUse, SandboxResult, SCHEMA_VERSION, TIMED_OUT, TINYRUN_FAILED};
use tinyrun::{
    ContainerState, ExecOptions, Init, ProcessOverrides, ResidentCommand, ResidentStdio, Runtime, RuntimeError,
    Supervised,
};

/// Where boxes' compiled seccomp programs are kept, one per profile: every
/// box of the default profile after the first skips libseccomp.
fn seccomp_cache(root: &Path) -> PathBuf {
    root.join("sandbox-seccomp")
}

/// The cgroup v1 controllers a box joins: those its spec limits (memory,
/// cpu, pids) and reads (cpuacct and memory for a run's usage; the runtime
/// adds pids and freezer, which kill and delete use). Its spec has no
/// device rules. The other hierarchies (cpuset, devices, blkio, the named
/// and hybrid cgroup2 ones) would each be a directory more to make, join
/// and remove per box, for nothing.
fn box_controllers() -> Option<Vec<String>> {
    Some(["cpu", "cpuacct", "memory", "pids", "freezer"].map(String::from).to_vec())
}

/// Where sandboxes keep their state and bundles under a runtime root.
fn dirs(root: &Path) -> (Runtime, PathBuf) {
    (Runtime::new(root.join("sandbox")), root.join("sandbox-bundles"))
}

fn new_id(prefix: &str) -> Result<String> {
    let mut b = [0u8; 6];
    let urandom = Path::new("/dev/urandom");
    std::fs::File::open(urandom).and_then(|mut f| f.read_exact(&mut b)).map_err(|e| Error::io("read", urandom, e))?;
    Ok(format!("{prefix}-{}", b.iter().map(|x| format!("{x:02x}")).collect::<String>()))
}

/// Whether box `id` still exists: while its state or its bundle dir does,
/// its range of host ids stays taken.
pub(crate) fn box_exists(root: &Path) -> impl Fn(&str) -> bool + '_ {
    move |id| {
        let (state, bundles) = (root.join("sandbox"), root.join("sandbox-bundles"));
        tinyrun::check_id(id).is_ok() && (state.join(id).exists() || bundles.join(id).exists())
    }
}

/// Makes box `id`'s bundle dir and gives the box a range of host ids of its
/// own; returns its first host id. The dir comes first, so the range is
/// never seen as belonging to a box that doesn't exist.
fn provision(root: &Path, bundle: &Path, id: &str, opts: &SandboxOptions) -> Result<u32> {
    use std::os::unix::fs::DirBuilderExt;
    // Searchable, not listable: a box's root walks through it to its
    // bundle (mounted over with the box's own tmpfs, see `storage`).
    if let Some(bundles) = bundle.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o711)
            .create(bundles)
            .map_err(|e| Error::io("create", bundles, e))?;
    }
    std::fs::DirBuilder::new().mode(0o700).create(bundle).map_err(|e| Error::io("create sandbox bundle", bundle, e))?;
    Allocator::new(root).allocate(opts.host_ids, id, &box_exists(root))
}

/// Removes box `id` entirely: its state (killing what runs in it), its
/// bundle and its host ids, in that order, each even if one before failed.
/// The caller holds the box's lock.
pub(crate) fn remove_box(root: &Path, id: &str, _held: &BoxLock) -> Result<()> {
    let deleted = dirs(root).0.delete(id, true).map_err(Error::from);
    deleted.and(remove_rest(root, id))
}

/// What is left of box `id` once its state is gone: its bundle, then its
/// host ids.
fn remove_rest(root: &Path, id: &str) -> Result<()> {
    let bundle = dirs(root).1.join(id);
    // Its network first: while the bundle dir is there, a crash before
    // this leaves a box that still counts as alive, never a leak no one
    // looks for.
    let net = super::net::teardown(root, id);
    // Unmounted first: removing the dir must not reach into the box's files.
    super::storage::release(&bundle)?;
    let removed = remove_dir(&bundle);
    net.and(removed).and(Allocator::new(root).release(id))
}

/// Runs `cmd` in a fresh sandbox and removes it. With `capture`, output is
/// collected into the result; otherwise it goes to our stdout/stderr.
pub fn run(root: &Path, opts: &SandboxOptions, cmd: &[String], capture: bool) -> Result<SandboxResult> {
    opts.validate()?;
    let (rt, bundles) = dirs(root);
    crate::gc::collect(root);
    let id = new_id(ONE_SHOT)?;
    let bundle = bundles.join(&id);
    let started = Instant::now();
    let _signals = Interrupts::block()?;
    // Held until the box is removed: the garbage collection leaves it.
    let lock = boxlock::lock(root, &id)?;
    let result = (|| {
        let host_id = provision(root, &bundle, &id, opts)?;
        spec::write_bundle(&bundle, &id, opts, spec::Program::Command(cmd), host_id)?;
        let watch = files_in(&bundle, opts)?;
        let mut io = Stdio::direct(capture, opts.interactive)?;
        // The box dies with this process, even by SIGKILL: nothing would
        // be left to enforce its timeout.
        let how = Supervised {
            stdio: Some(io.fds()),
            die_with_runtime: true,
            loopback: opts.loopback,
            seccomp_cache: Some(seccomp_cache(root)),
            cgroup_v1_controllers: box_controllers(),
            init: Init::Program,
        };
        let mut c = rt.create_supervised(&id, &bundle, &how)?;
        io.started();
        let pid = Pid::from_raw(c.pid());
        egress(root, &id, c.pid(), opts)?;
        c.start()?;
        drop(c);
        let child = Child::Own(pid);
        let res = finish(&rt, &id, child, started, started + opts.timeout, &mut io, opts.output_cap, Scope::Box)?;
        writes_into(res, watch)
    })();
    let result = not_run_as_result(result, capture, started);
    let cleanup = remove_box(root, &id, &lock);
    match (result, cleanup) {
        (Ok(r), Ok(())) => Ok(r),
        (Err(e), _) => Err(e),
        (Ok(_), Err(e)) => Err(e),
    }
}

/// Gives box `id` (created, its init `pid` not yet started) its guarded
/// egress when asked: an error here keeps the box from starting.
fn egress(root: &Path, id: &str, pid: i32, opts: &SandboxOptions) -> Result<()> {
    opts.egress.as_ref().map_or(Ok(()), |e| super::net::setup(root, id, pid, e))
}

fn remove_dir(p: &Path) -> Result<()> {
    match std::fs::remove_dir_all(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("remove sandbox bundle", p, e)),
    }
}

/// Puts `--copy-in`'s files into the box whose bundle dir is `bundle`, and
/// starts watching `--report-writes`'s dir.
fn files_in(bundle: &Path, opts: &SandboxOptions) -> Result<Option<crate::writes::Watch>> {
    super::copy::copy_ins(bundle, &opts.copy_in, opts.copy_limit)?;
    opts.report_writes.as_deref().map(|d| crate::writes::watch(bundle, d)).transpose()
}

/// With `--json`, a command that could not be executed (126) or was not
/// found (127) is a result, as a shell reports it, not a failure of ours.
fn not_run_as_result(r: Result<SandboxResult>, capture: bool, started: Instant) -> Result<SandboxResult> {
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

fn writes_into(mut res: SandboxResult, watch: Option<crate::writes::Watch>) -> Result<SandboxResult> {
    res.writes = watch.map(crate::writes::Watch::report).transpose()?;
    Ok(res)
}

/// Runs `cmd` in a sandbox taken from the pool (a fresh one if the pool is
/// empty), removes it, and starts a detached refill.
pub fn run_pooled(root: &Path, opts: &SandboxOptions, cmd: &[String], capture: bool) -> Result<SandboxResult> {
    opts.validate()?;
    // Computed once: it builds the box's whole spec.
    let key = super::pool::key(opts)?;
    // What a fresh box would run: with an image, its Entrypoint and Cmd.
    let pooled_cmd = spec::command(opts, cmd)?;
    let Some(id) = super::pool::take_keyed(root, &key, opts.timeout)? else {
        let mut res = run(root, opts, cmd, capture)?;
        res.pool = Some(PoolUse::Miss);
        super::pool::recycle_detached(root, &key, None)?;
        return Ok(res);
    };
    let (rt, bundles) = dirs(root);
    let started = Instant::now();
    let _signals = Interrupts::block()?;
    let result = (|| {
        let watch = files_in(&bundles.join(&id), opts)?;
        let mut io = Stdio::piped(capture, opts.interactive)?;
        let deadline = started + opts.timeout;
        let how = Spawn { env: &opts.env, kill_children: false, deadline };
        let Some(child) = spawned(spawn_in(&rt, &id, &pooled_cmd, &how, &io))? else { return Ok(timed_out(started)) };
        io.started();
        let res = finish(&rt, &id, child, started, deadline, &mut io, opts.output_cap, Scope::Box)?;
        writes_into(res, watch)
    })();
    let result = not_run_as_result(result, capture, started).map(|r| SandboxResult { pool: Some(PoolUse::Hit), ..r });
    // Removing the used box and starting its replacement happen after the
    // caller has its answer: that is the point of a pool.
    let recycled = super::pool::recycle_detached(root, &key, Some(&id));
    match (result, recycled) {
        (Ok(r), Ok(())) => Ok(r),
        (Err(e), _) => Err(e),
        (Ok(_), Err(e)) => Err(e),
    }
}

/// One-shot sandboxes' ids start with this; a stopped one whose
/// supervisor is gone is garbage (module `gc`).
pub(crate) const ONE_SHOT: &str = "run";

/// Makes a persistent sandbox whose init idles until terminated, until
/// its lifetime (`opts.lifetime`, default [`crate::DEFAULT_LIFETIME`])
/// ends, or until no command has touched it for `opts.idle_timeout`;
/// returns its id.
///
/// # Preconditions
/// The caller is single-threaded (it leaves a reaper: see `lifetime`).
pub fn launch(root: &Path, opts: &SandboxOptions, prefix: &str) -> Result<String> {
    opts.validate()?;
    crate::lifetime::reap_expired(root);
    let (rt, bundles) = dirs(root);
    let id = new_id(prefix)?;
    let bundle = bundles.join(&id);
    // pid 1 of the box is its resident init: it forks what `exec` asks for
    // and reaps what those programs leave. It never execs its own program,
    // which must still be one the box has.
    let idle = ["/bin/sh".to_string()];
    // Held until the box runs (or is removed again).
    let lock = boxlock::lock(root, &id)?;
    let made = (|| -> Result<()> {
        let host_id = provision(root, &bundle, &id, opts)?;
        let forever = SandboxOptions { timeout: Duration::MAX, ..opts.clone() };
        spec::write_bundle(&bundle, &id, &forever, spec::Program::Exactly(&idle), host_id)?;
        super::copy::copy_ins(&bundle, &opts.copy_in, opts.copy_limit)?;
        let null = Path::new("/dev/null");
        let devnull =
            std::fs::OpenOptions::new().read(true).write(true).open(null).map_err(|e| Error::io("open", null, e))?;
        let fd = devnull.as_raw_fd();
        let how = Supervised {
            stdio: Some([fd, fd, fd]),
            die_with_runtime: false,
            loopback: opts.loopback,
            seccomp_cache: Some(seccomp_cache(root)),
            cgroup_v1_controllers: box_controllers(),
            init: Init::Resident,
        };
        // Written before the box runs: a box that exists always has one.
        crate::lifetime::set(root, &id, opts.lifetime.unwrap_or(crate::DEFAULT_LIFETIME))?;
        if let Some(t) = opts.idle_timeout {
            crate::idle::set(root, &id, t)?;
        }
        let mut c = rt.create_supervised(&id, &bundle, &how)?;
        egress(root, &id, c.pid(), opts)?;
        c.start()?;
        crate::lifetime::ensure_reaper(root)
    })();
    if let Err(e) = made {
        return Err(match remove_box(root, &id, &lock) {
            Ok(()) | Err(Error::Runtime(RuntimeError::NotFound(_))) => e,
            Err(cleanup) => Error::WithCleanup { error: Box::new(e), cleanup: Box::new(cleanup) },
        });
    }
    Ok(id)
}

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
    /// Most bytes of stdout and of stderr kept when capturing.
    pub output_cap: usize,
    /// Give the command our stdin (otherwise /dev/null).
    pub interactive: bool,
    /// Kill what the command leaves running when it exits (otherwise that
    /// runs on until the box ends).
    pub kill_children: bool,
    /// List the files the command wrote under this box directory.
    pub report_writes: Option<PathBuf>,
}

/// The runtime holding box `id`, the lifetime the box has left, and the
/// box touched for as long as the caller keeps the last (module `idle`);
/// unless the box has expired (then it is purged, and the error says
/// when). Whether the box exists is otherwise left to what comes next.
pub(crate) fn live_box(root: &Path, id: &str) -> Result<(Runtime, Option<Duration>, crate::idle::Touch)> {
    tinyrun::check_id(id)?;
    let left = crate::lifetime::remaining(root, id);
    if left.is_some_and(|d| d.is_zero()) {
        crate::lifetime::reap_expired(root);
        let ended = || Error::InvalidState(format!("sandbox {id} has reached the end of its lifetime"));
        return Err(crate::tombstone::expired(root, id).unwrap_or_else(ended));
    }
    let touch = crate::idle::touch(root, id)?;
    // Gone, maybe while we waited for the box's end to be over: say why.
    if !root.join("sandbox").join(id).exists() {
        return Err(gone(root, id));
    }
    Ok((dirs(root).0, left, touch))
}

/// The error for box `id`, which does not exist: when it expired, if it
/// did lately, else that it does not exist.
pub(crate) fn gone(root: &Path, id: &str) -> Error {
    crate::tombstone::expired(root, id).unwrap_or_else(|| RuntimeError::NotFound(id.to_string()).into())
}

fn box_process(
    c: &tinyrun::Container,
    cmd: &[String],
    env: &[String],
    tty: bool,
) -> Result<tinyrun::oci_spec::runtime::Process> {
    // The box's own user and working directory (its image's, or the
    // sandbox's user in /work), as `docker exec` keeps them.
    Ok(c.exec_process(&ProcessOverrides { args: cmd.to_vec(), env: env.to_vec(), tty, ..Default::default() })?)
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
    let (rt, lifetime, _touch) = live_box(root, id)?;
    let started = Instant::now();
    let limit = match (req.timeout, lifetime) {
        (Some(t), Some(l)) => Some(t.min(l)),
        (t, l) => t.or(l),
    };
    // No limit at all only for a box made before lifetimes: a century.
    let deadline = started + limit.unwrap_or(Duration::from_secs(100 * 365 * 86400));
    let _signals = Interrupts::block()?;
    let result = (|| {
        let bundle = dirs(root).1.join(id);
        let watch = req.report_writes.as_deref().map(|d| crate::writes::watch(&bundle, d)).transpose()?;
        let mut io = Stdio::piped(req.capture, req.interactive)?;
        let how = Spawn { env: &req.env, kill_children: req.kill_children, deadline };
        let Some(child) = spawned(spawn_in(&rt, id, cmd, &how, &io))? else { return Ok(timed_out(started)) };
        io.started();
        let mut res = finish(&rt, id, child, started, deadline, &mut io, req.output_cap, Scope::Command)?;
        // The box's end killed it: that is its timeout too.
        if lifetime.is_some_and(|l| started.elapsed() >= l) && res.signal.is_some() {
            res.timed_out = true;
        }
        writes_into(res, watch)
    })();
    not_run_as_result(result, req.capture, started)
}

/// How [`spawn_in`] starts a command.
struct Spawn<'a> {
    env: &'a [String],
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
        cwd: None,
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
    let process = box_process(&c, cmd, how.env, false)?;
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

/// An interactive shell in sandbox `id`, on a terminal; returns its status.
pub fn shell(root: &Path, id: &str) -> Result<i32> {
    let (rt, _, _touch) = live_box(root, id)?;
    let c = rt.load(id)?;
    let process = box_process(&c, &["/bin/sh".to_string()], &[], true)?;
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

/// Removes sandbox `id`: kills everything in it and deletes every trace.
pub fn terminate(root: &Path, id: &str) -> Result<()> {
    let (rt, _) = dirs(root);
    tinyrun::check_id(id)?;
    let (_lock, waited) = match boxlock::try_lock(root, id)? {
        Some(l) => (l, false),
        None => {
            // Held by its maker (a one-shot run, a launch under way): end
            // what runs in it, and the maker removes it as any box that
            // ends; or by another removal.
            if let Ok(c) = rt.load(id) {
                let _ = c.kill(nix::sys::signal::Signal::SIGKILL as i32, true);
            }
            (boxlock::lock(root, id)?, true)
        }
    };
    let deleted = rt.delete(id, false).or_else(|e| match e {
        RuntimeError::InvalidState(_) => rt.delete(id, true),
        e => Err(e),
    });
    match deleted {
        Ok(()) => remove_rest(root, id),
        // Removed by the one we waited for: done.
        Err(RuntimeError::NotFound(_)) if waited => Ok(()),
        Err(RuntimeError::NotFound(_)) => Err(gone(root, id)),
        Err(e) => Err(e.into()),
    }
}

/// The sandboxes that exist now.
pub fn list(root: &Path) -> Result<Vec<ContainerState>> {
    crate::lifetime::reap_expired(root);
    Ok(dirs(root).0.list()?)
}
