//! Cgroups: a thin adapter over `libcgroups` (runtime-spec "Linux: Control
//! groups"). Runs in the runtime process only, never in init (init only
//! writes "0" to the files a [`join::SelfJoin`] names, and a resident init
//! works through the fds of a [`LeafFds`]).
//!
//! [`Cgroup`] is the container's cgroup: made (and its limits applied) by
//! `create` before init runs any code of its own, opened again from the
//! state record by `update`, `events`, `pause`, `ps`, `kill --all` and
//! `delete`. Controller work (limits, freezer, stats, membership) is
//! libcgroups'; this module decides *where* (`path`), *whether the host can
//! do it* (`check`), and fills the gaps libcgroups leaves on hybrid hosts:
//!
//! * libcgroups' v1 manager joins only the controllers it knows. runc also
//!   joins named hierarchies (`name=systemd`) and, on a hybrid host, the
//!   cgroup2 `unified` mount; so does this module ("extra" hierarchies), so
//!   every line of the container's `/proc/self/cgroup` names its own cgroup
//!   and, inside its cgroup namespace, reads `/`.
//! * libcgroups' v1 manager treats a relative path as relative to each
//!   hierarchy's root; runc puts it under the runtime's own cgroup in each
//!   hierarchy. The path is resolved here first (see `path`) and handed
//!   over absolute. Where the runtime's cgroups differ per hierarchy, so do
//!   the container's ([`Cgroup::per`]); libcgroups' v1 manager takes one
//!   path for all, so then this module writes every limit itself, each at
//!   its controller's path (`v1`: device rules and pids; `apart`: the
//!   rest), as runc's fs driver does.
//! * libcgroups' v2 manager makes the directory only when adding a task;
//!   for `CLONE_INTO_CGROUP` it must exist (with its limits) before the
//!   clone, so [`Cgroup::prepare`] makes it the same way.
//! * On v1, device rules and a pids limit alone (nearly every container)
//!   are written directly (`v1`): libcgroups' v1 manager costs about 1 ms
//!   of CPU just to be built.
//! * The hybrid `unified` mount's controllers (here: hugetlb) are not used
//!   for limits: libcgroups treats a hybrid host as v1, and a field whose
//!   controller has no v1 hierarchy is refused naming it (`check`).
//!
//! The files, by concern: `hierarchy` (the host's mounted hierarchies),
//! `open` (finding the cgroup for a new container or a state record),
//! `manager` (libcgroups' manager), `systemd` (the systemd driver: a
//! transient unit per container, whose cgroup the rest then treats as a
//! v2 one), `join` (making
//! the cgroup and putting processes in it), `limits` (applying and updating
//! `linux.resources`), `freeze` (the freezer and signalling every process),
//! `read` (pids, stats, usage, OOM kills), `kill` (SIGKILL for a whole
//! cgroup), `destroy` (removal), `only` (a v1
//! cgroup kept to the hierarchies a caller names), `leaf` (a cgroup per
//! program a resident init runs). This file
//! holds the [`Cgroup`] handle itself and where its directories are.
//!
//! Every path is taken under the handle's `root` (`/sys/fs/cgroup` outside
//! tests), so the file-level logic is unit-tested on tempdir fixtures.

mod apart;
mod check;
mod destroy;
mod freeze;
mod hierarchy;
mod join;
mod kill;
mod leaf;
mod limits;
mod manager;
mod only;
mod open;
mod path;
mod read;
mod rootless;
pub(crate) mod stats;
mod sub;
mod systemd;
mod v1;

use std::cell::{Cell, OnceCell};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use libcgroups::common::AnyCgroupManager;

pub(crate) use crate::error::CgroupError;
use check::Layout;
pub(crate) use check::{check_spec, drop_ignored};
pub(crate) use freeze::is_frozen;
pub(crate) use hierarchy::Mount;
pub(crate) use kill::kill_session;
pub(crate) use leaf::{Leaf, LeafFds, Survivors};
pub(crate) use only::normalise as normalise_v1_controllers;
pub use read::LimitsHit;
pub use stats::StatsData;
pub(crate) use sub::SubCgroups;

/// Where the host's cgroup hierarchies are mounted.
const ROOT: &str = "/sys/fs/cgroup";

type Result<T, E = CgroupError> = std::result::Result<T, E>;

fn io_err(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> CgroupError {
    let path = path.to_path_buf();
    move |source| CgroupError::Io { op, path, source }
}

/// A cgroupfs file's content without its newline; empty when unreadable.
fn read_trim(p: &Path) -> String {
    std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_default()
}

/// The container's cgroup.
pub(crate) struct Cgroup {
    /// What the state record keeps: an absolute path, or `slice:prefix:name`.
    recorded: String,
    /// v1 hierarchies (by mount directory name: `memory`, `cpu,cpuacct`,
    /// `systemd`, `unified`) where the cgroup's path is not `recorded`:
    /// a relative cgroupsPath from a caller whose cgroups differ per
    /// hierarchy. Kept in the state record beside `recorded`.
    per: BTreeMap<String, String>,
    layout: Layout,
    systemd: bool,
    /// The systemd driver's unit and its cgroup, read from `recorded`
    /// (and, for a user instance's unit, `per`).
    unit: Option<systemd::Unit>,
    id: String,
    /// Where the hierarchies are mounted ([`ROOT`] outside tests).
    root: PathBuf,
    /// libcgroups' manager, made on first use: on v1 making one reads
    /// mountinfo a dozen times through a hardened procfs handle, which
    /// `delete`, `kill --all` and `ps` don't need.
    mgr: OnceCell<AnyCgroupManager>,
    /// Hierarchies joined beside libcgroups' (named v1, hybrid unified).
    extra: Vec<PathBuf>,
    /// v1 mount point per controller, for files libcgroups doesn't read.
    mounts: Vec<Mount>,
    /// Limits were applied before the clone (v2, CLONE_INTO_CGROUP).
    prepared: Cell<bool>,
    /// Init moves itself in (see [`Cgroup::prepare_self_join`]).
    self_joined: Cell<bool>,
    /// The v1 controllers the cgroup is kept to (`only`): `mounts` lists
    /// just their hierarchies.
    only: Option<Vec<String>>,
}

impl Cgroup {
    /// The host's cgroup hierarchies, as this cgroup was opened with.
    pub(crate) fn hierarchies(&self) -> &[Mount] {
        &self.mounts
    }

    /// The v1 controllers the cgroup is kept to, to keep in the state
    /// record; `None`: every mounted hierarchy.
    pub(crate) fn kept_to(&self) -> Option<&Vec<String>> {
        self.only.as_ref()
    }

    /// The path to keep in the state record.
    pub(crate) fn recorded(&self) -> &str {
        &self.recorded
    }

    /// The per-hierarchy paths to keep in the state record beside
    /// [`Cgroup::recorded`] (empty unless they differ).
    pub(crate) fn per_hierarchy(&self) -> &BTreeMap<String, String> {
        &self.per
    }

    /// The cgroup's path in the hybrid host's cgroup2 hierarchy (v2: its
    /// only one), as `/proc/<pid>/cgroup` shows it on the `0::` line.
    pub(crate) fn unified_path(&self) -> &str {
        self.per.get("unified").unwrap_or(&self.recorded)
    }

    /// Whether the cgroup's paths differ between v1 controller hierarchies
    /// (libcgroups' manager takes one path for them all; the named and
    /// cgroup2 hierarchies are this module's own).
    fn split(&self) -> bool {
        let differs = |m: &&Mount| m.dir.file_name().and_then(|n| n.to_str()).is_some_and(|n| self.per.contains_key(n));
        self.mounts.iter().filter(|m| !m.controllers.is_empty()).any(|m| differs(&m))
    }

    /// The recorded path below a hierarchy's mount point (the systemd
    /// driver: its scope's cgroup).
    fn rel(&self) -> &str {
        self.unit.as_ref().map_or(&self.recorded, |u| &u.path).trim_start_matches('/')
    }

    /// The cgroup's path below the mount point of hierarchy `m`.
    fn rel_in(&self, m: &Mount) -> &str {
        let path = m.dir.file_name().and_then(|n| self.per.get(n.to_str()?));
        path.unwrap_or(&self.recorded).trim_start_matches('/')
    }

    /// Every directory of the cgroup.
    fn dirs(&self) -> Vec<PathBuf> {
        match self.layout {
            Layout::Unified => vec![self.v2_dir()],
            _ => self.mounts.iter().filter(|m| !m.controllers.is_empty()).map(|m| m.dir.join(self.rel_in(m))).collect(),
        }
    }

    fn v2_dir(&self) -> PathBuf {
        self.root.join(self.rel())
    }

    fn v1_dir(&self, ctrl: &str) -> PathBuf {
        match self.mounts.iter().find(|m| m.controllers.iter().any(|c| c == ctrl)) {
            Some(m) => m.dir.join(self.rel_in(m)),
            None => self.root.join(ctrl).join(self.rel()),
        }
    }
}

/// Fixtures shared by the submodules' tests: a fake cgroupfs in a tempdir.
#[cfg(test)]
mod fixture {
    use super::*;

    /// A hybrid host's hierarchies under `root`: cpu,cpuacct, memory, pids,
    /// freezer, devices, cpuset, plus `name=systemd` and `unified`.
    pub(super) fn hybrid_mounts(root: &Path) -> Vec<Mount> {
        let v1 = |name: &str| Mount {
            dir: root.join(name),
            controllers: name.split(',').map(str::to_string).collect(),
            v2: false,
            options: name.into(),
        };
        let mut ms: Vec<Mount> =
            ["cpu,cpuacct", "memory", "pids", "freezer", "devices", "cpuset"].into_iter().map(v1).collect();
        ms.push(Mount { dir: root.join("systemd"), controllers: vec![], v2: false, options: "name=systemd".into() });
        ms.push(Mount { dir: root.join("unified"), controllers: vec![], v2: true, options: String::new() });
        ms
    }

    /// A handle on `recorded` under `root`, as `open` would make it.
    pub(super) fn cgroup(root: &Path, layout: Layout, recorded: &str) -> Cgroup {
        let mounts = if layout == Layout::Unified { Vec::new() } else { hybrid_mounts(root) };
        Cgroup::open_with(root, recorded.into(), BTreeMap::new(), false, "ct", layout, mounts)
    }

    /// Writes `text` to `dir/file`, making `dir` first.
    pub(super) fn put(dir: &Path, file: &str, text: &str) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join(file), text).unwrap();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_follow_the_layout_and_driver() {
        let root = Path::new("/fake");
        let cg = fixture::cgroup(root, Layout::Hybrid, "/a/b");
        let dirs = cg.dirs();
        assert_eq!(dirs.len(), 6, "one per v1 controller hierarchy: {dirs:?}");
        assert!(dirs.contains(&PathBuf::from("/fake/cpu,cpuacct/a/b")), "{dirs:?}");
        assert_eq!(cg.extra, vec![PathBuf::from("/fake/systemd/a/b"), PathBuf::from("/fake/unified/a/b")]);
        assert_eq!(cg.v1_dir("cpuacct"), PathBuf::from("/fake/cpu,cpuacct/a/b"));
        // A controller with no hierarchy falls back to its usual mount point.
        assert_eq!(cg.v1_dir("blkio"), PathBuf::from("/fake/blkio/a/b"));
        let cg = fixture::cgroup(root, Layout::Unified, "/a/b");
        assert_eq!(cg.dirs(), vec![PathBuf::from("/fake/a/b")]);
        assert!(cg.extra.is_empty());
        let sd =
            Cgroup::open_with(root, "system.slice:x:y".into(), BTreeMap::new(), true, "ct", Layout::Unified, vec![]);
        assert_eq!(sd.dirs(), vec![PathBuf::from("/fake/system.slice/x-y.scope")], "the scope's cgroup");
    }
}
