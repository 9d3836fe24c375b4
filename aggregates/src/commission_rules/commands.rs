//! Commission rule set commands. Tagged by `"type"` on the wire; unknown fields are
//! refused so a typo never silently drops a rate.

use crate::affiliate::Bps;
use crate::money::BoundedId;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Add the next version of a rule set. Earlier versions are never changed (R-INV-5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddRuleVersion {
    /// The rule set's stream id, e.g. `SHOPEE:ID` (platform × country); repeated in
    /// the command so a request sent to the wrong stream is refused.
    pub rule_set_id: BoundedId,
    /// Must be the last version + 1 (the first is 1): an explicit number makes a
    /// retried request idempotent instead of adding a second version.
    pub version: u32,
    /// When the version comes into force (inclusive). Must be after the previous
    /// version's and not before `requested_at`: back-dating would change the rule a
    /// late-arriving old order is priced with, i.e. change history.
    pub effective_from: DateTime<Utc>,
    /// The buyer's cashback as a share of the commission base `M`.
    pub cashback_bps: Bps,
    /// The direct inviter's reward as a share of `M`.
    pub inviter_bps: Bps,
    /// Cap on the commission base as a share of GMV: `M = min(platform_commission,
    /// GMV × max_commission_base_bps / 10000)`.
    pub max_commission_base_bps: Bps,
    /// Days between `ordered_at` and the commission's `release_at` (R-COM-2).
    pub release_delay_days: u16,
    /// The caller's "now" (this crate reads no clock).
    pub requested_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum RuleSetCommand {
    AddVersion(AddRuleVersion),
}

impl RuleSetCommand {
    /// The command's name as it appears in `"type"`, for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Self::AddVersion(_) => "AddVersion",
        }
    }
}
