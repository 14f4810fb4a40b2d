use std::io::Read;

use tinyrun::oci_spec::runtime::LinuxResources;
use tinyrun::{Runtime, UpdateFlags};

use crate::args::UpdateArgs;
use crate::logging::Logger;

/// `-r FILE|-` (LinuxResources JSON) wins over every other flag, as in runc.
pub(crate) fn run(rt: &Runtime, a: &UpdateArgs, log: &Logger) -> anyhow::Result<u8> {
    for (flag, set) in
        [("--kernel-memory", a.kernel_memory.is_some()), ("--kernel-memory-tcp", a.kernel_memory_tcp.is_some())]
    {
        if set {
            log.warn(&format!("{flag} is ignored: kernel memory limits are no longer enforced by the kernel"));
        }
    }
    let c = rt.load(&a.id)?;
    let resources: LinuxResources = match &a.resources {
        Some(p) => {
            let mut text = Vec::new();
            if p.as_os_str() == "-" {
                std::io::stdin().read_to_end(&mut text)?;
            } else {
                text = std::fs::read(p).map_err(|e| anyhow::anyhow!("read {}: {e}", p.display()))?;
            }
            let what = if p.as_os_str() == "-" { "standard input".to_string() } else { p.display().to_string() };
            serde_json::from_slice(&text).map_err(|e| anyhow::anyhow!("decode resources from {what}: {e}"))?
        }
        None => UpdateFlags {
            blkio_weight: a.blkio_weight,
            cpu_period: a.cpu_period,
            cpu_quota: a.cpu_quota,
            cpu_burst: a.cpu_burst,
            cpu_share: a.cpu_share,
            cpu_rt_period: a.cpu_rt_period,
            cpu_rt_runtime: a.cpu_rt_runtime,
            cpuset_cpus: a.cpuset_cpus.clone(),
            cpuset_mems: a.cpuset_mems.clone(),
            cpu_idle: a.cpu_idle,
            memory: a.memory.clone(),
            memory_reservation: a.memory_reservation.clone(),
            memory_swap: a.memory_swap.clone(),
            pids_limit: a.pids_limit,
            l3_cache_schema: a.l3_cache_schema.clone(),
            mem_bw_schema: a.mem_bw_schema.clone(),
        }
        .to_resources()?,
    };
    c.update(&resources)?;
    Ok(0)
}
