//! `POST /v1/commands:batch`: up to [`BATCH_ITEMS_MAX`] wallet commands in one
//! request, each with its own idempotency key and its own result, in request order
//! (the mechanism: `runtime::bus::batch`). The request is checked whole before
//! anything runs: a malformed item is a 422 naming `commands[i].<field>` and nothing
//! is applied. An item's key is the same record as the `Idempotency-Key` of
//! `POST /v1/wallets/{id}/commands` with the same command: a command sent alone and
//! then again in a batch (or the reverse) is replayed, not applied twice.

use crate::infra::store::{IdempotencyRow, Metadata};
use crate::runtime::bus::{BatchItemDone, BusError, CommandEnvelope, BATCH_ITEMS_MAX};
use crate::runtime::http::body::JsonBody;
use crate::runtime::http::{parse_id, AppState, Caller, Problem, ProblemBody};
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use factledger_aggregates::wallet::{WalletCommand, WalletError};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashSet;

/// Body limit of the batch route: 8,190 items of up to ~1 KiB each.
pub const BATCH_BODY_BYTES_MAX: usize = 8 * 1024 * 1024;

/// The aggregate types a batch item may name.
const BATCH_AGGREGATE_TYPES: &[&str] = &["wallet"];

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    /// All or nothing: when one item is refused nothing is written, that item gets
    /// its problem and every other one `424 LINKED_ITEM_REFUSED`. Default false: each
    /// item succeeds or fails alone.
    #[serde(default)]
    pub atomic: bool,
    /// 1 to 8,190 items; items of one stream are applied in request order.
    pub commands: Vec<BatchItem>,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchItem {
    /// `wallet`.
    pub aggregate_type: String,
    /// The wallet id: 1-128 of [A-Za-z0-9_.:@-].
    pub aggregate_id: String,
    /// Required, unique within the request; the same key and command again (in a
    /// batch or alone) replays the original result.
    pub idempotency_key: String,
    /// A wallet command tagged by `type`, as in `POST /v1/wallets/{wallet_id}/commands`.
    #[schema(value_type = Object)]
    pub command: serde_json::Value,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BatchItemResult {
    /// The item's index in the request.
    pub index: usize,
    /// The HTTP status this item would have had alone: 200, or the problem's.
    pub status: u16,
    /// The global position of the item's last event (pass it as `min_position`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position: Option<i64>,
    /// The stored result of an earlier request with this key.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<ProblemBody>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BatchResponse {
    pub atomic: bool,
    /// Items applied now.
    pub applied: usize,
    /// Items answered from their key's record.
    pub replayed: usize,
    /// Items refused (or, atomic, not applied).
    pub refused: usize,
    /// One per item, in request order.
    pub results: Vec<BatchItemResult>,
}

/// Many wallet commands in one request.
#[utoipa::path(
    post,
    path = "/v1/commands:batch",
    request_body = BatchRequest,
    responses(
        (status = 200, body = BatchResponse, description = "Every item's result, in order (a refused item does not fail the request)"),
        (status = 401, body = ProblemBody), (status = 403, body = ProblemBody),
        (status = 413, body = ProblemBody, description = "More than 8,190 items, or a body over 8 MiB"),
        (status = 422, body = ProblemBody, description = "A malformed item, named `commands[i].<field>`; nothing was applied")
    ),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(actor = %caller.principal.actor(), request_id = %caller.request_id))]
pub async fn post_batch(
    State(state): State<AppState>,
    caller: Caller,
    body: JsonBody,
) -> Result<Json<BatchResponse>, Problem> {
    caller.require_write()?;
    let request: BatchRequest = body.parse()?;
    let scope = caller.principal.actor();
    let country = &state.config.country_code;
    let envelopes = envelopes(&scope, request.commands, |key| {
        caller.metadata(country, Some(key))
    })?;
    let results = state.wallets.execute_batch(envelopes, request.atomic).await;
    let response = respond(request.atomic, results);
    tracing::info!(
        items = response.results.len(),
        applied = response.applied,
        replayed = response.replayed,
        refused = response.refused,
        atomic = response.atomic,
        "batch applied"
    );
    Ok(Json(response))
}

/// Check every item and turn it into a command envelope, its key in `scope` and its
/// metadata from `metadata(key)`; the first malformed item refuses the whole batch.
pub fn envelopes(
    scope: &str,
    items: Vec<BatchItem>,
    metadata: impl Fn(String) -> Metadata,
) -> Result<Vec<CommandEnvelope<WalletCommand>>, Problem> {
    if items.is_empty() {
        return Err(Problem::invalid(
            "INVALID_FIELD",
            "commands",
            "must hold at least one item",
        ));
    }
    if items.len() > BATCH_ITEMS_MAX {
        return Err(Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "BATCH_TOO_LARGE",
            format!(
                "a batch holds at most {BATCH_ITEMS_MAX} items, this one {}; split it",
                items.len()
            ),
        )
        .field("commands"));
    }
    let mut keys = HashSet::with_capacity(items.len());
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let at = |field: &str| format!("commands[{i}].{field}");
        if !BATCH_AGGREGATE_TYPES.contains(&item.aggregate_type.as_str()) {
            return Err(Problem::invalid(
                "INVALID_FIELD",
                &at("aggregate_type"),
                format!("must be one of {BATCH_AGGREGATE_TYPES:?}"),
            ));
        }
        let wallet_id = parse_id(&at("aggregate_id"), &item.aggregate_id)?;
        let key = crate::runtime::http::check_idempotency_key(
            &at("idempotency_key"),
            &item.idempotency_key,
        )?;
        if !keys.insert(key.clone()) {
            return Err(Problem::invalid(
                "DUPLICATE_IDEMPOTENCY_KEY",
                &at("idempotency_key"),
                "an earlier item of this batch has the same key; each item needs its own",
            ));
        }
        // Canonical form (sorted keys), hashed as the single-command route does.
        let canonical = item.command.to_string();
        let command = WalletCommand::parse_json(item.command).map_err(|e| {
            let field = if e.field.is_empty() {
                at("command")
            } else {
                at(&format!("command.{}", e.field))
            };
            Problem::invalid(e.code, &field, e.message)
        })?;
        let idempotency = IdempotencyRow {
            scope: scope.to_owned(),
            request_hash: hex::encode(Sha256::digest(
                format!("POST /v1/wallets/{wallet_id}/commands\n{canonical}").as_bytes(),
            )),
            key: key.clone(),
        };
        out.push(CommandEnvelope {
            aggregate_id: wallet_id.as_str().to_owned(),
            command,
            metadata: metadata(key),
            idempotency: Some(idempotency),
            jobs: Vec::new(),
            fence: None,
        });
    }
    Ok(out)
}

/// The response: each item's status and position or problem, and the counts.
pub fn respond(
    atomic: bool,
    results: Vec<Result<BatchItemDone, BusError<WalletError>>>,
) -> BatchResponse {
    let (mut applied, mut replayed, mut refused) = (0, 0, 0);
    let results = results
        .into_iter()
        .enumerate()
        .map(|(index, r)| match r {
            Ok(done) => {
                if done.replayed {
                    replayed += 1;
                } else {
                    applied += 1;
                }
                BatchItemResult {
                    index,
                    status: 200,
                    position: Some(done.position),
                    replayed: done.replayed,
                    problem: None,
                }
            }
            Err(e) => {
                refused += 1;
                let p = Problem::from(e);
                BatchItemResult {
                    index,
                    status: p.status.as_u16(),
                    position: None,
                    replayed: false,
                    problem: Some(p.body()),
                }
            }
        })
        .collect();
    BatchResponse {
        atomic,
        applied,
        replayed,
        refused,
        results,
    }
}
