//! The balance transition table: which buckets each entry type moves (R-WAL-2), and
//! the conservation arithmetic (R-INV-2) every movement is built with.

use crate::accounts::{AccountKind, Flag};
use serde::{Deserialize, Serialize};

/// The four balance buckets of a wallet, in minor units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Buckets {
    pub pending_minor: i64,
    pub available_minor: i64,
    pub frozen_minor: i64,
    pub risk_hold_minor: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bucket {
    Pending,
    Available,
    Frozen,
    RiskHold,
}

impl Bucket {
    pub fn name(self) -> &'static str {
        match self {
            Bucket::Pending => "pending",
            Bucket::Available => "available",
            Bucket::Frozen => "frozen",
            Bucket::RiskHold => "risk_hold",
        }
    }
}

impl Buckets {
    pub fn get(&self, bucket: Bucket) -> i64 {
        match bucket {
            Bucket::Pending => self.pending_minor,
            Bucket::Available => self.available_minor,
            Bucket::Frozen => self.frozen_minor,
            Bucket::RiskHold => self.risk_hold_minor,
        }
    }

    fn slot(&mut self, bucket: Bucket) -> &mut i64 {
        match bucket {
            Bucket::Pending => &mut self.pending_minor,
            Bucket::Available => &mut self.available_minor,
            Bucket::Frozen => &mut self.frozen_minor,
            Bucket::RiskHold => &mut self.risk_hold_minor,
        }
    }

    pub const ALL: [Bucket; 4] = [
        Bucket::Pending,
        Bucket::Available,
        Bucket::Frozen,
        Bucket::RiskHold,
    ];

    /// `self + delta`, bucket by bucket; `None` on i64 overflow.
    pub fn checked_add(&self, delta: &Buckets) -> Option<Buckets> {
        let mut out = *self;
        for b in Self::ALL {
            *out.slot(b) = self.get(b).checked_add(delta.get(b))?;
        }
        Some(out)
    }

    /// The first bucket whose account flag these balances would break, with the
    /// flag: each bucket is a `wallet:{id}:{bucket}` account of the chart, and a
    /// bucket below zero breaks its `debits_must_not_exceed_credits` (no debt model,
    /// R-INV-2).
    pub fn first_broken_flag(&self) -> Option<(Bucket, Flag)> {
        let flags = AccountKind::WalletBucket.flags();
        Self::ALL
            .into_iter()
            .find_map(|b| flags.check(self.get(b)).err().map(|flag| (b, flag)))
    }
}

/// Ledger entry types. The wire names are the seed's (`WITHDRAW_FREEZE`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EntryType {
    CreditPending,
    ReleasePending,
    ReversePending,
    WithdrawFreeze,
    WithdrawUnfreeze,
    WithdrawPayout,
    RiskHold,
    RiskHoldRelease,
}

impl EntryType {
    pub fn as_str(self) -> &'static str {
        match self {
            EntryType::CreditPending => "CREDIT_PENDING",
            EntryType::ReleasePending => "RELEASE_PENDING",
            EntryType::ReversePending => "REVERSE_PENDING",
            EntryType::WithdrawFreeze => "WITHDRAW_FREEZE",
            EntryType::WithdrawUnfreeze => "WITHDRAW_UNFREEZE",
            EntryType::WithdrawPayout => "WITHDRAW_PAYOUT",
            EntryType::RiskHold => "RISK_HOLD",
            EntryType::RiskHoldRelease => "RISK_HOLD_RELEASE",
        }
    }

    /// The transition table: `(debited bucket, credited bucket)`. `None` on a side
    /// means money enters from (or leaves to) the outside world.
    pub fn moves(self) -> (Option<Bucket>, Option<Bucket>) {
        use Bucket::*;
        match self {
            EntryType::CreditPending => (None, Some(Pending)),
            EntryType::ReleasePending => (Some(Pending), Some(Available)),
            EntryType::ReversePending => (Some(Pending), None),
            EntryType::WithdrawFreeze => (Some(Available), Some(Frozen)),
            EntryType::WithdrawUnfreeze => (Some(Frozen), Some(Available)),
            EntryType::WithdrawPayout => (Some(Frozen), None),
            EntryType::RiskHold => (Some(Available), Some(RiskHold)),
            EntryType::RiskHoldRelease => (Some(RiskHold), Some(Available)),
        }
    }

    /// The per-bucket delta of moving `amount_minor` under this entry type.
    pub fn delta(self, amount_minor: i64) -> Buckets {
        let (from, to) = self.moves();
        let mut d = Buckets::default();
        if let Some(b) = from {
            *d.slot(b) -= amount_minor;
        }
        if let Some(b) = to {
            *d.slot(b) += amount_minor;
        }
        d
    }
}
