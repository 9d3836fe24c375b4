//! Bill-dimension snapshots (SPEC R-BILL-10; issue 6 item 6): the projection table
//! `bill_dimension_snapshot` (migration `0016`), one row per bill (a diff, or a
//! station-month).
//!
//! - **Creation** ([`insert_on_approval`]): when a payment order is approved
//!   (`PaymentOrderApproved`, followed by the order-status process manager behind the
//!   bill projector), each approved payable line's bill gets its row with the planned
//!   amount frozen then; an existing row is kept (its planned amount is never
//!   rewritten). This is what "existing" means for EXISTING_ONLY.
//! - **Refresh** (job kind [`BILL_SNAPSHOT_REFRESH`], [`SnapshotRefreshHandler`]): the
//!   claim freezes the request (its bills and refresh version), the generation and the
//!   lease (10 min); a round refreshes at most 100 bills after the saved cursor
//!   (`snapshot::snapshot_page`) from the fact tables (`snapshot::aggregate`,
//!   `snapshot::refresh_existing`: a bill with no row is skipped and counted) and saves
//!   the cursor in `bill_snapshot_progress` in the same transaction, fenced by the
//!   claim. More pages: the round bumps the job's request generation in that
//!   transaction, so the engine sends it back to PENDING (a newer generation from
//!   outside does the same, and restarts from the first bill).
//!   [`submit_snapshot_refresh`] is how a refresh request submits one.

use crate::infra::db::{Db, Fence, Tx};
use crate::infra::jobs::engine::{ClaimedJob, JobFailure, JobHandler, RoundReport};
use crate::infra::jobs::{JobError, JobKind, JobSubmit};
use crate::infra::store::{time_text, StoreError};
use crate::runtime::projection::RunnerError;
use crate::runtime::projector::select_rows;
use async_trait::async_trait;
use factledger_projections::bill::fold::{int_of, line_of, opt_int_of, order_of, text_of};
use factledger_projections::bill::order_status::LineResult;
use factledger_projections::bill::snapshot::{
    after_round, aggregate, refresh_existing, snapshot_page, BillKey, BillSnapshot, SnapshotCounts,
    SnapshotJobNext, SnapshotPage, SnapshotRefresh, SnapshotStatus, SNAPSHOT_LEASE_MS_DEFAULT,
};
use factledger_projections::bill::tables::{DIFFS, LINES, ORDERS, RESULTS};
use factledger_projections::bill::{ResultSource, ResultStatus, ResultType, StationMonth};
use factledger_projections::table::{Cell, ColType, Column, MemRow, TableDef};
use serde_json::{json, Value};
use std::collections::BTreeSet;

/// The snapshot refresh job (R-BILL-10): lease 10 minutes (seed §7.4).
pub static BILL_SNAPSHOT_REFRESH: JobKind = JobKind {
    lease_ms: SNAPSHOT_LEASE_MS_DEFAULT,
    ..JobKind::new("bill_snapshot_refresh", "BSNAP")
};

/// Bills per submitted job: keeps the payload far below the payload limits.
pub const SUBMIT_BILLS_PER_JOB_MAX: usize = 400;

const fn col(name: &'static str, ty: ColType) -> Column {
    Column { name, ty }
}

/// `bill_dimension_snapshot` (migrations/*/0016).
pub const SNAPSHOTS: TableDef = TableDef {
    name: "bill_dimension_snapshot",
    key: &["bill_key"],
    columns: &[
        col("bill_key", ColType::Text),
        col("diff_id", ColType::OptInt),
        col("station_id", ColType::OptInt),
        col("bill_yearmonth", ColType::OptText),
        col("order_id", ColType::Int),
        col("planned_amount", ColType::Int),
        col("paid_amount", ColType::Int),
        col("paid_count", ColType::Int),
        col("failed_amount", ColType::Int),
        col("failed_count", ColType::Int),
        col("status", ColType::Text),
        col("latest_paid_at", ColType::OptText),
        col("source", ColType::OptText),
        col("refresh_version", ColType::Int),
        col("payment_diff", ColType::Int),
        col("approved_at", ColType::Text),
    ],
};

const PROGRESS: TableDef = TableDef {
    name: "bill_snapshot_progress",
    key: &["job_code"],
    columns: &[
        col("job_code", ColType::Text),
        col("generation", ColType::Int),
        col("cursor_key", ColType::OptText),
    ],
};

/// `DIFF:<id>` or `STATION_MONTH:<station_id>:<yyyymm>` (the `Display` of [`BillKey`]).
pub fn parse_bill_key(s: &str) -> Option<BillKey> {
    if let Some(id) = s.strip_prefix("DIFF:") {
        return id
            .parse()
            .ok()
            .filter(|id: &i64| *id > 0)
            .map(BillKey::Diff);
    }
    let sm = s.strip_prefix("STATION_MONTH:")?;
    StationMonth::parse(sm).ok().map(BillKey::StationMonth)
}

fn status_text(s: SnapshotStatus) -> &'static str {
    match s {
        SnapshotStatus::NoPayment => "NO_PAYMENT",
        SnapshotStatus::AwaitingPayment => "AWAITING_PAYMENT",
        SnapshotStatus::Paid => "PAID",
        SnapshotStatus::PartiallyPaid => "PARTIALLY_PAID",
        SnapshotStatus::Failed => "FAILED",
    }
}

fn parse_status(s: &str) -> Result<SnapshotStatus, StoreError> {
    Ok(match s {
        "NO_PAYMENT" => SnapshotStatus::NoPayment,
        "AWAITING_PAYMENT" => SnapshotStatus::AwaitingPayment,
        "PAID" => SnapshotStatus::Paid,
        "PARTIALLY_PAID" => SnapshotStatus::PartiallyPaid,
        "FAILED" => SnapshotStatus::Failed,
        other => return Err(corrupt(format!("status {other:?}"))),
    })
}

fn source_text(s: ResultSource) -> &'static str {
    match s {
        ResultSource::Treasury => "TREASURY",
        ResultSource::OfflineImport => "OFFLINE_IMPORT",
        ResultSource::FailFallback => "FAIL_FALLBACK",
        ResultSource::Other => "OTHER",
    }
}

fn parse_source(s: &str) -> Result<ResultSource, StoreError> {
    Ok(match s {
        "TREASURY" => ResultSource::Treasury,
        "OFFLINE_IMPORT" => ResultSource::OfflineImport,
        "FAIL_FALLBACK" => ResultSource::FailFallback,
        "OTHER" => ResultSource::Other,
        other => return Err(corrupt(format!("source {other:?}"))),
    })
}

fn corrupt(what: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("bill snapshot: {what}"))
}

fn parse_time(s: &str) -> Result<chrono::DateTime<chrono::Utc>, StoreError> {
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&chrono::Utc))
        .map_err(|e| corrupt(format!("time {s}: {e}")))
}

/// Insert the snapshot rows of an approved order (from its `PaymentOrderApproved`
/// event): one per approved payable line's bill, planned amount frozen; a bill that
/// has a row keeps it. Idempotent (the process manager may replay the event).
pub async fn insert_on_approval(
    db: &Db,
    order_id: i64,
    planned: &[(i64, i64)],
    approved_at: &str,
) -> Result<u32, RunnerError> {
    let mut inserted = 0u32;
    for (line_id, planned_minor) in planned {
        let Some(line) = select_rows(db, &LINES, "WHERE line_id = ?", &[Cell::Int(*line_id)])
            .await?
            .into_iter()
            .next()
        else {
            continue;
        };
        if text_of(&line, "kind").map_err(corrupt)? != "PAYABLE" {
            continue;
        }
        let station_id = int_of(&line, "station_id").map_err(corrupt)?;
        let month = text_of(&line, "bill_yearmonth")
            .map_err(corrupt)?
            .to_owned();
        let diff = select_rows(
            db,
            &DIFFS,
            "WHERE station_id = ? AND share_month = ?",
            &[Cell::Int(station_id), Cell::text(month.clone())],
        )
        .await?;
        let diff_id = match diff.first() {
            Some(d) => Some(int_of(d, "diff_id").map_err(corrupt)?),
            None => None,
        };
        let key = match diff_id {
            Some(id) => format!("DIFF:{id}"),
            None => format!("STATION_MONTH:{station_id}:{month}"),
        };
        let exists = !select_rows(
            db,
            &SNAPSHOTS,
            "WHERE bill_key = ? OR (station_id = ? AND bill_yearmonth = ?)",
            &[
                Cell::text(key.clone()),
                Cell::Int(station_id),
                Cell::text(month.clone()),
            ],
        )
        .await?
        .is_empty();
        if exists {
            continue;
        }
        let sql = "INSERT INTO bill_dimension_snapshot (bill_key, diff_id, station_id, \
                   bill_yearmonth, order_id, planned_amount, paid_amount, paid_count, \
                   failed_amount, failed_count, status, latest_paid_at, source, \
                   refresh_version, payment_diff, approved_at) \
                   VALUES (?, ?, ?, ?, ?, ?, 0, 0, 0, 0, ?, NULL, NULL, 0, ?, ?)";
        let args = [
            Cell::text(key),
            diff_id.map_or(Cell::Null, Cell::Int),
            Cell::Int(station_id),
            Cell::text(month),
            Cell::Int(order_id),
            Cell::Int(*planned_minor),
            Cell::text(status_text(SnapshotStatus::AwaitingPayment)),
            Cell::Int(0i64.saturating_sub(*planned_minor)),
            Cell::text(approved_at),
        ];
        let done = db.exec(sql, &args).await;
        match done {
            Ok(_) => inserted += 1,
            // A concurrent replay inserted it first: the row stands.
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(inserted)
}

/// Submit (as a fact change) the snapshot refresh of these bills at `generation`
/// (the refresh version stamped on the rows). Bills are sorted and deduplicated;
/// more than [`SUBMIT_BILLS_PER_JOB_MAX`] go to several jobs. Returns the job codes.
pub async fn submit_snapshot_refresh(
    engine: &crate::infra::jobs::Engine,
    bills: &[BillKey],
    generation: i64,
) -> Result<Vec<String>, JobError> {
    let bills: BTreeSet<BillKey> = bills.iter().copied().collect();
    let bills: Vec<BillKey> = bills.into_iter().collect();
    let mut codes = Vec::new();
    for chunk in bills.chunks(SUBMIT_BILLS_PER_JOB_MAX) {
        let keys: Vec<String> = chunk.iter().map(ToString::to_string).collect();
        let business_key = format!(
            "bill_snapshot:{}",
            crate::infra::jobs::md5_hex(&keys.join(","))
        );
        let payload = json!({"bills": keys, "refresh_version": generation});
        let code = engine
            .submit(&JobSubmit::fact_change(
                &BILL_SNAPSHOT_REFRESH,
                business_key,
                payload,
            ))
            .await?;
        codes.push(code);
    }
    Ok(codes)
}

/// The station-month snapshot's bill reads (its diff's station-month for a diff).
async fn station_month_of(
    db: &Db,
    bill: BillKey,
    existing: Option<&MemRow>,
) -> Result<Option<(i64, String)>, RunnerError> {
    match bill {
        BillKey::StationMonth(sm) => Ok(Some((sm.station_id, sm.month.to_string()))),
        BillKey::Diff(id) => {
            let rows = select_rows(db, &DIFFS, "WHERE diff_id = ?", &[Cell::Int(id)]).await?;
            if let Some(d) = rows.first() {
                return Ok(Some((
                    int_of(d, "station_id").map_err(corrupt)?,
                    text_of(d, "share_month").map_err(corrupt)?.to_owned(),
                )));
            }
            Ok(match existing {
                Some(r) => match (
                    opt_int_of(r, "station_id").map_err(corrupt)?,
                    r.get("bill_yearmonth"),
                ) {
                    (Some(s), Some(Cell::Text(m))) => Some((s, m.clone())),
                    _ => None,
                },
                None => None,
            })
        }
    }
}

async fn existing_row(db: &Db, bill: BillKey) -> Result<Option<MemRow>, RunnerError> {
    let rows = match bill {
        BillKey::Diff(id) => {
            select_rows(db, &SNAPSHOTS, "WHERE diff_id = ?", &[Cell::Int(id)]).await?
        }
        BillKey::StationMonth(sm) => {
            select_rows(
                db,
                &SNAPSHOTS,
                "WHERE station_id = ? AND bill_yearmonth = ?",
                &[Cell::Int(sm.station_id), Cell::text(sm.month.to_string())],
            )
            .await?
        }
    };
    Ok(rows.into_iter().next())
}

fn snapshot_of(bill: BillKey, r: &MemRow) -> Result<BillSnapshot, StoreError> {
    let count = |c: &str| -> Result<u32, StoreError> {
        Ok(u32::try_from(int_of(r, c).map_err(corrupt)?).unwrap_or(u32::MAX))
    };
    let opt_text = |c: &str| match r.get(c) {
        Some(Cell::Text(s)) => Some(s.clone()),
        _ => None,
    };
    Ok(BillSnapshot {
        bill,
        planned_amount_minor: int_of(r, "planned_amount").map_err(corrupt)?,
        paid_amount_minor: int_of(r, "paid_amount").map_err(corrupt)?,
        paid_count: count("paid_count")?,
        failed_amount_minor: int_of(r, "failed_amount").map_err(corrupt)?,
        failed_count: count("failed_count")?,
        status: parse_status(text_of(r, "status").map_err(corrupt)?)?,
        latest_paid_at: opt_text("latest_paid_at")
            .map(|s| parse_time(&s))
            .transpose()?,
        source: opt_text("source").map(|s| parse_source(&s)).transpose()?,
        refresh_version: int_of(r, "refresh_version").map_err(corrupt)?,
        payment_diff_minor: int_of(r, "payment_diff").map_err(corrupt)?,
    })
}

/// One bill's refresh, decided on the fact tables; `Some((bill_key, row))` to write.
async fn refresh_one(
    db: &Db,
    bill: BillKey,
    refresh_version: i64,
) -> Result<(SnapshotRefresh, Option<String>), RunnerError> {
    let row = existing_row(db, bill).await?;
    let existing = row.as_ref().map(|r| snapshot_of(bill, r)).transpose()?;
    let key = row
        .as_ref()
        .map(|r| text_of(r, "bill_key").map(str::to_owned))
        .transpose()
        .map_err(corrupt)?;
    let mut lines = Vec::new();
    let mut orders = Vec::new();
    let mut results = Vec::new();
    if row.is_some() {
        if let Some((station_id, month)) = station_month_of(db, bill, row.as_ref()).await? {
            let line_rows = select_rows(
                db,
                &LINES,
                "WHERE station_id = ? AND bill_yearmonth = ? ORDER BY line_id",
                &[Cell::Int(station_id), Cell::text(month)],
            )
            .await?;
            let mut order_ids = BTreeSet::new();
            for r in &line_rows {
                if let Some(l) = line_of(r).map_err(corrupt)? {
                    order_ids.insert(l.order_id);
                    for rr in
                        select_rows(db, &RESULTS, "WHERE line_id = ?", &[Cell::Int(l.id)]).await?
                    {
                        results.push(fact_result(&rr)?);
                    }
                    lines.push(l);
                }
            }
            for id in order_ids {
                for r in select_rows(db, &ORDERS, "WHERE order_id = ?", &[Cell::Int(id)]).await? {
                    orders.push(order_of(&r).map_err(corrupt)?);
                }
            }
        }
    }
    let agg = aggregate(bill, &orders, &lines, &results).map_err(corrupt)?;
    let refreshed =
        refresh_existing(bill, existing.as_ref(), &agg, refresh_version).map_err(corrupt)?;
    Ok((refreshed, key))
}

fn fact_result(r: &MemRow) -> Result<LineResult, StoreError> {
    let p = factledger_projections::bill::fold::result_of(r).map_err(corrupt)?;
    Ok(LineResult {
        result_id: p.id,
        line_id: opt_int_of(r, "line_id").map_err(corrupt)?.unwrap_or(0),
        status: match p.status {
            ResultStatus::Paying => ResultStatus::Paying,
            ResultStatus::Success => ResultStatus::Success,
            ResultStatus::Fail => ResultStatus::Fail,
        },
        kind: match p.kind {
            ResultType::NormalPayment => ResultType::NormalPayment,
            ResultType::Other => ResultType::Other,
        },
        source: p.source,
        amount_minor: p.amount_minor,
        paid_at: p.paid_at,
        fail_reason: None,
        voided: p.voided,
    })
}

/// The snapshot refresh job's handler.
pub struct SnapshotRefreshHandler {
    db: Db,
}

impl SnapshotRefreshHandler {
    pub fn new(db: Db) -> SnapshotRefreshHandler {
        SnapshotRefreshHandler { db }
    }

    async fn round(&self, job: &ClaimedJob) -> Result<RoundReport, RoundError> {
        let (refresh_version, bills) = round_payload(job)?;
        let cursor = self.saved_cursor(job).await?;
        let page = snapshot_page(&bills, cursor);
        let mut counts = SnapshotCounts::default();
        let mut writes: Vec<(String, BillSnapshot)> = Vec::new();
        for bill in &page.bills {
            let (refreshed, key) = refresh_one(&self.db, *bill, refresh_version).await?;
            counts.add(&refreshed);
            if let (SnapshotRefresh::Updated(s), Some(key)) = (refreshed, key) {
                writes.push((key, s));
            }
        }
        let more = page.next_cursor.is_some();
        if !self.write_round(job, &page, &counts, &writes).await? {
            return Err(RoundError::Job(JobFailure {
                fenced: true,
                ..JobFailure::new("the round's job claim was lost; nothing written")
            }));
        }
        let next = after_round(&page, job.generation, job.generation + i64::from(more));
        let summary = json!({
            "bills": bills.len(),
            "round_bills": page.bills.len(),
            "updated": counts.updated,
            "skipped": counts.skipped,
            "cursor": cursor.map(|c| c.to_string()),
            "next_cursor": page.next_cursor.map(|c| c.to_string()),
            "refresh_version": refresh_version,
            "next": match next {
                SnapshotJobNext::Pending => "PENDING",
                SnapshotJobNext::Success => "SUCCESS",
            },
            "note": if counts.updated == 0 { Value::from("changed 0 rows") } else { Value::Null },
        });
        Ok(RoundReport {
            summary,
            business_done: next == SnapshotJobNext::Success,
        })
    }

    /// Where this generation of the job left off, if it saved a cursor.
    async fn saved_cursor(&self, job: &ClaimedJob) -> Result<Option<BillKey>, RoundError> {
        let progress = select_rows(
            &self.db,
            &PROGRESS,
            "WHERE job_code = ?",
            &[Cell::text(job.code.clone())],
        )
        .await?;
        Ok(match progress.first() {
            Some(p) if int_of(p, "generation").map_err(corrupt)? == job.generation => {
                match p.get("cursor_key") {
                    Some(Cell::Text(c)) => parse_bill_key(c),
                    _ => None,
                }
            }
            _ => None,
        })
    }

    /// Write a round's snapshots and progress in one transaction fenced by the job's
    /// claim; false when the claim was lost (nothing written). With more pages to go,
    /// a new generation sends the job back to PENDING and the cursor belongs to it;
    /// without a bump (a newer request came in) the cursor is dropped and the newer
    /// request starts from the first bill.
    async fn write_round(
        &self,
        job: &ClaimedJob,
        page: &SnapshotPage,
        counts: &SnapshotCounts,
        writes: &[(String, BillSnapshot)],
    ) -> Result<bool, RoundError> {
        let update = "UPDATE bill_dimension_snapshot SET paid_amount = ?, paid_count = ?, \
                      failed_amount = ?, failed_count = ?, status = ?, latest_paid_at = ?, \
                      source = ?, refresh_version = ?, payment_diff = ? WHERE bill_key = ?";
        let bump = "UPDATE jobs SET request_generation = request_generation + 1 \
                    WHERE id = ? AND status = 1 AND running_attempt = ? \
                    AND request_generation = ?";
        let fence = Fence {
            job_id: job.id,
            running_attempt: job.running_attempt,
        };
        let Some(mut tx) = Tx::fenced(&self.db, fence).await? else {
            return Ok(false);
        };
        for (key, s) in writes {
            let args = [
                Cell::Int(s.paid_amount_minor),
                Cell::Int(i64::from(s.paid_count)),
                Cell::Int(s.failed_amount_minor),
                Cell::Int(i64::from(s.failed_count)),
                Cell::text(status_text(s.status)),
                Cell::opt_text(s.latest_paid_at.map(|t| time_text(&t))),
                Cell::opt_text(s.source.map(source_text)),
                Cell::Int(s.refresh_version),
                Cell::Int(s.payment_diff_minor),
                Cell::text(key.clone()),
            ];
            tx.exec(update, &args).await?;
        }
        let next_generation = if page.next_cursor.is_some() {
            let claim = [
                Cell::Int(job.id),
                Cell::Int(job.running_attempt),
                Cell::Int(job.generation),
            ];
            if tx.exec(bump, &claim).await? == 1 {
                job.generation + 1
            } else {
                -1
            }
        } else {
            job.generation
        };
        let code = Cell::text(job.code.clone());
        let clear = "DELETE FROM bill_snapshot_progress WHERE job_code = ?";
        tx.exec(clear, std::slice::from_ref(&code)).await?;
        let save = "INSERT INTO bill_snapshot_progress (job_code, generation, cursor_key, \
                    updated_total, skipped_total, updated_at) VALUES (?, ?, ?, ?, ?, ?)";
        let args = [
            code,
            Cell::Int(next_generation),
            Cell::opt_text(page.next_cursor.map(|c| c.to_string())),
            Cell::Int(i64::from(counts.updated)),
            Cell::Int(i64::from(counts.skipped)),
            Cell::text(time_text(&chrono::Utc::now())),
        ];
        tx.exec(save, &args).await?;
        tx.commit().await?;
        Ok(true)
    }
}

/// The refresh version and the bills of a snapshot job's payload.
fn round_payload(job: &ClaimedJob) -> Result<(i64, Vec<BillKey>), RoundError> {
    let payload = job.payload_json().map_err(RoundError::Job)?;
    let Some(refresh_version) = payload["refresh_version"].as_i64() else {
        return Err(RoundError::Job(JobFailure {
            exhaust: true,
            ..JobFailure::new("payload: refresh_version must be an integer")
        }));
    };
    let mut bills = Vec::new();
    for b in payload["bills"].as_array().into_iter().flatten() {
        let text = b.as_str().unwrap_or_default();
        match parse_bill_key(text) {
            Some(k) => bills.push(k),
            None => {
                return Err(RoundError::Job(JobFailure {
                    exhaust: true,
                    ..JobFailure::new(format!("payload: bad bill key {text:?}"))
                }))
            }
        }
    }
    Ok((refresh_version, bills))
}

enum RoundError {
    Job(JobFailure),
    Runner(RunnerError),
}

impl From<RunnerError> for RoundError {
    fn from(e: RunnerError) -> Self {
        RoundError::Runner(e)
    }
}

impl From<sqlx::Error> for RoundError {
    fn from(e: sqlx::Error) -> Self {
        RoundError::Runner(e.into())
    }
}

impl From<StoreError> for RoundError {
    fn from(e: StoreError) -> Self {
        RoundError::Runner(e.into())
    }
}

#[async_trait]
impl JobHandler for SnapshotRefreshHandler {
    async fn run(&self, job: &ClaimedJob) -> Result<RoundReport, JobFailure> {
        match self.round(job).await {
            Ok(r) => Ok(r),
            Err(RoundError::Job(f)) => Err(f),
            Err(RoundError::Runner(e)) => Err(JobFailure::new(e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bill_keys_round_trip_through_their_text() {
        let sm = StationMonth::parse("100:202609").expect("station-month");
        for key in [BillKey::Diff(7), BillKey::StationMonth(sm)] {
            assert_eq!(parse_bill_key(&key.to_string()), Some(key));
        }
        for bad in ["DIFF:0", "DIFF:x", "STATION_MONTH:100", "SM:100:202609", ""] {
            assert_eq!(parse_bill_key(bad), None, "{bad}");
        }
    }

    #[test]
    fn status_and_source_texts_round_trip() {
        for s in [
            SnapshotStatus::NoPayment,
            SnapshotStatus::AwaitingPayment,
            SnapshotStatus::Paid,
            SnapshotStatus::PartiallyPaid,
            SnapshotStatus::Failed,
        ] {
            assert_eq!(parse_status(status_text(s)).ok(), Some(s));
        }
        for s in [
            ResultSource::Treasury,
            ResultSource::OfflineImport,
            ResultSource::FailFallback,
            ResultSource::Other,
        ] {
            assert_eq!(parse_source(source_text(s)).ok(), Some(s));
        }
        assert!(parse_status("DONE").is_err());
        assert!(parse_source("BANK").is_err());
    }
}
