//! `tinyrun sandbox` run by an ordinary user: the sandbox's commands and defences again, as a
//! throw-away user each test makes (`useradd`, which adds its `/etc/subuid` and `/etc/subgid`
//! ranges; `userdel` removes them), with a copy of the binary and its own `XDG_RUNTIME_DIR`,
//! every call through `setpriv` with a clean environment. The guard kills every process of the
//! user's ids and removes its files and the user, even when the test panics.
//!
//! * Every command: run, launch, cp in and out, exec, list, terminate, pool fill, run --pool,
//!   pool drain; state under `$XDG_RUNTIME_DIR/tinyrun`, 0700; nothing left afterwards.
//! * Ids: the box's root is the caller, its user (1000) a subordinate id of the caller's, and two
//!   boxes of one user have disjoint ranges; without a subordinate range, one id only and the
//!   result says so; without newuidmap, an error naming the package.
//! * Limits: on a host without a delegated cgroup v2 subtree (this cgroup v1 host) a box is
//!   refused, naming what is missing; with `--limits best-effort` it gets rlimits, and its
//!   result says which limits hold and which do not.
//! * The seed attacks: a fork bomb and a memory balloon are stopped by those rlimits, TIOCSTI
//!   is refused by the seccomp filter, the metadata address is unreachable (loopback only), and
//!   `--network egress` is refused by name for an ordinary user.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use tinyrun_conformance::{require_root, runtime_bin, skip};

/// A throw-away user and its files; all removed on drop.
struct User {
    name: String,
    uid: u32,
    gid: u32,
    subuid: (u32, u32),
    work: PathBuf,
    bin: PathBuf,
    xdg: PathBuf,
}

fn quiet(cmd: &mut Command) -> bool {
    cmd.stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

fn subid(file: &str, name: &str) -> Option<(u32, u32)> {
    fs::read_to_string(file).unwrap_or_default().lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() == 3 && f[0] == name).then(|| Some((f[1].parse().ok()?, f[2].parse().ok()?)))?
    })
}

impl User {
    /// A new user; with `ranges` false its subordinate ranges are taken away again.
    fn new(tag: &str, ranges: bool) -> User {
        let name = format!("tsu{}{tag}", std::process::id());
        let made = (0..50).any(|_| {
            let ok = quiet(Command::new("useradd").args(["--no-create-home", "--shell", "/bin/false", "-U", &name]));
            if !ok {
                std::thread::sleep(Duration::from_millis(100));
            }
            ok
        });
        assert!(made, "useradd {name}");
        let pw = nix::unistd::User::from_name(&name).unwrap().expect("the new user");
        let work = tempfile::Builder::new().prefix("tinyrun-sbx-user-").tempdir().unwrap().keep();
        let mut u = User {
            name: name.clone(),
            uid: pw.uid.as_raw(),
            gid: pw.gid.as_raw(),
            subuid: (0, 0),
            bin: work.join("tinyrun"),
            xdg: work.join("xdg"),
            work,
        };
        let sub = subid("/etc/subuid", &name).expect("useradd gave a subordinate range");
        if ranges {
            u.subuid = sub;
        } else {
            let range = format!("{}-{}", sub.0, sub.0 + sub.1 - 1);
            let gsub = subid("/etc/subgid", &name).expect("a subgid range");
            let grange = format!("{}-{}", gsub.0, gsub.0 + gsub.1 - 1);
            assert!(quiet(Command::new("usermod").args(["--del-subuids", &range, "--del-subgids", &grange, &name])));
            assert!(subid("/etc/subuid", &name).is_none(), "subuid range still there");
        }
        fs::set_permissions(&u.work, fs::Permissions::from_mode(0o755)).unwrap();
        fs::copy(runtime_bin(), &u.bin).expect("copy the binary");
        fs::set_permissions(&u.bin, fs::Permissions::from_mode(0o755)).unwrap();
        fs::create_dir(&u.xdg).unwrap();
        fs::set_permissions(&u.xdg, fs::Permissions::from_mode(0o700)).unwrap();
        nix::unistd::chown(&u.xdg, Some(pw.uid), Some(pw.gid)).unwrap();
        u
    }

    fn command(&self, path: &str, args: &[&str]) -> Command {
        let mut c = Command::new("/usr/bin/setpriv");
        c.args(["--reuid", &self.uid.to_string(), "--regid", &self.gid.to_string(), "--clear-groups", "--"])
            .arg(&self.bin)
            .arg("sandbox")
            .args(args)
            .current_dir(&self.work)
            .env_clear()
            .env("PATH", path)
            .env("HOME", &self.work)
            .env("USER", &self.name)
            .env("XDG_RUNTIME_DIR", &self.xdg)
            .stdin(Stdio::null());
        c
    }

    /// `tinyrun sandbox ARGS` as the user: (success, stdout, stderr).
    fn sandbox(&self, args: &[&str]) -> (bool, String, String) {
        self.sandbox_with_path("/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", args)
    }

    fn sandbox_with_path(&self, path: &str, args: &[&str]) -> (bool, String, String) {
        let o = self.command(path, args).output().expect("run tinyrun");
        (o.status.success(), String::from_utf8_lossy(&o.stdout).into(), String::from_utf8_lossy(&o.stderr).into())
    }

    /// `sandbox run --json ARGS`, parsed.
    fn run_json(&self, args: &[&str]) -> Value {
        let mut all = vec!["run", "--json"];
        all.extend_from_slice(args);
        let (_, out, err) = self.sandbox(&all);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: stdout {out:?} stderr {err:?}"))
    }

    fn root(&self) -> PathBuf {
        self.xdg.join("tinyrun")
    }

    /// Processes whose real uid is the user's or one of its subordinate ids.
    fn processes(&self) -> Vec<i32> {
        let mine = |uid: u32| uid == self.uid || (uid >= self.subuid.0 && uid < self.subuid.0 + self.subuid.1);
        let live = |p: &i32| {
            let s = fs::read_to_string(format!("/proc/{p}/status")).unwrap_or_default();
            let zombie = s.lines().any(|l| l.starts_with("State:") && (l.contains("Z (") || l.contains("X (")));
            let uid = s.lines().find_map(|l| l.strip_prefix("Uid:")?.split_whitespace().next()?.parse().ok());
            !zombie && uid.is_some_and(mine)
        };
        let pids = fs::read_dir("/proc").map(|d| d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()));
        pids.map(|p| p.filter(live).collect()).unwrap_or_default()
    }

    /// Boxes, records and processes left: the user's holder of its namespace may take a second to go.
    fn assert_nothing_left(&self) {
        let bundles = self.root().join("sandbox-bundles");
        let boxes = || fs::read_dir(&bundles).map(|d| d.count()).unwrap_or(0);
        assert_eq!(boxes(), 0, "bundles left in {}", bundles.display());
        for _ in 0..60 {
            if self.processes().is_empty() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("processes left: {:?}", self.processes());
    }
}

impl Drop for User {
    fn drop(&mut self) {
        for _ in 0..50 {
            let ps = self.processes();
            if ps.is_empty() {
                break;
            }
            for p in ps {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), nix::sys::signal::SIGKILL);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = fs::remove_dir_all(&self.work);
        for _ in 0..50 {
            if quiet(Command::new("userdel").arg(&self.name)) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn text(v: &Value, stream: &str) -> String {
    v[stream]["text"].as_str().unwrap_or_default().to_string()
}

/// Skips on a host where an ordinary user's limits are enforced (a delegated cgroup v2 subtree):
/// these tests are about the host without one.
fn no_delegation() -> bool {
    let v1 = !Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    if !v1 {
        eprintln!("SKIP: cgroup v2 host: the refused and best-effort limits are tested on cgroup v1");
    }
    v1
}

const BE: &str = "--limits=best-effort";

#[test]
fn every_command_works_for_an_ordinary_user() {
    require_root!();
    if !no_delegation() {
        return;
    }
    let u = User::new("c", true);
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
    assert_eq!(v["limits"], "best-effort", "{v}");
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
    let (ok, _, err) = u.sandbox(&["shell", "x"]);
    assert!(!ok && err.contains("sandbox exec -i"), "shell says what to use instead: {err}");
    u.assert_nothing_left();
}

#[test]
fn ids_come_from_the_users_subordinate_range_split_per_box() {
    require_root!();
    if !no_delegation() {
        return;
    }
    let u = User::new("i", true);
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
    if !no_delegation() {
        return;
    }
    let u = User::new("s", false);
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
    if !no_delegation() {
        return;
    }
    let u = User::new("e", true);
    // PATH without newuidmap, on the first command (later ones join its namespace): the error
    // names the package.
    let (ok, _, err) = u.sandbox_with_path("/nonexistent", &["run", BE, "--", "/usr/bin/true"]);
    assert!(!ok && err.contains("newuidmap") && err.contains("apt-get install uidmap"), "{err}");
    let v = u.run_json(&["--", "true"]);
    let e = v["error"].as_str().unwrap_or_default();
    assert!(e.contains("no cgroup v2") && e.contains("--limits best-effort"), "limits refused by name: {v}");
    assert!(v["exit_code"].is_null(), "nothing ran: {v}");
    let v = u.run_json(&[BE, "--network", "egress", "--allow-host", "1.1.1.1", "--", "true"]);
    assert!(v["error"].as_str().unwrap_or_default().contains("--network egress"), "{v}");
    u.assert_nothing_left();
}

#[test]
fn best_effort_limits_stop_the_seed_attacks() {
    require_root!();
    if !no_delegation() {
        return;
    }
    if !Path::new("/usr/bin/python3").exists() {
        skip!("no python3 on the host for the attacks");
    }
    let u = User::new("b", true);
    // Fork bomb: RLIMIT_NPROC holds it; the command ends at its timeout at the latest.
    let bomb = "import os\nn=0\ntry:\n  while n < 100000:\n    if os.fork()==0:\n      import time; time.sleep(30); os._exit(0)\n    n+=1\nexcept OSError as e:\n  print('stopped', n, e.errno)\n";
    let v = u.run_json(&[BE, "--pids", "40", "--timeout", "10s", "--", "python3", "-c", bomb]);
    let out = text(&v, "stdout");
    let n: u32 = out.split_whitespace().nth(1).and_then(|n| n.parse().ok()).unwrap_or(u32::MAX);
    assert!(out.starts_with("stopped") && n < 40 && out.trim().ends_with(" 11"), "fork bomb stopped (EAGAIN): {v}");
    let applied = v["limits_applied"].to_string();
    assert!(applied.contains("RLIMIT_NPROC=40"), "{v}");
    // Memory balloon: RLIMIT_AS refuses it.
    let balloon = "try:\n  b = bytearray(1 << 30)\n  print('got it')\nexcept MemoryError:\n  print('refused')\n";
    let v = u.run_json(&[BE, "--memory", "256M", "--", "python3", "-c", balloon]);
    assert_eq!(text(&v, "stdout"), "refused\n", "{v}");
    assert!(v["limits_not_applied"].to_string().contains("no memory cgroup"), "never reported enforced: {v}");
    // TIOCSTI: refused by the seccomp filter (EPERM), whatever stdin is.
    let sti = "import fcntl, termios\ntry:\n  fcntl.ioctl(0, termios.TIOCSTI, b'x'); print('injected')\nexcept OSError as e:\n  print(e.errno)\n";
    let v = u.run_json(&[BE, "--", "python3", "-c", sti]);
    assert_eq!(text(&v, "stdout"), "1\n", "TIOCSTI refused with EPERM: {v}");
    // Metadata SSRF: loopback only, the address is unreachable.
    let ssrf = "import socket\ns=socket.socket(); s.settimeout(3)\ntry:\n  s.connect(('169.254.169.254', 80)); print('connected')\nexcept OSError as e:\n  print('refused', e.errno)\n";
    let v = u.run_json(&[BE, "--", "python3", "-c", ssrf]);
    assert!(text(&v, "stdout").starts_with("refused"), "metadata unreachable: {v}");
    eprintln!("SANDBOX unprivileged attacks: fork bomb {out:?}, balloon refused, TIOCSTI EPERM, metadata refused");
    u.assert_nothing_left();
}
