//! Limits for a v1 cgroup, written straight to each controller's directory.
//!
//! libcgroups' v1 manager takes one path for every hierarchy and writes
//! the device rules on every apply, so it can't serve a cgroup whose paths
//! differ per hierarchy (a relative cgroupsPath from a caller whose own
//! cgroups differ, see `path`). For such a cgroup every limit is written
//! here: memory, cpu and cpuset ([`apply`]), the ones nearly every caller
//! sets, and blockIO, hugepages and network ([`apply_others`]). Any other
//! v1 cgroup that asks for no more than memory, cpu, cpuset and `v1`'s is
//! written here too, sparing the cost of libcgroups' manager; the rest of
//! its limits go to libcgroups.
//! Values mean what runc's fs driver makes of them: 0 leaves a file alone.
//!
//! The statistics of such a cgroup are read here too ([`stats`]): cpu,
//! memory and pids, each from its own hierarchy, in libcgroups' shape and
//! from the same files it reads. blockIO and hugepage statistics are left
//! empty.

use std::path::{Path, PathBuf};

use std::collections::HashMap;

use libcgroups::stats::{CpuThrottling, CpuUsage, MemoryData, MemoryStats, Stats};
use oci_spec::runtime::{LinuxBlockIo, LinuxCpu, LinuxMemory, LinuxNetwork, LinuxResources};

use super::{io_err, read_trim, CgroupError, Result};

/// Writes `r`'s memory, cpu (less `burst`, which `limits` writes on every
/// v1 cgroup) and cpuset blocks under `dir(controller)`.
pub(super) fn apply(r: &LinuxResources, dir: impl Fn(&str) -> PathBuf) -> Result<()> {
    if let Some(m) = r.memory() {
        memory(m, &dir("memory"))?;
    }
    if let Some(c) = r.cpu() {
        cpu(c, &dir("cpu"))?;
        let set = |v: &Option<String>| v.as_ref().filter(|s| !s.is_empty()).cloned();
        if let Some(cpus) = set(c.cpus()) {
            write(&dir("cpuset"), "cpuset.cpus", &cpus)?;
        }
        if let Some(mems) = set(c.mems()) {
            write(&dir("cpuset"), "cpuset.mems", &mems)?;
        }
    }
    Ok(())
}

/// Writes `r`'s blockIO, hugepageLimits and network blocks under
/// `dir(controller)`, in the files runc's fs driver writes.
pub(super) fn apply_others(r: &LinuxResources, dir: impl Fn(&str) -> PathBuf) -> Result<()> {
    if let Some(b) = r.block_io() {
        blkio(b, &dir("blkio"))?;
    }
    for h in r.hugepage_limits().iter().flatten() {
        let size = h.page_size();
        // The size becomes part of a file name: only a size such as the
        // kernel names its files by ("2MB", "1GB"), never a path.
        let (digits, unit) = size.split_at(size.find(|c: char| !c.is_ascii_digit()).unwrap_or(size.len()));
        if digits.is_empty() || !["KB", "MB", "GB"].contains(&unit) {
            let why = format!("{size:?} is not a page size such as \"2MB\"");
            return Err(CgroupError::Refused { field: "linux.resources.hugepageLimits.pageSize".into(), why });
        }
        let d = dir("hugetlb");
        write(&d, &format!("hugetlb.{size}.limit_in_bytes"), &h.limit().to_string())?;
        // The reservation limit too, where the kernel has one (5.7 and
        // later), as runc 1.2 and libcgroups set it.
        let rsvd = format!("hugetlb.{size}.rsvd.limit_in_bytes");
        if d.join(&rsvd).exists() {
            write(&d, &rsvd, &h.limit().to_string())?;
        }
    }
    if let Some(n) = r.network() {
        network(n, dir)?;
    }
    Ok(())
}

fn blkio(b: &LinuxBlockIo, d: &Path) -> Result<()> {
    // CFQ's weight files, or BFQ's where CFQ's are gone (runc's choice).
    let (weight, weight_device) = match d.join("blkio.weight").exists() {
        true => ("blkio.weight", "blkio.weight_device"),
        false => ("blkio.bfq.weight", "blkio.bfq.weight_device"),
    };
    if let Some(w) = b.weight().filter(|w| *w != 0) {
        write(d, weight, &w.to_string())?;
    }
    if let Some(w) = b.leaf_weight().filter(|w| *w != 0) {
        write(d, "blkio.leaf_weight", &w.to_string())?;
    }
    for wd in b.weight_device().iter().flatten() {
        let dev = format!("{}:{}", wd.major(), wd.minor());
        if let Some(w) = wd.weight().filter(|w| *w != 0) {
            write(d, weight_device, &format!("{dev} {w}"))?;
        }
        if let Some(w) = wd.leaf_weight().filter(|w| *w != 0) {
            write(d, "blkio.leaf_weight_device", &format!("{dev} {w}"))?;
        }
    }
    let throttles = [
        ("blkio.throttle.read_bps_device", b.throttle_read_bps_device()),
        ("blkio.throttle.write_bps_device", b.throttle_write_bps_device()),
        ("blkio.throttle.read_iops_device", b.throttle_read_iops_device()),
        ("blkio.throttle.write_iops_device", b.throttle_write_iops_device()),
    ];
    for (file, list) in throttles {
        for t in list.iter().flatten() {
            write(d, file, &format!("{}:{} {}", t.major(), t.minor(), t.rate()))?;
        }
    }
    Ok(())
}

fn network(n: &LinuxNetwork, dir: impl Fn(&str) -> PathBuf) -> Result<()> {
    if let Some(id) = n.class_id() {
        write(&dir("net_cls"), "net_cls.classid", &id.to_string())?;
    }
    for p in n.priorities().iter().flatten() {
        write(&dir("net_prio"), "net_prio.ifpriomap", &format!("{} {}", p.name(), p.priority()))?;
    }
    Ok(())
}

/// `r` less what [`apply`] writes: what is left for libcgroups.
pub(super) fn rest(r: &LinuxResources) -> LinuxResources {
    let mut rest = r.clone();
    rest.set_memory(None).set_cpu(None);
    rest
}

fn memory(m: &LinuxMemory, d: &Path) -> Result<()> {
    let limit = m.limit().filter(|v| *v != 0);
    // No memory limit and no swap given: memory+swap goes unlimited too
    // (runc's rule; the kernel refuses a memory limit above memory+swap),
    // where there is swap accounting to set.
    let unlimited = limit == Some(-1) && d.join("memory.memsw.limit_in_bytes").exists();
    let swap = m.swap().filter(|v| *v != 0).or(unlimited.then_some(-1));
    // memory+swap may never go below memory: raise it first when it grows
    // past the current memory limit, as runc does.
    let current = read_trim(&d.join("memory.limit_in_bytes")).parse::<i64>().unwrap_or(-1);
    let swap_first = swap.is_some_and(|s| s == -1 || (current != -1 && current < s));
    if swap_first {
        write(d, "memory.memsw.limit_in_bytes", &swap.unwrap_or_default().to_string())?;
    }
    if let Some(l) = limit {
        write(d, "memory.limit_in_bytes", &l.to_string())?;
    }
    if let (Some(s), false) = (swap, swap_first) {
        write(d, "memory.memsw.limit_in_bytes", &s.to_string())?;
    }
    if let Some(v) = m.reservation().filter(|v| *v != 0) {
        write(d, "memory.soft_limit_in_bytes", &v.to_string())?;
    }
    if let Some(v) = m.swappiness() {
        write(d, "memory.swappiness", &v.to_string())?;
    }
    if m.disable_oom_killer() == Some(true) {
        write(d, "memory.oom_control", "1")?;
    }
    Ok(())
}

fn cpu(c: &LinuxCpu, d: &Path) -> Result<()> {
    let files = [
        ("cpu.shares", c.shares().filter(|v| *v != 0).map(|v| v.to_string())),
        ("cpu.cfs_period_us", c.period().filter(|v| *v != 0).map(|v| v.to_string())),
        ("cpu.cfs_quota_us", c.quota().filter(|v| *v != 0).map(|v| v.to_string())),
        ("cpu.rt_period_us", c.realtime_period().filter(|v| *v != 0).map(|v| v.to_string())),
        ("cpu.rt_runtime_us", c.realtime_runtime().filter(|v| *v != 0).map(|v| v.to_string())),
        ("cpu.idle", c.idle().map(|v| v.to_string())),
    ];
    for (file, value) in files {
        if let Some(v) = value {
            write(d, file, &v)?;
        }
    }
    Ok(())
}

/// Cpu, memory and pids statistics, each read under `dir(controller)`.
/// A file that can't be read reads as zero (memsw without swap accounting).
pub(super) fn stats(dir: impl Fn(&str) -> PathBuf) -> Stats {
    let mut s = Stats::default();
    let (acct, cpu, mem) = (dir("cpuacct"), dir("cpu"), dir("memory"));
    let num = |d: &Path, f: &str| read_trim(&d.join(f)).parse::<u64>().unwrap_or(0);
    let acct_stat = keyed(&acct.join("cpuacct.stat"));
    s.cpu.usage = CpuUsage {
        usage_total: num(&acct, "cpuacct.usage"),
        usage_user: acct_stat.get("user").copied().unwrap_or(0),
        usage_kernel: acct_stat.get("system").copied().unwrap_or(0),
        per_core_usage_total: read_trim(&acct.join("cpuacct.usage_percpu"))
            .split_whitespace()
            .filter_map(|v| v.parse().ok())
            .collect(),
        ..Default::default()
    };
    let cpu_stat = keyed(&cpu.join("cpu.stat"));
    let at = |k: &str| cpu_stat.get(k).copied().unwrap_or(0);
    s.cpu.throttling = CpuThrottling {
        periods: at("nr_periods"),
        throttled_periods: at("nr_throttled"),
        throttled_time: at("throttled_time"),
    };
    let data = |prefix: &str| MemoryData {
        usage: num(&mem, &format!("{prefix}usage_in_bytes")),
        max_usage: num(&mem, &format!("{prefix}max_usage_in_bytes")),
        fail_count: num(&mem, &format!("{prefix}failcnt")),
        limit: num(&mem, &format!("{prefix}limit_in_bytes")),
    };
    let stat = keyed(&mem.join("memory.stat"));
    s.memory = MemoryStats {
        memory: data("memory."),
        memswap: data("memory.memsw."),
        kernel: data("memory.kmem."),
        kernel_tcp: data("memory.kmem.tcp."),
        cache: stat.get("cache").copied().unwrap_or(0),
        hierarchy: read_trim(&mem.join("memory.use_hierarchy")) == "1",
        stats: stat,
        ..Default::default()
    };
    if let Ok(p) = libcgroups::stats::pid_stats(&dir("pids")) {
        s.pids = p;
    }
    s
}

/// A flat-keyed cgroup file (`key value` lines).
fn keyed(p: &Path) -> HashMap<String, u64> {
    let text = std::fs::read_to_string(p).unwrap_or_default();
    let pair = |l: &str| {
        let (k, v) = l.split_once(' ')?;
        Some((k.to_string(), v.trim().parse().ok()?))
    };
    text.lines().filter_map(pair).collect()
}

/// One write, as the kernel wants cgroup values (no truncation).
fn write(dir: &Path, file: &str, value: &str) -> Result<()> {
    use std::io::Write;
    let p = dir.join(file);
    let mut f = std::fs::OpenOptions::new().write(true).open(&p).map_err(io_err("open", &p))?;
    f.write_all(value.as_bytes()).map_err(io_err("write", &p))
}

#[cfg(test)]
mod tests {
    use super::super::fixture::put;
    use super::*;

    fn files(dir: &Path, names: &[&str]) {
        for n in names {
            put(dir, n, "");
        }
    }

    #[test]
    fn each_block_goes_to_its_own_controllers_directory() {
        let root = tempfile::tempdir().unwrap();
        let at = |c: &str| root.path().join(c).join("x");
        files(&at("memory"), &["memory.limit_in_bytes", "memory.soft_limit_in_bytes", "memory.oom_control"]);
        files(&at("cpu"), &["cpu.shares", "cpu.cfs_period_us", "cpu.cfs_quota_us"]);
        files(&at("cpuset"), &["cpuset.cpus"]);
        let r: LinuxResources = serde_json::from_value(serde_json::json!({
            "memory": {"limit": 1048576, "reservation": 4096, "disableOOMKiller": true},
            "cpu": {"shares": 512, "quota": 20000, "period": 100000, "cpus": "0", "mems": ""}
        }))
        .unwrap();
        apply(&r, at).unwrap();
        let got = |c: &str, f: &str| read_trim(&at(c).join(f));
        assert_eq!(got("memory", "memory.limit_in_bytes"), "1048576");
        assert_eq!(got("memory", "memory.soft_limit_in_bytes"), "4096");
        assert_eq!(got("memory", "memory.oom_control"), "1");
        assert_eq!(got("cpu", "cpu.shares"), "512");
        assert_eq!(got("cpu", "cpu.cfs_quota_us"), "20000");
        assert_eq!(got("cpu", "cpu.cfs_period_us"), "100000");
        assert_eq!(got("cpuset", "cpuset.cpus"), "0");
        assert!(!at("cpuset").join("cpuset.mems").exists(), "an empty mems is left alone");
        assert_eq!(rest(&r), LinuxResources::default());
    }

    #[test]
    fn statistics_come_from_each_controllers_directory() {
        let root = tempfile::tempdir().unwrap();
        let at = |c: &str| root.path().join(c).join("x");
        put(&at("cpuacct"), "cpuacct.usage", "5000\n");
        put(&at("cpuacct"), "cpuacct.stat", "user 3\nsystem 2\n");
        put(&at("cpuacct"), "cpuacct.usage_percpu", "4000 1000 \n");
        put(&at("cpu"), "cpu.stat", "nr_periods 10\nnr_throttled 4\nthrottled_time 777\n");
        put(&at("memory"), "memory.usage_in_bytes", "8192\n");
        put(&at("memory"), "memory.limit_in_bytes", "1048576\n");
        put(&at("memory"), "memory.stat", "cache 4096\nrss 4096\n");
        put(&at("pids"), "pids.current", "3\n");
        put(&at("pids"), "pids.max", "max\n");
        let s = stats(at);
        assert_eq!((s.cpu.usage.usage_total, s.cpu.usage.usage_user, s.cpu.usage.usage_kernel), (5000, 3, 2));
        assert_eq!(s.cpu.usage.per_core_usage_total, [4000, 1000]);
        assert_eq!((s.cpu.throttling.throttled_periods, s.cpu.throttling.throttled_time), (4, 777));
        assert_eq!((s.memory.memory.usage, s.memory.memory.limit, s.memory.cache), (8192, 1048576, 4096));
        assert_eq!(s.memory.memswap.usage, 0, "no swap accounting: zero");
        assert_eq!(s.pids.current, 3);
    }

    #[test]
    fn memory_and_swap_are_both_written() {
        let root = tempfile::tempdir().unwrap();
        let d = root.path();
        put(d, "memory.limit_in_bytes", "1000\n");
        put(d, "memory.memsw.limit_in_bytes", "");
        let m: LinuxMemory = serde_json::from_value(serde_json::json!({"limit": 2000, "swap": 5000})).unwrap();
        memory(&m, d).unwrap();
        assert_eq!(
            (read_trim(&d.join("memory.limit_in_bytes")), read_trim(&d.join("memory.memsw.limit_in_bytes"))),
            ("2000".into(), "5000".into())
        );
        let e = memory(&m, &d.join("gone")).unwrap_err().to_string();
        assert!(e.contains("gone/memory."), "{e}");
    }

    #[test]
    fn an_unlimited_memory_makes_memory_and_swap_unlimited_first() {
        let root = tempfile::tempdir().unwrap();
        let d = root.path();
        // Regular files stand in for cgroupfs ones, which a write replaces.
        put(d, "memory.limit_in_bytes", "");
        put(d, "memory.memsw.limit_in_bytes", "");
        let m: LinuxMemory = serde_json::from_value(serde_json::json!({"limit": -1})).unwrap();
        memory(&m, d).unwrap();
        assert_eq!(read_trim(&d.join("memory.memsw.limit_in_bytes")), "-1");
        assert_eq!(read_trim(&d.join("memory.limit_in_bytes")), "-1");
        std::fs::remove_file(d.join("memory.memsw.limit_in_bytes")).unwrap();
        memory(&m, d).expect("no swap accounting: the memory limit alone");
    }
}
