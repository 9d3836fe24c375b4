//! Wallet events. Payloads are stored forever: changing a shape means a new
//! `event_version` and an upcaster in `crate::upcast`, never a rewrite.

use super::transitions::{Buckets, EntryType};
use crate::money::Currency;
use cqrs_es::DomainEvent;
use serde::{Deserialize, Serialize};

/// One ledger entry: which business action moved how much between which buckets,
/// with the balances before and after (R-WAL-2). `after == before + delta` and no
/// bucket of `after` is negative (checked by `Wallet::check`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Movement {
    pub ref_type: String,
    pub ref_id: String,
    pub entry_type: EntryType,
    pub amount_minor: i64,
    pub delta: Buckets,
    pub before: Buckets,
    pub after: Buckets,
    /// The outside party of the movement where it has one (the payout provider of a
    /// payout); absent in every event written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counterparty: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum WalletEvent {
    WalletOpened {
        user_id: String,
        currency: Currency,
    },
    PendingCredited(Movement),
    PendingReleased(Movement),
    PendingReversed(Movement),
    WithdrawalFrozen(Movement),
    WithdrawalUnfrozen(Movement),
    FrozenPaidOut(Movement),
    RiskHoldPlaced(Movement),
    RiskHoldReleased(Movement),
    WithdrawalsBlocked {
        ref_type: String,
        ref_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    WithdrawalsUnblocked {
        ref_type: String,
        ref_id: String,
    },
}

/// Current schema version of movement events. Version 1 stored no `delta`
/// (see `crate::upcast::movement_v1_to_v2`).
pub const MOVEMENT_EVENT_VERSION: i32 = 2;

impl WalletEvent {
    /// Build the movement event for an entry type.
    pub fn movement(m: Movement) -> WalletEvent {
        match m.entry_type {
            EntryType::CreditPending => WalletEvent::PendingCredited(m),
            EntryType::ReleasePending => WalletEvent::PendingReleased(m),
            EntryType::ReversePending => WalletEvent::PendingReversed(m),
            EntryType::WithdrawFreeze => WalletEvent::WithdrawalFrozen(m),
            EntryType::WithdrawUnfreeze => WalletEvent::WithdrawalUnfrozen(m),
            EntryType::WithdrawPayout => WalletEvent::FrozenPaidOut(m),
            EntryType::RiskHold => WalletEvent::RiskHoldPlaced(m),
            EntryType::RiskHoldRelease => WalletEvent::RiskHoldReleased(m),
        }
    }

    pub fn as_movement(&self) -> Option<&Movement> {
        match self {
            WalletEvent::PendingCredited(m)
            | WalletEvent::PendingReleased(m)
            | WalletEvent::PendingReversed(m)
            | WalletEvent::WithdrawalFrozen(m)
            | WalletEvent::WithdrawalUnfrozen(m)
            | WalletEvent::FrozenPaidOut(m)
            | WalletEvent::RiskHoldPlaced(m)
            | WalletEvent::RiskHoldReleased(m) => Some(m),
            _ => None,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            WalletEvent::WalletOpened { .. } => "WalletOpened",
            WalletEvent::PendingCredited(_) => "PendingCredited",
            WalletEvent::PendingReleased(_) => "PendingReleased",
            WalletEvent::PendingReversed(_) => "PendingReversed",
            WalletEvent::WithdrawalFrozen(_) => "WithdrawalFrozen",
            WalletEvent::WithdrawalUnfrozen(_) => "WithdrawalUnfrozen",
            WalletEvent::FrozenPaidOut(_) => "FrozenPaidOut",
            WalletEvent::RiskHoldPlaced(_) => "RiskHoldPlaced",
            WalletEvent::RiskHoldReleased(_) => "RiskHoldReleased",
            WalletEvent::WithdrawalsBlocked { .. } => "WithdrawalsBlocked",
            WalletEvent::WithdrawalsUnblocked { .. } => "WithdrawalsUnblocked",
        }
    }

    pub fn version(&self) -> i32 {
        if self.as_movement().is_some() {
            MOVEMENT_EVENT_VERSION
        } else {
            1
        }
    }
}

impl DomainEvent for WalletEvent {
    fn event_type(&self) -> String {
        self.name().to_owned()
    }

    fn event_version(&self) -> String {
        self.version().to_string()
    }
}
