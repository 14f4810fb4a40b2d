//! Finding the container's cgroup: for a new container from
//! `linux.cgroupsPath` (after checking the host can enforce its limits),
//! and for a running one from the path its state record keeps. Runs in the
//! runtime process; touches no cgroupfs.

use std::cell::{Cell, OnceCell};
use std::path::{Component, Path};

use oci_spec::runtime::LinuxResources;

use super::check::{self, Host, Layout};
use super::{hierarchy, manager, path, Cgroup, CgroupError, Mount, Result, ROOT};

impl Cgroup {
    /// Resolves `cgroupsPath` for a new container and checks that this host
    /// can enforce `resources`. Touches no cgroupfs.
    pub(crate) fn for_create(
        cgroups_path: Option<&str>,
        id: &str,
        systemd: bool,
        resources: Option<&LinuxResources>,
    ) -> Result<Cgroup> {
        let (host, ms) = hierarchy::host()?;
        if let Some(r) = resources {
            check_host(r, &host)?;
        }
        let wanted = path::wanted(cgroups_path, id, systemd).map_err(CgroupError::Path)?;
        let own = || crate::sys::fs::read_proc("/proc/self/cgroup").unwrap_or_default();
        let recorded = resolve(wanted, &host, own)?;
        Ok(Self::open_with(Path::new(ROOT), recorded, systemd, id, host.layout, ms))
    }

    /// Opens the cgroup a state record names.
    pub(crate) fn open(recorded: &str, systemd: bool, id: &str) -> Result<Cgroup> {
        if !systemd && !usable_record(recorded) {
            return Err(CgroupError::Path(format!("state records an unusable cgroup path {recorded:?}")));
        }
        let (host, ms) = hierarchy::host()?;
        Ok(Self::open_with(Path::new(ROOT), recorded.to_string(), systemd, id, host.layout, ms))
    }

    /// The handle on `recorded` in the hierarchies `mounts` under `root`.
    pub(super) fn open_with(
        root: &Path,
        recorded: String,
        systemd: bool,
        id: &str,
        layout: Layout,
        mounts: Vec<Mount>,
    ) -> Cgroup {
        let rel = recorded.trim_start_matches('/');
        let extra = match layout {
            Layout::Unified => Vec::new(),
            _ => mounts.iter().filter(|m| m.controllers.is_empty()).map(|m| m.dir.join(rel)).collect(),
        };
        Cgroup {
            recorded,
            layout,
            systemd,
            id: id.to_string(),
            root: root.to_path_buf(),
            mgr: OnceCell::new(),
            extra,
            mounts,
            prepared: Cell::new(false),
            self_joined: Cell::new(false),
        }
    }

    /// Checks `r` against this host's controllers (for `update`).
    pub(crate) fn check(&self, r: &LinuxResources) -> Result<()> {
        let (host, _) = hierarchy::host()?;
        check_host(r, &host)
    }
}

fn check_host(r: &LinuxResources, host: &Host) -> Result<()> {
    check::check_host(r, host).map_err(|r| CgroupError::Refused { field: r.field, why: r.why })
}

/// The record is ours, but it sits on disk: never let a damaged one aim
/// kill/freeze/remove at the root cgroup or outside the tree.
fn usable_record(recorded: &str) -> bool {
    let rel = Path::new(recorded.trim_start_matches('/'));
    let plain = rel.components().all(|c| matches!(c, Component::Normal(_)));
    !rel.as_os_str().is_empty() && plain
}

/// The path to record for `wanted`: a relative one goes under the runtime's
/// own cgroup, read from `own` (`/proc/self/cgroup`) only then.
fn resolve(wanted: path::Wanted, host: &Host, own: impl FnOnce() -> String) -> Result<String> {
    match wanted {
        path::Wanted::Absolute(p) => Ok(p.to_string_lossy().into_owned()),
        path::Wanted::Relative(rel) => {
            let own = path::parse_proc_cgroup(&own());
            let resolved = if host.layout == Layout::Unified {
                path::under_own_v2(&own, &rel)
            } else {
                let mut joined: Vec<&str> = host.controllers.iter().map(String::as_str).collect();
                joined.push("name=systemd");
                path::under_own_v1(&own, &joined, &rel)
            };
            Ok(resolved.map_err(CgroupError::Path)?.to_string_lossy().into_owned())
        }
        path::Wanted::Systemd { slice, prefix, name } => manager::systemd_recorded(&slice, &prefix, &name, host.layout),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(layout: Layout, ctrls: &[&str]) -> Host {
        Host { layout, controllers: ctrls.iter().map(|c| c.to_string()).collect() }
    }

    #[test]
    fn a_damaged_record_is_refused() {
        assert!(usable_record("/tinyrun-test/ct1") && usable_record("a/b"));
        for bad in ["", "/", "//", "/a/../b", "../x", "a/.."] {
            assert!(!usable_record(bad), "{bad:?}");
        }
        let e = Cgroup::open("/", false, "ct").err().unwrap().to_string();
        assert!(e.contains("unusable cgroup path"), "{e}");
    }

    #[test]
    fn absolute_paths_ignore_our_own_cgroup() {
        let want = path::Wanted::Absolute("/a/b".into());
        let got = resolve(want, &host(Layout::Hybrid, &["cpu"]), || panic!("/proc/self/cgroup read")).unwrap();
        assert_eq!(got, "/a/b");
    }

    #[test]
    fn relative_paths_go_under_our_cgroup_in_the_joined_hierarchies() {
        let rel = || path::Wanted::Relative("c".into());
        // On v1 the named systemd hierarchy is joined too, so it must agree.
        let own = "12:name=systemd:/sup\n4:memory:/sup\n3:pids:/sup\n0::/\n";
        let h = host(Layout::Hybrid, &["memory", "pids"]);
        assert_eq!(resolve(rel(), &h, || own.into()).unwrap(), "/sup/c");
        let split = "12:name=systemd:/elsewhere\n4:memory:/sup\n3:pids:/sup\n";
        let e = resolve(rel(), &h, || split.into()).unwrap_err().to_string();
        assert!(e.contains("name=systemd: /elsewhere"), "{e}");
        let v2 = resolve(rel(), &host(Layout::Unified, &["memory"]), || "0::/user.slice/s.scope\n".into());
        assert_eq!(v2.unwrap(), "/user.slice/c");
    }
}
