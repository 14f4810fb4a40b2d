//! Attacks on what keeps sandboxes apart, driven through the binary: a pool box made with looser
//! options (`--no-seccomp`, `--network none`) must never serve a plain `run --pool`; boxes get
//! host uid/gid ranges of their own, disjoint from each other and from every range in
//! /etc/subuid and /etc/subgid, freed again at terminate; and the seccomp allowlist refuses
//! TIOCSTI (CVE-2017-5226 style terminal injection), also with the request's high bits set
//! (CVE-2019-10063), and TIOCLINUX.
//!
//! Every test prints one line `SANDBOX <name>: <what it saw>` (run with --nocapture) before it
//! asserts. The harness ([`Sbx`]) gives each test its own `--root` and removes every sandbox,
//! cgroup and process of it in `Drop`; the id test puts back /etc/subuid and /etc/subgid as they
//! were, even when it fails.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tinyrun_conformance::sandbox::{names_in, saw, wait_for, Sbx};
use tinyrun_conformance::{cmdline, kv, require_root};

/// Running, unclaimed pool boxes of this test.
fn pool_idle(sb: &Sbx) -> Vec<String> {
    sb.list()
        .into_iter()
        .filter(|(id, st, _)| id.starts_with("pool") && st == "running")
        .filter(|(id, _, _)| !sb.rt.root().join("sandbox").join(id).join("claimed").exists())
        .map(|(id, _, _)| id)
        .collect()
}

/// `pool fill 1 [common] OPTS`: the id of the box it made.
#[track_caller]
fn fill_one(sb: &Sbx, opts: &[&str]) -> String {
    let mut v = vec!["pool", "fill", "1"];
    v.extend(sb.common());
    v.extend_from_slice(opts);
    let o = sb.raw(&v).expect_ok("sandbox pool fill 1");
    o.stdout.trim().to_string()
}

/// In a box: the seccomp mode, and whether a TCP connection over loopback works.
const PROBE: &str = r#"
import socket
print("seccomp=" + [l.split()[1] for l in open("/proc/self/status") if l.startswith("Seccomp:")][0])
try:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
    socket.create_connection(s.getsockname(), timeout=2).close()
    print("loopback=up")
except OSError as e:
    print("loopback=" + type(e).__name__)
"#;

/// `pool fill 1 --no-seccomp` and `pool fill 1 --network none`, then a plain `run --pool`: it
/// must run under the filter (Seccomp: 2) with loopback up, and leave both looser boxes idle.
/// Control: `run --pool --no-seccomp` does take the matching box (the pool works, and serves it).
#[test]
fn pool_serves_only_matching_boxes() {
    require_root!();
    let sb = Sbx::new("sbx_pool_match");
    let loose = fill_one(&sb, &["--no-seccomp"]);
    let offline = fill_one(&sb, &["--network", "none"]);
    let plain = sb.run(&["--pool"], &["python3", "-c", PROBE]);
    let idle_after_plain = pool_idle(&sb);
    let matching = sb.run(&["--pool", "--no-seccomp"], &["python3", "-c", PROBE]);
    // A taken box is removed by a detached refill: between `sandbox list` and the look at
    // its claim marker it can go, marker first, and look idle. Read the pool once that's done.
    sb.wait_for_refills(10);
    let idle_after_matching = pool_idle(&sb);
    let (p, m) = (kv(&plain.stdout), kv(&matching.stdout));
    saw(
        "pool-match",
        format!(
            "filled {loose} (--no-seccomp) and {offline} (--network none); plain run --pool: exit {:?} {p:?}, \
             idle after: {idle_after_plain:?}; run --pool --no-seccomp: exit {:?} {m:?}, idle after: \
             {idle_after_matching:?}",
            plain.code(),
            matching.code()
        ),
    );
    assert!(!loose.is_empty() && !offline.is_empty() && loose != offline, "pool fill made {loose:?} and {offline:?}");
    assert!(plain.ok(), "{plain}");
    assert_eq!(p.get("seccomp").map(String::as_str), Some("2"), "plain run --pool ran without the filter\n{plain}");
    assert_eq!(p.get("loopback").map(String::as_str), Some("up"), "plain run --pool got a box without lo\n{plain}");
    assert!(
        idle_after_plain.contains(&loose) && idle_after_plain.contains(&offline),
        "a plain run --pool took a looser box: idle {idle_after_plain:?}"
    );
    assert!(matching.ok(), "{matching}");
    assert_eq!(m.get("seccomp").map(String::as_str), Some("0"), "control: --no-seccomp box\n{matching}");
    assert!(!idle_after_matching.contains(&loose), "control: run --pool --no-seccomp did not take {loose}");
    terminate_all(&sb);
    sb.assert_clean("terminating every sandbox");
}

/// Waits for a detached pool refill to finish, drains the pools (terminating their boxes would
/// only have them refilled), then terminates every other sandbox.
fn terminate_all(sb: &Sbx) {
    sb.wait_for_refills(10);
    sb.raw(&["pool", "drain", "--all"]).expect_ok("pool drain --all");
    for (id, _, _) in sb.list() {
        sb.raw(&["terminate", &id]).expect_ok("terminate");
    }
}

// ------------------------------------------------------------------------------------------------
// Host ids.

/// /etc/subuid and /etc/subgid with lines of this test added; `Drop` writes back what was
/// there (or removes a file that wasn't), even when the test fails.
struct SubidLines {
    saved: Vec<(PathBuf, Option<Vec<u8>>)>,
}

impl SubidLines {
    fn add(lines: &str) -> SubidLines {
        let mut saved = Vec::new();
        for f in ["/etc/subuid", "/etc/subgid"] {
            let path = PathBuf::from(f);
            let before = fs::read(&path).ok();
            saved.push((path.clone(), before.clone()));
            let mut text = before.unwrap_or_default();
            if !text.is_empty() && !text.ends_with(b"\n") {
                text.push(b'\n');
            }
            text.extend_from_slice(lines.as_bytes());
            fs::write(&path, text).unwrap_or_else(|e| panic!("write {f}: {e}"));
        }
        SubidLines { saved }
    }
}

impl Drop for SubidLines {
    fn drop(&mut self) {
        for (path, before) in &self.saved {
            let r = match before {
                Some(bytes) => fs::write(path, bytes),
                None => fs::remove_file(path),
            };
            if let Err(e) = r {
                eprintln!("cleanup: restore {}: {e}", path.display());
            }
        }
    }
}

/// `(inside, outside, count)` lines of a uid_map or gid_map.
type IdMap = Vec<(u64, u64, u64)>;

fn map_lines(text: &str) -> IdMap {
    text.lines()
        .filter_map(|l| {
            let f: Vec<u64> = l.split_whitespace().filter_map(|x| x.parse().ok()).collect();
            (f.len() == 3).then(|| (f[0], f[1], f[2]))
        })
        .collect()
}

/// Host ranges `(first, count)` in an /etc/subuid-style file.
fn subid_ranges(path: &Path) -> Vec<(u64, u64)> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.trim().split(':').collect();
            (f.len() == 3).then(|| Some((f[1].parse().ok()?, f[2].parse().ok()?))).flatten()
        })
        .collect()
}

fn overlaps(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < b.0 + b.1 && b.0 < a.0 + a.1
}

/// The host's view of box `id`'s init: its uid_map and gid_map.
fn host_maps(sb: &Sbx, id: &str) -> (IdMap, IdMap) {
    let pid = sb.list().into_iter().find(|(i, _, _)| i == id).map(|(_, _, p)| p).unwrap_or(0);
    assert!(pid > 1, "no pid for {id} in sandbox list");
    let read = |f: &str| map_lines(&fs::read_to_string(format!("/proc/{pid}/{f}")).unwrap_or_default());
    (read("uid_map"), read("gid_map"))
}

/// The first host id of the default pool (0x70000000), and Debian's default first subuid range.
const POOL_FIRST: u64 = 0x7000_0000;
const DEBIAN_FIRST: u64 = 100_000;

/// Two boxes launched at once map their ids 0..65535 to disjoint host ranges (seen from the host
/// in /proc/<pid>/uid_map and gid_map, the same range for both), neither inside a range of
/// /etc/subuid or /etc/subgid: the test adds a line for Debian's first user's default range
/// (100000) and one covering the pool's first range, which the allocator must skip. After
/// terminate the ranges are free again: no record is left, and the next box gets the lowest one.
#[test]
fn boxes_get_their_own_host_ids() {
    require_root!();
    let sb = Sbx::new("sbx_host_ids");
    let owner = format!("tinyrun-test-{}", sb.rt.tag());
    let _subid = SubidLines::add(&format!("{owner}:{DEBIAN_FIRST}:65536\n{owner}:{POOL_FIRST}:65536\n"));
    let reserved: Vec<(u64, u64)> =
        ["/etc/subuid", "/etc/subgid"].iter().flat_map(|f| subid_ranges(Path::new(f))).collect();

    let launch: Vec<&str> = ["sandbox", "launch"].into_iter().chain(sb.common()).collect();
    let (a, b) = (sb.rt.spawn(&launch), sb.rt.spawn(&launch));
    let (a, b) = (a.wait().expect_ok("launch a"), b.wait().expect_ok("launch b"));
    let ids = [a.stdout.trim().to_string(), b.stdout.trim().to_string()];
    let maps: Vec<_> = ids.iter().map(|id| host_maps(&sb, id)).collect();
    let records_live: Vec<String> = names_in(&sb.rt.root().join("sandbox-ids"));
    for id in &ids {
        sb.raw(&["terminate", id]).expect_ok("terminate");
    }
    let records_after: Vec<String> = names_in(&sb.rt.root().join("sandbox-ids"));
    let again = sb.launch(&[]);
    let (again_uid, _) = host_maps(&sb, &again);
    sb.raw(&["terminate", &again]).expect_ok("terminate");
    saw(
        "host-ids",
        format!(
            "reserved in /etc/sub[ug]id: {reserved:?}; {} uid_map {:?} gid_map {:?}; {} uid_map {:?} gid_map {:?}; \
             records while running: {records_live:?}; after terminate: {records_after:?}; next box: {again_uid:?}",
            ids[0], maps[0].0, maps[0].1, ids[1], maps[1].0, maps[1].1
        ),
    );
    let mut ranges = Vec::new();
    for (id, (uid, gid)) in ids.iter().zip(&maps) {
        assert_eq!(uid.len(), 1, "{id}: one uid_map line: {uid:?}");
        assert_eq!(uid, gid, "{id}: the same host range for uids and gids");
        let (inside, outside, count) = uid[0];
        assert_eq!((inside, count), (0, 65536), "{id}: ids 0..65535 mapped: {uid:?}");
        assert!(outside > 0, "{id}: maps host root: {uid:?}");
        for r in &reserved {
            assert!(
                !overlaps((outside, count), *r),
                "{id}: host range {outside}+{count} overlaps /etc/sub[ug]id {r:?}"
            );
        }
        ranges.push((outside, count));
    }
    assert!(!overlaps(ranges[0], ranges[1]), "two boxes share host ids: {ranges:?}");
    assert_eq!(records_live.len(), 2, "one record per running box: {records_live:?}");
    assert!(records_after.is_empty(), "ranges still recorded after terminate: {records_after:?}");
    let lowest = ranges.iter().map(|r| r.0).min().unwrap_or(0);
    assert_eq!(again_uid.first().map(|l| l.1), Some(lowest), "a freed range is handed out again");
    sb.assert_clean("terminate");
}

// ------------------------------------------------------------------------------------------------
// Terminal injection.

/// In a box: TIOCSTI on fd 0 through Python's fcntl (as an attacker would write it), the same
/// request with bit 32 set and TIOCLINUX through a raw ioctl(2) (Python's fcntl cuts the request
/// to 32 bits), and FIONREAD on a pipe as an ioctl that must keep working.
const IOCTLS: &str = r#"
import ctypes, errno, fcntl, os, platform, termios
assert platform.machine() == "x86_64", "ioctl is system call 16 on x86_64"
libc = ctypes.CDLL(None, use_errno=True)
def name(e): return errno.errorcode.get(e, str(e))
try:
    fcntl.ioctl(0, termios.TIOCSTI, b"x"); print("tiocsti=ok")
except OSError as e:
    print("tiocsti=" + name(e.errno))
buf = ctypes.create_string_buffer(64)
for key, req in (("tiocsti_wide", 0x100005412), ("tioclinux", 0x541C)):
    r = libc.syscall(16, 0, ctypes.c_ulong(req), buf)
    print(key + "=" + ("ok" if r == 0 else name(ctypes.get_errno())))
r, w = os.pipe(); os.write(w, b"abc")
n = ctypes.c_int(0)
rc = libc.syscall(16, r, ctypes.c_ulong(termios.FIONREAD), ctypes.byref(n))
print("fionread=" + (str(n.value) if rc == 0 else name(ctypes.get_errno())))
"#;

/// `fcntl.ioctl(0, termios.TIOCSTI, b'x')` in a box gets EPERM, so do 0x100005412 and TIOCLINUX,
/// and FIONREAD still works. Control: with --no-seccomp the same calls reach the kernel (ENOTTY,
/// stdin being /dev/null), so the EPERM is the filter's doing.
#[test]
fn tiocsti_is_refused_in_a_box() {
    require_root!();
    let sb = Sbx::new("sbx_tiocsti");
    let (on, on_out) = sb.run_json(&[], &["python3", "-c", IOCTLS]);
    let (off, off_out) = sb.run_json(&["--no-seccomp"], &["python3", "-c", IOCTLS]);
    let text = |v: &serde_json::Value| v["stdout"]["text"].as_str().unwrap_or("").to_string();
    let (got, control) = (kv(&text(&on)), kv(&text(&off)));
    saw("tiocsti", format!("under the allowlist: {got:?}; with --no-seccomp: {control:?}"));
    assert_eq!(on["exit_code"].as_i64(), Some(0), "{on_out}");
    for k in ["tiocsti", "tiocsti_wide", "tioclinux"] {
        assert_eq!(got.get(k).map(String::as_str), Some("EPERM"), "{k} under the allowlist\n{on_out}");
        assert_eq!(control.get(k).map(String::as_str), Some("ENOTTY"), "control: {k} without the filter\n{off_out}");
    }
    assert_eq!(got.get("fionread").map(String::as_str), Some("3"), "FIONREAD under the allowlist\n{on_out}");
    sb.assert_clean("the ioctl runs");
}

/// Run in a launched box against its pid 1, the resident init that forks every `exec`: what of
/// it can be read, what the box can see of the socket it serves, and whether signals from
/// inside end it.
const PROBE_INIT: &str = r#"
for f in environ mem maps stack syscall auxv; do
    if cat /proc/1/$f >/dev/null 2>&1; then echo "$f=readable"; else echo "$f=denied"; fi
done
for l in exe cwd root; do
    if readlink /proc/1/$l >/dev/null 2>&1; then echo "$l=readable"; else echo "$l=denied"; fi
done
if ls /proc/1/fd >/dev/null 2>&1; then echo "fd=readable"; else echo "fd=denied"; fi
echo "cmdline=$(tr '\0' ' ' </proc/1/cmdline | sed 's/ *$//')"
echo "own_fds=$(ls /proc/$$/fd | tr '\n' ' ' | sed 's/ *$//')"
echo "sockets=$(find / \( -path /proc -o -path /sys \) -prune -o -type s -print 2>/dev/null | tr '\n' ' ')"
for s in TERM INT HUP QUIT USR1 KILL; do kill -$s 1 2>/dev/null; done
echo "signalled=yes"
"#;

/// The resident init (pid 1 of a launched box) holds the runtime's memory and serves the socket
/// every `exec` goes through: nothing in the box may read it, reach that socket, inherit one of
/// its fds, learn the host's command line from it, or end it with a signal. From inside:
/// /proc/1/{environ,mem,maps,stack,syscall,auxv} are unreadable and /proc/1/{exe,cwd,root,fd}
/// unreachable (it is non-dumpable), its command line reads `tinyrun-init`, not the caller's
/// `tinyrun --root ... sandbox launch ...`, the exec'd shell has only fds 0-2 (and the one `ls`
/// opens), no socket file is anywhere in the box, and after SIGTERM, SIGINT, SIGHUP, SIGQUIT,
/// SIGUSR1 and SIGKILL sent to pid 1 the next `exec` still runs.
#[test]
fn the_resident_init_is_out_of_reach() {
    require_root!();
    let sb = Sbx::new("sbx_resident");
    let id = sb.launch(&[]);
    let o = sb.raw(&["exec", &id, "--", "sh", "-c", PROBE_INIT]);
    let after = sb.raw(&["exec", &id, "--", "echo", "still-serving"]);
    let v = kv(&o.stdout);
    saw("resident-init", format!("probe: exit {:?} {v:?}; exec after the signals: {after}", o.code()));
    assert!(o.ok(), "{o}");
    for f in ["environ", "mem", "maps", "stack", "syscall", "auxv", "exe", "cwd", "root", "fd"] {
        assert_eq!(v.get(f).map(String::as_str), Some("denied"), "/proc/1/{f} from inside the box\n{o}");
    }
    assert_eq!(v.get("cmdline").map(String::as_str), Some("tinyrun-init"), "{o}");
    let fds: Vec<&str> = v.get("own_fds").map(|s| s.split_whitespace().collect()).unwrap_or_default();
    assert!(
        fds.len() <= 4 && ["0", "1", "2"].iter().all(|f| fds.contains(f)),
        "the exec'd shell's fds: {fds:?} (0-2 and ls's own only)"
    );
    assert_eq!(v.get("sockets").map(String::as_str), Some(""), "socket files visible in the box\n{o}");
    assert_eq!(v.get("signalled").map(String::as_str), Some("yes"), "{o}");
    assert!(after.ok() && after.stdout.trim() == "still-serving", "exec after signalling pid 1: {after}");
    sb.raw(&["terminate", &id]).expect_ok("terminate");
    sb.assert_clean("resident init");
}

/// Host pids in box `id`'s cgroups whose command is `comm`.
fn box_pids_named(id: &str, comm: &str) -> Vec<i32> {
    let mut pids = BTreeSet::new();
    for d in tinyrun_conformance::sandbox::sandbox_cgroups(id) {
        pids.extend(tinyrun_conformance::cgroup_procs_recursive(&d));
    }
    pids.into_iter().filter(|p| fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == comm)).collect()
}

fn ns_links(pid: i32) -> Vec<(String, String)> {
    ["user", "pid", "mnt", "net", "ipc", "uts", "cgroup", "time"]
        .iter()
        .map(|n| {
            (
                n.to_string(),
                fs::read_link(format!("/proc/{pid}/ns/{n}")).map(|l| l.display().to_string()).unwrap_or_default(),
            )
        })
        .collect()
}

/// A program the resident init forks is in every namespace of the box and in its cgroups, under
/// its seccomp filter, with no capability and no_new_privs, as a program `exec` made would be:
/// compared from the host with the box's init (in a leaf cgroup of the box's). And a command dies
/// with the `sandbox exec` that asked for it: the caller SIGKILLed, the command and what it
/// started are gone.
#[test]
fn an_exec_is_confined_and_dies_with_its_caller() {
    require_root!();
    let sb = Sbx::new("sbx_resident_exec");
    let id = sb.launch(&[]);
    let init = sb.list().into_iter().find(|(i, _, _)| *i == id).map(|(_, _, p)| p).unwrap_or(0) as i32;
    let mut caller = sb.rt.spawn(&["sandbox", "exec", &id, "--", "sh", "-c", "sleep 300 & exec sleep 301"]);
    let mut sleeps = Vec::new();
    wait_for("the exec'd sleeps", 10, || {
        sleeps = box_pids_named(&id, "sleep");
        sleeps.len() == 2
    });
    let status = |p: i32| fs::read_to_string(format!("/proc/{p}/status")).unwrap_or_default();
    let field = |p: i32, k: &str| tinyrun_conformance::sandbox::status_field(&status(p), k).unwrap_or_default();
    let cg = |p: i32| fs::read_to_string(format!("/proc/{p}/cgroup")).unwrap_or_default();
    let s = sleeps[0];
    let (init_ns, cmd_ns) = (ns_links(init), ns_links(s));
    saw(
        "resident-exec",
        format!(
            "init {init}, sleeps {sleeps:?}; ns init {init_ns:?} cmd {cmd_ns:?}; cmd Seccomp {} NoNewPrivs {} \
             CapEff {} CapBnd {} Uid {}",
            field(s, "Seccomp"),
            field(s, "NoNewPrivs"),
            field(s, "CapEff"),
            field(s, "CapBnd"),
            field(s, "Uid")
        ),
    );
    assert!(init > 1, "no init pid for {id}");
    assert!(init_ns.iter().all(|(_, l)| !l.is_empty()), "{init_ns:?}");
    assert_eq!(cmd_ns, init_ns, "the exec'd program's namespaces against the box init's");
    // The box's cgroups, but for the one the command is killed by: a leaf of the box's own.
    let (cmd_cg, init_cg) = (cg(s), cg(init));
    let in_leaf = |(c, i): (&str, &str)| {
        c == i || c.strip_prefix(i).is_some_and(|rest| rest.trim_start_matches('/').starts_with("exec-"))
    };
    assert!(
        cmd_cg.lines().count() == init_cg.lines().count() && cmd_cg.lines().zip(init_cg.lines()).all(in_leaf),
        "the exec'd program's cgroups against the box init's:\n{cmd_cg}\n{init_cg}"
    );
    assert_eq!(field(s, "Seccomp"), "2");
    assert_eq!(field(s, "NoNewPrivs"), "1");
    assert_eq!(field(s, "CapEff"), "0000000000000000");
    assert_eq!(field(s, "CapBnd"), "0000000000000000");
    assert_eq!(field(s, "Uid"), field(init, "Uid"));
    caller.child.kill().expect("kill the sandbox exec");
    let _ = caller.child.wait();
    let deadline = Instant::now() + Duration::from_secs(5);
    let left = loop {
        let left: Vec<i32> = sleeps
            .iter()
            .copied()
            .filter(|p| Path::new(&format!("/proc/{p}")).exists() && !field(*p, "State").starts_with('Z'))
            .collect();
        if left.is_empty() || Instant::now() > deadline {
            break left;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let gone = left.is_empty();
    saw("resident-exec", format!("caller killed; still running after 5 s: {left:?}"));
    assert!(gone, "the command outlived the sandbox exec that started it: {left:?}");
    let again = sb.raw(&["exec", &id, "--", "true"]);
    assert!(again.ok(), "exec after a caller died: {again}");
    sb.raw(&["terminate", &id]).expect_ok("terminate");
    sb.assert_clean("resident exec");
}

/// Box processes whose command line contains `needle`, seen from the host in the box's cgroups.
fn box_pids_running(id: &str, needle: &str) -> Vec<i32> {
    let mut pids = BTreeSet::new();
    for d in tinyrun_conformance::sandbox::sandbox_cgroups(id) {
        pids.extend(tinyrun_conformance::cgroup_procs_recursive(&d));
    }
    pids.into_iter().filter(|p| cmdline(*p).join(" ").contains(needle)).collect()
}

/// The program cgroups (`exec-*`) under box `id`'s cgroups.
fn exec_leaves(id: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for d in tinyrun_conformance::sandbox::sandbox_cgroups(id) {
        out.extend(names_in(&d).into_iter().filter(|n| n.starts_with("exec-")).map(|n| d.join(n)));
    }
    out
}

/// `exec --timeout` kills the command and everything it started, by its cgroup: a program that
/// left the command's session with `setsid` and one that double-forked away from it die with
/// it. The result says SIGKILL, and nothing of them, nor of the command's cgroup, is left.
#[test]
fn an_exec_timeout_kills_what_escaped_its_session() {
    require_root!();
    let sb = Sbx::new("sbx_exec_escapees");
    let id = sb.launch(&[]);
    let script = "setsid sleep 201 & (sleep 202 &); sleep 203";
    let t0 = Instant::now();
    let o = sb.raw(&["exec", "--json", "--timeout", "1s", &id, "--", "sh", "-c", script]);
    let took = t0.elapsed();
    let v: serde_json::Value = serde_json::from_str(o.stdout.trim()).unwrap_or_default();
    // SIGKILL takes a moment to land; give it one before looking.
    let mut left = Vec::new();
    let gone = (0..50).any(|_| {
        std::thread::sleep(Duration::from_millis(20));
        left = box_pids_running(&id, "sleep 20");
        left.is_empty()
    });
    let ps = sb.raw(&["exec", &id, "--", "ps", "-e", "-o", "args="]);
    let leaves = exec_leaves(&id);
    saw(
        sb.name,
        format!(
            "{} in {took:?}; left: {left:?}; box ps {:?}; leaves {leaves:?}",
            v,
            ps.stdout.lines().collect::<Vec<_>>()
        ),
    );
    assert_eq!(v["timed_out"], true, "{o}");
    assert_eq!(v["signal"], "SIGKILL", "a deadline reports the signal it sent\n{o}");
    assert!(v["exit_code"].is_null(), "{o}");
    assert!(took < Duration::from_secs(4), "exec --timeout 1s took {took:?}");
    assert!(gone, "programs that left the command's session outlived its timeout: {left:?}");
    assert!(ps.ok() && !ps.stdout.contains("sleep"), "{ps}");
    assert!(leaves.is_empty(), "program cgroups left behind: {leaves:?}");
    sb.raw(&["terminate", &id]).expect_ok("terminate");
    sb.assert_clean("exec escapees");
}

/// A local caller that connects to a box's agent socket, sends the start of a request (its
/// length and three fds) and then the rest a byte at a time holds up no one: an exec meanwhile
/// runs at once, and the slow caller is cut off once its request is late.
#[test]
fn a_slow_caller_holds_up_no_exec() {
    require_root!();
    use std::io::{Read, Write};
    let sb = Sbx::new("sbx_slow_caller");
    let id = sb.launch(&[]);
    let sock = sb.rt.root().join("sandbox").join(&id).join("agent.sock");
    let mut slow = std::os::unix::net::UnixStream::connect(&sock).expect("connect to the agent socket");
    slow.set_read_timeout(Some(Duration::from_millis(50))).expect("read timeout");
    let null = fs::File::open("/dev/null").expect("open /dev/null");
    let fd = std::os::fd::AsRawFd::as_raw_fd(&null);
    let head = 1000u32.to_le_bytes();
    nix::sys::socket::sendmsg::<()>(
        std::os::fd::AsRawFd::as_raw_fd(&slow),
        &[std::io::IoSlice::new(&head)],
        &[nix::sys::socket::ControlMessage::ScmRights(&[fd, fd, fd])],
        nix::sys::socket::MsgFlags::empty(),
        None,
    )
    .expect("send the request's length and fds");
    let t0 = Instant::now();
    let dribbler = std::thread::spawn(move || {
        // Bytes keep coming for 5 s; init must not wait for all of them.
        let mut cut_after = None;
        while t0.elapsed() < Duration::from_secs(5) {
            let mut b = [0u8; 256];
            match slow.read(&mut b) {
                Ok(_) => {
                    cut_after = Some(t0.elapsed());
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => {
                    cut_after = Some(t0.elapsed());
                    break;
                }
            }
            if slow.write_all(b" ").is_err() {
                cut_after = Some(t0.elapsed());
                break;
            }
        }
        cut_after
    });
    std::thread::sleep(Duration::from_millis(300));
    let t1 = Instant::now();
    let fast = sb.raw(&["exec", &id, "--", "echo", "served"]);
    let took = t1.elapsed();
    let cut = dribbler.join().expect("the slow caller's thread");
    saw(sb.name, format!("exec beside a slow caller took {took:?}; the slow caller was cut off after {cut:?}"));
    assert!(fast.ok() && fast.stdout == "served\n", "{fast}");
    assert!(took < Duration::from_secs(1), "an exec waited {took:?} behind a caller sending slowly");
    assert!(cut.is_some_and(|c| c < Duration::from_secs(4)), "the slow caller was never cut off: {cut:?}");
    sb.raw(&["terminate", &id]).expect_ok("terminate");
    sb.assert_clean("slow caller");
}

/// Another local user (a throw-away account) against a launched box made with a secret in its
/// environment and a file written in its /work: it must not find the secret anywhere under the
/// root or in any process's command line (the reaper the launch left is one), read the box's
/// config or output, plant a file in the box's /tmp, or open the reaper's lock (whoever can
/// flock it keeps the root from ever getting a reaper).
#[test]
fn other_local_users_see_nothing_of_a_box() {
    require_root!();
    let sb = Sbx::new("sbx_private");
    let user = tinyrun_conformance::LocalUser::new("p");
    let secret = format!("sekrit-{}-{}", std::process::id(), sb.rt.tag());
    let env = format!("API_KEY={secret}");
    let id = sb.launch(&["-e", &env]);
    let o = sb.raw(&["exec", &id, "--", "sh", "-c", "echo box-output > /work/out.txt"]);
    assert!(o.ok(), "exec: {o}");
    let root = sb.root_str();
    let bundle = format!("{root}/sandbox-bundles/{id}");
    let script = format!(
        "grep -rsl '{secret}' '{root}' && echo FOUND-IN-FILES; \
         ps -eo args | grep -F '{secret}' | grep -v grep && echo FOUND-IN-PS; \
         cat '{bundle}/config.json' >/dev/null 2>&1 && echo READ-CONFIG; \
         cat '{bundle}/scratch/work/out.txt' 2>/dev/null | grep -q box-output && echo READ-OUTPUT; \
         (echo planted > '{bundle}/scratch/tmp/planted') 2>/dev/null && echo PLANTED; \
         (exec 9<'{root}/sandbox-reaper.lock') 2>/dev/null && echo OPENED-LOCK; \
         echo done"
    );
    let (code, out, err) = user.sh(&script);
    let inside = sb.raw(&["exec", &id, "--", "ls", "-A", "/tmp"]);
    saw(sb.name, format!("as {}: {:?}; the box's /tmp: {:?}", user.name, out.trim(), inside.stdout.trim()));
    assert_eq!(code, 0, "the script as {} failed: {err}", user.name);
    assert!(out.trim_end().ends_with("done"), "the script did not run to its end: {out:?} {err}");
    for leak in ["FOUND-IN-FILES", "FOUND-IN-PS", "READ-CONFIG", "READ-OUTPUT", "PLANTED", "OPENED-LOCK"] {
        assert!(!out.contains(leak), "{leak}: another local user got at the box: {out}");
    }
    assert!(inside.ok() && !inside.stdout.contains("planted"), "the box sees a planted file: {inside}");
    // Control: the secret is there for root to find, so the grep above could have found it.
    let mine = std::process::Command::new("grep").args(["-rsl", &secret, root]).output().expect("grep");
    assert!(!mine.stdout.is_empty(), "root does not find the secret under {root}: the test proves nothing");
    sb.raw(&["terminate", &id]).expect_ok("terminate");
    sb.assert_clean("terminate");
}
