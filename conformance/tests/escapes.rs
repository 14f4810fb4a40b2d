//! SECURITY: each test tries a known container escape and must see it fail (issue 4
//! "Hardening against known escapes"; cli-contract.md §5.1-§5.3):
//!
//! * CVE-2019-5736: the runtime's own binary run inside the container (entrypoint
//!   `/proc/self/exe`, a `#!/proc/self/exe` script, the container's `/bin/sh` replaced by one and
//!   then `exec`'d, `exec /proc/self/exe`), and container processes grabbing `/proc/<pid>/exe`
//!   of runtime processes (the created container's init, and a loop racing concurrent `exec`s).
//!   The binary attacked is a private copy of `TINYRUN_BIN` made per test (same bytes, same
//!   defence), so a successful attack can only damage a scratch file; its SHA-256 must not change.
//! * CVE-2024-21626: no fd reaches the container beyond stdio (and `--preserve-fds`), and a cwd of
//!   `/proc/self/fd/N` never leaves the rootfs, for init and for `exec --cwd`.
//! * Symlinks in a writable rootfs pointing at host paths (mount destinations, absolute and
//!   relative, `/dev` and `/proc` themselves, `/dev/null` and `/dev/console`, masked and read-only
//!   paths), and mount destinations through a `/proc/self/fd/N` magic link to a host directory:
//!   the host path stays untouched (no mount in the host's mountinfo, nothing created or
//!   changed), and either create fails cleanly or the effect lands inside the rootfs.
//! * From inside a default container (runc's default capabilities, noNewPrivileges): mount, module
//!   loading, reboot, reaching host processes, writing /proc/sys and /sys, raw sockets, mknod.
//!
//! Every test prints one line `ESCAPE <name>: tried <what>, saw <what>` (run with --nocapture).
//! Host targets are always scratch paths of the test; attacks only run inside containers that
//! have their own pid and mount namespaces.

use std::fs::{self, File};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tinyrun_conformance::{kv, mounts_under, require_root, Bundle, Out, Runtime};

fn escape(name: &str, tried: &str, saw: &str) {
    eprintln!("ESCAPE {name}: tried {tried}, saw {saw}");
}

fn first_line(s: &str) -> String {
    s.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim().to_string()
}

fn wait_for(what: &str, secs: u64, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn sha256(path: &Path) -> String {
    let o = Command::new("sha256sum").arg(path).output().expect("sha256sum");
    assert!(o.status.success(), "sha256sum {}", path.display());
    String::from_utf8_lossy(&o.stdout).split_whitespace().next().unwrap().to_string()
}

/// Point `rt` at a private copy of the binary under test (same name, so runc gates still work)
/// and return its path. An attack that gets through overwrites this copy, never the real one.
fn private_binary(rt: &mut Runtime) -> PathBuf {
    let dir = rt.tempdir();
    let dst = dir.join(rt.bin.file_name().unwrap());
    fs::copy(&rt.bin, &dst).expect("copy the runtime binary");
    fs::set_permissions(&dst, fs::Permissions::from_mode(0o755)).unwrap();
    rt.bin = dst.clone();
    dst
}

/// create + start, wait for `running`; init's host pid.
#[track_caller]
fn start(rt: &Runtime, b: &Bundle) -> (Out, i32) {
    let o = rt.create(b).expect_ok("create");
    rt.run(&["start", &b.id]).expect_ok("start");
    let pid = rt.wait_status(&b.id, "running")["pid"].as_i64().unwrap() as i32;
    (o, pid)
}

fn tmpfs_at(b: &Bundle, dest: &str, extra: &[&str]) {
    let mut opts = vec!["nosuid", "size=4m"];
    opts.extend_from_slice(extra);
    b.add_mount(json!({"destination": dest, "type": "tmpfs", "source": "tmpfs", "options": opts}));
}

fn fd_keys(out: &str) -> Vec<String> {
    kv(out).keys().filter(|k| k.starts_with("fd.")).cloned().collect()
}

// ---------------------------------------------------------------------------------------------
// CVE-2019-5736
// ---------------------------------------------------------------------------------------------

/// The container's program is the runtime's own binary: `/proc/self/exe` as the entrypoint, and
/// scripts whose interpreter is `/proc/self/exe` (directly and through a second script).
#[test]
fn cve_2019_5736_entrypoint_is_runtime_binary() {
    require_root!();
    let mut rt = Runtime::new("cve5736entry");
    let bin = private_binary(&mut rt);
    let before = sha256(&bin);
    let b0 = rt.bundle(&["/bin/true"]);
    let rootfs = b0.writable_rootfs();
    fs::write(rootfs.join("evil.sh"), "#!/proc/self/exe --version\n").unwrap();
    fs::write(rootfs.join("evil2.sh"), "#!/evil.sh\n").unwrap();
    for f in ["evil.sh", "evil2.sh"] {
        fs::set_permissions(rootfs.join(f), fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut saw = Vec::new();
    for entry in ["/proc/self/exe", "/evil.sh", "/evil2.sh"] {
        let b = rt.bundle(&[entry, "--version"]);
        b.config_mut(|c| c["root"] = json!({"path": rootfs, "readonly": true}));
        let o = rt.create(&b);
        let outcome = if o.ok() {
            let s = rt.run(&["start", &b.id]);
            if s.ok() {
                rt.wait_status(&b.id, "stopped");
            }
            let out = o.stdout_now();
            if rt.is_runc() {
                // runc 1.1.5 re-execs a sealed memfd copy of itself, so running "runc" inside
                // is harmless; the binary-unchanged check below still applies.
                eprintln!("runc ran its sealed copy for {entry}: {:?}", first_line(&out));
                format!("runc ran its sealed memfd copy ({:?})", first_line(&out))
            } else {
                assert!(
                    !s.ok(),
                    "{entry}: the runtime's own binary was started in the container\n{s}\nstdout: {out:?}"
                );
                format!("start refused: {}", first_line(&s.stderr))
            }
        } else {
            assert!(o.code().is_some(), "{o}");
            rt.assert_nothing_left(&b.id);
            format!("create refused: {}", first_line(&o.stderr))
        };
        saw.push(format!("{entry} → {outcome}"));
        let _ = rt.run(&["delete", "--force", &b.id]);
    }
    assert_eq!(sha256(&bin), before, "the runtime binary changed!");
    escape(
        "cve-2019-5736-entrypoint",
        "entrypoints /proc/self/exe, #!/proc/self/exe and a script chained to it",
        &format!("{}; binary sha256 unchanged", saw.join("; ")),
    );
}

/// The original attack: the container replaces its /bin/sh with `#!/proc/self/exe`, the host
/// then runs `exec ID /bin/sh` (as `docker exec` did); also `exec ID /proc/self/exe` directly.
#[test]
fn cve_2019_5736_exec_runtime_binary() {
    require_root!();
    let mut rt = Runtime::new("cve5736exec");
    let bin = private_binary(&mut rt);
    let before = sha256(&bin);
    let b = rt.bundle(&[
        "/bin/busybox",
        "sh",
        "-c",
        "rm /bin/sh && printf '#!/proc/self/exe --version\\n' > /bin/sh && chmod 755 /bin/sh && echo replaced && exec /bin/probe sleep 600",
    ]);
    b.writable_rootfs();
    let (created, _) = start(&rt, &b);
    wait_for("the container to replace /bin/sh", 10, || created.stdout_now().contains("replaced"));
    let mut saw = Vec::new();
    for cmd in [&["/bin/sh"][..], &["/proc/self/exe", "--version"][..], &["sh"][..]] {
        let mut argv = vec!["exec", b.id.as_str()];
        argv.extend_from_slice(cmd);
        let o = rt.run(&argv);
        if rt.is_runc() {
            eprintln!("runc exec {cmd:?}: {o}");
            saw.push(format!("{cmd:?} → runc ran its sealed copy (exit {:?})", o.code()));
        } else {
            assert_eq!(o.code(), Some(255), "exec {cmd:?} must be refused\n{o}");
            assert!(!o.stdout.contains("version"), "the runtime's binary ran inside\n{o}");
            saw.push(format!("{cmd:?} → exit 255: {}", first_line(&o.stderr)));
        }
    }
    assert_eq!(sha256(&bin), before, "the runtime binary changed!");
    assert_eq!(rt.status(&b.id).as_deref(), Some("running"));
    escape(
        "cve-2019-5736-exec",
        "exec of a /bin/sh rewritten to #!/proc/self/exe, and exec /proc/self/exe",
        &format!("{}; binary sha256 unchanged", saw.join("; ")),
    );
}

/// A `created` container's init is still the runtime binary. A process exec'd into it tries to
/// read, open and write /proc/1/exe, keeps what it could open, and writes through it again once
/// `start` has replaced init's program (the moment the runtime binary is no longer busy).
#[test]
fn cve_2019_5736_created_init_exe() {
    require_root!();
    let mut rt = Runtime::new("cve5736init");
    let bin = private_binary(&mut rt);
    let before = sha256(&bin);
    let b = rt.bundle(&["/bin/probe", "sleep", "600"]);
    rt.create(&b).expect_ok("create");
    let script = r#"
        echo "readlink=$(readlink /proc/1/exe 2>&1)"
        if echo x >> /proc/1/exe; then echo WROTE-DIRECT; else echo direct-write-failed; fi
        { echo OPENED-INIT-EXE
          k=0
          while [ "$(readlink /proc/1/exe 2>/dev/null)" != /bin/probe ] && [ $k -lt 300 ]; do usleep 20000; k=$((k+1)); done
          sleep 0.2
          if echo x >> /proc/self/fd/3; then echo WROTE-THROUGH-FD; else echo fd-write-failed; fi
        } 3</proc/1/exe || echo open-denied
        echo attacker-done
    "#;
    let attacker = rt.spawn(&["exec", &b.id, "sh", "-c", script]);
    std::thread::sleep(Duration::from_millis(500));
    rt.run(&["start", &b.id]).expect_ok("start");
    let o = attacker.wait();
    eprintln!("attacker:\n{o}");
    assert!(o.stdout.contains("attacker-done"), "the attacker ran to the end\n{o}");
    assert!(!o.stdout.contains("WROTE"), "a write to init's exe went through\n{o}");
    if !rt.is_runc() {
        assert!(
            o.stdout.contains("open-denied"),
            "the created container's init (the runtime binary) must not be openable\n{o}"
        );
    }
    assert_eq!(sha256(&bin), before, "the runtime binary changed!");
    escape(
        "cve-2019-5736-created-init",
        "exec into a created container: readlink/write/open /proc/1/exe, write through the fd after start",
        &format!(
            "{}; {}; binary sha256 unchanged",
            o.stdout.lines().find(|l| l.starts_with("readlink=")).unwrap_or(""),
            o.stdout
                .lines()
                .filter(|l| !l.starts_with("readlink=") && !l.contains("attacker-done"))
                .map(str::trim)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );
}

/// The race: the container's init loops over every visible /proc/<pid>/exe, and for each that is
/// not its own busybox/probe, opens it, holds it, and keeps writing through it, while the host
/// runs many `exec`s that join the container. A control process running a writable copy of
/// busybox proves the attack works when the target is reachable.
#[test]
fn cve_2019_5736_exec_race() {
    exec_race("cve5736race", false);
}

/// The same race by a container holding CAP_SYS_PTRACE without a user namespace of its own: the
/// kernel lets it open even a non-dumpable process's /proc/<pid>/exe, so what it opens must be a
/// copy of the runtime that can't be written.
#[test]
fn cve_2019_5736_exec_race_with_cap_sys_ptrace() {
    exec_race("cve5736ptrace", true);
}

fn exec_race(name: &str, ptrace: bool) {
    require_root!();
    let mut rt = Runtime::new(name);
    let bin = private_binary(&mut rt);
    let before = sha256(&bin);
    let script = r#"
        mkdir /tmp/ctl && cp /bin/busybox /tmp/ctl/busybox
        /tmp/ctl/busybox sleep 1 &
        seen=" "
        end=$(( $(date +%s) + 8 ))
        echo attacker-ready
        while [ $(date +%s) -lt $end ]; do
          for p in /proc/[0-9]*; do
            t=$(readlink $p/exe 2>/dev/null) || continue
            case "$t" in /bin/busybox|/bin/probe|"") continue;; esac
            case "$seen" in *" $p:$t "*) continue;; esac
            seen="$seen$p:$t "
            ( exec 3<"$p/exe" || exit 0
              echo "OPENED $p $t"
              k=0
              while [ $k -lt 60 ]; do
                if echo x >>/proc/self/fd/3; then echo "WROTE $p $t"; exit 0; fi
                usleep 50000; k=$((k+1))
              done
              echo "GAVEUP $p $t" ) 2>/dev/null &
          done
        done
        wait
        echo attacker-done
    "#;
    let b = rt.bundle(&["/bin/sh", "-c", script]);
    tmpfs_at(&b, "/tmp", &[]);
    if ptrace {
        b.config_mut(|c| {
            for set in ["bounding", "effective", "permitted"] {
                c["process"]["capabilities"][set].as_array_mut().unwrap().push("CAP_SYS_PTRACE".into());
            }
        });
    }
    let (created, _) = start(&rt, &b);
    wait_for("the attacker", 10, || created.stdout_now().contains("attacker-ready"));
    let mut execs = 0;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(6) {
        let o = rt.run(&["exec", &b.id, "/bin/probe", "exit", "0"]);
        if !o.ok() {
            break; // the container ended early; judged below
        }
        execs += 1;
    }
    rt.wait_status(&b.id, "stopped");
    let out = created.stdout_now();
    eprintln!("attacker output:\n{out}");
    assert!(out.contains("attacker-done"), "the attacker finished: {out:?}");
    let control: Vec<&str> = out.lines().filter(|l| l.contains(" /tmp/ctl/busybox")).collect();
    assert!(
        control.iter().any(|l| l.starts_with("WROTE")),
        "control: the attack must work on a reachable writable binary: {out:?}"
    );
    let wrote: Vec<&str> = out.lines().filter(|l| l.starts_with("WROTE") && !l.contains(" /tmp/ctl/busybox")).collect();
    assert!(wrote.is_empty(), "the attacker wrote a runtime binary: {wrote:?}");
    let opened: Vec<&str> =
        out.lines().filter(|l| l.starts_with("OPENED") && !l.contains(" /tmp/ctl/busybox")).collect();
    if !rt.is_runc() && !ptrace {
        assert!(opened.is_empty(), "the attacker opened a runtime process's exe: {opened:?}");
    }
    assert!(execs >= 5, "too few execs to mean anything ({execs})");
    assert_eq!(sha256(&bin), before, "the runtime binary changed!");
    escape(
        &format!("cve-2019-5736-exec-race{}", if ptrace { "-cap-sys-ptrace" } else { "" }),
        &format!("open+hold+write every /proc/<pid>/exe in a loop during {execs} concurrent execs"),
        &format!(
            "control /tmp/ctl/busybox written ({}); other exes opened: {opened:?}; written: none; binary sha256 unchanged",
            control.join(" | ")
        ),
    );
}

// ---------------------------------------------------------------------------------------------
// CVE-2024-21626
// ---------------------------------------------------------------------------------------------

/// A host directory with one canary file, standing for what a leaked fd would expose.
fn host_canary(rt: &Runtime) -> (PathBuf, String) {
    let dir = rt.tempdir();
    let name = format!("HOST-CANARY-{}", std::process::id());
    fs::write(dir.join(&name), "host\n").unwrap();
    (dir, name)
}

/// fds 3..=12 of the runtime are O_DIRECTORY handles on the host canary dir (a careless caller).
fn leak_canary_fds(cmd: &mut Command, dir: &File) {
    tinyrun_conformance::pass_fds(cmd, (3..=12).map(|n| (dir.as_raw_fd(), n)).collect());
}

/// Only stdio (plus what `--preserve-fds` asks for) reaches init and exec'd processes, even when
/// the runtime itself inherited host directory fds.
#[test]
fn cve_2024_21626_no_fd_leak() {
    require_root!();
    let rt = Runtime::new("cve21626fds");
    let (canary, _) = host_canary(&rt);
    let dirfd = File::open(&canary).unwrap();

    let b = rt.bundle(&["/bin/probe", "fds"]);
    let o = rt.run_bundle(&b).expect_ok("probe fds");
    assert_eq!(fd_keys(&o.stdout), ["fd.0", "fd.1", "fd.2"], "run: only stdio\n{o}");

    let b = rt.bundle(&["/bin/probe", "fds"]);
    let mut cmd = rt.command(&["run", "--bundle", b.path(), &b.id]);
    leak_canary_fds(&mut cmd, &dirfd);
    let o = rt.output(cmd).expect_ok("run with inherited fds");
    assert_eq!(fd_keys(&o.stdout), ["fd.0", "fd.1", "fd.2"], "run with fds 3-12 inherited\n{o}");

    let b = rt.bundle(&["/bin/probe", "fds"]);
    let mut cmd = rt.command(&["run", "--preserve-fds", "2", "--bundle", b.path(), &b.id]);
    leak_canary_fds(&mut cmd, &dirfd);
    let o = rt.output(cmd).expect_ok("run --preserve-fds 2");
    assert_eq!(
        fd_keys(&o.stdout),
        ["fd.0", "fd.1", "fd.2", "fd.3", "fd.4"],
        "--preserve-fds 2: exactly stdio + 3, 4\n{o}"
    );

    let b = rt.bundle(&["/bin/probe", "sleep", "600"]);
    start(&rt, &b);
    let mut cmd = rt.command(&["exec", &b.id, "/bin/probe", "fds"]);
    leak_canary_fds(&mut cmd, &dirfd);
    let o = rt.output(cmd).expect_ok("exec probe fds");
    assert_eq!(fd_keys(&o.stdout), ["fd.0", "fd.1", "fd.2"], "exec: only stdio\n{o}");
    let o = rt.run(&["exec", &b.id, "/bin/probe", "fds"]).expect_ok("exec probe fds");
    assert_eq!(fd_keys(&o.stdout), ["fd.0", "fd.1", "fd.2"], "exec: only stdio\n{o}");
    let mut cmd = rt.command(&["exec", "--preserve-fds", "1", &b.id, "/bin/probe", "fds"]);
    leak_canary_fds(&mut cmd, &dirfd);
    let o = rt.output(cmd).expect_ok("exec --preserve-fds 1");
    assert_eq!(fd_keys(&o.stdout), ["fd.0", "fd.1", "fd.2", "fd.3"], "{o}");
    escape(
        "cve-2024-21626-fds",
        "probe fds in run/exec, with and without 10 host dir fds inherited by the runtime, and --preserve-fds",
        "only fds 0-2 (plus exactly the preserved ones)",
    );
}

const CWD_SCRIPT: &str =
    "probe cwd || echo CWD-UNREACHABLE; for f in HOST-CANARY-*; do [ -e \"$f\" ] && echo \"ESCAPED-TO-HOST $f\"; done; echo cwd-done";

/// Judge one `/proc/self/fd/N` cwd attempt; returns a short description.
fn judge_cwd(what: &str, o: &Out, out: &str) -> String {
    assert!(!out.contains("ESCAPED-TO-HOST"), "{what}: the process's cwd is a host directory!\n{o}\nstdout: {out}");
    assert!(
        !out.contains("CWD-UNREACHABLE"),
        "{what}: the process ran with a cwd outside the container root\n{o}\nstdout: {out}"
    );
    if out.contains("cwd-done") {
        let cwd = kv(out).get("cwd").cloned().unwrap_or_default();
        assert!(cwd.starts_with('/'), "{what}: cwd {cwd:?}\n{o}");
        format!("ran in {cwd}")
    } else {
        assert!(!o.ok() || o.code() != Some(0), "{what}: neither ran nor failed\n{o}");
        "refused".to_string()
    }
}

/// The cwds tried: `/proc/self/fd/N` for N in 3..=12 (alone, and with host dir fds 3-12 inherited
/// by the runtime: "L"), and magic links that name a process's cwd or root.
fn cwd_cases() -> Vec<(String, bool)> {
    let mut v = Vec::new();
    for leak in [false, true] {
        for n in 3..=12 {
            v.push((format!("/proc/self/fd/{n}"), leak));
        }
    }
    for p in ["/proc/self/cwd", "/proc/thread-self/cwd", "/proc/1/cwd", "/proc/self/root", "/proc/1/root/.."] {
        v.push((p.to_string(), true));
    }
    v
}

fn case_label(cwd: &str, leak: bool) -> String {
    let short = cwd.strip_prefix("/proc/self/fd/").unwrap_or(cwd);
    format!("{short}{}", if leak { "L" } else { "" })
}

/// process.cwd set to each of [`cwd_cases`], with the runtime itself started in the host canary
/// directory: each run fails or stays inside the container.
#[test]
fn cve_2024_21626_init_cwd_proc_self_fd() {
    require_root!();
    let rt = Runtime::new("cve21626cwd");
    let (canary, _) = host_canary(&rt);
    let dirfd = File::open(&canary).unwrap();
    let mut results = Vec::new();
    for (cwd, leak) in cwd_cases() {
        let b = rt.bundle(&["/bin/sh", "-c", CWD_SCRIPT]);
        b.config_mut(|c| c["process"]["cwd"] = cwd.clone().into());
        let mut cmd = rt.command(&["run", "--bundle", b.path(), &b.id]);
        cmd.current_dir(&canary);
        if leak {
            leak_canary_fds(&mut cmd, &dirfd);
        }
        let o = rt.output(cmd);
        let what = format!("cwd {cwd} (leaked fds: {leak})");
        let out = o.stdout.clone();
        if rt.is_runc() && (out.contains("ESCAPED-TO-HOST") || out.contains("CWD-UNREACHABLE")) {
            // runc 1.1.5 predates the CVE-2024-21626 fix (1.1.12).
            eprintln!("KNOWN: runc 1.1.5 is vulnerable to CVE-2024-21626 ({what}): {out}");
            results.push(format!("{}: runc ESCAPED", case_label(&cwd, leak)));
            let _ = rt.run(&["delete", "--force", &b.id]);
            continue;
        }
        let r = judge_cwd(&what, &o, &out);
        if r == "refused" {
            rt.assert_nothing_left(&b.id);
        }
        results.push(format!("{}: {r}", case_label(&cwd, leak)));
    }
    escape(
        "cve-2024-21626-init-cwd",
        "process.cwd /proc/self/fd/3..12 (L: with host dir fds 3-12 inherited by the runtime), /proc/{self,thread-self,1}/cwd, /proc/self/root, /proc/1/root/.., runtime started in a host dir",
        &results.join(", "),
    );
}

/// `exec --cwd` set to each of [`cwd_cases`], the runtime started in the host canary directory.
#[test]
fn cve_2024_21626_exec_cwd_proc_self_fd() {
    require_root!();
    let rt = Runtime::new("cve21626exec");
    let (canary, _) = host_canary(&rt);
    let dirfd = File::open(&canary).unwrap();
    let b = rt.bundle(&["/bin/probe", "sleep", "600"]);
    start(&rt, &b);
    let mut results = Vec::new();
    for (cwd, leak) in cwd_cases() {
        let mut cmd = rt.command(&["exec", "--cwd", &cwd, &b.id, "/bin/sh", "-c", CWD_SCRIPT]);
        cmd.current_dir(&canary);
        if leak {
            leak_canary_fds(&mut cmd, &dirfd);
        }
        let o = rt.output(cmd);
        let what = format!("exec --cwd {cwd} (leaked fds: {leak})");
        if rt.is_runc() && (o.stdout.contains("ESCAPED-TO-HOST") || o.stdout.contains("CWD-UNREACHABLE")) {
            eprintln!("KNOWN: runc 1.1.5 is vulnerable to CVE-2024-21626 ({what}): {}", o.stdout);
            results.push(format!("{}: runc ESCAPED", case_label(&cwd, leak)));
            continue;
        }
        let r = judge_cwd(&what, &o, &o.stdout);
        if r == "refused" {
            assert_eq!(o.code(), Some(255), "{what}: an exec failure is 255\n{o}");
        }
        results.push(format!("{}: {r}", case_label(&cwd, leak)));
    }
    assert_eq!(rt.status(&b.id).as_deref(), Some("running"));
    escape(
        "cve-2024-21626-exec-cwd",
        "exec --cwd with the same cwds, runtime started in a host dir",
        &results.join(", "),
    );
}

// ---------------------------------------------------------------------------------------------
// Symlinks pointing out of the rootfs
// ---------------------------------------------------------------------------------------------

/// A host scratch directory with one file, and its expected state.
struct HostDir {
    dir: PathBuf,
}

impl HostDir {
    fn new(rt: &Runtime) -> HostDir {
        let dir = rt.tempdir();
        fs::write(dir.join("canary"), "host-original\n").unwrap();
        HostDir { dir }
    }
    fn path(&self) -> &str {
        self.dir.to_str().unwrap()
    }
    /// Nothing mounted at or under it in the host's mount table, nothing created, nothing changed,
    /// still writable from the host. `Err` says what was found.
    fn check(&self, what: &str) -> Result<(), String> {
        let mounted = mounts_under(&self.dir);
        if !mounted.is_empty() {
            return Err(format!("{what}: host path {} has a mount on it: {mounted:?}", self.dir.display()));
        }
        let mut entries: Vec<String> =
            fs::read_dir(&self.dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        entries.sort();
        if entries != ["canary"] {
            return Err(format!("{what}: host dir {} was written to: {entries:?}", self.dir.display()));
        }
        if fs::read_to_string(self.dir.join("canary")).unwrap() != "host-original\n" {
            return Err(format!("{what}: host file {}/canary changed", self.dir.display()));
        }
        let probe = self.dir.join(".host-write-check");
        fs::write(&probe, "x").map_err(|e| format!("{what}: host dir no longer writable: {e}"))?;
        fs::remove_file(&probe).unwrap();
        Ok(())
    }

    #[track_caller]
    fn assert_untouched(&self, what: &str) {
        if let Err(e) = self.check(what) {
            panic!("{e}");
        }
    }
}

/// Fail with `problems`, except on runc 1.1.5 (the oracle), which predates the fix for `cve`:
/// there the problems are printed as the known vulnerability they are.
#[track_caller]
fn verdict(rt: &Runtime, cve: &str, problems: &[String]) {
    if problems.is_empty() {
        return;
    }
    if rt.is_runc() {
        eprintln!("KNOWN: runc 1.1.5 is vulnerable to {cve}: {problems:#?}");
        return;
    }
    panic!("{cve}: {problems:#?}");
}

/// The outcome of a hostile bundle: `Err(reason)` if create failed (after checking that nothing
/// is left), else `Ok(stdout)` of the container run to completion.
#[track_caller]
fn create_and_run(rt: &Runtime, b: &Bundle) -> Result<String, String> {
    let o = rt.create(b);
    if !o.ok() {
        assert!(o.code().is_some(), "{o}");
        rt.assert_nothing_left(&b.id);
        return Err(first_line(&o.stderr));
    }
    rt.run(&["start", &b.id]).expect_ok("start");
    rt.wait_status(&b.id, "stopped");
    Ok(o.stdout_now())
}

/// mountinfo mount points (field 5), as seen inside the container.
fn mount_points(mountinfo: &str) -> Vec<String> {
    mountinfo.lines().filter_map(|l| l.split(' ').nth(4)).map(|s| s.replace("\\040", " ")).collect()
}

/// Mount destinations that are symlinks to a host dir (absolute), a host file (bind), a relative
/// `../../..` path, and a destination whose *parent* is a `../..` symlink.
#[test]
fn symlink_mount_destinations_stay_in_rootfs() {
    require_root!();
    let rt = Runtime::new("escsymmnt");
    let abs = HostDir::new(&rt);
    let rel = HostDir::new(&rt);
    let via_parent = HostDir::new(&rt);
    let file_dir = HostDir::new(&rt);
    let host_file = file_dir.dir.join("canary");
    let b = rt.bundle(&[
        "/bin/sh",
        "-c",
        "probe mounts; echo pwned > /evil-abs/pwned; echo pwned > /evil-rel/pwned; echo MOUNTS-DONE",
    ]);
    let rootfs = b.writable_rootfs();
    let ups = "../".repeat(12);
    std::os::unix::fs::symlink(&abs.dir, rootfs.join("evil-abs")).unwrap();
    std::os::unix::fs::symlink(format!("{ups}{}", rel.path().trim_start_matches('/')), rootfs.join("evil-rel"))
        .unwrap();
    std::os::unix::fs::symlink(&ups, rootfs.join("up")).unwrap();
    let src = rt.work().join("bind-src");
    fs::write(&src, "bound\n").unwrap();
    tmpfs_at(&b, "/evil-abs", &[]);
    tmpfs_at(&b, "/evil-rel", &[]);
    let parent_dest = format!("/up{}", via_parent.path());
    tmpfs_at(&b, &parent_dest, &[]);
    // The bind onto a file symlink goes in a second bundle, so that a refusal of it does not
    // hide where the directory mounts land.
    let bf = rt.bundle(&["/bin/sh", "-c", "probe mounts; echo MOUNTS-DONE"]);
    let rootfs_f = bf.writable_rootfs();
    std::os::unix::fs::symlink(&host_file, rootfs_f.join("evil-file")).unwrap();
    bf.add_mount(json!({"destination": "/evil-file", "type": "bind", "source": src, "options": ["bind", "ro"]}));

    let r = create_and_run(&rt, &b);
    for (h, what) in [(&abs, "absolute symlink"), (&rel, "relative ../ symlink"), (&via_parent, "symlinked parent")] {
        h.assert_untouched(what);
    }
    let rf = create_and_run(&rt, &bf);
    file_dir.assert_untouched("bind onto a file symlink");
    let saw = match r {
        Err(e) => format!("create refused ({e})"),
        Ok(out) => {
            assert!(out.contains("MOUNTS-DONE"), "{out}");
            let points = mount_points(&out);
            for p in [abs.path(), rel.path(), via_parent.path()] {
                assert!(points.iter().any(|m| m == p), "expected the tmpfs at {p} inside the container: {points:?}");
                assert!(
                    rootfs.join(p.trim_start_matches('/')).is_dir(),
                    "the mountpoint {p} was made inside the rootfs"
                );
            }
            "every tmpfs landed at the symlink's target resolved inside the rootfs".to_string()
        }
    };
    let saw_f = match rf {
        Err(e) => format!("file bind refused ({e})"),
        Ok(out) => {
            let points = mount_points(&out);
            assert!(
                points.iter().any(|m| m == host_file.to_str().unwrap()),
                "the bind landed on the in-rootfs path of the file symlink: {points:?}"
            );
            "file bind landed inside the rootfs".to_string()
        }
    };
    escape(
        "symlink-mount-destination",
        "tmpfs/bind destinations that are symlinks to absolute host dirs/files, ../../.. and a ../.. parent",
        &format!("{saw}; {saw_f}; host dirs untouched (no mount, no new file)"),
    );
}

/// Remove the /dev tmpfs (keeping /dev/pts, /dev/shm, /dev/mqueue): the image's own /dev is
/// used, and the runtime still makes the default device nodes and links in it.
fn drop_dev_tmpfs(b: &Bundle) {
    b.config_mut(|c| c["mounts"].as_array_mut().unwrap().retain(|m| m["destination"] != "/dev"));
}

/// `/dev` in the image is a symlink to a host directory (CVE-2026-41579 family): with the
/// default /dev tmpfs mount, and without it (the runtime then makes the default device nodes,
/// /dev/ptmx, /dev/fd and friends in the image's /dev, and mounts /dev/pts, /dev/shm and
/// /dev/mqueue below it).
#[test]
fn dev_symlink_to_host_dir() {
    require_root!();
    let rt = Runtime::new("escdevlink");
    let mut saw = Vec::new();
    let mut problems = Vec::new();
    for with_dev_mount in [true, false] {
        let host = HostDir::new(&rt);
        let missing = HostDir::new(&rt);
        for (target, h) in [(host.dir.clone(), &host), (missing.dir.join("sub"), &missing)] {
            let b = rt.bundle(&["/bin/sh", "-c", "probe stat /dev/null; ls /dev; echo DEV-DONE"]);
            let rootfs = b.writable_rootfs();
            fs::remove_dir_all(rootfs.join("dev")).unwrap();
            std::os::unix::fs::symlink(&target, rootfs.join("dev")).unwrap();
            if !with_dev_mount {
                drop_dev_tmpfs(&b);
            }
            let what = format!("/dev -> {} (dev tmpfs: {with_dev_mount})", target.display());
            let r = create_and_run(&rt, &b);
            let host_ok = h.check(&what);
            let s = match r {
                Err(e) => format!("create refused ({e})"),
                Ok(out) => {
                    assert!(out.contains("DEV-DONE"), "{what}: {out}");
                    let kv = kv(&out);
                    if kv.get("rdev").map(String::as_str) != Some("1:3") {
                        problems.push(format!("{what}: /dev/null inside is not 1:3: {out}"));
                    }
                    "/dev made inside the rootfs".to_string()
                }
            };
            if let Err(e) = host_ok {
                problems.push(e.clone());
                saw.push(format!("[{what}] HOST WRITTEN: {e}"));
            } else {
                saw.push(format!("[{what}] {s}"));
            }
        }
    }
    escape(
        "dev-symlink",
        "rootfs /dev replaced by a symlink to a host dir (existing and missing), with and without the /dev tmpfs",
        &format!("{}; host dirs untouched: {}", saw.join("; "), problems.is_empty()),
    );
    verdict(&rt, "CVE-2026-41579 (/dev symlink)", &problems);
}

/// `/proc` in the image is a symlink to a host directory: the proc mount must not land there.
#[test]
fn proc_symlink_to_host_dir() {
    require_root!();
    let rt = Runtime::new("escproclink");
    let host = HostDir::new(&rt);
    let b = rt.bundle(&["/bin/sh", "-c", "probe stat /proc/self; echo PROC-DONE"]);
    let rootfs = b.writable_rootfs();
    fs::remove_dir_all(rootfs.join("proc")).unwrap();
    std::os::unix::fs::symlink(&host.dir, rootfs.join("proc")).unwrap();
    let r = create_and_run(&rt, &b);
    host.assert_untouched("/proc symlink");
    let saw = match r {
        Err(e) => format!("create refused ({e})"),
        Ok(out) => {
            assert!(out.contains("PROC-DONE"), "{out}");
            "proc mounted inside the rootfs".to_string()
        }
    };
    escape("proc-symlink", "rootfs /proc replaced by a symlink to a host dir", &format!("{saw}; host dir untouched"));
}

/// Mount destinations that reach a host directory through a `/proc/self/fd/N` magic link of the
/// process building the rootfs. The runtime is started with fds 3-12 open on a host directory (a
/// careless caller; `--preserve-fds` hands such fds on on purpose), and the config mounts `/proc`
/// first, as every default config does, so while the later mounts are made
/// `<rootfs>/proc/self/fd/N` is a real magic link to that directory. Tried: a rootfs symlink
/// `/evil -> /proc/self/fd/3` under a tmpfs destination, the same through fd 4 under a file bind
/// destination, and a destination spelled `/proc/self/fd/7/sub` in config.json. Following the
/// link would make the mount point (`sub`, `file`) in the host directory: in-root resolution must
/// refuse the magic link (ELOOP; EXDEV is the kernel's own refusal under RESOLVE_IN_ROOT), or
/// resolve it inside the rootfs.
#[test]
fn magic_link_mount_destinations_refused() {
    require_root!();
    let rt = Runtime::new("escmagic");
    let src_file = rt.work().join("bind-src");
    fs::write(&src_file, "bound\n").unwrap();
    let tmpfs = |dest: &str| json!({"destination": dest, "type": "tmpfs", "source": "tmpfs"});
    let bind = json!({"destination": "/evil/file", "type": "bind", "source": src_file, "options": ["bind", "ro"]});
    let cases = [
        ("/evil -> /proc/self/fd/3, tmpfs at /evil/sub", Some("/proc/self/fd/3"), &[][..], tmpfs("/evil/sub")),
        ("/evil -> /proc/self/fd/4, file bind at /evil/file", Some("/proc/self/fd/4"), &[][..], bind),
        (
            "tmpfs at /proc/self/fd/7/sub, --preserve-fds 10",
            None,
            &["--preserve-fds", "10"][..],
            tmpfs("/proc/self/fd/7/sub"),
        ),
    ];
    let (mut saw, mut escaped) = (Vec::new(), Vec::new());
    for (what, link, flags, mount) in cases {
        let host = HostDir::new(&rt);
        let dirfd = File::open(&host.dir).unwrap();
        let b = rt.bundle(&["/bin/sh", "-c", "probe mounts; echo MAGIC-DONE"]);
        assert_eq!(b.config()["mounts"][0]["destination"], "/proc", "{what}: the attack needs /proc mounted first");
        let rootfs = b.writable_rootfs();
        if let Some(target) = link {
            std::os::unix::fs::symlink(target, rootfs.join("evil")).unwrap();
        }
        let dest = mount["destination"].as_str().unwrap().to_string();
        b.add_mount(mount);
        let mut args = vec!["create"];
        args.extend_from_slice(flags);
        args.extend_from_slice(&["--bundle", b.path(), &b.id]);
        let mut cmd = rt.command(&args);
        leak_canary_fds(&mut cmd, &dirfd);
        let o = rt.output(cmd);
        let r = if o.ok() {
            rt.run(&["start", &b.id]).expect_ok("start");
            rt.wait_status(&b.id, "stopped");
            Ok(o.stdout_now())
        } else {
            assert!(o.code().is_some(), "{what}\n{o}");
            rt.assert_nothing_left(&b.id);
            Err(first_line(&o.stderr))
        };
        if let Err(e) = host.check(what) {
            // Every case is tried before failing, so one run shows each case's outcome.
            escaped.push(e.clone());
            saw.push(format!("[{what}] HOST WRITTEN: {e}"));
            continue;
        }
        let s = match r {
            Ok(out) => {
                assert!(out.contains("MAGIC-DONE"), "{what}: {out}");
                "ran, mount inside the rootfs".to_string()
            }
            Err(e) => {
                assert!(e.contains(&dest), "{what}: the error names the destination: {e}");
                // Refused for meeting the magic link, not for something else that would leave
                // the link untried.
                if !rt.is_runc() {
                    let magic = ["ELOOP", "EXDEV"];
                    assert!(magic.iter().any(|m| e.contains(m)), "{what}: refused, but not at the magic link: {e}");
                }
                format!("refused ({e})")
            }
        };
        saw.push(format!("[{what}] {s}"));
    }
    escape(
        "magic-link-destination",
        "mount destinations through /proc/self/fd/N magic links to a host dir (fds 3-12 inherited by the runtime)",
        &format!("{}; host dirs untouched: {}", saw.join("; "), escaped.is_empty()),
    );
    assert!(escaped.is_empty(), "a magic link led a mount out of the rootfs: {escaped:#?}");
}

/// maskedPaths entries that are symlinks to a host file and a host dir, and a readonlyPaths entry
/// that is a symlink to a host dir.
#[test]
fn masked_and_readonly_path_symlinks() {
    require_root!();
    let rt = Runtime::new("escmaskro");
    let mfile = HostDir::new(&rt);
    let mdir = HostDir::new(&rt);
    let rodir = HostDir::new(&rt);
    let b = rt.bundle(&["/bin/sh", "-c", "probe mounts; probe cat /evil-mask-file; echo MASK-DONE"]);
    let rootfs = b.writable_rootfs();
    std::os::unix::fs::symlink(mfile.dir.join("canary"), rootfs.join("evil-mask-file")).unwrap();
    std::os::unix::fs::symlink(&mdir.dir, rootfs.join("evil-mask-dir")).unwrap();
    std::os::unix::fs::symlink(&rodir.dir, rootfs.join("evil-ro")).unwrap();
    b.config_mut(|c| {
        let m = c["linux"]["maskedPaths"].as_array_mut().unwrap();
        m.push("/evil-mask-file".into());
        m.push("/evil-mask-dir".into());
        c["linux"]["readonlyPaths"].as_array_mut().unwrap().push("/evil-ro".into());
    });
    let o = rt.create(&b);
    // Check while the container is alive and holds its mounts.
    mfile.assert_untouched("masked file symlink");
    mdir.assert_untouched("masked dir symlink");
    rodir.assert_untouched("read-only path symlink");
    let saw = if o.ok() {
        rt.run(&["start", &b.id]).expect_ok("start");
        rt.wait_status(&b.id, "stopped");
        let out = o.stdout_now();
        assert!(out.contains("MASK-DONE"), "{out}");
        assert!(!out.contains("host-original"), "the masked path still shows the host file's content: {out}");
        "masks/read-only binds applied inside the rootfs (or skipped)".to_string()
    } else {
        rt.assert_nothing_left(&b.id);
        format!("create refused ({})", first_line(&o.stderr))
    };
    mfile.assert_untouched("masked file symlink");
    mdir.assert_untouched("masked dir symlink");
    rodir.assert_untouched("read-only path symlink");
    escape(
        "masked-readonly-symlink",
        "maskedPaths entries symlinked to a host file and dir, readonlyPaths entry symlinked to a host dir",
        &format!("{saw}; host file/dirs untouched, no host mount"),
    );
}

/// CVE-2025-31133: with no /dev mount, the image's /dev/null is a symlink to a host file; masking
/// (which binds /dev/null over /proc/kcore etc.) must not expose or touch that file.
#[test]
fn dev_null_symlink_used_for_masking() {
    require_root!();
    let rt = Runtime::new("escdevnull");
    let host = HostDir::new(&rt);
    let b = rt.bundle(&[
        "/bin/sh",
        "-c",
        "for f in /proc/kcore /proc/keys /proc/timer_list /proc/sched_debug; do probe cat $f 2>/dev/null | head -c 200; done; probe stat /dev/null; echo NULL-DONE",
    ]);
    let rootfs = b.writable_rootfs();
    std::os::unix::fs::symlink(host.dir.join("canary"), rootfs.join("dev/null")).unwrap();
    drop_dev_tmpfs(&b);
    let r = create_and_run(&rt, &b);
    host.assert_untouched("/dev/null symlink");
    let mut problems = Vec::new();
    let saw = match r {
        Err(e) => format!("create refused ({e})"),
        Ok(out) => {
            assert!(out.contains("NULL-DONE"), "{out}");
            assert!(
                !out.contains("host-original"),
                "a masked path shows the host file the image's /dev/null points to: {out}"
            );
            let kv = kv(&out);
            if kv.get("rdev").map(String::as_str) != Some("1:3") {
                problems.push(format!(
                    "/dev/null inside is not the 1:3 device the spec requires (and masking binds it): {out}"
                ));
                format!(
                    "/dev/null left as the image's {} (no host content shown)",
                    kv.get("type").map(String::as_str).unwrap_or("?")
                )
            } else {
                "masked paths show nothing of the host file; /dev/null is 1:3".to_string()
            }
        }
    };
    escape(
        "dev-null-symlink",
        "image /dev/null -> host file, no /dev tmpfs, default maskedPaths",
        &format!("{saw}; host file untouched"),
    );
    verdict(&rt, "CVE-2025-31133 (/dev/null symlink)", &problems);
}

/// CVE-2025-52565: with no /dev mount and a terminal, the image's /dev/console is a symlink; the
/// pty bind must not follow it (to a host file, or onto another file in the container).
#[test]
fn dev_console_symlink_with_terminal() {
    require_root!();
    let rt = Runtime::new("escconsole");
    let host = HostDir::new(&rt);
    let b = rt.bundle(&["/bin/sh", "-c", "probe mounts; probe stat /dev/console; echo CONSOLE-DONE"]);
    let rootfs = b.writable_rootfs();
    fs::write(rootfs.join("etc/victim"), "in-container-file\n").unwrap();
    std::os::unix::fs::symlink("/etc/victim", rootfs.join("dev/console")).unwrap();
    drop_dev_tmpfs(&b);
    b.config_mut(|c| c["process"]["terminal"] = true.into());
    let sock_path = rt.tempdir().join("console.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock_path).unwrap();
    listener.set_nonblocking(true).unwrap();
    let o = rt.run(&["create", "--console-socket", sock_path.to_str().unwrap(), "--bundle", b.path(), &b.id]);
    host.assert_untouched("/dev/console symlink");
    let mut problems = Vec::new();
    let saw = if o.ok() {
        let (stream, _) = listener.accept().expect("the runtime connected before create returned");
        let mut buf = [0u8; 4096];
        let mut iov = [std::io::IoSliceMut::new(&mut buf)];
        let mut space = nix::cmsg_space!([RawFd; 4]);
        let msg = nix::sys::socket::recvmsg::<()>(
            stream.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            nix::sys::socket::MsgFlags::MSG_CMSG_CLOEXEC,
        )
        .expect("recvmsg");
        let mut master = None;
        for c in msg.cmsgs().unwrap() {
            if let nix::sys::socket::ControlMessageOwned::ScmRights(fds) = c {
                // SAFETY: just received, owned by nobody else.
                master =
                    fds.first().map(|fd| unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(*fd) });
            }
        }
        let master = master.expect("a pty master");
        rt.run(&["start", &b.id]).expect_ok("start");
        // Drain the terminal until the program is done.
        let mut text = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline && !String::from_utf8_lossy(&text).contains("CONSOLE-DONE") {
            let mut b2 = [0u8; 4096];
            match nix::unistd::read(master.as_raw_fd(), &mut b2) {
                Ok(0) | Err(_) => break,
                Ok(n) => text.extend_from_slice(&b2[..n]),
            }
        }
        let out = String::from_utf8_lossy(&text).replace("\r\n", "\n");
        rt.wait_status(&b.id, "stopped");
        assert!(out.contains("CONSOLE-DONE"), "{out}");
        let points = mount_points(&out);
        let victim = fs::read_to_string(rootfs.join("etc/victim")).unwrap();
        if victim != "in-container-file\n" {
            problems.push(format!("/dev/console's symlink target /etc/victim was rewritten: {victim:?}"));
        }
        if points.iter().any(|p| p == "/etc/victim") {
            problems.push(format!("the pty was bound onto /dev/console's symlink target /etc/victim: {points:?}"));
            "pty bind-mounted onto the symlink target /etc/victim".to_string()
        } else {
            "pty bound on /dev/console itself, symlink target not mounted over".to_string()
        }
    } else {
        rt.assert_nothing_left(&b.id);
        format!("create refused ({})", first_line(&o.stderr))
    };
    host.assert_untouched("/dev/console symlink");
    escape(
        "dev-console-symlink",
        "image /dev/console -> /etc/victim with terminal=true and no /dev tmpfs",
        &format!("{saw}; host untouched"),
    );
    verdict(&rt, "CVE-2025-52565 (/dev/console symlink)", &problems);
}

// ---------------------------------------------------------------------------------------------
// From inside a default container
// ---------------------------------------------------------------------------------------------

/// Run `script` as the init of a default container (runc's default capabilities,
/// noNewPrivileges, its own pid/mount/net/... namespaces), with a writable tmpfs at /tmp.
#[track_caller]
fn inside(rt: &Runtime, script: &str) -> Out {
    let b = rt.bundle(&["/bin/sh", "-c", script]);
    tmpfs_at(&b, "/tmp", &[]);
    let kinds: Vec<Value> =
        b.config()["linux"]["namespaces"].as_array().unwrap().iter().map(|n| n["type"].clone()).collect();
    assert!(
        kinds.contains(&json!("pid")) && kinds.contains(&json!("mount")),
        "attacks only run in their own pid and mount namespaces"
    );
    let o = rt.run_bundle(&b);
    rt.assert_nothing_left(&b.id);
    o
}

fn marker(out: &str, key: &str) -> String {
    kv(out).get(key).cloned().unwrap_or_default()
}

#[test]
fn inside_mount_refused() {
    require_root!();
    let rt = Runtime::new("escmount");
    let o = inside(
        &rt,
        "mount -t tmpfs x /home 2>&1; echo tmpfs-rc=$?; \
         mount --bind /tmp /home 2>&1; echo bind-rc=$?; \
         mount -o remount,rw / 2>&1; echo remount-rc=$?; \
         touch /rootfs-write 2>&1; echo touch-rc=$?; \
         probe mounts | grep -c ' /home ' ; echo MOUNT-DONE",
    );
    let out = &o.stdout;
    assert!(out.contains("MOUNT-DONE"), "{o}");
    for k in ["tmpfs-rc", "bind-rc", "remount-rc", "touch-rc"] {
        assert_ne!(marker(out, k), "0", "{k}: must fail\n{o}");
    }
    assert!(out.contains("\n0\nMOUNT-DONE"), "no mount at /home\n{o}");
    escape(
        "mount",
        "mount -t tmpfs, mount --bind, remount / rw, then write the read-only root",
        &format!(
            "all failed ({:?}, touch: {:?})",
            out.lines().find(|l| l.starts_with("mount:")).unwrap_or(""),
            out.lines().find(|l| l.starts_with("touch:")).unwrap_or("")
        ),
    );
}

/// Module loading: no CAP_SYS_MODULE in any set, and insmod/modprobe fail. On a kernel built
/// without module support (no /proc/modules, as on this CI VM) init_module is ENOSYS for
/// everyone, so there the capability check is what proves the defence.
#[test]
fn inside_module_loading_refused() {
    require_root!();
    let rt = Runtime::new("escmodule");
    let modular = Path::new("/proc/modules").exists();
    let before = fs::read_to_string("/proc/modules").unwrap_or_default();
    let o = inside(
        &rt,
        "probe caps; dd if=/dev/zero of=/tmp/evil.ko bs=1k count=8 2>/dev/null; \
         insmod /tmp/evil.ko 2>&1; echo insmod-rc=$?; \
         modprobe evil 2>&1; echo modprobe-rc=$?; echo MOD-DONE",
    );
    let out = &o.stdout;
    assert!(out.contains("MOD-DONE"), "{o}");
    const CAP_SYS_MODULE: u64 = 1 << 16;
    for set in ["CapEff", "CapPrm", "CapBnd", "CapAmb", "CapInh"] {
        let v = u64::from_str_radix(&marker(out, set), 16).expect("probe caps");
        assert_eq!(v & CAP_SYS_MODULE, 0, "CAP_SYS_MODULE in {set}\n{o}");
    }
    assert_ne!(marker(out, "insmod-rc"), "0", "{o}");
    assert_ne!(marker(out, "modprobe-rc"), "0", "{o}");
    let insmod = out.lines().find(|l| l.starts_with("insmod:")).unwrap_or("");
    if modular {
        assert!(insmod.contains("Operation not permitted"), "init_module refused with EPERM\n{o}");
        let after = fs::read_to_string("/proc/modules").unwrap();
        assert_eq!(before.lines().count(), after.lines().count(), "host module list changed");
    } else {
        eprintln!("NOTE: this kernel has no module support; insmod says {insmod:?}");
    }
    // The modprobe sysctl is not written on purpose: it is not namespaced, so a runtime bug would
    // change the host; /proc/sys being read-only is checked by inside_proc_sys_write_refused.
    escape(
        "module-load",
        "insmod of an 8k file, modprobe",
        &format!(
            "{insmod:?}; no CAP_SYS_MODULE in any set{}",
            if modular { "; host /proc/modules unchanged" } else { " (kernel without module support)" }
        ),
    );
}

#[test]
fn inside_reboot_refused() {
    require_root!();
    let rt = Runtime::new("escreboot");
    // Belt and braces: prove the pid namespace first; only then try to reboot.
    let o = inside(
        &rt,
        "[ \"$(readlink /proc/self/ns/pid)\" != \"HOSTPIDNS\" ] || { echo NO-PIDNS; exit 99; }; \
         reboot -f 2>&1; echo reboot-rc=$?; halt -f 2>&1; echo halt-rc=$?; echo still-alive=$$"
            .replace("HOSTPIDNS", &fs::read_link("/proc/self/ns/pid").unwrap().to_string_lossy())
            .as_str(),
    );
    let out = &o.stdout;
    assert!(!out.contains("NO-PIDNS"), "{o}");
    assert_ne!(marker(out, "reboot-rc"), "0", "{o}");
    assert_ne!(marker(out, "halt-rc"), "0", "{o}");
    assert_eq!(marker(out, "still-alive"), "1", "the container's init survived\n{o}");
    escape(
        "reboot",
        "reboot -f and halt -f as the container's pid 1 (own pid namespace checked first)",
        &format!(
            "{:?}; container init still alive, host obviously up",
            out.lines().find(|l| l.starts_with("reboot:")).unwrap_or("")
        ),
    );
}

#[test]
fn inside_host_processes_unreachable() {
    require_root!();
    let rt = Runtime::new("eschostpid");
    let me = std::process::id();
    assert!(me > 100, "our pid must not collide with the container's small pids");
    let o = inside(
        &rt,
        &format!(
            "kill -0 {me} 2>&1; echo kill-rc=$?; \
             [ -e /proc/{me} ]; echo procdir-rc=$?; \
             probe cat /proc/{me}/environ 2>&1; echo environ-rc=$?; \
             echo nprocs=$(ls -d /proc/[0-9]* | wc -l); \
             echo init=$(probe cat /proc/1/cmdline | tr '\\0' ' '); echo PID-DONE"
        ),
    );
    let out = &o.stdout;
    assert!(out.contains("PID-DONE"), "{o}");
    assert_ne!(marker(out, "kill-rc"), "0", "kill -0 on a host pid\n{o}");
    assert_ne!(marker(out, "procdir-rc"), "0", "/proc/<host pid> visible\n{o}");
    assert_ne!(marker(out, "environ-rc"), "0", "{o}");
    let n: u32 = marker(out, "nprocs").parse().unwrap_or(999);
    assert!(n <= 6, "only the container's processes are visible ({n})\n{o}");
    assert!(marker(out, "init").starts_with("/bin/sh"), "{o}");
    escape(
        "host-process",
        &format!("kill -0 / read /proc/<pid>/environ of a host pid ({me}), count visible pids"),
        &format!(
            "host pid invisible ({:?}), {n} pids visible, pid 1 is the container's sh",
            out.lines().find(|l| l.contains("kill")).unwrap_or("")
        ),
    );
}

#[test]
fn inside_proc_sys_write_refused() {
    require_root!();
    let rt = Runtime::new("escprocsys");
    let host_hostname = fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let o = inside(
        &rt,
        "probe write /proc/sys/kernel/hostname; probe write /proc/sys/kernel/domainname; \
         probe sysctl kernel.hostname; echo SYS-DONE",
    );
    let out = &o.stdout;
    assert!(out.contains("SYS-DONE"), "{o}");
    let writes: Vec<&str> = out.lines().filter(|l| l.starts_with("write=")).collect();
    assert_eq!(writes.len(), 2, "{o}");
    for w in &writes {
        assert_ne!(*w, "write=ok", "a /proc/sys write went through\n{o}");
    }
    assert_eq!(marker(out, "kernel.hostname"), "tinyrun", "{o}");
    assert_eq!(fs::read_to_string("/proc/sys/kernel/hostname").unwrap(), host_hostname);
    escape(
        "proc-sys-write",
        "probe write /proc/sys/kernel/{hostname,domainname}",
        &format!("{writes:?}; hostname still tinyrun inside, host unchanged"),
    );
}

#[test]
fn inside_sys_write_refused() {
    require_root!();
    let rt = Runtime::new("escsys");
    // Files where a write that got through would still be harmless (rejected value), so only
    // the errno tells a read-only /sys (EROFS) from a writable one.
    let o = inside(
        &rt,
        "probe write /sys/kernel/mm/transparent_hugepage/enabled; probe write /sys/kernel/profiling; \
         probe write /sys/new-file; echo SYSFS-DONE",
    );
    let out = &o.stdout;
    assert!(out.contains("SYSFS-DONE"), "{o}");
    let writes: Vec<&str> = out.lines().filter(|l| l.starts_with("write=")).collect();
    assert_eq!(writes.len(), 3, "{o}");
    for w in &writes {
        assert_eq!(*w, "write=EROFS", "/sys must be read-only\n{o}");
    }
    escape(
        "sys-write",
        "probe write /sys/kernel/mm/transparent_hugepage/enabled, /sys/kernel/profiling, /sys/new-file",
        &format!("{writes:?}"),
    );
}

#[test]
fn inside_raw_sockets_refused() {
    require_root!();
    let rt = Runtime::new("escraw");
    let o = inside(
        &rt,
        "ip addr add 10.9.9.9/32 dev lo 2>&1; echo ipaddr-rc=$?; \
         arping -c1 -w1 -I lo 127.0.0.1 2>&1; echo arping-rc=$?; \
         ping -c1 -W1 127.0.0.1 2>&1; echo ping-rc=$?; \
         traceroute -m1 -w1 127.0.0.1 2>&1; echo traceroute-rc=$?; echo RAW-DONE",
    );
    let out = &o.stdout;
    assert!(out.contains("RAW-DONE"), "{o}");
    assert_ne!(marker(out, "arping-rc"), "0", "AF_PACKET raw socket\n{o}");
    assert!(
        out.lines().any(|l| l.starts_with("arping:") && l.contains("Operation not permitted")),
        "arping: socket(AF_PACKET) → EPERM\n{o}"
    );
    assert_ne!(marker(out, "traceroute-rc"), "0", "raw ICMP/UDP socket\n{o}");
    // ping may legitimately use an ICMP datagram socket if ping_group_range allows gid 0.
    let range = fs::read_to_string("/proc/sys/net/ipv4/ping_group_range").unwrap();
    let lo_hi: Vec<i64> = range.split_whitespace().map(|s| s.parse().unwrap()).collect();
    let dgram_allowed = lo_hi[0] <= 0 && 0 <= lo_hi[1];
    if !dgram_allowed {
        assert_ne!(marker(out, "ping-rc"), "0", "ping needs a raw socket here\n{o}");
    }
    assert_ne!(marker(out, "ipaddr-rc"), "0", "no CAP_NET_ADMIN\n{o}");
    escape(
        "raw-socket",
        "arping (AF_PACKET), ping, traceroute (SOCK_RAW), ip addr add",
        &format!(
            "all refused: {:?}, {:?} (ping_group_range {})",
            out.lines().find(|l| l.starts_with("arping:")).unwrap_or(""),
            out.lines().find(|l| l.starts_with("ping:")).unwrap_or(""),
            range.trim()
        ),
    );
}

#[test]
fn inside_mknod_refused() {
    require_root!();
    let rt = Runtime::new("escmknod");
    let o = inside(
        &rt,
        "mkfifo /tmp/fifo; echo mkfifo-rc=$?; \
         mknod /tmp/mem c 1 1 2>&1; echo mknod-c-rc=$?; \
         mknod /tmp/sda b 8 0 2>&1; echo mknod-b-rc=$?; echo MKNOD-DONE",
    );
    let out = &o.stdout;
    assert!(out.contains("MKNOD-DONE"), "{o}");
    assert_eq!(marker(out, "mkfifo-rc"), "0", "control: /tmp is writable\n{o}");
    assert_ne!(marker(out, "mknod-c-rc"), "0", "{o}");
    assert_ne!(marker(out, "mknod-b-rc"), "0", "{o}");
    assert!(
        out.lines().filter(|l| l.starts_with("mknod:") && l.contains("Operation not permitted")).count() == 2,
        "mknod → EPERM\n{o}"
    );
    escape(
        "mknod",
        "mknod c 1 1 (/dev/mem) and b 8 0 on a writable tmpfs (mkfifo there works)",
        &format!("{:?}", out.lines().find(|l| l.starts_with("mknod:")).unwrap_or("")),
    );
}
