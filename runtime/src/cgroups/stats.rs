//! libcgroups' statistics in the JSON shape of runc's `events` (runc
//! `types/events.go`): `{"type":"stats","id":…,"data":{cpu, cpuset, memory,
//! pids, blkio, hugetlb, intel_rdt, network_interfaces}}`. Go's `omitempty`
//! on numbers is mirrored with `skip_serializing_if`; structs are always
//! present, as in Go.

use std::collections::{BTreeMap, HashMap};

use libcgroups::stats::{BlkioDeviceStat, Stats};
use serde::Serialize;

fn zero(v: &u64) -> bool {
    *v == 0
}

/// The `data` of a stats event.
#[derive(Debug, Default, Serialize)]
pub struct StatsData {
    pub cpu: Cpu,
    pub cpuset: CpuSet,
    pub memory: Memory,
    pub pids: Pids,
    pub blkio: Blkio,
    pub hugetlb: BTreeMap<String, Hugetlb>,
    pub intel_rdt: serde_json::Map<String, serde_json::Value>,
    pub network_interfaces: Option<Vec<serde_json::Value>>,
}

#[derive(Debug, Default, Serialize)]
pub struct Cpu {
    pub usage: CpuUsage,
    pub throttling: Throttling,
}

#[derive(Debug, Default, Serialize)]
pub struct CpuUsage {
    #[serde(skip_serializing_if = "zero")]
    pub total: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub percpu: Vec<u64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub percpu_kernel: Vec<u64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub percpu_user: Vec<u64>,
    pub kernel: u64,
    pub user: u64,
}

#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Throttling {
    #[serde(skip_serializing_if = "zero")]
    pub periods: u64,
    #[serde(skip_serializing_if = "zero")]
    pub throttled_periods: u64,
    #[serde(skip_serializing_if = "zero")]
    pub throttled_time: u64,
}

#[derive(Debug, Default, Serialize)]
pub struct CpuSet {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cpus: Vec<u16>,
    pub cpu_exclusive: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mems: Vec<u16>,
    pub mem_hardwall: u64,
    pub mem_exclusive: u64,
    pub memory_migrate: u64,
    pub memory_spread_page: u64,
    pub memory_spread_slab: u64,
    pub memory_pressure: u64,
    pub sched_load_balance: u64,
    pub sched_relax_domain_level: i64,
}

#[derive(Debug, Default, Serialize)]
pub struct MemoryEntry {
    pub limit: u64,
    #[serde(skip_serializing_if = "zero")]
    pub usage: u64,
    #[serde(skip_serializing_if = "zero")]
    pub max: u64,
    pub failcnt: u64,
}

#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Memory {
    #[serde(skip_serializing_if = "zero")]
    pub cache: u64,
    pub usage: MemoryEntry,
    pub swap: MemoryEntry,
    pub kernel: MemoryEntry,
    #[serde(rename = "kernelTCP")]
    pub kernel_tcp: MemoryEntry,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub raw: BTreeMap<String, u64>,
}

#[derive(Debug, Default, Serialize)]
pub struct Pids {
    #[serde(skip_serializing_if = "zero")]
    pub current: u64,
    #[serde(skip_serializing_if = "zero")]
    pub limit: u64,
}

#[derive(Debug, Default, Serialize)]
pub struct BlkioEntry {
    #[serde(skip_serializing_if = "zero")]
    pub major: u64,
    #[serde(skip_serializing_if = "zero")]
    pub minor: u64,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub op: String,
    #[serde(skip_serializing_if = "zero")]
    pub value: u64,
}

#[derive(Debug, Default, Serialize)]
pub struct Blkio {
    #[serde(rename = "ioServiceBytesRecursive", skip_serializing_if = "Vec::is_empty")]
    pub io_service_bytes_recursive: Vec<BlkioEntry>,
    #[serde(rename = "ioServicedRecursive", skip_serializing_if = "Vec::is_empty")]
    pub io_serviced_recursive: Vec<BlkioEntry>,
    #[serde(rename = "ioQueueRecursive", skip_serializing_if = "Vec::is_empty")]
    pub io_queued_recursive: Vec<BlkioEntry>,
    #[serde(rename = "ioServiceTimeRecursive", skip_serializing_if = "Vec::is_empty")]
    pub io_service_time_recursive: Vec<BlkioEntry>,
    #[serde(rename = "ioWaitTimeRecursive", skip_serializing_if = "Vec::is_empty")]
    pub io_wait_time_recursive: Vec<BlkioEntry>,
    #[serde(rename = "ioMergedRecursive", skip_serializing_if = "Vec::is_empty")]
    pub io_merged_recursive: Vec<BlkioEntry>,
    #[serde(rename = "ioTimeRecursive", skip_serializing_if = "Vec::is_empty")]
    pub io_time_recursive: Vec<BlkioEntry>,
    #[serde(rename = "sectorsRecursive", skip_serializing_if = "Vec::is_empty")]
    pub sectors_recursive: Vec<BlkioEntry>,
}

#[derive(Debug, Default, Serialize)]
pub struct Hugetlb {
    #[serde(skip_serializing_if = "zero")]
    pub usage: u64,
    #[serde(skip_serializing_if = "zero")]
    pub max: u64,
    pub failcnt: u64,
}

/// A cgroup "unlimited" reads as a huge number (v1) or is turned into
/// u64::MAX by libcgroups (v2); runc reports both as they are.
fn entry(d: &libcgroups::stats::MemoryData) -> MemoryEntry {
    MemoryEntry { limit: d.limit, usage: d.usage, max: d.max_usage, failcnt: d.fail_count }
}

fn blk(v: &[BlkioDeviceStat]) -> Vec<BlkioEntry> {
    v.iter()
        .map(|s| BlkioEntry {
            major: s.major,
            minor: s.minor,
            op: s.op_type.clone().unwrap_or_default(),
            value: s.value,
        })
        .collect()
}

/// Converts libcgroups' stats; `cpus`/`mems` are the cpuset lists
/// (libcgroups does not read them). runc reports cpu times in nanoseconds;
/// libcgroups passes on what the files hold: on v2 microseconds, on v1
/// nanoseconds except `cpuacct.stat`'s user/system, in USER_HZ ticks (100
/// per second in the kernel's ABI).
pub(crate) fn from_libcgroups(s: &Stats, cpus: &str, mems: &str, v2: bool) -> StatsData {
    let u = &s.cpu.usage;
    let (total, times, throttled) = if v2 { (1000, 1000, 1000) } else { (1, 10_000_000, 1) };
    let m = &s.memory;
    let raw: BTreeMap<String, u64> = m.stats.iter().map(|(k, v)| (k.clone(), *v)).collect();
    StatsData {
        cpu: Cpu {
            usage: CpuUsage {
                total: u.usage_total * total,
                percpu: u.per_core_usage_total.clone(),
                percpu_kernel: u.per_core_usage_kernel.clone(),
                percpu_user: u.per_core_usage_user.clone(),
                kernel: u.usage_kernel * times,
                user: u.usage_user * times,
            },
            throttling: Throttling {
                periods: s.cpu.throttling.periods,
                throttled_periods: s.cpu.throttling.throttled_periods,
                throttled_time: s.cpu.throttling.throttled_time * throttled,
            },
        },
        cpuset: CpuSet { cpus: parse_list(cpus), mems: parse_list(mems), ..Default::default() },
        memory: Memory {
            cache: m.cache,
            usage: entry(&m.memory),
            swap: entry(&m.memswap),
            kernel: entry(&m.kernel),
            kernel_tcp: entry(&m.kernel_tcp),
            raw,
        },
        pids: Pids { current: s.pids.current, limit: s.pids.limit },
        blkio: Blkio {
            io_service_bytes_recursive: blk(&s.blkio.service_bytes),
            io_serviced_recursive: blk(&s.blkio.serviced),
            io_queued_recursive: blk(&s.blkio.queued),
            io_service_time_recursive: blk(&s.blkio.service_time),
            io_wait_time_recursive: blk(&s.blkio.wait_time),
            io_merged_recursive: blk(&s.blkio.merged),
            io_time_recursive: blk(&s.blkio.time),
            sectors_recursive: blk(&s.blkio.sectors),
        },
        hugetlb: hugetlb(&s.hugetlb),
        intel_rdt: serde_json::Map::new(),
        network_interfaces: None,
    }
}

fn hugetlb(h: &HashMap<String, libcgroups::stats::HugeTlbStats>) -> BTreeMap<String, Hugetlb> {
    h.iter().map(|(k, v)| (k.clone(), Hugetlb { usage: v.usage, max: v.max_usage, failcnt: v.fail_count })).collect()
}

/// Parses a cpuset list such as `0-2,4` (an unparsable part is skipped).
pub(crate) fn parse_list(s: &str) -> Vec<u16> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<u16>(), b.parse::<u16>()) {
                    out.extend(a..=b);
                }
            }
            None => out.extend(part.parse::<u16>().ok()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuset_lists_parse() {
        assert_eq!(parse_list("0-2,4\n"), vec![0, 1, 2, 4]);
        assert_eq!(parse_list(""), Vec::<u16>::new());
    }

    #[test]
    fn stats_have_runcs_json_shape() {
        let mut s = Stats::default();
        s.cpu.usage.usage_total = 5;
        s.cpu.usage.per_core_usage_total = vec![2, 3];
        s.cpu.throttling.throttled_periods = 4;
        s.memory.memory.limit = 1 << 20;
        s.memory.memory.fail_count = 9;
        s.memory.stats.insert("rss".into(), 7);
        s.pids.current = 2;
        s.pids.limit = 16;
        s.hugetlb.insert("2MB".into(), Default::default());
        s.blkio.service_bytes.push(BlkioDeviceStat { major: 8, minor: 0, op_type: Some("Read".into()), value: 10 });
        let v = serde_json::to_value(from_libcgroups(&s, "0-1", "0", false)).unwrap();
        assert_eq!(v["cpu"]["usage"]["total"], 5);
        assert_eq!(v["cpu"]["usage"]["percpu"], serde_json::json!([2, 3]));
        assert_eq!(v["cpu"]["usage"]["kernel"], 0, "kernel/user are never omitted");
        assert!(v["cpu"]["usage"].get("percpu_kernel").is_none());
        assert_eq!(v["cpu"]["throttling"], serde_json::json!({"throttledPeriods": 4}));
        assert_eq!(v["cpuset"]["cpus"], serde_json::json!([0, 1]));
        assert_eq!(v["cpuset"]["sched_relax_domain_level"], 0);
        assert_eq!(v["memory"]["usage"], serde_json::json!({"limit": 1048576, "failcnt": 9}));
        assert_eq!(v["memory"]["raw"]["rss"], 7);
        assert!(v["memory"].get("kernelTCP").is_some());
        assert_eq!(v["pids"], serde_json::json!({"current": 2, "limit": 16}));
        assert_eq!(v["hugetlb"]["2MB"], serde_json::json!({"failcnt": 0}));
        assert_eq!(
            v["blkio"]["ioServiceBytesRecursive"][0],
            serde_json::json!({"major": 8, "op": "Read", "value": 10})
        );
        assert_eq!(v["intel_rdt"], serde_json::json!({}));
        assert!(v["network_interfaces"].is_null());
    }

    #[test]
    fn cpu_times_become_nanoseconds() {
        let mut s = Stats::default();
        s.cpu.usage.usage_total = 3;
        s.cpu.usage.usage_user = 2;
        s.cpu.throttling.throttled_time = 5;
        let v1 = from_libcgroups(&s, "", "", false).cpu;
        assert_eq!((v1.usage.total, v1.usage.user, v1.throttling.throttled_time), (3, 20_000_000, 5));
        let v2 = from_libcgroups(&s, "", "", true).cpu;
        assert_eq!((v2.usage.total, v2.usage.user, v2.throttling.throttled_time), (3000, 2000, 5000));
    }
}
