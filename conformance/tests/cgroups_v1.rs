//! Resource control on a cgroup v1 host (issue 3), proven by enforcement.
//! The bodies live in `cgroups_common`; this file runs them only where the
//! host's cgroups are v1 (legacy or hybrid; SKIP on a pure v2 host).

mod cgroups_common;

use cgroups_common::{host_is_v2, V};
use tinyrun_conformance::{require_root, skip};

macro_rules! on_v1 {
    ($($name:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            require_root!();
            if host_is_v2() {
                skip!("this host has pure cgroup v2: the v1 tests do not apply (cgroups_v2 runs here)");
            }
            cgroups_common::$name(V::V1);
        }
    )*};
}

on_v1!(
    memory_hog_is_oom_killed,
    fork_bomb_stops_at_pids_max,
    cpu_quota_throttles,
    update_changes_live_limits,
    pause_freezes_and_resume_thaws,
    cgroup_everywhere_then_gone,
    container_sees_its_cgroup_as_root,
    userns_container_binds_only_its_own_cgroup,
    kill_all_and_ps,
    failures_leave_no_cgroup,
    device_rules_are_enforced,
    kernel_memory_is_ignored_with_a_warning,
    exec_into_a_sub_cgroup,
    cpu_weight_follows_shares,
);
