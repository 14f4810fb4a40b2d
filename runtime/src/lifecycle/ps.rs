//! `ps`: the host pids of every process in the container's cgroup (runc
//! `ps`; the CLI renders them as JSON or through the host's `ps`).

use super::Container;
use crate::error::Result;

impl Container {
    /// Host pids in the container's cgroup, ascending. Without a recorded
    /// cgroup, the init's pid if it is alive.
    pub fn pids(&self) -> Result<Vec<i32>> {
        let mut pids = match self.cgroup()? {
            Some(cg) => cg.pids()?,
            None if self.status() != super::Status::Stopped => vec![self.rec.pid],
            None => Vec::new(),
        };
        pids.sort_unstable();
        pids.dedup();
        Ok(pids)
    }
}
