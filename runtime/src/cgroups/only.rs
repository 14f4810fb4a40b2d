//! A v1 cgroup kept to some hierarchies ([`crate::Supervised::cgroup_v1_controllers`]).
//! Runs in the runtime process; touches no cgroupfs.
//!
//! runc makes and joins the container's cgroup in every mounted hierarchy.
//! On a v1 host that is ten directories made, joined by init and removed
//! again per container, most of them for controllers the container sets no
//! limit in. A caller that knows what it limits and reads (the sandbox) can
//! name those controllers instead; the state record keeps the list, so
//! every later command (`exec`, `kill --all`, `pause`, `delete`, usage)
//! works on the same hierarchies.
//!
//! `pids` and `freezer` are always kept: listing, `kill --all` and `delete`
//! read the pids hierarchy, and `pause` and `kill --all` use the freezer.
//! Named hierarchies (`name=systemd`) and a hybrid host's cgroup2 mount hold
//! no controller and are left out: there the container's processes stay in
//! the caller's cgroup.

use oci_spec::runtime::{LinuxDevice, LinuxMemory, LinuxResources};

use super::check::Layout;
use super::hierarchy::LIBCGROUPS_V1;
use super::{Cgroup, CgroupError, Result};

/// Controllers kept whatever the caller lists: the runtime's own commands
/// need them (see the module doc).
const ALWAYS: [&str; 2] = ["freezer", "pids"];

/// The list to record for `wanted`: known controller names, [`ALWAYS`]
/// added, sorted, without repeats.
pub(crate) fn normalise(wanted: &[String]) -> Result<Vec<String>> {
    if let Some(bad) = wanted.iter().find(|c| !LIBCGROUPS_V1.contains(&c.as_str())) {
        return Err(CgroupError::Path(format!(
            "cgroup v1 controllers to join: {bad:?} is not a cgroup v1 controller (known: {})",
            LIBCGROUPS_V1.join(", ")
        )));
    }
    let mut out: Vec<String> = wanted.iter().cloned().chain(ALWAYS.iter().map(|c| c.to_string())).collect();
    out.sort();
    out.dedup();
    Ok(out)
}

impl Cgroup {
    /// Keeps the handle to the v1 hierarchies holding one of `ctrls` (a
    /// [`normalise`]d list). A v2 host has one hierarchy, and the systemd
    /// driver's scope is systemd's: both are left as they are.
    pub(crate) fn keep_only(mut self, ctrls: &[String]) -> Cgroup {
        if self.layout == Layout::Unified || self.systemd {
            return self;
        }
        self.mounts.retain(|m| !m.v2 && m.controllers.iter().any(|c| ctrls.contains(c)));
        self.extra.clear();
        self.only = Some(ctrls.to_vec());
        self
    }

    /// Refuses a field of `r` (or `linux.devices`, which adds device rules)
    /// whose controller has no hierarchy left to this handle: it would not
    /// be enforced.
    pub(crate) fn check_only(&self, r: &LinuxResources, devices: &[LinuxDevice]) -> Result<()> {
        if self.only.is_none() {
            return Ok(());
        }
        let mut wanted = super::limits::controllers_of(r);
        if let Some(c) = r.cpu() {
            let limits = [c.shares().is_some(), c.quota().is_some(), c.period().is_some(), c.burst().is_some()];
            let rt = [c.idle().is_some(), c.realtime_runtime().is_some(), c.realtime_period().is_some()];
            if limits.into_iter().chain(rt).any(|set| set) {
                wanted.push(("linux.resources.cpu", "cpu"));
            }
            if c.cpus().is_some() || c.mems().is_some() {
                wanted.push(("linux.resources.cpu.cpus", "cpuset"));
            }
        }
        let blocks = [
            ("linux.resources.memory", "memory", r.memory().is_some_and(|m| m != LinuxMemory::default())),
            ("linux.resources.pids", "pids", r.pids().is_some()),
            ("linux.resources.devices", "devices", r.devices().is_some()),
            ("linux.devices", "devices", !devices.is_empty()),
        ];
        wanted.extend(blocks.into_iter().filter(|(_, _, set)| *set).map(|(f, c, _)| (f, c)));
        // A field whose controller the host lacks was refused by `check`
        // before this. Device rules, even an empty list, are written (with
        // the defaults after them): they need the devices hierarchy.
        let kept = |ctrl: &str| self.mounts.iter().any(|m| m.controllers.iter().any(|c| c == ctrl));
        match wanted.into_iter().find(|(_, ctrl)| !kept(ctrl)) {
            Some((field, ctrl)) => Err(CgroupError::Refused {
                field: field.into(),
                why: format!("the {ctrl} controller is not among the cgroup v1 controllers this container joins"),
            }),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture;
    use super::*;
    use std::path::{Path, PathBuf};

    fn res(json: serde_json::Value) -> LinuxResources {
        serde_json::from_value(json).unwrap()
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_list_gets_what_the_runtime_needs_and_unknown_names_are_refused() {
        assert_eq!(normalise(&names(&["memory", "cpu", "memory"])).unwrap(), ["cpu", "freezer", "memory", "pids"]);
        let e = normalise(&names(&["cpu", "name=systemd"])).unwrap_err().to_string();
        assert!(e.contains("\"name=systemd\"") && e.contains("not a cgroup v1 controller"), "{e}");
    }

    #[test]
    fn only_the_listed_hierarchies_are_made_joined_and_removed() {
        let root = tempfile::tempdir().unwrap();
        let only = normalise(&names(&["memory", "cpu"])).unwrap();
        let cg = fixture::cgroup(root.path(), Layout::Hybrid, "/t/ct").keep_only(&only);
        let mut dirs: Vec<PathBuf> = cg.dirs().iter().map(|d| d.strip_prefix(root.path()).unwrap().into()).collect();
        dirs.sort();
        let want: Vec<PathBuf> =
            ["cpu,cpuacct", "freezer", "memory", "pids"].iter().map(|h| Path::new(h).join("t/ct")).collect();
        assert_eq!(dirs, want, "named and cgroup2 hierarchies hold no controller");
        assert!(cg.extra.is_empty() && cg.hierarchies().len() == 4);
        let sj = cg.prepare_self_join(&LinuxResources::default(), &[]).unwrap().unwrap();
        assert_eq!(sj.tasks.len(), 4);
        assert!(sj.unified.is_none(), "not cloned into the hybrid cgroup2 hierarchy");
        for h in ["devices", "cpuset", "systemd", "unified"] {
            assert!(!root.path().join(h).exists(), "{h} was made");
        }
        cg.destroy().unwrap();
        assert!(!root.path().join("memory/t/ct").exists());
    }

    #[test]
    fn a_limit_outside_the_list_is_refused_naming_the_field() {
        let root = tempfile::tempdir().unwrap();
        let only = normalise(&names(&["memory", "cpu"])).unwrap();
        let cg = fixture::cgroup(root.path(), Layout::Hybrid, "/t/ct").keep_only(&only);
        cg.check_only(
            &res(serde_json::json!({"memory": {"limit": 1}, "cpu": {"quota": 1000}, "pids": {"limit": 5}})),
            &[],
        )
        .unwrap();
        let no_memory = fixture::cgroup(root.path(), Layout::Hybrid, "/t/ct").keep_only(&names(&["cpu"]));
        no_memory.check_only(&res(serde_json::json!({"memory": {}})), &[]).unwrap();
        let e = no_memory.check_only(&res(serde_json::json!({"memory": {"limit": 1}})), &[]).unwrap_err();
        assert!(e.to_string().contains("linux.resources.memory"), "{e}");
        for (r, field, ctrl) in [
            (serde_json::json!({"devices": [{"allow": false, "access": "rwm"}]}), "linux.resources.devices", "devices"),
            (serde_json::json!({"cpu": {"cpus": "0"}}), "linux.resources.cpu.cpus", "cpuset"),
        ] {
            let e = cg.check_only(&res(r), &[]).unwrap_err().to_string();
            assert!(e.contains(field) && e.contains(ctrl), "{e}");
        }
        let dev: LinuxDevice =
            serde_json::from_value(serde_json::json!({"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229}))
                .unwrap();
        assert!(cg
            .check_only(&LinuxResources::default(), std::slice::from_ref(&dev))
            .unwrap_err()
            .to_string()
            .contains("linux.devices"));
        let all = fixture::cgroup(root.path(), Layout::Hybrid, "/t/ct");
        all.check_only(&res(serde_json::json!({"cpu": {"cpus": "0"}})), &[dev]).unwrap();
    }

    #[test]
    fn v2_is_left_whole() {
        let root = tempfile::tempdir().unwrap();
        let cg = fixture::cgroup(root.path(), Layout::Unified, "/t/ct").keep_only(&names(&["pids"]));
        assert_eq!(cg.dirs(), vec![root.path().join("t/ct")]);
        cg.check_only(&res(serde_json::json!({"memory": {"limit": 1}})), &[]).unwrap();
    }
}
