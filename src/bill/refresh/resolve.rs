//! Resolving a refresh request's scopes to station-months against the fact tables
//! (`bill_fact_*`) as they are now: loading the plain rows the pure rules of
//! `factledger_projections::bill::refresh` take, checking a station-month scope's
//! locator at submission, and paging an `ACCOUNT_SCOPE`.

use crate::bill::projection::select_station_months;
use crate::infra::db::Db;
use crate::runtime::projector::select_rows;
use factledger_projections::bill::fold;
use factledger_projections::bill::refresh::{
    account_scope_page, check_locator, resolve_diff, resolve_order_bill, resolve_partner_bill,
    AccountBillRef, AccountScope, DiffRef, LocatorFacts, OrderBillRef, OrderRef, PartnerAccountRef,
    PartnerBillRef, RefreshScope, ScopeResolveError, StationMonthScope,
};
use factledger_projections::bill::tables::{DIFFS, LINES, ORDERS, PARTNER_ACCOUNTS, PARTNER_BILLS};
use factledger_projections::bill::{OrderStatus, StationMonth};
use factledger_projections::table::{Cell, MemRow, TableDef};
use std::collections::BTreeSet;

/// Why a scope or a request could not be resolved against the fact tables.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error(transparent)]
    Scope(#[from] ScopeResolveError),
    #[error("reading the fact tables: {0}")]
    Database(#[from] sqlx::Error),
    #[error("reading the fact tables: {0}")]
    Fact(String),
}

// ---------------------------------------------------------------------------------
// Loading the plain data the pure resolution functions take.

async fn rows(
    db: &Db,
    def: &TableDef,
    tail: &str,
    args: &[Cell],
) -> Result<Vec<MemRow>, ResolveError> {
    Ok(select_rows(db, def, tail, args).await?)
}

fn fact<T>(r: Result<T, String>) -> Result<T, ResolveError> {
    r.map_err(ResolveError::Fact)
}

fn diff_ref(row: &MemRow) -> Result<DiffRef, ResolveError> {
    Ok(DiffRef {
        id: fact(fold::int_of(row, "diff_id"))?,
        station_month: StationMonth {
            station_id: fact(fold::int_of(row, "station_id"))?,
            month: fact(fold::month_of(row, "share_month"))?,
        },
        partner_bill_id: fact(fold::opt_int_of(row, "partner_bill_id"))?,
    })
}

async fn load_diff(db: &Db, diff_id: i64) -> Result<Option<DiffRef>, ResolveError> {
    let found = rows(db, &DIFFS, "WHERE diff_id = ?", &[Cell::Int(diff_id)]).await?;
    found.first().map(diff_ref).transpose()
}

async fn diffs_of_partner_bill(
    db: &Db,
    partner_bill_id: i64,
) -> Result<Vec<DiffRef>, ResolveError> {
    rows(
        db,
        &DIFFS,
        "WHERE partner_bill_id = ? ORDER BY diff_id",
        &[Cell::Int(partner_bill_id)],
    )
    .await?
    .iter()
    .map(diff_ref)
    .collect()
}

async fn load_partner_bill(db: &Db, id: i64) -> Result<Option<PartnerBillRef>, ResolveError> {
    let found = rows(
        db,
        &PARTNER_BILLS,
        "WHERE partner_bill_id = ?",
        &[Cell::Int(id)],
    )
    .await?;
    found
        .first()
        .map(|r| {
            Ok(PartnerBillRef {
                id,
                partner_account_id: fact(fold::int_of(r, "partner_account_id"))?,
                month: fact(fold::month_of(r, "bill_yearmonth"))?,
            })
        })
        .transpose()
}

async fn load_partner_account(db: &Db, id: i64) -> Result<Option<PartnerAccountRef>, ResolveError> {
    let found = rows(
        db,
        &PARTNER_ACCOUNTS,
        "WHERE partner_account_id = ?",
        &[Cell::Int(id)],
    )
    .await?;
    found
        .first()
        .map(|r| {
            Ok(PartnerAccountRef {
                id,
                partner_org_id: fact(fold::int_of(r, "partner_org_id"))?,
                platform_station_id: fact(fold::opt_int_of(r, "platform_station_id"))?,
            })
        })
        .transpose()
}

async fn load_line(db: &Db, id: i64) -> Result<Option<OrderBillRef>, ResolveError> {
    let found = rows(db, &LINES, "WHERE line_id = ?", &[Cell::Int(id)]).await?;
    found
        .first()
        .map(|r| {
            Ok(OrderBillRef {
                id,
                order_id: fact(fold::int_of(r, "order_id"))?,
                station_month: StationMonth {
                    station_id: fact(fold::int_of(r, "station_id"))?,
                    month: fact(fold::month_of(r, "bill_yearmonth"))?,
                },
                // A line never published carries no publish identity: it can never
                // equal a master's current one.
                publish_version: fact(fold::opt_int_of(r, "publish_version"))?.unwrap_or(-1),
                submit_round: fact(fold::opt_int_of(r, "submit_round"))?.unwrap_or(-1),
                deleted: fact(fold::int_of(r, "deleted"))? != 0,
            })
        })
        .transpose()
}

async fn load_order(db: &Db, id: i64) -> Result<Option<OrderRef>, ResolveError> {
    let found = rows(db, &ORDERS, "WHERE order_id = ?", &[Cell::Int(id)]).await?;
    found
        .first()
        .map(|r| {
            let order = fact(fold::order_of(r))?;
            Ok(OrderRef {
                id,
                published: order.published,
                publish_version: order.publish_version,
                submit_round: order.submit_round,
                // A voided master is the fact model's "deleted": its lines are no
                // current publication.
                deleted: order.status == OrderStatus::Void,
            })
        })
        .transpose()
}

/// Check one station-month scope's locator against the fact tables (R-BILL-8 **[dev]**:
/// ids that do not belong together are refused at submission, naming the fields) and
/// complete it with the ids it implies.
pub async fn check_scope_locator(
    db: &Db,
    scope: &StationMonthScope,
) -> Result<StationMonthScope, ResolveError> {
    let given = scope.locator;
    if !given.is_exact() {
        return Ok(*scope);
    }
    let diff = match given.diff_id() {
        Some(id) => load_diff(db, id).await?,
        None => None,
    };
    let partner_bill_id = given
        .partner_bill_id()
        .or(diff.and_then(|d| d.partner_bill_id));
    let partner_bill = match partner_bill_id {
        Some(id) => load_partner_bill(db, id).await?,
        None => None,
    };
    let account_id = given
        .partner_account_id()
        .or(partner_bill.map(|b| b.partner_account_id));
    let partner_account = match account_id {
        Some(id) => load_partner_account(db, id).await?,
        None => None,
    };
    let diffs = match partner_bill_id {
        Some(id) if diff.is_none() => diffs_of_partner_bill(db, id).await?,
        _ => Vec::new(),
    };
    let facts = LocatorFacts {
        diff: diff.as_ref(),
        partner_bill: partner_bill.as_ref(),
        partner_account: partner_account.as_ref(),
        diffs_of_partner_bill: &diffs,
    };
    Ok(check_locator(scope, &facts)?)
}

async fn resolve_one_partner_bill(db: &Db, id: i64) -> Result<StationMonth, ResolveError> {
    let bill = load_partner_bill(db, id).await?;
    let account = match bill {
        Some(b) => load_partner_account(db, b.partner_account_id).await?,
        None => None,
    };
    let diffs = diffs_of_partner_bill(db, id).await?;
    Ok(resolve_partner_bill(id, bill.as_ref(), account.as_ref(), &diffs)?.station_month)
}

async fn resolve_one_diff(db: &Db, id: i64) -> Result<StationMonth, ResolveError> {
    let diff = load_diff(db, id).await?;
    let bill = match diff.and_then(|d| d.partner_bill_id) {
        Some(pb) => load_partner_bill(db, pb).await?,
        None => None,
    };
    let account = match bill {
        Some(b) => load_partner_account(db, b.partner_account_id).await?,
        None => None,
    };
    let partner = bill.as_ref().zip(account.as_ref());
    Ok(resolve_diff(id, diff.as_ref(), partner)?.station_month)
}

async fn resolve_one_order_bill(db: &Db, id: i64) -> Result<StationMonth, ResolveError> {
    let line = load_line(db, id).await?;
    let order = match line {
        Some(l) => load_order(db, l.order_id).await?,
        None => None,
    };
    Ok(resolve_order_bill(id, line.as_ref(), order.as_ref())?)
}

/// The station-months of a request's scope, sorted and distinct — every scope type
/// but `ACCOUNT_SCOPE`, which is expanded page by page ([`account_page`]); for it
/// this returns `None`.
pub async fn resolve_station_months(
    db: &Db,
    scope: &RefreshScope,
) -> Result<Option<Vec<StationMonth>>, ResolveError> {
    let mut out = BTreeSet::new();
    match scope {
        RefreshScope::StationMonths(list) => out.extend(list.station_months()),
        RefreshScope::PartnerBills(ids) => {
            for id in ids.as_slice() {
                out.insert(resolve_one_partner_bill(db, *id).await?);
            }
        }
        RefreshScope::Diffs(ids) => {
            for id in ids.as_slice() {
                out.insert(resolve_one_diff(db, *id).await?);
            }
        }
        RefreshScope::OrderBills(ids) => {
            for id in ids.as_slice() {
                out.insert(resolve_one_order_bill(db, *id).await?);
            }
        }
        RefreshScope::Accounts(_) => return Ok(None),
    }
    Ok(Some(out.into_iter().collect()))
}

fn in_list(n: usize) -> String {
    vec!["?"; n].join(", ")
}

/// One page of an account scope after `cursor` (exclusive): at most 100 station-months
/// of the accounts' bills with month ≤ `month_end`, and the next page's cursor.
pub async fn account_page(
    db: &Db,
    scope: &AccountScope,
    cursor: Option<StationMonth>,
) -> Result<(Vec<StationMonth>, Option<StationMonth>), ResolveError> {
    use factledger_projections::bill::refresh::{
        RefreshMode, ACCOUNT_SCOPE_PAGE_STATION_MONTHS_MAX,
    };
    let limit = ACCOUNT_SCOPE_PAGE_STATION_MONTHS_MAX + 1;
    let month_end = Cell::Text(scope.month_end().to_string());
    let after = |station: &str, month: &str| match cursor {
        Some(_) => format!(" AND ({station} > ? OR ({station} = ? AND {month} > ?))"),
        None => String::new(),
    };
    let cursor_args: Vec<Cell> = cursor
        .map(|c| {
            vec![
                Cell::Int(c.station_id),
                Cell::Int(c.station_id),
                Cell::Text(c.month.to_string()),
            ]
        })
        .unwrap_or_default();
    let mut bills = Vec::new();
    let small = scope.small_account_ids();
    if !small.is_empty() {
        let sql = format!(
            "SELECT station_id, bill_yearmonth FROM bill_fact_small_bills \
             WHERE account_id IN ({}) AND bill_yearmonth <= ?{} \
             ORDER BY station_id, bill_yearmonth LIMIT {limit}",
            in_list(small.len()),
            after("station_id", "bill_yearmonth")
        );
        let mut args: Vec<Cell> = small.iter().map(|id| Cell::Int(*id)).collect();
        args.push(month_end.clone());
        args.extend(cursor_args.iter().cloned());
        for sm in select_station_months(db, &sql, &args)
            .await
            .map_err(|e| ResolveError::Fact(e.to_string()))?
        {
            bills.push(AccountBillRef {
                station_month: sm,
                small_account_id: small.first().copied(),
                partner_account_id: None,
                payment_status: None,
            });
        }
    }
    let partner = scope.partner_account_ids();
    if !partner.is_empty() {
        let sql = format!(
            "SELECT d.station_id, d.share_month FROM bill_fact_diffs d \
             JOIN bill_fact_partner_bills pb ON pb.partner_bill_id = d.partner_bill_id \
             WHERE pb.partner_account_id IN ({}) AND d.share_month <= ?{} \
             ORDER BY d.station_id, d.share_month LIMIT {limit}",
            in_list(partner.len()),
            after("d.station_id", "d.share_month")
        );
        let mut args: Vec<Cell> = partner.iter().map(|id| Cell::Int(*id)).collect();
        args.push(month_end);
        args.extend(cursor_args);
        for sm in select_station_months(db, &sql, &args)
            .await
            .map_err(|e| ResolveError::Fact(e.to_string()))?
        {
            bills.push(AccountBillRef {
                station_month: sm,
                small_account_id: None,
                partner_account_id: partner.first().copied(),
                payment_status: None,
            });
        }
    }
    // The SQL already selected the accounts, months and cursor; the pure page rule
    // dedupes, orders and cuts the page (mode is applied per station-month at
    // execution, so skips are counted).
    let page = account_scope_page(scope, RefreshMode::All, &bills, cursor);
    Ok((page.station_months, page.next_cursor))
}
