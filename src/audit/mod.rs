//! Audit: the admin action log, event-history reads and the chain anchors' endpoints.

pub mod api;
pub mod streams;

/// This capability's HTTP routes; the composition root merges them (`server::router`).
pub fn routes() -> axum::Router<crate::runtime::http::AppState> {
    use axum::routing::{get, post};
    axum::Router::new()
        .route("/v1/audit/events", get(api::events))
        .route("/v1/audit/events/{position}", get(api::event_at))
        .route("/v1/audit/verify", post(api::verify))
        .route(
            "/v1/audit/anchors",
            get(api::list_anchors).post(api::create_anchor),
        )
        .route(
            "/v1/streams/{aggregate_type}/{aggregate_id}/state",
            get(api::state_as_of),
        )
        .route(
            "/v1/streams/{aggregate_type}/{aggregate_id}/events",
            get(streams::get_events),
        )
}
