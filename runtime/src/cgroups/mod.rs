//! Cgroups: a thin adapter over `libcgroups` (runtime-spec "Linux: Control
//! groups"). Runs in the runtime process only, never in init.
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
//!   hierarchy's root; runc puts it under the runtime's own cgroup. The path
//!   is resolved here first (see `path`) and handed over absolute.
//! * libcgroups' v2 manager makes the directory only when adding a task;
//!   for `CLONE_INTO_CGROUP` it must exist (with its limits) before the
//!   clone, so [`Cgroup::prepare`] makes it the same way.
//! * On v1, device rules and a pids limit alone (nearly every container)
//!   are written directly (`v1`): libcgroups' v1 manager costs about 1 ms
//!   of CPU just to be built.
//! * The hybrid `unified` mount's controllers (here: hugetlb) are not used
//!   for limits: libcgroups treats a hybrid host as v1, and a field whose
//!   controller has no v1 hierarchy is refused naming it (`check`).

mod check;
mod path;
pub(crate) mod stats;
mod v1;

use std::cell::Cell;
use std::collections::BTreeSet;
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use libcgroups::common::{
    create_cgroup_manager, get_cgroup_setup, AnyCgroupManager, AnyManagerError, CgroupConfig, CgroupManager,
    CgroupSetup, ControllerOpt, FreezerState,
};
use nix::unistd::Pid;
use oci_spec::runtime::{LinuxDevice, LinuxDeviceCgroup, LinuxDeviceType, LinuxResources};

pub(crate) use crate::error::CgroupError;
pub(crate) use check::check_spec;
use check::Layout;
pub use stats::StatsData;

const ROOT: &str = "/sys/fs/cgroup";
/// The v1 controllers libcgroups manages (and joins) when they are mounted.
const LIBCGROUPS_V1: &[&str] = &[
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

type Result<T, E = CgroupError> = std::result::Result<T, E>;

fn io_err(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> CgroupError {
    let path = path.to_path_buf();
    move |source| CgroupError::Io { op, path, source }
}

/// One mounted hierarchy, from `/proc/self/mountinfo`.
#[derive(Debug, Clone)]
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

/// Every visible cgroup hierarchy under `/sys/fs/cgroup`: the one parser of
/// mountinfo for cgroups (init's `cgroup` mounts are built from it too).
fn mounts() -> Vec<Mount> {
    let info = crate::sys::fs::read_proc("/proc/self/mountinfo").unwrap_or_default();
    let mut out = Vec::new();
    for line in info.lines() {
        let Some((pre, post)) = line.split_once(" - ") else { continue };
        let dir = pre.split(' ').nth(4).unwrap_or_default();
        let mut post = post.split(' ');
        let fstype = post.next().unwrap_or_default();
        let opts = post.nth(1).unwrap_or_default();
        if !dir.starts_with(ROOT) {
            continue;
        }
        // A later mount on the same point hides the earlier one (e.g. a
        // tmpfs over the hybrid `unified` cgroup2 mount).
        out.retain(|m: &Mount| m.dir != Path::new(dir));
        if !(fstype == "cgroup" || fstype == "cgroup2") {
            continue;
        }
        let controllers = opts.split(',').filter(|o| LIBCGROUPS_V1.contains(o)).map(str::to_string).collect();
        let options = opts
            .split(',')
            .filter(|o| !matches!(*o, "rw" | "ro") && !o.starts_with("release_agent"))
            .collect::<Vec<_>>()
            .join(",");
        out.push(Mount { dir: dir.into(), controllers, v2: fstype == "cgroup2", options });
    }
    out
}

fn host() -> Result<(check::Host, Vec<Mount>)> {
    let layout = match get_cgroup_setup() {
        Ok(CgroupSetup::Unified) => Layout::Unified,
        Ok(CgroupSetup::Hybrid) => Layout::Hybrid,
        Ok(CgroupSetup::Legacy) => Layout::Legacy,
        Err(e) => return Err(CgroupError::Path(format!("can't tell this host's cgroup layout at {ROOT}: {e}"))),
    };
    let ms = mounts();
    let controllers: BTreeSet<String> = if layout == Layout::Unified {
        let f = Path::new(ROOT).join("cgroup.controllers");
        std::fs::read_to_string(&f).map_err(io_err("read", &f))?.split_whitespace().map(str::to_string).collect()
    } else {
        ms.iter().filter(|m| !m.v2).flat_map(|m| m.controllers.clone()).collect()
    };
    Ok((check::Host { layout, controllers }, ms))
}

/// The container's cgroup.
pub(crate) struct Cgroup {
    /// What the state record keeps: an absolute path, or `slice:prefix:name`.
    recorded: String,
    layout: Layout,
    systemd: bool,
    id: String,
    /// libcgroups' manager, made on first use: on v1 making one reads
    /// mountinfo a dozen times through a hardened procfs handle, which
    /// `delete`, `kill --all` and `ps` don't need.
    mgr: std::cell::OnceCell<AnyCgroupManager>,
    /// Hierarchies joined beside libcgroups' (named v1, hybrid unified).
    extra: Vec<PathBuf>,
    /// v1 mount point per controller, for files libcgroups doesn't read.
    mounts: Vec<Mount>,
    /// Limits were applied before the clone (v2, CLONE_INTO_CGROUP).
    prepared: Cell<bool>,
    /// Init moves itself in (see [`Cgroup::prepare_self_join`]).
    self_joined: Cell<bool>,
}

/// How init moves itself into its cgroup on a v1 or hybrid host.
pub(crate) struct SelfJoin {
    /// v1 `tasks` files: init writes "0" to each.
    pub tasks: Vec<PathBuf>,
    /// The hybrid cgroup2 directory: init is cloned into it when the kernel
    /// allows, and otherwise writes "0" to `cgroup.procs` there.
    pub unified: Option<(OwnedFd, PathBuf)>,
}

impl Cgroup {
    /// Resolves `cgroupsPath` for a new container and checks that this host
    /// can enforce `resources`. Touches no cgroupfs.
    pub(crate) fn for_create(
        cgroups_path: Option<&str>,
        id: &str,
        systemd: bool,
        resources: Option<&LinuxResources>,
    ) -> Result<Cgroup> {
        let (host, ms) = host()?;
        if let Some(r) = resources {
            check::check_host(r, &host).map_err(|r| CgroupError::Refused { field: r.field, why: r.why })?;
        }
        let wanted = path::wanted(cgroups_path, id, systemd).map_err(CgroupError::Path)?;
        let recorded = match wanted {
            path::Wanted::Absolute(p) => p.to_string_lossy().into_owned(),
            path::Wanted::Relative(rel) => {
                let own = path::parse_proc_cgroup(&crate::sys::fs::read_proc("/proc/self/cgroup").unwrap_or_default());
                let resolved = if host.layout == Layout::Unified {
                    path::under_own_v2(&own, &rel)
                } else {
                    let mut joined: Vec<&str> = host.controllers.iter().map(String::as_str).collect();
                    joined.push("name=systemd");
                    path::under_own_v1(&own, &joined, &rel)
                };
                resolved.map_err(CgroupError::Path)?.to_string_lossy().into_owned()
            }
            path::Wanted::Systemd { slice, prefix, name } => {
                if !libcgroups::systemd::booted() {
                    return Err(CgroupError::NoSystemd);
                }
                if host.layout != Layout::Unified {
                    return Err(CgroupError::Path(
                        "--systemd-cgroup: the systemd driver needs a cgroup v2 host; this one has cgroup v1".into(),
                    ));
                }
                format!("{slice}:{prefix}:{name}")
            }
        };
        Self::open_with(recorded, systemd, id, host.layout, ms)
    }

    /// Opens the cgroup a state record names.
    pub(crate) fn open(recorded: &str, systemd: bool, id: &str) -> Result<Cgroup> {
        // The record is ours, but it sits on disk: never let a damaged one
        // aim kill/freeze/remove at the root cgroup or outside the tree.
        let rel = Path::new(recorded.trim_start_matches('/'));
        let plain = rel.components().all(|c| matches!(c, std::path::Component::Normal(_)));
        if !systemd && (rel.as_os_str().is_empty() || !plain) {
            return Err(CgroupError::Path(format!("state records an unusable cgroup path {recorded:?}")));
        }
        let (host, ms) = host()?;
        Self::open_with(recorded.to_string(), systemd, id, host.layout, ms)
    }

    fn open_with(recorded: String, systemd: bool, id: &str, layout: Layout, mounts: Vec<Mount>) -> Result<Cgroup> {
        let mgr = std::cell::OnceCell::new();
        let rel = recorded.trim_start_matches('/');
        let extra = match layout {
            Layout::Unified => Vec::new(),
            _ => mounts.iter().filter(|m| m.controllers.is_empty()).map(|m| m.dir.join(rel)).collect(),
        };
        Ok(Cgroup {
            recorded,
            layout,
            systemd,
            id: id.to_string(),
            mgr,
            extra,
            mounts,
            prepared: Cell::new(false),
            self_joined: Cell::new(false),
        })
    }

    /// Checks `r` against this host's controllers (for `update`).
    pub(crate) fn check(&self, r: &LinuxResources) -> Result<()> {
        let (host, _) = host()?;
        check::check_host(r, &host).map_err(|r| CgroupError::Refused { field: r.field, why: r.why })
    }

    /// The host's cgroup hierarchies, as this cgroup was opened with.
    pub(crate) fn hierarchies(&self) -> &[Mount] {
        &self.mounts
    }

    /// The path to keep in the state record.
    pub(crate) fn recorded(&self) -> &str {
        &self.recorded
    }

    fn err(&self, op: &'static str) -> impl FnOnce(AnyManagerError) -> CgroupError + '_ {
        move |source| CgroupError::Manager { op, path: self.recorded.clone(), source: Box::new(source) }
    }

    /// v2 cgroupfs driver: makes the cgroup, applies the limits and returns
    /// the directory for `clone3(CLONE_INTO_CGROUP)`. `None` elsewhere (v1
    /// membership is per hierarchy; [`Cgroup::join`] does it after the clone).
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
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_DIRECTORY)
                    .open(dir)
                    .map_err(io_err("open", dir))?;
                unified = Some((OwnedFd::from(f), dir.join("cgroup.procs")));
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
            } else if let Ok(f) = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECTORY).open(dir) {
                unified = Some((OwnedFd::from(f), dir.join("cgroup.procs")));
            }
        }
        self.self_joined.set(true);
        Some(SelfJoin { tasks, unified })
    }

    pub(crate) fn prepare(&self, r: &LinuxResources, devices: &[LinuxDevice]) -> Result<Option<OwnedFd>> {
        if self.layout != Layout::Unified || self.systemd {
            return Ok(None);
        }
        let dir = make_v2_dirs(Path::new(ROOT), Path::new(&self.recorded))?;
        self.apply(r, devices)?;
        self.prepared.set(true);
        let dir_file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY)
            .open(&dir)
            .map_err(io_err("open", &dir))?;
        Ok(Some(OwnedFd::from(dir_file)))
    }

    /// Puts `pid` in the cgroup (every hierarchy) and, unless
    /// [`Cgroup::prepare`] did it, applies the limits.
    pub(crate) fn join(&self, pid: Pid, r: &LinuxResources, devices: &[LinuxDevice]) -> Result<()> {
        if self.self_joined.get() {
            return Ok(());
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
        self.mgr()?.add_task(pid).map_err(self.err("add process"))?;
        for dir in &self.extra {
            std::fs::create_dir_all(dir).map_err(io_err("create", dir))?;
            let procs = dir.join("cgroup.procs");
            std::fs::write(&procs, pid.as_raw().to_string()).map_err(io_err("write", &procs))?;
        }
        Ok(())
    }

    /// Applies `r` (all of it, as given) to the live cgroup.
    pub(crate) fn apply(&self, r: &LinuxResources, devices: &[LinuxDevice]) -> Result<()> {
        let r = with_device_allows(r, devices);
        if self.layout != Layout::Unified && !self.systemd && v1::handles(&r) {
            return v1::apply(&r, &self.v1_dir("devices"), &self.v1_dir("pids"));
        }
        let opt = ControllerOpt {
            resources: &r,
            disable_oom_killer: r.memory().as_ref().and_then(|m| m.disable_oom_killer()).unwrap_or(false),
            oom_score_adj: None,
            freezer_state: None,
        };
        self.mgr()?.apply(&opt).map_err(self.err("apply linux.resources"))?;
        // libcgroups' v1 cpu controller skips a cpu block holding only a burst.
        let c = r.cpu().as_ref();
        if let (Some(burst), Layout::Legacy | Layout::Hybrid) = (c.and_then(|c| c.burst()), self.layout) {
            let f = self.v1_dir("cpu").join("cpu.cfs_burst_us");
            libcgroups::common::write_cgroup_file(&f, burst).map_err(|e| CgroupError::Path(e.to_string()))?;
        }
        Ok(())
    }

    /// Applies an update: on v1 the device rules are left alone (runc's
    /// SkipDevices; rewriting them would deny every device for a moment),
    /// on v2 the same filter is rebuilt from the original rules.
    pub(crate) fn update(&self, r: &LinuxResources, devices: &[LinuxDevice]) -> Result<()> {
        if self.layout == Layout::Unified {
            return self.apply(r, devices);
        }
        let mut r = r.clone();
        r.set_devices(None);
        self.apply(&r, &[])
    }

    /// Freezes or thaws every process.
    pub(crate) fn freeze(&self, frozen: bool) -> Result<()> {
        let st = if frozen { FreezerState::Frozen } else { FreezerState::Thawed };
        self.mgr()?.freeze(st).map_err(self.err(if frozen { "freeze" } else { "thaw" }))
    }

    /// Host pids of every process in the cgroup (and its sub-cgroups).
    pub(crate) fn pids(&self) -> Result<Vec<i32>> {
        if !self.systemd {
            // One hierarchy holds every process: read it directly.
            let dir = match self.layout {
                Layout::Unified => self.v2_dir(),
                _ => self.v1_dir("pids"),
            };
            if dir.is_dir() {
                let mut out = Vec::new();
                collect_procs(&dir, &mut out);
                return Ok(out);
            }
        }
        let pids = self.mgr()?.get_all_pids().map_err(self.err("list processes"))?;
        Ok(pids.into_iter().map(Pid::as_raw).collect())
    }

    /// Statistics in runc's `events` shape.
    pub(crate) fn stats(&self) -> Result<StatsData> {
        let s = self.mgr()?.stats().map_err(self.err("read statistics"))?;
        let (cpus, mems) = match self.layout {
            Layout::Unified => {
                (self.v2_dir().join("cpuset.cpus.effective"), self.v2_dir().join("cpuset.mems.effective"))
            }
            _ => (self.v1_dir("cpuset").join("cpuset.cpus"), self.v1_dir("cpuset").join("cpuset.mems")),
        };
        let read = |p: PathBuf| std::fs::read_to_string(p).unwrap_or_default();
        Ok(stats::from_libcgroups(&s, &read(cpus), &read(mems), self.layout == Layout::Unified))
    }

    /// CPU time (ns) and peak memory (bytes) so far, read from the two files
    /// that hold them rather than through a full `stats` (which needs
    /// libcgroups' manager): the sandbox asks for these after every run.
    pub(crate) fn usage(&self) -> (u64, u64) {
        let num = |p: PathBuf| read_trim(&p).parse::<u64>().unwrap_or(0);
        match self.layout {
            Layout::Unified => {
                let stat = std::fs::read_to_string(self.v2_dir().join("cpu.stat")).unwrap_or_default();
                let usec = stat.lines().find_map(|l| l.strip_prefix("usage_usec ")?.trim().parse::<u64>().ok());
                (usec.unwrap_or(0) * 1000, num(self.v2_dir().join("memory.peak")))
            }
            _ => (
                num(self.v1_dir("cpuacct").join("cpuacct.usage")),
                num(self.v1_dir("memory").join("memory.max_usage_in_bytes")),
            ),
        }
    }

    /// How many processes the kernel's OOM killer has killed in the cgroup
    /// (`oom_kill` in v1 `memory.oom_control` / v2 `memory.events`).
    pub(crate) fn oom_kills(&self) -> u64 {
        let f = match self.layout {
            Layout::Unified => self.v2_dir().join("memory.events"),
            _ => self.v1_dir("memory").join("memory.oom_control"),
        };
        let text = std::fs::read_to_string(f).unwrap_or_default();
        text.lines().find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok()).unwrap_or(0)
    }

    /// Whether the freezer holds the cgroup frozen.
    pub(crate) fn is_frozen(&self) -> bool {
        match self.layout {
            Layout::Unified => read_trim(&self.v2_dir().join("cgroup.freeze")) == "1",
            _ => read_trim(&self.v1_dir("freezer").join("freezer.state")) == "FROZEN",
        }
    }

    /// Sends `sig` to every process, with the cgroup frozen meanwhile so
    /// nothing can fork past the signal (runc's signalAllProcesses).
    pub(crate) fn signal_all(&self, sig: i32) -> Result<()> {
        let was_frozen = self.is_frozen();
        let froze = !was_frozen && self.freeze(true).is_ok();
        let result = self.pids().map(|pids| {
            for p in pids {
                // Through a pidfd: any signal number, and no recycled pid.
                if let Ok(fd) = crate::sys::pidfd_open(Pid::from_raw(p)) {
                    let _ = crate::sys::pidfd_send_signal(&fd, sig);
                }
            }
        });
        // SIGKILL is delivered only once the processes run again.
        if froze || (was_frozen && sig == libc::SIGKILL) {
            let _ = self.freeze(false);
        }
        result
    }

    /// Kills whatever is left and removes the cgroup from every hierarchy,
    /// sub-cgroups the container made included.
    pub(crate) fn destroy(&self) -> Result<()> {
        if self.is_frozen() {
            let _ = self.freeze(false);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while let Ok(pids) = self.pids() {
            if pids.is_empty() || Instant::now() > deadline {
                break;
            }
            for p in pids {
                let _ = nix::sys::signal::kill(Pid::from_raw(p), nix::sys::signal::Signal::SIGKILL);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        for dir in self.dirs() {
            remove_children(&dir);
        }
        if self.systemd {
            self.mgr()?.remove().map_err(self.err("remove"))?;
        }
        for dir in self.dirs() {
            match std::fs::remove_dir(&dir) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io_err("remove", &dir)(e)),
                _ => {}
            }
        }
        for dir in &self.extra {
            remove_children(dir);
            match std::fs::remove_dir(dir) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io_err("remove", dir)(e)),
                _ => {}
            }
        }
        Ok(())
    }

    /// Every directory of the cgroup (not for the systemd driver, whose
    /// units systemd removes).
    fn dirs(&self) -> Vec<PathBuf> {
        if self.systemd {
            return Vec::new();
        }
        let rel = self.recorded.trim_start_matches('/');
        match self.layout {
            Layout::Unified => vec![self.v2_dir()],
            _ => self.mounts.iter().filter(|m| !m.controllers.is_empty()).map(|m| m.dir.join(rel)).collect(),
        }
    }

    fn mgr(&self) -> Result<&AnyCgroupManager> {
        if let Some(m) = self.mgr.get() {
            return Ok(m);
        }
        ensure_spare_fds()?;
        let cfg = CgroupConfig {
            cgroup_path: PathBuf::from(&self.recorded),
            systemd_cgroup: self.systemd,
            container_name: self.id.clone(),
        };
        let m = create_cgroup_manager(cfg).map_err(|e| CgroupError::Path(format!("cgroup {}: {e}", self.recorded)))?;
        Ok(self.mgr.get_or_init(|| m))
    }

    fn v2_dir(&self) -> PathBuf {
        Path::new(ROOT).join(self.recorded.trim_start_matches('/'))
    }

    fn v1_dir(&self, ctrl: &str) -> PathBuf {
        let mount = self.mounts.iter().find(|m| m.controllers.iter().any(|c| c == ctrl));
        let base = mount.map(|m| m.dir.clone()).unwrap_or_else(|| Path::new(ROOT).join(ctrl));
        base.join(self.recorded.trim_start_matches('/'))
    }
}

/// libcgroups reads procfs through pathrs, which holds several fds at once
/// and aborts the process when it can't get them. Check there is room
/// first, so an fd-starved caller gets an error instead.
fn ensure_spare_fds() -> Result<()> {
    const SPARE: usize = 4;
    let probe: std::io::Result<Vec<std::fs::File>> = (0..SPARE).map(|_| std::fs::File::open("/dev/null")).collect();
    probe.map(drop).map_err(|e| {
        CgroupError::Path(format!("too few file descriptors left to apply cgroup limits (need {SPARE} spare): {e}"))
    })
}

fn read_trim(p: &Path) -> String {
    std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_default()
}

/// Depth-first rmdir of the sub-cgroups under `dir` (a container may make
/// its own inside its cgroup namespace); `dir` itself stays.
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

/// Every pid in `dir`'s cgroup.procs and in its sub-cgroups'.
fn collect_procs(dir: &Path, out: &mut Vec<i32>) {
    let text = crate::sys::fs::read_proc(dir.join("cgroup.procs")).unwrap_or_default();
    out.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            collect_procs(&e.path(), out);
        }
    }
}

fn remove_children(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            remove_children(&e.path());
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

/// Makes `root/rel` and its parents, enabling in each parent every
/// controller the parent has (what libcgroups' v2 `add_task` does), and
/// returns the full path.
fn make_v2_dirs(root: &Path, rel: &Path) -> Result<PathBuf> {
    let mut cur = root.to_path_buf();
    for comp in rel.components().filter(|c| matches!(c, std::path::Component::Normal(_))) {
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

/// runc allows the device nodes `linux.devices` makes, after the spec's own
/// rules (libcgroups adds only its default set).
fn with_device_allows(r: &LinuxResources, devices: &[LinuxDevice]) -> LinuxResources {
    let mut r = r.clone();
    if devices.is_empty() {
        return r;
    }
    let mut rules = r.devices().clone().unwrap_or_default();
    for d in devices.iter().filter(|d| matches!(d.typ(), LinuxDeviceType::C | LinuxDeviceType::B | LinuxDeviceType::U))
    {
        let mut rule = LinuxDeviceCgroup::default();
        rule.set_allow(true)
            .set_typ(Some(if d.typ() == LinuxDeviceType::B { LinuxDeviceType::B } else { LinuxDeviceType::C }))
            .set_major(Some(d.major()))
            .set_minor(Some(d.minor()))
            .set_access(Some("rwm".into()));
        rules.push(rule);
    }
    r.set_devices(Some(rules));
    r
}

/// The freezer state of the cgroup a record names, without building a
/// manager (`state` asks for every container in `list`).
pub(crate) fn is_frozen(recorded: &str, systemd: bool) -> bool {
    if systemd {
        return false;
    }
    let rel = recorded.trim_start_matches('/');
    let v2 = Path::new(ROOT).join(rel).join("cgroup.freeze");
    if v2.exists() {
        return read_trim(&v2) == "1";
    }
    read_trim(&Path::new(ROOT).join("freezer").join(rel).join("freezer.state")) == "FROZEN"
}
