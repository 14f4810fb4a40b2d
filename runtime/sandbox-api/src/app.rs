//! What every handler shares, whichever front end (`/v1`, `--e2b`) it
//! serves: the server's state, the checks every request to a box makes,
//! and the request pieces with their caps. Runs in the server.

use std::path::PathBuf;
use std::sync::atomic::AtomicU32;
use std::sync::Mutex;
use std::time::Duration;

use axum::body::Body;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::task::TaskTracker;

use crate::error::{ApiError, ApiResult, Code};
use crate::metrics::Metrics;
use crate::options::{Options, Size};
use crate::owners::{self, Client};
use crate::policy::Policy;
use crate::spawn::Workers;

/// Most bytes of a JSON request body.
pub(crate) const MAX_JSON: usize = 1 << 20;

/// What every handler shares.
pub(crate) struct App {
    pub root: PathBuf,
    pub workers: Workers,
    pub policy: Policy,
    /// Boxes being made, counted against each client's limit.
    pub pending: owners::Pending,
    pub metrics: Metrics,
    pub max_body: u64,
    pub idle: Duration,
    /// Terminations answered before they were done (DELETE): waited for
    /// at shutdown.
    pub background: TaskTracker,
    /// The boxes of those terminations: gone for every client from the
    /// answer on, root included, though their teardown runs on.
    pub ending: std::sync::Mutex<std::collections::HashSet<String>>,
    /// `--e2b`: the commands started through the e2b daemon routes.
    pub e2b: Commands,
}

/// The commands started through the e2b daemon routes and still running,
/// by box and pid, each with the way to stop it.
#[derive(Default)]
pub(crate) struct Commands {
    pub running: Mutex<std::collections::HashMap<(String, u32), tokio::sync::mpsc::Sender<()>>>,
    pub next_pid: AtomicU32,
}

/// Box `id`, if `client` may see it; otherwise as if there were none.
pub(crate) fn owned(app: &App, client: &Client, id: &str) -> ApiResult<()> {
    match owners::may(&app.root, client, id) && !ending(app, id) {
        true => Ok(()),
        false => Err(ApiError::no_box(id)),
    }
}

/// Whether box `id`'s DELETE was answered while its teardown runs on.
pub(crate) fn ending(app: &App, id: &str) -> bool {
    app.ending.lock().is_ok_and(|e| e.contains(id))
}

/// The response for a request whose body passed its cap.
pub(crate) fn too_large(cap: u64) -> ApiError {
    ApiError::new(Code::TooLarge, format!("the request body is over the cap of {cap} bytes"))
}

/// A JSON body of at most [`MAX_JSON`] bytes, split into the
/// request's own `keys` and the box options (the rest).
pub(crate) async fn body<T: DeserializeOwned>(body: Body, keys: &[&str]) -> ApiResult<(T, Options)> {
    let bytes = axum::body::to_bytes(body, MAX_JSON)
        .await
        .map_err(|_| ApiError::new(Code::TooLarge, format!("a JSON body is capped at {} bytes", MAX_JSON)))?;
    let v: Value = serde_json::from_slice(&bytes).map_err(|e| ApiError::bad(format!("the body is not JSON: {e}")))?;
    let Value::Object(mut all) = v else { return Err(ApiError::bad("the body must be a JSON object")) };
    let own: serde_json::Map<String, Value> =
        keys.iter().filter_map(|k| all.remove(*k).map(|v| (k.to_string(), v))).collect();
    let own = serde_json::from_value(Value::Object(own)).map_err(|e| ApiError::bad(format!("the request: {e}")))?;
    let opts = serde_json::from_value(Value::Object(all)).map_err(|e| ApiError::bad(format!("the options: {e}")))?;
    Ok((own, opts))
}

/// A command's stdin, given as text or as base64, not both.
pub(crate) fn stdin(text: Option<String>, b64: Option<&str>) -> ApiResult<Option<Vec<u8>>> {
    use base64::Engine as _;
    match (text, b64) {
        (Some(_), Some(_)) => Err(ApiError::field(Code::BadRequest, "stdin", "give stdin or stdin_base64, not both")),
        (Some(t), None) => Ok(Some(t.into_bytes())),
        (None, Some(b)) => base64::engine::general_purpose::STANDARD
            .decode(b)
            .map(Some)
            .map_err(|e| ApiError::field(Code::BadRequest, "stdin_base64", format!("stdin_base64: {e}"))),
        (None, None) => Ok(None),
    }
}

/// The most bytes of each output stream a result keeps (1M unless asked).
pub(crate) fn output_cap(s: Option<&Size>) -> ApiResult<usize> {
    let n = s.map(|s| crate::options::size("output_cap", s)).transpose()?.unwrap_or(1 << 20);
    // More than a megabyte of each stream is what streaming is for.
    if n > 16 << 20 {
        return Err(ApiError::field(
            Code::Forbidden,
            "output_cap",
            "output_cap: at most 16M (stream the output instead)",
        ));
    }
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}
