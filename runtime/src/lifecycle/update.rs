//! `update`: change a live container's limits (runc `update`).
//!
//! The new `LinuxResources` (from `-r FILE|-`, or built from runc's
//! individual flags by [`UpdateFlags::to_resources`]) is laid over the
//! container's current resources field by field, the result is checked and
//! applied as a whole, and kept in the container's config snapshot so the
//! next update starts from it. Device rules are never updated (runc's
//! `SkipDevices`). Runs in the runtime process.

use oci_spec::runtime::{LinuxBlockIo, LinuxCpu, LinuxMemory, LinuxPids, LinuxResources, Spec};

use super::state::Status;
use super::Container;
use crate::error::{Result, RuntimeError};
use crate::state::{write_atomic, CONFIG_FILE};

/// runc `update`'s individual flags, as given on the command line.
#[derive(Debug, Default, Clone)]
pub struct UpdateFlags {
    pub blkio_weight: Option<u16>,
    pub cpu_period: Option<u64>,
    pub cpu_quota: Option<i64>,
    pub cpu_burst: Option<u64>,
    pub cpu_share: Option<u64>,
    pub cpu_rt_period: Option<u64>,
    pub cpu_rt_runtime: Option<i64>,
    pub cpuset_cpus: Option<String>,
    pub cpuset_mems: Option<String>,
    pub cpu_idle: Option<i64>,
    /// Byte sizes: a number with an optional k/m/g/t/p suffix, or -1.
    pub memory: Option<String>,
    pub memory_reservation: Option<String>,
    pub memory_swap: Option<String>,
    pub pids_limit: Option<i64>,
    pub l3_cache_schema: Option<String>,
    pub mem_bw_schema: Option<String>,
}

impl UpdateFlags {
    /// The `LinuxResources` these flags ask for; unset flags stay unset.
    pub fn to_resources(&self) -> Result<LinuxResources> {
        if self.l3_cache_schema.is_some() || self.mem_bw_schema.is_some() {
            return Err(RuntimeError::unsupported("--l3-cache-schema/--mem-bw-schema", "Intel RDT is not supported"));
        }
        let bytes = |flag: &str, v: &Option<String>| -> Result<Option<i64>> {
            v.as_deref()
                .map(|s| parse_bytes(s).map_err(|e| RuntimeError::InvalidArgument(format!("--{flag}: {e}"))))
                .transpose()
        };
        let mut r = LinuxResources::default();
        let (limit, reservation, swap) = (
            bytes("memory", &self.memory)?,
            bytes("memory-reservation", &self.memory_reservation)?,
            bytes("memory-swap", &self.memory_swap)?,
        );
        if limit.is_some() || reservation.is_some() || swap.is_some() {
            let mut m = LinuxMemory::default();
            m.set_limit(limit).set_reservation(reservation).set_swap(swap);
            r.set_memory(Some(m));
        }
        let f = self;
        let cpu_set = f.cpu_period.is_some()
            || f.cpu_quota.is_some()
            || f.cpu_burst.is_some()
            || f.cpu_share.is_some()
            || f.cpu_rt_period.is_some()
            || f.cpu_rt_runtime.is_some()
            || f.cpuset_cpus.is_some()
            || f.cpuset_mems.is_some()
            || f.cpu_idle.is_some();
        if cpu_set {
            let mut c = LinuxCpu::default();
            c.set_period(f.cpu_period)
                .set_quota(f.cpu_quota)
                .set_burst(f.cpu_burst)
                .set_shares(f.cpu_share)
                .set_realtime_period(f.cpu_rt_period)
                .set_realtime_runtime(f.cpu_rt_runtime)
                .set_cpus(f.cpuset_cpus.clone())
                .set_mems(f.cpuset_mems.clone())
                .set_idle(f.cpu_idle);
            r.set_cpu(Some(c));
        }
        if let Some(w) = f.blkio_weight {
            let mut b = LinuxBlockIo::default();
            b.set_weight(Some(w));
            r.set_block_io(Some(b));
        }
        if let Some(l) = f.pids_limit {
            let mut p = LinuxPids::default();
            p.set_limit(l);
            r.set_pids(Some(p));
        }
        Ok(r)
    }
}

/// A byte size as runc takes it (docker's `RAMInBytes`): digits with an
/// optional fraction, then an optional binary unit `k m g t p` (any case,
/// optionally followed by `i` and/or `b`); `-1` means unlimited.
pub fn parse_bytes(s: &str) -> std::result::Result<i64, String> {
    let t = s.trim();
    if t == "-1" {
        return Ok(-1);
    }
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let unit = unit.trim_start().to_ascii_lowercase();
    let unit = unit.trim_end_matches('b').trim_end_matches('i');
    let mult: f64 = match unit {
        "" => 1.0,
        "k" => 1024.0,
        "m" => 1024f64.powi(2),
        "g" => 1024f64.powi(3),
        "t" => 1024f64.powi(4),
        "p" => 1024f64.powi(5),
        _ => return Err(format!("invalid size {s:?}")),
    };
    let n: f64 = num.parse().map_err(|_| format!("invalid size {s:?}"))?;
    let bytes = (n * mult).round();
    if !(0.0..=i64::MAX as f64).contains(&bytes) {
        return Err(format!("invalid size {s:?}: out of range"));
    }
    #[allow(clippy::cast_possible_truncation, reason = "in range, checked above")]
    Ok(bytes as i64)
}

/// Lays `upd` over `base`: every field `upd` sets wins, the rest stays.
/// Device rules always stay. A memory limit of -1 without a swap value
/// makes swap unlimited too (runc).
pub(crate) fn merge(base: &LinuxResources, upd: &LinuxResources) -> LinuxResources {
    let mut out = base.clone();
    if let Some(u) = upd.memory() {
        out.set_memory(Some(merge_memory(base.memory().unwrap_or_default(), u)));
    }
    if let Some(u) = upd.cpu() {
        out.set_cpu(Some(merge_cpu(base.cpu().clone().unwrap_or_default(), u)));
    }
    if upd.pids().is_some() {
        out.set_pids(*upd.pids());
    }
    if let Some(u) = upd.block_io() {
        out.set_block_io(Some(merge_block_io(base.block_io().clone().unwrap_or_default(), u)));
    }
    if upd.hugepage_limits().is_some() {
        out.set_hugepage_limits(upd.hugepage_limits().clone());
    }
    if upd.network().is_some() {
        out.set_network(upd.network().clone());
    }
    if upd.rdma().is_some() {
        out.set_rdma(upd.rdma().clone());
    }
    if let Some(u) = upd.unified() {
        let mut map = base.unified().clone().unwrap_or_default();
        map.extend(u.iter().map(|(k, v)| (k.clone(), v.clone())));
        out.set_unified(Some(map));
    }
    out
}

fn merge_memory(old: LinuxMemory, u: &LinuxMemory) -> LinuxMemory {
    let mut m = old;
    m.set_limit(u.limit().or(old.limit()))
        .set_reservation(u.reservation().or(old.reservation()))
        .set_swap(u.swap().or(old.swap()))
        .set_swappiness(u.swappiness().or(old.swappiness()))
        .set_disable_oom_killer(u.disable_oom_killer().or(old.disable_oom_killer()))
        .set_use_hierarchy(u.use_hierarchy().or(old.use_hierarchy()))
        .set_check_before_update(u.check_before_update().or(old.check_before_update()));
    if u.limit() == Some(-1) && u.swap().is_none() {
        m.set_swap(Some(-1));
    }
    m
}

fn merge_cpu(old: LinuxCpu, u: &LinuxCpu) -> LinuxCpu {
    let mut c = old.clone();
    c.set_shares(u.shares().or(old.shares()))
        .set_quota(u.quota().or(old.quota()))
        .set_burst(u.burst().or(old.burst()))
        .set_period(u.period().or(old.period()))
        .set_realtime_runtime(u.realtime_runtime().or(old.realtime_runtime()))
        .set_realtime_period(u.realtime_period().or(old.realtime_period()))
        .set_cpus(u.cpus().clone().or(old.cpus().clone()))
        .set_mems(u.mems().clone().or(old.mems().clone()))
        .set_idle(u.idle().or(old.idle()));
    c
}

fn merge_block_io(old: LinuxBlockIo, u: &LinuxBlockIo) -> LinuxBlockIo {
    let keep = |new: &Option<Vec<_>>, old: &Option<Vec<_>>| new.clone().or(old.clone());
    let mut b = old.clone();
    b.set_weight(u.weight().or(old.weight()))
        .set_leaf_weight(u.leaf_weight().or(old.leaf_weight()))
        .set_weight_device(u.weight_device().clone().or(old.weight_device().clone()))
        .set_throttle_read_bps_device(keep(u.throttle_read_bps_device(), old.throttle_read_bps_device()))
        .set_throttle_write_bps_device(keep(u.throttle_write_bps_device(), old.throttle_write_bps_device()))
        .set_throttle_read_iops_device(keep(u.throttle_read_iops_device(), old.throttle_read_iops_device()))
        .set_throttle_write_iops_device(keep(u.throttle_write_iops_device(), old.throttle_write_iops_device()));
    b
}

impl Container {
    /// Applies `upd` over the container's current resources. The container
    /// must be created, running or paused.
    pub fn update(&self, upd: &LinuxResources) -> Result<()> {
        if self.status() == Status::Stopped {
            return Err(RuntimeError::NotRunning);
        }
        let mut spec: Spec = self.config()?;
        let mut linux = spec.linux().clone().unwrap_or_default();
        let mut upd = upd.clone();
        crate::cgroups::drop_ignored(&mut upd).iter().for_each(|w| crate::warn::warn(w));
        let merged = merge(&linux.resources().clone().unwrap_or_default(), &upd);
        let cg = self.cgroup_required()?;
        cg.check(&merged)?;
        cg.update(&merged, linux.devices().as_deref().unwrap_or(&[]))?;
        linux.set_resources(Some(merged));
        spec.set_linux(Some(linux));
        let bytes = serde_json::to_vec(&spec).map_err(|e| RuntimeError::InvalidSpec(format!("encode config: {e}")))?;
        write_atomic(&self.lock.path(CONFIG_FILE), &bytes, 0o600)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_like_runc() {
        assert_eq!(parse_bytes("-1").unwrap(), -1);
        assert_eq!(parse_bytes("1024").unwrap(), 1024);
        assert_eq!(parse_bytes("10k").unwrap(), 10 * 1024);
        assert_eq!(parse_bytes("64M").unwrap(), 64 << 20);
        assert_eq!(parse_bytes("1.5g").unwrap(), 3 << 29);
        assert_eq!(parse_bytes("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_bytes("3 mb").unwrap(), 3 << 20);
        assert!(parse_bytes("12x").is_err());
        assert!(parse_bytes("").is_err());
    }

    #[test]
    fn flags_become_resources_and_unset_flags_stay_unset() {
        let f = UpdateFlags {
            memory: Some("32m".into()),
            cpu_quota: Some(-1),
            cpu_period: Some(100_000),
            cpuset_cpus: Some("0".into()),
            pids_limit: Some(20),
            blkio_weight: Some(300),
            ..Default::default()
        };
        let v = serde_json::to_value(f.to_resources().unwrap()).unwrap();
        assert_eq!(v["memory"], serde_json::json!({"limit": 32 << 20}));
        assert_eq!(v["cpu"], serde_json::json!({"quota": -1, "period": 100000, "cpus": "0"}));
        assert_eq!(v["pids"], serde_json::json!({"limit": 20}));
        assert_eq!(v["blockIO"], serde_json::json!({"weight": 300}));
        let none = serde_json::to_value(UpdateFlags::default().to_resources().unwrap()).unwrap();
        assert_eq!(none, serde_json::json!({}));
        let e = UpdateFlags { memory: Some("lots".into()), ..Default::default() }.to_resources().unwrap_err();
        assert!(e.to_string().contains("--memory"), "{e}");
        assert!(UpdateFlags { l3_cache_schema: Some("L3:0=f".into()), ..Default::default() }.to_resources().is_err());
    }

    fn res(v: serde_json::Value) -> LinuxResources {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn updates_merge_field_by_field_and_keep_device_rules() {
        let base = res(serde_json::json!({
            "devices": [{"allow": false, "access": "rwm"}],
            "memory": {"limit": 100, "swap": 200, "swappiness": 10},
            "cpu": {"shares": 512, "cpus": "0-1"},
            "pids": {"limit": 10},
            "unified": {"memory.high": "90"}
        }));
        let upd = res(serde_json::json!({
            "devices": [{"allow": true, "access": "rwm"}],
            "memory": {"limit": 150},
            "cpu": {"quota": 5000},
            "unified": {"pids.max": "7"}
        }));
        let v = serde_json::to_value(merge(&base, &upd)).unwrap();
        assert_eq!(v["devices"], serde_json::json!([{"allow": false, "access": "rwm"}]));
        assert_eq!(v["memory"], serde_json::json!({"limit": 150, "swap": 200, "swappiness": 10}));
        assert_eq!(v["cpu"], serde_json::json!({"shares": 512, "quota": 5000, "cpus": "0-1"}));
        assert_eq!(v["pids"], serde_json::json!({"limit": 10}));
        assert_eq!(v["unified"], serde_json::json!({"memory.high": "90", "pids.max": "7"}));
        // An unlimited memory limit without a swap value lifts swap too.
        let v = serde_json::to_value(merge(&base, &res(serde_json::json!({"memory": {"limit": -1}})))).unwrap();
        assert_eq!(
            (v["memory"]["limit"].clone(), v["memory"]["swap"].clone()),
            (serde_json::json!(-1), serde_json::json!(-1))
        );
    }
}
