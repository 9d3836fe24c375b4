//! Inspection after a refresh round (R-BILL-11): every visited station-month's facts
//! and projected rows checked by the pure `inspect`, its findings stored in
//! `bill_inspection_findings` (an inspection error is itself a finding), and the
//! stored findings listed for `GET /v1/bills/inspections`.

use super::projected::projected;
use super::{BillRefreshHandler, INSPECTION_ERROR};
use crate::bill::projection::facts_of;
use crate::infra::db::Db;
use crate::infra::jobs::ClaimedJob;
use crate::infra::store::time_text;
use factledger_projections::bill::fold;
use factledger_projections::bill::inspect::{inspect, BillTable, Finding, ProjectedRow};
use factledger_projections::bill::{StationMonth, YearMonth};
use factledger_projections::table::{Cell, MemRow};
use serde_json::{json, Value};

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

/// A finding to store: rule id, severity, row, message.
type FindingFields = (String, String, Option<(BillTable, i64)>, String);

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

impl BillRefreshHandler {
    /// R-BILL-11 over the station-months this round visited; findings stored.
    /// Never fails: an error is recorded as a finding (or, failing that, logged).
    pub(super) async fn inspect_all(
        &self,
        job: &ClaimedJob,
        station_months: &[StationMonth],
    ) -> Value {
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

    async fn inspect_one(&self, sm: StationMonth) -> Result<Vec<Finding>, String> {
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
