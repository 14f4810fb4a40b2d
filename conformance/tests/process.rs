//! The container process (runtime-spec `config.md` "Process", `config-linux.md`; cli-contract.md
//! §2.4 `--preserve-fds`, §4.1 init steps): PATH lookup at create time, env, cwd, user and
//! groups, umask, capabilities, no_new_privs, rlimits, oom_score_adj, and the fds it gets.

use std::fs::File;
use std::os::fd::AsRawFd;

use serde_json::json;
use tinyrun_conformance::{require_root, Runtime};

#[test]
fn args_resolved_via_path() {
    require_root!();
    let rt = Runtime::new("pathlookup");
    let b = rt.bundle(&["probe", "pid"]);
    let o = rt.run_bundle(&b).expect_ok("args[0] without a slash is looked up in the container PATH");
    assert_eq!(o.kv()["pid"], "1", "{o}");
}

/// The binary is looked up at create time, so a missing one fails `create` (runc's LookPath).
#[test]
fn missing_binary_fails_create() {
    require_root!();
    let rt = Runtime::new("nobinary");
    for arg0 in ["no-such-binary", "/bin/no-such-binary"] {
        let b = rt.bundle(&[arg0]);
        let o = rt.create(&b).expect_err(&format!("create with args[0]={arg0}"));
        assert_eq!(o.code(), Some(1), "{o}");
        assert!(o.stderr.contains("no-such-binary"), "the error should name the binary\n{o}");
        rt.assert_nothing_left(&b.id);
    }
}

#[test]
fn env_is_exactly_the_config() {
    require_root!();
    let rt = Runtime::new("env");
    let b = rt.bundle(&["/bin/probe", "env"]);
    b.config_mut(|c| {
        let env = c["process"]["env"].as_array_mut().unwrap();
        env.push("FOO=bar".into());
        env.push("WITH_EQUALS=a=b".into());
        env.push("EMPTY=".into());
    });
    let mut cmd = rt.command(&["run", "--bundle", b.path(), &b.id]);
    cmd.env("RUNTIME_ONLY_VAR", "must-not-leak");
    let o = rt.output(cmd).expect_ok("probe env");
    let lines: Vec<&str> = o.stdout.lines().collect();
    for want in ["FOO=bar", "WITH_EQUALS=a=b", "EMPTY=", "TERM=xterm"] {
        assert!(lines.contains(&want), "{want} missing\n{o}");
    }
    assert!(lines.iter().any(|l| l.starts_with("PATH=/")), "{o}");
    assert!(!o.stdout.contains("RUNTIME_ONLY_VAR"), "the runtime's environment leaked\n{o}");
    assert!(!o.stdout.contains("_LIBCONTAINER"), "runtime internals leaked\n{o}");
}

#[test]
fn cwd_honoured() {
    require_root!();
    let rt = Runtime::new("cwd");
    let b = rt.bundle(&["/bin/probe", "cwd"]);
    b.config_mut(|c| c["process"]["cwd"] = "/home/tester".into());
    assert_eq!(rt.run_bundle(&b).expect_ok("probe cwd").kv()["cwd"], "/home/tester");
}

#[test]
fn user_groups_umask() {
    require_root!();
    let rt = Runtime::new("user");
    let b = rt.bundle(&["/bin/probe", "ids"]);
    b.config_mut(|c| {
        c["process"]["user"] = json!({"uid": 1000, "gid": 1001, "additionalGids": [65534, 5], "umask": 0o027});
    });
    let kv = rt.run_bundle(&b).expect_ok("probe ids").kv();
    assert_eq!(kv["uid"], "1000");
    assert_eq!(kv["euid"], "1000");
    assert_eq!(kv["gid"], "1001");
    assert_eq!(kv["egid"], "1001");
    let mut groups: Vec<&str> = kv["groups"].split(',').collect();
    groups.sort();
    assert_eq!(groups, ["5", "65534"], "exactly the additionalGids: {kv:?}");
    assert_eq!(kv["umask"], "0027");

    // Default: root, no supplementary groups beyond the config's, umask 0022.
    let b = rt.bundle(&["/bin/probe", "ids"]);
    let kv = rt.run_bundle(&b).expect_ok("probe ids").kv();
    assert_eq!((kv["uid"].as_str(), kv["gid"].as_str()), ("0", "0"));
    assert_eq!(kv["umask"], "0022", "the default umask is 0022");
}

fn cap_mask(names: &[&str]) -> String {
    let bit = |n: &str| match n {
        "CAP_KILL" => 5,
        "CAP_NET_BIND_SERVICE" => 10,
        "CAP_SYS_ADMIN" => 21,
        "CAP_AUDIT_WRITE" => 29,
        other => panic!("add {other} to cap_mask"),
    };
    format!("{:016x}", names.iter().map(|n| 1u64 << bit(n)).fold(0, |a, b| a | b))
}

#[test]
fn capabilities_match_config() {
    require_root!();
    let rt = Runtime::new("caps");
    let b = rt.bundle(&["/bin/probe", "caps"]);
    let default = ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"];
    let kv = rt.run_bundle(&b).expect_ok("probe caps").kv();
    for set in ["CapEff", "CapPrm", "CapBnd"] {
        assert_eq!(kv[set], cap_mask(&default), "{set}: {kv:?}");
    }
    assert_eq!(kv["CapInh"], cap_mask(&[]));
    assert_eq!(kv["CapAmb"], cap_mask(&[]));

    // Different sets per kind. The kernel recomputes the sets at execve, and with no file
    // capabilities on /bin/probe the outcome is fixed (capabilities(7)):
    // - uid 1000: P'(permitted) = P'(effective) = ambient;
    // - uid 0 (file caps treated as full): bounding | inheritable, but noNewPrivileges (on in
    //   the test spec) caps it at the old permitted set, so P' = the configured permitted set.
    let sets = json!({
        "bounding": ["CAP_KILL", "CAP_SYS_ADMIN", "CAP_NET_BIND_SERVICE"],
        "permitted": ["CAP_KILL", "CAP_NET_BIND_SERVICE"],
        "effective": ["CAP_KILL", "CAP_NET_BIND_SERVICE"],
        "inheritable": ["CAP_NET_BIND_SERVICE"],
        "ambient": ["CAP_NET_BIND_SERVICE"],
    });
    let bounding = cap_mask(&["CAP_KILL", "CAP_SYS_ADMIN", "CAP_NET_BIND_SERVICE"]);
    let nbs = cap_mask(&["CAP_NET_BIND_SERVICE"]);
    let permitted = cap_mask(&["CAP_KILL", "CAP_NET_BIND_SERVICE"]);
    for (uid, prm) in [(1000, nbs.clone()), (0, permitted)] {
        let b = rt.bundle(&["/bin/probe", "caps"]);
        b.config_mut(|c| {
            c["process"]["capabilities"] = sets.clone();
            c["process"]["user"] = json!({"uid": uid, "gid": uid});
        });
        let kv = rt.run_bundle(&b).expect_ok("probe caps").kv();
        assert_eq!(kv["CapBnd"], bounding, "uid {uid}: {kv:?}");
        assert_eq!(kv["CapInh"], nbs, "uid {uid}: {kv:?}");
        assert_eq!(kv["CapAmb"], nbs, "uid {uid}: {kv:?}");
        assert_eq!(kv["CapPrm"], prm, "uid {uid}: {kv:?}");
        assert_eq!(kv["CapEff"], prm, "uid {uid}: {kv:?}");
    }

    // Empty sets: nothing at all.
    let b = rt.bundle(&["/bin/probe", "caps"]);
    b.config_mut(|c| {
        c["process"]["capabilities"] =
            json!({"bounding": [], "permitted": [], "effective": [], "inheritable": [], "ambient": []});
    });
    let kv = rt.run_bundle(&b).expect_ok("probe caps").kv();
    for set in ["CapEff", "CapPrm", "CapBnd", "CapInh", "CapAmb"] {
        assert_eq!(kv[set], cap_mask(&[]), "{set}: {kv:?}");
    }
}

#[test]
fn no_new_privileges() {
    require_root!();
    let rt = Runtime::new("nnp");
    for (flag, want) in [(true, "1"), (false, "0")] {
        let b = rt.bundle(&["/bin/probe", "caps"]);
        b.config_mut(|c| c["process"]["noNewPrivileges"] = flag.into());
        let kv = rt.run_bundle(&b).expect_ok("probe caps").kv();
        assert_eq!(kv["NoNewPrivs"], want, "noNewPrivileges={flag}: {kv:?}");
    }
}

#[test]
fn rlimits() {
    require_root!();
    let rt = Runtime::new("rlimits");
    let b = rt.bundle(&["/bin/probe", "rlimits"]);
    // The host may lack CAP_SYS_RESOURCE (this CI VM does), so stay under our own hard limits.
    let (_, core_hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_CORE).unwrap();
    let core_soft = 4096u64.min(core_hard);
    b.config_mut(|c| {
        c["process"]["rlimits"]
            .as_array_mut()
            .unwrap()
            .push(json!({"type": "RLIMIT_CORE", "soft": core_soft, "hard": core_soft}));
    });
    let kv = rt.run_bundle(&b).expect_ok("probe rlimits").kv();
    assert_eq!(kv["RLIMIT_NOFILE.soft"], "1024", "the default spec's NOFILE: {kv:?}");
    assert_eq!(kv["RLIMIT_NOFILE.hard"], "1024", "{kv:?}");
    assert_eq!(kv["RLIMIT_CORE.soft"], core_soft.to_string(), "{kv:?}");
    assert_eq!(kv["RLIMIT_CORE.hard"], core_soft.to_string(), "{kv:?}");
}

#[test]
fn oom_score_adj() {
    require_root!();
    let rt = Runtime::new("oom");
    let b = rt.bundle(&["/bin/probe", "oom"]);
    b.config_mut(|c| c["process"]["oomScoreAdj"] = 100.into());
    let kv = rt.run_bundle(&b).expect_ok("probe oom").kv();
    assert_eq!(kv["oom_score_adj"], "100");
    assert_eq!(std::fs::read_to_string("/proc/self/oom_score_adj").unwrap().trim(), "0", "ours must not change");
}

fn fd_keys(out: &str) -> Vec<String> {
    let mut keys: Vec<String> = tinyrun_conformance::kv(out).keys().cloned().collect();
    keys.sort();
    keys
}

/// Only stdio reaches the container, even if the runtime inherited more (CVE-2024-21626).
#[test]
fn only_stdio_fds() {
    require_root!();
    let rt = Runtime::new("fds");
    let b = rt.bundle(&["/bin/probe", "fds"]);
    let leak = File::open("/etc/hostname").unwrap();
    let mut cmd = rt.command(&["run", "--bundle", b.path(), &b.id]);
    tinyrun_conformance::pass_fds(&mut cmd, vec![(leak.as_raw_fd(), 7)]);
    let o = rt.output(cmd).expect_ok("probe fds");
    assert_eq!(fd_keys(&o.stdout), ["fd.0", "fd.1", "fd.2"], "no fds beyond stdio\n{o}");
}

#[test]
fn preserve_fds() {
    require_root!();
    let rt = Runtime::new("preservefds");
    let b = rt.bundle(&["/bin/probe", "fds"]);
    let passed_path = rt.work().join("passed-fd");
    std::fs::write(&passed_path, "x").unwrap();
    let passed = File::open(&passed_path).unwrap();
    let leak = File::open("/etc/hostname").unwrap();
    let mut cmd = rt.command(&["run", "--preserve-fds", "1", "--bundle", b.path(), &b.id]);
    tinyrun_conformance::pass_fds(&mut cmd, vec![(passed.as_raw_fd(), 3), (leak.as_raw_fd(), 4)]);
    let o = rt.output(cmd).expect_ok("probe fds with --preserve-fds 1");
    assert_eq!(fd_keys(&o.stdout), ["fd.0", "fd.1", "fd.2", "fd.3"], "exactly stdio + fd 3\n{o}");
    assert_eq!(o.kv()["fd.3"], passed_path.to_str().unwrap(), "fd 3 is the file we passed\n{o}");
}

/// `linux.personality` (personality(2)): LINUX32 is the execution domain of the container's
/// process and of an exec'd one; LINUX leaves the default.
#[test]
fn personality_domain() {
    require_root!();
    let rt = Runtime::new("persona");
    if rt.is_runc() {
        tinyrun_conformance::skip!("runc 1.1.5 predates linux.personality and ignores it");
    }
    let b = rt.bundle(&["/bin/probe", "cat", "/proc/self/personality"]);
    b.config_mut(|c| c["linux"]["personality"] = json!({"domain": "LINUX32"}));
    let o = rt.run_bundle(&b).expect_ok("run with linux.personality LINUX32");
    assert_eq!(o.stdout.trim(), "00000008", "PER_LINUX32\n{o}");
    b.config_mut(|c| c["linux"]["personality"] = json!({"domain": "LINUX"}));
    let o = rt.run_bundle(&b).expect_ok("run with linux.personality LINUX");
    assert_eq!(o.stdout.trim(), "00000000", "PER_LINUX\n{o}");
    b.config_mut(|c| c["linux"]["personality"] = json!({"domain": "LINUX32"}));
    b.args(&["/bin/probe", "sleep", "600"]);
    rt.create(&b).expect_ok("create");
    rt.run(&["start", &b.id]).expect_ok("start");
    let o = rt.run(&["exec", &b.id, "/bin/probe", "cat", "/proc/self/personality"]).expect_ok("exec");
    assert_eq!(o.stdout.trim(), "00000008", "an exec'd process gets it too\n{o}");
    rt.run(&["delete", "--force", &b.id]).expect_ok("delete");
    rt.assert_nothing_left(&b.id);
}

/// `linux.memoryPolicy` (set_mempolicy(2)): the process's policy shows in its numa_maps; a
/// policy the spec rules out (MPOL_BIND without nodes) fails create naming the field.
#[test]
fn memory_policy() {
    require_root!();
    if !std::path::Path::new("/proc/self/numa_maps").exists() {
        tinyrun_conformance::skip!("kernel without NUMA");
    }
    let rt = Runtime::new("mempolicy");
    if rt.is_runc() {
        tinyrun_conformance::skip!("runc 1.1.5 predates linux.memoryPolicy and ignores it");
    }
    let b = rt.bundle(&["/bin/probe", "cat", "/proc/self/numa_maps"]);
    for (policy, shown) in [
        (json!({"mode": "MPOL_BIND", "nodes": "0"}), "bind:0"),
        (json!({"mode": "MPOL_INTERLEAVE", "nodes": "0", "flags": ["MPOL_F_STATIC_NODES"]}), "interleave=static:0"),
        (json!({"mode": "MPOL_PREFERRED", "nodes": "0"}), "prefer:0"),
        (json!({"mode": "MPOL_LOCAL"}), "local"),
    ] {
        b.config_mut(|c| c["linux"]["memoryPolicy"] = policy.clone());
        let o = rt.run_bundle(&b).expect_ok("run with linux.memoryPolicy");
        let first = o.stdout.lines().next().unwrap_or_default();
        assert!(first.split(' ').nth(1) == Some(shown), "{policy}: want {shown}\n{o}");
    }
    b.config_mut(|c| c["linux"]["memoryPolicy"] = json!({"mode": "MPOL_BIND"}));
    let o = rt.create(&b).expect_err("MPOL_BIND without nodes");
    assert!(o.stderr.contains("linux.memoryPolicy"), "{o}");
    rt.assert_nothing_left(&b.id);
}

/// `process.scheduler` (sched_setattr(2)) and `process.ioPriority` (ioprio_set(2)) are applied
/// to the container's process, seen from the host: policy and nice in /proc/<pid>/stat, the I/O
/// class with `ionice -p`. A value runc's checks refuse fails create naming the field.
#[test]
fn scheduler_and_io_priority() {
    require_root!();
    let rt = Runtime::new("sched");
    if rt.is_runc() {
        tinyrun_conformance::skip!("runc 1.1.5 predates process.scheduler and ioPriority (runc 1.2) and ignores them");
    }
    let b = rt.bundle(&["/bin/probe", "sleep", "600"]);
    b.config_mut(|c| {
        c["process"]["scheduler"] = json!({"policy": "SCHED_BATCH", "nice": 7});
        c["process"]["ioPriority"] = json!({"class": "IOPRIO_CLASS_IDLE", "priority": 0});
    });
    rt.create(&b).expect_ok("create with a scheduler and an I/O priority");
    let pid = rt.state(&b.id).unwrap()["pid"].as_i64().unwrap();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    // After the command: field 3 is [0]; nice is field 19, policy field 41.
    assert_eq!((fields[16], fields[38]), ("7", "3"), "nice 7, SCHED_BATCH: {stat}");
    let io = std::process::Command::new("ionice").args(["-p", &pid.to_string()]).output().expect("ionice");
    assert_eq!(String::from_utf8_lossy(&io.stdout).trim(), "idle", "{io:?}");
    rt.run(&["delete", "--force", &b.id]).expect_ok("delete");
    b.config_mut(|c| c["process"]["scheduler"] = json!({"policy": "SCHED_OTHER", "nice": 42}));
    let o = rt.create(&b).expect_err("nice out of range");
    assert!(o.stderr.contains("process.scheduler"), "{o}");
    rt.assert_nothing_left(&b.id);
}

/// `struct sched_attr` as sched_getattr(2) fills it (SCHED_ATTR_SIZE_VER1).
#[repr(C)]
#[derive(Default)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
    util_min: u32,
    util_max: u32,
}

/// The scheduler flags are taken by the runtime spec's names, the two that oci-spec 0.10
/// spells otherwise (`SCHED_FLAG_RESET_ON_FORK`, `SCHED_FLAG_DL_OVERRUN`) included, and applied:
/// sched_getattr from the host reads SCHED_DEADLINE with both flags.
#[test]
fn scheduler_flags_by_the_specs_names() {
    require_root!();
    let rt = Runtime::new("schedflags");
    if rt.is_runc() {
        tinyrun_conformance::skip!("runc 1.1.5 predates process.scheduler (runc 1.2) and ignores it");
    }
    let b = rt.bundle(&["/bin/probe", "sleep", "600"]);
    b.config_mut(|c| {
        c["process"]["scheduler"] = json!({"policy": "SCHED_DEADLINE", "runtime": 10_000_000,
            "deadline": 100_000_000, "period": 100_000_000,
            "flags": ["SCHED_FLAG_RESET_ON_FORK", "SCHED_FLAG_DL_OVERRUN"]});
    });
    rt.create(&b).expect_ok("create with the spec's names of the scheduler flags");
    let pid = rt.state(&b.id).unwrap()["pid"].as_i64().unwrap();
    let mut attr = SchedAttr::default();
    let size = std::mem::size_of::<SchedAttr>() as libc::c_uint;
    // SAFETY: the kernel writes at most `size` bytes into `attr`, which is that large.
    let r = unsafe { libc::syscall(libc::SYS_sched_getattr, pid as libc::pid_t, &mut attr, size, 0) };
    assert_eq!(r, 0, "sched_getattr({pid}): {}", std::io::Error::last_os_error());
    assert_eq!(attr.policy, 6, "SCHED_DEADLINE");
    assert_eq!(attr.flags & 0x5, 0x5, "SCHED_FLAG_RESET_ON_FORK (1) and SCHED_FLAG_DL_OVERRUN (4): {:#x}", attr.flags);
    assert_eq!((attr.runtime, attr.period), (10_000_000, 100_000_000));
    rt.run(&["delete", "--force", &b.id]).expect_ok("delete");
    rt.assert_nothing_left(&b.id);
}

/// `process.commandLine` is a Windows field: on Linux it is ignored with a warning (runc ignores
/// it), and `process.args` runs.
#[test]
fn command_line_is_ignored_with_a_warning() {
    require_root!();
    let rt = Runtime::new("cmdline");
    let b = rt.bundle(&["/bin/probe", "exit", "0"]);
    b.config_mut(|c| c["process"]["commandLine"] = "C:\\\\windows\\\\notepad.exe".into());
    let o = rt.run_bundle(&b).expect_ok("run with process.commandLine");
    if !rt.is_runc() {
        assert!(o.stderr.contains("warning") && o.stderr.contains("process.commandLine"), "{o}");
    }
    rt.assert_nothing_left(&b.id);
}
