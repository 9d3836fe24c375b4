//! What a withdrawal looks like to a reader: the detail from its own stream (always
//! current), the list from the `withdrawal_records` projection (read-your-writes
//! with `min_position`).

use crate::infra::db::Get;
use crate::infra::store::{DynStore, EventView, READ_LIMIT_MAX};
use crate::runtime::http::{parse_id, AppState, Problem};
use factledger_aggregates::withdrawal::{
    Withdrawal, WithdrawalEvent, WithdrawalStatus, WITHDRAWAL_AGGREGATE_TYPE,
};
use factledger_projections::table::{Cell, MemRow, Projector};
use factledger_projections::withdrawals::{WithdrawalsProjector, WITHDRAWALS_TABLES};
use serde::{Deserialize, Serialize};

/// One provider call: when it was recorded as started, and what came of it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AttemptView {
    pub attempt: u32,
    pub idempotency_key: String,
    pub started_at: String,
    /// The event that closed it (`PayoutAccepted`, `PayoutOutcomeUnknown`, …), or
    /// null while it is open.
    pub outcome: Option<String>,
    pub outcome_reason: Option<String>,
    pub ended_at: Option<String>,
    /// The call as made: request (never a secret), HTTP status, response, timing.
    #[schema(value_type = Option<Object>)]
    pub call: Option<serde_json::Value>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct WithdrawalDetail {
    pub withdrawal_id: String,
    pub user_id: String,
    pub wallet_id: String,
    pub currency: String,
    pub amount_minor: i64,
    pub status: String,
    pub provider: String,
    pub provider_reference: String,
    pub provider_payout_id: Option<String>,
    /// `AUTO` or `MANUAL` with the risk rule's reasons.
    #[schema(value_type = Object)]
    pub review: serde_json::Value,
    #[schema(value_type = Object)]
    pub destination: serde_json::Value,
    /// Money still frozen for it in the wallet (0 once settled).
    pub frozen_minor: i64,
    pub paid_minor: i64,
    pub contradictions: u32,
    pub attempts: Vec<AttemptView>,
    pub events: Vec<EventView>,
    /// Global position of the stream's last event.
    pub position: i64,
}

fn problem(e: impl std::fmt::Display) -> Problem {
    Problem::internal(e.to_string())
}

/// The withdrawal `id` from its stream, or 404 `WITHDRAWAL_NOT_FOUND`.
pub async fn detail(store: &DynStore, id: &str) -> Result<WithdrawalDetail, Problem> {
    let mut stored = Vec::new();
    loop {
        let from = stored.len() as i64 + 1;
        let page = store
            .read_stream(WITHDRAWAL_AGGREGATE_TYPE, id, from, READ_LIMIT_MAX)
            .await
            .map_err(problem)?;
        let done = (page.len() as i64) < READ_LIMIT_MAX;
        stored.extend(page);
        if done {
            break;
        }
    }
    let views = stored
        .iter()
        .map(|e| e.view())
        .collect::<Result<Vec<_>, _>>()
        .map_err(problem)?;
    fold_detail(views)
}

/// The detail of a withdrawal from its whole stream, in order (a request answers
/// with the events its unit just appended, without reading them back).
pub fn fold_detail(stream: Vec<EventView>) -> Result<WithdrawalDetail, Problem> {
    use cqrs_es::Aggregate;
    let mut state = Withdrawal::default();
    let mut attempts: Vec<AttemptView> = Vec::new();
    let mut events = Vec::with_capacity(stream.len());
    for view in stream {
        let event: WithdrawalEvent =
            serde_json::from_value(view.payload.clone()).map_err(problem)?;
        let at = view.recorded_at.to_rfc3339();
        if let WithdrawalEvent::PayoutAttemptStarted(a) = &event {
            attempts.push(AttemptView {
                attempt: a.attempt,
                idempotency_key: a.idempotency_key.clone(),
                started_at: a.at.to_rfc3339(),
                outcome: None,
                outcome_reason: None,
                ended_at: None,
                call: None,
            });
        }
        if let Some(o) = event.outcome() {
            if let Some(n) = o.attempt {
                if let Some(a) = attempts.iter_mut().find(|a| a.attempt == n) {
                    a.outcome = Some(event.name().to_owned());
                    a.outcome_reason = Some(o.reason.clone());
                    a.ended_at = Some(at);
                    a.call = o.call.as_ref().map(|c| serde_json::json!(c));
                }
            }
        }
        state.apply(event);
        events.push(view);
    }
    let Some(s) = state.record else {
        return Err(Problem::refusal(
            &factledger_aggregates::withdrawal::WithdrawalError::NotFound,
        ));
    };
    Ok(WithdrawalDetail {
        withdrawal_id: s.withdrawal_id.clone(),
        user_id: s.user_id.clone(),
        wallet_id: s.wallet_id.clone(),
        currency: s.currency.as_str().to_owned(),
        amount_minor: s.amount_minor,
        status: s.status.as_str().to_owned(),
        provider: s.provider.clone(),
        provider_reference: s.idempotency_key(),
        provider_payout_id: s.provider_payout_id.clone(),
        review: serde_json::json!(s.review),
        destination: serde_json::json!(s.destination),
        frozen_minor: if s.status.holds_freeze() {
            s.amount_minor
        } else {
            0
        },
        paid_minor: if s.status == WithdrawalStatus::Paid {
            s.amount_minor
        } else {
            0
        },
        contradictions: s.contradictions,
        attempts,
        position: events.last().map_or(0, |e| e.global_position),
        events,
    })
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct WithdrawalsQuery {
    pub user_id: Option<String>,
    /// One of the R-PAY-2 statuses.
    pub status: Option<String>,
    /// The last `withdrawal_id` of the previous page.
    pub cursor: Option<String>,
    /// 1..=1000, default 100.
    pub limit: Option<i64>,
    /// Wait (bounded) until the projection has applied this global position.
    pub min_position: Option<i64>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct WithdrawalRow {
    pub withdrawal_id: String,
    pub user_id: String,
    pub wallet_id: String,
    pub currency: String,
    pub amount_minor: i64,
    pub status: String,
    pub provider: String,
    pub review: String,
    pub attempts: i64,
    pub provider_payout_id: Option<String>,
    pub requested_at: String,
    pub updated_at: String,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct WithdrawalsPage {
    pub withdrawals: Vec<WithdrawalRow>,
    pub next_cursor: Option<String>,
    /// Global position the projection reflects.
    pub position: i64,
}

fn row_view(r: &MemRow) -> Result<WithdrawalRow, sqlx::Error> {
    Ok(WithdrawalRow {
        withdrawal_id: r.text("withdrawal_id")?,
        user_id: r.text("user_id")?,
        wallet_id: r.text("wallet_id")?,
        currency: r.text("currency")?,
        amount_minor: r.int("amount_minor")?,
        status: r.text("status")?,
        provider: r.text("provider")?,
        review: r.text("review")?,
        attempts: r.int("attempts")?,
        provider_payout_id: r.opt_text("provider_payout_id")?,
        requested_at: r.text("requested_at")?,
        updated_at: r.text("updated_at")?,
    })
}

/// A page of `withdrawal_records` by user and/or status after `cursor`, by id.
pub async fn rows(
    db: &crate::infra::db::Db,
    user_id: Option<&str>,
    status: Option<WithdrawalStatus>,
    cursor: Option<&str>,
    limit: i64,
) -> Result<Vec<WithdrawalRow>, sqlx::Error> {
    let mut conditions = Vec::new();
    let mut args = Vec::new();
    if let Some(u) = user_id {
        conditions.push("user_id = ?");
        args.push(Cell::text(u));
    }
    if let Some(s) = status {
        conditions.push("status = ?");
        args.push(Cell::text(s.as_str()));
    }
    if let Some(c) = cursor {
        conditions.push("withdrawal_id > ?");
        args.push(Cell::text(c));
    }
    let filter = if conditions.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", conditions.join(" AND "))
    };
    // `limit` is checked by the callers (1..=READ_LIMIT_MAX): a literal is safe here.
    let limit = limit.clamp(1, READ_LIMIT_MAX);
    let tail = format!("{filter} ORDER BY withdrawal_id LIMIT {limit}");
    db.rows(&WITHDRAWALS_TABLES[0], &tail, &args)
        .await?
        .iter()
        .map(row_view)
        .collect()
}

/// The status named by `s` (any case), or 422 naming `status`.
pub fn parse_status(s: &str) -> Result<WithdrawalStatus, Problem> {
    WithdrawalStatus::parse(&s.to_ascii_uppercase()).ok_or_else(|| {
        Problem::invalid(
            "INVALID_FIELD",
            "status",
            "must be one of REQUESTED, REJECTED, PAYOUT_PENDING, PROCESSING, \
             PROVIDER_UNKNOWN, FUNDS_HELD, PAID, FAILED",
        )
    })
}

pub async fn list(state: &AppState, q: WithdrawalsQuery) -> Result<WithdrawalsPage, Problem> {
    let user_id = q
        .user_id
        .as_deref()
        .map(|u| parse_id("user_id", u))
        .transpose()?;
    let status = q.status.as_deref().map(parse_status).transpose()?;
    let cursor = q
        .cursor
        .as_deref()
        .map(|c| parse_id("cursor", c))
        .transpose()?;
    let limit = crate::runtime::http::page_limit(q.limit)?;
    let p = WithdrawalsProjector;
    let position =
        crate::runtime::http::reflected(state, p.name(), p.version(), q.min_position).await?;
    let withdrawals = rows(
        &state.db,
        user_id.as_ref().map(|u| u.as_str()),
        status,
        cursor.as_ref().map(|c| c.as_str()),
        limit,
    )
    .await
    .map_err(problem)?;
    let next_cursor = (withdrawals.len() as i64 == limit)
        .then(|| withdrawals.last().map(|w| w.withdrawal_id.clone()))
        .flatten();
    Ok(WithdrawalsPage {
        withdrawals,
        next_cursor,
        position,
    })
}
