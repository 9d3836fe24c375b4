//! Commission rule set events. Payloads are stored forever: changing a shape means a
//! new `event_version` and an upcaster in `crate::upcast`, never a rewrite.

use crate::affiliate::Bps;
use chrono::{DateTime, Utc};
use cqrs_es::DomainEvent;
use serde::{Deserialize, Serialize};

/// One version of a rule set, exactly as it is copied into order and commission
/// events (R-INV-5): whoever reads a commission can tell which rule priced it
/// without looking the rule set up, and a later version never changes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSnapshot {
    pub rule_set_id: String,
    pub version: u32,
    /// In force from this instant (inclusive) until the next version's.
    pub effective_from: DateTime<Utc>,
    pub cashback_bps: Bps,
    pub inviter_bps: Bps,
    pub max_commission_base_bps: Bps,
    pub release_delay_days: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum RuleSetEvent {
    RuleVersionAdded(RuleSnapshot),
}

/// Current schema version of every rule set event.
pub const RULE_SET_EVENT_VERSION: i32 = 1;

impl RuleSetEvent {
    pub fn name(&self) -> &'static str {
        match self {
            RuleSetEvent::RuleVersionAdded(_) => "RuleVersionAdded",
        }
    }
}

impl DomainEvent for RuleSetEvent {
    fn event_type(&self) -> String {
        self.name().to_owned()
    }

    fn event_version(&self) -> String {
        RULE_SET_EVENT_VERSION.to_string()
    }
}
