//! The bill lock aggregate (stream `<station_id>:<yyyymm>`): the payment locks of one
//! station-month. At most one live (RESERVED or ACTIVE) lock at a time; only a reserved
//! lock is activated, only a live one released. Projecting never changes a lock
//! (R-BILL-6): these commands come from the payment flow. A replay of a reservation,
//! activation or release that already took effect writes nothing.
//!
//! **A lock holds a live line (issue 14 F14, issue 32 item 6).** A lock names a line
//! of another stream (its payment order), so the unit that writes it also reads the
//! order (`crate::bill::commands` in the service): a reservation needs the line live,
//! of its station-month, at the order's current publication, and the order not
//! closed ([`check_hold`]); an activation needs the held line still there
//! ([`check_held_line`]). The other way round, the order's unit reads the locks: a
//! line held by a live lock is not removed, and its order is not voided or marked
//! no-need-pay ([`BillLocks::live_hold_of`]). Those are reads of another stream, not
//! writes to it, so two racing units can still slip past each other; a live lock
//! whose line is gone is then a reconciliation finding (`bill_locks_hold_live_lines`).

use super::commands::{BillLockCommand, LockAction, ReserveLock};
use super::error::BillError;
use super::events::{BillLockEvent, BILL_LOCK_AGGREGATE_TYPE};
use super::month::YearMonth;
use super::payment_order::{PaymentOrder, TERMINAL_STATUSES};
use super::values::BillId;
use crate::decide::{Decide, InvariantViolation, LedgerRef};
use cqrs_es::event_sink::EventSink;
use cqrs_es::Aggregate;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum LockStatus {
    Reserved,
    Active,
    Released,
}

impl LockStatus {
    pub fn is_live(self) -> bool {
        matches!(self, Self::Reserved | Self::Active)
    }
}

/// What a lock holds: the line of the published order it reserves the station-month
/// for, with that publication's identity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockHold {
    pub order_id: i64,
    pub line_id: i64,
    pub publish_version: i64,
    pub submit_round: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lock {
    pub hold: LockHold,
    pub status: LockStatus,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct BillLocks {
    /// 0 until the first event.
    pub station_id: i64,
    /// Empty until the first event.
    pub month: String,
    pub locks: BTreeMap<i64, Lock>,
}

/// Whether a reservation holds a real line (issue 14 F14): the order exists, the line
/// is a live line of it for the lock's station-month, and the publish identity named
/// is the order's and the line's current one. The projection counts only such a lock
/// (R-BILL-2 joins locks to the current publication), so any other one would be a
/// dead lock that still blocks real ones (`LOCK_HELD`) until released.
pub fn check_hold(cmd: &ReserveLock, order: &PaymentOrder) -> Result<(), BillError> {
    let (order_id, line_id) = (cmd.order_id.get(), cmd.line_id.get());
    let Some(status) = order.status else {
        return Err(BillError::LockOrderNotFound(order_id));
    };
    if TERMINAL_STATUSES.contains(&status) {
        return Err(BillError::LockOrderClosed { order_id, status });
    }
    let missing = |why| BillError::LockLineNotFound {
        order_id,
        line_id,
        why,
    };
    let line = order.lines.get(&line_id).ok_or(missing("does not exist"))?;
    if line.removed {
        return Err(missing("was removed"));
    }
    if line.station_id != cmd.station_id.get() || line.month != cmd.month.to_string() {
        return Err(missing("is of another station-month"));
    }
    for (field, given, current) in [
        (
            "publish_version",
            cmd.publish_version.get(),
            order.publish_version,
        ),
        (
            "publish_version",
            cmd.publish_version.get(),
            line.publish_version,
        ),
        ("submit_round", cmd.submit_round.get(), order.submit_round),
        ("submit_round", cmd.submit_round.get(), line.submit_round),
    ] {
        if given != current {
            return Err(BillError::LockPublishMismatch {
                field,
                given,
                current,
            });
        }
    }
    Ok(())
}

/// Whether the line a lock holds is still there (issue 32 item 6): its order exists
/// and is not closed (VOID, NO_NEED_PAY), and the line is on it and not removed. A
/// reserved lock whose line is gone is refused activation (`LOCK_LINE_GONE`); it can
/// only be released.
pub fn check_held_line(
    lock_id: i64,
    hold: &LockHold,
    order: &PaymentOrder,
) -> Result<(), BillError> {
    let gone = |why: String| BillError::LockLineGone {
        lock_id,
        order_id: hold.order_id,
        line_id: hold.line_id,
        why,
    };
    let Some(status) = order.status else {
        return Err(gone("is on an order that does not exist".to_owned()));
    };
    if TERMINAL_STATUSES.contains(&status) {
        return Err(gone(format!("is on an order now {status:?}")));
    }
    match order.lines.get(&hold.line_id) {
        None => Err(gone("is not on the order".to_owned())),
        Some(line) if line.removed => Err(gone("was removed".to_owned())),
        Some(_) => Ok(()),
    }
}

impl BillLocks {
    /// The live lock holding line `line_id` of order `order_id`, if any.
    pub fn live_hold_of(&self, order_id: i64, line_id: i64) -> Option<i64> {
        self.live()
            .filter(|(_, l)| l.hold.order_id == order_id && l.hold.line_id == line_id)
            .map(|(id, _)| id)
    }

    /// The live lock, if any (at most one, by the rule of this stream).
    pub fn live(&self) -> Option<(i64, &Lock)> {
        self.locks
            .iter()
            .find(|(_, l)| l.status.is_live())
            .map(|(id, l)| (*id, l))
    }

    fn same_station_month(&self, station_id: BillId, month: YearMonth) -> Result<(), BillError> {
        if self.month.is_empty() {
            return Ok(());
        }
        let stream = format!("{}:{}", self.station_id, self.month);
        if self.station_id != station_id.get() {
            return Err(BillError::StreamMismatch {
                field: "station_id",
                given: station_id.to_string(),
                stream,
            });
        }
        if self.month != month.to_string() {
            return Err(BillError::StreamMismatch {
                field: "month",
                given: month.to_string(),
                stream,
            });
        }
        Ok(())
    }

    fn reserve(&self, cmd: ReserveLock) -> Result<Vec<BillLockEvent>, BillError> {
        self.same_station_month(cmd.station_id, cmd.month)?;
        let lock_id = cmd.lock_id.get();
        let hold = LockHold {
            order_id: cmd.order_id.get(),
            line_id: cmd.line_id.get(),
            publish_version: cmd.publish_version.get(),
            submit_round: cmd.submit_round.get(),
        };
        if let Some(have) = self.locks.get(&lock_id) {
            return if have.hold == hold {
                Ok(vec![])
            } else {
                Err(BillError::LockIdReused(lock_id))
            };
        }
        if let Some((live, _)) = self.live() {
            return Err(BillError::LockHeld { live });
        }
        Ok(vec![BillLockEvent::BillLockReserved {
            lock_id,
            station_id: cmd.station_id.get(),
            month: cmd.month.to_string(),
            order_id: hold.order_id,
            line_id: hold.line_id,
            publish_version: hold.publish_version,
            submit_round: hold.submit_round,
            at: cmd.at,
        }])
    }

    fn lock(&self, cmd: &LockAction) -> Result<&Lock, BillError> {
        self.same_station_month(cmd.station_id, cmd.month)?;
        let lock_id = cmd.lock_id.get();
        self.locks
            .get(&lock_id)
            .ok_or(BillError::LockNotFound(lock_id))
    }

    fn activate(&self, cmd: LockAction) -> Result<Vec<BillLockEvent>, BillError> {
        let lock_id = cmd.lock_id.get();
        match self.lock(&cmd)?.status {
            LockStatus::Active => Ok(vec![]),
            LockStatus::Released => Err(BillError::LockNotReserved(lock_id)),
            LockStatus::Reserved => Ok(vec![BillLockEvent::BillLockActivated {
                lock_id,
                at: cmd.at,
            }]),
        }
    }

    fn release(&self, cmd: LockAction) -> Result<Vec<BillLockEvent>, BillError> {
        let lock_id = cmd.lock_id.get();
        match self.lock(&cmd)?.status {
            LockStatus::Released => Ok(vec![]),
            LockStatus::Reserved | LockStatus::Active => {
                Ok(vec![BillLockEvent::BillLockReleased {
                    lock_id,
                    at: cmd.at,
                }])
            }
        }
    }
}

impl Decide for BillLocks {
    const SNAPSHOT_VERSION: i32 = 1;

    fn decide(&self, command: BillLockCommand) -> Result<Vec<BillLockEvent>, BillError> {
        match command {
            BillLockCommand::ReserveLock(cmd) => self.reserve(cmd),
            BillLockCommand::ActivateLock(cmd) => self.activate(cmd),
            BillLockCommand::ReleaseLock(cmd) => self.release(cmd),
        }
    }

    fn check(&self, event: &BillLockEvent) -> Result<(), InvariantViolation> {
        let status = |id: &i64| self.locks.get(id).map(|l| l.status);
        let ok = match event {
            BillLockEvent::BillLockReserved {
                lock_id,
                station_id,
                month,
                ..
            } => {
                status(lock_id).is_none()
                    && self.live().is_none()
                    && (self.month.is_empty()
                        || (self.station_id == *station_id && self.month == *month))
            }
            BillLockEvent::BillLockActivated { lock_id, .. } => {
                status(lock_id) == Some(LockStatus::Reserved)
            }
            BillLockEvent::BillLockReleased { lock_id, .. } => {
                status(lock_id).is_some_and(LockStatus::is_live)
            }
        };
        if !ok {
            return Err(InvariantViolation(format!(
                "{} does not follow from the locks of {}:{} ({:?})",
                event.name(),
                self.station_id,
                self.month,
                self.locks
            )));
        }
        Ok(())
    }

    fn ledger_ref(_event: &BillLockEvent) -> Option<LedgerRef> {
        None
    }
}

impl Aggregate for BillLocks {
    const TYPE: &'static str = BILL_LOCK_AGGREGATE_TYPE;
    type Command = BillLockCommand;
    type Event = BillLockEvent;
    type Error = BillError;
    type Services = ();

    async fn handle(
        &mut self,
        command: BillLockCommand,
        _service: &(),
        sink: &EventSink<Self>,
    ) -> Result<(), BillError> {
        for event in self.decide(command)? {
            sink.write(event, self).await;
        }
        Ok(())
    }

    fn apply(&mut self, event: BillLockEvent) {
        debug_assert_eq!(self.check(&event), Ok(()));
        match event {
            BillLockEvent::BillLockReserved {
                lock_id,
                station_id,
                month,
                order_id,
                line_id,
                publish_version,
                submit_round,
                ..
            } => {
                self.station_id = station_id;
                self.month = month;
                self.locks.insert(
                    lock_id,
                    Lock {
                        hold: LockHold {
                            order_id,
                            line_id,
                            publish_version,
                            submit_round,
                        },
                        status: LockStatus::Reserved,
                    },
                );
            }
            BillLockEvent::BillLockActivated { lock_id, .. } => {
                if let Some(l) = self.locks.get_mut(&lock_id) {
                    l.status = LockStatus::Active;
                }
            }
            BillLockEvent::BillLockReleased { lock_id, .. } => {
                if let Some(l) = self.locks.get_mut(&lock_id) {
                    l.status = LockStatus::Released;
                }
            }
        }
    }
}
