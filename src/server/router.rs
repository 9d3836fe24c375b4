//! The service's HTTP router: every capability's routes merged, under one stack of
//! layers (body limit, request timeout, metrics, request ids, tracing), and the
//! operator console, which calls the API router in-process.

use super::system;
use crate::runtime::http::{limits, track_metrics, AppState, BODY_BYTES_MAX, REQUEST_ID};
use axum::extract::Request;
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

pub fn router(state: AppState) -> Router {
    let request_timeout = std::time::Duration::from_millis(state.limits.http.request_timeout_ms);
    let api = api(state);
    let console = crate::console::routes(api.1, api.0.clone());
    api.0
        .merge(console)
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
}

/// The JSON API with its state (what the console calls in-process), and the state.
fn api(state: AppState) -> (Router, AppState) {
    let api = Router::new()
        .route("/health", get(system::health))
        .route("/metrics", get(system::metrics))
        .route("/openapi.json", get(system::openapi))
        .route("/v1/projections", get(system::projections))
        .merge(crate::wallet::routes())
        .merge(crate::affiliate::routes())
        .merge(crate::bill::routes())
        .merge(crate::ledger::routes())
        .merge(crate::callbacks::routes())
        .merge(crate::audit::routes())
        .merge(crate::ops::routes())
        .merge(crate::payouts::routes())
        .merge(crate::services::routes())
        .layer(axum::extract::DefaultBodyLimit::max(BODY_BYTES_MAX))
        .with_state(state.clone());
    (api, state)
}

/// `/metrics` alone, unauthenticated: what `serve --metrics-listen` serves on its own
/// address (meant for a private network; the main listener asks for a key).
pub fn metrics_router(metrics: PrometheusHandle) -> Router {
    Router::new()
        .route("/metrics", get(system::open_metrics))
        .with_state(metrics)
}
