//! Folding events into the bill fact tables (the values of a fact op's row; `write`
//! sends them), and resolving which station-months a touched fact affects (before and
//! after its write).

#[allow(unused_imports)]
use super::*;
use crate::infra::db::Tx;
use factledger_projections::bill::fold::{self, Touch};
use factledger_projections::bill::tables::{
    OPENING_DEDUCTIONS, OPENING_PAID, PARTNER_BILLS, RESULTS,
};
use factledger_projections::bill::StationMonth;
use factledger_projections::table::{Cell, ColType, Column, TableDef};
use std::collections::BTreeSet;

// ---------------------------------------------------------------------------------
// Folding events into the fact tables.

pub(super) fn bad(position: i64) -> impl Fn(String) -> Step {
    move |reason| Step::Event { position, reason }
}

/// The values of `def`'s columns in storage order, from a row that must hold them all.
pub(super) fn ordered(def: &TableDef, row: &[(&'static str, Cell)]) -> Result<Vec<Cell>, String> {
    def.columns
        .iter()
        .map(|c| {
            row.iter()
                .find(|(n, _)| *n == c.name)
                .map(|(_, v)| v.clone())
                .ok_or_else(|| format!("{}: column {} missing", def.name, c.name))
        })
        .collect()
}

// ---------------------------------------------------------------------------------
// Which station-months a touch affects.

pub(super) const STATION_MONTH_COLUMNS: &[Column] = &[
    Column {
        name: "station_id",
        ty: ColType::Int,
    },
    Column {
        name: "month",
        ty: ColType::Text,
    },
];

/// Every station-month with a small bill or a diff at a station (optionally from a
/// month on): the station-months that can have rows.
pub(super) const STATION_SQL: &str =
    "SELECT station_id, bill_yearmonth FROM bill_fact_small_bills \
     WHERE station_id = ? AND bill_yearmonth >= ? \
     UNION SELECT station_id, share_month FROM bill_fact_diffs \
     WHERE station_id = ? AND share_month >= ?";

/// Station-months whose diff links a partner bill of an account matching `{}`.
pub(super) fn by_partner_account(condition: &str) -> String {
    format!(
        "SELECT d.station_id, d.share_month FROM bill_fact_diffs d \
         JOIN bill_fact_partner_bills pb ON pb.partner_bill_id = d.partner_bill_id \
         JOIN bill_fact_partner_accounts pa ON pa.partner_account_id = pb.partner_account_id \
         WHERE {condition}"
    )
}

/// A month lower than every `yyyymm`: "from the first month on".
pub(super) const MONTH_MIN: &str = "000000";

pub(super) async fn station_months(
    tx: &mut Tx,
    sql: &str,
    args: &[Cell],
    into: &mut BTreeSet<StationMonth>,
) -> Result<(), Step> {
    for row in tx.fetch(sql, args, STATION_MONTH_COLUMNS).await? {
        let station_id = fold::int_of(&row, "station_id").map_err(bad(0))?;
        let month = fold::month_of(&row, "month").map_err(bad(0))?;
        into.insert(StationMonth { station_id, month });
    }
    Ok(())
}

pub(super) async fn station_from(
    tx: &mut Tx,
    station_id: i64,
    month: &str,
    into: &mut BTreeSet<StationMonth>,
) -> Result<(), Step> {
    let (s, m) = (Cell::Int(station_id), Cell::text(month));
    station_months(tx, STATION_SQL, &[s.clone(), m.clone(), s, m], into).await
}

/// Station-months whose partner accounts (the platform station's accounts of their
/// partner bill's account) include `partner_account_id`.
pub(super) async fn account_group(
    tx: &mut Tx,
    partner_account_id: i64,
    into: &mut BTreeSet<StationMonth>,
) -> Result<(), Step> {
    let sql = by_partner_account(
        "pa.partner_account_id = ? OR pa.platform_station_id = \
         (SELECT platform_station_id FROM bill_fact_partner_accounts WHERE partner_account_id = ?)",
    );
    let a = Cell::Int(partner_account_id);
    station_months(tx, &sql, &[a.clone(), a], into).await
}

/// Add the station-months `touch` affects in the fact tables as they are now.
pub(super) async fn resolve(
    tx: &mut Tx,
    touch: Touch,
    into: &mut BTreeSet<StationMonth>,
) -> Result<(), Step> {
    let sm_args = |sm: StationMonth| [Cell::Int(sm.station_id), Cell::Text(sm.month.to_string())];
    match touch {
        Touch::StationMonth(sm) => {
            into.insert(sm);
        }
        Touch::SmallBillAccount(sm) => {
            // Only the months whose cutoff can reach this rent (see `assemble`).
            let sql = "SELECT s2.station_id, s2.bill_yearmonth FROM bill_fact_small_bills s1 \
                       JOIN bill_fact_small_bills s2 ON s2.account_id = s1.account_id \
                       WHERE s1.station_id = ? AND s1.bill_yearmonth = ? \
                       AND s2.bill_yearmonth >= ?";
            let mut args = sm_args(sm).to_vec();
            args.push(Cell::Text(sm.month.first_month_reading_rent().to_string()));
            station_months(tx, sql, &args, into).await?;
        }
        Touch::DiffPartnerBill(sm) => {
            let sql = "SELECT d2.station_id, d2.share_month FROM bill_fact_diffs d1 \
                       JOIN bill_fact_diffs d2 ON d2.partner_bill_id = d1.partner_bill_id \
                       WHERE d1.station_id = ? AND d1.share_month = ?";
            station_months(tx, sql, &sm_args(sm), into).await?;
        }
        Touch::PartnerBill(id) => {
            let sql =
                "SELECT station_id, share_month FROM bill_fact_diffs WHERE partner_bill_id = ?";
            station_months(tx, sql, &[Cell::Int(id)], into).await?;
            let bill = tx
                .row(
                    &PARTNER_BILLS,
                    "WHERE partner_bill_id = ?",
                    &[Cell::Int(id)],
                )
                .await?;
            if let Some(bill) = bill {
                let account = fold::int_of(&bill, "partner_account_id").map_err(bad(0))?;
                account_group(tx, account, into).await?;
            }
        }
        Touch::CustomerAccount(id) => {
            let sql =
                "SELECT station_id, bill_yearmonth FROM bill_fact_small_bills WHERE account_id = ?";
            station_months(tx, sql, &[Cell::Int(id)], into).await?;
        }
        Touch::PartnerAccount(id) => account_group(tx, id, into).await?,
        Touch::PartnerOrg(org) => {
            let sql = by_partner_account("pa.partner_org_id = ?");
            station_months(tx, &sql, &[Cell::Int(org)], into).await?;
        }
        Touch::Station(id) => station_from(tx, id, MONTH_MIN, into).await?,
        Touch::Everything => {
            let sql = "SELECT station_id, bill_yearmonth FROM bill_fact_small_bills \
                       UNION SELECT station_id, share_month FROM bill_fact_diffs";
            station_months(tx, sql, &[], into).await?;
        }
        Touch::OpeningPaid(id) => {
            let opening = tx
                .row(&OPENING_PAID, "WHERE opening_id = ?", &[Cell::Int(id)])
                .await?;
            if let Some(o) = opening {
                let o = fold::opening_paid_of(&o).map_err(bad(0))?;
                station_from(tx, o.small_station_id, MONTH_MIN, into).await?;
                if let Some(ps) = o.platform_station_id {
                    let sql = by_partner_account("pa.platform_station_id = ?");
                    station_months(tx, &sql, &[Cell::Int(ps)], into).await?;
                }
            }
        }
        Touch::OpeningDeduction(id) => {
            let opening = tx
                .row(
                    &OPENING_DEDUCTIONS,
                    "WHERE opening_id = ?",
                    &[Cell::Int(id)],
                )
                .await?;
            if let Some(o) = opening {
                let account = fold::int_of(&o, "partner_account_id").map_err(bad(0))?;
                account_group(tx, account, into).await?;
            }
        }
        Touch::Order(id) => {
            let sql = "SELECT station_id, bill_yearmonth FROM bill_fact_lines WHERE order_id = ? \
                       UNION SELECT station_id, bill_yearmonth FROM bill_fact_locks WHERE order_id = ?";
            station_months(tx, sql, &[Cell::Int(id), Cell::Int(id)], into).await?;
        }
        Touch::Lock(id) => {
            let sql = "SELECT station_id, bill_yearmonth FROM bill_fact_locks WHERE lock_id = ?";
            station_months(tx, sql, &[Cell::Int(id)], into).await?;
        }
        Touch::Result(id) => {
            let result = tx
                .row(&RESULTS, "WHERE result_id = ?", &[Cell::Int(id)])
                .await?;
            if let Some(r) = result {
                let r = fold::result_of(&r).map_err(bad(0))?;
                let month = r.month.to_string();
                station_from(tx, r.small_station_id, &month, into).await?;
                if let Some(ps) = r.platform_station_id {
                    let sql =
                        by_partner_account("pa.platform_station_id = ? AND d.share_month >= ?");
                    station_months(tx, &sql, &[Cell::Int(ps), Cell::Text(month)], into).await?;
                }
            }
            let sql = "SELECT station_id, bill_yearmonth FROM bill_fact_lines \
                       WHERE latest_result_id = ?";
            station_months(tx, sql, &[Cell::Int(id)], into).await?;
        }
    }
    Ok(())
}
