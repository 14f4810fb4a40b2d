//! Removing the container's cgroup at `delete` (and when a `create` fails):
//! whatever still runs in it is killed, then every directory goes, the
//! sub-cgroups the container made included. Runs in the runtime process.

use std::path::Path;
use std::time::{Duration, Instant};

use super::{io_err, Cgroup, Result};

impl Cgroup {
    /// Kills whatever is left and removes the cgroup from every hierarchy,
    /// sub-cgroups the container made included.
    pub(crate) fn destroy(&self) -> Result<()> {
        if self.is_frozen() {
            let _ = self.freeze(false);
        }
        self.kill_until_gone(Duration::from_secs(5));
        for dir in self.dirs() {
            remove_children(&dir);
        }
        if self.systemd {
            // systemd removes the unit's cgroup with the unit.
            self.stop_unit()?;
        }
        for dir in self.dirs() {
            remove_dir(&dir)?;
        }
        for dir in &self.extra {
            remove_children(dir);
            remove_dir(dir)?;
        }
        Ok(())
    }

    /// SIGKILLs every process (module `kill`) until none is left or
    /// `patience` runs out.
    fn kill_until_gone(&self, patience: Duration) {
        let deadline = Instant::now() + patience;
        while let Ok(pids) = self.pids() {
            if pids.is_empty() || Instant::now() > deadline {
                break;
            }
            self.kill_all();
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Removes `dir`; one already gone is fine.
fn remove_dir(dir: &Path) -> Result<()> {
    match std::fs::remove_dir(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_err("remove", dir)(e)),
        _ => Ok(()),
    }
}

/// Depth-first rmdir of the sub-cgroups under `dir` (a container may make
/// its own inside its cgroup namespace); `dir` itself stays.
fn remove_children(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            remove_children(&e.path());
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::check::Layout;
    use super::super::fixture::{self, put};

    #[test]
    fn every_hierarchy_loses_the_cgroup_and_its_sub_cgroups() {
        let root = tempfile::tempdir().unwrap();
        let cg = fixture::cgroup(root.path(), Layout::Hybrid, "/t/ct");
        // Empty directories stand in for cgroupfs ones (whose files rmdir
        // ignores); the pids one lists no process, so nothing is killed.
        for h in ["pids", "memory", "cpu,cpuacct", "systemd", "unified"] {
            std::fs::create_dir_all(root.path().join(h).join("t/ct/sub/deeper")).unwrap();
        }
        cg.destroy().unwrap();
        for h in ["pids", "memory", "cpu,cpuacct", "systemd", "unified"] {
            assert!(!root.path().join(h).join("t/ct").exists(), "{h}");
            assert!(root.path().join(h).join("t").is_dir(), "{h}: the parent stays");
        }
        cg.destroy().unwrap();
    }

    #[test]
    fn a_cgroup_that_cannot_go_is_named() {
        let root = tempfile::tempdir().unwrap();
        let cg = fixture::cgroup(root.path(), Layout::Hybrid, "/t/ct");
        std::fs::create_dir_all(root.path().join("pids/t/ct")).unwrap();
        put(&root.path().join("memory/t/ct"), "stray", "");
        let e = cg.destroy().unwrap_err().to_string();
        assert!(e.starts_with("cgroup: remove ") && e.contains("memory/t/ct"), "{e}");
    }
}
