//! Withdrawal commands. They come from the request unit, operators, the payout
//! worker and the webhook handler, never raw from a client body: the edge builds
//! them after checking the password, KYC, payout account, limits and risk rule.

use super::events::{CallDetail, OutcomeSource, PayoutDestination, Review};
use crate::money::{AmountMinor, BoundedId, Currency};
use chrono::{DateTime, Utc};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestWithdrawal {
    pub withdrawal_id: BoundedId,
    pub user_id: BoundedId,
    pub wallet_id: BoundedId,
    pub currency: Currency,
    pub amount_minor: AmountMinor,
    pub provider: BoundedId,
    pub destination: PayoutDestination,
    pub review: Review,
    pub actor: String,
    pub now: DateTime<Utc>,
}

/// An operator's approval or rejection; `reason` is required for both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub actor: String,
    pub reason: String,
    pub now: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartAttempt {
    pub actor: String,
    pub now: DateTime<Utc>,
}

/// What the provider said about the payout under the current reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderReport {
    /// Created and not settled yet (Xendit `PENDING`).
    Accepted,
    /// Paid to the destination.
    Succeeded,
    /// Created and then failed; `recoverable` when a later attempt may succeed
    /// (the provider's own balance).
    Failed { code: String, recoverable: bool },
    /// Refused before creating anything.
    Refused { code: String, recoverable: bool },
    /// Paid, then returned by the destination's bank to the provider's balance
    /// (Xendit `REVERSED`): before the withdrawal is PAID it ends like a failure
    /// (nothing reached the user); after, it contradicts PAID and a person decides
    /// (recorded as `ProviderContradicted`, reconciled and alerted; no money moves).
    Reversed,
    /// A query found no payout under the reference.
    Absent,
    /// No answer that can be trusted (timeout, network error, 5xx, garbage).
    Unknown { reason: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordOutcome {
    pub report: ProviderReport,
    pub source: OutcomeSource,
    /// The attempt the call belonged to (`source = Call` only).
    pub attempt: Option<u32>,
    /// The reference the report is about; a report about an older reference is
    /// stale and changes nothing.
    pub idempotency_key: String,
    pub provider_payout_id: Option<String>,
    pub call: Option<CallDetail>,
    pub actor: String,
    pub now: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WithdrawalCommand {
    Request(Box<RequestWithdrawal>),
    Approve(Decision),
    Reject(Decision),
    StartAttempt(StartAttempt),
    RecordOutcome(Box<RecordOutcome>),
}
