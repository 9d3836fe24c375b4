//! Paid services on in-app credit (seed 000, SPEC §10, issue 18): fans recharge candy
//! through cash gateways, subscribe to artists and book paid video calls whose candy is
//! held until the call settles; refunds go back through the gateway or the candy
//! account, and queued jobs and cron scans compensate every step that can fail
//! half-way.

pub mod alipay;
pub mod appstore;
pub mod ctx;
pub mod flow;
pub mod gateway;
pub mod gateway_http;
pub mod jobs;
pub mod rounds;
pub mod scans;
pub mod units;
pub mod wechatpay;

pub use ctx::{Ctx, Faults, Services};
pub mod api;
pub mod reads;

/// This capability's HTTP routes; the composition root merges them (`server::router`).
pub fn routes() -> axum::Router<crate::runtime::http::AppState> {
    use axum::routing::{get, post};
    axum::Router::new()
        .route("/v1/service-orders", post(api::create_order))
        .route(
            "/v1/service-orders/{order_no}",
            get(api::show_order).post(api::order_action),
        )
        .route("/v1/bookings", post(api::book))
        .route(
            "/v1/bookings/{booking_no}",
            get(reads::show_booking).post(api::booking_action),
        )
        .route("/v1/refunds/{refund_no}", get(reads::show_refund))
        .route("/v1/candy-accounts/{user_id}", get(reads::show_candy))
        .route("/v1/subscriptions", get(reads::list_subscriptions))
}
pub mod reconcile;
