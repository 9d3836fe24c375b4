//! Candy account events. Every movement carries the balances after it, so a stored
//! event that does not follow from the one before stops the load.

use super::commands::{CreditSource, SettleReason};
use crate::services::UserId;
use cqrs_es::DomainEvent;
use serde::{Deserialize, Serialize};

/// The balances after a movement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CandyAfter {
    pub balance: i64,
    pub held: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum CandyEvent {
    CandyAccountOpened {
        user_id: UserId,
    },
    CandyCredited {
        source: CreditSource,
        order_no: String,
        candy: i64,
        after: CandyAfter,
    },
    HoldPlaced {
        booking_no: String,
        candy: i64,
        after: CandyAfter,
    },
    HoldSettled {
        booking_no: String,
        artist_id: UserId,
        reason: SettleReason,
        candy: i64,
        after: CandyAfter,
    },
    HoldForfeited {
        booking_no: String,
        reason: String,
        candy: i64,
        after: CandyAfter,
    },
    HoldRefunded {
        booking_no: String,
        refund_no: String,
        candy: i64,
        after: CandyAfter,
    },
}

pub const CANDY_EVENT_VERSION: i32 = 1;

impl CandyEvent {
    pub fn name(&self) -> &'static str {
        match self {
            Self::CandyAccountOpened { .. } => "CandyAccountOpened",
            Self::CandyCredited { .. } => "CandyCredited",
            Self::HoldPlaced { .. } => "HoldPlaced",
            Self::HoldSettled { .. } => "HoldSettled",
            Self::HoldForfeited { .. } => "HoldForfeited",
            Self::HoldRefunded { .. } => "HoldRefunded",
        }
    }

    /// The candy moved and the balances after, for a movement.
    pub fn movement(&self) -> Option<(i64, CandyAfter)> {
        match self {
            Self::CandyAccountOpened { .. } => None,
            Self::CandyCredited { candy, after, .. }
            | Self::HoldPlaced { candy, after, .. }
            | Self::HoldSettled { candy, after, .. }
            | Self::HoldForfeited { candy, after, .. }
            | Self::HoldRefunded { candy, after, .. } => Some((*candy, *after)),
        }
    }
}

impl DomainEvent for CandyEvent {
    fn event_type(&self) -> String {
        self.name().to_owned()
    }

    fn event_version(&self) -> String {
        CANDY_EVENT_VERSION.to_string()
    }
}
