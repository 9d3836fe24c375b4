//! The withdrawal state machine (SPEC R-PAY-2) as an explicit transition table.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum WithdrawalStatus {
    /// Created and frozen; waits for an operator (manual review).
    Requested,
    /// An operator refused it; the freeze was given back. Terminal.
    Rejected,
    /// Approved (by an operator or by the risk rule); the payout worker owns it.
    PayoutPending,
    /// The provider accepted the payout and has not settled it yet.
    Processing,
    /// A call's outcome is not known (timeout, network error, 5xx, unreadable
    /// answer): the provider is queried by reference before anything else.
    ProviderUnknown,
    /// The provider could not pay for a reason that passes (its own balance); a
    /// later attempt under a new reference is safe.
    FundsHeld,
    /// The provider paid; the frozen money left the wallet. Terminal.
    Paid,
    /// The provider definitely did not pay; the freeze was given back. Terminal.
    Failed,
}

/// Every legal edge of R-PAY-2 and nothing else, plus three edges the SPEC's list
/// leaves out but a payout through a real provider needs (marked *extension*):
/// a recoverable refusal before the provider accepted anything, and the outcomes of
/// the safe retry out of FUNDS_HELD (a timeout, or a definite refusal).
pub const WITHDRAWAL_EDGES: [(WithdrawalStatus, WithdrawalStatus); 14] = {
    use WithdrawalStatus::*;
    [
        (Requested, Rejected),            // operator rejects; unfreeze
        (Requested, PayoutPending),       // operator (or risk rule) approves
        (PayoutPending, Processing),      // provider accepted
        (PayoutPending, ProviderUnknown), // timeout, network error, 5xx
        (PayoutPending, Failed),          // definitely not charged; unfreeze
        (ProviderUnknown, Processing),    // the query finds it
        (ProviderUnknown, PayoutPending), // the query confirms it absent: same key again
        (Processing, Paid),               // success; debit frozen
        (Processing, FundsHeld),          // recoverable provider error (its balance)
        (Processing, Failed),             // terminal; unfreeze
        (FundsHeld, Processing),          // safe retry accepted
        (PayoutPending, FundsHeld),       // extension: refused for its balance, nothing created
        (FundsHeld, ProviderUnknown),     // extension: the retry's outcome is unknown
        (FundsHeld, Failed),              // extension: the retry is refused for good; unfreeze
    ]
};

impl WithdrawalStatus {
    pub const ALL: [WithdrawalStatus; 8] = {
        use WithdrawalStatus::*;
        [
            Requested,
            Rejected,
            PayoutPending,
            Processing,
            ProviderUnknown,
            FundsHeld,
            Paid,
            Failed,
        ]
    };

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Requested => "REQUESTED",
            Self::Rejected => "REJECTED",
            Self::PayoutPending => "PAYOUT_PENDING",
            Self::Processing => "PROCESSING",
            Self::ProviderUnknown => "PROVIDER_UNKNOWN",
            Self::FundsHeld => "FUNDS_HELD",
            Self::Paid => "PAID",
            Self::Failed => "FAILED",
        }
    }

    pub fn parse(s: &str) -> Option<WithdrawalStatus> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// Whether `self → to` is an edge of [`WITHDRAWAL_EDGES`]. Staying put is not an
    /// edge.
    pub fn can_move_to(self, to: WithdrawalStatus) -> bool {
        WITHDRAWAL_EDGES.contains(&(self, to))
    }

    /// No edge leaves it: the money's fate is settled.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Rejected | Self::Paid | Self::Failed)
    }

    /// The withdrawal's money is still frozen in the wallet.
    pub fn holds_freeze(self) -> bool {
        !self.is_terminal()
    }

    /// The payout worker has something to do: call (PAYOUT_PENDING, FUNDS_HELD) or
    /// query (PROVIDER_UNKNOWN). PROCESSING waits for the provider (webhook or a
    /// late query).
    pub fn needs_worker(self) -> bool {
        matches!(
            self,
            Self::PayoutPending | Self::ProviderUnknown | Self::FundsHeld | Self::Processing
        )
    }
}
