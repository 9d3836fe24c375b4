//! The payout provider boundary (provisional shape; the adapter lands with xendit.rs).

use async_trait::async_trait;
use factledger_aggregates::Currency;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayoutRequest {
    pub reference: String,
    pub amount_minor: i64,
    pub currency: Currency,
    pub channel_code: String,
    pub account_number: String,
    pub account_holder: String,
    pub description: String,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ProviderStatus {
    Accepted,
    Succeeded,
    Failed { code: String, recoverable: bool },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderPayout {
    pub provider_id: String,
    pub reference: String,
    pub amount_minor: i64,
    pub currency: String,
    pub status: ProviderStatus,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateOutcome {
    Created(ProviderPayout),
    Refused {
        code: String,
        message: String,
        recoverable: bool,
    },
    Unknown {
        reason: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueryOutcome {
    Found(ProviderPayout),
    Absent,
    Unknown { reason: String },
}

#[derive(Debug, Clone, PartialEq)]
pub struct CallRecord {
    pub operation: &'static str,
    pub request: serde_json::Value,
    pub http_status: Option<u16>,
    pub response: Option<String>,
    pub elapsed_ms: u64,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ProviderError(pub String);

#[async_trait]
pub trait PayoutProvider: Send + Sync + 'static {
    fn name(&self) -> &str;
    async fn create(&self, request: &PayoutRequest) -> (CreateOutcome, CallRecord);
    async fn query(&self, reference: &str) -> (QueryOutcome, CallRecord);
    async fn report(&self, date: chrono::NaiveDate) -> Result<Vec<ProviderPayout>, ProviderError>;
}
