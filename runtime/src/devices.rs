//! The device nodes every container gets (runtime-spec config-linux,
//! "Default Devices"; of the spec's list, `/dev/ptmx` is a link into devpts
//! and `/dev/console` comes with a terminal).
//!
//! Plain data that imports nothing: init makes these nodes in the
//! container's `/dev` (`rootfs`), and the runtime allows them in the v1
//! device cgroup (`cgroups`), so neither layer depends on the other for it.

/// Name under `/dev`, major, minor: character devices, mode 0666.
pub(crate) const DEFAULT_DEVICES: [(&str, u64, u64); 6] =
    [("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8), ("urandom", 1, 9), ("tty", 5, 0)];
