//! `/v1/wallets/…`: wallet commands and state.

use super::{AppState, Caller, Problem, ProblemBody};
use crate::bus::{CommandEnvelope, CommandOutcome};
use crate::store::{EventView, IdempotencyRow};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use factledger_aggregates::wallet::{WalletCommand, WalletError};
use factledger_aggregates::BoundedId;
use serde::Serialize;
use sha2::{Digest, Sha256};

/// Longest accepted `Idempotency-Key`.
pub const IDEMPOTENCY_KEY_LEN_MAX: usize = 128;

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
}

pub(super) fn parse_id(field: &str, raw: &str) -> Result<BoundedId, Problem> {
    BoundedId::parse(raw).map_err(|e| Problem::invalid("INVALID_FIELD", field, e.rule))
}

fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, Problem> {
    let Some(v) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let key = v.to_str().ok().map(str::trim).unwrap_or("");
    let ok = !key.is_empty()
        && key.len() <= IDEMPOTENCY_KEY_LEN_MAX
        && key.bytes().all(|b| b.is_ascii_graphic());
    if !ok {
        return Err(Problem::invalid(
            "INVALID_FIELD",
            "Idempotency-Key",
            format!("must be 1 to {IDEMPOTENCY_KEY_LEN_MAX} visible ASCII characters"),
        ));
    }
    Ok(Some(key.to_owned()))
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
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Problem> {
    caller.require_write()?;
    let wallet_id = parse_id("wallet_id", &wallet_id)?;
    let body = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            Problem::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "BODY_TOO_LARGE",
                format!(
                    "request bodies are limited to {} bytes",
                    super::BODY_BYTES_MAX
                ),
            )
        } else {
            Problem::invalid("INVALID_BODY", "", e.body_text())
        }
    })?;
    let value: serde_json::Value = serde_json::from_slice(&body)
        .map_err(|e| Problem::invalid("MALFORMED_JSON", "", format!("body is not JSON: {e}")))?;
    // Canonical form (sorted keys) so formatting differences are the same request.
    let canonical = value.to_string();
    let command = WalletCommand::parse_json(value)
        .map_err(|e| Problem::invalid(e.code, &e.field, e.message))?;
    tracing::Span::current().record("command", command.name());
    let key = idempotency_key(&headers)?;
    let idempotency = key.clone().map(|key| IdempotencyRow {
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
        })
        .await
        .map_err(|e| {
            let p = Problem::from(e);
            tracing::info!(code = p.code, status = p.status.as_u16(), "command refused");
            p
        })?;
    let replayed = outcome.replayed;
    tracing::info!(
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

/// A wallet's balances, version and withdrawal blocks.
#[utoipa::path(
    get,
    path = "/v1/wallets/{wallet_id}",
    params(("wallet_id" = String, Path, description = "Wallet id")),
    responses((status = 200, body = WalletView), (status = 404, body = ProblemBody)),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(wallet_id = %wallet_id, actor = %caller.principal.actor()))]
pub async fn get_wallet(
    State(state): State<AppState>,
    caller: Caller,
    Path(wallet_id): Path<String>,
) -> Result<Json<WalletView>, Problem> {
    let wallet_id = parse_id("wallet_id", &wallet_id)?;
    let loaded = state
        .wallets
        .state(wallet_id.as_str())
        .await
        .map_err(Problem::from)?;
    let w = loaded.state;
    if !w.opened {
        return Err(WalletError::NotFound.into());
    }
    Ok(Json(WalletView {
        wallet_id: wallet_id.as_str().to_owned(),
        user_id: w.user_id,
        currency: w.currency.to_string(),
        pending_minor: w.balances.pending_minor,
        available_minor: w.balances.available_minor,
        frozen_minor: w.balances.frozen_minor,
        risk_hold_minor: w.balances.risk_hold_minor,
        version: loaded.version,
        withdrawals_blocked: !w.withdrawal_blocks.is_empty(),
        withdrawal_blocks: w
            .withdrawal_blocks
            .into_values()
            .map(|b| BlockView {
                ref_type: b.ref_type,
                ref_id: b.ref_id,
                reason: b.reason,
            })
            .collect(),
    }))
}
