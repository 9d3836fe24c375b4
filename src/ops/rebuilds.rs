//! Rebuilding projections on demand: start one, follow its progress.

use crate::runtime::http::body::JsonBody;
use crate::runtime::http::{AppState, Caller, Problem, ProblemBody};
use crate::runtime::rebuild::{self, RebuildError, RebuildOptions, RebuildStatus, Scope};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use factledger_aggregates::admin_action::AdminAction;
use serde::Deserialize;

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RebuildRequest {
    /// `wallet:<id>` to recompute only that wallet's rows; absent: a full rebuild.
    scope: Option<String>,
}

impl From<RebuildError> for Problem {
    fn from(e: RebuildError) -> Self {
        match e {
            RebuildError::UnknownProjection(_) => {
                Problem::new(StatusCode::NOT_FOUND, "UNKNOWN_PROJECTION", e.to_string())
                    .field("name")
            }
            RebuildError::BadScope(_) => Problem::invalid("INVALID_FIELD", "scope", e.to_string()),
            RebuildError::AlreadyRunning { .. } => {
                Problem::new(StatusCode::CONFLICT, "REBUILD_RUNNING", e.to_string())
            }
            RebuildError::Runner(crate::runtime::projection::RunnerError::Held(_)) => Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "PROJECTION_HELD",
                e.to_string(),
            ),
            other => {
                tracing::error!(error = %other, "rebuild failed");
                Problem::internal(other.to_string())
            }
        }
    }
}

/// Start a rebuild of a projection (full, or scoped to one wallet). Returns at once
/// with the rebuild's id; follow it with `GET /v1/projections/rebuilds/{id}`.
#[utoipa::path(
    post,
    path = "/v1/projections/{name}/rebuild",
    params(("name" = String, Path, description = "Projection name: wallet")),
    request_body = RebuildRequest,
    responses(
        (status = 202, body = RebuildStatus),
        (status = 404, body = ProblemBody),
        (status = 409, body = ProblemBody, description = "A full rebuild is already running"),
        (status = 422, body = ProblemBody)
    ),
    security(("bearer" = []))
)]
pub async fn start(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    body: JsonBody,
) -> Result<(StatusCode, Json<RebuildStatus>), Problem> {
    caller.require_operator("a projection rebuild")?;
    let req: RebuildRequest = body.parse_or_default()?;
    let scope = Scope::parse(req.scope.as_deref())?;
    let scope_text = req.scope.clone().unwrap_or_else(|| "full".to_owned());
    let started = rebuild::begin(
        &state.store,
        &state.db,
        &name,
        scope,
        &caller.principal.actor(),
    )
    .await?;
    caller
        .record_admin(
            &state,
            AdminAction::RebuildStarted,
            &format!("projection:{name}"),
            None,
            Some(format!("rebuild {} scope {scope_text}", started.id)),
        )
        .await?;
    let (store, db, run) = (state.store.clone(), state.db.clone(), started.clone());
    tokio::spawn(async move {
        let outcome = rebuild::run(&store, &db, &run, &RebuildOptions::default(), &|_| {}).await;
        match outcome {
            Ok(s) => {
                tracing::info!(rebuild = %s.id, events = s.events_applied, position = s.position, "rebuild done")
            }
            Err(e) => tracing::error!(rebuild = %run.id, error = %e, "rebuild failed"),
        }
    });
    let status = rebuild::status(&state.db, &started.id)
        .await?
        .ok_or_else(|| Problem::internal(format!("rebuild {} was not recorded", started.id)))?;
    Ok((StatusCode::ACCEPTED, Json(status)))
}

/// Progress of a rebuild (started from the API or the CLI), and its outcome.
#[utoipa::path(
    get,
    path = "/v1/projections/rebuilds/{id}",
    params(("id" = String, Path, description = "The id returned when the rebuild started")),
    responses((status = 200, body = RebuildStatus), (status = 404, body = ProblemBody)),
    security(("bearer" = []))
)]
pub async fn status(
    State(state): State<AppState>,
    _caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<RebuildStatus>, Problem> {
    rebuild::status(&state.db, &id)
        .await?
        .map(Json)
        .ok_or_else(|| {
            Problem::new(
                StatusCode::NOT_FOUND,
                "REBUILD_NOT_FOUND",
                format!("no rebuild with id {id:?}"),
            )
            .field("id")
        })
}
