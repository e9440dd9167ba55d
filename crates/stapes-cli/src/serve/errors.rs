//! Every 4xx/5xx the server sends, in OpenAI's error shape
//! `{"error":{"message","type","param","code"}}`, so OpenAI clients raise their usual exceptions.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use stapes::StapesError;

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI's `type` field.
    pub kind: &'static str,
    pub param: Option<&'static str>,
    pub code: &'static str,
    /// Seconds for a `Retry-After` header (429/503).
    pub retry_after: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, code: &'static str, message: String) -> Self {
        Self {
            status,
            message,
            kind,
            param: None,
            code,
            retry_after: None,
        }
    }

    pub fn invalid(
        param: Option<&'static str>,
        code: &'static str,
        message: impl Into<String>,
    ) -> Self {
        let mut e = Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            code,
            message.into(),
        );
        e.param = param;
        e
    }

    pub fn with_status(mut self, status: StatusCode) -> Self {
        self.status = status;
        self
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            "invalid_api_key",
            message.into(),
        )
    }

    pub fn not_found(
        param: Option<&'static str>,
        code: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Self::invalid(param, code, message).with_status(StatusCode::NOT_FOUND)
    }

    pub fn too_large(
        param: Option<&'static str>,
        code: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Self::invalid(param, code, message).with_status(StatusCode::PAYLOAD_TOO_LARGE)
    }

    pub fn queue_full(retry_after: u64) -> Self {
        let mut e = Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_error",
            "queue_full",
            "the server's request queue is full; retry later".into(),
        );
        e.retry_after = Some(retry_after);
        e
    }

    pub fn unavailable(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            code,
            message.into(),
        )
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            "internal_error",
            message.into(),
        )
    }

    pub fn request_timeout(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "invalid_request_error",
            "request_timeout",
            message.into(),
        )
    }

    pub fn processing_timeout(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::GATEWAY_TIMEOUT,
            "server_error",
            "timeout",
            message.into(),
        )
    }

    pub fn body(&self) -> Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }})
    }
}

/// Errors from the engine after the request was accepted: the client's fault only when the
/// library says the input was bad.
impl From<StapesError> for ApiError {
    fn from(e: StapesError) -> Self {
        match e {
            StapesError::Usage(m) => ApiError::invalid(None, "invalid_value", m),
            StapesError::BadInput(m) => ApiError::invalid(Some("file"), "invalid_audio", m),
            StapesError::Unavailable(m) => ApiError::unavailable("unavailable", m),
            StapesError::Internal(m) => ApiError::internal(m),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, axum::Json(self.body())).into_response();
        if let Some(secs) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_has_openai_shape_with_null_param() {
        let b = ApiError::internal("boom").body();
        assert_eq!(b["error"]["message"], "boom");
        assert_eq!(b["error"]["type"], "server_error");
        assert!(b["error"]["param"].is_null());
        assert_eq!(b["error"]["code"], "internal_error");
    }

    #[test]
    fn queue_full_sets_retry_after() {
        let r = ApiError::queue_full(7).into_response();
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(r.headers()[header::RETRY_AFTER], "7");
    }

    #[test]
    fn library_errors_map_to_statuses() {
        let s = |e: StapesError| ApiError::from(e).status;
        assert_eq!(
            s(StapesError::BadInput("x".into())),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            s(StapesError::Unavailable("x".into())),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            s(StapesError::Internal("x".into())),
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }
}
