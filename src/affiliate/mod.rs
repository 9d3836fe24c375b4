//! Affiliate orders, commissions and campaigns (issue 5; SPEC §3, §4; seed 003).
//!
//! `ingest.rs` is the ingest unit (R-ORD-2): one multi-stream unit per order —
//! order, commissions, campaign, wallets and outbox, in the lock order of R-WAL-3.
//! Whatever feeds orders in (the HTTP page `POST /v1/orders:ingest`, the platform
//! sync job) goes through [`OrderIngestor`], so every path applies the same rules.
//!
//! `platform.rs` is the adapter trait and the generic adapter; `platforms/` holds one
//! adapter per platform with a documented affiliate API (TikTok Shop, Shopee), each
//! speaking that platform's signing, paging and vocabulary;
//! `sync.rs` is the `platform_sync` job (R-ORD-8): watermark minus overlap, a page
//! checkpoint after each page, and the 120-day lookback sweep (R-COM-4).

pub mod api;
pub mod api_commands;
pub mod ingest;
mod ingest_page;
pub mod ingest_refusal;
pub mod platform;
pub mod platforms;
pub mod recovery;
pub mod settlement;
pub mod sync;

/// This capability's HTTP routes; the composition root merges them (`server::router`).
pub fn routes() -> axum::Router<crate::runtime::http::AppState> {
    use axum::routing::{get, post};
    axum::Router::new()
        .route(
            "/v1/orders/{platform}/{platform_order_id}",
            get(api::get_order).post(api_commands::post_on_order),
        )
        .route(
            "/v1/orders:ingest",
            post(api_commands::ingest).layer(axum::extract::DefaultBodyLimit::max(
                api_commands::INGEST_BODY_BYTES_MAX,
            )),
        )
        .route("/v1/commissions", get(api::list_commissions))
        .route(
            "/v1/commissions/{commission_id}",
            post(api_commands::post_on_commission),
        )
        .route(
            "/v1/commission-rules/{rule_set_id}/versions",
            post(api_commands::add_rule_version),
        )
        .route("/v1/affiliate-links", post(api_commands::register_link))
        .route(
            "/v1/users/{user_id}/inviter",
            post(api_commands::set_inviter),
        )
        .route(
            "/v1/campaigns/{campaign_id}",
            post(api_commands::open_campaign),
        )
}

use async_trait::async_trait;
use factledger_aggregates::affiliate_order::NormalisedOrder;
use serde::Serialize;

/// Orders one ingest call takes (a platform page; seed §10.1 pages are ≤ 100, the
/// HTTP API takes up to this many).
pub const INGEST_PAGE_ORDERS_MAX: usize = 500;

/// What happened to one order of a page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct IngestResult {
    pub platform: String,
    pub platform_order_id: String,
    /// `created`, `updated`, `unchanged`, `ignored_stale`,
    /// `ignored_illegal_transition`, `audit_only_invalid` or `rejected`.
    pub result: String,
    /// For `rejected`: a stable code (`NO_RULE_VERSION_IN_FORCE`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// For `rejected`: why, naming the field at fault when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// Global position of the unit's last event (read-your-writes), when it wrote.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position: Option<i64>,
}

/// A page could not be ingested at all (the database is away). Per-order business
/// refusals are not errors: they are `rejected` results.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error("a page holds at most {INGEST_PAGE_ORDERS_MAX} orders, this one {0}")]
    PageTooLarge(usize),
    #[error(transparent)]
    Store(#[from] crate::infra::store::StoreError),
    /// The job claim the page was fenced by is gone (its lease was recovered).
    #[error("the job claim fencing this ingest is gone: {0}")]
    Fenced(String),
}

/// Ingests pages of normalised orders, each order in its own unit: one bad order
/// never affects the others (R-ORD-2).
#[async_trait]
pub trait OrderIngestor: Send + Sync + 'static {
    /// Ingest the orders in page order; a result per order, in the same order.
    /// `fence`: the job claim every unit is fenced by, when a job ingests.
    async fn ingest_page(
        &self,
        orders: Vec<NormalisedOrder>,
        fence: Option<crate::infra::store::Fence>,
    ) -> Result<Vec<IngestResult>, IngestError>;
}

/// Metadata of writes a background task makes on its own (no request): the actor
/// names the task, the correlation id is fresh per call.
pub fn service_metadata(actor: &str, country_code: &str) -> crate::infra::store::Metadata {
    crate::infra::store::Metadata::service(actor, country_code)
}
