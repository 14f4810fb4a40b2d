//! Finding the container's cgroup: for a new container from
//! `linux.cgroupsPath` (after checking the host can enforce its limits),
//! and for a running one from the path its state record keeps. Runs in the
//! runtime process; touches no cgroupfs.

use std::cell::{Cell, OnceCell};
use std::collections::BTreeMap;
use std::path::{Component, Path};

use oci_spec::runtime::LinuxResources;

use super::check::{self, Host, Layout};
use super::{hierarchy, path, systemd, Cgroup, CgroupError, Mount, Result, ROOT};

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
        let (recorded, per) = resolve(wanted, &host, &ms, own)?;
        Ok(Self::open_with(Path::new(ROOT), recorded, per, systemd, id, host.layout, ms))
    }

    /// Opens the cgroup a state record names, kept to the v1 controllers
    /// `only` when the record lists them.
    pub(crate) fn open(
        recorded: &str,
        per: &BTreeMap<String, String>,
        systemd: bool,
        id: &str,
        only: Option<&[String]>,
    ) -> Result<Cgroup> {
        if systemd {
            systemd::Unit::from_record(recorded, per).map_err(|e| CgroupError::Path(format!("state record: {e}")))?;
        }
        // (A systemd record's paths were checked as the unit's, just above.)
        let bad = |p: &str| !systemd && !usable_record(p);
        if let Some(p) = std::iter::once(recorded).chain(per.values().map(String::as_str)).find(|p| bad(p)) {
            return Err(CgroupError::Path(format!("state records an unusable cgroup path {p:?}")));
        }
        let (host, ms) = hierarchy::host()?;
        let cg = Self::open_with(Path::new(ROOT), recorded.to_string(), per.clone(), systemd, id, host.layout, ms);
        Ok(match only {
            Some(ctrls) => cg.keep_only(ctrls),
            None => cg,
        })
    }

    /// The handle on `recorded` in the hierarchies `mounts` under `root`.
    pub(super) fn open_with(
        root: &Path,
        recorded: String,
        per: BTreeMap<String, String>,
        systemd: bool,
        id: &str,
        layout: Layout,
        mounts: Vec<Mount>,
    ) -> Cgroup {
        let unit = if systemd { systemd::Unit::from_record(&recorded, &per).ok() } else { None };
        let mut cg = Cgroup {
            recorded,
            per,
            layout,
            systemd,
            unit,
            id: id.to_string(),
            root: root.to_path_buf(),
            mgr: OnceCell::new(),
            extra: Vec::new(),
            mounts,
            prepared: Cell::new(false),
            self_joined: Cell::new(false),
            only: None,
        };
        if layout != Layout::Unified {
            let extra = cg.mounts.iter().filter(|m| m.controllers.is_empty()).map(|m| m.dir.join(cg.rel_in(m)));
            cg.extra = extra.collect();
        }
        cg
    }

    /// Checks `r` against this host's controllers (for `update`).
    pub(crate) fn check(&self, r: &LinuxResources) -> Result<()> {
        let (host, _) = hierarchy::host()?;
        check_host(r, &host)?;
        self.check_only(r, &[])
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
/// The record for `wanted`: one path, and (v1, relative) the hierarchies
/// where the path differs from it.
fn resolve(
    wanted: path::Wanted,
    host: &Host,
    ms: &[Mount],
    own: impl FnOnce() -> String,
) -> Result<(String, BTreeMap<String, String>)> {
    let one = |p: std::path::PathBuf| (p.to_string_lossy().into_owned(), BTreeMap::new());
    match wanted {
        path::Wanted::Absolute(p) => Ok(one(p)),
        path::Wanted::Relative(rel) => {
            let own = path::parse_proc_cgroup(&own());
            if host.layout == Layout::Unified {
                return Ok(one(path::under_own_v2(&own, &rel).map_err(CgroupError::Path)?));
            }
            per_hierarchy(&own, ms, &rel)
        }
        path::Wanted::Systemd { slice, prefix, name } => systemd_recorded(&slice, &prefix, &name, host.layout),
    }
}

/// The record for the systemd driver's `slice:prefix:name`, on a host where
/// that driver can work: systemd running, and cgroup v2. A rootless
/// caller's unit goes to its own systemd, and the record keeps where.
fn systemd_recorded(
    slice: &str,
    prefix: &str,
    name: &str,
    layout: Layout,
) -> Result<(String, BTreeMap<String, String>)> {
    if !systemd::booted() {
        return Err(CgroupError::NoSystemd);
    }
    if layout != Layout::Unified {
        return Err(CgroupError::Path(
            "--systemd-cgroup: the systemd driver needs a cgroup v2 host; this one has cgroup v1".into(),
        ));
    }
    let recorded = format!("{slice}:{prefix}:{name}");
    let unit = systemd::Unit::parse(&recorded, systemd::user_instance_owner()).map_err(CgroupError::Path)?;
    Ok((recorded, unit.record()))
}

/// A relative path on a v1 host, under our cgroup in each hierarchy. The
/// devices hierarchy's path is the record (libcgroups' manager is built on
/// it); the others that differ are listed by mount directory name.
fn per_hierarchy(own: &[path::OwnLine], ms: &[Mount], rel: &Path) -> Result<(String, BTreeMap<String, String>)> {
    let mut all = Vec::new();
    for m in ms {
        let Some(name) = m.dir.file_name().and_then(|n| n.to_str()) else { continue };
        // runc 1.1 joins the hybrid host's cgroup2 hierarchy at the path
        // taken from its root, not under our cgroup there.
        let p = match m.v2 {
            true => path::clean(&Path::new("/").join(rel)),
            false => path::under_own_v1(own, own_line(m), rel).map_err(CgroupError::Path)?,
        };
        all.push((name.to_string(), p.to_string_lossy().into_owned(), m.controllers.iter().any(|c| c == "devices")));
    }
    let main = all.iter().find(|(_, _, dev)| *dev).or(all.first()).map(|(_, p, _)| p.clone());
    let main = main.ok_or_else(|| CgroupError::Path("no cgroup v1 hierarchy is mounted".into()))?;
    let per = all.into_iter().filter(|(_, p, _)| *p != main).map(|(n, p, _)| (n, p)).collect();
    Ok((main, per))
}

/// Which line of `/proc/self/cgroup` is v1 hierarchy `m`'s: a controller,
/// or the `name=` of a named one.
fn own_line(m: &Mount) -> &str {
    if let Some(c) = m.controllers.first() {
        return c;
    }
    let opts = || m.options.split(',');
    opts().find(|o| o.starts_with("name=")).or_else(|| opts().find(|o| *o != "xattr")).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn host(layout: Layout, ctrls: &[&str]) -> Host {
        Host { layout, controllers: ctrls.iter().map(|c| c.to_string()).collect() }
    }

    #[test]
    fn a_damaged_record_is_refused() {
        assert!(usable_record("/tinyrun-test/ct1") && usable_record("a/b"));
        for bad in ["", "/", "//", "/a/../b", "../x", "a/.."] {
            assert!(!usable_record(bad), "{bad:?}");
        }
        let e = Cgroup::open("/", &BTreeMap::new(), false, "ct", None).err().unwrap().to_string();
        assert!(e.contains("unusable cgroup path"), "{e}");
    }

    #[test]
    fn absolute_paths_ignore_our_own_cgroup() {
        let want = path::Wanted::Absolute("/a/b".into());
        let ms = super::super::fixture::hybrid_mounts(Path::new("/fake"));
        let got = resolve(want, &host(Layout::Hybrid, &["cpu"]), &ms, || panic!("/proc/self/cgroup read")).unwrap();
        assert_eq!(got, ("/a/b".to_string(), BTreeMap::new()));
    }

    #[test]
    fn relative_paths_go_under_our_cgroup_in_each_hierarchy() {
        let rel = || path::Wanted::Relative("c".into());
        let ms = super::super::fixture::hybrid_mounts(Path::new("/fake"));
        let h = host(Layout::Hybrid, &["memory", "pids"]);
        let same = "12:name=systemd:/sup\n9:cpuset:/sup\n8:freezer:/sup\n7:devices:/sup\n4:memory:/sup\n\
                    3:pids:/sup\n2:cpu,cpuacct:/sup\n0::/sup\n";
        let unified: BTreeMap<String, String> = [("unified".to_string(), "/c".to_string())].into();
        assert_eq!(resolve(rel(), &h, &ms, || same.into()).unwrap(), ("/sup/c".to_string(), unified));
        let split = same.replace("name=systemd:/sup", "name=systemd:/s").replace("memory:/sup", "memory:/m");
        let (main, per) = resolve(rel(), &h, &ms, || split.clone()).unwrap();
        assert_eq!(main, "/sup/c", "the devices hierarchy's path is the record");
        let want: BTreeMap<String, String> =
            [("memory", "/m/c"), ("systemd", "/s/c"), ("unified", "/c")].map(|(k, v)| (k.into(), v.into())).into();
        // cgroup2 at `/c` though we are at /sup there: runc 1.1 takes it from the root.
        assert_eq!(per, want);
        let cg = Cgroup::open_with(Path::new("/fake"), main, per, false, "ct", Layout::Hybrid, ms.clone());
        assert_eq!(cg.v1_dir("memory"), PathBuf::from("/fake/memory/m/c"));
        assert_eq!(cg.v1_dir("pids"), PathBuf::from("/fake/pids/sup/c"));
        assert_eq!(cg.extra, [PathBuf::from("/fake/systemd/s/c"), PathBuf::from("/fake/unified/c")]);
        assert_eq!(cg.unified_path(), "/c");
        assert!(cg.split());
        let (main, per) = resolve(rel(), &h, &ms, || same.into()).unwrap();
        let cg = Cgroup::open_with(Path::new("/fake"), main, per, false, "ct", Layout::Hybrid, ms.clone());
        assert!(!cg.split(), "the v1 controllers agree: libcgroups' manager serves");
        let e = resolve(rel(), &h, &ms, || "4:memory:/m\n".into()).unwrap_err().to_string();
        assert!(e.contains("/proc/self/cgroup"), "a hierarchy missing from /proc/self/cgroup: {e}");
        let v2 = resolve(rel(), &host(Layout::Unified, &["memory"]), &[], || "0::/user.slice/s.scope\n".into());
        assert_eq!(v2.unwrap().0, "/user.slice/c");
    }

    #[test]
    fn a_damaged_per_hierarchy_record_is_refused() {
        let per: BTreeMap<String, String> = [("memory".to_string(), "/a/../b".to_string())].into();
        let e = Cgroup::open("/ok", &per, false, "ct", None).err().unwrap().to_string();
        assert!(e.contains("\"/a/../b\""), "{e}");
    }
}
