//! Spellings of the runtime spec that oci-spec 0.10 does not take, put in
//! the ones it does before it parses.
//!
//! oci-spec derives the names of `process.scheduler.flags` from its enum's
//! variants: it reads `SCHED_RESET_ON_FORK` and `SCHED_FLAG_D_L_OVERRUN`
//! where the spec (and runc, and crun) say `SCHED_FLAG_RESET_ON_FORK` and
//! `SCHED_FLAG_DL_OVERRUN`, and refuses the spec's names. The other five
//! flags agree. Only a config that oci-spec refused is looked at again, so
//! a config it takes costs nothing more.

use serde::de::DeserializeOwned;
use serde_json::Value;

/// The spec's name of each flag oci-spec spells otherwise, and oci-spec's.
const SCHED_FLAGS: [(&str, &str); 2] =
    [("SCHED_FLAG_RESET_ON_FORK", "SCHED_RESET_ON_FORK"), ("SCHED_FLAG_DL_OVERRUN", "SCHED_FLAG_D_L_OVERRUN")];

/// Where the flags are in a config.json.
pub(crate) const CONFIG_FLAGS: &[&str] = &["process", "scheduler", "flags"];
/// Where they are in a Process object (`exec --process`).
pub(crate) const PROCESS_FLAGS: &[&str] = &["scheduler", "flags"];

/// Parses `bytes` as `T`. If that fails and the scheduler flags at
/// `flags_at` use a name of the spec that oci-spec spells otherwise, parses
/// again with oci-spec's names. A failure comes with the bytes it is about
/// (the rewritten ones, when they were parsed), to locate it in.
pub(crate) fn parse<T: DeserializeOwned>(bytes: &[u8], flags_at: &[&str]) -> Result<T, (serde_json::Error, Vec<u8>)> {
    let first = match serde_json::from_slice(bytes) {
        Ok(t) => return Ok(t),
        Err(e) => e,
    };
    match with_oci_spec_names(bytes, flags_at) {
        Some(fixed) => serde_json::from_slice(&fixed).map_err(|e| (e, fixed)),
        None => Err((first, bytes.to_vec())),
    }
}

/// `bytes` re-encoded with oci-spec's names for the flags at `flags_at`, or
/// `None` when there is nothing to rename (or no JSON to rename it in).
fn with_oci_spec_names(bytes: &[u8], flags_at: &[&str]) -> Option<Vec<u8>> {
    let mut v: Value = serde_json::from_slice(bytes).ok()?;
    let flags = flags_at.iter().try_fold(&mut v, |at, key| at.get_mut(*key))?.as_array_mut()?;
    let mut renamed = false;
    for flag in flags.iter_mut() {
        if let Some((_, oci)) = SCHED_FLAGS.iter().find(|(spec, _)| flag.as_str() == Some(spec)) {
            *flag = Value::from(*oci);
            renamed = true;
        }
    }
    renamed.then(|| serde_json::to_vec(&v).ok()).flatten()
}

#[cfg(test)]
mod tests {
    use oci_spec::runtime::{LinuxSchedulerFlag, Process};

    use super::*;

    fn process(flags: &[&str]) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({"cwd": "/", "args": ["x"], "user": {"uid": 0, "gid": 0},
            "scheduler": {"policy": "SCHED_OTHER", "flags": flags}}))
        .unwrap()
    }

    fn flags(bytes: &[u8]) -> Vec<LinuxSchedulerFlag> {
        let p: Process = parse(bytes, PROCESS_FLAGS).unwrap_or_else(|(e, _)| panic!("{e}"));
        p.scheduler().as_ref().and_then(|s| s.flags().clone()).unwrap_or_default()
    }

    #[test]
    fn the_specs_names_of_every_flag_are_taken() {
        let spec = [
            "SCHED_FLAG_RESET_ON_FORK",
            "SCHED_FLAG_RECLAIM",
            "SCHED_FLAG_DL_OVERRUN",
            "SCHED_FLAG_KEEP_POLICY",
            "SCHED_FLAG_KEEP_PARAMS",
            "SCHED_FLAG_UTIL_CLAMP_MIN",
            "SCHED_FLAG_UTIL_CLAMP_MAX",
        ];
        assert!(serde_json::from_slice::<Process>(&process(&spec)).is_err(), "oci-spec alone refuses two of them");
        use LinuxSchedulerFlag as F;
        let want = [
            F::SchedResetOnFork,
            F::SchedFlagReclaim,
            F::SchedFlagDLOverrun,
            F::SchedFlagKeepPolicy,
            F::SchedFlagKeepParams,
            F::SchedFlagUtilClampMin,
            F::SchedFlagUtilClampMax,
        ];
        assert_eq!(flags(&process(&spec)), want);
        assert_eq!(flags(&process(&["SCHED_RESET_ON_FORK"])), [F::SchedResetOnFork], "oci-spec's own still work");
    }

    #[test]
    fn other_errors_are_reported_about_the_bytes_parsed() {
        let (e, _) = parse::<Process>(&process(&["SCHED_FLAG_NOPE"]), PROCESS_FLAGS).unwrap_err();
        assert!(e.to_string().contains("SCHED_FLAG_NOPE"), "{e}");
        let mut bad: Value = serde_json::from_slice(&process(&["SCHED_FLAG_DL_OVERRUN"])).unwrap();
        bad["cwd"] = Value::from(7);
        let (e, parsed) = parse::<Process>(&serde_json::to_vec(&bad).unwrap(), PROCESS_FLAGS).unwrap_err();
        assert!(e.to_string().contains("invalid type"), "the remaining error, not the flag: {e}");
        assert!(String::from_utf8(parsed).unwrap().contains("SCHED_FLAG_D_L_OVERRUN"));
    }
}
