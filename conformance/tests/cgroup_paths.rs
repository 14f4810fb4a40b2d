//! A relative or empty `linux.cgroupsPath` with the cgroupfs driver (issue 15, part 3): as
//! runc's fs driver does, the container's cgroup goes under the caller's own cgroup in each v1
//! hierarchy (on v2: under the parent of the caller's cgroup), and an empty path is the
//! relative `<id>`.
//!
//! The caller is a `sh` this test spawns and first moves into cgroups of its own, different
//! per hierarchy: `/tinyrun-test/<cid>/a` for memory, `.../c` for pids and `name=systemd`,
//! `.../d` for blkio, `.../b` for every other hierarchy (on v2: `.../b`). It then execs the runtime. Later
//! commands (`ps`, `events --stats`, `pause`, `resume`, `kill`, `delete`) run from the test process itself, a
//! caller in other cgroups, and must find the same directories. `<cid>` is registered with
//! the harness, which thaws, kills and removes whatever is left under it even when a test
//! fails; relative paths start with `tinyrun-test/<cid>` so that they land there too in the
//! hybrid host's cgroup2 hierarchy, which runc 1.1 joins at the path taken from its root
//! rather than under the caller's cgroup (tinyrun does the same). With runc as the binary under test (`TINYRUN_BIN=/usr/sbin/runc`) the same
//! assertions hold.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::{json, Value};
use tinyrun_conformance::{require_root, rmdir_tree, Bundle, Out, Runtime};

const CG: &str = "/sys/fs/cgroup";

fn host_is_v2() -> bool {
    nix::sys::statfs::statfs(CG).map(|s| s.filesystem_type() == nix::sys::statfs::CGROUP2_SUPER_MAGIC).unwrap_or(false)
}

/// The hierarchies mounted under /sys/fs/cgroup: mount dir name and the key of its line in
/// `/proc/<pid>/cgroup` (a controller, `name=...`, or "" for cgroup2).
fn hierarchies() -> Vec<(String, String)> {
    if host_is_v2() {
        return vec![(String::new(), String::new())];
    }
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mut out = Vec::new();
    for l in info.lines() {
        let Some((pre, post)) = l.split_once(" - ") else { continue };
        let dir = pre.split(' ').nth(4).unwrap();
        let mut post = post.split(' ');
        let fstype = post.next().unwrap();
        let Some(name) = dir.strip_prefix("/sys/fs/cgroup/") else { continue };
        let key = match fstype {
            "cgroup2" => String::new(),
            "cgroup" => {
                let opts = post.nth(1).unwrap().split(',');
                let known = |o: &&str| !matches!(*o, "rw" | "ro" | "xattr" | "noprefix" | "clone_children");
                opts.filter(known).find(|o| !o.starts_with("release_agent")).unwrap().to_string()
            }
            _ => continue,
        };
        out.push((name.to_string(), key));
    }
    out
}

/// Which of the caller's cgroups (`a`, `b`, `c`) a hierarchy gets.
fn leaf(key: &str) -> &'static str {
    match key {
        "memory" => "a",
        "pids" | "name=systemd" => "c",
        "blkio" => "d",
        _ => "b",
    }
}

/// Cgroups for the caller under `/tinyrun-test/<cid>`, different per hierarchy.
struct Caller {
    cid: String,
    /// cgroup.procs (v1: tasks would do too) of each of the caller's cgroups.
    procs: Vec<PathBuf>,
    /// Directories outside `/tinyrun-test/<cid>` to remove at the end, if a failed test left
    /// them: the hybrid cgroup2 one of an empty cgroupsPath, `/<id>`.
    stray: std::cell::RefCell<Vec<PathBuf>>,
}

impl Drop for Caller {
    fn drop(&mut self) {
        for d in self.stray.borrow().iter() {
            rmdir_tree(d);
        }
    }
}

impl Caller {
    fn new(rt: &Runtime) -> Caller {
        let cid = format!("cgp-{}", rt.tag());
        // The harness removes /sys/fs/cgroup/*/tinyrun-test/<cid> for a tracked id.
        rt.track_id(&cid);
        let mut procs = Vec::new();
        for (name, key) in hierarchies() {
            let mount = PathBuf::from(CG).join(&name);
            let dir = mount.join("tinyrun-test").join(&cid).join(leaf(&key));
            std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
            // A new v1 cpuset level has no cpus or mems: take the parent's, level by level.
            let levels = if host_is_v2() {
                vec![]
            } else {
                vec!["tinyrun-test".to_string(), format!("tinyrun-test/{cid}"), format!("tinyrun-test/{cid}/b")]
            };
            for d in levels {
                for f in ["cpuset.cpus", "cpuset.mems"] {
                    let (here, parent) = (mount.join(&d).join(f), mount.join(&d).parent().unwrap().join(f));
                    if here.exists() && std::fs::read_to_string(&here).unwrap().trim().is_empty() {
                        std::fs::write(&here, std::fs::read_to_string(&parent).unwrap().trim()).unwrap();
                    }
                }
            }
            procs.push(dir.join("cgroup.procs"));
        }
        Caller { cid, procs, stray: Default::default() }
    }

    /// Where a hierarchy's cgroup of the caller is, from a hierarchy root.
    fn own(&self, key: &str) -> String {
        format!("/tinyrun-test/{}/{}", self.cid, if host_is_v2() { "b" } else { leaf(key) })
    }

    /// `<bin> --root R args...`, run by a shell that first moves itself into the caller's
    /// cgroups (exit 99 if it can't).
    fn run(&self, rt: &Runtime, args: &[&str]) -> Out {
        let script = r#"for f in $CALLER_PROCS; do echo $$ > "$f" || exit 99; done; exec "$@""#;
        let list: Vec<String> = self.procs.iter().map(|p| p.display().to_string()).collect();
        let mut c = Command::new("/bin/sh");
        c.args(["-c", script, "sh"]).arg(&rt.bin).arg("--root").arg(rt.root()).args(args);
        c.env("CALLER_PROCS", list.join(" ")).env("TINYRUN_CONFORMANCE_TAG", rt.tag()).stdin(Stdio::null());
        let o = rt.output(c);
        assert_ne!(o.code(), Some(99), "the caller could not join its cgroups\n{o}");
        o
    }
}

/// `/proc/<pid>/cgroup` as key -> path.
fn cgroups_of(pid: i32) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let mut out = BTreeMap::new();
    for l in text.lines() {
        let mut parts = l.splitn(3, ':');
        let (_, ctrls, path) = (parts.next(), parts.next().unwrap(), parts.next().unwrap());
        for c in ctrls.split(',') {
            out.insert(c.to_string(), path.to_string());
        }
    }
    out
}

/// The container's directory in each hierarchy, with `rel` below the caller's cgroup.
fn expected(caller: &Caller, rel: &str) -> Vec<(String, String, PathBuf)> {
    let mut out = Vec::new();
    for (name, key) in hierarchies() {
        let own = caller.own(&key);
        // v2: under the parent of the caller's cgroup (it holds the caller). Hybrid cgroup2:
        // from its root.
        let base = match (host_is_v2(), key.is_empty()) {
            (true, _) => own.rsplit_once('/').unwrap().0.to_string(),
            (false, true) => String::new(),
            (false, false) => own,
        };
        let path = format!("{base}/{rel}");
        out.push((key, path.clone(), PathBuf::from(CG).join(&name).join(path.trim_start_matches('/'))));
    }
    out
}

fn read(p: PathBuf) -> String {
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display())).trim().to_string()
}

fn sleeper(rt: &Runtime, path: Option<&str>, resources: Value) -> Bundle {
    let b = rt.bundle(&["sleep", "1000"]);
    b.config_mut(|c| {
        match path {
            Some(p) => c["linux"]["cgroupsPath"] = json!(p),
            None => {
                c["linux"].as_object_mut().unwrap().remove("cgroupsPath");
            }
        }
        for (k, v) in resources.as_object().unwrap() {
            c["linux"]["resources"][k] = v.clone();
        }
    });
    b
}

/// Created and started by the caller; the container's pid, its cgroups checked against
/// `want` (key, path from the hierarchy root, directory).
fn start_as(caller: &Caller, rt: &Runtime, b: &Bundle, want: &[(String, String, PathBuf)]) -> i32 {
    caller.run(rt, &["create", "--bundle", b.path(), &b.id]).expect_ok("create by the caller");
    caller.run(rt, &["start", &b.id]).expect_ok("start by the caller");
    let pid = rt.wait_status(&b.id, "running")["pid"].as_i64().unwrap() as i32;
    let got = cgroups_of(pid);
    for (key, path, dir) in want {
        assert_eq!(got.get(key.as_str()), Some(path), "hierarchy {key:?}: the container's cgroup ({got:?})");
        assert!(dir.is_dir(), "{} missing", dir.display());
    }
    pid
}

/// `delete` from the test process (a caller in other cgroups): every directory goes.
fn delete_and_check(rt: &Runtime, id: &str, want: &[(String, String, PathBuf)]) {
    rt.run(&["kill", id, "KILL"]).expect_ok("kill");
    rt.wait_status(id, "stopped");
    rt.run(&["delete", id]).expect_ok("delete by another caller");
    for (_, _, dir) in want {
        assert!(!dir.exists(), "{} left after delete", dir.display());
    }
}

#[test]
fn relative_path_goes_under_the_callers_cgroup_per_hierarchy() {
    require_root!();
    let rt = Runtime::new("cgprel");
    let caller = Caller::new(&rt);
    let resources = json!({"memory": {"limit": 67108864}, "pids": {"limit": 37}, "cpu": {"shares": 512}});
    let rel = format!("tinyrun-test/{}/rel/ct", caller.cid);
    let b = sleeper(&rt, Some(&rel), resources);
    let want = expected(&caller, &rel);
    let pid = start_as(&caller, &rt, &b, &want);
    let dir = |key: &str| want.iter().find(|w| w.0 == key).map(|w| w.2.clone()).unwrap();
    if host_is_v2() {
        assert_eq!(read(dir("").join("memory.max")), "67108864");
        assert_eq!(read(dir("").join("pids.max")), "37");
    } else {
        assert_eq!(read(dir("memory").join("memory.limit_in_bytes")), "67108864", "memory, under the caller's a");
        assert_eq!(read(dir("pids").join("pids.max")), "37", "pids, under the caller's c");
        assert_eq!(read(dir("cpu").join("cpu.shares")), "512", "cpu, under the caller's b");
    }
    // Later commands come from the test process, in none of the caller's cgroups.
    let ps = rt.run(&["ps", "--format", "json", &b.id]).expect_ok("ps");
    assert!(ps.stdout.contains(&pid.to_string()), "ps lists {pid}\n{ps}");
    let ev = rt.run(&["events", "--stats", &b.id]).expect_ok("events --stats");
    let v: Value = serde_json::from_str(ev.stdout.trim()).unwrap_or_else(|e| panic!("events --stats: {e}\n{ev}"));
    assert_eq!(v["data"]["memory"]["usage"]["limit"].as_u64(), Some(67108864), "memory, read where it is\n{ev}");
    assert!(v["data"]["pids"]["current"].as_u64() >= Some(1), "pids, read where they are\n{ev}");
    rt.run(&["pause", &b.id]).expect_ok("pause");
    assert_eq!(rt.status(&b.id).as_deref(), Some("paused"));
    let frozen =
        if host_is_v2() { read(dir("").join("cgroup.freeze")) } else { read(dir("freezer").join("freezer.state")) };
    assert!(frozen == "FROZEN" || frozen == "1", "freezer: {frozen}");
    rt.run(&["resume", &b.id]).expect_ok("resume");
    assert_eq!(rt.status(&b.id).as_deref(), Some("running"));
    delete_and_check(&rt, &b.id, &want);
}

#[test]
fn empty_or_absent_path_is_the_id_under_the_callers_cgroup() {
    require_root!();
    let rt = Runtime::new("cgpempty");
    let caller = Caller::new(&rt);
    for path in [Some(""), None] {
        let b = sleeper(&rt, path, json!({"pids": {"limit": 41}}));
        let want = expected(&caller, &b.id);
        caller.stray.borrow_mut().extend(want.iter().filter(|w| w.0.is_empty()).map(|w| w.2.clone()));
        start_as(&caller, &rt, &b, &want);
        let pids = want.iter().find(|w| w.0 == "pids" || w.0.is_empty()).unwrap().2.join("pids.max");
        assert_eq!(read(pids), "41", "cgroupsPath {path:?}");
        delete_and_check(&rt, &b.id, &want);
    }
}

#[test]
fn a_relative_path_cannot_climb_out_of_the_callers_cgroup() {
    require_root!();
    let rt = Runtime::new("cgpclimb");
    let caller = Caller::new(&rt);
    let b = sleeper(&rt, Some(&format!("../../../../tinyrun-test/{}/up/ct", caller.cid)), json!({}));
    // Like Go's filepath.Clean("/" + p): `..` stops at the caller's cgroup.
    let want = expected(&caller, &format!("tinyrun-test/{}/up/ct", caller.cid));
    start_as(&caller, &rt, &b, &want);
    delete_and_check(&rt, &b.id, &want);
}

/// The major:minor of a block device of this host (a disk if there is one), for blkio limits.
fn block_device() -> (u64, u64) {
    let mut names: Vec<String> = std::fs::read_dir("/sys/block")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort_by_key(|n| ["loop", "zram", "ram"].iter().any(|p| n.starts_with(p)));
    let name = names.first().expect("a block device in /sys/block");
    let dev = read(PathBuf::from(format!("/sys/block/{name}/dev")));
    let (maj, min) = dev.split_once(':').unwrap();
    (maj.parse().unwrap(), min.parse().unwrap())
}

/// With the caller's blkio cgroup apart from its devices one, the container's blkio cgroup is
/// too, and a blockIO limit is set there, as runc's fs driver sets it (not refused).
#[test]
fn a_limit_apart_from_the_devices_cgroup_is_set_where_its_cgroup_is() {
    require_root!();
    if host_is_v2() {
        tinyrun_conformance::skip!("v2 has one path for every controller: nothing lies apart");
    }
    let rt = Runtime::new("cgpapart");
    let caller = Caller::new(&rt);
    let (maj, min) = block_device();
    let resources = json!({"blockIO": {"throttleReadBpsDevice": [{"major": maj, "minor": min, "rate": 1048576}]}});
    let rel = format!("tinyrun-test/{}/apart/ct", caller.cid);
    let b = sleeper(&rt, Some(&rel), resources);
    let want = expected(&caller, &rel);
    let dir = |key: &str| want.iter().find(|w| w.0 == key).map(|w| w.2.clone()).unwrap();
    assert_ne!(dir("blkio").parent(), dir("devices").parent(), "the test needs the two apart");
    start_as(&caller, &rt, &b, &want);
    let set = read(dir("blkio").join("blkio.throttle.read_bps_device"));
    assert!(set.lines().any(|l| l == format!("{maj}:{min} 1048576")), "blkio, under the caller's d: {set:?}");
    delete_and_check(&rt, &b.id, &want);
}
