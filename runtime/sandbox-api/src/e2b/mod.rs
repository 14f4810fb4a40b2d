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

mod caller;
mod connect;
mod control;
mod envd;
mod process;
mod rest;

pub(crate) use caller::caller;

use std::sync::Arc;

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::Router;

use crate::app::App;
use crate::error::ApiError;

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
    rest::Rest(ApiError::new(crate::error::Code::NotFound, format!("{path}: not served by tinyrun"))).into_response()
}

/// The answer to an e2b request without valid credentials.
pub(crate) fn unauthorized(path: &str) -> Response {
    let why = "an API key (X-API-KEY) or a box's access token (X-Access-Token) is needed";
    if path.starts_with("/process.") || path.starts_with("/filesystem.") {
        return connect::RpcError::new("unauthenticated", why).into_response();
    }
    rest::Rest(ApiError::new(crate::error::Code::Unauthorized, why)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

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
