//! The payment side: payment order events (the master and its lines), bill lock events
//! and payment result events → the fact-table writes they make. Every write touches
//! its order, lock or result; the runner resolves that to station-months.

use super::cells::{code_cell, flag, month_cell, opt_int, opt_time, put, set, time_cell};
use super::writes::{FactOp, Folded, Touch};
use crate::bill::tables::{LINES, LOCKS, ORDERS, RESULTS};
use crate::table::{Cell, Cells};
use chrono::{DateTime, Utc};
use factledger_aggregates::bill::{
    BillLockEvent, LineKindCode, LineStatusCode, OrderStatusCode, PaymentOrderEvent,
    PaymentResultEvent, PlannedAmount,
};

fn order_key(order_id: i64) -> Cells {
    vec![("order_id", Cell::Int(order_id))]
}

fn line_key(line_id: i64) -> Cells {
    vec![("line_id", Cell::Int(line_id))]
}

/// Some columns of the master's row.
fn order_set(order_id: i64, cells: Cells) -> FactOp {
    set(&ORDERS, order_key(order_id), cells)
}

/// Some columns of a line's row.
fn line_set(line_id: i64, cells: Cells) -> FactOp {
    set(&LINES, line_key(line_id), cells)
}

/// The master's status and the time it changed.
fn order_status(
    order_id: i64,
    status: OrderStatusCode,
    at: &DateTime<Utc>,
) -> Result<FactOp, String> {
    Ok(order_set(
        order_id,
        vec![("status", code_cell(&status)?), ("fact_at", time_cell(at))],
    ))
}

/// One payment order event → its writes to the master and line rows. Every event
/// touches its order (the runner resolves that to the station-months of its lines and
/// locks).
pub(super) fn fold_order(e: PaymentOrderEvent) -> Result<Folded, String> {
    use OrderStatusCode as S;
    use PaymentOrderEvent as E;
    let (order_id, ops) = match e {
        E::PaymentOrderCreated {
            order_id,
            treasury,
            created_at,
            ..
        } => (
            order_id,
            vec![order_created(order_id, treasury, &created_at)?],
        ),
        E::LineAdded {
            order_id,
            line_id,
            station_id,
            month,
            kind,
            planned_amount_minor,
            at,
        } => {
            let line = AddedLine {
                order_id,
                line_id,
                station_id,
                month: &month,
                kind,
                planned_amount_minor,
            };
            (order_id, vec![line_added(&line, &at)?])
        }
        E::LineRemoved {
            order_id,
            line_id,
            at,
        } => (order_id, vec![line_removed(line_id, &at)]),
        E::LineAdjusted {
            order_id,
            line_id,
            manual_adjustment_minor,
            at,
            ..
        } => (
            order_id,
            vec![line_adjusted(line_id, manual_adjustment_minor, &at)],
        ),
        E::PaymentOrderPublished {
            order_id,
            publish_version,
            submit_round,
            line_ids,
            at,
        } => (
            order_id,
            published(order_id, (publish_version, submit_round), &line_ids, &at),
        ),
        E::PaymentOrderSubmitted {
            order_id,
            submit_round,
            at,
            ..
        } => (order_id, vec![submitted(order_id, submit_round, &at)?]),
        E::PaymentOrderApproved {
            order_id,
            planned,
            at,
            ..
        } => (order_id, approved(order_id, &planned, &at)?),
        E::PaymentOrderRejected { order_id, at, .. } => (
            order_id,
            vec![order_status(order_id, S::ReviewRejected, &at)?],
        ),
        E::PaymentOrderMarkedNoNeedPay { order_id, at, .. } => {
            (order_id, vec![order_status(order_id, S::NoNeedPay, &at)?])
        }
        E::PaymentOrderVoided { order_id, at, .. } => {
            (order_id, vec![order_status(order_id, S::Void, &at)?])
        }
        E::PaymentOrderStatusReconciled {
            order_id, to, at, ..
        } => (order_id, vec![order_status(order_id, to, &at)?]),
        E::LineResultWritten {
            order_id,
            line_id,
            result_id,
            line_status,
            at,
            ..
        } => (
            order_id,
            vec![line_result_written(line_id, result_id, line_status, &at)?],
        ),
        E::UnqualifiedConcluded {
            order_id,
            line_id,
            partner_visible,
            reason,
            at,
            ..
        } => (
            order_id,
            vec![unqualified_concluded(line_id, partner_visible, reason, &at)],
        ),
        E::UnqualifiedWithdrawn {
            order_id,
            line_id,
            at,
            ..
        } => (order_id, vec![unqualified_withdrawn(line_id, &at)]),
    };
    Ok(Folded {
        ops,
        touches: vec![Touch::Order(order_id)],
    })
}

/// A new master: a DRAFT, unpublished, at publish version and submit round 0.
fn order_created(order_id: i64, treasury: bool, at: &DateTime<Utc>) -> Result<FactOp, String> {
    Ok(put(
        &ORDERS,
        vec![
            ("order_id", Cell::Int(order_id)),
            ("status", code_cell(&OrderStatusCode::Draft)?),
            ("published", flag(false)),
            ("publish_version", Cell::Int(0)),
            ("submit_round", Cell::Int(0)),
            ("treasury", flag(treasury)),
            ("fact_at", time_cell(at)),
        ],
    ))
}

/// What `LineAdded` says about the new line.
struct AddedLine<'a> {
    order_id: i64,
    line_id: i64,
    station_id: i64,
    month: &'a str,
    kind: LineKindCode,
    planned_amount_minor: i64,
}

/// The whole row of a new line: unpublished, with no result, adjustment or conclusion.
fn line_added(line: &AddedLine<'_>, at: &DateTime<Utc>) -> Result<FactOp, String> {
    // An UNQUALIFIED line counts only once concluded (UNQUALIFIED_EFFECTIVE).
    let status = match line.kind {
        LineKindCode::Payable => "UNPAID",
        LineKindCode::Unqualified => "UNQUALIFIED_INEFFECTIVE",
    };
    Ok(put(
        &LINES,
        vec![
            ("line_id", Cell::Int(line.line_id)),
            ("order_id", Cell::Int(line.order_id)),
            ("station_id", Cell::Int(line.station_id)),
            ("bill_yearmonth", month_cell(line.month)?),
            ("kind", code_cell(&line.kind)?),
            ("status", Cell::text(status)),
            ("latest_result_id", Cell::Null),
            ("planned_amount", Cell::Int(line.planned_amount_minor)),
            ("manual_adjustment", Cell::Null),
            ("publish_version", Cell::Null),
            ("submit_round", Cell::Null),
            ("deleted", flag(false)),
            ("conclusion_visible", Cell::Null),
            ("conclusion_reason", Cell::Null),
            ("conclusion_at", Cell::Null),
            ("line_at", time_cell(at)),
        ],
    ))
}

/// Publishing gives the master and every listed line the publish identity
/// `(publish_version, submit_round)`.
fn published(
    order_id: i64,
    (publish_version, submit_round): (i64, i64),
    line_ids: &[i64],
    at: &DateTime<Utc>,
) -> Vec<FactOp> {
    let identity = || {
        vec![
            ("publish_version", Cell::Int(publish_version)),
            ("submit_round", Cell::Int(submit_round)),
        ]
    };
    let mut master = identity();
    master.extend([("published", flag(true)), ("fact_at", time_cell(at))]);
    let mut ops = vec![order_set(order_id, master)];
    for &line_id in line_ids {
        let mut line = identity();
        line.push(("line_at", time_cell(at)));
        ops.push(line_set(line_id, line));
    }
    ops
}

/// Approval moves the master to WAIT_PAY and fixes each line's planned amount.
fn approved(
    order_id: i64,
    planned: &[PlannedAmount],
    at: &DateTime<Utc>,
) -> Result<Vec<FactOp>, String> {
    let mut ops = vec![order_status(order_id, OrderStatusCode::WaitPay, at)?];
    for p in planned {
        ops.push(line_set(
            p.line_id,
            vec![
                ("planned_amount", Cell::Int(p.planned_amount_minor)),
                ("line_at", time_cell(at)),
            ],
        ));
    }
    Ok(ops)
}

/// Some columns of a line's row and the time the line changed.
fn line_set_at(line_id: i64, mut cells: Cells, at: &DateTime<Utc>) -> FactOp {
    cells.push(("line_at", time_cell(at)));
    line_set(line_id, cells)
}

/// A removed line stays, flagged deleted.
fn line_removed(line_id: i64, at: &DateTime<Utc>) -> FactOp {
    line_set_at(line_id, vec![("deleted", flag(true))], at)
}

fn line_adjusted(line_id: i64, manual_adjustment_minor: i64, at: &DateTime<Utc>) -> FactOp {
    line_set_at(
        line_id,
        vec![("manual_adjustment", Cell::Int(manual_adjustment_minor))],
        at,
    )
}

/// Submitting moves the master to IN_REVIEW at its new submit round.
fn submitted(order_id: i64, submit_round: i64, at: &DateTime<Utc>) -> Result<FactOp, String> {
    Ok(order_set(
        order_id,
        vec![
            ("status", code_cell(&OrderStatusCode::InReview)?),
            ("submit_round", Cell::Int(submit_round)),
            ("fact_at", time_cell(at)),
        ],
    ))
}

/// A payment result written to a line: its status and its latest result.
fn line_result_written(
    line_id: i64,
    result_id: i64,
    line_status: LineStatusCode,
    at: &DateTime<Utc>,
) -> Result<FactOp, String> {
    Ok(line_set_at(
        line_id,
        vec![
            ("status", code_cell(&line_status)?),
            ("latest_result_id", Cell::Int(result_id)),
        ],
        at,
    ))
}

/// A withdrawn conclusion: the unqualified line no longer counts (its conclusion
/// columns stay, for the record).
fn unqualified_withdrawn(line_id: i64, at: &DateTime<Utc>) -> FactOp {
    line_set_at(
        line_id,
        vec![("status", Cell::text("UNQUALIFIED_INEFFECTIVE"))],
        at,
    )
}

/// An unqualified line concluded: it now counts (UNQUALIFIED_EFFECTIVE), with the
/// conclusion's visibility, reason and time.
fn unqualified_concluded(
    line_id: i64,
    partner_visible: bool,
    reason: String,
    at: &DateTime<Utc>,
) -> FactOp {
    line_set(
        line_id,
        vec![
            ("status", Cell::text("UNQUALIFIED_EFFECTIVE")),
            ("conclusion_visible", flag(partner_visible)),
            ("conclusion_reason", Cell::Text(reason)),
            ("conclusion_at", time_cell(at)),
            ("line_at", time_cell(at)),
        ],
    )
}

pub(super) fn fold_lock(e: BillLockEvent) -> Result<Folded, String> {
    let lock_status = |lock_id: i64, status: &str, at: &DateTime<Utc>| {
        set(
            &LOCKS,
            vec![("lock_id", Cell::Int(lock_id))],
            vec![("status", Cell::text(status)), ("fact_at", time_cell(at))],
        )
    };
    let (lock_id, op) = match e {
        BillLockEvent::BillLockReserved {
            lock_id,
            station_id,
            month,
            order_id,
            line_id,
            publish_version,
            submit_round,
            at,
        } => (
            lock_id,
            put(
                &LOCKS,
                vec![
                    ("lock_id", Cell::Int(lock_id)),
                    ("station_id", Cell::Int(station_id)),
                    ("bill_yearmonth", month_cell(&month)?),
                    ("order_id", Cell::Int(order_id)),
                    ("line_id", Cell::Int(line_id)),
                    ("publish_version", Cell::Int(publish_version)),
                    ("submit_round", Cell::Int(submit_round)),
                    ("status", Cell::text("RESERVED")),
                    ("locked_at", time_cell(&at)),
                    ("fact_at", time_cell(&at)),
                ],
            ),
        ),
        BillLockEvent::BillLockActivated { lock_id, at } => {
            (lock_id, lock_status(lock_id, "ACTIVE", &at))
        }
        BillLockEvent::BillLockReleased { lock_id, at } => {
            (lock_id, lock_status(lock_id, "RELEASED", &at))
        }
    };
    Ok(Folded {
        ops: vec![op],
        touches: vec![Touch::Lock(lock_id)],
    })
}

pub(super) fn fold_result(e: PaymentResultEvent) -> Result<Folded, String> {
    let (result_id, op) = match e {
        PaymentResultEvent::PaymentResultRecorded {
            result_id,
            order_id,
            line_id,
            small_station_id,
            platform_station_id,
            partner_org_id,
            month,
            status,
            kind,
            source,
            amount_minor,
            paid_at,
            recorded_at,
            ..
        } => (
            result_id,
            put(
                &RESULTS,
                vec![
                    ("result_id", Cell::Int(result_id)),
                    ("order_id", opt_int(order_id)),
                    ("line_id", opt_int(line_id)),
                    ("small_station_id", Cell::Int(small_station_id)),
                    ("platform_station_id", opt_int(platform_station_id)),
                    ("partner_org_id", opt_int(partner_org_id)),
                    ("bill_yearmonth", month_cell(&month)?),
                    ("status", code_cell(&status)?),
                    ("kind", code_cell(&kind)?),
                    ("source", code_cell(&source)?),
                    ("amount", Cell::Int(amount_minor)),
                    ("paid_at", opt_time(&paid_at)),
                    ("voided", flag(false)),
                    ("fact_at", time_cell(&recorded_at)),
                ],
            ),
        ),
        PaymentResultEvent::PaymentResultVoided {
            result_id,
            voided_at,
            ..
        } => (
            result_id,
            set(
                &RESULTS,
                vec![("result_id", Cell::Int(result_id))],
                vec![("voided", flag(true)), ("fact_at", time_cell(&voided_at))],
            ),
        ),
    };
    Ok(Folded {
        ops: vec![op],
        touches: vec![Touch::Result(result_id)],
    })
}
