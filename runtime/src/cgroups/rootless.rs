//! Cgroups for a rootless caller, with runc's rules: a container with no
//! `linux.cgroupsPath` gets a cgroup only where the caller may make one (a
//! cgroup v2 subtree delegated to it); elsewhere it runs in the caller's
//! cgroups, and a limit that would need a cgroup is refused with runc's
//! words. An explicit `cgroupsPath` is always made, and a permission error
//! then fails `create` as it does for root.

use std::path::Path;

use nix::unistd::{access, AccessFlags};
use oci_spec::runtime::LinuxResources;

use super::check::Layout;
use super::{Cgroup, CgroupError, Result};

impl Cgroup {
    /// The cgroup of a new container whose caller may lack permission for
    /// cgroups: `None` when it has no `cgroupsPath` and the caller may not
    /// make one, after checking `r` asks for no limit.
    pub(crate) fn for_rootless_create(
        cgroups_path: Option<&str>,
        id: &str,
        r: &LinuxResources,
    ) -> Result<Option<Cgroup>> {
        if cgroups_path.is_some_and(|p| !p.is_empty()) {
            return Cgroup::for_create(cgroups_path, id, false, Some(r)).map(Some);
        }
        let cg = Cgroup::for_create(None, id, false, Some(r))?;
        match cg.unwritable() {
            None => Ok(Some(cg)),
            Some(dir) => refuse_limits(r, cg.layout, &dir).map(|()| None),
        }
    }

    /// Whether this caller may make the cgroup and move processes into it:
    /// for each directory, the nearest one that exists must be writable
    /// (and, if it is the cgroup itself, its `cgroup.procs`). Returns the
    /// first directory it may not make, for the error message.
    pub(crate) fn unwritable(&self) -> Option<std::path::PathBuf> {
        if self.systemd {
            return None;
        }
        let mut dirs = self.dirs();
        dirs.extend(self.extra.iter().cloned());
        dirs.into_iter().find(|d| !may_make(d))
    }
}

impl Cgroup {
    /// `linux.resources.unified`, written as is (keys checked by
    /// `check_spec`).
    pub(super) fn write_unified(&self, r: &LinuxResources) -> Result<()> {
        for (k, v) in r.unified().iter().flatten() {
            let f = self.v2_dir().join(k);
            std::fs::write(&f, v).map_err(super::io_err("write", &f))?;
        }
        Ok(())
    }
}

/// Not root of the initial user namespace: no BPF, no cgroups not
/// delegated to us.
pub(super) fn unprivileged() -> bool {
    !nix::unistd::geteuid().is_root()
        || std::fs::read_to_string("/proc/self/uid_map")
            .map(|m| m.split_whitespace().collect::<Vec<_>>() != ["0", "0", "4294967295"])
            .unwrap_or(false)
}

fn may_make(dir: &Path) -> bool {
    if dir.is_dir() {
        return access(&dir.join("cgroup.procs"), AccessFlags::W_OK).is_ok();
    }
    let mut p = dir.parent();
    while let Some(d) = p {
        if d.is_dir() {
            return access(d, AccessFlags::W_OK).is_ok();
        }
        p = d.parent();
    }
    false
}

/// The container runs without a cgroup of its own: refuses `r` if it sets
/// a limit, naming the controller as runc does (v1: the first in runc's
/// order; v2: runc's one message with the failed `mkdir`).
fn refuse_limits(r: &LinuxResources, layout: Layout, dir: &Path) -> Result<()> {
    let Some(ctrl) = first_limited(r, layout == Layout::Unified) else { return Ok(()) };
    let msg = if layout == Layout::Unified {
        format!(
            "rootless needs no limits + no cgrouppath when no permission is granted for cgroups: mkdir {}: permission denied",
            dir.display()
        )
    } else {
        format!("cannot set {ctrl} limit: container could not join or create cgroup")
    };
    Err(CgroupError::Rootless(msg))
}

/// The first controller `r` sets a limit for, in the order runc's v1
/// manager applies them. Device rules are not limits here: runc ignores
/// them for a rootless container. `unified` entries need a v2 cgroup.
fn first_limited(r: &LinuxResources, v2: bool) -> Option<&'static str> {
    let cpu = r.cpu().as_ref();
    let cpuset = cpu.is_some_and(|c| {
        c.cpus().as_ref().is_some_and(|s| !s.is_empty()) || c.mems().as_ref().is_some_and(|s| !s.is_empty())
    });
    let mem = r.memory().as_ref().is_some_and(|m| {
        m.limit().is_some_and(|v| v != 0)
            || m.reservation().is_some_and(|v| v != 0)
            || m.swap().is_some_and(|v| v != 0)
            || (!v2 && m.swappiness().is_some())
            || (!v2 && m.disable_oom_killer() == Some(true))
    });
    let cpu_set = cpu.is_some_and(|c| {
        c.shares().is_some_and(|v| v != 0)
            || c.quota().is_some_and(|v| v != 0)
            || c.period().is_some_and(|v| v != 0)
            || c.realtime_runtime().is_some_and(|v| v != 0)
            || c.realtime_period().is_some_and(|v| v != 0)
            || c.idle().is_some_and(|v| v != 0)
            || c.burst().is_some_and(|v| v != 0)
    });
    let pids = r.pids().as_ref().is_some_and(|p| p.limit() != 0);
    let blkio = r.block_io().as_ref().is_some_and(|b| {
        b.weight().is_some()
            || b.leaf_weight().is_some()
            || b.weight_device().as_ref().is_some_and(|v| !v.is_empty())
            || b.throttle_read_bps_device().as_ref().is_some_and(|v| !v.is_empty())
            || b.throttle_write_bps_device().as_ref().is_some_and(|v| !v.is_empty())
            || b.throttle_read_iops_device().as_ref().is_some_and(|v| !v.is_empty())
            || b.throttle_write_iops_device().as_ref().is_some_and(|v| !v.is_empty())
    });
    let hugetlb = r.hugepage_limits().as_ref().is_some_and(|v| !v.is_empty());
    let net_cls = r.network().as_ref().is_some_and(|n| n.class_id().is_some());
    let net_prio = r.network().as_ref().is_some_and(|n| n.priorities().as_ref().is_some_and(|v| !v.is_empty()));
    let unified = r.unified().as_ref().is_some_and(|u| !u.is_empty());
    [
        ("cpuset", cpuset),
        ("memory", mem),
        ("cpu", cpu_set),
        ("pids", pids),
        ("blkio", blkio),
        ("hugetlb", hugetlb),
        ("net_cls", net_cls),
        ("net_prio", net_prio),
        ("unified", unified),
    ]
    .into_iter()
    .find(|(_, set)| *set)
    .map(|(c, _)| c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use oci_spec::runtime::{LinuxMemoryBuilder, LinuxPidsBuilder, LinuxResourcesBuilder};

    #[test]
    fn limits_are_named_as_runc_names_them() {
        let none = LinuxResources::default();
        assert!(refuse_limits(&none, Layout::Hybrid, Path::new("/x")).is_ok());
        let pids = LinuxResourcesBuilder::default()
            .pids(LinuxPidsBuilder::default().limit(10).build().unwrap())
            .build()
            .unwrap();
        let e = refuse_limits(&pids, Layout::Hybrid, Path::new("/x")).unwrap_err().to_string();
        assert_eq!(e, "cannot set pids limit: container could not join or create cgroup");
        let both = LinuxResourcesBuilder::default()
            .pids(LinuxPidsBuilder::default().limit(10).build().unwrap())
            .memory(LinuxMemoryBuilder::default().limit(1 << 20).build().unwrap())
            .build()
            .unwrap();
        let e = refuse_limits(&both, Layout::Hybrid, Path::new("/x")).unwrap_err().to_string();
        assert!(e.starts_with("cannot set memory limit"), "{e}");
        let e = refuse_limits(&both, Layout::Unified, Path::new("/sys/fs/cgroup/c1")).unwrap_err().to_string();
        assert!(e.ends_with("cgroups: mkdir /sys/fs/cgroup/c1: permission denied"), "{e}");
    }

    #[test]
    fn a_missing_dir_is_judged_by_its_nearest_ancestor() {
        let t = tempfile::tempdir().unwrap();
        assert!(may_make(&t.path().join("a/b/c")), "the caller owns the tempdir");
        assert!(!may_make(Path::new("/proc/1/nonexistent/x")) || nix::unistd::geteuid().is_root());
    }
}
