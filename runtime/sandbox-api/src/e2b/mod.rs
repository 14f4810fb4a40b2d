//! `--e2b`: the e2b SDK's two services on the loopback TCP listener, so
//! that the unmodified SDK drives tinyrun boxes when pointed here
//! (`E2B_API_URL` and `E2B_SANDBOX_URL` both set to this address,
//! `E2B_API_KEY` one of the `--token-file` tokens, plain HTTP/1.1):
//!
//! - the control plane (module `control`): boxes made, listed, given a
//!   new deadline and ended; the caller is known by `X-API-KEY`;
//! - the in-box daemon (module `envd`): commands (Connect RPC, module
//!   `connect`) and files. With `E2B_SANDBOX_URL` every box's daemon is
//!   this one address; each request names its box in `E2b-Sandbox-Id`
//!   and proves it may use it with `X-Access-Token`, which the create
//!   answer handed out: an HMAC of the box id under the creator's key, so
//!   the server keeps no secret of its own and a token opens one box.
//!
//! Each call maps onto the same library calls, worker processes, policy
//! and ownership as `/v1`. Only what those calls need is served; the
//! rest answers 404 (control plane) or `unimplemented` (daemon).

mod connect;
mod control;
mod envd;
mod process;

use std::path::Path;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};

use axum::extract::Request;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::Router;
use hmac::Mac;
use serde_json::json;

use crate::error::ApiError;
use crate::owners::{self, Client};
use crate::server::App;

/// The daemon version the create answer reports: the SDK picks its
/// request shapes from it (0.4.0 and later: no default user is sent).
pub(crate) const ENVD_VERSION: &str = "0.5.7";

/// Who an e2b request is from, as its headers prove.
#[derive(Clone)]
pub(crate) enum Caller {
    /// An API key (one of the tokens): the control plane.
    Key { client: Client, key: Arc<str> },
    /// A box's access token: that box's daemon, and nothing else.
    Box { client: Client, id: String },
}

/// The commands started through the daemon and still running, by box
/// and pid, each with the way to stop it.
#[derive(Default)]
pub(crate) struct Commands {
    pub running: Mutex<std::collections::HashMap<(String, u32), tokio::sync::mpsc::Sender<()>>>,
    pub next_pid: AtomicU32,
}

/// Whether `path` is one of the e2b routes (none is under `/v1`).
pub(crate) fn is_e2b_path(path: &str) -> bool {
    ["/sandboxes", "/v2/sandboxes", "/files", "/health", "/process.Process/", "/filesystem.Filesystem/"]
        .iter()
        .any(|p| path == *p || path.starts_with(&format!("{}/", p.trim_end_matches('/'))))
}

pub(crate) fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/v2/sandboxes", post(control::create).get(control::list))
        .route("/sandboxes/{id}", delete(control::kill))
        .route("/sandboxes/{id}/timeout", post(control::timeout))
        .route("/health", get(envd::health))
        .route("/files", get(envd::read).post(envd::write))
        .route("/process.Process/Start", post(process::start))
        .route("/process.Process/SendSignal", post(process::signal))
        .route("/filesystem.Filesystem/ListDir", post(envd::list_dir))
        .fallback(|req: Request| async move { unserved(req.uri().path()) })
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(app)
}

/// A route this server does not serve, in the form its service uses.
fn unserved(path: &str) -> Response {
    if path.starts_with("/process.") || path.starts_with("/filesystem.") {
        return connect::RpcError::new("unimplemented", format!("{path}: not served by tinyrun")).into_response();
    }
    control::Rest(ApiError::new(crate::error::Code::NotFound, format!("{path}: not served by tinyrun"))).into_response()
}

/// The answer to an e2b request without valid credentials.
pub(crate) fn unauthorized(path: &str) -> Response {
    let why = "an API key (X-API-KEY) or a box's access token (X-Access-Token) is needed";
    if path.starts_with("/process.") || path.starts_with("/filesystem.") {
        return connect::RpcError::new("unauthenticated", why).into_response();
    }
    control::Rest(ApiError::new(crate::error::Code::Unauthorized, why)).into_response()
}

/// Box `id`'s access token for the client whose key is `key`.
pub(crate) fn access_token(key: &str, id: &str) -> String {
    hex(&mac(key, id).finalize().into_bytes())
}

fn mac(key: &str, id: &str) -> hmac::Hmac<sha2::Sha256> {
    // HMAC takes a key of any length.
    let mut m = <hmac::Hmac<sha2::Sha256> as Mac>::new_from_slice(key.as_bytes()).expect("hmac takes any key");
    m.update(b"tinyrun e2b access token\0");
    m.update(id.as_bytes());
    m
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name)?.to_str().ok()
}

/// The caller `h` proves to be, against the server's `tokens`.
pub(crate) fn caller(h: &HeaderMap, tokens: &[String], root: &Path) -> Option<Caller> {
    if let Some(given) = header(h, "x-api-key") {
        let same = |t: &&String| {
            t.len() == given.len() && t.bytes().zip(given.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
        };
        let t = tokens.iter().find(same)?;
        return Some(Caller::Key { client: Client::token(t), key: Arc::from(t.as_str()) });
    }
    let given = header(h, "x-access-token")?;
    let id = header(h, "e2b-sandbox-id")?;
    let owner = owners::owner(root, id)?;
    let given = decode_hex(given)?;
    // The key of the box's owner; the MAC is compared in constant time.
    let key = tokens.iter().find(|t| Client::token(t).name() == owner)?;
    mac(key, id).verify_slice(&given).ok()?;
    Some(Caller::Box { client: Client::token(key), id: id.to_string() })
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || s.len() > 128 {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

/// The e2b error body of the control plane and the daemon's HTTP routes.
fn rest_body(e: &ApiError) -> serde_json::Value {
    json!({"code": e.code.status().as_u16(), "message": e.error})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_access_token_opens_its_own_box_only() {
        let t = tempfile::tempdir().unwrap();
        owners::make_dirs(t.path()).unwrap();
        let (a, b) = ("key-a-0123456789abcdef".to_string(), "key-b-0123456789abcdef".to_string());
        let tokens = vec![a.clone(), b.clone()];
        owners::record(t.path(), "api-1", &Client::token(&a).name()).unwrap();
        owners::record(t.path(), "api-2", &Client::token(&b).name()).unwrap();
        let ask = |token: &str, id: &str| {
            let mut h = HeaderMap::new();
            h.insert("x-access-token", token.parse().unwrap());
            h.insert("e2b-sandbox-id", id.parse().unwrap());
            caller(&h, &tokens, t.path())
        };
        assert!(matches!(ask(&access_token(&a, "api-1"), "api-1"), Some(Caller::Box { id, .. }) if id == "api-1"));
        // Box 1's token for box 2, a token made with another key, a box never made.
        assert!(ask(&access_token(&a, "api-1"), "api-2").is_none());
        assert!(ask(&access_token(&a, "api-2"), "api-2").is_none());
        assert!(ask(&access_token(&a, "api-3"), "api-3").is_none());
        assert!(ask("00", "api-1").is_none());
        let mut h = HeaderMap::new();
        h.insert("x-api-key", "key-c-0123456789abcdef".parse().unwrap());
        assert!(caller(&h, &tokens, t.path()).is_none());
        h.insert("x-api-key", b.parse().unwrap());
        assert!(
            matches!(caller(&h, &tokens, t.path()), Some(Caller::Key { client, .. }) if client == Client::token(&b))
        );
    }

    #[test]
    fn the_e2b_paths_are_not_the_v1_ones() {
        for p in ["/v2/sandboxes", "/sandboxes/api-1/timeout", "/files", "/health", "/process.Process/Start"] {
            assert!(is_e2b_path(p), "{p}");
        }
        for p in ["/v1/health", "/v1/boxes", "/metrics", "/filesx", "/v2/sandboxesx"] {
            assert!(!is_e2b_path(p), "{p}");
        }
    }
}
