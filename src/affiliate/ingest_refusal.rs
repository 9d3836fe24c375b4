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
pub enum OrderRefusal {
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

/// Told like every aggregate refusal (`factledger_aggregates::Refusal`): the failing
/// step's own code and field, and the default kind.
impl factledger_aggregates::Refusal for OrderRefusal {
    fn code(&self) -> &'static str {
        match self {
            OrderRefusal::Order(e) => e.code(),
            OrderRefusal::Commission(e) => e.code(),
            OrderRefusal::Campaign(e) => e.code(),
            OrderRefusal::Wallet(e) => e.code(),
            OrderRefusal::Rules(e) => e.code(),
            OrderRefusal::Invite(e) => e.code(),
            OrderRefusal::Link(e) => e.code(),
            OrderRefusal::Invalid(_) => "INVALID_ORDER",
        }
    }

    fn field(&self) -> Option<&'static str> {
        match self {
            OrderRefusal::Order(e) => e.field(),
            OrderRefusal::Commission(e) => e.field(),
            OrderRefusal::Campaign(e) => e.field(),
            OrderRefusal::Wallet(_) => None,
            OrderRefusal::Rules(RuleSetError::NoVersionInForce { .. }) => Some("ordered_at"),
            OrderRefusal::Rules(e) => e.field(),
            OrderRefusal::Invite(e) => e.field(),
            OrderRefusal::Link(e) => e.field(),
            OrderRefusal::Invalid(_) => None,
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
