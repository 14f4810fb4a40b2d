//! Starting workers (module `worker`) from the server and reading their
//! answers. Each is this same binary, run with `--worker`: fork+exec by
//! std's `Command`, which does nothing between the two but set up fds, so
//! it is safe from the server's threads. Runs in the server.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::sync::Semaphore;

use crate::error::{ApiError, ApiResult, Code};
use crate::worker::Request;

/// Most workers at once: beyond it a request waits (a burst of clients
/// must not become a burst of forks), up to [`QUEUE_WAIT`].
const MAX_WORKERS: usize = 96;
const QUEUE_WAIT: Duration = Duration::from_secs(60);

/// Spawns workers for one root.
#[derive(Clone)]
pub(crate) struct Workers {
    exe: PathBuf,
    root: PathBuf,
    slots: Arc<Semaphore>,
}

/// A running worker, with its slot.
pub(crate) struct Running {
    pub child: Child,
    _slot: tokio::sync::OwnedSemaphorePermit,
}

impl Workers {
    pub(crate) fn new(exe: PathBuf, root: &Path) -> Workers {
        Workers { exe, root: root.to_path_buf(), slots: Arc::new(Semaphore::new(MAX_WORKERS)) }
    }

    /// Starts a worker on `req`; its stdout and stderr are pipes. `stdin`,
    /// if any, follows the request (the worker's stdin closes after it).
    pub(crate) async fn start(&self, req: &Request, stdin: Option<Vec<u8>>) -> ApiResult<Running> {
        let slot = tokio::time::timeout(QUEUE_WAIT, self.slots.clone().acquire_owned())
            .await
            .map_err(|_| ApiError::new(Code::Unavailable, "the server is busy: no worker became free in time"))?
            .map_err(|_| ApiError::new(Code::Unavailable, "the server is shutting down"))?;
        let mut child = Command::new(&self.exe)
            .arg("--worker")
            .arg("--root")
            .arg(&self.root)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| ApiError::internal(format!("start a worker ({}): {e}", self.exe.display())))?;
        let body = serde_json::to_vec(req).map_err(|e| ApiError::internal(format!("encode the request: {e}")))?;
        let len = u32::try_from(body.len()).map_err(|_| ApiError::bad("the request is too long"))?;
        let mut w = child.stdin.take().ok_or_else(|| ApiError::internal("a worker without stdin"))?;
        // Fed from a task of its own: a command slow to read its stdin
        // must not hold up reading its output.
        tokio::spawn(async move {
            let _ = w.write_all(&len.to_be_bytes()).await;
            let _ = w.write_all(&body).await;
            if let Some(data) = stdin {
                let _ = w.write_all(&data).await;
            }
        });
        Ok(Running { child, _slot: slot })
    }

    /// Runs `req` in a worker and returns its answer.
    pub(crate) async fn call(&self, req: &Request, stdin: Option<Vec<u8>>) -> ApiResult<Value> {
        let mut running = self.start(req, stdin).await?;
        let mut out = Vec::new();
        let mut stdout = running.child.stdout.take().ok_or_else(|| ApiError::internal("a worker without stdout"))?;
        let mut err = Vec::new();
        let mut stderr = running.child.stderr.take().ok_or_else(|| ApiError::internal("a worker without stderr"))?;
        let (a, b) = tokio::join!(stdout.read_to_end(&mut out), stderr.read_to_end(&mut err));
        a.and(b).map_err(|e| ApiError::internal(format!("read a worker's answer: {e}")))?;
        let _ = running.child.wait().await;
        answer(&out, &err)
    }
}

/// A worker's answer line, or why there is none.
pub(crate) fn answer(out: &[u8], err: &[u8]) -> ApiResult<Value> {
    let line: Value = serde_json::from_slice(out).map_err(|_| {
        let why = String::from_utf8_lossy(err);
        ApiError::internal(format!("the worker gave no answer: {}", why.trim()))
    })?;
    if let Some(e) = line.get("err") {
        return Err(serde_json::from_value(e.clone()).unwrap_or_else(|_| ApiError::internal(e.to_string())));
    }
    Ok(line.get("ok").cloned().unwrap_or(Value::Null))
}
