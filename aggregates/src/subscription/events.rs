//! Subscription events.

use crate::services::UserId;
use chrono::{DateTime, Utc};
use cqrs_es::DomainEvent;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum SubscriptionEvent {
    SubscriptionGranted {
        artist_id: UserId,
        fan_user_id: UserId,
        order_no: String,
        days: i64,
        /// The period this grant adds: from the old end when it was still running (a
        /// renewal), else from the grant.
        period_start: DateTime<Utc>,
        expires_at: DateTime<Utc>,
        renewal: bool,
        at: DateTime<Utc>,
    },
    SubscriptionExpired {
        expires_at: DateTime<Utc>,
        at: DateTime<Utc>,
    },
    /// The fan's subscription message for a grant goes out through the outbox.
    SubscriptionMessageQueued {
        artist_id: UserId,
        fan_user_id: UserId,
        order_no: String,
        at: DateTime<Utc>,
    },
}

pub const SUBSCRIPTION_EVENT_VERSION: i32 = 1;

impl SubscriptionEvent {
    pub fn name(&self) -> &'static str {
        match self {
            Self::SubscriptionGranted { .. } => "SubscriptionGranted",
            Self::SubscriptionExpired { .. } => "SubscriptionExpired",
            Self::SubscriptionMessageQueued { .. } => "SubscriptionMessageQueued",
        }
    }
}

impl DomainEvent for SubscriptionEvent {
    fn event_type(&self) -> String {
        self.name().to_owned()
    }

    fn event_version(&self) -> String {
        SUBSCRIPTION_EVENT_VERSION.to_string()
    }
}
