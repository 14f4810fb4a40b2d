//! Which `linux.resources` fields this host can enforce, decided before
//! anything is made (house style H4): every field that is set is either
//! applied by libcgroups or refused here with an error naming it. Nothing is
//! silently dropped.
//!
//! Pure: the host's layout and controllers come in as a [`Host`] value.

use std::collections::BTreeSet;

use oci_spec::runtime::{LinuxCpu, LinuxMemory, LinuxNetwork, LinuxResources};

/// The cgroup layout of a host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// Only v1 hierarchies.
    Legacy,
    /// v1 hierarchies plus a cgroup2 mount (`/sys/fs/cgroup/unified`) that
    /// tinyrun places the container in but does not use for limits.
    Hybrid,
    /// Pure cgroup v2.
    Unified,
}

/// What the host offers.
#[derive(Debug, Clone)]
pub(crate) struct Host {
    pub layout: Layout,
    /// v1: the mounted controllers; v2: the root's `cgroup.controllers`.
    pub controllers: BTreeSet<String>,
}

/// A field that can't be applied here, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub field: String,
    pub why: String,
}

fn refuse(field: &str, why: impl Into<String>) -> Result<(), Refusal> {
    Err(Refusal { field: format!("linux.resources.{field}"), why: why.into() })
}

/// Clears the fields runc ignores with a warning and returns the warnings:
/// kernel memory limits are deprecated by the runtime spec and gone from
/// the kernel (v1 stopped honouring them in 5.4, v2 never had them), and
/// callers such as Docker's `update` still send them.
pub(crate) fn drop_ignored(r: &mut LinuxResources) -> Vec<String> {
    let Some(mut m) = *r.memory() else { return Vec::new() };
    let mut warnings = Vec::new();
    for (field, set) in [("kernel", m.kernel().is_some()), ("kernelTCP", m.kernel_tcp().is_some())] {
        if set {
            warnings.push(format!(
                "linux.resources.memory.{field} is ignored: kernel memory limits are deprecated by the runtime spec and no longer enforced by the kernel"
            ));
        }
    }
    if !warnings.is_empty() {
        m.set_kernel(None).set_kernel_tcp(None);
        r.set_memory(Some(m));
    }
    warnings
}

/// Checks that do not depend on the host.
pub(crate) fn check_spec(r: &LinuxResources) -> Result<(), Refusal> {
    if let Some(m) = r.memory() {
        if m.swappiness().is_some_and(|s| s > 100) {
            return refuse("memory.swappiness", "must be between 0 and 100");
        }
        if m.use_hierarchy() == Some(false) {
            return refuse("memory.useHierarchy", "the kernel always uses the hierarchy; false can't be honoured");
        }
    }
    if r.rdma().as_ref().is_some_and(|m| !m.is_empty()) {
        return refuse("rdma", "the rdma controller is not implemented by tinyrun");
    }
    for key in r.unified().iter().flat_map(|u| u.keys()) {
        let Some((ctrl, file)) = key.split_once('.') else {
            return refuse(&format!("unified[{key:?}]"), "a key must name a cgroup file such as \"memory.high\"");
        };
        if key.contains('/') || ctrl.is_empty() || file.is_empty() || key.starts_with('.') {
            return refuse(&format!("unified[{key:?}]"), "a key must name a file in the container's cgroup");
        }
        // The runtime owns membership, delegation and the freezer.
        if ctrl == "cgroup" && ["procs", "threads", "subtree_control", "type", "kill", "freeze"].contains(&file) {
            return refuse(&format!("unified[{key:?}]"), "this file is managed by the runtime");
        }
    }
    Ok(())
}

/// Checks for this host: the controller each set field needs must exist,
/// and version-specific fields must match the layout. The first refusal
/// wins, in the order of the fields below.
pub(crate) fn check_host(r: &LinuxResources, host: &Host) -> Result<(), Refusal> {
    check_spec(r)?;
    let v2 = host.layout == Layout::Unified;
    if let Some(m) = r.memory() {
        check_memory(m, host)?;
    }
    if let Some(c) = r.cpu() {
        check_cpu(c, host)?;
    }
    if r.pids().is_some() {
        need(host, "pids", "pids")?;
    }
    if let Some(b) = r.block_io() {
        need(host, "blockIO", if v2 { "io" } else { "blkio" })?;
        if v2 && (b.leaf_weight().is_some() || b.weight_device().iter().flatten().any(|w| w.leaf_weight().is_some())) {
            return only_v1("blockIO.leafWeight");
        }
    }
    if r.hugepage_limits().as_ref().is_some_and(|h| !h.is_empty()) {
        need(host, "hugepageLimits", "hugetlb")?;
    }
    if let Some(n) = r.network() {
        check_network(n, host)?;
    }
    if r.unified().as_ref().is_some_and(|u| !u.is_empty()) && !v2 {
        return refuse("unified", "needs a cgroup v2 host; this host's limits are on cgroup v1");
    }
    if r.devices().as_ref().is_some_and(|d| !d.is_empty()) && !v2 {
        need(host, "devices", "devices")?;
    }
    Ok(())
}

/// `field` needs controller `ctrl` on this host.
fn need(host: &Host, field: &str, ctrl: &str) -> Result<(), Refusal> {
    if host.controllers.contains(ctrl) {
        return Ok(());
    }
    let where_ = match host.layout {
        Layout::Hybrid if ctrl == "hugetlb" || ctrl == "rdma" || ctrl == "misc" => {
            " as a cgroup v1 hierarchy (on this hybrid host it sits on the v2 `unified` mount, which holds no limits)"
        }
        Layout::Unified => " in the root's cgroup.controllers",
        _ => " as a cgroup v1 hierarchy",
    };
    refuse(field, format!("the {ctrl} controller is not available on this host: it is not mounted{where_}"))
}

fn only_v1(field: &str) -> Result<(), Refusal> {
    refuse(field, "this is a cgroup v1 setting and this host has cgroup v2")
}

fn check_memory(m: &LinuxMemory, host: &Host) -> Result<(), Refusal> {
    let v2 = host.layout == Layout::Unified;
    let set = m.limit().is_some()
        || m.reservation().is_some()
        || m.swap().is_some()
        || m.swappiness().is_some()
        || m.disable_oom_killer().is_some();
    if set {
        need(host, "memory", "memory")?;
    }
    if v2 && m.swappiness().is_some() {
        return only_v1("memory.swappiness");
    }
    if v2 && m.disable_oom_killer() == Some(true) {
        return only_v1("memory.disableOOMKiller");
    }
    if v2 && m.check_before_update() == Some(true) {
        return refuse("memory.checkBeforeUpdate", "not implemented by tinyrun on cgroup v2");
    }
    Ok(())
}

fn check_cpu(c: &LinuxCpu, host: &Host) -> Result<(), Refusal> {
    if c.shares().is_some() || c.quota().is_some() || c.period().is_some() || c.burst().is_some() || c.idle().is_some()
    {
        need(host, "cpu", "cpu")?;
    }
    if c.realtime_runtime().is_some() || c.realtime_period().is_some() {
        if host.layout == Layout::Unified {
            return refuse("cpu.realtimeRuntime", "realtime scheduling budgets do not exist on cgroup v2");
        }
        need(host, "cpu.realtimeRuntime", "cpu")?;
    }
    if c.cpus().is_some() || c.mems().is_some() {
        need(host, "cpu.cpus", "cpuset")?;
    }
    Ok(())
}

fn check_network(n: &LinuxNetwork, host: &Host) -> Result<(), Refusal> {
    if host.layout == Layout::Unified {
        return only_v1("network");
    }
    if n.class_id().is_some() {
        need(host, "network.classID", "net_cls")?;
    }
    if n.priorities().as_ref().is_some_and(|p| !p.is_empty()) {
        need(host, "network.priorities", "net_prio")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(json: serde_json::Value) -> LinuxResources {
        serde_json::from_value(json).unwrap()
    }

    fn host(layout: Layout, ctrls: &[&str]) -> Host {
        Host { layout, controllers: ctrls.iter().map(|c| c.to_string()).collect() }
    }

    const V1: &[&str] = &["cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids"];
    const V2: &[&str] = &["cpu", "cpuset", "io", "memory", "hugetlb", "pids"];

    #[test]
    fn kernel_memory_is_dropped_with_a_warning() {
        let mut r: LinuxResources =
            serde_json::from_value(serde_json::json!({"memory": {"limit": 1048576, "kernel": 1, "kernelTCP": 2}}))
                .unwrap();
        let warnings = drop_ignored(&mut r);
        assert_eq!(warnings.len(), 2);
        assert!(warnings[0].contains("memory.kernel ") && warnings[1].contains("memory.kernelTCP"));
        let m = r.memory().unwrap();
        assert_eq!((m.kernel(), m.kernel_tcp(), m.limit()), (None, None, Some(1048576)));
        assert!(drop_ignored(&mut r).is_empty());
    }

    fn err(r: serde_json::Value, h: &Host) -> Refusal {
        check_host(&res(r), h).unwrap_err()
    }

    #[test]
    fn a_hybrid_host_names_the_missing_controller_only_when_asked_for() {
        let h = host(Layout::Hybrid, V1);
        check_host(&res(serde_json::json!({"memory": {"limit": 1}, "pids": {"limit": 3}})), &h).unwrap();
        let e = err(serde_json::json!({"hugepageLimits": [{"pageSize": "2MB", "limit": 0}]}), &h);
        assert_eq!(e.field, "linux.resources.hugepageLimits");
        assert!(e.why.contains("hugetlb") && e.why.contains("unified"), "{e:?}");
        let e = err(serde_json::json!({"network": {"classID": 7}}), &h);
        assert!(e.field.ends_with("network.classID") && e.why.contains("net_cls"), "{e:?}");
        let e = err(serde_json::json!({"unified": {"memory.high": "1"}}), &h);
        assert!(e.field.ends_with("unified") && e.why.contains("v2"), "{e:?}");
    }

    #[test]
    fn v1_only_fields_are_refused_on_v2() {
        let h = host(Layout::Unified, V2);
        check_host(&res(serde_json::json!({"memory": {"limit": 1, "swap": 2}, "unified": {"memory.high": "9"}})), &h)
            .unwrap();
        for (r, field) in [
            (serde_json::json!({"memory": {"swappiness": 10}}), "memory.swappiness"),
            (serde_json::json!({"memory": {"disableOOMKiller": true}}), "memory.disableOOMKiller"),
            (serde_json::json!({"cpu": {"realtimeRuntime": 10}}), "cpu.realtimeRuntime"),
            (serde_json::json!({"network": {"classID": 1}}), "network"),
            (serde_json::json!({"blockIO": {"leafWeight": 10}}), "blockIO.leafWeight"),
        ] {
            assert_eq!(err(r, &h).field, format!("linux.resources.{field}"));
        }
        let e = err(serde_json::json!({"pids": {"limit": 1}}), &host(Layout::Unified, &["memory"]));
        assert!(e.why.contains("pids") && e.why.contains("cgroup.controllers"), "{e:?}");
    }

    #[test]
    fn fields_nobody_applies_are_refused_everywhere() {
        let h = host(Layout::Unified, V2);
        assert!(err(serde_json::json!({"memory": {"swappiness": 101}}), &host(Layout::Legacy, V1)).why.contains("100"));
        assert!(err(serde_json::json!({"rdma": {"mlx": {"hcaHandles": 1}}}), &h).field.ends_with("rdma"));
        for key in ["../x.y", "memory", "cgroup.procs", "cgroup.freeze", "a/b.c"] {
            let e = err(serde_json::json!({"unified": {key: "1"}}), &h);
            assert!(e.field.contains(key), "{key}: {e:?}");
        }
    }
}
