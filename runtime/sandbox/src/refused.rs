//! What a box tried and was refused, as a result reports it (`refused`,
//! documented in tinyrun-sandbox(8)): the system calls its seccomp filter
//! refused (recorded by the filter's supervisor: `tinyrun::Refusals`),
//! the times its pids, memory and CPU limits held it back (its cgroup's
//! counters), and the output cut by the capture cap.
//!
//! What it can be trusted for: every entry comes from the kernel (a
//! seccomp notification, a cgroup counter) or from our own reads, never
//! from the box, so a box can't add to it; it can't hide a refused call
//! either, only make the record full (after [`tinyrun::MAX_REFUSED_CALLS`]
//! distinct calls the rest are counted in `syscalls_unlisted`). It says
//! what was refused, not why, nor that nothing else was tried.

use serde::Serialize;
use tinyrun::{LimitsHit, Refusals};

/// The `refused` object of a result; absent when nothing was refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Refused {
    /// System calls the filter refused, the first distinct ones in the
    /// order first seen.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub syscalls: Vec<RefusedSyscall>,
    /// Refusals of calls beyond those listed (the record is full).
    #[serde(skip_serializing_if = "is_zero")]
    pub syscalls_unlisted: u64,
    /// Limits of the box's cgroup that held it back.
    #[serde(skip_serializing_if = "LimitsHit::is_empty", serialize_with = "nonzero")]
    pub limits: LimitsHit,
    /// Bytes of stdout and stderr written beyond the capture cap.
    #[serde(skip_serializing_if = "is_zero")]
    pub output_cut_bytes: u64,
}

/// One system call the filter refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RefusedSyscall {
    /// Its name, e.g. `ptrace`.
    pub name: String,
    /// Times refused (saturating at 2^32-1).
    pub count: u32,
    /// The argument whose first distinct values `values` holds, for calls
    /// that have a telling one (`request` of ioctl, `flags` of unshare).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arg: Option<&'static str>,
    /// Those values, in hex.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The counters that are not zero.
fn nonzero<S: serde::Serializer>(l: &LimitsHit, s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let all = [
        ("pids_max", l.pids_max),
        ("memory_high", l.memory_high),
        ("memory_max", l.memory_max),
        ("memory_oom", l.memory_oom),
        ("oom_kills", l.oom_kills),
        ("cpu_throttled_periods", l.cpu_throttled_periods),
        ("cpu_throttled_us", l.cpu_throttled_us),
    ];
    let mut m = s.serialize_map(None)?;
    for (k, v) in all.iter().filter(|(_, v)| *v > 0) {
        m.serialize_entry(k, v)?;
    }
    m.end()
}

impl Refused {
    /// The report of `calls` refused, `limits` hit and `cut` bytes of
    /// output dropped; `None` when there is nothing to report.
    pub(crate) fn of(calls: &Refusals, limits: LimitsHit, cut: u64) -> Option<Refused> {
        let syscalls = calls
            .calls
            .iter()
            .map(|c| RefusedSyscall {
                name: c.name(),
                count: c.count,
                arg: c.arg_name(),
                values: match c.arg_name() {
                    Some(_) => c.args.iter().map(|v| format!("{v:#x}")).collect(),
                    None => Vec::new(),
                },
            })
            .collect();
        let r = Refused { syscalls, syscalls_unlisted: calls.unlisted.into(), limits, output_cut_bytes: cut };
        (r != Refused::default()).then_some(r)
    }
}

/// Everything launched box `id` tried and was refused since it was made:
/// its resident init's record and its cgroup's counters; `None` when
/// nothing was (or the box has no resident init to ask).
///
/// # Errors
/// A box that does not exist.
pub fn of_box(root: &std::path::Path, id: &str) -> crate::error::Result<Option<Refused>> {
    let rt = crate::layout::runtime(root);
    let limits = rt.peek(id)?.limits_hit();
    // A stopped or paused init can't answer: its calls are then unknown,
    // not an error of the listing.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    let calls = rt.resident(id).and_then(|r| r.refused(Some(deadline))).unwrap_or_default();
    Ok(Refused::of(&calls, limits, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_refused_is_no_report() {
        assert_eq!(Refused::of(&Refusals::default(), LimitsHit::default(), 0), None);
    }

    #[test]
    fn only_what_was_hit_is_shown() {
        let limits = LimitsHit { pids_max: 5, oom_kills: 1, ..LimitsHit::default() };
        let r = Refused::of(&Refusals::default(), limits, 7).unwrap();
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v, serde_json::json!({"limits": {"pids_max": 5, "oom_kills": 1}, "output_cut_bytes": 7}));
    }
}
