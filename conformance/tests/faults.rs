//! Faults (issue 7, Reliability 2): the runtime SIGKILLed at each step of `create`, `start` and
//! `run`, and the container's init SIGKILLed at each stage. After each fault:
//!
//! 1. `state` tells the truth: `does not exist` with no process of the container alive;
//!    `created` with init alive and not yet exec'd (its `/proc/<pid>/exe` is still the runtime,
//!    and a `start` then works); `running` with the program alive; `stopped` with pid 0 and
//!    nothing alive in the container's cgroup;
//! 2. `delete --force` exits 0 and removes everything (state dir, cgroup dirs, processes);
//! 3. the id can be reused: `create` again succeeds, and `delete --force` cleans that up too.
//!
//! The kills are exact, not timed: `strace -o TRACE -e inject=SYSCALL:signal=KILL[:when=N]`
//! delivers SIGKILL to the process making the Nth such call, on entry (the call never runs).
//! Without `-f` only the runtime is traced, so only it can be hit; with `-f` the cloned init is
//! traced too, and the syscall picks the victim (only init calls `mount(2)` and `pivot_root`).
//! `-P PATH` restricts a syscall to one path (the state dir, the container's cgroup dirs).
//! Two cases kill from a hook instead: a createRuntime hook runs in the runtime's namespaces
//! while init waits after its mounts, so `kill -9 $PPID` there hits the runtime at exactly that
//! point, and `kill -9 <pid from the state on stdin>` hits init.
//!
//! Each test prints one row per case: what was killed where (the trace line of the interrupted
//! call), the runtime's exit, what `state` said, what was on disk before `delete --force`, and
//! the verdict. A failure that shows the symptom of an open runtime bug listed in [`KNOWN_BUGS`]
//! is reported (`KNOWN BUG`) without failing the test, unless `TINYRUN_STRICT=1`
//! (`conformance/run-all` and `conformance/faults` set it, so CI fails on it). Each test ends
//! with the list of known bugs it saw.
//!
//! Kill points after the clone are found by a calibration run first (`create` under strace,
//! nothing injected): "the sendto that carries Committed" becomes `sendto ... when=N`, so the
//! cases follow changes to the create protocol. A point the calibration cannot find is skipped
//! with a note, or fails under `TINYRUN_STRICT=1` (a strict run must try every point).

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tinyrun_conformance::{
    cgroup_dirs, cmdline, missing_prerequisite, pid_alive, require_root, strict, Bundle, KnownBug, Out, Runtime,
};

/// Runtime bugs this file found that are still open, recognised by their symptom in a case's
/// verdict (not by case name: the create protocol changes, and which step shows which bug moves
/// with it). Delete an entry when its bug is fixed.
const KNOWN_BUGS: &[KnownBug] = &[];

/// The kill points are tinyrun's syscalls; another runtime (runc as the oracle) makes others.
fn skip_unless_tinyrun() -> bool {
    let bin = tinyrun_conformance::runtime_bin();
    let ours = bin.file_name().is_some_and(|n| n == "tinyrun");
    if !ours {
        eprintln!("SKIP: the kill points are tinyrun's own syscall sequence, not {}'s", bin.display());
    }
    !ours
}

fn have_strace() -> bool {
    Command::new("strace").arg("-V").stdout(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// `strace -o TRACE <strace_args> -- <bin> --root R <args>` with the test's tag, ready to spawn.
fn strace_cmd(rt: &Runtime, trace: &Path, strace_args: &[String], args: &[&str]) -> Command {
    let mut c = Command::new("strace");
    c.arg("-o")
        .arg(trace)
        .args(strace_args)
        .arg("--")
        .arg(&rt.bin)
        .arg("--root")
        .arg(rt.root())
        .args(args)
        .env("TINYRUN_CONFORMANCE_TAG", rt.tag())
        .stdin(Stdio::null());
    c
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// `-P` for each place the container's cgroup dir can be made: `/sys/fs/cgroup[/<h>]/tinyrun-test/ID`.
fn cgroup_path_filters(id: &str) -> Vec<String> {
    let mut v = vec!["-P".to_string(), format!("/sys/fs/cgroup/tinyrun-test/{id}")];
    for e in fs::read_dir("/sys/fs/cgroup").into_iter().flatten().flatten() {
        v.push("-P".into());
        v.push(format!("/sys/fs/cgroup/{}/tinyrun-test/{id}", e.file_name().to_string_lossy()));
    }
    v
}

/// The call the SIGKILL interrupted (`... = ?` in the trace), and who made it: with `-f` (and
/// `execve` traced) the first pid in the trace is the runtime's, any other is init (or its
/// intermediate).
fn killed_at(trace: &Path) -> String {
    let text = fs::read_to_string(trace).unwrap_or_default();
    let first_pid = text.lines().next().and_then(|l| l.split_whitespace().next()).unwrap_or("").to_string();
    let killed = text.lines().find(|l| l.trim_end().ends_with("= ?"));
    match killed {
        None => "no traced call was interrupted".into(),
        Some(l) => {
            let l = l.split_whitespace().collect::<Vec<_>>().join(" ");
            let mut who = "runtime";
            if let Some(pid) = l.split(' ').next().filter(|p| p.parse::<i32>().is_ok()) {
                if pid != first_pid {
                    who = "init";
                }
            }
            let short: String = l.chars().take(110).collect();
            format!("{who} at `{short}`")
        }
    }
}

fn exit_of(o: &Out) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (o.code(), o.status.signal()) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => "?".into(),
    }
}

/// What was inflicted and how the runtime ended.
struct Inflicted {
    what: String,
    exit: String,
}

/// How long one invocation may take in [`verify`] before it counts as a hang.
const HANG: Duration = Duration::from_secs(6);

/// `<bin> --root R args...`, but a hang (more than [`HANG`]) is an `Err`, not a test panic.
fn run_bounded(rt: &Runtime, args: &[&str]) -> Result<Out, String> {
    let mut running = rt.spawn(args);
    let deadline = Instant::now() + HANG;
    while running.child.try_wait().map_err(|e| e.to_string())?.is_none() {
        if Instant::now() > deadline {
            let _ = running.child.kill();
            let _ = running.wait();
            return Err(format!("`{}` hung for more than {HANG:?}", args.join(" ")));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(running.wait())
}

/// Live processes of this test, after up to 3 s for dying ones to go.
fn settle_leftovers(rt: &Runtime) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut procs = rt.leftovers();
    while !procs.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        procs = rt.leftovers();
    }
    procs.iter().map(|p| format!("{p} {:?}", cmdline(*p))).collect()
}

fn procs_in_cgroup(id: &str) -> Vec<i32> {
    cgroup_dirs(id)
        .iter()
        .flat_map(|d| {
            fs::read_to_string(d.join("cgroup.procs"))
                .unwrap_or_default()
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

fn exe_is_runtime(pid: i32, bin: &Path) -> bool {
    let exe = fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
    let bin = fs::canonicalize(bin).unwrap_or_else(|_| bin.to_path_buf());
    exe == bin
}

/// Step 1: what `state` says, checked against the host. Ok(what it said) or Err(the lie).
fn state_truth(rt: &Runtime, b: &Bundle) -> Result<String, String> {
    std::thread::sleep(Duration::from_millis(150)); // let a PDEATHSIG or an execve land
    let o = run_bounded(rt, &["state", &b.id])?;
    if !o.ok() {
        if o.code() != Some(1) || !o.stderr.contains("does not exist") {
            return Err(format!("state failed oddly: {}", o.stderr.trim()));
        }
        let procs = settle_leftovers(rt);
        return match procs.is_empty() {
            true => Ok("does not exist".into()),
            false => Err(format!("state: does not exist, but processes live: {procs:?}")),
        };
    }
    let st: Value = serde_json::from_str(&o.stdout).map_err(|e| format!("state is not JSON ({e}): {}", o.stdout))?;
    let pid = st["pid"].as_i64().unwrap_or(-1) as i32;
    let status = st["status"].as_str().unwrap_or("?").to_string();
    if pid > 1 {
        rt.track_pid(pid);
    }
    match status.as_str() {
        "created" if pid > 1 && pid_alive(pid) && exe_is_runtime(pid, &rt.bin) => {
            // The real test of `created`: start works and the program runs.
            let s = run_bounded(rt, &["start", &b.id])?;
            if !s.ok() {
                return Err(format!("state: created (init {pid} waiting), but start failed: {}", s.stderr.trim()));
            }
            Ok(format!("created (pid {pid}; start then worked)"))
        }
        "created" if pid > 1 && pid_alive(pid) => {
            Err(format!("state: created, but init {pid} has already exec'd {:?}", cmdline(pid)))
        }
        "running" if pid > 1 && pid_alive(pid) && !exe_is_runtime(pid, &rt.bin) => Ok(format!("running (pid {pid})")),
        "stopped" if pid == 0 => {
            let procs = procs_in_cgroup(&b.id);
            let left = settle_leftovers(rt);
            match (procs.is_empty(), left.is_empty()) {
                (true, true) => Ok("stopped".into()),
                _ => Err(format!("state: stopped, but alive: cgroup {procs:?}, processes {left:?}")),
            }
        }
        _ => Err(format!("state: {status} with pid {pid} (alive: {})", pid > 0 && pid_alive(pid))),
    }
}

/// State dir entries and cgroup dirs, as a short string.
fn on_disk(rt: &Runtime, id: &str) -> String {
    let dir = rt.root().join(id);
    let files: Vec<String> = fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
        .unwrap_or_default();
    let state = if dir.exists() { format!("state dir {files:?}") } else { "no state dir".into() };
    format!("{state}, {} cgroup dirs", cgroup_dirs(id).len())
}

fn nothing_left(rt: &Runtime, id: &str) -> Result<(), String> {
    let procs = settle_leftovers(rt);
    let dir = rt.root().join(id);
    let cg = cgroup_dirs(id);
    if procs.is_empty() && !dir.exists() && cg.is_empty() {
        return Ok(());
    }
    Err(format!(
        "left behind: processes {procs:?}, state dir {}, cgroup dirs {cg:?}",
        if dir.exists() { "present" } else { "gone" }
    ))
}

/// Steps 1-3 after the fault; returns the row's verdict. `config` is the bundle's config before
/// the case changed it (a killing hook), restored for the re-create.
fn verify(rt: &Runtime, b: &Bundle, config: &Value) -> Result<String, String> {
    let disk = on_disk(rt, &b.id);
    let said = state_truth(rt, b).map_err(|e| format!("{e}; {disk}"))?;
    let disk = on_disk(rt, &b.id);
    let d = run_bounded(rt, &["delete", "--force", &b.id])?;
    if !d.ok() {
        return Err(format!("state: {said}; {disk}; delete --force failed: {}", d.stderr.trim()));
    }
    nothing_left(rt, &b.id).map_err(|e| format!("state: {said}; {disk}; after delete --force: {e}"))?;
    b.config_mut(|c| *c = config.clone());
    let c = run_bounded(rt, &["create", "--bundle", b.path(), &b.id])?;
    if !c.ok() {
        return Err(format!("state: {said}; {disk}; id not reusable: create failed: {}", c.stderr.trim()));
    }
    let again = run_bounded(rt, &["state", &b.id])?;
    if !again.stdout.contains("\"created\"") {
        return Err(format!("re-created container is not created: {}", again.stdout));
    }
    let d = run_bounded(rt, &["delete", "--force", &b.id])?;
    if !d.ok() {
        return Err(format!("delete --force of the re-created container failed: {}", d.stderr.trim()));
    }
    nothing_left(rt, &b.id).map_err(|e| format!("after re-create and delete --force: {e}"))?;
    Ok(format!("state: {said}; before delete: {disk}; delete --force cleaned up; id reused"))
}

/// One case: a fresh runtime and bundle, `prepare` (e.g. create for start faults), `inflict`,
/// then [`verify`]. Prints the row and returns Err(row) if it failed and is not a known bug.
fn case(
    name: &str,
    prepare: impl FnOnce(&Runtime, &Bundle),
    inflict: impl FnOnce(&Runtime, &Bundle) -> Inflicted,
) -> Result<(), String> {
    // A runtime name of its own per case: the name makes the tag and the container ids, and
    // cases run in parallel.
    static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let rt = Runtime::new(&format!("fault{n}"));
    let b = rt.bundle(&["/bin/probe", "sleep", "600"]);
    let config = b.config();
    prepare(&rt, &b);
    let inf = inflict(&rt, &b);
    let verdict = verify(&rt, &b, &config);
    if verdict.is_err() {
        // Unblock the harness's cleanup (a stuck init can hold the state dir's lock).
        for p in rt.leftovers() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), nix::sys::signal::SIGKILL);
        }
    }
    let bug = verdict.as_ref().err().and_then(|e| KnownBug::find(KNOWN_BUGS, e));
    let (mark, text, failed) = match (&verdict, bug) {
        (Ok(v), _) => ("ok", v.clone(), false),
        (Err(e), Some(bug)) => {
            seen_bug(bug.name);
            ("KNOWN BUG", format!("{e}\n      bug {}: {}", bug.name, bug.why), strict())
        }
        (Err(e), None) => ("FAIL", e.clone(), true),
    };
    let row = format!("{name:<28} killed: {}; runtime {}\n      {mark}: {text}", inf.what, inf.exit);
    eprintln!("{row}");
    if failed {
        Err(row)
    } else {
        Ok(())
    }
}

/// Known bugs seen by any case of this test binary.
static SEEN: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());

fn seen_bug(name: &'static str) {
    let mut seen = SEEN.lock().unwrap();
    if !seen.contains(&name) {
        seen.push(name);
    }
}

fn report(results: Vec<Result<(), String>>) {
    eprintln!("known bugs seen so far: {:?}", SEEN.lock().unwrap());
    let failed: Vec<String> = results.into_iter().filter_map(Result::err).collect();
    assert!(failed.is_empty(), "{} case(s) failed:\n{}", failed.len(), failed.join("\n"));
}

/// Runs `create` under strace with `strace_args`; the victim comes from the trace.
fn create_under(rt: &Runtime, b: &Bundle, strace_args: Vec<String>) -> Inflicted {
    let trace = rt.work().join("create.trace");
    let o = rt.output(strace_cmd(rt, &trace, &strace_args, &["create", "--bundle", b.path(), &b.id]));
    Inflicted { what: killed_at(&trace), exit: exit_of(&o) }
}

fn no_prepare(_: &Runtime, _: &Bundle) {}

/// A createRuntime hook running `script` with `sh -c` (on the host, while init waits after
/// its mounts; the container's state JSON is on stdin).
fn add_create_runtime_hook(b: &Bundle, script: &str) {
    b.config_mut(|c| {
        c["hooks"] = json!({"createRuntime": [{"path": "/bin/sh", "args": ["sh", "-c", script]}]});
    });
}

/// The runtime's own calls during one `create` (no `-f`: init is not traced), from a
/// calibration run with nothing injected.
struct Calibration {
    lines: Vec<String>,
}

impl Calibration {
    fn run() -> Calibration {
        let rt = Runtime::new("faultcal");
        let b = rt.bundle(&["/bin/probe", "sleep", "600"]);
        let trace = rt.work().join("calibration.trace");
        let args = strs(&["-s", "64", "-e", "trace=sendto,recvfrom,rename,flock,mkdir"]);
        let o = rt.output(strace_cmd(&rt, &trace, &args, &["create", "--bundle", b.path(), &b.id]));
        o.expect_ok("calibration create under strace");
        rt.run(&["delete", "--force", &b.id]).expect_ok("delete the calibration container");
        let lines = fs::read_to_string(&trace).unwrap_or_default().lines().map(str::to_string).collect();
        Calibration { lines }
    }

    /// `when=N` for the first call to `syscall` whose line contains `needle`: N counts the
    /// runtime's calls to `syscall` up to and including that one.
    fn when(&self, syscall: &str, needle: &str) -> Option<u32> {
        let mut n = 0;
        for l in &self.lines {
            if l.starts_with(&format!("{syscall}(")) {
                n += 1;
                if l.contains(needle) {
                    return Some(n);
                }
            }
        }
        None
    }

    /// The strace arguments that kill the runtime at that call, or Err(why not).
    fn kill_at(&self, syscall: &str, needle: &str) -> Result<Vec<String>, String> {
        let w = self.when(syscall, needle).ok_or_else(|| {
            format!("calibration: no {syscall} call with {needle:?} in create; the protocol changed?")
        })?;
        Ok(strs(&["-e", &format!("trace={syscall}"), "-e", &format!("inject={syscall}:signal=KILL:when={w}")]))
    }
}

#[test]
fn runtime_killed_at_each_step_of_create() {
    require_root!();
    if !have_strace() {
        missing_prerequisite!("strace is not installed (conformance/install-deps installs it)");
    }
    if skip_unless_tinyrun() {
        return;
    }
    let kill_at = |syscall: &str, when: u32| {
        strs(&["-e", &format!("trace={syscall}"), "-e", &format!("inject={syscall}:signal=KILL:when={when}")])
    };
    let cal = Calibration::run();
    let mut results = Vec::new();
    results.push(case("create/mkdir-state-dir", no_prepare, |rt, b| {
        let mut a = strs(&["-P", rt.root().join(&b.id).to_str().unwrap()]);
        a.extend(kill_at("mkdir", 1));
        create_under(rt, b, a)
    }));
    results.push(case("create/socketpair", no_prepare, |rt, b| create_under(rt, b, kill_at("socketpair", 1))));
    results.push(case("create/clone3", no_prepare, |rt, b| create_under(rt, b, kill_at("clone3", 1))));
    results.push(case("create/first-cgroup-mkdir", no_prepare, |rt, b| {
        let mut a = cgroup_path_filters(&b.id);
        a.extend(kill_at("mkdir", 1));
        create_under(rt, b, a)
    }));
    results.push(case("create/cgroup-partly-made", no_prepare, |rt, b| {
        let mut a = cgroup_path_filters(&b.id);
        a.extend(kill_at("mkdir", 4));
        create_under(rt, b, a)
    }));
    // Points in the runtime <-> init conversation, by what the call carries.
    let points = [
        ("create/rename-config.json", "rename", "config.json"),
        ("create/at-Go", "sendto", r#"\"Go\""#),
        ("create/at-Joined", "sendto", "Joined"),
        ("create/waiting-for-Ready", "recvfrom", "Ready"),
        ("create/rename-state.json", "rename", "state.json"),
        ("create/at-Committed", "sendto", "Committed"),
        ("create/waiting-for-Detached", "recvfrom", "Detached"),
        // The runtime's unlock on the way out, after init detached.
        ("create/after-Detached", "flock", "LOCK_UN"),
    ];
    for (name, syscall, needle) in points {
        match cal.kill_at(syscall, needle) {
            Ok(args) => results.push(case(name, no_prepare, |rt, b| create_under(rt, b, args))),
            // A point not found is a case not tried: a strict run must try them all.
            Err(e) if strict() => {
                let row = format!("{name:<28} FAIL: {e}");
                eprintln!("{row}");
                results.push(Err(row));
            }
            Err(e) => eprintln!("SKIP {name}: {e}"),
        }
    }
    results.push(case("create/in-createRuntime-hook", no_prepare, |rt, b| {
        add_create_runtime_hook(b, "kill -9 $PPID");
        let o = rt.create(b);
        Inflicted {
            what: "runtime by its createRuntime hook (init waiting after its mounts)".into(),
            exit: exit_of(&o),
        }
    }));
    report(results);
}

#[test]
fn init_killed_at_each_stage() {
    require_root!();
    if !have_strace() {
        missing_prerequisite!("strace is not installed (conformance/install-deps installs it)");
    }
    if skip_unless_tinyrun() {
        return;
    }
    let in_init = |syscall: &str| {
        strs(&["-f", "-e", &format!("trace=execve,{syscall}"), "-e", &format!("inject={syscall}:signal=KILL:when=1")])
    };
    let mut results = Vec::new();
    // Only init calls these (the runtime mounts nothing with mount(2)).
    results.push(case("create/init-at-unshare", no_prepare, |rt, b| create_under(rt, b, in_init("unshare"))));
    results.push(case("create/init-at-first-mount", no_prepare, |rt, b| create_under(rt, b, in_init("mount"))));
    results.push(case("create/init-at-pivot_root", no_prepare, |rt, b| create_under(rt, b, in_init("pivot_root"))));
    results.push(case("create/init-killed-in-hook", no_prepare, |rt, b| {
        add_create_runtime_hook(
            b,
            r#"read -r s; p=${s#*\"pid\":}; p=${p%%[!0-9]*}; [ "$p" -gt 1 ] && kill -9 "$p"; exit 0"#,
        );
        let o = rt.create(b);
        Inflicted { what: "init, by a createRuntime hook (after its mounts)".into(), exit: exit_of(&o) }
    }));
    let kill_init = |rt: &Runtime, b: &Bundle| -> String {
        let st = rt.state(&b.id).expect("state");
        let pid = st["pid"].as_i64().expect("pid") as i32;
        assert!(pid > 1, "{st}");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL).expect("kill init");
        format!("init (pid {pid}) by the test, while {}", st["status"].as_str().unwrap_or("?"))
    };
    results.push(case(
        "init/created",
        |rt, b| drop(rt.create(b).expect_ok("create")),
        |rt, b| Inflicted { what: kill_init(rt, b), exit: "-".into() },
    ));
    results.push(case(
        "init/running",
        |rt, b| {
            rt.create(b).expect_ok("create");
            rt.run(&["start", &b.id]).expect_ok("start");
        },
        |rt, b| Inflicted { what: kill_init(rt, b), exit: "-".into() },
    ));
    results.push(case(
        "init/during-start",
        |rt, b| drop(rt.create(b).expect_ok("create")),
        |rt, b| {
            // start's connect is held for 0.5 s (start holds the state lock meanwhile, so the
            // pid is read before); init dies in that window.
            let pid = rt.state(&b.id).expect("state")["pid"].as_i64().expect("pid") as i32;
            assert!(pid > 1);
            let trace = rt.work().join("start.trace");
            let args = strs(&["-e", "trace=connect", "-e", "inject=connect:delay_enter=500000"]);
            let running = rt.spawn_cmd(strace_cmd(rt, &trace, &args, &["start", &b.id]));
            std::thread::sleep(Duration::from_millis(200));
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL).expect("kill init");
            let o = running.wait();
            let what = format!(
                "init (pid {pid}) by the test while start was held at connect; start said {:?}",
                o.stderr.trim()
            );
            Inflicted { what, exit: exit_of(&o) }
        },
    ));
    report(results);
}

#[test]
fn runtime_killed_at_each_step_of_start_and_run() {
    require_root!();
    if !have_strace() {
        missing_prerequisite!("strace is not installed (conformance/install-deps installs it)");
    }
    if skip_unless_tinyrun() {
        return;
    }
    let created = |rt: &Runtime, b: &Bundle| drop(rt.create(b).expect_ok("create"));
    let start_under = |rt: &Runtime, b: &Bundle, syscall: &str| {
        let trace = rt.work().join("start.trace");
        let args = strs(&["-e", &format!("trace={syscall}"), "-e", &format!("inject={syscall}:signal=KILL:when=1")]);
        let o = rt.output(strace_cmd(rt, &trace, &args, &["start", &b.id]));
        Inflicted { what: killed_at(&trace), exit: exit_of(&o) }
    };
    let mut results = Vec::new();
    results.push(case("start/at-connect", created, |rt, b| start_under(rt, b, "connect")));
    results.push(case("start/after-connect", created, |rt, b| start_under(rt, b, "sendto")));
    results.push(case("start/after-write", created, |rt, b| start_under(rt, b, "recvfrom")));
    results.push(case("start/at-unlink-start.sock", created, |rt, b| start_under(rt, b, "unlink")));
    results.push(case("run/waiting-for-program", no_prepare, |rt, b| {
        // A foreground run makes its signalfd once the program runs, just before it waits.
        let trace = rt.work().join("run.trace");
        let args = strs(&["-e", "trace=signalfd4", "-e", "inject=signalfd4:signal=KILL:when=1"]);
        let o = rt.output(strace_cmd(rt, &trace, &args, &["run", "--bundle", b.path(), &b.id]));
        Inflicted { what: killed_at(&trace), exit: exit_of(&o) }
    }));
    report(results);
}
