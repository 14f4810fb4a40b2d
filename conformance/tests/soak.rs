//! Soak (issue 7, Reliability 1): many containers through the CLI in two parallel streams, then
//! check that nothing of them is left on the host.
//!
//! Each stream alternates two kinds of container, each with its own id and cgroup
//! `/tinyrun-test/<id>`, all in one shared `--root`:
//!
//! * `run` of `/bin/true` (foreground; exit status 0);
//! * `create --pid-file` of `/bin/probe sleep 600`, `start`, `kill KILL`, `state` until
//!   `stopped`, `delete` (no `--force`). The init's network namespace inode is recorded.
//!
//! Afterwards: the state root is empty and `list -q` prints nothing; no cgroup dir named after a
//! soak id in any hierarchy; no mount whose line names the state root, the bundles, the shared
//! rootfs or a soak id; no process of the test; none of the recorded network namespaces is still
//! held (by a process or an nsfs mount); and the test process has as many fds open as before.
//!
//! Size: `TINYRUN_SOAK_N` containers in all (default 200, about 20 s with the debug binary on
//! 2 cores); `conformance/soak` runs 10,000. The figures (containers/s, medians per kind, fds
//! before/after) are printed; see them with `--nocapture`.

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tinyrun_conformance::{cgroup_dirs, cmdline, require_root, Runtime};

/// How long one runtime invocation may take in the soak before it counts as a hang.
const INVOCATION_TIMEOUT: Duration = Duration::from_secs(60);

fn containers_wanted() -> usize {
    std::env::var("TINYRUN_SOAK_N").ok().and_then(|s| s.parse().ok()).unwrap_or(200)
}

fn fd_count() -> usize {
    fs::read_dir("/proc/self/fd").expect("read /proc/self/fd").count()
}

/// Waits for `child` with a deadline, through a pidfd (no polling loop, no extra thread).
fn wait_bounded(child: &mut std::process::Child, timeout: Duration) -> Option<std::process::ExitStatus> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1; no memory is shared.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, child.id() as libc::pid_t, 0) };
    if raw >= 0 {
        // SAFETY: `raw` is a fresh fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw as i32) };
        let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd, and its count.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n == 0 {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
    }
    child.wait().ok()
}

/// What one stream needs: plain data, so the stream can run on its own thread.
struct Stream {
    n: usize,
    bin: PathBuf,
    root: PathBuf,
    tag: String,
    prefix: String,
    bundle: PathBuf,
    config: Value,
    stderr: PathBuf,
    pidfile: PathBuf,
}

#[derive(Default)]
struct Stats {
    run_ms: Vec<f64>,
    cycle_ms: Vec<f64>,
    netns: Vec<u64>,
}

impl Stream {
    /// `<bin> --root R args...`; Ok(stdout) on exit 0, else a message with stderr.
    fn invoke(&self, args: &[&str]) -> Result<String, String> {
        let err = File::create(&self.stderr).map_err(|e| format!("stderr file: {e}"))?;
        let out_path = self.stderr.with_extension("out");
        let out = File::create(&out_path).map_err(|e| format!("stdout file: {e}"))?;
        let mut child = Command::new(&self.bin)
            .arg("--root")
            .arg(&self.root)
            .args(args)
            .env("TINYRUN_CONFORMANCE_TAG", &self.tag)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", self.bin.display()))?;
        let status = wait_bounded(&mut child, INVOCATION_TIMEOUT);
        let stderr = fs::read_to_string(&self.stderr).unwrap_or_default();
        match status {
            Some(st) if st.success() => Ok(fs::read_to_string(&out_path).unwrap_or_default()),
            Some(st) => Err(format!("{args:?}: {st}: {}", stderr.trim())),
            None => Err(format!("{args:?}: hung for {INVOCATION_TIMEOUT:?}")),
        }
    }

    fn write_config(&mut self, id: &str, args: &[&str]) -> Result<(), String> {
        self.config["process"]["args"] = args.iter().map(|a| Value::from(*a)).collect();
        self.config["linux"]["cgroupsPath"] = format!("/tinyrun-test/{id}").into();
        let text = serde_json::to_vec(&self.config).expect("serialize config");
        fs::write(self.bundle.join("config.json"), text).map_err(|e| format!("write config: {e}"))
    }

    fn run_true(&mut self, id: &str) -> Result<(), String> {
        self.write_config(id, &["/bin/true"])?;
        let bundle = self.bundle.to_str().expect("utf-8").to_string();
        self.invoke(&["run", "--bundle", &bundle, id]).map(drop)
    }

    /// create, start, kill, state until stopped, delete. Returns init's netns inode.
    fn cycle(&mut self, id: &str) -> Result<Option<u64>, String> {
        self.write_config(id, &["/bin/probe", "sleep", "600"])?;
        let bundle = self.bundle.to_str().expect("utf-8").to_string();
        let pidfile = self.pidfile.to_str().expect("utf-8").to_string();
        self.invoke(&["create", "--bundle", &bundle, "--pid-file", &pidfile, id])?;
        let netns = fs::read_to_string(&self.pidfile)
            .ok()
            .and_then(|p| fs::metadata(format!("/proc/{}/ns/net", p.trim())).ok())
            .map(|m| m.ino());
        self.invoke(&["start", id])?;
        self.invoke(&["kill", id, "KILL"])?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let out = self.invoke(&["state", id])?;
            let st: Value = serde_json::from_str(&out).map_err(|e| format!("state is not JSON ({e}): {out}"))?;
            if st["status"] == "stopped" {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("{id} not stopped 10 s after kill: {st}"));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        self.invoke(&["delete", id])?;
        Ok(netns)
    }

    fn soak(mut self, stream: usize) -> Result<Stats, String> {
        let mut stats = Stats::default();
        for i in 0..self.n {
            let id = format!("{}s{stream}-{i}", self.prefix);
            let t = Instant::now();
            if i % 2 == 0 {
                self.run_true(&id).map_err(|e| format!("{id}: {e}"))?;
                stats.run_ms.push(t.elapsed().as_secs_f64() * 1e3);
            } else {
                let ns = self.cycle(&id).map_err(|e| format!("{id}: {e}"))?;
                stats.cycle_ms.push(t.elapsed().as_secs_f64() * 1e3);
                stats.netns.extend(ns);
            }
            if (i + 1) % 500 == 0 {
                eprintln!("soak: stream {stream}: {} containers", i + 1);
            }
        }
        Ok(stats)
    }
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn percentile(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// Container ids (state dirs, and cgroup dirs in any hierarchy) that start with `prefix`.
fn ids_left(root: &Path, prefix: &str) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    let names = |dir: &Path| -> Vec<String> {
        fs::read_dir(dir)
            .map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
            .unwrap_or_default()
    };
    ids.extend(names(root));
    let mut hierarchies = vec![PathBuf::from("/sys/fs/cgroup")];
    hierarchies.extend(
        fs::read_dir("/sys/fs/cgroup")
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect::<Vec<_>>())
            .unwrap_or_default(),
    );
    for h in hierarchies {
        ids.extend(names(&h.join("tinyrun-test")).into_iter().filter(|n| n.starts_with(prefix)));
    }
    ids
}

/// On the way out (pass, fail or panic), hand every soak id still on the host to the harness,
/// whose `Drop` then runs `delete --force` on it and removes its cgroups.
struct Adopt<'a> {
    rt: &'a Runtime,
    prefix: String,
}

impl Drop for Adopt<'_> {
    fn drop(&mut self) {
        for id in ids_left(self.rt.root(), &self.prefix) {
            self.rt.track_id(&id);
        }
    }
}

fn mount_lines(needles: &[String]) -> Vec<String> {
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter(|l| needles.iter().any(|n| l.contains(n.as_str())))
        .map(str::to_string)
        .collect()
}

fn tinyrun_mount_count() -> usize {
    fs::read_to_string("/proc/self/mountinfo").unwrap_or_default().lines().filter(|l| l.contains("tinyrun")).count()
}

/// Holders of the recorded network namespaces: processes of this test (`ours`) in one of them,
/// and nsfs mounts of one of them below `dirs`. The kernel reuses namespace inode numbers, so a
/// process of someone else in a namespace with a recorded number is not a leak.
fn netns_held(wanted: &BTreeSet<u64>, ours: &[i32], dirs: &[String]) -> Vec<String> {
    let mut held = Vec::new();
    for pid in ours {
        if let Ok(m) = fs::metadata(format!("/proc/{pid}/ns/net")) {
            if wanted.contains(&m.ino()) {
                held.push(format!("pid {pid} ({:?}) in net:[{}]", cmdline(*pid), m.ino()));
            }
        }
    }
    for l in fs::read_to_string("/proc/self/mountinfo").unwrap_or_default().lines() {
        let nsfs = l.split(" - ").nth(1).is_some_and(|t| t.starts_with("nsfs "));
        if nsfs && dirs.iter().any(|d| l.contains(d.as_str())) {
            held.push(format!("nsfs mount: {l}"));
        }
    }
    held
}

fn named_netns_count() -> usize {
    fs::read_dir("/run/netns").map(|d| d.count()).unwrap_or(0)
}

fn nsfs_mount_count() -> usize {
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.split(" - ").nth(1).is_some_and(|t| t.starts_with("nsfs ")))
        .count()
}

#[test]
fn soak_two_streams_leave_nothing() {
    require_root!();
    let rt = Runtime::new("soak");
    let prefix = format!("ct-{}-", rt.tag());
    let _adopt = Adopt { rt: &rt, prefix: prefix.clone() };
    let total = containers_wanted().max(4);
    let bundles: Vec<_> = (0..2).map(|_| rt.bundle(&["/bin/true"])).collect();
    let shared_rootfs = tinyrun_conformance::shared_rootfs().to_string_lossy().into_owned();

    let fds_before = fd_count();
    let tinyrun_mounts_before = tinyrun_mount_count();
    let named_netns_before = named_netns_count();
    let nsfs_before = nsfs_mount_count();
    let start = Instant::now();
    let results: Vec<Result<Stats, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = bundles
            .iter()
            .enumerate()
            .map(|(k, b)| {
                let stream = Stream {
                    n: total / 2,
                    bin: rt.bin.clone(),
                    root: rt.root().to_path_buf(),
                    tag: rt.tag().to_string(),
                    prefix: prefix.clone(),
                    bundle: b.dir.clone(),
                    config: b.config(),
                    stderr: rt.work().join(format!("stream{k}.err")),
                    pidfile: rt.work().join(format!("stream{k}.pid")),
                };
                s.spawn(move || stream.soak(k))
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("stream thread panicked")).collect()
    });
    let elapsed = start.elapsed();

    let mut all = Stats::default();
    let mut errors = Vec::new();
    for r in results {
        match r {
            Ok(st) => {
                all.run_ms.extend(st.run_ms);
                all.cycle_ms.extend(st.cycle_ms);
                all.netns.extend(st.netns);
            }
            Err(e) => errors.push(e),
        }
    }
    let done = all.run_ms.len() + all.cycle_ms.len();
    let (run_med, cycle_med) = (median(&mut all.run_ms), median(&mut all.cycle_ms));
    eprintln!(
        "soak: {done} containers ({} run, {} create/start/kill/delete) in {:.1} s, 2 streams: {:.1} containers/s",
        all.run_ms.len(),
        all.cycle_ms.len(),
        elapsed.as_secs_f64(),
        done as f64 / elapsed.as_secs_f64()
    );
    eprintln!(
        "soak: run /bin/true median {run_med:.1} ms (p90 {:.1}, max {:.1}); cycle median {cycle_med:.1} ms (p90 {:.1}, max {:.1})",
        percentile(&all.run_ms, 0.9),
        percentile(&all.run_ms, 1.0),
        percentile(&all.cycle_ms, 0.9),
        percentile(&all.cycle_ms, 1.0),
    );
    assert!(errors.is_empty(), "soak failed after {done} containers: {errors:#?}");

    // Nothing left: processes first (the harness waits up to 3 s for them to go).
    let mut procs = rt.leftovers();
    let deadline = Instant::now() + Duration::from_secs(3);
    while !procs.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        procs = rt.leftovers();
    }
    let procs: Vec<String> = procs.iter().map(|p| format!("{p}: {:?}", cmdline(*p))).collect();
    assert!(procs.is_empty(), "processes left behind: {procs:?}");

    let left = ids_left(rt.root(), &prefix);
    assert!(
        left.is_empty(),
        "state or cgroup dirs left for {} ids, e.g. {:?}",
        left.len(),
        left.iter().take(5).collect::<Vec<_>>()
    );
    for b in &bundles {
        assert!(cgroup_dirs(&b.id).is_empty(), "cgroup of bundle id {} exists", b.id);
    }
    let listed = rt.run(&["list", "-q"]).expect_ok("list -q");
    assert!(listed.stdout.trim().is_empty(), "list -q after the soak:\n{listed}");

    let needles = vec![
        rt.root().to_string_lossy().into_owned(),
        rt.work().to_string_lossy().into_owned(),
        prefix.clone(),
        shared_rootfs,
    ];
    let mounts = mount_lines(&needles);
    assert!(mounts.is_empty(), "mounts left on the host: {mounts:#?}");

    let wanted: BTreeSet<u64> = all.netns.iter().copied().collect();
    let held = netns_held(&wanted, &rt.leftovers(), &needles);
    assert!(held.is_empty(), "container network namespaces still held: {held:#?}");

    let fds_after = fd_count();
    let tinyrun_mounts_after = tinyrun_mount_count();
    let named_netns_after = named_netns_count();
    let nsfs_after = nsfs_mount_count();
    eprintln!(
        "soak: caller fds {fds_before} -> {fds_after}; host mountinfo lines naming tinyrun {tinyrun_mounts_before} -> {tinyrun_mounts_after}; \
         /run/netns entries {named_netns_before} -> {named_netns_after}; nsfs mounts {nsfs_before} -> {nsfs_after}; \
         {} netns recorded ({} distinct inode numbers), none held by the test's processes or mounts",
        all.netns.len(),
        wanted.len()
    );
    assert_eq!(fds_after, fds_before, "the caller's fd count changed");
}
