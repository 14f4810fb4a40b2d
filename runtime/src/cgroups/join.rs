//! Making the cgroup and putting processes in it: init moving itself in on
//! v1 and hybrid hosts ([`SelfJoin`]), init cloned straight into it on v2
//! (`CLONE_INTO_CGROUP`), or a process added by pid. Runs in the runtime
//! process; init only writes "0" to the files a [`SelfJoin`] names.

use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

use libcgroups::common::CgroupManager;
use nix::unistd::Pid;
use oci_spec::runtime::{LinuxDevice, LinuxResources};

use super::check::Layout;
use super::{io_err, read_trim, Cgroup, Result};

/// How init moves itself into its cgroup on a v1 or hybrid host.
pub(crate) struct SelfJoin {
    /// v1 `tasks` files: init writes "0" to each.
    pub tasks: Vec<PathBuf>,
    /// The hybrid cgroup2 directory: init is cloned into it when the kernel
    /// allows, and otherwise writes "0" to `cgroup.procs` there.
    pub unified: Option<(OwnedFd, PathBuf)>,
}

impl Cgroup {
    /// v1 and hybrid hosts: makes every directory of the cgroup, applies the
    /// limits, and returns what init needs to move *itself* in. A process
    /// moved by pid takes the kernel's global threadgroup lock, whose write
    /// side waits for an RCU grace period (5-15 ms here, on every create
    /// after a quiet moment); a single thread moving itself through a v1
    /// `tasks` file skips it. `None` on v2 (clone3 places init) and with
    /// the systemd driver.
    pub(crate) fn prepare_self_join(&self, r: &LinuxResources, devices: &[LinuxDevice]) -> Result<Option<SelfJoin>> {
        if self.layout == Layout::Unified || self.systemd {
            return Ok(None);
        }
        let mut tasks = Vec::new();
        for dir in self.dirs() {
            std::fs::create_dir_all(&dir).map_err(io_err("create", &dir))?;
            if dir.join("cpuset.cpus").exists() {
                inherit_cpuset(&dir)?;
            }
            tasks.push(dir.join("tasks"));
        }
        let mut unified = None;
        for dir in &self.extra {
            std::fs::create_dir_all(dir).map_err(io_err("create", dir))?;
            if dir.join("tasks").exists() {
                tasks.push(dir.join("tasks"));
            } else {
                let fd = open_dir(dir).map_err(io_err("open", dir))?;
                unified = Some((fd, dir.join("cgroup.procs")));
            }
        }
        self.apply(r, devices)?;
        self.prepared.set(true);
        self.self_joined.set(true);
        Ok(Some(SelfJoin { tasks, unified }))
    }

    /// For a process joining a container that runs (`exec`): the same
    /// self-join as [`Cgroup::prepare_self_join`], into the existing cgroup.
    pub(crate) fn existing_self_join(&self) -> Option<SelfJoin> {
        if self.layout == Layout::Unified || self.systemd {
            return None;
        }
        let mut tasks: Vec<PathBuf> = self.dirs().into_iter().map(|d| d.join("tasks")).collect();
        let mut unified = None;
        for dir in &self.extra {
            if dir.join("tasks").exists() {
                tasks.push(dir.join("tasks"));
            } else if let Ok(fd) = open_dir(dir) {
                unified = Some((fd, dir.join("cgroup.procs")));
            }
        }
        self.self_joined.set(true);
        Some(SelfJoin { tasks, unified })
    }

    /// v2 cgroupfs driver: makes the cgroup, applies the limits and returns
    /// the directory for `clone3(CLONE_INTO_CGROUP)`. `None` elsewhere (v1
    /// membership is per hierarchy; [`Cgroup::join`] does it after the clone).
    pub(crate) fn prepare(&self, r: &LinuxResources, devices: &[LinuxDevice]) -> Result<Option<OwnedFd>> {
        if self.layout != Layout::Unified || self.systemd {
            return Ok(None);
        }
        let dir = make_v2_dirs(&self.root, Path::new(&self.recorded))?;
        self.apply(r, devices)?;
        self.prepared.set(true);
        Ok(Some(open_dir(&dir).map_err(io_err("open", &dir))?))
    }

    /// Puts `pid` in the cgroup (every hierarchy; the systemd driver:
    /// starts the scope with it) and, unless [`Cgroup::prepare`] did it,
    /// applies the limits.
    pub(crate) fn join(&self, pid: Pid, r: &LinuxResources, devices: &[LinuxDevice]) -> Result<()> {
        if self.self_joined.get() {
            return Ok(());
        }
        if self.systemd {
            // systemd moves init in; then the controllers systemd does not
            // manage (hugetlb, rdma, misc) are enabled down to the unit's
            // cgroup, as runc does, for the limits written next.
            self.start_unit(pid, r, devices)?;
            make_v2_dirs(&self.root, Path::new(self.rel()))?;
            return self.apply(r, devices);
        }
        self.add(pid)?;
        if !self.prepared.get() {
            self.apply(r, devices)?;
        }
        Ok(())
    }

    /// Adds one more process (exec) to every hierarchy of the cgroup.
    pub(crate) fn add(&self, pid: Pid) -> Result<()> {
        if self.self_joined.get() {
            return Ok(());
        }
        // libcgroups' manager puts a task at one path in every hierarchy.
        let own_dirs = if self.split() { self.dirs() } else { Vec::new() };
        if !self.split() {
            self.mgr()?.add_task(pid).map_err(self.err("add process"))?;
        }
        for dir in own_dirs.iter().chain(&self.extra) {
            std::fs::create_dir_all(dir).map_err(io_err("create", dir))?;
            let procs = dir.join("cgroup.procs");
            std::fs::write(&procs, pid.as_raw().to_string()).map_err(io_err("write", &procs))?;
        }
        Ok(())
    }
}

fn open_dir(dir: &Path) -> std::io::Result<OwnedFd> {
    let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECTORY).open(dir)?;
    Ok(OwnedFd::from(f))
}

/// A new v1 cpuset cgroup starts with no cpus and no mems, and takes no
/// task until it has some: give each new level its parent's.
fn inherit_cpuset(dir: &Path) -> Result<()> {
    let mut chain: Vec<&Path> = dir.ancestors().take_while(|p| p.join("cpuset.cpus").exists()).collect();
    chain.reverse();
    for pair in chain.windows(2) {
        for f in ["cpuset.cpus", "cpuset.mems"] {
            let here = pair[1].join(f);
            if read_trim(&here).is_empty() {
                let parent = read_trim(&pair[0].join(f));
                std::fs::write(&here, parent).map_err(io_err("write", &here))?;
            }
        }
    }
    Ok(())
}

/// Makes `root/rel` and its parents, enabling in each parent every
/// controller the parent has (what libcgroups' v2 `add_task` does), and
/// returns the full path.
fn make_v2_dirs(root: &Path, rel: &Path) -> Result<PathBuf> {
    let mut cur = root.to_path_buf();
    for comp in rel.components().filter(|c| matches!(c, Component::Normal(_))) {
        let have = read_trim(&cur.join("cgroup.controllers"));
        let on = read_trim(&cur.join("cgroup.subtree_control"));
        for c in have.split_whitespace().filter(|c| !on.split_whitespace().any(|o| o == *c)) {
            // Best effort: a controller that can't be enabled makes the
            // limit that needs it fail later, naming its file.
            let _ = std::fs::write(cur.join("cgroup.subtree_control"), format!("+{c}"));
        }
        cur.push(comp);
        match std::fs::create_dir(&cur) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(io_err("create", &cur)(e)),
            _ => {}
        }
    }
    Ok(cur)
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{self, put};
    use super::*;

    #[test]
    fn new_cpuset_levels_take_their_parents_cpus_and_mems() {
        let root = tempfile::tempdir().unwrap();
        let top = root.path().join("cpuset");
        put(&top, "cpuset.cpus", "0-3\n");
        put(&top, "cpuset.mems", "0\n");
        put(&top.join("a"), "cpuset.cpus", "1\n");
        put(&top.join("a"), "cpuset.mems", "");
        put(&top.join("a/b"), "cpuset.cpus", "");
        put(&top.join("a/b"), "cpuset.mems", "");
        inherit_cpuset(&top.join("a/b")).unwrap();
        assert_eq!(read_trim(&top.join("a/cpuset.cpus")), "1", "a level with cpus keeps them");
        assert_eq!(read_trim(&top.join("a/cpuset.mems")), "0");
        assert_eq!(read_trim(&top.join("a/b/cpuset.cpus")), "1");
        assert_eq!(read_trim(&top.join("a/b/cpuset.mems")), "0");
    }

    #[test]
    fn v2_directories_are_made_with_the_parents_controllers_enabled() {
        let root = tempfile::tempdir().unwrap();
        put(root.path(), "cgroup.controllers", "cpu memory pids\n");
        put(root.path(), "cgroup.subtree_control", "cpu memory pids\n");
        put(&root.path().join("a"), "cgroup.controllers", "cpu memory\n");
        put(&root.path().join("a"), "cgroup.subtree_control", "cpu\n");
        let dir = make_v2_dirs(root.path(), Path::new("/a/./b/c")).unwrap();
        assert_eq!(dir, root.path().join("a/b/c"));
        assert!(dir.is_dir());
        // Regular files stand in for cgroupfs ones: each write replaces the
        // content, so what is seen is the last controller enabled.
        assert_eq!(read_trim(&root.path().join("cgroup.subtree_control")), "cpu memory pids", "all were on");
        assert_eq!(read_trim(&root.path().join("a/cgroup.subtree_control")), "+memory");
        assert!(!root.path().join("a/b/cgroup.subtree_control").exists(), "b lists no controllers");
        let e = make_v2_dirs(&root.path().join("no"), Path::new("x")).unwrap_err().to_string();
        assert!(e.contains("create") && e.contains("no/x"), "{e}");
    }

    #[test]
    fn init_joins_every_v1_hierarchy_itself_and_the_unified_one_by_fd() {
        let root = tempfile::tempdir().unwrap();
        let cg = fixture::cgroup(root.path(), Layout::Hybrid, "/t/ct");
        // Named v1 hierarchies have a tasks file; cgroup2 has none.
        put(&root.path().join("systemd/t/ct"), "tasks", "");
        let sj = cg.prepare_self_join(&LinuxResources::default(), &[]).unwrap().unwrap();
        let mut tasks: Vec<String> =
            sj.tasks.iter().map(|t| t.strip_prefix(root.path()).unwrap().display().to_string()).collect();
        tasks.sort();
        let want = ["cpu,cpuacct", "cpuset", "devices", "freezer", "memory", "pids", "systemd"]
            .map(|h| format!("{h}/t/ct/tasks"));
        assert_eq!(tasks, want);
        let (_, procs) = sj.unified.unwrap();
        assert_eq!(procs, root.path().join("unified/t/ct/cgroup.procs"));
        assert!(root.path().join("memory/t/ct").is_dir());
        // Init moves itself: joining by pid afterwards does nothing.
        cg.join(Pid::from_raw(1), &LinuxResources::default(), &[]).unwrap();
        cg.add(Pid::from_raw(1)).unwrap();
        assert!(!root.path().join("unified/t/ct/cgroup.procs").exists());
    }

    #[test]
    fn v2_and_systemd_leave_joining_to_the_clone_or_the_manager() {
        let root = tempfile::tempdir().unwrap();
        let cg = fixture::cgroup(root.path(), Layout::Unified, "/t/ct");
        assert!(cg.prepare_self_join(&LinuxResources::default(), &[]).unwrap().is_none());
        assert!(cg.existing_self_join().is_none());
        let cg = fixture::cgroup(root.path(), Layout::Hybrid, "/t/ct");
        assert!(cg.prepare(&LinuxResources::default(), &[]).unwrap().is_none(), "v1 joins after the clone");
        let sj = cg.existing_self_join().unwrap();
        assert_eq!(sj.tasks.len(), 6, "one per controller hierarchy; extra ones that aren't there are left out");
        assert!(sj.unified.is_none() && !root.path().join("memory").exists(), "nothing is made for exec");
    }
}
