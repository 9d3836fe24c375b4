//! Health, metrics and the OpenAPI document.

use super::contract::ErrorContract;
use super::{AppState, Problem};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use utoipa::OpenApi;

#[derive(OpenApi)]
#[openapi(
    info(title = "factledger", description = "Event-sourced money ledger"),
    paths(
        super::wallets::post_command,
        super::wallets::get_wallet,
        super::streams::get_events,
        super::wallets::get_ledger,
        projections,
        super::affiliate::get_order,
        super::affiliate::list_commissions,
        super::affiliate_commands::ingest,
        super::affiliate_commands::post_on_commission,
        super::affiliate_commands::post_on_order,
        super::affiliate_commands::add_rule_version,
        super::affiliate_commands::register_link,
        super::affiliate_commands::set_inviter,
        super::affiliate_commands::open_campaign,
        super::bills::record_small_bill,
        super::bill_refresh::submit,
        super::bill_refresh::inspections,
        super::bill_reads::order_status_conflicts,
        super::bills::record_diff,
        super::bills::record_partner_bill,
        super::bills::post_on_partner_bill,
        super::bills::record_reference,
        super::bills::create_payment_order,
        super::bills::post_on_payment_order,
        super::bills::add_line,
        super::bills::post_on_line,
        super::bills::reserve_lock,
        super::bills::post_on_lock,
        super::bills::record_payment_result,
        super::bills::post_on_payment_result,
        super::rebuilds::start,
        super::rebuilds::status,
        super::audit::events,
        super::audit::state_as_of,
        super::audit::verify,
        super::audit::list_anchors,
        super::audit::create_anchor,
        super::reconciliations::start,
        super::reconciliations::get,
        super::reconciliations::report_html,
        super::jobs::list,
        super::jobs::show,
        super::jobs::post_on_job,
        super::jobs::retry,
        super::jobs::pause,
        super::jobs::resume,
        super::cron::status,
        super::callbacks::receive,
        super::callbacks::list,
        super::callbacks::show,
        super::outbox::sinks,
        super::bill_reads::get_station_month,
        health,
        metrics,
        openapi
    ),
    components(schemas(
        super::problem::ProblemBody,
        crate::store::EventView,
        super::wallets::CommandResponse,
        super::wallets::WalletView,
        super::wallets::BlockView,
        super::streams::EventsPage,
        super::wallets::LedgerPage,
        crate::projection::LedgerEntry,
        crate::projection::ProjectionStatus,
        super::affiliate::OrderView,
        super::affiliate::CommissionView,
        super::affiliate_commands::WriteResponse,
        super::affiliate_commands::IngestRequest,
        super::affiliate_commands::IngestResponse,
        super::affiliate_commands::ResolveRequest,
        crate::affiliate::IngestResult,
        super::affiliate::CommissionsPage,
        crate::rebuild::RebuildStatus,
        super::rebuilds::RebuildRequest,
        super::audit::AuditPage,
        super::audit::StateAsOf,
        super::audit::VerifyRequest,
        super::reconciliations::ReconcileRequest,
        crate::reconcile::Run,
        crate::reconcile::RunStatus,
        crate::reconcile::Report,
        crate::reconcile::ProjectionChecked,
        crate::reconcile::Counts,
        crate::reconcile::Finding,
        crate::reconcile::FindingClass,
        crate::reconcile::FindingKind,
        crate::reconcile::EventRef,
        crate::reconcile::RepairOutcome,
        super::jobs::JobsPage,
        super::jobs::RetryRequest,
        super::jobs::PauseRequest,
        super::jobs::PauseState,
        crate::jobs::ops::JobSummary,
        crate::jobs::ops::JobView,
        crate::jobs::ops::JobLevels,
        crate::jobs::ops::SchedulerLevel,
        crate::jobs::ops::RoundLevel,
        crate::jobs::ops::BusinessLevel,
        crate::jobs::JobStatus,
        crate::jobs::engine::RunReport,
        crate::jobs::cron::CronStatus,
        crate::jobs::cron::LeaseView,
        crate::jobs::cron::ScheduleView,
        crate::jobs::cron::FiringView,
        super::callbacks::CallbackReceipt,
        super::callbacks::CallbackView,
        super::callbacks::CallbacksPage,
        super::callbacks::CallbackDetail,
        crate::callbacks::VerifyStatus,
        crate::callbacks::HandleStatus,
        crate::outbox::OutboxStatus,
        crate::outbox::SinkStatus
    )),
    modifiers(&BearerAuth, &ErrorContract)
)]
pub struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// A stuck projector as `/health` reports it.
#[derive(Debug, serde::Serialize)]
struct StuckProjector<'a> {
    name: &'a str,
    last_error: Option<&'a str>,
    error_position: Option<i64>,
    /// The last event it applied.
    position: i64,
    /// Events behind the head.
    lag: i64,
    failing_since_ms: Option<i64>,
}

/// Liveness, database reachability and projector health (no authentication): 200
/// `{"status":"ok"}`, or 503 `{"status":"degraded","projectors":[…]}` while a
/// projector is stuck — stopped at one event for the stall threshold, the moment its
/// `projection.stalled` alert is raised (issue 14 item 4). A money view that stopped
/// is not a healthy service even though every request still answers.
#[utoipa::path(get, path = "/health", responses(
    (status = 200, description = "The service and its database answer; every projector moves"),
    (status = 503, description = "{status: degraded, projectors: [{name, last_error, error_position, position, lag, failing_since_ms}]}")))]
pub async fn health(State(state): State<AppState>) -> Result<impl IntoResponse, Problem> {
    let head = state.store.head_position().await?;
    let statuses: Vec<crate::projection::ProjectionStatus> = state
        .projection_statuses
        .iter()
        .map(|s| {
            s.lock()
                .map(|s| s.clone())
                .unwrap_or_else(|p| p.into_inner().clone())
        })
        .collect();
    let stuck: Vec<StuckProjector> = statuses
        .iter()
        .filter(|s| s.stuck)
        .map(|s| StuckProjector {
            name: &s.name,
            last_error: s.last_error.as_deref(),
            error_position: s.error_position,
            position: s.position,
            lag: head.saturating_sub(s.position),
            failing_since_ms: s.failing_since_ms,
        })
        .collect();
    let (status, body) = if stuck.is_empty() {
        (
            StatusCode::OK,
            serde_json::json!({"status": "ok", "database": state.store.backend(),
                               "head_position": head}),
        )
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({"status": "degraded", "database": state.store.backend(),
                               "head_position": head, "projectors": stuck}),
        )
    };
    Ok((status, Json(body)))
}

/// Each projector's position, lag and last error.
#[utoipa::path(get, path = "/v1/projections", responses((status = 200, body = [crate::projection::ProjectionStatus])), security(("bearer" = [])))]
pub async fn projections(
    State(state): State<AppState>,
    _caller: super::Caller,
) -> Json<Vec<crate::projection::ProjectionStatus>> {
    Json(
        state
            .projection_statuses
            .iter()
            .map(|s| {
                s.lock()
                    .map(|s| s.clone())
                    .unwrap_or_else(|p| p.into_inner().clone())
            })
            .collect(),
    )
}

#[utoipa::path(get, path = "/metrics", responses((status = 200, content_type = "text/plain", body = String, description = "Prometheus text format"), (status = 401, body = super::ProblemBody), (status = 403, body = super::ProblemBody)), security(("bearer" = [])))]
/// Prometheus text exposition on the main listener: for admin, operator and auditor
/// keys (monitoring is operations, and reading it changes nothing); a service key,
/// which sends business commands, is refused. Scrapers without a key use
/// `serve --metrics-listen` on a private address instead.
pub async fn metrics(
    State(state): State<AppState>,
    caller: super::Caller,
) -> Result<impl IntoResponse, Problem> {
    use crate::auth::Role;
    let role = caller.principal.role;
    if !matches!(role, Role::Admin | Role::Operator | Role::Auditor) {
        return Err(Problem::forbidden(&format!(
            "role {role} may not read /metrics: it is for admin, operator and auditor keys"
        )));
    }
    Ok(exposition(&state.metrics))
}

/// `/metrics` on the `--metrics-listen` address: no authentication.
pub async fn open_metrics(
    State(metrics): State<metrics_exporter_prometheus::PrometheusHandle>,
) -> impl IntoResponse {
    exposition(&metrics)
}

fn exposition(metrics: &metrics_exporter_prometheus::PrometheusHandle) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        metrics.render(),
    )
}

/// This document. Every route the router serves is in it (checked by
/// `tests/role_matrix.rs` against `router`'s `.route(` list).
#[utoipa::path(get, path = "/openapi.json", responses((status = 200, description = "OpenAPI 3.1 document", body = Object)))]
pub async fn openapi() -> impl IntoResponse {
    Json(ApiDoc::openapi())
}
