//! The `tinyrun sandbox` harness: [`Sbx`], a [`Runtime`] with a private `--root` that records
//! every sandbox id made under it (inotify on `<root>/sandbox` and `<root>/sandbox-bundles`), so
//! the cgroups under `/sys/fs/cgroup/*/tinyrun-sandbox/<id>` can be checked and cleaned without
//! touching anyone else's; plus host-side views of sandboxes and the `--json` result's checks.
//! Every sandbox of a test gets `-e TINYRUN_CONFORMANCE_TAG=<tag>`, so the harness finds any
//! process a test caused, and `Drop` removes everything, even on panic.

use std::collections::BTreeSet;
use std::fs;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{cgroup_procs_recursive, cmdline, rmdir_tree, Out, Running, Runtime};

/// The line for the closing note.
pub fn saw(name: &str, what: impl AsRef<str>) {
    eprintln!("SANDBOX {name}: {}", what.as_ref());
}

pub fn wait_for(what: &str, secs: u64, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out after {secs} s waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ------------------------------------------------------------------------------------------------
// Ids: every name created in <root>/sandbox and <root>/sandbox-bundles, seen with inotify.

pub(crate) struct IdWatch {
    fd: OwnedFd,
    dirs: Vec<PathBuf>,
    ids: BTreeSet<String>,
}

impl IdWatch {
    fn new(dirs: &[PathBuf]) -> IdWatch {
        // SAFETY: plain syscall; the returned fd is checked and then owned.
        let raw = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        assert!(raw >= 0, "inotify_init1: {}", std::io::Error::last_os_error());
        // SAFETY: raw is a fresh fd we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        for d in dirs {
            let c = std::ffi::CString::new(d.to_str().expect("utf-8 path")).expect("no NUL");
            // SAFETY: valid fd and NUL-terminated path.
            let wd =
                unsafe { libc::inotify_add_watch(fd.as_raw_fd(), c.as_ptr(), libc::IN_CREATE | libc::IN_MOVED_TO) };
            assert!(wd >= 0, "inotify_add_watch {}: {}", d.display(), std::io::Error::last_os_error());
        }
        IdWatch { fd, dirs: dirs.to_vec(), ids: BTreeSet::new() }
    }

    /// Read pending events, and list the directories too (belt and braces).
    fn poll(&mut self) {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // SAFETY: buf is valid for buf.len() bytes.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
            let mut off = 0usize;
            let hdr = std::mem::size_of::<libc::inotify_event>();
            while off + hdr <= n as usize {
                // SAFETY: the kernel wrote a whole inotify_event at off (read_unaligned copes
                // with the byte buffer's alignment).
                let ev: libc::inotify_event = unsafe { std::ptr::read_unaligned(buf[off..].as_ptr().cast()) };
                assert!(ev.mask & libc::IN_Q_OVERFLOW == 0, "inotify queue overflowed: ids may be missed");
                let name = &buf[off + hdr..off + hdr + ev.len as usize];
                let name = String::from_utf8_lossy(name.split(|b| *b == 0).next().unwrap_or(&[]));
                if !name.is_empty() && !name.starts_with('.') {
                    self.ids.insert(name.into_owned());
                }
                off += hdr + ev.len as usize;
            }
        }
        for d in &self.dirs {
            for n in names_in(d) {
                self.ids.insert(n);
            }
        }
    }
}

/// Entries of `dir` not starting with a dot (temp files of atomic writes).
pub fn names_in(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).filter(|n| !n.starts_with('.')).collect())
        .unwrap_or_default()
}

// ------------------------------------------------------------------------------------------------
// Host-side views.

/// `/sys/fs/cgroup[/<hierarchy>]/tinyrun-sandbox/<id>` that exist.
pub fn sandbox_cgroups(id: &str) -> Vec<PathBuf> {
    assert!(!id.is_empty() && !id.contains('/') && id != "." && id != "..", "bad id {id:?}");
    let base = Path::new("/sys/fs/cgroup");
    let mut roots = vec![base.to_path_buf()];
    if let Ok(d) = fs::read_dir(base) {
        roots.extend(d.filter_map(|e| e.ok()).map(|e| e.path()));
    }
    roots.into_iter().map(|r| r.join("tinyrun-sandbox").join(id)).filter(|p| p.is_dir()).collect()
}

/// Kill what is in sandbox `id`'s cgroups (never pid 1 or ourselves) and rmdir them.
pub fn remove_sandbox_cgroups(id: &str) {
    let me = std::process::id() as i32;
    for dir in sandbox_cgroups(id) {
        for _ in 0..40 {
            let procs: Vec<i32> = cgroup_procs_recursive(&dir).into_iter().filter(|p| *p > 1 && *p != me).collect();
            if procs.is_empty() {
                break;
            }
            for p in procs {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), nix::sys::signal::SIGKILL);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        rmdir_tree(&dir);
    }
}

/// The image layer directories anywhere in `root`'s image cache (each named by a 64-digit hex
/// digest), sorted: one per copy of a layer on disk, whatever the cache's layout.
pub fn image_layer_dirs(root: &Path) -> Vec<String> {
    fn walk(d: &Path, depth: u32, out: &mut Vec<String>) {
        for e in fs::read_dir(d).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit()) {
                out.push(name);
            } else if depth < 3 && !name.starts_with('.') {
                walk(&e.path(), depth + 1, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(&root.join("sandbox-images"), 0, &mut out);
    out.sort();
    out
}

/// A busybox root filesystem at `dir` (`bundles/mkrootfs`).
pub fn mkrootfs(dir: &Path) {
    let st = std::process::Command::new(crate::workspace_root().join("bundles/mkrootfs"))
        .arg(dir)
        .stdout(Stdio::null())
        .status();
    assert!(st.expect("mkrootfs").success(), "mkrootfs {} failed", dir.display());
}

/// `bundles/mkimage ROOTFS NAME OUT ARGS...`.
pub fn mkimage(rootfs: &Path, name: &str, out: &Path, args: &[&str]) {
    let st = std::process::Command::new(crate::workspace_root().join("bundles/mkimage"))
        .arg(rootfs)
        .arg(name)
        .arg(out)
        .args(args)
        .status();
    assert!(st.expect("mkimage").success(), "mkimage {name} {args:?} failed");
}

pub fn mountinfo_lines(needle: &str) -> Vec<String> {
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(needle))
        .map(str::to_string)
        .collect()
}

/// The key: value lines of /proc/PID/status we care about.
pub fn status_field(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|l| l.strip_prefix(&format!("{key}:")).map(|v| v.trim().to_string()))
}

// ------------------------------------------------------------------------------------------------
// The sandbox handle: a Runtime (private --root, cleanup) plus the sandbox ids it saw.

pub struct Sbx {
    /// The runtime under test, with this test's private `--root`.
    pub rt: Runtime,
    /// The test's name, for the `SANDBOX <name>:` lines.
    pub name: &'static str,
    watch: std::cell::RefCell<IdWatch>,
    tag_env: String,
}

impl Sbx {
    /// This test's tinyrun processes that are still at work: sandbox commands, and the detached
    /// child that removes a used pool box and refills its pool (which shows itself as
    /// `tinyrun-pool`, its caller's command line concealed). The root's reaper, which lives as long
    /// as a box has a lifetime, is not counted.
    pub fn busy(&self) -> Vec<i32> {
        let bin = self.rt.bin.to_string_lossy().into_owned();
        let comm = |p: i32| fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default().trim().to_string();
        self.rt
            .leftovers()
            .into_iter()
            .filter(|&p| {
                let name = comm(p);
                name != "tinyrun-reaper" && (name == "tinyrun-pool" || cmdline(p).first() == Some(&bin))
            })
            .collect()
    }

    /// Waits (`secs` at most) until [`Sbx::busy`] is empty: a pool's detached refill is done.
    pub fn wait_for_refills(&self, secs: u64) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while !self.busy().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn new(name: &'static str) -> Sbx {
        Sbx::with_root_mode(name, true)
    }

    /// `open_root`: make the scratch dir and `--root` 0755. BUG (reported, tested by
    /// `root_in_private_dir`): a sandbox's root user is an unprivileged host uid, which must be
    /// able to traverse every directory above `<root>/sandbox-bundles/<id>/rootfs`; under a 0700 temp
    /// dir the box fails to start with EACCES. The other tests open the dir up so they can run.
    pub fn with_root_mode(name: &'static str, open_root: bool) -> Sbx {
        let rt = Runtime::new(name);
        let mode = if open_root { 0o755 } else { 0o700 };
        for d in [rt.work(), rt.root()] {
            fs::set_permissions(d, fs::Permissions::from_mode(mode)).expect("chmod");
        }
        let state = rt.root().join("sandbox");
        let bundles = rt.root().join("sandbox-bundles");
        fs::create_dir(&state).expect("mkdir <root>/sandbox");
        fs::set_permissions(&state, fs::Permissions::from_mode(0o700)).expect("chmod");
        fs::create_dir(&bundles).expect("mkdir <root>/sandbox-bundles");
        fs::set_permissions(&bundles, fs::Permissions::from_mode(0o711)).expect("chmod");
        let watch = IdWatch::new(&[state, bundles]);
        let tag_env = format!("TINYRUN_CONFORMANCE_TAG={}", rt.tag());
        Sbx { rt, name, watch: std::cell::RefCell::new(watch), tag_env }
    }

    pub fn root_str(&self) -> &str {
        self.rt.root().to_str().expect("utf-8 root")
    }

    /// `sandbox ARGS...` as given.
    pub fn raw(&self, args: &[&str]) -> Out {
        let mut v = vec!["sandbox"];
        v.extend_from_slice(args);
        let o = self.rt.run(&v);
        self.watch.borrow_mut().poll();
        o
    }

    /// Options every sandbox of a test gets: the tag, so the harness finds its processes.
    pub fn common(&self) -> Vec<&str> {
        vec!["-e", self.tag_env.as_str()]
    }

    pub fn run_argv<'a>(&'a self, opts: &[&'a str], cmd: &[&'a str]) -> Vec<&'a str> {
        let mut v = vec!["sandbox", "run"];
        v.extend(self.common());
        v.extend_from_slice(opts);
        v.push("--");
        v.extend_from_slice(cmd);
        v
    }

    /// `sandbox run [common] OPTS -- CMD...`.
    pub fn run(&self, opts: &[&str], cmd: &[&str]) -> Out {
        let o = self.rt.run(&self.run_argv(opts, cmd));
        self.watch.borrow_mut().poll();
        o
    }

    /// The same in the background.
    pub fn spawn_run(&self, opts: &[&str], cmd: &[&str]) -> Running {
        self.rt.spawn(&self.run_argv(opts, cmd))
    }

    /// `sandbox run --json ...`: the parsed result (shape checked) and the invocation.
    #[track_caller]
    pub fn run_json(&self, opts: &[&str], cmd: &[&str]) -> (Value, Out) {
        let mut o2 = vec!["--json"];
        o2.extend_from_slice(opts);
        let o = self.run(&o2, cmd);
        assert!(o.ok(), "sandbox run --json failed\n{o}");
        let v = parse_result(&o);
        (v, o)
    }

    /// `sandbox launch [common] OPTS`: the id. Unless OPTS set `--lifetime` or `--timeout`, the
    /// box lives 10 minutes (a tinyrun from before sessions gave it the preset's 10 s, which a
    /// slow host, a VM under TCG, can spend before the test is done with the box).
    #[track_caller]
    pub fn launch(&self, opts: &[&str]) -> String {
        let mut v = vec!["launch"];
        v.extend(self.common());
        if !opts.iter().any(|o| matches!(*o, "--lifetime" | "--timeout")) {
            v.extend(["--lifetime", "10m"]);
        }
        v.extend_from_slice(opts);
        let o = self.raw(&v).expect_ok("sandbox launch");
        let id = o.stdout.trim().to_string();
        assert!(!id.is_empty() && !id.contains(char::is_whitespace), "launch printed {id:?}\n{o}");
        id
    }

    /// `sandbox list --format json`: (id, status, pid) of each.
    #[track_caller]
    pub fn list(&self) -> Vec<(String, String, i64)> {
        let o = self.raw(&["list", "--format", "json"]).expect_ok("sandbox list --format json");
        let v: Value = serde_json::from_str(o.stdout.trim())
            .unwrap_or_else(|e| panic!("list --format json is not JSON ({e})\n{o}"));
        v.as_array()
            .map(|a| {
                a.iter()
                    .map(|s| {
                        (
                            s["id"].as_str().unwrap_or("").to_string(),
                            s["status"].as_str().unwrap_or("").to_string(),
                            s["pid"].as_i64().unwrap_or(0),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn ids(&self) -> BTreeSet<String> {
        let mut w = self.watch.borrow_mut();
        w.poll();
        w.ids.clone()
    }

    /// Everything of this test's sandboxes still there, described.
    pub fn leftovers(&self) -> Vec<String> {
        let mut left = Vec::new();
        let root = self.rt.root();
        for n in names_in(&root.join("sandbox")) {
            left.push(format!("state dir {}/sandbox/{n}", root.display()));
        }
        for n in names_in(&root.join("sandbox-bundles")) {
            left.push(format!("bundle dir {}/sandbox-bundles/{n}", root.display()));
        }
        for n in names_in(&root.join("sandbox-ids")) {
            left.push(format!("host id range {n} still recorded in {}/sandbox-ids", root.display()));
        }
        for id in self.ids() {
            for d in sandbox_cgroups(&id) {
                let procs = cgroup_procs_recursive(&d);
                left.push(format!("cgroup {} (procs {procs:?})", d.display()));
            }
        }
        for p in self.rt.leftovers() {
            left.push(format!("process {p} {:?}", cmdline(p)));
        }
        for l in mountinfo_lines(self.root_str()) {
            left.push(format!("mount: {l}"));
        }
        left
    }

    /// Wait (3 s) for nothing to be left, then fail describing what is.
    #[track_caller]
    pub fn assert_clean(&self, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(3);
        let mut left = self.leftovers();
        while !left.is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
            left = self.leftovers();
        }
        if !left.is_empty() {
            saw(self.name, format!("LEFT BEHIND after {what}: {left:?}"));
        }
        assert!(left.is_empty(), "{what}: left behind: {left:#?}");
    }

    /// A bounded, quiet invocation for cleanup (never panics).
    pub fn quiet(&self, args: &[&str]) {
        let mut c = self.rt.command(args);
        c.stdout(Stdio::null()).stderr(Stdio::null());
        if let Ok(mut child) = c.spawn() {
            let deadline = Instant::now() + Duration::from_secs(30);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Sbx {
    /// Terminate every sandbox of ours, kill and remove whatever is left in their cgroups; the
    /// Runtime's own Drop then kills tagged processes, unmounts and removes the scratch dir.
    fn drop(&mut self) {
        let state = self.rt.root().join("sandbox");
        // Pools first: a drain stops their refills (the reaper's too), which terminating their boxes
        // would only start. (`pool drain` with neither a key nor --all is a tinyrun of before keys.)
        self.quiet(&["sandbox", "pool", "drain", "--all"]);
        self.quiet(&["sandbox", "pool", "drain"]);
        for id in names_in(&state) {
            self.quiet(&["sandbox", "terminate", &id]);
        }
        // A pool refill may have been starting one more; give it a moment, then again.
        std::thread::sleep(Duration::from_millis(100));
        for id in names_in(&state) {
            self.quiet(&["sandbox", "terminate", &id]);
        }
        let ids = {
            let mut w = self.watch.borrow_mut();
            w.poll();
            w.ids.clone()
        };
        for id in &ids {
            remove_sandbox_cgroups(id);
        }
    }
}

// ------------------------------------------------------------------------------------------------
// The --json result.

#[track_caller]
pub fn parse_result(o: &Out) -> Value {
    let text = o.stdout.trim();
    assert_eq!(text.lines().count(), 1, "--json must print one JSON object on one line\n{o}");
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("--json output is not JSON ({e})\n{o}"));
    check_shape(&v, o);
    v
}

/// Every field present with the right type.
#[track_caller]
pub fn check_shape(v: &Value, o: &Out) {
    let obj = v.as_object().unwrap_or_else(|| panic!("--json: not an object\n{o}"));
    let ok = |k: &str, good: bool| assert!(good, "--json field {k:?} missing or mistyped: {v}\n{o}");
    ok("exit_code", v["exit_code"].is_null() || v["exit_code"].is_i64());
    ok("exit_code", obj.contains_key("exit_code"));
    ok("signal", obj.contains_key("signal") && (v["signal"].is_null() || v["signal"].is_string()));
    ok("timed_out", v["timed_out"].is_boolean());
    ok("oom_killed", v["oom_killed"].is_boolean());
    for k in ["duration_ms", "cpu_ms", "peak_memory_bytes"] {
        ok(k, v[k].is_u64());
    }
    ok("schema_version", v["schema_version"].is_u64());
    ok("error", v["error"].is_null());
    for k in ["stdout", "stderr"] {
        ok(k, v[k]["text"].is_string() && v[k]["truncated"].is_boolean());
        ok(k, v[k]["encoding"] == "utf-8" || v[k]["encoding"] == "base64");
    }
    assert!(
        v["exit_code"].is_null() != v["signal"].is_null(),
        "--json: exactly one of exit_code and signal must be set: {v}\n{o}"
    );
}

pub fn short(v: &Value) -> String {
    format!(
        "exit_code={} signal={} timed_out={} oom_killed={} duration_ms={} cpu_ms={} peak_memory_bytes={}",
        v["exit_code"],
        v["signal"],
        v["timed_out"],
        v["oom_killed"],
        v["duration_ms"],
        v["cpu_ms"],
        v["peak_memory_bytes"]
    )
}

pub fn text(v: &Value, stream: &str) -> String {
    v[stream]["text"].as_str().unwrap_or("").to_string()
}
