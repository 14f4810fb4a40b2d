//! `tinyrun sandbox` as a user meets it, driven through the binary: `sandbox shell` on a
//! terminal; a launched box's lifetime (ended from outside, with no tinyrun process left
//! running) and a per-exec timeout; exit statuses that tell the command's failure from tinyrun's
//! (125 tinyrun, 126 not executable, 127 not found, 124 timed out); `--json` printing exactly one
//! object in every case, with a schema version, stdin passed through with -i and non-UTF-8 output kept
//! as base64; pool management (`pool list`, `pool drain`, idle lifetime, hit or miss);
//! `--cgroup-parent`; and flag errors that say what is wrong.
//!
//! Every test prints one line `SANDBOX <name>: <what it saw>` (run with --nocapture) before it
//! asserts, and leaves nothing behind (checked with the harness's `assert_clean`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tinyrun_conformance::sandbox::{check_shape, sandbox_cgroups, saw, wait_for, Sbx};
use tinyrun_conformance::terminal::on_terminal_typing;
use tinyrun_conformance::{cgroup_procs_recursive, require_root, rmdir_tree, Out};

/// `sandbox shell ID` on a terminal: an interactive /bin/sh in the box, as the box's user, on a
/// pty of the box's own; what is typed reaches it, its files persist, and its exit status is
/// the command's.
#[test]
fn shell_on_a_terminal() {
    require_root!();
    let sb = Sbx::new("sbx_shell");
    let id = sb.launch(&[]);
    let t = on_terminal_typing(
        sb.rt.command(&["sandbox", "shell", &id]),
        "$ ",
        b"echo uid=$(id -u); tty; echo typed > /work/typed; exit 7\n",
    );
    saw(sb.name, format!("exit {:?}, terminal {:?}", t.code, t.output));
    assert!(t.output.contains("uid=1000"), "the shell runs as the box's user: {:?}", t.output);
    assert!(t.output.contains("/dev/pts/"), "the shell's stdin is a terminal: {:?}", t.output);
    assert!(!t.output.contains("exec failed"), "{:?}", t.output);
    assert_eq!(t.code, Some(7), "the shell's exit status: {:?}", t.output);
    let o = sb.raw(&["exec", &id, "--", "cat", "/work/typed"]);
    assert_eq!(o.stdout, "typed\n", "what the shell wrote is in the box\n{o}");
    sb.raw(&["terminate", &id]).expect_ok("sandbox terminate");
    sb.assert_clean("shell");
}

/// `sandbox ARGS...` with `input` as its stdin.
fn with_stdin(sb: &Sbx, args: &[&str], input: &[u8]) -> Out {
    let path = sb.rt.work().join(format!("stdin-{}", args.len()));
    std::fs::write(&path, input).expect("write stdin file");
    let mut v = vec!["sandbox"];
    v.extend_from_slice(args);
    let mut c = sb.rt.command(&v);
    c.stdin(std::fs::File::open(&path).expect("open stdin file"));
    sb.rt.output(c)
}

/// The one JSON object of a `--json` invocation (any exit status).
#[track_caller]
fn one_object(o: &Out) -> Value {
    let text = o.stdout.trim();
    assert_eq!(text.lines().count(), 1, "--json must print exactly one JSON object on one line\n{o}");
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("--json output is not JSON ({e})\n{o}"));
    assert_eq!(v["schema_version"], 2, "--json carries the schema version\n{o}");
    v
}

/// Exit statuses tell the command's own failure from tinyrun's: the command's status as it is,
/// 124 when the timeout killed it, 125 when tinyrun failed (a bad flag, a box that can't be
/// made), 126 when the command is not executable, 127 when it is not found; for `run` and
/// `exec` alike. Flag errors name the flag and what is wrong with it.
#[test]
fn exit_statuses_and_flag_errors() {
    require_root!();
    let sb = Sbx::new("sbx_status");
    let not_exec = "/etc/passwd";
    let missing = format!("/nonexistent-{}", sb.rt.tag());
    let cases: Vec<(&str, Vec<&str>, Vec<&str>, i32)> = vec![
        ("exit 3", vec![], vec!["sh", "-c", "exit 3"], 3),
        ("not found", vec![], vec![missing.as_str()], 127),
        ("not found in PATH", vec![], vec!["no-such-command-xyz"], 127),
        ("not executable", vec![], vec![not_exec], 126),
        ("timeout", vec!["--timeout", "500ms"], vec!["sleep", "10"], 124),
        ("memory below minimum", vec!["--memory", "1k"], vec!["true"], 125),
        ("bad --env", vec!["-e", "FOO"], vec!["true"], 125),
        ("bad --cgroup-parent", vec!["--cgroup-parent", "relative/x"], vec!["true"], 125),
    ];
    let mut seen = Vec::new();
    for (what, opts, cmd, want) in &cases {
        let o = sb.run(opts, cmd);
        seen.push(format!("{what}: {:?}", o.code()));
        assert_eq!(o.code(), Some(*want), "{what}\n{o}");
    }
    let mem = sb.run(&["--memory", "1k"], &["true"]);
    let env = sb.run(&["-e", "FOO"], &["true"]);
    let cg = sb.run(&["--cgroup-parent", "/a/../b"], &["true"]);
    // `sandbox run true`: the command without `--`.
    let mut bare = vec!["run"];
    bare.extend(sb.common());
    bare.push("true");
    let no_dashes = sb.raw(&bare);
    saw(
        sb.name,
        format!(
            "{}; --memory 1k: {:?}; -e FOO: {:?}; no --: exit {:?} {:?}",
            seen.join(", "),
            mem.stderr.trim(),
            env.stderr.trim(),
            no_dashes.code(),
            no_dashes.stderr.trim()
        ),
    );
    assert!(mem.stderr.contains("--memory") && mem.stderr.contains("minimum"), "names the flag and the minimum\n{mem}");
    assert!(!mem.stderr.contains("SIGKILL"), "{mem}");
    assert!(env.stderr.contains("--env") && env.stderr.contains("FOO") && env.stderr.contains("NAME=VALUE"), "{env}");
    assert!(!env.stderr.contains("config.json") && !env.stderr.contains(sb.root_str()), "no internal path\n{env}");
    assert!(cg.code() == Some(125) && cg.stderr.contains("--cgroup-parent"), "{cg}");
    assert_eq!(no_dashes.code(), Some(125), "{no_dashes}");
    assert!(
        no_dashes.stderr.contains("hint:") && no_dashes.stderr.contains(" -- "),
        "a missing -- gets a hint\n{no_dashes}"
    );

    // The same statuses from `exec` into a launched box, which lives on.
    let id = sb.launch(&[]);
    let e3 = sb.raw(&["exec", &id, "--", "sh", "-c", "exit 3"]);
    let e127 = sb.raw(&["exec", &id, "--", missing.as_str()]);
    let e126 = sb.raw(&["exec", &id, "--", not_exec]);
    let t0 = std::time::Instant::now();
    let e124 = sb.raw(&["exec", "--timeout", "1s", &id, "--", "sh", "-c", "sleep 30 & sleep 30"]);
    let took = t0.elapsed();
    let after = sb.raw(&["exec", &id, "--", "ps", "-e", "-o", "comm="]);
    let no_id = sb.raw(&["exec", "sbx-000000000000", "--", "true"]);
    saw(
        sb.name,
        format!(
            "exec: {:?} {:?} {:?} {:?} (timeout took {took:?}), left in box {:?}, unknown box {:?}",
            e3.code(),
            e127.code(),
            e126.code(),
            e124.code(),
            after.stdout.split_whitespace().collect::<Vec<_>>(),
            no_id.code()
        ),
    );
    assert_eq!((e3.code(), e127.code(), e126.code(), e124.code()), (Some(3), Some(127), Some(126), Some(124)));
    assert!(took < std::time::Duration::from_secs(5), "exec --timeout 1s took {took:?}");
    // No `sleep` is left: the timed-out command and what it started are gone.
    assert!(after.ok() && !after.stdout.contains("sleep"), "{after}");
    assert_eq!(no_id.code(), Some(125), "{no_id}");

    // Told to stop (Ctrl-C, a supervisor's SIGTERM): the command is killed, and tinyrun exits
    // 128+N as a shell does; `run` removes its box, `exec` leaves the box as it was.
    let stop = |r: tinyrun_conformance::Running, sig: nix::sys::signal::Signal| {
        std::thread::sleep(Duration::from_millis(1500));
        let pid = nix::unistd::Pid::from_raw(r.child.id() as i32);
        nix::sys::signal::kill(pid, sig).expect("signal tinyrun");
        r.wait()
    };
    let int = stop(sb.spawn_run(&[], &["sleep", "30"]), nix::sys::signal::SIGINT);
    let term = stop(sb.rt.spawn(&["sandbox", "exec", &id, "--", "sleep", "30"]), nix::sys::signal::SIGTERM);
    let alive = sb.raw(&["exec", &id, "--", "ps", "-e", "-o", "comm="]);
    saw(
        sb.name,
        format!(
            "SIGINT to run: {:?}; SIGTERM to exec: {:?}; box after: {:?}",
            int.code(),
            term.code(),
            alive.stdout.split_whitespace().collect::<Vec<_>>()
        ),
    );
    assert_eq!(int.code(), Some(130), "{int}");
    assert_eq!(term.code(), Some(143), "{term}");
    assert!(
        alive.ok() && alive.stdout.contains("tinyrun-init") && !alive.stdout.contains("sleep"),
        "the box lives on, without the command\n{alive}"
    );
    sb.raw(&["terminate", &id]).expect_ok("terminate");
    sb.assert_clean("exit statuses");
}

/// Under `--json` there is exactly one JSON object, whatever happens: with `schema_version`; an
/// `error` when the box could not be made (exit 125); the command's stdin passed through; output
/// that is not UTF-8 carried as base64 with `encoding`, losslessly; UTF-8 cut by the output cap
/// inside a character kept as text; not found (127) reported as the command's status with the
/// reason on its stderr; `exec --json` giving the same object as `run --json`.
#[test]
fn json_is_always_one_object() {
    require_root!();
    let sb = Sbx::new("sbx_json");
    let mut json = vec!["run", "--json"];
    json.extend(sb.common());

    let args = |extra: &[&'static str]| -> Vec<&str> {
        let mut v = json.clone();
        v.extend_from_slice(extra);
        v
    };
    let stdin = with_stdin(&sb, &args(&["-i", "--", "cat"]), b"x\n");
    let binary = sb.raw(&args(&["--", "sh", "-c", "printf '\\377\\376ok\\000'"]));
    let cut = sb.raw(&args(&["--output-cap", "5", "--", "sh", "-c", "printf '\\303\\251\\303\\251\\303\\251'"]));
    let setup = sb.raw(&args(&["--memory", "1k", "--", "true"]));
    let rootfs = sb.raw(&args(&["--rootfs", "/nonexistent-rootfs", "--", "true"]));
    let missing = sb.raw(&args(&["--", "no-such-command-xyz"]));
    let usage = sb.raw(&args(&["--no-such-flag", "--", "true"]));
    let vu = one_object(&usage);
    assert_eq!(usage.code(), Some(125), "{usage}");
    assert!(
        vu["error"].as_str().is_some_and(|e| e.contains("--no-such-flag")),
        "a usage error is an object too\n{usage}"
    );
    let (vs, vb, vc, ve, vr, vm) = (
        one_object(&stdin),
        one_object(&binary),
        one_object(&cut),
        one_object(&setup),
        one_object(&rootfs),
        one_object(&missing),
    );
    saw(
        sb.name,
        format!(
            "stdin {}\nbinary {}\ncut {}\nsetup error {} (exit {:?})\nmissing {}",
            vs["stdout"],
            vb["stdout"],
            vc["stdout"],
            ve["error"],
            setup.code(),
            vm
        ),
    );

    assert!(stdin.ok(), "{stdin}");
    check_shape(&vs, &stdin);
    assert_eq!(vs["stdout"]["text"], "x\n", "stdin reaches the command under --json -i\n{stdin}");
    assert_eq!(vs["stdout"]["encoding"], "utf-8");
    assert_eq!(vs["error"], Value::Null);

    assert_eq!(vb["stdout"]["encoding"], "base64", "{binary}");
    assert_eq!(vb["stdout"]["text"], "//5vawA=", "the bytes ff fe 'o' 'k' 00, losslessly\n{binary}");

    assert_eq!(vc["stdout"]["encoding"], "utf-8", "{cut}");
    assert_eq!(vc["stdout"]["text"], "\u{e9}\u{e9}", "cut at the cap inside a character: the whole ones kept\n{cut}");
    assert_eq!(vc["stdout"]["truncated"], true);

    for (v, o) in [(&ve, &setup), (&vr, &rootfs)] {
        assert_eq!(o.code(), Some(125), "{o}");
        let e = v["error"].as_str().unwrap_or_else(|| panic!("a set-up failure has an error string\n{o}"));
        assert!(!e.is_empty() && v["exit_code"].is_null() && v["signal"].is_null(), "{o}");
    }
    assert!(ve["error"].as_str().unwrap_or("").contains("--memory"), "{setup}");

    assert!(missing.ok(), "{missing}");
    check_shape(&vm, &missing);
    assert_eq!(vm["exit_code"], 127, "{missing}");
    assert!(vm["stderr"]["text"].as_str().unwrap_or("").contains("no-such-command-xyz"), "{missing}");

    // exec --json: the same object, for a box that lives on.
    let id = sb.launch(&[]);
    let e = with_stdin(&sb, &["exec", "--json", "-i", &id, "--", "sh", "-c", "cat; echo err >&2; exit 3"], b"in\n");
    let ve = one_object(&e);
    let t = sb.raw(&["exec", "--json", "--timeout", "500ms", &id, "--", "sleep", "10"]);
    let vt = one_object(&t);
    let gone = sb.raw(&["exec", "--json", "sbx-000000000000", "--", "true"]);
    let vg = one_object(&gone);
    saw(sb.name, format!("exec --json {ve}\ntimeout {vt}\nunknown box {vg}"));
    assert!(e.ok(), "{e}");
    check_shape(&ve, &e);
    assert_eq!(
        (ve["exit_code"].as_i64(), ve["stdout"]["text"].as_str(), ve["stderr"]["text"].as_str()),
        (Some(3), Some("in\n"), Some("err\n")),
        "{e}"
    );
    check_shape(&vt, &t);
    assert_eq!(vt["timed_out"], true, "{t}");
    assert_eq!(gone.code(), Some(125), "{gone}");
    assert!(vg["error"].as_str().is_some_and(|s| s.contains("does not exist")), "{gone}");
    sb.raw(&["terminate", &id]).expect_ok("terminate");
    sb.assert_clean("--json");
}

/// This test's `tinyrun-reaper` processes (a launched box's lifetime keeper).
fn reapers(sb: &Sbx) -> Vec<i32> {
    sb.rt
        .leftovers()
        .into_iter()
        .filter(|p| std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "tinyrun-reaper"))
        .collect()
}

/// The root's reapers, once one has named itself: `launch` returns as soon as it has forked the
/// reaper, which takes its name a moment later (seconds, on a loaded machine).
fn started_reapers(sb: &Sbx) -> Vec<i32> {
    wait_for("the reaper to start", 5, || !reapers(sb).is_empty());
    reapers(sb)
}

fn box_exists(sb: &Sbx, id: &str) -> bool {
    sb.rt.root().join("sandbox").join(id).exists() || sb.rt.root().join("sandbox-bundles").join(id).exists()
}

/// A launched box lives as long as its lifetime (`--lifetime`, by default its `--timeout`), then
/// is terminated and purged with no tinyrun command running: an `exec` in it ends with 124 at
/// that point, and nothing of the box is left. If its reaper is killed, the next sandbox command
/// of the root purges it, and an `exec` into it is refused.
#[test]
fn a_launched_box_ends_with_its_lifetime() {
    require_root!();
    let sb = Sbx::new("sbx_lifetime");
    let id = sb.launch(&["--timeout", "2s"]);
    let t0 = Instant::now();
    let o = sb.raw(&["exec", &id, "--", "sleep", "4"]);
    let took = t0.elapsed();
    // No tinyrun command from here on: the reaper alone must purge the box.
    wait_for("the box to be purged", 5, || !box_exists(&sb, &id));
    saw(sb.name, format!("launch --timeout 2s; exec -- sleep 4: exit {:?} after {took:?}", o.code()));
    assert_eq!(o.code(), Some(124), "the exec ends with the box's lifetime\n{o}");
    assert!(took < Duration::from_millis(3500), "took {took:?}");
    sb.assert_clean("the end of a box's lifetime");

    let id = sb.launch(&["--lifetime", "2s", "--timeout", "60s"]);
    let t0 = Instant::now();
    let keepers = started_reapers(&sb);
    assert_eq!(keepers.len(), 1, "one reaper for the box: {keepers:?}");
    wait_for("the idle box to be purged", 6, || !box_exists(&sb, &id));
    saw(sb.name, format!("launch --lifetime 2s, left alone: purged after {:?}", t0.elapsed()));
    assert!(t0.elapsed() >= Duration::from_millis(1500), "purged before its lifetime: {:?}", t0.elapsed());
    sb.assert_clean("a box left alone until its lifetime ended");

    // The reaper dies (a crash, a kill): the next command of the root does its work.
    let id = sb.launch(&["--lifetime", "1s"]);
    for p in started_reapers(&sb) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), nix::sys::signal::SIGKILL).expect("kill the reaper");
    }
    wait_for("the reaper to go", 3, || reapers(&sb).is_empty());
    std::thread::sleep(Duration::from_millis(1500));
    let still = box_exists(&sb, &id);
    let refused = sb.raw(&["exec", &id, "--", "true"]);
    saw(
        sb.name,
        format!(
            "reaper killed: box still there after its lifetime: {still}; exec: {:?} {:?}",
            refused.code(),
            refused.stderr.trim()
        ),
    );
    assert_eq!(refused.code(), Some(125), "{refused}");
    assert!(refused.stderr.contains("lifetime"), "says why\n{refused}");
    assert!(!box_exists(&sb, &id), "the command purged the expired box");
    sb.assert_clean("a box whose reaper was killed");
}

/// A box terminated under a running `exec` takes the command with it: the exec ends as killed
/// by SIGKILL (137; `"signal": "SIGKILL"` in the `--json` result), not with tinyrun's own 125 and
/// nothing said, whichever of the box's init and the caller sees the end first.
#[test]
fn an_exec_whose_box_is_terminated_ends_killed() {
    require_root!();
    let sb = Sbx::new("sbx_exec_terminated");
    for json in [false, true] {
        let id = sb.launch(&[]);
        let mut v = vec!["sandbox", "exec"];
        if json {
            v.push("--json");
        }
        v.extend([id.as_str(), "--", "sh", "-c", "touch /tmp/started; exec sleep 60"]);
        let exec = sb.rt.spawn(&v);
        wait_for("the command to start", 30, || sb.raw(&["exec", &id, "--", "test", "-e", "/tmp/started"]).ok());
        let t = sb.raw(&["terminate", &id]);
        assert!(t.ok(), "{t}");
        let o = exec.wait();
        saw(sb.name, format!("exec (json: {json}) in a box terminated under it: exit {:?}", o.code()));
        // With --json the status is in the result, and tinyrun exits 0 once it has printed one.
        assert_eq!(o.code(), Some(if json { 0 } else { 137 }), "killed with its box\n{o}");
        if json {
            let r = one_object(&o);
            check_shape(&r, &o);
            assert_eq!(r["signal"], "SIGKILL", "{o}");
            assert_eq!(r["exit_code"], Value::Null, "{o}");
            assert_eq!(r["timed_out"], false, "terminated, not timed out\n{o}");
        }
    }
    sb.assert_clean("execs in terminated boxes");
}

/// Pool management: `pool fill --idle-lifetime`, `pool list` (idle boxes, their key, target and
/// time left), `run --pool --json` saying `"pool": "hit"` and the pool refilled, `pool drain
/// --all` emptying it and stopping refills, a miss saying `"pool": "miss"`; an idle box past its
/// idle lifetime purged with no tinyrun command running (its replacement: `sandbox_pool.rs`).
#[test]
fn pool_management() {
    require_root!();
    let sb = Sbx::new("sbx_poolux");
    let mut fill = vec!["pool", "fill"];
    fill.extend(sb.common());
    let list = || -> Vec<Value> {
        let o = sb.raw(&["pool", "list", "--format", "json"]).expect_ok("pool list");
        serde_json::from_str::<Value>(o.stdout.trim())
            .expect("pool list is JSON")
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let mut f = fill.clone();
    f.extend(["--idle-lifetime", "60s", "2"]);
    let made = sb.raw(&f).expect_ok("pool fill");
    assert_eq!(made.stdout.lines().count(), 2, "{made}");
    let before = list();
    let table = sb.raw(&["pool", "list"]).expect_ok("pool list");
    let (hit, ho) = sb.run_json(&["--pool"], &["true"]);
    wait_for("the pool to be refilled", 30, || list().iter().filter(|b| b["state"] == "idle").count() == 2);
    let drained = sb.raw(&["pool", "drain", "--all"]).expect_ok("pool drain --all");
    wait_for("the drained pool to be empty", 10, || list().is_empty());
    let (miss, mo) = sb.run_json(&["--pool"], &["true"]);
    std::thread::sleep(Duration::from_millis(500));
    let after_miss = list();
    saw(
        sb.name,
        format!(
            "listed {before:?}\n{}\nhit {:?}, drained {:?}, miss {:?}, after the miss {after_miss:?}",
            table.stdout,
            hit["pool"],
            drained.stdout.lines().count(),
            miss["pool"]
        ),
    );
    assert_eq!(before.len(), 2);
    for b in &before {
        assert_eq!(b["state"], "idle", "{b}");
        assert_eq!(b["target"], 2, "{b}");
        assert!(b["key"].as_str().is_some_and(|k| k.starts_with("pool")), "{b}");
        assert!(b["expires_in_s"].as_u64().is_some_and(|s| s > 50 && s <= 60), "{b}");
    }
    assert!(table.stdout.starts_with("ID") && table.stdout.contains("idle"), "{table}");
    assert_eq!(hit["pool"], "hit", "{ho}");
    assert_eq!(drained.stdout.lines().count(), 2, "{drained}");
    assert_eq!(miss["pool"], "miss", "{mo}");
    assert!(after_miss.is_empty(), "a drained pool is not refilled: {after_miss:?}");

    let mut f = fill.clone();
    f.extend(["--idle-lifetime", "2s", "1"]);
    let made = sb.raw(&f).expect_ok("pool fill");
    let id = made.stdout.trim().to_string();
    let t0 = Instant::now();
    wait_for("the idle pooled box to be purged", 6, || !box_exists(&sb, &id));
    saw(sb.name, format!("--idle-lifetime 2s: purged after {:?}", t0.elapsed()));
    sb.raw(&["pool", "drain", "--all"]).expect_ok("pool drain --all");
    sb.assert_clean("the pool");
}

/// `/sys/fs/cgroup[/<hierarchy>]/<path>/<leaf>` that exist.
fn cgroup_dirs_of(path: &str, leaf: &str) -> Vec<PathBuf> {
    let base = Path::new("/sys/fs/cgroup");
    let mut roots = vec![base.to_path_buf()];
    roots.extend(std::fs::read_dir(base).into_iter().flatten().flatten().map(|e| e.path()));
    let rel = path.trim_start_matches('/');
    roots.into_iter().map(|r| r.join(rel).join(leaf)).filter(|p| p.is_dir()).collect()
}

/// A test's own `--cgroup-parent`, `/tinyrun-cgparent-<pid>/boxes`: its whole tree is removed
/// on drop, even on failure.
struct CgroupParent {
    top: String,
    path: String,
}

impl CgroupParent {
    fn new() -> CgroupParent {
        let top = format!("/tinyrun-cgparent-{}", std::process::id());
        CgroupParent { path: format!("{top}/boxes"), top }
    }

    fn dirs(&self, leaf: &str) -> Vec<PathBuf> {
        cgroup_dirs_of(&self.path, leaf)
    }
}

impl Drop for CgroupParent {
    /// Kills what is left in the boxes' cgroups and removes the tree from the top.
    fn drop(&mut self) {
        for d in self.dirs("") {
            for sub in std::fs::read_dir(&d).into_iter().flatten().flatten().filter(|e| e.path().is_dir()) {
                remove_sandbox_cgroups_at(&sub.path());
            }
        }
        for d in cgroup_dirs_of(&self.top, "") {
            rmdir_tree(&d);
        }
    }
}

fn remove_sandbox_cgroups_at(dir: &Path) {
    for p in cgroup_procs_recursive(dir).into_iter().filter(|p| *p > 1) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), nix::sys::signal::SIGKILL);
    }
    std::thread::sleep(Duration::from_millis(50));
    rmdir_tree(dir);
}

/// `--cgroup-parent` puts the box's cgroup where the caller says, in every hierarchy it joins, and
/// nothing under the default /tinyrun-sandbox; terminate removes it.
#[test]
fn cgroup_parent_is_configurable() {
    require_root!();
    let sb = Sbx::new("sbx_cgparent");
    let parent = CgroupParent::new();
    let id = sb.launch(&["--cgroup-parent", &parent.path]);
    let mine = parent.dirs(&id);
    let default = sandbox_cgroups(&id);
    let init = sb.list().into_iter().find(|(i, _, _)| *i == id).map(|(_, _, pid)| pid).expect("the box is listed");
    let holds_init = mine.iter().any(|d| {
        std::fs::read_to_string(d.join("cgroup.procs")).is_ok_and(|t| t.lines().any(|l| l == init.to_string()))
    });
    let (v, o) = sb.run_json(&["--cgroup-parent", &parent.path], &["true"]);
    sb.raw(&["terminate", &id]).expect_ok("terminate");
    let after = parent.dirs(&id);
    saw(sb.name, format!("box cgroups {mine:?}, under the default {default:?}, init {init} in it: {holds_init}, after terminate {after:?}"));
    assert!(!mine.is_empty() && holds_init, "the box's init is in {}/{id}: {mine:?}", parent.path);
    assert!(default.is_empty(), "nothing under the default parent: {default:?}");
    assert_eq!(v["exit_code"], 0, "{o}");
    assert!(after.is_empty(), "terminate removes the box's cgroup: {after:?}");
    sb.assert_clean("--cgroup-parent");
    let top = parent.top.clone();
    drop(parent);
    assert!(cgroup_dirs_of(&top, "").is_empty(), "the test's cgroup parent is removed: {:?}", cgroup_dirs_of(&top, ""));
}

/// The mounted cgroup v1 hierarchies: mount directory name and superblock options.
fn v1_hierarchies() -> Vec<(String, Vec<String>)> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut out = Vec::new();
    for line in info.lines() {
        let Some((pre, post)) = line.split_once(" - ") else { continue };
        let dir = pre.split(' ').nth(4).unwrap_or_default();
        let mut post = post.split(' ');
        if post.next() != Some("cgroup") {
            continue;
        }
        let opts = post.nth(1).unwrap_or_default().split(',').map(str::to_string).collect();
        if let Some(name) = dir.strip_prefix("/sys/fs/cgroup/") {
            out.push((name.to_string(), opts));
        }
    }
    out
}

/// On cgroup v1 a box's cgroup is made only in the hierarchies of what it limits and reads
/// (cpu, cpuacct, memory, pids, freezer), not in every mounted one as a container's is: its
/// init is in those, its own cgroup is nowhere else (devices, blkio, cpuset, the named and
/// hybrid cgroup2 hierarchies), `exec --json` still reports the usage read from them, and
/// terminate leaves no directory of the box in any hierarchy.
#[test]
fn a_box_joins_only_the_cgroup_hierarchies_it_uses() {
    require_root!();
    if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        tinyrun_conformance::skip!("a cgroup v2 host has one hierarchy");
    }
    let used = ["cpu", "cpuacct", "memory", "pids", "freezer"];
    let (mut want, mut not): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
    for (name, opts) in v1_hierarchies() {
        match opts.iter().any(|o| used.contains(&o.as_str())) {
            true => want.push(name),
            false => not.push(name),
        }
    }
    let sb = Sbx::new("sbx_hierarchies");
    let id = sb.launch(&[]);
    let hierarchy = |d: &PathBuf| {
        d.strip_prefix("/sys/fs/cgroup")
            .ok()
            .and_then(|r| r.components().next())
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
    };
    let mut made: Vec<String> = sandbox_cgroups(&id).iter().filter_map(hierarchy).collect();
    made.sort();
    want.sort();
    let init = sb.list().into_iter().find(|(i, _, _)| *i == id).map(|(_, _, pid)| pid).expect("the box is listed");
    let own = std::fs::read_to_string(format!("/proc/{init}/cgroup")).unwrap_or_default();
    let in_box: Vec<&str> = own.lines().filter(|l| l.ends_with(&format!("/tinyrun-sandbox/{id}"))).collect();
    let (v, o) = {
        let o = sb.raw(&["exec", "--json", &id, "--", "sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"]);
        (tinyrun_conformance::sandbox::parse_result(&o), o)
    };
    sb.raw(&["terminate", &id]).expect_ok("terminate");
    let after = sandbox_cgroups(&id);
    saw(
        sb.name,
        format!("made in {made:?} (used: {want:?}, not: {not:?}); init's lines {in_box:?}; exec usage cpu_ms {} peak {}; after terminate {after:?}", v["cpu_ms"], v["peak_memory_bytes"]),
    );
    assert!(!want.is_empty(), "no v1 hierarchy of cpu, memory, pids or freezer is mounted");
    assert_eq!(made, want, "the box's cgroup is made in exactly the hierarchies it uses");
    assert_eq!(in_box.len(), want.len(), "init is in the box's cgroup in each of them: {own}");
    assert_eq!(v["exit_code"], 0, "{o}");
    assert!(v["cpu_ms"].as_u64().is_some_and(|c| c > 0), "cpu time read from cpuacct: {o}");
    assert!(v["peak_memory_bytes"].as_u64().is_some_and(|m| m > 0), "peak memory read from memory: {o}");
    assert!(after.is_empty(), "terminate leaves no cgroup of the box in any hierarchy: {after:?}");
    sb.assert_clean("terminate");
}

/// The README's persistent-box pattern, end to end: a package copied in with `sandbox cp`,
/// installed with pip into a venv in one `exec`, importable in the next, its output copied out;
/// `exec --json` reports it.
#[test]
fn persistent_box_pip_install() {
    require_root!();
    let sb = Sbx::new("sbx_pip");
    let pkg = sb.rt.work().join("hello-pkg");
    std::fs::create_dir_all(pkg.join("hello")).expect("mkdir package");
    std::fs::write(pkg.join("hello/__init__.py"), "def greet():\n    return 'hello from a box'\n").expect("write");
    std::fs::write(
        pkg.join("pyproject.toml"),
        "[project]\nname = \"hello\"\nversion = \"0.1\"\n[build-system]\nrequires = [\"setuptools\"]\n\
         build-backend = \"setuptools.build_meta\"\n",
    )
    .expect("write");
    let id = sb.launch(&[]);
    let pkg_in = format!("{id}:/work/pkg");
    sb.raw(&["cp", pkg.to_str().expect("utf-8"), &pkg_in]).expect_ok("cp in");
    let venv = sb.raw(&["exec", &id, "--", "python3", "-m", "venv", "--system-site-packages", "/work/venv"]);
    if !venv.ok() {
        sb.raw(&["terminate", &id]).expect_ok("terminate");
        tinyrun_conformance::skip!("python3 -m venv does not work on this host (python3-venv missing?)\n{venv}");
    }
    let install = sb.raw(&[
        "exec",
        "--timeout",
        "120s",
        &id,
        "--",
        "/work/venv/bin/pip",
        "install",
        "--no-index",
        "--no-build-isolation",
        "./pkg",
    ]);
    let run = sb.raw(&[
        "exec",
        "--json",
        &id,
        "--",
        "sh",
        "-c",
        "/work/venv/bin/python -c 'import hello; print(hello.greet())' | tee /work/out.txt",
    ]);
    let out = sb.rt.work().join("out.txt");
    let out_from = format!("{id}:/work/out.txt");
    let copied = sb.raw(&["cp", &out_from, out.to_str().expect("utf-8")]);
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    sb.raw(&["terminate", &id]).expect_ok("terminate");
    saw(
        sb.name,
        format!("pip install: exit {:?}; exec --json: {}; copied out: {text:?}", install.code(), run.stdout.trim()),
    );
    assert!(install.ok(), "{install}");
    let v = one_object(&run);
    check_shape(&v, &run);
    assert_eq!(v["stdout"]["text"], "hello from a box\n", "installed in one exec, imported in the next\n{run}");
    assert!(copied.ok(), "{copied}");
    assert_eq!(text, "hello from a box\n");
    sb.assert_clean("the persistent-box pattern");
}

/// `sandbox exec` ends when its command exits, with its output up to then, whatever the command
/// left running (E2B's background commands): `sh -c 'sleep 101 & echo x'` returns at once with
/// exit 0 and `x`, and the sleep runs on in the box, still able to write to the output it was
/// given, until the box is terminated; `--kill-children` kills it with the command. A server
/// started in one exec answers the next. `run --pool` returns the same way.
#[test]
fn an_exec_leaves_its_background_children_running() {
    require_root!();
    let sb = Sbx::new("sbx_background");
    // Short-lived: a tinyrun that waited for the background children waits at most this long.
    let id = sb.launch(&["--lifetime", "120s"]);
    let t0 = Instant::now();
    let bg = sb.raw(&["exec", "--json", "--timeout", "5s", &id, "--", "sh", "-c", "sleep 101 & echo x"]);
    let took = t0.elapsed();
    let v = one_object(&bg);
    // The writer outlives its exec, writes more than a pipe holds, then says it is done.
    let writer = "(sleep 1; i=0; while [ $i -lt 20000 ]; do echo line $i; i=$((i+1)); done; echo ok > /work/bg) &";
    let w = sb.raw(&["exec", "--timeout", "5s", &id, "--", "sh", "-c", writer]);
    let server = "python3 -m http.server 18765 --bind 127.0.0.1 >/dev/null 2>&1 & echo started";
    let srv = sb.raw(&["exec", "--timeout", "5s", &id, "--", "sh", "-c", server]);
    let get = "import time, urllib.request\nfor _ in range(600):\n    try:\n        print(urllib.request.urlopen('http://127.0.0.1:18765/').status); break\n    except OSError:\n        time.sleep(0.1)";
    let answer = sb.raw(&["exec", "--timeout", "90s", &id, "--", "python3", "-c", get]);
    let mut wrote = sb.raw(&["exec", &id, "--", "cat", "/work/bg"]);
    for _ in 0..300 {
        if wrote.stdout == "ok\n" {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        wrote = sb.raw(&["exec", &id, "--", "cat", "/work/bg"]);
    }
    let kc = sb.raw(&["exec", "--json", "--kill-children", &id, "--", "sh", "-c", "sleep 102 & echo y"]);
    std::thread::sleep(Duration::from_millis(200));
    let ps = sb.raw(&["exec", &id, "--", "ps", "-e", "-o", "args="]);
    saw(
        sb.name,
        format!(
            "bg exec {v} in {took:?}; writer exit {:?}, wrote {:?}; server {:?} answered {:?}; --kill-children {}; \
             box ps {:?}",
            w.code(),
            wrote.stdout.trim(),
            srv.stdout.trim(),
            answer.stdout.trim(),
            kc.stdout.trim(),
            ps.stdout.lines().collect::<Vec<_>>()
        ),
    );
    assert!(took < Duration::from_secs(3), "exec waited {took:?} for a background child");
    assert_eq!((v["exit_code"].as_i64(), v["timed_out"].as_bool()), (Some(0), Some(false)), "{bg}");
    assert_eq!(v["stdout"]["text"], "x\n", "{bg}");
    assert!(w.ok() && srv.ok(), "{w}\n{srv}");
    assert_eq!(answer.stdout.trim(), "200", "the server started by the exec before\n{answer}");
    assert_eq!(wrote.stdout, "ok\n", "the background writer ran to its end after its exec\n{wrote}");
    let vk = one_object(&kc);
    assert_eq!((vk["exit_code"].as_i64(), vk["stdout"]["text"].as_str()), (Some(0), Some("y\n")), "{kc}");
    assert!(ps.stdout.contains("sleep 101"), "the background sleep runs on\n{ps}");
    assert!(!ps.stdout.contains("sleep 102"), "--kill-children left its child\n{ps}");
    sb.raw(&["terminate", &id]).expect_ok("terminate");
    sb.assert_clean("background children");

    // A pooled run returns the same way; its box goes with the run.
    let mut fill = vec!["pool", "fill", "1", "--timeout", "5s"];
    fill.extend(sb.common());
    sb.raw(&fill).expect_ok("pool fill 1");
    let t0 = Instant::now();
    let p = sb.run(&["--pool", "--json", "--timeout", "5s"], &["sh", "-c", "sleep 103 & echo z"]);
    let took = t0.elapsed();
    let vp = one_object(&p);
    let pool = || -> Vec<Value> {
        let o = sb.raw(&["pool", "list", "--format", "json"]);
        serde_json::from_str::<Value>(o.stdout.trim()).ok().and_then(|v| v.as_array().cloned()).unwrap_or_default()
    };
    wait_for("the pool to be refilled", 30, || {
        let boxes = pool();
        boxes.len() == 1 && boxes.iter().all(|b| b["state"] == "idle")
    });
    sb.raw(&["pool", "drain", "--all"]).expect_ok("pool drain --all");
    saw(sb.name, format!("run --pool: {vp} in {took:?}"));
    assert_eq!(vp["pool"], "hit", "{p}");
    assert_eq!((vp["exit_code"].as_i64(), vp["stdout"]["text"].as_str()), (Some(0), Some("z\n")), "{p}");
    assert!(took < Duration::from_secs(3), "run --pool waited {took:?} for a background child");
    wait_for("the pool to be drained", 10, || sb.list().is_empty());
    sb.assert_clean("background children of a pooled run");
}

/// The deadline of `exec --timeout` counts from the call, not from the command's start: into a
/// paused box (whose init can't answer) `exec --timeout 1s` returns near the deadline as timed
/// out, and the box works again once resumed.
#[test]
fn an_exec_deadline_holds_in_a_paused_box() {
    require_root!();
    let sb = Sbx::new("sbx_paused_exec");
    let id = sb.launch(&["--lifetime", "60s"]);
    let state_root = sb.rt.root().join("sandbox");
    let state_root = state_root.to_str().expect("utf-8 root");
    sb.rt.run(&["--root", state_root, "pause", &id]).expect_ok("pause");
    let t0 = Instant::now();
    let mut call = sb.rt.spawn(&["sandbox", "exec", "--json", "--timeout", "1s", &id, "--", "echo", "hi"]);
    let mut returned = None;
    while t0.elapsed() < Duration::from_secs(8) {
        if call.child.try_wait().expect("try_wait").is_some() {
            returned = Some(t0.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Resumed either way, so a hung call ends and the box can be removed.
    sb.rt.run(&["--root", state_root, "resume", &id]).expect_ok("resume");
    let o = call.wait();
    let after = sb.raw(&["exec", &id, "--", "echo", "resumed"]);
    saw(sb.name, format!("exec --timeout 1s into a paused box returned after {returned:?}: {}", o.stdout.trim()));
    let took = returned.unwrap_or_else(|| panic!("exec --timeout 1s into a paused box still waiting after 8 s\n{o}"));
    assert!(took < Duration::from_secs(3), "took {took:?}");
    let v = one_object(&o);
    assert_eq!(v["timed_out"], true, "{o}");
    assert!(after.ok() && after.stdout == "resumed\n", "{after}");
    sb.raw(&["terminate", &id]).expect_ok("terminate");
    sb.assert_clean("paused exec");
}

/// runc's env rules for an exec: `exec -e FOO=two` into a box launched with `-e FOO=one` gives
/// the command one FOO, the exec's. And stdin is the caller's only with `-i`: without it the
/// command's stdin is /dev/null, for `exec` and `run`.
#[test]
fn an_exec_env_overrides_and_stdin_is_opt_in() {
    require_root!();
    let sb = Sbx::new("sbx_exec_env_stdin");
    let id = sb.launch(&["-e", "FOO=one"]);
    // Read without a shell between, which would keep one entry of its own choosing.
    let env = sb.raw(&["exec", "-e", "FOO=two", &id, "--", "cat", "/proc/self/environ"]);
    let foo: Vec<&str> = env.stdout.split('\0').filter(|e| e.starts_with("FOO=")).collect();
    let read = "cat; readlink /proc/self/fd/0";
    let no_i = with_stdin(&sb, &["exec", &id, "--", "sh", "-c", read], b"secret\n");
    let with_i = with_stdin(&sb, &["exec", "-i", &id, "--", "sh", "-c", "cat"], b"typed\n");
    let run = with_stdin(&sb, &["run", "--", "sh", "-c", read], b"secret\n");
    let run_json = with_stdin(&sb, &["run", "--json", "--", "sh", "-c", read], b"secret\n");
    saw(
        sb.name,
        format!(
            "env {foo:?}; exec stdin {:?}, with -i {:?}; run stdin {:?}, --json {:?}",
            no_i.stdout,
            with_i.stdout,
            run.stdout,
            run_json.stdout.trim()
        ),
    );
    assert_eq!(foo, ["FOO=two"], "one FOO, the exec's\n{env}");
    assert_eq!(no_i.stdout, "/dev/null\n", "{no_i}");
    assert_eq!(with_i.stdout, "typed\n", "{with_i}");
    assert_eq!(run.stdout, "/dev/null\n", "{run}");
    assert_eq!(one_object(&run_json)["stdout"]["text"], "/dev/null\n", "{run_json}");
    sb.raw(&["terminate", &id]).expect_ok("terminate");
    sb.assert_clean("exec env and stdin");
}

/// A default one-shot box (no image, no venv, no flags): `pip install --user` of a local package
/// works (the host's Python is "externally managed", PEP 668, which makes pip refuse until the
/// box says otherwise) and the package imports; plain `pip install` defaults to the user site.
#[test]
fn pip_installs_in_a_default_box() {
    require_root!();
    let sb = Sbx::new("sbx_pip_default");
    let pkg = sb.rt.work().join("hello-pkg");
    std::fs::create_dir_all(pkg.join("hello")).expect("mkdir package");
    std::fs::write(pkg.join("hello/__init__.py"), "def greet():\n    return 'hello from pip'\n").expect("write");
    std::fs::write(
        pkg.join("pyproject.toml"),
        "[project]\nname = \"hello\"\nversion = \"0.1\"\n[build-system]\nrequires = [\"setuptools\"]\n\
         build-backend = \"setuptools.build_meta\"\n",
    )
    .expect("write");
    let copy = format!("{}:/work/pkg", pkg.display());
    let script =
        "pip install --user --no-index --no-build-isolation /work/pkg >/work/log 2>&1 || { cat /work/log; exit 3; }; \
                  python3 -c 'import hello; print(hello.greet())'; \
                  pip install --no-index --no-build-isolation /work/pkg >/work/log 2>&1 || { cat /work/log; exit 4; }; \
                  echo plain-ok";
    let o = sb.run(&["--timeout", "120s", "--copy-in", &copy], &["sh", "-c", script]);
    saw(sb.name, format!("exit {:?}: {:?}", o.code(), o.stdout.trim()));
    assert!(o.ok(), "pip install in a default box failed\n{o}");
    assert_eq!(o.stdout, "hello from pip\nplain-ok\n", "{o}");
    sb.assert_clean("the run");
}

/// Limits that ask for more than the host has are refused with the host's figure; a negative
/// size is read as a size, not as a flag; a preset above the host is fitted with a warning; and
/// the default box runs a program of 200 threads (pids counts threads).
#[test]
fn limits_beyond_the_host_are_refused_and_threads_fit() {
    require_root!();
    let sb = Sbx::new("sbx_limit_flags");
    for (flag, value, says) in [
        ("--cpus", "4096", "this host has"),
        ("--memory", "100T", "more than this host's"),
        ("--memory", "-5M", "positive number"),
    ] {
        let o = sb.run(&[flag, value], &["true"]);
        saw(sb.name, format!("{flag} {value}: exit {:?}, {:?}", o.code(), o.stderr.trim()));
        assert_eq!(o.code(), Some(125), "{flag} {value} was accepted\n{o}");
        assert!(o.stderr.contains(says), "{flag} {value}: the error does not say {says:?}\n{o}");
    }
    let threads = "import threading, time\n\
                   ts = [threading.Thread(target=time.sleep, args=(0.3,)) for _ in range(200)]\n\
                   [t.start() for t in ts]; [t.join() for t in ts]; print('threads', len(ts))";
    let o = sb.run(&[], &["python3", "-c", threads]);
    saw(sb.name, format!("200 threads: exit {:?}, {:?}", o.code(), o.stdout.trim()));
    assert!(o.ok() && o.stdout.trim() == "threads 200", "{o}");
    sb.assert_clean("the runs");
}

/// A caller whose umask is 077 (a hardened root shell) gets working boxes: what the sandbox
/// makes for a box's own user (its root filesystem's directories, its files) must be readable
/// by that user whatever the caller's umask.
#[test]
fn a_narrow_umask_does_not_break_boxes() {
    require_root!();
    let sb = Sbx::new("sbx_umask");
    let root = sb.rt.root().to_str().expect("utf-8 root").to_string();
    let argv = sb.run_argv(&["--json"], &["sh", "-c", "cat /etc/passwd >/dev/null && echo readable"]);
    let o = Command::new("sh")
        .args(["-c", "umask 077; exec \"$@\"", "sh"])
        .arg(&sb.rt.bin)
        .args(["--root", &root])
        .args(&argv)
        .stdin(Stdio::null())
        .output()
        .expect("sh");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    saw(sb.name, format!("{out} {}", String::from_utf8_lossy(&o.stderr)));
    let v: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["exit_code"], 0, "{v}");
    assert_eq!(v["stdout"]["text"], "readable\n", "{v}");
    sb.assert_clean("a box made under umask 077");
}
