//! `POST /v1/boxes/{id}/commands`: a command in a live box, answered as
//! one result, or streamed (`application/x-ndjson`, `text/event-stream`):
//! stdout and stderr chunks as the worker passes them on, then the exit
//! event with the result. Runs in the server.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;

use crate::app::{body, output_cap, owned, stdin, App};
use crate::error::{ApiError, ApiResult};
use crate::options::{span, Options, Size, Span};
use crate::owners::Client;
use crate::worker::Request as Work;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CommandRequest {
    command: Vec<String>,
    #[serde(default)]
    env: Vec<String>,
    timeout: Option<Span>,
    stdin: Option<String>,
    stdin_base64: Option<String>,
    #[serde(default)]
    kill_children: bool,
    output_cap: Option<Size>,
    report_writes: Option<String>,
    cwd: Option<String>,
}

const KEYS: [&str; 9] =
    ["command", "env", "timeout", "stdin", "stdin_base64", "kill_children", "output_cap", "report_writes", "cwd"];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Format {
    Json,
    NdJson,
    Sse,
}

fn format(h: &HeaderMap) -> Format {
    let accept = h.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    if accept.contains("application/x-ndjson") {
        Format::NdJson
    } else if accept.contains("text/event-stream") {
        Format::Sse
    } else {
        Format::Json
    }
}

pub(crate) async fn command(
    State(app): State<Arc<App>>,
    Extension(client): Extension<Client>,
    Path(id): Path<String>,
    headers: HeaderMap,
    b: Body,
) -> ApiResult<Response> {
    owned(&app, &client, &id)?;
    let (req, extra): (CommandRequest, Options) = body(b, &KEYS).await?;
    if serde_json::to_value(&extra).ok() != serde_json::to_value(Options::default()).ok() {
        return Err(ApiError::bad("a command takes no box options: those are the box's (see createBox)"));
    }
    if req.command.is_empty() {
        return Err(ApiError::field(crate::error::Code::BadRequest, "command", "command: empty"));
    }
    let timeout = req.timeout.as_ref().map(|t| span("timeout", t)).transpose()?;
    let cwd = req.cwd.map(std::path::PathBuf::from);
    if let Some(Err(e)) = cwd.as_deref().map(tinyrun_sandbox::check_cwd) {
        let why = e.to_string().replace("--cwd", "cwd");
        return Err(ApiError::field(crate::error::Code::BadRequest, "cwd", why));
    }
    let input = stdin(req.stdin, req.stdin_base64.as_deref())?;
    let fmt = format(&headers);
    let tmp = crate::files::Scratch::new(&app.root)?;
    let result_file = (fmt != Format::Json).then(|| tmp.path().join("result.json"));
    let work = Work::Exec {
        id,
        command: req.command,
        env: req.env,
        timeout_ms: timeout.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        output_cap: output_cap(req.output_cap.as_ref())?,
        kill_children: req.kill_children,
        report_writes: req.report_writes.map(Into::into),
        stdin: input.is_some(),
        cwd,
        result_file: result_file.clone(),
    };
    app.metrics.command();
    let Some(result_file) = result_file else {
        return Ok(Json(app.workers.call(&work, input).await?).into_response());
    };
    let mut running = app.workers.start(&work, input).await?;
    let (tx, rx) = mpsc::channel::<Result<String, std::io::Error>>(16);
    let out = running.child.stdout.take();
    let err = running.child.stderr.take();
    tokio::spawn(async move {
        let _tmp = tmp;
        let pumped = async {
            tokio::join!(pump(out, "stdout", fmt, tx.clone()), pump(err, "stderr", fmt, tx.clone()));
        };
        tokio::select! {
            () = pumped => {}
            // The client went away: nobody reads, so nothing runs on.
            () = tx.closed() => return running.stop().await,
        }
        let _ = running.child.wait().await;
        running.finished();
        let answer = tokio::fs::read(&result_file).await.unwrap_or_default();
        let event = match crate::spawn::answer(&answer, b"") {
            Ok(res) => json!({"type": "exit", "result": res}),
            Err(e) => {
                json!({"type": "exit", "result": {"schema_version": tinyrun_sandbox::SCHEMA_VERSION, "error": e.error}})
            }
        };
        let _ = tx.send(Ok(frame(fmt, "exit", &event))).await;
    });
    let stream = tokio_stream(rx);
    let ctype = if fmt == Format::Sse { "text/event-stream" } else { "application/x-ndjson" };
    Ok(([(header::CONTENT_TYPE, ctype), (header::CACHE_CONTROL, "no-cache")], Body::from_stream(stream))
        .into_response())
}

fn tokio_stream(
    mut rx: mpsc::Receiver<Result<String, std::io::Error>>,
) -> impl futures_util::Stream<Item = Result<String, std::io::Error>> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

fn frame(fmt: Format, kind: &str, event: &Value) -> String {
    match fmt {
        Format::Sse => format!("event: {kind}\ndata: {event}\n\n"),
        _ => format!("{event}\n"),
    }
}

/// Copies one output pipe of the worker into events, until it closes or,
/// once the worker has gone, goes quiet: what the command left running in
/// the box may hold the pipe open for as long as the box lives.
async fn pump<R: tokio::io::AsyncRead + Unpin>(
    r: Option<R>,
    kind: &str,
    fmt: Format,
    tx: mpsc::Sender<Result<String, std::io::Error>>,
) {
    use base64::Engine as _;
    let Some(mut r) = r else { return };
    let mut buf = vec![0u8; 32 << 10];
    loop {
        let n = match tokio::time::timeout(Duration::from_secs(3600), r.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => n,
            _ => return,
        };
        let chunk = &buf[..n];
        let event = match std::str::from_utf8(chunk) {
            Ok(t) => json!({"type": kind, "data": t, "encoding": "utf-8"}),
            Err(_) => {
                json!({"type": kind, "data": base64::engine::general_purpose::STANDARD.encode(chunk), "encoding": "base64"})
            }
        };
        // A client that went away: the caller stops the command.
        if tx.send(Ok(frame(fmt, kind, &event))).await.is_err() {
            return;
        }
    }
}
