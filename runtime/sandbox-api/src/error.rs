//! The API's errors: `{"error": sentence, "code": ..., "field": ...}` with
//! the HTTP status the code stands for. Runs in the server and, to carry a
//! library error back over the worker's pipe, in the worker.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

/// What kind of failure an [`ApiError`] is; each is one HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Code {
    BadRequest,
    Unauthorized,
    Forbidden,
    NotFound,
    Conflict,
    TooLarge,
    Timeout,
    Unavailable,
    Internal,
}

impl Code {
    pub(crate) fn status(self) -> StatusCode {
        match self {
            Code::BadRequest => StatusCode::BAD_REQUEST,
            Code::Unauthorized => StatusCode::UNAUTHORIZED,
            Code::Forbidden => StatusCode::FORBIDDEN,
            Code::NotFound => StatusCode::NOT_FOUND,
            Code::Conflict => StatusCode::CONFLICT,
            Code::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Code::Timeout => StatusCode::REQUEST_TIMEOUT,
            Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Code::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// An error as the client gets it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ApiError {
    /// One sentence.
    pub error: String,
    pub code: Code,
    /// The request field at fault, if one is.
    pub field: Option<String>,
}

impl ApiError {
    pub(crate) fn new(code: Code, error: impl Into<String>) -> ApiError {
        ApiError { error: error.into(), code, field: None }
    }

    pub(crate) fn field(code: Code, field: &str, error: impl Into<String>) -> ApiError {
        ApiError { error: error.into(), code, field: Some(field.to_string()) }
    }

    pub(crate) fn bad(error: impl Into<String>) -> ApiError {
        ApiError::new(Code::BadRequest, error)
    }

    pub(crate) fn internal(error: impl Into<String>) -> ApiError {
        ApiError::new(Code::Internal, error)
    }

    /// Another client's box is not found, as one that does not exist:
    /// whether an id is in use is not the client's business.
    pub(crate) fn no_box(id: &str) -> ApiError {
        ApiError::new(Code::NotFound, format!("no sandbox {id}"))
    }

    /// A library error, classed by what the client can do about it.
    pub(crate) fn from_sandbox(e: &tinyrun_sandbox::Error) -> ApiError {
        use tinyrun::RuntimeError as R;
        use tinyrun_sandbox::Error as E;
        let code = match e {
            E::InvalidArgument(_) | E::Copy(_) | E::Image(_) => Code::BadRequest,
            E::Refused(_) => Code::Forbidden,
            E::InvalidState(_) => Code::Conflict,
            // An expired box is gone, as GET says; the text says when and why.
            E::Runtime(R::NotFound(_)) | E::Expired { .. } => Code::NotFound,
            E::Runtime(R::InvalidId(..) | R::InvalidArgument(_)) => Code::BadRequest,
            E::Runtime(R::AlreadyExists(_)) => Code::Conflict,
            _ => Code::Internal,
        };
        let text = e.to_string();
        // A command's working directory that the box does not have: the
        // request's `cwd` (the box's own always exists).
        if let E::Runtime(R::Exec(init)) = e {
            if init.field.as_deref() == Some("process.cwd") {
                return ApiError::field(Code::BadRequest, "cwd", format!("cwd: {text}"));
            }
        }
        // The copy caps are the client's sizes, not a fault of ours.
        let code = if code == Code::BadRequest && text.contains("limit") { Code::TooLarge } else { code };
        ApiError::new(code, text)
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.error)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.code.status(), axum::Json(self)).into_response()
    }
}

/// A handler's result.
pub(crate) type ApiResult<T> = std::result::Result<T, ApiError>;
