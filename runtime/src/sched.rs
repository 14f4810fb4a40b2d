//! `process.scheduler` (sched_setattr(2)) and `process.ioPriority`
//! (ioprio_set(2)): checked and encoded by the runtime before cloning, as
//! runc checks them, and set by each container process (init and `exec`)
//! before its program.

use nix::sched::CpuSet;
use oci_spec::runtime::{IOPriorityClass, LinuxSchedulerFlag, LinuxSchedulerPolicy, Process};

use crate::error::{InitError, Result, RuntimeError};
use crate::sys::SchedAttr;

fn bad(field: &str, why: impl Into<String>) -> RuntimeError {
    RuntimeError::InvalidSpec(format!("process.{field}: {}", why.into()))
}

/// `process.scheduler` as the kernel takes it, if set.
pub(crate) fn scheduler(p: &Process) -> Result<Option<SchedAttr>> {
    let Some(s) = p.scheduler() else { return Ok(None) };
    let (nice, priority) = (s.nice().unwrap_or(0), s.priority().unwrap_or(0));
    let (runtime, deadline, period) = (s.runtime().unwrap_or(0), s.deadline().unwrap_or(0), s.period().unwrap_or(0));
    let policy = *s.policy();
    use LinuxSchedulerPolicy as P;
    if matches!(policy, P::SchedOther | P::SchedBatch) && !(-20..=19).contains(&nice) {
        return Err(bad("scheduler.nice", format!("{nice} is out of -20..19 for {policy:?}")));
    }
    if priority != 0 && !matches!(policy, P::SchedFifo | P::SchedRr) {
        return Err(bad("scheduler.priority", "only SCHED_FIFO and SCHED_RR take a priority"));
    }
    if policy != P::SchedDeadline && (runtime != 0 || deadline != 0 || period != 0) {
        return Err(bad("scheduler", "runtime, deadline and period are for SCHED_DEADLINE only"));
    }
    let policy = match policy {
        P::SchedOther => 0,
        P::SchedFifo => 1,
        P::SchedRr => 2,
        P::SchedBatch => 3,
        P::SchedIso => 4,
        P::SchedIdle => 5,
        P::SchedDeadline => 6,
    };
    let mut flags = 0;
    for f in s.flags().as_deref().unwrap_or(&[]) {
        flags |= match f {
            LinuxSchedulerFlag::SchedResetOnFork => 0x01,
            LinuxSchedulerFlag::SchedFlagReclaim => 0x02,
            LinuxSchedulerFlag::SchedFlagDLOverrun => 0x04,
            LinuxSchedulerFlag::SchedFlagKeepPolicy => 0x08,
            LinuxSchedulerFlag::SchedFlagKeepParams => 0x10,
            LinuxSchedulerFlag::SchedFlagUtilClampMin => 0x20,
            LinuxSchedulerFlag::SchedFlagUtilClampMax => 0x40,
        };
    }
    let priority = u32::try_from(priority).map_err(|_| bad("scheduler.priority", format!("{priority} is negative")))?;
    Ok(Some(SchedAttr {
        // 56 bytes: SCHED_ATTR_SIZE_VER1.
        size: u32::try_from(std::mem::size_of::<SchedAttr>()).unwrap_or(u32::MAX),
        policy,
        flags,
        nice,
        priority,
        runtime,
        deadline,
        period,
        util_min: 0,
        util_max: 0,
    }))
}

/// `process.ioPriority` as ioprio_set(2) takes it: class << 13 | level.
pub(crate) fn io_priority(p: &Process) -> Result<Option<i32>> {
    let Some(io) = p.io_priority() else { return Ok(None) };
    let level = io.priority();
    let level = i32::try_from(level)
        .ok()
        .filter(|l| (0..=7).contains(l))
        .ok_or_else(|| bad("ioPriority.priority", format!("{level} is out of 0..7")))?;
    let class = match io.class() {
        IOPriorityClass::IoprioClassRt => 1,
        IOPriorityClass::IoprioClassBe => 2,
        IOPriorityClass::IoprioClassIdle => 3,
    };
    Ok(Some((class << 13) | level))
}

/// `process.execCPUAffinity`: the CPUs an exec'd process is cloned on
/// (`initial`) and those it runs on once in the container's cgroup
/// (`final`), as runc uses them. It does not apply to init (the spec).
#[derive(Debug, Default)]
pub(crate) struct ExecAffinity {
    pub initial: Option<CpuSet>,
    pub final_: Option<CpuSet>,
}

pub(crate) fn exec_affinity(p: &Process) -> Result<ExecAffinity> {
    let Some(a) = p.exec_cpu_affinity() else { return Ok(ExecAffinity::default()) };
    let set = |what: &str, list: &Option<String>| -> Result<Option<CpuSet>> {
        let Some(list) = list.as_deref() else { return Ok(None) };
        let field = format!("execCPUAffinity.{what}");
        let mut set = CpuSet::new();
        for part in list.split(',') {
            let cpu =
                |n: &str| n.parse::<usize>().map_err(|_| bad(&field, format!("{part:?} is not a CPU or a range")));
            let (lo, hi) = match part.split_once('-') {
                Some((a, b)) => (cpu(a)?, cpu(b)?),
                None => (cpu(part)?, cpu(part)?),
            };
            if lo > hi {
                return Err(bad(&field, format!("range {part:?} goes backwards")));
            }
            for c in lo..=hi {
                set.set(c).map_err(|_| bad(&field, format!("CPU {c} is beyond {}", CpuSet::count() - 1)))?;
            }
        }
        Ok(Some(set))
    };
    Ok(ExecAffinity { initial: set("initial", a.initial())?, final_: set("final", a.cpu_affinity_final())? })
}

/// Sets both on the calling process, between clone and execve: system
/// calls on values made beforehand.
pub(crate) fn apply(sched: Option<&SchedAttr>, ioprio: Option<i32>) -> std::result::Result<(), InitError> {
    if let Some(a) = sched {
        crate::sys::sched_setattr(a).map_err(|e| {
            InitError::value("sched_setattr", format_args!("policy {} nice {}", a.policy, a.nice), e)
                .field("process.scheduler")
        })?;
    }
    if let Some(v) = ioprio {
        crate::sys::ioprio_set(v)
            .map_err(|e| InitError::value("ioprio_set", format_args!("{v:#x}"), e).field("process.ioPriority"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(extra: serde_json::Value) -> Process {
        let mut v = serde_json::json!({"cwd": "/", "args": ["x"], "user": {"uid": 0, "gid": 0}});
        v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn scheduler_is_checked_like_runc_and_encoded() {
        let a = scheduler(&process(
            serde_json::json!({"scheduler": {"policy": "SCHED_BATCH", "nice": 5, "flags": ["SCHED_FLAG_RECLAIM"]}}),
        ))
        .unwrap()
        .unwrap();
        assert_eq!((a.size, a.policy, a.nice, a.flags), (56, 3, 5, 2));
        for bad in [
            serde_json::json!({"policy": "SCHED_OTHER", "nice": 20}),
            serde_json::json!({"policy": "SCHED_BATCH", "priority": 1}),
            serde_json::json!({"policy": "SCHED_FIFO", "runtime": 1}),
        ] {
            assert!(scheduler(&process(serde_json::json!({"scheduler": bad}))).is_err(), "{bad}");
        }
        assert!(scheduler(&process(serde_json::json!({}))).unwrap().is_none());
    }

    #[test]
    fn exec_affinity_lists_become_sets() {
        let a = exec_affinity(&process(serde_json::json!({"execCPUAffinity": {"initial": "0-2,5", "final": "1"}})))
            .unwrap();
        let (i, f) = (a.initial.unwrap(), a.final_.unwrap());
        assert!([0, 1, 2, 5].iter().all(|c| i.is_set(*c).unwrap()) && !i.is_set(3).unwrap());
        assert!(f.is_set(1).unwrap() && !f.is_set(0).unwrap());
        assert!(exec_affinity(&process(serde_json::json!({"execCPUAffinity": {"final": "4096"}}))).is_err());
        assert!(exec_affinity(&process(serde_json::json!({}))).unwrap().initial.is_none());
    }

    #[test]
    fn io_priority_is_class_and_level() {
        let v = io_priority(&process(serde_json::json!({"ioPriority": {"class": "IOPRIO_CLASS_BE", "priority": 7}})));
        assert_eq!(v.unwrap(), Some((2 << 13) | 7));
        assert!(io_priority(&process(serde_json::json!({"ioPriority": {"class": "IOPRIO_CLASS_RT", "priority": 8}})))
            .is_err());
    }
}
