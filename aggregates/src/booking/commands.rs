//! Booking commands.

use crate::services::UserId;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Who joined the call's room.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Party {
    Fan,
    Artist,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BookCall {
    pub booking_no: String,
    /// The candy order that pays it (its payment is the hold).
    pub order_no: String,
    pub fan_user_id: UserId,
    pub artist_id: UserId,
    /// When the call is to start.
    pub start_at: DateTime<Utc>,
    /// Booked length of the call.
    pub minutes: i64,
    /// The price in 1/100-candy units: what the fan's hold reserves.
    pub price_candy: i64,
    pub at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum BookingCommand {
    Book(BookCall),
    /// The order was delivered: the booking is on (status 0 → 1).
    Activate {
        at: DateTime<Utc>,
    },
    Join {
        party: Party,
        at: DateTime<Utc>,
    },
    Start {
        at: DateTime<Utc>,
    },
    /// The call ended normally (status 3 only): duration recorded, income once.
    Finish {
        at: DateTime<Utc>,
    },
    /// Moderation found a violation in the call: recorded first, so a failed abort
    /// is repaired by the moderation scan.
    FlagModeration {
        reason: String,
        at: DateTime<Utc>,
    },
    /// Abort a flagged call (status 3 only): completed abnormally, no income.
    AbortForModeration {
        at: DateTime<Utc>,
    },
    /// The no-show rule, 10 minutes after the start. `refund_no` names the refund a
    /// full-refund branch creates.
    CheckNoShow {
        refund_no: String,
        at: DateTime<Utc>,
    },
    /// The booking's refund went through: its hold is back on the fan's balance.
    RecordRefund {
        refund_no: String,
        at: DateTime<Utc>,
    },
}
