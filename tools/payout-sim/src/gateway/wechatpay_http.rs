//! The WeChat Pay mode's routes (see [`super::wechatpay`]): WeChat's refund API
//! over the gateway's state, with its faults, and the mode's control calls.
//!
//! - `POST /v3/refund/domestic/refunds` `{"transaction_id", "out_refund_no",
//!   "reason"?, "notify_url"?, "amount": {"refund", "total", "currency"}}`: 200 with
//!   the refund; errors `{"code", "message"}`: 400 `PARAM_ERROR` (a field missing or
//!   wrongly typed, `total` not the payment's, a currency mismatch), 404
//!   `RESOURCE_NOT_EXISTS` (no such transaction), 400 `INVALID_REQUEST` (the number
//!   used with another request, or more than is left to refund), 401 `SIGN_ERROR`, a
//!   scripted `reject` as 400 with its `error_code`, scripted 5xx as `SYSTEM_ERROR`.
//! - `GET /v3/refund/domestic/refunds/{out_refund_no}`: 200 with the refund, 404
//!   `RESOURCE_NOT_EXISTS`, or the scripted query faults.
//! - `POST /control/gateway/wechatpay` (a [`WechatPaySetup`]) → the
//!   [`super::wechatpay::WechatPayPlatform`]; `GET` shows it.
//! - `POST /control/gateway/wechatpay/refund-notify` `{"refund_no", "copies"?}` →
//!   the notification's [`super::CallbackReport`].
//!
//! Every answer of the two API routes carries the `Wechatpay-*` signature headers,
//! including errors and the scripted garbage bodies (authentic, but unreadable).

use super::wechatpay::{WechatPayMode, WechatPaySetup};
use super::{GatewayEndpoint, GatewayFault, QueryVerdict, RefundRequest, RefundVerdict};
use crate::plumbing::GARBAGE_BODY;
use crate::respond::control_error;
use crate::sim::Sim;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

/// An answer signed by the platform key.
fn signed(mode: &WechatPayMode, status: u16, body: String) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (code, body.clone()).into_response();
    let headers = response.headers_mut();
    for (name, value) in mode.signed_headers(body.as_bytes(), false) {
        if let (Ok(n), Ok(v)) = (
            axum::http::HeaderName::try_from(name),
            axum::http::HeaderValue::try_from(value),
        ) {
            headers.insert(n, v);
        }
    }
    headers.insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    response
}

fn wx_error(mode: &WechatPayMode, status: u16, code: &str, message: impl Into<String>) -> Response {
    let body = json!({"code": code, "message": message.into()}).to_string();
    signed(mode, status, body)
}

fn mode_off() -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({"code": "RESOURCE_NOT_EXISTS", "message": "the WeChat Pay mode is off"})),
    )
        .into_response()
}

fn authorization(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
}

/// Reads a refund create body: the paysim request, `total`, `notify_url`.
fn parse_create(body: &[u8]) -> Result<(RefundRequest, i64, Option<String>), String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    let text = |p: &str| {
        v.pointer(p)
            .and_then(Value::as_str)
            .filter(|s| !s.trim().is_empty())
            .map(str::to_owned)
            .ok_or_else(|| format!("{}: missing or not a string", &p[1..].replace('/', ".")))
    };
    let int = |p: &str| {
        v.pointer(p)
            .and_then(Value::as_i64)
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("{}: must be a positive integer", &p[1..].replace('/', ".")))
    };
    let request = RefundRequest {
        refund_no: text("/out_refund_no")?,
        transaction_no: text("/transaction_id")?,
        amount_minor: int("/amount/refund")?,
        currency: text("/amount/currency")?,
        order_no: None,
        method: None,
        account_id: None,
    };
    let notify_url = v
        .get("notify_url")
        .and_then(Value::as_str)
        .map(str::to_owned);
    Ok((request, int("/amount/total")?, notify_url))
}

/// paysim's refusal in WeChat's words.
fn refusal(mode: &WechatPayMode, status: u16, body: &Value) -> Response {
    let code = body["error_code"].as_str().unwrap_or("SYSTEM_ERROR");
    let message = body["message"].as_str().unwrap_or("").to_owned();
    let (status, code) = match (status, code) {
        (s, _) if s >= 500 => (s, "SYSTEM_ERROR"),
        (_, "TRANSACTION_NOT_FOUND") => (404, "RESOURCE_NOT_EXISTS"),
        (_, "INVALID_REQUEST" | "CURRENCY_MISMATCH" | "PAYMENT_MISMATCH") => (400, "PARAM_ERROR"),
        (_, "REFUND_NO_REUSED" | "AMOUNT_EXCEEDS_REFUNDABLE") => (400, "INVALID_REQUEST"),
        (s, other) => (s, other),
    };
    wx_error(mode, status, code, message)
}

async fn refund(State(sim): State<Sim>, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let gateway = sim.gateway();
    let Some(mode) = gateway.wechatpay() else {
        return mode_off();
    };
    let url = uri.path_and_query().map_or(uri.path(), |p| p.as_str());
    let auth = mode.check_authorization(authorization(&headers), "POST", url, &body);
    gateway.count(GatewayEndpoint::Refund, auth.is_ok());
    if let Err(why) = auth {
        return wx_error(&mode, 401, "SIGN_ERROR", why);
    }
    let (request, total, notify_url) = match parse_create(&body) {
        Ok(r) => r,
        Err(why) => return wx_error(&mode, 400, "PARAM_ERROR", why),
    };
    match gateway.paid_minor(&request.transaction_no) {
        None => {
            return wx_error(
                &mode,
                404,
                "RESOURCE_NOT_EXISTS",
                "订单不存在 (no such transaction)",
            )
        }
        Some(paid) if paid != total => {
            return wx_error(
                &mode,
                400,
                "PARAM_ERROR",
                format!("amount.total {total} is not the payment's {paid}"),
            )
        }
        Some(_) => {}
    }
    let refund_no = request.refund_no.clone();
    let generation = sim.generation();
    match gateway.refund(request) {
        RefundVerdict::Refused { status, body } => refusal(&mode, status, &body),
        RefundVerdict::Accepted { refund, fault, .. } => {
            if let Some(url) = notify_url {
                mode.notify_urls
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(refund_no, url);
            }
            let answer = mode.refund_object(&refund, total, false).to_string();
            match fault {
                Some(GatewayFault::AcceptThenTimeout { delay_ms }) => {
                    sim.sleep(generation, delay_ms).await;
                    signed(&mode, 200, answer)
                }
                Some(GatewayFault::Error5xxAfterAccept { status }) => wx_error(
                    &mode,
                    status,
                    "SYSTEM_ERROR",
                    "scripted failure after accepting",
                ),
                Some(GatewayFault::GarbageBody) => signed(&mode, 200, GARBAGE_BODY.into()),
                _ => signed(&mode, 200, answer),
            }
        }
    }
}

async fn query(
    State(sim): State<Sim>,
    uri: Uri,
    headers: HeaderMap,
    Path(refund_no): Path<String>,
) -> Response {
    let gateway = sim.gateway();
    let Some(mode) = gateway.wechatpay() else {
        return mode_off();
    };
    let url = uri.path_and_query().map_or(uri.path(), |p| p.as_str());
    let auth = mode.check_authorization(authorization(&headers), "GET", url, b"");
    gateway.count(GatewayEndpoint::Query, auth.is_ok());
    if let Err(why) = auth {
        return wx_error(&mode, 401, "SIGN_ERROR", why);
    }
    let found = |r: &super::Refund| {
        let paid = gateway
            .paid_minor(&r.transaction_no)
            .unwrap_or(r.amount_minor);
        signed(&mode, 200, mode.refund_object(r, paid, false).to_string())
    };
    let not_found = || {
        wx_error(
            &mode,
            404,
            "RESOURCE_NOT_EXISTS",
            "退款单不存在 (no such refund)",
        )
    };
    match gateway.query(&refund_no) {
        QueryVerdict::Found(r) => found(&r),
        QueryVerdict::NotFound => not_found(),
        QueryVerdict::Error { status } => wx_error(
            &mode,
            status,
            "SYSTEM_ERROR",
            "scripted failure of the query",
        ),
        QueryVerdict::Garbage => signed(&mode, 200, GARBAGE_BODY.into()),
        QueryVerdict::Hold { delay_ms } => {
            sim.sleep(sim.generation(), delay_ms).await;
            match gateway.peek(&refund_no) {
                Some(r) => found(&r),
                None => not_found(),
            }
        }
    }
}

async fn enable(State(sim): State<Sim>, Json(setup): Json<WechatPaySetup>) -> Response {
    // Key generation takes a moment: off the async workers.
    let gateway = sim.gateway();
    match tokio::task::spawn_blocking(move || gateway.enable_wechatpay(setup)).await {
        Ok(Ok(platform)) => Json(platform).into_response(),
        Ok(Err(e)) => control_error(e),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

#[derive(Deserialize)]
struct NotifyBody {
    refund_no: String,
    #[serde(default)]
    copies: Option<u32>,
}

async fn notify_refund(State(sim): State<Sim>, Json(b): Json<NotifyBody>) -> Response {
    match sim
        .gateway()
        .wechatpay_notify_refund(&b.refund_no, b.copies.unwrap_or(1))
        .await
    {
        Ok(report) => Json(report).into_response(),
        Err(e) => control_error(e),
    }
}

/// The mode's routes, merged into the gateway's.
pub(crate) fn routes() -> Router<Sim> {
    Router::new()
        .route("/v3/refund/domestic/refunds", post(refund))
        .route("/v3/refund/domestic/refunds/{out_refund_no}", get(query))
        .route(
            "/control/gateway/wechatpay",
            post(enable).get(|State(sim): State<Sim>| async move {
                Json(sim.gateway().wechatpay_platform())
            }),
        )
        .route(
            "/control/gateway/wechatpay/refund-notify",
            post(notify_refund),
        )
}
