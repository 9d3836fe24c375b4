//! Double entry (issue 16): the journal of every posting the chart of accounts
//! (`factledger_aggregates::ledger`) makes of money events, account balances, the
//! trial balance and account statements.

pub mod api;
pub mod projection;
pub mod rebuild;

/// This capability's HTTP routes; the composition root merges them (`server::router`).
pub fn routes() -> axum::Router<crate::runtime::http::AppState> {
    use axum::routing::get;
    axum::Router::new()
        .route("/v1/accounts/trial-balance", get(api::trial_balance))
        .route("/v1/accounts/{account}", get(api::account))
}
