//! The commission rule set aggregate (SPEC R-ORD-5, R-INV-5): versioned rates and the
//! commission-base cap, each version in force from its `effective_from` until the
//! next one's. The version in force at an order's `ordered_at` ([`CommissionRuleSet::version_at`])
//! is snapshotted into the order and commission events, so changing rules later
//! never changes history.
//!
//! One stream per rule set (e.g. `SHOPEE:ID`, platform × country); which rule set an
//! order uses is the ingest unit's choice.

mod commands;
mod events;

pub use commands::{AddRuleVersion, RuleSetCommand};
pub use events::{RuleSetEvent, RuleSnapshot, RULE_SET_EVENT_VERSION};

use crate::affiliate::BPS_DENOMINATOR;
use crate::decide::{Decide, InvariantViolation, LedgerRef};
use chrono::{DateTime, Utc};
use cqrs_es::event_sink::EventSink;
use cqrs_es::Aggregate;
use serde::{Deserialize, Serialize};

/// The stream type of commission rule sets in the event store.
pub const RULE_SET_AGGREGATE_TYPE: &str = "commission_rule_set";

/// Most versions one rule set may hold. Rates change a few times a year; the bound
/// keeps the state (and its snapshot) small and `version_at` cheap.
pub const RULE_VERSIONS_MAX: usize = 1_000;

/// Longest release delay. Platforms confirm or refund within weeks; a year is a
/// typo guard, not a business rule.
pub const RELEASE_DELAY_DAYS_MAX: u16 = 365;

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CommissionRuleSet {
    /// Empty until the first version is added.
    pub rule_set_id: String,
    /// In version order, which is also `effective_from` order (strictly increasing).
    pub versions: Vec<RuleSnapshot>,
}

/// Why a rule set command was refused (or no version is in force). Nothing is
/// written when a command is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleSetError {
    #[error("rule set id {given} does not match this rule set {stream}")]
    RuleSetIdMismatch { given: String, stream: String },
    #[error("version {given} is out of order; the next version is {expected}")]
    VersionOutOfOrder { given: u32, expected: u32 },
    #[error("version {version} already exists with different content; versions never change")]
    VersionConflict { version: u32 },
    #[error("effective_from must be after the previous version's ({previous})")]
    EffectiveFromNotAfterPrevious { previous: DateTime<Utc> },
    #[error("effective_from {effective_from} is before now ({now}); rules are never back-dated")]
    EffectiveFromInPast {
        effective_from: DateTime<Utc>,
        now: DateTime<Utc>,
    },
    #[error(
        "cashback and inviter rates together are {total_bps} bps, more than 100 % of the base"
    )]
    RatesExceedBase { total_bps: i64 },
    #[error("release delay is longer than {max} days")]
    ReleaseDelayTooLong { max: u16 },
    #[error("the rule set already holds the maximum of {max} versions")]
    TooManyVersions { max: usize },
    #[error("no rule version is in force at {ordered_at}")]
    NoVersionInForce { ordered_at: DateTime<Utc> },
}

impl RuleSetError {
    /// Stable machine-readable code for clients.
    pub fn code(&self) -> &'static str {
        match self {
            Self::RuleSetIdMismatch { .. } => "RULE_SET_ID_MISMATCH",
            Self::VersionOutOfOrder { .. } => "RULE_VERSION_OUT_OF_ORDER",
            Self::VersionConflict { .. } => "RULE_VERSION_CONFLICT",
            Self::EffectiveFromNotAfterPrevious { .. } => "EFFECTIVE_FROM_NOT_AFTER_PREVIOUS",
            Self::EffectiveFromInPast { .. } => "EFFECTIVE_FROM_IN_PAST",
            Self::RatesExceedBase { .. } => "RATES_EXCEED_BASE",
            Self::ReleaseDelayTooLong { .. } => "RELEASE_DELAY_TOO_LONG",
            Self::TooManyVersions { .. } => "RULE_VERSIONS_LIMIT",
            Self::NoVersionInForce { .. } => "NO_RULE_VERSION_IN_FORCE",
        }
    }

    /// The request field the error is about, when there is one.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            Self::RuleSetIdMismatch { .. } => Some("rule_set_id"),
            Self::VersionOutOfOrder { .. }
            | Self::VersionConflict { .. }
            | Self::TooManyVersions { .. } => Some("version"),
            Self::EffectiveFromNotAfterPrevious { .. } | Self::EffectiveFromInPast { .. } => {
                Some("effective_from")
            }
            Self::RatesExceedBase { .. } => Some("inviter_bps"),
            Self::ReleaseDelayTooLong { .. } => Some("release_delay_days"),
            Self::NoVersionInForce { .. } => Some("ordered_at"),
        }
    }
}

impl CommissionRuleSet {
    /// The version in force at `ordered_at`: the last one whose `effective_from <=
    /// ordered_at` (a version effective exactly at `ordered_at` is in force). An order
    /// placed before the first version has no rule: the ingest unit rejects it with
    /// `NO_RULE_VERSION_IN_FORCE`.
    pub fn version_at(&self, ordered_at: DateTime<Utc>) -> Result<&RuleSnapshot, RuleSetError> {
        self.versions
            .iter()
            .rev()
            .find(|v| v.effective_from <= ordered_at)
            .ok_or(RuleSetError::NoVersionInForce { ordered_at })
    }

    fn add_version(&self, cmd: AddRuleVersion) -> Result<Vec<RuleSetEvent>, RuleSetError> {
        if !self.rule_set_id.is_empty() && cmd.rule_set_id.as_str() != self.rule_set_id {
            return Err(RuleSetError::RuleSetIdMismatch {
                given: cmd.rule_set_id.as_str().to_owned(),
                stream: self.rule_set_id.clone(),
            });
        }
        let snapshot = RuleSnapshot {
            rule_set_id: cmd.rule_set_id.as_str().to_owned(),
            version: cmd.version,
            effective_from: cmd.effective_from,
            cashback_bps: cmd.cashback_bps,
            inviter_bps: cmd.inviter_bps,
            max_commission_base_bps: cmd.max_commission_base_bps,
            release_delay_days: cmd.release_delay_days,
        };
        // A retried request for an existing version is a no-op, checked before the
        // clock so a late retry is not refused as back-dated.
        let index = usize::try_from(cmd.version).unwrap_or(usize::MAX);
        if let Some(existing) = index.checked_sub(1).and_then(|i| self.versions.get(i)) {
            if *existing == snapshot {
                return Ok(vec![]);
            }
            return Err(RuleSetError::VersionConflict {
                version: cmd.version,
            });
        }
        let expected = self.next_version();
        if cmd.version != expected {
            return Err(RuleSetError::VersionOutOfOrder {
                given: cmd.version,
                expected,
            });
        }
        if self.versions.len() >= RULE_VERSIONS_MAX {
            return Err(RuleSetError::TooManyVersions {
                max: RULE_VERSIONS_MAX,
            });
        }
        if let Some(previous) = self.versions.last() {
            if cmd.effective_from <= previous.effective_from {
                return Err(RuleSetError::EffectiveFromNotAfterPrevious {
                    previous: previous.effective_from,
                });
            }
        }
        if cmd.effective_from < cmd.requested_at {
            return Err(RuleSetError::EffectiveFromInPast {
                effective_from: cmd.effective_from,
                now: cmd.requested_at,
            });
        }
        let total_bps = cmd.cashback_bps.get() + cmd.inviter_bps.get();
        if total_bps > BPS_DENOMINATOR {
            return Err(RuleSetError::RatesExceedBase { total_bps });
        }
        if cmd.release_delay_days > RELEASE_DELAY_DAYS_MAX {
            return Err(RuleSetError::ReleaseDelayTooLong {
                max: RELEASE_DELAY_DAYS_MAX,
            });
        }
        Ok(vec![RuleSetEvent::RuleVersionAdded(snapshot)])
    }

    fn next_version(&self) -> u32 {
        // At most RULE_VERSIONS_MAX (1,000) versions, so this fits.
        u32::try_from(self.versions.len()).unwrap_or(u32::MAX - 1) + 1
    }
}

impl Decide for CommissionRuleSet {
    const SNAPSHOT_VERSION: i32 = 1;

    fn decide(&self, command: RuleSetCommand) -> Result<Vec<RuleSetEvent>, RuleSetError> {
        match command {
            RuleSetCommand::AddVersion(cmd) => self.add_version(cmd),
        }
    }

    fn check(&self, event: &RuleSetEvent) -> Result<(), InvariantViolation> {
        let RuleSetEvent::RuleVersionAdded(v) = event;
        if !self.rule_set_id.is_empty() && v.rule_set_id != self.rule_set_id {
            return Err(InvariantViolation(format!(
                "rule version of {} in rule set {}",
                v.rule_set_id, self.rule_set_id
            )));
        }
        if v.version != self.next_version() {
            return Err(InvariantViolation(format!(
                "rule version {} where {} is next",
                v.version,
                self.next_version()
            )));
        }
        if self
            .versions
            .last()
            .is_some_and(|p| v.effective_from <= p.effective_from)
        {
            return Err(InvariantViolation(format!(
                "rule version {} is not effective after its predecessor",
                v.version
            )));
        }
        if v.cashback_bps.get() + v.inviter_bps.get() > BPS_DENOMINATOR {
            return Err(InvariantViolation(format!(
                "rule version {} pays out more than its base",
                v.version
            )));
        }
        Ok(())
    }

    /// Rule versions move no money.
    fn ledger_ref(_event: &RuleSetEvent) -> Option<LedgerRef> {
        None
    }
}

impl Aggregate for CommissionRuleSet {
    const TYPE: &'static str = RULE_SET_AGGREGATE_TYPE;
    type Command = RuleSetCommand;
    type Event = RuleSetEvent;
    type Error = RuleSetError;
    type Services = ();

    async fn handle(
        &mut self,
        command: RuleSetCommand,
        _service: &(),
        sink: &EventSink<Self>,
    ) -> Result<(), RuleSetError> {
        for event in self.decide(command)? {
            sink.write(event, self).await;
        }
        Ok(())
    }

    fn apply(&mut self, event: RuleSetEvent) {
        debug_assert_eq!(self.check(&event), Ok(()));
        let RuleSetEvent::RuleVersionAdded(v) = event;
        self.rule_set_id.clone_from(&v.rule_set_id);
        self.versions.push(v);
    }
}

#[cfg(test)]
mod tests;
