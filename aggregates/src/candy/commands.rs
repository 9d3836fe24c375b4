//! Candy account commands. Every movement names the business reference that caused
//! it; a hold is named by its booking.

use crate::services::UserId;
use serde::{Deserialize, Serialize};

/// Where issued candy came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CreditSource {
    /// A paid recharge order was delivered.
    Recharge,
}

impl CreditSource {
    pub fn as_str(self) -> &'static str {
        match self {
            CreditSource::Recharge => "RECHARGE",
        }
    }
}

/// Why a settled hold went to the artist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SettleReason {
    /// The call finished: the artist's call income.
    CallIncome,
    /// Only the artist joined: the fan forfeits the booking to the artist.
    FanNoShow,
}

impl SettleReason {
    pub fn as_str(self) -> &'static str {
        match self {
            SettleReason::CallIncome => "CALL_INCOME",
            SettleReason::FanNoShow => "FAN_NO_SHOW",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum CandyCommand {
    /// balance += candy (a recharge order delivered), once per order.
    Credit {
        user_id: UserId,
        source: CreditSource,
        order_no: String,
        candy: i64,
    },
    /// balance -= candy, held += candy for a booking; refused past the balance.
    PlaceHold {
        user_id: UserId,
        booking_no: String,
        candy: i64,
    },
    /// The open hold of a booking goes to the artist's income.
    SettleHold {
        booking_no: String,
        artist_id: UserId,
        reason: SettleReason,
    },
    /// The open hold of a booking goes to the platform (a moderation abort).
    ForfeitHold { booking_no: String, reason: String },
    /// The open hold of a booking goes back to the balance (a candy refund).
    RefundHold {
        booking_no: String,
        refund_no: String,
    },
}
