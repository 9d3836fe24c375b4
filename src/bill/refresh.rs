//! Bill refresh requests as jobs (SPEC R-BILL-8, R-BILL-11; issue 6 items 4 and 7).
//!
//! `POST /v1/bills:refresh` (`api::bill_refresh`) parses a request with the pure
//! rules of `factledger_projections::bill::refresh`, checks its locators and ids
//! against the fact tables (`bill_fact_*`) and submits a [`BILL_REFRESH`] job whose
//! code is the task code `RIPSR:` + MD5 of the business key. [`BillRefreshHandler`]
//! runs one round:
//!
//! 1. resolve the scopes to station-months against the fact tables as they are now —
//!    `ACCOUNT_SCOPE` one page of at most 100 station-months at a time, each page
//!    read after the saved cursor;
//! 2. process the station-months in order, each in its own transaction
//!    ([`bill_projection::recompute_station_months`] with one station-month); a mode
//!    `UNFINISHED` request skips those whose current `payment_status` (read now, at
//!    execution) is finished; after each committed (or skipped) station-month the
//!    progress row `bill_refresh_progress` is saved, fenced by the job's claim, so a
//!    retry of the same request generation resumes after it, and another generation
//!    starts from the first. A failure rolls back that one station-month and fails
//!    the round; nothing committed before it is undone;
//! 3. inspect (R-BILL-11) every station-month this round visited (recomputed, or
//!    skipped by mode: its rows are checked as they stand) and store the
//!    findings in `bill_inspection_findings`; an inspection error is itself recorded
//!    as a finding (`INSPECTION_ERROR`) and never fails the round;
//! 4. order-status reconciliation (R-BILL-9) of the processed station-months'
//!    masters when any merged trigger source is whitelisted (a conflict after two
//!    attempts fails the job; committed station-months stay), then the snapshot
//!    refresh (R-BILL-10) of their bills submitted as its own job (its failure is
//!    reported in the summary, never fails this job).
//!
//! The recomputation itself is not fenced: it is a pure function of the facts, so a
//! stale worker's recompute writes the same rows; only the progress is fenced.

use crate::bill::order_status::{MasterOutcome, OrderStatusManager};
use crate::bill::projection::{facts_of, recompute_station_months, select_station_months};
use crate::infra::db::{Db, Get, Tx};
use crate::infra::jobs::cron::EngineSlot;
use crate::infra::jobs::{ClaimedJob, JobFailure, JobHandler, JobKind, RoundReport};
use crate::infra::store::{time_text, Fence};
use crate::runtime::projector::select_rows;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use factledger_projections::bill::fold;
use factledger_projections::bill::inspect::{inspect, BillTable, ProjectedRow};
use factledger_projections::bill::refresh::{
    account_scope_page, check_locator, resolve_diff, resolve_order_bill, resolve_partner_bill,
    AccountBillRef, AccountScope, DiffRef, LocatorFacts, OrderBillRef, OrderRef, PartnerAccountRef,
    PartnerBillRef, RefreshRequest, RefreshScope, ScopeResolveError, StationMonthScope,
};
use factledger_projections::bill::snapshot::BillKey;
use factledger_projections::bill::tables::{
    CUSTOMER_BILL, CUSTOMER_BILL_PARTNER, DECISIONS, DIFFS, LINES, MONTHLY_INCOME_DIFFERENCE,
    ORDERS, PARTNER_ACCOUNTS, PARTNER_BILLS,
};
use factledger_projections::bill::{OrderStatus, PaymentStatus, StationMonth, YearMonth};
use factledger_projections::table::{Cell, ColType, Column, MemRow, TableDef};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::Arc;

/// Refresh requests run as jobs of this kind; the code prefix is the task code's
/// `RIPSR` (SPEC R-BILL-8), so the job code is the request's task code.
pub static BILL_REFRESH: JobKind = JobKind::new("bill_refresh", "RIPSR");

/// What "now" is for a refresh round: the `found_at` of its findings (injectable).
pub type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// The rule id of a finding recording that an inspection could not run.
pub const INSPECTION_ERROR: &str = "INSPECTION_ERROR";

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

// ---------------------------------------------------------------------------------
// Progress (fenced by the job claim) and findings.

/// The saved progress of a job: the generation and the last station-month done.
pub async fn load_progress(
    db: &Db,
    job_code: &str,
) -> Result<Option<(i64, StationMonth)>, sqlx::Error> {
    let sql = "SELECT generation, last_station_id, last_month FROM bill_refresh_progress \
               WHERE job_code = ?";
    const PROGRESS: &[Column] = &[
        Column {
            name: "generation",
            ty: ColType::Int,
        },
        Column {
            name: "last_station_id",
            ty: ColType::Int,
        },
        Column {
            name: "last_month",
            ty: ColType::Text,
        },
    ];
    let Some(r) = db
        .fetch_optional(sql, &[Cell::text(job_code)], PROGRESS)
        .await?
    else {
        return Ok(None);
    };
    let month = YearMonth::parse(&r.text("last_month")?)
        .map_err(|e| sqlx::Error::Decode(e.to_string().into()))?;
    let station_id = r.int("last_station_id")?;
    Ok(Some((
        r.int("generation")?,
        StationMonth { station_id, month },
    )))
}

/// Save (or, with `None`, clear) the progress, only while `fence` is the job's
/// current claim. False when fenced (nothing written).
async fn save_progress(
    db: &Db,
    fence: Fence,
    job_code: &str,
    progress: Option<(i64, StationMonth)>,
) -> Result<bool, sqlx::Error> {
    let Some(mut tx) = Tx::fenced(db, fence).await? else {
        return Ok(false);
    };
    let clear = "DELETE FROM bill_refresh_progress WHERE job_code = ?";
    tx.exec(clear, &[Cell::text(job_code)]).await?;
    if let Some((generation, sm)) = progress {
        let insert = "INSERT INTO bill_refresh_progress \
                      (job_code, generation, last_station_id, last_month, updated_at) \
                      VALUES (?, ?, ?, ?, ?)";
        let args = [
            Cell::text(job_code),
            Cell::Int(generation),
            Cell::Int(sm.station_id),
            Cell::Text(sm.month.to_string()),
            Cell::Text(time_text(&Utc::now())),
        ];
        tx.exec(insert, &args).await?;
    }
    tx.commit().await?;
    Ok(true)
}

/// One stored finding.
struct FindingRow<'a> {
    job_code: &'a str,
    generation: i64,
    station_month: StationMonth,
    rule_id: &'a str,
    severity: &'a str,
    row: Option<(BillTable, i64)>,
    message: &'a str,
    found_at: &'a str,
}

async fn insert_finding(db: &Db, f: &FindingRow<'_>) -> Result<(), sqlx::Error> {
    let sql = "INSERT INTO bill_inspection_findings (job_code, generation, station_id, \
               bill_yearmonth, rule_id, severity, row_table, row_id, message, found_at) \
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
    let args = [
        Cell::text(f.job_code),
        Cell::Int(f.generation),
        Cell::Int(f.station_month.station_id),
        Cell::Text(f.station_month.month.to_string()),
        Cell::text(f.rule_id),
        Cell::text(f.severity),
        Cell::opt_text(f.row.map(|(t, _)| t.name())),
        f.row.map_or(Cell::Null, |(_, id)| Cell::Int(id)),
        Cell::text(f.message),
        Cell::text(f.found_at),
    ];
    db.exec(sql, &args).await.map(|_| ())
}

/// A stored finding, as `GET /v1/bills/inspections` serves it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StoredFinding {
    pub id: i64,
    pub job_code: String,
    pub generation: i64,
    pub station_id: i64,
    pub bill_month: String,
    pub rule_id: String,
    pub severity: String,
    pub row_table: Option<String>,
    pub row_id: Option<i64>,
    pub message: String,
    pub found_at: String,
}

/// Stored findings, optionally of one station, month and job, in id order after
/// `after_id`, at most `limit`.
pub async fn list_findings(
    db: &Db,
    station_id: Option<i64>,
    month: Option<YearMonth>,
    job_code: Option<&str>,
    after_id: i64,
    limit: i64,
) -> Result<Vec<StoredFinding>, sqlx::Error> {
    let mut sql = String::from(
        "SELECT id, job_code, generation, station_id, bill_yearmonth, rule_id, severity, \
         row_table, row_id, message, found_at FROM bill_inspection_findings WHERE id > ?",
    );
    if station_id.is_some() {
        sql.push_str(" AND station_id = ?");
    }
    if month.is_some() {
        sql.push_str(" AND bill_yearmonth = ?");
    }
    if job_code.is_some() {
        sql.push_str(" AND job_code = ?");
    }
    sql.push_str(" ORDER BY id LIMIT ?");
    macro_rules! go {
        ($p:expr) => {{
            use crate::infra::db::RowText;
            use sqlx::Row;
            let mut q = sqlx::query(&sql).bind(after_id);
            if let Some(s) = station_id {
                q = q.bind(s);
            }
            if let Some(m) = month {
                q = q.bind(m.to_string());
            }
            if let Some(j) = job_code {
                q = q.bind(j.to_owned());
            }
            let rows = q.bind(limit).fetch_all($p).await?;
            rows.iter()
                .map(|r| {
                    Ok(StoredFinding {
                        id: r.try_get(0)?,
                        job_code: r.text(1)?,
                        generation: r.try_get(2)?,
                        station_id: r.try_get(3)?,
                        bill_month: r.text(4)?,
                        rule_id: r.text(5)?,
                        severity: r.text(6)?,
                        row_table: r.opt_text(7)?,
                        row_id: r.try_get(8)?,
                        message: r.text(9)?,
                        found_at: r.text(10)?,
                    })
                })
                .collect()
        }};
    }
    match db {
        Db::Mysql(p) => go!(p),
        Db::Sqlite(p) => go!(p),
    }
}

// ---------------------------------------------------------------------------------
// Reading the projected rows.

/// The projected rows of a station-month: small bill, partner bill (decided by it),
/// diff — all columns.
async fn projected(db: &Db, sm: StationMonth) -> Result<Vec<(BillTable, MemRow)>, sqlx::Error> {
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
fn changed_rows(before: &[(BillTable, MemRow)], after: &[(BillTable, MemRow)]) -> usize {
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

/// A projected row as the inspection reads it; `None` while its decision failed (the
/// payment projection is NULL and the failure is a decision finding already).
fn projected_row(table: BillTable, row: &MemRow) -> Result<Option<ProjectedRow>, String> {
    let Some(status) = fold::opt_int_of(row, "payment_status")? else {
        return Ok(None);
    };
    let current = match table {
        BillTable::SmallBill => None,
        _ => fold::opt_int_of(row, "current_payment_amount")?,
    };
    Ok(Some(ProjectedRow {
        table,
        row_id: fold::int_of(row, "id")?,
        payment_status_code: i32::try_from(status).unwrap_or(i32::MIN),
        paid_amount_minor: fold::opt_int_of(row, "paid_amount")?.unwrap_or(0),
        cumulative_paid_amount_minor: fold::opt_int_of(row, "cumulative_paid_amount")?.unwrap_or(0),
        current_payment_amount_minor: current,
        locked_payment_order_id: fold::opt_int_of(row, "locked_payment_order_id")?,
        locked_order_bill_id: fold::opt_int_of(row, "locked_order_bill_id")?,
    }))
}

/// The station-month's current projected `payment_status` (its decision), read now;
/// `None` when it has none (never projected, or its decision failed).
async fn current_status(db: &Db, sm: StationMonth) -> Result<Option<PaymentStatus>, sqlx::Error> {
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

// ---------------------------------------------------------------------------------
// Downstream steps (R-BILL-8: "then order-status reconciliation, then snapshot
// refresh"). Either failing fails the job; nothing committed is undone.

impl BillRefreshHandler {
    /// R-BILL-9 after the run, when any (merged) trigger source is whitelisted: the
    /// masters of the processed station-months reconciled, each its own unit.
    async fn reconcile_order_status_after_refresh(
        &self,
        request: &RefreshRequest,
        processed: &[StationMonth],
    ) -> Result<Value, JobFailure> {
        let source = request
            .trigger_sources()
            .iter()
            .copied()
            .find(|s| s.reconciles_order_status());
        let (Some(source), Some(orders)) = (source, &self.orders) else {
            return Ok(json!({"ran": false, "reason": "no whitelisted trigger source"}));
        };
        let outcomes = orders
            .reconcile_station_months(processed, source)
            .await
            .map_err(|e| JobFailure::new(format!("order-status reconciliation: {e}")))?;
        let mut counts = std::collections::BTreeMap::<&str, u64>::new();
        let mut conflicts = Vec::new();
        for o in &outcomes {
            let kind = match o {
                MasterOutcome::Applied { .. } => "applied",
                MasterOutcome::Unchanged { .. } => "unchanged",
                MasterOutcome::Conflict { order_id, .. } => {
                    conflicts.push(*order_id);
                    "conflict"
                }
            };
            *counts.entry(kind).or_default() += 1;
        }
        if !conflicts.is_empty() {
            return Err(JobFailure::new(format!(
                "order-status reconciliation: compare-and-set conflict on payment orders \
                 {conflicts:?} after {} attempts",
                factledger_projections::bill::order_status::RECONCILE_ATTEMPTS_MAX
            )));
        }
        Ok(
            json!({"ran": true, "trigger_source": source, "masters": outcomes.len(),
                  "outcomes": counts}),
        )
    }

    /// R-BILL-10: submit the snapshot refresh of the processed station-months' bills
    /// (a diff's bill when it has a diff, else the station-month's), at the job's
    /// generation. Its own job: its failure never fails this one.
    async fn refresh_snapshots_after_refresh(
        &self,
        generation: i64,
        processed: &[StationMonth],
    ) -> Value {
        let Some(engine) = self
            .engine
            .as_ref()
            .and_then(|s| s.get())
            .and_then(|w| w.upgrade())
        else {
            return json!({"submitted": false, "reason": "no job engine (shutting down)"});
        };
        let mut bills = Vec::new();
        for sm in processed {
            let diffs = select_rows(
                &self.projections,
                &DIFFS,
                "WHERE station_id = ? AND share_month = ?",
                &[Cell::Int(sm.station_id), Cell::text(sm.month.to_string())],
            )
            .await;
            match diffs
                .as_deref()
                .map(|d| d.first().and_then(|d| fold::int_of(d, "diff_id").ok()))
            {
                Ok(Some(id)) => bills.push(BillKey::Diff(id)),
                Ok(None) => bills.push(BillKey::StationMonth(*sm)),
                Err(e) => return json!({"submitted": false, "error": e.to_string()}),
            }
        }
        if bills.is_empty() {
            return json!({"submitted": false, "reason": "no station-month processed"});
        }
        match crate::bill::snapshots::submit_snapshot_refresh(&engine, &bills, generation).await {
            Ok(jobs) => json!({"submitted": true, "bills": bills.len(), "jobs": jobs}),
            Err(e) => {
                tracing::warn!(error = %e, "snapshot refresh not submitted");
                json!({"submitted": false, "error": e.to_string()})
            }
        }
    }
}

// ---------------------------------------------------------------------------------
// The handler.

/// The handler of [`BILL_REFRESH`]: one round of one refresh request.
pub struct BillRefreshHandler {
    db: Db,
    projections: Db,
    clock: Clock,
    /// R-BILL-9 after each run (none: not run, said in the summary).
    orders: Option<OrderStatusManager>,
    /// Submits the R-BILL-10 snapshot refresh after each run.
    engine: Option<EngineSlot>,
}

impl BillRefreshHandler {
    pub fn new(db: Db, projections: Db) -> Self {
        BillRefreshHandler {
            db,
            projections,
            clock: Arc::new(Utc::now),
            orders: None,
            engine: None,
        }
    }

    /// Run order-status reconciliation and submit the snapshot refresh after each run
    /// (what `serve` does).
    pub fn with_downstream(mut self, orders: OrderStatusManager, engine: EngineSlot) -> Self {
        self.orders = Some(orders);
        self.engine = Some(engine);
        self
    }

    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }
}

/// A finding to store: rule id, severity, row, message.
type FindingFields = (String, String, Option<(BillTable, i64)>, String);

/// Counts of one round.
#[derive(Debug, Default)]
struct Tally {
    done: usize,
    skipped: usize,
    changed_rows: usize,
    /// Recomputed this round.
    processed: Vec<StationMonth>,
    /// Recomputed or skipped this round: what the inspection checks.
    visited: Vec<StationMonth>,
}

impl Tally {
    fn so_far(&self) -> String {
        format!(
            "{} station-months committed, {} skipped, {} rows changed before it",
            self.done, self.skipped, self.changed_rows
        )
    }
}

impl BillRefreshHandler {
    async fn save(&self, job: &ClaimedJob, sm: StationMonth) -> Result<(), JobFailure> {
        let saved = save_progress(&self.db, job.fence(), &job.code, Some((job.generation, sm)))
            .await
            .map_err(|e| JobFailure::new(format!("saving the refresh progress after {sm}: {e}")))?;
        if saved {
            Ok(())
        } else {
            Err(JobFailure {
                fenced: true,
                ..JobFailure::new("the refresh progress was not saved: the job claim is gone")
            })
        }
    }

    /// Recompute one station-month (or skip it by mode) and save the progress.
    async fn step(
        &self,
        job: &ClaimedJob,
        request: &RefreshRequest,
        sm: StationMonth,
        tally: &mut Tally,
    ) -> Result<(), JobFailure> {
        if job.claim_lost() {
            return Err(JobFailure {
                fenced: true,
                ..JobFailure::new(format!("the job claim was lost before {sm}"))
            });
        }
        let status = current_status(&self.projections, sm)
            .await
            .map_err(|e| JobFailure::new(format!("{sm}: reading its payment_status: {e}")))?;
        tally.visited.push(sm);
        if !request.mode().admits(status) {
            tally.skipped += 1;
            return self.save(job, sm).await;
        }
        let before = projected(&self.projections, sm)
            .await
            .map_err(|e| JobFailure::new(format!("{sm}: reading its rows: {e}")))?;
        recompute_station_months(&self.projections, &[sm])
            .await
            .map_err(|e| {
                JobFailure::new(format!(
                    "{sm}: recomputation failed and was rolled back ({}): {e}",
                    tally.so_far()
                ))
            })?;
        let after = projected(&self.projections, sm)
            .await
            .map_err(|e| JobFailure::new(format!("{sm}: reading its rows: {e}")))?;
        tally.changed_rows += changed_rows(&before, &after);
        tally.done += 1;
        tally.processed.push(sm);
        self.save(job, sm).await
    }

    /// R-BILL-11 over the station-months this round visited; findings stored.
    /// Never fails: an error is recorded as a finding (or, failing that, logged).
    async fn inspect_all(&self, job: &ClaimedJob, station_months: &[StationMonth]) -> Value {
        let found_at = time_text(&(self.clock)());
        let (mut findings, mut errors) = (0usize, 0usize);
        for sm in station_months {
            let result = self.inspect_one(*sm).await;
            let rows: Vec<FindingFields> = match result {
                Ok(fs) => fs
                    .into_iter()
                    .map(|f| {
                        (
                            f.rule.id().to_owned(),
                            format!("{:?}", f.severity).to_uppercase(),
                            f.row,
                            f.message,
                        )
                    })
                    .collect(),
                Err(e) => {
                    errors += 1;
                    tracing::warn!(job = %job.code, station_month = %sm, error = %e, "bill inspection failed");
                    vec![(INSPECTION_ERROR.to_owned(), "ERROR".to_owned(), None, e)]
                }
            };
            for (rule_id, severity, row, message) in rows {
                if rule_id != INSPECTION_ERROR {
                    findings += 1;
                }
                let f = FindingRow {
                    job_code: &job.code,
                    generation: job.generation,
                    station_month: *sm,
                    rule_id: &rule_id,
                    severity: &severity,
                    row,
                    message: &message,
                    found_at: &found_at,
                };
                if let Err(e) = insert_finding(&self.db, &f).await {
                    errors += 1;
                    tracing::warn!(job = %job.code, station_month = %sm, rule = %rule_id,
                        finding = %message, error = %e, "a bill inspection finding was not stored");
                }
            }
        }
        json!({
            "station_months": station_months.len(),
            "findings": findings,
            "errors": errors,
        })
    }

    async fn inspect_one(
        &self,
        sm: StationMonth,
    ) -> Result<Vec<factledger_projections::bill::inspect::Finding>, String> {
        let Some(facts) = facts_of(&self.projections, sm)
            .await
            .map_err(|e| format!("assembling the facts: {e}"))?
        else {
            return Ok(Vec::new());
        };
        let mut rows = Vec::new();
        for (table, row) in projected(&self.projections, sm)
            .await
            .map_err(|e| format!("reading the rows: {e}"))?
        {
            if let Some(r) = projected_row(table, &row)? {
                rows.push(r);
            }
        }
        inspect(&facts, &rows).map_err(|e| e.to_string())
    }
}

#[async_trait]
impl JobHandler for BillRefreshHandler {
    async fn run(&self, job: &ClaimedJob) -> Result<RoundReport, JobFailure> {
        let request = RefreshRequest::parse(&job.payload).map_err(|e| JobFailure {
            exhaust: true,
            ..JobFailure::new(format!("the stored request no longer parses: {e}"))
        })?;
        request
            .check_identity(&job.business_key, &job.code)
            .map_err(|e| JobFailure {
                exhaust: true,
                ..JobFailure::new(e.to_string())
            })?;
        let progress = load_progress(&self.db, &job.code)
            .await
            .map_err(|e| JobFailure::new(format!("reading the refresh progress: {e}")))?;
        // Another generation is another request: start from the first station-month.
        let resume_after = progress
            .filter(|(generation, _)| *generation == job.generation)
            .map(|(_, sm)| sm);
        let mut tally = Tally::default();
        let resolve_failed =
            |e: ResolveError| JobFailure::new(format!("resolving the scopes: {e}"));
        let (scopes_resolved, station_months_resolved, pages) =
            match resolve_station_months(&self.projections, request.scope())
                .await
                .map_err(resolve_failed)?
            {
                Some(list) => {
                    let n = list.len();
                    for sm in list.into_iter().filter(|sm| Some(*sm) > resume_after) {
                        self.step(job, &request, sm, &mut tally).await?;
                    }
                    (n, n, 0usize)
                }
                None => {
                    let RefreshScope::Accounts(scope) = request.scope() else {
                        return Err(JobFailure::new("an id scope resolved as an account scope"));
                    };
                    let (mut cursor, mut n, mut pages) = (resume_after, 0usize, 0usize);
                    loop {
                        let (page, next) = account_page(&self.projections, scope, cursor)
                            .await
                            .map_err(resolve_failed)?;
                        pages += 1;
                        n += page.len();
                        for sm in &page {
                            self.step(job, &request, *sm, &mut tally).await?;
                        }
                        match next {
                            Some(c) => cursor = Some(c),
                            None => break,
                        }
                    }
                    (request.scope().count(), n, pages)
                }
            };
        let inspection = self.inspect_all(job, &tally.visited).await;
        let reconciliation = self
            .reconcile_order_status_after_refresh(&request, &tally.processed)
            .await?;
        let snapshots = self
            .refresh_snapshots_after_refresh(job.generation, &tally.processed)
            .await;
        // The round is complete: the next run of this job (a new generation) starts over.
        if !save_progress(&self.db, job.fence(), &job.code, None)
            .await
            .map_err(|e| JobFailure::new(format!("clearing the refresh progress: {e}")))?
        {
            return Err(JobFailure {
                fenced: true,
                ..JobFailure::new("the refresh progress was not cleared: the job claim is gone")
            });
        }
        let mut notes = Vec::new();
        if scopes_resolved == 0 || station_months_resolved == 0 {
            notes.push("resolved 0 scopes");
        }
        if tally.changed_rows == 0 {
            notes.push("changed 0 rows");
        }
        tracing::info!(job = %job.code, done = tally.done, skipped = tally.skipped,
            changed_rows = tally.changed_rows, "bill refresh round");
        Ok(RoundReport::done(json!({
            "business_key": request.business_key().as_str(),
            "scope_type": request.scope().scope_type().name(),
            "mode": request.mode().as_str(),
            "scopes_resolved": scopes_resolved,
            "station_months_resolved": station_months_resolved,
            "account_scope_pages": pages,
            "resumed_after": resume_after.map(|sm| sm.to_string()),
            "station_months_done": tally.done,
            "station_months_skipped": tally.skipped,
            "changed_rows": tally.changed_rows,
            "processed": tally.processed.iter().map(|sm| sm.to_string()).collect::<Vec<_>>(),
            "inspection": inspection,
            "order_status_reconciliation": reconciliation,
            "snapshot_refresh": snapshots,
            "notes": notes,
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worker whose claim was recovered and re-claimed (the attempt moved on) or
    /// whose job is no longer running cannot save or clear the progress: a retry then
    /// resumes after what the current claim committed, never after a stale round's.
    #[tokio::test]
    async fn a_stale_worker_cannot_save_or_clear_the_progress() {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("t.db").display());
        let db = crate::infra::store::open(&url).await.expect("open").db;
        let Db::Sqlite(pool) = &db else {
            panic!("a SQLite database")
        };
        sqlx::query(
            "INSERT INTO jobs (id, kind, code, business_key, payload, status, retry_count, \
             max_retry_count, next_execute_at_ms, request_generation, running_generation, \
             running_attempt, created_at_ms, updated_at_ms) \
             VALUES (1, 'bill_refresh', 'RIPSR:x', 'k', '{}', 1, 0, 3, 0, 0, 0, 2, 0, 0)",
        )
        .execute(pool)
        .await
        .expect("job");
        let code = "RIPSR:x";
        let sm = |station_id| StationMonth {
            station_id,
            month: YearMonth::parse("202609").expect("month"),
        };
        let (stale, current) = (
            Fence {
                job_id: 1,
                running_attempt: 1,
            },
            Fence {
                job_id: 1,
                running_attempt: 2,
            },
        );
        let saved = |fence, progress| save_progress(&db, fence, code, progress);

        assert!(!saved(stale, Some((0, sm(31)))).await.expect("save"));
        assert_eq!(load_progress(&db, code).await.expect("load"), None);
        assert!(saved(current, Some((0, sm(31)))).await.expect("save"));
        assert!(!saved(stale, Some((0, sm(32)))).await.expect("save"));
        assert!(!saved(stale, None).await.expect("clear"));
        assert_eq!(
            load_progress(&db, code).await.expect("load"),
            Some((0, sm(31)))
        );

        // A job no longer running refuses its own last claim too.
        sqlx::query("UPDATE jobs SET status = 2 WHERE id = 1")
            .execute(pool)
            .await
            .expect("finish");
        assert!(!saved(current, Some((0, sm(33)))).await.expect("save"));
        assert_eq!(
            load_progress(&db, code).await.expect("load"),
            Some((0, sm(31)))
        );
    }
}
