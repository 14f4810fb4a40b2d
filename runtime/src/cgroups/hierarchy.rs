//! The host's cgroup hierarchies: which are mounted under `/sys/fs/cgroup`
//! (from `/proc/self/mountinfo`), the layout, and the controllers on offer.
//! Runs in the runtime process; init gets the list to build its `cgroup`
//! mounts from.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use libcgroups::common::{get_cgroup_setup, CgroupSetup};

use super::check::{Host, Layout};
use super::{io_err, CgroupError, Result, ROOT};

/// The v1 controllers libcgroups manages (and joins) when they are mounted.
pub(super) const LIBCGROUPS_V1: &[&str] = &[
    "cpu",
    "cpuacct",
    "cpuset",
    "devices",
    "hugetlb",
    "memory",
    "pids",
    "perf_event",
    "blkio",
    "net_prio",
    "net_cls",
    "freezer",
];

/// One mounted hierarchy, from `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mount {
    pub dir: PathBuf,
    /// Controllers (v1) libcgroups knows, or empty for a named hierarchy
    /// or cgroup2.
    pub controllers: Vec<String>,
    pub v2: bool,
    /// The superblock options that make the same hierarchy when mounted
    /// again (`cpu,cpuacct`, `name=systemd`; no `rw`/`ro`/`release_agent`).
    pub options: String,
}

/// This host's layout and controllers, and its hierarchies. Read once per
/// process: a command that opens a container's cgroup more than once (a
/// sandbox's run, exec and delete) asks each time, and the hierarchies
/// mounted under `/sys/fs/cgroup` don't change under a running command.
pub(super) fn host() -> Result<(Host, Vec<Mount>)> {
    static HOST: std::sync::OnceLock<(Host, Vec<Mount>)> = std::sync::OnceLock::new();
    if let Some(h) = HOST.get() {
        return Ok(h.clone());
    }
    let layout = match get_cgroup_setup() {
        Ok(CgroupSetup::Unified) => Layout::Unified,
        Ok(CgroupSetup::Hybrid) => Layout::Hybrid,
        Ok(CgroupSetup::Legacy) => Layout::Legacy,
        Err(e) => return Err(CgroupError::Path(format!("can't tell this host's cgroup layout at {ROOT}: {e}"))),
    };
    let ms = hierarchies(crate::mountinfo::read().unwrap_or_default(), ROOT);
    let host = host_at(Path::new(ROOT), layout, &ms)?;
    Ok(HOST.get_or_init(|| (host, ms)).clone())
}

/// The controllers on offer: v2 lists them in the root's
/// `cgroup.controllers`; v1 has one hierarchy per (group of) controllers.
fn host_at(root: &Path, layout: Layout, ms: &[Mount]) -> Result<Host> {
    let controllers: BTreeSet<String> = if layout == Layout::Unified {
        let f = root.join("cgroup.controllers");
        std::fs::read_to_string(&f).map_err(io_err("read", &f))?.split_whitespace().map(str::to_string).collect()
    } else {
        ms.iter().filter(|m| !m.v2).flat_map(|m| m.controllers.clone()).collect()
    };
    Ok(Host { layout, controllers })
}

/// Every visible cgroup hierarchy under `root` in mount table `table`
/// (module `mountinfo`): init's `cgroup` mounts are built from these too.
fn hierarchies(table: Vec<crate::mountinfo::Entry>, root: &str) -> Vec<Mount> {
    let mut out = Vec::new();
    for m in table.into_iter().filter(|m| m.mount_point.starts_with(root)) {
        // A later mount on the same point hides the earlier one (e.g. a
        // tmpfs over the hybrid `unified` cgroup2 mount).
        out.retain(|h: &Mount| h.dir != m.mount_point);
        if !(m.fs_type == "cgroup" || m.fs_type == "cgroup2") {
            continue;
        }
        let opts = m.super_options.split(',');
        let controllers = opts.clone().filter(|o| LIBCGROUPS_V1.contains(o)).map(str::to_string).collect();
        let options = opts
            .filter(|o| !matches!(*o, "rw" | "ro") && !o.starts_with("release_agent"))
            .collect::<Vec<_>>()
            .join(",");
        out.push(Mount { dir: m.mount_point, controllers, v2: m.fs_type == "cgroup2", options });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_mountinfo(info: &str, root: &str) -> Vec<Mount> {
        hierarchies(crate::mountinfo::parse(info), root)
    }

    /// A Debian 12 hybrid host's cgroup lines, with a tmpfs first and some
    /// unrelated mounts around them.
    const HYBRID: &str = "\
22 28 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
26 22 0:23 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
27 26 0:24 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
28 26 0:25 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,xattr,name=systemd
31 26 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,cpu,cpuacct
32 26 0:29 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,memory
33 26 0:30 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,pids,release_agent=/x
41 28 0:41 / /proc/sys/fs/binfmt_misc rw,relatime shared:20 - binfmt_misc binfmt_misc rw
";

    #[test]
    fn mountinfo_gives_each_hierarchy_with_its_mount_options() {
        let ms = parse_mountinfo(HYBRID, ROOT);
        let names: Vec<&str> = ms.iter().map(|m| m.dir.strip_prefix(ROOT).unwrap().to_str().unwrap()).collect();
        assert_eq!(names, ["unified", "systemd", "cpu,cpuacct", "memory", "pids"], "the tmpfs at the root is none");
        assert_eq!(
            ms[2],
            Mount {
                dir: Path::new(ROOT).join("cpu,cpuacct"),
                controllers: vec!["cpu".into(), "cpuacct".into()],
                v2: false,
                options: "cpu,cpuacct".into(),
            }
        );
        assert!(ms[0].v2 && ms[0].controllers.is_empty() && ms[0].options == "nsdelegate", "{:?}", ms[0]);
        assert_eq!((ms[1].controllers.len(), ms[1].options.as_str()), (0, "xattr,name=systemd"));
        assert_eq!(ms[4].options, "pids", "release_agent is not a superblock option to repeat");
    }

    #[test]
    fn a_later_mount_hides_the_hierarchy_beneath() {
        let over = format!("{HYBRID}50 26 0:50 / /sys/fs/cgroup/unified rw - tmpfs tmpfs rw\n");
        let ms = parse_mountinfo(&over, ROOT);
        assert!(ms.iter().all(|m| !m.dir.ends_with("unified")), "{ms:?}");
        let back = format!("{over}51 26 0:51 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n");
        assert!(parse_mountinfo(&back, ROOT).iter().any(|m| m.dir.ends_with("unified") && m.v2));
        assert!(parse_mountinfo("garbage\n\n1 2 3\n", ROOT).is_empty());
    }

    #[test]
    fn controllers_come_from_v1_hierarchies_or_the_v2_root() {
        let ms = parse_mountinfo(HYBRID, ROOT);
        let h = host_at(Path::new("/nonexistent"), Layout::Hybrid, &ms).unwrap();
        let want: BTreeSet<String> = ["cpu", "cpuacct", "memory", "pids"].map(String::from).into();
        assert_eq!(h.controllers, want);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("cgroup.controllers"), "cpuset cpu io memory pids\n").unwrap();
        let h = host_at(dir.path(), Layout::Unified, &ms).unwrap();
        assert_eq!(
            h.controllers.iter().map(String::as_str).collect::<Vec<_>>(),
            ["cpu", "cpuset", "io", "memory", "pids"]
        );
        let e = host_at(&dir.path().join("no"), Layout::Unified, &[]).unwrap_err().to_string();
        assert!(e.contains("no/cgroup.controllers"), "{e}");
    }
}
