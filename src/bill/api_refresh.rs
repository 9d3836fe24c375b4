//! Bill refresh requests and inspection findings (SPEC R-BILL-8, R-BILL-11; issue 6
//! items 4 and 7):
//! - `POST /v1/bills:refresh`: the body is the R-BILL-8 request JSON. Limits, fields
//!   and months are checked by `RefreshRequest::parse` (413 for the byte limit, 422
//!   otherwise, naming the field and the rule); locators and ids are resolved against
//!   the fact tables (ids that do not belong together → 422 naming the fields). Then a
//!   `bill_refresh` job is submitted with the task code as its code: a plain submit for
//!   a new business key; a resubmit of a known key merges trigger sources and locators
//!   into the stored request and is a fact-change submit (new request generation).
//!   **202** with the job code, the business key and the resolved scope count.
//! - `GET /v1/bills/inspections?station_id=&month=&job=&after_id=&limit=`: the stored
//!   findings of the inspections after refresh runs.

use crate::bill::refresh::{
    check_scope_locator, list_findings, resolve_station_months, ResolveError, BILL_REFRESH,
};
use crate::infra::jobs::{ops, JobSubmit};
use crate::runtime::http::query::QueryParams;
use crate::runtime::http::{page_limit, AppState, Caller, Problem};
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use factledger_projections::bill::parse_month;
use factledger_projections::bill::refresh::{
    RefreshMode, RefreshRequest, RefreshRequestError, RefreshScope, ScopeResolveError,
    StationMonthList,
};
use serde_json::{json, Value};

/// A refused request: 413 over the byte limit, 422 otherwise; the field and rule named.
fn request_problem(e: &RefreshRequestError) -> Problem {
    use RefreshRequestError as E;
    let (status, code, field) = match e {
        E::TooManyBytes { .. } => (
            StatusCode::PAYLOAD_TOO_LARGE,
            "REFRESH_REQUEST_TOO_LARGE",
            "task_data".to_owned(),
        ),
        E::TooManyNodes { .. } => (
            StatusCode::UNPROCESSABLE_ENTITY,
            "REFRESH_REQUEST_TOO_LARGE",
            "task_data".to_owned(),
        ),
        E::TooManyScopes { field, .. } => (
            StatusCode::UNPROCESSABLE_ENTITY,
            "REFRESH_REQUEST_TOO_LARGE",
            (*field).to_owned(),
        ),
        E::Json { .. } => (
            StatusCode::UNPROCESSABLE_ENTITY,
            "INVALID_BODY",
            "task_data".to_owned(),
        ),
        E::MissingField { field, .. } | E::InvalidField { field, .. } => (
            StatusCode::UNPROCESSABLE_ENTITY,
            "INVALID_FIELD",
            field.clone(),
        ),
        E::FieldNotAllowed { field, .. } | E::EmptyScope { field } => (
            StatusCode::UNPROCESSABLE_ENTITY,
            "INVALID_FIELD",
            (*field).to_owned(),
        ),
        E::NoAccountSide => (
            StatusCode::UNPROCESSABLE_ENTITY,
            "INVALID_FIELD",
            "small_account_ids, partner_account_ids".to_owned(),
        ),
        E::IdentityMismatch { field, .. } => (
            StatusCode::UNPROCESSABLE_ENTITY,
            "INVALID_FIELD",
            (*field).to_owned(),
        ),
        E::KeyMismatch { .. } => (
            StatusCode::CONFLICT,
            "BUSINESS_KEY_MISMATCH",
            "business_key".to_owned(),
        ),
    };
    Problem::new(status, code, e.to_string()).field(field)
}

/// A scope that does not resolve against the fact tables: 422 naming the fields.
fn resolve_problem(e: ResolveError) -> Problem {
    use ScopeResolveError as E;
    let ResolveError::Scope(scope) = e else {
        return Problem::internal(e.to_string());
    };
    let (code, field) = match &scope {
        E::LocatorInconsistent { fields, .. } => ("LOCATOR_INCONSISTENT", *fields),
        E::PartnerBillNotFound { .. }
        | E::PartnerBillWithoutDiff { .. }
        | E::PartnerBillWithSeveralDiffs { .. } => ("SCOPE_NOT_RESOLVED", "partner_bill_id"),
        E::PartnerAccountNotFound { .. } | E::PlatformStationMissing { .. } => {
            ("SCOPE_NOT_RESOLVED", "partner_account_id")
        }
        E::DiffNotFound { .. } => ("SCOPE_NOT_RESOLVED", "diff_id"),
        E::OrderBillNotFound { .. }
        | E::OrderBillDeleted { .. }
        | E::OrderNotFound { .. }
        | E::OrderDeleted { .. }
        | E::OrderNotPublished { .. }
        | E::NotCurrentPublication { .. } => ("SCOPE_NOT_RESOLVED", "order_bill_id"),
    };
    Problem::new(StatusCode::UNPROCESSABLE_ENTITY, code, scope.to_string()).field(field)
}

fn internal(e: impl std::fmt::Display) -> Problem {
    Problem::internal(e.to_string())
}

/// Submit a refresh request.
#[utoipa::path(
    post,
    path = "/v1/bills:refresh",
    request_body(content = Object, description = "R-BILL-8 request: {scope_type: STATION_MONTH|PARTNER_BILL|DIFF|ORDER_BILL|ACCOUNT_SCOPE, station_months?: [{station_id, bill_month: yyyymm, partner_org_id?, partner_bill_id?, partner_account_id?, diff_id?}], partner_bill_ids?, diff_ids?, order_bill_ids?, small_account_ids?, partner_account_ids?, month_end?: yyyymm, mode?: ALL|UNFINISHED, trigger_sources?: [..]}; ≤ 16,384 bytes, ≤ 1,200 JSON nodes, ≤ 200 scopes"),
    responses((status = 202, description = "{job_code, business_key, stored_business_key, scope_type, mode, scope_count, resubmitted, request}"),
              (status = 413, body = crate::runtime::http::ProblemBody), (status = 422, body = crate::runtime::http::ProblemBody)),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(actor = %caller.principal.actor()))]
pub async fn submit(
    State(state): State<AppState>,
    caller: Caller,
    body: crate::runtime::http::body::JsonBody,
) -> Result<(StatusCode, Json<Value>), Problem> {
    caller.require_write()?;
    // Content type, well-formed JSON and repeated keys (F5) checked first, with the
    // usual 422s (a body that is not UTF-8 was a plain-text 400 when this read a
    // `String`: found by the API fuzzer); the request's own parser checks the rest.
    let body = body.text()?;
    let request = RefreshRequest::parse(body).map_err(|e| request_problem(&e))?;
    // SPEC R-BILL-8: mode UNFINISHED "is for operator refreshes"; a service's
    // fact-driven refresh is always ALL (F7).
    if request.mode() == RefreshMode::Unfinished {
        caller.require_operator("a refresh in mode UNFINISHED")?;
    }
    let db = &state.db;
    // Locators checked (and completed) against the fact tables, at submission.
    let request = match request.scope() {
        RefreshScope::StationMonths(list) => {
            let mut checked = Vec::with_capacity(list.as_slice().len());
            for scope in list.as_slice() {
                checked.push(
                    check_scope_locator(db, scope)
                        .await
                        .map_err(resolve_problem)?,
                );
            }
            let list = StationMonthList::new(checked).map_err(|e| request_problem(&e))?;
            RefreshRequest::operator(
                RefreshScope::StationMonths(list),
                request.mode(),
                request.trigger_sources().iter().copied(),
            )
        }
        _ => request,
    };
    // Ids resolved now, so a request that cannot resolve is refused, not failed later.
    let scope_count = match resolve_station_months(db, request.scope())
        .await
        .map_err(resolve_problem)?
    {
        Some(station_months) => station_months.len(),
        None => request.scope().count(),
    };
    let key = request.business_key();
    let code = key.task_code();
    let existing = ops::show(state.jobs.db(), &code).await.map_err(internal)?;
    let (submitted, resubmitted) = match existing {
        None => (request, false),
        Some(job) => {
            let stored = RefreshRequest::parse(&job.payload.to_string())
                .map_err(|e| internal(format!("the stored request of {code}: {e}")))?;
            let merged = stored
                .merge_resubmit(&request)
                .map_err(|e| request_problem(&e))?;
            (merged, true)
        }
    };
    let payload: Value = serde_json::from_str(&submitted.to_task_data()).map_err(internal)?;
    let mut job = if resubmitted {
        JobSubmit::fact_change(&BILL_REFRESH, key.as_str(), payload)
    } else {
        JobSubmit::plain(&BILL_REFRESH, key.as_str(), payload)
    };
    job.request_id = Some(caller.request_id.clone());
    job.trace_id = Some(caller.trace_id.clone());
    let job_code = state.jobs.submit(&job).await.map_err(internal)?;
    if caller.principal.role.can_operate() {
        caller
            .record_admin(
                &state,
                factledger_aggregates::admin_action::AdminAction::BillRefreshRequested,
                &format!("job:{job_code}"),
                None,
                Some(format!(
                    "{} {} scope(s), mode {}",
                    submitted.scope().scope_type().name(),
                    scope_count,
                    submitted.mode().as_str()
                )),
            )
            .await?;
    }
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({
            "job_code": job_code,
            "business_key": key.as_str(),
            "stored_business_key": key.stored_key(),
            "scope_type": submitted.scope().scope_type().name(),
            "mode": submitted.mode().as_str(),
            "scope_count": scope_count,
            "resubmitted": resubmitted,
            "request": serde_json::from_str::<Value>(&submitted.to_task_data()).map_err(internal)?,
        })),
    ))
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InspectionQuery {
    station_id: Option<i64>,
    month: Option<String>,
    job: Option<String>,
    after_id: Option<i64>,
    limit: Option<i64>,
}

/// Stored inspection findings.
#[utoipa::path(
    get,
    path = "/v1/bills/inspections",
    params(("station_id" = Option<i64>, Query, description = "Findings of this station"),
           ("month" = Option<String>, Query, description = "Of this bill month, yyyymm"),
           ("job" = Option<String>, Query, description = "Of this refresh job code"),
           ("after_id" = Option<i64>, Query, description = "Page after this finding id"),
           ("limit" = Option<i64>, Query, description = "Page size")),
    responses((status = 200, description = "{findings: [{id, job_code, generation, station_id, bill_month, rule_id, severity, row_table, row_id, message, found_at}], next_after_id}"),
              (status = 422, body = crate::runtime::http::ProblemBody)),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(actor = %caller.principal.actor()))]
pub async fn inspections(
    State(state): State<AppState>,
    caller: Caller,
    QueryParams(q): QueryParams<InspectionQuery>,
) -> Result<Json<Value>, Problem> {
    let month = q
        .month
        .as_deref()
        .map(|m| {
            parse_month(m).map_err(|e| Problem::invalid("INVALID_FIELD", "month", e.to_string()))
        })
        .transpose()?;
    let limit = page_limit(q.limit)?;
    let findings = list_findings(
        state.jobs.db(),
        q.station_id,
        month,
        q.job.as_deref(),
        q.after_id.unwrap_or(0),
        limit,
    )
    .await
    .map_err(internal)?;
    let next_after_id = findings.last().map(|f| f.id);
    tracing::debug!(actor = %caller.principal.actor(), n = findings.len(), "inspections read");
    Ok(Json(json!({
        "findings": findings,
        "next_after_id": next_after_id,
    })))
}
