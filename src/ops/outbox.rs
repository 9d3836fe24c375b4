//! The outbox relay's state (every role may read it): per sink, the last id delivered,
//! the backlog and the failure streak, if any.

use crate::infra::outbox::OutboxStatus;
use crate::runtime::http::{AppState, Caller, Problem};
use axum::extract::State;
use axum::Json;

/// Every sink's checkpoint: `delivered_id`, `backlog` (max outbox id − delivered_id),
/// `attempts`, `last_error` and `failing_since`. Sinks of every process sharing the
/// database are listed, each once.
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
