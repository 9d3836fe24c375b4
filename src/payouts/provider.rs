//! The payout provider boundary: what the ledger asks of any provider (create a payout,
//! find one by our reference, list a day's payouts) and the three-way answers it gets.
//!
//! The one rule this boundary exists for: **a create either definitely happened
//! ([`CreateOutcome::Created`]), definitely did not ([`CreateOutcome::Refused`]), or
//! nobody knows ([`CreateOutcome::Unknown`])**. Unknown is not a failure: the money may
//! have left. The caller must find out with [`PayoutProvider::query`] (or retry the
//! create with the same reference, which the provider deduplicates) and never create
//! a second payout under a new reference. An adapter answers `Refused` only when the
//! provider's answer proves nothing was created; when in doubt, `Unknown`.

use factledger_aggregates::Currency;
use serde::{Deserialize, Serialize};

/// Most bytes of a provider's answer kept in a [`CallRecord`] (4 KiB: enough for any
/// error body, small enough to store with every attempt).
pub const CALL_RECORD_RESPONSE_BYTES_MAX: usize = 4 * 1024;

/// One payout to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayoutRequest {
    /// Our reference: sent as the provider's external id AND its idempotency key, so a
    /// retried create can never make a second payout.
    pub reference: String,
    /// Integer minor units of `currency`, strictly positive.
    pub amount_minor: i64,
    pub currency: Currency,
    /// The provider's code of the bank or e-wallet (Xendit `channel_code`, e.g. `ID_BCA`).
    pub channel_code: String,
    pub account_number: String,
    pub account_holder: String,
    pub description: String,
}

/// Where a payout is at the provider.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProviderStatus {
    /// Accepted, not settled yet (pending at the provider).
    Accepted,
    /// The money reached the destination.
    Succeeded,
    /// It will not be paid. `recoverable`: the same payout may succeed later (e.g. the
    /// provider balance was short); otherwise the destination or request is at fault.
    Failed { code: String, recoverable: bool },
    /// It succeeded, then the destination's bank returned the money to the
    /// provider's balance (Xendit `REVERSED`). Never applied to a PAID withdrawal's
    /// money: recorded as a contradiction, alerted and reconciled for a person.
    Reversed,
}

/// A payout as the provider reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderPayout {
    /// The provider's own id of the payout.
    pub provider_id: String,
    /// Our reference (Xendit's `reference_id`).
    pub reference: String,
    pub amount_minor: i64,
    /// As the provider wrote it (not parsed: a record of what was said).
    pub currency: String,
    pub status: ProviderStatus,
}

/// What a create came to (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateOutcome {
    /// The provider has the payout (a new one, or the one this reference made before).
    Created(ProviderPayout),
    /// Definitely not created. `recoverable`: the same request may succeed later
    /// (insufficient provider balance); otherwise it never will as it stands.
    Refused {
        code: String,
        message: String,
        recoverable: bool,
    },
    /// Perhaps created: a timeout, a network error, a 5xx, an unreadable answer, an
    /// answer that contradicts the request. Query before anything else.
    Unknown { reason: String },
}

/// What a look-up by reference came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueryOutcome {
    Found(ProviderPayout),
    /// The provider says, unambiguously, that it has no payout with this reference.
    Absent,
    /// No trustworthy answer (network, 5xx, an unexpected or contradicting answer).
    Unknown {
        reason: String,
    },
}

/// One call to the provider, for the payout's audit trail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CallRecord {
    /// `"create"` or `"query"`.
    pub operation: &'static str,
    /// What was sent: the JSON body or query and the idempotency key, never the secret.
    pub request: serde_json::Value,
    /// `None` when no answer came (timeout, connection error).
    pub http_status: Option<u16>,
    /// The answer's body, at most [`CALL_RECORD_RESPONSE_BYTES_MAX`] bytes.
    pub response: Option<String>,
    pub elapsed_ms: u64,
}

/// Why a report could not be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    #[error("the provider did not answer: {0}")]
    Transport(String),
    #[error("the provider answered HTTP {status}: {body}")]
    Status { status: u16, body: String },
    #[error("the provider's answer is unreadable: {0}")]
    Body(String),
    #[error("the provider is misconfigured: {0}")]
    Config(String),
}

/// A payout provider (Xendit, or a test double).
#[async_trait::async_trait]
pub trait PayoutProvider: Send + Sync + 'static {
    /// A short stable name (`"xendit"`), for logs and records.
    fn name(&self) -> &str;
    /// Creates the payout, idempotently per `request.reference`.
    async fn create(&self, request: &PayoutRequest) -> (CreateOutcome, CallRecord);
    /// The payout carrying `reference`, as the provider knows it now.
    async fn query(&self, reference: &str) -> (QueryOutcome, CallRecord);
    /// Every payout created on `date` (the provider's day), for reconciliation.
    async fn report(&self, date: chrono::NaiveDate) -> Result<Vec<ProviderPayout>, ProviderError>;
}

/// `body` as text, cut to at most [`CALL_RECORD_RESPONSE_BYTES_MAX`] bytes on a
/// character boundary (invalid UTF-8 replaced).
pub fn truncate_response(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    if text.len() <= CALL_RECORD_RESPONSE_BYTES_MAX {
        return text.into_owned();
    }
    let mut end = CALL_RECORD_RESPONSE_BYTES_MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_response_is_cut_to_4_kib_on_a_character_boundary() {
        assert_eq!(truncate_response(b"short"), "short");
        let long = "é".repeat(3_000); // 6,000 bytes
        let cut = truncate_response(long.as_bytes());
        assert!(cut.len() <= CALL_RECORD_RESPONSE_BYTES_MAX);
        assert_eq!(cut.len(), CALL_RECORD_RESPONSE_BYTES_MAX);
        assert!(cut.chars().all(|c| c == 'é'));
    }
}
