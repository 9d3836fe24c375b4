//! Resident-income bill facts (SPEC §7, seed 001): events of every fact the bill
//! decision reads (see [`events`] for the streams) and the aggregates that record them
//! with their rules (R-BILL-1, R-BILL-7):
//!
//! | aggregate                         | stream                  | rules                                   |
//! |-----------------------------------|-------------------------|-----------------------------------------|
//! | [`station_month::StationMonthBills`] | `<station_id>:<yyyymm>` | one small bill, one diff per station-month |
//! | [`partner_bill::PartnerBill`]     | partner bill id         | account and month fixed; re-push only of a recorded bill |
//! | [`reference::Reference`]          | one per entity          | latest value wins; profile versions move forward |
//! | [`payment_order::PaymentOrder`]   | order id                | [`payment_order::ORDER_TRANSITIONS`]; lines change before review |
//! | [`lock::BillLocks`]               | `<station_id>:<yyyymm>` | at most one live lock                   |
//! | [`payment_result::PaymentResult`] | result id               | recorded once, voided once              |
//! | [`claim::BillIdClaim`]            | `<KIND>:<id>`           | an id the projection keys by names one stream's row |
//!
//! The values the streams are keyed by, [`YearMonth`] and [`StationMonth`], live in
//! [`month`]; the projections and the service use the same two types.
//!
//! Every refusal is a [`BillError`] with a stable `code()` and the `field()` at fault;
//! a command that restates a fact already recorded writes nothing.

pub mod claim;
pub mod commands;
pub mod error;
pub mod events;
pub mod lock;
pub mod month;
pub mod partner_bill;
pub mod payment_order;
pub mod payment_result;
pub mod reference;
pub mod station_month;
pub mod values;

pub use claim::{BillIdClaim, ClaimCommand, ClaimEvent, ClaimKind, BILL_CLAIM_AGGREGATE_TYPE};
pub use commands::*;
pub use error::{BillError, RefusalKind};
pub use events::*;
pub use lock::BillLocks;
pub use month::{StationMonth, YearMonth, BILL_YEAR_MIN};
pub use partner_bill::PartnerBill;
pub use payment_order::PaymentOrder;
pub use payment_result::PaymentResult;
pub use reference::Reference;
pub use station_month::StationMonthBills;
pub use values::{station_month_stream_id, BillCode, BillId, NonNegativeMinor};

#[cfg(test)]
mod claim_tests;
#[cfg(test)]
mod tests;
