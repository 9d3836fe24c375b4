//! Reads of paid services from the `services` projection (read-your-writes with
//! `min_position`): an order with its recharge and payment transactions, a booking
//! with its hold, a refund, a candy account, a fan's subscriptions, an artist's IM
//! group members.

use crate::infra::db::Get;
use crate::runtime::http::query::QueryParams;
use crate::runtime::http::{AppState, Caller, Problem, ProblemBody};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use factledger_aggregates::services::UserId;
use factledger_projections::services::{
    ServicesProjector, BOOKINGS, CANDY_ACCOUNTS, CANDY_RECHARGES, IM_GROUP_MEMBERS,
    PAYMENT_TRANSACTIONS, REFUNDS, SERVICE_ORDERS, SUBSCRIPTIONS,
};
use factledger_projections::table::{Cell, MemRow, Projector, TableDef};
use serde::Deserialize;
use serde_json::{json, Value};

/// A row as JSON (column → value).
pub type Row = Value;

/// `?min_position=`: wait until the projection has applied this position.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct At {
    pub min_position: Option<i64>,
}

fn internal(e: impl std::fmt::Display) -> Problem {
    Problem::internal(e.to_string())
}

fn not_found(code: &'static str, what: String) -> Problem {
    Problem::new(StatusCode::NOT_FOUND, code, what)
}

async fn reflected(state: &AppState, min_position: Option<i64>) -> Result<i64, Problem> {
    let p = ServicesProjector;
    crate::runtime::http::reflected(state, p.name(), p.version(), min_position).await
}

fn to_json(row: &MemRow) -> Value {
    serde_json::to_value(row).unwrap_or(Value::Null)
}

async fn rows(
    state: &AppState,
    def: &TableDef,
    tail: &str,
    args: &[Cell],
) -> Result<Vec<MemRow>, Problem> {
    state.db.rows(def, tail, args).await.map_err(internal)
}

/// An order, its recharge (if one) and its payment transactions.
pub async fn order(
    state: &AppState,
    order_no: &str,
    min_position: Option<i64>,
) -> Result<Row, Problem> {
    let position = reflected(state, min_position).await?;
    let key = [Cell::text(order_no)];
    let Some(order) = rows(state, &SERVICE_ORDERS, "WHERE order_no = ?", &key)
        .await?
        .pop()
    else {
        return Err(not_found("ORDER_NOT_FOUND", format!("no order {order_no}")));
    };
    let recharge = rows(state, &CANDY_RECHARGES, "WHERE order_no = ?", &key)
        .await?
        .pop();
    let transactions = rows(
        state,
        &PAYMENT_TRANSACTIONS,
        "WHERE order_no = ? ORDER BY paid_at",
        &key,
    )
    .await?;
    let mut out = to_json(&order);
    out["recharge"] = recharge.as_ref().map_or(Value::Null, to_json);
    out["payment_transactions"] = transactions.iter().map(to_json).collect();
    out["position"] = json!(position);
    Ok(out)
}

/// A booking with its hold.
pub async fn booking(
    state: &AppState,
    booking_no: &str,
    min_position: Option<i64>,
) -> Result<Row, Problem> {
    let position = reflected(state, min_position).await?;
    let Some(b) = rows(
        state,
        &BOOKINGS,
        "WHERE booking_no = ?",
        &[Cell::text(booking_no)],
    )
    .await?
    .pop() else {
        return Err(not_found(
            "BOOKING_NOT_FOUND",
            format!("no booking {booking_no}"),
        ));
    };
    let mut out = to_json(&b);
    out["hold"] = json!({
        "state": b.text("hold_state").map_err(internal)?,
        "candy": b.int("price_candy").map_err(internal)?,
        "refund_no": b.opt_text("refund_no").map_err(internal)?,
    });
    out["position"] = json!(position);
    Ok(out)
}

/// `GET /v1/bookings/{booking_no}`.
#[utoipa::path(
    get,
    path = "/v1/bookings/{booking_no}",
    params(("booking_no" = String, Path), At),
    responses((status = 200, body = Object, description = "the booking and its hold"), (status = 404, body = ProblemBody)),
    security(("bearer" = []))
)]
pub async fn show_booking(
    State(state): State<AppState>,
    _caller: Caller,
    Path(booking_no): Path<String>,
    q: QueryParams<At>,
) -> Result<Json<Row>, Problem> {
    Ok(Json(booking(&state, &booking_no, q.0.min_position).await?))
}

/// `GET /v1/refunds/{refund_no}`.
#[utoipa::path(
    get,
    path = "/v1/refunds/{refund_no}",
    params(("refund_no" = String, Path), At),
    responses((status = 200, body = Object, description = "the refund with the gateway's last answer"), (status = 404, body = ProblemBody)),
    security(("bearer" = []))
)]
pub async fn show_refund(
    State(state): State<AppState>,
    _caller: Caller,
    Path(refund_no): Path<String>,
    q: QueryParams<At>,
) -> Result<Json<Row>, Problem> {
    let position = reflected(&state, q.0.min_position).await?;
    let Some(r) = rows(
        &state,
        &REFUNDS,
        "WHERE refund_no = ?",
        &[Cell::text(&refund_no)],
    )
    .await?
    .pop() else {
        return Err(not_found(
            "REFUND_NOT_FOUND",
            format!("no refund {refund_no}"),
        ));
    };
    let mut out = to_json(&r);
    out["position"] = json!(position);
    Ok(Json(out))
}

fn user_path(field: &'static str, s: &str) -> Result<i64, Problem> {
    UserId::parse_str(s)
        .map(|u| i64::try_from(u.get()).unwrap_or(i64::MAX))
        .map_err(|e| Problem::invalid("INVALID_FIELD", field, e.rule))
}

/// `GET /v1/candy-accounts/{user_id}`: balance and held candy (1/100-candy units).
#[utoipa::path(
    get,
    path = "/v1/candy-accounts/{user_id}",
    params(("user_id" = String, Path), At),
    responses((status = 200, body = Object, description = "balance and held"), (status = 404, body = ProblemBody), (status = 422, body = ProblemBody)),
    security(("bearer" = []))
)]
pub async fn show_candy(
    State(state): State<AppState>,
    _caller: Caller,
    Path(user_id): Path<String>,
    q: QueryParams<At>,
) -> Result<Json<Row>, Problem> {
    let id = user_path("user_id", &user_id)?;
    let position = reflected(&state, q.0.min_position).await?;
    let Some(a) = rows(
        &state,
        &CANDY_ACCOUNTS,
        "WHERE user_id = ?",
        &[Cell::Int(id)],
    )
    .await?
    .pop() else {
        return Err(not_found(
            "CANDY_ACCOUNT_NOT_FOUND",
            format!("user {id} has no candy account"),
        ));
    };
    let mut out = to_json(&a);
    out["position"] = json!(position);
    Ok(Json(out))
}

/// `member_status` of a member whose IM change is dead-lettered (seed 000's 3).
pub const MEMBER_FAILED: i64 = 3;

/// Members (`artist:fan`) whose IM message sits unreplayed in the outbox dead letters,
/// with the sink's last error.
async fn failed_members(
    state: &AppState,
    artist: Option<i64>,
    fan: Option<i64>,
) -> Result<std::collections::BTreeMap<String, String>, Problem> {
    let pattern = match (artist, fan) {
        (Some(a), Some(f)) => format!("{a}:{f}"),
        (Some(a), None) => format!("{a}:%"),
        (None, Some(f)) => format!("%:{f}"),
        (None, None) => return Ok(Default::default()),
    };
    let columns = [
        factledger_projections::table::Column {
            name: "aggregateid",
            ty: factledger_projections::table::ColType::Text,
        },
        factledger_projections::table::Column {
            name: "last_error",
            ty: factledger_projections::table::ColType::Text,
        },
    ];
    let rows = state
        .db
        .fetch(
            "SELECT aggregateid, last_error FROM outbox_dead_letters \
             WHERE aggregatetype = 'im_member' AND replayed_at_ms IS NULL AND aggregateid LIKE ? \
             ORDER BY outbox_id LIMIT 1000",
            &[Cell::text(pattern)],
            &columns,
        )
        .await
        .map_err(internal)?;
    let mut out = std::collections::BTreeMap::new();
    for r in rows {
        out.insert(
            r.text("aggregateid").map_err(internal)?,
            r.text("last_error").map_err(internal)?,
        );
    }
    Ok(out)
}

/// `?fan_user_id=&artist_id=` (at least one).
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct SubscriptionsQuery {
    pub fan_user_id: Option<String>,
    pub artist_id: Option<String>,
    pub min_position: Option<i64>,
}

/// `GET /v1/subscriptions?fan_user_id=&artist_id=`: entitlements (status 1 active,
/// 2 expired) with IM membership (`member_status` 1 in the group, 2 removed, 3 failed
/// with `member_failed_reason`: its change was dead-lettered by the IM sink).
#[utoipa::path(
    get,
    path = "/v1/subscriptions",
    params(SubscriptionsQuery),
    responses((status = 200, body = Object, description = "the subscriptions"), (status = 422, body = ProblemBody)),
    security(("bearer" = []))
)]
pub async fn list_subscriptions(
    State(state): State<AppState>,
    _caller: Caller,
    q: QueryParams<SubscriptionsQuery>,
) -> Result<Json<Row>, Problem> {
    let q = q.0;
    let fan = q
        .fan_user_id
        .as_deref()
        .map(|f| user_path("fan_user_id", f))
        .transpose()?;
    let artist = q
        .artist_id
        .as_deref()
        .map(|a| user_path("artist_id", a))
        .transpose()?;
    let (tail, args) = match (artist, fan) {
        (Some(a), Some(f)) => (
            "WHERE artist_id = ? AND fan_user_id = ?",
            vec![Cell::Int(a), Cell::Int(f)],
        ),
        (Some(a), None) => (
            "WHERE artist_id = ? ORDER BY fan_user_id LIMIT 1000",
            vec![Cell::Int(a)],
        ),
        (None, Some(f)) => (
            "WHERE fan_user_id = ? ORDER BY artist_id LIMIT 1000",
            vec![Cell::Int(f)],
        ),
        (None, None) => {
            return Err(Problem::invalid(
                "MISSING_FIELD",
                "fan_user_id",
                "name fan_user_id, artist_id or both",
            ))
        }
    };
    let position = reflected(&state, q.min_position).await?;
    let subs = rows(&state, &SUBSCRIPTIONS, tail, &args).await?;
    let members = rows(
        &state,
        &IM_GROUP_MEMBERS,
        tail.split(" ORDER").next().unwrap_or(tail),
        &args,
    )
    .await?;
    let member_of = |s: &MemRow| {
        members
            .iter()
            .find(|m| {
                m.get("artist_id") == s.get("artist_id")
                    && m.get("fan_user_id") == s.get("fan_user_id")
            })
            .and_then(|m| m.get("member_status").cloned())
    };
    let failed = failed_members(&state, artist, fan).await?;
    let list: Vec<Value> = subs
        .iter()
        .map(|s| {
            let mut v = to_json(s);
            v["member_status"] = serde_json::to_value(member_of(s)).unwrap_or(Value::Null);
            v["member_failed_reason"] = Value::Null;
            let pair = format!("{}:{}", v["artist_id"], v["fan_user_id"]);
            if let Some(reason) = failed.get(&pair) {
                // The IM service kept refusing this member's last change: it went to
                // the outbox dead letters (replayed → back to 1 or 2).
                v["member_status"] = json!(MEMBER_FAILED);
                v["member_failed_reason"] = json!(reason);
            }
            v
        })
        .collect();
    Ok(Json(json!({ "subscriptions": list, "position": position })))
}

fn instant(at: Option<chrono::DateTime<chrono::Utc>>) -> Value {
    at.map_or(Value::Null, |t| {
        json!(factledger_projections::services::ts(t))
    })
}

/// A booking from its own stream (always current): what a command answers with, so
/// no write waits for the projection. The fields are the `bookings` row's.
pub async fn booking_now(state: &AppState, booking_no: &str) -> Result<Row, Problem> {
    use factledger_aggregates::booking::{Booking, BookingStatus};
    let loaded = crate::runtime::bus::load::<Booking>(&state.store, booking_no)
        .await
        .map_err(internal)?;
    let b = loaded.state;
    let Some(call) = &b.call else {
        return Err(not_found(
            "BOOKING_NOT_FOUND",
            format!("no booking {booking_no}"),
        ));
    };
    let refund_no = match &b.hold {
        factledger_aggregates::booking::HoldState::RefundDue { refund_no } => {
            Some(refund_no.clone())
        }
        _ => None,
    };
    let duration = b
        .ended_at
        .zip(b.started_at.or(b.ended_at))
        .map(|(end, start)| (end - start).num_seconds().max(0));
    Ok(json!({
        "booking_no": booking_no,
        "order_no": call.order_no,
        "fan_user_id": call.fan_user_id.get(),
        "artist_id": call.artist_id.get(),
        "status": b.status.code(),
        "status_name": b.status.as_str(),
        "start_at": factledger_projections::services::ts(call.start_at),
        "minutes": call.minutes,
        "price_candy": call.price_candy,
        "fan_joined_at": instant(b.fan_joined_at),
        "artist_joined_at": instant(b.artist_joined_at),
        "started_at": instant(b.started_at),
        "ended_at": instant(b.ended_at),
        "duration_s": duration,
        "abnormal": i64::from(b.status == BookingStatus::Completed && b.hold == factledger_aggregates::booking::HoldState::Forfeited),
        "moderation_reason": b.moderation,
        "no_show_checked_at": instant(b.no_show_checked_at),
        "hold_state": b.hold.as_str(),
        "refund_no": refund_no,
        "hold": { "state": b.hold.as_str(), "candy": call.price_candy, "refund_no": refund_no },
        "version": loaded.version,
    }))
}
