//! Operations: the operator endpoints over jobs, cron, the outbox, rebuilds and
//! reconciliation runs.

pub mod cron;
pub mod jobs;
pub mod outbox;
pub mod rebuilds;
pub mod reconciliations;

/// This capability's HTTP routes; the composition root merges them (`server::router`).
pub fn routes() -> axum::Router<crate::runtime::http::AppState> {
    use axum::routing::{get, post};
    axum::Router::new()
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
        .route("/v1/outbox/dead-letters", get(outbox::dead_letters))
        .route(
            "/v1/outbox/dead-letters/{tail}",
            post(outbox::post_on_dead_letter),
        )
}
