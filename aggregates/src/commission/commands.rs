//! Commission commands. Tagged by `"type"` on the wire; unknown fields are refused.

use crate::affiliate::{AuditReason, ReportedMinor};
use crate::affiliate_values::{BeneficiaryRole, OrderSignal, OrderStatus};
use crate::commission_rules::RuleSnapshot;
use crate::money::{BoundedId, Currency};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Record a commission for one order × role, in PENDING (seed §6.2 step 6). Sent by
/// the ingest unit in the order's unit of work, from the order's event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordCommission {
    /// Must be `commission_id(order_id, role)`; repeated so a command sent to the
    /// wrong stream is refused.
    pub commission_id: BoundedId,
    /// The order's stream id (`<PLATFORM>:<platform_order_id>`).
    pub order_id: BoundedId,
    pub role: BeneficiaryRole,
    /// The order's owner (CASHBACK) or the owner's direct inviter (INVITER_REWARD).
    pub beneficiary_user_id: BoundedId,
    /// The wallet (of the beneficiary, in `currency`) the money goes through.
    pub wallet_id: BoundedId,
    pub currency: Currency,
    /// The order's known amounts; the amount is computed here with `rules`, so the
    /// arithmetic has one home.
    pub gmv_minor: ReportedMinor,
    pub platform_commission_minor: ReportedMinor,
    pub ordered_at: DateTime<Utc>,
    /// The order's `platform_updated_at` at this revision (audit of an immediate
    /// freeze).
    pub order_updated_at: DateTime<Utc>,
    /// The order's status now: a void order gets no commission, a refund already
    /// open freezes the new commission at once.
    pub order_status: OrderStatus,
    /// The order revision this commission reflects; older signals are ignored.
    pub order_revision: u32,
    /// The order's rule snapshot (R-INV-5).
    pub rules: RuleSnapshot,
}

/// Apply an order update's signal (from `OrderUpdated`) to this commission.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReactToOrder {
    /// The order event's revision: a signal at or below the last one applied is a
    /// replay or arrived late, and changes nothing.
    pub order_revision: u32,
    pub signal: OrderSignal,
    pub order_status: OrderStatus,
    /// This role's amount in the order event's `amounts` (recomputed with the
    /// order's snapshot). Used when un-freezing: the commission never goes up, and
    /// goes down to this if lower.
    pub amount_minor: ReportedMinor,
    pub order_updated_at: DateTime<Utc>,
}

/// Settle a commission (R-COM-2): PENDING → AVAILABLE once `release_at <= now`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseCommission {
    /// The settlement job's "now" (this crate reads no clock).
    pub now: DateTime<Utc>,
}

/// Close a recovery review by hand (RECOVERY_REVIEW → MANUAL_RESOLVED), audited.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResolveRecovery {
    pub actor: BoundedId,
    pub reason: AuditReason,
    pub resolved_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum CommissionCommand {
    Record(RecordCommission),
    ReactToOrder(ReactToOrder),
    Release(ReleaseCommission),
    ResolveRecovery(ResolveRecovery),
}

impl CommissionCommand {
    /// The command's name as it appears in `"type"`, for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Record(_) => "Record",
            Self::ReactToOrder(_) => "ReactToOrder",
            Self::Release(_) => "Release",
            Self::ResolveRecovery(_) => "ResolveRecovery",
        }
    }
}
