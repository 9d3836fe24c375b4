//! The HTTP API (axum, JSON). **Architecture invariant:** only this module knows about
//! HTTP, headers and JSON request shapes; below it everything is typed commands.

pub mod body;
pub mod conn;
pub mod contract;
pub mod headers;
pub mod limits;
pub mod partition;
pub mod problem;
pub mod query;

pub use problem::{Problem, ProblemBody};

use crate::infra::auth::{KeyStore, Principal};
use crate::infra::store::{DynStore, Metadata};
use crate::runtime::bus::CommandBus;
use axum::extract::{FromRequestParts, MatchedPath, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName};
use axum::middleware::Next;
use axum::response::Response;
use factledger_aggregates::wallet::Wallet;
use metrics_exporter_prometheus::PrometheusHandle;
use std::sync::Arc;
use std::time::Instant;

/// A paged read's `limit` when the request names none.
pub const PAGE_EVENTS_DEFAULT: i64 = 100;

/// Largest request body accepted (413 beyond).
pub const BODY_BYTES_MAX: usize = 64 * 1024;

pub static REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// ISO 3166 country (data centre) recorded on every event (R-INV-11).
    pub country_code: String,
    /// Whether this deployment is one partition of several (`serve --partitions`):
    /// a country a request states must then be this one (`partition.rs`).
    pub partitioned: bool,
    /// The anchor file verify compares the log with and new anchors are appended to.
    pub anchor_file: Option<std::path::PathBuf>,
}

#[derive(Clone)]
pub struct AppState {
    pub store: DynStore,
    /// The database handle (projection rows, checkpoints, keys, jobs).
    pub db: crate::infra::db::Db,
    /// Every projector's status, the wallet's first (`GET /v1/projections`).
    pub projection_statuses: Arc<Vec<crate::runtime::projection::SharedStatus>>,
    pub keys: KeyStore,
    pub wallets: CommandBus<Wallet>,
    pub config: Arc<ServiceConfig>,
    pub metrics: PrometheusHandle,
    /// The job engine (its background loop lives as long as any clone of the state).
    pub jobs: crate::infra::jobs::Engine,
    /// The cron scheduler (`GET /v1/cron` reads through it).
    pub cron: crate::infra::jobs::cron::Scheduler,
    /// What the composition root started in the background (engine, cron, outbox
    /// relay, anchors): kept alive as long as any clone of the state.
    pub background: Arc<dyn std::any::Any + Send + Sync>,
    /// State a capability owns and the composition root hands in (e.g. the callback
    /// providers), found by type: the runtime names no capability. See [`AppState::part`].
    pub parts: Arc<axum::http::Extensions>,
    /// The HTTP limits and the per-key rate buckets.
    pub limits: Arc<limits::Limits>,
    /// Where wallet, journal and audit reads are served from: a read replica
    /// (`serve --read-database-url`, issue 21) or the primary's `db`/`store`. A
    /// replica lags: those reads wait for `min_position` on the replica itself
    /// ([`replica_caught_up`]).
    pub read_db: crate::infra::db::Db,
    pub read_store: DynStore,
}

/// Wait (bounded by `MIN_POSITION_WAIT_MS_MAX`) until the read side's log holds
/// `min_position`: a replica's head lags the primary's. 503 `REPLICA_BEHIND` when it
/// does not get there in time (the client retries, or reads without the position).
pub async fn replica_caught_up(state: &AppState, min_position: Option<i64>) -> Result<(), Problem> {
    let Some(wanted) = min_position else {
        return Ok(());
    };
    if wanted < 0 {
        return Err(Problem::invalid(
            "INVALID_FIELD",
            "min_position",
            "must not be negative",
        ));
    }
    let deadline = Instant::now()
        + std::time::Duration::from_millis(crate::runtime::projection::MIN_POSITION_WAIT_MS_MAX);
    loop {
        let head = state.read_store.head_position().await?;
        if head >= wanted {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Problem::new(
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                "REPLICA_BEHIND",
                format!(
                    "the log read here is at position {head}, not yet at {wanted} (a read \
                     replica lags the primary); retry"
                ),
            )
            .field("min_position")
            .retry_after(1));
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
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

impl AppState {
    /// Whether reads are served from a read replica (not the primary).
    pub fn reads_from_replica(&self) -> bool {
        !Arc::ptr_eq(&self.store, &self.read_store)
    }

    /// The capability state of type `T` that the composition root put in `parts`; a
    /// missing one is a wiring fault, answered as a 500 rather than a panic.
    pub fn part<T: Clone + Send + Sync + 'static>(&self) -> Result<&T, Problem> {
        self.parts.get::<T>().ok_or_else(|| {
            Problem::internal(format!(
                "{} is not wired into the service",
                std::any::type_name::<T>()
            ))
        })
    }
}

pub async fn track_metrics(req: Request, next: Next) -> Response {
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

    /// Record an accepted operator or admin action as an event (`crate::runtime::admin_log`);
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
        crate::runtime::admin_log::record(&state.store, &metadata, action, target, reason, detail)
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

/// The `limit` of a paged read: default [`PAGE_EVENTS_DEFAULT`], at most
/// `READ_LIMIT_MAX`.
pub(crate) fn page_limit(limit: Option<i64>) -> Result<i64, Problem> {
    let limit = limit.unwrap_or(PAGE_EVENTS_DEFAULT);
    let max = crate::infra::store::READ_LIMIT_MAX;
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
    reflected_on(&state.db, name, version, min_position).await
}

/// [`reflected`] on a given database: the read side (`AppState::read_db`) for reads
/// a replica serves.
pub(crate) async fn reflected_on(
    db: &crate::infra::db::Db,
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
    let position = crate::runtime::projector::wait_for_checkpoint(db, name, version, wanted)
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

/// Count a failed authentication from `addr` on `surface` (`api`, `console`): the
/// address's throttle, the metric, and the alert when the minute's failures pass the
/// threshold (raised in the background: a refusal never waits for the outbox). See
/// [`limits`].
pub fn auth_failed(state: &AppState, addr: Option<std::net::IpAddr>, surface: &'static str) {
    let count = state.limits.auth_failures.failed(addr, surface);
    tracing::warn!(surface, client = ?addr, this_minute = count.this_minute, "authentication failed");
    if !count.alert {
        return;
    }
    let alert = crate::infra::alerts::Alert {
        kind: crate::infra::alerts::AlertKind::AuthFailures,
        subject: surface.to_owned(),
        message: format!(
            "{} failed authentications in the last minute (the latest from {}, on the {surface}): \
             someone may be guessing API keys",
            count.this_minute,
            addr.map_or_else(|| "an in-process caller".to_owned(), |a| a.to_string())
        ),
        job: None,
        platform: None,
        business_id: None,
        user_affiliate_code: None,
        request_id: None,
        trace_id: None,
        first_failure_at_ms: None,
        retry_count: Some(i64::from(count.this_minute)),
        audit_path: "/metrics".to_owned(),
    };
    let (store, context) = (state.store.clone(), state.jobs.config().alerts.clone());
    tokio::spawn(async move {
        if let Err(e) = crate::infra::alerts::raise(&store, &context, &alert).await {
            tracing::error!(error = %e, "the auth.failures alert could not be written");
        }
    });
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Problem> {
        let addr = parts
            .extensions
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .map(|c| c.0.ip());
        state
            .limits
            .auth_failures
            .throttled(addr)
            .map_err(limits::auth_throttled)?;
        let headers = &parts.headers;
        let auth = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| Problem::unauthorized("missing Authorization: Bearer <api key>"))?;
        let secret = auth
            .strip_prefix("Bearer ")
            .map(str::trim)
            .filter(|s| !s.is_empty() && s.len() <= 256)
            .ok_or_else(|| {
                auth_failed(state, addr, "api");
                Problem::unauthorized("Authorization must be `Bearer <api key>`")
            })?;
        let principal = state
            .keys
            .authenticate(secret)
            .await
            .map_err(|e| match e.downcast_ref::<sqlx::Error>() {
                Some(s) if crate::infra::store::is_connection_failure(s) => {
                    Problem::database_unavailable()
                }
                _ => Problem::internal(format!("key lookup failed: {e:#}")),
            })?
            .ok_or_else(|| {
                auth_failed(state, addr, "api");
                Problem::unauthorized("unknown or revoked API key")
            })?;
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

/// A path id (`field` names it in the problem).
pub(crate) fn parse_id(
    field: &str,
    raw: &str,
) -> Result<factledger_aggregates::BoundedId, Problem> {
    factledger_aggregates::BoundedId::parse(raw)
        .map_err(|e| Problem::invalid("INVALID_FIELD", field, e.rule))
}

/// What a command wrote.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct WriteResponse {
    pub events: Vec<crate::infra::store::EventView>,
    /// Global position of the last event (0 when nothing new was written): pass it
    /// as `min_position` to read your write.
    pub position: i64,
}

/// Longest accepted `Idempotency-Key`.
pub const IDEMPOTENCY_KEY_LEN_MAX: usize = 128;

/// The request's `Idempotency-Key`, if it sent one (see [`check_idempotency_key`]).
pub fn idempotency_key(headers: &axum::http::HeaderMap) -> Result<Option<String>, Problem> {
    let Some(v) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let key = v.to_str().ok().map(str::trim).unwrap_or("");
    check_idempotency_key("Idempotency-Key", key).map(Some)
}

/// An idempotency key: 1 to [`IDEMPOTENCY_KEY_LEN_MAX`] visible ASCII characters;
/// `field` names where it came from.
pub fn check_idempotency_key(field: &str, key: &str) -> Result<String, Problem> {
    let ok = !key.is_empty()
        && key.len() <= IDEMPOTENCY_KEY_LEN_MAX
        && key.bytes().all(|b| b.is_ascii_graphic());
    if !ok {
        return Err(Problem::invalid(
            "INVALID_FIELD",
            field,
            format!("must be 1 to {IDEMPOTENCY_KEY_LEN_MAX} visible ASCII characters"),
        ));
    }
    Ok(key.to_owned())
}

/// Split a path segment `<id>:<action>` (the id may hold `:` itself); an action not
/// in `actions` is 404 naming the route's shape, e.g. `POST /v1/withdrawals/{withdrawal_id}:<action>`.
pub fn path_action<'a>(
    tail: &'a str,
    actions: &[&str],
    route: &str,
    field: &str,
) -> Result<(&'a str, &'a str), Problem> {
    tail.rsplit_once(':')
        .filter(|(id, action)| !id.is_empty() && actions.contains(action))
        .ok_or_else(|| {
            Problem::new(
                axum::http::StatusCode::NOT_FOUND,
                "NOT_FOUND",
                format!(
                    "no such action: POST {route}/{{{field}}}:<action>, action one of {}",
                    actions.join(", ")
                ),
            )
        })
}
