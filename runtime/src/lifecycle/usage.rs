//! What a container has used so far, in the few numbers a supervisor that
//! reports on a finished run wants (the full set is `events --stats`).

use super::Container;

/// Totals for the container's cgroup; zeros where the host can't tell.
#[derive(Debug, Default, Clone, Copy)]
pub struct Usage {
    /// CPU time of every process in the cgroup, in nanoseconds.
    pub cpu_ns: u64,
    /// The highest memory use of the cgroup, in bytes.
    pub peak_memory: u64,
    /// How often the kernel's OOM killer acted in the cgroup.
    pub oom_kills: u64,
}

impl Container {
    /// Reads the container's usage from its cgroup, without libcgroups'
    /// full stats: cheap enough to call after every run. A container
    /// without a cgroup, or one already removed, reads as zeros.
    pub fn usage(&self) -> Usage {
        let Ok(Some(cg)) = self.cgroup() else { return Usage::default() };
        let (cpu_ns, peak_memory) = cg.usage();
        Usage { cpu_ns, peak_memory, oom_kills: cg.oom_kills() }
    }

    /// The times the container's pids, memory and CPU limits held it
    /// back so far (a few small reads of its cgroup); zeros for a
    /// container without a cgroup, or one already removed.
    pub fn limits_hit(&self) -> crate::cgroups::LimitsHit {
        match self.cgroup() {
            Ok(Some(cg)) => cg.limits_hit(),
            _ => crate::cgroups::LimitsHit::default(),
        }
    }
}
