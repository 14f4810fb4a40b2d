//! The container lifecycle through the CLI (runtime-spec `runtime.md`, cli-contract.md §1.1, §2.3,
//! §2.4): create → state → start → kill → delete, `--pid-file`, `run` (foreground exit codes,
//! `-d`, `--keep`), delete/start edge cases, `list` formats and `spec`.

use std::time::{Duration, Instant};

use serde_json::Value;
use tinyrun_conformance::{cmdline, pid_alive, require_root, Bundle, Runtime};

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn pid_of(st: &Value) -> i32 {
    st["pid"].as_i64().expect("state.pid is a number") as i32
}

#[test]
fn create_start_kill_delete() {
    require_root!();
    let rt = Runtime::new("lifecycle");
    let args = ["/bin/sh", "-c", "echo hello-from-container; exec /bin/probe sleep 600"];
    let b = rt.bundle(&args);
    let pidfile = rt.work().join("init.pid");
    let created = rt.run(&["create", "--bundle", b.path(), "--pid-file", pidfile.to_str().unwrap(), &b.id]);
    let created = created.expect_ok("create");

    let st = rt.state(&b.id).expect("state after create");
    assert_eq!(st["status"], "created", "{st}");
    assert_eq!(st["id"], b.id.as_str());
    assert_eq!(st["bundle"], b.path(), "bundle must be the absolute bundle path");
    assert!(st["ociVersion"].is_string(), "{st}");
    let pid = pid_of(&st);
    assert!(pid > 0 && pid_alive(pid), "created container must have a live init, state: {st}");
    assert!(rt.leftovers().contains(&pid), "harness self-check: the test tag must reach init's environment");
    let argv = cmdline(pid);
    assert_ne!(argv, args, "the user program must not run before start");
    assert!(!created.stdout_now().contains("hello-from-container"), "user program ran at create");

    // containerd does strconv.Atoi on the file: bare decimal, no newline.
    let content = std::fs::read_to_string(&pidfile).expect("pid file");
    assert_eq!(content, pid.to_string(), "pid file must hold the host pid without a newline");

    rt.run(&["start", &b.id]).expect_ok("start");
    let st = rt.wait_status(&b.id, "running");
    assert_eq!(pid_of(&st), pid, "start must not change the pid");
    wait_for("the user program's output", || created.stdout_now().contains("hello-from-container"));
    wait_for("the user program to exec", || cmdline(pid) == ["/bin/probe", "sleep", "600"]);

    rt.run(&["kill", &b.id, "KILL"]).expect_ok("kill KILL");
    let st = rt.wait_status(&b.id, "stopped");
    assert_eq!(st["pid"], 0, "a stopped container reports pid 0: {st}");

    rt.run(&["delete", &b.id]).expect_ok("delete of a stopped container");
    let o = rt.run(&["state", &b.id]).expect_err("state after delete");
    assert!(o.stderr.contains("does not exist"), "{o}");
    rt.assert_nothing_left(&b.id);
}

/// SIGTERM by default, then `KILL`, `SIGKILL` and `9` all deliver SIGKILL.
#[test]
fn kill_signal_spellings() {
    require_root!();
    let rt = Runtime::new("killsig");
    // pid 1 of a pid namespace only gets signals it handles (and SIGKILL): trap TERM.
    let script = "trap 'echo got-TERM; exit 0' TERM; echo ready; /bin/probe sleep 600 & wait";
    let b = rt.bundle(&["/bin/sh", "-c", script]);
    let out = rt.create(&b).expect_ok("create");
    rt.run(&["start", &b.id]).expect_ok("start");
    wait_for("ready", || out.stdout_now().contains("ready"));
    rt.run(&["kill", &b.id]).expect_ok("kill (default signal)");
    rt.wait_status(&b.id, "stopped");
    assert!(out.stdout_now().contains("got-TERM"), "the default signal must be SIGTERM: {:?}", out.stdout_now());
    rt.run(&["delete", &b.id]).expect_ok("delete");

    for sig in ["KILL", "SIGKILL", "9", "kill"] {
        let b = rt.bundle(&["/bin/probe", "sleep", "600"]);
        rt.create(&b).expect_ok("create");
        rt.run(&["start", &b.id]).expect_ok("start");
        let pid = pid_of(&rt.wait_status(&b.id, "running"));
        rt.run(&["kill", &b.id, sig]).expect_ok(&format!("kill {sig}"));
        let st = rt.wait_status(&b.id, "stopped");
        assert_eq!(st["pid"], 0, "{st}");
        assert!(!pid_alive(pid), "init still alive after kill {sig}");
        rt.run(&["delete", &b.id]).expect_ok("delete");
        rt.assert_nothing_left(&b.id);
    }
}

#[test]
fn kill_created_container() {
    require_root!();
    let rt = Runtime::new("killcreated");
    let b = rt.bundle(&["/bin/probe", "sleep", "600"]);
    rt.create(&b).expect_ok("create");
    rt.run(&["kill", &b.id, "9"]).expect_ok("kill of a created container");
    rt.wait_status(&b.id, "stopped");
    rt.run(&["delete", &b.id]).expect_ok("delete");
    rt.assert_nothing_left(&b.id);
}

/// Foreground `run` returns the container's exit status, or 128+N for death by signal N.
#[test]
fn run_exit_code_passthrough() {
    require_root!();
    let rt = Runtime::new("runexit");
    let b = rt.bundle(&["/bin/probe", "exit", "3"]);
    let o = rt.run_bundle(&b);
    assert_eq!(o.code(), Some(3), "{o}");
    // Foreground run deletes the container afterwards.
    assert!(rt.state(&b.id).is_none(), "run without --keep must delete the container");
    rt.assert_nothing_left(&b.id);

    // Without a pid namespace the process is not an init, so signalling itself kills it.
    let b = rt.bundle(&["/bin/probe", "signal-self", "USR1"]);
    b.without_ns("pid");
    let o = rt.run_bundle(&b);
    assert_eq!(o.code(), Some(128 + libc::SIGUSR1), "killed by SIGUSR1 → 138\n{o}");

    // Killed from outside (pid-namespace init, SIGKILL) → 137.
    let b = rt.bundle(&["/bin/probe", "sleep", "600"]);
    let running = rt.spawn(&["run", "--bundle", b.path(), &b.id]);
    rt.wait_status(&b.id, "running");
    rt.run(&["kill", &b.id, "KILL"]).expect_ok("kill");
    let o = running.wait();
    assert_eq!(o.code(), Some(137), "{o}");
}

#[test]
fn run_foreground_output() {
    require_root!();
    let rt = Runtime::new("runoutput");
    let b = rt.bundle(&["/bin/sh", "-c", "echo to-stdout; echo to-stderr >&2"]);
    let o = rt.run_bundle(&b).expect_ok("run");
    assert_eq!(o.stdout, "to-stdout\n", "{o}");
    assert!(o.stderr.contains("to-stderr"), "{o}");
}

#[test]
fn run_detached() {
    require_root!();
    let rt = Runtime::new("rundetach");
    let b = rt.bundle(&["/bin/sh", "-c", "echo detached-output; exec /bin/probe sleep 600"]);
    let t0 = Instant::now();
    let o = rt.run(&["run", "-d", "--bundle", b.path(), &b.id]).expect_ok("run -d");
    assert!(t0.elapsed() < Duration::from_secs(20), "run -d must not wait for the container");
    let st = rt.wait_status(&b.id, "running");
    assert!(pid_alive(pid_of(&st)));
    wait_for("output of the detached container", || o.stdout_now().contains("detached-output"));
    let o = rt.run(&["delete", &b.id]).expect_err("delete of a running container");
    assert!(o.stderr.contains("not stopped"), "{o}");
    assert_eq!(rt.status(&b.id).as_deref(), Some("running"), "a failed delete must have no effect");
    rt.run(&["delete", "--force", &b.id]).expect_ok("delete --force");
    rt.assert_nothing_left(&b.id);
}

#[test]
fn run_keep() {
    require_root!();
    let rt = Runtime::new("runkeep");
    let b = rt.bundle(&["/bin/probe", "exit", "0"]);
    rt.run(&["run", "--keep", "--bundle", b.path(), &b.id]).expect_ok("run --keep");
    let st = rt.state(&b.id).expect("--keep leaves the container");
    assert_eq!(st["status"], "stopped");
    assert_eq!(st["pid"], 0);
    rt.run(&["delete", &b.id]).expect_ok("delete");
    assert!(rt.state(&b.id).is_none());
    rt.assert_nothing_left(&b.id);
}

/// runc kills and destroys a `created` container even without --force (callers rely on it).
#[test]
fn delete_created_without_force() {
    require_root!();
    let rt = Runtime::new("delcreated");
    let b = rt.bundle(&["/bin/probe", "sleep", "600"]);
    rt.create(&b).expect_ok("create");
    let pid = pid_of(&rt.state(&b.id).unwrap());
    rt.run(&["delete", &b.id]).expect_ok("delete of a created container");
    assert!(!pid_alive(pid), "init must be killed");
    rt.assert_nothing_left(&b.id);
}

#[test]
fn delete_unknown_with_force_succeeds() {
    let rt = Runtime::new("delunknown");
    rt.run(&["delete", "--force", "never-created"]).expect_ok("delete --force of an unknown id");
    let o = rt.run(&["delete", "never-created"]).expect_err("delete of an unknown id");
    assert!(o.stderr.contains("does not exist"), "{o}");
}

#[test]
fn start_twice_fails() {
    require_root!();
    let rt = Runtime::new("starttwice");
    let b = rt.bundle(&["/bin/probe", "sleep", "600"]);
    rt.create(&b).expect_ok("create");
    rt.run(&["start", &b.id]).expect_ok("start");
    let pid = pid_of(&rt.wait_status(&b.id, "running"));
    rt.run(&["start", &b.id]).expect_err("second start");
    let st = rt.state(&b.id).unwrap();
    assert_eq!(st["status"], "running", "a failed start must have no effect");
    assert_eq!(pid_of(&st), pid);
    rt.run(&["kill", &b.id, "KILL"]).expect_ok("kill");
    rt.wait_status(&b.id, "stopped");
    rt.run(&["start", &b.id]).expect_err("start of a stopped container");
    assert_eq!(rt.status(&b.id).as_deref(), Some("stopped"));
}

/// Changing config.json after create must not affect the container (runtime.md step 2).
#[test]
fn config_changes_after_create_are_ignored() {
    require_root!();
    let rt = Runtime::new("cfgfrozen");
    let b = rt.bundle(&["/bin/sh", "-c", "echo original-args"]);
    let out = rt.create(&b).expect_ok("create");
    b.args(&["/bin/sh", "-c", "echo changed-args"]);
    rt.run(&["start", &b.id]).expect_ok("start");
    rt.wait_status(&b.id, "stopped");
    let text = out.stdout_now();
    assert!(text.contains("original-args") && !text.contains("changed-args"), "{text:?}");
}

#[test]
fn list_formats() {
    require_root!();
    let rt = Runtime::new("list");
    let o = rt.run(&["list", "--format", "json"]).expect_ok("list --format json (empty)");
    let v: Value = serde_json::from_str(o.stdout.trim()).expect("JSON");
    assert!(v.is_null() || v.as_array().is_some_and(|a| a.is_empty()), "runc prints null: {o}");

    let b1 = rt.bundle(&["/bin/probe", "sleep", "600"]);
    let b2 = rt.bundle(&["/bin/probe", "sleep", "600"]);
    rt.create(&b1).expect_ok("create");
    rt.create(&b2).expect_ok("create");
    rt.run(&["start", &b2.id]).expect_ok("start");
    rt.wait_status(&b2.id, "running");

    let o = rt.run(&["list"]).expect_ok("list");
    let mut lines = o.stdout.lines();
    let header: Vec<&str> = lines.next().expect("header").split_whitespace().collect();
    assert_eq!(header[..5], ["ID", "PID", "STATUS", "BUNDLE", "CREATED"], "{o}");
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split_whitespace().collect()).collect();
    for (b, status) in [(&b1, "created"), (&b2, "running")] {
        let row = rows.iter().find(|r| r[0] == b.id).unwrap_or_else(|| panic!("{} missing\n{o}", b.id));
        assert_eq!(row[2], status, "{o}");
        assert_eq!(row[3], b.path(), "{o}");
    }

    let o = rt.run(&["list", "-q"]).expect_ok("list -q");
    let mut ids: Vec<&str> = o.stdout.lines().collect();
    ids.sort();
    let mut want = vec![b1.id.as_str(), b2.id.as_str()];
    want.sort();
    assert_eq!(ids, want, "list -q prints only ids\n{o}");

    for flag in [&["--format", "json"][..], &["-f", "json"], &["--format=json"]] {
        let mut args = vec!["list"];
        args.extend_from_slice(flag);
        let o = rt.run(&args).expect_ok("list json");
        let v: Value = serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("{e}\n{o}"));
        let arr = v.as_array().expect("a JSON array");
        assert_eq!(arr.len(), 2, "{o}");
        for (b, status) in [(&b1, "created"), (&b2, "running")] {
            let c = arr.iter().find(|c| c["id"] == b.id.as_str()).expect("id listed");
            assert_eq!(c["status"], status);
            assert_eq!(c["bundle"], b.path());
            assert!(c["pid"].as_i64().unwrap() > 0);
        }
    }
}

fn check_default_spec(path: &std::path::Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v: Value = serde_json::from_str(&text).expect("spec output is JSON");
    assert!(v["ociVersion"].as_str().is_some_and(|s| s.starts_with("1.")), "{v}");
    assert_eq!(v["root"]["path"], "rootfs");
    assert!(v["process"]["args"].as_array().is_some_and(|a| !a.is_empty()));
    assert!(v["linux"]["namespaces"].as_array().is_some_and(|a| !a.is_empty()));
    v
}

/// `spec` writes config.json into `--bundle` (or the cwd) and refuses to overwrite it
/// (runc: "File config.json exists. Remove it first").
#[test]
fn spec_writes_and_refuses_overwrite() {
    let rt = Runtime::new("spec");
    let dir = rt.tempdir();
    rt.run(&["spec", "--bundle", dir.to_str().unwrap()]).expect_ok("spec --bundle");
    let cfg = dir.join("config.json");
    check_default_spec(&cfg);
    std::fs::write(&cfg, "{\"sentinel\":true}").unwrap();
    let o = rt.run(&["spec", "-b", dir.to_str().unwrap()]).expect_err("spec over an existing config.json");
    assert!(o.stderr.contains("exists"), "{o}");
    assert_eq!(std::fs::read_to_string(&cfg).unwrap(), "{\"sentinel\":true}", "config.json was overwritten");

    let cwd = rt.tempdir();
    let mut cmd = rt.command(&["spec"]);
    cmd.current_dir(&cwd);
    rt.output(cmd).expect_ok("spec in cwd");
    check_default_spec(&cwd.join("config.json"));

    rt.run(&["spec", "--bundle", "/nonexistent/dir"]).expect_err("spec into a missing dir");
}

/// The `spec` output, pointed at the test rootfs, runs.
#[test]
fn spec_output_runs() {
    require_root!();
    let rt = Runtime::new("specruns");
    let dir = rt.tempdir();
    rt.run(&["spec", "--bundle", dir.to_str().unwrap()]).expect_ok("spec");
    let b = Bundle { dir, id: rt.new_id() };
    let tag = format!("TINYRUN_CONFORMANCE_TAG={}", rt.tag());
    let rootfs = tinyrun_conformance::shared_rootfs().to_str().unwrap().to_string();
    let cgpath = format!("/tinyrun-test/{}", b.id);
    b.config_mut(|c| {
        c["root"]["path"] = rootfs.into();
        c["process"]["terminal"] = false.into();
        c["process"]["args"] = serde_json::json!(["/bin/probe", "hostname"]);
        c["process"]["env"].as_array_mut().unwrap().push(tag.into());
        c["linux"]["cgroupsPath"] = cgpath.into();
    });
    let o = rt.run_bundle(&b).expect_ok("run the default spec");
    assert!(o.kv().contains_key("hostname"), "{o}");
}

#[test]
fn spec_rootless() {
    let rt = Runtime::new("specrootless");
    let dir = rt.tempdir();
    rt.run(&["spec", "--rootless", "--bundle", dir.to_str().unwrap()]).expect_ok("spec --rootless");
    let v = check_default_spec(&dir.join("config.json"));
    let ns: Vec<&str> =
        v["linux"]["namespaces"].as_array().unwrap().iter().map(|n| n["type"].as_str().unwrap()).collect();
    assert!(ns.contains(&"user"), "rootless spec needs a user namespace: {ns:?}");
    assert!(!ns.contains(&"network"), "rootless spec shares the host network: {ns:?}");
    let (uid, gid) = (nix::unistd::geteuid().as_raw(), nix::unistd::getegid().as_raw());
    for (key, host) in [("uidMappings", uid), ("gidMappings", gid)] {
        let m = &v["linux"][key][0];
        assert_eq!(m["containerID"], 0, "{key}: {v}");
        assert_eq!(m["hostID"], host, "{key} maps the caller's id: {v}");
        assert_eq!(m["size"], 1, "{key}: {v}");
    }
}
