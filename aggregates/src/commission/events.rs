//! Commission events. Payloads are stored forever: changing a shape means a new
//! `event_version` and an upcaster in `crate::upcast`, never a rewrite.
//!
//! Commission events are not ledger entries themselves: each money-moving event has
//! exactly one wallet command (`Commission::wallet_effect`), and the wallet event
//! it produces carries the ledger entry with `ref_type = COMMISSION`, `ref_id =
//! commission id`.

use super::transitions::CommissionStatus;
use crate::affiliate_values::{BeneficiaryRole, CommissionAmounts, OrderSignal};
use crate::commission_rules::RuleSnapshot;
use crate::money::Currency;
use chrono::{DateTime, Utc};
use cqrs_es::DomainEvent;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommissionRecorded {
    pub commission_id: String,
    pub order_id: String,
    pub role: BeneficiaryRole,
    pub beneficiary_user_id: String,
    pub wallet_id: String,
    pub currency: Currency,
    /// Credited to pending (`CREDIT_PENDING`). Always positive.
    pub amount_minor: i64,
    /// Every amount of the order at recording, for audit (`M` and both shares).
    pub order_amounts: CommissionAmounts,
    pub ordered_at: DateTime<Utc>,
    /// `ordered_at + rules.release_delay_days`; settlement releases it from then on.
    pub release_at: DateTime<Utc>,
    /// The rule version that priced it (R-INV-5).
    pub rules: RuleSnapshot,
    pub order_revision: u32,
}

/// An order signal moved the commission (freeze, unfreeze, invalidation, recovery).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrderReaction {
    pub order_revision: u32,
    pub signal: OrderSignal,
    pub order_updated_at: DateTime<Utc>,
    /// The commission's amount after the event (for `CommissionInvalidated`, the
    /// amount reversed from pending; for `RecoveryReviewOpened`, the amount at risk).
    pub amount_minor: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommissionUnfrozen {
    pub order_revision: u32,
    pub signal: OrderSignal,
    pub order_updated_at: DateTime<Utc>,
    /// The amount from now on: `min(previous, the order's recomputed amount)`.
    pub amount_minor: i64,
    /// How much less than before (0 if unchanged); reversed from pending under
    /// `adjustment_ref_id`.
    pub reduced_by_minor: i64,
    /// `<commission_id>:ADJ<order_revision>` when `reduced_by_minor > 0`: its own
    /// ledger key, so a later invalidation or release of the rest does not collide.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adjustment_ref_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommissionReleased {
    /// Moved pending → available (`RELEASE_PENDING`).
    pub amount_minor: i64,
    pub release_at: DateTime<Utc>,
    /// The settlement's "now" when it released.
    pub released_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecoveryManuallyResolved {
    pub actor: String,
    pub reason: String,
    pub resolved_at: DateTime<Utc>,
    pub amount_minor: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum CommissionEvent {
    CommissionRecorded(CommissionRecorded),
    CommissionFrozen(OrderReaction),
    CommissionUnfrozen(CommissionUnfrozen),
    CommissionInvalidated(OrderReaction),
    CommissionReleased(CommissionReleased),
    RecoveryReviewOpened(OrderReaction),
    RecoveryManuallyResolved(RecoveryManuallyResolved),
}

/// Current schema version of every commission event.
pub const COMMISSION_EVENT_VERSION: i32 = 1;

impl CommissionEvent {
    pub fn name(&self) -> &'static str {
        match self {
            Self::CommissionRecorded(_) => "CommissionRecorded",
            Self::CommissionFrozen(_) => "CommissionFrozen",
            Self::CommissionUnfrozen(_) => "CommissionUnfrozen",
            Self::CommissionInvalidated(_) => "CommissionInvalidated",
            Self::CommissionReleased(_) => "CommissionReleased",
            Self::RecoveryReviewOpened(_) => "RecoveryReviewOpened",
            Self::RecoveryManuallyResolved(_) => "RecoveryManuallyResolved",
        }
    }

    /// The status the commission is in after this event.
    pub fn target_status(&self) -> CommissionStatus {
        match self {
            Self::CommissionRecorded(_) | Self::CommissionUnfrozen(_) => CommissionStatus::Pending,
            Self::CommissionFrozen(_) => CommissionStatus::Frozen,
            Self::CommissionInvalidated(_) => CommissionStatus::Invalid,
            Self::CommissionReleased(_) => CommissionStatus::Available,
            Self::RecoveryReviewOpened(_) => CommissionStatus::RecoveryReview,
            Self::RecoveryManuallyResolved(_) => CommissionStatus::ManualResolved,
        }
    }

    /// The order revision the event reflects, if it came from the order.
    pub fn order_revision(&self) -> Option<u32> {
        match self {
            Self::CommissionRecorded(e) => Some(e.order_revision),
            Self::CommissionFrozen(e)
            | Self::CommissionInvalidated(e)
            | Self::RecoveryReviewOpened(e) => Some(e.order_revision),
            Self::CommissionUnfrozen(e) => Some(e.order_revision),
            Self::CommissionReleased(_) | Self::RecoveryManuallyResolved(_) => None,
        }
    }
}

impl DomainEvent for CommissionEvent {
    fn event_type(&self) -> String {
        self.name().to_owned()
    }

    fn event_version(&self) -> String {
        COMMISSION_EVENT_VERSION.to_string()
    }
}
