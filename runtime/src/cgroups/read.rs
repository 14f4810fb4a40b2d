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

/// The times a cgroup's limits held its processes back, as its
/// controllers count them; zeros where the host can't tell.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LimitsHit {
    /// Forks and clones refused at `pids.max` (`pids.events` max).
    pub pids_max: u64,
    /// Times memory use went over `memory.high` (v2 only).
    pub memory_high: u64,
    /// Times memory use reached the limit (v2 `memory.events` max; v1
    /// `memory.failcnt`).
    pub memory_max: u64,
    /// Times the cgroup ran out of memory (v2 only).
    pub memory_oom: u64,
    /// Processes the OOM killer killed.
    pub oom_kills: u64,
    /// CFS periods in which the cgroup was throttled at its CPU quota.
    pub cpu_throttled_periods: u64,
    /// Time it spent throttled, in microseconds.
    pub cpu_throttled_us: u64,
}

impl LimitsHit {
    /// No limit was hit.
    pub fn is_empty(&self) -> bool {
        *self == LimitsHit::default()
    }

    /// What was hit after `before`, an earlier reading of the same cgroup.
    pub fn since(&self, before: &LimitsHit) -> LimitsHit {
        LimitsHit {
            pids_max: self.pids_max.saturating_sub(before.pids_max),
            memory_high: self.memory_high.saturating_sub(before.memory_high),
            memory_max: self.memory_max.saturating_sub(before.memory_max),
            memory_oom: self.memory_oom.saturating_sub(before.memory_oom),
            oom_kills: self.oom_kills.saturating_sub(before.oom_kills),
            cpu_throttled_periods: self.cpu_throttled_periods.saturating_sub(before.cpu_throttled_periods),
            cpu_throttled_us: self.cpu_throttled_us.saturating_sub(before.cpu_throttled_us),
        }
    }
}

/// The value of `key` in a flat-keyed cgroup file (`key value` lines).
fn keyed(text: &str, key: &str) -> u64 {
    text.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok()).unwrap_or(0)
}

impl Cgroup {
    /// The times the cgroup's pids, memory and CPU limits held it back,
    /// from the few files that count them (see [`LimitsHit`]).
    pub(crate) fn limits_hit(&self) -> LimitsHit {
        let read = |p: PathBuf| std::fs::read_to_string(p).unwrap_or_default();
        match self.layout {
            Layout::Unified => {
                let dir = self.v2_dir();
                let mem = read(dir.join("memory.events"));
                let cpu = read(dir.join("cpu.stat"));
                LimitsHit {
                    pids_max: keyed(&read(dir.join("pids.events")), "max"),
                    memory_high: keyed(&mem, "high"),
                    memory_max: keyed(&mem, "max"),
                    memory_oom: keyed(&mem, "oom"),
                    oom_kills: keyed(&mem, "oom_kill"),
                    cpu_throttled_periods: keyed(&cpu, "nr_throttled"),
                    cpu_throttled_us: keyed(&cpu, "throttled_usec"),
                }
            }
            _ => {
                let cpu = read(self.v1_dir("cpu").join("cpu.stat"));
                LimitsHit {
                    pids_max: keyed(&read(self.v1_dir("pids").join("pids.events")), "max"),
                    memory_max: read_trim(&self.v1_dir("memory").join("memory.failcnt")).parse().unwrap_or(0),
                    oom_kills: self.oom_kills(),
                    cpu_throttled_periods: keyed(&cpu, "nr_throttled"),
                    cpu_throttled_us: keyed(&cpu, "throttled_time") / 1000,
                    ..LimitsHit::default()
                }
            }
        }
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
    fn v1_limits_hit_come_from_pids_memory_and_cpu() {
        let root = tempfile::tempdir().unwrap();
        let cg = fixture::cgroup(root.path(), Layout::Hybrid, "/t/ct");
        assert!(cg.limits_hit().is_empty(), "no files: nothing hit");
        put(&root.path().join("pids/t/ct"), "pids.events", "max 17\n");
        put(&root.path().join("memory/t/ct"), "memory.failcnt", "5\n");
        put(&root.path().join("memory/t/ct"), "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n");
        put(
            &root.path().join("cpu,cpuacct/t/ct"),
            "cpu.stat",
            "nr_periods 10\nnr_throttled 4\nthrottled_time 7000000\n",
        );
        let want = LimitsHit {
            pids_max: 17,
            memory_max: 5,
            oom_kills: 2,
            cpu_throttled_periods: 4,
            cpu_throttled_us: 7000,
            ..LimitsHit::default()
        };
        assert_eq!(cg.limits_hit(), want);
        assert!(want.since(&want).is_empty());
    }

    #[test]
    fn v2_limits_hit_come_from_the_events_files() {
        let root = tempfile::tempdir().unwrap();
        let cg = fixture::cgroup(root.path(), Layout::Unified, "/t/ct");
        let dir = root.path().join("t/ct");
        put(&dir, "pids.events", "max 3\n");
        put(&dir, "memory.events", "low 0\nhigh 9\nmax 4\noom 2\noom_kill 1\noom_group_kill 0\n");
        put(&dir, "cpu.stat", "usage_usec 1\nnr_periods 8\nnr_throttled 6\nthrottled_usec 1500\nnr_bursts 0\n");
        let want = LimitsHit {
            pids_max: 3,
            memory_high: 9,
            memory_max: 4,
            memory_oom: 2,
            oom_kills: 1,
            cpu_throttled_periods: 6,
            cpu_throttled_us: 1500,
        };
        assert_eq!(cg.limits_hit(), want);
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
