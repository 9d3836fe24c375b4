//! The HTTP answers both route sets share (the provider's in `http.rs`, the payment
//! gateway's in `gateway/http.rs`): errors as `{"error_code": "...", "message":
//! "..."}`, a status with a JSON body, the 401 of a missing or wrong API key, a
//! refused control call, `{"ok": true}`, and the `Authorization` header they check.

use crate::plumbing::ControlError;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

pub(crate) fn error(status: u16, error_code: &str, message: impl Into<String>) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = json!({"error_code": error_code, "message": message.into()});
    (code, Json(body)).into_response()
}

pub(crate) fn status_json(status: u16, body: Value) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (code, Json(body)).into_response()
}

pub(crate) fn unauthorized() -> Response {
    error(
        401,
        "INVALID_API_KEY",
        "Authorization must be Basic base64(<secret key>:)",
    )
}

pub(crate) fn authorization(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
}

pub(crate) fn control_error(e: ControlError) -> Response {
    match e {
        ControlError::BadRequest(m) => error(400, "BAD_REQUEST", m),
        ControlError::NotFound(m) => error(404, "NOT_FOUND", m),
    }
}

pub(crate) fn ok() -> Response {
    Json(json!({"ok": true})).into_response()
}
