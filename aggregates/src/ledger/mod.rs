//! The chart of accounts and the postings money events make (double entry, issue 16).
//!
//! Every movement of money is a **posting**: one amount, in one currency, debited to
//! one account and credited to another, so the sum over all accounts is zero at every
//! position. Accounts are named by the chart:
//!
//! | account                                   | kind                 | normal side | flag                              |
//! |-------------------------------------------|----------------------|-------------|-----------------------------------|
//! | `wallet:{wallet_id}:pending`              | wallet bucket        | credit      | debits must not exceed credits    |
//! | `wallet:{wallet_id}:available`            | wallet bucket        | credit      | debits must not exceed credits    |
//! | `wallet:{wallet_id}:frozen`               | wallet bucket        | credit      | debits must not exceed credits    |
//! | `wallet:{wallet_id}:risk_hold`            | wallet bucket        | credit      | debits must not exceed credits    |
//! | `commission_expense:{platform}:{CUR}`     | cashback paid        | debit       | —                                 |
//! | `inviter_rewards:{platform}:{CUR}`        | inviter rewards paid | debit       | —                                 |
//! | `recovery_receivable:{platform}:{CUR}`    | owed back after a refund past release (seed 003 case 6) | debit | — |
//! | `provider_clearing:{provider}:{CUR}`      | paid out, in flight at a payout provider | credit | — |
//! | `external:{ref_type}:{CUR}`               | any other source or sink a wallet command names | debit | — |
//!
//! Wallet buckets are what the platform owes a user (credit-normal); their flag is the
//! rule the wallet aggregate enforces when money moves (`Wallet::check`: no bucket
//! below zero), so a command whose posting would overdraw a bucket is refused with
//! `INSUFFICIENT_BALANCE` and nothing is written. System accounts carry no flag: the
//! wallet side of every posting bounds them (a reversal can only take back what its
//! pending bucket holds).
//!
//! The mapping from events to postings is [`CHART_VERSION`]ed and is a pure function
//! of the event and the currency of its stream, so the whole history — events written
//! before double entry existed included — reads as a balanced journal without a
//! rewrite: the chart is the upcaster from a single-sided movement to its posting.

use crate::commission::{CommissionEvent, COMMISSION_ADJUSTMENT_REF_TYPE, COMMISSION_REF_TYPE};
use crate::money::Currency;
use crate::wallet::{Bucket, EntryType, WalletEvent};

/// The version of the chart and of the event → posting mapping. Bump it (and the
/// journal projection's version) when an account name or a mapping changes.
pub const CHART_VERSION: i32 = 1;

/// The `ref_type` of a wallet payout (`FrozenPaidOut`) to a payout provider.
pub const WITHDRAWAL_REF_TYPE: &str = "WITHDRAWAL";

/// The provider a payout clears through until payouts name theirs.
pub const PROVIDER_UNASSIGNED: &str = "UNASSIGNED";

/// Which side of an account its balance normally sits on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Debit,
    Credit,
}

impl Side {
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Debit => "DEBIT",
            Side::Credit => "CREDIT",
        }
    }
}

/// The kinds of account in the chart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum AccountKind {
    WalletBucket,
    CommissionExpense,
    InviterRewards,
    RecoveryReceivable,
    ProviderClearing,
    External,
}

/// TigerBeetle-style account flags: a posting that would break one is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Flags {
    pub debits_must_not_exceed_credits: bool,
    pub credits_must_not_exceed_debits: bool,
}

impl AccountKind {
    pub const ALL: [AccountKind; 6] = [
        AccountKind::WalletBucket,
        AccountKind::CommissionExpense,
        AccountKind::InviterRewards,
        AccountKind::RecoveryReceivable,
        AccountKind::ProviderClearing,
        AccountKind::External,
    ];

    /// The first segment of the account names of this kind.
    pub fn prefix(self) -> &'static str {
        match self {
            AccountKind::WalletBucket => "wallet",
            AccountKind::CommissionExpense => "commission_expense",
            AccountKind::InviterRewards => "inviter_rewards",
            AccountKind::RecoveryReceivable => "recovery_receivable",
            AccountKind::ProviderClearing => "provider_clearing",
            AccountKind::External => "external",
        }
    }

    pub fn normal_side(self) -> Side {
        match self {
            AccountKind::WalletBucket | AccountKind::ProviderClearing => Side::Credit,
            AccountKind::CommissionExpense
            | AccountKind::InviterRewards
            | AccountKind::RecoveryReceivable
            | AccountKind::External => Side::Debit,
        }
    }

    pub fn flags(self) -> Flags {
        match self {
            AccountKind::WalletBucket => Flags {
                debits_must_not_exceed_credits: true,
                credits_must_not_exceed_debits: false,
            },
            _ => Flags::default(),
        }
    }

    /// The kind of an account name, by its first segment.
    pub fn of(account: &str) -> Option<AccountKind> {
        let prefix = account.split(':').next()?;
        AccountKind::ALL.into_iter().find(|k| k.prefix() == prefix)
    }
}

/// `wallet:{wallet_id}:{bucket}`.
pub fn wallet_account(wallet_id: &str, bucket: Bucket) -> String {
    format!("wallet:{wallet_id}:{}", bucket.name())
}

/// A system account: `{kind}:{qualifier}:{CUR}`.
pub fn system_account(kind: AccountKind, qualifier: &str, currency: Currency) -> String {
    format!("{}:{qualifier}:{currency}", kind.prefix())
}

/// One balanced posting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Posting {
    pub debit: String,
    pub credit: String,
    pub amount_minor: i64,
    pub currency: Currency,
    /// What business action moved the money (the movement's reference).
    pub ref_type: String,
    pub ref_id: String,
    /// The event's own name for the movement, e.g. `CREDIT_PENDING`.
    pub entry_type: String,
}

/// The platform of a commission: the first segment of its id
/// (`<PLATFORM>:<order>:<ROLE>`, see `commission::commission_id`).
fn platform_of(commission_id: &str) -> &str {
    commission_id.split(':').next().unwrap_or(commission_id)
}

/// The system account on the outside-world side of a wallet movement: where money
/// credited to a wallet came from, or where money taken out of one went.
pub fn counter_account(
    entry: EntryType,
    ref_type: &str,
    ref_id: &str,
    currency: Currency,
) -> String {
    match (entry, ref_type) {
        (_, COMMISSION_REF_TYPE | COMMISSION_ADJUSTMENT_REF_TYPE) => {
            let kind = if ref_id.ends_with(":INVITER_REWARD") {
                AccountKind::InviterRewards
            } else {
                AccountKind::CommissionExpense
            };
            system_account(kind, platform_of(ref_id), currency)
        }
        (EntryType::WithdrawPayout, _) => {
            system_account(AccountKind::ProviderClearing, PROVIDER_UNASSIGNED, currency)
        }
        (_, other) => system_account(AccountKind::External, other, currency),
    }
}

/// The posting of a wallet event (`None` for an event that moves no money).
pub fn wallet_posting(wallet_id: &str, currency: Currency, event: &WalletEvent) -> Option<Posting> {
    let m = match event {
        WalletEvent::PendingCredited(m)
        | WalletEvent::PendingReleased(m)
        | WalletEvent::PendingReversed(m)
        | WalletEvent::WithdrawalFrozen(m)
        | WalletEvent::WithdrawalUnfrozen(m)
        | WalletEvent::FrozenPaidOut(m)
        | WalletEvent::RiskHoldPlaced(m)
        | WalletEvent::RiskHoldReleased(m) => m,
        WalletEvent::WalletOpened { .. }
        | WalletEvent::WithdrawalsBlocked { .. }
        | WalletEvent::WithdrawalsUnblocked { .. } => return None,
    };
    // A bucket the money leaves is debited (its balance, credit-normal, goes down);
    // the bucket it enters is credited. The outside world stands in for a missing side.
    let (from, to) = m.entry_type.moves();
    let outside = || counter_account(m.entry_type, &m.ref_type, &m.ref_id, currency);
    let debit = from.map_or_else(outside, |b| wallet_account(wallet_id, b));
    let credit = to.map_or_else(outside, |b| wallet_account(wallet_id, b));
    Some(Posting {
        debit,
        credit,
        amount_minor: m.amount_minor,
        currency,
        ref_type: m.ref_type.clone(),
        ref_id: m.ref_id.clone(),
        entry_type: m.entry_type.as_str().to_owned(),
    })
}

/// The posting of a commission event (`None` for one that moves no money: the
/// wallet movement the same unit appends is the posting). A recovery review opened
/// after release (the order was refunded after the commission was paid, seed 003
/// case 6) books what the user owes back; resolving it by hand writes it off.
pub fn commission_posting(
    commission_id: &str,
    currency: Currency,
    event: &CommissionEvent,
) -> Option<Posting> {
    let expense_kind = if commission_id.ends_with(":INVITER_REWARD") {
        AccountKind::InviterRewards
    } else {
        AccountKind::CommissionExpense
    };
    let platform = platform_of(commission_id);
    let receivable = system_account(AccountKind::RecoveryReceivable, platform, currency);
    let expense = system_account(expense_kind, platform, currency);
    let (debit, credit, amount, entry) = match event {
        CommissionEvent::RecoveryReviewOpened(e) => {
            (receivable, expense, e.amount_minor, "RECOVERY_OPENED")
        }
        CommissionEvent::RecoveryManuallyResolved(e) => {
            (expense, receivable, e.amount_minor, "RECOVERY_WRITTEN_OFF")
        }
        CommissionEvent::CommissionRecorded(_)
        | CommissionEvent::CommissionFrozen(_)
        | CommissionEvent::CommissionUnfrozen(_)
        | CommissionEvent::CommissionInvalidated(_)
        | CommissionEvent::CommissionReleased(_) => return None,
    };
    Some(Posting {
        debit,
        credit,
        amount_minor: amount,
        currency,
        ref_type: crate::commission::RECOVERY_REVIEW_REF_TYPE.to_owned(),
        ref_id: commission_id.to_owned(),
        entry_type: entry.to_owned(),
    })
}

#[cfg(test)]
mod tests;
