//! The commission state machine (SPEC R-COM-1) as an explicit transition table, and
//! how a commission reacts to each order signal.

use crate::affiliate_values::OrderSignal;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CommissionStatus {
    /// Credited to the wallet's pending bucket; waits for `release_at`.
    Pending,
    /// Released: the wallet moved it pending → available.
    Available,
    /// Cancelled or refunded before release; pending was reversed. Terminal.
    Invalid,
    /// A refund is open or the amount went down: held in pending, not released.
    Frozen,
    /// Refunded after release: the money cannot be taken back automatically (no
    /// debt model, R-COM-3); withdrawals are blocked until finance resolves it.
    RecoveryReview,
    /// Finance resolved the recovery by hand (audited). Terminal.
    ManualResolved,
}

/// Every legal edge of R-COM-1, and nothing else. Recording a commission creates it
/// in PENDING (the seed's `[*] → PENDING`), which is not an edge between statuses.
pub const COMMISSION_EDGES: [(CommissionStatus, CommissionStatus); 7] = {
    use CommissionStatus::*;
    [
        (Pending, Available),             // release time reached, order valid
        (Pending, Invalid),               // cancel / refund
        (Pending, Frozen),                // refund in progress, partial refund, amount down
        (Frozen, Pending),                // refund rejected / withdrawn
        (Frozen, Invalid),                // refund confirmed
        (Available, RecoveryReview),      // refund after release
        (RecoveryReview, ManualResolved), // audited finance action
    ]
};

impl CommissionStatus {
    pub const ALL: [CommissionStatus; 6] = [
        CommissionStatus::Pending,
        CommissionStatus::Available,
        CommissionStatus::Invalid,
        CommissionStatus::Frozen,
        CommissionStatus::RecoveryReview,
        CommissionStatus::ManualResolved,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CommissionStatus::Pending => "PENDING",
            CommissionStatus::Available => "AVAILABLE",
            CommissionStatus::Invalid => "INVALID",
            CommissionStatus::Frozen => "FROZEN",
            CommissionStatus::RecoveryReview => "RECOVERY_REVIEW",
            CommissionStatus::ManualResolved => "MANUAL_RESOLVED",
        }
    }

    /// Whether `self → to` is an edge of [`COMMISSION_EDGES`]. Staying put is not an
    /// edge: a command that would "move" to the current status is refused.
    pub fn can_move_to(self, to: CommissionStatus) -> bool {
        COMMISSION_EDGES.contains(&(self, to))
    }
}

/// Where an order signal moves a commission in `status`, or `None` to stay. Every
/// result is an edge of the table (tested). Reactions that stay write nothing, so
/// replays create nothing new (R-COM-3).
///
/// - PENDING freezes on a refund opening, a partial refund or a lower amount, and is
///   invalidated on cancel or full refund.
/// - FROZEN returns to PENDING when the refund is rejected, the partial refund
///   settles or the order is confirmed again (at the lower amount, if lower), and is
///   invalidated on cancel or full refund.
/// - AVAILABLE goes to RECOVERY_REVIEW on any refund or lower amount after release:
///   money already released is never taken back automatically.
/// - INVALID, RECOVERY_REVIEW, MANUAL_RESOLVED ignore every signal.
pub fn reaction(status: CommissionStatus, signal: OrderSignal) -> Option<CommissionStatus> {
    use CommissionStatus as C;
    use OrderSignal as S;
    let to = match (status, signal) {
        (C::Pending, S::AmountDecreased | S::RefundStarted | S::PartiallyRefunded) => C::Frozen,
        (C::Pending | C::Frozen, S::RefundConfirmed | S::Cancelled) => C::Invalid,
        (
            C::Frozen,
            S::RefundRejected | S::PartialRefundSettled | S::Completed | S::AmountIncreased,
        ) => C::Pending,
        (
            C::Available,
            S::AmountDecreased
            | S::RefundStarted
            | S::PartiallyRefunded
            | S::RefundConfirmed
            | S::Cancelled,
        ) => C::RecoveryReview,
        _ => return None,
    };
    Some(to)
}
