//! The candy account (seed 000, issue 18 item 1): one stream per user (stream id = the
//! user id) holding the in-app credit in whole 1/100-candy units, in two buckets:
//! `balance` (spendable) and `held` (reserved by bookings, R-HOLD-1).
//!
//! Every movement is a posting of the chart (`crate::ledger::candy_posting`): a
//! recharge issues candy against the cash the gateway took, a hold moves balance to
//! held, and a hold closes exactly once — settled to the artist's income, forfeited to
//! the platform, or refunded to the balance. Neither bucket goes below zero (the
//! `candy` account kind's flag, checked when deciding and when loading).
//!
//! Idempotency: a credit is once per order and a hold once per booking, by the state
//! here and by the unique ledger key of the event in the store; closing a hold that is
//! already closed decides nothing.

mod commands;
mod events;

pub use commands::{CandyCommand, CreditSource, SettleReason};
pub use events::{CandyAfter, CandyEvent, CANDY_EVENT_VERSION};

use crate::accounts::AccountKind;
use crate::decide::{Decide, InvariantViolation, LedgerRef};
use crate::services::{UserId, CANDY_AMOUNT_MAX};
use cqrs_es::event_sink::EventSink;
use cqrs_es::Aggregate;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The stream type of candy accounts.
pub const CANDY_AGGREGATE_TYPE: &str = "candy_account";
/// `ref_type` of a recharge credit (`ref_id` = the order number).
pub const RECHARGE_REF_TYPE: &str = "RECHARGE";
/// `ref_type` of a hold's movements (`ref_id` = the booking number).
pub const BOOKING_REF_TYPE: &str = "BOOKING";
/// Most bookings one account remembers (each hold is kept, closed or not, so a replay
/// can never hold or close twice); the bound keeps the state and its snapshot small.
pub const CANDY_HOLDS_MAX: usize = 100_000;

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CandyAccount {
    pub user_id: Option<UserId>,
    pub balance: i64,
    pub held: i64,
    /// Every hold ever placed, by booking number.
    pub holds: BTreeMap<String, Hold>,
    /// Orders already credited.
    pub credited: BTreeMap<String, i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    pub candy: i64,
    pub open: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CandyError {
    #[error("candy must be a positive whole number of 1/100-candy units up to {max}")]
    InvalidAmount { max: i64 },
    #[error("the command names user {given}, the account belongs to {owner}")]
    WrongUser { given: UserId, owner: UserId },
    #[error("insufficient candy: {balance} available, {requested} requested")]
    InsufficientCandy { balance: i64, requested: i64 },
    #[error("booking {booking_no} holds candy already with another amount")]
    HoldMismatch { booking_no: String },
    #[error("booking {booking_no} holds no candy on this account")]
    HoldNotFound { booking_no: String },
    #[error("order {order_no} was credited already with another amount")]
    CreditMismatch { order_no: String },
    #[error("the account remembers the maximum of {max} holds")]
    TooManyHolds { max: usize },
}

impl CandyError {
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidAmount { .. } => "INVALID_CANDY_AMOUNT",
            Self::WrongUser { .. } => "CANDY_ACCOUNT_MISMATCH",
            Self::InsufficientCandy { .. } => "INSUFFICIENT_CANDY",
            Self::HoldMismatch { .. } => "HOLD_MISMATCH",
            Self::HoldNotFound { .. } => "HOLD_NOT_FOUND",
            Self::CreditMismatch { .. } => "CREDIT_MISMATCH",
            Self::TooManyHolds { .. } => "CANDY_HOLDS_LIMIT",
        }
    }

    pub fn field(&self) -> Option<&'static str> {
        match self {
            Self::InvalidAmount { .. } | Self::CreditMismatch { .. } => Some("candy"),
            Self::WrongUser { .. } => Some("user_id"),
            Self::HoldMismatch { .. } | Self::HoldNotFound { .. } => Some("booking_no"),
            Self::InsufficientCandy { .. } | Self::TooManyHolds { .. } => None,
        }
    }
}

fn amount(candy: i64) -> Result<i64, CandyError> {
    if candy <= 0 || candy > CANDY_AMOUNT_MAX {
        return Err(CandyError::InvalidAmount {
            max: CANDY_AMOUNT_MAX,
        });
    }
    Ok(candy)
}

impl CandyAccount {
    fn after(&self, d_balance: i64, d_held: i64) -> CandyAfter {
        CandyAfter {
            balance: self.balance + d_balance,
            held: self.held + d_held,
        }
    }

    /// The account's opening event first when the stream is empty.
    fn opening(&self, user_id: UserId) -> Result<Vec<CandyEvent>, CandyError> {
        match self.user_id {
            None => Ok(vec![CandyEvent::CandyAccountOpened { user_id }]),
            Some(owner) if owner == user_id => Ok(Vec::new()),
            Some(owner) => Err(CandyError::WrongUser {
                given: user_id,
                owner,
            }),
        }
    }

    fn open_hold(&self, booking_no: &str) -> Result<Option<i64>, CandyError> {
        match self.holds.get(booking_no) {
            None => Err(CandyError::HoldNotFound {
                booking_no: booking_no.to_owned(),
            }),
            Some(h) if h.open => Ok(Some(h.candy)),
            // Closed already: restating the close decides nothing.
            Some(_) => Ok(None),
        }
    }
}

impl Decide for CandyAccount {
    const SNAPSHOT_VERSION: i32 = 1;
    const OUTBOX: bool = true;

    fn decide(&self, command: CandyCommand) -> Result<Vec<CandyEvent>, CandyError> {
        match command {
            CandyCommand::Credit {
                user_id,
                source,
                order_no,
                candy,
            } => {
                let candy = amount(candy)?;
                let mut out = self.opening(user_id)?;
                match self.credited.get(&order_no) {
                    Some(c) if *c == candy => return Ok(Vec::new()),
                    Some(_) => return Err(CandyError::CreditMismatch { order_no }),
                    None => {}
                }
                out.push(CandyEvent::CandyCredited {
                    source,
                    order_no,
                    candy,
                    after: self.after(candy, 0),
                });
                Ok(out)
            }
            CandyCommand::PlaceHold {
                user_id,
                booking_no,
                candy,
            } => {
                let candy = amount(candy)?;
                let mut out = self.opening(user_id)?;
                match self.holds.get(&booking_no) {
                    Some(h) if h.candy == candy => return Ok(Vec::new()),
                    Some(_) => return Err(CandyError::HoldMismatch { booking_no }),
                    None => {}
                }
                if self.holds.len() >= CANDY_HOLDS_MAX {
                    return Err(CandyError::TooManyHolds {
                        max: CANDY_HOLDS_MAX,
                    });
                }
                let after = self.after(-candy, candy);
                if AccountKind::CandyBucket
                    .flags()
                    .check(after.balance)
                    .is_err()
                {
                    return Err(CandyError::InsufficientCandy {
                        balance: self.balance,
                        requested: candy,
                    });
                }
                out.push(CandyEvent::HoldPlaced {
                    booking_no,
                    candy,
                    after,
                });
                Ok(out)
            }
            CandyCommand::SettleHold {
                booking_no,
                artist_id,
                reason,
            } => Ok(match self.open_hold(&booking_no)? {
                None => Vec::new(),
                Some(candy) => vec![CandyEvent::HoldSettled {
                    after: self.after(0, -candy),
                    booking_no,
                    artist_id,
                    reason,
                    candy,
                }],
            }),
            CandyCommand::ForfeitHold { booking_no, reason } => {
                Ok(match self.open_hold(&booking_no)? {
                    None => Vec::new(),
                    Some(candy) => vec![CandyEvent::HoldForfeited {
                        after: self.after(0, -candy),
                        booking_no,
                        reason,
                        candy,
                    }],
                })
            }
            CandyCommand::RefundHold {
                booking_no,
                refund_no,
            } => Ok(match self.open_hold(&booking_no)? {
                None => Vec::new(),
                Some(candy) => vec![CandyEvent::HoldRefunded {
                    after: self.after(candy, -candy),
                    booking_no,
                    refund_no,
                    candy,
                }],
            }),
        }
    }

    fn check(&self, event: &CandyEvent) -> Result<(), InvariantViolation> {
        let fail = |why: String| Err(InvariantViolation(format!("{}: {why}", event.name())));
        if let CandyEvent::CandyAccountOpened { .. } = event {
            return match self.user_id {
                None => Ok(()),
                Some(_) => fail("opened twice".into()),
            };
        }
        if self.user_id.is_none() {
            return fail("account is not open".into());
        }
        let Some((candy, after)) = event.movement() else {
            return Ok(());
        };
        let (d_balance, d_held) = match event {
            CandyEvent::CandyCredited { order_no, .. } => {
                if self.credited.contains_key(order_no) {
                    return fail(format!("order {order_no} credited twice"));
                }
                (candy, 0)
            }
            CandyEvent::HoldPlaced { booking_no, .. } => {
                if self.holds.contains_key(booking_no) {
                    return fail(format!("booking {booking_no} held twice"));
                }
                (-candy, candy)
            }
            CandyEvent::HoldSettled { booking_no, .. }
            | CandyEvent::HoldForfeited { booking_no, .. }
            | CandyEvent::HoldRefunded { booking_no, .. } => {
                let open = self.holds.get(booking_no).filter(|h| h.open);
                if open.map(|h| h.candy) != Some(candy) {
                    return fail(format!("no open hold of {candy} for booking {booking_no}"));
                }
                let to_balance = matches!(event, CandyEvent::HoldRefunded { .. });
                (if to_balance { candy } else { 0 }, -candy)
            }
            CandyEvent::CandyAccountOpened { .. } => (0, 0),
        };
        let flags = AccountKind::CandyBucket.flags();
        if candy <= 0
            || self.after(d_balance, d_held) != after
            || flags.check(after.balance).is_err()
            || flags.check(after.held).is_err()
        {
            return fail(format!(
                "{candy} after balance {} held {} does not give {after:?}",
                self.balance, self.held
            ));
        }
        Ok(())
    }

    fn ledger_ref(event: &CandyEvent) -> Option<LedgerRef> {
        let (ref_type, ref_id, entry) = match event {
            CandyEvent::CandyAccountOpened { .. } => return None,
            CandyEvent::CandyCredited { order_no, .. } => {
                (RECHARGE_REF_TYPE, order_no, "CANDY_CREDITED")
            }
            CandyEvent::HoldPlaced { booking_no, .. } => {
                (BOOKING_REF_TYPE, booking_no, "HOLD_PLACED")
            }
            CandyEvent::HoldSettled { booking_no, .. } => {
                (BOOKING_REF_TYPE, booking_no, "HOLD_SETTLED")
            }
            CandyEvent::HoldForfeited { booking_no, .. } => {
                (BOOKING_REF_TYPE, booking_no, "HOLD_FORFEITED")
            }
            CandyEvent::HoldRefunded { booking_no, .. } => {
                (BOOKING_REF_TYPE, booking_no, "HOLD_REFUNDED")
            }
        };
        Some(LedgerRef {
            ref_type: ref_type.to_owned(),
            ref_id: ref_id.clone(),
            entry_type: entry.to_owned(),
        })
    }
}

impl Aggregate for CandyAccount {
    const TYPE: &'static str = CANDY_AGGREGATE_TYPE;
    type Command = CandyCommand;
    type Event = CandyEvent;
    type Error = CandyError;
    type Services = ();

    async fn handle(
        &mut self,
        command: CandyCommand,
        _service: &(),
        sink: &EventSink<Self>,
    ) -> Result<(), CandyError> {
        for event in self.decide(command)? {
            sink.write(event, self).await;
        }
        Ok(())
    }

    fn apply(&mut self, event: CandyEvent) {
        debug_assert_eq!(self.check(&event), Ok(()));
        if let Some((_, after)) = event.movement() {
            self.balance = after.balance;
            self.held = after.held;
        }
        match event {
            CandyEvent::CandyAccountOpened { user_id } => self.user_id = Some(user_id),
            CandyEvent::CandyCredited {
                order_no, candy, ..
            } => {
                self.credited.insert(order_no, candy);
            }
            CandyEvent::HoldPlaced {
                booking_no, candy, ..
            } => {
                self.holds.insert(booking_no, Hold { candy, open: true });
            }
            CandyEvent::HoldSettled { booking_no, .. }
            | CandyEvent::HoldForfeited { booking_no, .. }
            | CandyEvent::HoldRefunded { booking_no, .. } => {
                if let Some(h) = self.holds.get_mut(&booking_no) {
                    h.open = false;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
