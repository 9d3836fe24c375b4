//! Job operations (issue 4 item 9): list and inspect jobs (every role), retry, kick,
//! pause and resume (operators and admins).

use crate::infra::jobs::engine::{RunReport, Selector};
use crate::infra::jobs::ops::{self, JobSummary, JobView};
use crate::infra::jobs::{JobError, JobStatus};
use crate::runtime::http::body::JsonBody;
use crate::runtime::http::query::QueryParams;
use crate::runtime::http::{AppState, Caller, Problem, ProblemBody};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use factledger_aggregates::admin_action::AdminAction;
use serde::{Deserialize, Serialize};

/// Default page of `GET /v1/jobs`.
pub const PAGE_JOBS_DEFAULT: i64 = 100;

impl From<JobError> for Problem {
    fn from(e: JobError) -> Self {
        match &e {
            JobError::PayloadTooLarge { .. }
            | JobError::PayloadTooManyNodes { .. }
            | JobError::Invalid { .. } => {
                Problem::invalid("INVALID_FIELD", e.field().unwrap_or(""), e.to_string())
            }
            JobError::UnknownKind(_) => Problem::invalid("UNKNOWN_JOB_KIND", "kind", e.to_string()),
            JobError::NotFound(_) => {
                Problem::new(StatusCode::NOT_FOUND, "JOB_NOT_FOUND", e.to_string()).field("code")
            }
            JobError::Paused => Problem::new(StatusCode::CONFLICT, "JOBS_PAUSED", e.to_string()),
            _ => {
                tracing::error!(error = %e, "job operation failed");
                Problem::internal(e.to_string())
            }
        }
    }
}

fn require_operator(caller: &Caller) -> Result<(), Problem> {
    caller.require_operator("job control")
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    kind: Option<String>,
    /// PENDING, RUNNING, SUCCESS, FAILED or CANCELLED (or 0 … 4).
    status: Option<String>,
    /// Jobs with an id above this one (the `next_after` of the previous page).
    after: Option<i64>,
    limit: Option<i64>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct JobsPage {
    /// Whether jobs are paused for maintenance (nothing is claimed).
    pub paused: bool,
    pub jobs: Vec<JobSummary>,
    /// Pass as `after` for the next page; absent on the last one.
    pub next_after: Option<i64>,
}

/// Jobs, optionally of one kind and status, in id order.
#[utoipa::path(get, path = "/v1/jobs", params(ListQuery),
    responses((status = 200, body = JobsPage), (status = 422, body = ProblemBody)),
    security(("bearer" = [])))]
pub async fn list(
    State(state): State<AppState>,
    _caller: Caller,
    QueryParams(q): QueryParams<ListQuery>,
) -> Result<Json<JobsPage>, Problem> {
    let status = match q.status.as_deref() {
        None => None,
        Some(s) => Some(JobStatus::parse(s).ok_or_else(|| {
            Problem::invalid(
                "INVALID_FIELD",
                "status",
                format!("{s:?} is not PENDING, RUNNING, SUCCESS, FAILED or CANCELLED"),
            )
        })?),
    };
    if let Some(k) = &q.kind {
        if state.jobs.kind(k).is_none() {
            return Err(JobError::UnknownKind(k.clone()).into());
        }
    }
    let limit = q.limit.unwrap_or(PAGE_JOBS_DEFAULT);
    if !(1..=ops::PAGE_JOBS_MAX).contains(&limit) {
        return Err(Problem::invalid(
            "INVALID_FIELD",
            "limit",
            format!("must be between 1 and {}", ops::PAGE_JOBS_MAX),
        ));
    }
    let jobs = ops::list(
        state.jobs.db(),
        q.kind.as_deref(),
        status,
        q.after.unwrap_or(0),
        limit,
    )
    .await?;
    let next_after = (jobs.len() as i64 == limit)
        .then(|| jobs.last().map(|j| j.id))
        .flatten();
    Ok(Json(JobsPage {
        paused: state.jobs.paused().await?,
        jobs,
        next_after,
    }))
}

/// One job with each level of success (R-JOB-10): the scheduler run, the round, and
/// the business data and downstream work. `POST /v1/jobs/{code}:kick` kicks it.
#[utoipa::path(get, path = "/v1/jobs/{code}",
    params(("code" = String, Path, description = "The job code, <PREFIX>:<md5>")),
    responses((status = 200, body = JobView), (status = 404, body = ProblemBody)),
    security(("bearer" = [])))]
pub async fn show(
    State(state): State<AppState>,
    _caller: Caller,
    Path(code): Path<String>,
) -> Result<Json<JobView>, Problem> {
    ops::show(state.jobs.db(), &code)
        .await?
        .map(Json)
        .ok_or_else(|| JobError::NotFound(code).into())
}

/// `POST /v1/jobs/{code}:kick`: take the job now if the scan would (due, retries
/// left, within quota, not paused).
#[utoipa::path(post, path = "/v1/jobs/{code}:kick",
    params(("code" = String, Path, description = "The job code, <PREFIX>:<md5>")),
    responses((status = 200, body = RunReport), (status = 404, body = ProblemBody)),
    security(("bearer" = [])))]
pub async fn post_on_job(
    State(state): State<AppState>,
    caller: Caller,
    Path(tail): Path<String>,
) -> Result<Json<RunReport>, Problem> {
    let (code, _) = crate::runtime::http::path_action(&tail, &["kick"], "/v1/jobs", "code")?;
    require_operator(&caller)?;
    if ops::show(state.jobs.db(), code).await?.is_none() {
        return Err(JobError::NotFound(code.to_owned()).into());
    }
    let report = state.jobs.kick(&[code.to_owned()]).await?;
    caller
        .record_admin(
            &state,
            AdminAction::JobKicked,
            &format!("job:{code}"),
            None,
            None,
        )
        .await?;
    Ok(Json(report))
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryRequest {
    #[serde(default)]
    codes: Vec<String>,
    #[serde(default)]
    business_keys: Vec<String>,
}

/// Manual retry (R-JOB-6) by codes and/or business keys, merged: serial, no quota,
/// ignoring due time and the retry limit; only PENDING/FAILED jobs run. An empty or
/// malformed selector is refused (it never becomes an automatic scan).
#[utoipa::path(post, path = "/v1/jobs:retry", request_body = RetryRequest,
    responses((status = 200, body = RunReport), (status = 409, body = ProblemBody,
        description = "Jobs are paused"), (status = 422, body = ProblemBody)),
    security(("bearer" = [])))]
pub async fn retry(
    State(state): State<AppState>,
    caller: Caller,
    req: JsonBody,
) -> Result<Json<RunReport>, Problem> {
    require_operator(&caller)?;
    let req: RetryRequest = req.parse()?;
    let selector = Selector::parse(req.codes, req.business_keys)?;
    let report = state.jobs.retry(&selector).await?;
    let detail = serde_json::json!({
        "codes": selector.codes,
        "business_keys": selector.business_keys,
    });
    caller
        .record_admin(
            &state,
            AdminAction::JobsRetried,
            "jobs",
            None,
            Some(detail.to_string()),
        )
        .await?;
    Ok(Json(report))
}

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PauseRequest {
    reason: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PauseState {
    pub paused: bool,
}

/// Pause every entry point (scan, manual retry, kick); submissions are still accepted.
#[utoipa::path(post, path = "/v1/jobs:pause", request_body = PauseRequest,
    responses((status = 200, body = PauseState)), security(("bearer" = [])))]
pub async fn pause(
    State(state): State<AppState>,
    caller: Caller,
    req: JsonBody,
) -> Result<Json<PauseState>, Problem> {
    require_operator(&caller)?;
    let req: PauseRequest = req.parse_or_default()?;
    state
        .jobs
        .set_paused(true, &caller.principal.actor(), req.reason.as_deref())
        .await?;
    caller
        .record_admin(
            &state,
            AdminAction::JobsPaused,
            "jobs",
            req.reason.as_deref(),
            None,
        )
        .await?;
    Ok(Json(PauseState { paused: true }))
}

/// Resume after a maintenance pause (optionally `{reason}`, recorded with the action).
#[utoipa::path(post, path = "/v1/jobs:resume", request_body = PauseRequest,
    responses((status = 200, body = PauseState)), security(("bearer" = [])))]
pub async fn resume(
    State(state): State<AppState>,
    caller: Caller,
    req: JsonBody,
) -> Result<Json<PauseState>, Problem> {
    require_operator(&caller)?;
    let req: PauseRequest = req.parse_or_default()?;
    state
        .jobs
        .set_paused(false, &caller.principal.actor(), req.reason.as_deref())
        .await?;
    caller
        .record_admin(
            &state,
            AdminAction::JobsResumed,
            "jobs",
            req.reason.as_deref(),
            None,
        )
        .await?;
    Ok(Json(PauseState { paused: false }))
}
