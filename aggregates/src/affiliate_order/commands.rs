//! Affiliate order commands. Tagged by `"type"` on the wire; unknown fields are
//! refused so a typo never silently drops a value.

use crate::affiliate::{AuditReason, CountryCode, Platform, PlatformOrderId, ReportedMinor};
use crate::affiliate_values::OrderStatus;
use crate::commission_rules::RuleSnapshot;
use crate::money::{BoundedId, Currency};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The attribution data a platform sends with an order (R-ORD-4). Adapters pick the
/// strongest one the platform provides; the ingest unit resolves it to a user.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Attribution {
    TrackingId(BoundedId),
    ClickId(BoundedId),
    ReferralCode(BoundedId),
}

/// An order as a platform adapter normalised it, outside any transaction (seed §6.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NormalisedOrder {
    pub platform: Platform,
    /// Self-description and audit only (R-INV-11); must never change for an order.
    pub country: CountryCode,
    pub platform_order_id: PlatformOrderId,
    pub status: OrderStatus,
    #[serde(deserialize_with = "crate::money::iso_currency")]
    pub currency: Currency,
    /// 0 means the platform did not send it (sparse replay, R-ORD-6).
    pub gmv_minor: ReportedMinor,
    /// 0 means the platform did not send it (sparse replay, R-ORD-6).
    pub platform_commission_minor: ReportedMinor,
    /// Business time: picks the rule version (R-INV-5). Kept from the first ingest.
    pub ordered_at: DateTime<Utc>,
    /// The platform's version of the order: an update older than the order's is
    /// ignored (R-ORD-3).
    pub platform_updated_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attribution: Option<Attribution>,
}

/// Create or update an order from a platform pull (one per order, R-ORD-2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngestOrder {
    pub order: NormalisedOrder,
    /// The user the attribution resolved to; `None` for an unattributed order
    /// (recorded, earns nobody anything until an attribution correction). Used on
    /// creation only: later ingests never move an order to another owner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_user_id: Option<BoundedId>,
    /// The owner's direct inviter at ingest (from `InviteRelation`), snapshotted so
    /// the inviter reward is reproducible. Used on creation only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inviter_user_id: Option<BoundedId>,
    /// The rule version in force at `ordered_at` (`CommissionRuleSet::version_at`).
    /// Required on creation; ignored afterwards, since the order keeps the snapshot
    /// it was created with (R-INV-5), so the ingest unit may omit it for known
    /// orders.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<RuleSnapshot>,
}

/// Move an order to another owner (and inviter) by hand, with an audit trail
/// (R-ORD-4: old owner, new owner, actor, reason).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CorrectAttribution {
    /// `None` detaches the order from any user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_owner_user_id: Option<BoundedId>,
    /// The new owner's direct inviter, resolved by the caller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_inviter_user_id: Option<BoundedId>,
    /// Who made the correction (an operator or service principal).
    pub actor: BoundedId,
    pub reason: AuditReason,
    /// The caller's "now" (this crate reads no clock).
    pub corrected_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum OrderCommand {
    Ingest(IngestOrder),
    CorrectAttribution(CorrectAttribution),
}

impl OrderCommand {
    /// The command's name as it appears in `"type"`, for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Ingest(_) => "Ingest",
            Self::CorrectAttribution(_) => "CorrectAttribution",
        }
    }
}
