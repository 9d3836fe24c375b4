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
//! 2. `*_of(row)`: a fact row read back → the decision's input types ([`BillFacts`](super::BillFacts)).
//! 3. [`project`]: the facts of one station-month → the rows of the three bill tables
//!    and the decision explanation, or an error finding ([`Finding`]) — never a
//!    silent null.
//!
//! The steps live in their own files: `writes` (what a fold produces), `cells` (event
//! values → cells), `recorded`
//! (station-month, partner-bill and reference events), `payment` (payment order, lock
//! and result events), `read` (step 2) and `project` (step 3). Every public name is
//! re-exported here, so callers write `bill::fold::…`.
//!
//! **Architecture invariant:** no clock and no I/O here. `payment_status_update_time`
//! is the time of the newest fact the decision read (event time), so a live run, a
//! full rebuild and a scoped rebuild write the same value.

mod cells;
mod payment;
mod project;
mod read;
mod recorded;
mod writes;

pub use cells::time_cell;
pub use project::{facts_json, partner_bill_identity, project, Finding, Projected};
pub use read::{
    account_route_of, conclusion_of, customer_account_of, diff_of, fact_time_column, int_of,
    line_of, lock_of, month_of, opening_deduction_of, opening_paid_of, opt_int_of, opt_text_of,
    order_of, partner_account_of, partner_bill_deduction_of, partner_bill_of, partner_profile_of,
    result_of, small_bill_of, small_bill_rent_of, station_of, text_of,
};
pub use recorded::SETTING_ACCOUNT_ROUTE;
pub use writes::{FactOp, Folded, Touch};

use cells::decode;
use factledger_aggregates::bill::{
    BILL_LOCK_AGGREGATE_TYPE, PARTNER_BILL_AGGREGATE_TYPE, PAYMENT_ORDER_AGGREGATE_TYPE,
    PAYMENT_RESULT_AGGREGATE_TYPE, REFERENCE_AGGREGATE_TYPE, STATION_MONTH_AGGREGATE_TYPE,
};
use payment::{fold_lock, fold_order, fold_result};
use recorded::{fold_partner_bill, fold_reference, fold_station_month};
use serde_json::Value;

/// Checkpoint name, `projection` label and `GET /v1/projections` name.
pub const NAME: &str = "bill";
/// Bump when the rows' shape or meaning changes.
pub const VERSION: i32 = 1;

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

#[cfg(test)]
mod tests;
