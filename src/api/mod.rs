//! The HTTP API (axum, JSON). **Architecture invariant:** only this module knows about
//! HTTP, headers and JSON request shapes; below it everything is typed commands.

mod affiliate;
mod affiliate_commands;
mod audit;
mod bill_reads;
mod bill_refresh;
mod bills;
mod body;
mod callbacks;
pub mod conn;
mod contract;
mod cron;
mod jobs;
pub mod limits;
mod outbox;
mod problem;
mod query;
mod rebuilds;
mod reconciliations;
mod streams;
mod system;
mod wallets;

pub use problem::{Problem, ProblemBody};

use crate::auth::{KeyStore, Principal};
use crate::bus::CommandBus;
use crate::store::{DynStore, Metadata};
use axum::extract::{FromRequestParts, MatchedPath, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use factledger_aggregates::wallet::Wallet;
use metrics_exporter_prometheus::PrometheusHandle;
use std::sync::Arc;
use std::time::Instant;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

/// Largest request body accepted (413 beyond).
pub const BODY_BYTES_MAX: usize = 64 * 1024;

pub static REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// ISO 3166 country (data centre) recorded on every event (R-INV-11).
    pub country_code: String,
    /// The anchor file verify compares the log with and new anchors are appended to.
    pub anchor_file: Option<std::path::PathBuf>,
}

#[derive(Clone)]
pub struct AppState {
    pub store: DynStore,
    pub projections: crate::projection::ProjectionDb,
    /// Every projector's status, the wallet's first (`GET /v1/projections`).
    pub projection_statuses: Arc<Vec<crate::projection::SharedStatus>>,
    pub keys: KeyStore,
    pub wallets: CommandBus<Wallet>,
    pub config: Arc<ServiceConfig>,
    pub metrics: PrometheusHandle,
    /// The job engine (its background loop lives as long as any clone of the state).
    pub jobs: crate::jobs::Engine,
    pub background: Arc<crate::server::Background>,
    /// Callback providers (`POST /v1/callbacks/{provider}`).
    pub callbacks: crate::callbacks::Registry,
    /// The HTTP limits and the per-key rate buckets.
    pub limits: Arc<limits::Limits>,
}

pub fn router(state: AppState) -> Router {
    let request_timeout = std::time::Duration::from_millis(state.limits.http.request_timeout_ms);
    Router::new()
        .route("/health", get(system::health))
        .route("/metrics", get(system::metrics))
        .route("/openapi.json", get(system::openapi))
        .route("/v1/wallets/{wallet_id}", get(wallets::get_wallet))
        .route("/v1/wallets/{wallet_id}/ledger", get(wallets::get_ledger))
        .route("/v1/projections", get(system::projections))
        .route(
            "/v1/orders/{platform}/{platform_order_id}",
            get(affiliate::get_order).post(affiliate_commands::post_on_order),
        )
        .route(
            "/v1/orders:ingest",
            post(affiliate_commands::ingest).layer(axum::extract::DefaultBodyLimit::max(
                affiliate_commands::INGEST_BODY_BYTES_MAX,
            )),
        )
        .route(
            "/v1/bills/{station_id}/{yyyymm}",
            get(bill_reads::get_station_month),
        )
        .route("/v1/commissions", get(affiliate::list_commissions))
        .route(
            "/v1/commissions/{commission_id}",
            post(affiliate_commands::post_on_commission),
        )
        .route(
            "/v1/commission-rules/{rule_set_id}/versions",
            post(affiliate_commands::add_rule_version),
        )
        .route(
            "/v1/affiliate-links",
            post(affiliate_commands::register_link),
        )
        .route(
            "/v1/users/{user_id}/inviter",
            post(affiliate_commands::set_inviter),
        )
        .route(
            "/v1/campaigns/{campaign_id}",
            post(affiliate_commands::open_campaign),
        )
        .route("/v1/bills:refresh", post(bill_refresh::submit))
        .route("/v1/bills/inspections", get(bill_refresh::inspections))
        .route(
            "/v1/bills/order-status-conflicts",
            get(bill_reads::order_status_conflicts),
        )
        .route("/v1/bills/small-bills", post(bills::record_small_bill))
        .route("/v1/bills/diffs", post(bills::record_diff))
        .route("/v1/bills/partner-bills", post(bills::record_partner_bill))
        .route(
            "/v1/bills/partner-bills/{partner_bill_id}",
            post(bills::post_on_partner_bill),
        )
        .route("/v1/bills/reference/{kind}", post(bills::record_reference))
        .route("/v1/bills/locks", post(bills::reserve_lock))
        .route(
            "/v1/bills/locks/{station_id}/{month}/{lock_id}",
            post(bills::post_on_lock),
        )
        .route(
            "/v1/bills/payment-results",
            post(bills::record_payment_result),
        )
        .route(
            "/v1/bills/payment-results/{result_id}",
            post(bills::post_on_payment_result),
        )
        .route("/v1/payment-orders", post(bills::create_payment_order))
        .route(
            "/v1/payment-orders/{order_id}",
            post(bills::post_on_payment_order),
        )
        .route("/v1/payment-orders/{order_id}/lines", post(bills::add_line))
        .route(
            "/v1/payment-orders/{order_id}/lines/{line_id}",
            post(bills::post_on_line),
        )
        .route("/v1/projections/{name}/rebuild", post(rebuilds::start))
        .route("/v1/projections/rebuilds/{id}", get(rebuilds::status))
        .route("/v1/reconciliations", post(reconciliations::start))
        .route("/v1/reconciliations/{id}", get(reconciliations::get))
        .route(
            "/v1/reconciliations/{id}/report.html",
            get(reconciliations::report_html),
        )
        .route("/v1/jobs", get(jobs::list))
        .route("/v1/jobs:retry", post(jobs::retry))
        .route("/v1/jobs:pause", post(jobs::pause))
        .route("/v1/jobs:resume", post(jobs::resume))
        .route("/v1/jobs/{code}", get(jobs::show).post(jobs::post_on_job))
        .route("/v1/cron", get(cron::status))
        .route("/v1/outbox/sinks", get(outbox::sinks))
        .route("/v1/callbacks", get(callbacks::list))
        // No bearer key on the POST: providers authenticate by signature or token.
        .route(
            "/v1/callbacks/{provider_or_id}",
            get(callbacks::show).post(callbacks::receive),
        )
        .route("/v1/audit/events", get(audit::events))
        .route("/v1/audit/verify", post(audit::verify))
        .route(
            "/v1/audit/anchors",
            get(audit::list_anchors).post(audit::create_anchor),
        )
        .route(
            "/v1/streams/{aggregate_type}/{aggregate_id}/state",
            get(audit::state_as_of),
        )
        .route(
            "/v1/wallets/{wallet_id}/commands",
            post(wallets::post_command),
        )
        .route(
            "/v1/streams/{aggregate_type}/{aggregate_id}/events",
            get(streams::get_events),
        )
        .layer(axum::extract::DefaultBodyLimit::max(BODY_BYTES_MAX))
        .layer(axum::middleware::from_fn_with_state(
            request_timeout,
            limits::request_timeout,
        ))
        .layer(axum::middleware::from_fn(track_metrics))
        .layer(PropagateRequestIdLayer::new(REQUEST_ID.clone()))
        .layer(TraceLayer::new_for_http().make_span_with(|req: &Request| {
            let request_id = req
                .headers()
                .get(&REQUEST_ID)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            tracing::info_span!("http", method = %req.method(), uri = %req.uri(), request_id)
        }))
        .layer(SetRequestIdLayer::new(REQUEST_ID.clone(), MakeRequestUuid))
        .with_state(state)
}

/// `/metrics` alone, unauthenticated: what `serve --metrics-listen` serves on its own
/// address (meant for a private network; the main listener asks for a key).
pub fn metrics_router(metrics: PrometheusHandle) -> Router {
    Router::new()
        .route("/metrics", get(system::open_metrics))
        .with_state(metrics)
}

/// The `method` label: the standard methods by name, anything else as `OTHER`, so
/// a client inventing methods cannot mint label sets (issue 14, F1). The `route`
/// label is the matched route template or `unmatched`, never the raw path.
fn method_label(method: &axum::http::Method) -> &'static str {
    use axum::http::Method;
    const KNOWN: [(Method, &str); 9] = [
        (Method::GET, "GET"),
        (Method::POST, "POST"),
        (Method::PUT, "PUT"),
        (Method::DELETE, "DELETE"),
        (Method::PATCH, "PATCH"),
        (Method::HEAD, "HEAD"),
        (Method::OPTIONS, "OPTIONS"),
        (Method::CONNECT, "CONNECT"),
        (Method::TRACE, "TRACE"),
    ];
    KNOWN
        .iter()
        .find(|(m, _)| m == method)
        .map_or("OTHER", |(_, name)| name)
}

async fn track_metrics(req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = method_label(req.method());
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".to_owned());
    let response = next.run(req).await;
    let status = response.status().as_u16().to_string();
    metrics::counter!("factledger_http_requests_total", "method" => method, "route" => route.clone(), "status" => status)
        .increment(1);
    metrics::histogram!("factledger_http_request_duration_seconds", "method" => method, "route" => route)
        .record(started.elapsed().as_secs_f64());
    response
}

/// The authenticated caller of a request and the request's tracing context.
#[derive(Debug, Clone)]
pub struct Caller {
    pub principal: Principal,
    pub request_id: String,
    pub correlation_id: String,
    pub causation_id: Option<String>,
    pub trace_id: String,
}

impl Caller {
    /// Refuse callers whose role may not change money.
    pub fn require_write(&self) -> Result<(), Problem> {
        if self.principal.role.can_write() {
            Ok(())
        } else {
            Err(Problem::forbidden(&format!(
                "role {} may read but not send commands",
                self.principal.role
            )))
        }
    }

    /// Refuse callers whose role may not take operator actions (service, auditor):
    /// 403 naming the roles that may.
    pub fn require_operator(&self, action: &str) -> Result<(), Problem> {
        if self.principal.role.can_operate() {
            Ok(())
        } else {
            Err(Problem::forbidden(&format!(
                "{action} is an operator action: it needs role operator or admin, and \
                 this key's role is {}",
                self.principal.role
            )))
        }
    }

    /// Record an accepted operator or admin action as an event (`crate::admin_log`);
    /// a record that cannot be written fails the request.
    pub async fn record_admin(
        &self,
        state: &AppState,
        action: factledger_aggregates::admin_action::AdminAction,
        target: &str,
        reason: Option<&str>,
        detail: Option<String>,
    ) -> Result<(), Problem> {
        let metadata = self.metadata(&state.config.country_code, None);
        crate::admin_log::record(&state.store, &metadata, action, target, reason, detail)
            .await
            .map(|_| ())
            .map_err(|e| Problem::internal(e.to_string()))
    }

    pub fn metadata(&self, country_code: &str, command_id: Option<String>) -> Metadata {
        Metadata {
            correlation_id: self.correlation_id.clone(),
            causation_id: self.causation_id.clone(),
            command_id,
            actor: self.principal.actor(),
            request_id: self.request_id.clone(),
            trace_id: self.trace_id.clone(),
            country_code: country_code.to_owned(),
        }
    }
}

/// The `limit` of a paged read: default [`streams::PAGE_EVENTS_DEFAULT`], at most
/// `READ_LIMIT_MAX`.
pub(crate) fn page_limit(limit: Option<i64>) -> Result<i64, Problem> {
    let limit = limit.unwrap_or(streams::PAGE_EVENTS_DEFAULT);
    let max = crate::store::READ_LIMIT_MAX;
    if !(1..=max).contains(&limit) {
        return Err(Problem::invalid(
            "INVALID_FIELD",
            "limit",
            format!("must be between 1 and {max}"),
        ));
    }
    Ok(limit)
}

/// Wait (bounded) until the checkpoint `name` has applied `min_position`, when asked
/// (read-your-writes); the position the projection reflects. Not there in time: 503
/// `PROJECTION_BEHIND` naming `min_position`. Every read of a projection takes it.
pub(crate) async fn reflected(
    state: &AppState,
    name: &str,
    version: i32,
    min_position: Option<i64>,
) -> Result<i64, Problem> {
    let wanted = min_position.unwrap_or(0);
    if wanted < 0 {
        return Err(Problem::invalid(
            "INVALID_FIELD",
            "min_position",
            "must not be negative",
        ));
    }
    let position = crate::projector::wait_for_checkpoint(&state.projections, name, version, wanted)
        .await
        .map_err(|e| Problem::internal(e.to_string()))?;
    if position < wanted {
        return Err(Problem::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "PROJECTION_BEHIND",
            format!("the {name} projection is at position {position}, not yet at {wanted}; retry"),
        )
        .field("min_position"));
    }
    Ok(position)
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty() && v.len() <= 128 && v.bytes().all(|b| b.is_ascii_graphic()))
        .map(str::to_owned)
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Problem> {
        let headers = &parts.headers;
        let auth = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| Problem::unauthorized("missing Authorization: Bearer <api key>"))?;
        let secret = auth
            .strip_prefix("Bearer ")
            .map(str::trim)
            .filter(|s| !s.is_empty() && s.len() <= 256)
            .ok_or_else(|| Problem::unauthorized("Authorization must be `Bearer <api key>`"))?;
        let principal = state
            .keys
            .authenticate(secret)
            .await
            .map_err(|e| match e.downcast_ref::<sqlx::Error>() {
                Some(s) if crate::store::is_connection_failure(s) => {
                    Problem::database_unavailable()
                }
                _ => Problem::internal(format!("key lookup failed: {e:#}")),
            })?
            .ok_or_else(|| Problem::unauthorized("unknown or revoked API key"))?;
        state
            .limits
            .rate
            .check(&principal.key_id)
            .map_err(limits::rate_limited)?;
        let request_id = header(headers, REQUEST_ID.as_str())
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        // W3C traceparent: 00-<32 hex trace id>-<16 hex parent>-<flags>.
        let trace_id = header(headers, "traceparent")
            .and_then(|t| t.split('-').nth(1).map(str::to_owned))
            .filter(|t| t.len() == 32)
            .unwrap_or_else(|| request_id.replace('-', ""));
        tracing::Span::current().record("actor", principal.actor());
        Ok(Caller {
            correlation_id: header(headers, "x-correlation-id")
                .unwrap_or_else(|| request_id.clone()),
            causation_id: header(headers, "x-causation-id"),
            principal,
            request_id,
            trace_id,
        })
    }
}
