//! Harness for `cri.rs`: a private containerd with its CRI plugin, driven over its gRPC socket
//! the way kubelet drives it, with the runtime under test as a runtime handler.
//!
//! [`Cri::start`] makes, per test, all under `/tmp/tinyrun-cri-<pid>-<n>`: a containerd
//! config (handlers `tinyrun` = the binary under test and `runc` = `/usr/sbin/runc`, each with
//! a private `Root`, cgroupfs driver), a CNI network of the test's own ([`net`]), the daemon,
//! and the two images ([`images`]). Pods get `cgroup_parent` `/tinyrun-test/cri-<pid>-<n>`;
//! with `TINYRUN_CRI_SYSTEMD=1` (a host run by systemd on cgroup v2) both handlers use the
//! systemd cgroup driver instead, and pods get the slice `tinyrun_cri_<pid>_<n>.slice`.
//! `Drop` removes everything, even when the test panicked: the pods through the CRI (as kubelet
//! would), then the daemon by its pid, then whatever is still there ([`cleanup::sweep`]: shims
//! naming the work dir, processes in the test's cgroups, the cgroups, mounts under the work
//! dir, the network, the work dir), then host paths this process created. The first test of a
//! process also sweeps after earlier runs that were killed ([`cleanup::reap_stale`]).
#![allow(dead_code)]

mod cleanup;
mod client;
mod daemon;
mod images;
pub mod net;

use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Once, OnceLock};
use std::time::{Duration, Instant};

pub use client::Client;
use daemon::{Layout, RuntimeHandler};
pub use images::{BUSYBOX, PAUSE};
pub use k8s_cri::v1 as api;
use net::Net;
use serde_json::Value;
use tinyrun_conformance::{cgroup_dirs, mounts_under, runtime_bin};

/// Host paths containerd and libcni create outside the configured dirs. Removed at the end,
/// if empty, when they did not exist before this process's first test.
const HOST_PATHS: [&str; 4] = ["/var/lib/cni/results", "/var/lib/cni", "/run/containerd/s", "/run/containerd"];
const RUNC: &str = "/usr/sbin/runc";
/// Tests of this process whose containerd may be running (see `Cri::new`).
static LIVE: std::sync::Mutex<usize> = std::sync::Mutex::new(0);

/// What the host lacks for these tests (conformance/install-deps installs all of it), if
/// anything.
pub fn missing() -> Option<String> {
    let on_path =
        |t: &str| std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()).any(|d| d.join(t).exists());
    let mut m: Vec<String> = ["containerd", "ctr", "containerd-shim-runc-v2", "ip", "gcc"]
        .into_iter()
        .filter(|t| !on_path(t))
        .map(str::to_string)
        .collect();
    m.extend(
        net::PLUGINS
            .iter()
            .map(|p| Path::new(net::PLUGIN_DIR).join(p))
            .filter(|p| !p.exists())
            .map(|p| p.display().to_string()),
    );
    if !Path::new(RUNC).exists() {
        m.push(RUNC.to_string());
    }
    (!m.is_empty()).then(|| format!("no {} (conformance/install-deps installs them)", m.join(", ")))
}

/// A running pod sandbox and the config it was made with (CreateContainer needs it again).
pub struct Pod {
    pub id: String,
    pub config: api::PodSandboxConfig,
}

/// One line of a CRI container log file: `<RFC 3339 time> <stream> <P|F> <text>`.
#[derive(Debug, Clone, PartialEq)]
pub struct LogLine {
    pub time: String,
    pub stream: String,
    pub tag: String,
    pub text: String,
}

pub struct Cri {
    /// The runtime handler the test's pods ask for: `tinyrun`, `runc` or `guarded`.
    pub handler: &'static str,
    /// `cri-<pid>-<n>`: the cgroup parent's name under /tinyrun-test and the network's name.
    pub tag: String,
    pub work: PathBuf,
    /// The handler's `Root` (its state dirs are under `<root>/k8s.io`).
    pub handler_root: PathBuf,
    pub net: Net,
    layout: Layout,
    daemon: Option<Child>,
    client: Option<Client>,
    /// The guarded handler's refusal agent (`tinyrun sandbox guard-agent`), for a guarded test.
    agent: Option<Child>,
}

impl Cri {
    /// A fresh containerd for one test, with pods of handler `handler` ("tinyrun", "runc" or
    /// "guarded").
    pub fn start(handler: &'static str) -> Cri {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        static REAPED: Once = Once::new();
        // Counted before anything is made, under the lock the last one's teardown takes to
        // remove the shared host paths: one test's teardown never removes them while another
        // test's containerd is starting or running.
        *LIVE.lock().unwrap_or_else(std::sync::PoisonError::into_inner) += 1;
        REAPED.call_once(|| {
            if cleanup::reap_stale() {
                // A killed run may have made them; whoever needs them again makes them again.
                HOST_PATHS.iter().for_each(|p| drop(fs::remove_dir(p)));
            }
        });
        host_paths_before();
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let tag = format!("cri-{}-{n}", std::process::id());
        let work = PathBuf::from(format!("/tmp/tinyrun-{tag}"));
        let mut cri = Cri {
            handler,
            handler_root: work.join(format!("{handler}-root")),
            net: Net::new(&tag, std::process::id(), n, &work),
            layout: Layout::new(&work),
            tag,
            work,
            daemon: None,
            client: None,
            agent: None,
        };
        cri.boot(); // a panic here still runs Drop
        cri
    }

    fn boot(&mut self) {
        let archives = images::archives();
        if fs::symlink_metadata(&self.work).is_ok() {
            // An earlier process with the same pid, killed before its teardown.
            cleanup::sweep(&self.tag, &self.work, &self.net);
        }
        // create_dir, not create_dir_all: never reuse what someone else put in /tmp.
        fs::DirBuilder::new().mode(0o700).create(&self.work).expect("mkdir work dir");
        fs::create_dir(self.work.join("logs")).expect("mkdir logs");
        self.net.write(&self.layout.cni_bin, &self.layout.cni_conf);
        let handlers = [
            RuntimeHandler { name: "tinyrun", binary: runtime_bin(), root: self.work.join("tinyrun-root") },
            RuntimeHandler { name: "runc", binary: RUNC.into(), root: self.work.join("runc-root") },
            RuntimeHandler { name: "guarded", binary: self.guarded_binary(), root: self.work.join("guarded-root") },
        ];
        assert!(handlers[0].binary.exists(), "{} not built (cargo build -p tinyrun-cli)", handlers[0].binary.display());
        if self.handler == "guarded" {
            self.start_agent();
        }
        self.write_policy();
        let config = self.work.join("config.toml");
        fs::write(&config, daemon::config(&self.layout, &handlers, PAUSE, systemd_driver()))
            .expect("write config.toml");
        self.daemon = Some(daemon::start(&self.layout, &config));
        self.wait_ready();
        daemon::import(&self.layout, &archives.pause);
        daemon::import(&self.layout, &archives.busybox);
    }

    /// Until the socket answers and the CRI reports RuntimeReady and NetworkReady (it loads
    /// the CNI config asynchronously).
    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut last = String::from("no socket yet");
        while Instant::now() < deadline {
            if let Some(Ok(Some(st))) = self.daemon.as_mut().map(Child::try_wait) {
                panic!("containerd exited ({st}):\n{}", daemon::log_tail(&self.layout, 20));
            }
            if self.client.is_none() && self.layout.sock.exists() {
                match Client::connect(&self.layout.sock) {
                    Ok(c) => self.client = Some(c),
                    Err(e) => last = format!("connect: {e}"),
                }
            }
            if let Some(c) = &self.client {
                match c.status() {
                    Ok(s) => {
                        let conds = s.status.map(|s| s.conditions).unwrap_or_default();
                        if conds.len() >= 2 && conds.iter().all(|c| c.status) {
                            return;
                        }
                        last = format!("{conds:?}");
                    }
                    Err(e) => last = e.message().to_string(),
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("containerd's CRI not ready within 30s: {last}\n{}", daemon::log_tail(&self.layout, 20));
    }

    /// The guarded class: the binary under test by the name that selects
    /// it, a link in the work dir. The work dir is made searchable (not
    /// readable) by others: a guarded pod's ids are unprivileged host ids,
    /// which must walk to its root filesystem and volumes.
    fn guarded_binary(&self) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let link = self.work.join("bin/tinyrun-guarded");
        fs::create_dir_all(self.work.join("bin")).expect("mkdir bin");
        std::os::unix::fs::symlink(runtime_bin(), &link).expect("link tinyrun-guarded");
        fs::set_permissions(&self.work, fs::Permissions::from_mode(0o711)).expect("chmod work dir");
        link
    }

    /// The guarded handler's policy, in its Root: containerd's own dirs
    /// and the test's pod volumes ([`Cri::volume_dir`]) may be bound, and
    /// the pods' subnet reached; for a guarded test, refused calls go to its agent.
    fn write_policy(&self) {
        let root = self.work.join("guarded-root");
        fs::create_dir(&root).expect("mkdir guarded root");
        let mut policy = serde_json::json!({
            "hostPaths": [self.layout.root, self.layout.state, self.work.join("pods")],
            "allow": [self.net.cidr],
        });
        if self.agent.is_some() {
            policy["refusalAgent"] = self.agent_socket().display().to_string().into();
        }
        fs::write(root.join("guard.json"), policy.to_string()).expect("write guard.json");
    }

    fn agent_socket(&self) -> PathBuf {
        self.work.join("agent").join("agent.sock")
    }

    /// Where the refusal agent writes its reports: `<container id>.json`.
    pub fn reports_dir(&self) -> PathBuf {
        self.work.join("reports")
    }

    /// The node's refusal agent, as an operator runs it, until its socket is there.
    fn start_agent(&mut self) {
        let sock = self.agent_socket();
        fs::DirBuilder::new().mode(0o700).create(sock.parent().expect("agent dir")).expect("mkdir agent dir");
        let child = std::process::Command::new(runtime_bin())
            .args(["sandbox", "guard-agent", "--socket"])
            .arg(&sock)
            .arg("--reports")
            .arg(self.reports_dir())
            .stdout(std::process::Stdio::null())
            .stderr(fs::File::create(self.work.join("logs").join("agent.log")).expect("agent log"))
            .spawn()
            .expect("start the refusal agent");
        self.agent = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !sock.exists() {
            assert!(Instant::now() < deadline, "the refusal agent made no socket at {}", sock.display());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the refusal agent (as a crash would); true if it was running.
    pub fn kill_agent(&mut self) -> bool {
        let Some(mut a) = self.agent.take() else { return false };
        let _ = a.kill();
        let _ = a.wait();
        true
    }

    /// A fresh directory for a pod's volume, as kubelet keeps them under
    /// its pods dir (which the guarded policy allows), mode `mode`.
    pub fn volume_dir(&self, name: &str, mode: u32) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let dir = self.work.join("pods").join(name);
        fs::create_dir_all(&dir).expect("mkdir volume");
        fs::set_permissions(self.work.join("pods"), fs::Permissions::from_mode(0o711)).expect("chmod pods");
        fs::set_permissions(&dir, fs::Permissions::from_mode(mode)).expect("chmod volume");
        dir
    }

    pub fn client(&self) -> &Client {
        self.client.as_ref().expect("containerd is running")
    }

    /// Unwrap a CRI answer; an error fails the test with the status and containerd's log tail
    /// (where the runtime's own error message ends up).
    #[track_caller]
    pub fn ok<T>(&self, what: &str, r: Result<T, tonic::Status>) -> T {
        r.unwrap_or_else(|e| {
            panic!(
                "{what} (handler {}): {:?}: {}\n--- containerd log, last lines:\n{}",
                self.handler,
                e.code(),
                e.message(),
                daemon::log_tail(&self.layout, 12)
            )
        })
    }

    /// Every pod's cgroup_parent: `/tinyrun-test/<tag>`, or with the systemd driver a slice
    /// of the test's own, below which containerd asks for `cri-containerd-<id>.scope`s.
    pub fn cgroup_parent(&self) -> String {
        match systemd_driver() {
            true => slice_name(&self.tag),
            false => format!("/tinyrun-test/{}", self.tag),
        }
    }

    /// A pod config as kubelet writes one: own network namespace (NamespaceMode POD), pid
    /// namespace per container unless `share_pid` (shareProcessNamespace), cgroupfs parent.
    pub fn pod_config(&self, name: &str, share_pid: bool) -> api::PodSandboxConfig {
        let log_dir = self.work.join("logs").join(name);
        fs::create_dir_all(&log_dir).expect("mkdir pod log dir");
        let pid = if share_pid { api::NamespaceMode::Pod } else { api::NamespaceMode::Container };
        api::PodSandboxConfig {
            metadata: Some(api::PodSandboxMetadata {
                name: name.into(),
                uid: format!("{}-{name}", self.tag),
                namespace: "tinyrun-test".into(),
                attempt: 0,
            }),
            hostname: name.into(),
            log_directory: log_dir.display().to_string(),
            linux: Some(api::LinuxPodSandboxConfig {
                cgroup_parent: self.cgroup_parent(),
                security_context: Some(api::LinuxSandboxSecurityContext {
                    namespace_options: Some(api::NamespaceOption {
                        network: api::NamespaceMode::Pod as i32,
                        pid: pid as i32,
                        ipc: api::NamespaceMode::Pod as i32,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[track_caller]
    pub fn run_pod(&self, name: &str, share_pid: bool) -> Pod {
        let config = self.pod_config(name, share_pid);
        let id = self.ok("RunPodSandbox", self.client().run_pod(config.clone(), self.handler));
        // The handler's runtime made it: its state is in that handler's Root.
        let state = self.handler_root.join("k8s.io").join(&id);
        assert!(state.is_dir(), "no {} after RunPodSandbox with handler {}", state.display(), self.handler);
        Pod { id, config }
    }

    /// A busybox container running `args`, logging to `<name>.log` in the pod's log dir.
    pub fn container_config(name: &str, args: &[&str]) -> api::ContainerConfig {
        api::ContainerConfig {
            metadata: Some(api::ContainerMetadata { name: name.into(), attempt: 0 }),
            image: Some(api::ImageSpec { image: BUSYBOX.into(), ..Default::default() }),
            command: args.iter().map(|s| s.to_string()).collect(),
            log_path: format!("{name}.log"),
            linux: Some(api::LinuxContainerConfig::default()),
            ..Default::default()
        }
    }

    /// CreateContainer + StartContainer; the container id. Like kubelet, the container asks
    /// for the pod's namespace modes (the CRI takes them per container).
    #[track_caller]
    pub fn run_with(&self, pod: &Pod, mut config: api::ContainerConfig) -> String {
        let pod_ns = pod.config.linux.as_ref().and_then(|l| l.security_context.as_ref()?.namespace_options.clone());
        let sc =
            config.linux.get_or_insert_with(Default::default).security_context.get_or_insert_with(Default::default);
        sc.namespace_options = sc.namespace_options.take().or(pod_ns);
        let id = self.ok("CreateContainer", self.client().create(&pod.id, config, &pod.config));
        self.ok("StartContainer", self.client().start(&id));
        id
    }

    #[track_caller]
    pub fn run(&self, pod: &Pod, name: &str, args: &[&str]) -> String {
        self.run_with(pod, Self::container_config(name, args))
    }

    #[track_caller]
    pub fn status(&self, id: &str) -> api::ContainerStatus {
        let r = self.ok("ContainerStatus", self.client().container_status(id));
        r.status.expect("ContainerStatus without a status")
    }

    /// The verbose `info` of ContainerStatus (or of PodSandboxStatus with `pod`): pid,
    /// runtimeSpec, ...
    #[track_caller]
    pub fn info(&self, id: &str, pod: bool) -> Value {
        let info = if pod {
            self.ok("PodSandboxStatus", self.client().pod_status(id)).info
        } else {
            self.ok("ContainerStatus", self.client().container_status(id)).info
        };
        serde_json::from_str(info.get("info").map(String::as_str).unwrap_or("{}")).expect("verbose info is JSON")
    }

    /// The host pid of a container's (or with `pod`, the sandbox's) init.
    #[track_caller]
    pub fn pid_of(&self, id: &str, pod: bool) -> i32 {
        let pid = self.info(id, pod)["pid"].as_i64().unwrap_or(0);
        assert!(pid > 0, "no pid in the verbose status of {id}");
        i32::try_from(pid).expect("pid fits i32")
    }

    #[track_caller]
    pub fn wait_exited(&self, id: &str, secs: u64) -> api::ContainerStatus {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let st = self.status(id);
            if st.state == api::ContainerState::ContainerExited as i32 {
                return st;
            }
            assert!(Instant::now() < deadline, "container {id} not exited after {secs}s: {st:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// ExecSync with a 30 s timeout; the call itself must succeed.
    #[track_caller]
    pub fn exec(&self, id: &str, cmd: &[&str]) -> api::ExecSyncResponse {
        self.ok(&format!("ExecSync {cmd:?}"), self.client().exec_sync(id, cmd, 30))
    }

    /// ExecSync that must exit 0; its stdout.
    #[track_caller]
    pub fn exec_ok(&self, id: &str, cmd: &[&str]) -> String {
        let r = self.exec(id, cmd);
        let (out, err) = (String::from_utf8_lossy(&r.stdout), String::from_utf8_lossy(&r.stderr));
        assert_eq!(r.exit_code, 0, "ExecSync {cmd:?} in {id}: exit {}\nstdout: {out}\nstderr: {err}", r.exit_code);
        out.into_owned()
    }

    /// The container's log file, parsed.
    #[track_caller]
    pub fn log(&self, id: &str) -> Vec<LogLine> {
        let path = self.status(id).log_path;
        let text = fs::read_to_string(&path).unwrap_or_default();
        text.lines()
            .map(|l| {
                let mut f = l.splitn(4, ' ');
                let mut next = || f.next().unwrap_or_default().to_string();
                LogLine { time: next(), stream: next(), tag: next(), text: next() }
            })
            .collect()
    }

    /// Wait until a log line's text is `want`; the whole log.
    #[track_caller]
    pub fn wait_log(&self, id: &str, want: &str, secs: u64) -> Vec<LogLine> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let log = self.log(id);
            if log.iter().any(|l| l.text == want) {
                return log;
            }
            assert!(Instant::now() < deadline, "no log line {want:?} from {id} after {secs}s: {log:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Entries in the handler's state directory for containerd's k8s.io namespace.
    pub fn runtime_state_dirs(&self) -> Vec<String> {
        let d = fs::read_dir(self.handler_root.join("k8s.io"));
        d.map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect()).unwrap_or_default()
    }

    /// Cgroup directories below the pods' parent, in any hierarchy.
    pub fn cgroups_under_parent(&self) -> Vec<PathBuf> {
        let subdirs = |d: PathBuf| -> Vec<PathBuf> {
            let rd = fs::read_dir(d).map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.is_dir()));
            rd.map(Iterator::collect).unwrap_or_default()
        };
        parent_dirs(&self.tag).into_iter().flat_map(subdirs).collect()
    }

    /// With the systemd driver, `pid` (of container `id`) is in the scope containerd asks for,
    /// `cri-containerd-<id>.scope`, directly below the pods' slice; nothing to check otherwise.
    #[track_caller]
    pub fn assert_own_cgroup(&self, pid: i32, id: &str) {
        if !systemd_driver() {
            return;
        }
        let own = fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        let want = format!("0::/{}/cri-containerd-{id}.scope", slice_name(&self.tag));
        assert_eq!(own.trim(), want, "container {id} (pid {pid}) not in its scope");
    }

    /// Mount points under the work dir (rootfs overlays, the sandbox's /dev/shm, the netns).
    pub fn mounts(&self) -> Vec<PathBuf> {
        mounts_under(&self.work)
    }

    /// Shims and anything else whose command line names the work dir.
    pub fn own_processes(&self) -> Vec<i32> {
        cleanup::processes_naming(&self.work)
    }
}

/// `TINYRUN_CRI_SYSTEMD=1`: containerd's systemd cgroup driver for both handlers.
pub fn systemd_driver() -> bool {
    std::env::var_os("TINYRUN_CRI_SYSTEMD").is_some_and(|v| v == "1")
}

/// The pods' slice under the systemd driver. No `-` in it: systemd reads each `-` of a slice
/// name as one more level of parent slices.
pub fn slice_name(tag: &str) -> String {
    format!("tinyrun_{}.slice", tag.replace('-', "_"))
}

/// The cgroup directories of the pods' parent that exist: `/tinyrun-test/<tag>` in each
/// hierarchy, and the slice's directory on the unified hierarchy (top-level slices sit at the
/// root).
pub fn parent_dirs(tag: &str) -> Vec<PathBuf> {
    let mut dirs = cgroup_dirs(tag);
    let slice = Path::new("/sys/fs/cgroup").join(slice_name(tag));
    if cgroup_v2() && slice.is_dir() {
        dirs.push(slice);
    }
    dirs
}

/// True on a pure cgroup v2 host (the VM of `run-v2-tests`); false on v1 or hybrid.
pub fn cgroup_v2() -> bool {
    Path::new("/sys/fs/cgroup/cgroup.controllers").exists()
}

/// The value of a limit file of `pid`'s cgroup, on a v1 (`v1ctrl`/`v1file`) or a pure v2 host.
pub fn cgroup_file(pid: i32, v1ctrl: &str, v1file: &str, v2file: &str) -> String {
    let own = fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    let v2 = cgroup_v2();
    let path = own.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, ctrls, path) = (f.next()?, f.next()?, f.next()?);
        match v2 {
            true => Some(format!("/sys/fs/cgroup{path}/{v2file}")),
            false => ctrls.split(',').any(|c| c == v1ctrl).then(|| format!("/sys/fs/cgroup/{v1ctrl}{path}/{v1file}")),
        }
    });
    let path = path.unwrap_or_else(|| panic!("pid {pid} has no {v1ctrl} cgroup: {own}"));
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}")).trim().to_string()
}

fn host_paths_before() -> &'static Vec<(&'static str, bool)> {
    static BEFORE: OnceLock<Vec<(&'static str, bool)>> = OnceLock::new();
    BEFORE.get_or_init(|| HOST_PATHS.iter().map(|p| (*p, Path::new(p).exists())).collect())
}

impl Drop for Cri {
    fn drop(&mut self) {
        let mut notes = Vec::new();
        if let Some(c) = &self.client {
            remove_pods(c, &mut notes);
        }
        if let Some(d) = self.daemon.as_mut() {
            daemon::stop(d);
        }
        self.kill_agent();
        self.client = None;
        notes.extend(cleanup::sweep(&self.tag, &self.work, &self.net));
        let mut live = LIVE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *live = live.saturating_sub(1);
        for (p, existed) in host_paths_before() {
            if !existed && *live == 0 {
                let _ = fs::remove_dir(p); // only if empty
            }
        }
        drop(live);
        for n in notes {
            eprintln!("cri cleanup ({}): {n}", self.tag);
        }
    }
}

/// StopPodSandbox + RemovePodSandbox for every pod, as kubelet does when pods go away; this
/// also runs the CNI DEL that frees the address and the veth.
fn remove_pods(c: &Client, notes: &mut Vec<String>) {
    for pod in c.list_pods().unwrap_or_default() {
        if let Err(e) = c.stop_pod(&pod.id).and_then(|_| c.remove_pod(&pod.id)) {
            notes.push(format!("removing pod {}: {}", pod.id, e.message()));
        }
    }
}
