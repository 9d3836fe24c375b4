//! Audit reads (every role, auditors included): events by correlation, actor or type
//! and time; any aggregate's state as of a position or a time; hash-chain verification.
//! Nothing here writes.

use crate::infra::store::{self, integrity, EventFilter, EventView, VerifyReport, READ_LIMIT_MAX};
use crate::runtime::http::body::JsonBody;
use crate::runtime::http::parse_id;
use crate::runtime::http::query::QueryParams;
use crate::runtime::http::{AppState, Caller, Problem, ProblemBody};
use axum::extract::{Path, State};
use axum::Json;
use chrono::{DateTime, Utc};
use factledger_aggregates::wallet::{Wallet, WALLET_AGGREGATE_TYPE};
use factledger_aggregates::Decide;
use serde::{Deserialize, Serialize};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    correlation_id: Option<String>,
    actor: Option<String>,
    event_type: Option<String>,
    /// With `event_type`: RFC 3339, inclusive.
    from: Option<String>,
    /// With `event_type`: RFC 3339, exclusive.
    to: Option<String>,
    /// Global position of the last event of the previous page.
    after: Option<i64>,
    limit: Option<i64>,
    /// Wait (bounded) until the log read here holds this position (a read replica
    /// lags the primary): read-your-writes.
    min_position: Option<i64>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AuditPage {
    pub events: Vec<EventView>,
    /// `after` for the next page, or null at the end.
    pub next_after: Option<i64>,
}

fn time(field: &str, v: Option<&str>) -> Result<DateTime<Utc>, Problem> {
    let v = v.ok_or_else(|| {
        Problem::invalid(
            "MISSING_FIELD",
            field,
            "required with event_type (RFC 3339)",
        )
    })?;
    DateTime::parse_from_rfc3339(v)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| Problem::invalid("INVALID_FIELD", field, format!("not RFC 3339: {e}")))
}

fn selector(q: &EventsQuery) -> Result<EventFilter, Problem> {
    let chosen = [&q.correlation_id, &q.actor, &q.event_type]
        .iter()
        .filter(|v| v.is_some())
        .count();
    if chosen != 1 {
        return Err(Problem::invalid(
            "INVALID_QUERY",
            "",
            "give exactly one of correlation_id, actor, event_type (with from and to)",
        ));
    }
    let bounded = |field: &str, v: &str| -> Result<String, Problem> {
        if v.is_empty() || v.len() > 128 {
            return Err(Problem::invalid(
                "INVALID_FIELD",
                field,
                "must be 1 to 128 characters",
            ));
        }
        Ok(v.to_owned())
    };
    if let Some(c) = &q.correlation_id {
        return Ok(EventFilter::Correlation(bounded("correlation_id", c)?));
    }
    if let Some(a) = &q.actor {
        return Ok(EventFilter::Actor(bounded("actor", a)?));
    }
    let event_type = bounded("event_type", q.event_type.as_deref().unwrap_or(""))?;
    let from = time("from", q.from.as_deref())?;
    let to = time("to", q.to.as_deref())?;
    if to <= from {
        return Err(Problem::invalid(
            "INVALID_FIELD",
            "to",
            "must be after from",
        ));
    }
    Ok(EventFilter::TypeBetween {
        event_type,
        from,
        to,
    })
}

/// Events by correlation id, by actor, or by type within a time range; paged by
/// global position, each served by an index.
#[utoipa::path(
    get,
    path = "/v1/audit/events",
    params(("correlation_id" = Option<String>, Query), ("actor" = Option<String>, Query),
           ("event_type" = Option<String>, Query), ("from" = Option<String>, Query),
           ("to" = Option<String>, Query), ("after" = Option<i64>, Query),
           ("limit" = Option<i64>, Query),
           ("min_position" = Option<i64>, Query, description = "wait until the log read here holds this position")),
    responses((status = 200, body = AuditPage), (status = 422, body = ProblemBody),
              (status = 503, body = ProblemBody)),
    security(("bearer" = []))
)]
pub async fn events(
    State(state): State<AppState>,
    _caller: Caller,
    QueryParams(q): QueryParams<EventsQuery>,
) -> Result<Json<AuditPage>, Problem> {
    let filter = selector(&q)?;
    let after = q.after.unwrap_or(0).max(0);
    let limit = crate::runtime::http::page_limit(q.limit)?;
    crate::runtime::http::replica_caught_up(&state, q.min_position).await?;
    let stored = state.read_store.find_events(&filter, after, limit).await?;
    let next_after = (stored.len() as i64 == limit)
        .then(|| stored.last().map(|e| e.global_position))
        .flatten();
    let events = stored
        .iter()
        .map(|e| e.view())
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Json(AuditPage { events, next_after }))
}

/// The event at one global position (every role): what a figure's "why" link opens.
#[utoipa::path(
    get,
    path = "/v1/audit/events/{position}",
    params(("position" = i64, Path, description = "global position, 1 or more")),
    responses((status = 200, body = EventView), (status = 404, body = ProblemBody),
              (status = 422, body = ProblemBody), (status = 503, body = ProblemBody)),
    security(("bearer" = []))
)]
pub async fn event_at(
    State(state): State<AppState>,
    _caller: Caller,
    Path(raw): Path<String>,
) -> Result<Json<EventView>, Problem> {
    let position = raw.parse::<i64>().ok().filter(|p| *p >= 1).ok_or_else(|| {
        Problem::invalid(
            "INVALID_FIELD",
            "position",
            "must be a whole number, 1 or more",
        )
    })?;
    // On a replica, a position not yet replicated is waited for (then 503), not 404.
    if state.reads_from_replica() {
        crate::runtime::http::replica_caught_up(&state, Some(position)).await?;
    }
    let found = state.read_store.read_positions(position, position).await?;
    let event = found
        .iter()
        .find(|e| e.global_position == position)
        .ok_or_else(|| {
            Problem::new(
                axum::http::StatusCode::NOT_FOUND,
                "EVENT_NOT_FOUND",
                format!("no event at position {position}"),
            )
            .field("position")
        })?;
    Ok(Json(event.view()?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AsOfQuery {
    as_of_position: Option<i64>,
    as_of: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct StateAsOf {
    pub aggregate_type: String,
    pub aggregate_id: String,
    /// Events applied (the stream version at that point).
    pub version: i64,
    /// Global position of the last event applied (0 if none).
    pub position: i64,
    #[schema(value_type = Object)]
    pub state: serde_json::Value,
}

/// The state of an aggregate as of a global position or a time, replayed from its
/// events.
#[utoipa::path(
    get,
    path = "/v1/streams/{aggregate_type}/{aggregate_id}/state",
    params(("aggregate_type" = String, Path), ("aggregate_id" = String, Path),
           ("as_of_position" = Option<i64>, Query), ("as_of" = Option<String>, Query)),
    responses((status = 200, body = StateAsOf), (status = 422, body = ProblemBody)),
    security(("bearer" = []))
)]
pub async fn state_as_of(
    State(state): State<AppState>,
    _caller: Caller,
    Path((aggregate_type, aggregate_id)): Path<(String, String)>,
    QueryParams(q): QueryParams<AsOfQuery>,
) -> Result<Json<StateAsOf>, Problem> {
    let aggregate_type = parse_id("aggregate_type", &aggregate_type)?;
    let aggregate_id = parse_id("aggregate_id", &aggregate_id)?;
    if aggregate_type.as_str() != WALLET_AGGREGATE_TYPE {
        return Err(Problem::invalid(
            "UNKNOWN_AGGREGATE_TYPE",
            "aggregate_type",
            "state can be replayed for: wallet",
        ));
    }
    let (max_position, max_time) = match (&q.as_of_position, &q.as_of) {
        (Some(p), None) => (*p, None),
        (None, Some(t)) => (i64::MAX, Some(time("as_of", Some(t))?)),
        _ => {
            return Err(Problem::invalid(
                "INVALID_QUERY",
                "",
                "give exactly one of as_of_position, as_of",
            ))
        }
    };
    let mut wallet = Wallet::default();
    let (mut version, mut position, mut from) = (0, 0, 1);
    'stream: loop {
        let page = state
            .store
            .read_stream(
                aggregate_type.as_str(),
                aggregate_id.as_str(),
                from,
                READ_LIMIT_MAX,
            )
            .await?;
        let Some(last) = page.last() else { break };
        from = last.sequence + 1;
        for e in &page {
            if e.global_position > max_position || max_time.is_some_and(|t| e.recorded_at > t) {
                break 'stream;
            }
            let (_, payload) = e.current_payload()?;
            let event = serde_json::from_value(payload)
                .map_err(|err| Problem::internal(format!("event {}: {err}", e.global_position)))?;
            wallet
                .check(&event)
                .map_err(|v| Problem::internal(v.to_string()))?;
            cqrs_es::Aggregate::apply(&mut wallet, event);
            version = e.sequence;
            position = e.global_position;
        }
    }
    Ok(Json(StateAsOf {
        aggregate_type: aggregate_type.as_str().to_owned(),
        aggregate_id: aggregate_id.as_str().to_owned(),
        version,
        position,
        state: serde_json::to_value(&wallet).map_err(|e| Problem::internal(e.to_string()))?,
    }))
}

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VerifyRequest {
    /// `TYPE/ID` of one stream; absent: every stream.
    stream: Option<String>,
}

/// Verify the log: one stream's hash chain, or (no stream) every chain, the positions
/// against the sequence row and every signed anchor known (the anchor file's and the
/// database's). The report names the first bad position and its kind.
#[utoipa::path(
    post,
    path = "/v1/audit/verify",
    request_body = VerifyRequest,
    responses((status = 200, body = Object), (status = 422, body = ProblemBody)),
    security(("bearer" = []))
)]
pub async fn verify(
    State(state): State<AppState>,
    _caller: Caller,
    body: JsonBody,
) -> Result<Json<VerifyReport>, Problem> {
    let req: VerifyRequest = body.parse_or_default()?;
    let target = match &req.stream {
        Some(s) => {
            let (t, id) = s.split_once('/').ok_or_else(|| {
                Problem::invalid(
                    "INVALID_FIELD",
                    "stream",
                    "must be TYPE/ID, e.g. wallet/w-1",
                )
            })?;
            Some((parse_id("stream", t)?, parse_id("stream", id)?))
        }
        None => None,
    };
    let report = match &target {
        Some((t, id)) => store::verify(&*state.store, Some((t.as_str(), id.as_str()))).await?,
        None => integrity::verify_log(
            &state.store,
            state.jobs.db(),
            state.config.anchor_file.as_deref(),
        )
        .await
        .map_err(|e| Problem::internal(format!("verify failed: {e}")))?,
    };
    if !report.ok {
        tracing::error!(
            first = ?report.first,
            findings = report.findings_count,
            "integrity verification found tampering"
        );
    }
    Ok(Json(report))
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AnchorList {
    pub anchors: Vec<integrity::Anchor>,
    /// The hex Ed25519 public key the anchors verify with (pin it outside the service).
    pub public_key: String,
}

/// Every signed chain anchor stored in the database, oldest first.
#[utoipa::path(
    get,
    path = "/v1/audit/anchors",
    responses((status = 200, body = AnchorList)),
    security(("bearer" = []))
)]
pub async fn list_anchors(
    State(state): State<AppState>,
    _caller: Caller,
) -> Result<Json<AnchorList>, Problem> {
    let anchors = integrity::anchor::stored(state.jobs.db())
        .await
        .map_err(|e| Problem::internal(format!("anchor read failed: {e}")))?;
    Ok(Json(AnchorList {
        anchors,
        public_key: state.store.keyring().public_key_hex(),
    }))
}

/// Sign an anchor at the log's head now (operators and admins): stored, published to
/// the outbox and appended to the anchor file. Refused (409 `LOG_INTEGRITY`) when the
/// log has a hole or the newest anchor does not verify.
#[utoipa::path(
    post,
    path = "/v1/audit/anchors",
    responses(
        (status = 201, body = integrity::Anchor),
        (status = 403, body = ProblemBody),
        (status = 409, body = ProblemBody)
    ),
    security(("bearer" = []))
)]
pub async fn create_anchor(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<(axum::http::StatusCode, Json<integrity::Anchor>), Problem> {
    caller.require_operator("signing a chain anchor")?;
    let sinks = integrity::AnchorSinks {
        file: state.config.anchor_file.clone(),
    };
    let made = integrity::anchor::create(
        &state.store,
        state.jobs.db(),
        &sinks,
        &caller.principal.actor(),
        false,
    )
    .await;
    match made {
        Ok(Some(a)) => Ok((axum::http::StatusCode::CREATED, Json(a))),
        Ok(None) => Err(Problem::internal("anchor not made")),
        Err(e @ (integrity::AnchorError::Integrity(_) | integrity::AnchorError::Raced(_))) => {
            Err(Problem::new(
                axum::http::StatusCode::CONFLICT,
                "LOG_INTEGRITY",
                e.to_string(),
            ))
        }
        Err(e) => Err(Problem::internal(format!("anchor failed: {e}"))),
    }
}
