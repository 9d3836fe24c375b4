//! Bill writes that span streams (issue 14 item 4): the command is decided on its own
//! stream and, in the same unit, what makes it safe for the projection is checked or
//! claimed, so **no accepted command can stop the bill projector or corrupt another
//! stream's rows**:
//!
//! | write                 | checked (read)                                  | claimed (see `bill::claim`)                 |
//! |-----------------------|-------------------------------------------------|---------------------------------------------|
//! | small bill            | —                                               | `SMALL_BILL:<bill_id>` (F2)                 |
//! | diff                  | the linked partner bill: recorded, same month (F13) | `DIFF:<diff_id>`; `PARTNER_BILL_LINK:<id>` of the new link, the old one released (F12) |
//! | payment-order line    | —                                               | `LINE:<line_id>`                            |
//! | lock reservation      | the order and line it holds, current publication, the order not closed (F14, issue 32 item 6) | `LOCK:<lock_id>` |
//! | lock activation       | the line it holds: still on its order, which is not closed (issue 32 item 6) | — |
//! | line removal, order void / no-need-pay | the locks of the line's (lines') station-month: none live holds it (issue 32 item 6) | — |
//!
//! A payment result is a unit of its own kind: the result's stream first, then — when
//! the result writes back to a payment-order line — that order's stream, so the line
//! and the result never disagree ([`record_payment_result`]).
//!
//! Each is a `run_unit`: the holder's stream first (the business root), then the claim
//! streams in id order. A concurrent unit that took the same id makes this one's
//! append conflict; it is then decided again and refused with the claim's code. The
//! checked reads need no write: a partner bill's month and existence never change
//! once recorded, and a lock names one publication of its line, checked as it is when
//! the lock is decided. Claims are made only when the holder's stream records
//! something new; a replay writes nothing and claims nothing.
//!
//! The lock and order checks read the other stream without writing it, so a removal
//! racing a reservation of the same line can both pass; the lock left holding a gone
//! line is then found by reconciliation (`bill::reconcile`), and released by hand.
//!
//! These are the only bill writes the API makes for these commands. Tests and tools
//! that write straight to a stream (`run_command`) bypass them and must keep ids
//! unique themselves.

use crate::infra::store::{DynStore, Metadata};
use crate::runtime::unit::{run_command, run_unit, UnitBuilder, UnitError, UnitOutcome};
use chrono::{DateTime, Utc};
use factledger_aggregates::bill::lock::{check_held_line, check_hold, LockStatus};
use factledger_aggregates::bill::payment_result::writes_back_to_line;
use factledger_aggregates::bill::{
    station_month_stream_id, AddLine, BillError, BillId, BillIdClaim, BillLockCommand, BillLocks,
    ClaimCommand, ClaimKind, CreatePaymentOrder, LockAction, PartnerBill, PartnerBillCommand,
    PaymentOrder, PaymentOrderCommand, PaymentResult, PaymentResultCommand, PaymentResultEvent,
    RecordDiff, RecordPaymentResult, RecordSmallBill, Reference, ReferenceCommand, ReserveLock,
    StationMonthBills, StationMonthCommand, WriteLineResult, YearMonth,
};
use factledger_aggregates::Decide;

/// What a bill unit returns: nothing beyond its events.
pub type BillOutcome = Result<UnitOutcome<()>, UnitError<BillError>>;

/// Every bill fact command the API accepts, as one value: the HTTP handlers parse a
/// request into one ([`crate::bill::api`]) and [`submit`] runs it, so a command's
/// unit — which streams it touches, what it claims or checks — is decided here and
/// nowhere else.
#[derive(Debug, Clone)]
pub enum BillFact {
    SmallBill(RecordSmallBill),
    Diff(RecordDiff),
    PartnerBill(PartnerBillCommand),
    Reference(ReferenceCommand),
    CreatePaymentOrder(CreatePaymentOrder),
    /// A command on an existing payment order.
    PaymentOrder(BillId, PaymentOrderCommand),
    Line(AddLine),
    Lock(ReserveLock),
    /// A command on the locks of one station-month.
    LockAction(BillId, YearMonth, BillLockCommand),
    PaymentResult(RecordPaymentResult),
    /// A command on a recorded payment result.
    PaymentResultAction(BillId, PaymentResultCommand),
}

/// Run one bill fact command as its own unit (see the module doc for the units that
/// span streams; every other command is decided on its own stream alone).
pub async fn submit(store: &DynStore, metadata: &Metadata, fact: BillFact) -> BillOutcome {
    match fact {
        BillFact::SmallBill(cmd) => record_small_bill(store, metadata, cmd).await,
        BillFact::Diff(cmd) => record_diff(store, metadata, cmd).await,
        BillFact::Line(cmd) => add_line(store, metadata, cmd).await,
        BillFact::Lock(cmd) => reserve_lock(store, metadata, cmd).await,
        BillFact::PaymentResult(cmd) => record_payment_result(store, metadata, cmd).await,
        BillFact::PartnerBill(cmd) => {
            let stream = match &cmd {
                PartnerBillCommand::RecordPartnerBill(c) => c.partner_bill_id.to_string(),
                PartnerBillCommand::RepushPartnerBill(c) => c.partner_bill_id.to_string(),
            };
            on_stream::<PartnerBill>(store, metadata, &stream, cmd).await
        }
        BillFact::Reference(cmd) => {
            let stream = cmd.stream_id();
            on_stream::<Reference>(store, metadata, &stream, cmd).await
        }
        BillFact::CreatePaymentOrder(cmd) => {
            let stream = cmd.order_id.to_string();
            let cmd = PaymentOrderCommand::CreatePaymentOrder(cmd);
            on_stream::<PaymentOrder>(store, metadata, &stream, cmd).await
        }
        BillFact::PaymentOrder(id, cmd) => match unlocking(&cmd) {
            Some(unlocks) => order_change(store, metadata, id, cmd, unlocks).await,
            None => on_stream::<PaymentOrder>(store, metadata, &id.to_string(), cmd).await,
        },
        BillFact::LockAction(_, _, BillLockCommand::ActivateLock(cmd)) => {
            activate_lock(store, metadata, cmd).await
        }
        BillFact::LockAction(station, month, cmd) => {
            let stream = station_month_stream_id(station, month);
            on_stream::<BillLocks>(store, metadata, &stream, cmd).await
        }
        BillFact::PaymentResultAction(id, cmd) => {
            on_stream::<PaymentResult>(store, metadata, &id.to_string(), cmd).await
        }
    }
}

/// One command decided on one stream alone.
async fn on_stream<A>(
    store: &DynStore,
    metadata: &Metadata,
    stream: &str,
    cmd: A::Command,
) -> BillOutcome
where
    A: Decide<Error = BillError> + Clone + 'static,
    A::Command: Clone,
{
    let done = run_command::<A>(store, metadata, stream, cmd).await?;
    Ok(UnitOutcome {
        value: (),
        events: done.events,
        position: done.position,
        attempts: done.attempts,
    })
}

/// Claim `kind:id` for `holder` in the unit (nothing when it already holds it).
async fn claim(
    unit: &mut UnitBuilder,
    kind: ClaimKind,
    id: i64,
    holder: &str,
    at: DateTime<Utc>,
) -> Result<(), UnitError<BillError>> {
    let holder = holder.to_owned();
    let cmd = ClaimCommand::Claim {
        kind,
        id,
        holder,
        at,
    };
    decide_claim(unit, kind, id, cmd).await
}

/// Give `kind:id` back if `holder` holds it.
async fn release(
    unit: &mut UnitBuilder,
    kind: ClaimKind,
    id: i64,
    holder: &str,
    at: DateTime<Utc>,
) -> Result<(), UnitError<BillError>> {
    let holder = holder.to_owned();
    let cmd = ClaimCommand::Release {
        kind,
        id,
        holder,
        at,
    };
    decide_claim(unit, kind, id, cmd).await
}

/// Decide `cmd` on the claim stream of `kind:id` in the unit.
async fn decide_claim(
    unit: &mut UnitBuilder,
    kind: ClaimKind,
    id: i64,
    cmd: ClaimCommand,
) -> Result<(), UnitError<BillError>> {
    let stream = kind.stream_id(id);
    let mut claimed = unit.load::<BillIdClaim, BillError>(&stream).await?;
    unit.decide::<BillIdClaim, BillError>(&mut claimed, &stream, cmd)?;
    Ok(())
}

/// `POST /v1/bills/small-bills`: the station-month's small bill, and its bill id
/// claimed (F2: one bill id, one station-month).
#[tracing::instrument(skip_all, fields(station_id = %cmd.station_id, month = %cmd.month, bill_id = %cmd.bill_id))]
pub async fn record_small_bill(
    store: &DynStore,
    metadata: &Metadata,
    cmd: RecordSmallBill,
) -> BillOutcome {
    let stream = station_month_stream_id(cmd.station_id, cmd.month);
    run_unit(store, metadata, |mut unit| {
        let (cmd, stream) = (cmd.clone(), stream.clone());
        async move {
            let (bill_id, at) = (cmd.bill_id.get(), cmd.recorded_at);
            let mut sm = unit.load::<StationMonthBills, BillError>(&stream).await?;
            let cmd = StationMonthCommand::RecordSmallBill(cmd);
            let events = unit.decide::<StationMonthBills, BillError>(&mut sm, &stream, cmd)?;
            if !events.is_empty() {
                claim(&mut unit, ClaimKind::SmallBill, bill_id, &stream, at).await?;
            }
            Ok(((), unit))
        }
    })
    .await
}

/// `POST /v1/bills/diffs`: the station-month's diff with its diff id claimed; a new
/// partner bill link checked (F13) and claimed (F12), the link it replaces released.
#[tracing::instrument(skip_all, fields(station_id = %cmd.station_id, month = %cmd.month, diff_id = %cmd.diff_id))]
pub async fn record_diff(store: &DynStore, metadata: &Metadata, cmd: RecordDiff) -> BillOutcome {
    let stream = station_month_stream_id(cmd.station_id, cmd.month);
    run_unit(store, metadata, |mut unit| {
        let (cmd, stream) = (cmd.clone(), stream.clone());
        async move {
            let (at, month) = (cmd.recorded_at, cmd.month);
            let diff_id = cmd.diff_id.get();
            let linked = cmd.partner_bill_id.map(|p| p.get());
            let mut sm = unit.load::<StationMonthBills, BillError>(&stream).await?;
            let before = sm.state.diff.as_ref().and_then(|d| d.partner_bill_id);
            let cmd = StationMonthCommand::RecordDiff(cmd);
            let events = unit.decide::<StationMonthBills, BillError>(&mut sm, &stream, cmd)?;
            if events.is_empty() {
                return Ok(((), unit));
            }
            if let Some(p) = linked.filter(|p| Some(*p) != before) {
                let bill = unit.load::<PartnerBill, BillError>(&p.to_string()).await?;
                bill.state
                    .linkable_by(p, month)
                    .map_err(UnitError::Refused)?;
            }
            claim(&mut unit, ClaimKind::Diff, diff_id, &stream, at).await?;
            // Claim and release in id order: every unit takes claim streams alike.
            let mut moves: Vec<(i64, bool)> = linked.map(|p| (p, true)).into_iter().collect();
            moves.extend(before.filter(|b| Some(*b) != linked).map(|b| (b, false)));
            moves.sort_unstable();
            for (p, take) in moves {
                if take {
                    claim(&mut unit, ClaimKind::PartnerBillLink, p, &stream, at).await?;
                } else {
                    release(&mut unit, ClaimKind::PartnerBillLink, p, &stream, at).await?;
                }
            }
            Ok(((), unit))
        }
    })
    .await
}

/// `POST /v1/payment-orders/{order_id}/lines`: the line, and its id claimed for the
/// order (`bill_fact_lines` is keyed by line id alone).
#[tracing::instrument(skip_all, fields(order_id = %cmd.order_id, line_id = %cmd.line_id))]
pub async fn add_line(store: &DynStore, metadata: &Metadata, cmd: AddLine) -> BillOutcome {
    let stream = cmd.order_id.to_string();
    run_unit(store, metadata, |mut unit| {
        let (cmd, stream) = (cmd.clone(), stream.clone());
        async move {
            let (line_id, at) = (cmd.line_id.get(), cmd.at);
            let mut order = unit.load::<PaymentOrder, BillError>(&stream).await?;
            let cmd = PaymentOrderCommand::AddLine(cmd);
            let events = unit.decide::<PaymentOrder, BillError>(&mut order, &stream, cmd)?;
            if !events.is_empty() {
                claim(&mut unit, ClaimKind::Line, line_id, &stream, at).await?;
            }
            Ok(((), unit))
        }
    })
    .await
}

/// `POST /v1/bills/locks`: a reservation of a real line's current publication (F14),
/// its lock id claimed for the station-month (`bill_fact_locks` is keyed by lock id).
#[tracing::instrument(skip_all, fields(station_id = %cmd.station_id, month = %cmd.month, lock_id = %cmd.lock_id))]
pub async fn reserve_lock(store: &DynStore, metadata: &Metadata, cmd: ReserveLock) -> BillOutcome {
    let stream = station_month_stream_id(cmd.station_id, cmd.month);
    run_unit(store, metadata, |mut unit| {
        let (cmd, stream) = (cmd.clone(), stream.clone());
        async move {
            let (lock_id, at) = (cmd.lock_id.get(), cmd.at);
            let order = unit
                .load::<PaymentOrder, BillError>(&cmd.order_id.to_string())
                .await?;
            check_hold(&cmd, &order.state).map_err(UnitError::Refused)?;
            let mut locks = unit.load::<BillLocks, BillError>(&stream).await?;
            let cmd = BillLockCommand::ReserveLock(cmd);
            let events = unit.decide::<BillLocks, BillError>(&mut locks, &stream, cmd)?;
            if !events.is_empty() {
                claim(&mut unit, ClaimKind::Lock, lock_id, &stream, at).await?;
            }
            Ok(((), unit))
        }
    })
    .await
}

/// `POST /v1/bills/locks/{station_id}/{month}/{lock_id}:activate`: the reserved lock
/// activated only while the line it holds is still there (issue 32 item 6: a lock on
/// a removed line, or on a line of a closed order, is `LOCK_LINE_GONE`; it can only be
/// released). Other refusals and replays are the lock stream's own.
#[tracing::instrument(skip_all, fields(station_id = %cmd.station_id, month = %cmd.month, lock_id = %cmd.lock_id))]
pub async fn activate_lock(store: &DynStore, metadata: &Metadata, cmd: LockAction) -> BillOutcome {
    let stream = station_month_stream_id(cmd.station_id, cmd.month);
    run_unit(store, metadata, |mut unit| {
        let (cmd, stream) = (cmd.clone(), stream.clone());
        async move {
            let lock_id = cmd.lock_id.get();
            let mut locks = unit.load::<BillLocks, BillError>(&stream).await?;
            let reserved = locks
                .state
                .locks
                .get(&lock_id)
                .filter(|l| l.status == LockStatus::Reserved)
                .map(|l| l.hold.clone());
            if let Some(hold) = reserved {
                let order = unit
                    .load::<PaymentOrder, BillError>(&hold.order_id.to_string())
                    .await?;
                check_held_line(lock_id, &hold, &order.state).map_err(UnitError::Refused)?;
            }
            let cmd = BillLockCommand::ActivateLock(cmd);
            unit.decide::<BillLocks, BillError>(&mut locks, &stream, cmd)?;
            Ok(((), unit))
        }
    })
    .await
}

/// Which lines an order command takes away from their locks, and the refusal's
/// wording: a line removal its line, a void or no-need-pay every live line.
#[derive(Debug, Clone, Copy)]
enum Unlocks {
    Line(i64),
    Order(&'static str),
}

fn unlocking(cmd: &PaymentOrderCommand) -> Option<Unlocks> {
    match cmd {
        PaymentOrderCommand::RemoveLine(c) => Some(Unlocks::Line(c.line_id.get())),
        PaymentOrderCommand::VoidPaymentOrder(_) => Some(Unlocks::Order("voided")),
        PaymentOrderCommand::MarkPaymentOrderNoNeedPay(_) => {
            Some(Unlocks::Order("marked no-need-pay"))
        }
        _ => None,
    }
}

/// A line removal, void or no-need-pay, refused while a live lock holds a line it
/// takes away (issue 32 item 6: `LINE_LOCKED`, `ORDER_LOCKED`): such a lock would
/// hold nothing and still block its station-month. The order is decided first (a
/// refusal or replay of its own reads no lock), then each line's station-month locks
/// are read.
#[tracing::instrument(skip_all, fields(order_id = %order_id, command = cmd.name()))]
async fn order_change(
    store: &DynStore,
    metadata: &Metadata,
    order_id: BillId,
    cmd: PaymentOrderCommand,
    unlocks: Unlocks,
) -> BillOutcome {
    let stream = order_id.to_string();
    run_unit(store, metadata, |mut unit| {
        let (cmd, stream) = (cmd.clone(), stream.clone());
        async move {
            let mut order = unit.load::<PaymentOrder, BillError>(&stream).await?;
            let held: Vec<(i64, i64, String)> = order
                .state
                .live_lines()
                .filter(|(id, _)| {
                    matches!(unlocks, Unlocks::Order(_))
                        || matches!(unlocks, Unlocks::Line(l) if l == **id)
                })
                .map(|(id, l)| (*id, l.station_id, l.month.clone()))
                .collect();
            let events = unit.decide::<PaymentOrder, BillError>(&mut order, &stream, cmd)?;
            if events.is_empty() {
                return Ok(((), unit));
            }
            for (line_id, station_id, month) in held {
                let sm = format!("{station_id}:{month}");
                let locks = unit.load::<BillLocks, BillError>(&sm).await?;
                let Some(lock_id) = locks.state.live_hold_of(order_id.get(), line_id) else {
                    continue;
                };
                return Err(UnitError::Refused(match unlocks {
                    Unlocks::Line(_) => BillError::LineLocked {
                        line_id,
                        lock_id,
                        station_month: sm,
                    },
                    Unlocks::Order(action) => BillError::OrderLocked {
                        line_id,
                        lock_id,
                        station_month: sm,
                        action,
                    },
                }));
            }
            Ok(((), unit))
        }
    })
    .await
}

/// A payment result, and in the same unit the write-back to its order's line when the
/// result asks for one (R-BILL-3): the result first (the business root), then its
/// order (R-WAL-3 order).
pub async fn record_payment_result(
    store: &DynStore,
    metadata: &Metadata,
    record: RecordPaymentResult,
) -> BillOutcome {
    run_unit(store, metadata, |mut unit| {
        let record = record.clone();
        async move {
            // The result first (the business root), then its order (R-WAL-3 order).
            let rid = record.result_id.to_string();
            let mut result = unit.load::<PaymentResult, BillError>(&rid).await?;
            let cmd = PaymentResultCommand::RecordPaymentResult(record.clone());
            let events = unit.decide::<PaymentResult, BillError>(&mut result, &rid, cmd)?;
            if let Some(write_back) = events.first().and_then(|e| line_write_back(&record, e)) {
                let oid = write_back.order_id.to_string();
                let mut order = unit.load::<PaymentOrder, BillError>(&oid).await?;
                let cmd = PaymentOrderCommand::WriteLineResult(write_back);
                unit.decide::<PaymentOrder, BillError>(&mut order, &oid, cmd)?;
            }
            Ok(((), unit))
        }
    })
    .await
}

/// The line write-back a newly recorded result asks for, if any.
fn line_write_back(
    record: &RecordPaymentResult,
    event: &PaymentResultEvent,
) -> Option<WriteLineResult> {
    if !writes_back_to_line(event) {
        return None;
    }
    Some(WriteLineResult {
        order_id: record.order_id?,
        line_id: record.line_id?,
        result_id: record.result_id,
        station_id: record.small_station_id,
        month: record.month,
        status: record.status,
        amount_minor: record.amount_minor,
        paid_at: record.paid_at,
        fail_reason: record.fail_reason.clone(),
        trigger_source: record.trigger_source,
        at: record.recorded_at,
    })
}
