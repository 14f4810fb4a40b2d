//! The daemon's `process.Process` service: `Start` (a command in the box,
//! its output streamed as it comes: a start event with its pid, data
//! events, the end event) and `SendSignal` (SIGKILL or SIGTERM: either
//! stops it). A command is `sandbox exec` in a worker of its own, as a
//! streamed `/v1` command is; its pid is the server's number for it, not
//! a pid in the box. Stopping it is SIGTERM to its worker, which the
//! library answers by killing the command (and what it started) through
//! its cgroup. Runs in the server.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;

use super::caller::{box_of, Caller};
use super::connect::{self, RpcError};
use crate::app::App;
use crate::worker::Request as Work;

#[derive(Deserialize)]
struct StartRequest {
    process: ProcessConfig,
    pty: Option<Value>,
    tag: Option<String>,
    stdin: Option<bool>,
}

#[derive(Deserialize)]
struct ProcessConfig {
    cmd: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    envs: BTreeMap<String, String>,
    cwd: Option<String>,
}

/// What `Start` cannot do here, named.
fn unsupported(req: &StartRequest) -> Option<RpcError> {
    let no = |f: &str, why: &str| Some(RpcError::invalid(format!("{f}: {why}")));
    if req.pty.is_some() {
        return no("pty", "commands here have no terminal");
    }
    if req.stdin == Some(true) {
        return no("stdin", "commands here read no input after they start");
    }
    if req.tag.as_deref().is_some_and(|t| !t.is_empty()) {
        return no("tag", "commands are known by pid only");
    }
    None
}

pub(crate) async fn start(
    State(app): State<Arc<App>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match begin(app, &caller, &headers, body).await {
        Ok(r) => r,
        Err(e) => connect::stream_error(&e),
    }
}

async fn begin(app: Arc<App>, caller: &Caller, headers: &HeaderMap, body: Body) -> Result<Response, RpcError> {
    let id = box_of(&app, caller)?;
    let req: StartRequest = connect::stream_request(headers, body).await?;
    if let Some(e) = unsupported(&req) {
        return Err(e);
    }
    let timeout_ms = headers.get("connect-timeout-ms").and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let cwd = req.process.cwd.filter(|c| !c.is_empty()).map(std::path::PathBuf::from);
    if let Some(Err(e)) = cwd.as_deref().map(tinyrun_sandbox::check_cwd) {
        return Err(RpcError::invalid(e.to_string().replace("--cwd", "cwd")));
    }
    let mut command = vec![req.process.cmd];
    command.extend(req.process.args);
    let tmp = crate::files::Scratch::new(&app.root)?;
    let result_file = tmp.path().join("result.json");
    let work = Work::Exec {
        id: id.clone(),
        command,
        env: req.process.envs.into_iter().map(|(k, v)| format!("{k}={v}")).collect(),
        cwd,
        timeout_ms,
        output_cap: 1 << 20,
        kill_children: false,
        report_writes: None,
        stdin: false,
        result_file: Some(result_file.clone()),
    };
    app.metrics.command();
    let mut running = app.workers.start(&work, None).await?;
    let pid = app.e2b.next_pid.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
    let (stop_tx, mut stop_rx) = mpsc::channel::<()>(1);
    lock(&app).insert((id.clone(), pid), stop_tx);
    let (tx, rx) = mpsc::channel::<Result<Vec<u8>, std::io::Error>>(16);
    let _ = tx.try_send(Ok(connect::envelope(&json!({"event": {"start": {"pid": pid}}}))));
    let out = tokio::spawn(pump(running.child.stdout.take(), "stdout", tx.clone()));
    let err = tokio::spawn(pump(running.child.stderr.take(), "stderr", tx.clone()));
    tokio::spawn(async move {
        let _tmp = tmp;
        let mut stopped = false;
        loop {
            tokio::select! {
                _ = running.child.wait() => break,
                s = stop_rx.recv(), if !stopped => {
                    stopped = true;
                    // Not reaped yet (this task waits for it), so the pid is the worker's.
                    if let (Some(_), Some(p)) = (s, running.child.id().and_then(|p| i32::try_from(p).ok())) {
                        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), nix::sys::signal::SIGTERM);
                    }
                }
            }
        }
        lock(&app).remove(&(id, pid));
        // What the command left running may hold its pipes open: the
        // stream ends anyway (its senders go with the pumps).
        for p in [out, err] {
            let pump = p.abort_handle();
            if tokio::time::timeout(Duration::from_millis(500), p).await.is_err() {
                pump.abort();
            }
        }
        let answer = tokio::fs::read(&result_file).await.unwrap_or_default();
        let (event, error) = end_event(crate::spawn::answer(&answer, b""), stopped, timeout_ms.is_some());
        if let Some(ev) = event {
            let _ = tx.send(Ok(connect::envelope(&json!({"event": {"end": ev}})))).await;
        }
        let _ = tx.send(Ok(connect::end(error.as_ref()))).await;
    });
    let mut rx = rx;
    let stream = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
    Ok(connect::stream_response(Body::from_stream(stream)))
}

fn lock(app: &App) -> std::sync::MutexGuard<'_, std::collections::HashMap<(String, u32), mpsc::Sender<()>>> {
    app.e2b.running.lock().unwrap_or_else(|p| p.into_inner())
}

/// The end event of a command from its worker's answer, or the error the
/// stream ends with.
fn end_event(
    answer: crate::error::ApiResult<Value>,
    stopped: bool,
    has_timeout: bool,
) -> (Option<Value>, Option<RpcError>) {
    let killed = || json!({"exitCode": -1, "exited": false, "status": "signal: killed"});
    let res = match answer {
        Ok(r) => r,
        Err(_) if stopped => return (Some(killed()), None),
        Err(e) => return (None, Some(e.into())),
    };
    if res["timed_out"] == true && has_timeout {
        return (None, Some(RpcError::new("deadline_exceeded", "the command's timeout passed")));
    }
    if let Some(c) = res["exit_code"].as_i64() {
        return (Some(json!({"exitCode": c, "exited": true, "status": format!("exit status {c}")})), None);
    }
    if let Some(s) = res["signal"].as_str() {
        let mut ev = killed();
        ev["status"] = json!(format!("signal: {s}"));
        return (Some(ev), None);
    }
    let why = res["error"].as_str().unwrap_or("the command did not run").to_string();
    (None, Some(RpcError::new("internal", why)))
}

/// Copies one output pipe of the worker into data events until it
/// closes or the client goes.
async fn pump<R: tokio::io::AsyncRead + Unpin>(
    r: Option<R>,
    kind: &'static str,
    tx: mpsc::Sender<Result<Vec<u8>, std::io::Error>>,
) {
    use base64::Engine as _;
    let Some(mut r) = r else { return };
    let mut buf = vec![0u8; 32 << 10];
    loop {
        let n = match r.read(&mut buf).await {
            Ok(n) if n > 0 => n,
            _ => return,
        };
        let data = base64::engine::general_purpose::STANDARD.encode(&buf[..n]);
        let msg = connect::envelope(&json!({"event": {"data": { kind: data }}}));
        if tx.send(Ok(msg)).await.is_err() {
            return;
        }
    }
}

#[derive(Deserialize)]
struct SignalRequest {
    process: Selector,
}

#[derive(Deserialize)]
struct Selector {
    pid: Option<u32>,
}

pub(crate) async fn signal(
    State(app): State<Arc<App>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, RpcError> {
    let id = box_of(&app, &caller)?;
    let req: SignalRequest = connect::unary(&headers, body).await?;
    let pid = req.process.pid.ok_or_else(|| RpcError::invalid("process: commands are known by pid only"))?;
    // Either signal stops the command: the library kills it, and what it started, through its cgroup.
    let stop = lock(&app).get(&(id, pid)).cloned();
    match stop {
        Some(s) => {
            let _ = s.try_send(());
            Ok(Json(json!({})))
        }
        None => Err(RpcError::new("not_found", format!("process with pid {pid} not found"))),
    }
}
