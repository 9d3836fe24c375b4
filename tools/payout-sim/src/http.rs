//! The routes: the provider API (`/v2/payouts`, `/transactions`) and the control API
//! (`/control/…`). Shapes are documented in the crate docs. The payment
//! gateway's routes (`/gateway/…`, `/control/gateway/…`) are in `gateway/http.rs`,
//! merged here; both build their answers with the helpers of `respond.rs`.

use crate::model::{CreateRequest, Disbursement, Fault, Status, IDEMPOTENCY_KEY_CHARS_MAX};
use crate::plumbing::GARBAGE_BODY;
use crate::respond::{authorization, control_error, error, ok, status_json, unauthorized};
use crate::sim::{CreateVerdict, Endpoint, Sim};
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashMap;

/// The header carrying the idempotency key of a create (Xendit: `Idempotency-key`;
/// header names are case-insensitive).
pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";
/// Transactions per page when the request names no `limit`, and at most.
pub const TRANSACTIONS_LIMIT_DEFAULT: usize = 10;
pub const TRANSACTIONS_LIMIT_MAX: usize = 50;

fn not_found() -> Response {
    error(404, "DATA_NOT_FOUND", "no payout matches")
}

async fn create(State(sim): State<Sim>, headers: HeaderMap, body: Bytes) -> Response {
    if !sim.admit(Endpoint::Create, authorization(&headers)) {
        return unauthorized();
    }
    let key = headers
        .get(IDEMPOTENCY_KEY_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|k| !k.is_empty() && k.chars().count() <= IDEMPOTENCY_KEY_CHARS_MAX);
    let Some(key) = key else {
        return error(
            400,
            "API_VALIDATION_ERROR",
            format!("Idempotency-key is required (1 to {IDEMPOTENCY_KEY_CHARS_MAX} characters)"),
        );
    };
    let request = match CreateRequest::parse(&body) {
        Ok(r) => r,
        Err(message) => return error(400, "API_VALIDATION_ERROR", message),
    };
    match sim.create(key, request) {
        CreateVerdict::Refused { status, body } => status_json(status, body),
        CreateVerdict::Accepted {
            disbursement,
            created,
            fault,
        } => act_out(&sim, &disbursement, created, fault).await,
    }
}

/// Answers an accepted create as its fault says; starts the settlement of a new one.
async fn act_out(sim: &Sim, d: &Disbursement, created: bool, fault: Option<Fault>) -> Response {
    let settle = || {
        if created {
            sim.spawn_settlement(d.id.clone());
        }
    };
    let generation = sim.generation();
    match fault {
        Some(Fault::AcceptThenTimeout { delay_ms }) => {
            settle();
            sim.sleep(generation, delay_ms).await;
            Json(d.answer()).into_response()
        }
        Some(Fault::Error5xxAfterAccept { status }) => {
            settle();
            error(status, "SERVER_ERROR", "scripted failure after accepting")
        }
        Some(Fault::GarbageBody) => {
            settle();
            (StatusCode::OK, GARBAGE_BODY).into_response()
        }
        Some(Fault::SlowSuccess { delay_ms }) => {
            // The settlement is planned now, to start once the answer is due: a
            // caller that hangs up before then drops this future, and a real provider
            // completes the payout all the same (it once stayed PENDING for ever).
            if created {
                sim.spawn_settlement_after(d.id.clone(), delay_ms);
            }
            sim.sleep(generation, delay_ms).await;
            Json(d.answer()).into_response()
        }
        Some(Fault::WebhookBeforeResponse) if created => {
            // The answer is the one computed at acceptance (PENDING), held back until
            // the callbacks were delivered.
            sim.settle_now(&d.id).await;
            Json(d.answer()).into_response()
        }
        _ => {
            settle();
            Json(d.answer()).into_response()
        }
    }
}

async fn query(
    State(sim): State<Sim>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if !sim.admit(Endpoint::Query, authorization(&headers)) {
        return unauthorized();
    }
    let Some(reference_id) = q.get("reference_id").filter(|e| !e.is_empty()) else {
        return error(400, "API_VALIDATION_ERROR", "reference_id is required");
    };
    // Documented: an array, empty when no payout has the reference.
    let found = sim.by_external_id(reference_id);
    Json(found.iter().map(Disbursement::answer).collect::<Vec<_>>()).into_response()
}

async fn get_one(State(sim): State<Sim>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    if !sim.admit(Endpoint::Get, authorization(&headers)) {
        return unauthorized();
    }
    match sim.by_id(&id) {
        Some(d) => Json(d.answer()).into_response(),
        None => not_found(),
    }
}

/// The query's time `name` (RFC 3339), or the message of a 400.
fn time(q: &HashMap<String, String>, name: &str) -> Result<Option<DateTime<Utc>>, String> {
    match q.get(name) {
        None => Ok(None),
        Some(t) => DateTime::parse_from_rfc3339(t)
            .map(|t| Some(t.with_timezone(&Utc)))
            .map_err(|_| format!("{name} must be ISO 8601")),
    }
}

/// `GET /transactions?types=DISBURSEMENT&created[gte]=…&created[lt]=…&limit=…&after_id=…`:
/// the payouts as Transactions, one page, `{"has_more", "data", "links"}`.
async fn transactions(
    State(sim): State<Sim>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if !sim.admit(Endpoint::Report, authorization(&headers)) {
        return unauthorized();
    }
    if q.get("types").is_some_and(|t| t != "DISBURSEMENT") {
        let empty: Vec<Value> = Vec::new();
        return Json(serde_json::json!({"has_more": false, "data": empty, "links": empty}))
            .into_response();
    }
    let (from, to) = match (time(&q, "created[gte]"), time(&q, "created[lt]")) {
        (Ok(f), Ok(t)) => (
            f.unwrap_or(DateTime::<Utc>::MIN_UTC),
            t.unwrap_or(DateTime::<Utc>::MAX_UTC),
        ),
        (Err(e), _) | (_, Err(e)) => return error(400, "API_VALIDATION_ERROR", e),
    };
    let limit = match q.get("limit").map(|l| l.parse::<usize>()) {
        None => TRANSACTIONS_LIMIT_DEFAULT,
        Some(Ok(l)) if (1..=TRANSACTIONS_LIMIT_MAX).contains(&l) => l,
        Some(_) => {
            return error(
                400,
                "API_VALIDATION_ERROR",
                format!("limit must be 1 to {TRANSACTIONS_LIMIT_MAX}"),
            )
        }
    };
    let after = q.get("after_id").map(String::as_str);
    let (page, has_more) = sim.transactions(from, to, after, limit);
    let data: Vec<_> = page.iter().map(Disbursement::transaction).collect();
    let links: Vec<Value> = match (has_more, page.last()) {
        (true, Some(last)) => vec![serde_json::json!({
            "href": format!("/transactions?after_id=txn_{}&limit={limit}", last.id),
            "method": "GET",
            "rel": "next",
        })],
        _ => Vec::new(),
    };
    Json(serde_json::json!({"has_more": has_more, "data": data, "links": links})).into_response()
}

/// One entry of `POST /control/faults`.
#[derive(Deserialize)]
struct ExternalIdFault {
    #[serde(alias = "external_id")]
    reference_id: String,
    #[serde(flatten)]
    fault: Fault,
}

#[derive(Deserialize)]
struct FaultsBody {
    faults: Vec<ExternalIdFault>,
}

#[derive(Deserialize)]
struct SettingsBody {
    complete_after_ms: Option<u64>,
    callback_url: Option<String>,
    callback_token: Option<String>,
    webhook_id: Option<bool>,
}

#[derive(Deserialize)]
struct CompleteBody {
    #[serde(alias = "external_id")]
    reference_id: String,
    status: Status,
    failure_code: Option<String>,
}

async fn faults(State(sim): State<Sim>, Json(b): Json<FaultsBody>) -> Response {
    // Check every fault first, so a refused list queues nothing.
    if let Some(bad) = b.faults.iter().find_map(|f| f.fault.check().err()) {
        return error(400, "BAD_REQUEST", bad);
    }
    for f in b.faults {
        if let Err(e) = sim.add_fault(&f.reference_id, f.fault) {
            return control_error(e);
        }
    }
    ok()
}

async fn settings(State(sim): State<Sim>, Json(b): Json<SettingsBody>) -> Response {
    match sim.set_settings(b.complete_after_ms, b.callback_url, b.callback_token) {
        Ok(()) => {
            if let Some(send) = b.webhook_id {
                sim.set_webhook_id(send);
            }
            Json(sim.settings()).into_response()
        }
        Err(e) => control_error(e),
    }
}

async fn complete(State(sim): State<Sim>, Json(b): Json<CompleteBody>) -> Response {
    match sim.complete(&b.reference_id, b.status, b.failure_code) {
        Ok(d) => Json(d).into_response(),
        Err(e) => control_error(e),
    }
}

/// The simulator's routes: the provider API and control API, and the payment
/// gateway's ([`crate::gateway`]).
pub fn router(sim: Sim) -> Router {
    Router::new()
        .route("/v2/payouts", post(create).get(query))
        .route("/v2/payouts/{id}", get(get_one))
        .route("/transactions", get(transactions))
        .route("/control/faults", post(faults))
        .route(
            "/control/payouts",
            get(|State(sim): State<Sim>| async move { Json(sim.payouts()) }),
        )
        .route(
            "/control/requests",
            get(|State(sim): State<Sim>| async move { Json(sim.requests()) }),
        )
        .route(
            "/control/callbacks",
            get(|State(sim): State<Sim>| async move { Json(sim.callbacks()) }),
        )
        .route(
            "/control/settings",
            post(settings).get(|State(sim): State<Sim>| async move { Json(sim.settings()) }),
        )
        .route("/control/complete", post(complete))
        .route(
            "/control/reset",
            post(|State(sim): State<Sim>| async move {
                sim.reset();
                ok()
            }),
        )
        .merge(crate::gateway::http::routes())
        .with_state(sim)
}
