//! [`Runtime`]: one runtime binary driven through its CLI with a private `--root`, the output of
//! each invocation ([`Out`]), and the cleanup guard (`Drop`). Runs in the test process.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::host::{
    all_pids, cgroup_dirs, cmdline, mounts_under, pid_alive, proc_starttime, proc_stat_fields, remove_cgroup,
};
use crate::{invocation_timeout, kv, runtime_bin, shared_rootfs, workspace_root, Bundle};

/// What one runtime invocation did.
#[derive(Debug)]
pub struct Out {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    /// File that received stdout; a detached container keeps writing to it after `create`.
    pub stdout_path: PathBuf,
    /// The argv, for messages.
    pub argv: String,
}

impl Out {
    /// The exit code, or None if the runtime itself died from a signal.
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }
    pub fn ok(&self) -> bool {
        self.status.success()
    }
    /// Probe output (`key=value` lines on stdout) as a map.
    pub fn kv(&self) -> BTreeMap<String, String> {
        kv(&self.stdout)
    }
    /// Re-read the stdout file (output a detached container wrote later).
    pub fn stdout_now(&self) -> String {
        fs::read_to_string(&self.stdout_path).unwrap_or_default()
    }
    #[track_caller]
    pub fn expect_ok(self, what: &str) -> Self {
        assert!(self.ok(), "{what}: expected success\n{self}");
        self
    }
    #[track_caller]
    pub fn expect_err(self, what: &str) -> Self {
        assert!(!self.ok(), "{what}: expected failure\n{self}");
        assert!(self.code().is_some(), "{what}: runtime died from a signal\n{self}");
        self
    }
}

impl std::fmt::Display for Out {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "$ {}\n{}\n--- stdout\n{}--- stderr\n{}---", self.argv, self.status, self.stdout, self.stderr)
    }
}

/// A runtime invocation in flight (see [`Runtime::spawn`]).
pub struct Running {
    pub child: Child,
    stdout: PathBuf,
    stderr: PathBuf,
    argv: String,
}

impl Running {
    /// Wait (bounded by `TINYRUN_TIMEOUT`) and collect the output. A hang fails the test.
    #[track_caller]
    pub fn wait(mut self) -> Out {
        let deadline = Instant::now() + invocation_timeout();
        let status = loop {
            match self.child.try_wait().expect("try_wait") {
                Some(st) => break st,
                None if Instant::now() > deadline => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    panic!("timed out after {:?}: {}", invocation_timeout(), self.argv);
                }
                None => std::thread::sleep(Duration::from_millis(10)),
            }
        };
        Out {
            status,
            stdout: fs::read_to_string(&self.stdout).unwrap_or_default(),
            stderr: fs::read_to_string(&self.stderr).unwrap_or_default(),
            stdout_path: self.stdout,
            argv: self.argv,
        }
    }
}

/// Everything a test created, undone by `Runtime`'s `Drop`.
#[derive(Default)]
struct Owned {
    ids: Vec<String>,
    pids: Vec<(i32, u64)>,
    /// Runtime invocations (process-group leaders) as (pid, start time).
    spawned: Vec<(i32, u64)>,
    mounts: Vec<PathBuf>,
    dirs: Vec<tempfile::TempDir>,
}

impl Owned {
    /// True if process group (or session) `g` is one of our runtime invocations. A pgid cannot
    /// be reused while the group has members, so it is ours unless its leader pid now belongs
    /// to a different process (different start time).
    fn is_our_group(&self, g: i32) -> bool {
        self.spawned.iter().any(|(pid, start)| *pid == g && proc_starttime(g).is_none_or(|s| s == *start))
    }
}

/// The runtime under test, with a private `--root` and a cleanup guard.
pub struct Runtime {
    pub bin: PathBuf,
    tag: String,
    root: PathBuf,
    work: PathBuf,
    seq: Cell<u32>,
    owned: RefCell<Owned>,
}

impl Runtime {
    /// A runtime handle for test `name` (short, `[a-z0-9_]`; it becomes part of container ids).
    pub fn new(name: &str) -> Runtime {
        let bin = runtime_bin();
        assert!(
            bin.exists(),
            "runtime binary {} not found: build it (cargo build -p tinyrun-cli) or set TINYRUN_BIN",
            bin.display()
        );
        let dir = tempfile::Builder::new().prefix(&format!("tinyrun-ct-{name}-")).tempdir().expect("tempdir");
        let work = dir.path().to_path_buf();
        let root = work.join("root");
        let rt = Runtime {
            bin,
            tag: format!("{name}-{}", std::process::id()),
            root,
            work,
            seq: Cell::new(0),
            owned: RefCell::new(Owned { dirs: vec![dir], ..Default::default() }),
        };
        fs::create_dir(&rt.root).expect("mkdir root");
        rt
    }

    pub fn is_runc(&self) -> bool {
        self.bin.file_name().is_some_and(|n| n == "runc")
    }

    /// The private state root passed as `--root`.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The per-test scratch directory (removed on drop).
    pub fn work(&self) -> &Path {
        &self.work
    }

    /// The tag put in the environment of every process this test causes to exist.
    pub fn tag(&self) -> &str {
        &self.tag
    }

    fn next(&self) -> u32 {
        self.seq.set(self.seq.get() + 1);
        self.seq.get()
    }

    /// A fresh container id, registered for cleanup: `ct-<name>-<pid>[-N]`.
    pub fn new_id(&self) -> String {
        let n = self.owned.borrow().ids.len();
        let id = match n {
            0 => format!("ct-{}", self.tag),
            _ => format!("ct-{}-{}", self.tag, n + 1),
        };
        self.track_id(&id);
        id
    }

    /// Register an id (e.g. one a test invents) so cleanup deletes it and its cgroup.
    pub fn track_id(&self, id: &str) {
        self.owned.borrow_mut().ids.push(id.to_string());
    }

    /// A new empty directory, removed on drop.
    pub fn tempdir(&self) -> PathBuf {
        let d = tempfile::Builder::new().prefix("d").tempdir_in(&self.work).expect("tempdir");
        let p = d.path().to_path_buf();
        self.owned.borrow_mut().dirs.push(d);
        p
    }

    /// Kill `pid` (SIGKILL) on drop, if it is still the same process. [`Runtime::state`] does
    /// this for every container pid it sees.
    pub fn track_pid(&self, pid: i32) {
        if let Some(st) = proc_starttime(pid) {
            let mut owned = self.owned.borrow_mut();
            if !owned.pids.contains(&(pid, st)) {
                owned.pids.push((pid, st));
            }
        }
    }

    /// Unmount `path` on drop (`umount2(MNT_DETACH)`).
    pub fn track_mount(&self, path: &Path) {
        self.owned.borrow_mut().mounts.push(path.to_path_buf());
    }

    /// A new network namespace kept alive by a bind mount on a file in the test's scratch dir
    /// (unmounted by the harness); its path and inode number.
    pub fn bound_netns(&self) -> (PathBuf, u64) {
        let nsfile = self.tempdir().join("netns");
        fs::write(&nsfile, "").expect("netns file");
        let st = Command::new("unshare").arg(format!("--net={}", nsfile.display())).arg("true").status();
        assert!(st.expect("unshare").success(), "unshare --net=FILE failed");
        self.track_mount(&nsfile);
        let inode = std::os::unix::fs::MetadataExt::ino(&fs::metadata(&nsfile).expect("netns file"));
        (nsfile, inode)
    }

    /// `<bin> args...` with the tag set, stdin from /dev/null; no `--root`.
    pub fn command_raw(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.args(args).env("TINYRUN_CONFORMANCE_TAG", &self.tag).stdin(Stdio::null());
        c
    }

    /// `<bin> --root R args...`.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = self.command_raw(&["--root", self.root.to_str().expect("utf-8 root")]);
        c.args(args);
        c
    }

    /// Start a command, capturing stdout/stderr into files (pipes would stay open as long as a
    /// detached container holds them).
    pub fn spawn_cmd(&self, mut cmd: Command) -> Running {
        let n = self.next();
        let stdout = self.work.join(format!("out{n}.stdout"));
        let stderr = self.work.join(format!("out{n}.stderr"));
        cmd.stdout(File::create(&stdout).expect("stdout file"));
        cmd.stderr(File::create(&stderr).expect("stderr file"));
        cmd.process_group(0);
        let argv = format!("{cmd:?}");
        let child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {argv}: {e}"));
        let pid = child.id() as i32;
        // Not yet reaped by us, so /proc/<pid> exists.
        let start = proc_starttime(pid).unwrap_or(0);
        self.owned.borrow_mut().spawned.push((pid, start));
        Running { child, stdout, stderr, argv }
    }

    /// Run `<bin> --root R args...` in the background.
    pub fn spawn(&self, args: &[&str]) -> Running {
        self.spawn_cmd(self.command(args))
    }

    /// Run a prepared command to completion.
    #[track_caller]
    pub fn output(&self, cmd: Command) -> Out {
        self.spawn_cmd(cmd).wait()
    }

    /// Run `<bin> --root R args...` to completion.
    #[track_caller]
    pub fn run(&self, args: &[&str]) -> Out {
        self.output(self.command(args))
    }

    /// Run `<bin> args...` (no `--root`) to completion.
    #[track_caller]
    pub fn run_raw(&self, args: &[&str]) -> Out {
        self.output(self.command_raw(args))
    }

    /// A bundle running `args` (see [`Bundle`]), with a fresh id.
    pub fn bundle(&self, args: &[&str]) -> Bundle {
        let id = self.new_id();
        let dir = self.tempdir().join("bundle");
        let mkbundle = workspace_root().join("bundles/mkbundle");
        let st = Command::new(&mkbundle)
            .arg(&dir)
            .arg("--rootfs")
            .arg(shared_rootfs())
            .args(["--id", &id, "--"])
            .args(args)
            .status()
            .unwrap_or_else(|e| panic!("{}: {e}", mkbundle.display()));
        assert!(st.success(), "mkbundle failed: {st}");
        let b = Bundle { dir, id };
        let tag = format!("TINYRUN_CONFORMANCE_TAG={}", self.tag);
        b.config_mut(|c| c["process"]["env"].as_array_mut().expect("process.env").push(tag.into()));
        b
    }

    /// `create --bundle DIR ID`.
    #[track_caller]
    pub fn create(&self, b: &Bundle) -> Out {
        self.run(&["create", "--bundle", b.path(), &b.id])
    }

    /// Foreground `run --bundle DIR ID`: the container's output and exit status.
    #[track_caller]
    pub fn run_bundle(&self, b: &Bundle) -> Out {
        self.run(&["run", "--bundle", b.path(), &b.id])
    }

    /// The parsed `state ID`, or None if `state` failed.
    #[track_caller]
    pub fn state(&self, id: &str) -> Option<Value> {
        let o = self.run(&["state", id]);
        if !o.ok() {
            return None;
        }
        let v: Value = match serde_json::from_str(&o.stdout) {
            Ok(v) => v,
            Err(e) => panic!("state is not JSON ({e})\n{o}"),
        };
        if let Some(pid) = v["pid"].as_i64().filter(|p| *p > 1) {
            self.track_pid(pid as i32);
        }
        Some(v)
    }

    /// `state.status`, or None if `state` failed.
    #[track_caller]
    pub fn status(&self, id: &str) -> Option<String> {
        self.state(id).map(|s| s["status"].as_str().unwrap_or("").to_string())
    }

    /// Poll `state` until the status is `want` (10 s), returning the state.
    #[track_caller]
    pub fn wait_status(&self, id: &str, want: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let st = self.state(id);
            if st.as_ref().is_some_and(|s| s["status"] == want) {
                return st.unwrap();
            }
            assert!(Instant::now() < deadline, "{id} never became {want}; last state: {st:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Live (non-zombie) processes, other than this one, that this test caused to exist: the
    /// environment carries the tag (the container process), or the process is in one of the
    /// test's container cgroups (runc's `runc init` has a scrubbed environment), or its process
    /// group or session is that of a runtime invocation (each is spawned as a group leader).
    pub fn leftovers(&self) -> Vec<i32> {
        self.leftovers_except(&[])
    }

    /// [`Runtime::leftovers`], minus processes in the cgroup of one of `others` (containers the
    /// test keeps alive on purpose).
    pub fn leftovers_except(&self, others: &[&str]) -> Vec<i32> {
        let needle = format!("TINYRUN_CONFORMANCE_TAG={}", self.tag);
        let me = std::process::id() as i32;
        let owned = self.owned.borrow();
        let cg_needles: Vec<String> = owned.ids.iter().map(|id| format!("/tinyrun-test/{id}")).collect();
        let mut found = Vec::new();
        for pid in all_pids() {
            if pid == me || !pid_alive(pid) {
                continue;
            }
            let env = fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            let tagged = env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes());
            let cgroups = fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
            let in_cgroup = cgroups.lines().any(|l| cg_needles.iter().any(|n| l.ends_with(n.as_str())));
            let fields = proc_stat_fields(pid).unwrap_or_default();
            let group = [fields.get(2), fields.get(3)]
                .into_iter()
                .flatten()
                .filter_map(|f| f.parse::<i32>().ok())
                .any(|g| owned.is_our_group(g));
            let other = cgroups.lines().any(|l| others.iter().any(|id| l.ends_with(&format!("/tinyrun-test/{id}"))));
            if (tagged || in_cgroup || group) && !other && pid_alive(pid) {
                found.push(pid);
            }
        }
        found
    }

    /// Assert that nothing of container `id` is left: no state dir under `--root`, no cgroup dir,
    /// and (after a grace period of 3 s) no process from this test, except those inside the
    /// cgroups of the test's other containers.
    #[track_caller]
    pub fn assert_nothing_left(&self, id: &str) {
        let others: Vec<String> = self.owned.borrow().ids.iter().filter(|i| *i != id).cloned().collect();
        let others: Vec<&str> = others.iter().map(String::as_str).collect();
        let deadline = Instant::now() + Duration::from_secs(3);
        let mut procs = self.leftovers_except(&others);
        while !procs.is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
            procs = self.leftovers_except(&others);
        }
        let described: Vec<String> = procs.iter().map(|p| format!("{p}: {:?}", cmdline(*p))).collect();
        assert!(described.is_empty(), "processes left behind: {described:?}");
        let state_dir = self.root.join(id);
        assert!(!state_dir.exists(), "state dir {} left behind", state_dir.display());
        let cg = cgroup_dirs(id);
        assert!(cg.is_empty(), "cgroup dirs left behind: {cg:?}");
    }
}

impl Drop for Runtime {
    /// Undo everything, panic-free: `delete --force` each id; SIGKILL what is still ours
    /// ([`Runtime::leftovers`] and tracked pids); kill what is left in the containers' cgroups
    /// and rmdir them; unmount tracked mounts and anything mounted below the scratch dir; then
    /// remove the scratch dirs.
    fn drop(&mut self) {
        let ids = self.owned.borrow().ids.clone();
        for id in &ids {
            let mut cmd = self.command(&["delete", "--force", id]);
            cmd.stdout(Stdio::null()).stderr(Stdio::null());
            if let Ok(mut child) = cmd.spawn() {
                let deadline = Instant::now() + Duration::from_secs(30);
                while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(10));
                }
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let me = std::process::id() as i32;
        for pid in self.leftovers().into_iter().filter(|p| *p > 1 && *p != me) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL);
        }
        let owned = std::mem::take(&mut *self.owned.borrow_mut());
        for (pid, start) in &owned.pids {
            if *pid > 1 && proc_starttime(*pid) == Some(*start) {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), nix::sys::signal::SIGKILL);
            }
        }
        for id in &owned.ids {
            remove_cgroup(id);
        }
        let mut mounts = owned.mounts.clone();
        mounts.extend(mounts_under(&self.work));
        for m in mounts.iter().rev() {
            if let Err(e) = nix::mount::umount2(m, nix::mount::MntFlags::MNT_DETACH) {
                if e != nix::errno::Errno::EINVAL && e != nix::errno::Errno::ENOENT {
                    eprintln!("cleanup: umount {}: {e}", m.display());
                }
            }
        }
        let left = mounts_under(&self.work);
        if left.is_empty() {
            drop(owned.dirs); // removes the scratch dirs
        } else {
            eprintln!("cleanup: NOT removing {} (still mounted: {left:?})", self.work.display());
            owned.dirs.into_iter().for_each(|d| drop(d.keep()));
        }
    }
}
