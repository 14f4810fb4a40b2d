//! Host-side observation and cleanup: /proc, cgroupfs and the mount table, as seen from the
//! test process.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Every pid in /proc.
pub(crate) fn all_pids() -> Vec<i32> {
    fs::read_dir("/proc")
        .map(|d| d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default()
}

/// The fields of /proc/PID/stat after the parenthesised comm: state, ppid, pgrp, session, ...
pub(crate) fn proc_stat_fields(pid: i32) -> Option<Vec<String>> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// True if PID exists and is not a zombie.
pub fn pid_alive(pid: i32) -> bool {
    proc_stat_fields(pid).is_some_and(|f| f[0] != "Z" && f[0] != "X")
}

/// Start time (field 22 of /proc/PID/stat), to recognise a pid after reuse.
pub(crate) fn proc_starttime(pid: i32) -> Option<u64> {
    proc_stat_fields(pid)?.get(19)?.parse().ok()
}

/// The argv of PID (empty if gone or a zombie).
pub fn cmdline(pid: i32) -> Vec<String> {
    let raw = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    raw.split(|b| *b == 0).filter(|s| !s.is_empty()).map(|s| String::from_utf8_lossy(s).into_owned()).collect()
}

/// Existing cgroup directories for container `id`: `/sys/fs/cgroup[/<hierarchy>]/tinyrun-test/<id>`.
pub fn cgroup_dirs(id: &str) -> Vec<PathBuf> {
    assert!(!id.is_empty() && !id.contains('/') && id != "." && id != "..", "bad id {id:?}");
    let base = Path::new("/sys/fs/cgroup");
    let mut roots = vec![base.to_path_buf()];
    if let Ok(d) = fs::read_dir(base) {
        roots.extend(d.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.is_dir()));
    }
    roots.into_iter().map(|r| r.join("tinyrun-test").join(id)).filter(|p| p.is_dir()).collect()
}

/// Kill what is left inside container `id`'s cgroups (only there, never pid 1 or ourselves),
/// then rmdir them depth-first. rmdir only: cgroupfs needs nothing else.
pub(crate) fn remove_cgroup(id: &str) {
    let me = std::process::id() as i32;
    // A frozen process (a test that failed while its container was paused) dies only once
    // thawed: thaw first, whichever hierarchy comes first below.
    for dir in cgroup_dirs(id) {
        for (file, thawed) in [("freezer.state", "THAWED"), ("cgroup.freeze", "0")] {
            if dir.join(file).exists() {
                let _ = fs::write(dir.join(file), thawed);
            }
        }
    }
    for dir in cgroup_dirs(id) {
        for attempt in 0..40 {
            let procs = cgroup_procs_recursive(&dir);
            let procs: Vec<i32> = procs.into_iter().filter(|p| *p > 1 && *p != me).collect();
            if procs.is_empty() || attempt == 39 {
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

/// Pids in the cgroup directory `dir` and in its sub-cgroups.
pub fn cgroup_procs_recursive(dir: &Path) -> Vec<i32> {
    let mut v: Vec<i32> = fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    if let Ok(d) = fs::read_dir(dir) {
        for e in d.filter_map(|e| e.ok()) {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                v.extend(cgroup_procs_recursive(&e.path()));
            }
        }
    }
    v
}

/// rmdir of a cgroup directory and its sub-cgroups, deepest first; what
/// fails (other than being gone already) is reported, not fatal.
pub fn rmdir_tree(dir: &Path) {
    if let Ok(d) = fs::read_dir(dir) {
        for e in d.filter_map(|e| e.ok()) {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                rmdir_tree(&e.path());
            }
        }
    }
    if let Err(e) = fs::remove_dir(dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            eprintln!("cleanup: rmdir {}: {e}", dir.display());
        }
    }
}

/// Mount points at or below `dir` in our mount namespace, in mount order.
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(p.replace("\\040", " ")))
        .filter(|p| p.starts_with(dir))
        .collect()
}

/// A throw-away local user made with `useradd` and removed with `userdel` on drop, even when
/// the test panics: "another local user" for the attacks on what a host shows of its boxes.
pub struct LocalUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

impl LocalUser {
    /// `tr<pid><tag>`, with a group of its own and no home.
    pub fn new(tag: &str) -> LocalUser {
        let name = format!("tr{}{tag}", std::process::id());
        let quiet = |c: &mut std::process::Command| {
            c.stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        // Parallel tests may contend for /etc/passwd's lock: retry.
        let made = (0..50).any(|_| {
            let ok = quiet(std::process::Command::new("useradd").args([
                "--no-create-home",
                "--shell",
                "/bin/false",
                "--user-group",
                &name,
            ]));
            if !ok {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            ok
        });
        assert!(made, "useradd {name} failed");
        let pw = nix::unistd::User::from_name(&name).ok().flatten().expect("the new user");
        LocalUser { name, uid: pw.uid.as_raw(), gid: pw.gid.as_raw() }
    }

    /// `sh -c SCRIPT` as this user (setpriv, no supplementary groups, a clean environment),
    /// to completion: (exit status, stdout, stderr).
    pub fn sh(&self, script: &str) -> (i32, String, String) {
        let o = std::process::Command::new("setpriv")
            .args(["--reuid", &self.uid.to_string(), "--regid", &self.gid.to_string(), "--clear-groups", "--"])
            .args(["/bin/sh", "-c", script])
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
            .current_dir("/")
            .stdin(std::process::Stdio::null())
            .output()
            .expect("setpriv");
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    }
}

impl Drop for LocalUser {
    fn drop(&mut self) {
        // Whatever ran as the user is gone by now (sh ran to completion).
        userdel(&self.name);
    }
}

/// Deletes user `name`, retrying for 5 s: a parallel test may hold /etc/passwd's lock.
pub fn userdel(name: &str) {
    for _ in 0..50 {
        let st = std::process::Command::new("userdel")
            .arg(name)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
        if st.is_ok_and(|s| s.success()) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// SIGKILLs what `processes` lists until it lists nothing (2.5 s at most): a test's
/// processes, some of which may fork while they are being killed.
pub fn kill_until_gone(processes: impl Fn() -> Vec<i32>) {
    for _ in 0..50 {
        let ps = processes();
        if ps.is_empty() {
            break;
        }
        for p in ps {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), nix::sys::signal::SIGKILL);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
