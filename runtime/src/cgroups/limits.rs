//! Applying `linux.resources` to the live cgroup at create, and changing it
//! for `update`. Runs in the runtime process. The common v1 case is written
//! directly (`v1`); everything else goes through libcgroups' manager.

use libcgroups::common::{CgroupManager, ControllerOpt};
use oci_spec::runtime::{LinuxDevice, LinuxDeviceCgroup, LinuxDeviceType, LinuxResources};

use super::check::Layout;
use super::{apart, v1, Cgroup, CgroupError, Result};

impl Cgroup {
    /// Applies `r` (all of it, as given) to the live cgroup.
    pub(crate) fn apply(&self, r: &LinuxResources, devices: &[LinuxDevice]) -> Result<()> {
        let mut r = with_device_allows(r, devices);
        if self.layout != Layout::Unified && !self.systemd {
            // Written here when nothing else is asked: libcgroups' v1
            // manager costs about 1 ms of CPU to build (see `v1`).
            let beyond = apart::rest(&v1::rest(&r));
            if self.split() || beyond == LinuxResources::default() {
                v1::apply(&r, &self.v1_dir("devices"), &self.v1_dir("pids"))?;
                apart::apply(&r, |c| self.v1_dir(c))?;
                self.check_split(&beyond)?;
                if beyond == LinuxResources::default() {
                    return self.write_burst(&r);
                }
                r = beyond;
            }
        }
        let opt = ControllerOpt {
            resources: &r,
            disable_oom_killer: r.memory().as_ref().and_then(|m| m.disable_oom_killer()).unwrap_or(false),
            oom_score_adj: None,
            freezer_state: None,
        };
        match self.mgr()?.apply(&opt) {
            // Loading the v2 device filter (BPF) needs privilege a rootless
            // caller lacks; runc ignores that error for it. libcgroups
            // stops before the `unified` entries then: write them here.
            Err(libcgroups::common::AnyManagerError::V2(
                libcgroups::v2::manager::V2ManagerError::DevicesController(_),
            )) if super::rootless::unprivileged() => self.write_unified(&r)?,
            other => other.map_err(self.err("apply linux.resources"))?,
        }
        // libcgroups' v1 cpu controller skips a cpu block holding only a burst.
        self.write_burst(&r)
    }

    /// `cpu.burst` on v1, which libcgroups' v1 manager leaves out.
    fn write_burst(&self, r: &LinuxResources) -> Result<()> {
        let c = r.cpu().as_ref();
        if let (Some(burst), Layout::Legacy | Layout::Hybrid) = (c.and_then(|c| c.burst()), self.layout) {
            let f = self.v1_dir("cpu").join("cpu.cfs_burst_us");
            libcgroups::common::write_cgroup_file(&f, burst).map_err(|e| CgroupError::Path(e.to_string()))?;
        }
        Ok(())
    }

    /// Applies an update: on v1 the device rules are left alone (runc's
    /// SkipDevices; rewriting them would deny every device for a moment),
    /// on v2 the same filter is rebuilt from the original rules. The
    /// systemd driver gives systemd the new properties first.
    pub(crate) fn update(&self, r: &LinuxResources, devices: &[LinuxDevice]) -> Result<()> {
        if self.systemd {
            self.set_unit_properties(r, devices)?;
            return self.apply(&super::systemd::for_files(r), devices);
        }
        if self.layout == Layout::Unified {
            return self.apply(r, devices);
        }
        let mut r = r.clone();
        r.set_devices(None);
        self.apply(&r, &[])
    }
}

/// runc allows the device nodes `linux.devices` makes, after the spec's own
/// rules (libcgroups adds only its default set).
impl Cgroup {
    /// With paths that differ per hierarchy, libcgroups (one path for all,
    /// and device rules written on every apply) can set only limits whose
    /// controllers share the devices hierarchy's path, the record.
    fn check_split(&self, r: &LinuxResources) -> Result<()> {
        if !self.split() {
            return Ok(());
        }
        for (field, ctrl) in controllers_of(r) {
            let mount = self.mounts.iter().find(|m| m.controllers.iter().any(|c| c == ctrl));
            let here = mount.map_or(self.rel(), |m| self.rel_in(m));
            if here != self.rel() {
                let why = format!(
                    "with a relative cgroupsPath, this process's own cgroups put the container's {ctrl} cgroup \
                     (/{here}) apart from its devices cgroup ({}); tinyrun sets {ctrl} limits only beside the \
                     devices one: give an absolute cgroupsPath",
                    self.recorded
                );
                return Err(CgroupError::Refused { field: field.into(), why });
            }
        }
        Ok(())
    }
}

/// The `linux.resources` fields beyond those `v1` and `apart` write that
/// `r` sets, with the v1 controller each needs.
pub(super) fn controllers_of(r: &LinuxResources) -> Vec<(&'static str, &'static str)> {
    let mut out = Vec::new();
    if r.block_io().is_some() {
        out.push(("linux.resources.blockIO", "blkio"));
    }
    if r.hugepage_limits().as_ref().is_some_and(|h| !h.is_empty()) {
        out.push(("linux.resources.hugepageLimits", "hugetlb"));
    }
    if let Some(n) = r.network() {
        if n.class_id().is_some() {
            out.push(("linux.resources.network.classID", "net_cls"));
        }
        if n.priorities().is_some() {
            out.push(("linux.resources.network.priorities", "net_prio"));
        }
    }
    out
}

pub(super) fn with_device_allows(r: &LinuxResources, devices: &[LinuxDevice]) -> LinuxResources {
    let mut r = r.clone();
    if devices.is_empty() {
        return r;
    }
    let mut rules = r.devices().clone().unwrap_or_default();
    for d in devices.iter().filter(|d| matches!(d.typ(), LinuxDeviceType::C | LinuxDeviceType::B | LinuxDeviceType::U))
    {
        let mut rule = LinuxDeviceCgroup::default();
        rule.set_allow(true)
            .set_typ(Some(if d.typ() == LinuxDeviceType::B { LinuxDeviceType::B } else { LinuxDeviceType::C }))
            .set_major(Some(d.major()))
            .set_minor(Some(d.minor()))
            .set_access(Some("rwm".into()));
        rules.push(rule);
    }
    r.set_devices(Some(rules));
    r
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{self, put};
    use super::super::{read_trim, Mount};
    use super::*;

    fn devices(json: serde_json::Value) -> Vec<LinuxDevice> {
        serde_json::from_value(json).unwrap()
    }

    fn rules(r: &LinuxResources) -> Vec<String> {
        r.devices().iter().flatten().map(|d| d.to_string()).collect()
    }

    #[test]
    fn device_nodes_are_allowed_after_the_spec_rules() {
        let mut r: LinuxResources = serde_json::from_value(serde_json::json!({
            "devices": [{"allow": false, "access": "rwm"}]
        }))
        .unwrap();
        let d = devices(serde_json::json!([
            {"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229},
            {"path": "/dev/sda", "type": "b", "major": 8, "minor": 0},
            {"path": "/dev/u", "type": "u", "major": 4, "minor": 1},
            {"path": "/dev/fifo", "type": "p"}
        ]));
        let got = with_device_allows(&r, &d);
        assert_eq!(rules(&got), ["a *:* rwm", "c 10:229 rwm", "b 8:0 rwm", "c 4:1 rwm"], "a fifo needs no rule");
        assert_eq!(rules(&with_device_allows(&r, &[])), ["a *:* rwm"]);
        r.set_devices(None);
        assert!(with_device_allows(&r, &[]).devices().is_none(), "no rules stay no rules");
        assert_eq!(rules(&with_device_allows(&r, &d[..1])), ["c 10:229 rwm"]);
    }

    #[test]
    fn split_hierarchies_take_devices_and_pids_and_refuse_limits_elsewhere() {
        let root = tempfile::tempdir().unwrap();
        let ms = fixture::hybrid_mounts(root.path());
        let per = [("memory".to_string(), "/m/ct".to_string())].into();
        let cg = Cgroup::open_with(root.path(), "/d/ct".into(), per, false, "ct", Layout::Hybrid, ms);
        put(&root.path().join("pids/d/ct"), "pids.max", "");
        put(&root.path().join("devices/d/ct"), "devices.deny", "");
        put(&root.path().join("devices/d/ct"), "devices.allow", "");
        let mut r: LinuxResources = serde_json::from_value(serde_json::json!({
            "devices": [{"allow": false, "access": "rwm"}], "pids": {"limit": 9}
        }))
        .unwrap();
        cg.apply(&r, &[]).unwrap();
        assert_eq!(read_trim(&root.path().join("pids/d/ct/pids.max")), "9");
        assert_eq!(read_trim(&root.path().join("devices/d/ct/devices.deny")), "a *:* rwm");
        r.set_memory(serde_json::from_value(serde_json::json!({"limit": 1048576})).unwrap());
        put(&root.path().join("memory/m/ct"), "memory.limit_in_bytes", "");
        cg.apply(&r, &[]).unwrap();
        assert_eq!(
            read_trim(&root.path().join("memory/m/ct/memory.limit_in_bytes")),
            "1048576",
            "memory at its own path"
        );
        let mut far = r.clone();
        let blkio = serde_json::json!({"weight": 100});
        far.set_block_io(Some(serde_json::from_value(blkio).unwrap()));
        let per = [("blkio".to_string(), "/b/ct".to_string()), ("memory".to_string(), "/m/ct".to_string())].into();
        let mut ms = fixture::hybrid_mounts(root.path());
        let blkio = Mount {
            dir: root.path().join("blkio"),
            controllers: vec!["blkio".into()],
            v2: false,
            options: "blkio".into(),
        };
        ms.push(blkio);
        let cg = Cgroup::open_with(root.path(), "/d/ct".into(), per, false, "ct", Layout::Hybrid, ms);
        let e = cg.apply(&far, &[]).unwrap_err().to_string();
        assert!(e.contains("linux.resources.blockIO") && e.contains("/b/ct") && e.contains("/d/ct"), "{e}");
    }

    #[test]
    fn a_v1_update_leaves_the_device_cgroup_alone() {
        let root = tempfile::tempdir().unwrap();
        let cg = fixture::cgroup(root.path(), Layout::Hybrid, "/t/ct");
        put(&root.path().join("pids/t/ct"), "pids.max", "");
        // No devices.* files: writing a rule would fail naming one.
        let r: LinuxResources = serde_json::from_value(serde_json::json!({
            "devices": [{"allow": false, "access": "rwm"}], "pids": {"limit": 9}
        }))
        .unwrap();
        let d = devices(serde_json::json!([{"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229}]));
        cg.update(&r, &d).unwrap();
        assert_eq!(read_trim(&root.path().join("pids/t/ct/pids.max")), "9");
        let e = cg.apply(&r, &d).unwrap_err().to_string();
        assert!(e.contains("devices/t/ct/devices.deny"), "create writes the rules: {e}");
    }
}
