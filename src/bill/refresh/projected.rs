//! A station-month's projected rows as they stand: all three bill tables' rows (read
//! before and after a recompute to count what changed, and for the inspection) and
//! its current `payment_status`, which a mode `UNFINISHED` request reads at execution.

use crate::infra::db::Db;
use crate::runtime::projector::select_rows;
use factledger_projections::bill::fold;
use factledger_projections::bill::inspect::BillTable;
use factledger_projections::bill::tables::{
    CUSTOMER_BILL, CUSTOMER_BILL_PARTNER, DECISIONS, MONTHLY_INCOME_DIFFERENCE,
};
use factledger_projections::bill::{PaymentStatus, StationMonth};
use factledger_projections::table::{Cell, MemRow};

/// The projected rows of a station-month: small bill, partner bill (decided by it),
/// diff — all columns.
pub(super) async fn projected(
    db: &Db,
    sm: StationMonth,
) -> Result<Vec<(BillTable, MemRow)>, sqlx::Error> {
    let here = [Cell::Int(sm.station_id), Cell::Text(sm.month.to_string())];
    let mut out = Vec::new();
    for r in select_rows(
        db,
        &CUSTOMER_BILL,
        "WHERE station_id = ? AND bill_yearmonth = ? ORDER BY id",
        &here,
    )
    .await?
    {
        out.push((BillTable::SmallBill, r));
    }
    for r in select_rows(
        db,
        &CUSTOMER_BILL_PARTNER,
        "WHERE decided_station_month = ? ORDER BY id",
        &[Cell::Text(sm.to_string())],
    )
    .await?
    {
        out.push((BillTable::PartnerBill, r));
    }
    for r in select_rows(
        db,
        &MONTHLY_INCOME_DIFFERENCE,
        "WHERE station_id = ? AND share_month = ? ORDER BY id",
        &here,
    )
    .await?
    {
        out.push((BillTable::Diff, r));
    }
    Ok(out)
}

/// Rows of `after` not equal to a row of `before`, plus rows of `before` gone.
pub(super) fn changed_rows(before: &[(BillTable, MemRow)], after: &[(BillTable, MemRow)]) -> usize {
    let new = after.iter().filter(|r| !before.contains(r)).count();
    let gone = before
        .iter()
        .filter(|r| {
            !after
                .iter()
                .any(|a| a.0 == r.0 && a.1.get("id") == r.1.get("id"))
        })
        .count();
    new + gone
}

/// The station-month's current projected `payment_status` (its decision), read now;
/// `None` when it has none (never projected, or its decision failed).
pub(super) async fn current_status(
    db: &Db,
    sm: StationMonth,
) -> Result<Option<PaymentStatus>, sqlx::Error> {
    let here = [Cell::Int(sm.station_id), Cell::Text(sm.month.to_string())];
    let found = select_rows(
        db,
        &DECISIONS,
        "WHERE station_id = ? AND bill_yearmonth = ?",
        &here,
    )
    .await?;
    Ok(found
        .first()
        .and_then(|r| fold::opt_int_of(r, "payment_status").ok().flatten())
        .and_then(PaymentStatus::from_code))
}
