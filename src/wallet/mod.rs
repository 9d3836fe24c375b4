//! Wallets (R-WAL-*): the HTTP handlers over the wallet command bus and projection.

pub mod api;
pub mod batch;

/// This capability's HTTP routes; the composition root merges them (`server::router`).
pub fn routes() -> axum::Router<crate::runtime::http::AppState> {
    use axum::routing::{get, post};
    axum::Router::new()
        .route("/v1/wallets/{wallet_id}", get(api::get_wallet))
        .route("/v1/wallets/{wallet_id}/ledger", get(api::get_ledger))
        .route("/v1/wallets/{wallet_id}/commands", post(api::post_command))
        .route(
            "/v1/commands:batch",
            post(batch::post_batch).layer(axum::extract::DefaultBodyLimit::max(
                batch::BATCH_BODY_BYTES_MAX,
            )),
        )
}
