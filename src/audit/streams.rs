//! `/v1/streams/…`: the history of any stream, with metadata.

use crate::infra::store::EventView;
use crate::runtime::http::parse_id;
use crate::runtime::http::query::QueryParams;
use crate::runtime::http::{AppState, Caller, Problem, ProblemBody};
use axum::extract::{Path, State};
use axum::Json;
use serde::{Deserialize, Serialize};

pub use crate::runtime::http::PAGE_EVENTS_DEFAULT;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// First sequence to return (1-based).
    from: Option<i64>,
    limit: Option<i64>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct EventsPage {
    pub aggregate_type: String,
    pub aggregate_id: String,
    pub events: Vec<EventView>,
    /// `from` for the next page, or null at the end of the stream.
    pub next_from: Option<i64>,
}

/// The events of one stream in sequence order, paged.
#[utoipa::path(
    get,
    path = "/v1/streams/{aggregate_type}/{aggregate_id}/events",
    params(("aggregate_type" = String, Path, description = "e.g. `wallet`"),
           ("aggregate_id" = String, Path),
           ("from" = Option<i64>, Query, description = "first sequence, default 1"),
           ("limit" = Option<i64>, Query, description = "1..=1000, default 100")),
    responses((status = 200, body = EventsPage), (status = 422, body = ProblemBody)),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(aggregate_type = %aggregate_type, aggregate_id = %aggregate_id, actor = %caller.principal.actor()))]
pub async fn get_events(
    State(state): State<AppState>,
    caller: Caller,
    Path((aggregate_type, aggregate_id)): Path<(String, String)>,
    QueryParams(q): QueryParams<EventsQuery>,
) -> Result<Json<EventsPage>, Problem> {
    let aggregate_type = parse_id("aggregate_type", &aggregate_type)?;
    let aggregate_id = parse_id("aggregate_id", &aggregate_id)?;
    let from = q.from.unwrap_or(1);
    if from < 1 {
        return Err(Problem::invalid(
            "INVALID_FIELD",
            "from",
            "must be at least 1",
        ));
    }
    let limit = crate::runtime::http::page_limit(q.limit)?;
    let stored = state
        .store
        .read_stream(aggregate_type.as_str(), aggregate_id.as_str(), from, limit)
        .await?;
    let next_from = (stored.len() as i64 == limit)
        .then(|| stored.last().map(|e| e.sequence + 1))
        .flatten();
    let events = stored
        .iter()
        .map(|e| e.view())
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Json(EventsPage {
        aggregate_type: aggregate_type.as_str().to_owned(),
        aggregate_id: aggregate_id.as_str().to_owned(),
        events,
        next_from,
    }))
}
