//! Campaign commands. Tagged by `"type"` on the wire; unknown fields are refused.

use crate::money::{AmountMinor, BoundedId, Currency};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// What a campaign's quota counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum QuotaUnit {
    /// Each order takes 1 (e.g. "the first 100 orders get a bonus").
    Orders,
    /// Each order takes its amount in minor units of the campaign's currency (a
    /// cashback fund).
    MinorUnits,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenCampaign {
    pub campaign_id: BoundedId,
    pub quota_unit: QuotaUnit,
    /// The whole quota: orders, or minor units of `currency`.
    pub quota_limit: AmountMinor,
    /// Required for `MINOR_UNITS` quotas, so a fund in IDR never reserves USD.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::money::iso_currency_opt"
    )]
    pub currency: Option<Currency>,
    /// Orders placed from here on (inclusive) take part.
    pub starts_at: DateTime<Utc>,
    /// Orders placed at or after this do not; `None` = open-ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ends_at: Option<DateTime<Utc>>,
}

/// Reserve quota for an order (seed §6.2 step 5), in the order's ingest unit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReserveQuota {
    /// The order's stream id; one reservation per order, ever.
    pub order_id: BoundedId,
    /// Business time: decides whether the order takes part (R-INV-5).
    pub ordered_at: DateTime<Utc>,
    /// Required for `MINOR_UNITS` quotas: how much of the fund the order takes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amount_minor: Option<AmountMinor>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub currency: Option<Currency>,
}

/// Why a reservation is given back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ReleaseReason {
    OrderRefunded,
    OrderCancelled,
}

/// Give an order's reservation back so the next order can use it (R-ORD-7). Sent
/// when the order is refunded or cancelled for good (a refund still in progress
/// keeps the reservation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseQuota {
    pub order_id: BoundedId,
    pub reason: ReleaseReason,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum CampaignCommand {
    Open(OpenCampaign),
    Reserve(ReserveQuota),
    Release(ReleaseQuota),
}

impl CampaignCommand {
    /// The command's name as it appears in `"type"`, for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Open(_) => "Open",
            Self::Reserve(_) => "Reserve",
            Self::Release(_) => "Release",
        }
    }
}
