//! The part of the Connect protocol (connectrpc.com/docs/protocol) the
//! e2b SDK speaks to its in-box daemon: JSON messages only, no
//! compression. A unary call is a POST of one `application/json` message
//! answered by one; a server-streaming call sends one enveloped message
//! (`application/connect+json`) and gets enveloped messages back, the
//! last flagged as the end of the stream and carrying the error, if any.
//! An envelope is the one piece of framing the protocol has: a flags byte
//! and a big-endian u32 length before each message. Runs in the server.

use axum::body::Body;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use crate::error::{ApiError, Code};

/// An envelope's flag: the message is compressed (never, here).
const COMPRESSED: u8 = 0x01;
/// An envelope's flag: the end-of-stream message.
const END_STREAM: u8 = 0x02;

/// A Connect error: its code (one of the protocol's names) and message.
#[derive(Debug)]
pub(crate) struct RpcError {
    code: &'static str,
    message: String,
}

impl RpcError {
    pub(crate) fn new(code: &'static str, message: impl Into<String>) -> RpcError {
        RpcError { code, message: message.into() }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> RpcError {
        RpcError::new("invalid_argument", message)
    }

    fn status(&self) -> StatusCode {
        match self.code {
            "invalid_argument" | "out_of_range" => StatusCode::BAD_REQUEST,
            "unauthenticated" => StatusCode::UNAUTHORIZED,
            "permission_denied" => StatusCode::FORBIDDEN,
            "not_found" => StatusCode::NOT_FOUND,
            "already_exists" | "aborted" => StatusCode::CONFLICT,
            "failed_precondition" => StatusCode::PRECONDITION_FAILED,
            "resource_exhausted" => StatusCode::TOO_MANY_REQUESTS,
            "unimplemented" => StatusCode::NOT_IMPLEMENTED,
            "unavailable" => StatusCode::SERVICE_UNAVAILABLE,
            "deadline_exceeded" => StatusCode::GATEWAY_TIMEOUT,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub(crate) fn json(&self) -> Value {
        json!({"code": self.code, "message": self.message})
    }
}

impl From<ApiError> for RpcError {
    fn from(e: ApiError) -> RpcError {
        let code = match e.code {
            Code::BadRequest => "invalid_argument",
            Code::Unauthorized => "unauthenticated",
            Code::Forbidden => "permission_denied",
            Code::NotFound => "not_found",
            Code::Conflict => "failed_precondition",
            Code::TooLarge => "resource_exhausted",
            Code::Timeout => "deadline_exceeded",
            Code::Unavailable => "unavailable",
            Code::Internal => "internal",
        };
        RpcError::new(code, e.error)
    }
}

impl IntoResponse for RpcError {
    /// A unary call's error: the status stands for the code.
    fn into_response(self) -> Response {
        (self.status(), axum::Json(self.json())).into_response()
    }
}

/// The encoding a call names, refused unless it is JSON, uncompressed.
fn check_headers(h: &HeaderMap, streaming: bool) -> Result<(), RpcError> {
    let ctype = h.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let want = if streaming { "application/connect+json" } else { "application/json" };
    if ctype.split(';').next().unwrap_or("").trim() != want {
        return Err(RpcError::new("unimplemented", format!("content-type {ctype:?}: this server speaks {want}")));
    }
    let enc = if streaming { "connect-content-encoding" } else { "content-encoding" };
    match h.get(enc).and_then(|v| v.to_str().ok()) {
        None | Some("identity") => Ok(()),
        Some(e) => Err(RpcError::new("unimplemented", format!("{enc} {e}: messages are not compressed here"))),
    }
}

async fn bytes(body: Body) -> Result<axum::body::Bytes, RpcError> {
    axum::body::to_bytes(body, crate::app::MAX_JSON).await.map_err(|_| {
        RpcError::new("resource_exhausted", format!("a message is capped at {} bytes", crate::app::MAX_JSON))
    })
}

fn decode<T: DeserializeOwned>(data: &[u8]) -> Result<T, RpcError> {
    serde_json::from_slice(data).map_err(|e| RpcError::invalid(format!("the request message: {e}")))
}

/// A unary call's request message.
pub(crate) async fn unary<T: DeserializeOwned>(h: &HeaderMap, body: Body) -> Result<T, RpcError> {
    check_headers(h, false)?;
    decode(&bytes(body).await?)
}

/// A server-streaming call's one request message: a single envelope.
pub(crate) async fn stream_request<T: DeserializeOwned>(h: &HeaderMap, body: Body) -> Result<T, RpcError> {
    check_headers(h, true)?;
    let data = bytes(body).await?;
    let Some((head, rest)) = data.split_first_chunk::<5>() else {
        return Err(RpcError::invalid("the request is not an enveloped message"));
    };
    if head[0] & COMPRESSED != 0 {
        return Err(RpcError::new("unimplemented", "a compressed message: messages are not compressed here"));
    }
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]);
    if usize::try_from(len).ok() != Some(rest.len()) {
        return Err(RpcError::invalid("a server-streaming call takes exactly one message"));
    }
    decode(rest)
}

/// `message` in an envelope.
pub(crate) fn envelope(message: &Value) -> Vec<u8> {
    frame(0, message)
}

/// The end-of-stream envelope, with the call's error if it failed.
pub(crate) fn end(error: Option<&RpcError>) -> Vec<u8> {
    frame(END_STREAM, &error.map_or_else(|| json!({}), |e| json!({ "error": e.json() })))
}

fn frame(flags: u8, message: &Value) -> Vec<u8> {
    let data = message.to_string().into_bytes();
    let len = u32::try_from(data.len()).unwrap_or(u32::MAX);
    let mut out = Vec::with_capacity(5 + data.len());
    out.push(flags);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&data);
    out
}

/// A server-streaming answer: 200 whatever happens, the outcome in the
/// end-of-stream message.
pub(crate) fn stream_response(body: Body) -> Response {
    ([(header::CONTENT_TYPE, "application/connect+json")], body).into_response()
}

/// A server-streaming call that failed before its first message.
pub(crate) fn stream_error(e: &RpcError) -> Response {
    stream_response(Body::from(end(Some(e))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_are_flags_length_message() {
        let e = envelope(&json!({"a": 1}));
        assert_eq!(&e[..5], &[0, 0, 0, 0, 7]);
        assert_eq!(&e[5..], br#"{"a":1}"#);
        let end = end(Some(&RpcError::new("not_found", "gone")));
        assert_eq!(end[0], END_STREAM);
        let v: Value = serde_json::from_slice(&end[5..]).unwrap();
        assert_eq!(v["error"]["code"], "not_found");
    }

    #[tokio::test]
    async fn a_stream_request_is_one_uncompressed_envelope() {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_TYPE, "application/connect+json".parse().unwrap());
        let one = envelope(&json!({"x": 2}));
        let v: Value = stream_request(&h, Body::from(one.clone())).await.unwrap();
        assert_eq!(v["x"], 2);
        let mut two = one.clone();
        two.extend_from_slice(&one);
        assert!(stream_request::<Value>(&h, Body::from(two)).await.is_err());
        let mut squeezed = one;
        squeezed[0] = COMPRESSED;
        assert!(stream_request::<Value>(&h, Body::from(squeezed)).await.is_err());
        h.insert(header::CONTENT_TYPE, "application/connect+proto".parse().unwrap());
        assert!(stream_request::<Value>(&h, Body::from(envelope(&json!({})))).await.is_err());
    }
}
