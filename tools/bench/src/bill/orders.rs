//! A chunk-month's payment order as the service records its life (created, lines,
//! submitted, published, reviewed, paid, voided or concluded), with its locks and its
//! payment results.

use super::plan::{at, Ids, OrderKind, Station};
use super::seeder::{Seeder, Stream};
use chrono::{DateTime, NaiveDate, Utc};
use factledger_aggregates::bill::PaymentOrderEvent as E;
use factledger_aggregates::bill::{
    BillLockEvent, LineKindCode, LineStatusCode, OrderStatusCode, PaymentResultEvent,
    PlannedAmount, ResultSourceCode, ResultStatusCode, ResultTypeCode, TriggerSource,
    BILL_LOCK_AGGREGATE_TYPE, PAYMENT_ORDER_AGGREGATE_TYPE, PAYMENT_RESULT_AGGREGATE_TYPE,
};

/// One line of a payment order: the station-month it pays.
pub(super) struct LineOf {
    pub(super) line_id: i64,
    pub(super) station: Station,
    /// Per-line spread (0..100).
    pub(super) r: u64,
    pub(super) pre_rent: i64,
}

/// A payment result recorded for `st`'s month `ym`: an order line's (`line`, from the
/// treasury) or an offline import's.
#[allow(clippy::too_many_arguments)]
pub(super) fn result(
    result_id: i64,
    line: Option<(i64, i64)>,
    st: &Station,
    ym: &str,
    status: ResultStatusCode,
    source: ResultSourceCode,
    amount: i64,
    t: DateTime<Utc>,
) -> PaymentResultEvent {
    let fail = status == ResultStatusCode::PayFail;
    PaymentResultEvent::PaymentResultRecorded {
        result_id,
        order_id: line.map(|l| l.0),
        line_id: line.map(|l| l.1),
        small_station_id: st.id,
        platform_station_id: st.platform,
        partner_org_id: Some(st.org),
        month: ym.to_owned(),
        status,
        kind: ResultTypeCode::NormalPayment,
        source,
        amount_minor: amount,
        paid_at: (!fail).then_some(t),
        fail_reason: fail.then(|| "bank rejected".to_owned()),
        trigger_source: if source == ResultSourceCode::OfflineImport {
            TriggerSource::PaymentImportEffective
        } else {
            TriggerSource::TreasuryResultWriteback
        },
        recorded_at: t,
    }
}

/// The order of one chunk-month and its locks and results, as the service records a
/// payment order's life: created, lines, submitted, published, reviewed, paid.
pub(super) fn order_streams(
    seeder: &mut Seeder,
    ids: &mut Ids,
    streams: &mut Vec<Stream>,
    lines: &[LineOf],
    ym: &str,
    month: NaiveDate,
    kind: OrderKind,
) -> anyhow::Result<()> {
    let id = ids.order();
    let mut order = Order {
        id,
        ym,
        month,
        kind,
        stream: Stream::new(PAYMENT_ORDER_AGGREGATE_TYPE, id.to_string()),
    };
    publish(seeder, &mut order, lines)?;
    review(seeder, &mut order, lines)?;
    let locks = lock_streams(seeder, &order, lines)?;
    let results = match kind {
        OrderKind::Paid => pay(seeder, ids, &mut order, lines)?,
        OrderKind::Voided => {
            void(seeder, &mut order)?;
            Vec::new()
        }
        OrderKind::Unqualified => {
            conclude_unqualified(seeder, &mut order, lines)?;
            Vec::new()
        }
        _ => Vec::new(),
    };
    streams.push(order.stream);
    streams.extend(locks);
    streams.extend(results);
    Ok(())
}

/// The payment order being written: its id, month and kind, and its stream.
struct Order<'a> {
    id: i64,
    ym: &'a str,
    month: NaiveDate,
    kind: OrderKind,
    stream: Stream,
}

impl Order<'_> {
    /// Day `day` of the order's month, plus `secs`.
    fn t(&self, day: i64, secs: i64) -> DateTime<Utc> {
        at(self.month, day, secs)
    }

    /// An UNQUALIFIED order's lines are concluded, never paid; every other kind's are
    /// payable.
    fn line_kind(&self) -> LineKindCode {
        if self.kind == OrderKind::Unqualified {
            LineKindCode::Unqualified
        } else {
            LineKindCode::Payable
        }
    }
}

fn actor() -> String {
    "bench".to_owned()
}

/// Created, its lines added, submitted and published (round 1, version 1).
fn publish(seeder: &mut Seeder, o: &mut Order, lines: &[LineOf]) -> anyhow::Result<()> {
    let order_id = o.id;
    let created = E::PaymentOrderCreated {
        order_id,
        treasury: true,
        actor: actor(),
        created_at: o.t(33, 0),
    };
    seeder.push(&mut o.stream, created)?;
    for l in lines {
        let added = E::LineAdded {
            order_id,
            line_id: l.line_id,
            station_id: l.station.id,
            month: o.ym.to_owned(),
            kind: o.line_kind(),
            planned_amount_minor: l.pre_rent,
            at: o.t(33, 1),
        };
        seeder.push(&mut o.stream, added)?;
    }
    let submitted = E::PaymentOrderSubmitted {
        order_id,
        submit_round: 1,
        actor: actor(),
        at: o.t(33, 2),
    };
    seeder.push(&mut o.stream, submitted)?;
    let published = E::PaymentOrderPublished {
        order_id,
        publish_version: 1,
        submit_round: 1,
        line_ids: lines.iter().map(|l| l.line_id).collect(),
        at: o.t(33, 3),
    };
    seeder.push(&mut o.stream, published)
}

/// The review: rejected, approved (a payable order with its planned amounts), or
/// still in review (nothing).
fn review(seeder: &mut Seeder, o: &mut Order, lines: &[LineOf]) -> anyhow::Result<()> {
    let order_id = o.id;
    if o.kind == OrderKind::Rejected {
        let rejected = E::PaymentOrderRejected {
            order_id,
            actor: actor(),
            reason: "amounts disputed".into(),
            at: o.t(34, 0),
        };
        seeder.push(&mut o.stream, rejected)?;
    }
    if matches!(o.kind, OrderKind::InReview | OrderKind::Rejected) {
        return Ok(());
    }
    let planned = if o.line_kind() == LineKindCode::Payable {
        lines
            .iter()
            .map(|l| PlannedAmount {
                line_id: l.line_id,
                planned_amount_minor: l.pre_rent,
            })
            .collect()
    } else {
        Vec::new()
    };
    let approved = E::PaymentOrderApproved {
        order_id,
        planned,
        actor: actor(),
        at: o.t(34, 0),
    };
    seeder.push(&mut o.stream, approved)
}

/// The lines' bill locks: reserved while in review or rejected, activated when the
/// order awaits payment under lock; none for every other kind.
fn lock_streams(seeder: &mut Seeder, o: &Order, lines: &[LineOf]) -> anyhow::Result<Vec<Stream>> {
    let mut locks = Vec::new();
    if !matches!(
        o.kind,
        OrderKind::InReview | OrderKind::Rejected | OrderKind::AwaitingUnderLock
    ) {
        return Ok(locks);
    }
    for l in lines {
        let ym = o.ym;
        let mut s = Stream::new(BILL_LOCK_AGGREGATE_TYPE, format!("{}:{ym}", l.station.id));
        let reserved = BillLockEvent::BillLockReserved {
            lock_id: l.line_id,
            station_id: l.station.id,
            month: ym.to_owned(),
            order_id: o.id,
            line_id: l.line_id,
            publish_version: 1,
            submit_round: 1,
            at: o.t(33, 3),
        };
        seeder.push(&mut s, reserved)?;
        if o.kind == OrderKind::AwaitingUnderLock {
            let activated = BillLockEvent::BillLockActivated {
                lock_id: l.line_id,
                at: o.t(34, 0),
            };
            seeder.push(&mut s, activated)?;
        }
        locks.push(s);
    }
    Ok(locks)
}

/// What the treasury pays a line, result by result. Per line: 5 % partial, 5 % failed,
/// 5 % paid then voided, 5 % partial then failed, 5 % overpaid, the rest paid in full.
fn line_outcomes(l: &LineOf) -> Vec<(ResultStatusCode, i64)> {
    use ResultStatusCode::{PayFail, PaySuccess};
    match l.r % 20 {
        0 => vec![(PaySuccess, l.pre_rent / 2)],
        1 => vec![(PayFail, 0)],
        2 => vec![(PaySuccess, l.pre_rent)],
        3 => vec![(PaySuccess, l.pre_rent / 2), (PayFail, 0)],
        4 => vec![(PaySuccess, l.pre_rent + 1_000)],
        _ => vec![(PaySuccess, l.pre_rent)],
    }
}

/// Paid through the treasury: each line's results (their own streams, written back
/// onto the order), then the master reconciled to PAID when anything was paid.
fn pay(
    seeder: &mut Seeder,
    ids: &mut Ids,
    o: &mut Order,
    lines: &[LineOf],
) -> anyhow::Result<Vec<Stream>> {
    let mut results = Vec::new();
    let mut any_paid = false;
    for l in lines {
        for (n, (status, amount)) in line_outcomes(l).into_iter().enumerate() {
            results.push(pay_result(seeder, ids, o, l, n, status, amount)?);
            any_paid |= status == ResultStatusCode::PaySuccess;
        }
    }
    if any_paid {
        let reconciled = E::PaymentOrderStatusReconciled {
            order_id: o.id,
            from: OrderStatusCode::WaitPay,
            to: OrderStatusCode::Paid,
            publish_version: 1,
            submit_round: 1,
            trigger_source: TriggerSource::TreasuryResultWriteback,
            at: o.t(42, 0),
        };
        seeder.push(&mut o.stream, reconciled)?;
    }
    Ok(results)
}

/// The `n`-th treasury result of line `l`: its own stream (voided afterwards for the
/// paid-then-voided case) and its write-back onto the order's line.
fn pay_result(
    seeder: &mut Seeder,
    ids: &mut Ids,
    o: &mut Order,
    l: &LineOf,
    n: usize,
    status: ResultStatusCode,
    amount: i64,
) -> anyhow::Result<Stream> {
    use ResultStatusCode::{PayFail, PaySuccess};
    let result_id = ids.result();
    let paid_at = o.t(40, n as i64);
    let mut s = Stream::new(PAYMENT_RESULT_AGGREGATE_TYPE, result_id.to_string());
    let line = Some((o.id, l.line_id));
    let source = ResultSourceCode::Treasury;
    let recorded = result(
        result_id, line, &l.station, o.ym, status, source, amount, paid_at,
    );
    seeder.push(&mut s, recorded)?;
    let line_status = match (status, l.r % 20, n) {
        (PayFail, _, _) => LineStatusCode::Failed,
        (_, 0, _) | (_, 3, _) => LineStatusCode::PartiallyPaid,
        _ => LineStatusCode::Paid,
    };
    let written = E::LineResultWritten {
        order_id: o.id,
        line_id: l.line_id,
        result_id,
        line_status,
        paid_amount_minor: amount,
        paid_at: (status == PaySuccess).then_some(paid_at),
        fail_reason: (status == PayFail).then(|| "bank rejected".into()),
        trigger_source: TriggerSource::TreasuryResultWriteback,
        at: paid_at,
    };
    seeder.push(&mut o.stream, written)?;
    if l.r % 20 == 2 {
        let voided = PaymentResultEvent::PaymentResultVoided {
            result_id,
            trigger_source: TriggerSource::PaymentImportDelete,
            voided_at: o.t(41, 0),
        };
        seeder.push(&mut s, voided)?;
    }
    Ok(s)
}

fn void(seeder: &mut Seeder, o: &mut Order) -> anyhow::Result<()> {
    let voided = E::PaymentOrderVoided {
        order_id: o.id,
        actor: actor(),
        reason: "paid elsewhere".into(),
        at: o.t(35, 0),
    };
    seeder.push(&mut o.stream, voided)
}

/// Every line concluded UNQUALIFIED, every other one partner-visible.
fn conclude_unqualified(
    seeder: &mut Seeder,
    o: &mut Order,
    lines: &[LineOf],
) -> anyhow::Result<()> {
    for l in lines {
        let concluded = E::UnqualifiedConcluded {
            order_id: o.id,
            line_id: l.line_id,
            partner_visible: l.r.is_multiple_of(2),
            reason: "contract missing".into(),
            actor: actor(),
            at: o.t(35, 0),
        };
        seeder.push(&mut o.stream, concluded)?;
    }
    Ok(())
}
