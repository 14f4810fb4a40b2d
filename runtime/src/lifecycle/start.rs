//! `start`: release the waiting init into the user's program.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;

use super::state::Status;
use super::Container;
use crate::error::{Result, RuntimeError};
use crate::hooks::{self, Kind};
use crate::process::sync::StartReply;
use crate::state::{CONFIG_FILE, START_SOCKET};

impl Container {
    /// Runs the container's program. The container must be `created`.
    pub fn start(&mut self) -> Result<()> {
        match self.status() {
            Status::Created => {}
            Status::Stopped => {
                return Err(RuntimeError::InvalidState("cannot start a container that has stopped".into()))
            }
            Status::Running | Status::Paused => {
                return Err(RuntimeError::InvalidState("cannot start an already running container".into()))
            }
        }
        let hooks = self.config_hooks()?;
        let sock = self.lock.path(START_SOCKET);
        let mut conn =
            crate::state::via_socket(&self.lock.dir, START_SOCKET, |p| UnixStream::connect(p)).map_err(|e| match e
                .kind()
            {
                std::io::ErrorKind::ConnectionRefused => {
                    RuntimeError::InvalidState("cannot start container: its init process exited before start".into())
                }
                // Another start took it (below) and is under way.
                std::io::ErrorKind::NotFound => {
                    RuntimeError::InvalidState("cannot start container: it is already being started".into())
                }
                _ => RuntimeError::io("connect to start socket", &sock, e),
            })?;
        conn.write_all(b"s").map_err(|e| RuntimeError::io("write to start socket", &sock, e))?;
        // This start is the one: no other can connect once the socket is
        // gone. What is left is waiting on init's startContainer hooks and
        // execve, which must not keep `kill` or `delete` out.
        let _ = std::fs::remove_file(&sock);
        self.lock.unlock();
        // Init closes the connection by exec'ing (it is close-on-exec), or
        // writes why it could not.
        let mut reply = Vec::new();
        let _ = conn.read_to_end(&mut reply);
        let status = match (!reply.is_empty()).then(|| StartReply::parse(&reply)) {
            None => "running",
            Some(StartReply::Failed(e)) => return Err(RuntimeError::Init(e)),
            // runc's start, which its init told to go on before running
            // these hooks, succeeds and runs poststart; the spec would
            // fail it and skip them (tinyrun-oci(7), HOOKS).
            Some(StartReply::HookFailed(e)) => {
                crate::warn::warn(&format!("{e}; the container's process was not run"));
                "stopped"
            }
        };
        // The spec: a failing poststart hook is logged as a warning and
        // the rest of the lifecycle goes on, as if it had succeeded.
        let st = self.hook_state(status);
        hooks::run_all_warn(hooks.as_ref(), Kind::Poststart, &st);
        Ok(())
    }

    /// The config.json snapshot taken at create.
    pub(crate) fn config(&self) -> Result<oci_spec::runtime::Spec> {
        let path = self.lock.path(CONFIG_FILE);
        let bytes = std::fs::read(&path).map_err(|e| RuntimeError::io("read", &path, e))?;
        serde_json::from_slice(&bytes).map_err(|e| RuntimeError::InvalidSpec(format!("parse {}: {e}", path.display())))
    }

    /// The config snapshot's `hooks` alone, all `start` and `delete` need
    /// of it: the rest is skimmed, not built (a sandbox's config carries a
    /// seccomp profile of some hundred rules).
    pub(crate) fn config_hooks(&self) -> Result<Option<oci_spec::runtime::Hooks>> {
        #[derive(serde::Deserialize)]
        struct HooksOnly {
            hooks: Option<oci_spec::runtime::Hooks>,
        }
        let path = self.lock.path(CONFIG_FILE);
        let bytes = std::fs::read(&path).map_err(|e| RuntimeError::io("read", &path, e))?;
        let h: HooksOnly = serde_json::from_slice(&bytes)
            .map_err(|e| RuntimeError::InvalidSpec(format!("parse {}: {e}", path.display())))?;
        Ok(h.hooks)
    }

    /// The state hooks get, with `status`.
    pub(crate) fn hook_state(&self, status: &str) -> Vec<u8> {
        hooks::State {
            oci_version: oci_spec::runtime::VERSION,
            id: &self.rec.id,
            status,
            pid: self.rec.pid,
            bundle: &self.rec.bundle,
            annotations: Some(&self.rec.annotations).filter(|a| !a.is_empty()),
        }
        .to_json()
    }
}
