//! The e2b control plane: `POST /v2/sandboxes` (a box), `GET
//! /v2/sandboxes` (the caller's boxes), `POST /sandboxes/{id}/timeout`
//! (a new deadline) and `DELETE /sandboxes/{id}`. Sandboxes are boxes
//! made with the server's default options (the one template, `base`);
//! their timeout is the box's lifetime, with no idle timeout, as e2b
//! keeps a sandbox until its timeout. Runs in the server.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::caller::{access_token, Caller, ENVD_VERSION};
use super::rest::{Rest, RestResult};
use crate::app::{owned, App};
use crate::boxes::{launch, visible};
use crate::error::{ApiError, Code};
use crate::options::Options;
use crate::owners::Client;
use crate::worker::Request as Work;

/// The only template: a box as the server makes it by default.
const TEMPLATE: &str = "base";
/// e2b's default timeout, for a request that gives none.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// The control plane takes API keys only, not a box's access token.
fn key(caller: &Caller) -> RestResult<(&Client, &str)> {
    match caller {
        Caller::Key { client, key } => Ok((client, key)),
        Caller::Box { .. } => Err(Rest(ApiError::new(Code::Unauthorized, "the control plane takes an API key"))),
    }
}

fn refuse(field: &str, why: &str) -> Rest {
    Rest(ApiError::field(Code::BadRequest, field, format!("{field}: {why}")))
}

/// A value that asks for nothing: absent, null, false, zero or empty.
fn asks_nothing(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

/// The box options and lifetime a create request asks for; whatever this
/// server cannot give is refused, naming the field.
fn options(body: &Map<String, Value>) -> RestResult<(Options, Duration)> {
    let mut opts = Options::default();
    let mut lifetime = DEFAULT_TIMEOUT;
    for (k, v) in body {
        match k.as_str() {
            "templateID" if v.as_str() == Some(TEMPLATE) => {}
            "templateID" => return Err(refuse(k, "the one template here is \"base\"")),
            "timeout" => {
                let s = v.as_u64().filter(|s| *s > 0).ok_or_else(|| refuse(k, "a number of seconds above 0"))?;
                lifetime = Duration::from_secs(s);
            }
            "envVars" => {
                let vars = v.as_object().ok_or_else(|| refuse(k, "an object of strings"))?;
                for (name, value) in vars {
                    let value = value.as_str().ok_or_else(|| refuse(k, "an object of strings"))?;
                    opts.env.push(format!("{name}={value}"));
                }
            }
            // Sandboxes are never paused here, keep no metadata and have
            // the box's network (loopback only unless the policy allows).
            _ if asks_nothing(v) => {}
            "metadata" => return Err(refuse(k, "not kept by this server")),
            "allow_internet_access" | "network" => return Err(refuse(k, "boxes here have loopback only")),
            _ => return Err(refuse(k, "not supported by this server")),
        }
    }
    Ok((opts, lifetime))
}

pub(crate) async fn create(
    State(app): State<Arc<App>>,
    Extension(caller): Extension<Caller>,
    b: Body,
) -> RestResult<Response> {
    let (client, key) = key(&caller)?;
    let bytes = axum::body::to_bytes(b, crate::app::MAX_JSON)
        .await
        .map_err(|_| Rest(ApiError::new(Code::TooLarge, "the body is too large")))?;
    let body: Map<String, Value> =
        serde_json::from_slice(&bytes).map_err(|e| Rest(ApiError::bad(format!("the body: {e}"))))?;
    let (opts, lifetime) = options(&body)?;
    app.policy.check(&opts)?;
    let id = launch(&app, client, opts, lifetime, None).await?;
    let answer = json!({
        "sandboxID": id,
        "templateID": TEMPLATE,
        "alias": TEMPLATE,
        "clientID": client.name(),
        "envdVersion": ENVD_VERSION,
        "envdAccessToken": access_token(key, &id),
    });
    Ok((StatusCode::CREATED, Json(answer)).into_response())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ListQuery {
    state: Option<String>,
    metadata: Option<String>,
}

fn rfc3339_ms(ms: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

pub(crate) async fn list(
    State(app): State<Arc<App>>,
    Extension(caller): Extension<Caller>,
    Query(q): Query<ListQuery>,
) -> RestResult<Json<Value>> {
    let (client, _) = key(&caller)?;
    if q.metadata.as_deref().is_some_and(|m| !m.is_empty()) {
        return Err(refuse("metadata", "not kept by this server, so no filter on it"));
    }
    let wanted = |s: &str| q.state.as_deref().is_none_or(|w| w.split(',').any(|w| w == s));
    let mut out = Vec::new();
    for b in visible(&app, client).await? {
        let state = match b["status"].as_str() {
            Some("running") => "running",
            Some("paused") => "paused",
            _ => continue,
        };
        let id = b["id"].as_str().unwrap_or_default();
        if !wanted(state) {
            continue;
        }
        let end = tinyrun_sandbox::expires_at(&app.root, id).map(rfc3339_ms);
        out.push(json!({
            "sandboxID": id,
            "templateID": TEMPLATE,
            "alias": TEMPLATE,
            "clientID": client.name(),
            "startedAt": b["created"],
            "endAt": end.unwrap_or_else(|| b["created"].as_str().unwrap_or_default().to_string()),
            // Not recorded per box: the box's limits are its options'.
            "cpuCount": 0,
            "memoryMB": 0,
            "diskSizeMB": 0,
            "state": state,
            "envdVersion": ENVD_VERSION,
            "metadata": {},
        }));
    }
    Ok(Json(Value::Array(out)))
}

#[derive(Deserialize)]
pub(crate) struct Timeout {
    timeout: u64,
}

pub(crate) async fn timeout(
    State(app): State<Arc<App>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    b: Body,
) -> RestResult<StatusCode> {
    let (client, _) = key(&caller)?;
    owned(&app, client, &id)?;
    let bytes = axum::body::to_bytes(b, crate::app::MAX_JSON)
        .await
        .map_err(|_| Rest(ApiError::new(Code::TooLarge, "the body is too large")))?;
    let t: Timeout = serde_json::from_slice(&bytes).map_err(|e| refuse("timeout", &e.to_string()))?;
    if t.timeout == 0 {
        return Err(refuse("timeout", "a number of seconds above 0"));
    }
    let d = Duration::from_secs(t.timeout);
    app.policy.lifetime("timeout", d)?;
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    app.workers.call(&Work::Extend { id, lifetime_ms: ms }, None).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(crate) async fn kill(
    State(app): State<Arc<App>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> RestResult<StatusCode> {
    let (client, _) = key(&caller)?;
    owned(&app, client, &id)?;
    app.workers.call(&Work::Terminate { id }, None).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn a_create_request_gets_what_it_asks_or_a_named_refusal() {
        let (o, l) =
            options(&body(json!({"templateID": "base", "timeout": 60, "envVars": {"A": "1"}, "metadata": {}})))
                .map_err(|e| e.0)
                .unwrap();
        assert_eq!((o.env, l), (vec!["A=1".to_string()], Duration::from_secs(60)));
        for (req, field) in [
            (json!({"templateID": "python"}), "templateID"),
            (json!({"metadata": {"a": "b"}}), "metadata"),
            (json!({"allow_internet_access": true}), "allow_internet_access"),
            (json!({"autoPause": true}), "autoPause"),
            (json!({"timeout": -1}), "timeout"),
        ] {
            let e = options(&body(req)).map(|_| ()).expect_err("refused").0;
            assert_eq!(e.field.as_deref(), Some(field));
        }
    }
}
