//! Health, metrics and the OpenAPI document.

use crate::runtime::http::contract::ErrorContract;
use crate::runtime::http::{AppState, Problem};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use utoipa::OpenApi;

#[derive(OpenApi)]
#[openapi(
    info(title = "factledger", description = "Event-sourced money ledger"),
    paths(
        crate::wallet::api::post_command,
        crate::wallet::batch::post_batch,
        crate::wallet::api::get_wallet,
        crate::audit::streams::get_events,
        crate::wallet::api::get_ledger,
        projections,
        crate::affiliate::api::get_order,
        crate::affiliate::api::list_commissions,
        crate::affiliate::api_commands::ingest,
        crate::affiliate::api_commands::post_on_commission,
        crate::affiliate::api_commands::post_on_order,
        crate::affiliate::api_commands::add_rule_version,
        crate::affiliate::api_commands::register_link,
        crate::affiliate::api_commands::set_inviter,
        crate::affiliate::api_commands::open_campaign,
        crate::bill::api::record_small_bill,
        crate::bill::api_refresh::submit,
        crate::bill::api_refresh::inspections,
        crate::bill::api_reads::order_status_conflicts,
        crate::bill::api::record_diff,
        crate::bill::api::record_partner_bill,
        crate::bill::api::post_on_partner_bill,
        crate::bill::api::record_reference,
        crate::bill::api::create_payment_order,
        crate::bill::api::post_on_payment_order,
        crate::bill::api::add_line,
        crate::bill::api::post_on_line,
        crate::bill::api::reserve_lock,
        crate::bill::api::post_on_lock,
        crate::bill::api::record_payment_result,
        crate::bill::api::post_on_payment_result,
        crate::ops::rebuilds::start,
        crate::ops::rebuilds::status,
        crate::audit::api::events,
        crate::audit::api::event_at,
        crate::audit::api::state_as_of,
        crate::audit::api::verify,
        crate::audit::api::list_anchors,
        crate::audit::api::create_anchor,
        crate::ops::reconciliations::start,
        crate::ops::reconciliations::get,
        crate::ops::reconciliations::report_html,
        crate::ops::jobs::list,
        crate::ops::jobs::show,
        crate::ops::jobs::post_on_job,
        crate::ops::jobs::retry,
        crate::ops::jobs::pause,
        crate::ops::jobs::resume,
        crate::ops::cron::status,
        crate::callbacks::api::receive,
        crate::callbacks::api::list,
        crate::callbacks::api::show,
        crate::ops::outbox::sinks,
        crate::ops::outbox::dead_letters,
        crate::ops::outbox::post_on_dead_letter,
        crate::bill::api_reads::get_station_month,
        crate::ledger::api::trial_balance,
        crate::ledger::api::account,
        crate::payouts::api::request,
        crate::payouts::api::post_on_withdrawal,
        crate::payouts::api::get_withdrawal,
        crate::payouts::api::list_withdrawals,
        crate::payouts::api_profile::set_password,
        crate::payouts::api_profile::set_kyc,
        crate::payouts::api_profile::register_account,
        crate::payouts::api_profile::verify_account,
        crate::payouts::api_profile::get_profile,
        crate::services::api::create_order,
        crate::services::api::show_order,
        crate::services::api::order_action,
        crate::services::api::book,
        crate::services::api::booking_action,
        crate::services::reads::show_booking,
        crate::services::reads::show_refund,
        crate::services::reads::show_candy,
        crate::services::reads::list_subscriptions,
        health,
        metrics,
        openapi
    ),
    components(schemas(
        crate::runtime::http::problem::ProblemBody,
        crate::ledger::api::TrialBalance,
        crate::ledger::api::CurrencyTotals,
        crate::ledger::api::AccountStatement,
        crate::ledger::api::JournalEntry,
        crate::infra::store::EventView,
        crate::wallet::api::CommandResponse,
        crate::wallet::batch::BatchRequest,
        crate::wallet::batch::BatchItem,
        crate::wallet::batch::BatchItemResult,
        crate::wallet::batch::BatchResponse,
        crate::wallet::api::WalletView,
        crate::wallet::api::BlockView,
        crate::wallet::api::FreezeView,
        crate::payouts::api::WithdrawalRequestBody,
        crate::payouts::api::ReviewBody,
        crate::payouts::reads::WithdrawalDetail,
        crate::payouts::reads::AttemptView,
        crate::payouts::reads::WithdrawalsPage,
        crate::payouts::reads::WithdrawalRow,
        crate::payouts::api_profile::PasswordBody,
        crate::payouts::api_profile::KycBody,
        crate::payouts::api_profile::AccountBody,
        crate::payouts::api_profile::ProfileView,
        crate::payouts::api_profile::AccountView,
        crate::services::api::OrderBody,
        crate::services::api::BusinessBody,
        crate::services::api::BookingBody,
        crate::services::api::BookingActionBody,
        crate::audit::streams::EventsPage,
        crate::wallet::api::LedgerPage,
        crate::runtime::projection::LedgerEntry,
        crate::runtime::projection::ProjectionStatus,
        crate::affiliate::api::OrderView,
        crate::affiliate::api::CommissionView,
        crate::runtime::http::WriteResponse,
        crate::affiliate::api_commands::IngestRequest,
        crate::affiliate::api_commands::IngestResponse,
        crate::affiliate::api_commands::ResolveRequest,
        crate::affiliate::IngestResult,
        crate::affiliate::api::CommissionsPage,
        crate::runtime::rebuild::RebuildStatus,
        crate::ops::rebuilds::RebuildRequest,
        crate::audit::api::AuditPage,
        crate::audit::api::StateAsOf,
        crate::audit::api::VerifyRequest,
        crate::ops::reconciliations::ReconcileRequest,
        crate::runtime::reconcile::Run,
        crate::runtime::reconcile::RunStatus,
        crate::runtime::reconcile::Report,
        crate::runtime::reconcile::ProjectionChecked,
        crate::runtime::reconcile::Counts,
        crate::runtime::reconcile::Finding,
        crate::runtime::reconcile::FindingClass,
        crate::runtime::reconcile::FindingKind,
        crate::runtime::reconcile::EventRef,
        crate::runtime::reconcile::RepairOutcome,
        crate::ops::jobs::JobsPage,
        crate::ops::jobs::RetryRequest,
        crate::ops::jobs::PauseRequest,
        crate::ops::jobs::PauseState,
        crate::infra::jobs::ops::JobSummary,
        crate::infra::jobs::ops::JobView,
        crate::infra::jobs::ops::JobLevels,
        crate::infra::jobs::ops::SchedulerLevel,
        crate::infra::jobs::ops::RoundLevel,
        crate::infra::jobs::ops::BusinessLevel,
        crate::infra::jobs::JobStatus,
        crate::infra::jobs::engine::RunReport,
        crate::infra::jobs::cron_status::CronStatus,
        crate::infra::jobs::cron_status::LeaseView,
        crate::infra::jobs::cron_status::ScheduleView,
        crate::infra::jobs::cron_status::FiringView,
        crate::callbacks::api::CallbackReceipt,
        crate::callbacks::api::CallbackView,
        crate::callbacks::api::CallbacksPage,
        crate::callbacks::api::CallbackDetail,
        crate::callbacks::VerifyStatus,
        crate::callbacks::HandleStatus,
        crate::infra::outbox::OutboxStatus,
        crate::infra::outbox::SinkStatus,
        crate::infra::outbox::DeadLetter,
        crate::ops::outbox::DeadLettersPage
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

/// Liveness, database reachability and projector health. Without a key (load
/// balancers, probes) it says only the status: 200 `{"status":"ok"}`, 503
/// `{"status":"degraded"}` while a projector is stuck — stopped at one event for the
/// stall threshold, the moment its `projection.stalled` alert is raised (issue 14
/// item 4) — and 503 `{"status":"unavailable"}` when the database does not answer.
/// With any valid key (checked like every route's) it adds the backend, the head
/// position and the stuck projectors with their errors (issue 32 item 7: an error
/// text or a position is nothing to hand to whoever asks). A money view that stopped
/// is not a healthy service even though every request still answers.
#[utoipa::path(get, path = "/health", responses(
    (status = 200, description = "The service and its database answer; every projector moves. {status: ok}; with a key also {database, head_position}"),
    (status = 503, description = "{status: degraded | unavailable}; with a key also {database, head_position, projectors: [{name, last_error, error_position, position, lag, failing_since_ms}]}")))]
pub async fn health(
    State(state): State<AppState>,
    mut parts: axum::http::request::Parts,
) -> Result<axum::response::Response, Problem> {
    use axum::extract::FromRequestParts;
    let keyed = parts.headers.contains_key(header::AUTHORIZATION);
    if keyed {
        crate::runtime::http::Caller::from_request_parts(&mut parts, &state).await?;
    }
    let head = match state.store.head_position().await {
        Ok(head) => head,
        Err(e) if keyed => return Err(e.into()),
        Err(e) => {
            tracing::warn!(error = %e, "/health: the event store does not answer");
            let body = serde_json::json!({"status": "unavailable"});
            return Ok((StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response());
        }
    };
    let statuses: Vec<crate::runtime::projection::ProjectionStatus> = state
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
    let (status, word) = if stuck.is_empty() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "degraded")
    };
    let body = match (keyed, stuck.is_empty()) {
        (false, _) => serde_json::json!({"status": word}),
        (true, true) => serde_json::json!({"status": word, "database": state.store.backend(),
                                           "head_position": head}),
        (true, false) => serde_json::json!({"status": word, "database": state.store.backend(),
                                            "head_position": head, "projectors": stuck}),
    };
    Ok((status, Json(body)).into_response())
}

/// Each projector's position, lag and last error.
#[utoipa::path(get, path = "/v1/projections", responses((status = 200, body = [crate::runtime::projection::ProjectionStatus])), security(("bearer" = [])))]
pub async fn projections(
    State(state): State<AppState>,
    _caller: crate::runtime::http::Caller,
) -> Json<Vec<crate::runtime::projection::ProjectionStatus>> {
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

#[utoipa::path(get, path = "/metrics", responses((status = 200, content_type = "text/plain", body = String, description = "Prometheus text format"), (status = 401, body = crate::runtime::http::ProblemBody), (status = 403, body = crate::runtime::http::ProblemBody)), security(("bearer" = [])))]
/// Prometheus text exposition on the main listener: for admin, operator and auditor
/// keys (monitoring is operations, and reading it changes nothing); a service key,
/// which sends business commands, is refused. Scrapers without a key use
/// `serve --metrics-listen` on a private address instead.
pub async fn metrics(
    State(state): State<AppState>,
    caller: crate::runtime::http::Caller,
) -> Result<impl IntoResponse, Problem> {
    use crate::infra::auth::Role;
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
