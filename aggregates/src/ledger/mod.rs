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
//! | `campaign_funding:{campaign_id}:{CUR}`    | what the platform set aside for a cashback fund | debit | — |
//! | `campaign_budget:{campaign_id}:{CUR}`     | what is left of the fund to reserve | credit | debits must not exceed credits |
//! | `campaign_reserved:{campaign_id}:{CUR}`   | the fund's reservations by orders | credit | — |
//! | `provider_clearing:{provider}:{CUR}`      | paid out, in flight at a payout provider | credit | — |
//! | `external:{ref_type}:{CUR}`               | any other source or sink a wallet command names | debit | — |
//! | `candy:{user_id}:{balance,held}` and the other accounts of paid services | see [`services`] | | |
//!
//! Wallet buckets are what the platform owes a user (credit-normal); their flag is the
//! rule the wallet aggregate enforces when money moves (`Wallet::check`: no bucket
//! below zero), so a command whose posting would overdraw a bucket is refused with
//! `INSUFFICIENT_BALANCE` and nothing is written. A campaign fund (a quota in minor
//! units, R-ORD-7) is a budget: opening it funds `campaign_budget`, each order's
//! reservation moves its amount to `campaign_reserved` and a release moves it back;
//! the budget's flag is the campaign aggregate's quota rule, so a reservation past
//! the fund is refused with `QUOTA_EXHAUSTED`. A quota counted in orders moves no
//! money and posts nothing. Other system accounts carry no flag: the flagged side of
//! every posting bounds them (a reversal can only take back what its pending bucket
//! holds).
//!
//! The mapping from events to postings is [`CHART_VERSION`]ed and is a pure function
//! of the event and the currency of its stream, so the whole history — events written
//! before double entry existed included — reads as a balanced journal without a
//! rewrite: the chart is the upcaster from a single-sided movement to its posting.

pub use crate::accounts::{AccountKind, Flag, Flags, Side};
use crate::campaign::{CampaignEvent, QuotaUnit};
use crate::commission::{CommissionEvent, COMMISSION_ADJUSTMENT_REF_TYPE, COMMISSION_REF_TYPE};
use crate::money::Currency;
use crate::wallet::{Bucket, EntryType, WalletEvent};

/// The version of the chart and of the event → posting mapping. Bump it (and the
/// journal projection's version) when an account name or a mapping changes.
pub const CHART_VERSION: i32 = 3;

/// The `ref_type` of a wallet payout (`FrozenPaidOut`) to a payout provider.
pub const WITHDRAWAL_REF_TYPE: &str = "WITHDRAWAL";

/// The provider of a payout whose movement names none (every payout written before
/// withdrawals named their provider).
pub const PROVIDER_UNASSIGNED: &str = "UNASSIGNED";

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
    counterparty: Option<&str>,
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
        (EntryType::WithdrawPayout, _) => system_account(
            AccountKind::ProviderClearing,
            counterparty.unwrap_or(PROVIDER_UNASSIGNED),
            currency,
        ),
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
    let outside = || {
        let counterparty = m.counterparty.as_deref();
        counter_account(m.entry_type, &m.ref_type, &m.ref_id, counterparty, currency)
    };
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

/// The `ref_type` of a campaign fund's own postings (funded by opening it).
pub const CAMPAIGN_REF_TYPE: &str = "CAMPAIGN";
/// The `ref_type` of a reservation of a campaign fund by an order.
pub const CAMPAIGN_ORDER_REF_TYPE: &str = "ORDER";

/// Whether a campaign stream's quota is money: a fund in minor units of a currency.
/// `None` for a quota counted in orders, whose events post nothing.
pub fn campaign_currency(opened: &crate::campaign::CampaignOpened) -> Option<Currency> {
    match opened.quota_unit {
        QuotaUnit::MinorUnits => opened.currency,
        QuotaUnit::Orders => None,
    }
}

/// The posting of a campaign event of a fund in `currency` (see
/// [`campaign_currency`]): funding the budget when it opens, then each reservation
/// from the budget to the reserved account and each release back.
pub fn campaign_posting(campaign_id: &str, currency: Currency, event: &CampaignEvent) -> Posting {
    let account = |kind| system_account(kind, campaign_id, currency);
    let budget = account(AccountKind::CampaignBudget);
    let reserved = account(AccountKind::CampaignReserved);
    let (debit, credit, amount, ref_type, ref_id, entry) = match event {
        CampaignEvent::CampaignOpened(e) => (
            account(AccountKind::CampaignFunding),
            budget,
            e.quota_limit,
            CAMPAIGN_REF_TYPE,
            campaign_id,
            "CAMPAIGN_FUNDED",
        ),
        CampaignEvent::QuotaReserved(e) => (
            budget,
            reserved,
            e.units,
            CAMPAIGN_ORDER_REF_TYPE,
            e.order_id.as_str(),
            "QUOTA_RESERVED",
        ),
        CampaignEvent::QuotaReleased(e) => (
            reserved,
            budget,
            e.units,
            CAMPAIGN_ORDER_REF_TYPE,
            e.order_id.as_str(),
            "QUOTA_RELEASED",
        ),
    };
    Posting {
        debit,
        credit,
        amount_minor: amount,
        currency,
        ref_type: ref_type.to_owned(),
        ref_id: ref_id.to_owned(),
        entry_type: entry.to_owned(),
    }
}

mod services;
pub use services::{candy_account, candy_posting, order_posting};

#[cfg(test)]
mod tests;
