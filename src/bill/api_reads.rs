//! Bill reads (issue 6 item 8): `GET /v1/bills/{station_id}/{yyyymm}` — the three bill
//! rows of a station-month and its decision: the rule that fired (e.g.
//! `"decided_by":"R8 partial payment"`), the partner-query rule and the facts it read,
//! so an operator sees why; or the error finding when the decision failed; and the
//! bill-dimension snapshot of the station-month (R-BILL-10) when its order was
//! approved. `GET /v1/bills/order-status-conflicts` lists the payment-order status
//! conflicts the R-BILL-9 process manager reported. Every role may read.
//!
//! Both take `min_position` (issue 14 item 4, read-your-writes): the read waits, at
//! most `MIN_POSITION_WAIT_MS_MAX`, until its projection's checkpoint (`bill`, or
//! `bill_order_status` for the conflicts) has applied that position — a command's
//! `position` — else 503 `PROJECTION_BEHIND`. A station-month still waiting for the
//! sweep of a bulk catch-up has not been recomputed up to the checkpoint, so with
//! `min_position` it is 503 `PROJECTION_BEHIND` too (without, it is served with
//! `"sweep_pending": true`).

use crate::runtime::http::query::QueryParams;
use crate::runtime::http::{AppState, Caller, Problem};

use crate::runtime::projector::select_rows;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use factledger_projections::bill::tables::{
    CUSTOMER_BILL, CUSTOMER_BILL_PARTNER, DECISIONS, DECISION_FINDINGS, MONTHLY_INCOME_DIFFERENCE,
};
use factledger_projections::bill::{fold, parse_month, StationMonth, YearMonth};
use factledger_projections::table::{Cell, MemRow, TableDef};
use serde_json::{json, Map, Value};

/// A row as JSON: integers, text and nulls as stored; `facts_json` parsed back.
fn row_json(row: &MemRow) -> Value {
    let mut out = Map::new();
    for (name, cell) in row {
        let v = match cell {
            Cell::Null => Value::Null,
            Cell::Int(i) => json!(i),
            Cell::Text(s) if *name == "facts_json" => {
                serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone()))
            }
            Cell::Text(s) => json!(s),
        };
        let name = if *name == "facts_json" { "facts" } else { name };
        out.insert(name.to_owned(), v);
    }
    Value::Object(out)
}

async fn first(
    state: &AppState,
    def: &TableDef,
    tail: &str,
    args: &[Cell],
) -> Result<Option<Value>, Problem> {
    let rows = select_rows(&state.db, def, tail, args)
        .await
        .map_err(|e| Problem::internal(e.to_string()))?;
    Ok(rows.first().map(row_json))
}

/// The path's station id: a positive integer.
fn station_id(raw: &str) -> Result<i64, Problem> {
    match raw.parse::<i64>() {
        Ok(id) if id > 0 && raw.bytes().all(|b| b.is_ascii_digit()) => Ok(id),
        _ => Err(Problem::new(
            StatusCode::BAD_REQUEST,
            "INVALID_FIELD",
            format!("station_id `{raw}` is not a positive integer"),
        )
        .field("station_id")),
    }
}

fn month(raw: &str) -> Result<YearMonth, Problem> {
    parse_month(raw).map_err(|e| {
        Problem::new(StatusCode::BAD_REQUEST, "INVALID_FIELD", e.to_string()).field("yyyymm")
    })
}

/// Reads of one station-month tried before giving up with 503: each read is retried
/// when the projector committed a batch in the middle of it.
pub const READ_ATTEMPTS_MAX: usize = 5;

/// The five rows of a station-month as of one projector checkpoint: the projector
/// writes a batch's rows and its checkpoint in one transaction, so rows read while
/// the checkpoint did not move belong together (never a new decision beside an old
/// bill row).
async fn consistent_read(
    state: &AppState,
    sm: StationMonth,
) -> Result<((i64, bool), [Option<Value>; 5]), Problem> {
    // A sweep after a bulk catch-up recomputes rows without moving the checkpoint:
    // whether `sm` still waits for it is part of what must not move.
    let checkpoint = || async {
        let position = state
            .db
            .checkpoint(fold::NAME, fold::VERSION)
            .await
            .map_err(|e| Problem::internal(e.to_string()))?;
        let pending = crate::bill::projection::sweep_pending(&state.db, sm)
            .await
            .map_err(|e| Problem::internal(e.to_string()))?;
        Ok::<_, Problem>((position, pending))
    };
    let here = [Cell::Int(sm.station_id), Cell::Text(sm.month.to_string())];
    let by_month = "WHERE station_id = ? AND bill_yearmonth = ?";
    for _ in 0..READ_ATTEMPTS_MAX {
        let before = checkpoint().await?;
        let customer_bill = first(state, &CUSTOMER_BILL, by_month, &here).await?;
        let difference = first(
            state,
            &MONTHLY_INCOME_DIFFERENCE,
            "WHERE station_id = ? AND share_month = ?",
            &here,
        )
        .await?;
        let partner_bill = first(
            state,
            &CUSTOMER_BILL_PARTNER,
            "WHERE decided_station_month = ?",
            &[Cell::Text(sm.to_string())],
        )
        .await?;
        let decision = first(state, &DECISIONS, by_month, &here).await?;
        let finding = first(state, &DECISION_FINDINGS, by_month, &here).await?;
        if checkpoint().await? == before {
            return Ok((
                before,
                [customer_bill, difference, partner_bill, decision, finding],
            ));
        }
    }
    Err(Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "PROJECTION_BUSY",
        format!(
            "the bill projection moved during each of {READ_ATTEMPTS_MAX} reads of {sm}; retry"
        ),
    ))
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StationMonthQuery {
    /// Wait (bounded) until the bill projection has applied this global position.
    min_position: Option<i64>,
}

/// The three bill rows of a station-month and the decision (or finding) behind them.
#[utoipa::path(
    get,
    path = "/v1/bills/{station_id}/{yyyymm}",
    params(("station_id" = i64, Path, description = "The station"),
           ("yyyymm" = String, Path, description = "The bill month"),
           ("min_position" = Option<i64>, Query, description = "wait until the projection has applied this position")),
    responses((status = 200, description = "{station_month, position, sweep_pending, fi_customer_bill, fi_customer_bill_partner, fi_monthly_income_difference, decision, finding, snapshot}"),
              (status = 400, body = crate::runtime::http::ProblemBody), (status = 404, body = crate::runtime::http::ProblemBody),
              (status = 422, body = crate::runtime::http::ProblemBody), (status = 503, body = crate::runtime::http::ProblemBody)),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(station_id = %raw_station, yyyymm = %raw_month, actor = %caller.principal.actor()))]
pub async fn get_station_month(
    State(state): State<AppState>,
    caller: Caller,
    Path((raw_station, raw_month)): Path<(String, String)>,
    QueryParams(q): QueryParams<StationMonthQuery>,
) -> Result<Json<Value>, Problem> {
    let sm = StationMonth {
        station_id: station_id(&raw_station)?,
        month: month(&raw_month)?,
    };
    crate::runtime::http::reflected(&state, fold::NAME, fold::VERSION, q.min_position).await?;
    let ((position, sweep_pending), rows) = consistent_read(&state, sm).await?;
    if sweep_pending && q.min_position.is_some() {
        return Err(Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "PROJECTION_BEHIND",
            format!("station-month {sm} waits for the sweep of a bulk catch-up; retry"),
        )
        .field("min_position"));
    }
    let [customer_bill, difference, partner_bill, decision, finding] = rows;
    // Its own table, refreshed by its own job: not part of the checkpoint's read.
    let snapshot = first(
        &state,
        &crate::bill::snapshots::SNAPSHOTS,
        "WHERE station_id = ? AND bill_yearmonth = ? ORDER BY bill_key",
        &[Cell::Int(sm.station_id), Cell::Text(sm.month.to_string())],
    )
    .await?;
    if customer_bill.is_none() && difference.is_none() && decision.is_none() && finding.is_none() {
        return Err(Problem::new(
            StatusCode::NOT_FOUND,
            "NOT_FOUND",
            format!("station-month {sm} has no small bill and no diff"),
        ));
    }
    Ok(Json(json!({
        "station_month": sm.to_string(),
        "position": position,
        // True while a bulk catch-up's sweep has not recomputed this station-month yet.
        "sweep_pending": sweep_pending,
        "fi_customer_bill": customer_bill,
        "fi_customer_bill_partner": partner_bill,
        "fi_monthly_income_difference": difference,
        "decision": decision,
        "finding": finding,
        "snapshot": snapshot,
    })))
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConflictQuery {
    order_id: Option<i64>,
    after_id: Option<i64>,
    limit: Option<i64>,
    /// Wait (bounded) until the order-status follower has applied this position.
    min_position: Option<i64>,
}

/// Payment-order status conflicts (R-BILL-9): masters the process manager could not
/// reconcile because the order's stream moved under both compare-and-set attempts,
/// oldest first, with the event that triggered each.
#[utoipa::path(
    get,
    path = "/v1/bills/order-status-conflicts",
    params(("order_id" = Option<i64>, Query, description = "Conflicts of this payment order"),
           ("after_id" = Option<i64>, Query, description = "Page after this conflict id"),
           ("limit" = Option<i64>, Query, description = "Page size"),
           ("min_position" = Option<i64>, Query, description = "wait until the order-status follower has applied this position")),
    responses((status = 200, description = "{conflicts: [{id, order_id, global_position, trigger_source, attempts, message, recorded_at}], next_after_id}"),
              (status = 422, body = crate::runtime::http::ProblemBody), (status = 503, body = crate::runtime::http::ProblemBody)),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(actor = %caller.principal.actor()))]
pub async fn order_status_conflicts(
    State(state): State<AppState>,
    caller: Caller,
    QueryParams(q): QueryParams<ConflictQuery>,
) -> Result<Json<Value>, Problem> {
    let limit = crate::runtime::http::page_limit(q.limit)?;
    crate::runtime::http::reflected(
        &state,
        crate::bill::order_status::NAME,
        crate::bill::order_status::VERSION,
        q.min_position,
    )
    .await?;
    let mut tail = "WHERE id > ?".to_owned();
    let mut args = vec![Cell::Int(q.after_id.unwrap_or(0))];
    if let Some(order_id) = q.order_id {
        tail.push_str(" AND order_id = ?");
        args.push(Cell::Int(order_id));
    }
    tail.push_str(&format!(" ORDER BY id LIMIT {limit}"));
    let rows = select_rows(
        &state.db,
        &crate::bill::order_status::CONFLICTS,
        &tail,
        &args,
    )
    .await
    .map_err(|e| Problem::internal(e.to_string()))?;
    let next_after_id = rows.last().and_then(|r| match r.get("id") {
        Some(Cell::Int(id)) => Some(*id),
        _ => None,
    });
    tracing::debug!(n = rows.len(), "order status conflicts read");
    Ok(Json(json!({
        "conflicts": rows.iter().map(row_json).collect::<Vec<_>>(),
        "next_after_id": next_after_id,
    })))
}
