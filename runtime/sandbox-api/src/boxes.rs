//! Making and listing boxes for a client, as both front ends (`/v1`,
//! `--e2b`) do: within the policy's lifetime and number of boxes, each
//! box recorded as its maker's. Runs in the server.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::app::{ending, App};
use crate::error::{ApiError, ApiResult, Code};
use crate::options::Options;
use crate::owners::{self, Client};
use crate::worker::Request as Work;

/// Makes a box for `client` (options already checked against the
/// policy), within the policy's lifetime and number of boxes; its id.
pub(crate) async fn launch(
    app: &App,
    client: &Client,
    opts: Options,
    lifetime: Duration,
    idle: Option<Duration>,
) -> ApiResult<String> {
    app.policy.lifetime("lifetime", lifetime)?;
    let max = if client.is_root() { usize::MAX } else { app.policy.max_boxes };
    let reserved = app.pending.reserve(&app.root, &client.name(), max).map_err(|mine| {
        let why = format!("boxes: the client has {mine} boxes, live or being made: the policy's most (max_boxes)");
        ApiError::field(Code::Forbidden, "max_boxes", why)
    })?;
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let work = Work::Launch { opts, lifetime_ms: ms(lifetime), idle_timeout_ms: idle.map(ms), owner: client.name() };
    let started = Instant::now();
    // Held until the worker is done, even if the client goes meanwhile:
    // the box it makes is counted by its record from then on.
    let workers = app.workers.clone();
    let made = tokio::spawn(async move {
        let _reserved = reserved;
        workers.call(&work, None).await
    });
    let made = made.await.map_err(|e| ApiError::internal(format!("make the box: {e}")))??;
    app.metrics.started(started.elapsed());
    Ok(made["id"].as_str().unwrap_or_default().to_string())
}

/// The boxes `client` may see, as the API shows them.
pub(crate) async fn visible(app: &App, client: &Client) -> ApiResult<Vec<Value>> {
    let all = app.workers.call(&Work::List, None).await?;
    let all = all.as_array().cloned().unwrap_or_default();
    let root = &app.root;
    Ok(all
        .into_iter()
        .filter_map(|s| {
            let id = s["id"].as_str()?.to_string();
            (owners::may(root, client, &id) && !ending(app, &id)).then(|| {
                let owner = owners::owner(root, &id);
                json!({"id": id, "status": s["status"], "pid": s["pid"], "created": s["created"], "owner": owner,
                       "refused": s["refused"]})
            })
        })
        .collect())
}
