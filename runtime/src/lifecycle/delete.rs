//! `delete`: remove a stopped container and everything create made.

use std::time::Duration;

use super::state::Status;
use super::{check_id, Container, Runtime};
use crate::error::{Result, RuntimeError};
use crate::hooks::{self, Kind};
use crate::state::StateDir;

impl Runtime {
    /// Deletes `id`. A `created` container is killed first (as runc does);
    /// a running one only with `force`. With `force`, an unknown id is fine.
    pub fn delete(&self, id: &str, force: bool) -> Result<()> {
        check_id(id)?;
        let c = match self.load(id) {
            Ok(c) => c,
            Err(RuntimeError::NotFound(_)) => {
                // A directory without a record: a create still under way
                // (its lock made us wait, and now the record is there), or
                // one that died midway, whose leftovers go.
                let Ok(l) = StateDir::open(self.root(), id) else {
                    return if force { Ok(()) } else { Err(RuntimeError::NotFound(id.to_string())) };
                };
                if l.path(crate::state::STATE_FILE).exists() {
                    drop(l);
                    return self.delete(id, force);
                }
                remove_orphan_cgroup(&l, id);
                return l.remove();
            }
            Err(e) => return Err(e),
        };
        match c.status() {
            Status::Stopped => {}
            Status::Created => c.kill_and_wait(false)?,
            Status::Running if force => c.kill_and_wait(false)?,
            Status::Paused if force => c.kill_and_wait(true)?,
            Status::Running | Status::Paused => {
                return Err(RuntimeError::InvalidState(format!("cannot delete container {id} that is not stopped")))
            }
        }
        c.destroy()
    }
}

impl Container {
    /// SIGKILLs the container and waits until init is gone. A container
    /// with a pid namespace of its own that is not paused gets it through
    /// init alone, as runc does: the kernel then kills every process of the
    /// namespace, and none can fork past that (a dying namespace hands out
    /// no pids), so the cgroup is not frozen first (which on v1 polls for
    /// milliseconds). A paused one's processes would get it only once they
    /// run again: the cgroup's kill thaws them.
    fn kill_and_wait(&self, paused: bool) -> Result<()> {
        let all = paused || !self.rec.own_pid_ns;
        match self.signal(nix::sys::signal::Signal::SIGKILL as i32, all) {
            Ok(()) | Err(RuntimeError::NotRunning) => {}
            Err(e) => return Err(e),
        }
        if !self.wait_stopped(Duration::from_secs(10)) {
            return Err(RuntimeError::InvalidState(format!("container {} did not stop after SIGKILL", self.id())));
        }
        Ok(())
    }

    /// Frees what create made (the cgroup, after killing anything still in
    /// it, then the state), then runs poststop hooks. A failing poststop
    /// hook is a warning (the spec), and `delete` succeeds.
    fn destroy(self) -> Result<()> {
        let hooks = self.config_hooks().ok().flatten();
        let st = self.hook_state("stopped");
        if let Some(cg) = self.cgroup()? {
            cg.destroy()?;
        }
        if let Some((rootfs, id)) = &self.rec.host_root_mount {
            crate::rootfs::detach_host_root(rootfs, *id)?;
        }
        self.lock.remove()?;
        hooks::run_all_warn(hooks.as_ref(), Kind::Poststop, &st);
        Ok(())
    }
}

/// Removes the cgroup a half-made container may have, as named by its
/// config snapshot (killing what is in it). Best effort: the record that
/// would say more was never written.
fn remove_orphan_cgroup(dir: &StateDir, id: &str) {
    let Ok(bytes) = std::fs::read(dir.path(crate::state::CONFIG_FILE)) else { return };
    let Ok(spec) = serde_json::from_slice::<oci_spec::runtime::Spec>(&bytes) else { return };
    let path = spec.linux().as_ref().and_then(|l| l.cgroups_path().as_ref()).map(|p| p.to_string_lossy().into_owned());
    if let Ok(cg) = crate::cgroups::Cgroup::for_create(path.as_deref(), id, false, None) {
        let _ = cg.destroy();
    }
}
