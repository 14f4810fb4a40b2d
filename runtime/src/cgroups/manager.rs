//! libcgroups' manager for the container's cgroup, made on first use: a
//! cgroupfs one, also for the systemd driver, whose scope's cgroup it
//! works on once systemd has made it. Runs in the runtime process.

use std::path::PathBuf;

use libcgroups::common::{create_cgroup_manager, AnyCgroupManager, AnyManagerError, CgroupConfig};

use super::{Cgroup, CgroupError, Result};

impl Cgroup {
    /// libcgroups' manager, built once.
    pub(super) fn mgr(&self) -> Result<&AnyCgroupManager> {
        if let Some(m) = self.mgr.get() {
            return Ok(m);
        }
        ensure_spare_fds()?;
        let path = if self.systemd { format!("/{}", self.rel()) } else { self.recorded.clone() };
        let cfg =
            CgroupConfig { cgroup_path: PathBuf::from(&path), systemd_cgroup: false, container_name: self.id.clone() };
        let m = create_cgroup_manager(cfg).map_err(|e| CgroupError::Path(format!("cgroup {path}: {e}")))?;
        Ok(self.mgr.get_or_init(|| m))
    }

    /// A manager of libcgroups' built on `path` for every hierarchy, for a
    /// cgroup whose paths differ per hierarchy: the caller uses it only for
    /// controllers whose path is `path`.
    pub(super) fn mgr_at(&self, path: &str) -> Result<AnyCgroupManager> {
        ensure_spare_fds()?;
        let cfg =
            CgroupConfig { cgroup_path: PathBuf::from(path), systemd_cgroup: false, container_name: self.id.clone() };
        create_cgroup_manager(cfg).map_err(|e| CgroupError::Path(format!("cgroup {path}: {e}")))
    }

    /// Wraps a manager error with the operation and this cgroup's path.
    pub(super) fn err(&self, op: &'static str) -> impl FnOnce(AnyManagerError) -> CgroupError + '_ {
        move |source| CgroupError::Manager { op, path: self.recorded.clone(), source: Box::new(source) }
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
