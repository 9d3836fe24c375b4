//! `/v1/wallets/…`: wallet commands and state.

use crate::infra::store::{EventView, IdempotencyRow};
use crate::runtime::bus::{CommandEnvelope, CommandOutcome};
use crate::runtime::http::body::RawBody;
use crate::runtime::http::{parse_id, AppState, Caller, Problem, ProblemBody};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use factledger_aggregates::wallet::{WalletCommand, WalletError};
use serde::Serialize;
use sha2::{Digest, Sha256};

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CommandResponse {
    pub wallet_id: String,
    /// The events the command appended, with their global positions.
    pub events: Vec<EventView>,
    /// Global position of the last event: pass it as `min_position` to read your write.
    pub position: i64,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BlockView {
    pub ref_type: String,
    pub ref_id: String,
    pub reason: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct WalletView {
    pub wallet_id: String,
    pub user_id: String,
    pub currency: String,
    pub pending_minor: i64,
    pub available_minor: i64,
    pub frozen_minor: i64,
    pub risk_hold_minor: i64,
    /// Stream version (number of events) the state reflects.
    pub version: i64,
    pub withdrawals_blocked: bool,
    pub withdrawal_blocks: Vec<BlockView>,
    /// What `frozen_minor` is made of: each open freeze (a withdrawal in flight) and
    /// its amount, from the wallet's stream.
    pub frozen_by: Vec<FreezeView>,
    /// Global position the projection reflects.
    pub position: i64,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct FreezeView {
    pub ref_type: String,
    pub ref_id: String,
    pub amount_minor: i64,
}

/// Send one command to a wallet.
#[utoipa::path(
    post,
    path = "/v1/wallets/{wallet_id}/commands",
    params(("wallet_id" = String, Path, description = "Wallet id: 1-128 of [A-Za-z0-9_.:@-]"),
           ("Idempotency-Key" = Option<String>, Header, description = "Same key + same body returns the original response; a different body is refused with 422")),
    request_body(content = Object, description = "A wallet command tagged by `type`: Open {user_id, currency}; CreditPending | ReleasePending | ReversePending | FreezeForWithdrawal | Unfreeze | PayOutFrozen | PlaceRiskHold | ReleaseRiskHold {ref_type, ref_id, amount_minor, currency?}; BlockWithdrawals | UnblockWithdrawals {ref_type, ref_id, reason?}"),
    responses(
        (status = 200, body = CommandResponse),
        (status = 401, body = ProblemBody), (status = 403, body = ProblemBody),
        (status = 404, body = ProblemBody), (status = 409, body = ProblemBody),
        (status = 413, body = ProblemBody), (status = 422, body = ProblemBody)
    ),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(wallet_id = %wallet_id, actor = %caller.principal.actor(), request_id = %caller.request_id, command))]
pub async fn post_command(
    State(state): State<AppState>,
    caller: Caller,
    Path(wallet_id): Path<String>,
    headers: HeaderMap,
    body: Result<RawBody, Problem>,
) -> Result<Response, Problem> {
    caller.require_write()?;
    let wallet_id = parse_id("wallet_id", &wallet_id)?;
    // Over the limit (read, or declared by Content-Length): 413 BODY_TOO_LARGE.
    let RawBody(body) = body?;
    let value = crate::infra::json::parse_unique(&body)
        .map_err(crate::runtime::http::body::json_problem)?;
    // Canonical form (sorted keys) so formatting differences are the same request.
    let canonical = value.to_string();
    let command = WalletCommand::parse_json(value)
        .map_err(|e| Problem::invalid(e.code, &e.field, e.message))?;
    tracing::Span::current().record("command", command.name());
    let key = crate::runtime::http::idempotency_key(&headers)?;
    // Scoped to the caller (F6): another key's record is never found, replayed or
    // compared against this request.
    let idempotency = key.clone().map(|key| IdempotencyRow {
        scope: caller.principal.actor(),
        request_hash: hex::encode(Sha256::digest(
            format!("POST /v1/wallets/{wallet_id}/commands\n{canonical}").as_bytes(),
        )),
        key,
    });
    let outcome: CommandOutcome = state
        .wallets
        .execute(CommandEnvelope {
            aggregate_id: wallet_id.as_str().to_owned(),
            command,
            metadata: caller.metadata(&state.config.country_code, key),
            idempotency,
            jobs: Vec::new(),
            fence: None,
        })
        .await
        .map_err(|e| {
            let p = Problem::from(e);
            tracing::debug!(code = p.code, status = p.status.as_u16(), "command refused");
            p
        })?;
    let replayed = outcome.replayed;
    tracing::debug!(
        position = outcome.position,
        events = outcome.events.len(),
        replayed,
        "command applied"
    );
    let mut response = Json(CommandResponse {
        wallet_id: wallet_id.as_str().to_owned(),
        events: outcome.events,
        position: outcome.position,
    })
    .into_response();
    if replayed {
        response
            .headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    Ok(response)
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadQuery {
    /// Wait (bounded) until the projection has applied this global position, e.g. the
    /// `position` a command returned: read-your-writes.
    min_position: Option<i64>,
    /// Ledger only: the last `sequence` of the previous page.
    cursor: Option<i64>,
    /// Ledger only, instead of `cursor`: the lines just before this sequence (reading
    /// back from the newest: `i64::MAX` for the last page).
    before: Option<i64>,
    /// Ledger only: 1..=1000, default 100.
    limit: Option<i64>,
}

/// Wait for `min_position` if asked; returns the position the projection reflects.
async fn reflected(state: &AppState, min_position: Option<i64>) -> Result<i64, Problem> {
    let wanted = min_position.unwrap_or(0);
    if wanted < 0 {
        return Err(Problem::invalid(
            "INVALID_FIELD",
            "min_position",
            "must not be negative",
        ));
    }
    let position = state
        .read_db
        .wait_for(wanted)
        .await
        .map_err(|e| Problem::internal(e.to_string()))?;
    if position < wanted {
        return Err(Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "PROJECTION_BEHIND",
            format!("the wallet projection is at position {position}, not yet at {wanted}; retry"),
        )
        .field("min_position"));
    }
    Ok(position)
}

/// A wallet's balances, version and withdrawal blocks, from the `wallet_balances`
/// projection, with the global position it reflects.
#[utoipa::path(
    get,
    path = "/v1/wallets/{wallet_id}",
    params(("wallet_id" = String, Path, description = "Wallet id"),
           ("min_position" = Option<i64>, Query, description = "wait until the projection has applied this position")),
    responses((status = 200, body = WalletView), (status = 404, body = ProblemBody),
              (status = 503, body = ProblemBody)),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(wallet_id = %wallet_id, actor = %caller.principal.actor()))]
pub async fn get_wallet(
    State(state): State<AppState>,
    caller: Caller,
    Path(wallet_id): Path<String>,
    crate::runtime::http::query::QueryParams(q): crate::runtime::http::query::QueryParams<
        ReadQuery,
    >,
) -> Result<Json<WalletView>, Problem> {
    let wallet_id = parse_id("wallet_id", &wallet_id)?;
    let position = reflected(&state, q.min_position).await?;
    let w = state
        .read_db
        .wallet(wallet_id.as_str())
        .await
        .map_err(|e| Problem::internal(e.to_string()))?
        .ok_or_else(|| Problem::from(WalletError::NotFound))?;
    // What the frozen bucket is made of comes from the stream itself (not the bus's
    // cache: withdrawal units freeze and pay out without the bus), folded up to the
    // row's own version: the freezes and `frozen_minor` describe the same moment
    // however many freezes commit meanwhile (the stream's head read separately once
    // disagreed with the row under load). The stream is never behind the row.
    let at_row = crate::runtime::bus::load_at::<factledger_aggregates::wallet::Wallet>(
        &state.read_store,
        wallet_id.as_str(),
        w.version,
    )
    .await
    .map_err(Problem::from)?;
    if at_row.version != w.version {
        return Err(Problem::internal(format!(
            "wallet {}: its projection row is at version {}, its stream only at {}",
            wallet_id.as_str(),
            w.version,
            at_row.version
        )));
    }
    let frozen_by = at_row
        .state
        .open_freezes
        .into_iter()
        .map(|(key, amount_minor)| {
            let (ref_type, ref_id) = key.split_once('/').unwrap_or(("", key.as_str()));
            FreezeView {
                ref_type: ref_type.to_owned(),
                ref_id: ref_id.to_owned(),
                amount_minor,
            }
        })
        .collect();
    Ok(Json(WalletView {
        wallet_id: wallet_id.as_str().to_owned(),
        user_id: w.user_id,
        currency: w.currency,
        pending_minor: w.pending_minor,
        available_minor: w.available_minor,
        frozen_minor: w.frozen_minor,
        risk_hold_minor: w.risk_hold_minor,
        version: w.version,
        withdrawals_blocked: !w.blocks.is_empty(),
        withdrawal_blocks: w
            .blocks
            .into_iter()
            .map(|(ref_type, ref_id, reason)| BlockView {
                ref_type,
                ref_id,
                reason,
            })
            .collect(),
        frozen_by,
        position,
    }))
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct LedgerPage {
    pub wallet_id: String,
    pub entries: Vec<crate::runtime::projection::LedgerEntry>,
    /// `cursor` for the next page, or null at the end (or when read with `before`).
    pub next_cursor: Option<i64>,
    /// Read with `before`: `before` for the page of older lines, or null at the start.
    pub previous_before: Option<i64>,
    /// Global position the projection reflects.
    pub position: i64,
}

/// A wallet's ledger (one row per money movement) from the `wallet_ledger` projection.
#[utoipa::path(
    get,
    path = "/v1/wallets/{wallet_id}/ledger",
    params(("wallet_id" = String, Path, description = "Wallet id"),
           ("cursor" = Option<i64>, Query, description = "last sequence of the previous page"),
           ("before" = Option<i64>, Query, description = "instead of cursor: the lines just before this sequence, newest first in reading (returned in sequence order)"),
           ("limit" = Option<i64>, Query, description = "1..=1000, default 100"),
           ("min_position" = Option<i64>, Query, description = "wait until the projection has applied this position")),
    responses((status = 200, body = LedgerPage), (status = 422, body = ProblemBody),
              (status = 503, body = ProblemBody)),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(wallet_id = %wallet_id, actor = %caller.principal.actor()))]
pub async fn get_ledger(
    State(state): State<AppState>,
    caller: Caller,
    Path(wallet_id): Path<String>,
    crate::runtime::http::query::QueryParams(q): crate::runtime::http::query::QueryParams<
        ReadQuery,
    >,
) -> Result<Json<LedgerPage>, Problem> {
    use crate::runtime::projection::LedgerFrom;
    let wallet_id = parse_id("wallet_id", &wallet_id)?;
    let from = match (q.cursor, q.before) {
        (Some(_), Some(_)) => {
            return Err(Problem::invalid(
                "INVALID_FIELD",
                "before",
                "give cursor or before, not both",
            ))
        }
        (Some(c), None) if c < 0 => {
            return Err(Problem::invalid(
                "INVALID_FIELD",
                "cursor",
                "must not be negative",
            ))
        }
        (None, Some(b)) if b < 1 => {
            return Err(Problem::invalid(
                "INVALID_FIELD",
                "before",
                "must be 1 or more",
            ))
        }
        (None, Some(b)) => LedgerFrom::Before(b),
        (c, None) => LedgerFrom::After(c.unwrap_or(0)),
    };
    let limit = crate::runtime::http::page_limit(q.limit)?;
    let position = reflected(&state, q.min_position).await?;
    let entries = state
        .read_db
        .ledger_page(wallet_id.as_str(), from, limit)
        .await
        .map_err(|e| Problem::internal(e.to_string()))?;
    let full = entries.len() as i64 == limit;
    let (next_cursor, previous_before) = match from {
        LedgerFrom::After(_) => (
            full.then(|| entries.last().map(|e| e.sequence)).flatten(),
            None,
        ),
        LedgerFrom::Before(_) => (
            None,
            full.then(|| entries.first().map(|e| e.sequence)).flatten(),
        ),
    };
    Ok(Json(LedgerPage {
        wallet_id: wallet_id.as_str().to_owned(),
        entries,
        next_cursor,
        previous_before,
        position,
    }))
}
