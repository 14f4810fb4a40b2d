//! Conversion checks (no kernel involved) and filters loaded for real in a
//! forked child, which sets no_new_privs first so no privilege is needed.
#![allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "small flag bits and test pids")]

use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitStatus};
use oci_spec::runtime::LinuxSeccomp;
use serde_json::json;

use super::*;
use crate::sys::{self, Forked};

fn profile(v: serde_json::Value) -> LinuxSeccomp {
    serde_json::from_value(v).unwrap()
}

fn err(v: serde_json::Value) -> String {
    match Filter::compile(&profile(v)) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

/// `kill(pid, sig)`; returns the errno or 0. Pids above the kernel's
/// `pid_max` (at most 2^22) never exist, so a call that gets past the
/// filter fails ESRCH.
fn kill(pid: i32, sig: Option<Signal>) -> i32 {
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig) {
        Ok(()) => 0,
        Err(e) => e as i32,
    }
}

fn errno_of<T>(r: nix::Result<T>) -> i32 {
    r.map_or_else(|e| e as i32, |_| 0)
}

/// Forks; the child sets no_new_privs, loads `f`, runs `body` and exits
/// with its result. Returns how the child ended.
///
/// A real fork(2): the test harness is multi-threaded, and glibc's fork
/// handlers keep malloc usable in the child.
fn in_child(f: &Filter, body: impl FnOnce(Option<std::os::fd::OwnedFd>) -> i32) -> WaitStatus {
    match sys::seccomp::fork_for_test().unwrap() {
        Forked::Child => {
            if nix::sys::prctl::set_no_new_privs().is_err() {
                sys::exit_child(100);
            }
            let fd = match f.load() {
                Ok(fd) => fd,
                Err(_) => sys::exit_child(101),
            };
            sys::exit_child(body(fd))
        }
        Forked::Parent(pid) => waitpid(pid, None).unwrap(),
    }
}

const NO_PID: i32 = 0x7fff_fff0;

#[test]
fn a_rule_set_compiles_to_bpf() {
    let f = Filter::compile(&profile(json!({
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": 38,
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
        "syscalls": [
            {"names": ["read", "write", "exit_group", "no_such_syscall_xyz"], "action": "SCMP_ACT_ALLOW"},
            {"names": ["personality"], "action": "SCMP_ACT_ALLOW", "args": [
                {"index": 0, "value": 0, "op": "SCMP_CMP_EQ"},
                {"index": 0, "value": 8, "op": "SCMP_CMP_EQ"}]},
            {"names": ["clone"], "action": "SCMP_ACT_ALLOW", "args": [
                {"index": 0, "value": 2114060288, "op": "SCMP_CMP_MASKED_EQ"}]},
            {"names": ["socket"], "action": "SCMP_ACT_ERRNO", "errnoRet": 97, "args": [
                {"index": 0, "value": 2, "op": "SCMP_CMP_EQ"},
                {"index": 1, "value": 3, "op": "SCMP_CMP_EQ"}]},
            {"names": ["ptrace"], "action": "SCMP_ACT_KILL_PROCESS"},
            {"names": ["uname"], "action": "SCMP_ACT_TRACE"},
            {"names": ["mkdir"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38}
        ]
    })))
    .unwrap();
    assert!(f.len() > 20, "a real program: {} instructions", f.len());
    assert!(f.listener().is_none());
}

#[test]
fn absent_flags_mean_spec_allow_and_empty_flags_mean_none() {
    let spec_allow = libc::SECCOMP_FILTER_FLAG_SPEC_ALLOW as u32;
    let f = Filter::compile(&profile(json!({"defaultAction": "SCMP_ACT_ALLOW"}))).unwrap();
    let expected = if sys::seccomp::flags_supported(spec_allow) { spec_allow } else { 0 };
    assert_eq!(f.flags(), expected);
    let f = Filter::compile(&profile(json!({"defaultAction": "SCMP_ACT_ALLOW", "flags": []}))).unwrap();
    assert_eq!(f.flags(), 0);
    let f = Filter::compile(&profile(json!({"defaultAction": "SCMP_ACT_ALLOW",
        "flags": ["SECCOMP_FILTER_FLAG_LOG", "SECCOMP_FILTER_FLAG_TSYNC"]})))
    .unwrap();
    assert_eq!(f.flags(), libc::SECCOMP_FILTER_FLAG_LOG as u32);
}

#[test]
fn errno_on_an_action_without_one_is_refused_by_field() {
    let e = err(json!({"defaultAction": "SCMP_ACT_ALLOW", "defaultErrnoRet": 1}));
    assert!(e.contains("linux.seccomp.defaultErrnoRet") && e.contains("SCMP_ACT_ALLOW"), "{e}");
    let e = err(json!({"defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [{"names": ["mkdir"], "action": "SCMP_ACT_KILL", "errnoRet": 1}]}));
    assert!(e.contains("linux.seccomp.syscalls[0].errnoRet"), "{e}");
    let e = err(json!({"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 70000}));
    assert!(e.contains("defaultErrnoRet"), "{e}");
}

#[test]
fn malformed_rules_are_refused_by_field() {
    let e = err(json!({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": [], "action": "SCMP_ACT_KILL"}]}));
    assert!(e.contains("linux.seccomp.syscalls[0].names"), "{e}");
    let e = err(json!({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
        {"names": ["read"], "action": "SCMP_ACT_KILL"},
        {"names": ["read"], "action": "SCMP_ACT_KILL", "args": [{"index": 6, "value": 0, "op": "SCMP_CMP_EQ"}]}]}));
    assert!(e.contains("linux.seccomp.syscalls[1].args[0].index"), "{e}");
}

#[test]
fn notify_rules_need_a_listener_and_spare_the_handover() {
    let e = err(json!({"defaultAction": "SCMP_ACT_NOTIFY", "listenerPath": "/run/agent.sock"}));
    assert!(e.contains("linux.seccomp.defaultAction") && e.contains("SCMP_ACT_NOTIFY"), "{e}");
    let e = err(
        json!({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["mkdir"], "action": "SCMP_ACT_NOTIFY"}]}),
    );
    assert!(e.contains("linux.seccomp.listenerPath"), "{e}");
    let e = err(json!({"defaultAction": "SCMP_ACT_ALLOW", "listenerPath": "/run/agent.sock",
        "syscalls": [{"names": ["mkdir", "sendmsg"], "action": "SCMP_ACT_NOTIFY"}]}));
    assert!(e.contains("linux.seccomp.syscalls[0]") && e.contains("sendmsg"), "{e}");
    let e = err(json!({"defaultAction": "SCMP_ACT_ALLOW", "listenerMetadata": "x"}));
    assert!(e.contains("linux.seccomp.listenerMetadata"), "{e}");
    let e = err(json!({"defaultAction": "SCMP_ACT_ALLOW", "flags": ["SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV"]}));
    assert!(e.contains("linux.seccomp.flags"), "{e}");
    let f = Filter::compile(&profile(json!({"defaultAction": "SCMP_ACT_ALLOW", "listenerPath": "/run/agent.sock",
        "listenerMetadata": "meta", "syscalls": [{"names": ["mkdir"], "action": "SCMP_ACT_NOTIFY"}]})))
    .unwrap();
    assert_eq!(f.listener().unwrap().metadata.as_deref(), Some("meta"));
    assert_ne!(f.flags() & libc::SECCOMP_FILTER_FLAG_NEW_LISTENER as u32, 0);
}

#[test]
fn unknown_names_in_config_json_are_reported_by_field() {
    let cfg = |s: serde_json::Value| serde_json::to_vec(&json!({"linux": {"seccomp": s}})).unwrap();
    let m = diagnose(&cfg(json!({"defaultAction": "SCMP_ACT_FOO"}))).unwrap();
    assert!(
        m.contains("linux.seccomp.defaultAction") && m.contains("SCMP_ACT_FOO") && m.contains("SCMP_ACT_ERRNO"),
        "{m}"
    );
    let m = diagnose(&cfg(
        json!({"defaultAction": "SCMP_ACT_ALLOW", "flags": ["SECCOMP_FILTER_FLAG_LOG", "SECCOMP_FILTER_FLAG_BOGUS"]}),
    ))
    .unwrap();
    assert!(m.starts_with("linux.seccomp.flags[1]") && m.contains("SECCOMP_FILTER_FLAG_BOGUS"), "{m}");
    let m = diagnose(&cfg(json!({"defaultAction": "SCMP_ACT_ALLOW", "architectures": ["SCMP_ARCH_Z80"]}))).unwrap();
    assert!(m.contains("linux.seccomp.architectures[0]"), "{m}");
    let m = diagnose(&cfg(json!({"defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW"}, {"names": ["read"], "action": "SCMP_ACT_NOPE"}]}))).unwrap();
    assert!(m.contains("linux.seccomp.syscalls[1].action"), "{m}");
    let m = diagnose(&cfg(json!({"defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 1, "op": "SCMP_CMP_APPROX"}]}]}))).unwrap();
    assert!(m.contains("linux.seccomp.syscalls[0].args[0].op"), "{m}");
    assert_eq!(diagnose(&cfg(json!({"defaultAction": "SCMP_ACT_ALLOW"}))), None);
}

#[test]
fn features_lists_are_consistent() {
    let archs = archs();
    assert!(archs.contains(&"SCMP_ARCH_X86_64") && archs.contains(&"SCMP_ARCH_AARCH64"), "{archs:?}");
    let supported = supported_flags();
    assert!(supported.contains(&"SECCOMP_FILTER_FLAG_TSYNC"));
    assert!(supported.iter().all(|f| KNOWN_FLAGS.contains(f)));
    assert!(libseccomp_version().is_some_and(|v| v.starts_with("2.")));
}

#[test]
fn errno_rule_and_errno_ret_seen_by_a_child() {
    let f = Filter::compile(&profile(json!({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
        {"names": ["getpgid"], "action": "SCMP_ACT_ERRNO"},
        {"names": ["getsid"], "action": "SCMP_ACT_ERRNO", "errnoRet": 18}]})))
    .unwrap();
    let st = in_child(&f, |_| {
        let pgid = errno_of(nix::unistd::getpgid(None));
        let sid = errno_of(nix::unistd::getsid(None));
        let me = kill(nix::unistd::getpid().as_raw(), None);
        if pgid == libc::EPERM && sid == libc::EXDEV && me == 0 {
            0
        } else {
            1
        }
    });
    assert_eq!(st, WaitStatus::Exited(get_pid(&st), 0), "getpgid must fail EPERM, getsid EXDEV, kill pass");
}

#[test]
fn calls_newer_than_the_profile_get_enosys_in_a_child() {
    // getppid is older than every call named here: the default (EPERM).
    // pidfd_open is newer than all of them: ENOSYS, though the kernel has it.
    let f = Filter::compile(&profile(json!({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [
        {"names": ["exit", "exit_group", "getpid"], "action": "SCMP_ACT_ALLOW"}]})))
    .unwrap();
    let st = in_child(&f, |_| {
        // glibc's getppid can't fail, so it passes the kernel's -EPERM (-1)
        // through without setting errno: -1 is the refusal either way.
        let old = nix::unistd::getppid().as_raw();
        // pid 0 would be EINVAL from the kernel itself.
        let new = sys::pidfd_open(nix::unistd::Pid::from_raw(0)).err().map(|e| e.errno);
        if old != -libc::EPERM {
            return 2;
        }
        new.map_or(3, |e| if e == nix::errno::Errno::ENOSYS { 0 } else { 10 + e as i32 })
    });
    assert_eq!(st, WaitStatus::Exited(get_pid(&st), 0), "getppid must fail EPERM and pidfd_open ENOSYS");
}

#[test]
fn argument_conditions_seen_by_a_child() {
    // Conditions on distinct arguments are ANDed; MASKED_EQ masks with
    // `value` and compares with `valueTwo`.
    let f = Filter::compile(&profile(json!({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
        {"names": ["kill"], "action": "SCMP_ACT_ERRNO", "errnoRet": 18, "args": [
            {"index": 0, "value": 0xff00, "valueTwo": 0x3400, "op": "SCMP_CMP_MASKED_EQ"},
            {"index": 1, "value": 0, "op": "SCMP_CMP_EQ"}]}]})))
    .unwrap();
    let st = in_child(&f, |_| {
        let both = kill(0x7fff_3412, None); // (pid & 0xff00) == 0x3400 and sig == 0
        let only_pid = kill(0x7fff_3412, Some(Signal::SIGCONT));
        let only_sig = kill(NO_PID, None);
        if both == libc::EXDEV && only_pid == libc::ESRCH && only_sig == libc::ESRCH {
            0
        } else {
            1
        }
    });
    assert_eq!(st, WaitStatus::Exited(get_pid(&st), 0));
}

#[test]
fn kill_process_rule_kills_a_child_with_sigsys() {
    let f = Filter::compile(&profile(json!({"defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [{"names": ["getpgid"], "action": "SCMP_ACT_KILL_PROCESS"}]})))
    .unwrap();
    let st = in_child(&f, |_| errno_of(nix::unistd::getpgid(None)));
    assert!(matches!(st, WaitStatus::Signaled(_, Signal::SIGSYS, _)), "{st:?}");
}

fn get_pid(st: &WaitStatus) -> nix::unistd::Pid {
    st.pid().unwrap_or(nix::unistd::Pid::from_raw(0))
}

#[test]
fn the_cache_gives_back_the_same_program_only_for_the_same_profile() {
    let p = profile(json!({"defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [{"names": ["kill"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38}]}));
    let f = Filter::compile(&p).unwrap();
    let json = serde_json::to_vec(&p).unwrap();
    let header = cache_header().expect("this build has a build id and a libseccomp version");
    let bytes = f.cache_bytes(header, &json);
    let back = Filter::from_cache(&bytes, header, &json).expect("a whole file of this profile is used");
    let insns = |f: &Filter| f.program.iter().map(|i| (i.code, i.jt, i.jf, i.k)).collect::<Vec<_>>();
    assert_eq!(insns(&back), insns(&f));
    assert_eq!(back.flags, f.flags);
    // Another profile, a cut file, a file of another layout: compiled afresh.
    let other = serde_json::to_vec(&profile(json!({"defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [{"names": ["kill"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1}]})))
    .unwrap();
    assert!(Filter::from_cache(&bytes, header, &other).is_none());
    assert!(Filter::from_cache(&bytes[..bytes.len() - 3], header, &json).is_none());
    assert!(Filter::from_cache(&bytes[..header.len() + 8 + json.len() + 4], header, &json).is_none());
    assert!(Filter::from_cache(&bytes[1..], header, &json).is_none());
}

/// A program compiled by another tinyrun build or another libseccomp is
/// never taken from the cache, and is removed from the shared cache by the
/// next miss.
#[test]
fn the_cache_key_holds_the_build_and_libseccomp() {
    let header = cache_header().expect("this build has a build id and a libseccomp version");
    let text = String::from_utf8(header.to_vec()).unwrap();
    let id: String = crate::sys::build_id().unwrap().iter().map(|b| format!("{b:02x}")).collect();
    let lib = libseccomp_version().unwrap();
    assert!(text.contains(env!("CARGO_PKG_VERSION")) && text.contains(&id) && text.contains(&lib), "{text}");
    let builds = [
        header_for(env!("CARGO_PKG_VERSION"), &[0xaa; 20], &lib),
        header_for(env!("CARGO_PKG_VERSION"), &crate::sys::build_id().unwrap(), "2.0.0"),
        header_for("0.0.1", &crate::sys::build_id().unwrap(), &lib),
    ];
    for other in &builds {
        assert_ne!(other.as_slice(), header, "another build, the same key");
    }

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cache");
    let spec: Spec = serde_json::from_value(json!({"ociVersion": "1.1.0", "linux": {"seccomp": {
        "defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["kill"], "action": "SCMP_ACT_ERRNO"}]}}}))
    .unwrap();
    let s = spec.linux().as_ref().unwrap().seccomp().as_ref().unwrap();
    let profile = serde_json::to_vec(s).unwrap();
    // An allow-all program that an older build "compiled" for this very
    // profile, at the place this build would look if names ignored builds,
    // and in a container's own cache file.
    let stale = Filter {
        program: vec![libc::sock_filter { code: 0x06, jt: 0, jf: 0, k: 0x7fff_0000 }],
        flags: 0,
        listener: None,
        shared: None,
        recording: None,
    };
    std::fs::create_dir(&dir).unwrap();
    let old_file = dir.join("0123456789abcdef.bpf");
    std::fs::write(&old_file, stale.cache_bytes(&builds[0], &profile)).unwrap();
    std::fs::write(shared_path(&builds[0], &profile, &dir).unwrap(), stale.cache_bytes(&builds[0], &profile)).unwrap();
    let own = tmp.path().join("seccomp.bpf");
    std::fs::write(&own, stale.cache_bytes(&builds[1], &profile)).unwrap();
    assert_ne!(shared_path(&builds[0], &profile, &dir), shared_path(header, &profile, &dir));

    let insns = |f: &Filter| f.program.iter().map(|i| (i.code, i.jt, i.jf, i.k)).collect::<Vec<_>>();
    let fresh = Filter::compile(s).unwrap();
    let shared = Filter::from_shared_cache(&spec, &dir).unwrap().unwrap();
    assert_eq!(insns(&shared), insns(&fresh), "a program of another build was taken from the shared cache");
    let exec = Filter::from_spec_cached(&spec, &own).unwrap().unwrap();
    assert_eq!(insns(&exec), insns(&fresh), "a program of another build was taken from a container's cache");
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(left, [shared_path(header, &profile, &dir).unwrap()], "the miss removed the other builds' files");
}

#[test]
fn a_profile_with_notify_is_not_cached_and_a_missing_file_compiles() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("seccomp.bpf");
    let spec: Spec = serde_json::from_value(json!({"ociVersion": "1.1.0", "linux": {"seccomp": {
        "defaultAction": "SCMP_ACT_ALLOW", "listenerPath": "/run/agent.sock",
        "syscalls": [{"names": ["mkdir"], "action": "SCMP_ACT_NOTIFY"}]}}}))
    .unwrap();
    let f = Filter::from_spec_cached(&spec, &cache).unwrap().unwrap();
    assert!(f.listener().is_some());
    f.cache(&spec, &cache);
    assert!(!cache.exists(), "a notify profile's program was cached");
}

#[test]
fn the_shared_cache_is_filled_once_and_refused_when_others_can_write_it() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cache");
    let spec: Spec = serde_json::from_value(json!({"ociVersion": "1.1.0", "linux": {"seccomp": {
        "defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["kill"], "action": "SCMP_ACT_ERRNO"}]}}}))
    .unwrap();
    let first = Filter::from_shared_cache(&spec, &dir).unwrap().unwrap();
    let files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
    let again = Filter::from_shared_cache(&spec, &dir).unwrap().unwrap();
    let insns = |f: &Filter| f.program.iter().map(|i| (i.code, i.jt, i.jf, i.k)).collect::<Vec<_>>();
    assert_eq!(insns(&again), insns(&first));
    // A planted program is not taken from a dir others can write.
    let s = spec.linux().as_ref().unwrap().seccomp().as_ref().unwrap();
    let allow_all = Filter {
        program: vec![libc::sock_filter { code: 0x06, jt: 0, jf: 0, k: 0x7fff_0000 }],
        flags: 0,
        listener: None,
        shared: None,
        recording: None,
    };
    let header = cache_header().unwrap();
    std::fs::write(&files[0], allow_all.cache_bytes(header, &serde_json::to_vec(s).unwrap())).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let f = Filter::from_shared_cache(&spec, &dir).unwrap().unwrap();
    assert_eq!(insns(&f), insns(&first), "a program from a world-writable cache was used");
}

#[test]
fn a_program_from_the_shared_cache_is_kept_for_exec_as_a_link() {
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cache");
    let spec: Spec = serde_json::from_value(json!({"ociVersion": "1.1.0", "linux": {"seccomp": {
        "defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["kill"], "action": "SCMP_ACT_ERRNO"}]}}}))
    .unwrap();
    let insns = |f: &Filter| f.program.iter().map(|i| (i.code, i.jt, i.jf, i.k)).collect::<Vec<_>>();
    // Compiled and added to the cache, then taken from it: both link.
    for (n, f) in
        [Filter::from_shared_cache(&spec, &dir), Filter::from_shared_cache(&spec, &dir)].into_iter().enumerate()
    {
        let f = f.unwrap().unwrap();
        let state = tmp.path().join(format!("seccomp-{n}.bpf"));
        f.cache(&spec, &state);
        let shared = std::fs::read_dir(&dir).unwrap().next().unwrap().unwrap().path();
        let ino = |p: &std::path::Path| std::fs::metadata(p).unwrap().ino();
        assert_eq!(ino(&state), ino(&shared), "call {n}: the state's copy is the shared file");
        let back = Filter::from_spec_cached(&spec, &state).unwrap().unwrap();
        assert_eq!(insns(&back), insns(&f));
    }
    // Without a shared cache the program is written out as before.
    let own = Filter::from_spec_cached(&spec, &tmp.path().join("none")).unwrap().unwrap();
    let state = tmp.path().join("own.bpf");
    own.cache(&spec, &state);
    assert_eq!(std::fs::metadata(&state).unwrap().nlink(), 1);
    assert_eq!(insns(&Filter::from_spec_cached(&spec, &state).unwrap().unwrap()), insns(&own));
}
