//! Concurrency (issue 7, Reliability 3): many runtime invocations on one container id at once.
//!
//! * `create` x12 with the same id: exactly one wins; every other one exits 1 with one line
//!   saying `already exists`; the winner's container is intact (state parses, `created`, one init).
//! * two `start`s at once: exactly one wins, the other fails cleanly.
//! * `state`, `kill` and `delete` (with and without `--force`) at once on a running container,
//!   with a thread reading `state.json` directly all the while: every read of the file and every
//!   `state` output parses (the file is replaced atomically), every command exits 0 or 1 with one
//!   of the phrases callers match on, and the container ends deleted with nothing left.
//! * `create`, `delete --force` and `state` at once on one id: whatever order they land in, no
//!   init is left that the runtime does not know about, and a final `delete --force` leaves
//!   nothing.
//!
//! Rounds are few (each is a burst of 10-14 processes on a 2-core machine); the races they look
//! for are between whole commands, so bursts, not iterations, are what find them.

use std::fs;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use tinyrun_conformance::{cmdline, pid_alive, require_root, Bundle, Out, Runtime};

/// A command's exit: 0, or 1 with exactly one non-empty stderr line containing one of `phrases`.
/// Never a signal (a panic aborts), never another code.
#[track_caller]
fn clean(o: &Out, phrases: &[&str]) {
    if o.ok() {
        return;
    }
    assert_eq!(o.code(), Some(1), "not a clean failure\n{o}");
    let lines: Vec<&str> = o.stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one error line expected\n{o}");
    assert!(phrases.iter().any(|p| lines[0].contains(p)), "error should contain one of {phrases:?}\n{o}");
    assert!(!o.stderr.contains("panicked"), "{o}");
}

/// `state` output: valid JSON with a known status, or a clean "does not exist".
#[track_caller]
fn state_ok(o: &Out) -> Option<Value> {
    clean(o, &["does not exist"]);
    if !o.ok() {
        return None;
    }
    let v: Value = serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("state output is not JSON ({e})\n{o}"));
    let status = v["status"].as_str().unwrap_or("");
    assert!(["created", "running", "stopped", "paused"].contains(&status), "bad status\n{o}");
    Some(v)
}

/// Processes of this test still alive (after a grace period for dying ones).
fn live(rt: &Runtime) -> Vec<i32> {
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut p = rt.leftovers();
    while !p.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        p = rt.leftovers();
    }
    p
}

#[test]
fn same_id_create_race_has_one_winner() {
    require_root!();
    let rt = Runtime::new("cc_create");
    for round in 0..3 {
        let b = rt.bundle(&["/bin/probe", "sleep", "600"]);
        let racers: Vec<_> = (0..12).map(|_| rt.spawn(&["create", "--bundle", b.path(), &b.id])).collect();
        let outs: Vec<Out> = racers.into_iter().map(|r| r.wait()).collect();
        let winners = outs.iter().filter(|o| o.ok()).count();
        for o in &outs {
            clean(o, &["already exists"]);
        }
        eprintln!("round {round}: 12 creates of {}: {winners} won, {} said already exists", b.id, 12 - winners);
        assert_eq!(
            winners,
            1,
            "exactly one create must win:\n{}",
            outs.iter().map(|o| o.to_string()).collect::<Vec<_>>().join("\n")
        );

        let st = state_ok(&rt.run(&["state", &b.id])).expect("the winner's container exists");
        assert_eq!(st["status"], "created", "{st}");
        let pid = st["pid"].as_i64().unwrap() as i32;
        rt.track_pid(pid);
        let procs = live(&rt);
        assert_eq!(
            procs,
            vec![pid],
            "only the winner's init may be alive: {:?}",
            procs.iter().map(|p| cmdline(*p)).collect::<Vec<_>>()
        );
        let dir: Vec<String> = fs::read_dir(rt.root().join(&b.id))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(!dir.iter().any(|f| f.starts_with('.')), "temporary files left in the state dir: {dir:?}");
        rt.run(&["start", &b.id]).expect_ok("the winner starts");
        rt.run(&["delete", "--force", &b.id]).expect_ok("delete --force");
        rt.assert_nothing_left(&b.id);
    }
}

#[test]
fn two_starts_one_wins() {
    require_root!();
    let rt = Runtime::new("cc_start");
    let b = rt.bundle(&["/bin/probe", "sleep", "600"]);
    rt.create(&b).expect_ok("create");
    let racers: Vec<_> = (0..2).map(|_| rt.spawn(&["start", &b.id])).collect();
    let outs: Vec<Out> = racers.into_iter().map(|r| r.wait()).collect();
    for o in &outs {
        clean(o, &["running", "cannot start"]);
    }
    assert_eq!(outs.iter().filter(|o| o.ok()).count(), 1, "exactly one start must win:\n{}\n{}", outs[0], outs[1]);
    assert_eq!(rt.status(&b.id).as_deref(), Some("running"));
    rt.run(&["delete", "--force", &b.id]).expect_ok("delete --force");
    rt.assert_nothing_left(&b.id);
}

/// Reads `<root>/<id>/state.json` in a loop until `stop`; every read that finds the file must
/// parse. Counts the reads that parsed and those that found no file.
fn watch_state_file(path: std::path::PathBuf, stop: &AtomicBool, parsed: &AtomicUsize, missing: &AtomicUsize) {
    while !stop.load(Ordering::Relaxed) {
        match fs::read(&path) {
            Ok(bytes) => {
                if let Err(e) = serde_json::from_slice::<Value>(&bytes) {
                    panic!("torn state.json ({e}): {:?}", String::from_utf8_lossy(&bytes));
                }
                parsed.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                missing.fetch_add(1, Ordering::Relaxed);
            }
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn storm(rt: &Runtime, b: &Bundle, cmds: &[Vec<&str>]) -> Vec<(String, Out)> {
    let running: Vec<_> = cmds.iter().map(|c| (c.join(" "), rt.spawn(c))).collect();
    running
        .into_iter()
        .map(|(name, r)| (name, r.wait()))
        .collect::<Vec<_>>()
        .into_iter()
        .inspect(|(_, o)| assert!(o.code().is_some(), "{} died from a signal\n{o}", b.id))
        .collect()
}

#[test]
fn kill_delete_state_at_once_never_corrupt() {
    require_root!();
    let rt = Runtime::new("cc_kds");
    for round in 0..5 {
        let b = rt.bundle(&["/bin/probe", "sleep", "600"]);
        rt.create(&b).expect_ok("create");
        if round % 2 == 0 {
            rt.run(&["start", &b.id]).expect_ok("start");
        }
        let id = b.id.as_str();
        let mut cmds: Vec<Vec<&str>> = Vec::new();
        for _ in 0..5 {
            cmds.push(vec!["state", id]);
        }
        cmds.push(vec!["kill", id, "KILL"]);
        cmds.push(vec!["kill", id, "TERM"]);
        cmds.push(vec!["kill", "--all", id, "KILL"]);
        cmds.push(vec!["delete", id]);
        cmds.push(vec!["delete", "--force", id]);
        cmds.push(vec!["delete", "--force", id]);
        cmds.push(vec!["list", "--format", "json"]);

        let stop = AtomicBool::new(false);
        let (parsed, missing) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let file = rt.root().join(id).join("state.json");
        let outs = std::thread::scope(|s| {
            let watcher = s.spawn(|| watch_state_file(file, &stop, &parsed, &missing));
            let outs = storm(&rt, &b, &cmds);
            stop.store(true, Ordering::Relaxed);
            watcher.join().expect("state.json watcher");
            outs
        });
        let mut summary = Vec::new();
        for (name, o) in &outs {
            match name.split(' ').next().unwrap() {
                "state" => {
                    let st = state_ok(o);
                    summary.push(
                        st.map_or("state:gone".to_string(), |v| format!("state:{}", v["status"].as_str().unwrap())),
                    );
                }
                "kill" => {
                    clean(o, &["not running", "does not exist"]);
                    summary.push(format!("kill:{}", if o.ok() { "ok" } else { "refused" }));
                }
                "delete" => {
                    if name.contains("--force") {
                        assert!(o.ok(), "delete --force must succeed\n{o}");
                    } else {
                        clean(o, &["not stopped", "does not exist", "running"]);
                    }
                    summary.push(format!(
                        "{}:{}",
                        name.replace(&format!(" {id}"), ""),
                        if o.ok() { "ok" } else { "refused" }
                    ));
                }
                _ => {
                    assert!(o.ok(), "{o}");
                    let _: Value =
                        serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("list is not JSON ({e})\n{o}"));
                }
            }
        }
        eprintln!(
            "round {round} ({}): {}; state.json read {} times whole, {} times absent, never torn",
            if round % 2 == 0 { "running" } else { "created" },
            summary.join(" "),
            parsed.load(Ordering::Relaxed),
            missing.load(Ordering::Relaxed)
        );
        let end = rt.run(&["state", id]);
        assert!(!end.ok() && end.stderr.contains("does not exist"), "the container must end deleted\n{end}");
        rt.assert_nothing_left(id);
    }
}

#[test]
fn create_delete_state_at_once_leave_no_orphan() {
    require_root!();
    let rt = Runtime::new("cc_cds");
    for round in 0..4 {
        let b = rt.bundle(&["/bin/probe", "sleep", "600"]);
        let id = b.id.as_str();
        let mut cmds: Vec<Vec<&str>> = Vec::new();
        for i in 0..10 {
            cmds.push(match i % 5 {
                0 | 2 => vec!["create", "--bundle", b.path(), id],
                1 => vec!["delete", "--force", id],
                _ => vec!["state", id],
            });
        }
        let outs = storm(&rt, &b, &cmds);
        let mut summary = Vec::new();
        let mut errors = std::collections::BTreeSet::new();
        for (name, o) in &outs {
            let verb = name.split(' ').next().unwrap();
            if !o.ok() {
                let msg = o.stderr.trim();
                errors.insert(format!("{verb}: {}", msg.split("msg=").nth(1).unwrap_or(msg).replace(id, "ID")));
            }
            match verb {
                "create" => clean(o, &["already exists", "does not exist", "No such file"]),
                "state" => drop(state_ok(o)),
                _ => assert!(o.ok(), "delete --force must succeed\n{o}"),
            }
            summary.push(format!("{verb}:{}", if o.ok() { "ok" } else { "err" }));
        }
        // Whatever happened, the runtime's view and the host agree: a live init is the one
        // `state` names, and there is at most one.
        let st = state_ok(&rt.run(&["state", id]));
        let procs = live(&rt);
        match &st {
            Some(v) => {
                let pid = v["pid"].as_i64().unwrap() as i32;
                assert_eq!(v["status"], "created", "{v}");
                assert!(pid_alive(pid), "{v}");
                assert_eq!(
                    procs,
                    vec![pid],
                    "processes besides the recorded init: {:?}",
                    procs.iter().map(|p| cmdline(*p)).collect::<Vec<_>>()
                );
            }
            None => assert!(
                procs.is_empty(),
                "no container recorded, but alive: {:?}",
                procs.iter().map(|p| cmdline(*p)).collect::<Vec<_>>()
            ),
        }
        eprintln!(
            "round {round}: {}; then state: {}; errors seen: {errors:?}",
            summary.join(" "),
            st.map_or("does not exist".to_string(), |v| v["status"].to_string())
        );
        rt.run(&["delete", "--force", id]).expect_ok("final delete --force");
        rt.assert_nothing_left(id);
    }
}
