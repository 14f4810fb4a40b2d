//! `tinyrun sandbox` sessions, driven through the binary: a launched box lasts a session by
//! default (30 minutes, whatever the preset's run timeout), `sandbox extend` sets the lifetime it
//! has left, an idle timeout ends a box no command has touched (never one a command is running
//! in), an expired box's id says when and why it went from exec, cp, shell and terminate, and the
//! sandbox's errors read as sentences while runc's commands keep runc's log lines.
//!
//! Every test prints one line `SANDBOX <name>: <what it saw>` (run with --nocapture) before it
//! asserts, and leaves nothing behind (checked with the harness's `assert_clean`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tinyrun_conformance::sandbox::{saw, wait_for, Sbx};
use tinyrun_conformance::{require_root, Out};

/// `sandbox launch [common] OPTS` as given (no lifetime added): the id.
#[track_caller]
fn launch(sb: &Sbx, opts: &[&str]) -> String {
    let mut v = vec!["launch"];
    v.extend(sb.common());
    v.extend_from_slice(opts);
    sb.raw(&v).expect_ok("sandbox launch").stdout.trim().to_string()
}

/// The box's deadline (`sandbox-bundles/ID/expires`, unix ms, see the FILES of the man page) less
/// now.
fn left(sb: &Sbx, id: &str) -> Option<Duration> {
    let text = std::fs::read_to_string(sb.rt.root().join("sandbox-bundles").join(id).join("expires")).ok()?;
    let at: u64 = text.trim().parse().ok()?;
    let now = u64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).ok()?.as_millis()).ok()?;
    Some(Duration::from_millis(at.saturating_sub(now)))
}

fn exists(sb: &Sbx, id: &str) -> bool {
    sb.rt.root().join("sandbox").join(id).exists() || sb.rt.root().join("sandbox-bundles").join(id).exists()
}

/// `YYYY-MM-DDTHH:MM:SS[.fff...]Z`.
fn rfc3339(t: &str) -> bool {
    let b = t.as_bytes();
    let digits = |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    b.len() >= 20
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19)
        && t.ends_with('Z')
}

/// Whether `o` failed with 125 and the one line `tinyrun sandbox: sandbox ID expired at T
/// (WHY)`, T in RFC 3339, WHY containing `why`.
fn says_expired(o: &Out, id: &str, why: &str) -> bool {
    let line = o.stderr.trim();
    let Some(rest) = line.strip_prefix(&format!("tinyrun sandbox: sandbox {id} expired at ")) else { return false };
    let Some((t, reason)) = rest.split_once(" (") else { return false };
    o.code() == Some(125) && line.lines().count() == 1 && rfc3339(t) && reason.contains(why)
}

/// A plain launch lives 30 minutes, with `--type nano` too (its 5 s is a run's timeout); `extend
/// --lifetime` sets the lifetime left, longer or shorter: a box given 2 s then extended to 5 s
/// still runs a command after 3 s, and is purged within seconds after that.
#[test]
fn a_session_lasts_and_can_be_extended() {
    require_root!();
    let sb = Sbx::new("sbx_session_life");
    let plain = launch(&sb, &[]);
    let nano = launch(&sb, &["--type", "nano"]);
    let (plain_left, nano_left) = (left(&sb, &plain), left(&sb, &nano));
    for id in [&plain, &nano] {
        sb.raw(&["terminate", id]).expect_ok("terminate");
    }
    let id = launch(&sb, &["--lifetime", "2s"]);
    let extended = sb.raw(&["extend", &id, "--lifetime", "5s"]);
    let after_extend = left(&sb, &id);
    std::thread::sleep(Duration::from_secs(3));
    let late = sb.raw(&["exec", &id, "--", "echo", "still-here"]);
    let t0 = std::time::Instant::now();
    wait_for("the extended box to end", 6, || !exists(&sb, &id));
    let shortened_id = launch(&sb, &["--lifetime", "10m"]);
    let shortened = sb.raw(&["extend", &shortened_id, "--lifetime", "1s"]);
    wait_for("the shortened box to end", 5, || !exists(&sb, &shortened_id));
    saw(
        sb.name,
        format!(
            "left after launch: {plain_left:?}, --type nano: {nano_left:?}; extend 2s -> 5s: exit {:?} {:?}, left \
             {after_extend:?}; exec after 3 s: {:?} {:?}; gone {:?} after that; 10m shortened to 1s: exit {:?}",
            extended.code(),
            extended.stdout.trim(),
            late.code(),
            late.stdout.trim(),
            t0.elapsed(),
            shortened.code()
        ),
    );
    let session = Duration::from_secs(29 * 60)..=Duration::from_secs(30 * 60);
    assert!(plain_left.is_some_and(|l| session.contains(&l)), "a plain launch lives {plain_left:?}");
    assert!(nano_left.is_some_and(|l| session.contains(&l)), "launch --type nano lives {nano_left:?}");
    assert!(extended.ok() && rfc3339(extended.stdout.trim()), "extend prints the new end\n{extended}");
    assert!(after_extend.is_some_and(|l| l > Duration::from_secs(4)), "left after extend: {after_extend:?}");
    assert!(late.ok() && late.stdout == "still-here\n", "the extended box ended on its first lifetime\n{late}");
    assert!(shortened.ok(), "{shortened}");
    sb.assert_clean("extended and shortened boxes");
}

/// A box whose lifetime ended: its id says when and why from exec, cp, shell and terminate. An
/// idle timeout: a command longer than it keeps the box (a command at work is a touch), and so
/// does a command every now and then; left alone, the box is purged, and its id says so.
#[test]
fn an_expired_box_says_when() {
    require_root!();
    let sb = Sbx::new("sbx_session_expired");
    let gone = launch(&sb, &["--lifetime", "1s"]);
    wait_for("the box to reach the end of its lifetime", 6, || !exists(&sb, &gone));
    let dst = sb.rt.work().join("x");
    let outs = [
        ("exec", sb.raw(&["exec", &gone, "--", "true"])),
        ("cp", sb.raw(&["cp", &format!("{gone}:/work/x"), dst.to_str().expect("utf-8")])),
        ("shell", sb.raw(&["shell", &gone])),
        ("terminate", sb.raw(&["terminate", &gone])),
    ];
    let said: Vec<_> = outs.iter().map(|(c, o)| (*c, o.code(), o.stderr.trim().to_string())).collect();
    saw(sb.name, format!("after --lifetime 1s: {said:?}"));
    for (what, o) in &outs {
        assert!(says_expired(o, &gone, "lifetime"), "{what} of a box whose lifetime ended\n{o}");
    }

    let id = launch(&sb, &["--idle-timeout", "3s", "--lifetime", "60s"]);
    let long = sb.raw(&["exec", &id, "--", "sleep", "4"]);
    std::thread::sleep(Duration::from_millis(1000));
    let touched = sb.raw(&["exec", &id, "--", "echo", "alive"]);
    std::thread::sleep(Duration::from_millis(1000));
    let src = sb.rt.work().join("in.txt");
    std::fs::write(&src, "in\n").expect("write a file to copy in");
    let copied = sb.raw(&["cp", src.to_str().expect("utf-8"), &format!("{id}:/work/in.txt")]);
    let t0 = std::time::Instant::now();
    wait_for("the idle box to be purged", 8, || !exists(&sb, &id));
    let idle_for = t0.elapsed();
    let idle_exec = sb.raw(&["exec", &id, "--", "true"]);
    saw(
        sb.name,
        format!(
            "--idle-timeout 3s: exec sleep 4 {:?}, exec after 1 s {:?}, cp after 1 s {:?}, purged {idle_for:?} \
             later; exec then: {:?}",
            long.code(),
            touched.code(),
            copied.code(),
            idle_exec.stderr.trim(),
        ),
    );
    assert!(long.ok(), "a command longer than the idle timeout ended the box\n{long}");
    assert!(touched.ok() && touched.stdout == "alive\n", "{touched}");
    assert!(copied.ok(), "{copied}");
    assert!(says_expired(&idle_exec, &id, "no command touched it for 3s"), "{idle_exec}");
    sb.assert_clean("expired boxes");
}

/// The sandbox's failures read as a sentence (`tinyrun sandbox: ...`, one line), with `--log` still
/// getting its log line; runc's commands keep runc's `time=... level=error msg=...` line.
#[test]
fn sandbox_errors_are_sentences() {
    require_root!();
    let sb = Sbx::new("sbx_session_errors");
    let exec = sb.raw(&["exec", "sbx-000000000000", "--", "true"]);
    let log = sb.rt.work().join("log.json");
    let logged = sb.rt.run(&[
        "--log",
        log.to_str().expect("utf-8"),
        "--log-format",
        "json",
        "sandbox",
        "terminate",
        "sbx-000000000000",
    ]);
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    let state = sb.rt.run(&["state", "sbx-000000000000"]);
    saw(
        sb.name,
        format!(
            "sandbox exec: {:?}; sandbox terminate --log: {:?}, log {:?}; state: {:?}",
            exec.stderr.trim(),
            logged.stderr.trim(),
            log_text.trim(),
            state.stderr.trim()
        ),
    );
    let sentence = |o: &Out| {
        o.code() == Some(125)
            && o.stderr.trim().lines().count() == 1
            && o.stderr.starts_with("tinyrun sandbox: ")
            && o.stderr.contains("does not exist")
            && !o.stderr.contains("level=")
    };
    assert!(sentence(&exec), "{exec}");
    assert!(sentence(&logged), "{logged}");
    assert!(log_text.contains("\"level\":\"error\"") && log_text.contains("does not exist"), "{log_text}");
    let runc = state.stderr.trim();
    assert!(
        state.code() == Some(1)
            && runc.starts_with("time=\"")
            && runc.contains(" level=error msg=\"container does not exist")
            && !runc.contains("tinyrun sandbox"),
        "{state}"
    );
    sb.assert_clean("errors");
}

/// `terminate` of a one-shot run's box while the run is on: the command is killed at once, the
/// run reports it and removes its box, and terminate succeeds.
#[test]
fn terminate_ends_a_one_shot_run() {
    require_root!();
    let sb = Sbx::new("sbx_session_terminate_run");
    let run = sb.spawn_run(&["--json", "--timeout", "30s"], &["sleep", "25"]);
    let state = sb.rt.root().join("sandbox");
    wait_for("the one-shot box", 10, || {
        tinyrun_conformance::sandbox::names_in(&state).iter().any(|id| state.join(id).join("state.json").exists())
    });
    let id = tinyrun_conformance::sandbox::names_in(&state).into_iter().next().expect("a box");
    let t0 = std::time::Instant::now();
    let t = sb.raw(&["terminate", &id]);
    let out = run.wait();
    let took = t0.elapsed();
    saw(
        sb.name,
        format!(
            "terminate {id}: exit {:?} {:?}; the run after {took:?}: {}",
            t.code(),
            t.stderr.trim(),
            out.stdout.trim()
        ),
    );
    assert!(t.ok(), "{t}");
    assert!(took < Duration::from_secs(10), "the run went on for {took:?}");
    assert!(out.stdout.contains("\"signal\":\"SIGKILL\""), "{out}");
    sb.assert_clean("a terminated one-shot run");
}
