//! Bad disk, low limits and bad input (issue 7, Reliability 4 and 5), through the CLI.
//!
//! * Disk: a read-only state root (tmpfs remounted ro), a state root that turns read-only
//!   under a container, a full state root (tmpfs `size=16k` filled; with one page left, so
//!   the failure comes late, at `state.json`, after init exists; and out of inodes), and a
//!   rootfs on a read-only filesystem (read-only bind mount).
//! * Limits: the caller's fd limit at 64 (`prlimit --nofile=64`, set in `pre_exec`), with and
//!   without 54 inherited fds, and a sweep of smaller soft limits; a config asking for
//!   RLIMIT_NOFILE soft 0 for its program.
//! * Bad input: corrupt, truncated, mutated and huge `state.json` files under `state`, `list`,
//!   `kill` and `delete --force`; and mutated config.json files under `create` (a fixed-seed
//!   mutation loop, `TINYRUN_FUZZ_N` inputs, default 60; `conformance/fuzz` runs more).
//!
//! Every failure must be clean: exit 1, one error line naming the path or field, no panic
//! (a panic aborts: signal 6), and nothing left behind (state dir, cgroup dir, process). In the
//! fd-limit sweep and the loops over inputs, a case that shows an open runtime bug listed in
//! [`KNOWN_BUGS`] (recognised by symptom) is reported without failing, unless
//! `TINYRUN_STRICT=1` (`conformance/run-all` and `conformance/faults` set it).
//!
//! Every mount a test makes is below its scratch dir and tracked, so the harness unmounts it
//! even when the test panics.

use std::fs;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tinyrun_conformance::{
    cgroup_dirs, cmdline, excuse_known_bugs, require_root, shared_rootfs, Bundle, KnownBug, Out, Runtime,
};

/// Runtime bugs this file found that are still open, recognised by their symptom in a failure's
/// text (not by case: which fd limit or input shows a bug moves as the runtime changes). Delete
/// an entry when its bug is fixed.
const KNOWN_BUGS: &[KnownBug] = &[];

/// Exit 1 with exactly one error line containing every one of `needles`, not a signal or panic.
fn clean_failure(o: &Out, needles: &[&str]) -> Result<(), String> {
    if o.ok() {
        return Err(format!("expected a failure\n{o}"));
    }
    if o.code() != Some(1) || o.stderr.contains("panicked") {
        return Err(format!("not a clean failure (exit {:?}, signal {:?})\n{o}", o.code(), o.status.signal()));
    }
    let lines: Vec<&str> = o.stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.len() != 1 {
        return Err(format!("one error line expected\n{o}"));
    }
    for n in needles {
        if !lines[0].contains(n) {
            return Err(format!("error should contain {n:?}\n{o}"));
        }
    }
    Ok(())
}

#[track_caller]
fn expect_clean_failure(o: &Out, needles: &[&str]) {
    if let Err(e) = clean_failure(o, needles) {
        panic!("{e}");
    }
}

/// Nothing of `id` left under `root`: no state dir, no cgroup dir, no process of the test.
fn nothing_left(rt: &Runtime, root: &Path, id: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut procs = rt.leftovers();
    while !procs.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        procs = rt.leftovers();
    }
    let procs: Vec<String> = procs.iter().map(|p| format!("{p} {:?}", cmdline(*p))).collect();
    let dir = root.join(id);
    let cg = cgroup_dirs(id);
    if procs.is_empty() && !dir.exists() && cg.is_empty() {
        return Ok(());
    }
    let files: Vec<String> = fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
        .unwrap_or_default();
    Err(format!(
        "left behind: processes {procs:?}, state dir {}, cgroup dirs {cg:?}",
        if dir.exists() { format!("{files:?}") } else { "gone".into() }
    ))
}

#[track_caller]
fn assert_nothing_left(rt: &Runtime, root: &Path, id: &str) {
    if let Err(e) = nothing_left(rt, root, id) {
        panic!("{id}: {e}");
    }
}

fn mount(args: &[&str]) {
    let st = Command::new("mount").args(args).status().expect("run mount");
    assert!(st.success(), "mount {args:?} failed");
}

/// A tmpfs at a new dir below the test's scratch dir, tracked for unmounting.
fn tmpfs(rt: &Runtime, options: &str) -> PathBuf {
    let dir = rt.tempdir().join("mnt");
    fs::create_dir(&dir).unwrap();
    rt.track_mount(&dir);
    mount(&["-t", "tmpfs", "-o", options, "tinyrun-limits", dir.to_str().unwrap()]);
    dir
}

/// `<bin> --root ROOT args...`.
fn with_root(rt: &Runtime, root: &Path, args: &[&str]) -> Out {
    let mut a = vec!["--root", root.to_str().unwrap()];
    a.extend_from_slice(args);
    rt.run_raw(&a)
}

// ---------------------------------------------------------------------------------------------
// Disk

#[test]
fn readonly_state_root() {
    require_root!();
    let rt = Runtime::new("lim_ro");
    let mnt = tmpfs(&rt, "size=64k");
    fs::create_dir(mnt.join("root")).unwrap();
    mount(&["-o", "remount,ro", mnt.to_str().unwrap()]);
    let root = mnt.join("root");
    let b = rt.bundle(&["/bin/probe", "exit", "0"]);
    let state_dir = root.join(&b.id);

    for verb in ["create", "run"] {
        let o = with_root(&rt, &root, &[verb, "--bundle", b.path(), &b.id]);
        expect_clean_failure(&o, &[state_dir.to_str().unwrap(), "Read-only file system"]);
        assert_nothing_left(&rt, &root, &b.id);
        eprintln!("{verb} on a read-only root: {}", o.stderr.trim());
    }
    // A root that does not exist yet on a read-only filesystem: the error names the root.
    let missing = mnt.join("missing");
    let o = with_root(&rt, &missing, &["create", "--bundle", b.path(), &b.id]);
    expect_clean_failure(&o, &[missing.to_str().unwrap(), "Read-only file system"]);
    // Read-only commands still work; delete --force of an unknown id is fine.
    expect_clean_failure(&with_root(&rt, &root, &["state", &b.id]), &["does not exist"]);
    with_root(&rt, &root, &["list"]).expect_ok("list on a read-only root");
    with_root(&rt, &root, &["delete", "--force", &b.id]).expect_ok("delete --force of an unknown id");
    assert_nothing_left(&rt, &root, &b.id);
}

#[test]
fn state_root_turns_readonly_under_a_container() {
    require_root!();
    let rt = Runtime::new("lim_rolate");
    let mnt = tmpfs(&rt, "size=1m");
    let root = mnt.join("root");
    let b = rt.bundle(&["/bin/probe", "sleep", "600"]);
    with_root(&rt, &root, &["create", "--bundle", b.path(), &b.id]).expect_ok("create");
    with_root(&rt, &root, &["start", &b.id]).expect_ok("start");
    mount(&["-o", "remount,ro", mnt.to_str().unwrap()]);

    let st = with_root(&rt, &root, &["state", &b.id]).expect_ok("state on a read-only root");
    assert!(st.stdout.contains("\"running\""), "{st}");
    with_root(&rt, &root, &["kill", &b.id, "KILL"]).expect_ok("kill on a read-only root");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !with_root(&rt, &root, &["state", &b.id]).stdout.contains("\"stopped\"") {
        assert!(Instant::now() < deadline, "not stopped after kill");
        std::thread::sleep(Duration::from_millis(50));
    }
    let state_dir = root.join(&b.id);
    let o = with_root(&rt, &root, &["delete", &b.id]);
    expect_clean_failure(&o, &[state_dir.to_str().unwrap(), "Read-only file system"]);
    // The record is still there and still true.
    let st = with_root(&rt, &root, &["state", &b.id]).expect_ok("state after the failed delete");
    assert!(st.stdout.contains("\"stopped\""), "{st}");
    eprintln!("delete with the root turned read-only: {}", o.stderr.trim());

    mount(&["-o", "remount,rw", mnt.to_str().unwrap()]);
    with_root(&rt, &root, &["delete", &b.id]).expect_ok("delete once the root is writable again");
    assert_nothing_left(&rt, &root, &b.id);
}

/// Writes 4 KiB blocks to `file` until the filesystem is full.
fn fill(file: &Path) {
    use std::io::Write;
    let mut f = fs::File::create(file).unwrap();
    let block = [0u8; 4096];
    loop {
        if let Err(e) = f.write_all(&block).and_then(|_| f.sync_data()) {
            assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "filling {}: {e}", file.display());
            break;
        }
    }
    // What did not fit may have been partly written: round down to whole pages.
    let len = fs::metadata(file).unwrap().len();
    f.set_len(len - len % 4096).unwrap();
}

#[test]
fn full_state_root() {
    require_root!();
    let rt = Runtime::new("lim_full");
    let mnt = tmpfs(&rt, "size=16k");
    let root = mnt.join("root");
    fs::create_dir(&root).unwrap();
    let filler = mnt.join("filler");
    fill(&filler);
    let b = rt.bundle(&["/bin/probe", "sleep", "600"]);
    let state_dir = root.join(&b.id);

    // Full: the first file create writes (config.json today) does not fit. The error names a
    // path in the state dir.
    let o = with_root(&rt, &root, &["create", "--bundle", b.path(), &b.id]);
    expect_clean_failure(&o, &[state_dir.to_str().unwrap(), "No space left on device"]);
    assert_nothing_left(&rt, &root, &b.id);
    eprintln!("full root: {}", o.stderr.trim());

    // One page free: config.json fits, state.json does not (today). By then init is made and
    // waiting, its cgroup exists: all of it must be undone.
    let len = fs::metadata(&filler).unwrap().len();
    fs::OpenOptions::new().write(true).open(&filler).unwrap().set_len(len - 4096).unwrap();
    let o = with_root(&rt, &root, &["create", "--bundle", b.path(), &b.id]);
    expect_clean_failure(&o, &[state_dir.to_str().unwrap(), "No space left on device"]);
    assert_nothing_left(&rt, &root, &b.id);
    eprintln!("one page left: {}", o.stderr.trim());
    expect_clean_failure(&with_root(&rt, &root, &["state", &b.id]), &["does not exist"]);
    with_root(&rt, &root, &["delete", "--force", &b.id]).expect_ok("delete --force");

    // Out of inodes: the state dir itself can't be made.
    let mnt = tmpfs(&rt, "size=1m,nr_inodes=16");
    let root = mnt.join("root");
    fs::create_dir(&root).unwrap();
    let mut n = 0;
    while fs::write(mnt.join(format!("f{n}")), b"").is_ok() {
        n += 1;
    }
    let o = with_root(&rt, &root, &["create", "--bundle", b.path(), &b.id]);
    expect_clean_failure(&o, &[root.join(&b.id).to_str().unwrap(), "No space left on device"]);
    assert_nothing_left(&rt, &root, &b.id);
    eprintln!("no inodes left ({n} files made): {}", o.stderr.trim());
}

#[test]
fn rootfs_on_a_readonly_filesystem() {
    require_root!();
    let rt = Runtime::new("lim_rofs");
    let rofs = rt.tempdir().join("rootfs");
    fs::create_dir(&rofs).unwrap();
    rt.track_mount(&rofs);
    mount(&["--bind", shared_rootfs().to_str().unwrap(), rofs.to_str().unwrap()]);
    mount(&["-o", "remount,bind,ro", rofs.to_str().unwrap()]);
    let on_rofs = |b: &Bundle, readonly: bool| {
        b.config_mut(|c| c["root"] = json!({"path": rofs.to_str().unwrap(), "readonly": readonly}));
    };

    // root.readonly: true works, and the root really is read-only.
    let b = rt.bundle(&["/bin/probe", "hostname"]);
    on_rofs(&b, true);
    let o = rt.run_bundle(&b).expect_ok("run on a read-only rootfs");
    assert_eq!(o.kv()["hostname"], "tinyrun", "{o}");
    b.args(&["/bin/probe", "write", "/x"]);
    let o = rt.run_bundle(&b);
    assert_eq!(o.kv().get("write").map(String::as_str), Some("EROFS"), "{o}");
    assert_nothing_left(&rt, rt.root(), &b.id);

    // readonly: false on a read-only filesystem also works while every mount point exists...
    let b = rt.bundle(&["/bin/probe", "hostname"]);
    on_rofs(&b, false);
    rt.run_bundle(&b).expect_ok("run, root.readonly false, on a read-only rootfs");
    assert_nothing_left(&rt, rt.root(), &b.id);
    // ...and a mount point that must be made fails cleanly, naming it.
    b.add_mount(json!({"destination": "/newdir", "type": "tmpfs", "source": "tmpfs"}));
    let o = rt.run_bundle(&b);
    expect_clean_failure(&o, &["/newdir"]);
    assert!(o.stderr.contains("EROFS") || o.stderr.contains("Read-only"), "{o}");
    assert_nothing_left(&rt, rt.root(), &b.id);
    eprintln!("missing mount point on a read-only rootfs: {}", o.stderr.trim());
}

// ---------------------------------------------------------------------------------------------
// fd limit

/// A container asking for RLIMIT_NOFILE soft 0 (legal: the program may want no files) must be
/// created, stay `created`, and run when started.
#[test]
fn config_asks_for_nofile_soft_0() {
    require_root!();
    let rt = Runtime::new("lim_nofile0");
    let b = rt.bundle(&["/bin/true"]);
    b.config_mut(|c| c["process"]["rlimits"] = json!([{"type": "RLIMIT_NOFILE", "soft": 0, "hard": 64}]));
    let verdict = (|| -> Result<String, String> {
        let o = rt.create(&b);
        if !o.ok() {
            return clean_failure(&o, &["RLIMIT_NOFILE"]).map(|_| format!("refused: {}", o.stderr.trim()));
        }
        std::thread::sleep(Duration::from_millis(200));
        let st = rt.status(&b.id);
        if st.as_deref() != Some("created") {
            return Err(format!("create succeeded, but 200 ms later the container is {st:?}"));
        }
        let s = rt.run(&["start", &b.id]);
        if !s.ok() {
            return Err(format!("start failed: {}", s.stderr.trim()));
        }
        Ok("created, then started".into())
    })();
    rt.run(&["delete", "--force", &b.id]);
    assert_nothing_left(&rt, rt.root(), &b.id);
    match verdict {
        Ok(v) => eprintln!("RLIMIT_NOFILE soft 0: {v}"),
        Err(e) => {
            let failed = excuse_known_bugs(KNOWN_BUGS, vec![format!("RLIMIT_NOFILE soft 0: {e}")]);
            assert!(failed.is_empty(), "{}", failed.join("\n"));
        }
    }
}

/// `cmd` with RLIMIT_NOFILE soft `soft` (hard `hard`), after `inherit` extra fds (not
/// close-on-exec, on /dev/null, in slots not already open) are opened, as a caller with open
/// files would pass them.
fn limited(mut cmd: Command, soft: u64, hard: u64, inherit: i32) -> Command {
    // SAFETY: between fork and exec only async-signal-safe calls are made (open, fcntl, dup2,
    // setrlimit) and nothing is allocated (the path is a static C string).
    unsafe {
        cmd.pre_exec(move || {
            if inherit > 0 {
                let fd = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let (mut made, mut n) = (1, 3);
                while made < inherit {
                    if libc::fcntl(n, libc::F_GETFD) == -1 {
                        if libc::dup2(fd, n) < 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        made += 1;
                    }
                    n += 1;
                }
            }
            let lim = libc::rlimit { rlim_cur: soft, rlim_max: hard };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}

/// The container asks for no more fds than the caller has: root on this host lacks
/// CAP_SYS_RESOURCE (CapEff misses bit 24), so no process can raise its hard limit.
fn nofile_64(b: &Bundle) {
    b.config_mut(|c| c["process"]["rlimits"] = json!([{"type": "RLIMIT_NOFILE", "soft": 64, "hard": 64}]));
}

#[test]
fn caller_fd_limit_64() {
    require_root!();
    let rt = Runtime::new("lim_fd");
    let b = rt.bundle(&["/bin/probe", "fds"]);
    nofile_64(&b);
    let run = |args: &[&str], inherit: i32| rt.output(limited(rt.command(args), 64, 64, inherit));

    // The whole lifecycle with 64 fds.
    let o = run(&["run", "--bundle", b.path(), &b.id], 0).expect_ok("run with nofile=64");
    let fds: Vec<&str> = o.stdout.lines().filter(|l| l.starts_with("fd.")).collect();
    assert_eq!(fds.len(), 3, "the program gets fds 0-2 only: {fds:?}");
    assert_nothing_left(&rt, rt.root(), &b.id);
    b.args(&["/bin/probe", "sleep", "600"]);
    run(&["create", "--bundle", b.path(), &b.id], 0).expect_ok("create with nofile=64");
    run(&["start", &b.id], 0).expect_ok("start with nofile=64");
    run(&["state", &b.id], 0).expect_ok("state with nofile=64");
    run(&["kill", &b.id, "KILL"], 0).expect_ok("kill with nofile=64");
    run(&["delete", "--force", &b.id], 0).expect_ok("delete with nofile=64");
    assert_nothing_left(&rt, rt.root(), &b.id);

    // 54 of the 64 already taken by fds the caller passes down.
    b.args(&["/bin/probe", "fds"]);
    let o = run(&["run", "--bundle", b.path(), &b.id], 54);
    if o.ok() {
        let fds: Vec<&str> = o.stdout.lines().filter(|l| l.starts_with("fd.")).collect();
        assert_eq!(fds.len(), 3, "inherited fds must not reach the program: {fds:?}");
    } else {
        expect_clean_failure(&o, &["Too many open files"]);
    }
    eprintln!(
        "nofile=64 with 54 inherited fds: {}",
        if o.ok() { "ok".to_string() } else { o.stderr.trim().to_string() }
    );
    assert_nothing_left(&rt, rt.root(), &b.id);

    // A config asking for more than the caller's hard limit: works where root may raise it,
    // else fails naming the limit.
    let b2 = rt.bundle(&["/bin/true"]);
    b2.config_mut(|c| c["process"]["rlimits"] = json!([{"type": "RLIMIT_NOFILE", "soft": 1024, "hard": 1024}]));
    let o = run(&["run", "--bundle", b2.path(), &b2.id], 0);
    if !o.ok() {
        expect_clean_failure(&o, &["RLIMIT_NOFILE"]);
    }
    eprintln!("nofile=64, config asks 1024: {}", if o.ok() { "ok".to_string() } else { o.stderr.trim().to_string() });
    assert_nothing_left(&rt, rt.root(), &b2.id);
}

/// The runtime raises its own fd soft limit to the hard one (as runc does),
/// but what it runs keeps the caller's when the config sets none: for the
/// container's program and for an exec'd process alike.
#[test]
fn caller_nofile_reaches_the_program() {
    require_root!();
    let rt = Runtime::new("lim_pass");
    let b = rt.bundle(&["/bin/sh", "-c", "/bin/probe rlimits; exec sleep 30"]);
    b.config_mut(|c| {
        c["process"].as_object_mut().unwrap().remove("rlimits");
    });
    let run = rt.spawn_cmd(limited(rt.command(&["run", "--bundle", b.path(), &b.id]), 40, 64, 0));
    rt.wait_status(&b.id, "running");
    let o = rt.output(limited(rt.command(&["exec", &b.id, "/bin/probe", "rlimits"]), 48, 64, 0));
    let exec = o.expect_ok("exec").kv();
    assert_eq!((exec["RLIMIT_NOFILE.soft"].as_str(), exec["RLIMIT_NOFILE.hard"].as_str()), ("48", "64"), "{exec:?}");
    rt.run(&["kill", &b.id, "KILL"]).expect_ok("kill");
    let inside = run.wait().kv();
    assert_eq!(
        (inside["RLIMIT_NOFILE.soft"].as_str(), inside["RLIMIT_NOFILE.hard"].as_str()),
        ("40", "64"),
        "{inside:?}"
    );
    assert_nothing_left(&rt, rt.root(), &b.id);
}

#[test]
fn caller_fd_limit_sweep() {
    require_root!();
    let rt = Runtime::new("lim_fdsweep");
    let mut failed = Vec::new();
    // Below 4 the dynamic loader itself fails (exit 127), before any runtime code.
    // Hard limit 64: the runtime raises its own soft limit. Hard = soft with a memory
    // limit: no headroom, and libcgroups' manager (which needs spare fds) is used.
    let cases = (4..=16u64).map(|s| (s, 64, false)).chain((4..=16u64).map(|s| (s, s, true)));
    for (soft, hard, memory) in cases {
        let b = rt.bundle(&["/bin/true"]);
        nofile_64(&b);
        if memory {
            b.config_mut(|c| c["linux"]["resources"]["memory"] = json!({"limit": 256 << 20}));
        }
        let o = rt.output(limited(rt.command(&["run", "--bundle", b.path(), &b.id]), soft, hard, 0));
        let verdict =
            if o.ok() { Ok(()) } else { clean_failure(&o, &[]) }.and_then(|_| nothing_left(&rt, rt.root(), &b.id));
        let name = format!("nofile={soft}:{hard}{}", if memory { " +memory" } else { "" });
        let what = if o.ok() {
            "ok".to_string()
        } else {
            let text = o.stderr.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim().to_string();
            format!("exit {:?} signal {:?}: {text}", o.code(), o.status.signal())
        };
        match &verdict {
            Ok(()) => eprintln!("{name:<20} ok: {what}"),
            Err(e) => {
                eprintln!("{name:<20} FAIL: {e}");
                failed.push(format!("{name}: {e}"));
            }
        }
        // Whatever a failed case left is removed here, so the next one starts clean.
        rt.run(&["delete", "--force", &b.id]);
    }
    let failed = excuse_known_bugs(KNOWN_BUGS, failed);
    assert!(failed.is_empty(), "{failed:#?}");
}

// ---------------------------------------------------------------------------------------------
// Bad input: a small deterministic PRNG (xorshift64*), so a failing input can be replayed.

struct Rng(u64);

impl Rng {
    fn from_env() -> Rng {
        let seed =
            std::env::var("TINYRUN_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x7157_2a11_d00d_f00d);
        Rng(seed.max(1))
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn fuzz_n() -> usize {
    std::env::var("TINYRUN_FUZZ_N").ok().and_then(|s| s.parse().ok()).unwrap_or(60)
}

/// Interesting replacement values for a JSON node.
fn odd_value(rng: &mut Rng) -> Value {
    let choices = [
        json!(null),
        json!(true),
        json!(-1),
        json!(0),
        json!(4294967296u64),
        json!(u64::MAX),
        json!(-9223372036854775807i64),
        json!(1.5),
        json!(""),
        json!("\u{0}"),
        json!("../../.."),
        json!("/"),
        json!("x".repeat(5000)),
        json!([]),
        json!([null]),
        json!({}),
        json!({"": null}),
    ];
    choices[rng.below(choices.len())].clone()
}

/// Visits every node of `v`, returning pointers (JSON pointer strings).
fn pointers(v: &Value, at: String, out: &mut Vec<String>) {
    out.push(at.clone());
    match v {
        Value::Object(m) => {
            m.iter().for_each(|(k, c)| pointers(c, format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")), out))
        }
        Value::Array(a) => a.iter().enumerate().for_each(|(i, c)| pointers(c, format!("{at}/{i}"), out)),
        _ => {}
    }
}

/// One mutation of `base`: either of the JSON tree (replace, delete or duplicate a node) or of
/// the text (flip, insert, delete, truncate).
fn mutate(base: &Value, rng: &mut Rng) -> Vec<u8> {
    if rng.below(2) == 0 {
        let mut v = base.clone();
        for _ in 0..1 + rng.below(3) {
            let mut ptrs = Vec::new();
            pointers(&v, String::new(), &mut ptrs);
            let p = ptrs[rng.below(ptrs.len())].clone();
            let (parent, key) = match p.rsplit_once('/') {
                Some((a, b)) => (a.to_string(), b.replace("~1", "/").replace("~0", "~")),
                None => continue,
            };
            let op = rng.below(3);
            let new = odd_value(rng);
            let dup = v.pointer(&p).cloned();
            match v.pointer_mut(&parent) {
                Some(Value::Object(m)) => match op {
                    0 => drop(m.remove(&key)),
                    1 => drop(m.insert(format!("{key}_"), dup.unwrap_or(Value::Null))),
                    _ => drop(m.insert(key, new)),
                },
                Some(Value::Array(a)) => {
                    let i: usize = key.parse().unwrap_or(0).min(a.len().saturating_sub(1));
                    match op {
                        0 if !a.is_empty() => drop(a.remove(i)),
                        1 => a.push(dup.unwrap_or(Value::Null)),
                        _ if !a.is_empty() => a[i] = new,
                        _ => a.push(new),
                    }
                }
                _ => {}
            }
        }
        serde_json::to_vec(&v).unwrap()
    } else {
        let mut t = serde_json::to_vec_pretty(base).unwrap();
        for _ in 0..1 + rng.below(4) {
            if t.is_empty() {
                break;
            }
            let i = rng.below(t.len());
            match rng.below(4) {
                0 => t[i] ^= 1 << rng.below(8),
                1 => {
                    let bytes = b"{}[]\",:0-e\\\x00\xff";
                    t.insert(i, bytes[rng.below(bytes.len())]);
                }
                2 => drop(t.remove(i)),
                _ => t.truncate(i),
            }
        }
        t
    }
}

/// Handcrafted bad state files: (name, bytes).
fn bad_state_files(template: &[u8]) -> Vec<(String, Vec<u8>)> {
    let t: Value = serde_json::from_slice(template).unwrap();
    let with = |k: &str, v: Value| {
        let mut c = t.clone();
        c[k] = v;
        serde_json::to_vec(&c).unwrap()
    };
    let without = |k: &str| {
        let mut c = t.clone();
        c.as_object_mut().unwrap().remove(k);
        serde_json::to_vec(&c).unwrap()
    };
    let mut v: Vec<(String, Vec<u8>)> = vec![
        ("empty".into(), vec![]),
        ("whitespace".into(), b"   \n".to_vec()),
        ("null".into(), b"null".to_vec()),
        ("array".into(), b"[]".to_vec()),
        ("number".into(), b"42".to_vec()),
        ("non-utf8".into(), b"{\"id\":\"\xff\xfe\"}".to_vec()),
        ("nul bytes".into(), vec![0; 4096]),
        ("deep nesting".into(), b"[".repeat(100_000)),
        ("pid is a string".into(), with("pid", json!("12"))),
        ("pid too big".into(), with("pid", json!(4294967296u64))),
        ("pid -1".into(), with("pid", json!(-1))),
        ("pid 0".into(), with("pid", json!(0))),
        ("pid i32::MAX".into(), with("pid", json!(i32::MAX))),
        ("start_time negative".into(), with("start_time", json!(-1))),
        ("start_time float".into(), with("start_time", json!(1.5))),
        ("no pid".into(), without("pid")),
        ("no id".into(), without("id")),
        ("id of another container".into(), with("id", json!("someone-else"))),
        ("bundle null".into(), with("bundle", json!(null))),
        ("annotations array".into(), with("annotations", json!([]))),
        ("trailing garbage".into(), [template, b"}}garbage"].concat()),
        ("huge annotation (16 MiB)".into(), with("annotations", json!({"big": "a".repeat(16 << 20)}))),
        ("huge garbage (16 MiB)".into(), vec![b'x'; 16 << 20]),
    ];
    for cut in [1, template.len() / 4, template.len() / 2, template.len() - 1] {
        v.push((format!("truncated to {cut} bytes"), template[..cut].to_vec()));
    }
    v
}

/// Safe to hand to `kill` and `delete --force`: it names no process and no cgroup but the
/// test's own (a crafted record could otherwise make them signal or remove anything).
fn safe_for_mutating_commands(bytes: &[u8], template: &Value) -> bool {
    let Ok(v) = serde_json::from_slice::<Value>(bytes) else {
        return true;
    };
    let pid_ok = match v.get("pid") {
        None => true,
        Some(p) => p == &template["pid"] || p.as_i64().is_none_or(|n| n <= 0 || n > 1 << 22),
    };
    let cg_ok = v.get("cgroup_path").is_none_or(|c| c == &template["cgroup_path"]);
    pid_ok && cg_ok
}

#[test]
fn corrupt_state_files_give_clean_errors() {
    require_root!();
    let rt = Runtime::new("lim_state");
    // A real record to start from; its init is dead once the container is deleted.
    let b = rt.bundle(&["/bin/probe", "sleep", "600"]);
    rt.create(&b).expect_ok("create");
    let template = fs::read(rt.root().join(&b.id).join("state.json")).unwrap();
    let config = fs::read(rt.root().join(&b.id).join("config.json")).unwrap();
    rt.run(&["delete", "--force", &b.id]).expect_ok("delete");
    let tv: Value = serde_json::from_slice(&template).unwrap();

    let mut inputs = bad_state_files(&template);
    let mut rng = Rng::from_env();
    for i in 0..fuzz_n() {
        inputs.push((format!("mutation {i}"), mutate(&tv, &mut rng)));
    }
    let slots: Vec<String> = (0..8).map(|_| rt.new_id()).collect();
    let (mut state_ok, mut state_err, mut removed, mut refused) = (0, 0, 0, Vec::new());
    let mut failures = Vec::new();
    for batch in inputs.chunks(slots.len()) {
        for ((_, bytes), id) in batch.iter().zip(&slots) {
            let dir = rt.root().join(id);
            let _ = fs::create_dir_all(&dir);
            fs::write(dir.join("config.json"), &config).unwrap();
            fs::write(dir.join("state.json"), bytes).unwrap();
        }
        // `state` on every slot at once, then one `list`.
        let running: Vec<_> = batch.iter().zip(&slots).map(|(_, id)| rt.spawn(&["state", id])).collect();
        for ((name, _), r) in batch.iter().zip(running) {
            let o = r.wait();
            if o.ok() {
                match serde_json::from_str::<Value>(&o.stdout) {
                    Ok(_) => state_ok += 1,
                    Err(e) => failures.push(format!("{name}: state printed non-JSON ({e})\n{o}")),
                }
            } else if let Err(e) = clean_failure(&o, &[]) {
                failures.push(format!("{name}: state: {e}"));
            } else {
                state_err += 1;
            }
        }
        let l = rt.run(&["list", "--format", "json"]);
        if !l.ok() || serde_json::from_str::<Value>(&l.stdout).is_err() {
            failures.push(format!("list over {:?}: {l}", batch.iter().map(|(n, _)| n).collect::<Vec<_>>()));
        }
        for ((name, bytes), id) in batch.iter().zip(&slots) {
            if !safe_for_mutating_commands(bytes, &tv) {
                let _ = fs::remove_dir_all(rt.root().join(id));
                continue;
            }
            let k = rt.run(&["kill", id, "KILL"]);
            if !k.ok() {
                if let Err(e) = clean_failure(&k, &[]) {
                    failures.push(format!("{name}: kill: {e}"));
                }
            }
            let d = rt.run(&["delete", "--force", id]);
            if d.ok() {
                removed += 1;
            } else {
                match clean_failure(&d, &[]) {
                    Ok(()) => refused.push(format!("{name}: {}", d.stderr.trim().split("msg=").last().unwrap_or(""))),
                    Err(e) => failures.push(format!("{name}: delete --force: {e}")),
                }
            }
            let _ = fs::remove_dir_all(rt.root().join(id));
        }
    }
    eprintln!(
        "{} state files: state printed JSON {state_ok}, failed cleanly {state_err}; delete --force removed {removed}, refused {}",
        inputs.len(),
        refused.len()
    );
    for r in refused.iter().take(5) {
        eprintln!("  delete --force refused {r}");
    }
    let failures = excuse_known_bugs(KNOWN_BUGS, failures);
    assert!(failures.is_empty(), "{} unclean results:\n{}", failures.len(), failures.join("\n"));
    for id in &slots {
        assert_nothing_left(&rt, rt.root(), id);
    }
}

/// Make a mutated config safe to create on this host: its own cgroup, the base's namespaces
/// with nothing joined by path, no hooks or sysctls, the rootfs a private copy, no bind of a
/// host path the base does not bind, no `..` in container paths. The rest stays as mutated.
fn sanitise(c: &mut Value, base: &Value, id: &str, rootfs: &Path) {
    let Some(obj) = c.as_object_mut() else { return };
    obj.remove("hooks");
    if let Some(r) = obj.get_mut("root").and_then(Value::as_object_mut) {
        r.insert("path".into(), json!(rootfs));
    }
    if let Some(Value::Array(mounts)) = obj.get_mut("mounts") {
        let none = Vec::new();
        let allowed: Vec<&Value> = base["mounts"].as_array().unwrap_or(&none).iter().map(|m| &m["source"]).collect();
        mounts.retain(|m| {
            let src_ok = match m.get("source") {
                Some(Value::String(s)) if s.starts_with('/') || s.contains("..") => allowed.contains(&&m["source"]),
                _ => true,
            };
            let dst_ok = !m.get("destination").and_then(Value::as_str).is_some_and(|d| d.contains(".."));
            src_ok && dst_ok
        });
    }
    if let Some(l) = obj.get_mut("linux").and_then(Value::as_object_mut) {
        l.insert("cgroupsPath".into(), json!(format!("/tinyrun-test/{id}")));
        let mut ns = base["linux"]["namespaces"].clone();
        if let Some(a) = ns.as_array_mut() {
            a.iter_mut().filter_map(Value::as_object_mut).for_each(|n| drop(n.remove("path")));
        }
        l.insert("namespaces".into(), ns);
        l.remove("sysctl");
        l.remove("rootfsPropagation");
        for key in ["maskedPaths", "readonlyPaths"] {
            if let Some(Value::Array(a)) = l.get_mut(key) {
                a.retain(|p| !p.as_str().is_some_and(|s| s.contains("..")));
            }
        }
    }
}

#[test]
fn malformed_configs_leave_nothing() {
    require_root!();
    let rt = Runtime::new("lim_config");
    let b = rt.bundle(&["/bin/probe", "sleep", "600"]);
    let rootfs = b.writable_rootfs();
    let mut bases = vec![b.config()];
    for name in ["limits.json", "userns.json"] {
        let p = tinyrun_conformance::workspace_root().join("bundles/configs").join(name);
        if let Ok(text) = fs::read_to_string(&p) {
            bases.push(serde_json::from_str(&text).unwrap());
        }
    }
    let mut rng = Rng::from_env();
    let n = fuzz_n();
    // TINYRUN_FUZZ_ONLY=I replays input I alone (the same seed and N make the same inputs).
    let only: Option<usize> = std::env::var("TINYRUN_FUZZ_ONLY").ok().and_then(|s| s.parse().ok());
    let (mut created, mut refused) = (0, 0);
    let mut messages = std::collections::BTreeMap::<String, usize>::new();
    let mut failures = Vec::new();
    for i in 0..n {
        let base = &bases[i % bases.len()];
        let bytes = mutate(base, &mut rng);
        let bytes = match serde_json::from_slice::<Value>(&bytes) {
            Ok(mut v) => {
                sanitise(&mut v, base, &b.id, &rootfs);
                serde_json::to_vec(&v).unwrap()
            }
            Err(_) => bytes,
        };
        if only.is_some_and(|k| k != i) {
            continue;
        }
        fs::write(b.config_path(), &bytes).unwrap();
        let o = rt.create(&b);
        if o.ok() {
            created += 1;
            let st = rt.state(&b.id);
            if st.as_ref().is_none_or(|s| s["status"] != "created") {
                failures.push(format!(
                    "mutation {i}: create succeeded but state is {st:?}\nconfig: {}",
                    String::from_utf8_lossy(&bytes)
                ));
            }
            if let Err(e) = clean_failure(&rt.run(&["delete", "--force", &b.id]), &[]) {
                if !e.starts_with("expected a failure") {
                    failures.push(format!("mutation {i}: delete --force: {e}"));
                }
            }
        } else {
            refused += 1;
            match clean_failure(&o, &[]) {
                Ok(()) => {
                    let msg = o.stderr.split("msg=").last().unwrap_or("").trim();
                    let key: String = msg.trim_matches('"').split(':').next().unwrap_or("").chars().take(60).collect();
                    *messages.entry(key).or_default() += 1;
                }
                Err(e) => failures.push(format!("mutation {i}: {e}\nconfig: {}", String::from_utf8_lossy(&bytes))),
            }
        }
        if let Err(e) = nothing_left(&rt, rt.root(), &b.id) {
            failures.push(format!("mutation {i}: {e}\nconfig: {}", String::from_utf8_lossy(&bytes)));
            rt.run(&["delete", "--force", &b.id]);
        }
    }
    eprintln!("{n} mutated configs: {created} created and deleted, {refused} refused cleanly");
    for (m, k) in &messages {
        eprintln!("  {k:>3} x {m}");
    }
    let failures = excuse_known_bugs(KNOWN_BUGS, failures);
    assert!(failures.is_empty(), "{} bad outcomes:\n{}", failures.len(), failures.join("\n\n"));
}
