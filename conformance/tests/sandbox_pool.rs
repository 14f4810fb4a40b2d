//! `tinyrun sandbox`'s pool under load and under faults, driven through the binary: 20 concurrent
//! `run --pool` against a pool of 4 (every box of the pool is used, never more than 4 wait idle),
//! a drain racing the refill after a run (nothing the refill made survives it, no record is
//! left), a drain by key (the other key's pool stays, `pool list` shows each key's options), boxes
//! that expire unused replaced in the background, and a claimer SIGKILLed (with strace's fault
//! injection) between making its claim and writing it, and after: the box is purged at once,
//! not at the claim's deadline or never.
//!
//! Every test prints one line `SANDBOX <name>: <what it saw>` (run with --nocapture) before it
//! asserts, and leaves nothing behind (checked with the harness's `assert_clean`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tinyrun_conformance::sandbox::{names_in, parse_result, saw, wait_for, Sbx};
use tinyrun_conformance::{missing_prerequisite, require_root, Out};

/// Pool boxes of this test that are made and unclaimed (running, or a moment before: a box being
/// made counts, as it will be idle). Read from the state dir, so sampling takes no lock.
fn idle_now(sb: &Sbx) -> Vec<String> {
    let state = sb.rt.root().join("sandbox");
    names_in(&state)
        .into_iter()
        .filter(|id| id.starts_with("pool"))
        .filter(|id| state.join(id).join("state.json").exists() && !state.join(id).join("claimed").exists())
        .collect()
}

/// Pool boxes of this test, in any state, seen in the state or the bundle dirs.
fn pool_boxes(sb: &Sbx) -> Vec<String> {
    let root = sb.rt.root();
    let mut all: Vec<String> =
        names_in(&root.join("sandbox")).into_iter().chain(names_in(&root.join("sandbox-bundles"))).collect();
    all.retain(|id| id.starts_with("pool"));
    all.sort();
    all.dedup();
    all
}

/// What is under `<root>/sandbox-pool`.
fn pool_records(sb: &Sbx) -> Vec<String> {
    names_in(&sb.rt.root().join("sandbox-pool"))
}

/// `pool fill [common] ARGS`, which must succeed; the ids it made.
#[track_caller]
fn fill(sb: &Sbx, args: &[&str]) -> Vec<String> {
    let mut v = vec!["pool", "fill"];
    v.extend(sb.common());
    v.extend_from_slice(args);
    let o = sb.raw(&v).expect_ok("pool fill");
    o.stdout.lines().map(str::to_string).collect()
}

fn key_of(id: &str) -> &str {
    id.rsplit_once('-').map_or(id, |(k, _)| k)
}

/// `pool fill 4`, then 20 `run --pool --json` at once. Every box of the pool is used (a refill
/// running meanwhile may add hits: at least 4, and hits + misses = 20); at no moment, during the
/// runs or their refills, do more than 4 boxes wait idle; once the refills are done, exactly 4 do.
#[test]
fn twenty_runs_against_a_pool_of_four() {
    require_root!();
    let sb = Sbx::new("sbx_pool_load");
    let made = fill(&sb, &["--idle-lifetime", "120s", "4"]);
    let runs: Vec<_> = (0..20).map(|_| sb.spawn_run(&["--pool", "--json"], &["echo", "ok"])).collect();
    let mut most = idle_now(&sb).len();
    let mut outs = Vec::new();
    let mut pending = runs;
    while !pending.is_empty() {
        most = most.max(idle_now(&sb).len());
        let mut still = Vec::new();
        for mut r in pending {
            match r.child.try_wait() {
                Ok(None) => still.push(r),
                _ => outs.push(r.wait()),
            }
        }
        pending = still;
        std::thread::sleep(Duration::from_millis(5));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while !sb.busy().is_empty() && Instant::now() < deadline {
        most = most.max(idle_now(&sb).len());
        std::thread::sleep(Duration::from_millis(5));
    }
    // The reaper may still be making the last box (it is not `busy`).
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut after = idle_now(&sb);
    while after.len() < 4 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        after = idle_now(&sb);
        most = most.max(after.len());
    }
    std::thread::sleep(Duration::from_millis(600));
    most = most.max(idle_now(&sb).len());
    let results: Vec<Value> = outs.iter().map(parse_result).collect();
    let hits = results.iter().filter(|r| r["pool"] == "hit").count();
    let misses = results.iter().filter(|r| r["pool"] == "miss").count();
    saw(
        sb.name,
        format!(
            "pool fill 4 made {}; 20 concurrent run --pool: {hits} hits, {misses} misses; most idle at once: {most}; \
             idle once settled: {}",
            made.len(),
            after.len()
        ),
    );
    assert_eq!(made.len(), 4);
    for (r, o) in results.iter().zip(&outs) {
        assert_eq!((r["exit_code"].as_i64(), r["stdout"]["text"].as_str()), (Some(0), Some("ok\n")), "{o}");
    }
    assert_eq!(hits + misses, 20, "every run says hit or miss");
    assert!(hits >= 4, "only {hits} of 20 concurrent runs took one of the pool's 4 boxes");
    assert!(most <= 4, "{most} boxes waited idle at once in a pool of 4");
    assert_eq!(after.len(), 4, "the pool once the refills are done: {after:?}");
    sb.raw(&["pool", "drain", "--all"]).expect_ok("pool drain --all");
    sb.assert_clean("a pool under load");
}

/// `pool fill 1; run --pool -- true; pool drain KEY`, with the drain landing at different points
/// of the refill that the run started (at once, then later and later): after each drain, and once
/// every tinyrun process has finished, no pool box and no pool record is left.
#[test]
fn a_drain_is_exact_under_a_racing_refill() {
    require_root!();
    let sb = Sbx::new("sbx_pool_drain_race");
    let mut survivors = Vec::new();
    for round in 0..8u64 {
        let key = key_of(&fill(&sb, &["--idle-lifetime", "120s", "1"])[0]).to_string();
        sb.run(&["--pool"], &["true"]).expect_ok("run --pool");
        std::thread::sleep(Duration::from_millis(round * 10));
        let drained = sb.raw(&["pool", "drain", &key]);
        wait_for("the refill to finish", 30, || sb.busy().is_empty());
        std::thread::sleep(Duration::from_millis(100));
        let (left, records) = (pool_boxes(&sb), pool_records(&sb));
        if !drained.ok() || !left.is_empty() || !records.is_empty() {
            survivors
                .push(format!("round {round}: drain exit {:?}, left {left:?}, records {records:?}", drained.code()));
            sb.quiet(&["sandbox", "pool", "drain", "--all"]);
            sb.quiet(&["sandbox", "pool", "drain"]);
            for id in left {
                sb.quiet(&["sandbox", "terminate", &id]);
            }
        }
    }
    saw(sb.name, format!("8 rounds of fill 1, run --pool, drain KEY: {survivors:?}"));
    assert!(survivors.is_empty(), "a drain left boxes or records: {survivors:#?}");
    sb.assert_clean("drains racing refills");
}

/// Two pools (the default box and `--memory 128M -e SECRET=...`): `pool list` shows each key's
/// options (variables by name only), `pool drain KEY` empties that pool and leaves the other with
/// its box and record, an unknown key is an error, and `pool drain --all` leaves no record.
#[test]
fn a_drain_by_key_leaves_other_pools() {
    require_root!();
    let sb = Sbx::new("sbx_pool_keys");
    let a = fill(&sb, &["1"]);
    let b = fill(&sb, &["--memory", "128M", "-e", "SECRET=hunter2", "1"]);
    let (ka, kb) = (key_of(&a[0]).to_string(), key_of(&b[0]).to_string());
    let listed = sb.raw(&["pool", "list", "--format", "json"]).expect_ok("pool list");
    let table = sb.raw(&["pool", "list"]).expect_ok("pool list");
    let boxes: Vec<Value> = serde_json::from_str::<Value>(listed.stdout.trim())
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default();
    let options = |k: &str| boxes.iter().find(|x| x["key"] == k).map(|x| x["options"].clone()).unwrap_or_default();
    let drained = sb.raw(&["pool", "drain", &ka]);
    wait_for("the drain's refills (none) to finish", 30, || sb.busy().is_empty());
    let (left, records) = (pool_boxes(&sb), pool_records(&sb));
    let unknown = sb.raw(&["pool", "drain", "pool0000000000000000"]);
    let all = sb.raw(&["pool", "drain", "--all"]);
    let (left_all, records_all) = (pool_boxes(&sb), pool_records(&sb));
    saw(
        sb.name,
        format!(
            "keys {ka} {kb}; options {} / {}; drain {ka}: exit {:?}, left {left:?}, records {records:?}; unknown key: \
             exit {:?} {:?}; drain --all: exit {:?}, left {left_all:?}, records {records_all:?}",
            options(&ka),
            options(&kb),
            drained.code(),
            unknown.code(),
            unknown.stderr.trim(),
            all.code()
        ),
    );
    assert_ne!(ka, kb);
    assert_eq!(options(&ka)["memory"].as_u64(), Some(256 << 20), "{listed}");
    assert_eq!(options(&kb)["memory"].as_u64(), Some(128 << 20), "{listed}");
    let env = options(&kb)["env"].clone();
    assert!(env.as_array().is_some_and(|e| e.iter().any(|n| n == "SECRET")), "{listed}");
    assert!(
        !listed.stdout.contains("hunter2") && !table.stdout.contains("hunter2"),
        "a value is shown\n{listed}\n{table}"
    );
    assert!(table.stdout.contains("memory=128M"), "{table}");
    assert!(drained.ok() && drained.stdout.trim() == a[0], "{drained}");
    assert_eq!(left, b, "drain {ka} touched the other pool");
    assert_eq!(records, std::slice::from_ref(&kb), "drain {ka} left its record or took the other's");
    assert_eq!(unknown.code(), Some(125), "{unknown}");
    assert!(all.ok() && all.stdout.trim() == b[0], "{all}");
    assert!(left_all.is_empty() && records_all.is_empty(), "after drain --all: {left_all:?} {records_all:?}");
    sb.assert_clean("draining by key");
}

/// Pool boxes that reach the end of their idle lifetime unused are replaced with no tinyrun
/// command run: the pool is back at its size without a fill or a run.
#[test]
fn expired_pool_boxes_are_replaced_in_the_background() {
    require_root!();
    let sb = Sbx::new("sbx_pool_expiry");
    let first = fill(&sb, &["--idle-lifetime", "2s", "2"]);
    let t0 = Instant::now();
    wait_for("the first boxes to expire", 10, || pool_boxes(&sb).iter().all(|id| !first.contains(id)));
    let expired = t0.elapsed();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut now = idle_now(&sb);
    while (now.len() < 2 || now.iter().any(|id| first.contains(id))) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        now = idle_now(&sb);
    }
    saw(sb.name, format!("fill 2 with 2 s to live: {first:?} gone after {expired:?}; then idle: {now:?}"));
    assert_eq!(now.len(), 2, "the expired boxes were not replaced: {now:?}");
    assert!(now.iter().all(|id| !first.contains(id)), "{now:?}");
    sb.raw(&["pool", "drain", "--all"]).expect_ok("pool drain --all");
    sb.assert_clean("a pool whose boxes expire");
}

fn have_strace() -> bool {
    Command::new("strace").arg("-V").stdout(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// `strace STRACE_ARGS -- <bin> --root R sandbox run --pool [common] RUN_ARGS -- true`.
fn claimer(sb: &Sbx, trace: &Path, strace_args: &[&str], run_args: &[&str]) -> Out {
    let mut c = Command::new("strace");
    c.arg("-o").arg(trace).args(strace_args).arg("--").arg(&sb.rt.bin).arg("--root").arg(sb.rt.root());
    c.args(["sandbox", "run", "--pool"]).args(sb.common()).args(run_args).args(["--", "true"]);
    c.env("TINYRUN_CONFORMANCE_TAG", sb.rt.tag()).stdin(Stdio::null());
    sb.rt.output(c)
}

/// A `run --pool` SIGKILLed with its claim on a box: at the write of the claim (made, still
/// empty: the fault the claim's old layout could not tell from a claim being written), and just
/// after claiming (the claim names a deadline a minute away). Either way its box is purged within
/// seconds (and the pool refilled), not at the claim's deadline or never.
#[test]
fn a_killed_claimer_is_seen_dead() {
    require_root!();
    if !have_strace() {
        missing_prerequisite!("strace is not installed (conformance/install-deps installs it)");
    }
    let sb = Sbx::new("sbx_pool_claimer");
    let trace: PathBuf = sb.rt.work().join("claimer.trace");
    let mut seen = Vec::new();
    let faults: [(&str, Vec<String>, Vec<&str>); 2] = [
        ("at the claim's write", vec!["-e".into(), "inject=write:signal=KILL".into()], vec![]),
        (
            "after claiming, at its connect to the box",
            vec!["-e".into(), "inject=connect:signal=KILL".into()],
            vec!["--timeout", "60s"],
        ),
    ];
    for (when, inject, run_args) in faults {
        fill(&sb, &["--idle-lifetime", "60s", "1"]);
        wait_for("an idle box", 10, || idle_now(&sb).len() == 1);
        let id = idle_now(&sb)[0].clone();
        let claim = sb.rt.root().join("sandbox").join(&id).join("claimed");
        let mut args: Vec<String> = inject;
        if when.starts_with("at the claim") {
            args.extend(["-P".to_string(), claim.to_string_lossy().into_owned()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = claimer(&sb, &trace, &args, &run_args);
        let killed = std::fs::read_to_string(&trace).unwrap_or_default().contains("killed by SIGKILL");
        let claimed = std::fs::read_to_string(&claim).ok();
        let t0 = Instant::now();
        let deadline = t0 + Duration::from_secs(5);
        while pool_boxes(&sb).contains(&id) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let purged = !pool_boxes(&sb).contains(&id);
        seen.push(format!("{when}: killed {killed}, claim {claimed:?}, purged {purged} after {:?}", t0.elapsed()));
        assert!(killed && !o.ok(), "the claimer was not killed {when}\n{o}");
        assert!(claimed.is_some(), "the claimer was killed {when} before claiming\n{o}");
        assert!(purged, "{when}: the box of a killed claimer is still there after 5 s: {seen:?}");
    }
    saw(sb.name, format!("{seen:?}"));
    wait_for("the pool to be refilled", 10, || idle_now(&sb).len() == 1);
    sb.raw(&["pool", "drain", "--all"]).expect_ok("pool drain --all");
    sb.assert_clean("killed claimers");
}
