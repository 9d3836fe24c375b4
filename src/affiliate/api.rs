//! Affiliate reads (issue 5 item 6): `GET /v1/orders/{platform}/{platform_order_id}`
//! from `affiliate_orders` and `GET /v1/commissions` from `commission_records`. Every
//! role may read; `min_position` waits for the projection (read-your-writes).

use crate::runtime::http::query::QueryParams;
use crate::runtime::http::{AppState, Caller, Problem, ProblemBody};
use crate::runtime::projector::select_rows;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use factledger_aggregates::affiliate::{order_stream_id, Platform, PlatformOrderId};
use factledger_aggregates::commission::CommissionStatus;
use factledger_projections::affiliate::{
    CommissionsProjector, OrdersProjector, COMMISSIONS_TABLES, ORDERS_TABLES,
};
use factledger_projections::table::{Cell, MemRow, Projector};
use serde::{Deserialize, Serialize};

/// Longest accepted `cursor` (a commission id: an order stream id and a role).
pub const CURSOR_LEN_MAX: usize = 200;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrderQuery {
    /// Wait (bounded) until the projection has applied this global position.
    min_position: Option<i64>,
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct CommissionsQuery {
    /// The beneficiary.
    user_id: Option<String>,
    /// PENDING, AVAILABLE, INVALID, FROZEN, RECOVERY_REVIEW or MANUAL_RESOLVED.
    status: Option<String>,
    /// The last `commission_id` of the previous page.
    cursor: Option<String>,
    /// 1..=1000, default 100.
    limit: Option<i64>,
    /// Wait (bounded) until the projection has applied this global position.
    min_position: Option<i64>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct OrderView {
    /// The order's stream id, `<PLATFORM>:<platform_order_id>`.
    pub order_id: String,
    pub platform: String,
    pub platform_order_id: String,
    pub country: String,
    pub status: String,
    pub currency: String,
    /// Known amounts: a reported 0 never replaced a known one (R-ORD-6).
    pub gmv_minor: i64,
    pub platform_commission_minor: i64,
    /// `M` and both shares under the order's rule version.
    pub base_minor: i64,
    pub cashback_minor: i64,
    pub inviter_reward_minor: i64,
    pub ordered_at: String,
    pub platform_updated_at: String,
    pub owner_user_id: Option<String>,
    pub inviter_user_id: Option<String>,
    pub rule_set_id: String,
    /// The rule version in force at `ordered_at`, frozen forever (R-INV-5).
    pub rule_version: i64,
    /// First seen refunded or cancelled: recorded for audit, credits nothing.
    pub audit_only: bool,
    pub revision: i64,
    /// Stream version the row reflects.
    pub version: i64,
    /// Global position the projection reflects.
    pub position: i64,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CommissionView {
    pub commission_id: String,
    pub order_id: String,
    /// CASHBACK or INVITER_REWARD.
    pub role: String,
    pub beneficiary_user_id: String,
    pub wallet_id: String,
    pub status: String,
    /// What the wallet holds for it now (pending, or available once released).
    pub amount_minor: i64,
    pub recorded_amount_minor: i64,
    pub currency: String,
    pub release_at: String,
    pub released_at: Option<String>,
    pub rule_set_id: String,
    pub rule_version: i64,
    pub cashback_bps: i64,
    pub inviter_bps: i64,
    pub max_commission_base_bps: i64,
    pub order_revision: i64,
    pub version: i64,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CommissionsPage {
    pub commissions: Vec<CommissionView>,
    /// `cursor` for the next page, or null at the end.
    pub next_cursor: Option<String>,
    /// Global position the projection reflects.
    pub position: i64,
}

fn text(row: &MemRow, column: &str) -> String {
    match row.get(column) {
        Some(Cell::Text(s)) => s.clone(),
        Some(Cell::Int(i)) => i.to_string(),
        _ => String::new(),
    }
}

fn opt_text(row: &MemRow, column: &str) -> Option<String> {
    match row.get(column) {
        Some(Cell::Text(s)) => Some(s.clone()),
        _ => None,
    }
}

fn int(row: &MemRow, column: &str) -> i64 {
    match row.get(column) {
        Some(Cell::Int(i)) => *i,
        _ => 0,
    }
}

/// Wait for `min_position` on `projector` if asked; the position it reflects.
async fn reflected(
    state: &AppState,
    projector: &dyn Projector,
    min_position: Option<i64>,
) -> Result<i64, Problem> {
    crate::runtime::http::reflected(state, projector.name(), projector.version(), min_position)
        .await
}

/// An affiliate order as the `affiliate_orders` projection shows it.
#[utoipa::path(
    get,
    path = "/v1/orders/{platform}/{platform_order_id}",
    params(("platform" = String, Path, description = "TIKTOK, SHOPEE, LAZADA or TRAVELOKA (any case)"),
           ("platform_order_id" = String, Path, description = "The platform's order id"),
           ("min_position" = Option<i64>, Query, description = "wait until the projection has applied this position")),
    responses((status = 200, body = OrderView), (status = 404, body = ProblemBody),
              (status = 422, body = ProblemBody), (status = 503, body = ProblemBody)),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(platform = %platform, platform_order_id = %platform_order_id, actor = %caller.principal.actor()))]
pub async fn get_order(
    State(state): State<AppState>,
    caller: Caller,
    Path((platform, platform_order_id)): Path<(String, String)>,
    QueryParams(q): QueryParams<OrderQuery>,
) -> Result<Json<OrderView>, Problem> {
    let platform = Platform::parse(&platform)
        .map_err(|e| Problem::invalid("INVALID_FIELD", "platform", e.rule))?;
    let platform_order_id = PlatformOrderId::parse(&platform_order_id)
        .map_err(|e| Problem::invalid("INVALID_FIELD", "platform_order_id", e.rule))?;
    let position = reflected(&state, &OrdersProjector, q.min_position).await?;
    let order_id = order_stream_id(platform, &platform_order_id);
    let row = select_rows(
        &state.db,
        &ORDERS_TABLES[0],
        "WHERE order_id = ?",
        &[Cell::text(order_id.as_str())],
    )
    .await
    .map_err(|e| Problem::internal(e.to_string()))?
    .pop()
    .ok_or_else(|| {
        Problem::new(
            StatusCode::NOT_FOUND,
            "ORDER_NOT_FOUND",
            format!("no order {order_id} (as of position {position})"),
        )
        .field("platform_order_id")
    })?;
    Ok(Json(OrderView {
        order_id: text(&row, "order_id"),
        platform: text(&row, "platform"),
        platform_order_id: text(&row, "platform_order_id"),
        country: text(&row, "country"),
        status: text(&row, "status"),
        currency: text(&row, "currency"),
        gmv_minor: int(&row, "gmv_minor"),
        platform_commission_minor: int(&row, "platform_commission_minor"),
        base_minor: int(&row, "base_minor"),
        cashback_minor: int(&row, "cashback_minor"),
        inviter_reward_minor: int(&row, "inviter_reward_minor"),
        ordered_at: text(&row, "ordered_at"),
        platform_updated_at: text(&row, "platform_updated_at"),
        owner_user_id: opt_text(&row, "owner_user_id"),
        inviter_user_id: opt_text(&row, "inviter_user_id"),
        rule_set_id: text(&row, "rule_set_id"),
        rule_version: int(&row, "rule_version"),
        audit_only: int(&row, "audit_only") != 0,
        revision: int(&row, "revision"),
        version: int(&row, "version"),
        position,
    }))
}

fn commission_view(row: &MemRow) -> CommissionView {
    CommissionView {
        commission_id: text(row, "commission_id"),
        order_id: text(row, "order_id"),
        role: text(row, "role"),
        beneficiary_user_id: text(row, "beneficiary_user_id"),
        wallet_id: text(row, "wallet_id"),
        status: text(row, "status"),
        amount_minor: int(row, "amount_minor"),
        recorded_amount_minor: int(row, "recorded_amount_minor"),
        currency: text(row, "currency"),
        release_at: text(row, "release_at"),
        released_at: opt_text(row, "released_at"),
        rule_set_id: text(row, "rule_set_id"),
        rule_version: int(row, "rule_version"),
        cashback_bps: int(row, "cashback_bps"),
        inviter_bps: int(row, "inviter_bps"),
        max_commission_base_bps: int(row, "max_commission_base_bps"),
        order_revision: int(row, "order_revision"),
        version: int(row, "version"),
    }
}

/// A user's commissions from `commission_records`, optionally of one status, paged
/// by commission id (served by the index on `(beneficiary_user_id, status,
/// commission_id)`).
#[utoipa::path(
    get,
    path = "/v1/commissions",
    params(CommissionsQuery),
    responses((status = 200, body = CommissionsPage), (status = 422, body = ProblemBody),
              (status = 503, body = ProblemBody)),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(actor = %caller.principal.actor()))]
pub async fn list_commissions(
    State(state): State<AppState>,
    caller: Caller,
    QueryParams(q): QueryParams<CommissionsQuery>,
) -> Result<Json<CommissionsPage>, Problem> {
    let user_id = q
        .user_id
        .as_deref()
        .ok_or_else(|| Problem::invalid("INVALID_FIELD", "user_id", "is required"))?;
    let user_id = crate::runtime::http::parse_id("user_id", user_id)?;
    let status = match q.status.as_deref() {
        None => None,
        Some(s) => Some(
            CommissionStatus::ALL
                .into_iter()
                .find(|c| c.as_str().eq_ignore_ascii_case(s))
                .ok_or_else(|| {
                    Problem::invalid(
                        "INVALID_FIELD",
                        "status",
                        "must be one of PENDING, AVAILABLE, INVALID, FROZEN, RECOVERY_REVIEW, \
                         MANUAL_RESOLVED",
                    )
                })?,
        ),
    };
    if q.cursor.as_ref().is_some_and(|c| c.len() > CURSOR_LEN_MAX) {
        return Err(Problem::invalid(
            "INVALID_FIELD",
            "cursor",
            format!("must be at most {CURSOR_LEN_MAX} characters"),
        ));
    }
    let limit = crate::runtime::http::page_limit(q.limit)?;
    let position = reflected(&state, &CommissionsProjector, q.min_position).await?;
    let mut conditions = vec!["beneficiary_user_id = ?"];
    let mut args = vec![Cell::text(user_id.as_str())];
    if let Some(s) = status {
        conditions.push("status = ?");
        args.push(Cell::text(s.as_str()));
    }
    if let Some(c) = &q.cursor {
        conditions.push("commission_id > ?");
        args.push(Cell::text(c.as_str()));
    }
    // `limit` is checked above (1..=READ_LIMIT_MAX): a literal is safe here.
    let tail = format!(
        "WHERE {} ORDER BY commission_id LIMIT {limit}",
        conditions.join(" AND ")
    );
    let rows = select_rows(&state.db, &COMMISSIONS_TABLES[0], &tail, &args)
        .await
        .map_err(|e| Problem::internal(e.to_string()))?;
    let commissions: Vec<CommissionView> = rows.iter().map(commission_view).collect();
    let next_cursor = (commissions.len() as i64 == limit)
        .then(|| commissions.last().map(|c| c.commission_id.clone()))
        .flatten();
    Ok(Json(CommissionsPage {
        commissions,
        next_cursor,
        position,
    }))
}
