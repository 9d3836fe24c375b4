//! What a fold produces: the writes one bill event makes to the fact tables
//! ([`FactOp`]) and what it touches ([`Touch`]), together a [`Folded`].

use crate::bill::StationMonth;
use crate::table::{Cells, TableDef};

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
