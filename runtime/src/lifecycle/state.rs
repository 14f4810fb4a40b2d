//! `state` and `list`: what a container is doing, in runc's shape.
//!
//! The status is derived, never stored: init alive (same pid *and* start
//! time, not a zombie) and the start socket present means `created`; alive
//! without it means `running`; alive in a frozen cgroup means `paused`;
//! anything else is `stopped`.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use serde::Serialize;

use super::{Container, Runtime};
use crate::error::{Result, RuntimeError};
use crate::state::{proc_start_time, Record, StateDir, START_SOCKET};

/// A container's status (runtime-spec plus runc's `paused`; never `creating`:
/// a container being created is invisible until it is `created`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Created,
    Running,
    Paused,
    Stopped,
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Status::Created => "created",
            Status::Running => "running",
            Status::Paused => "paused",
            Status::Stopped => "stopped",
        })
    }
}

/// What `state` prints: the spec's State plus runc's `rootfs`, `created`
/// and `owner`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerState {
    pub oci_version: String,
    pub id: String,
    pub pid: i32,
    pub status: Status,
    pub bundle: PathBuf,
    pub rootfs: PathBuf,
    pub created: String,
    #[serde(skip_serializing_if = "HashMap::is_empty")]
    pub annotations: HashMap<String, String>,
    pub owner: String,
}

pub(crate) fn status_of(lock: &StateDir, rec: &Record) -> Status {
    match proc_start_time(rec.pid) {
        Some((t, false)) if t == rec.start_time => {
            // Still the runtime's binary means init hasn't exec'd the
            // program yet (the start socket can outlive a killed `start`).
            let waiting = match (rec.init_exe, crate::state::proc_exe(rec.pid)) {
                (Some(at_create), Some(now)) => at_create == now,
                _ => lock.path(START_SOCKET).exists(),
            };
            let frozen = |p: &str| crate::cgroups::is_frozen(p, &rec.cgroup_paths, rec.systemd_cgroup);
            if rec.cgroup_path.as_deref().is_some_and(frozen) {
                Status::Paused
            } else if waiting {
                Status::Created
            } else {
                Status::Running
            }
        }
        _ => Status::Stopped,
    }
}

impl Container {
    /// The current status.
    pub fn status(&self) -> Status {
        status_of(&self.lock, &self.rec)
    }

    /// The State JSON object; `owner` is empty as in runc's `state`.
    pub fn state(&self) -> ContainerState {
        let status = self.status();
        ContainerState {
            oci_version: oci_spec::runtime::VERSION.to_string(),
            id: self.rec.id.clone(),
            pid: if status == Status::Stopped { 0 } else { self.rec.pid },
            status,
            bundle: self.rec.bundle.clone(),
            rootfs: self.rec.rootfs.clone(),
            created: self.rec.created.clone(),
            annotations: self.rec.annotations.clone(),
            owner: String::new(),
        }
    }
}

impl Runtime {
    /// Every container in the root, with `owner` filled in.
    pub fn list(&self) -> Result<Vec<ContainerState>> {
        let entries = match std::fs::read_dir(self.root()) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(RuntimeError::io("read state root", self.root(), e)),
        };
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let Some(id) = entry.file_name().to_str().map(str::to_string) else { continue };
            let Ok(c) = self.peek(&id) else { continue };
            let mut st = c.state();
            st.owner = entry.metadata().map(|m| user_name(m.uid())).unwrap_or_default();
            out.push(st);
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }
}

fn user_name(uid: u32) -> String {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    passwd
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() > 2 && f[2].parse::<u32>().ok() == Some(uid)).then(|| f[0].to_string())
        })
        .next()
        .unwrap_or_else(|| format!("#{uid}"))
}
