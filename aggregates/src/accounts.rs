//! Accounts of the chart: their kinds, normal sides and flags (double entry).
//!
//! A leaf of the crate: the aggregates that hold an account's balance (a wallet holds
//! its four bucket accounts, a campaign its budget) check a movement against the
//! account's flags here when they decide, and `crate::ledger` maps their events to
//! postings between accounts named by these kinds. Nothing here imports an
//! aggregate, so both can use it without an import circle.
//!
//! Flags are TigerBeetle's: `debits_must_not_exceed_credits` on an account whose
//! balance may never go below zero on its credit side (what the platform owes a user,
//! a budget), and the reverse. A command whose posting would break a flag is refused
//! and writes nothing.

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
    /// `wallet:{wallet_id}:{bucket}`: what the platform owes a user, per bucket.
    WalletBucket,
    /// `commission_expense:{platform}:{CUR}`: cashback paid to users.
    CommissionExpense,
    /// `inviter_rewards:{platform}:{CUR}`: rewards paid to direct inviters.
    InviterRewards,
    /// `recovery_receivable:{platform}:{CUR}`: owed back after a refund past release.
    RecoveryReceivable,
    /// `campaign_funding:{campaign_id}:{CUR}`: what the platform set aside for a fund.
    CampaignFunding,
    /// `campaign_budget:{campaign_id}:{CUR}`: what is left of a fund to reserve.
    CampaignBudget,
    /// `campaign_reserved:{campaign_id}:{CUR}`: a fund's reservations by orders.
    CampaignReserved,
    /// `provider_clearing:{provider}:{CUR}`: paid out, in flight at a payout provider.
    ProviderClearing,
    /// `external:{ref_type}:{CUR}`: any other source or sink a wallet command names.
    External,
    /// `candy:{user_id}:{balance|held}`: the candy the platform owes a user (`ZZC`).
    CandyBucket,
    /// `candy_issued:{source}:ZZC`: candy issued against cash received.
    CandyIssued,
    /// `artist_income:{artist_id}:ZZC`: candy an artist earned.
    ArtistIncome,
    /// `candy_forfeited:{reason}:ZZC`: held candy the platform kept.
    CandyForfeited,
    /// `gateway_clearing:{method}:{CUR}`: cash a payment gateway holds for us.
    GatewayClearing,
    /// `service_sales:{business}:{CUR}`: cash a paid service earned.
    ServiceSales,
    /// `refund_payable:{method}:{CUR}`: cash received that is owed back.
    RefundPayable,
}

/// A rule an account's totals must keep after every posting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flag {
    DebitsMustNotExceedCredits,
    CreditsMustNotExceedDebits,
}

impl Flag {
    pub fn as_str(self) -> &'static str {
        match self {
            Flag::DebitsMustNotExceedCredits => "debits_must_not_exceed_credits",
            Flag::CreditsMustNotExceedDebits => "credits_must_not_exceed_debits",
        }
    }
}

/// TigerBeetle-style account flags: a posting that would break one is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Flags {
    pub debits_must_not_exceed_credits: bool,
    pub credits_must_not_exceed_debits: bool,
}

impl Flags {
    /// Whether an account may hold `credit_balance` (its credits minus its debits)
    /// after a posting; the flag it would break otherwise.
    pub fn check(self, credit_balance: i64) -> Result<(), Flag> {
        if self.debits_must_not_exceed_credits && credit_balance < 0 {
            return Err(Flag::DebitsMustNotExceedCredits);
        }
        if self.credits_must_not_exceed_debits && credit_balance > 0 {
            return Err(Flag::CreditsMustNotExceedDebits);
        }
        Ok(())
    }
}

impl AccountKind {
    pub const ALL: [AccountKind; 16] = [
        AccountKind::WalletBucket,
        AccountKind::CommissionExpense,
        AccountKind::InviterRewards,
        AccountKind::RecoveryReceivable,
        AccountKind::CampaignFunding,
        AccountKind::CampaignBudget,
        AccountKind::CampaignReserved,
        AccountKind::ProviderClearing,
        AccountKind::External,
        AccountKind::CandyBucket,
        AccountKind::CandyIssued,
        AccountKind::ArtistIncome,
        AccountKind::CandyForfeited,
        AccountKind::GatewayClearing,
        AccountKind::ServiceSales,
        AccountKind::RefundPayable,
    ];

    /// The first segment of the account names of this kind.
    pub fn prefix(self) -> &'static str {
        match self {
            AccountKind::WalletBucket => "wallet",
            AccountKind::CommissionExpense => "commission_expense",
            AccountKind::InviterRewards => "inviter_rewards",
            AccountKind::RecoveryReceivable => "recovery_receivable",
            AccountKind::CampaignFunding => "campaign_funding",
            AccountKind::CampaignBudget => "campaign_budget",
            AccountKind::CampaignReserved => "campaign_reserved",
            AccountKind::ProviderClearing => "provider_clearing",
            AccountKind::External => "external",
            AccountKind::CandyBucket => "candy",
            AccountKind::CandyIssued => "candy_issued",
            AccountKind::ArtistIncome => "artist_income",
            AccountKind::CandyForfeited => "candy_forfeited",
            AccountKind::GatewayClearing => "gateway_clearing",
            AccountKind::ServiceSales => "service_sales",
            AccountKind::RefundPayable => "refund_payable",
        }
    }

    pub fn normal_side(self) -> Side {
        match self {
            AccountKind::WalletBucket
            | AccountKind::CampaignBudget
            | AccountKind::CampaignReserved
            | AccountKind::ProviderClearing
            | AccountKind::CandyBucket
            | AccountKind::ArtistIncome
            | AccountKind::CandyForfeited
            | AccountKind::ServiceSales
            | AccountKind::RefundPayable => Side::Credit,
            AccountKind::CommissionExpense
            | AccountKind::InviterRewards
            | AccountKind::RecoveryReceivable
            | AccountKind::CampaignFunding
            | AccountKind::External
            | AccountKind::CandyIssued
            | AccountKind::GatewayClearing => Side::Debit,
        }
    }

    /// Wallet and candy buckets never go below zero (no debt model, R-INV-2), and a campaign
    /// fund is never reserved past its budget (R-ORD-7). The aggregate that holds the
    /// balance checks the flag when it decides; every other account is bounded by
    /// the flagged side of the postings that reach it.
    pub fn flags(self) -> Flags {
        match self {
            AccountKind::WalletBucket | AccountKind::CampaignBudget | AccountKind::CandyBucket => {
                Flags {
                    debits_must_not_exceed_credits: true,
                    credits_must_not_exceed_debits: false,
                }
            }
            _ => Flags::default(),
        }
    }

    /// The kind of an account name, by its first segment.
    pub fn of(account: &str) -> Option<AccountKind> {
        let prefix = account.split(':').next()?;
        AccountKind::ALL.into_iter().find(|k| k.prefix() == prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flagged_account_refuses_the_side_it_guards_and_only_that_side() {
        let bucket = AccountKind::WalletBucket.flags();
        assert_eq!(bucket.check(0), Ok(()));
        assert_eq!(bucket.check(5), Ok(()));
        assert_eq!(bucket.check(-1), Err(Flag::DebitsMustNotExceedCredits));
        let reverse = Flags {
            debits_must_not_exceed_credits: false,
            credits_must_not_exceed_debits: true,
        };
        assert_eq!(reverse.check(-7), Ok(()));
        assert_eq!(reverse.check(1), Err(Flag::CreditsMustNotExceedDebits));
        assert_eq!(AccountKind::CommissionExpense.flags().check(-9), Ok(()));
    }

    #[test]
    fn every_kind_is_found_again_by_its_prefix() {
        for kind in AccountKind::ALL {
            let name = format!("{}:x:IDR", kind.prefix());
            assert_eq!(AccountKind::of(&name), Some(kind));
        }
        assert_eq!(AccountKind::of("nonsense:x"), None);
    }
}
