//! Reading the cgroup: its processes (`ps`, `kill --all`, `delete`),
//! statistics (`events`), CPU and memory use and OOM kills (`events`, the
//! sandbox's per-run usage). Runs in the runtime process.

use std::path::{Path, PathBuf};

use libcgroups::common::CgroupManager;
use nix::unistd::Pid;

use super::check::Layout;
use super::{read_trim, stats, Cgroup, Result, StatsData};

impl Cgroup {
    /// Host pids of every process in the cgroup (and its sub-cgroups).
    pub(crate) fn pids(&self) -> Result<Vec<i32>> {
        // One hierarchy holds every process: read it directly.
        let dir = match self.layout {
            Layout::Unified => self.v2_dir(),
            _ => self.v1_dir("pids"),
        };
        if dir.is_dir() {
            let mut out = Vec::new();
            collect_procs(&dir, &mut out);
            return Ok(out);
        }
        // On the unified hierarchy nothing else could hold them: a cgroup
        // that is gone has no processes. systemd removes a container's scope
        // as soon as its last process exits, before `kill --all` or `delete`.
        if self.layout == Layout::Unified {
            return Ok(Vec::new());
        }
        let pids = self.mgr()?.get_all_pids().map_err(self.err("list processes"))?;
        Ok(pids.into_iter().map(Pid::as_raw).collect())
    }

    /// Statistics in runc's `events` shape.
    pub(crate) fn stats(&self) -> Result<StatsData> {
        // libcgroups' v1 statistics read every hierarchy at one path (and
        // fail on one the cgroup was kept out of).
        let s = if self.split() || self.only.is_some() {
            super::apart::stats(|c| self.v1_dir(c))
        } else {
            self.mgr()?.stats().map_err(self.err("read statistics"))?
        };
        let (cpus, mems) = match self.layout {
            Layout::Unified => {
                (self.v2_dir().join("cpuset.cpus.effective"), self.v2_dir().join("cpuset.mems.effective"))
            }
            _ => (self.v1_dir("cpuset").join("cpuset.cpus"), self.v1_dir("cpuset").join("cpuset.mems")),
        };
        let read = |p: PathBuf| std::fs::read_to_string(p).unwrap_or_default();
        Ok(stats::from_libcgroups(&s, &read(cpus), &read(mems), self.layout == Layout::Unified))
    }

    /// CPU time (ns) and peak memory (bytes) so far, read from the two files
    /// that hold them rather than through a full `stats` (which needs
    /// libcgroups' manager): the sandbox asks for these after every run.
    pub(crate) fn usage(&self) -> (u64, u64) {
        let num = |p: PathBuf| read_trim(&p).parse::<u64>().unwrap_or(0);
        match self.layout {
            Layout::Unified => {
                let stat = std::fs::read_to_string(self.v2_dir().join("cpu.stat")).unwrap_or_default();
                let usec = stat.lines().find_map(|l| l.strip_prefix("usage_usec ")?.trim().parse::<u64>().ok());
                (usec.unwrap_or(0) * 1000, num(self.v2_dir().join("memory.peak")))
            }
            _ => (
                num(self.v1_dir("cpuacct").join("cpuacct.usage")),
                num(self.v1_dir("memory").join("memory.max_usage_in_bytes")),
            ),
        }
    }

    /// How many processes the kernel's OOM killer has killed in the cgroup
    /// (`oom_kill` in v1 `memory.oom_control` / v2 `memory.events`).
    pub(crate) fn oom_kills(&self) -> u64 {
        let f = match self.layout {
            Layout::Unified => self.v2_dir().join("memory.events"),
            _ => self.v1_dir("memory").join("memory.oom_control"),
        };
        let text = std::fs::read_to_string(f).unwrap_or_default();
        text.lines().find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok()).unwrap_or(0)
    }
}

/// Every pid in `dir`'s cgroup.procs and in its sub-cgroups'.
fn collect_procs(dir: &Path, out: &mut Vec<i32>) {
    let text = crate::sys::fs::read_proc(dir.join("cgroup.procs")).unwrap_or_default();
    out.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            collect_procs(&e.path(), out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{self, put};
    use super::*;

    #[test]
    fn pids_include_the_sub_cgroups() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("pids/t/ct");
        put(&dir, "cgroup.procs", "10\n11\n");
        put(&dir.join("sub"), "cgroup.procs", "12\n");
        put(&dir.join("sub/deeper"), "cgroup.procs", "13\nnot-a-pid\n");
        let cg = fixture::cgroup(root.path(), Layout::Hybrid, "/t/ct");
        let mut pids = cg.pids().unwrap();
        pids.sort();
        assert_eq!(pids, [10, 11, 12, 13]);
        put(&root.path().join("t/ct"), "cgroup.procs", "20\n");
        assert_eq!(fixture::cgroup(root.path(), Layout::Unified, "t/ct").pids().unwrap(), [20]);
    }

    #[test]
    fn a_unified_cgroup_already_removed_has_no_processes() {
        let root = tempfile::tempdir().unwrap();
        let cg = fixture::cgroup(root.path(), Layout::Unified, "t/gone.scope");
        assert_eq!(cg.pids().unwrap(), Vec::<i32>::new());
    }

    #[test]
    fn v1_usage_and_oom_kills_come_from_their_controllers() {
        let root = tempfile::tempdir().unwrap();
        let cg = fixture::cgroup(root.path(), Layout::Hybrid, "/t/ct");
        assert_eq!((cg.usage(), cg.oom_kills()), ((0, 0), 0), "no files: nothing used yet");
        put(&root.path().join("cpu,cpuacct/t/ct"), "cpuacct.usage", "123456789\n");
        put(&root.path().join("memory/t/ct"), "memory.max_usage_in_bytes", "4096\n");
        put(&root.path().join("memory/t/ct"), "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n");
        assert_eq!(cg.usage(), (123456789, 4096));
        assert_eq!(cg.oom_kills(), 3);
    }

    #[test]
    fn v2_cpu_time_turns_microseconds_into_nanoseconds() {
        let root = tempfile::tempdir().unwrap();
        let cg = fixture::cgroup(root.path(), Layout::Unified, "/t/ct");
        let dir = root.path().join("t/ct");
        put(&dir, "cpu.stat", "usage_usec 2500\nuser_usec 2000\nsystem_usec 500\n");
        put(&dir, "memory.peak", "8192\n");
        put(&dir, "memory.events", "low 0\nhigh 0\nmax 4\noom 2\noom_kill 1\noom_group_kill 0\n");
        assert_eq!(cg.usage(), (2_500_000, 8192));
        assert_eq!(cg.oom_kills(), 1, "oom_group_kill is another counter");
    }
}
