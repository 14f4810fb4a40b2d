//! The command-line surface callers depend on (cli-contract.md §2): `--version`, argument-count
//! errors, the Go `flag` spellings (`--flag=value`, `-flag`), options after the id, the legacy
//! `--criu`, and the `--log`/`--log-format` error channel containerd and podman parse.

use serde_json::Value;
use tinyrun_conformance::{require_root, Runtime};

/// Loose RFC 3339 check: `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`.
fn is_rfc3339(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| b.get(r.clone()).is_some_and(|x| x.iter().all(u8::is_ascii_digit));
    if b.len() < 20 || !(digits(0..4) && b[4] == b'-' && digits(5..7) && b[7] == b'-' && digits(8..10)) {
        return false;
    }
    if !(matches!(b[10], b'T' | b't')
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19))
    {
        return false;
    }
    let mut i = 19;
    if b[i] == b'.' {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return false;
        }
    }
    match &s[i..] {
        "Z" | "z" => true,
        tz => tz.len() == 6 && matches!(tz.as_bytes()[0], b'+' | b'-') && tz.as_bytes()[3] == b':',
    }
}

#[test]
fn rfc3339_checker_itself() {
    assert!(is_rfc3339("2026-11-29T10:45:03Z"));
    assert!(is_rfc3339("2026-11-29T10:45:03.123456789+01:00"));
    assert!(!is_rfc3339("2026-11-29 10:45:03"));
    assert!(!is_rfc3339("1700000000"));
}

#[test]
fn version_shape() {
    let rt = Runtime::new("version");
    for flag in ["--version", "-v"] {
        let o = rt.run_raw(&[flag]).expect_ok(flag);
        let lines: Vec<&str> = o.stdout.lines().collect();
        assert!(lines.len() >= 3, "{o}");
        // go-runc parses these three prefixes.
        assert!(lines[0].contains(" version "), "line 1: {o}");
        assert!(lines[1].starts_with("commit: "), "line 2: {o}");
        let spec = lines[2].strip_prefix("spec: ").unwrap_or_else(|| panic!("line 3: {o}"));
        let mut parts = spec.split('.');
        assert_eq!(parts.next(), Some("1"), "spec version {spec:?}");
        assert!(parts.next().is_some_and(|p| p.parse::<u32>().is_ok()), "spec version {spec:?}");
        assert!(parts.next().is_some_and(|p| p.starts_with(|c: char| c.is_ascii_digit())), "spec version {spec:?}");
        if rt.is_runc() {
            eprintln!("runc: skipping the tinyrun-only name and 3-line checks (runc adds go:/libseccomp:)");
            assert!(lines[0].starts_with("runc version "), "{o}");
        } else {
            assert!(lines[0].starts_with("tinyrun version "), "{o}");
            assert_eq!(lines.len(), 3, "exactly 3 lines: {o}");
            built_from_this_checkout(lines[1].trim_start_matches("commit: "));
        }
    }
}

/// The commit line names a commit of this checkout (HEAD or an ancestor: the binary may predate
/// the latest commit) when the tests run from a git checkout.
fn built_from_this_checkout(commit: &str) {
    let root = tinyrun_conformance::workspace_root();
    let git = |args: &[&str]| std::process::Command::new("git").args(args).current_dir(&root).output();
    if !git(&["rev-parse", "HEAD"]).is_ok_and(|o| o.status.success()) {
        eprintln!("not a git checkout: the commit line is not checked");
        return;
    }
    assert!(commit.len() == 40 && commit.chars().all(|c| c.is_ascii_hexdigit()), "commit line {commit:?}");
    let ancestor = git(&["merge-base", "--is-ancestor", commit, "HEAD"]).expect("git merge-base");
    assert!(ancestor.status.success(), "--version names {commit}, which is not in this checkout's history");
}

#[test]
fn wrong_argument_count_fails() {
    let rt = Runtime::new("argcount");
    for args in [&["state"][..], &["state", "a", "b"], &["create"], &["start"], &["delete"], &["kill"]] {
        let o = rt.run(args).expect_err(&format!("{args:?}"));
        assert_eq!(o.code(), Some(1), "runc exits 1 on usage errors\n{o}");
        assert!(o.stderr.to_lowercase().contains("argument"), "error should name the argument problem\n{o}");
    }
}

#[test]
fn unknown_subcommand_and_bad_log_format_fail() {
    let rt = Runtime::new("badflags");
    let o = rt.run(&["no-such-command"]);
    assert!(!o.ok(), "{o}");
    let o = rt.run_raw(&["--log-format", "yaml", "list"]).expect_err("--log-format yaml");
    assert!(o.stderr.contains("yaml") || o.stderr.contains("log-format"), "{o}");
}

/// `--flag=value`, `-flag value` and `-flag=value` for global and subcommand flags, plus
/// subcommand options after the container id (urfave/cli v1 reorders them).
#[test]
fn go_flag_spellings() {
    require_root!();
    let rt = Runtime::new("flagforms");
    let root = rt.root().to_str().unwrap().to_string();
    let b = rt.bundle(&["/bin/probe", "sleep", "60"]);
    let pidfile = rt.work().join("pid");
    let o = rt.run_raw(&[
        "-root",
        &root,
        "create",
        "-bundle",
        b.path(),
        &format!("-pid-file={}", pidfile.display()),
        &b.id,
    ]);
    o.expect_ok("create with single-dash flags");
    assert!(rt.root().join(&b.id).is_dir(), "state must live in <root>/<id>");
    assert!(pidfile.exists(), "-pid-file=X ignored");
    let o = rt.run_raw(&[&format!("--root={root}"), "state", &b.id]).expect_ok("--root=R state");
    let st: Value = serde_json::from_str(&o.stdout).expect("state JSON");
    assert_eq!(st["status"], "created");
    rt.run_raw(&["-root", &root, "delete", "-force", &b.id]).expect_ok("delete -force");
    assert!(!rt.root().join(&b.id).exists());

    // Options after the id: `create ID --bundle DIR`.
    let b2 = rt.bundle(&["/bin/probe", "sleep", "60"]);
    rt.run(&["create", &b2.id, "--bundle", b2.path()]).expect_ok("create ID --bundle DIR");
    assert_eq!(rt.state(&b2.id).expect("state")["bundle"], b2.path());
    // Repeated flags: the last one wins; booleans as --x=true.
    rt.run(&["delete", "--force=false", "--force=true", &b2.id]).expect_ok("delete --force=false --force=true");
    assert!(rt.state(&b2.id).is_none());
}

/// containerd 1.6 passes `--criu PATH`; it must be accepted and ignored.
#[test]
fn criu_flag_accepted() {
    let rt = Runtime::new("criu");
    rt.run(&["--criu", "/nonexistent/criu", "list"]).expect_ok("--criu X list");
    rt.run(&["--criu=x", "list", "-q"]).expect_ok("--criu=X list");
}

/// `--log FILE --log-format json`: every line is one JSON object and the last one is the error,
/// `{"level":"error","msg":…,"time":<RFC 3339>}` (containerd's getLastRuntimeError).
#[test]
fn json_log_on_error() {
    let rt = Runtime::new("jsonlog");
    let log = rt.work().join("log.json");
    let logs = log.to_str().unwrap();
    // podman's spelling (`--log-format=json --log=<path>`) and containerd's (separate values).
    let spellings = [vec!["--log-format=json", "--log", logs], vec!["--log", logs, "--log-format", "json"]];
    for mut args in spellings {
        let _ = std::fs::remove_file(&log);
        args.extend(["state", "no-such-container"]);
        let o = rt.run(&args).expect_err("state of an unknown id");
        let text = std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("log file not written ({e})\n{o}"));
        let lines: Vec<&str> = text.lines().collect();
        assert!(!lines.is_empty(), "empty log\n{o}");
        for l in &lines {
            let v: Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not one JSON object per line ({e}): {l:?}"));
            assert!(v.is_object(), "{l}");
            assert!(v["level"].is_string() && v["msg"].is_string(), "{l}");
            assert!(is_rfc3339(v["time"].as_str().unwrap_or("")), "time not RFC 3339: {l}");
        }
        let last: Value = serde_json::from_str(lines.last().unwrap()).unwrap();
        assert_eq!(last["level"], "error", "{text}");
        assert!(last["msg"].as_str().unwrap().contains("does not exist"), "{text}");
        // podman reads the whole file as ONE object: nothing but the error line.
        assert_eq!(lines.len(), 1, "exactly one line on error: {text}");
    }
}

#[test]
fn json_log_on_create_failure() {
    let rt = Runtime::new("jsonlogcreate");
    let log = rt.work().join("log.json");
    let empty = rt.tempdir();
    let id = rt.new_id();
    let o = rt.run(&[
        "--log",
        log.to_str().unwrap(),
        "--log-format",
        "json",
        "create",
        "--bundle",
        empty.to_str().unwrap(),
        &id,
    ]);
    o.expect_err("create without config.json");
    let text = std::fs::read_to_string(&log).expect("log written");
    let last: Value = serde_json::from_str(text.lines().last().expect("a line")).expect("JSON line");
    assert_eq!(last["level"], "error", "{text}");
    assert!(last["msg"].as_str().unwrap().contains("config.json"), "the error should name config.json: {text}");
}

/// Text format (the default): the error reaches stderr.
#[test]
fn text_error_on_stderr() {
    let rt = Runtime::new("texterr");
    let o = rt.run(&["state", "no-such-container"]).expect_err("state of an unknown id");
    assert_eq!(o.code(), Some(1), "{o}");
    assert!(o.stderr.contains("error"), "{o}");
    assert!(o.stderr.contains("does not exist"), "{o}");
    // With --log FILE (text), the error goes to the file, and to stderr too (runc's fatal()).
    let log = rt.work().join("log.txt");
    let o = rt.run(&["--log", log.to_str().unwrap(), "state", "no-such-container"]).expect_err("state");
    let text = std::fs::read_to_string(&log).expect("log written");
    assert!(text.contains("error") && text.contains("does not exist"), "{text}");
    assert!(o.stderr.contains("does not exist"), "{o}");
}
