//! Withdrawal events. Payloads are stored forever: changing a shape means a new
//! `event_version` and an upcaster in `crate::upcast`, never a rewrite.
//!
//! Every status change is its own event naming the actor and the reason; the
//! attempt records (`PayoutAttemptStarted`, `PayoutAttemptEnded`) and
//! `ProviderContradicted` change no status. Withdrawal events are not ledger
//! entries: the four that move money (`WithdrawalRequested`, `WithdrawalRejected`,
//! `PayoutSucceeded`, `PayoutFailed`) each require one wallet command
//! (`Withdrawal::wallet_effect`) whose event carries the entry.

use super::transitions::WithdrawalStatus;
use crate::money::Currency;
use chrono::{DateTime, Utc};
use cqrs_es::DomainEvent;
use serde::{Deserialize, Serialize};

/// Where the money goes: a payout account the user registered and an operator
/// verified (bank or e-wallet channel and account number).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayoutDestination {
    pub account_id: String,
    /// The provider's channel code, e.g. `ID_BCA`, `ID_OVO`.
    pub channel_code: String,
    pub account_number: String,
    pub account_holder: String,
}

/// How the request was admitted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "SCREAMING_SNAKE_CASE", deny_unknown_fields)]
pub enum Review {
    /// The risk rule found nothing: approved in the same unit as the request.
    Auto,
    /// The risk rule's reasons for an operator to look first.
    Manual { reasons: Vec<String> },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WithdrawalRequested {
    pub withdrawal_id: String,
    pub user_id: String,
    pub wallet_id: String,
    pub currency: Currency,
    /// Frozen in the wallet (`WITHDRAW_FREEZE`). Always positive.
    pub amount_minor: i64,
    /// The payout provider that will pay it (its clearing account takes the money).
    pub provider: String,
    pub destination: PayoutDestination,
    pub review: Review,
    pub actor: String,
    pub requested_at: DateTime<Utc>,
}

/// An operator's (or the risk rule's) decision on a REQUESTED withdrawal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Decided {
    pub actor: String,
    pub reason: String,
    pub at: DateTime<Utc>,
}

/// One call to the provider as it happened, for the audit trail (never a secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallDetail {
    /// `create` or `query`.
    pub operation: String,
    pub request: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<String>,
    pub elapsed_ms: u64,
}

/// Where an outcome was learned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OutcomeSource {
    /// The answer to our create call (of the open attempt).
    Call,
    /// The answer to a query by reference.
    Query,
    /// A verified provider callback.
    Webhook,
    /// An operator, by hand.
    Operator,
}

/// The worker is about to call the provider: recorded BEFORE the call, so a crash
/// between the call and its outcome leaves an open attempt, which counts as unknown
/// and is queried before any retry (R-PAY-3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayoutAttemptStarted {
    /// 1, 2, …
    pub attempt: u32,
    /// The provider's `Idempotency-Key` and reference: the withdrawal id, or
    /// `<id>:r<n>` after the n-th FUNDS_HELD (the held payout failed for good at the
    /// provider, so a new one is safe).
    pub idempotency_key: String,
    pub actor: String,
    pub at: DateTime<Utc>,
}

/// A status change learned from the provider (or an operator).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayoutOutcome {
    pub actor: String,
    pub reason: String,
    pub source: OutcomeSource,
    /// The attempt whose call answered, when `source` is `CALL`: it closes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// The reference the provider knows the payout by.
    pub idempotency_key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_payout_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<CallDetail>,
    pub at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum WithdrawalEvent {
    WithdrawalRequested(WithdrawalRequested),
    WithdrawalApproved(Decided),
    WithdrawalRejected(Decided),
    PayoutAttemptStarted(PayoutAttemptStarted),
    /// The call answered but changed nothing (the status already moved, e.g. by a
    /// webhook that overtook the answer, or a retry refused again for its balance).
    PayoutAttemptEnded(PayoutOutcome),
    PayoutAccepted(PayoutOutcome),
    PayoutOutcomeUnknown(PayoutOutcome),
    PayoutConfirmedAbsent(PayoutOutcome),
    PayoutFundsHeld(PayoutOutcome),
    PayoutSucceeded(PayoutOutcome),
    PayoutFailed(PayoutOutcome),
    /// The provider said something a settled withdrawal cannot become (FAILED after
    /// PAID, absent after accepted): recorded for a person, never applied to money.
    ProviderContradicted(PayoutOutcome),
}

/// Current schema version of every withdrawal event.
pub const WITHDRAWAL_EVENT_VERSION: i32 = 1;

impl WithdrawalEvent {
    pub fn name(&self) -> &'static str {
        match self {
            Self::WithdrawalRequested(_) => "WithdrawalRequested",
            Self::WithdrawalApproved(_) => "WithdrawalApproved",
            Self::WithdrawalRejected(_) => "WithdrawalRejected",
            Self::PayoutAttemptStarted(_) => "PayoutAttemptStarted",
            Self::PayoutAttemptEnded(_) => "PayoutAttemptEnded",
            Self::PayoutAccepted(_) => "PayoutAccepted",
            Self::PayoutOutcomeUnknown(_) => "PayoutOutcomeUnknown",
            Self::PayoutConfirmedAbsent(_) => "PayoutConfirmedAbsent",
            Self::PayoutFundsHeld(_) => "PayoutFundsHeld",
            Self::PayoutSucceeded(_) => "PayoutSucceeded",
            Self::PayoutFailed(_) => "PayoutFailed",
            Self::ProviderContradicted(_) => "ProviderContradicted",
        }
    }

    /// The status this event moves the withdrawal to, or `None` for the events that
    /// change no status (attempt records, contradictions).
    pub fn status_after(&self) -> Option<WithdrawalStatus> {
        use WithdrawalStatus as S;
        Some(match self {
            Self::WithdrawalRequested(_) => S::Requested,
            Self::WithdrawalApproved(_) => S::PayoutPending,
            Self::WithdrawalRejected(_) => S::Rejected,
            Self::PayoutAccepted(_) => S::Processing,
            Self::PayoutOutcomeUnknown(_) => S::ProviderUnknown,
            Self::PayoutConfirmedAbsent(_) => S::PayoutPending,
            Self::PayoutFundsHeld(_) => S::FundsHeld,
            Self::PayoutSucceeded(_) => S::Paid,
            Self::PayoutFailed(_) => S::Failed,
            Self::PayoutAttemptStarted(_)
            | Self::PayoutAttemptEnded(_)
            | Self::ProviderContradicted(_) => return None,
        })
    }

    /// Who caused the event.
    pub fn actor(&self) -> &str {
        match self {
            Self::WithdrawalRequested(e) => &e.actor,
            Self::WithdrawalApproved(e) | Self::WithdrawalRejected(e) => &e.actor,
            Self::PayoutAttemptStarted(e) => &e.actor,
            Self::PayoutAttemptEnded(e)
            | Self::PayoutAccepted(e)
            | Self::PayoutOutcomeUnknown(e)
            | Self::PayoutConfirmedAbsent(e)
            | Self::PayoutFundsHeld(e)
            | Self::PayoutSucceeded(e)
            | Self::PayoutFailed(e)
            | Self::ProviderContradicted(e) => &e.actor,
        }
    }

    /// The outcome payload, for the events that carry one.
    pub fn outcome(&self) -> Option<&PayoutOutcome> {
        match self {
            Self::PayoutAttemptEnded(e)
            | Self::PayoutAccepted(e)
            | Self::PayoutOutcomeUnknown(e)
            | Self::PayoutConfirmedAbsent(e)
            | Self::PayoutFundsHeld(e)
            | Self::PayoutSucceeded(e)
            | Self::PayoutFailed(e)
            | Self::ProviderContradicted(e) => Some(e),
            _ => None,
        }
    }
}

impl DomainEvent for WithdrawalEvent {
    fn event_type(&self) -> String {
        self.name().to_owned()
    }

    fn event_version(&self) -> String {
        WITHDRAWAL_EVENT_VERSION.to_string()
    }
}
