//! The private containerd: its config (CRI plugin on, one runtime handler per runtime, the
//! test's own CNI dirs and sandbox image), starting it, and stopping it by its pid.

use std::fs::{self, File};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// One `runtimes.<name>` entry: the shim is containerd's runc shim, which calls `binary`
/// exactly as it calls runc, with `--root <root>/k8s.io`.
pub struct RuntimeHandler {
    pub name: &'static str,
    pub binary: PathBuf,
    pub root: PathBuf,
}

/// Where the daemon keeps everything; all under the test's work dir.
pub struct Layout {
    pub root: PathBuf,
    pub state: PathBuf,
    pub sock: PathBuf,
    pub cni_bin: PathBuf,
    pub cni_conf: PathBuf,
    pub log: PathBuf,
}

impl Layout {
    pub fn new(work: &Path) -> Layout {
        Layout {
            root: work.join("root"),
            state: work.join("state"),
            sock: work.join("containerd.sock"),
            cni_bin: work.join("cni/bin"),
            cni_conf: work.join("cni/conf"),
            log: work.join("containerd.log"),
        }
    }
}

/// containerd's config (version 2, as containerd 1.6 reads it). Plugins that would create
/// host paths of their own (`opt`: /opt/containerd) or that do not apply are disabled; no
/// address listens but the unix sockets and the CRI streaming server on 127.0.0.1. `systemd`:
/// every handler's shim uses the systemd cgroup driver (`SystemdCgroup`), as kubelet's
/// `cgroupDriver: systemd` nodes do, and calls the runtime with `--systemd-cgroup`.
pub fn config(l: &Layout, handlers: &[RuntimeHandler], sandbox_image: &str, systemd: bool) -> String {
    let cri = r#"plugins."io.containerd.grpc.v1.cri""#;
    let mut s = format!(
        r#"# written by conformance/tests/cri_common
version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[debug]
  address = ""
  level = "info"
[metrics]
  address = ""

[{cri}]
  sandbox_image = "{sandbox_image}"
  # The pod's network namespace is bind-mounted under the state dir, not /var/run/netns.
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  # The sandbox asks for oom_score_adj -998; lowering it needs CAP_SYS_RESOURCE, which some
  # hosts (containers, CI machines) lack in their bounding set: runc and tinyrun then both
  # fail the pod. Clamp it to containerd's own value, as for rootless containerd.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [{cri}.cni]
    bin_dir = "{cni_bin}"
    conf_dir = "{cni_conf}"
    max_conf_num = 1
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
"#,
        root = l.root.display(),
        state = l.state.display(),
        sock = l.sock.display(),
        cni_bin = l.cni_bin.display(),
        cni_conf = l.cni_conf.display(),
    );
    for h in handlers {
        s += &format!(
            r#"    [{cri}.containerd.runtimes.{name}]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.{name}.options]
        BinaryName = "{binary}"
        Root = "{root}"
        SystemdCgroup = {systemd}
"#,
            name = h.name,
            binary = h.binary.display(),
            root = h.root.display(),
        );
    }
    s
}

/// Start `containerd --config FILE` in a session of its own, logging to `l.log`. The caller
/// waits for the CRI service to answer.
pub fn start(l: &Layout, config_file: &Path) -> Child {
    let log = File::create(&l.log).expect("create containerd.log");
    let mut cmd = Command::new("containerd");
    cmd.arg("--config").arg(config_file).stdin(Stdio::null()).stdout(log.try_clone().expect("dup log")).stderr(log);
    // Not a child of the test's systemd unit, if any: containerd would notify it.
    cmd.env_remove("NOTIFY_SOCKET").process_group(0);
    cmd.spawn().expect("spawn containerd")
}

/// SIGTERM, up to 10 s to exit, then SIGKILL; reaps it.
pub fn stop(child: &mut Child) {
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid fits i32"));
    if matches!(child.try_wait(), Ok(Some(_))) {
        return;
    }
    let _ = kill(pid, Signal::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The last lines of containerd's log, for a failure message.
pub fn log_tail(l: &Layout, lines: usize) -> String {
    let text = fs::read_to_string(&l.log).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Load an image archive into the k8s.io namespace (the one the CRI plugin uses) with `ctr`.
pub fn import(l: &Layout, archive: &Path) {
    let out = Command::new("ctr")
        .arg("--address")
        .arg(&l.sock)
        .args(["--namespace", "k8s.io", "images", "import"])
        .arg(archive)
        .output()
        .expect("run ctr images import");
    assert!(
        out.status.success(),
        "ctr images import {}: {}\n{}",
        archive.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
