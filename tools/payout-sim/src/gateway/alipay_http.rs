//! The Alipay mode's open API, `POST /gateway.do` (see [`super::alipay`]), and its
//! control routes. The refund and the query act on the same state as paysim's
//! (`GatewaySim::refund`, `GatewaySim::query`), so every scripted fault keeps its
//! meaning; only the words change:
//!
//! | paysim                                      | Alipay mode |
//! |---------------------------------------------|-------------|
//! | new refund, course ends SUCCEEDED at once (no `processing_then` times) | settled now: `code` 10000, `fund_change` `Y` |
//! | a refund PROCESSING (created or repeated), or a repeat of a SUCCEEDED one | 10000, `fund_change` `N` (Alipay: a repeated `out_request_no` moves no money) |
//! | a refund FAILED or CLOSED                   | 40004, `sub_code` its failure reason when that is an `ACQ.` code, else `ACQ.TRADE_NOT_ALLOWED` |
//! | `TRANSACTION_NOT_FOUND`                     | 40004 `ACQ.TRADE_NOT_EXIST` |
//! | `AMOUNT_EXCEEDS_REFUNDABLE`                 | 40004 `ACQ.REFUND_AMT_NOT_EQUAL_TOTAL` |
//! | `REFUND_NO_REUSED`                          | 40004 `ACQ.DISCORDANT_REPEAT_REQUEST` |
//! | `CURRENCY_MISMATCH`, `PAYMENT_MISMATCH`, a bad `biz_content` | 40004 `ACQ.INVALID_PARAMETER` |
//! | `reject` `{"error_code"}`                   | 40004 with that `sub_code` when it is an `ACQ.` code, else `ACQ.TRADE_NOT_ALLOWED` |
//! | a 5xx fault, `garbage_body`, `accept_then_timeout` | the same HTTP status, body or delay |
//! | query: the refund SUCCEEDED                 | 10000 `refund_status` `REFUND_SUCCESS`, `refund_amount` |
//! | query: PROCESSING, FAILED, CLOSED, or no refund under the number of a known trade | 10000 without `refund_status` (Alipay: not received or not refunded) |
//! | query: unknown trade                        | 40004 `ACQ.TRADE_NOT_EXIST` |
//!
//! A request whose `app_id` is not the mode's, whose `sign_type` is not RSA2 or whose
//! `sign` fails is answered `{"error_response": {"code": "40002", "sub_code":
//! "isv.invalid-app-id" | "isv.invalid-signature-type" | "isv.invalid-signature"}}`
//! (signed) and counted unauthorized; it changes nothing.
//!
//! Control: `GET /control/gateway/alipay/public-key` (the PEM), `POST
//! /control/gateway/alipay/notify` `{"transaction_no", "trade_status"}`.

use super::alipay::{self, AlipayMode};
use super::{
    GatewayEndpoint, GatewayFault, QueryVerdict, RefundRequest, RefundStatus, RefundVerdict,
};
use crate::plumbing::GARBAGE_BODY;
use crate::respond::control_error;
use crate::sim::Sim;
use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

const REFUND: &str = "alipay.trade.refund";
const QUERY: &str = "alipay.trade.fastpay.refund.query";

fn response_key(method: &str) -> String {
    format!("{}_response", method.replace('.', "_"))
}

fn signed(mode: &AlipayMode, key: &str, node: Value) -> Response {
    (
        StatusCode::OK,
        [("content-type", "application/json;charset=utf-8")],
        mode.answer(key, &node),
    )
        .into_response()
}

fn business_failed(mode: &AlipayMode, method: &str, sub_code: &str, sub_msg: &str) -> Response {
    let node = json!({"code": "40004", "msg": "Business Failed", "sub_code": sub_code,
                      "sub_msg": sub_msg});
    signed(mode, &response_key(method), node)
}

fn http_status(status: u16, body: &'static str) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    (code, body).into_response()
}

/// The request's parameters from the query string and the form body; a name given
/// twice (in either or both) is refused.
fn params(query: Option<&str>, body: &[u8]) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    let pairs =
        form_urlencoded::parse(query.unwrap_or("").as_bytes()).chain(form_urlencoded::parse(body));
    for (k, v) in pairs {
        if out.insert(k.to_string(), v.into_owned()).is_some() {
            return Err(format!("parameter {k:?} is given twice"));
        }
    }
    Ok(out)
}

/// The request's signature and identity: `Err` is the `error_response` sub-code.
fn check(mode: &AlipayMode, p: &BTreeMap<String, String>) -> Result<(), &'static str> {
    if p.get("app_id").map(String::as_str) != Some(mode.app_id()) {
        return Err("isv.invalid-app-id");
    }
    if p.get("sign_type").map(String::as_str) != Some("RSA2") {
        return Err("isv.invalid-signature-type");
    }
    let sign = p.get("sign").map(String::as_str).unwrap_or("");
    if !mode.app_signed(&alipay::signing_string(p, &["sign"]), sign) {
        return Err("isv.invalid-signature");
    }
    Ok(())
}

/// `biz_content`'s fields as strings.
fn biz(p: &BTreeMap<String, String>) -> Result<Map<String, Value>, String> {
    let text = p.get("biz_content").ok_or("biz_content is missing")?;
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(m)) => Ok(m),
        _ => Err("biz_content is not a JSON object".into()),
    }
}

fn field<'a>(b: &'a Map<String, Value>, name: &str) -> Option<&'a str> {
    b.get(name)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

async fn gateway_do(
    State(sim): State<Sim>,
    RawQuery(raw_query): RawQuery,
    body: Bytes,
) -> Response {
    let gateway = sim.gateway();
    let Some(mode) = gateway.alipay() else {
        return (StatusCode::NOT_FOUND, "the simulator is not in Alipay mode").into_response();
    };
    let p = match params(raw_query.as_deref(), &body) {
        Ok(p) => p,
        Err(e) => {
            let node = json!({"code": "40002", "msg": "Invalid Arguments",
                              "sub_code": "isv.invalid-parameter", "sub_msg": e});
            return signed(&mode, "error_response", node);
        }
    };
    let method = p.get("method").cloned().unwrap_or_default();
    let endpoint = if method == QUERY {
        GatewayEndpoint::Query
    } else {
        GatewayEndpoint::Refund
    };
    let verdict = check(&mode, &p);
    gateway.count(endpoint, verdict.is_ok());
    if let Err(sub_code) = verdict {
        let node = json!({"code": "40002", "msg": "Invalid Arguments", "sub_code": sub_code,
                          "sub_msg": "the request is not the app's"});
        return signed(&mode, "error_response", node);
    }
    let b = match biz(&p) {
        Ok(b) => b,
        Err(e) => return business_failed(&mode, &method, "ACQ.INVALID_PARAMETER", &e),
    };
    match method.as_str() {
        REFUND => refund(&sim, &mode, &b).await,
        QUERY => query(&sim, &mode, &b).await,
        other => {
            let node = json!({"code": "40002", "msg": "Invalid Arguments",
                              "sub_code": "isv.invalid-method",
                              "sub_msg": format!("method {other:?} is not simulated")});
            signed(&mode, "error_response", node)
        }
    }
}

/// The trade a `biz_content` names: `trade_no`, else the latest payment of
/// `out_trade_no`.
fn trade_of(sim: &Sim, b: &Map<String, Value>) -> Option<String> {
    if let Some(t) = field(b, "trade_no") {
        return Some(t.to_owned());
    }
    let order = field(b, "out_trade_no")?;
    sim.gateway()
        .payments()
        .into_iter()
        .rev()
        .find(|p| p.order_no == order)
        .map(|p| p.transaction_no)
}

fn sub_code_of(reason: Option<&str>) -> String {
    match reason {
        Some(r) if r.starts_with("ACQ.") => r.to_owned(),
        _ => "ACQ.TRADE_NOT_ALLOWED".to_owned(),
    }
}

/// The trade's SUCCEEDED refunds, in fen (Alipay's `refund_fee`).
fn refunded(sim: &Sim, transaction_no: &str) -> i64 {
    sim.gateway()
        .refunds()
        .refunds
        .iter()
        .filter(|r| r.transaction_no == transaction_no && r.status == RefundStatus::Succeeded)
        .map(|r| r.amount_minor)
        .sum()
}

async fn refund(sim: &Sim, mode: &AlipayMode, b: &Map<String, Value>) -> Response {
    let invalid = |m: &str| business_failed(mode, REFUND, "ACQ.INVALID_PARAMETER", m);
    let (Some(refund_no), Some(amount)) = (field(b, "out_request_no"), field(b, "refund_amount"))
    else {
        return invalid("out_request_no and refund_amount are required");
    };
    let Some(amount_minor) = alipay::parse_yuan(amount).filter(|a| *a > 0) else {
        return invalid("refund_amount is not a positive amount of yuan");
    };
    let Some(transaction_no) = trade_of(sim, b) else {
        return business_failed(mode, REFUND, "ACQ.TRADE_NOT_EXIST", "no such trade");
    };
    let request = RefundRequest {
        refund_no: refund_no.to_owned(),
        transaction_no,
        amount_minor,
        currency: "CNY".into(),
        order_no: field(b, "out_trade_no").map(str::to_owned),
        method: None,
        account_id: None,
    };
    let gateway = sim.gateway();
    let generation = sim.generation();
    let (refund, created, fault) = match gateway.refund(request) {
        RefundVerdict::Refused { status, body } if status >= 500 => {
            let _ = body;
            return http_status(status, "scripted failure before accepting the refund");
        }
        RefundVerdict::Refused { body, .. } => {
            let code = body["error_code"].as_str().unwrap_or("");
            let message = body["message"].as_str().unwrap_or("");
            let sub = match code {
                "TRANSACTION_NOT_FOUND" => "ACQ.TRADE_NOT_EXIST".to_owned(),
                "AMOUNT_EXCEEDS_REFUNDABLE" => "ACQ.REFUND_AMT_NOT_EQUAL_TOTAL".to_owned(),
                "REFUND_NO_REUSED" => "ACQ.DISCORDANT_REPEAT_REQUEST".to_owned(),
                "CURRENCY_MISMATCH" | "PAYMENT_MISMATCH" | "INVALID_REQUEST" => {
                    "ACQ.INVALID_PARAMETER".to_owned()
                }
                other => sub_code_of(Some(other)),
            };
            return business_failed(mode, REFUND, &sub, message);
        }
        RefundVerdict::Accepted {
            refund,
            created,
            fault,
        } => (refund, created, fault),
    };
    // Alipay refunds at once unless the test scripted a course through queries.
    let mut refund = *refund;
    if created && refund.course.processing_queries == 0 {
        if let Ok(r) = gateway.settle(
            &refund.refund_no,
            refund.course.status,
            refund.course.failure_reason.clone(),
        ) {
            refund = r;
        }
    }
    match fault {
        Some(GatewayFault::AcceptThenTimeout { delay_ms }) => {
            sim.sleep(generation, delay_ms).await;
        }
        Some(GatewayFault::Error5xxAfterAccept { status }) => {
            return http_status(status, "scripted failure after accepting the refund")
        }
        Some(GatewayFault::GarbageBody) => return (StatusCode::OK, GARBAGE_BODY).into_response(),
        _ => {}
    }
    let fund_change = match refund.status {
        RefundStatus::Succeeded if created => "Y",
        RefundStatus::Succeeded | RefundStatus::Processing => "N",
        RefundStatus::Failed | RefundStatus::Closed => {
            let sub = sub_code_of(refund.failure_reason.as_deref());
            return business_failed(mode, REFUND, &sub, "the refund was not made");
        }
    };
    let payment = gateway
        .payments()
        .into_iter()
        .find(|p| p.transaction_no == refund.transaction_no);
    let node = json!({
        "code": "10000", "msg": "Success",
        "trade_no": refund.transaction_no,
        "out_trade_no": payment.as_ref().map(|p| p.order_no.clone()).unwrap_or_default(),
        "buyer_logon_id": "159****5620",
        "fund_change": fund_change,
        "refund_fee": alipay::yuan(refunded(sim, &refund.transaction_no)),
        "gmt_refund_pay": alipay::beijing(refund.updated_at_ms),
        "buyer_user_id": "2088102177846880",
    });
    signed(mode, &response_key(REFUND), node)
}

async fn query(sim: &Sim, mode: &AlipayMode, b: &Map<String, Value>) -> Response {
    let Some(refund_no) = field(b, "out_request_no") else {
        return business_failed(
            mode,
            QUERY,
            "ACQ.INVALID_PARAMETER",
            "out_request_no is required",
        );
    };
    let trade = trade_of(sim, b);
    let gateway = sim.gateway();
    let known = trade
        .as_deref()
        .is_some_and(|t| gateway.payments().iter().any(|p| p.transaction_no == t));
    let Some(trade) = trade.filter(|_| known) else {
        return business_failed(mode, QUERY, "ACQ.TRADE_NOT_EXIST", "no such trade");
    };
    let found = match gateway.query(refund_no) {
        QueryVerdict::Found(r) => Some(*r),
        QueryVerdict::NotFound => None,
        QueryVerdict::Error { status } => {
            return http_status(status, "scripted failure of the refund query")
        }
        QueryVerdict::Garbage => return (StatusCode::OK, GARBAGE_BODY).into_response(),
        QueryVerdict::Hold { delay_ms } => {
            sim.sleep(sim.generation(), delay_ms).await;
            gateway.peek(refund_no)
        }
    };
    let payment = gateway
        .payments()
        .into_iter()
        .find(|p| p.transaction_no == trade);
    let mut node = json!({
        "code": "10000", "msg": "Success",
        "trade_no": trade,
        "out_trade_no": payment.as_ref().map(|p| p.order_no.clone()).unwrap_or_default(),
        "out_request_no": refund_no,
        "total_amount": alipay::yuan(payment.as_ref().map_or(0, |p| p.amount_minor)),
    });
    if let Some(r) =
        found.filter(|r| r.transaction_no == trade && r.status == RefundStatus::Succeeded)
    {
        node["refund_amount"] = json!(alipay::yuan(r.amount_minor));
        node["refund_status"] = json!("REFUND_SUCCESS");
        node["gmt_refund_pay"] = json!(alipay::beijing(r.updated_at_ms));
    }
    signed(mode, &response_key(QUERY), node)
}

#[derive(Deserialize)]
struct NotifyBody {
    transaction_no: String,
    trade_status: String,
}

async fn notify(State(sim): State<Sim>, Json(b): Json<NotifyBody>) -> Response {
    match sim
        .gateway()
        .alipay_notify(&b.transaction_no, &b.trade_status)
        .await
    {
        Ok(report) => Json(report).into_response(),
        Err(e) => control_error(e),
    }
}

async fn public_key(State(sim): State<Sim>) -> Response {
    match sim.gateway().alipay() {
        Some(mode) => mode.alipay_public_key_pem().to_owned().into_response(),
        None => (StatusCode::NOT_FOUND, "the simulator is not in Alipay mode").into_response(),
    }
}

/// The Alipay mode's routes, merged into the gateway's.
pub(crate) fn routes() -> Router<Sim> {
    Router::new()
        .route("/gateway.do", post(gateway_do))
        .route("/control/gateway/alipay/notify", post(notify))
        .route("/control/gateway/alipay/public-key", get(public_key))
}
