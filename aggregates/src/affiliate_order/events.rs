//! Affiliate order events. Payloads are stored forever: changing a shape means a new
//! `event_version` and an upcaster in `crate::upcast`, never a rewrite.
//!
//! Every event carries the order's `revision` (1, 2, …; one per event), which a
//! commission uses to ignore an order signal it has already seen or that arrives
//! after a newer one.

use super::commands::Attribution;
use crate::affiliate::{CountryCode, Platform, PlatformOrderId};
use crate::affiliate_values::{CommissionAmounts, OrderSignal, OrderStatus};
use crate::commission_rules::RuleSnapshot;
use crate::money::Currency;
use chrono::{DateTime, Utc};
use cqrs_es::DomainEvent;
use serde::{Deserialize, Serialize};

/// The first sight of an order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrderIngested {
    pub revision: u32,
    pub platform: Platform,
    pub country: CountryCode,
    pub platform_order_id: PlatformOrderId,
    pub status: OrderStatus,
    pub currency: Currency,
    /// As reported; 0 if the platform did not send it.
    pub gmv_minor: i64,
    /// As reported; 0 if the platform did not send it.
    pub platform_commission_minor: i64,
    pub ordered_at: DateTime<Utc>,
    pub platform_updated_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attribution: Option<Attribution>,
    pub owner_user_id: Option<String>,
    pub inviter_user_id: Option<String>,
    /// The rule version in force at `ordered_at`, frozen here forever (R-INV-5).
    pub rules: RuleSnapshot,
    /// What the order yields under `rules` (R-ORD-5).
    pub amounts: CommissionAmounts,
    /// First seen already REFUNDED or CANCELLED: kept for audit only, credits
    /// nothing, ever (R-ORD-5).
    pub audit_only: bool,
}

/// A newer platform message changed the order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrderUpdated {
    pub revision: u32,
    pub from_status: OrderStatus,
    pub status: OrderStatus,
    /// As reported (0 = not sent), for audit of sparse replays (R-ORD-6).
    pub reported_gmv_minor: i64,
    pub reported_platform_commission_minor: i64,
    /// The known amounts after this update: a reported 0 keeps the previous value.
    pub gmv_minor: i64,
    pub platform_commission_minor: i64,
    pub platform_updated_at: DateTime<Utc>,
    /// Recomputed with the order's own rule snapshot, never today's rules.
    pub amounts: CommissionAmounts,
    /// What the commissions must react to (see [`OrderSignal`]).
    pub signal: OrderSignal,
}

/// An audited change of owner (R-ORD-4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttributionCorrected {
    pub revision: u32,
    pub old_owner_user_id: Option<String>,
    pub new_owner_user_id: Option<String>,
    pub old_inviter_user_id: Option<String>,
    pub new_inviter_user_id: Option<String>,
    pub actor: String,
    pub reason: String,
    pub corrected_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum OrderEvent {
    OrderIngested(OrderIngested),
    OrderUpdated(OrderUpdated),
    AttributionCorrected(AttributionCorrected),
}

/// Current schema version of every order event.
pub const ORDER_EVENT_VERSION: i32 = 1;

impl OrderEvent {
    pub fn name(&self) -> &'static str {
        match self {
            OrderEvent::OrderIngested(_) => "OrderIngested",
            OrderEvent::OrderUpdated(_) => "OrderUpdated",
            OrderEvent::AttributionCorrected(_) => "AttributionCorrected",
        }
    }

    pub fn revision(&self) -> u32 {
        match self {
            OrderEvent::OrderIngested(e) => e.revision,
            OrderEvent::OrderUpdated(e) => e.revision,
            OrderEvent::AttributionCorrected(e) => e.revision,
        }
    }
}

impl DomainEvent for OrderEvent {
    fn event_type(&self) -> String {
        self.name().to_owned()
    }

    fn event_version(&self) -> String {
        ORDER_EVENT_VERSION.to_string()
    }
}
