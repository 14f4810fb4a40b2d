//! The routes (one table, [`ROUTES`], that the router is built from and a
//! test checks against openapi.yaml) and the handlers of boxes, runs,
//! lifetimes and pools. Runs in the server: each handler checks who asks
//! and what against the policy, then hands the library call to a worker.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put, MethodRouter};
use axum::{Extension, Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::app::{body, output_cap, owned, stdin, App};
use crate::boxes::{launch, visible};
use crate::error::{ApiError, ApiResult, Code};
use crate::options::{span, Options, Size, Span};
use crate::owners::{self, Client};
use crate::worker::Request as Work;

type AppState = State<Arc<App>>;

/// Every route: method, path, handler.
pub(crate) fn routes() -> Vec<(&'static str, &'static str, MethodRouter<Arc<App>>)> {
    use crate::{files, stream};
    vec![
        ("GET", "/v1/health", get(health)),
        ("GET", "/metrics", get(metrics)),
        ("POST", "/v1/run", post(run)),
        ("POST", "/v1/boxes", post(create)),
        ("GET", "/v1/boxes", get(list)),
        ("GET", "/v1/boxes/{id}", get(one)),
        ("DELETE", "/v1/boxes/{id}", delete(remove)),
        ("POST", "/v1/boxes/{id}/commands", post(stream::command)),
        ("GET", "/v1/boxes/{id}/files", get(files::read)),
        ("PUT", "/v1/boxes/{id}/files", put(files::write)),
        ("GET", "/v1/boxes/{id}/files/list", get(files::list)),
        ("GET", "/v1/boxes/{id}/archive", get(files::read_archive)),
        ("PUT", "/v1/boxes/{id}/archive", put(files::write_archive)),
        ("POST", "/v1/boxes/{id}/lifetime", post(lifetime)),
        ("GET", "/v1/pools", get(pools)),
        ("POST", "/v1/pools", post(fill)),
        ("DELETE", "/v1/pools", delete(drain)),
    ]
}

pub(crate) fn router(app: Arc<App>) -> Router {
    let r = routes().into_iter().fold(Router::new(), |r, (_, path, m)| r.route(path, m));
    let unknown = || async { ApiError::new(Code::NotFound, "no such route (see openapi.yaml)") };
    r.fallback(unknown)
        .method_not_allowed_fallback(|| async {
            ApiError::new(Code::BadRequest, "this route does not take that method (see openapi.yaml)")
        })
        // Bodies are read by the handlers, each against its own cap.
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(app)
}

async fn health() -> Json<Value> {
    Json(
        json!({"status": "ok", "schema_version": tinyrun_sandbox::SCHEMA_VERSION, "version": env!("CARGO_PKG_VERSION")}),
    )
}

async fn metrics(State(app): AppState) -> Response {
    let live = owners::all(&app.root).len();
    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], app.metrics.render(live)).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RunOwn {
    command: Vec<String>,
    #[serde(default)]
    pool: bool,
    stdin: Option<String>,
    stdin_base64: Option<String>,
    output_cap: Option<Size>,
    report_writes: Option<String>,
}

async fn run(State(app): AppState, Extension(client): Extension<Client>, b: Body) -> ApiResult<Json<Value>> {
    let (own, opts): (RunOwn, Options) =
        body(b, &["command", "pool", "stdin", "stdin_base64", "output_cap", "report_writes"]).await?;
    app.policy.check(&opts)?;
    let _ = client;
    let input = stdin(own.stdin, own.stdin_base64.as_deref())?;
    let work = Work::Run {
        opts,
        command: own.command,
        pool: own.pool,
        output_cap: output_cap(own.output_cap.as_ref())?,
        report_writes: own.report_writes.map(Into::into),
        stdin: input.is_some(),
    };
    let started = Instant::now();
    let res = app.workers.call(&work, input).await?;
    app.metrics.command();
    match res.get("pool").and_then(Value::as_str) {
        Some(p) => app.metrics.pool(p == "hit"),
        None => app.metrics.started(started.elapsed()),
    }
    Ok(Json(res))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateOwn {
    lifetime: Option<Span>,
    idle_timeout: Option<Value>,
}

async fn create(State(app): AppState, Extension(client): Extension<Client>, b: Body) -> ApiResult<Response> {
    let (own, opts): (CreateOwn, Options) = body(b, &["lifetime", "idle_timeout"]).await?;
    let checked = app.policy.check(&opts)?;
    // As `launch`: an explicit timeout is the lifetime unless one is given.
    let lifetime = match (&own.lifetime, &opts.timeout) {
        (Some(l), _) => span("lifetime", l)?,
        (None, Some(_)) => checked.timeout,
        (None, None) => tinyrun_sandbox::DEFAULT_LIFETIME,
    };
    let idle = match own.idle_timeout {
        Some(Value::String(s)) if s == "off" => None,
        Some(v) => Some(span(
            "idle_timeout",
            &serde_json::from_value(v).map_err(|e| ApiError::bad(format!("idle_timeout: {e}")))?,
        )?),
        None => Some(tinyrun_sandbox::DEFAULT_IDLE_TIMEOUT),
    };
    let id = launch(&app, &client, opts, lifetime, idle).await?;
    let expires = humantime::format_rfc3339_seconds(std::time::SystemTime::now() + lifetime).to_string();
    let b = json!({"id": id, "status": "running", "owner": client.name(), "expires_at": expires});
    Ok((StatusCode::CREATED, Json(b)).into_response())
}

async fn list(State(app): AppState, Extension(client): Extension<Client>) -> ApiResult<Json<Value>> {
    Ok(Json(json!({ "boxes": visible(&app, &client).await? })))
}

async fn one(
    State(app): AppState,
    Extension(client): Extension<Client>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    owned(&app, &client, &id)?;
    let found = visible(&app, &client).await?.into_iter().find(|b| b["id"] == id.as_str());
    found.map(Json).ok_or_else(|| ApiError::no_box(&id))
}

#[derive(Deserialize)]
struct Wait {
    #[serde(default)]
    wait: bool,
}

async fn remove(
    State(app): AppState,
    Extension(client): Extension<Client>,
    Path(id): Path<String>,
    Query(q): Query<Wait>,
) -> ApiResult<Response> {
    owned(&app, &client, &id)?;
    let work = Work::Terminate { id: id.clone() };
    if q.wait {
        return Ok((StatusCode::OK, Json(app.workers.call(&work, None).await?)).into_response());
    }
    // The box is no one's from now on (a server killed before it is gone
    // leaves a box without an owner, which the next one terminates); the
    // client does not wait for its teardown.
    owners::forget(&app.root, &id);
    if let Ok(mut e) = app.ending.lock() {
        e.insert(id.clone());
    }
    let (a, ended) = (app.clone(), id.clone());
    app.background.spawn(async move {
        let _ = a.workers.call(&work, None).await;
        if let Ok(mut e) = a.ending.lock() {
            e.remove(&ended);
        }
    });
    Ok((StatusCode::ACCEPTED, Json(json!({"id": id, "refused": null}))).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Lifetime {
    lifetime: Span,
}

async fn lifetime(
    State(app): AppState,
    Extension(client): Extension<Client>,
    Path(id): Path<String>,
    b: Body,
) -> ApiResult<Json<Value>> {
    owned(&app, &client, &id)?;
    let (own, _): (Lifetime, Options) = body(b, &["lifetime"]).await?;
    let d = span("lifetime", &own.lifetime)?;
    app.policy.lifetime("lifetime", d)?;
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let at = app.workers.call(&Work::Extend { id: id.clone(), lifetime_ms: ms }, None).await?;
    let at = std::time::UNIX_EPOCH + Duration::from_millis(at["expires_ms"].as_u64().unwrap_or(0));
    let at = humantime::format_rfc3339_seconds(at).to_string();
    Ok(Json(json!({"id": id, "status": "running", "owner": owners::owner(&app.root, &id), "expires_at": at})))
}

async fn pools(State(app): AppState) -> ApiResult<Json<Value>> {
    Ok(Json(json!({ "boxes": app.workers.call(&Work::PoolList, None).await? })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FillOwn {
    count: usize,
    idle_lifetime: Option<Span>,
}

async fn fill(State(app): AppState, b: Body) -> ApiResult<Json<Value>> {
    let (own, opts): (FillOwn, Options) = body(b, &["count", "idle_lifetime"]).await?;
    app.policy.check(&opts)?;
    if own.count > app.policy.max_pool_size {
        let why =
            format!("count: {} boxes is more than the policy's pool size of {}", own.count, app.policy.max_pool_size);
        return Err(ApiError::field(Code::Forbidden, "count", why));
    }
    let idle = own.idle_lifetime.as_ref().map(|l| span("idle_lifetime", l)).transpose()?;
    if let Some(d) = idle {
        app.policy.lifetime("idle_lifetime", d)?;
    }
    let idle_lifetime_ms = idle.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    Ok(Json(app.workers.call(&Work::PoolFill { opts, count: own.count, idle_lifetime_ms }, None).await?))
}

#[derive(Deserialize)]
struct DrainQuery {
    key: Option<String>,
}

async fn drain(
    State(app): AppState,
    Extension(client): Extension<Client>,
    Query(q): Query<DrainQuery>,
) -> ApiResult<Json<Value>> {
    if !client.is_root() {
        return Err(ApiError::field(Code::Forbidden, "key", "draining a pool is for root: pools are every client's"));
    }
    Ok(Json(app.workers.call(&Work::PoolDrain { key: q.key }, None).await?))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    /// (METHOD, path) of each operation in openapi.yaml: a path is a line
    /// of two spaces and `/...:` under `paths:`, a method one of four
    /// spaces under it.
    fn documented() -> BTreeSet<(String, String)> {
        let text = include_str!("../openapi.yaml");
        let mut out = BTreeSet::new();
        let (mut in_paths, mut path) = (false, None::<String>);
        for line in text.lines() {
            if !line.starts_with(' ') && !line.is_empty() {
                in_paths = line == "paths:";
                continue;
            }
            if !in_paths {
                continue;
            }
            if let Some(p) = line.strip_prefix("  /").and_then(|p| p.strip_suffix(':')) {
                path = Some(format!("/{p}"));
            } else if let Some(m) = line.strip_prefix("    ").and_then(|m| m.strip_suffix(':')) {
                if ["get", "post", "put", "delete", "patch", "head"].contains(&m) {
                    out.insert((m.to_uppercase(), path.clone().expect("a method under a path")));
                }
            }
        }
        out
    }

    #[test]
    fn openapi_documents_exactly_the_routes() {
        let served: BTreeSet<(String, String)> =
            super::routes().into_iter().map(|(m, p, _)| (m.to_string(), p.to_string())).collect();
        let doc = documented();
        assert!(doc.len() > 10, "the parser found the paths: {doc:?}");
        let undocumented: Vec<_> = served.difference(&doc).collect();
        let unserved: Vec<_> = doc.difference(&served).collect();
        assert!(
            undocumented.is_empty() && unserved.is_empty(),
            "served, not in openapi.yaml: {undocumented:?}; documented, not served: {unserved:?}"
        );
    }
}
