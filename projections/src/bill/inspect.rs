//! Invariant inspection (SPEC R-BILL-11; seed 001 §7.5): after each refresh run, check
//! the three projected rows of a station-month against each other and against the
//! facts, and return findings — each with a rule id and a message. Findings are
//! recorded and served; an inspection (or its error) never undoes committed work.
//!
//! The seed names no rule list (§7.5 "本文不补充具体检查清单"); these are the invariants
//! the SPEC states or implies (R-BILL-1, -2, -3, -6, -7), one [`InspectionRule`] each.
//! [`inspect`] is pure: the caller reads the rows and assembles the facts.

use super::{BillFacts, LockStatus, PartnerProfile, PaymentStatus, ResultStatus, StationMonth};
use std::fmt;

/// The three bill tables (R-BILL-7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BillTable {
    /// `fi_customer_bill`, by station-month.
    SmallBill,
    /// `fi_customer_bill_partner`, by partner bill id.
    PartnerBill,
    /// `fi_monthly_income_difference`, by diff id.
    Diff,
}

impl BillTable {
    pub fn name(self) -> &'static str {
        match self {
            BillTable::SmallBill => "fi_customer_bill",
            BillTable::PartnerBill => "fi_customer_bill_partner",
            BillTable::Diff => "fi_monthly_income_difference",
        }
    }
}

/// The payment projection columns of one row, as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProjectedRow {
    pub table: BillTable,
    /// The small bill id, partner bill id or diff id.
    pub row_id: i64,
    /// `payment_status` as stored: a code, so an unknown one can be reported.
    pub payment_status_code: i32,
    pub paid_amount_minor: i64,
    pub cumulative_paid_amount_minor: i64,
    /// `None` on the small bill (no such column) or without pre_rent.
    pub current_payment_amount_minor: Option<i64>,
    pub locked_payment_order_id: Option<i64>,
    pub locked_order_bill_id: Option<i64>,
}

/// The inspection rules, each with a stable id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum InspectionRule {
    /// I1 a row exists only for a bill of the facts: the small bill, partner bill and
    /// diff of this station-month, one row each (R-BILL-7: one small bill a month).
    RowMatchesFacts,
    /// I2 `payment_status` is a known code (10, 20, 30, 40, 50, 60, 70, 99).
    StatusCodeKnown,
    /// I3 the three rows carry one decision: same status, paid, cumulative, lock.
    RowsAgree,
    /// I4 `paid_amount ≥ 0` and `≤` the sum of this station-month's successful,
    /// non-voided results.
    PaidWithinSuccessResults,
    /// I5 `current_payment_amount = pre_rent − paid_amount` (none without pre_rent) on
    /// the partner bill and diff rows.
    CurrentIsPreRentMinusPaid,
    /// I6 locked ids come in pairs and point to a live (RESERVED/ACTIVE) lock of this
    /// station-month (R-BILL-6).
    LockedIdsPointToLiveLock,
    /// I7 status 50 paid has something paid.
    PaidStatusHasPayment,
    /// I8 status 99 "partner bill not pushed" only without a partner bill.
    NotPushedHasNoPartnerBill,
    /// I9 a partner bill whose partner org has no profile recorded at all is an error,
    /// never a silent null check (R-BILL-1 [dev]).
    PartnerProfileRecorded,
}

impl InspectionRule {
    pub const ALL: [InspectionRule; 9] = [
        InspectionRule::RowMatchesFacts,
        InspectionRule::StatusCodeKnown,
        InspectionRule::RowsAgree,
        InspectionRule::PaidWithinSuccessResults,
        InspectionRule::CurrentIsPreRentMinusPaid,
        InspectionRule::LockedIdsPointToLiveLock,
        InspectionRule::PaidStatusHasPayment,
        InspectionRule::NotPushedHasNoPartnerBill,
        InspectionRule::PartnerProfileRecorded,
    ];

    /// The stable id findings are stored and filtered by.
    pub fn id(self) -> &'static str {
        match self {
            InspectionRule::RowMatchesFacts => "I1_ROW_MATCHES_FACTS",
            InspectionRule::StatusCodeKnown => "I2_STATUS_CODE_KNOWN",
            InspectionRule::RowsAgree => "I3_ROWS_AGREE",
            InspectionRule::PaidWithinSuccessResults => "I4_PAID_WITHIN_SUCCESS_RESULTS",
            InspectionRule::CurrentIsPreRentMinusPaid => "I5_CURRENT_IS_PRE_RENT_MINUS_PAID",
            InspectionRule::LockedIdsPointToLiveLock => "I6_LOCKED_IDS_POINT_TO_LIVE_LOCK",
            InspectionRule::PaidStatusHasPayment => "I7_PAID_STATUS_HAS_PAYMENT",
            InspectionRule::NotPushedHasNoPartnerBill => "I8_NOT_PUSHED_HAS_NO_PARTNER_BILL",
            InspectionRule::PartnerProfileRecorded => "I9_PARTNER_PROFILE_RECORDED",
        }
    }
}

impl fmt::Display for InspectionRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Severity {
    /// Money or status may be wrong: alert.
    Error,
}

/// One broken invariant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub rule: InspectionRule,
    pub severity: Severity,
    pub station_month: StationMonth,
    /// The row the finding is about; `None` for the station-month as a whole.
    pub row: Option<(BillTable, i64)>,
    pub message: String,
}

/// Inspect one station-month's projected rows against its facts (R-BILL-11). Returns
/// every finding, in rule order then row order; none when all invariants hold.
pub fn inspect(facts: &BillFacts, rows: &[ProjectedRow]) -> Result<Vec<Finding>, InspectError> {
    let mut out = Findings {
        station_month: facts.station_month,
        list: Vec::new(),
    };
    let mut rows: Vec<&ProjectedRow> = rows.iter().collect();
    rows.sort_by_key(|r| (r.table, r.row_id));
    rows_match_facts(facts, &rows, &mut out);
    status_codes_known(&rows, &mut out);
    rows_agree(&rows, &mut out);
    paid_within_success_results(facts, &rows, &mut out)?;
    current_is_pre_rent_minus_paid(facts, &rows, &mut out);
    locked_ids_point_to_live_lock(facts, &rows, &mut out);
    statuses_match_payment_and_partner_bill(facts, &rows, &mut out);
    partner_profile_recorded(facts, &mut out);
    let mut findings = out.list;
    findings.sort_by_key(|f| f.rule);
    Ok(findings)
}

/// The findings of one inspection, in the order they were found.
struct Findings {
    station_month: StationMonth,
    list: Vec<Finding>,
}

impl Findings {
    fn find(&mut self, rule: InspectionRule, row: Option<&ProjectedRow>, message: String) {
        self.list.push(Finding {
            rule,
            severity: Severity::Error,
            station_month: self.station_month,
            row: row.map(|r| (r.table, r.row_id)),
            message,
        })
    }
}

/// I1: a row exists only for a bill of the facts, one row per table.
fn rows_match_facts(facts: &BillFacts, rows: &[&ProjectedRow], out: &mut Findings) {
    for r in rows {
        let expected = match r.table {
            BillTable::SmallBill => facts.small_bill.as_ref().map(|b| b.id),
            BillTable::PartnerBill => facts.partner_bill.as_ref().map(|b| b.id),
            BillTable::Diff => facts.diff.map(|d| d.id),
        };
        if expected != Some(r.row_id) {
            out.find(
                InspectionRule::RowMatchesFacts,
                Some(r),
                format!(
                    "{} row {} is not this station-month's bill (the facts have {expected:?})",
                    r.table.name(),
                    r.row_id
                ),
            );
        }
    }
    for table in [
        BillTable::SmallBill,
        BillTable::PartnerBill,
        BillTable::Diff,
    ] {
        let n = rows.iter().filter(|r| r.table == table).count();
        if n > 1 {
            out.find(
                InspectionRule::RowMatchesFacts,
                None,
                format!("{n} {} rows for one station-month", table.name()),
            );
        }
    }
}

/// I2: every `payment_status` is a known code.
fn status_codes_known(rows: &[&ProjectedRow], out: &mut Findings) {
    for r in rows {
        if PaymentStatus::from_code(r.payment_status_code.into()).is_none() {
            out.find(
                InspectionRule::StatusCodeKnown,
                Some(r),
                format!("payment_status {} is no known code", r.payment_status_code),
            );
        }
    }
}

/// I3: the rows carry one decision (the first row is the reference).
fn rows_agree(rows: &[&ProjectedRow], out: &mut Findings) {
    if let Some(first) = rows.first() {
        let shape = |r: &ProjectedRow| {
            (
                r.payment_status_code,
                r.paid_amount_minor,
                r.cumulative_paid_amount_minor,
                r.locked_payment_order_id,
                r.locked_order_bill_id,
            )
        };
        for r in rows.iter().skip(1) {
            if shape(r) != shape(first) {
                out.find(
                    InspectionRule::RowsAgree,
                    Some(r),
                    format!(
                        "status/paid/cumulative/lock {:?} differ from {} row {}: {:?}",
                        shape(r),
                        first.table.name(),
                        first.row_id,
                        shape(first)
                    ),
                );
            }
        }
    }
}

/// I4: `0 ≤ paid_amount ≤` the sum of this station-month's successful, non-voided
/// results. A sum that overflows stops the inspection.
fn paid_within_success_results(
    facts: &BillFacts,
    rows: &[&ProjectedRow],
    out: &mut Findings,
) -> Result<(), InspectError> {
    let sm = facts.station_month;
    let success_sum = facts
        .results
        .iter()
        .filter(|r| {
            r.small_station_id == sm.station_id
                && r.month == sm.month
                && r.status == ResultStatus::Success
                && !r.voided
        })
        .try_fold(0i64, |s, r| s.checked_add(r.amount_minor))
        .ok_or(InspectError::AmountOverflow {
            station_month: sm,
            what: "sum of success results",
        })?;
    for r in rows {
        if r.paid_amount_minor < 0 || r.paid_amount_minor > success_sum {
            out.find(
                InspectionRule::PaidWithinSuccessResults,
                Some(r),
                format!(
                    "paid_amount {} is outside 0..={success_sum}, the sum of success results",
                    r.paid_amount_minor
                ),
            );
        }
    }
    Ok(())
}

/// I5: `current_payment_amount = pre_rent − paid_amount` on the partner bill and diff
/// rows.
fn current_is_pre_rent_minus_paid(facts: &BillFacts, rows: &[&ProjectedRow], out: &mut Findings) {
    let pre_rent = facts.partner_bill.as_ref().and_then(|b| b.pre_rent_minor);
    for r in rows.iter().filter(|r| r.table != BillTable::SmallBill) {
        let expected = pre_rent.and_then(|p| p.checked_sub(r.paid_amount_minor));
        if r.current_payment_amount_minor != expected {
            out.find(
                InspectionRule::CurrentIsPreRentMinusPaid,
                Some(r),
                format!(
                    "current_payment_amount {:?} is not pre_rent {pre_rent:?} − paid {} = {expected:?}",
                    r.current_payment_amount_minor, r.paid_amount_minor
                ),
            );
        }
    }
}

/// I6: locked ids come in pairs and point to a live lock of this station-month.
fn locked_ids_point_to_live_lock(facts: &BillFacts, rows: &[&ProjectedRow], out: &mut Findings) {
    let sm = facts.station_month;
    for r in rows {
        match (r.locked_payment_order_id, r.locked_order_bill_id) {
            (None, None) => {}
            (Some(order_id), Some(line_id)) => {
                let live = facts.locks.iter().any(|l| {
                    l.order_id == order_id
                        && l.line_id == line_id
                        && matches!(l.status, LockStatus::Reserved | LockStatus::Active)
                });
                if !live {
                    out.find(
                        InspectionRule::LockedIdsPointToLiveLock,
                        Some(r),
                        format!(
                            "locked order {order_id} / line {line_id} is no live lock of {sm}"
                        ),
                    );
                }
            }
            (order, line) => out.find(
                InspectionRule::LockedIdsPointToLiveLock,
                Some(r),
                format!("locked_payment_order_id {order:?} and locked_order_bill_id {line:?} come in pairs"),
            ),
        }
    }
}

/// I7: status 50 paid has something paid; I8: status 99 only without a partner bill.
fn statuses_match_payment_and_partner_bill(
    facts: &BillFacts,
    rows: &[&ProjectedRow],
    out: &mut Findings,
) {
    for r in rows {
        let status = PaymentStatus::from_code(r.payment_status_code.into());
        if status == Some(PaymentStatus::Paid) && r.paid_amount_minor <= 0 {
            out.find(
                InspectionRule::PaidStatusHasPayment,
                Some(r),
                format!("status 50 paid with paid_amount {}", r.paid_amount_minor),
            );
        }
        if status == Some(PaymentStatus::PartnerBillNotPushed) && facts.partner_bill.is_some() {
            out.find(
                InspectionRule::NotPushedHasNoPartnerBill,
                Some(r),
                "status 99 partner bill not pushed, but a partner bill is recorded".into(),
            );
        }
    }
}

/// I9: a partner bill's partner org has a profile recorded (configured or not).
fn partner_profile_recorded(facts: &BillFacts, out: &mut Findings) {
    if let Some(bill) = &facts.partner_bill {
        if facts.partner_profile == PartnerProfile::Unrecorded {
            let org = facts
                .partner_accounts
                .iter()
                .find(|a| a.id == bill.partner_account_id)
                .map(|a| a.partner_org_id);
            out.find(
                InspectionRule::PartnerProfileRecorded,
                None,
                format!(
                    "partner bill {}: partner org {org:?} has no partner profile recorded (neither configured nor not configured)",
                    bill.id
                ),
            );
        }
    }
}

/// Why an inspection could not run. It is reported; it never undoes committed work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum InspectError {
    #[error("{station_month}: the {what} overflows i64 minor units")]
    AmountOverflow {
        station_month: StationMonth,
        what: &'static str,
    },
}

#[cfg(test)]
mod tests;
