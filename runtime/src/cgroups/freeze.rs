//! The freezer (`pause`/`resume`, and `state`'s paused status) and sending a
//! signal to every process of the cgroup under a freeze (`kill --all`).
//! Runs in the runtime process.

use std::collections::BTreeMap;
use std::path::Path;

use libcgroups::common::{CgroupManager, FreezerState};
use nix::unistd::Pid;

use super::check::Layout;
use super::{read_trim, Cgroup, Result, ROOT};

impl Cgroup {
    /// Freezes or thaws every process.
    pub(crate) fn freeze(&self, frozen: bool) -> Result<()> {
        let st = if frozen { FreezerState::Frozen } else { FreezerState::Thawed };
        if self.split() {
            // libcgroups' freezer touches only its own hierarchy: a manager
            // built on the freezer's path is right for it.
            let path = self.per.get("freezer").unwrap_or(&self.recorded);
            return self.mgr_at(path)?.freeze(st).map_err(self.err(if frozen { "freeze" } else { "thaw" }));
        }
        self.mgr()?.freeze(st).map_err(self.err(if frozen { "freeze" } else { "thaw" }))
    }

    /// Whether the freezer holds the cgroup frozen.
    pub(crate) fn is_frozen(&self) -> bool {
        match self.layout {
            Layout::Unified => read_trim(&self.v2_dir().join("cgroup.freeze")) == "1",
            _ => read_trim(&self.v1_dir("freezer").join("freezer.state")) == "FROZEN",
        }
    }

    /// Sends `sig` to every process, with the cgroup frozen meanwhile so
    /// nothing can fork past the signal (runc's signalAllProcesses);
    /// SIGKILL as module `kill` sends it.
    pub(crate) fn signal_all(&self, sig: i32) -> Result<()> {
        if sig == libc::SIGKILL {
            self.pids()?;
            self.kill_all();
            return Ok(());
        }
        let froze = !self.is_frozen() && self.freeze(true).is_ok();
        let result = self.pids().map(|pids| {
            for p in pids {
                // Through a pidfd: any signal number, and no recycled pid.
                if let Ok(fd) = crate::sys::pidfd_open(Pid::from_raw(p)) {
                    let _ = crate::sys::pidfd_send_signal(&fd, sig);
                }
            }
        });
        if froze {
            let _ = self.freeze(false);
        }
        result
    }
}

/// The freezer state of the cgroup a record names, without building a
/// manager (`state` asks for every container in `list`).
pub(crate) fn is_frozen(recorded: &str, per: &BTreeMap<String, String>, systemd: bool) -> bool {
    frozen_at(Path::new(ROOT), recorded, per, systemd)
}

fn frozen_at(root: &Path, recorded: &str, per: &BTreeMap<String, String>, systemd: bool) -> bool {
    if systemd {
        // The unit's cgroup; a record that names none is not frozen.
        let Ok(unit) = super::systemd::Unit::from_record(recorded, per) else { return false };
        return read_trim(&root.join(unit.path.trim_start_matches('/')).join("cgroup.freeze")) == "1";
    }
    let rel = recorded.trim_start_matches('/');
    let v2 = root.join(rel).join("cgroup.freeze");
    if per.is_empty() && v2.exists() {
        return read_trim(&v2) == "1";
    }
    let frz = per.get("freezer").map_or(rel, |p| p.trim_start_matches('/'));
    read_trim(&root.join("freezer").join(frz).join("freezer.state")) == "FROZEN"
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{self, put};
    use super::*;

    #[test]
    fn the_freezer_state_is_read_from_the_layouts_file() {
        let root = tempfile::tempdir().unwrap();
        let v1 = fixture::cgroup(root.path(), Layout::Hybrid, "/t/a");
        let v2 = fixture::cgroup(root.path(), Layout::Unified, "/t/b");
        assert!(!v1.is_frozen() && !v2.is_frozen(), "no freezer file: not frozen");
        put(&root.path().join("freezer/t/a"), "freezer.state", "FROZEN\n");
        put(&root.path().join("t/b"), "cgroup.freeze", "1\n");
        assert!(v1.is_frozen() && v2.is_frozen());
        put(&root.path().join("freezer/t/a"), "freezer.state", "FREEZING\n");
        put(&root.path().join("t/b"), "cgroup.freeze", "0\n");
        assert!(!v1.is_frozen() && !v2.is_frozen(), "freezing is not yet frozen");
    }

    #[test]
    fn a_record_is_frozen_by_whichever_freezer_it_has() {
        let root = tempfile::tempdir().unwrap();
        let none = BTreeMap::new();
        assert!(!frozen_at(root.path(), "/t/a", &none, false));
        put(&root.path().join("freezer/t/a"), "freezer.state", "FROZEN\n");
        assert!(frozen_at(root.path(), "/t/a", &none, false));
        assert!(!frozen_at(root.path(), "/t/a", &none, true), "not a systemd record");
        put(&root.path().join("s.slice/p-n.scope"), "cgroup.freeze", "1\n");
        assert!(frozen_at(root.path(), "s.slice:p:n", &none, true), "the systemd driver's scope is read");
        // A v2 file, when there is one, decides.
        put(&root.path().join("t/a"), "cgroup.freeze", "0\n");
        assert!(!frozen_at(root.path(), "t/a", &none, false));
        put(&root.path().join("t/a"), "cgroup.freeze", "1\n");
        assert!(frozen_at(root.path(), "t/a", &none, false));
        let per: BTreeMap<String, String> = [("freezer".to_string(), "/f/a".to_string())].into();
        assert!(!frozen_at(root.path(), "t/a", &per, false), "split: the freezer's own path is read");
        put(&root.path().join("freezer/f/a"), "freezer.state", "FROZEN\n");
        assert!(frozen_at(root.path(), "t/a", &per, false));
    }
}
