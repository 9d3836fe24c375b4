//! Why an ingested order was refused (the failing step's own error, with its stable
//! code and field), and the stream ids an order's unit touches (rule set, campaign,
//! wallet).

use factledger_aggregates::affiliate::{CountryCode, Platform};
use factledger_aggregates::affiliate_link::LinkError;
use factledger_aggregates::affiliate_order::OrderError;
use factledger_aggregates::campaign::CampaignError;
use factledger_aggregates::commission::CommissionError;
use factledger_aggregates::commission_rules::RuleSetError;
use factledger_aggregates::invite::InviteError;
use factledger_aggregates::money::Currency;
use factledger_aggregates::wallet::WalletError;

/// Why an order was refused: the step's own error, with its stable code and field.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error(transparent)]
    Order(#[from] OrderError),
    #[error(transparent)]
    Commission(#[from] CommissionError),
    #[error(transparent)]
    Campaign(#[from] CampaignError),
    #[error(transparent)]
    Wallet(#[from] WalletError),
    #[error(transparent)]
    Rules(#[from] RuleSetError),
    #[error(transparent)]
    Invite(#[from] InviteError),
    #[error(transparent)]
    Link(#[from] LinkError),
    #[error("{0}")]
    Invalid(String),
}

impl Refusal {
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::Order(e) => e.code(),
            Refusal::Commission(e) => e.code(),
            Refusal::Campaign(e) => e.code(),
            Refusal::Wallet(e) => e.code(),
            Refusal::Rules(e) => e.code(),
            Refusal::Invite(e) => e.code(),
            Refusal::Link(e) => e.code(),
            Refusal::Invalid(_) => "INVALID_ORDER",
        }
    }

    pub fn field(&self) -> Option<&'static str> {
        match self {
            Refusal::Order(e) => e.field(),
            Refusal::Commission(e) => e.field(),
            Refusal::Campaign(e) => e.field(),
            Refusal::Wallet(_) => None,
            Refusal::Rules(RuleSetError::NoVersionInForce { .. }) => Some("ordered_at"),
            Refusal::Rules(e) => e.field(),
            Refusal::Invite(e) => e.field(),
            Refusal::Link(e) => e.field(),
            Refusal::Invalid(_) => None,
        }
    }
}

/// The rule set of a platform × country: `<PLATFORM>:<COUNTRY>`.
pub fn rule_set_id(platform: Platform, country: CountryCode) -> String {
    format!("{}:{}", platform.as_str(), country.as_str())
}

/// The campaign orders of a platform × country reserve quota in, if it was opened.
pub fn campaign_id(platform: Platform, country: CountryCode) -> String {
    rule_set_id(platform, country)
}

/// A user's wallet in one currency (R-WAL-1: buckets per user per currency).
pub fn wallet_id(user_id: &str, currency: Currency) -> String {
    format!("{user_id}:{currency}")
}
