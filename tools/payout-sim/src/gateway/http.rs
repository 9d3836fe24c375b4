//! The gateway's routes: the gateway API (`/gateway/…`) and its control API
//! (`/control/gateway/…`), merged into the simulator's router. Shapes are documented
//! in [`crate::gateway`].

use super::{
    GatewayEndpoint, GatewayFault, PaymentRequest, QueryVerdict, RefundRequest, RefundStatus,
    RefundVerdict, Target,
};
use crate::plumbing::GARBAGE_BODY;
use crate::respond::{authorization, control_error, error, ok, status_json, unauthorized};
use crate::sim::Sim;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

/// The error code of a body the gateway cannot take.
pub const INVALID_REQUEST: &str = "INVALID_REQUEST";
/// The error code of a query for a refund number the gateway does not know.
pub const REFUND_NOT_FOUND: &str = "REFUND_NOT_FOUND";

async fn pay(State(sim): State<Sim>, body: Bytes) -> Response {
    let request = match PaymentRequest::parse(&body) {
        Ok(r) => r,
        Err(message) => return error(400, INVALID_REQUEST, message),
    };
    Json(sim.gateway().pay(request).await).into_response()
}

async fn refund(State(sim): State<Sim>, headers: HeaderMap, body: Bytes) -> Response {
    let gateway = sim.gateway();
    if !gateway.admit(GatewayEndpoint::Refund, authorization(&headers)) {
        return unauthorized();
    }
    let request = match RefundRequest::parse(&body) {
        Ok(r) => r,
        Err(message) => return error(400, INVALID_REQUEST, message),
    };
    let generation = sim.generation();
    match gateway.refund(request) {
        RefundVerdict::Refused { status, body } => status_json(status, body),
        RefundVerdict::Accepted { refund, fault, .. } => match fault {
            Some(GatewayFault::AcceptThenTimeout { delay_ms }) => {
                sim.sleep(generation, delay_ms).await;
                Json(refund.answer()).into_response()
            }
            Some(GatewayFault::Error5xxAfterAccept { status }) => error(
                status,
                "SERVER_ERROR",
                "scripted failure after accepting the refund",
            ),
            Some(GatewayFault::GarbageBody) => (StatusCode::OK, GARBAGE_BODY).into_response(),
            _ => Json(refund.answer()).into_response(),
        },
    }
}

fn not_found(refund_no: &str) -> Response {
    error(
        404,
        REFUND_NOT_FOUND,
        format!("no refund has refund_no {refund_no:?}"),
    )
}

async fn query(
    State(sim): State<Sim>,
    headers: HeaderMap,
    Path(refund_no): Path<String>,
) -> Response {
    let gateway = sim.gateway();
    if !gateway.admit(GatewayEndpoint::Query, authorization(&headers)) {
        return unauthorized();
    }
    match gateway.query(&refund_no) {
        QueryVerdict::Found(r) => Json(r.answer()).into_response(),
        QueryVerdict::NotFound => not_found(&refund_no),
        QueryVerdict::Error { status } => error(
            status,
            "SERVER_ERROR",
            "scripted failure of the refund query",
        ),
        QueryVerdict::Garbage => (StatusCode::OK, GARBAGE_BODY).into_response(),
        QueryVerdict::Hold { delay_ms } => {
            sim.sleep(sim.generation(), delay_ms).await;
            match gateway.peek(&refund_no) {
                Some(r) => Json(r.answer()).into_response(),
                None => not_found(&refund_no),
            }
        }
    }
}

/// One entry of `POST /control/gateway/faults`: keyed by a refund or an order number.
#[derive(Deserialize)]
struct KeyedFault {
    #[serde(default)]
    refund_no: Option<String>,
    #[serde(default)]
    order_no: Option<String>,
    #[serde(flatten)]
    fault: GatewayFault,
}

impl KeyedFault {
    /// The key this fault is queued under, or why the entry names the wrong one.
    fn key(&self) -> Result<&str, String> {
        let wants_order = self.fault.target() == Target::PayCallback;
        match (&self.refund_no, &self.order_no, wants_order) {
            (Some(r), None, false) => Ok(r),
            (None, Some(o), true) => Ok(o),
            (_, _, true) => Err("a callback fault names an order_no (and no refund_no)".into()),
            (_, _, false) => Err("a refund fault names a refund_no (and no order_no)".into()),
        }
    }
}

#[derive(Deserialize)]
struct FaultsBody {
    faults: Vec<KeyedFault>,
}

async fn faults(State(sim): State<Sim>, Json(b): Json<FaultsBody>) -> Response {
    // Check every entry first, so a refused list queues nothing.
    for f in &b.faults {
        if let Err(bad) = f.fault.check().and_then(|()| f.key().map(|_| ())) {
            return error(400, "BAD_REQUEST", bad);
        }
    }
    let gateway = sim.gateway();
    for f in &b.faults {
        let key = f.key().unwrap_or_default();
        if let Err(e) = gateway.add_fault(key, f.fault.clone()) {
            return control_error(e);
        }
    }
    ok()
}

#[derive(Deserialize)]
struct SettleBody {
    refund_no: String,
    status: RefundStatus,
    #[serde(default)]
    failure_reason: Option<String>,
}

async fn settle(State(sim): State<Sim>, Json(b): Json<SettleBody>) -> Response {
    match sim
        .gateway()
        .settle(&b.refund_no, b.status, b.failure_reason)
    {
        Ok(r) => Json(r).into_response(),
        Err(e) => control_error(e),
    }
}

#[derive(Deserialize)]
struct ReleaseBody {
    order_no: String,
}

async fn release(State(sim): State<Sim>, Json(b): Json<ReleaseBody>) -> Response {
    match sim.gateway().release(&b.order_no).await {
        Ok(reports) => Json(json!({ "callbacks": reports })).into_response(),
        Err(e) => control_error(e),
    }
}

#[derive(Deserialize)]
struct SettingsBody {
    callback_url: Option<String>,
    callback_secret: Option<String>,
}

async fn settings(State(sim): State<Sim>, Json(b): Json<SettingsBody>) -> Response {
    let gateway = sim.gateway();
    match gateway.set_settings(b.callback_url, b.callback_secret) {
        Ok(()) => Json(gateway.settings()).into_response(),
        Err(e) => control_error(e),
    }
}

/// The gateway's routes (gateway API and its control API), to merge into the
/// simulator's router.
pub(crate) fn routes() -> Router<Sim> {
    super::wechatpay_http::routes()
        .merge(super::alipay_http::routes())
        .route("/gateway/payments", post(pay))
        .route("/gateway/refunds", post(refund))
        .route("/gateway/refunds/{refund_no}", get(query))
        .route("/control/gateway/faults", post(faults))
        .route(
            "/control/gateway/payments",
            get(|State(sim): State<Sim>| async move { Json(sim.gateway().payments()) }),
        )
        .route(
            "/control/gateway/refunds",
            get(|State(sim): State<Sim>| async move { Json(sim.gateway().refunds()) }),
        )
        .route("/control/gateway/settle", post(settle))
        .route("/control/gateway/release", post(release))
        .route(
            "/control/gateway/callbacks",
            get(|State(sim): State<Sim>| async move { Json(sim.gateway().callbacks()) }),
        )
        .route(
            "/control/gateway/requests",
            get(|State(sim): State<Sim>| async move { Json(sim.gateway().requests()) }),
        )
        .route(
            "/control/gateway/settings",
            post(settings)
                .get(|State(sim): State<Sim>| async move { Json(sim.gateway().settings()) }),
        )
}
