//! Cron operations (issue 4 item 5): the schedules, their next fire time, the lease
//! holder and the newest firings (every role).

use crate::infra::jobs::cron::CronError;
use crate::infra::jobs::cron_status::CronStatus;
use crate::runtime::http::{AppState, Caller, Problem, ProblemBody};
use axum::extract::State;
use axum::Json;

impl From<CronError> for Problem {
    fn from(e: CronError) -> Self {
        tracing::error!(error = %e, "cron operation failed");
        Problem::internal(e.to_string())
    }
}

/// Every schedule (registered here or recorded by any server), its next fire time and
/// skipped firings, the scheduler lease (who fires, until when) and the newest
/// firings with their jobs' status.
#[utoipa::path(get, path = "/v1/cron",
    responses((status = 200, body = CronStatus), (status = 500, body = ProblemBody)),
    security(("bearer" = [])))]
pub async fn status(
    State(state): State<AppState>,
    _caller: Caller,
) -> Result<Json<CronStatus>, Problem> {
    Ok(Json(state.cron.status().await?))
}
