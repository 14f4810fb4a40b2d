//! The worker: `tinyrun-sandbox-api --worker --root ROOT`, a fresh,
//! single-threaded process that makes one library call and exits.
//!
//! Why a process of its own: the library forks (box creation, the resident
//! init's commands, the detached pool refill, the reaper) and says so in
//! its preconditions ("the caller is single-threaded"; the runtime checks
//! it and refuses otherwise). A tokio server has threads, and a fork of a
//! threaded process may inherit a lock some other thread held. So the
//! server never calls the library's forking paths itself: it spawns this
//! binary (std's spawn: fork, then straight to exec, which is safe from a
//! threaded process) and the worker, which never starts a runtime or a
//! thread, makes the call. One worker per request keeps a crashed or hung
//! call from touching any other request, and a worker killed with its
//! client leaves what any killed `tinyrun sandbox` command leaves, which
//! the library already cleans up.
//!
//! Protocol, over the worker's stdin and stdout:
//!
//! ```text
//!   server                                   worker
//!     | -- u32 big-endian length, Request JSON --> |
//!     | -- the command's stdin (if it has one) --> |   library call
//!     | <-- one line: {"ok": value} | {"err": ApiError} (stdout)
//! ```
//!
//! A streamed command's stdout and stderr are the worker's own, so its
//! answer goes to `result_file` instead.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tinyrun_sandbox::{self as sandbox, CpOptions, ExecRequest};

use crate::error::{ApiError, ApiResult};
use crate::options::Options;
use crate::owners;

/// Most bytes of a request: options and a command line, not data.
pub(crate) const MAX_REQUEST: u32 = 4 << 20;

/// One library call.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum Request {
    /// `sandbox launch`, recorded as `owner`'s.
    Launch {
        opts: Options,
        lifetime_ms: u64,
        idle_timeout_ms: Option<u64>,
        owner: String,
    },
    /// `sandbox run --json [--pool]`.
    Run {
        opts: Options,
        command: Vec<String>,
        pool: bool,
        output_cap: usize,
        report_writes: Option<PathBuf>,
        stdin: bool,
    },
    /// `sandbox exec [--json]`.
    Exec {
        id: String,
        command: Vec<String>,
        env: Vec<String>,
        timeout_ms: Option<u64>,
        output_cap: usize,
        kill_children: bool,
        report_writes: Option<PathBuf>,
        stdin: bool,
        cwd: Option<PathBuf>,
        /// Streamed: output passes through, the result goes here.
        result_file: Option<PathBuf>,
    },
    /// `sandbox terminate`, then the owner record goes.
    Terminate {
        id: String,
    },
    /// `sandbox extend`.
    Extend {
        id: String,
        lifetime_ms: u64,
    },
    /// `sandbox list`.
    List,
    /// `sandbox cp HOST ID:BOX` or `cp ID:BOX HOST`.
    Copy {
        from: String,
        to: String,
        limit: u64,
    },
    /// `sandbox pool fill`.
    PoolFill {
        opts: Options,
        count: usize,
        idle_lifetime_ms: Option<u64>,
    },
    PoolList,
    PoolDrain {
        key: Option<String>,
    },
    /// At start and at the end: boxes with an owner record keep it, boxes
    /// the server made without one (it died before recording) go, records
    /// of boxes gone go; with `all`, every owned box goes too.
    Sweep {
        all: bool,
    },
}

/// `--worker`: one request from stdin, one answer, exit status 0 (the
/// answer says whether the call worked).
pub(crate) fn main(root: &Path) -> u8 {
    // As `tinyrun sandbox` does: a box's own user must be able to read
    // what is made for it, whatever umask the server was started with.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
    // An ordinary user's server: its workers make and use boxes from the
    // user's own namespaces, as its `tinyrun sandbox` commands do (a
    // no-op for root). Entered before the request comes, while this
    // process is still single-threaded and a pre-started worker waits.
    let entered = lib(sandbox::enter_unprivileged(root)).map(drop);
    let (answer, file) = match read_request() {
        Ok(req) => {
            let file = match &req {
                Request::Exec { result_file, .. } => result_file.clone(),
                _ => None,
            };
            (entered.and_then(|()| call(root, req)), file)
        }
        Err(e) => (Err(e), None),
    };
    let line = match answer {
        Ok(v) => json!({ "ok": v }),
        Err(e) => json!({ "err": e }),
    };
    let text = format!("{line}\n");
    let written = match file {
        Some(f) => std::fs::write(f, text),
        None => std::io::stdout().lock().write_all(text.as_bytes()),
    };
    u8::from(written.is_err())
}

fn read_request() -> ApiResult<Request> {
    // Unbuffered (std's Stdin would read ahead): what follows the request
    // is the command's stdin, which the library hands on from fd 0 itself.
    use std::os::fd::AsFd;
    let fd = std::io::stdin().as_fd().try_clone_to_owned();
    let mut stdin = std::fs::File::from(fd.map_err(|e| ApiError::internal(format!("stdin: {e}")))?);
    let mut len = [0u8; 4];
    stdin.read_exact(&mut len).map_err(|e| ApiError::internal(format!("read the request: {e}")))?;
    let len = u32::from_be_bytes(len);
    if len > MAX_REQUEST {
        return Err(ApiError::internal("the request is too long"));
    }
    let mut buf = vec![0u8; len as usize];
    stdin.read_exact(&mut buf).map_err(|e| ApiError::internal(format!("read the request: {e}")))?;
    serde_json::from_slice(&buf).map_err(|e| ApiError::internal(format!("the request: {e}")))
}

fn lib<T>(r: sandbox::Result<T>) -> ApiResult<T> {
    r.map_err(|e| ApiError::from_sandbox(&e))
}

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

fn call(root: &Path, req: Request) -> ApiResult<Value> {
    let to_value = |v: &dyn erased::Ser| v.value();
    match req {
        Request::Launch { opts, lifetime_ms, idle_timeout_ms, owner } => {
            let mut o = opts.to_sandbox()?;
            o.lifetime = Some(ms(lifetime_ms));
            o.idle_timeout = idle_timeout_ms.map(ms);
            let id = lib(sandbox::launch(root, &o, "api"))?;
            if let Err(e) = owners::record(root, &id, &owner) {
                let _ = sandbox::terminate(root, &id);
                return Err(ApiError::internal(format!("record the owner of {id}: {e}")));
            }
            Ok(json!({ "id": id }))
        }
        Request::Run { opts, command, pool, output_cap, report_writes, stdin } => {
            let mut o = opts.to_sandbox()?;
            o.output_cap = output_cap;
            o.report_writes = report_writes;
            o.interactive = stdin;
            let res = match pool {
                true => lib(sandbox::run_pooled(root, &o, &command, true))?,
                false => lib(sandbox::run(root, &o, &command, true))?,
            };
            to_value(&res)
        }
        Request::Exec {
            id,
            command,
            env,
            timeout_ms,
            output_cap,
            kill_children,
            report_writes,
            stdin,
            cwd,
            result_file,
        } => {
            let req = ExecRequest {
                env,
                timeout: timeout_ms.map(ms),
                capture: result_file.is_none(),
                // A streamed command's exit event carries the whole result.
                report: true,
                output_cap,
                interactive: stdin,
                kill_children,
                report_writes,
                cwd,
            };
            to_value(&lib(sandbox::exec(root, &id, &command, &req))?)
        }
        Request::Terminate { id } => {
            let refused = sandbox::refused(root, &id).ok().flatten();
            let done = lib(sandbox::terminate(root, &id));
            owners::forget(root, &id);
            done?;
            Ok(json!({ "id": id, "refused": refused }))
        }
        Request::Extend { id, lifetime_ms } => {
            Ok(json!({ "expires_ms": lib(sandbox::extend(root, &id, ms(lifetime_ms)))? }))
        }
        Request::List => to_value(&lib(sandbox::list_with_refused(root))?),
        Request::Copy { from, to, limit } => {
            let n = lib(sandbox::cp(root, &from, &to, &CpOptions { limit, follow_links: false }))?;
            Ok(json!({ "bytes": n }))
        }
        Request::PoolFill { opts, count, idle_lifetime_ms } => {
            let mut o = opts.to_sandbox()?;
            o.lifetime = idle_lifetime_ms.map(ms);
            Ok(json!({ "ids": lib(sandbox::pool_fill(root, &o, count))? }))
        }
        Request::PoolList => to_value(&lib(sandbox::pool_list(root))?),
        Request::PoolDrain { key } => Ok(json!({ "ids": lib(sandbox::pool_drain(root, key.as_deref()))? })),
        Request::Sweep { all } => Ok(json!({ "terminated": sweep(root, all) })),
    }
}

/// See [`Request::Sweep`]. Returns the ids terminated.
fn sweep(root: &Path, all: bool) -> Vec<String> {
    let live: Vec<String> = sandbox::list(root).unwrap_or_default().into_iter().map(|s| s.id).collect();
    let mut gone = Vec::new();
    for id in &live {
        let ours = id.starts_with("api-");
        let owned = owners::owner(root, id).is_some();
        if ours && (all || !owned) && sandbox::terminate(root, id).is_ok() {
            gone.push(id.clone());
        }
    }
    for (id, _) in owners::all(root) {
        if all || !live.contains(&id) {
            owners::forget(root, &id);
        }
    }
    gone
}

/// Serialising any answer without naming its type at each call.
mod erased {
    use crate::error::{ApiError, ApiResult};

    pub(crate) trait Ser {
        fn value(&self) -> ApiResult<serde_json::Value>;
    }

    impl<T: serde::Serialize> Ser for T {
        fn value(&self) -> ApiResult<serde_json::Value> {
            serde_json::to_value(self).map_err(|e| ApiError::internal(format!("encode the answer: {e}")))
        }
    }
}
