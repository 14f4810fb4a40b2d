//! `tinyrun sandbox` run by an ordinary user: the sandbox's commands and defences again, as a
//! throw-away user each test makes (`unprivileged_common`), on two hosts: here, with no delegated
//! cgroup v2 subtree, and in the systemd guest (`conformance/run-systemd-tests`), where the user
//! has lingering and runs each command in a scope of its own user manager.
//!
//! * Every command: run, launch, cp in and out, exec, list, terminate, pool fill, run --pool,
//!   pool drain; state under `$XDG_RUNTIME_DIR/tinyrun`, 0700; nothing left afterwards. `serve`:
//!   the API server run by the user makes the user's boxes (`limits: best-effort` as its policy
//!   allows). Two commands of one user run side by side, neither waiting for the other.
//! * `shell`, driven from a pty that is the caller's terminal: /bin/sh on a terminal of the
//!   box's own, its exit status passed on, the caller's terminal restored (also when the caller
//!   is killed); attack: TIOCSTI in it types into neither terminal.
//! * Ids: the box's root is the caller, its user (1000) a subordinate id of the caller's, and two
//!   boxes of one user have disjoint ranges; without a subordinate range, one id only and the
//!   result says so; without newuidmap, an error naming the package.
//! * Limits: without a delegated subtree (on this cgroup v1 host, or outside the user manager's
//!   subtree in the guest) a box is refused, naming what is missing; with `--limits best-effort`
//!   it gets rlimits here, and its result says which limits hold and which do not. Inside the
//!   subtree the box's cgroup is a child of it, with the preset's limits, and gone afterwards.
//! * Storage: a box's `--tmpfs-size` holds (writing past it fails with ENOSPC), its tmpfs mounts
//!   are in the mount namespace the user's commands share (read through its holder's
//!   mountinfo), and terminate, or the collection of a box whose run was killed, leaves none.
//! * The seed attacks: a fork bomb and a memory balloon are stopped by those rlimits here and by
//!   the box's pids and memory limits (reported in `refused.limits`, `oom_killed`) in the guest,
//!   TIOCSTI is refused by the seccomp filter, and the metadata address is unreachable (loopback
//!   only). `--network egress` for an ordinary user has a file of its own
//!   (`sandbox_unprivileged_egress.rs`); here only `--egress-range`, which it refuses by name.

mod unprivileged_common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use tinyrun_conformance::terminal::{legacy_tiocsti, on_terminal_typing};
use tinyrun_conformance::{require_root, skip};
use unprivileged_common::{parse, text, Host, User, PATH};

const BE: &str = "--limits=best-effort";

#[test]
fn every_command_works_for_an_ordinary_user() {
    require_root!();
    let Some(host) = Host::here() else { return };
    let u = User::new(host, "c", true);
    let id = u.sandbox(&["launch", BE, "--lifetime", "2m"]);
    assert!(id.0, "launch: {id:?}");
    let id = id.1.trim().to_string();
    let root = u.root();
    let meta = fs::metadata(&root).unwrap();
    assert_eq!((meta.mode() & 0o777, meta.uid()), (0o700, u.uid), "the state root is the user's, 0700");
    let src = u.work.join("in.txt");
    fs::write(&src, "hello\n").unwrap();
    fs::set_permissions(&u.work, fs::Permissions::from_mode(0o755)).unwrap();
    let (ok, _, err) = u.sandbox(&["cp", src.to_str().unwrap(), &format!("{id}:/work/in.txt")]);
    assert!(ok, "cp in: {err}");
    let script = "cat /work/in.txt; id -u; mkdir -p /work/d/e; echo out > /work/d/e/out.txt; cat /proc/self/uid_map";
    let (ok, out, err) = u.sandbox(&["exec", "--json", &id, "--", "sh", "-c", script]);
    assert!(ok, "exec: {out} {err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let lines: Vec<String> = text(&v, "stdout").lines().map(str::to_string).collect();
    assert_eq!(lines[..2], ["hello".to_string(), "1000".to_string()], "{v}");
    assert_eq!(v["limits"], host.best_effort_word(), "{v}");
    let dst = u.work.join("out.txt");
    fs::set_permissions(&u.work, fs::Permissions::from_mode(0o777)).unwrap();
    let (ok, _, err) = u.sandbox(&["cp", &format!("{id}:/work/d/e/out.txt"), dst.to_str().unwrap()]);
    assert!(ok, "cp out: {err}");
    assert_eq!(fs::read_to_string(&dst).unwrap(), "out\n");
    let (ok, out, _) = u.sandbox(&["list"]);
    assert!(ok && out.contains(&id), "list: {out}");
    let (ok, _, err) = u.sandbox(&["terminate", &id]);
    assert!(ok, "terminate: {err}");
    let (ok, out, err) = u.sandbox(&["pool", "fill", BE, "--type", "nano", "2"]);
    assert!(ok && out.lines().count() == 2, "pool fill: {out} {err}");
    let v = u.run_json(&["--pool", "--type", "nano", BE, "--", "echo", "pooled"]);
    assert_eq!((text(&v, "stdout").as_str(), v["pool"].as_str()), ("pooled\n", Some("hit")), "{v}");
    let (ok, _, err) = u.sandbox(&["pool", "drain", "--all"]);
    assert!(ok, "pool drain: {err}");
    u.assert_nothing_left();
}

/// `sandbox shell` for an ordinary user: /bin/sh in the box, forked by its resident init on a
/// terminal of the box's own, driven here from a pty that is the caller's terminal. What is typed
/// runs, `tty` names a /dev/pts of the box, the shell's exit status is the command's, and the
/// caller's terminal is back in canonical mode with echo. A resize of the caller's terminal
/// reaches the box's. SIGTERM to the caller ends the shell (137) and restores the terminal too.
/// Nothing is left.
#[test]
fn shell_runs_on_a_terminal_of_the_boxs_own() {
    require_root!();
    let Some(host) = Host::here() else { return };
    let u = User::new(host, "p", true);
    let (ok, id, err) = u.sandbox(&["launch", BE, "--lifetime", "2m"]);
    assert!(ok, "launch: {err}");
    let id = id.trim().to_string();
    let t = on_terminal_typing(u.command(PATH, true, &["shell", &id]), "$ ", b"echo $((6*7)); tty; exit 3\n");
    eprintln!("SANDBOX unprivileged shell: exit {:?}, terminal {:?}", t.code, t.output);
    assert!(t.output.lines().any(|l| l == "42"), "what was typed ran: {:?}", t.output);
    assert!(t.output.lines().any(|l| l.starts_with("/dev/pts/")), "a terminal of the box's: {:?}", t.output);
    assert_eq!(t.code, Some(3), "the shell's exit status: {:?}", t.output);
    assert!(t.canonical, "the caller's terminal is left raw");
    let cmdline = |p: i32| fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
    let find = |what: &[u8]| u.processes().into_iter().find(|p| cmdline(*p).windows(what.len()).any(|w| w == what));
    let wait_for = |what: &[u8]| {
        let t = Instant::now();
        while find(what).is_none() {
            assert!(t.elapsed() < Duration::from_secs(30), "{} never ran", String::from_utf8_lossy(what));
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    // The caller's terminal resized while the shell runs: the kernel tells tinyrun (SIGWINCH),
    // which passes the size on to the box's terminal.
    let t = std::thread::scope(|s| {
        s.spawn(|| {
            wait_for(b"sleep\x002.5\x00");
            let shell = find(b"sandbox\x00shell\x00").expect("tinyrun sandbox shell");
            let tty = format!("/proc/{shell}/fd/0");
            let resized = std::process::Command::new("stty").args(["-F", &tty, "rows", "40", "cols", "100"]).status();
            assert!(resized.is_ok_and(|s| s.success()), "stty -F {tty}");
        });
        on_terminal_typing(u.command(PATH, true, &["shell", &id]), "$ ", b"stty size; sleep 2.5; stty size; exit\n")
    });
    let sizes: Vec<&str> = t.output.lines().filter(|l| l.split(' ').all(|n| n.parse::<u16>().is_ok())).collect();
    assert_eq!(sizes, ["0 0", "40 100"], "the box's terminal follows the caller's: {:?}", t.output);
    // The caller killed while the shell runs a command: both end, the terminal restored.
    let t = std::thread::scope(|s| {
        s.spawn(|| {
            wait_for(b"sleep\x0061");
            let shell = find(b"sandbox\x00shell\x00").expect("tinyrun sandbox shell");
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(shell), nix::sys::signal::SIGTERM).unwrap();
        });
        on_terminal_typing(u.command(PATH, true, &["shell", &id]), "$ ", b"sleep 61; exit 4\n")
    });
    assert_eq!(t.code, Some(137), "SIGTERM ends the shell: {:?}", t.output);
    assert!(t.canonical, "the caller's terminal is left raw after SIGTERM");
    let t0 = Instant::now();
    while find(b"sleep\x0061").is_some() {
        assert!(t0.elapsed() < Duration::from_secs(10), "the killed shell's sleep is left");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (ok, _, err) = u.sandbox(&["terminate", &id]);
    assert!(ok, "terminate: {err}");
    u.assert_nothing_left();
}

/// SECURITY: a program in an ordinary user's `sandbox shell` can't type into the caller's
/// terminal (TIOCSTI, the CVE-2017-5226 class): the shell's terminal is the box's own, never the
/// caller's, and TIOCSTI on it (its controlling terminal, where the kernel would allow it) is
/// refused with EPERM by the box's seccomp filter, so nothing is typed into either terminal.
#[test]
fn the_shell_cannot_type_into_the_callers_terminal() {
    require_root!();
    let Some(host) = Host::here() else { return };
    if !legacy_tiocsti() {
        skip!("dev.tty.legacy_tiocsti is 0: the kernel refuses TIOCSTI to unprivileged processes");
    }
    if !Path::new("/usr/bin/python3").exists() {
        skip!("no python3 on the host for the attack");
    }
    const PY: &str = "import fcntl, termios\n\
        try:\n    [fcntl.ioctl(0, termios.TIOCSTI, bytes([c])) for c in b'echo INJECTED\\n']\n    print('tiocsti=ok')\n\
        except OSError as e:\n    print('tiocsti=' + str(e.errno))\n";
    let u = User::new(host, "y", true);
    let (ok, id, err) = u.sandbox(&["launch", BE, "--lifetime", "2m"]);
    assert!(ok, "launch: {err}");
    let id = id.trim().to_string();
    let (ok, _, err) = u.sandbox(&["exec", &id, "--", "sh", "-c", "printf '%s' \"$1\" > /work/sti.py", "sh", PY]);
    assert!(ok, "exec: {err}");
    let t = on_terminal_typing(u.command(PATH, true, &["shell", &id]), "$ ", b"python3 /work/sti.py; exit 0\n");
    eprintln!(
        "ESCAPE unprivileged shell terminal-injection: exit {:?}, pending input {:?}, output {:?}",
        t.code, t.typed, t.output
    );
    assert!(!t.typed.contains("INJECTED"), "the shell typed into the caller's terminal: {:?}", t.typed);
    assert!(t.output.contains("tiocsti=1\n"), "TIOCSTI must fail with EPERM: {:?}", t.output);
    assert!(!t.output.contains("INJECTED"), "typed into the shell's own terminal: {:?}", t.output);
    assert_eq!(t.code, Some(0), "{:?}", t.output);
    let (ok, _, err) = u.sandbox(&["terminate", &id]);
    assert!(ok, "terminate: {err}");
    u.assert_nothing_left();
}

/// Commands of one user don't wait for each other: a second run finishes while a first one
/// still runs (each used to hold the lock on the user's namespace holder exclusively on the
/// way in, so the second waited for the first to end, here a minute).
#[test]
fn a_users_commands_run_side_by_side() {
    require_root!();
    let Some(host) = Host::here() else { return };
    let u = User::new(host, "par", true);
    let mut first = u.command(PATH, true, &["run", BE, "--timeout", "2m", "--", "sleep", "60"]).spawn().expect("run");
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let mut second = u.command(PATH, true, &["run", BE, "--", "echo", "second"]);
    let out = second.stdout(std::process::Stdio::piped()).spawn().expect("run");
    let pid = out.id();
    let waited = std::sync::mpsc::channel();
    let tx = waited.0;
    std::thread::spawn(move || drop(tx.send(out.wait_with_output())));
    let res = waited.1.recv_timeout(Duration::from_secs(30));
    // SIGTERM, as a user's Ctrl-C: the run removes its box (setpriv became tinyrun).
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(first.id() as i32), nix::sys::signal::Signal::SIGTERM);
    let _ = first.wait();
    let out = res.unwrap_or_else(|_| {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL);
        panic!("a second run still waits for the first after 30 s")
    });
    let out = out.expect("second run");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "second\n", "{out:?}");
    eprintln!("second run beside a running one: {:?}", started.elapsed());
    u.assert_nothing_left();
}

/// `sandbox serve` run by the user: the API server's workers make the user's boxes in the
/// user's own namespaces (they ran as root of its namespace before, and failed making root's
/// boxes there); `limits: best-effort` is a loosening the server's policy must allow.
#[test]
fn the_api_server_serves_an_ordinary_users_boxes() {
    require_root!();
    let Some(host) = Host::here() else { return };
    let u = User::new(host, "api", true);
    let api = u.bin.with_file_name("tinyrun-sandbox-api");
    // Installed beside tinyrun; a copy of tinyrun under test (the guests') finds it in the build.
    let src = [
        tinyrun_conformance::runtime_bin().with_file_name("tinyrun-sandbox-api"),
        tinyrun_conformance::target_dir().join("debug/tinyrun-sandbox-api"),
    ];
    let src = src.iter().find(|p| p.exists()).expect("tinyrun-sandbox-api built (cargo build --workspace)");
    fs::copy(src, &api).expect("copy the server");
    fs::set_permissions(&api, fs::Permissions::from_mode(0o755)).unwrap();
    let root = u.xdg.join("api-root");
    let policy = u.work.join("policy.json");
    fs::write(&policy, r#"{"allow_best_effort_limits": true}"#).unwrap();
    fs::set_permissions(&u.work, fs::Permissions::from_mode(0o755)).unwrap();
    let args = ["serve", "--root", root.to_str().unwrap(), "--policy", policy.to_str().unwrap()];
    let mut server = u.command(PATH, true, &args).stdout(std::process::Stdio::null()).spawn().expect("serve");
    let sock = root.join("sandbox.sock");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !sock.exists() {
        assert!(Instant::now() < deadline, "no socket at {}", sock.display());
        std::thread::sleep(Duration::from_millis(50));
    }
    let post = |path: &str, body: &str| -> Value {
        let out = std::process::Command::new("/usr/bin/setpriv")
            .args(["--reuid", &u.uid.to_string(), "--regid", &u.gid.to_string(), "--clear-groups", "--"])
            .args(["curl", "-s", "-m", "60", "--unix-socket", sock.to_str().unwrap(), "-X", "POST"])
            .args(["-H", "content-type: application/json", "-d", body, &format!("http://box{path}")])
            .env_clear()
            .env("PATH", PATH)
            .output()
            .expect("curl");
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
    };
    let v = post("/v1/run", r#"{"command": ["sh", "-c", "id -u; echo ok"], "limits": "best-effort"}"#);
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(v["exit_code"], 0, "{v}");
    assert_eq!(text(&v, "stdout"), "1000\nok\n", "the box's own user: {v}");
    assert_eq!(v["limits"], host.best_effort_word(), "{v}");
    let bundles = root.join("sandbox-bundles");
    assert_eq!(fs::read_dir(&bundles).map(|d| d.count()).unwrap_or(0), 0, "bundles left in {}", bundles.display());
}

#[test]
fn ids_come_from_the_users_subordinate_range_split_per_box() {
    require_root!();
    let Some(host) = Host::here() else { return };
    let u = User::new(host, "i", true);
    let mut ids = Vec::new();
    for _ in 0..2 {
        let (ok, out, err) = u.sandbox(&["launch", BE, "--lifetime", "2m"]);
        assert!(ok, "launch: {err}");
        ids.push(out.trim().to_string());
    }
    // The box's user runs a sleep: its host uid, seen from here.
    let mut host_uids = Vec::new();
    for id in &ids {
        let (ok, out, err) = u.sandbox(&["exec", id, "--", "sh", "-c", "sleep 30 >/dev/null 2>&1 &"]);
        assert!(ok, "exec: {out} {err}");
        let uid = (0..50)
            .find_map(|_| {
                let found = u.processes().into_iter().find_map(|p| {
                    let s = fs::read_to_string(format!("/proc/{p}/status")).ok()?;
                    let cmd = fs::read_to_string(format!("/proc/{p}/cmdline")).ok()?;
                    let uid: u32 =
                        s.lines().find_map(|l| l.strip_prefix("Uid:")?.split_whitespace().next()?.parse().ok())?;
                    (cmd.starts_with("sleep") && !host_uids.contains(&uid)).then_some(uid)
                });
                std::thread::sleep(Duration::from_millis(50));
                found
            })
            .expect("the box's sleep on the host");
        host_uids.push(uid);
    }
    let (first, count) = u.subuid;
    for uid in &host_uids {
        assert!(*uid >= first && *uid < first + count, "box user {uid} outside the range {first}+{count}");
    }
    assert_ne!(host_uids[0], host_uids[1], "two boxes share a host id");
    assert!(host_uids[0].abs_diff(host_uids[1]) >= 4096, "ranges of 4096 each: {host_uids:?}");
    eprintln!("SANDBOX unprivileged ids: box users on the host {host_uids:?}, range {first}+{count}");
    for id in &ids {
        let (ok, _, err) = u.sandbox(&["terminate", id]);
        assert!(ok, "terminate: {err}");
    }
    u.assert_nothing_left();
}

#[test]
fn without_a_subordinate_range_a_box_maps_only_the_caller() {
    require_root!();
    let Some(host) = Host::here() else { return };
    let u = User::new(host, "s", false);
    let v = u.run_json(&[BE, "--", "sh", "-c", "id -u; cat /proc/self/uid_map"]);
    assert_eq!(v["exit_code"], 0, "{v}");
    let out = text(&v, "stdout");
    assert!(out.starts_with("0\n"), "runs as the one id it has: {out}");
    assert_eq!(out.lines().count(), 2, "one line of map: {out}");
    assert_eq!(v["ids"], "caller-only", "the result says so: {v}");
    let v = u.run_json(&[BE, "--user", "1000", "--", "true"]);
    let e = v["error"].as_str().unwrap_or_default();
    assert!(e.contains("outside the box's ids") && e.contains("/etc/subuid"), "{v}");
    u.assert_nothing_left();
}

#[test]
fn missing_pieces_are_named_with_what_to_install() {
    require_root!();
    let Some(host) = Host::here() else { return };
    let u = User::new(host, "e", true);
    // PATH without newuidmap, on the first command (later ones join its namespace): the error
    // names the package.
    let (ok, _, err) = u.output(u.command("/nonexistent", true, &["run", BE, "--", "/usr/bin/true"]));
    assert!(!ok && err.contains("newuidmap") && err.contains("apt-get install uidmap"), "{err}");
    // Outside the user manager's subtree (in the guest: in the test's own service) too.
    let v = parse(u.output(u.command(PATH, false, &["run", "--json", "--", "true"])));
    let e = v["error"].as_str().unwrap_or_default();
    let missing = match host {
        Host::Refused => "no cgroup v2",
        Host::Delegated => "has no writable parent",
    };
    assert!(e.contains(missing) && e.contains("--limits best-effort"), "limits refused by name: {v}");
    assert!(v["exit_code"].is_null(), "nothing ran: {v}");
    // A veth's option, which pasta's egress has no use for (sandbox_unprivileged_egress.rs).
    let v = u.run_json(&[BE, "--network", "egress", "--egress-range", "169.254.128.0/24", "--", "true"]);
    assert!(v["error"].as_str().unwrap_or_default().contains("--egress-range"), "{v}");
    assert!(v["exit_code"].is_null(), "nothing ran: {v}");
    u.assert_nothing_left();
}

/// `--tmpfs-size` holds for an ordinary user's box as for root's: its storage is a tmpfs of that
/// size, mounted in the mount namespace the user's commands share. Two files of 3 MiB (each under
/// RLIMIT_FSIZE) don't fit in /work and /tmp of a 4 MiB box; the result lists the size among
/// what holds. terminate leaves no mount of the box there, nor does the collection of a box
/// whose `run` was killed, while the namespace lives on for the user's other box.
#[test]
fn the_tmpfs_size_holds_and_the_mounts_go_with_the_box() {
    require_root!();
    let Some(host) = Host::here() else { return };
    let u = User::new(host, "t", true);
    let launch = || {
        let (ok, out, err) = u.sandbox(&["launch", BE, "--tmpfs-size", "4M", "--lifetime", "2m"]);
        assert!(ok, "launch: {err}");
        out.trim().to_string()
    };
    let (a, b) = (launch(), launch());
    let script = "head -c 3145728 /dev/zero > /work/a && head -c 3145728 /dev/zero > /tmp/b; echo status=$?";
    let (_, out, err) = u.sandbox(&["exec", "--json", &a, "--", "sh", "-c", script]);
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out} {err}"));
    assert_eq!(text(&v, "stdout"), "status=1\n", "the second file does not fit: {v}");
    let enospc = text(&v, "stderr");
    assert!(enospc.contains("No space left on device"), "ENOSPC: {v}");
    assert!(!v["limits_not_applied"].to_string().contains("tmpfs"), "never reported not applied: {v}");
    if host == Host::Refused {
        assert!(v["limits_applied"].to_string().contains("tmpfs-size=4194304"), "{v}");
    }
    let holder = u.holder().expect("the holder's record");
    let bundles = u.root().join("sandbox-bundles");
    let mounts = |id: &str| User::mounts_under(holder, &bundles.join(id)).expect("the holder's mountinfo");
    let scratch = bundles.join(&a).join("scratch");
    assert!(mounts(&a).contains(&scratch.to_string_lossy().into_owned()), "{:?}", mounts(&a));
    let (ok, _, err) = u.sandbox(&["terminate", &a]);
    assert!(ok, "terminate: {err}");
    assert_eq!(mounts(&a), Vec::<String>::new(), "mounts left of the terminated box");
    assert!(!mounts(&b).is_empty(), "the other box's mounts are still there to be seen");
    // A one-shot run killed mid-command: its box is collected by the next run, mounts and all.
    let mut run = u.command(PATH, true, &["run", BE, "--tmpfs-size", "4M", "--", "sleep", "60"]);
    let mut run = run.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
    let t = Instant::now();
    let crashed = loop {
        let one_shot = tinyrun_conformance::sandbox::names_in(&bundles).into_iter().find(|n| n.starts_with("run-"));
        if let Some(id) = one_shot.filter(|id| !mounts(id).is_empty()) {
            break id;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "the run's box never mounted its storage");
        std::thread::sleep(Duration::from_millis(50));
    };
    run.kill().unwrap();
    run.wait().unwrap();
    let v = u.run_json(&[BE, "--", "true"]);
    assert_eq!(v["exit_code"], 0, "{v}");
    assert_eq!(mounts(&crashed), Vec::<String>::new(), "mounts left of the killed run's box");
    eprintln!("SANDBOX unprivileged tmpfs-size: {:?}; no mount left after terminate and collection", enospc.trim());
    let (ok, _, err) = u.sandbox(&["terminate", &b]);
    assert!(ok, "terminate: {err}");
    u.assert_nothing_left();
}

#[test]
fn the_seed_attacks_are_stopped_and_reported() {
    require_root!();
    let Some(host) = Host::here() else { return };
    if !Path::new("/usr/bin/python3").exists() {
        skip!("no python3 on the host for the attacks");
    }
    let u = User::new(host, "b", true);
    // Fork bomb: RLIMIT_NPROC or the box's pids.max holds it; the command ends at its timeout
    // at the latest.
    let bomb = "import os\nn=0\ntry:\n  while n < 100000:\n    if os.fork()==0:\n      import time; time.sleep(30); os._exit(0)\n    n+=1\nexcept OSError as e:\n  print('stopped', n, e.errno)\n";
    let v = u.run_json(&[BE, "--pids", "40", "--timeout", "10s", "--", "python3", "-c", bomb]);
    let out = text(&v, "stdout");
    let n: u32 = out.split_whitespace().nth(1).and_then(|n| n.parse().ok()).unwrap_or(u32::MAX);
    assert!(out.starts_with("stopped") && n < 40 && out.trim().ends_with(" 11"), "fork bomb stopped (EAGAIN): {v}");
    assert_eq!(v["limits"], host.best_effort_word(), "{v}");
    match host {
        Host::Refused => assert!(v["limits_applied"].to_string().contains("RLIMIT_NPROC=40"), "{v}"),
        Host::Delegated => assert!(v["refused"]["limits"]["pids_max"].as_u64() >= Some(1), "pids.max hit: {v}"),
    }
    // Memory balloon: RLIMIT_AS refuses it, or the box's memory.max OOM-kills it.
    let balloon = "try:\n  b = bytearray(1 << 30)\n  print('got it')\nexcept MemoryError:\n  print('refused')\n";
    let v = u.run_json(&[BE, "--memory", "64M", "--", "python3", "-c", balloon]);
    match host {
        Host::Refused => {
            assert_eq!(text(&v, "stdout"), "refused\n", "{v}");
            assert!(v["limits_not_applied"].to_string().contains("no memory cgroup"), "never reported enforced: {v}");
        }
        Host::Delegated => {
            assert_eq!((v["oom_killed"].as_bool(), v["signal"].as_str()), (Some(true), Some("SIGKILL")), "{v}");
            assert!(v["refused"]["limits"]["oom_kills"].as_u64() >= Some(1), "the OOM kill reported: {v}");
            assert_eq!(text(&v, "stdout"), "", "{v}");
        }
    }
    // TIOCSTI: refused by the seccomp filter (EPERM), whatever stdin is.
    let sti = "import fcntl, termios\ntry:\n  fcntl.ioctl(0, termios.TIOCSTI, b'x'); print('injected')\nexcept OSError as e:\n  print(e.errno)\n";
    let v = u.run_json(&[BE, "--", "python3", "-c", sti]);
    assert_eq!(text(&v, "stdout"), "1\n", "TIOCSTI refused with EPERM: {v}");
    // Metadata SSRF: loopback only, the address is unreachable.
    let ssrf = "import socket\ns=socket.socket(); s.settimeout(3)\ntry:\n  s.connect(('169.254.169.254', 80)); print('connected')\nexcept OSError as e:\n  print('refused', e.errno)\n";
    let v = u.run_json(&[BE, "--", "python3", "-c", ssrf]);
    assert!(text(&v, "stdout").starts_with("refused"), "metadata unreachable: {v}");
    eprintln!(
        "SANDBOX unprivileged attacks ({host:?}): fork bomb {out:?}, balloon stopped, TIOCSTI EPERM, metadata refused"
    );
    u.assert_nothing_left();
}

#[test]
fn a_box_is_a_cgroup_of_the_users_delegated_subtree_with_the_presets_limits() {
    require_root!();
    let Some(host) = Host::here() else { return };
    if host != Host::Delegated {
        skip!("no delegated cgroup v2 subtree here: run conformance/run-systemd-tests");
    }
    let u = User::new(host, "d", true);
    let (ok, id, err) = u.sandbox(&["launch", "--type", "nano", "--lifetime", "2m"]);
    assert!(ok, "launch: {err}");
    let id = id.trim().to_string();
    let cgs = u.box_cgroups();
    assert_eq!(cgs.len(), 1, "one box cgroup under {}: {cgs:?}", u.subtree().display());
    let cg = &cgs[0];
    let read = |f: &str| fs::read_to_string(cg.join(f)).unwrap_or_default().trim().to_string();
    // nano: 128 MiB, 128 pids, a quarter of a core.
    assert_eq!((read("memory.max"), read("pids.max")), ("134217728".to_string(), "128".to_string()), "{cg:?}");
    assert_eq!(read("cpu.max"), "25000 100000", "{cg:?}");
    let procs = read("cgroup.procs");
    assert!(!procs.is_empty(), "the box's init is in {cg:?}");
    for p in procs.lines() {
        let own = fs::read_to_string(format!("/proc/{p}/cgroup")).unwrap_or_default();
        let want = format!("0::/user.slice/user-{0}.slice/user@{0}.service/tinyrun-sandbox/", u.uid);
        assert!(own.trim().starts_with(&want), "process {p} of the box in {own}");
    }
    let (ok, out, err) = u.sandbox(&["exec", "--json", &id, "--", "sh", "-c", "echo in"]);
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out} {err}"));
    assert!(ok && text(&v, "stdout") == "in\n" && v["limits"] == "enforced", "{v}");
    let (ok, _, err) = u.sandbox(&["terminate", &id]);
    assert!(ok, "terminate: {err}");
    assert!(!cg.exists(), "{} left", cg.display());
    u.assert_nothing_left();
}
