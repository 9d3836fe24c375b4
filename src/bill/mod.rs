//! The resident-income bills (R-BILL-*): fact commands, the bill projection and its
//! refresh rounds, order-status and dimension snapshots, their HTTP handlers, and the
//! reconciliation check of locks against their lines (`reconcile`).

pub mod api;
pub mod api_reads;
pub mod api_refresh;
pub mod commands;
pub mod order_status;
pub mod projection;
pub mod reconcile;
pub mod refresh;
#[cfg(test)]
mod schema_tests;
pub mod snapshots;

/// This capability's HTTP routes; the composition root merges them (`server::router`).
pub fn routes() -> axum::Router<crate::runtime::http::AppState> {
    use axum::routing::{get, post};
    axum::Router::new()
        .route(
            "/v1/bills/{station_id}/{yyyymm}",
            get(api_reads::get_station_month),
        )
        .route("/v1/bills:refresh", post(api_refresh::submit))
        .route("/v1/bills/inspections", get(api_refresh::inspections))
        .route(
            "/v1/bills/order-status-conflicts",
            get(api_reads::order_status_conflicts),
        )
        .route("/v1/bills/small-bills", post(api::record_small_bill))
        .route("/v1/bills/diffs", post(api::record_diff))
        .route("/v1/bills/partner-bills", post(api::record_partner_bill))
        .route(
            "/v1/bills/partner-bills/{partner_bill_id}",
            post(api::post_on_partner_bill),
        )
        .route("/v1/bills/reference/{kind}", post(api::record_reference))
        .route("/v1/bills/locks", post(api::reserve_lock))
        .route(
            "/v1/bills/locks/{station_id}/{month}/{lock_id}",
            post(api::post_on_lock),
        )
        .route(
            "/v1/bills/payment-results",
            post(api::record_payment_result),
        )
        .route(
            "/v1/bills/payment-results/{result_id}",
            post(api::post_on_payment_result),
        )
        .route("/v1/payment-orders", post(api::create_payment_order))
        .route(
            "/v1/payment-orders/{order_id}",
            post(api::post_on_payment_order),
        )
        .route("/v1/payment-orders/{order_id}/lines", post(api::add_line))
        .route(
            "/v1/payment-orders/{order_id}/lines/{line_id}",
            post(api::post_on_line),
        )
}
