//! Subscription commands.

use crate::services::UserId;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum SubscriptionCommand {
    /// A paid subscription order was delivered: `days` more of the entitlement.
    Grant {
        artist_id: UserId,
        fan_user_id: UserId,
        order_no: String,
        days: i64,
        at: DateTime<Utc>,
    },
    /// The expiry scan's re-check: expire only if still active and past its end.
    Expire { at: DateTime<Utc> },
    /// The subscription message of a grant was handed to the outbox.
    QueueMessage { order_no: String, at: DateTime<Utc> },
}
