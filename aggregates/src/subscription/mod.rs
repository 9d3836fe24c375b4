//! The subscription (seed 000, issue 18 item 3): one stream per artist × fan (stream
//! id `{artist}:{fan}`), the fan's entitlement to the artist. A grant adds its days
//! to a running entitlement (a renewal) or starts a new period; the every-minute
//! expiry scan moves an active entitlement past its end to expired (status 2).
//!
//! **Renewal vs expiry:** both decide on the stream's head, and the store's optimistic
//! concurrency lets one win; the loser is re-decided on the new state. An expiry
//! re-checks `status = 1 AND expires_at <= now` on the stream itself (the seed's "lock
//! and check again"), so an expiry that loses to a renewal finds the end moved and
//! decides nothing, and a renewal that loses to an expiry starts a new period — either
//! way the fan ends subscribed and the membership re-sync keeps them in the group.
//! No money moves here: the order's payment posted when it was paid.

mod commands;
mod events;

pub use commands::SubscriptionCommand;
pub use events::{SubscriptionEvent, SUBSCRIPTION_EVENT_VERSION};

use crate::decide::{Decide, InvariantViolation, LedgerRef};
use crate::services::UserId;
use chrono::{DateTime, Duration, Utc};
use cqrs_es::event_sink::EventSink;
use cqrs_es::Aggregate;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const SUBSCRIPTION_AGGREGATE_TYPE: &str = "subscription";
/// Most grants one stream remembers (each order grants once).
pub const GRANTS_MAX: usize = 10_000;

/// The seed's statuses: 1 active, 2 expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SubscriptionStatus {
    Active = 1,
    Expired = 2,
}

impl SubscriptionStatus {
    pub fn code(self) -> i64 {
        self as i64
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Subscription {
    pub pair: Option<(UserId, UserId)>,
    pub status: Option<SubscriptionStatus>,
    pub expires_at: Option<DateTime<Utc>>,
    /// order number → whether its message was queued.
    pub grants: BTreeMap<String, bool>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubscriptionError {
    #[error("subscription does not exist")]
    NotFound,
    #[error("days must be 1 to 366")]
    InvalidDays,
    #[error("the command names another artist or fan than the stream's")]
    WrongPair,
    #[error("order {order_no} granted nothing on this subscription")]
    GrantNotFound { order_no: String },
    #[error("the subscription remembers the maximum of {max} grants")]
    TooManyGrants { max: usize },
}

impl SubscriptionError {
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotFound => "SUBSCRIPTION_NOT_FOUND",
            Self::InvalidDays => "INVALID_FIELD",
            Self::WrongPair => "SUBSCRIPTION_PAIR_MISMATCH",
            Self::GrantNotFound { .. } => "GRANT_NOT_FOUND",
            Self::TooManyGrants { .. } => "SUBSCRIPTION_GRANTS_LIMIT",
        }
    }

    pub fn field(&self) -> Option<&'static str> {
        match self {
            Self::InvalidDays => Some("days"),
            Self::WrongPair => Some("fan_user_id"),
            Self::GrantNotFound { .. } => Some("order_no"),
            _ => None,
        }
    }
}

impl Subscription {
    /// Whether the fan is entitled at `at`.
    pub fn is_active_at(&self, at: DateTime<Utc>) -> bool {
        self.status == Some(SubscriptionStatus::Active) && self.expires_at.is_some_and(|e| e > at)
    }
}

impl Decide for Subscription {
    const SNAPSHOT_VERSION: i32 = 1;
    const OUTBOX: bool = true;

    fn decide(
        &self,
        command: SubscriptionCommand,
    ) -> Result<Vec<SubscriptionEvent>, SubscriptionError> {
        match command {
            SubscriptionCommand::Grant {
                artist_id,
                fan_user_id,
                order_no,
                days,
                at,
            } => {
                if !(1..=366).contains(&days) {
                    return Err(SubscriptionError::InvalidDays);
                }
                if self.pair.is_some_and(|p| p != (artist_id, fan_user_id)) {
                    return Err(SubscriptionError::WrongPair);
                }
                if self.grants.contains_key(&order_no) {
                    return Ok(Vec::new());
                }
                if self.grants.len() >= GRANTS_MAX {
                    return Err(SubscriptionError::TooManyGrants { max: GRANTS_MAX });
                }
                let running = self.is_active_at(at);
                let period_start = match (running, self.expires_at) {
                    (true, Some(end)) => end,
                    _ => at,
                };
                Ok(vec![SubscriptionEvent::SubscriptionGranted {
                    artist_id,
                    fan_user_id,
                    order_no,
                    days,
                    period_start,
                    expires_at: period_start + Duration::days(days),
                    renewal: running,
                    at,
                }])
            }
            SubscriptionCommand::Expire { at } => {
                if self.pair.is_none() {
                    return Err(SubscriptionError::NotFound);
                }
                match (self.status, self.expires_at) {
                    (Some(SubscriptionStatus::Active), Some(end)) if end <= at => {
                        Ok(vec![SubscriptionEvent::SubscriptionExpired {
                            expires_at: end,
                            at,
                        }])
                    }
                    // Renewed, or expired already: the re-check finds nothing to do.
                    _ => Ok(Vec::new()),
                }
            }
            SubscriptionCommand::QueueMessage { order_no, at } => {
                let Some((artist_id, fan_user_id)) = self.pair else {
                    return Err(SubscriptionError::NotFound);
                };
                match self.grants.get(&order_no) {
                    None => Err(SubscriptionError::GrantNotFound { order_no }),
                    Some(true) => Ok(Vec::new()),
                    Some(false) => Ok(vec![SubscriptionEvent::SubscriptionMessageQueued {
                        artist_id,
                        fan_user_id,
                        order_no,
                        at,
                    }]),
                }
            }
        }
    }

    fn check(&self, event: &SubscriptionEvent) -> Result<(), InvariantViolation> {
        let fail = |why: &str| Err(InvariantViolation(format!("{}: {why}", event.name())));
        match event {
            SubscriptionEvent::SubscriptionGranted {
                artist_id,
                fan_user_id,
                order_no,
                period_start,
                expires_at,
                ..
            } => {
                if self.pair.is_some_and(|p| p != (*artist_id, *fan_user_id)) {
                    return fail("another artist or fan");
                }
                if self.grants.contains_key(order_no) || expires_at <= period_start {
                    return fail("granted twice, or an empty period");
                }
            }
            SubscriptionEvent::SubscriptionExpired { expires_at, at } => {
                if self.status != Some(SubscriptionStatus::Active)
                    || self.expires_at != Some(*expires_at)
                    || expires_at > at
                {
                    return fail("not an active subscription past its end");
                }
            }
            SubscriptionEvent::SubscriptionMessageQueued { order_no, .. } => {
                if self.grants.get(order_no) != Some(&false) {
                    return fail("no grant waiting for its message");
                }
            }
        }
        Ok(())
    }

    fn ledger_ref(_event: &SubscriptionEvent) -> Option<LedgerRef> {
        None
    }
}

impl Aggregate for Subscription {
    const TYPE: &'static str = SUBSCRIPTION_AGGREGATE_TYPE;
    type Command = SubscriptionCommand;
    type Event = SubscriptionEvent;
    type Error = SubscriptionError;
    type Services = ();

    async fn handle(
        &mut self,
        command: SubscriptionCommand,
        _service: &(),
        sink: &EventSink<Self>,
    ) -> Result<(), SubscriptionError> {
        for event in self.decide(command)? {
            sink.write(event, self).await;
        }
        Ok(())
    }

    fn apply(&mut self, event: SubscriptionEvent) {
        debug_assert_eq!(self.check(&event), Ok(()));
        match event {
            SubscriptionEvent::SubscriptionGranted {
                artist_id,
                fan_user_id,
                order_no,
                expires_at,
                ..
            } => {
                self.pair = Some((artist_id, fan_user_id));
                self.status = Some(SubscriptionStatus::Active);
                self.expires_at = Some(expires_at);
                self.grants.insert(order_no, false);
            }
            SubscriptionEvent::SubscriptionExpired { .. } => {
                self.status = Some(SubscriptionStatus::Expired);
            }
            SubscriptionEvent::SubscriptionMessageQueued { order_no, .. } => {
                self.grants.insert(order_no, true);
            }
        }
    }
}

#[cfg(test)]
mod tests;
