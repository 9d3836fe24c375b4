//! Bill writes (SPEC R-BILL-1, R-BILL-7; issue 6 item 1): the facts the bill decision
//! reads, recorded as events — small bills and diffs, partner bills and re-pushes,
//! reference data ("not configured" included), payment orders with their lines and
//! review, locks, and payment results.
//!
//! Each route only parses: its path and body become one `bill::commands::BillFact`,
//! and one generic handler ([`fact`]) runs it through `bill::commands::submit`, which
//! alone decides the unit (the streams, claims and checks of the command).
//!
//! Every body is parsed into the aggregate's own command (its value types, its
//! `deny_unknown_fields`), so a bad field is a 422 naming it and nothing is written;
//! what the server owns — ids from the path, the actor from the API key, the time — is
//! filled in here and refused in the body. A refusal of the aggregate maps by its kind:
//! 404 (unknown), 422 (the request contradicts itself or its stream), 409 (the current
//! state does not allow it), always with the aggregate's stable `code` and `field`.
//!
//! **201** when the request recorded new facts, **200** when it restated facts
//! already recorded (an idempotent replay: nothing written, `events` empty).

use crate::runtime::http::body::{typed, JsonBody};
use crate::runtime::http::WriteResponse;
use crate::runtime::http::{AppState, Caller, Problem};

use crate::bill::commands::{submit, BillFact};
use crate::runtime::unit::{UnitError, UnitOutcome};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use factledger_aggregates::bill::claim::{ClaimKind, CLAIM_LEDGER_REF_TYPE};
use factledger_aggregates::bill::{
    BillError, BillId, BillLockCommand, PartnerBillCommand, PaymentOrderCommand,
    PaymentResultCommand, ReferenceCommand, YearMonth,
};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// The answer of every bill write: 201 with the new events, or 200 with none.
type Written = (StatusCode, Json<WriteResponse>);

/// A bill refusal as a problem (see the module doc for the statuses).
fn bill_problem(e: BillError) -> Problem {
    Problem::refusal(&e)
}

/// A unit that did not commit, as a problem (the bill refusal mapped by
/// [`bill_problem`]). A permanent id claim refused by the unique ledger-ref index
/// (see `bill::claim`) is the claim's own 409.
fn unit_problem(e: UnitError<BillError>) -> Problem {
    if let UnitError::DuplicateLedgerRef(r) = &e {
        if let Some(p) = claim_refused(r) {
            return p;
        }
    }
    crate::runtime::http::problem::unit_problem(e, bill_problem)
}

/// `BILL_ID_CLAIM/<KIND>:<id>/CLAIMED` as the claim's refusal.
fn claim_refused(reference: &str) -> Option<Problem> {
    let rest = reference
        .strip_prefix(CLAIM_LEDGER_REF_TYPE)?
        .strip_prefix('/')?;
    let (stream, _) = rest.split_once('/')?;
    let (kind, id) = ClaimKind::parse_stream_id(stream)?;
    Some(bill_problem(BillError::IdTaken {
        kind,
        id,
        holder: "another stream".to_owned(),
    }))
}

fn written<T>(done: UnitOutcome<T>) -> Written {
    let status = if done.events.is_empty() {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    (
        status,
        Json(WriteResponse {
            events: done.events,
            position: done.position,
        }),
    )
}

fn now_text() -> Value {
    Value::from(crate::infra::store::time_text(&chrono::Utc::now()))
}

/// A command from the body plus what the server owns: `owned` keys are refused in the
/// body (naming the key), then filled in; `"type"` is never the client's.
fn parse<T: DeserializeOwned>(
    body: &JsonBody,
    owned: Vec<(&'static str, Value)>,
) -> Result<T, Problem> {
    let mut map = body.object()?;
    let mut server_owned = owned.iter().map(|(k, _)| *k).chain(["type"]);
    if let Some(k) = server_owned.find(|k| map.contains_key(*k)) {
        return Err(Problem::invalid(
            "SERVER_OWNED_FIELD",
            k,
            format!("{k} is set by the server (from the path, the API key or the clock)"),
        ));
    }
    for (k, v) in owned {
        map.insert(k.to_owned(), v);
    }
    command(map)
}

/// Parse a command from JSON, naming the field at fault.
fn command<T: DeserializeOwned>(map: Map<String, Value>) -> Result<T, Problem> {
    typed(Value::Object(map))
}

/// A positive id from the path.
fn path_id(field: &'static str, raw: &str) -> Result<BillId, Problem> {
    raw.parse::<i64>()
        .map_err(|_| "must be a positive integer id".to_owned())
        .and_then(|v| BillId::parse(v).map_err(|e| e.rule))
        .map_err(|rule| Problem::invalid("INVALID_FIELD", field, rule))
}

/// Split `<id>:<action>` of a path segment (`runtime::http::path_action`) and parse
/// the id.
fn id_and_action<'a>(
    field: &'static str,
    tail: &'a str,
    actions: &[&str],
    route: &str,
) -> Result<(BillId, &'a str), Problem> {
    let (id, action) = crate::runtime::http::path_action(tail, actions, route, field)?;
    Ok((path_id(field, id)?, action))
}

/// The one handler every bill write ends in: run the parsed fact command as its unit
/// (`bill::commands::submit`), 201 with its events or 200 for a replay, a refusal as
/// problem+json.
async fn fact(state: &AppState, caller: &Caller, fact: BillFact) -> Result<Written, Problem> {
    let metadata = caller.metadata(&state.config.country_code, None);
    let done = submit(&state.store, &metadata, fact)
        .await
        .map_err(unit_problem)?;
    Ok(written(done))
}

fn actor(caller: &Caller) -> Value {
    Value::from(caller.principal.actor())
}

// ---------------------------------------------------------------------------------
// Station-month facts and partner bills.
// ---------------------------------------------------------------------------------

/// `POST /v1/bills/small-bills`: record (or change) the small bill of a station-month.
/// One small bill per station-month (R-BILL-7 [dev]): another bill id is 409
/// `SMALL_BILL_ALREADY_RECORDED` naming `bill_id`; a bill id already recorded on
/// another station-month is 409 `BILL_ID_TAKEN` (issue 14 F2, `crate::bill::commands`).
#[utoipa::path(
    post,
    path = "/v1/bills/small-bills",
    request_body(content = Object, description = "{station_id, month: yyyymm, bill_id, account_id, rent_minor ≥ 0}"),
    responses((status = 201, body = WriteResponse), (status = 200, body = WriteResponse),
              (status = 409, body = crate::runtime::http::ProblemBody), (status = 422, body = crate::runtime::http::ProblemBody)),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(actor = %caller.principal.actor()))]
pub async fn record_small_bill(
    State(state): State<AppState>,
    caller: Caller,
    body: JsonBody,
) -> Result<Written, Problem> {
    caller.require_write()?;
    let cmd = parse(&body, vec![("recorded_at", now_text())])?;
    fact(&state, &caller, BillFact::SmallBill(cmd)).await
}

/// `POST /v1/bills/diffs`: record the difference-ledger row of a station-month, with or
/// without a partner bill. One diff per station-month; a diff id of another
/// station-month is 409 `DIFF_ID_TAKEN`. A partner bill is linked by one diff (409
/// `PARTNER_BILL_ALREADY_LINKED`, F12), must be recorded (422
/// `PARTNER_BILL_UNRECORDED`) and of the diff's month (422
/// `PARTNER_BILL_MONTH_MISMATCH`, F13).
#[utoipa::path(
    post,
    path = "/v1/bills/diffs",
    request_body(content = Object, description = "{station_id, month: yyyymm, diff_id, partner_bill_id?}"),
    responses((status = 201, body = WriteResponse), (status = 200, body = WriteResponse),
              (status = 409, body = crate::runtime::http::ProblemBody), (status = 422, body = crate::runtime::http::ProblemBody)),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(actor = %caller.principal.actor()))]
pub async fn record_diff(
    State(state): State<AppState>,
    caller: Caller,
    body: JsonBody,
) -> Result<Written, Problem> {
    caller.require_write()?;
    let cmd = parse(&body, vec![("recorded_at", now_text())])?;
    fact(&state, &caller, BillFact::Diff(cmd)).await
}

/// `POST /v1/bills/partner-bills`: record (or change) a partner bill (pre_rent,
/// deduction). Its partner account and month are fixed once recorded.
#[utoipa::path(
    post,
    path = "/v1/bills/partner-bills",
    request_body(content = Object, description = "{partner_bill_id, partner_account_id, month: yyyymm, pre_rent_minor?: ≥ 0, deduction_minor ≥ 0}"),
    responses((status = 201, body = WriteResponse), (status = 200, body = WriteResponse),
              (status = 409, body = crate::runtime::http::ProblemBody), (status = 422, body = crate::runtime::http::ProblemBody)),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(actor = %caller.principal.actor()))]
pub async fn record_partner_bill(
    State(state): State<AppState>,
    caller: Caller,
    body: JsonBody,
) -> Result<Written, Problem> {
    caller.require_write()?;
    let cmd =
        PartnerBillCommand::RecordPartnerBill(parse(&body, vec![("recorded_at", now_text())])?);
    fact(&state, &caller, BillFact::PartnerBill(cmd)).await
}

/// `POST /v1/bills/partner-bills/{partner_bill_id}:repush`: the partner re-pushed a
/// recorded bill at `repushed_at` (its push time; the same time again writes nothing).
#[utoipa::path(
    post,
    path = "/v1/bills/partner-bills/{partner_bill_id}:repush",
    params(("partner_bill_id" = i64, Path, description = "A recorded partner bill")),
    request_body(content = Object, description = "{repushed_at: RFC 3339}"),
    responses((status = 201, body = WriteResponse), (status = 200, body = WriteResponse),
              (status = 404, body = crate::runtime::http::ProblemBody), (status = 409, body = crate::runtime::http::ProblemBody),
              (status = 422, body = crate::runtime::http::ProblemBody)),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(tail = %tail, actor = %caller.principal.actor()))]
pub async fn post_on_partner_bill(
    State(state): State<AppState>,
    caller: Caller,
    Path(tail): Path<String>,
    body: JsonBody,
) -> Result<Written, Problem> {
    let (id, _) = id_and_action(
        "partner_bill_id",
        &tail,
        &["repush"],
        "/v1/bills/partner-bills",
    )?;
    caller.require_write()?;
    let cmd = PartnerBillCommand::RepushPartnerBill(parse(
        &body,
        vec![("partner_bill_id", Value::from(id.get()))],
    )?);
    fact(&state, &caller, BillFact::PartnerBill(cmd)).await
}

// ---------------------------------------------------------------------------------
// Reference data.
// ---------------------------------------------------------------------------------

/// The reference kinds of `POST /v1/bills/reference/{kind}`.
pub const REFERENCE_KINDS: &[&str] = &[
    "customer-accounts",
    "partner-accounts",
    "partner-profiles",
    "partner-profiles:not-configured",
    "station-facts",
    "account-route",
    "opening-paid-balances",
    "opening-deductions",
];

/// `POST /v1/bills/reference/{kind}`: record the current value of one reference
/// entity (latest wins; the same value again writes nothing). "Not configured" is
/// recorded explicitly with `partner-profiles:not-configured` (R-BILL-1 [dev]).
#[utoipa::path(
    post,
    path = "/v1/bills/reference/{kind}",
    params(("kind" = String, Path, description = "customer-accounts {account_id, income_start_month, current_payable_cutoff_month?} | partner-accounts {partner_account_id, partner_org_id, platform_station_id?} | partner-profiles {partner_org_id, payment_cycle, config_version} | partner-profiles:not-configured {partner_org_id} | station-facts {station_id, record_way?, share_rule?} | account-route {route: DEFAULT|PLATFORM} | opening-paid-balances {opening_id, small_station_id, platform_station_id?, partner_org_id, opening_paid_minor} | opening-deductions {opening_id, partner_account_id, effective, amount_minor}")),
    request_body(content = Object, description = "the fields of the kind"),
    responses((status = 201, body = WriteResponse), (status = 200, body = WriteResponse),
              (status = 404, body = crate::runtime::http::ProblemBody), (status = 409, body = crate::runtime::http::ProblemBody),
              (status = 422, body = crate::runtime::http::ProblemBody)),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(kind = %kind, actor = %caller.principal.actor()))]
pub async fn record_reference(
    State(state): State<AppState>,
    caller: Caller,
    Path(kind): Path<String>,
    body: JsonBody,
) -> Result<Written, Problem> {
    if !REFERENCE_KINDS.contains(&kind.as_str()) {
        return Err(Problem::new(
            StatusCode::NOT_FOUND,
            "NOT_FOUND",
            format!(
                "no reference kind {kind}: one of {}",
                REFERENCE_KINDS.join(", ")
            ),
        ));
    }
    caller.require_write()?;
    let recorded = || vec![("recorded_at", now_text())];
    let updated = || vec![("updated_at", now_text())];
    let cmd = match kind.as_str() {
        "customer-accounts" => ReferenceCommand::RecordCustomerAccount(parse(&body, recorded())?),
        "partner-accounts" => ReferenceCommand::RecordPartnerAccount(parse(&body, recorded())?),
        "partner-profiles" => ReferenceCommand::ConfigurePartnerProfile(parse(&body, recorded())?),
        "partner-profiles:not-configured" => {
            ReferenceCommand::MarkPartnerProfileNotConfigured(parse(&body, recorded())?)
        }
        "station-facts" => ReferenceCommand::RecordStationFacts(parse(&body, recorded())?),
        "account-route" => ReferenceCommand::SetAccountRoute(parse(&body, recorded())?),
        "opening-paid-balances" => {
            ReferenceCommand::RecordOpeningPaidBalance(parse(&body, updated())?)
        }
        _ => ReferenceCommand::RecordOpeningDeduction(parse(&body, updated())?),
    };
    fact(&state, &caller, BillFact::Reference(cmd)).await
}

// ---------------------------------------------------------------------------------
// Payment orders.
// ---------------------------------------------------------------------------------

/// `POST /v1/payment-orders`: create a payment order (DRAFT).
#[utoipa::path(
    post,
    path = "/v1/payment-orders",
    request_body(content = Object, description = "{order_id, treasury: bool}"),
    responses((status = 201, body = WriteResponse), (status = 200, body = WriteResponse),
              (status = 409, body = crate::runtime::http::ProblemBody), (status = 422, body = crate::runtime::http::ProblemBody)),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(actor = %caller.principal.actor()))]
pub async fn create_payment_order(
    State(state): State<AppState>,
    caller: Caller,
    body: JsonBody,
) -> Result<Written, Problem> {
    caller.require_write()?;
    let cmd = parse(
        &body,
        vec![("actor", actor(&caller)), ("created_at", now_text())],
    )?;
    fact(&state, &caller, BillFact::CreatePaymentOrder(cmd)).await
}

/// The order actions of `POST /v1/payment-orders/{order_id}:<action>`.
pub const ORDER_ACTIONS: &[&str] = &[
    "publish",
    "submit",
    "approve",
    "reject",
    "void",
    "no-need-pay",
];

/// `POST /v1/payment-orders/{order_id}:<action>`: publish, submit (a new submit round,
/// published), approve (planned amounts frozen), reject, void or no-need-pay, each
/// along the transition table (`ORDER_TRANSITIONS`; otherwise 409
/// `ILLEGAL_TRANSITION`). Reject, void and no-need-pay need a `reason`; void and
/// no-need-pay are 409 `ORDER_LOCKED` while a live lock holds one of the order's lines.
#[utoipa::path(
    post,
    path = "/v1/payment-orders/{order_id}:{action}",
    params(("order_id" = i64, Path, description = "The payment order"),
           ("action" = String, Path, description = "publish | submit | approve | reject | void | no-need-pay")),
    request_body(content = Object, description = "{} or {reason} for reject, void, no-need-pay"),
    responses((status = 201, body = WriteResponse), (status = 200, body = WriteResponse),
              (status = 404, body = crate::runtime::http::ProblemBody), (status = 409, body = crate::runtime::http::ProblemBody),
              (status = 422, body = crate::runtime::http::ProblemBody)),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(tail = %tail, actor = %caller.principal.actor()))]
pub async fn post_on_payment_order(
    State(state): State<AppState>,
    caller: Caller,
    Path(tail): Path<String>,
    body: JsonBody,
) -> Result<Written, Problem> {
    let (id, action) = id_and_action("order_id", &tail, ORDER_ACTIONS, "/v1/payment-orders")?;
    caller.require_write()?;
    let order = ("order_id", Value::from(id.get()));
    let with_actor = || vec![order.clone(), ("actor", actor(&caller)), ("at", now_text())];
    let cmd = match action {
        "publish" => PaymentOrderCommand::PublishPaymentOrder(parse(
            &body,
            vec![order.clone(), ("at", now_text())],
        )?),
        "submit" => PaymentOrderCommand::SubmitPaymentOrder(parse(&body, with_actor())?),
        "approve" => PaymentOrderCommand::ApprovePaymentOrder(parse(&body, with_actor())?),
        "reject" => PaymentOrderCommand::RejectPaymentOrder(parse(&body, with_actor())?),
        "void" => PaymentOrderCommand::VoidPaymentOrder(parse(&body, with_actor())?),
        _ => PaymentOrderCommand::MarkPaymentOrderNoNeedPay(parse(&body, with_actor())?),
    };
    fact(&state, &caller, BillFact::PaymentOrder(id, cmd)).await
}

/// `POST /v1/payment-orders/{order_id}/lines`: add a line (DRAFT or REVIEW_REJECTED).
/// A line id of another order is 409 `LINE_ID_TAKEN`.
#[utoipa::path(
    post,
    path = "/v1/payment-orders/{order_id}/lines",
    params(("order_id" = i64, Path, description = "The payment order")),
    request_body(content = Object, description = "{line_id, station_id, month: yyyymm, kind: PAYABLE|UNQUALIFIED, planned_amount_minor ≥ 0}"),
    responses((status = 201, body = WriteResponse), (status = 200, body = WriteResponse),
              (status = 404, body = crate::runtime::http::ProblemBody), (status = 409, body = crate::runtime::http::ProblemBody),
              (status = 422, body = crate::runtime::http::ProblemBody)),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(order_id = %order_id, actor = %caller.principal.actor()))]
pub async fn add_line(
    State(state): State<AppState>,
    caller: Caller,
    Path(order_id): Path<String>,
    body: JsonBody,
) -> Result<Written, Problem> {
    let id = path_id("order_id", &order_id)?;
    caller.require_write()?;
    let cmd = parse(
        &body,
        vec![("order_id", Value::from(id.get())), ("at", now_text())],
    )?;
    fact(&state, &caller, BillFact::Line(cmd)).await
}

/// The line actions of `POST /v1/payment-orders/{order_id}/lines/{line_id}:<action>`.
pub const LINE_ACTIONS: &[&str] = &[
    "adjust",
    "remove",
    "conclude-unqualified",
    "withdraw-unqualified",
];

/// `POST /v1/payment-orders/{order_id}/lines/{line_id}:<action>`: adjust a payable line
/// (`manual_adjustment_minor`, may be negative; `reason`), remove a line (both before
/// review; a line a live lock holds is 409 `LINE_LOCKED`: release the lock first), conclude an unqualified line (`partner_visible`, `reason`) or withdraw its
/// conclusion (`reason`).
#[utoipa::path(
    post,
    path = "/v1/payment-orders/{order_id}/lines/{line_id}:{action}",
    params(("order_id" = i64, Path, description = "The payment order"),
           ("line_id" = i64, Path, description = "A line of the order"),
           ("action" = String, Path, description = "adjust | remove | conclude-unqualified | withdraw-unqualified")),
    request_body(content = Object, description = "adjust {manual_adjustment_minor, reason} | remove {} | conclude-unqualified {partner_visible, reason} | withdraw-unqualified {reason}"),
    responses((status = 201, body = WriteResponse), (status = 200, body = WriteResponse),
              (status = 404, body = crate::runtime::http::ProblemBody), (status = 409, body = crate::runtime::http::ProblemBody),
              (status = 422, body = crate::runtime::http::ProblemBody)),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(order_id = %order_id, tail = %tail, actor = %caller.principal.actor()))]
pub async fn post_on_line(
    State(state): State<AppState>,
    caller: Caller,
    Path((order_id, tail)): Path<(String, String)>,
    body: JsonBody,
) -> Result<Written, Problem> {
    let id = path_id("order_id", &order_id)?;
    let route = format!("/v1/payment-orders/{id}/lines");
    let (line, action) = id_and_action("line_id", &tail, LINE_ACTIONS, &route)?;
    caller.require_write()?;
    let ids = || {
        vec![
            ("order_id", Value::from(id.get())),
            ("line_id", Value::from(line.get())),
            ("at", now_text()),
        ]
    };
    let with_actor = || {
        let mut owned = ids();
        owned.push(("actor", actor(&caller)));
        owned
    };
    let cmd = match action {
        "adjust" => PaymentOrderCommand::AdjustLine(parse(&body, with_actor())?),
        "remove" => PaymentOrderCommand::RemoveLine(parse(&body, ids())?),
        "conclude-unqualified" => {
            PaymentOrderCommand::ConcludeUnqualified(parse(&body, with_actor())?)
        }
        _ => PaymentOrderCommand::WithdrawUnqualified(parse(&body, with_actor())?),
    };
    fact(&state, &caller, BillFact::PaymentOrder(id, cmd)).await
}

// ---------------------------------------------------------------------------------
// Locks.
// ---------------------------------------------------------------------------------

/// `POST /v1/bills/locks`: reserve the lock of a station-month for a published line.
/// At most one live lock per station-month (409 `LOCK_HELD` naming `lock_id`); a lock
/// id of another station-month is 409 `LOCK_ID_TAKEN`. The lock holds a live line of
/// an existing order for this station-month at the order's current publication
/// (F14: 422 `LOCK_ORDER_NOT_FOUND`, `LOCK_LINE_NOT_FOUND`, `LOCK_PUBLISH_MISMATCH`),
/// an order that is not voided or no-need-pay (409 `LOCK_ORDER_CLOSED`, issue 32).
#[utoipa::path(
    post,
    path = "/v1/bills/locks",
    request_body(content = Object, description = "{lock_id, station_id, month: yyyymm, order_id, line_id, publish_version, submit_round}"),
    responses((status = 201, body = WriteResponse), (status = 200, body = WriteResponse),
              (status = 409, body = crate::runtime::http::ProblemBody), (status = 422, body = crate::runtime::http::ProblemBody)),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(actor = %caller.principal.actor()))]
pub async fn reserve_lock(
    State(state): State<AppState>,
    caller: Caller,
    body: JsonBody,
) -> Result<Written, Problem> {
    caller.require_write()?;
    let cmd = parse(&body, vec![("at", now_text())])?;
    fact(&state, &caller, BillFact::Lock(cmd)).await
}

/// `POST /v1/bills/locks/{station_id}/{month}/{lock_id}:activate|release`: activate a
/// reserved lock, release a live one (a replay writes nothing). A lock whose line is
/// gone — removed, or its order closed — is not activated (409 `LOCK_LINE_GONE`
/// naming `lock_id`, issue 32): release it.
#[utoipa::path(
    post,
    path = "/v1/bills/locks/{station_id}/{month}/{lock_id}:{action}",
    params(("station_id" = i64, Path, description = "The station"),
           ("month" = String, Path, description = "yyyymm"),
           ("lock_id" = i64, Path, description = "A lock of the station-month"),
           ("action" = String, Path, description = "activate | release")),
    request_body(content = Object, description = "{}"),
    responses((status = 201, body = WriteResponse), (status = 200, body = WriteResponse),
              (status = 404, body = crate::runtime::http::ProblemBody), (status = 409, body = crate::runtime::http::ProblemBody),
              (status = 422, body = crate::runtime::http::ProblemBody)),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(station_id = %station_id, month = %month, tail = %tail, actor = %caller.principal.actor()))]
pub async fn post_on_lock(
    State(state): State<AppState>,
    caller: Caller,
    Path((station_id, month, tail)): Path<(String, String, String)>,
    body: JsonBody,
) -> Result<Written, Problem> {
    let station = path_id("station_id", &station_id)?;
    let month = YearMonth::parse_bill_month(&month)
        .map_err(|e| Problem::invalid("INVALID_FIELD", "month", e.rule))?;
    let route = format!("/v1/bills/locks/{station}/{month}");
    let (lock, action) = id_and_action("lock_id", &tail, &["activate", "release"], &route)?;
    caller.require_write()?;
    let owned = vec![
        ("station_id", Value::from(station.get())),
        ("month", Value::from(month.to_string())),
        ("lock_id", Value::from(lock.get())),
        ("at", now_text()),
    ];
    let cmd = match action {
        "activate" => BillLockCommand::ActivateLock(parse(&body, owned)?),
        _ => BillLockCommand::ReleaseLock(parse(&body, owned)?),
    };
    fact(&state, &caller, BillFact::LockAction(station, month, cmd)).await
}

// ---------------------------------------------------------------------------------
// Payment results.
// ---------------------------------------------------------------------------------

/// `POST /v1/bills/payment-results`: record a payment result once (the same content
/// again writes nothing; other content is 409 `RESULT_ALREADY_RECORDED`). A
/// NORMAL_PAYMENT result of the TREASURY or FAIL_FALLBACK naming a line is written
/// back to that line (`LineResultWritten` on its payment order) in the same unit, so
/// the line knows its latest result; a line that is not a live payable line of the
/// result's station-month refuses the whole unit.
#[utoipa::path(
    post,
    path = "/v1/bills/payment-results",
    request_body(content = Object, description = "{result_id, order_id?, line_id?, small_station_id, platform_station_id?, partner_org_id?, month, status: PAYING|PAY_SUCCESS|PAY_FAIL, kind: NORMAL_PAYMENT|OTHER, source: TREASURY|OFFLINE_IMPORT|FAIL_FALLBACK|OTHER, amount_minor ≥ 0, paid_at?, fail_reason?, trigger_source}"),
    responses((status = 201, body = WriteResponse), (status = 200, body = WriteResponse),
              (status = 404, body = crate::runtime::http::ProblemBody), (status = 409, body = crate::runtime::http::ProblemBody),
              (status = 422, body = crate::runtime::http::ProblemBody)),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(actor = %caller.principal.actor()))]
pub async fn record_payment_result(
    State(state): State<AppState>,
    caller: Caller,
    body: JsonBody,
) -> Result<Written, Problem> {
    caller.require_write()?;
    let record = parse(&body, vec![("recorded_at", now_text())])?;
    fact(&state, &caller, BillFact::PaymentResult(record)).await
}

/// `POST /v1/bills/payment-results/{result_id}:void`: void a recorded result (once; a
/// replay writes nothing). Voided results count in no paid sum (R-BILL-3 [dev]).
#[utoipa::path(
    post,
    path = "/v1/bills/payment-results/{result_id}:void",
    params(("result_id" = i64, Path, description = "A recorded payment result")),
    request_body(content = Object, description = "{trigger_source}"),
    responses((status = 201, body = WriteResponse), (status = 200, body = WriteResponse),
              (status = 404, body = crate::runtime::http::ProblemBody), (status = 422, body = crate::runtime::http::ProblemBody)),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(tail = %tail, actor = %caller.principal.actor()))]
pub async fn post_on_payment_result(
    State(state): State<AppState>,
    caller: Caller,
    Path(tail): Path<String>,
    body: JsonBody,
) -> Result<Written, Problem> {
    let (id, _) = id_and_action("result_id", &tail, &["void"], "/v1/bills/payment-results")?;
    caller.require_write()?;
    let cmd = PaymentResultCommand::VoidPaymentResult(parse(
        &body,
        vec![
            ("result_id", Value::from(id.get())),
            ("voided_at", now_text()),
        ],
    )?);
    fact(&state, &caller, BillFact::PaymentResultAction(id, cmd)).await
}
