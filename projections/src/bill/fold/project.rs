//! Step 3: the facts of one station-month → the rows of the three bill tables and the
//! decision explanation ([`Projected`]), or an error finding ([`Finding`]) — never a
//! silent null.

use super::cells::{flag, opt_int, opt_time};
use super::read::{int_of, opt_int_of, text_of};
use crate::bill::{decide, BillError, BillFacts, Decision, StationMonth};
use crate::table::{Cell, Cells, MemRow};

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
    let outcome = match inconsistent {
        Some(f) => Err(f),
        None => decide(facts).map_err(Finding::Decision),
    };
    let decision = outcome.as_ref().ok();
    let update_time = Cell::opt_text(fact_at);
    let (decision_row, finding_row) = match &outcome {
        Ok(d) => (Some(decision_row(facts, d, &update_time)), None),
        Err(f) => (None, Some(finding_row(facts, f, &update_time))),
    };
    Projected {
        customer_bill: customer_bill_row(facts, decision, &update_time),
        partner_bill: partner_bill_set(facts, decision, &update_time),
        difference: difference_row(facts, decision, &update_time),
        decision: decision_row,
        finding: finding_row,
    }
}

/// The whole `fi_customer_bill` row, when the station-month has a small bill.
fn customer_bill_row(
    facts: &BillFacts,
    decision: Option<&Decision>,
    update_time: &Cell,
) -> Option<Cells> {
    let sm = facts.station_month;
    facts.small_bill.as_ref().map(|b| {
        let mut row = vec![
            ("id", Cell::Int(b.id)),
            ("station_id", Cell::Int(sm.station_id)),
            ("bill_yearmonth", Cell::Text(sm.month.to_string())),
            ("account_id", Cell::Int(b.account_id)),
            ("rent", Cell::Int(b.rent_minor)),
        ];
        row.extend(payment_cells(decision, update_time));
        row
    })
}

/// The partner bill id and the columns its `fi_customer_bill_partner` row gets, when
/// the station-month has a partner bill and a decision. A finding leaves the partner
/// row cleared (the runner clears it first).
fn partner_bill_set(
    facts: &BillFacts,
    decision: Option<&Decision>,
    update_time: &Cell,
) -> Option<(i64, Cells)> {
    let (Some(b), Some(d)) = (&facts.partner_bill, decision) else {
        return None;
    };
    let sm = facts.station_month;
    let mut set = vec![
        ("station_id", Cell::Int(sm.station_id)),
        ("decided_station_month", Cell::Text(sm.to_string())),
    ];
    set.extend(payment_cells(Some(d), update_time));
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

/// The whole `fi_monthly_income_difference` row, when the station-month has a diff.
fn difference_row(
    facts: &BillFacts,
    decision: Option<&Decision>,
    update_time: &Cell,
) -> Option<Cells> {
    let sm = facts.station_month;
    facts.diff.map(|diff| {
        let mut row = vec![
            ("id", Cell::Int(diff.id)),
            ("station_id", Cell::Int(sm.station_id)),
            ("share_month", Cell::Text(sm.month.to_string())),
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
        row.extend(payment_cells(decision, update_time));
        row.extend(partner_cells(decision));
        row
    })
}

/// The key of the `bill_decisions` and `bill_decision_findings` rows.
fn decision_key(facts: &BillFacts) -> Cells {
    let sm = facts.station_month;
    vec![
        ("station_id", Cell::Int(sm.station_id)),
        ("bill_yearmonth", Cell::Text(sm.month.to_string())),
    ]
}

/// The `bill_decisions` row: the decision, the rules that fired and its facts.
fn decision_row(facts: &BillFacts, d: &Decision, update_time: &Cell) -> Cells {
    let check = d.pre_rent_check;
    let mut row = decision_key(facts);
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
        ("facts_json", Cell::Text(facts_json(facts))),
        ("decided_at", update_time.clone()),
    ]);
    row
}

/// The `bill_decision_findings` row: why there is no decision, and the facts.
fn finding_row(facts: &BillFacts, f: &Finding, update_time: &Cell) -> Cells {
    let mut row = decision_key(facts);
    row.extend([
        ("code", Cell::text(f.code())),
        ("message", Cell::Text(f.message())),
        ("facts_json", Cell::Text(facts_json(facts))),
        ("found_at", update_time.clone()),
    ]);
    row
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
