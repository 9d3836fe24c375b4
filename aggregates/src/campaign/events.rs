//! Campaign events. Payloads are stored forever: changing a shape means a new
//! `event_version` and an upcaster in `crate::upcast`, never a rewrite.

use super::commands::{QuotaUnit, ReleaseReason};
use crate::money::Currency;
use chrono::{DateTime, Utc};
use cqrs_es::DomainEvent;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CampaignOpened {
    pub campaign_id: String,
    pub quota_unit: QuotaUnit,
    pub quota_limit: i64,
    pub currency: Option<Currency>,
    pub starts_at: DateTime<Utc>,
    pub ends_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaReserved {
    pub order_id: String,
    /// Quota taken: 1 for `ORDERS`, the amount for `MINOR_UNITS`.
    pub units: i64,
    pub ordered_at: DateTime<Utc>,
    /// Quota reserved by all active reservations after this one (`<= quota_limit`).
    pub reserved_after: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaReleased {
    pub order_id: String,
    pub units: i64,
    pub reason: ReleaseReason,
    pub reserved_after: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum CampaignEvent {
    CampaignOpened(CampaignOpened),
    QuotaReserved(QuotaReserved),
    QuotaReleased(QuotaReleased),
}

/// Current schema version of every campaign event.
pub const CAMPAIGN_EVENT_VERSION: i32 = 1;

impl CampaignEvent {
    pub fn name(&self) -> &'static str {
        match self {
            Self::CampaignOpened(_) => "CampaignOpened",
            Self::QuotaReserved(_) => "QuotaReserved",
            Self::QuotaReleased(_) => "QuotaReleased",
        }
    }
}

impl DomainEvent for CampaignEvent {
    fn event_type(&self) -> String {
        self.name().to_owned()
    }

    fn event_version(&self) -> String {
        CAMPAIGN_EVENT_VERSION.to_string()
    }
}
