//! The outbox relay's state (every role may read it): per sink, the last id delivered,
//! the backlog and the failure streak, if any. And its dead letters (operators only):
//! the messages a sink refused past its retry schedule, listed and replayed one by one
//! (`crate::infra::outbox::dead_letter`).

use crate::infra::outbox::dead_letter::{self, PAGE_DEAD_LETTERS_DEFAULT, PAGE_DEAD_LETTERS_MAX};
use crate::infra::outbox::{DeadLetter, OutboxStatus, ReplayError, Sinks};
use crate::runtime::http::query::QueryParams;
use crate::runtime::http::{AppState, Caller, Problem, ProblemBody};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};

/// Every sink's checkpoint: `delivered_id`, `backlog` (max outbox id − delivered_id),
/// `attempts`, `last_error`, `failing_since` and its open `dead_letters`. Sinks of
/// every process sharing the database are listed, each once.
#[utoipa::path(get, path = "/v1/outbox/sinks",
    responses((status = 200, body = OutboxStatus)),
    security(("bearer" = [])))]
pub async fn sinks(
    State(state): State<AppState>,
    _caller: Caller,
) -> Result<Json<OutboxStatus>, Problem> {
    crate::infra::outbox::status(state.jobs.db())
        .await
        .map(Json)
        .map_err(|e| {
            tracing::error!(error = %e, "cannot read the outbox sinks");
            Problem::internal(format!("cannot read the outbox sinks: {e}"))
        })
}

fn require_operator(caller: &Caller) -> Result<(), Problem> {
    caller.require_operator("outbox dead-letter handling")
}

impl From<ReplayError> for Problem {
    fn from(e: ReplayError) -> Self {
        let detail = e.to_string();
        match e {
            ReplayError::NotFound(_) => {
                Problem::new(StatusCode::NOT_FOUND, "DEAD_LETTER_NOT_FOUND", detail).field("id")
            }
            ReplayError::SinkNotConfigured { .. } => {
                Problem::new(StatusCode::CONFLICT, "SINK_NOT_CONFIGURED", detail)
            }
            ReplayError::NotTaken { .. } => {
                Problem::new(StatusCode::CONFLICT, "SINK_DOES_NOT_TAKE_TYPE", detail)
            }
            ReplayError::OutboxRowMissing(_) => {
                Problem::new(StatusCode::CONFLICT, "OUTBOX_ROW_MISSING", detail)
            }
            ReplayError::Delivery { .. } => {
                Problem::new(StatusCode::BAD_GATEWAY, "REPLAY_FAILED", detail)
            }
            ReplayError::Database(e) => {
                tracing::error!(error = %e, "outbox dead letters");
                Problem::internal(e)
            }
        }
    }
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct DeadLettersQuery {
    /// Only this sink's (`webhook:<name>`, `nats`, …).
    sink: Option<String>,
    /// Also the replayed ones (default false: only those still to handle).
    include_replayed: Option<bool>,
    /// Dead letters with an id above this one (the `next_after` of the previous page).
    after: Option<i64>,
    /// At most this many (default 100, at most 1000).
    limit: Option<i64>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DeadLettersPage {
    pub dead_letters: Vec<DeadLetter>,
    /// Pass as `after` for the next page; absent on the last one.
    pub next_after: Option<i64>,
}

/// Outbox messages a sink refused past its retry schedule (its checkpoint moved on),
/// oldest first: still to handle, or all with `include_replayed=true`.
#[utoipa::path(get, path = "/v1/outbox/dead-letters", params(DeadLettersQuery),
    responses((status = 200, body = DeadLettersPage),
        (status = 403, body = ProblemBody, description = "Not an operator or admin")),
    security(("bearer" = [])))]
pub async fn dead_letters(
    State(state): State<AppState>,
    caller: Caller,
    QueryParams(q): QueryParams<DeadLettersQuery>,
) -> Result<Json<DeadLettersPage>, Problem> {
    require_operator(&caller)?;
    let limit = q.limit.unwrap_or(PAGE_DEAD_LETTERS_DEFAULT);
    if !(1..=PAGE_DEAD_LETTERS_MAX).contains(&limit) {
        return Err(Problem::invalid(
            "INVALID_FIELD",
            "limit",
            format!("must be between 1 and {PAGE_DEAD_LETTERS_MAX}"),
        ));
    }
    let dead_letters = dead_letter::list(
        state.jobs.db(),
        q.sink.as_deref(),
        q.include_replayed.unwrap_or(false),
        q.after.unwrap_or(0),
        limit,
    )
    .await
    .map_err(ReplayError::Database)?;
    let next_after = (dead_letters.len() as i64 == limit)
        .then(|| dead_letters.last().map(|d| d.id))
        .flatten();
    Ok(Json(DeadLettersPage {
        dead_letters,
        next_after,
    }))
}

/// `POST /v1/outbox/dead-letters/{id}:replay`: deliver the dead letter's outbox
/// message to its sink now (out of order; consumers dedupe by outbox id) and mark it
/// replayed. A failed delivery is recorded on it (`replay_error`) and answered 502.
/// The sink must be configured in the process that serves the request.
#[utoipa::path(post, path = "/v1/outbox/dead-letters/{id}:replay",
    params(("id" = i64, Path, description = "The dead letter's id")),
    responses((status = 200, body = DeadLetter),
        (status = 403, body = ProblemBody, description = "Not an operator or admin"),
        (status = 404, body = ProblemBody, description = "DEAD_LETTER_NOT_FOUND"),
        (status = 409, body = ProblemBody, description = "SINK_NOT_CONFIGURED here, \
            SINK_DOES_NOT_TAKE_TYPE any more, or OUTBOX_ROW_MISSING"),
        (status = 502, body = ProblemBody, description = "REPLAY_FAILED: the sink did not \
            take it (recorded as the dead letter's replay_error)")),
    security(("bearer" = [])))]
pub async fn post_on_dead_letter(
    State(state): State<AppState>,
    caller: Caller,
    Path(tail): Path<String>,
) -> Result<Json<DeadLetter>, Problem> {
    let (id, _) =
        crate::runtime::http::path_action(&tail, &["replay"], "/v1/outbox/dead-letters", "id")?;
    require_operator(&caller)?;
    let id: i64 = id.parse().map_err(|_| {
        Problem::invalid("INVALID_FIELD", "id", "must be an integer dead letter id")
    })?;
    let sinks = state.part::<Sinks>()?;
    let replayed = dead_letter::replay(
        state.jobs.db(),
        sinks,
        id,
        &caller.principal.actor(),
        crate::infra::outbox::relay::DELIVERY_TIMEOUT_MS,
    )
    .await?;
    Ok(Json(replayed))
}
