//! The pure parts of the bill projector (SPEC R-BILL-1, R-BILL-7; seed 001 §4.5, §6.1).
//!
//! Three steps, each a pure function; the runner (`src/bill_projection.rs`) does the
//! SQL between them inside one transaction per batch:
//!
//! 1. [`fold`]: one bill event → the writes it makes to the fact tables
//!    ([`FactOp`], latest wins) and what it [`Touch`]es. The runner resolves each touch
//!    to station-months against the fact tables before and after the write, so a
//!    fact that moves (a small bill to another account, a diff to another partner
//!    bill) recomputes both its old and its new readers.
//! 2. `*_of(row)`: a fact row read back → the decision's input types ([`BillFacts`]).
//! 3. [`project`]: the facts of one station-month → the rows of the three bill tables
//!    and the decision explanation, or an error finding ([`Finding`]) — never a
//!    silent null.
//!
//! **Architecture invariant:** no clock and no I/O here. `payment_status_update_time`
//! is the time of the newest fact the decision read (event time), so a live run, a
//! full rebuild and a scoped rebuild write the same value.

use super::tables::{
    CUSTOMER_ACCOUNTS, DIFFS, LINES, LOCKS, OPENING_DEDUCTIONS, OPENING_PAID, ORDERS,
    PARTNER_ACCOUNTS, PARTNER_BILLS, PARTNER_PROFILES, PARTNER_REPUSHES, RESULTS, SETTINGS,
    SMALL_BILLS, STATIONS,
};
use super::{
    decide, AccountRoute, BillError, BillFacts, BillLine, BillLock, CustomerAccount, Decision,
    Diff, LineKind, LineStatus, LockStatus, OpeningDeduction, OpeningPaidBalance, OrderStatus,
    PartnerAccount, PartnerBill, PartnerBillDeduction, PartnerProfile, PaymentCycle, PaymentOrder,
    PaymentResult, RecordWay, RentPayMethod, ResultSource, ResultStatus, ResultType, ShareRule,
    SmallBill, SmallBillRent, StationFacts, StationMonth, UnqualifiedConclusion, YearMonth,
};
use crate::table::{Cell, Cells, MemRow, TableDef};
use chrono::{DateTime, SecondsFormat, Utc};
use factledger_aggregates::bill::{
    AccountRouteCode, BillLockEvent, LineKindCode, LineStatusCode, OrderStatusCode,
    PartnerBillEvent, PaymentOrderEvent, PaymentResultEvent, RecordWayCode, ReferenceEvent,
    ResultSourceCode, ResultStatusCode, ResultTypeCode, StationMonthEvent,
    BILL_LOCK_AGGREGATE_TYPE, PARTNER_BILL_AGGREGATE_TYPE, PAYMENT_ORDER_AGGREGATE_TYPE,
    PAYMENT_RESULT_AGGREGATE_TYPE, REFERENCE_AGGREGATE_TYPE, STATION_MONTH_AGGREGATE_TYPE,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

/// Checkpoint name, `projection` label and `GET /v1/projections` name.
pub const NAME: &str = "bill";
/// Bump when the rows' shape or meaning changes.
pub const VERSION: i32 = 1;

/// The one recorded setting: which business account key the cumulative paid uses.
pub const SETTING_ACCOUNT_ROUTE: &str = "account_route";

/// A write to one fact table.
#[derive(Debug, Clone)]
pub enum FactOp {
    /// The whole row (every column), inserted or replacing the row with its key: the
    /// event states the entity's whole current value.
    Put {
        table: &'static TableDef,
        row: Cells,
    },
    /// Some columns of the row with this key; the row must exist (the event contract
    /// only changes what was recorded: a missing row stops the projector).
    Set {
        table: &'static TableDef,
        key: Cells,
        set: Cells,
    },
}

/// What a fact event touches. The runner resolves each to the station-months that
/// read it (R-BILL-1: each fact event recomputes exactly the affected station-months).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Touch {
    /// This station-month.
    StationMonth(StationMonth),
    /// The station-months of the account of this station-month's small bill whose
    /// pre-rent check can sum its rent: from the first month of its half-year on
    /// (every cutoff is at most the end of the target month's half-year).
    SmallBillAccount(StationMonth),
    /// Every station-month whose diff links the partner bill this station-month's
    /// diff links (a partner bill linked twice is a finding on each).
    DiffPartnerBill(StationMonth),
    /// The station-months of its diffs, and every station-month whose partner
    /// accounts include its account (deduction sums).
    PartnerBill(i64),
    /// The station-months of the account's small bills.
    CustomerAccount(i64),
    /// Every station-month whose partner accounts include this one.
    PartnerAccount(i64),
    /// Every station-month whose partner bill's account belongs to this org.
    PartnerOrg(i64),
    /// Every station-month of the station.
    Station(i64),
    /// Every station-month (the account route).
    Everything,
    /// The station-months whose cumulative paid may read the opening.
    OpeningPaid(i64),
    /// The station-months whose partner accounts include the opening's account.
    OpeningDeduction(i64),
    /// The station-months of the order's lines and locks.
    Order(i64),
    /// The lock's station-month.
    Lock(i64),
    /// The result's station-month, the later months of its business account
    /// (cumulative paid) and the station-months of the lines it is the latest result of.
    Result(i64),
}

/// What one event does to the fact tables.
#[derive(Debug, Clone, Default)]
pub struct Folded {
    pub ops: Vec<FactOp>,
    pub touches: Vec<Touch>,
}

/// An instant as every bill table stores it (RFC 3339 UTC, microseconds: the text
/// sorts in time order, like `store::time_text`).
pub fn time_cell(t: &DateTime<Utc>) -> Cell {
    Cell::Text(time_text(t))
}

fn time_text(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

fn opt_time(t: &Option<DateTime<Utc>>) -> Cell {
    t.as_ref().map_or(Cell::Null, time_cell)
}

fn opt_int(v: Option<i64>) -> Cell {
    v.map_or(Cell::Null, Cell::Int)
}

fn flag(b: bool) -> Cell {
    Cell::Int(i64::from(b))
}

/// The serde name of a code enum (`"WAIT_PAY"`): what the fact tables store.
fn code<T: Serialize>(v: &T) -> Result<String, String> {
    match serde_json::to_value(v) {
        Ok(Value::String(s)) => Ok(s),
        other => Err(format!("not a code: {other:?}")),
    }
}

fn code_cell<T: Serialize>(v: &T) -> Result<Cell, String> {
    code(v).map(Cell::Text)
}

fn parse_code<T: DeserializeOwned>(s: &str) -> Result<T, String> {
    serde_json::from_value(Value::String(s.to_owned())).map_err(|e| format!("code {s}: {e}"))
}

/// A `yyyymm` of an event, checked (a bad month stops the projector at the event).
fn month_cell(s: &str) -> Result<Cell, String> {
    YearMonth::parse(s)
        .map(|m| Cell::Text(m.to_string()))
        .map_err(|e| e.to_string())
}

fn opt_month_cell(s: &Option<String>) -> Result<Cell, String> {
    s.as_deref().map_or(Ok(Cell::Null), month_cell)
}

fn station_month(station_id: i64, month: &str) -> Result<StationMonth, String> {
    Ok(StationMonth {
        station_id,
        month: YearMonth::parse(month).map_err(|e| e.to_string())?,
    })
}

fn decode<T: DeserializeOwned>(payload: &Value) -> Result<T, String> {
    T::deserialize(payload).map_err(|e| format!("payload does not decode: {e}"))
}

fn put(table: &'static TableDef, row: Cells) -> FactOp {
    FactOp::Put { table, row }
}

fn set(table: &'static TableDef, key: Cells, set: Cells) -> FactOp {
    FactOp::Set { table, key, set }
}

/// The fact-table writes and touches of one bill event. `Ok(None)`: not a bill
/// aggregate type. `Err`: the payload does not decode or holds a bad month — the
/// runner stops right before the event.
pub fn fold(aggregate_type: &str, payload: &Value) -> Result<Option<Folded>, String> {
    let folded = match aggregate_type {
        STATION_MONTH_AGGREGATE_TYPE => fold_station_month(decode(payload)?)?,
        PARTNER_BILL_AGGREGATE_TYPE => fold_partner_bill(decode(payload)?)?,
        REFERENCE_AGGREGATE_TYPE => fold_reference(decode(payload)?)?,
        PAYMENT_ORDER_AGGREGATE_TYPE => fold_order(decode(payload)?)?,
        BILL_LOCK_AGGREGATE_TYPE => fold_lock(decode(payload)?)?,
        PAYMENT_RESULT_AGGREGATE_TYPE => fold_result(decode(payload)?)?,
        _ => return Ok(None),
    };
    Ok(Some(folded))
}

fn fold_station_month(e: StationMonthEvent) -> Result<Folded, String> {
    Ok(match e {
        StationMonthEvent::SmallBillRecorded {
            station_id,
            month,
            bill_id,
            account_id,
            rent_minor,
            recorded_at,
        } => {
            let sm = station_month(station_id, &month)?;
            Folded {
                ops: vec![put(
                    &SMALL_BILLS,
                    vec![
                        ("station_id", Cell::Int(station_id)),
                        ("bill_yearmonth", month_cell(&month)?),
                        ("bill_id", Cell::Int(bill_id)),
                        ("account_id", Cell::Int(account_id)),
                        ("rent", Cell::Int(rent_minor)),
                        ("fact_at", time_cell(&recorded_at)),
                    ],
                )],
                touches: vec![Touch::StationMonth(sm), Touch::SmallBillAccount(sm)],
            }
        }
        StationMonthEvent::DiffRecorded {
            station_id,
            month,
            diff_id,
            partner_bill_id,
            recorded_at,
        } => {
            let sm = station_month(station_id, &month)?;
            Folded {
                ops: vec![put(
                    &DIFFS,
                    vec![
                        ("station_id", Cell::Int(station_id)),
                        ("share_month", month_cell(&month)?),
                        ("diff_id", Cell::Int(diff_id)),
                        ("partner_bill_id", opt_int(partner_bill_id)),
                        ("fact_at", time_cell(&recorded_at)),
                    ],
                )],
                touches: vec![Touch::StationMonth(sm), Touch::DiffPartnerBill(sm)],
            }
        }
    })
}

fn fold_partner_bill(e: PartnerBillEvent) -> Result<Folded, String> {
    Ok(match e {
        PartnerBillEvent::PartnerBillRecorded {
            partner_bill_id,
            partner_account_id,
            month,
            pre_rent_minor,
            deduction_minor,
            recorded_at,
        } => Folded {
            ops: vec![put(
                &PARTNER_BILLS,
                vec![
                    ("partner_bill_id", Cell::Int(partner_bill_id)),
                    ("partner_account_id", Cell::Int(partner_account_id)),
                    ("bill_yearmonth", month_cell(&month)?),
                    ("pre_rent", opt_int(pre_rent_minor)),
                    ("deduction", Cell::Int(deduction_minor)),
                    ("fact_at", time_cell(&recorded_at)),
                ],
            )],
            touches: vec![Touch::PartnerBill(partner_bill_id)],
        },
        PartnerBillEvent::PartnerBillRepushed {
            partner_bill_id,
            repushed_at,
        } => Folded {
            ops: vec![put(
                &PARTNER_REPUSHES,
                vec![
                    ("partner_bill_id", Cell::Int(partner_bill_id)),
                    ("repushed_at", time_cell(&repushed_at)),
                ],
            )],
            touches: vec![Touch::PartnerBill(partner_bill_id)],
        },
    })
}

fn fold_reference(e: ReferenceEvent) -> Result<Folded, String> {
    let one = |op: FactOp, touch: Touch| Folded {
        ops: vec![op],
        touches: vec![touch],
    };
    Ok(match e {
        ReferenceEvent::CustomerAccountRecorded {
            account_id,
            income_start_month,
            current_payable_cutoff_month,
            recorded_at,
        } => one(
            put(
                &CUSTOMER_ACCOUNTS,
                vec![
                    ("account_id", Cell::Int(account_id)),
                    ("income_start_month", month_cell(&income_start_month)?),
                    (
                        "current_payable_cutoff_month",
                        opt_month_cell(&current_payable_cutoff_month)?,
                    ),
                    ("fact_at", time_cell(&recorded_at)),
                ],
            ),
            Touch::CustomerAccount(account_id),
        ),
        ReferenceEvent::PartnerAccountRecorded {
            partner_account_id,
            partner_org_id,
            platform_station_id,
            recorded_at,
        } => one(
            put(
                &PARTNER_ACCOUNTS,
                vec![
                    ("partner_account_id", Cell::Int(partner_account_id)),
                    ("partner_org_id", Cell::Int(partner_org_id)),
                    ("platform_station_id", opt_int(platform_station_id)),
                    ("fact_at", time_cell(&recorded_at)),
                ],
            ),
            Touch::PartnerAccount(partner_account_id),
        ),
        ReferenceEvent::PartnerProfileConfigured {
            partner_org_id,
            payment_cycle,
            config_version,
            recorded_at,
        } => one(
            put(
                &PARTNER_PROFILES,
                vec![
                    ("partner_org_id", Cell::Int(partner_org_id)),
                    ("configured", flag(true)),
                    ("payment_cycle", Cell::Text(payment_cycle)),
                    ("config_version", Cell::Int(config_version)),
                    ("fact_at", time_cell(&recorded_at)),
                ],
            ),
            Touch::PartnerOrg(partner_org_id),
        ),
        ReferenceEvent::PartnerProfileNotConfigured {
            partner_org_id,
            recorded_at,
        } => one(
            put(
                &PARTNER_PROFILES,
                vec![
                    ("partner_org_id", Cell::Int(partner_org_id)),
                    ("configured", flag(false)),
                    ("payment_cycle", Cell::Null),
                    ("config_version", Cell::Null),
                    ("fact_at", time_cell(&recorded_at)),
                ],
            ),
            Touch::PartnerOrg(partner_org_id),
        ),
        ReferenceEvent::StationFactsRecorded {
            station_id,
            record_way,
            share_rule,
            recorded_at,
        } => {
            let rule = share_rule.as_ref();
            one(
                put(
                    &STATIONS,
                    vec![
                        ("station_id", Cell::Int(station_id)),
                        (
                            "record_way",
                            record_way.as_ref().map_or(Ok(Cell::Null), code_cell)?,
                        ),
                        ("has_share_rule", flag(rule.is_some())),
                        (
                            "rent_pay_method",
                            Cell::opt_text(rule.map(|r| r.rent_pay_method.clone())),
                        ),
                        (
                            "change_type",
                            Cell::opt_text(rule.and_then(|r| r.change_type.clone())),
                        ),
                        (
                            "latest_generated_bill_month",
                            opt_month_cell(
                                &rule.and_then(|r| r.latest_generated_bill_month.clone()),
                            )?,
                        ),
                        ("fact_at", time_cell(&recorded_at)),
                    ],
                ),
                Touch::Station(station_id),
            )
        }
        ReferenceEvent::AccountRouteSet { route, recorded_at } => one(
            put(
                &SETTINGS,
                vec![
                    ("name", Cell::text(SETTING_ACCOUNT_ROUTE)),
                    ("value", code_cell(&route)?),
                    ("fact_at", time_cell(&recorded_at)),
                ],
            ),
            Touch::Everything,
        ),
        ReferenceEvent::OpeningPaidBalanceRecorded {
            opening_id,
            small_station_id,
            platform_station_id,
            partner_org_id,
            opening_paid_minor,
            updated_at,
        } => one(
            put(
                &OPENING_PAID,
                vec![
                    ("opening_id", Cell::Int(opening_id)),
                    ("small_station_id", Cell::Int(small_station_id)),
                    ("platform_station_id", opt_int(platform_station_id)),
                    ("partner_org_id", Cell::Int(partner_org_id)),
                    ("opening_paid", Cell::Int(opening_paid_minor)),
                    ("updated_at", time_cell(&updated_at)),
                ],
            ),
            Touch::OpeningPaid(opening_id),
        ),
        ReferenceEvent::OpeningDeductionRecorded {
            opening_id,
            partner_account_id,
            effective,
            amount_minor,
            updated_at,
        } => one(
            put(
                &OPENING_DEDUCTIONS,
                vec![
                    ("opening_id", Cell::Int(opening_id)),
                    ("partner_account_id", Cell::Int(partner_account_id)),
                    ("effective", flag(effective)),
                    ("amount", Cell::Int(amount_minor)),
                    ("updated_at", time_cell(&updated_at)),
                ],
            ),
            Touch::OpeningDeduction(opening_id),
        ),
    })
}

fn order_key(order_id: i64) -> Cells {
    vec![("order_id", Cell::Int(order_id))]
}

fn line_key(line_id: i64) -> Cells {
    vec![("line_id", Cell::Int(line_id))]
}

/// The master's status and the time it changed.
fn order_status(
    order_id: i64,
    status: OrderStatusCode,
    at: &DateTime<Utc>,
) -> Result<FactOp, String> {
    Ok(set(
        &ORDERS,
        order_key(order_id),
        vec![("status", code_cell(&status)?), ("fact_at", time_cell(at))],
    ))
}

fn fold_order(e: PaymentOrderEvent) -> Result<Folded, String> {
    use PaymentOrderEvent as E;
    let (order_id, ops) = match e {
        E::PaymentOrderCreated {
            order_id,
            treasury,
            created_at,
            ..
        } => (
            order_id,
            vec![put(
                &ORDERS,
                vec![
                    ("order_id", Cell::Int(order_id)),
                    ("status", code_cell(&OrderStatusCode::Draft)?),
                    ("published", flag(false)),
                    ("publish_version", Cell::Int(0)),
                    ("submit_round", Cell::Int(0)),
                    ("treasury", flag(treasury)),
                    ("fact_at", time_cell(&created_at)),
                ],
            )],
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
            // An UNQUALIFIED line counts only once concluded (UNQUALIFIED_EFFECTIVE).
            let status = match kind {
                LineKindCode::Payable => "UNPAID",
                LineKindCode::Unqualified => "UNQUALIFIED_INEFFECTIVE",
            };
            (
                order_id,
                vec![put(
                    &LINES,
                    vec![
                        ("line_id", Cell::Int(line_id)),
                        ("order_id", Cell::Int(order_id)),
                        ("station_id", Cell::Int(station_id)),
                        ("bill_yearmonth", month_cell(&month)?),
                        ("kind", code_cell(&kind)?),
                        ("status", Cell::text(status)),
                        ("latest_result_id", Cell::Null),
                        ("planned_amount", Cell::Int(planned_amount_minor)),
                        ("manual_adjustment", Cell::Null),
                        ("publish_version", Cell::Null),
                        ("submit_round", Cell::Null),
                        ("deleted", flag(false)),
                        ("conclusion_visible", Cell::Null),
                        ("conclusion_reason", Cell::Null),
                        ("conclusion_at", Cell::Null),
                        ("line_at", time_cell(&at)),
                    ],
                )],
            )
        }
        E::LineRemoved {
            order_id,
            line_id,
            at,
        } => (
            order_id,
            vec![set(
                &LINES,
                line_key(line_id),
                vec![("deleted", flag(true)), ("line_at", time_cell(&at))],
            )],
        ),
        E::LineAdjusted {
            order_id,
            line_id,
            manual_adjustment_minor,
            at,
            ..
        } => (
            order_id,
            vec![set(
                &LINES,
                line_key(line_id),
                vec![
                    ("manual_adjustment", Cell::Int(manual_adjustment_minor)),
                    ("line_at", time_cell(&at)),
                ],
            )],
        ),
        E::PaymentOrderPublished {
            order_id,
            publish_version,
            submit_round,
            line_ids,
            at,
        } => {
            let identity = || {
                vec![
                    ("publish_version", Cell::Int(publish_version)),
                    ("submit_round", Cell::Int(submit_round)),
                ]
            };
            let mut master = identity();
            master.extend([("published", flag(true)), ("fact_at", time_cell(&at))]);
            let mut ops = vec![set(&ORDERS, order_key(order_id), master)];
            for line_id in line_ids {
                let mut line = identity();
                line.push(("line_at", time_cell(&at)));
                ops.push(set(&LINES, line_key(line_id), line));
            }
            (order_id, ops)
        }
        E::PaymentOrderSubmitted {
            order_id,
            submit_round,
            at,
            ..
        } => (
            order_id,
            vec![set(
                &ORDERS,
                order_key(order_id),
                vec![
                    ("status", code_cell(&OrderStatusCode::InReview)?),
                    ("submit_round", Cell::Int(submit_round)),
                    ("fact_at", time_cell(&at)),
                ],
            )],
        ),
        E::PaymentOrderApproved {
            order_id,
            planned,
            at,
            ..
        } => {
            let mut ops = vec![order_status(order_id, OrderStatusCode::WaitPay, &at)?];
            for p in planned {
                ops.push(set(
                    &LINES,
                    line_key(p.line_id),
                    vec![
                        ("planned_amount", Cell::Int(p.planned_amount_minor)),
                        ("line_at", time_cell(&at)),
                    ],
                ));
            }
            (order_id, ops)
        }
        E::PaymentOrderRejected { order_id, at, .. } => (
            order_id,
            vec![order_status(
                order_id,
                OrderStatusCode::ReviewRejected,
                &at,
            )?],
        ),
        E::PaymentOrderMarkedNoNeedPay { order_id, at, .. } => (
            order_id,
            vec![order_status(order_id, OrderStatusCode::NoNeedPay, &at)?],
        ),
        E::PaymentOrderVoided { order_id, at, .. } => (
            order_id,
            vec![order_status(order_id, OrderStatusCode::Void, &at)?],
        ),
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
            vec![set(
                &LINES,
                line_key(line_id),
                vec![
                    ("status", code_cell(&line_status)?),
                    ("latest_result_id", Cell::Int(result_id)),
                    ("line_at", time_cell(&at)),
                ],
            )],
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
            vec![set(
                &LINES,
                line_key(line_id),
                vec![
                    ("status", Cell::text("UNQUALIFIED_EFFECTIVE")),
                    ("conclusion_visible", flag(partner_visible)),
                    ("conclusion_reason", Cell::Text(reason)),
                    ("conclusion_at", time_cell(&at)),
                    ("line_at", time_cell(&at)),
                ],
            )],
        ),
        E::UnqualifiedWithdrawn {
            order_id,
            line_id,
            at,
            ..
        } => (
            order_id,
            vec![set(
                &LINES,
                line_key(line_id),
                vec![
                    ("status", Cell::text("UNQUALIFIED_INEFFECTIVE")),
                    ("line_at", time_cell(&at)),
                ],
            )],
        ),
    };
    Ok(Folded {
        ops,
        touches: vec![Touch::Order(order_id)],
    })
}

fn fold_lock(e: BillLockEvent) -> Result<Folded, String> {
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

fn fold_result(e: PaymentResultEvent) -> Result<Folded, String> {
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

// ---------------------------------------------------------------------------------
// Fact rows read back → the decision's input.

fn cell<'a>(row: &'a MemRow, column: &str) -> Result<&'a Cell, String> {
    row.get(column)
        .ok_or_else(|| format!("column {column} missing"))
}

pub fn int_of(row: &MemRow, column: &str) -> Result<i64, String> {
    match cell(row, column)? {
        Cell::Int(i) => Ok(*i),
        other => Err(format!("{column}: not an integer: {other:?}")),
    }
}

pub fn opt_int_of(row: &MemRow, column: &str) -> Result<Option<i64>, String> {
    match cell(row, column)? {
        Cell::Null => Ok(None),
        Cell::Int(i) => Ok(Some(*i)),
        other => Err(format!("{column}: not an integer: {other:?}")),
    }
}

pub fn text_of<'a>(row: &'a MemRow, column: &str) -> Result<&'a str, String> {
    match cell(row, column)? {
        Cell::Text(s) => Ok(s),
        other => Err(format!("{column}: not text: {other:?}")),
    }
}

pub fn opt_text_of<'a>(row: &'a MemRow, column: &str) -> Result<Option<&'a str>, String> {
    match cell(row, column)? {
        Cell::Null => Ok(None),
        Cell::Text(s) => Ok(Some(s)),
        other => Err(format!("{column}: not text: {other:?}")),
    }
}

fn bool_of(row: &MemRow, column: &str) -> Result<bool, String> {
    Ok(int_of(row, column)? != 0)
}

pub fn month_of(row: &MemRow, column: &str) -> Result<YearMonth, String> {
    YearMonth::parse(text_of(row, column)?).map_err(|e| e.to_string())
}

fn opt_month_of(row: &MemRow, column: &str) -> Result<Option<YearMonth>, String> {
    opt_text_of(row, column)?
        .map(|s| YearMonth::parse(s).map_err(|e| e.to_string()))
        .transpose()
}

fn parse_time(s: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| format!("time {s}: {e}"))
}

fn time_of(row: &MemRow, column: &str) -> Result<DateTime<Utc>, String> {
    parse_time(text_of(row, column)?)
}

fn opt_time_of(row: &MemRow, column: &str) -> Result<Option<DateTime<Utc>>, String> {
    opt_text_of(row, column)?.map(parse_time).transpose()
}

pub fn small_bill_of(row: &MemRow) -> Result<SmallBill, String> {
    Ok(SmallBill {
        id: int_of(row, "bill_id")?,
        account_id: int_of(row, "account_id")?,
        rent_minor: int_of(row, "rent")?,
    })
}

pub fn small_bill_rent_of(row: &MemRow) -> Result<SmallBillRent, String> {
    Ok(SmallBillRent {
        account_id: int_of(row, "account_id")?,
        month: month_of(row, "bill_yearmonth")?,
        rent_minor: int_of(row, "rent")?,
    })
}

pub fn customer_account_of(row: &MemRow) -> Result<CustomerAccount, String> {
    Ok(CustomerAccount {
        id: int_of(row, "account_id")?,
        income_start_month: month_of(row, "income_start_month")?,
        current_payable_cutoff_month: opt_month_of(row, "current_payable_cutoff_month")?,
    })
}

/// A partner bill row, with its last re-push (a row of `bill_fact_partner_repushes`)
/// if there was one: a re-push marks it waiting for re-verification
/// (`last_unqualified_order_id = 0`, R-BILL-5).
pub fn partner_bill_of(row: &MemRow, repush: Option<&MemRow>) -> Result<PartnerBill, String> {
    let repushed_at = repush.map(|r| time_of(r, "repushed_at")).transpose()?;
    Ok(PartnerBill {
        id: int_of(row, "partner_bill_id")?,
        partner_account_id: int_of(row, "partner_account_id")?,
        pre_rent_minor: opt_int_of(row, "pre_rent")?,
        deduction_minor: int_of(row, "deduction")?,
        last_unqualified_order_id: repushed_at.map(|_| 0),
        last_unqualified_at: repushed_at,
        repushed_at,
    })
}

pub fn partner_bill_deduction_of(row: &MemRow) -> Result<PartnerBillDeduction, String> {
    Ok(PartnerBillDeduction {
        partner_account_id: int_of(row, "partner_account_id")?,
        month: month_of(row, "bill_yearmonth")?,
        deduction_minor: int_of(row, "deduction")?,
    })
}

pub fn diff_of(row: &MemRow) -> Result<Diff, String> {
    Ok(Diff {
        id: int_of(row, "diff_id")?,
        partner_bill_id: opt_int_of(row, "partner_bill_id")?,
    })
}

pub fn partner_account_of(row: &MemRow) -> Result<PartnerAccount, String> {
    Ok(PartnerAccount {
        id: int_of(row, "partner_account_id")?,
        partner_org_id: int_of(row, "partner_org_id")?,
        platform_station_id: opt_int_of(row, "platform_station_id")?,
    })
}

/// No row: the profile was never recorded (an error finding once the check needs it).
pub fn partner_profile_of(row: Option<&MemRow>) -> Result<PartnerProfile, String> {
    let Some(row) = row else {
        return Ok(PartnerProfile::Unrecorded);
    };
    if !bool_of(row, "configured")? {
        return Ok(PartnerProfile::NotConfigured);
    }
    let payment_cycle = match text_of(row, "payment_cycle")? {
        "MONTH_PAY_PREVIOUS_MONTH" => PaymentCycle::MonthPayPreviousMonth,
        "MONTHLY" => PaymentCycle::Monthly,
        "QUARTERLY" => PaymentCycle::Quarterly,
        "HALF_YEARLY" => PaymentCycle::HalfYearly,
        "RECORD_WAY_COMPOSITE" => PaymentCycle::RecordWayComposite,
        "SHARE_RULE_COMPOSITE" => PaymentCycle::ShareRuleComposite,
        other => PaymentCycle::Illegal(other.to_owned()),
    };
    Ok(PartnerProfile::Configured {
        payment_cycle,
        config_version: int_of(row, "config_version")?,
    })
}

/// No row: nothing recorded for the station (composite cycles then cannot compute).
pub fn station_of(row: Option<&MemRow>) -> Result<StationFacts, String> {
    let Some(row) = row else {
        return Ok(StationFacts::default());
    };
    let record_way = opt_text_of(row, "record_way")?
        .map(parse_code::<RecordWayCode>)
        .transpose()?
        .map(|c| match c {
            RecordWayCode::NaturalPerson => RecordWay::NaturalPerson,
            RecordWayCode::NonNaturalPerson => RecordWay::NonNaturalPerson,
        });
    let share_rule = if bool_of(row, "has_share_rule")? {
        let method = opt_text_of(row, "rent_pay_method")?.unwrap_or_default();
        Some(ShareRule {
            rent_pay_method: match method {
                "MONTHLY" => RentPayMethod::Monthly,
                "QUARTERLY" => RentPayMethod::Quarterly,
                "HALF_YEARLY" => RentPayMethod::HalfYearly,
                other => RentPayMethod::Other(other.to_owned()),
            },
            change_type: opt_text_of(row, "change_type")?.map(str::to_owned),
            latest_generated_bill_month: opt_month_of(row, "latest_generated_bill_month")?,
        })
    } else {
        None
    };
    Ok(StationFacts {
        record_way,
        share_rule,
    })
}

/// No row: the default route (seed §4.5: the platform route is an explicit switch).
pub fn account_route_of(row: Option<&MemRow>) -> Result<AccountRoute, String> {
    let Some(row) = row else {
        return Ok(AccountRoute::Default);
    };
    Ok(
        match parse_code::<AccountRouteCode>(text_of(row, "value")?)? {
            AccountRouteCode::Default => AccountRoute::Default,
            AccountRouteCode::Platform => AccountRoute::Platform,
        },
    )
}

pub fn opening_paid_of(row: &MemRow) -> Result<OpeningPaidBalance, String> {
    Ok(OpeningPaidBalance {
        id: int_of(row, "opening_id")?,
        small_station_id: int_of(row, "small_station_id")?,
        platform_station_id: opt_int_of(row, "platform_station_id")?,
        partner_org_id: int_of(row, "partner_org_id")?,
        opening_paid_minor: int_of(row, "opening_paid")?,
        updated_at: time_of(row, "updated_at")?,
    })
}

pub fn opening_deduction_of(row: &MemRow) -> Result<OpeningDeduction, String> {
    Ok(OpeningDeduction {
        id: int_of(row, "opening_id")?,
        partner_account_id: int_of(row, "partner_account_id")?,
        effective: bool_of(row, "effective")?,
        amount_minor: int_of(row, "amount")?,
        updated_at: time_of(row, "updated_at")?,
    })
}

pub fn order_of(row: &MemRow) -> Result<PaymentOrder, String> {
    let status = match parse_code::<OrderStatusCode>(text_of(row, "status")?)? {
        OrderStatusCode::Draft => OrderStatus::Draft,
        OrderStatusCode::InReview => OrderStatus::InReview,
        OrderStatusCode::ReviewRejected => OrderStatus::ReviewRejected,
        OrderStatusCode::WaitPay => OrderStatus::WaitPay,
        OrderStatusCode::Paid => OrderStatus::Paid,
        OrderStatusCode::NoNeedPay => OrderStatus::NoNeedPay,
        OrderStatusCode::Void => OrderStatus::Void,
    };
    Ok(PaymentOrder {
        id: int_of(row, "order_id")?,
        status,
        published: bool_of(row, "published")?,
        publish_version: int_of(row, "publish_version")?,
        submit_round: int_of(row, "submit_round")?,
        treasury: bool_of(row, "treasury")?,
    })
}

/// `None` for a line never published: it belongs to no publish identity, so no rule
/// can count it (R-BILL-2 joins lines to their master's current identity).
pub fn line_of(row: &MemRow) -> Result<Option<BillLine>, String> {
    let (Some(publish_version), Some(submit_round)) = (
        opt_int_of(row, "publish_version")?,
        opt_int_of(row, "submit_round")?,
    ) else {
        return Ok(None);
    };
    let kind = match parse_code::<LineKindCode>(text_of(row, "kind")?)? {
        LineKindCode::Payable => LineKind::Payable,
        LineKindCode::Unqualified => LineKind::Unqualified,
    };
    let status = match text_of(row, "status")? {
        "UNQUALIFIED_EFFECTIVE" => LineStatus::UnqualifiedEffective,
        "UNQUALIFIED_INEFFECTIVE" => LineStatus::UnqualifiedIneffective,
        other => match parse_code::<LineStatusCode>(other)? {
            LineStatusCode::Unpaid => LineStatus::Unpaid,
            LineStatusCode::Paid => LineStatus::Paid,
            LineStatusCode::PartiallyPaid => LineStatus::PartiallyPaid,
            LineStatusCode::Failed => LineStatus::Failed,
        },
    };
    Ok(Some(BillLine {
        id: int_of(row, "line_id")?,
        order_id: int_of(row, "order_id")?,
        publish_version,
        submit_round,
        kind,
        status,
        latest_result_id: opt_int_of(row, "latest_result_id")?,
        planned_amount_minor: int_of(row, "planned_amount")?,
        manual_adjustment_minor: opt_int_of(row, "manual_adjustment")?,
        line_at: time_of(row, "line_at")?,
        deleted: bool_of(row, "deleted")?,
    }))
}

/// The line's unqualified conclusion, if it ever had one (whether it still counts is
/// the decision's business: the line's status says so).
pub fn conclusion_of(row: &MemRow) -> Result<Option<UnqualifiedConclusion>, String> {
    let Some(at) = opt_time_of(row, "conclusion_at")? else {
        return Ok(None);
    };
    Ok(Some(UnqualifiedConclusion {
        order_id: int_of(row, "order_id")?,
        line_id: int_of(row, "line_id")?,
        partner_visible: opt_int_of(row, "conclusion_visible")?.unwrap_or(0) != 0,
        reason: opt_text_of(row, "conclusion_reason")?
            .unwrap_or_default()
            .to_owned(),
        at,
    }))
}

pub fn lock_of(row: &MemRow) -> Result<BillLock, String> {
    Ok(BillLock {
        id: int_of(row, "lock_id")?,
        order_id: int_of(row, "order_id")?,
        line_id: int_of(row, "line_id")?,
        publish_version: int_of(row, "publish_version")?,
        submit_round: int_of(row, "submit_round")?,
        status: match text_of(row, "status")? {
            "RESERVED" => LockStatus::Reserved,
            "ACTIVE" => LockStatus::Active,
            "RELEASED" => LockStatus::Released,
            other => return Err(format!("lock status {other}")),
        },
        locked_at: time_of(row, "locked_at")?,
    })
}

pub fn result_of(row: &MemRow) -> Result<PaymentResult, String> {
    Ok(PaymentResult {
        id: int_of(row, "result_id")?,
        small_station_id: int_of(row, "small_station_id")?,
        platform_station_id: opt_int_of(row, "platform_station_id")?,
        partner_org_id: opt_int_of(row, "partner_org_id")?,
        month: month_of(row, "bill_yearmonth")?,
        status: match parse_code::<ResultStatusCode>(text_of(row, "status")?)? {
            ResultStatusCode::Paying => ResultStatus::Paying,
            ResultStatusCode::PaySuccess => ResultStatus::Success,
            ResultStatusCode::PayFail => ResultStatus::Fail,
        },
        kind: match parse_code::<ResultTypeCode>(text_of(row, "kind")?)? {
            ResultTypeCode::NormalPayment => ResultType::NormalPayment,
            ResultTypeCode::Other => ResultType::Other,
        },
        source: match parse_code::<ResultSourceCode>(text_of(row, "source")?)? {
            ResultSourceCode::Treasury => ResultSource::Treasury,
            ResultSourceCode::OfflineImport => ResultSource::OfflineImport,
            ResultSourceCode::FailFallback => ResultSource::FailFallback,
            ResultSourceCode::Other => ResultSource::Other,
        },
        amount_minor: int_of(row, "amount")?,
        paid_at: opt_time_of(row, "paid_at")?,
        voided: bool_of(row, "voided")?,
    })
}

/// The time column of each fact table: the newest one a decision read is its
/// `payment_status_update_time`.
pub fn fact_time_column(table: &TableDef) -> &'static str {
    match table.name {
        n if n == PARTNER_REPUSHES.name => "repushed_at",
        n if n == OPENING_PAID.name || n == OPENING_DEDUCTIONS.name => "updated_at",
        n if n == LINES.name => "line_at",
        _ => "fact_at",
    }
}

// ---------------------------------------------------------------------------------
// The facts of one station-month → its rows.

/// Why a station-month has no decision: an error finding (R-BILL-1 [dev], R-BILL-11).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// The decision failed (an unrecorded partner profile, an uncomputable cycle …).
    Decision(BillError),
    /// The diff links a partner bill that was never recorded.
    PartnerBillUnrecorded {
        station_month: StationMonth,
        partner_bill_id: i64,
    },
    /// Diffs of several station-months link the same partner bill: which one its row
    /// shows would depend on processing order (R-BILL-8: the partner-bill → diff
    /// mapping is unique).
    PartnerBillLinkedTwice {
        station_month: StationMonth,
        partner_bill_id: i64,
        others: Vec<StationMonth>,
    },
}

impl Finding {
    /// The stable code of the finding.
    pub fn code(&self) -> &'static str {
        match self {
            Finding::Decision(e) => match e {
                BillError::BadStationMonth(_) => "BAD_STATION_MONTH",
                BillError::BadMonth(_) => "BAD_MONTH",
                BillError::PartnerProfileUnrecorded { .. } => "PARTNER_PROFILE_UNRECORDED",
                BillError::CycleUncomputable { .. } => "CYCLE_UNCOMPUTABLE",
                BillError::CutoffMonthMissing { .. } => "CUTOFF_MONTH_MISSING",
                BillError::DuplicateOpeningPaidBalance { .. } => "DUPLICATE_OPENING_PAID_BALANCE",
                BillError::AmountOverflow { .. } => "AMOUNT_OVERFLOW",
            },
            Finding::PartnerBillUnrecorded { .. } => "PARTNER_BILL_UNRECORDED",
            Finding::PartnerBillLinkedTwice { .. } => "PARTNER_BILL_LINKED_TWICE",
        }
    }

    pub fn message(&self) -> String {
        match self {
            Finding::Decision(e) => e.to_string(),
            Finding::PartnerBillUnrecorded {
                station_month,
                partner_bill_id,
            } => format!(
                "{station_month}: the diff links partner bill {partner_bill_id}, which was never recorded"
            ),
            Finding::PartnerBillLinkedTwice {
                station_month,
                partner_bill_id,
                others,
            } => {
                let others: Vec<String> = others.iter().map(ToString::to_string).collect();
                format!(
                    "{station_month}: partner bill {partner_bill_id} is also linked by the diffs of {}",
                    others.join(", ")
                )
            }
        }
    }
}

/// Everything one station-month's recomputation writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Projected {
    /// The whole `fi_customer_bill` row, when the station-month has a small bill.
    pub customer_bill: Option<Cells>,
    /// The partner bill id and the columns its `fi_customer_bill_partner` row gets.
    pub partner_bill: Option<(i64, Cells)>,
    /// The whole `fi_monthly_income_difference` row, when it has a diff.
    pub difference: Option<Cells>,
    /// The `bill_decisions` row, or
    pub decision: Option<Cells>,
    /// the `bill_decision_findings` row.
    pub finding: Option<Cells>,
}

/// The facts JSON stored beside a decision or finding (so an operator sees why).
pub fn facts_json(facts: &BillFacts) -> String {
    // BillFacts holds strings, integers, times and enums only: it always serializes.
    serde_json::to_string(facts).unwrap_or_else(|e| format!("{{\"unserializable\":\"{e}\"}}"))
}

/// The payment columns every bill row gets; all NULL without a decision.
fn payment_cells(d: Option<&Decision>, update_time: &Cell) -> Cells {
    vec![
        (
            "payment_status",
            d.map_or(Cell::Null, |d| Cell::Int(d.payment_status.code().into())),
        ),
        (
            "paid_amount",
            d.map_or(Cell::Null, |d| Cell::Int(d.paid_amount_minor)),
        ),
        (
            "cumulative_paid_amount",
            d.map_or(Cell::Null, |d| Cell::Int(d.cumulative_paid_amount_minor)),
        ),
        (
            "locked_payment_order_id",
            opt_int(d.and_then(|d| d.locked_payment_order_id)),
        ),
        (
            "locked_order_bill_id",
            opt_int(d.and_then(|d| d.locked_order_bill_id)),
        ),
        (
            "payment_status_update_time",
            if d.is_some() {
                update_time.clone()
            } else {
                Cell::Null
            },
        ),
    ]
}

/// The partner-side columns of the partner bill and diff rows.
fn partner_cells(d: Option<&Decision>) -> Cells {
    let check = d.and_then(|d| d.pre_rent_check);
    vec![
        (
            "partner_query_status",
            d.map_or(Cell::Null, |d| {
                Cell::Int(d.partner_query_status.code().into())
            }),
        ),
        (
            "pre_rent_check_result",
            check.map_or(Cell::Null, |c| Cell::Int(c.result.code().into())),
        ),
        (
            "pre_rent_check_reason",
            Cell::opt_text(check.and_then(|c| c.reason).map(|r| r.as_str())),
        ),
        (
            "current_payment_amount",
            opt_int(d.and_then(|d| d.current_payment_amount_minor)),
        ),
        (
            "unqualified_flag",
            d.map_or(Cell::Null, |d| flag(d.unqualified_flag)),
        ),
        (
            "unqualified_reason",
            Cell::opt_text(d.and_then(|d| d.unqualified_reason.clone())),
        ),
    ]
}

/// The rows of one station-month. `inconsistent`: a finding the assembler found
/// before deciding (a partner bill linked twice or never recorded); `fact_at`: the
/// newest fact time the assembler read — `payment_status_update_time`.
pub fn project(
    facts: &BillFacts,
    inconsistent: Option<Finding>,
    fact_at: Option<&str>,
) -> Projected {
    let sm = facts.station_month;
    let outcome = match inconsistent {
        Some(f) => Err(f),
        None => decide(facts).map_err(Finding::Decision),
    };
    let decision = outcome.as_ref().ok();
    let update_time = Cell::opt_text(fact_at);
    let month = Cell::Text(sm.month.to_string());
    let customer_bill = facts.small_bill.as_ref().map(|b| {
        let mut row = vec![
            ("id", Cell::Int(b.id)),
            ("station_id", Cell::Int(sm.station_id)),
            ("bill_yearmonth", month.clone()),
            ("account_id", Cell::Int(b.account_id)),
            ("rent", Cell::Int(b.rent_minor)),
        ];
        row.extend(payment_cells(decision, &update_time));
        row
    });
    let partner_bill = match (&facts.partner_bill, decision) {
        (Some(b), Some(d)) => {
            let mut set = vec![
                ("station_id", Cell::Int(sm.station_id)),
                ("decided_station_month", Cell::Text(sm.to_string())),
            ];
            set.extend(payment_cells(Some(d), &update_time));
            set.extend(partner_cells(Some(d)));
            set.push((
                "last_unqualified_order_id",
                opt_int(d.last_unqualified.map(|l| l.order_id)),
            ));
            set.push((
                "last_unqualified_time",
                opt_time(&d.last_unqualified.and_then(|l| l.at)),
            ));
            Some((b.id, set))
        }
        // A finding leaves the partner row cleared (the runner clears it first).
        _ => None,
    };
    let difference = facts.diff.map(|diff| {
        let mut row = vec![
            ("id", Cell::Int(diff.id)),
            ("station_id", Cell::Int(sm.station_id)),
            ("share_month", month.clone()),
            ("partner_bill_id", opt_int(diff.partner_bill_id)),
            (
                "partner_account_id",
                opt_int(facts.partner_bill.as_ref().map(|b| b.partner_account_id)),
            ),
            (
                "small_account_id",
                opt_int(facts.small_bill.as_ref().map(|b| b.account_id)),
            ),
            (
                "rent",
                opt_int(facts.small_bill.as_ref().map(|b| b.rent_minor)),
            ),
            (
                "pre_rent",
                opt_int(facts.partner_bill.as_ref().and_then(|b| b.pre_rent_minor)),
            ),
        ];
        row.extend(payment_cells(decision, &update_time));
        row.extend(partner_cells(decision));
        row
    });
    let json = Cell::Text(facts_json(facts));
    let key = || {
        vec![
            ("station_id", Cell::Int(sm.station_id)),
            ("bill_yearmonth", month.clone()),
        ]
    };
    let (decision, finding) = match &outcome {
        Ok(d) => {
            let check = d.pre_rent_check;
            let mut row = key();
            row.extend([
                ("payment_status", Cell::Int(d.payment_status.code().into())),
                ("decided_by", Cell::text(d.decided_by.label())),
                (
                    "partner_query_status",
                    Cell::Int(d.partner_query_status.code().into()),
                ),
                (
                    "partner_query_rule",
                    Cell::text(d.partner_query_decided_by.label()),
                ),
                (
                    "pre_rent_check_result",
                    check.map_or(Cell::Null, |c| Cell::Int(c.result.code().into())),
                ),
                (
                    "pre_rent_available",
                    opt_int(check.and_then(|c| c.available_minor)),
                ),
                ("facts_json", json),
                ("decided_at", update_time.clone()),
            ]);
            (Some(row), None)
        }
        Err(f) => {
            let mut row = key();
            row.extend([
                ("code", Cell::text(f.code())),
                ("message", Cell::Text(f.message())),
                ("facts_json", json),
                ("found_at", update_time.clone()),
            ]);
            (None, Some(row))
        }
    };
    Projected {
        customer_bill,
        partner_bill,
        difference,
        decision,
        finding,
    }
}

/// The columns of `fi_customer_bill_partner` a partner bill fact writes (its
/// identity); the payment projection is the decision's.
pub fn partner_bill_identity(row: &MemRow) -> Result<(i64, Cells), String> {
    let id = int_of(row, "partner_bill_id")?;
    Ok((
        id,
        vec![
            (
                "partner_account_id",
                Cell::Int(int_of(row, "partner_account_id")?),
            ),
            (
                "bill_yearmonth",
                Cell::text(text_of(row, "bill_yearmonth")?),
            ),
            ("pre_rent", opt_int(opt_int_of(row, "pre_rent")?)),
            ("deduction", Cell::Int(int_of(row, "deduction")?)),
        ],
    ))
}

#[cfg(test)]
#[path = "fold_tests.rs"]
mod tests;
