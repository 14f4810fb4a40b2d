//! Removing what a test made once its daemon is stopped: at the end of each test (`Drop for
//! Cri`), and, at the start of a test process, for earlier runs killed before their `Drop`
//! ran (Ctrl-C of `cargo test`, a CI timeout).

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tinyrun_conformance::{cgroup_procs_recursive, cmdline, mounts_under, pid_alive, rmdir_tree};

use super::net::Net;
use super::{parent_dirs, slice_name};

/// Kill what names `work` (containerd, shims) and what is in the test's cgroups, remove the
/// cgroups, unmount everything under `work` (rootfs overlays, shm, the pod netns), remove the
/// network and `work`. Returns what it had to do beyond removing the directories.
pub fn sweep(tag: &str, work: &Path, net: &Net) -> Vec<String> {
    let mut notes = Vec::new();
    let stray = processes_naming(work);
    if !stray.is_empty() {
        notes.push(format!("killed processes naming {}: {stray:?}", work.display()));
        kill_all(&stray);
    }
    for dir in parent_dirs(tag) {
        let procs = cgroup_procs_recursive(&dir);
        if !procs.is_empty() {
            notes.push(format!("killed {procs:?} left in {}", dir.display()));
            kill_all(&procs);
            std::thread::sleep(Duration::from_millis(200));
        }
        match dir.ends_with(slice_name(tag)) {
            // systemd owns the slice and its scopes: stopping the slice removes them and
            // unloads the units, which an rmdir would leave behind.
            true => notes.extend(stop_slice(&slice_name(tag))),
            false => rmdir_tree(&dir),
        }
    }
    for m in mounts_under(work).iter().rev() {
        let _ = nix::mount::umount2(m, nix::mount::MntFlags::MNT_DETACH);
    }
    notes.extend(net.teardown(&sandbox_ids(work)));
    if let Err(e) = fs::remove_dir_all(work) {
        if e.kind() != std::io::ErrorKind::NotFound {
            notes.push(format!("remove {}: {e}", work.display()));
        }
    }
    notes
}

fn stop_slice(slice: &str) -> Option<String> {
    let out = std::process::Command::new("systemctl").args(["stop", slice]).output();
    match out {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!("systemctl stop {slice}: {}", String::from_utf8_lossy(&o.stderr).trim())),
        Err(e) => Some(format!("systemctl stop {slice}: {e}")),
    }
}

/// Pod sandboxes the CRI plugin still has records of under `work` (root and state dirs).
pub fn sandbox_ids(work: &Path) -> Vec<String> {
    let mut ids: Vec<String> = ["root", "state"]
        .iter()
        .filter_map(|d| fs::read_dir(work.join(d).join("io.containerd.grpc.v1.cri/sandboxes")).ok())
        .flat_map(|rd| rd.filter_map(|e| e.ok()?.file_name().into_string().ok()))
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

/// Processes (other than this one) whose command line names `work`.
pub fn processes_naming(work: &Path) -> Vec<i32> {
    let me = i32::try_from(std::process::id()).expect("pid fits i32");
    let work = work.display().to_string();
    let pids =
        fs::read_dir("/proc").map(|d| d.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok()).collect());
    let pids: Vec<i32> = pids.unwrap_or_default();
    pids.into_iter().filter(|p| *p != me && cmdline(*p).iter().any(|a| a.contains(&work))).collect()
}

fn kill_all(pids: &[i32]) {
    for p in pids.iter().filter(|p| **p > 1) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*p), nix::sys::signal::SIGKILL);
    }
}

/// Sweep `/tmp/tinyrun-cri-<pid>-<n>` of test processes that are gone (their pid is dead or
/// is no longer a `cri` test binary). True if there was any.
pub fn reap_stale() -> bool {
    let mut swept = false;
    let me = std::process::id();
    let Ok(entries) = fs::read_dir("/tmp") else { return false };
    for e in entries.filter_map(|e| e.ok()) {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some((pid, n)) = name.strip_prefix("tinyrun-cri-").and_then(|r| r.split_once('-')) else { continue };
        let (Ok(pid), Ok(n)) = (pid.parse::<u32>(), n.parse::<u32>()) else { continue };
        let running = i32::try_from(pid).is_ok_and(|p| pid_alive(p) && is_cri_test(p));
        if pid == me || running {
            continue;
        }
        let work = PathBuf::from("/tmp").join(&name);
        let tag = format!("cri-{pid}-{n}");
        eprintln!("cri: cleaning up after an interrupted run: {}", work.display());
        for note in sweep(&tag, &work, &Net::new(&tag, pid, n, &work)) {
            eprintln!("cri cleanup ({tag}): {note}");
        }
        swept = true;
    }
    swept
}

fn is_cri_test(pid: i32) -> bool {
    let argv0 = cmdline(pid).into_iter().next().unwrap_or_default();
    Path::new(&argv0).file_name().is_some_and(|f| f.to_string_lossy().starts_with("cri-"))
}
