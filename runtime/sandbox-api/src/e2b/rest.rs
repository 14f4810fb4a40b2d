//! The e2b error form of the control plane and of the daemon's plain HTTP
//! routes (`/files`): `{"code": status, "message"}`.

use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::error::ApiError;

/// An error in the control plane's form: `{"code": status, "message"}`.
pub(crate) struct Rest(pub ApiError);

impl From<ApiError> for Rest {
    fn from(e: ApiError) -> Rest {
        Rest(e)
    }
}

impl IntoResponse for Rest {
    fn into_response(self) -> Response {
        let body = json!({"code": self.0.code.status().as_u16(), "message": self.0.error});
        (self.0.code.status(), Json(body)).into_response()
    }
}

pub(crate) type RestResult<T> = Result<T, Rest>;
