//! What a container has used so far, in the few numbers a caller of the
//! sandbox wants (the full set is `events --stats`).

use super::Container;

/// Totals for the container's cgroup; zeros where the host can't tell.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Usage {
    pub cpu_ns: u64,
    pub peak_memory: u64,
    pub oom_kills: u64,
}

impl Container {
    pub(crate) fn usage(&self) -> Usage {
        let Some(path) = self.rec.cgroup_path.as_deref() else { return Usage::default() };
        let Ok(cg) = crate::cgroups::Cgroup::open(path, self.rec.systemd_cgroup, &self.rec.id) else {
            return Usage::default();
        };
        let (cpu_ns, peak_memory) = cg.usage();
        Usage { cpu_ns, peak_memory, oom_kills: cg.oom_kills() }
    }
}
