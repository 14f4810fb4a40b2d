//! Starting workers (module `worker`) from the server and reading their
//! answers. Each is this same binary, run with `--worker`: fork+exec by
//! std's `Command`, which does nothing between the two but set up fds, so
//! it is safe from the server's threads. Runs in the server.
//!
//! A few workers are started ahead of need ([`SPARES`]): each has exec'd
//! and initialised and is blocked reading its stdin, so a request costs
//! a write to a pipe instead of a process start. A request takes one; its
//! replacement is started once the request's worker has gone, so that
//! the start does not compete for the CPU with the request it would not
//! serve. Each worker still makes one call and exits.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::sync::Semaphore;
use tokio_util::task::TaskTracker;

use crate::error::{ApiError, ApiResult, Code};
use crate::worker::Request;

/// Most workers at once: beyond it a request waits (a burst of clients
/// must not become a burst of forks), up to [`QUEUE_WAIT`].
const MAX_WORKERS: usize = 96;
const QUEUE_WAIT: Duration = Duration::from_secs(60);
/// Workers kept started and waiting. Two: a client's next request and a
/// second client's find one each while the replacements start.
const SPARES: usize = 2;
/// How long a stopped command's worker has to end it before it is killed.
const STOP_WAIT: Duration = Duration::from_secs(10);

/// Held to spawn a worker, and exclusively while the process's umask is
/// changed ([`with_umask`]): a worker inherits the umask, and one started
/// under a narrowed one would make boxes their own users can't read.
static UMASK: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Runs `f` with the process's umask set to `mask`, and no worker started
/// meanwhile.
pub(crate) fn with_umask<T>(mask: nix::sys::stat::Mode, f: impl FnOnce() -> T) -> T {
    let _only = UMASK.write().unwrap_or_else(std::sync::PoisonError::into_inner);
    let old = nix::sys::stat::umask(mask);
    let out = f();
    nix::sys::stat::umask(old);
    out
}

/// Spawns workers for one root.
#[derive(Clone)]
pub(crate) struct Workers {
    exe: PathBuf,
    root: PathBuf,
    slots: Arc<Semaphore>,
    spares: Arc<Mutex<Spares>>,
    /// Workers that have answered, waited for until they exit.
    exiting: TaskTracker,
}

#[derive(Default)]
struct Spares {
    ready: VecDeque<Child>,
    /// Being started now, to join `ready`.
    starting: usize,
    /// The server is stopping: no more are started.
    closed: bool,
}

/// A running worker, with its slot. Dropped before [`Running::finished`]
/// (its client went away) a command's worker is sent SIGTERM, on which the
/// library kills the command and what it started, as it does for `tinyrun
/// sandbox exec` on Ctrl-C; the box lives on.
pub(crate) struct Running {
    pub child: Child,
    stop_on_drop: bool,
    workers: Workers,
    _slot: tokio::sync::OwnedSemaphorePermit,
}

impl Running {
    /// Its work is done or no longer to be stopped with its client.
    pub(crate) fn finished(&mut self) {
        self.stop_on_drop = false;
    }

    /// Stops the worker (see [`Running`]) and waits until it has gone,
    /// SIGKILLing it if the library takes more than [`STOP_WAIT`] to end
    /// the command.
    pub(crate) async fn stop(mut self) {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        if tokio::time::timeout(STOP_WAIT, self.child.wait()).await.is_err() {
            let _ = self.child.kill().await;
        }
        self.finished();
    }

    fn signal(&self, sig: nix::sys::signal::Signal) {
        // `id` is `None` once the worker has been reaped: its pid may be
        // someone else's by then.
        if let Some(pid) = self.child.id().and_then(|p| i32::try_from(p).ok()) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.stop_on_drop {
            self.signal(nix::sys::signal::Signal::SIGTERM);
        }
        self.workers.top_up();
    }
}

impl Workers {
    pub(crate) fn new(exe: PathBuf, root: &Path) -> Workers {
        Workers {
            exe,
            root: root.to_path_buf(),
            slots: Arc::new(Semaphore::new(MAX_WORKERS)),
            spares: Arc::new(Mutex::new(Spares::default())),
            exiting: TaskTracker::new(),
        }
    }

    /// A fresh worker, blocked on its stdin until it is given a request;
    /// its stdin, stdout and stderr are pipes.
    fn spawn(&self) -> ApiResult<Child> {
        let _umask = UMASK.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        Command::new(&self.exe)
            .arg("--worker")
            .arg("--root")
            .arg(&self.root)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| ApiError::internal(format!("start a worker ({}): {e}", self.exe.display())))
    }

    fn spares(&self) -> std::sync::MutexGuard<'_, Spares> {
        // A panic while holding it leaves a queue of children, still sound.
        self.spares.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A spare worker if one is waiting (one that has died meanwhile is
    /// dropped, and reaped by tokio), else a new one.
    fn take(&self) -> ApiResult<Child> {
        let spare = {
            let mut s = self.spares();
            std::iter::from_fn(|| s.ready.pop_front()).find_map(|mut c| matches!(c.try_wait(), Ok(None)).then_some(c))
        };
        match spare {
            Some(c) => Ok(c),
            None => self.spawn(),
        }
    }

    /// Starts workers until [`SPARES`] are waiting or starting, each on a
    /// blocking thread (a spawn is a fork and an exec: not on the threads
    /// that answer clients). Outside the runtime (its shutdown), none.
    pub(crate) fn top_up(&self) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        let wanted = {
            let mut s = self.spares();
            let n = if s.closed { 0 } else { SPARES.saturating_sub(s.ready.len() + s.starting) };
            s.starting += n;
            n
        };
        for _ in 0..wanted {
            let w = self.clone();
            rt.spawn_blocking(move || {
                let made = w.spawn();
                let mut s = w.spares();
                s.starting -= 1;
                if let Ok(c) = made {
                    s.ready.push_back(c);
                }
            });
        }
    }

    /// At shutdown: starts no more spares, and ends those there are (their
    /// stdin closes, on which they exit), waiting for each and for those
    /// that have answered, so that none outlives the server.
    pub(crate) async fn retire(&self) {
        self.spares().closed = true;
        let deadline = tokio::time::Instant::now() + STOP_WAIT;
        self.exiting.close();
        let _ = tokio::time::timeout_at(deadline, self.exiting.wait()).await;
        loop {
            let (ready, starting) = {
                let mut s = self.spares();
                (std::mem::take(&mut s.ready), s.starting)
            };
            if ready.is_empty() && starting == 0 {
                return;
            }
            for mut c in ready {
                drop(c.stdin.take());
                if tokio::time::timeout_at(deadline, c.wait()).await.is_err() {
                    let _ = c.kill().await;
                }
            }
            if starting > 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            if tokio::time::Instant::now() > deadline {
                return;
            }
        }
    }

    /// Starts a worker on `req`; its stdout and stderr are pipes. `stdin`,
    /// if any, follows the request (the worker's stdin closes after it).
    pub(crate) async fn start(&self, req: &Request, stdin: Option<Vec<u8>>) -> ApiResult<Running> {
        let slot = tokio::time::timeout(QUEUE_WAIT, self.slots.clone().acquire_owned())
            .await
            .map_err(|_| ApiError::new(Code::Unavailable, "the server is busy: no worker became free in time"))?
            .map_err(|_| ApiError::new(Code::Unavailable, "the server is shutting down"))?;
        let body = serde_json::to_vec(req).map_err(|e| ApiError::internal(format!("encode the request: {e}")))?;
        let len = u32::try_from(body.len()).map_err(|_| ApiError::bad("the request is too long"))?;
        let mut child = self.take()?;
        let stop_on_drop = matches!(req, Request::Exec { .. } | Request::Run { .. });
        let mut w = child.stdin.take().ok_or_else(|| ApiError::internal("a worker without stdin"))?;
        // Fed from a task of its own: a command slow to read its stdin
        // must not hold up reading its output.
        tokio::spawn(async move {
            let mut head = Vec::with_capacity(4 + body.len());
            head.extend_from_slice(&len.to_be_bytes());
            head.extend_from_slice(&body);
            let _ = w.write_all(&head).await;
            if let Some(data) = stdin {
                let _ = w.write_all(&data).await;
            }
        });
        Ok(Running { child, stop_on_drop, workers: self.clone(), _slot: slot })
    }

    /// Runs `req` in a worker and returns its answer, as soon as its line
    /// is complete: the worker's exit is waited for in the background.
    pub(crate) async fn call(&self, req: &Request, stdin: Option<Vec<u8>>) -> ApiResult<Value> {
        let mut running = self.start(req, stdin).await?;
        let mut stdout = running.child.stdout.take().ok_or_else(|| ApiError::internal("a worker without stdout"))?;
        let mut stderr = running.child.stderr.take().ok_or_else(|| ApiError::internal("a worker without stderr"))?;
        // Read throughout, so that a worker with much to say there never
        // blocks on it.
        let said = tokio::spawn(async move {
            let mut err = Vec::new();
            let _ = stderr.read_to_end(&mut err).await;
            err
        });
        let out = line(&mut stdout).await.map_err(|e| ApiError::internal(format!("read a worker's answer: {e}")))?;
        running.finished();
        if out.ends_with(b"\n") {
            self.exiting.spawn(async move {
                let _ = running.child.wait().await;
            });
            return answer(&out, b"");
        }
        let err = said.await.unwrap_or_default();
        let _ = running.child.wait().await;
        answer(&out, &err)
    }
}

/// Bytes up to and with the first newline, or all there are until EOF.
async fn line<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 16 << 10];
    loop {
        let n = r.read(&mut buf).await?;
        let Some(got) = buf.get(..n).filter(|g| !g.is_empty()) else { return Ok(out) };
        match got.iter().position(|b| *b == b'\n') {
            Some(i) => {
                out.extend_from_slice(&got[..=i]);
                return Ok(out);
            }
            None => out.extend_from_slice(got),
        }
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

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn an_answer_is_its_first_line() {
        let mut two: &[u8] = b"{\"ok\":1}\n{\"ok\":2}\n";
        let first = super::line(&mut two).await.unwrap();
        assert_eq!(super::answer(&first, b"").unwrap(), serde_json::json!(1));
        let mut cut: &[u8] = b"{\"ok\":";
        let part = super::line(&mut cut).await.unwrap();
        assert!(!part.ends_with(b"\n"));
        let e = super::answer(&part, b"worker died").unwrap_err();
        assert!(e.error.contains("worker died"), "{e}");
    }
}
