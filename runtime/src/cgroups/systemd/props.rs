//! `linux.resources` as systemd unit properties, where systemd has one
//! (runc's systemd v2 driver sets the same ones). Everything else is
//! written to the cgroup's files afterwards; so are these, which keeps the
//! files right should systemd lack a property.

use super::wire::{Prop, Value};
use oci_spec::runtime::LinuxResources;

/// systemd's "infinity" for a u64 property.
const INFINITY: u64 = u64::MAX;

/// The unit properties for `r`, or a message naming the field systemd
/// can't take.
pub(super) fn resources(r: &LinuxResources) -> Result<Vec<Prop>, String> {
    let mut out = Vec::new();
    memory(r, &mut out)?;
    cpu(r, &mut out)?;
    if let Some(l) = r.pids().as_ref().map(|p| p.limit()).filter(|l| *l > 0 || *l == -1) {
        out.push(("TasksMax", Value::U64(limit(l))));
    }
    if let Some(w) = r.block_io().as_ref().and_then(|b| b.weight()).filter(|w| *w > 0) {
        out.push(("IOWeight", Value::U64(io_weight(w))));
    }
    Ok(out)
}

fn memory(r: &LinuxResources, out: &mut Vec<Prop>) -> Result<(), String> {
    let Some(m) = r.memory() else { return high(r, out) };
    let (limit_in, swap) = (m.limit().unwrap_or(0), m.swap().unwrap_or(0));
    if limit_in != 0 {
        out.push(("MemoryMax", Value::U64(limit(limit_in))));
    }
    if let Some(low) = m.reservation().filter(|l| *l != 0) {
        out.push(("MemoryLow", Value::U64(limit(low))));
    }
    match swap_max(swap, limit_in)? {
        0 => {}
        s => out.push(("MemorySwapMax", Value::U64(limit(s)))),
    }
    high(r, out)
}

/// `memory.high` has no OCI field but the unified map.
fn high(r: &LinuxResources, out: &mut Vec<Prop>) -> Result<(), String> {
    let Some(v) = r.unified().as_ref().and_then(|u| u.get("memory.high")) else { return Ok(()) };
    let n = match v.trim() {
        "max" => INFINITY,
        s => s.parse().map_err(|_| format!("linux.resources.unified[\"memory.high\"] {v:?} is not a number"))?,
    };
    out.push(("MemoryHigh", Value::U64(n)));
    Ok(())
}

fn cpu(r: &LinuxResources, out: &mut Vec<Prop>) -> Result<(), String> {
    let Some(c) = r.cpu() else { return Ok(()) };
    if let Some(s) = c.shares().filter(|s| *s != 0) {
        out.push(("CPUWeight", Value::U64(cpu_weight(s))));
    }
    let (quota, period) = (c.quota().unwrap_or(0), c.period().unwrap_or(0));
    if quota != 0 || period != 0 {
        out.push(("CPUQuotaPerSecUSec", Value::U64(quota_per_sec(quota, period))));
    }
    if period != 0 {
        out.push(("CPUQuotaPeriodUSec", Value::U64(period)));
    }
    if let Some(cpus) = c.cpus().as_ref().filter(|s| !s.is_empty()) {
        out.push(("AllowedCPUs", Value::Bytes(bitmask(cpus).map_err(|e| format!("linux.resources.cpu.cpus: {e}"))?)));
    }
    if let Some(mems) = c.mems().as_ref().filter(|s| !s.is_empty()) {
        let mask = bitmask(mems).map_err(|e| format!("linux.resources.cpu.mems: {e}"))?;
        out.push(("AllowedMemoryNodes", Value::Bytes(mask)));
    }
    Ok(())
}

/// -1 is "no limit".
fn limit(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(INFINITY)
}

/// OCI's swap is memory+swap (the v1 meaning); MemorySwapMax is swap
/// alone. 0: leave unset. runc's conversion, and its refusals.
fn swap_max(swap: i64, memory: i64) -> Result<i64, String> {
    if memory == -1 && swap == 0 {
        return Ok(-1);
    }
    if swap == -1 || swap == 0 {
        return Ok(swap);
    }
    if memory <= 0 {
        return Err("linux.resources.memory.swap: a swap limit needs a memory limit".into());
    }
    if swap < memory {
        return Err(format!("linux.resources.memory.swap ({swap}) is below memory.limit ({memory})"));
    }
    Ok(swap - memory)
}

/// cpu.shares (2..262144) to CPUWeight (1..10000) by the mapping of runc
/// 1.3.2 and later, the one libcgroups writes to cpu.weight: a quadratic in
/// log2(shares) through (2, 1), (1024, 100) and (262144, 10000), so the
/// default share is systemd's default weight. The older linear map gave
/// 1024 shares 39, less than any service left at the default.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "clamped to a whole number in 1..10000")]
fn cpu_weight(shares: u64) -> u64 {
    let l = (shares.clamp(2, 262_144) as f64).log2();
    10f64.powf((l * l + 125.0 * l) / 612.0 - 7.0 / 34.0).ceil().clamp(1.0, 10_000.0) as u64
}

/// blkio weight (10..1000) to IOWeight (1..10000), as runc converts.
fn io_weight(w: u16) -> u64 {
    1 + (u64::from(w.clamp(10, 1000)) - 10) * 9999 / 990
}

/// The quota as CPU time per second. systemd keeps it as a whole percent
/// (10 ms per second): round up, as runc does, so the cgroup is not given
/// less than asked. A quota of -1 (or only a period) is no limit.
fn quota_per_sec(quota: i64, period: u64) -> u64 {
    let Ok(q) = u64::try_from(quota) else { return INFINITY };
    if q == 0 {
        return INFINITY;
    }
    let period = if period == 0 { 100_000 } else { period };
    let per_sec = q.saturating_mul(1_000_000) / period;
    per_sec.div_ceil(10_000) * 10_000
}

/// A cpuset list ("0-3,8") as systemd's bitmask: byte 0 holds CPUs 0-7,
/// the lowest one in bit 0.
pub(super) fn bitmask(list: &str) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let num = |s: &str| s.trim().parse::<usize>().map_err(|_| format!("{list:?}: {s:?} is not a number"));
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => (num(part)?, num(part)?),
        };
        if lo > hi || hi >= 65_536 {
            return Err(format!("{list:?}: bad range {part:?}"));
        }
        bytes.resize(bytes.len().max(hi / 8 + 1), 0);
        for i in lo..=hi {
            bytes[i / 8] |= 1 << (i % 8);
        }
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use oci_spec::runtime::{LinuxCpuBuilder, LinuxMemoryBuilder, LinuxPidsBuilder, LinuxResourcesBuilder};

    fn names(p: &[Prop]) -> Vec<&str> {
        p.iter().map(|(n, _)| *n).collect()
    }

    fn get<'a>(p: &'a [Prop], name: &str) -> &'a Value {
        &p.iter().find(|(n, _)| *n == name).unwrap_or_else(|| panic!("{name} missing: {:?}", names(p))).1
    }

    #[test]
    fn limits_become_the_properties_runc_sets() {
        let r = LinuxResourcesBuilder::default()
            .memory(LinuxMemoryBuilder::default().limit(64 << 20).swap(96 << 20).build().unwrap())
            .pids(LinuxPidsBuilder::default().limit(20).build().unwrap())
            .cpu(
                LinuxCpuBuilder::default()
                    .quota(50_000)
                    .period(100_000u64)
                    .shares(1024u64)
                    .cpus("0-1,3")
                    .build()
                    .unwrap(),
            )
            .build()
            .unwrap();
        let p = resources(&r).unwrap();
        assert_eq!(get(&p, "MemoryMax"), &Value::U64(64 << 20));
        assert_eq!(get(&p, "MemorySwapMax"), &Value::U64(32 << 20), "memory+swap less memory");
        assert_eq!(get(&p, "TasksMax"), &Value::U64(20));
        assert_eq!(get(&p, "CPUQuotaPerSecUSec"), &Value::U64(500_000));
        assert_eq!(get(&p, "CPUQuotaPeriodUSec"), &Value::U64(100_000));
        assert_eq!(get(&p, "CPUWeight"), &Value::U64(100));
        assert_eq!(get(&p, "AllowedCPUs"), &Value::Bytes(vec![0b1011]));
        assert!(!names(&p).contains(&"MemoryLow"), "no reservation, no MemoryLow");
    }

    #[test]
    fn conversions_follow_runc() {
        let weights = [1, 2, 512, 1024, 2048, 262_144, 1 << 20].map(cpu_weight);
        assert_eq!(weights, [1, 1, 59, 100, 174, 10_000, 10_000], "runc 1.3.2's mapping, clamped");
        assert_eq!((io_weight(10), io_weight(500), io_weight(1000)), (1, 4950, 10_000));
        assert_eq!(quota_per_sec(12_345, 100_000), 130_000, "rounded up to whole percent");
        assert_eq!(quota_per_sec(-1, 100_000), INFINITY);
        assert_eq!(quota_per_sec(20_000, 0), 200_000, "the kernel's default period");
        assert_eq!(swap_max(0, -1), Ok(-1));
        assert_eq!(swap_max(-1, 100), Ok(-1));
        assert!(swap_max(50, 100).unwrap_err().contains("below"));
        assert!(swap_max(50, 0).unwrap_err().contains("needs a memory limit"));
        assert_eq!(bitmask("0,9-10").unwrap(), vec![1, 0b110]);
        assert!(bitmask("3-1").is_err() && bitmask("x").is_err());
        let r = LinuxResourcesBuilder::default()
            .pids(LinuxPidsBuilder::default().limit(-1).build().unwrap())
            .build()
            .unwrap();
        assert_eq!(get(&resources(&r).unwrap(), "TasksMax"), &Value::U64(INFINITY));
    }
}
