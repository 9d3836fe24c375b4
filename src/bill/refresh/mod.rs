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

use crate::bill::order_status::OrderStatusManager;
use crate::bill::projection::recompute_station_months;
use crate::infra::db::Db;
use crate::infra::jobs::cron::EngineSlot;
use crate::infra::jobs::{ClaimedJob, JobFailure, JobHandler, JobKind, RoundReport};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use factledger_projections::bill::refresh::{AccountScope, RefreshRequest, RefreshScope};
use factledger_projections::bill::StationMonth;
use serde_json::json;
use std::sync::Arc;

mod downstream;
mod inspection;
mod progress;
mod projected;
mod resolve;

pub use inspection::{list_findings, StoredFinding};
pub use progress::load_progress;
pub use resolve::{account_page, check_scope_locator, resolve_station_months, ResolveError};

use progress::save_progress;
use projected::{changed_rows, current_status, projected};

/// Refresh requests run as jobs of this kind; the code prefix is the task code's
/// `RIPSR` (SPEC R-BILL-8), so the job code is the request's task code.
pub static BILL_REFRESH: JobKind = JobKind::new("bill_refresh", "RIPSR");

/// What "now" is for a refresh round: the `found_at` of its findings (injectable).
pub type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// The rule id of a finding recording that an inspection could not run.
pub const INSPECTION_ERROR: &str = "INSPECTION_ERROR";

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
    /// Save the progress after `sm` (`None`: clear it, the round is complete) under the
    /// job's claim; a claim that is gone fails the round as fenced.
    async fn save(&self, job: &ClaimedJob, sm: Option<StationMonth>) -> Result<(), JobFailure> {
        let (doing, done) = match sm {
            Some(sm) => (format!("saving the refresh progress after {sm}"), "saved"),
            None => ("clearing the refresh progress".to_owned(), "cleared"),
        };
        let progress = sm.map(|sm| (job.generation, sm));
        let saved = save_progress(&self.db, job.fence(), &job.code, progress)
            .await
            .map_err(|e| JobFailure::new(format!("{doing}: {e}")))?;
        if saved {
            Ok(())
        } else {
            Err(JobFailure {
                fenced: true,
                ..JobFailure::new(format!(
                    "the refresh progress was not {done}: the job claim is gone"
                ))
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
            return self.save(job, Some(sm)).await;
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
        self.save(job, Some(sm)).await
    }
}

/// How far a round's scope resolved: for the summary.
#[derive(Debug, Default)]
struct Resolved {
    scopes: usize,
    station_months: usize,
    /// Pages of an `ACCOUNT_SCOPE` read (0 for every other scope type).
    account_pages: usize,
}

fn resolve_failed(e: ResolveError) -> JobFailure {
    JobFailure::new(format!("resolving the scopes: {e}"))
}

/// The job's stored request, parsed and checked against the job's own identity; a
/// request that no longer parses or matches exhausts the job (a retry cannot help).
fn stored_request(job: &ClaimedJob) -> Result<RefreshRequest, JobFailure> {
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
    Ok(request)
}

impl BillRefreshHandler {
    /// The station-month to resume after: the saved one, if this same request
    /// generation saved it. Another generation is another request: start from the first
    /// station-month.
    async fn resume_point(&self, job: &ClaimedJob) -> Result<Option<StationMonth>, JobFailure> {
        let progress = load_progress(&self.db, &job.code)
            .await
            .map_err(|e| JobFailure::new(format!("reading the refresh progress: {e}")))?;
        Ok(progress
            .filter(|(generation, _)| *generation == job.generation)
            .map(|(_, sm)| sm))
    }

    /// Resolve the request's scope and [`step`](Self::step) through its station-months
    /// in order, after `resume_after`.
    async fn walk_scope(
        &self,
        job: &ClaimedJob,
        request: &RefreshRequest,
        resume_after: Option<StationMonth>,
        tally: &mut Tally,
    ) -> Result<Resolved, JobFailure> {
        let resolved = resolve_station_months(&self.projections, request.scope())
            .await
            .map_err(resolve_failed)?;
        let Some(list) = resolved else {
            let RefreshScope::Accounts(scope) = request.scope() else {
                return Err(JobFailure::new("an id scope resolved as an account scope"));
            };
            return self
                .walk_account_pages(job, request, scope, resume_after, tally)
                .await;
        };
        let n = list.len();
        for sm in list.into_iter().filter(|sm| Some(*sm) > resume_after) {
            self.step(job, request, sm, tally).await?;
        }
        Ok(Resolved {
            scopes: n,
            station_months: n,
            account_pages: 0,
        })
    }

    /// An `ACCOUNT_SCOPE`, one page after the cursor at a time, each page resolved
    /// against the fact tables as they are when it is read.
    async fn walk_account_pages(
        &self,
        job: &ClaimedJob,
        request: &RefreshRequest,
        scope: &AccountScope,
        resume_after: Option<StationMonth>,
        tally: &mut Tally,
    ) -> Result<Resolved, JobFailure> {
        let mut resolved = Resolved {
            scopes: request.scope().count(),
            ..Resolved::default()
        };
        let mut cursor = resume_after;
        loop {
            let (page, next) = account_page(&self.projections, scope, cursor)
                .await
                .map_err(resolve_failed)?;
            resolved.account_pages += 1;
            resolved.station_months += page.len();
            for sm in &page {
                self.step(job, request, *sm, tally).await?;
            }
            match next {
                Some(c) => cursor = Some(c),
                None => return Ok(resolved),
            }
        }
    }
}

#[async_trait]
impl JobHandler for BillRefreshHandler {
    async fn run(&self, job: &ClaimedJob) -> Result<RoundReport, JobFailure> {
        let request = stored_request(job)?;
        let resume_after = self.resume_point(job).await?;
        let mut tally = Tally::default();
        let resolved = self
            .walk_scope(job, &request, resume_after, &mut tally)
            .await?;
        let inspection = self.inspect_all(job, &tally.visited).await;
        let reconciliation = self
            .reconcile_order_status_after_refresh(&request, &tally.processed)
            .await?;
        let snapshots = self
            .refresh_snapshots_after_refresh(job.generation, &tally.processed)
            .await;
        // The round is complete: the next run of this job (a new generation) starts over.
        self.save(job, None).await?;
        let mut notes = Vec::new();
        if resolved.scopes == 0 || resolved.station_months == 0 {
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
            "scopes_resolved": resolved.scopes,
            "station_months_resolved": resolved.station_months,
            "account_scope_pages": resolved.account_pages,
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
