//! Booking events.

use super::commands::{BookCall, Party};
use chrono::{DateTime, Utc};
use cqrs_es::DomainEvent;
use serde::{Deserialize, Serialize};

/// The no-show branches of seed 000.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum NoShow {
    /// Only the fan joined: full refund.
    Artist,
    /// Only the artist joined: no refund (the hold goes to the artist).
    Fan,
    /// Neither joined, or both joined and never started: full refund.
    Both,
}

impl NoShow {
    pub fn as_str(self) -> &'static str {
        match self {
            NoShow::Artist => "ARTIST_NO_SHOW",
            NoShow::Fan => "FAN_NO_SHOW",
            NoShow::Both => "BOTH_NO_SHOW",
        }
    }

    /// Whether the fan gets the hold back.
    pub fn refunds(self) -> bool {
        self != NoShow::Fan
    }
}

/// A refund a decision created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefundDue {
    pub refund_no: String,
    pub candy: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum BookingEvent {
    BookingRequested(BookCall),
    BookingActivated {
        at: DateTime<Utc>,
    },
    ParticipantJoined {
        party: Party,
        /// The first of the two to join: the booking moves from 1 to 2.
        first: bool,
        at: DateTime<Utc>,
    },
    CallStarted {
        at: DateTime<Utc>,
    },
    CallFinished {
        ended_at: DateTime<Utc>,
        duration_s: i64,
        income_candy: i64,
    },
    ModerationFlagged {
        reason: String,
        at: DateTime<Utc>,
    },
    CallAborted {
        ended_at: DateTime<Utc>,
        duration_s: i64,
        reason: String,
    },
    /// Checked before the rule applied (the booking stays in 1/2 and is checked again).
    NoShowCheckDeferred {
        at: DateTime<Utc>,
    },
    NoShowDecided {
        kind: NoShow,
        refund: Option<RefundDue>,
        at: DateTime<Utc>,
    },
    BookingHoldRefunded {
        refund_no: String,
        candy: i64,
        at: DateTime<Utc>,
    },
}

pub const BOOKING_EVENT_VERSION: i32 = 1;

impl BookingEvent {
    pub fn name(&self) -> &'static str {
        match self {
            Self::BookingRequested(_) => "BookingRequested",
            Self::BookingActivated { .. } => "BookingActivated",
            Self::ParticipantJoined { .. } => "ParticipantJoined",
            Self::CallStarted { .. } => "CallStarted",
            Self::CallFinished { .. } => "CallFinished",
            Self::ModerationFlagged { .. } => "ModerationFlagged",
            Self::CallAborted { .. } => "CallAborted",
            Self::NoShowCheckDeferred { .. } => "NoShowCheckDeferred",
            Self::NoShowDecided { .. } => "NoShowDecided",
            Self::BookingHoldRefunded { .. } => "BookingHoldRefunded",
        }
    }
}

impl DomainEvent for BookingEvent {
    fn event_type(&self) -> String {
        self.name().to_owned()
    }

    fn event_version(&self) -> String {
        BOOKING_EVENT_VERSION.to_string()
    }
}
