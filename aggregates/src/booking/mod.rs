//! The video-call booking (seed 000, R-HOLD-1, issue 18 item 4): one stream per
//! booking (stream id = the booking number), with a two-phase hold on the fan's candy.
//!
//! Booking places the hold (status 0) in the same unit as its candy order; delivering
//! the order activates it (1); a party joining makes it 2; both in the room, the call
//! starts (3). The hold then closes exactly once, and [`Booking::candy_effect`] names
//! the candy command each closing event requires (one unit appends both):
//! - **call finish** (status 3 only): the real duration, the hold settled to the
//!   artist's income — two finishers race on the stream head, one wins, the other is
//!   re-decided on a finished booking and decides nothing;
//! - **moderation abort** (status 3 only, after the flag): completed (4) abnormally
//!   with its duration and no income, the hold forfeited to the platform;
//! - **no-show**, 10 minutes after the start, only in status 1/2 without
//!   `started_at`: only the fan joined → artist no-show, full refund; only the artist
//!   joined → fan no-show, no refund (the hold goes to the artist); neither, or both
//!   joined and never started → both no-show, full refund. A refund creates a refund
//!   record (same unit) whose candy refund returns the hold. A check before the rule
//!   applies is recorded and leaves the booking in 1/2, so it is checked again; a
//!   booking in a no-show final state is never decided again (no back-fill).

mod commands;
mod events;

pub use commands::{BookCall, BookingCommand, Party};
pub use events::{BookingEvent, NoShow, RefundDue, BOOKING_EVENT_VERSION};

use crate::candy::{CandyCommand, SettleReason};
use crate::decide::{Decide, InvariantViolation, LedgerRef};
use crate::service_order::valid_no;
use crate::services::CANDY_AMOUNT_MAX;
use chrono::{DateTime, Duration, Utc};
use cqrs_es::event_sink::EventSink;
use cqrs_es::Aggregate;
use serde::{Deserialize, Serialize};

pub const BOOKING_AGGREGATE_TYPE: &str = "booking";
/// Minutes after the start at which the no-show rule applies (seed 000).
pub const NO_SHOW_AFTER_MINUTES: i64 = 10;
/// Longest call one booking buys.
pub const CALL_MINUTES_MAX: i64 = 240;
/// Longest moderation reason kept.
pub const REASON_CHARS_MAX: usize = 500;
/// The reason a moderation abort forfeits a hold under.
pub const MODERATION_FORFEIT: &str = "MODERATION";

/// The booking's statuses, stored as their numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum BookingStatus {
    #[default]
    Pending = 0,
    Booked = 1,
    Waiting = 2,
    InCall = 3,
    Completed = 4,
    ArtistNoShow = 5,
    FanNoShow = 6,
    BothNoShow = 7,
}

impl BookingStatus {
    pub fn code(self) -> i64 {
        self as i64
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "PENDING",
            Self::Booked => "BOOKED",
            Self::Waiting => "WAITING",
            Self::InCall => "IN_CALL",
            Self::Completed => "COMPLETED",
            Self::ArtistNoShow => "ARTIST_NO_SHOW",
            Self::FanNoShow => "FAN_NO_SHOW",
            Self::BothNoShow => "BOTH_NO_SHOW",
        }
    }

    fn of(kind: NoShow) -> BookingStatus {
        match kind {
            NoShow::Artist => Self::ArtistNoShow,
            NoShow::Fan => Self::FanNoShow,
            NoShow::Both => Self::BothNoShow,
        }
    }
}

/// Where the booking's hold is.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum HoldState {
    #[default]
    Open,
    Settled,
    Forfeited,
    /// A refund was decided and its refund record is waiting to run.
    RefundDue {
        refund_no: String,
    },
    Refunded,
}

impl HoldState {
    pub fn as_str(&self) -> &'static str {
        match self {
            HoldState::Open => "OPEN",
            HoldState::Settled => "SETTLED",
            HoldState::Forfeited => "FORFEITED",
            HoldState::RefundDue { .. } => "REFUND_DUE",
            HoldState::Refunded => "REFUNDED",
        }
    }

    /// Whether the fan's candy is still held for this booking.
    pub fn is_held(&self) -> bool {
        matches!(self, HoldState::Open | HoldState::RefundDue { .. })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Booking {
    pub call: Option<BookCall>,
    pub status: BookingStatus,
    pub fan_joined_at: Option<DateTime<Utc>>,
    pub artist_joined_at: Option<DateTime<Utc>>,
    pub started_at: Option<DateTime<Utc>>,
    pub ended_at: Option<DateTime<Utc>>,
    pub moderation: Option<String>,
    pub no_show_checked_at: Option<DateTime<Utc>>,
    pub hold: HoldState,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BookingError {
    #[error("booking does not exist")]
    NotFound,
    #[error("booking exists already")]
    AlreadyExists,
    #[error("{field}: {rule}")]
    Invalid {
        field: &'static str,
        rule: &'static str,
    },
    #[error("the booking is {status:?}: {rule}")]
    WrongStatus {
        status: BookingStatus,
        rule: &'static str,
    },
    #[error("refund {refund_no} is not this booking's refund")]
    RefundMismatch { refund_no: String },
}

impl BookingError {
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotFound => "BOOKING_NOT_FOUND",
            Self::AlreadyExists => "BOOKING_EXISTS",
            Self::Invalid { .. } => "INVALID_FIELD",
            Self::WrongStatus { .. } => "BOOKING_STATUS_CONFLICT",
            Self::RefundMismatch { .. } => "REFUND_MISMATCH",
        }
    }

    pub fn field(&self) -> Option<&'static str> {
        match self {
            Self::Invalid { field, .. } => Some(field),
            Self::RefundMismatch { .. } => Some("refund_no"),
            _ => None,
        }
    }
}

fn invalid(field: &'static str, rule: &'static str) -> BookingError {
    BookingError::Invalid { field, rule }
}

fn book(call: BookCall) -> Result<Vec<BookingEvent>, BookingError> {
    if !valid_no(&call.booking_no) {
        return Err(invalid("booking_no", "1 to 64 of A-Z a-z 0-9 _ -"));
    }
    if !valid_no(&call.order_no) {
        return Err(invalid("order_no", "1 to 64 of A-Z a-z 0-9 _ -"));
    }
    if call.fan_user_id == call.artist_id {
        return Err(invalid("artist_id", "a fan cannot book themself"));
    }
    if !(1..=CALL_MINUTES_MAX).contains(&call.minutes) {
        return Err(invalid("minutes", "must be 1 to 240"));
    }
    if call.price_candy <= 0 || call.price_candy > CANDY_AMOUNT_MAX {
        return Err(invalid(
            "price_candy",
            "must be a positive whole number of 1/100 candy",
        ));
    }
    if call.start_at <= call.at {
        return Err(invalid("start_at", "must be in the future"));
    }
    Ok(vec![BookingEvent::BookingRequested(call)])
}

fn seconds(from: Option<DateTime<Utc>>, to: DateTime<Utc>) -> i64 {
    from.map_or(0, |f| (to - f).num_seconds().max(0))
}

impl Booking {
    /// When the no-show rule applies.
    pub fn no_show_due_at(&self) -> Option<DateTime<Utc>> {
        self.call
            .as_ref()
            .map(|c| c.start_at + Duration::minutes(NO_SHOW_AFTER_MINUTES))
    }

    /// When a call in progress is to end.
    pub fn ends_at(&self) -> Option<DateTime<Utc>> {
        self.call
            .as_ref()
            .map(|c| self.started_at.unwrap_or(c.start_at) + Duration::minutes(c.minutes))
    }

    /// The candy command an event of this booking requires, if it moves the hold.
    pub fn candy_effect(&self, event: &BookingEvent) -> Option<CandyCommand> {
        let call = self.call.as_ref();
        match event {
            BookingEvent::BookingRequested(c) => Some(CandyCommand::PlaceHold {
                user_id: c.fan_user_id,
                booking_no: c.booking_no.clone(),
                candy: c.price_candy,
            }),
            BookingEvent::CallFinished { .. } => Some(CandyCommand::SettleHold {
                booking_no: call?.booking_no.clone(),
                artist_id: call?.artist_id,
                reason: SettleReason::CallIncome,
            }),
            BookingEvent::NoShowDecided {
                kind: NoShow::Fan, ..
            } => Some(CandyCommand::SettleHold {
                booking_no: call?.booking_no.clone(),
                artist_id: call?.artist_id,
                reason: SettleReason::FanNoShow,
            }),
            BookingEvent::CallAborted { .. } => Some(CandyCommand::ForfeitHold {
                booking_no: call?.booking_no.clone(),
                reason: MODERATION_FORFEIT.to_owned(),
            }),
            BookingEvent::BookingHoldRefunded { refund_no, .. } => Some(CandyCommand::RefundHold {
                booking_no: call?.booking_no.clone(),
                refund_no: refund_no.clone(),
            }),
            _ => None,
        }
    }

    fn no_show(
        &self,
        call: &BookCall,
        refund_no: String,
        at: DateTime<Utc>,
    ) -> Result<Vec<BookingEvent>, BookingError> {
        let pre_call = matches!(self.status, BookingStatus::Booked | BookingStatus::Waiting);
        if !pre_call || self.started_at.is_some() {
            // Started, completed, still pending delivery, or decided already (a no-show
            // final state is never back-filled): nothing to decide.
            return Ok(Vec::new());
        }
        if at < call.start_at + Duration::minutes(NO_SHOW_AFTER_MINUTES) {
            return Ok(vec![BookingEvent::NoShowCheckDeferred { at }]);
        }
        let kind = match (
            self.fan_joined_at.is_some(),
            self.artist_joined_at.is_some(),
        ) {
            (true, false) => NoShow::Artist,
            (false, true) => NoShow::Fan,
            (false, false) | (true, true) => NoShow::Both,
        };
        let refund = kind.refunds().then_some(RefundDue {
            refund_no,
            candy: call.price_candy,
        });
        if let Some(r) = &refund {
            if !valid_no(&r.refund_no) {
                return Err(invalid("refund_no", "1 to 64 of A-Z a-z 0-9 _ -"));
            }
        }
        Ok(vec![BookingEvent::NoShowDecided { kind, refund, at }])
    }

    fn in_call(&self, rule: &'static str) -> Result<(), BookingError> {
        if self.status == BookingStatus::InCall {
            Ok(())
        } else {
            Err(BookingError::WrongStatus {
                status: self.status,
                rule,
            })
        }
    }
}

impl Decide for Booking {
    const SNAPSHOT_VERSION: i32 = 1;

    fn decide(&self, command: BookingCommand) -> Result<Vec<BookingEvent>, BookingError> {
        let call = match (&self.call, command) {
            (None, BookingCommand::Book(c)) => return book(c),
            (Some(_), BookingCommand::Book(_)) => return Err(BookingError::AlreadyExists),
            (None, _) => return Err(BookingError::NotFound),
            (Some(call), command) => (call, command),
        };
        let (call, command) = call;
        let status = self.status;
        let finished = matches!(
            status,
            BookingStatus::Completed
                | BookingStatus::ArtistNoShow
                | BookingStatus::FanNoShow
                | BookingStatus::BothNoShow
        );
        match command {
            BookingCommand::Book(_) => Err(BookingError::AlreadyExists),
            BookingCommand::Activate { at } => Ok(match status {
                BookingStatus::Pending => vec![BookingEvent::BookingActivated { at }],
                _ => Vec::new(),
            }),
            BookingCommand::Join { party, at } => {
                if finished || status == BookingStatus::Pending {
                    return Err(BookingError::WrongStatus {
                        status,
                        rule: "only an active booking can be joined",
                    });
                }
                let joined = match party {
                    Party::Fan => self.fan_joined_at,
                    Party::Artist => self.artist_joined_at,
                };
                let first = self.fan_joined_at.is_none() && self.artist_joined_at.is_none();
                Ok(match joined {
                    Some(_) => Vec::new(),
                    None => vec![BookingEvent::ParticipantJoined { party, first, at }],
                })
            }
            BookingCommand::Start { at } => match status {
                BookingStatus::InCall => Ok(Vec::new()),
                BookingStatus::Waiting
                    if self.fan_joined_at.is_some() && self.artist_joined_at.is_some() =>
                {
                    Ok(vec![BookingEvent::CallStarted { at }])
                }
                _ => Err(BookingError::WrongStatus {
                    status,
                    rule: "a call starts once both parties joined",
                }),
            },
            BookingCommand::Finish { at } => {
                // Completed already, or flagged by moderation: a flagged call ends by
                // its abort (no income), never by a finish that races the repair.
                if status == BookingStatus::Completed || self.moderation.is_some() {
                    return Ok(Vec::new());
                }
                self.in_call("only a call in progress (status 3) finishes")?;
                Ok(vec![BookingEvent::CallFinished {
                    ended_at: at,
                    duration_s: seconds(self.started_at, at),
                    income_candy: call.price_candy,
                }])
            }
            BookingCommand::FlagModeration { reason, at } => {
                if reason.trim().is_empty() || reason.chars().count() > REASON_CHARS_MAX {
                    return Err(invalid("reason", "1 to 500 characters"));
                }
                if self.moderation.is_some() || status != BookingStatus::InCall {
                    // Flagged already, or nothing to abort any more.
                    return Ok(Vec::new());
                }
                Ok(vec![BookingEvent::ModerationFlagged { reason, at }])
            }
            BookingCommand::AbortForModeration { at } => {
                let Some(reason) = &self.moderation else {
                    return Err(BookingError::WrongStatus {
                        status,
                        rule: "only a flagged call is aborted",
                    });
                };
                if status == BookingStatus::Completed {
                    return Ok(Vec::new());
                }
                self.in_call("only a call in progress (status 3) is aborted")?;
                Ok(vec![BookingEvent::CallAborted {
                    ended_at: at,
                    duration_s: seconds(self.started_at, at),
                    reason: reason.clone(),
                }])
            }
            BookingCommand::CheckNoShow { refund_no, at } => self.no_show(call, refund_no, at),
            BookingCommand::RecordRefund { refund_no, at } => match &self.hold {
                HoldState::Refunded => Ok(Vec::new()),
                HoldState::RefundDue { refund_no: due } if *due == refund_no => {
                    Ok(vec![BookingEvent::BookingHoldRefunded {
                        refund_no,
                        candy: call.price_candy,
                        at,
                    }])
                }
                _ => Err(BookingError::RefundMismatch { refund_no }),
            },
        }
    }

    fn check(&self, event: &BookingEvent) -> Result<(), InvariantViolation> {
        let fail = |why: &str| Err(InvariantViolation(format!("{}: {why}", event.name())));
        let s = self.status;
        let ok = match event {
            BookingEvent::BookingRequested(_) => self.call.is_none(),
            _ if self.call.is_none() => false,
            BookingEvent::BookingActivated { .. } => s == BookingStatus::Pending,
            BookingEvent::ParticipantJoined { first, .. } => {
                *first == (self.fan_joined_at.is_none() && self.artist_joined_at.is_none())
                    && matches!(
                        s,
                        BookingStatus::Booked | BookingStatus::Waiting | BookingStatus::InCall
                    )
            }
            BookingEvent::CallStarted { .. } => s == BookingStatus::Waiting,
            BookingEvent::CallFinished { .. } | BookingEvent::CallAborted { .. } => {
                s == BookingStatus::InCall && self.hold == HoldState::Open
            }
            BookingEvent::ModerationFlagged { .. } => s == BookingStatus::InCall,
            BookingEvent::NoShowCheckDeferred { .. } => {
                matches!(s, BookingStatus::Booked | BookingStatus::Waiting)
            }
            BookingEvent::NoShowDecided { .. } => {
                matches!(s, BookingStatus::Booked | BookingStatus::Waiting)
                    && self.started_at.is_none()
                    && self.hold == HoldState::Open
            }
            BookingEvent::BookingHoldRefunded { refund_no, .. } => {
                matches!(&self.hold, HoldState::RefundDue { refund_no: r } if r == refund_no)
            }
        };
        if ok {
            Ok(())
        } else {
            fail(&format!(
                "not allowed in status {s:?} with hold {:?}",
                self.hold
            ))
        }
    }

    /// The hold's candy moves on the candy account, whose events carry the ledger keys.
    fn ledger_ref(_event: &BookingEvent) -> Option<LedgerRef> {
        None
    }
}

impl Aggregate for Booking {
    const TYPE: &'static str = BOOKING_AGGREGATE_TYPE;
    type Command = BookingCommand;
    type Event = BookingEvent;
    type Error = BookingError;
    type Services = ();

    async fn handle(
        &mut self,
        command: BookingCommand,
        _service: &(),
        sink: &EventSink<Self>,
    ) -> Result<(), BookingError> {
        for event in self.decide(command)? {
            sink.write(event, self).await;
        }
        Ok(())
    }

    fn apply(&mut self, event: BookingEvent) {
        debug_assert_eq!(self.check(&event), Ok(()));
        match event {
            BookingEvent::BookingRequested(c) => self.call = Some(c),
            BookingEvent::BookingActivated { .. } => self.status = BookingStatus::Booked,
            BookingEvent::ParticipantJoined { party, at, .. } => {
                match party {
                    Party::Fan => self.fan_joined_at = Some(at),
                    Party::Artist => self.artist_joined_at = Some(at),
                }
                if self.status == BookingStatus::Booked {
                    self.status = BookingStatus::Waiting;
                }
            }
            BookingEvent::CallStarted { at } => {
                self.status = BookingStatus::InCall;
                self.started_at = Some(at);
            }
            BookingEvent::CallFinished { ended_at, .. } => {
                self.status = BookingStatus::Completed;
                self.ended_at = Some(ended_at);
                self.hold = HoldState::Settled;
            }
            BookingEvent::ModerationFlagged { reason, .. } => self.moderation = Some(reason),
            BookingEvent::CallAborted { ended_at, .. } => {
                self.status = BookingStatus::Completed;
                self.ended_at = Some(ended_at);
                self.hold = HoldState::Forfeited;
            }
            BookingEvent::NoShowCheckDeferred { at } => self.no_show_checked_at = Some(at),
            BookingEvent::NoShowDecided { kind, refund, at } => {
                self.no_show_checked_at = Some(at);
                self.status = BookingStatus::of(kind);
                self.hold = match refund {
                    Some(r) => HoldState::RefundDue {
                        refund_no: r.refund_no,
                    },
                    None => HoldState::Settled,
                };
            }
            BookingEvent::BookingHoldRefunded { .. } => self.hold = HoldState::Refunded,
        }
    }
}

#[cfg(test)]
mod tests;
