//! `exec` into a container (cli-contract.md §2.3, §2.4 "exec --process", "exec -d", exit codes;
//! §3.1/§3.2 how containerd and conmon call it; issue 4 "exec with all of runc's flags"):
//! output and exit status passthrough (the program's status, 128+N on signal N, 255 when exec
//! itself fails), `--process`, `-d --pid-file`, `--cwd -e -u -g --cap --no-new-privs`,
//! `--preserve-fds`, joining every namespace and the cgroup, exec into a created container,
//! refusal on a stopped one, Go-style flag spellings, and the command after the id taken
//! verbatim even when it looks like flags.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tinyrun_conformance::{kv, pid_alive, require_root, Bundle, Out, Running, Runtime};

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// create + start `b`, wait until it runs; init's host pid.
#[track_caller]
fn start(rt: &Runtime, b: &Bundle) -> i32 {
    rt.create(b).expect_ok("create");
    rt.run(&["start", &b.id]).expect_ok("start");
    rt.wait_status(&b.id, "running")["pid"].as_i64().expect("state.pid") as i32
}

/// A running container whose init just sleeps.
#[track_caller]
fn sleeper(rt: &Runtime) -> (Bundle, i32) {
    let b = rt.bundle(&["/bin/probe", "sleep", "600"]);
    let pid = start(rt, &b);
    (b, pid)
}

/// `exec [flags...] ID [cmd...]`: `pre` are the flags before the id, `cmd` the command.
#[track_caller]
fn exec(rt: &Runtime, pre: &[&str], id: &str, cmd: &[&str]) -> Out {
    let mut argv = vec!["exec"];
    argv.extend_from_slice(pre);
    argv.push(id);
    argv.extend_from_slice(cmd);
    rt.run(&argv)
}

fn readlink(p: &str) -> String {
    std::fs::read_link(p).unwrap_or_else(|e| panic!("readlink {p}: {e}")).to_string_lossy().into_owned()
}

fn cap_bit(set_hex: &str, bit: u32) -> bool {
    u64::from_str_radix(set_hex, 16).expect("hex cap set") & (1u64 << bit) != 0
}

fn fd_keys(out: &str) -> Vec<String> {
    kv(out).keys().filter(|k| k.starts_with("fd.")).cloned().collect()
}

#[test]
fn exec_output_and_exit_code_passthrough() {
    require_root!();
    let rt = Runtime::new("execexit");
    let (b, _) = sleeper(&rt);
    let o = exec(&rt, &[], &b.id, &["sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 7"]);
    assert_eq!(o.code(), Some(7), "exit 7 passes through\n{o}");
    assert_eq!(o.stdout, "to-stdout\n", "{o}");
    assert!(o.stderr.contains("to-stderr"), "{o}");
    let o = exec(&rt, &[], &b.id, &["/bin/probe", "exit", "0"]);
    assert_eq!(o.code(), Some(0), "{o}");
    let o = exec(&rt, &[], &b.id, &["/bin/probe", "exit", "42"]);
    assert_eq!(o.code(), Some(42), "{o}");
    assert_eq!(rt.status(&b.id).as_deref(), Some("running"), "exec must not disturb init");
}

/// Killed by signal N: the runtime exits 128+N (runc's `ExitStatus`), it does not die itself.
#[test]
fn exec_killed_by_signal_exits_128_plus_n() {
    require_root!();
    let rt = Runtime::new("execsig");
    let (b, _) = sleeper(&rt);
    for (sig, want) in [("TERM", 143), ("KILL", 137), ("SEGV", 139)] {
        let o = exec(&rt, &[], &b.id, &["/bin/probe", "signal-self", sig]);
        assert_eq!(o.code(), Some(want), "signal-self {sig} → {want}\n{o}");
    }
}

/// exec itself failing (missing binary, unknown container) exits 255 with a one-line error, so
/// callers can tell it apart from the program's status (cli-contract.md §2.4).
#[test]
fn exec_failure_exits_255_with_one_line() {
    require_root!();
    let rt = Runtime::new("exec255");
    let (b, pid) = sleeper(&rt);
    for cmd in ["/bin/no-such-binary", "no-such-binary"] {
        let o = exec(&rt, &[], &b.id, &[cmd, "arg"]);
        assert_eq!(o.code(), Some(255), "exec of a missing binary\n{o}");
        let lines: Vec<&str> = o.stderr.trim_end().lines().collect();
        assert_eq!(lines.len(), 1, "exactly one error line\n{o}");
        assert!(lines[0].contains("no-such-binary"), "the error names the binary\n{o}");
        assert!(o.stdout.is_empty(), "{o}");
    }
    assert!(pid_alive(pid), "init survives a failed exec");
    assert_eq!(rt.status(&b.id).as_deref(), Some("running"));
    // Every exec'd helper is gone: only init is left.
    let left: Vec<i32> = rt.leftovers().into_iter().filter(|p| *p != pid).collect();
    assert!(left.is_empty(), "a failed exec left processes: {left:?}");

    let unknown = format!("{}-unknown", b.id);
    rt.track_id(&unknown);
    let o = exec(&rt, &[], &unknown, &["/bin/true"]);
    assert_eq!(o.code(), Some(255), "exec into an unknown container\n{o}");
    assert!(o.stderr.contains("does not exist"), "{o}");
    assert_eq!(o.stderr.trim_end().lines().count(), 1, "{o}");
}

/// `-p FILE`: a full OCI Process; every other process-shaping flag is ignored.
#[test]
fn exec_process_file_overrides_flags() {
    require_root!();
    let rt = Runtime::new("execprocfile");
    let (b, _) = sleeper(&rt);
    let mut p = b.config()["process"].clone();
    p["args"] = json!(["sh", "-c", "probe cwd; probe ids; probe env"]);
    p["cwd"] = json!("/home/tester");
    p["user"] = json!({"uid": 1000, "gid": 1001, "additionalGids": [5]});
    p["env"].as_array_mut().unwrap().push("FROM_FILE=yes".into());
    let file = rt.work().join("process.json");
    std::fs::write(&file, serde_json::to_vec(&p).unwrap()).unwrap();
    let o = exec(
        &rt,
        &["-p", file.to_str().unwrap(), "--cwd", "/", "-e", "FROM_FLAG=yes", "-u", "0:0", "-g", "7"],
        &b.id,
        &[],
    )
    .expect_ok("exec -p");
    let kv = o.kv();
    assert_eq!(kv["cwd"], "/home/tester", "the file's cwd wins\n{o}");
    assert_eq!(kv["uid"], "1000", "the file's user wins\n{o}");
    assert_eq!(kv["gid"], "1001", "{o}");
    assert_eq!(kv["groups"], "5", "the file's additionalGids win\n{o}");
    assert!(o.stdout.lines().any(|l| l == "FROM_FILE=yes"), "the file's env\n{o}");
    assert!(!o.stdout.contains("FROM_FLAG"), "-e is ignored with -p\n{o}");

    // An invalid process file is an exec failure (255), not a crash.
    p["cwd"] = json!("relative/dir");
    std::fs::write(&file, serde_json::to_vec(&p).unwrap()).unwrap();
    let o = exec(&rt, &["-p", file.to_str().unwrap()], &b.id, &[]);
    assert_eq!(o.code(), Some(255), "a relative cwd is refused\n{o}");
}

/// `-d --pid-file`: returns at once, the file holds the host pid with no newline, and that
/// process is in the container's pid namespace; stdio still goes where the caller pointed it.
#[test]
fn exec_detached_pid_file() {
    require_root!();
    let rt = Runtime::new("execdetach");
    let (b, init) = sleeper(&rt);
    let pidfile = rt.work().join("exec.pid");
    let t0 = Instant::now();
    let o = exec(
        &rt,
        &["-d", "--pid-file", pidfile.to_str().unwrap()],
        &b.id,
        &["sh", "-c", "echo detached-out; exec /bin/probe sleep 600"],
    )
    .expect_ok("exec -d");
    assert!(t0.elapsed() < Duration::from_secs(10), "exec -d must not wait for the program");
    let content = std::fs::read_to_string(&pidfile).expect("pid file written");
    let pid: i32 = content.parse().unwrap_or_else(|_| panic!("pid file must be a bare decimal pid, got {content:?}"));
    rt.track_pid(pid);
    assert!(pid_alive(pid), "the exec'd process runs");
    assert_ne!(pid, init);
    assert_eq!(
        readlink(&format!("/proc/{pid}/ns/pid")),
        readlink(&format!("/proc/{init}/ns/pid")),
        "the exec'd process is in the container's pid namespace"
    );
    wait_for("detached output", || o.stdout_now().contains("detached-out"));
    wait_for("the program to exec", || tinyrun_conformance::cmdline(pid) == ["/bin/probe", "sleep", "600"]);
    // Nothing of the runtime lingers: only init and the exec'd program are ours.
    let mut left = rt.leftovers();
    left.sort();
    let mut want = vec![init, pid];
    want.sort();
    assert_eq!(left, want, "runtime processes left after exec -d");

    // delete --force takes the exec'd process with it.
    rt.run(&["delete", "--force", &b.id]).expect_ok("delete --force");
    wait_for("the exec'd process to die", || !pid_alive(pid));
    rt.assert_nothing_left(&b.id);
}

/// The exec'd process joins the container's cgroup in every hierarchy (issue 4: "joins every
/// namespace of the container (user first), its cgroup").
#[test]
fn exec_joins_container_cgroup() {
    require_root!();
    let rt = Runtime::new("execcgroup");
    let (b, init) = sleeper(&rt);
    let pidfile = rt.work().join("exec.pid");
    exec(&rt, &["-d", "--pid-file", pidfile.to_str().unwrap()], &b.id, &["/bin/probe", "sleep", "600"])
        .expect_ok("exec -d");
    let pid: i32 = std::fs::read_to_string(&pidfile).unwrap().parse().unwrap();
    rt.track_pid(pid);
    let cg = |p: i32| std::fs::read_to_string(format!("/proc/{p}/cgroup")).unwrap();
    assert!(cg(init).contains(&format!("/tinyrun-test/{}", b.id)), "init is in its cgroup: {}", cg(init));
    assert_eq!(cg(pid), cg(init), "the exec'd process must be in the container's cgroups");
    // Foreground exec too.
    let o = exec(&rt, &[], &b.id, &["/bin/probe", "cat", "/proc/self/cgroup"]).expect_ok("probe cat cgroup");
    let from_inside = o.stdout.clone();
    let o2 = exec(&rt, &[], &b.id, &["/bin/probe", "cat", "/proc/1/cgroup"]).expect_ok("probe cat init's cgroup");
    assert_eq!(from_inside, o2.stdout, "a foreground exec is in init's cgroups (as seen inside)");
}

#[test]
fn exec_cwd_env_user_groups() {
    require_root!();
    let rt = Runtime::new("execflags");
    let (b, _) = sleeper(&rt);
    let o = exec(
        &rt,
        &[
            "--cwd",
            "/home/tester",
            "-e",
            "FOO=bar",
            "-e",
            "WITH_EQ=a=b",
            "-e",
            "TERM=dumb",
            "-u",
            "1000:1001",
            "-g",
            "5",
            "-g",
            "65534",
        ],
        &b.id,
        &["sh", "-c", "probe cwd; probe ids; probe env"],
    )
    .expect_ok("exec with flags");
    let kv = o.kv();
    assert_eq!(kv["cwd"], "/home/tester", "{o}");
    assert_eq!((kv["uid"].as_str(), kv["euid"].as_str()), ("1000", "1000"), "{o}");
    assert_eq!((kv["gid"].as_str(), kv["egid"].as_str()), ("1001", "1001"), "{o}");
    let mut groups: Vec<&str> = kv["groups"].split(',').collect();
    groups.sort();
    assert_eq!(groups, ["5", "65534"], "{o}");
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert!(lines.contains(&"FOO=bar"), "{o}");
    assert!(lines.contains(&"WITH_EQ=a=b"), "{o}");
    let terms: Vec<&&str> = lines.iter().filter(|l| l.starts_with("TERM=")).collect();
    assert_eq!(terms, [&"TERM=dumb"], "-e overrides the config's TERM\n{o}");
    assert!(lines.iter().any(|l| l.starts_with("PATH=/")), "the config's env is kept\n{o}");

    // -u UID alone keeps the config's gid (0).
    let o = exec(&rt, &["-u", "1000"], &b.id, &["/bin/probe", "ids"]).expect_ok("-u 1000");
    assert_eq!(o.kv()["uid"], "1000", "{o}");
    assert_eq!(o.kv()["gid"], "0", "{o}");
    // Defaults come from the config: root, cwd /.
    let o = exec(&rt, &[], &b.id, &["sh", "-c", "probe ids; probe cwd"]).expect_ok("defaults");
    assert_eq!(o.kv()["uid"], "0", "{o}");
    assert_eq!(o.kv()["cwd"], "/", "{o}");
    // A cwd that does not exist is an exec failure.
    let o = exec(&rt, &["--cwd", "/no/such/dir"], &b.id, &["/bin/probe", "cwd"]);
    assert_eq!(o.code(), Some(255), "missing --cwd\n{o}");
}

/// `--cap CAP_SYS_ADMIN` shows in the effective and bounding sets; without it the config's.
#[test]
fn exec_cap_added() {
    require_root!();
    let rt = Runtime::new("execcap");
    let (b, _) = sleeper(&rt);
    const SYS_ADMIN: u32 = 21;
    let plain = exec(&rt, &[], &b.id, &["/bin/probe", "caps"]).expect_ok("caps");
    for set in ["CapEff", "CapBnd", "CapPrm"] {
        assert!(!cap_bit(&plain.kv()[set], SYS_ADMIN), "{set} without --cap\n{plain}");
        assert!(cap_bit(&plain.kv()[set], 5), "CAP_KILL from the config in {set}\n{plain}");
    }
    let o = exec(&rt, &["--cap", "CAP_SYS_ADMIN"], &b.id, &["/bin/probe", "caps"]).expect_ok("--cap CAP_SYS_ADMIN");
    for set in ["CapEff", "CapBnd", "CapPrm"] {
        assert!(cap_bit(&o.kv()[set], SYS_ADMIN), "{set} with --cap\n{o}");
        assert!(cap_bit(&o.kv()[set], 5), "config caps kept in {set}\n{o}");
    }
    // The long spelling, twice (repeated slice flag).
    let o = exec(&rt, &["--cap", "CAP_SYS_ADMIN", "--cap", "CAP_NET_RAW"], &b.id, &["/bin/probe", "caps"])
        .expect_ok("--cap twice");
    assert!(cap_bit(&o.kv()["CapEff"], SYS_ADMIN), "{o}");
    assert!(cap_bit(&o.kv()["CapEff"], 13), "CAP_NET_RAW\n{o}");
}

#[test]
fn exec_no_new_privs() {
    require_root!();
    let rt = Runtime::new("execnnp");
    let b = rt.bundle(&["/bin/probe", "sleep", "600"]);
    b.config_mut(|c| c["process"]["noNewPrivileges"] = false.into());
    start(&rt, &b);
    let o = exec(&rt, &[], &b.id, &["/bin/probe", "caps"]).expect_ok("caps");
    assert_eq!(o.kv()["NoNewPrivs"], "0", "from the config\n{o}");
    let o = exec(&rt, &["--no-new-privs"], &b.id, &["/bin/probe", "caps"]).expect_ok("caps");
    assert_eq!(o.kv()["NoNewPrivs"], "1", "--no-new-privs\n{o}");
}

/// `--preserve-fds 1`: fd 3 reaches the program, fd 4 (also inherited by the runtime) does not;
/// without the flag only stdio.
#[test]
fn exec_preserve_fds() {
    require_root!();
    let rt = Runtime::new("execfds");
    let (b, _) = sleeper(&rt);
    let passed_path = rt.work().join("passed-fd");
    std::fs::write(&passed_path, "x").unwrap();
    let passed = File::open(&passed_path).unwrap();
    let leak = File::open("/etc/hostname").unwrap();

    let mut cmd = rt.command(&["exec", "--preserve-fds", "1", &b.id, "/bin/probe", "fds"]);
    tinyrun_conformance::pass_fds(&mut cmd, vec![(passed.as_raw_fd(), 3), (leak.as_raw_fd(), 4)]);
    let o = rt.output(cmd).expect_ok("exec --preserve-fds 1");
    assert_eq!(fd_keys(&o.stdout), ["fd.0", "fd.1", "fd.2", "fd.3"], "exactly stdio + fd 3\n{o}");
    assert_eq!(o.kv()["fd.3"], passed_path.to_str().unwrap(), "{o}");

    let mut cmd = rt.command(&["exec", &b.id, "/bin/probe", "fds"]);
    tinyrun_conformance::pass_fds(&mut cmd, vec![(passed.as_raw_fd(), 3), (leak.as_raw_fd(), 4)]);
    let o = rt.output(cmd).expect_ok("exec without --preserve-fds");
    assert_eq!(fd_keys(&o.stdout), ["fd.0", "fd.1", "fd.2"], "only stdio\n{o}");
}

/// The exec'd process is in every namespace of init (compared with the host's view of init).
fn assert_same_namespaces(rt: &Runtime, b: &Bundle, init: i32) {
    let o = exec(rt, &[], &b.id, &["/bin/probe", "ns"]).expect_ok("probe ns");
    let ns = o.kv();
    assert!(ns.len() >= 7, "probe ns output\n{o}");
    let spec_kinds: Vec<String> = b.config()["linux"]["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["type"].as_str().unwrap().to_string())
        .collect();
    for (kind, link) in &ns {
        let theirs = readlink(&format!("/proc/{init}/ns/{kind}"));
        assert_eq!(*link, theirs, "exec'd process's {kind} namespace differs from init's (config: {spec_kinds:?})");
    }
}

#[test]
fn exec_joins_every_namespace() {
    require_root!();
    let rt = Runtime::new("execns");
    let (b, init) = sleeper(&rt);
    assert_same_namespaces(&rt, &b, init);
    // And they are not the host's (so the comparison means something).
    for kind in ["pid", "net", "ipc", "uts", "mnt", "cgroup"] {
        assert_ne!(readlink(&format!("/proc/{init}/ns/{kind}")), readlink(&format!("/proc/self/ns/{kind}")), "{kind}");
    }
    // The UTS namespace carries the hostname.
    let o = exec(&rt, &[], &b.id, &["/bin/probe", "hostname"]).expect_ok("hostname");
    assert_eq!(o.kv()["hostname"], "tinyrun", "{o}");
    // pid namespace: the exec'd process is not pid 1, init is.
    let o = exec(&rt, &[], &b.id, &["/bin/probe", "pid"]).expect_ok("pid");
    assert_ne!(o.kv()["pid"], "1", "{o}");
}

/// A user-namespace container (bundles/configs/userns.json's mappings): the exec'd process joins
/// the user namespace too, and is root inside, the mapped id outside.
#[test]
fn exec_joins_user_namespace() {
    require_root!();
    let rt = Runtime::new("execuserns");
    let b = rt.bundle(&["/bin/probe", "sleep", "600"]);
    let sample: Value = serde_json::from_str(
        &std::fs::read_to_string(tinyrun_conformance::workspace_root().join("bundles/configs/userns.json")).unwrap(),
    )
    .unwrap();
    b.config_mut(|c| {
        c["linux"]["namespaces"].as_array_mut().unwrap().push(json!({"type": "user"}));
        c["linux"]["uidMappings"] = sample["linux"]["uidMappings"].clone();
        c["linux"]["gidMappings"] = sample["linux"]["gidMappings"].clone();
    });
    let init = start(&rt, &b);
    assert_ne!(readlink(&format!("/proc/{init}/ns/user")), readlink("/proc/self/ns/user"));
    assert_same_namespaces(&rt, &b, init);
    let o = exec(&rt, &[], &b.id, &["/bin/probe", "ids"]).expect_ok("ids");
    assert_eq!(o.kv()["uid"], "0", "root inside the user namespace\n{o}");
    let pidfile = rt.work().join("exec.pid");
    exec(&rt, &["-d", "--pid-file", pidfile.to_str().unwrap()], &b.id, &["/bin/probe", "sleep", "600"])
        .expect_ok("exec -d in a userns container");
    let pid: i32 = std::fs::read_to_string(&pidfile).unwrap().parse().unwrap();
    rt.track_pid(pid);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert_eq!(uid_line.split_whitespace().nth(1), Some("100000"), "the host sees the mapped uid: {uid_line}");
    // Capabilities are those of the config, inside the user namespace.
    let o = exec(&rt, &[], &b.id, &["/bin/probe", "caps"]).expect_ok("caps");
    assert!(!cap_bit(&o.kv()["CapEff"], 21), "no CAP_SYS_ADMIN\n{o}");
}

/// The exec'd process is in init's mount namespace: it sees a file init wrote on a tmpfs that
/// exists only there.
#[test]
fn exec_joins_mount_namespace() {
    require_root!();
    let rt = Runtime::new("execmnt");
    let b = rt.bundle(&["/bin/sh", "-c", "echo written-by-init > /tmp/marker && exec /bin/probe sleep 600"]);
    b.add_mount(
        json!({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "size=1m"]}),
    );
    let init = start(&rt, &b);
    wait_for("init's marker", || std::fs::read_to_string(format!("/proc/{init}/root/tmp/marker")).is_ok());
    let o = exec(&rt, &[], &b.id, &["/bin/probe", "cat", "/tmp/marker"]).expect_ok("cat marker");
    assert_eq!(o.stdout, "written-by-init\n", "{o}");
    // And what exec writes, init's mount namespace sees.
    exec(&rt, &[], &b.id, &["sh", "-c", "echo from-exec > /tmp/back"]).expect_ok("write");
    assert_eq!(std::fs::read_to_string(format!("/proc/{init}/root/tmp/back")).unwrap(), "from-exec\n");
}

/// exec into a `created` container (init waiting for `start`) works and leaves it `created`;
/// `start` still runs the program afterwards.
#[test]
fn exec_into_created_container() {
    require_root!();
    let rt = Runtime::new("execcreated");
    let b = rt.bundle(&["/bin/sh", "-c", "echo user-program-ran"]);
    let created = rt.create(&b).expect_ok("create");
    let o = exec(&rt, &[], &b.id, &["/bin/probe", "pid"]).expect_ok("exec into created");
    assert_ne!(o.kv()["pid"], "1", "{o}");
    assert_eq!(rt.status(&b.id).as_deref(), Some("created"), "exec must not start the container");
    assert!(!created.stdout_now().contains("user-program-ran"));
    rt.run(&["start", &b.id]).expect_ok("start after exec");
    rt.wait_status(&b.id, "stopped");
    assert!(created.stdout_now().contains("user-program-ran"));
    rt.run(&["delete", &b.id]).expect_ok("delete");
    rt.assert_nothing_left(&b.id);
}

#[test]
fn exec_refused_on_stopped_container() {
    require_root!();
    let rt = Runtime::new("execstopped");
    let b = rt.bundle(&["/bin/probe", "exit", "0"]);
    rt.create(&b).expect_ok("create");
    rt.run(&["start", &b.id]).expect_ok("start");
    rt.wait_status(&b.id, "stopped");
    let o = exec(&rt, &[], &b.id, &["/bin/probe", "pid"]);
    assert!(!o.ok(), "exec into a stopped container must fail\n{o}");
    assert!(o.code().is_some(), "{o}");
    assert!(o.stdout.is_empty(), "nothing ran\n{o}");
    assert!(o.stderr.contains("stopped"), "the error says the container is stopped\n{o}");
    assert_eq!(o.stderr.trim_end().lines().count(), 1, "{o}");
    rt.run(&["delete", &b.id]).expect_ok("delete");
    rt.assert_nothing_left(&b.id);
}

/// Go `flag` spellings callers use (cli-contract.md §2.1): `--flag=value`, `-flag value`,
/// `-e=V`, `--bool=true`. (runc's urfave/cli refuses mixing `-e` and `--env` in one call, so
/// each call sticks to one form.)
#[test]
fn exec_go_style_flags() {
    require_root!();
    let rt = Runtime::new("execgoflags");
    let (b, _) = sleeper(&rt);
    let o = exec(
        &rt,
        &[
            "--env=FOO=bar",
            "--env=BAZ=qux",
            "--cwd=/home",
            "-user",
            "1000:1000",
            "--no-new-privs=true",
            "--detach=false",
        ],
        &b.id,
        &["sh", "-c", "probe env; probe cwd; probe ids; probe caps"],
    )
    .expect_ok("Go-style flags");
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert!(lines.contains(&"FOO=bar"), "--env=FOO=bar\n{o}");
    assert!(lines.contains(&"BAZ=qux"), "--env=BAZ=qux\n{o}");
    let kv = o.kv();
    assert_eq!(kv["cwd"], "/home", "--cwd=/home\n{o}");
    assert_eq!(kv["uid"], "1000", "-user 1000:1000\n{o}");
    assert_eq!(kv["NoNewPrivs"], "1", "{o}");

    let o = exec(
        &rt,
        &["-e=ONE=1", "-e", "TWO=2", "-cwd", "/tmp", "-u=1000"],
        &b.id,
        &["sh", "-c", "probe env; probe cwd; probe ids"],
    )
    .expect_ok("single-dash forms");
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert!(lines.contains(&"ONE=1"), "-e=ONE=1\n{o}");
    assert!(lines.contains(&"TWO=2"), "{o}");
    assert_eq!(o.kv()["cwd"], "/tmp", "-cwd /tmp\n{o}");
    assert_eq!(o.kv()["uid"], "1000", "-u=1000\n{o}");
}

/// Everything after the id is the command, even when it looks like exec's own flags.
#[test]
fn exec_args_after_id_are_the_command() {
    require_root!();
    let rt = Runtime::new("execargv");
    let (b, _) = sleeper(&rt);
    let o = exec(&rt, &[], &b.id, &["/bin/probe", "exit", "3"]);
    assert_eq!(o.code(), Some(3), "{o}");
    let o = exec(&rt, &[], &b.id, &["sh", "-c", "echo -n x"]).expect_ok("sh -c");
    assert_eq!(o.stdout, "x", "{o}");
    let o = exec(&rt, &[], &b.id, &["ls", "-la", "/home"]).expect_ok("ls -la");
    assert!(o.stdout.contains("tester"), "{o}");
    let o = exec(
        &rt,
        &[],
        &b.id,
        &["sh", "-c", "echo \"$@\"", "sh", "--cwd", "/nope", "-e", "X=1", "-d", "--help", "-t", "-u", "5"],
    )
    .expect_ok("flag-like arguments");
    assert_eq!(o.stdout, "--cwd /nope -e X=1 -d --help -t -u 5\n", "{o}");
}

/// `r` must finish within `secs`; a runtime invocation stuck behind a lock fails the test here
/// instead of at the harness's long timeout.
#[track_caller]
fn within(r: Running, secs: u64, what: &str) -> Out {
    let mut r = r;
    let deadline = Instant::now() + Duration::from_secs(secs);
    while r.child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = r.child.kill();
            let o = r.wait();
            panic!("{what} did not finish within {secs} s (blocked?)\n{o}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    r.wait()
}

/// A process exec'd into a paused container with `--ignore-paused` sits frozen until the
/// container is thawed; the exec must not keep the container locked meanwhile: `resume` from
/// another caller goes through (and the exec then finishes), and so does `kill KILL`.
#[test]
fn exec_ignore_paused_does_not_lock_out_resume_or_kill() {
    require_root!();
    let rt = Runtime::new("execpaused");
    let (b, _) = sleeper(&rt);
    rt.run(&["pause", &b.id]).expect_ok("pause");
    let ex = rt.spawn(&["exec", "--ignore-paused", &b.id, "/bin/probe", "exit", "3"]);
    std::thread::sleep(Duration::from_millis(500));
    assert!(rt.status(&b.id).as_deref() == Some("paused"), "still paused");
    within(rt.spawn(&["resume", &b.id]), 15, "resume while an exec waits frozen").expect_ok("resume");
    let o = within(ex, 15, "exec after resume");
    assert_eq!(o.code(), Some(3), "the exec'd program ran once thawed\n{o}");

    rt.run(&["pause", &b.id]).expect_ok("pause again");
    let ex = rt.spawn(&["exec", "--ignore-paused", &b.id, "/bin/probe", "sleep", "600"]);
    std::thread::sleep(Duration::from_millis(500));
    within(rt.spawn(&["kill", &b.id, "KILL"]), 15, "kill KILL while an exec waits frozen").expect_ok("kill");
    within(rt.spawn(&["delete", "--force", &b.id]), 30, "delete --force").expect_ok("delete --force");
    let o = within(ex, 15, "exec of a killed container");
    assert_ne!(o.code(), Some(0), "{o}");
    rt.assert_nothing_left(&b.id);
}

/// `exec --env NAME=VALUE` overrides a `NAME` already in the config's env, as with runc: the
/// program (run directly, no shell to tidy its environment) sees one `TERM`, the command line's.
#[test]
fn exec_env_overrides_the_configs() {
    require_root!();
    let rt = Runtime::new("execenv");
    let (b, _) = sleeper(&rt);
    let o = exec(&rt, &["-e", "TERM=dumb", "-e", "NEW=1"], &b.id, &["/bin/probe", "env"]).expect_ok("exec");
    let terms: Vec<&str> = o.stdout.lines().filter(|l| l.starts_with("TERM=")).collect();
    assert_eq!(terms, ["TERM=dumb"], "the command line wins\n{o}");
    assert!(o.stdout.lines().any(|l| l == "NEW=1"), "{o}");
    assert!(o.stdout.lines().any(|l| l.starts_with("PATH=/")), "the config's other variables stay\n{o}");
}

/// `process.execCPUAffinity`: an exec'd process runs on the `final` CPUs (the config's, or its
/// `--process` file's); init is not affected (the spec). `initial` only holds while the process
/// joins the cgroup (moving into a cpuset cgroup may reset it), so it is not observable here.
#[test]
fn exec_cpu_affinity() {
    require_root!();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus < 2 {
        tinyrun_conformance::skip!("needs two CPUs to tell an affinity from none");
    }
    let rt = Runtime::new("execaff");
    if rt.is_runc() {
        tinyrun_conformance::skip!("runc 1.1.5 predates process.execCPUAffinity (runc 1.2) and ignores it");
    }
    let b = rt.bundle(&["/bin/probe", "sleep", "600"]);
    b.config_mut(|c| c["process"]["execCPUAffinity"] = json!({"initial": "0", "final": "1"}));
    let pid = start(&rt, &b);
    let allowed = |status: &str| {
        status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap_or_default().trim().to_string()
    };
    let init = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert_ne!(allowed(&init), "1", "init is not affected");
    let o = exec(&rt, &[], &b.id, &["/bin/probe", "cat", "/proc/self/status"]).expect_ok("exec");
    assert_eq!(allowed(&o.stdout), "1", "final\n{o}");
    let procfile = rt.tempdir().join("process.json");
    let mut p = b.config()["process"].clone();
    p["args"] = json!(["/bin/probe", "cat", "/proc/self/status"]);
    p["execCPUAffinity"] = json!({"initial": "1", "final": "0"});
    std::fs::write(&procfile, p.to_string()).unwrap();
    let o = exec(&rt, &["--process", procfile.to_str().unwrap()], &b.id, &[]).expect_ok("exec --process");
    assert_eq!(allowed(&o.stdout), "0", "the process file's final\n{o}");
    rt.run(&["delete", "--force", &b.id]).expect_ok("delete");
    rt.assert_nothing_left(&b.id);
}
