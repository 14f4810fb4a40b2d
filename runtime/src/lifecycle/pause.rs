//! `pause` and `resume`: freeze and thaw every process of the container
//! with the freezer (v1 `freezer.state`, v2 `cgroup.freeze`), as runc does.
//! Runs in the runtime process. `state` reads a frozen container as
//! `paused`.

use super::state::Status;
use super::Container;
use crate::cgroups::Cgroup;
use crate::error::{Result, RuntimeError};

impl Container {
    /// The container's cgroup, from the state record (`None` for a record
    /// written before cgroups were managed).
    pub(crate) fn cgroup(&self) -> Result<Option<Cgroup>> {
        let Some(path) = self.rec.cgroup_path.as_deref() else { return Ok(None) };
        let only = self.rec.cgroup_controllers.as_deref();
        Ok(Some(Cgroup::open(path, &self.rec.cgroup_paths, self.rec.systemd_cgroup, &self.rec.id, only)?))
    }

    pub(crate) fn cgroup_required(&self) -> Result<Cgroup> {
        self.cgroup()?
            .ok_or_else(|| RuntimeError::InvalidState(format!("container {} has no cgroup recorded", self.rec.id)))
    }

    /// Freezes every process. The container must be running or created.
    pub fn pause(&self) -> Result<()> {
        match self.status() {
            Status::Running | Status::Created => Ok(self.cgroup_required()?.freeze(true)?),
            Status::Paused | Status::Stopped => Err(RuntimeError::NotRunning),
        }
    }

    /// Thaws a paused container.
    pub fn resume(&self) -> Result<()> {
        match self.status() {
            Status::Paused => Ok(self.cgroup_required()?.freeze(false)?),
            _ => Err(RuntimeError::InvalidState("container not paused".into())),
        }
    }
}
