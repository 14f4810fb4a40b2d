//! The systemd cgroup driver (`--systemd-cgroup`, cgroupsPath `slice:prefix:name`), as a caller
//! (containerd with `SystemdCgroup = true`) uses it: the container is a transient scope unit
//! `prefix-name.scope` in the slice, holding the container's processes, its limits visible both
//! to systemd (`systemctl show`) and in the scope's cgroup files; `update` changes both; `pause`,
//! `resume`, `kill` and `state` work on the scope; `delete` leaves neither unit nor cgroup. The
//! device rules are the unit's `DevicePolicy`/`DeviceAllow` and hold when systemd re-applies the
//! unit's properties; a failed unit left over with the container's name is replaced; a name
//! ending in `.slice` makes a slice for the container; a rootless caller's container is a unit of
//! its own systemd (`systemd_user`).
//!
//! These need systemd as PID 1 on cgroup v2: `conformance/run-systemd-tests` runs them in such a
//! guest, once for tinyrun and once for runc (`TINYRUN_BIN=/usr/sbin/runc`) as the reference.
//! Elsewhere they print SKIP, unless `TINYRUN_REQUIRE_SYSTEMD=1` makes that a failure.
//! `no_systemd_fails_naming_it_and_leaves_nothing` is the opposite: it runs only where systemd
//! does not (this project's build hosts), and SKIPs in the guest.
//!
//! Each scenario prints `TIME <scenario> <runtime>: <ms> ms` for the stage's timing table.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tinyrun_conformance::{require_root, skip, Bundle, Runtime};

/// Where systemd (as PID 1) says it runs: sd_booted()'s test.
fn systemd_runs() -> bool {
    Path::new("/run/systemd/system").is_dir()
}

/// Returns from the test unless systemd runs here (fails instead under TINYRUN_REQUIRE_SYSTEMD=1).
macro_rules! require_systemd {
    () => {
        require_root!();
        if !crate::systemd_runs() {
            assert!(
                std::env::var("TINYRUN_REQUIRE_SYSTEMD").as_deref() != Ok("1"),
                "TINYRUN_REQUIRE_SYSTEMD=1, but systemd is not running here (no /run/systemd/system)"
            );
            skip!("systemd is not PID 1 here (no /run/systemd/system): run conformance/run-systemd-tests");
        }
    };
}

mod systemd_user;

/// The container's transient unit; on drop (a failed test) stopped, which kills what it holds and
/// removes its cgroup.
struct Unit {
    name: String,
}

impl Unit {
    fn cgroup(&self) -> PathBuf {
        PathBuf::from(format!("/sys/fs/cgroup/system.slice/{}", self.name))
    }

    fn file(&self, f: &str) -> String {
        let p = self.cgroup().join(f);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display())).trim().to_string()
    }

    /// `systemctl show` of the given properties, as a map.
    fn show(&self, props: &[&str]) -> std::collections::BTreeMap<String, String> {
        let mut cmd = Command::new("systemctl");
        cmd.args(["show", &self.name]);
        for p in props {
            cmd.args(["-p", p]);
        }
        let out = cmd.output().expect("systemctl show");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// Every value `systemctl show` prints for `prop` (an array property prints one line each).
    fn show_all(&self, prop: &str) -> Vec<String> {
        let out = Command::new("systemctl").args(["show", &self.name, "-p", prop]).output().expect("systemctl show");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let want = format!("{prop}=");
        text.lines().filter_map(|l| l.strip_prefix(&want)).filter(|v| !v.is_empty()).map(str::to_string).collect()
    }

    /// Whether systemd still has the unit loaded. systemd loads any slice on request, with a unit
    /// file or none (so asking loads it): a slice counts as long as it is not inactive.
    fn loaded(&self) -> bool {
        if self.name.ends_with(".slice") {
            return self.show(&["ActiveState"]).get("ActiveState").is_some_and(|s| s != "inactive");
        }
        self.show(&["LoadState"]).get("LoadState").is_some_and(|s| s == "loaded")
    }

    #[track_caller]
    fn assert_gone(&self) {
        // systemd garbage-collects a stopped scope shortly after its stop job.
        let deadline = Instant::now() + Duration::from_secs(5);
        while (self.loaded() || self.cgroup().exists()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(!self.loaded(), "unit {} still there: {:?}", self.name, self.show(&["ActiveState", "SubState"]));
        assert!(!self.cgroup().exists(), "cgroup {} left behind", self.cgroup().display());
    }
}

impl Drop for Unit {
    fn drop(&mut self) {
        if !systemd_runs() {
            return;
        }
        let freeze = self.cgroup().join("cgroup.freeze");
        if freeze.exists() {
            let _ = std::fs::write(&freeze, "0");
        }
        // A unit already gone (the test passed) is the usual case: no noise about it.
        for verb in ["stop", "reset-failed"] {
            let mut cmd = Command::new("systemctl");
            cmd.args([verb, "--quiet", &self.name]).stderr(std::process::Stdio::null());
            let _ = cmd.status();
        }
    }
}

/// `--systemd-cgroup` then `args`, through the harness (its `--root`, output capture, timeout).
fn sd(rt: &Runtime, args: &[&str]) -> tinyrun_conformance::Out {
    let mut all = vec!["--systemd-cgroup"];
    all.extend_from_slice(args);
    rt.run(&all)
}

/// A bundle running `args` as the scope `tinyrun-<id>.scope` in system.slice, with `resources`.
fn bundle(rt: &Runtime, args: &[&str], resources: Value) -> (Bundle, Unit) {
    let b = rt.bundle(args);
    let path = format!("system.slice:tinyrun:{}", b.id);
    b.config_mut(|c| {
        c["linux"]["cgroupsPath"] = path.into();
        c["linux"]["resources"] = resources;
    });
    let unit = Unit { name: format!("tinyrun-{}.scope", b.id) };
    (b, unit)
}

/// create + start, detached; init's pid.
fn start(rt: &Runtime, b: &Bundle) -> i32 {
    sd(rt, &["create", "--bundle", b.path(), &b.id]).expect_ok("create --systemd-cgroup");
    sd(rt, &["start", &b.id]).expect_ok("start");
    let st = rt.wait_status(&b.id, "running");
    i32::try_from(st["pid"].as_i64().expect("state.pid")).expect("pid")
}

/// Runs a scenario, printing how long it took.
fn timed(name: &str, rt: &Runtime, f: impl FnOnce()) {
    let t = Instant::now();
    f();
    let who = if rt.is_runc() { "runc" } else { "tinyrun" };
    eprintln!("TIME {name} {who}: {} ms", t.elapsed().as_millis());
}

const LIMITS: fn() -> Value = || {
    json!({
        "memory": {"limit": 67_108_864},
        "pids": {"limit": 20},
        "cpu": {"shares": 1024, "quota": 50_000, "period": 100_000}
    })
};

#[test]
fn a_container_is_a_scope_with_its_limits() {
    require_systemd!();
    let rt = Runtime::new("sd_scope");
    timed("create_start_limits", &rt, || {
        let (b, unit) = bundle(&rt, &["sleep", "600"], LIMITS());
        let pid = start(&rt, &b);
        let shown = unit.show(&[
            "ActiveState",
            "ControlGroup",
            "MemoryMax",
            "TasksMax",
            "CPUQuotaPerSecUSec",
            "Delegate",
            "CPUWeight",
        ]);
        let want = [
            ("ActiveState", "active".to_string()),
            ("ControlGroup", format!("/system.slice/{}", unit.name)),
            ("MemoryMax", "67108864".into()),
            ("TasksMax", "20".into()),
            ("CPUQuotaPerSecUSec", "500ms".into()),
            ("Delegate", "yes".into()),
            ("CPUWeight", "100".into()),
        ];
        for (k, v) in want {
            // runc before 1.3.2 maps 1024 shares to weight 39 (linear), not to the default.
            if rt.is_runc() && k == "CPUWeight" && shown.get(k).map(String::as_str) == Some("39") {
                eprintln!("runc before 1.3.2: CPUWeight 39 for 1024 shares");
                continue;
            }
            assert_eq!(shown.get(k), Some(&v), "systemctl show {}: {k}: {shown:?}", unit.name);
        }
        assert_eq!(unit.file("memory.max"), "67108864");
        assert_eq!(unit.file("pids.max"), "20");
        assert_eq!(unit.file("cpu.max"), "50000 100000");
        let weight = unit.file("cpu.weight");
        if !(rt.is_runc() && weight == "39") {
            assert_eq!(weight, "100", "1024 shares, the default, are the default weight");
        }
        let own = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("/proc/PID/cgroup");
        assert_eq!(own.trim(), format!("0::/system.slice/{}", unit.name), "init is in the scope");
        assert!(unit.file("cgroup.procs").lines().any(|l| l == pid.to_string()), "cgroup.procs lists init");
        sd(&rt, &["delete", "--force", &b.id]).expect_ok("delete --force");
        unit.assert_gone();
        rt.assert_nothing_left(&b.id);
    });
}

#[test]
fn update_changes_the_unit_and_the_cgroup() {
    require_systemd!();
    let rt = Runtime::new("sd_update");
    timed("update", &rt, || {
        let (b, unit) = bundle(&rt, &["sleep", "600"], LIMITS());
        start(&rt, &b);
        let args = ["update", "--memory", "33554432", "--pids-limit", "30", "--cpu-share", "2048", &b.id];
        sd(&rt, &args).expect_ok("update");
        let shown = unit.show(&["MemoryMax", "TasksMax", "CPUWeight"]);
        assert_eq!(shown.get("MemoryMax").map(String::as_str), Some("33554432"), "{shown:?}");
        assert_eq!(shown.get("TasksMax").map(String::as_str), Some("30"), "{shown:?}");
        // 2048 shares: 174 by runc 1.3.2's mapping, 79 by the linear one before it.
        let weight = unit.file("cpu.weight");
        assert_eq!(shown.get("CPUWeight"), Some(&weight), "the unit and the file agree: {shown:?}");
        if !(rt.is_runc() && weight == "79") {
            assert_eq!(weight, "174", "2048 shares");
        }
        assert_eq!(unit.file("memory.max"), "33554432");
        assert_eq!(unit.file("pids.max"), "30");
        assert_eq!(unit.file("cpu.max"), "50000 100000", "what update did not name stays");
        sd(&rt, &["delete", "--force", &b.id]).expect_ok("delete --force");
        unit.assert_gone();
        rt.assert_nothing_left(&b.id);
    });
}

#[test]
fn delete_removes_the_unit_and_its_cgroup() {
    require_systemd!();
    let rt = Runtime::new("sd_delete");
    timed("delete", &rt, || {
        // Created, never started: delete stops the unit.
        let (b, unit) = bundle(&rt, &["sleep", "600"], json!({"pids": {"limit": 10}}));
        sd(&rt, &["create", "--bundle", b.path(), &b.id]).expect_ok("create");
        assert!(unit.loaded() && unit.cgroup().is_dir(), "{} exists once created", unit.name);
        sd(&rt, &["delete", "--force", &b.id]).expect_ok("delete --force of a created container");
        unit.assert_gone();
        rt.assert_nothing_left(&b.id);
        // Exited: systemd drops an empty scope by itself; delete must not mind.
        let (b, unit) = bundle(&rt, &["sleep", "600"], json!({"pids": {"limit": 10}}));
        start(&rt, &b);
        sd(&rt, &["kill", &b.id, "KILL"]).expect_ok("kill KILL");
        rt.wait_status(&b.id, "stopped");
        sd(&rt, &["delete", &b.id]).expect_ok("delete of a stopped container");
        unit.assert_gone();
        rt.assert_nothing_left(&b.id);
    });
}

#[test]
fn pause_resume_kill_and_state_work_on_the_scope() {
    require_systemd!();
    let rt = Runtime::new("sd_pause");
    timed("pause_resume_kill", &rt, || {
        let (b, unit) = bundle(&rt, &["sleep", "600"], json!({"pids": {"limit": 10}}));
        let pid = start(&rt, &b);
        sd(&rt, &["pause", &b.id]).expect_ok("pause");
        assert_eq!(rt.status(&b.id).as_deref(), Some("paused"));
        assert_eq!(unit.file("cgroup.freeze"), "1", "the scope's freezer");
        assert!(unit.file("cgroup.events").lines().any(|l| l == "frozen 1"), "{}", unit.file("cgroup.events"));
        sd(&rt, &["resume", &b.id]).expect_ok("resume");
        assert_eq!(rt.status(&b.id).as_deref(), Some("running"));
        assert_eq!(unit.file("cgroup.freeze"), "0");
        // `sleep` as the namespace's init ignores TERM: KILL it.
        sd(&rt, &["kill", &b.id, "KILL"]).expect_ok("kill KILL");
        rt.wait_status(&b.id, "stopped");
        assert!(!tinyrun_conformance::pid_alive(pid), "init {pid} still alive after KILL");
        sd(&rt, &["delete", &b.id]).expect_ok("delete");
        unit.assert_gone();
        rt.assert_nothing_left(&b.id);
    });
}

/// Runs where systemd does not: `--systemd-cgroup` must fail at once, say that systemd is
/// missing, and leave no state, process or cgroup.
#[test]
fn no_systemd_fails_naming_it_and_leaves_nothing() {
    require_root!();
    if systemd_runs() {
        skip!("systemd runs here: this checks a host without it");
    }
    let rt = Runtime::new("sd_none");
    let (b, unit) = bundle(&rt, &["true"], json!({"pids": {"limit": 10}}));
    let o = sd(&rt, &["create", "--bundle", b.path(), &b.id]).expect_err("create --systemd-cgroup without systemd");
    assert!(o.stderr.to_lowercase().contains("systemd"), "the error names systemd:\n{o}");
    rt.assert_nothing_left(&b.id);
    // The unit's cgroup in every hierarchy mounted under /sys/fs/cgroup, and at its top.
    let mut stray: Vec<PathBuf> = std::fs::read_dir("/sys/fs/cgroup")
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path().join("system.slice").join(&unit.name)).collect())
        .unwrap_or_default();
    stray.push(unit.cgroup());
    stray.retain(|p| p.exists());
    assert!(stray.is_empty(), "cgroup left behind: {stray:?}");
}

/// A cgroupsPath whose name ends in ".slice" asks for a slice unit of that name for the
/// container, wanting the slice the path names (runc's reading). The runtime makes the slice with
/// the limits as its properties and puts init in its cgroup; `delete` leaves nothing. runc asks
/// systemd for the slice with init in it (`PIDs=`), which systemd refuses for a slice, so its
/// create fails there; that is checked as known. A slice that would not sit inside the named one
/// (systemd places a slice by the dashes of its name) is refused before anything is made.
#[test]
fn a_slice_name_makes_a_slice_holding_the_container() {
    require_systemd!();
    let rt = Runtime::new("sd_slice");
    timed("slice_unit", &rt, || {
        let b = rt.bundle(&["sleep", "600"]);
        let slice = format!("system-{}.slice", b.id.replace('-', "_"));
        b.config_mut(|c| {
            c["linux"]["cgroupsPath"] = format!("system.slice:tinyrun:{slice}").into();
            c["linux"]["resources"] = json!({"pids": {"limit": 20}, "memory": {"limit": 67_108_864}});
        });
        let unit = Unit { name: slice.clone() };
        let o = sd(&rt, &["create", "--bundle", b.path(), &b.id]);
        if rt.is_runc() && !o.ok() {
            assert!(o.stderr.contains("PIDs"), "runc's create fails on the slice's PIDs=:\n{o}");
            eprintln!("KNOWN: runc asks for the slice with init in it, which systemd refuses");
            assert_ne!(unit.show(&["ActiveState"]).get("ActiveState").map(String::as_str), Some("active"));
            rt.assert_nothing_left(&b.id);
            return;
        }
        let o = o.expect_ok("create with a slice as the name");
        sd(&rt, &["start", &b.id]).expect_ok("start");
        let pid = rt.wait_status(&b.id, "running")["pid"].as_i64().expect("state.pid");
        let shown = unit.show(&["ActiveState", "ControlGroup", "Wants", "TasksMax", "MemoryMax"]);
        let want = [
            ("ActiveState", "active".to_string()),
            ("ControlGroup", format!("/system.slice/{slice}")),
            ("Wants", "system.slice".into()),
            ("TasksMax", "20".into()),
            ("MemoryMax", "67108864".into()),
        ];
        for (k, v) in want {
            assert_eq!(shown.get(k), Some(&v), "systemctl show {slice}: {k}: {shown:?}\n{o}");
        }
        assert_eq!(unit.file("pids.max"), "20");
        let own = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("/proc/PID/cgroup");
        assert_eq!(own.trim(), format!("0::/system.slice/{slice}"), "init is in the slice's cgroup");
        sd(&rt, &["delete", "--force", &b.id]).expect_ok("delete --force");
        unit.assert_gone();
        rt.assert_nothing_left(&b.id);
        if rt.is_runc() {
            return;
        }
        let b = rt.bundle(&["sleep", "600"]);
        let elsewhere = format!("tinyrun_{}.slice", b.id.replace('-', "_"));
        b.config_mut(|c| c["linux"]["cgroupsPath"] = format!("system.slice:tinyrun:{elsewhere}").into());
        let o = sd(&rt, &["create", "--bundle", b.path(), &b.id]).expect_err("a slice outside the named slice");
        assert!(o.stderr.contains(&elsewhere) && o.stderr.contains("not inside"), "the error names both:\n{o}");
        assert!(!Path::new(&format!("/sys/fs/cgroup/{elsewhere}")).exists(), "{elsewhere} made");
        rt.assert_nothing_left(&b.id);
    });
}

/// A device the config denies stays denied: /dev/fuse's numbers (c 10:229, not among the default
/// devices), as a node the host makes in the container's /dev (mknod itself the default rules
/// allow, as runc's do), neither read nor written (only a device filter says "Operation not
/// permitted" there; /dev/kmsg, which this used, refuses a read by itself under dmesg_restrict).
fn device_probe(rt: &Runtime, b: &Bundle, pid: i32, when: &str) {
    let opens = device_opens(rt, b, pid);
    for k in ["fuse-r", "fuse-w"] {
        assert!(opens.get(k).is_some_and(|r| r.contains("not permitted")), "{when}: {k} opens: {opens:?}");
    }
}

/// systemd re-applies a unit's properties on `daemon-reload` and whenever one changes (`update`,
/// `systemctl set-property`); the container's device rules must still hold after each.
#[test]
fn the_device_rules_hold_after_systemd_reapplies_the_unit() {
    require_systemd!();
    let rt = Runtime::new("sd_devices");
    timed("device_rules", &rt, || {
        let res = json!({"devices": [{"allow": false, "access": "rwm"}], "pids": {"limit": 20}});
        let (b, unit) = bundle(&rt, &["sleep", "600"], res);
        let pid = start(&rt, &b);
        device_probe(&rt, &b, pid, "after start");
        let st = Command::new("systemctl").arg("daemon-reload").status().expect("systemctl daemon-reload");
        assert!(st.success(), "systemctl daemon-reload");
        device_probe(&rt, &b, pid, "after systemctl daemon-reload");
        sd(&rt, &["update", "--pids-limit", "30", &b.id]).expect_ok("update");
        device_probe(&rt, &b, pid, "after update");
        let st = Command::new("systemctl")
            .args(["set-property", "--runtime", &unit.name, "TasksMax=40"])
            .status()
            .expect("systemctl set-property");
        assert!(st.success(), "systemctl set-property");
        device_probe(&rt, &b, pid, "after systemctl set-property");
        sd(&rt, &["delete", "--force", &b.id]).expect_ok("delete --force");
        unit.assert_gone();
        rt.assert_nothing_left(&b.id);
    });
}

/// What opening device nodes from inside the container gives, each made by the host in the
/// container's /dev by number: `fuse-r` and `fuse-w` (c 10:229, read and write), `pts` (c
/// 136:99, a pty slave outside devpts), `null` (write). Each value is "ok" or the shell's error.
/// A device filter's refusal is "Operation not permitted"; past the filters, fuse opens (or,
/// its module not loaded, fails "No such device") and the pty fails "I/O error".
fn device_opens(rt: &Runtime, b: &Bundle, pid: i32) -> std::collections::BTreeMap<String, String> {
    let dev = format!("/proc/{pid}/root/dev");
    for (node, major, minor) in [("tr-fuse", "10", "229"), ("tr-pts", "136", "99")] {
        let path = format!("{dev}/{node}");
        let _ = std::fs::remove_file(&path);
        let st = Command::new("mknod").args([&path, "c", major, minor]).status().expect("mknod on the host");
        assert!(st.success(), "mknod {path}");
    }
    let script = r#"p() {
        if [ "$2" = r ]; then r=$( (true < "/dev/$3") 2>&1 && echo ok); else r=$( (true > "/dev/$3") 2>&1 && echo ok); fi
        echo "$1=$r"
    }
    p fuse-r r tr-fuse; p fuse-w w tr-fuse; p pts r tr-pts; p null w null"#;
    let o = sd(rt, &["exec", &b.id, "sh", "-c", script]).expect_ok("exec the device probes");
    for node in ["tr-fuse", "tr-pts"] {
        let _ = std::fs::remove_file(format!("{dev}/{node}"));
    }
    o.stdout.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// The device rules are sent to systemd as the unit's `DevicePolicy=strict` and `DeviceAllow=`
/// list, as runc sends them (the spec's allowances and the default devices), replaced rather than
/// added to by `update`. systemd's own device filter, made from that list once systemd re-applies
/// the unit's devices, lets through what the rules allow (read of c 10:229, the default /dev/null
/// and pty major) and still refuses the rest.
#[test]
fn device_rules_are_the_units_device_policy() {
    require_systemd!();
    let rt = Runtime::new("sd_devallow");
    timed("device_allow", &rt, || {
        let fuse_r = json!({"allow": true, "type": "c", "major": 10, "minor": 229, "access": "r"});
        let res = json!({"devices": [{"allow": false, "access": "rwm"}, fuse_r], "pids": {"limit": 20}});
        let (b, unit) = bundle(&rt, &["sleep", "600"], res);
        let pid = start(&rt, &b);
        assert_eq!(unit.show_all("DevicePolicy"), ["strict"]);
        let mut first = unit.show_all("DeviceAllow");
        for want in ["/dev/char/10:229 r", "/dev/char/1:3 rwm", "/dev/char/5:2 rwm", "char-* m", "block-* m"] {
            assert!(first.iter().any(|e| e == want), "DeviceAllow lacks {want:?}: {first:?}");
        }
        // runc 1.1 names a whole major by its /proc/devices group; systemd 240+ takes the number.
        assert!(first.iter().any(|e| e == "char-136 rwm" || e == "char-pts rwm"), "the pty major: {first:?}");
        assert_eq!(first.iter().filter(|e| e.starts_with("/dev/char/10:229 ")).count(), 1, "{first:?}");
        sd(&rt, &["update", "--pids-limit", "30", &b.id]).expect_ok("update");
        let mut again = unit.show_all("DeviceAllow");
        first.sort();
        again.sort();
        assert_eq!(again, first, "update sends the list again in place of the old one");
        // The same policy set again makes systemd rebuild and attach its device filter.
        let st = Command::new("systemctl")
            .args(["set-property", "--runtime", &unit.name, "DevicePolicy=strict"])
            .status()
            .expect("systemctl set-property");
        assert!(st.success(), "systemctl set-property");
        let opens = device_opens(&rt, &b, pid);
        let allowed = |k: &str| opens.get(k).is_some_and(|r| !r.is_empty() && !r.contains("not permitted"));
        assert!(allowed("fuse-r"), "an allowed read: {opens:?}");
        assert_eq!(opens.get("null").map(String::as_str), Some("ok"), "a default device: {opens:?}");
        assert!(allowed("pts"), "the pty major: {opens:?}");
        assert!(opens.get("fuse-w").is_some_and(|r| r.contains("not permitted")), "a denied write: {opens:?}");
        sd(&rt, &["delete", "--force", &b.id]).expect_ok("delete --force");
        unit.assert_gone();
        rt.assert_nothing_left(&b.id);
    });
}

/// A unit of the container's name that systemd still holds, failed (here: a scope that ran past
/// its RuntimeMaxSec), does not stop the container: the failed unit is reset and the start
/// retried once, as runc does.
#[test]
fn a_leftover_failed_unit_of_the_same_name_is_replaced() {
    require_systemd!();
    let rt = Runtime::new("sd_exists");
    timed("failed_unit_exists", &rt, || {
        let (b, unit) = bundle(&rt, &["sleep", "600"], json!({"pids": {"limit": 10}}));
        let st = Command::new("systemd-run")
            .args(["--quiet", "--scope", "--unit", &unit.name, "-p", "RuntimeMaxSec=1", "sleep", "30"])
            .status()
            .expect("systemd-run --scope");
        assert!(!st.success(), "the scope's sleep was stopped at RuntimeMaxSec");
        let shown = unit.show(&["ActiveState"]);
        assert_eq!(shown.get("ActiveState").map(String::as_str), Some("failed"), "{}: {shown:?}", unit.name);
        let pid = start(&rt, &b);
        let state = unit.show(&["ActiveState"]).get("ActiveState").cloned();
        if rt.is_runc() && state.as_deref() == Some("failed") {
            // runc 1.1 ignores UnitExists; the reset and retry came with runc 1.2 (runc#3782).
            eprintln!("KNOWN: runc 1.1 ran init outside a live unit: {} stayed failed", unit.name);
            sd(&rt, &["delete", "--force", &b.id]).expect_ok("delete --force");
            return;
        }
        assert_eq!(state.as_deref(), Some("active"), "{} after create", unit.name);
        let own = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("/proc/PID/cgroup");
        assert_eq!(own.trim(), format!("0::/system.slice/{}", unit.name), "init is in the new scope");
        sd(&rt, &["delete", "--force", &b.id]).expect_ok("delete --force");
        unit.assert_gone();
        rt.assert_nothing_left(&b.id);
    });
}

/// `run` in the foreground waits for the container after starting its scope: the connection to
/// systemd must be gone by then, with no thread of its own left in the runtime (a thread found
/// there could hold a lock a later fork inherits, and keeps the process busy).
#[test]
fn no_thread_of_the_bus_outlives_the_scope_start() {
    require_systemd!();
    let rt = Runtime::new("sd_threads");
    if rt.is_runc() {
        skip!("runc is a Go program with threads of its own");
    }
    timed("bus_threads", &rt, || {
        let (b, unit) = bundle(&rt, &["sleep", "600"], json!({"pids": {"limit": 10}}));
        let run = rt.spawn(&["--systemd-cgroup", "run", "--bundle", b.path(), &b.id]);
        let runner = i32::try_from(run.child.id()).expect("pid");
        rt.wait_status(&b.id, "running");
        let threads = || -> Vec<String> {
            let dir = format!("/proc/{runner}/task");
            let tasks = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{dir}: {e}"));
            tasks
                .filter_map(|t| t.ok())
                .map(|t| std::fs::read_to_string(t.path().join("comm")).unwrap_or_default().trim().to_string())
                .collect()
        };
        // Give an idle thread no chance to be counted as gone by a race: look twice.
        let first = threads();
        std::thread::sleep(Duration::from_millis(200));
        let again = threads();
        assert_eq!((first.len(), again.len()), (1, 1), "threads of `tinyrun run`: {first:?}, then {again:?}");
        sd(&rt, &["kill", &b.id, "KILL"]).expect_ok("kill KILL");
        run.wait();
        // `run` deletes the container as it exits; a leftover one is deleted here.
        let _ = sd(&rt, &["delete", "--force", &b.id]);
        unit.assert_gone();
        rt.assert_nothing_left(&b.id);
    });
}

/// A bus that takes the connection and never answers must not hang `create`: the runtime gives
/// up on it at its deadline (25 s) and, as root, reaches systemd on its private socket, runc's
/// fallback when no bus daemon answers. Nothing here accepts: the kernel queues the connection,
/// and the runtime's first byte of authentication is never answered.
#[test]
fn a_bus_that_never_answers_is_given_up_at_its_deadline() {
    require_systemd!();
    let rt = Runtime::new("sd_hung_bus");
    if rt.is_runc() {
        skip!("runc's connection to the bus has no deadline");
    }
    timed("hung_bus", &rt, || {
        let sock = rt.tempdir().join("bus");
        let _silent = std::os::unix::net::UnixListener::bind(&sock).expect("bind the silent bus");
        let (b, unit) = bundle(&rt, &["sleep", "600"], json!({"pids": {"limit": 10}}));
        let mut cmd = rt.command(&["--systemd-cgroup", "create", "--bundle", b.path(), &b.id]);
        cmd.env("DBUS_SYSTEM_BUS_ADDRESS", format!("unix:path={}", sock.display()));
        let t = Instant::now();
        rt.output(cmd).expect_ok("create with a system bus that never answers");
        let took = t.elapsed();
        assert!(took >= Duration::from_secs(20) && took < Duration::from_secs(100), "create took {took:?}");
        assert!(unit.loaded() && unit.cgroup().is_dir(), "{} made through systemd's own socket", unit.name);
        sd(&rt, &["delete", "--force", &b.id]).expect_ok("delete --force");
        unit.assert_gone();
        rt.assert_nothing_left(&b.id);
    });
}
