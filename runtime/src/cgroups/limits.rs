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
                if self.split() {
                    // libcgroups can't write to paths that differ per
                    // hierarchy: the rest is written here too.
                    apart::apply_others(&beyond, |c| self.v1_dir(c))?;
                    return self.write_burst(&r);
                }
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
            return self.apply(r, devices);
        }
        if self.layout == Layout::Unified {
            return self.apply(r, devices);
        }
        let mut r = r.clone();
        r.set_devices(None);
        self.apply(&r, &[])
    }
}

/// The blockIO, hugepage and network fields `r` sets, with the v1
/// controller each needs.
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

/// runc allows the device nodes `linux.devices` makes, after the spec's own
/// rules (libcgroups adds only its default set).
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
    fn split_hierarchies_take_every_limit_at_its_own_path() {
        let root = tempfile::tempdir().unwrap();
        let mut ms = fixture::hybrid_mounts(root.path());
        for name in ["blkio", "hugetlb", "net_cls,net_prio"] {
            let controllers = name.split(',').map(str::to_string).collect();
            ms.push(Mount { dir: root.path().join(name), controllers, v2: false, options: name.into() });
        }
        let per = [("memory", "/m/ct"), ("blkio", "/b/ct"), ("hugetlb", "/h/ct"), ("net_cls,net_prio", "/n/ct")]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .into();
        let cg = Cgroup::open_with(root.path(), "/d/ct".into(), per, false, "ct", Layout::Hybrid, ms);
        let files = [
            ("pids/d/ct", "pids.max"),
            ("devices/d/ct", "devices.deny"),
            ("memory/m/ct", "memory.limit_in_bytes"),
            ("blkio/b/ct", "blkio.weight"),
            ("blkio/b/ct", "blkio.weight_device"),
            ("blkio/b/ct", "blkio.throttle.read_bps_device"),
            ("hugetlb/h/ct", "hugetlb.2MB.limit_in_bytes"),
            ("net_cls,net_prio/n/ct", "net_cls.classid"),
            ("net_cls,net_prio/n/ct", "net_prio.ifpriomap"),
        ];
        for (dir, file) in files {
            put(&root.path().join(dir), file, "");
        }
        put(&root.path().join("devices/d/ct"), "devices.allow", "");
        let r: LinuxResources = serde_json::from_value(serde_json::json!({
            "devices": [{"allow": false, "access": "rwm"}], "pids": {"limit": 9}, "memory": {"limit": 1048576},
            "blockIO": {"weight": 100, "weightDevice": [{"major": 8, "minor": 0, "weight": 50}],
                        "throttleReadBpsDevice": [{"major": 8, "minor": 0, "rate": 1048576}]},
            "hugepageLimits": [{"pageSize": "2MB", "limit": 4194304}],
            "network": {"classID": 1048577, "priorities": [{"name": "eth0", "priority": 5}]}
        }))
        .unwrap();
        cg.apply(&r, &[]).unwrap();
        let got = |dir: &str, file: &str| read_trim(&root.path().join(dir).join(file));
        let want = ["9", "a *:* rwm", "1048576", "100", "8:0 50", "8:0 1048576", "4194304", "1048577", "eth0 5"];
        for ((dir, file), want) in files.iter().zip(want) {
            assert_eq!(got(dir, file), want, "{dir}/{file}");
        }
        // A page size is part of a file name: never a path.
        let mut bad = r.clone();
        bad.set_hugepage_limits(
            serde_json::from_value(serde_json::json!([{"pageSize": "2MB/../../x", "limit": 1}])).unwrap(),
        );
        let e = cg.apply(&bad, &[]).unwrap_err().to_string();
        assert!(e.contains("linux.resources.hugepageLimits.pageSize"), "{e}");
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
