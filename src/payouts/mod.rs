//! Money out (SPEC §6, issue 17): withdrawals requested against a wallet, reviewed by
//! the risk rule or an operator, and paid through a payout provider by the payout
//! worker, with the provider's webhooks and reports reconciled against them.
//!
//! - `units` — the units of work (request, review, attempt, outcome) with their
//!   wallet effects;
//! - `job`, `worker` — the `payout` job kind and its handler (R-PAY-3);
//! - `webhook` — applying a provider's callback (R-PAY-4);
//! - `provider`, `xendit` — the provider boundary and its HTTP adapter;
//! - `policy`, `password` — limits, the risk rule and payment passwords (R-PAY-1);
//! - `api`, `api_profile`, `reads` — the HTTP surface.

pub mod api;
pub mod api_profile;
pub mod job;
pub mod password;
pub mod policy;
pub mod provider;
pub mod reads;
pub mod reconcile;
pub mod units;
pub mod webhook;
pub mod worker;
pub mod xendit;

use std::sync::Arc;

/// What the payouts capability needs at request time (in `AppState::parts`).
#[derive(Clone)]
pub struct Payouts {
    /// The provider new withdrawals are paid through (its clearing account).
    pub provider_name: String,
    pub policy: Arc<policy::PayoutPolicy>,
    pub password_cost: password::Cost,
    /// The bound on argon2 work, shared by every hash and check of this service.
    pub password_gate: password::Gate,
}

impl Default for Payouts {
    fn default() -> Self {
        Payouts {
            provider_name: "xendit".into(),
            policy: Arc::new(policy::PayoutPolicy::default()),
            password_cost: password::Cost::default(),
            password_gate: password::Gate::default(),
        }
    }
}

/// This capability's HTTP routes; the composition root merges them.
pub fn routes() -> axum::Router<crate::runtime::http::AppState> {
    use axum::routing::{get, post, put};
    axum::Router::new()
        .route(
            "/v1/withdrawals",
            get(api::list_withdrawals).post(api::request),
        )
        .route(
            "/v1/withdrawals/{id_or_action}",
            get(api::get_withdrawal).post(api::post_on_withdrawal),
        )
        .route(
            "/v1/users/{user_id}/payment-password",
            put(api_profile::set_password),
        )
        .route("/v1/users/{user_id}/kyc", post(api_profile::set_kyc))
        .route(
            "/v1/users/{user_id}/payout-accounts",
            post(api_profile::register_account),
        )
        .route(
            "/v1/users/{user_id}/payout-accounts/{account_action}",
            post(api_profile::verify_account),
        )
        .route(
            "/v1/users/{user_id}/payout-profile",
            get(api_profile::get_profile),
        )
}
