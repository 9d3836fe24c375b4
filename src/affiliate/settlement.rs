//! Settlement (SPEC R-COM-2, seed 003 §7): a due commission is released —
//! PENDING → AVAILABLE with the wallet's `pending → available` and its ledger entry
//! and outbox rows — each commission in its own unit.
//!
//! A scan result grants no right to process: `settle_one` loads the commission and
//! decides `Release { now }` on its current state, which re-checks status and
//! `release_at` (the compare-and-set of the seed), and the append states the stream
//! head it decided on. Two settlers racing on one commission: one appends, the other
//! conflicts, re-decides on the released state and is refused — the wallet changes
//! once. The wallet ledger key `COMMISSION/<id>/RELEASE_PENDING` is the last line of
//! defence (R-INV-1).
//!
//! **The settlement job.** The job kind `commission_settlement` (prefix `CSETTLE`),
//! fired by the cron schedule of the same name every 5 minutes
//! ([`SETTLEMENT_EVERY`]), runs [`settle_due`]: it scans the `commission_records`
//! projection for `status = 'PENDING' AND release_at <= now` in `(release_at,
//! commission_id)` order, in batches of [`SETTLEMENT_BATCH_MAX`] (keyset-paged, so a
//! later batch never re-reads an earlier one), and sends each candidate through
//! [`settle_one`], fenced by the round's claim.
//!
//! **The projection is only a hint.** Its rows may lag the log: a row still PENDING
//! for a commission another settler already released (or that a refund froze) is
//! re-checked by `settle_one` on the commission's own stream and counted
//! `not_pending`; a row not projected yet (a commission recorded or unfrozen a moment
//! ago) is simply found by the next firing. Either way money is right; lag only delays
//! a release. A round waits a little ([`SETTLEMENT_PROJECTION_WAIT_MS`]) for the
//! projector to reach the head it saw at its start, and reports the lag it scanned at.
//! Case 14 of seed 003 §18 (a lock that expires, two workers scanning the same
//! commissions) is therefore harmless: both scans list the same ids, each commission
//! is released by exactly one unit, and the other one's re-decision is `not_pending`.

use crate::infra::db::Db;
use crate::infra::jobs::engine::{ClaimedJob, JobFailure, JobHandler, RoundReport};
use crate::infra::jobs::JobKind;
use crate::infra::store::{time_text, DynStore, Fence, Metadata, StoreError};
use crate::runtime::projection::RunnerError;
use crate::runtime::unit::{run_unit, UnitError};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use factledger_aggregates::commission::{
    Commission, CommissionCommand, CommissionError, CommissionStatus, ReleaseCommission,
};
use factledger_aggregates::wallet::{Wallet, WalletError};
use factledger_projections::affiliate::CommissionsProjector;
use factledger_projections::table::Projector;
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// SPEC R-COM-2: "200 per batch". A batch is one indexed range read; each of its
/// commissions is then its own unit.
pub const SETTLEMENT_BATCH_MAX: i64 = 200;
/// Batches one round takes at most (2,000 commissions): the round stays well inside
/// its lease and the 5-minute period; what is left is reported (`more`) and taken by
/// the next firing.
pub const SETTLEMENT_BATCHES_PER_ROUND_MAX: u32 = 10;
/// A round starts no new batch after this long, so it ends before the next firing
/// (5 min) would wait on the kind's cap of one.
pub const SETTLEMENT_ROUND_TIME_MAX_MS: u64 = 4 * 60 * 1_000;
/// How long a round waits for `commission_records` to reach the log's head it saw at
/// its start. Short: the projector normally trails by milliseconds, and a stale row
/// is only a delay (see the module comment), never a wrong release.
pub const SETTLEMENT_PROJECTION_WAIT_MS: u64 = 2_000;
/// Poll period of that wait.
const PROJECTION_POLL_MS: u64 = 50;
/// This many failures in a row (no commission settled in between) stop the round:
/// the database is away, and grinding through the rest of the batch would only
/// multiply the same error. The next firing starts again.
pub const CONSECUTIVE_FAILURES_MAX: u32 = 20;
/// Failed commissions named in a round's summary (every one is logged).
const FAILURES_IN_SUMMARY_MAX: usize = 10;
/// Lease of a settlement round; the heartbeat renews it every third.
pub const SETTLEMENT_LEASE_MS: i64 = 5 * 60 * 1_000;
/// The cron schedule that fires settlement, and its default expression (R-COM-2:
/// "default every 5 min").
pub const SETTLEMENT_SCHEDULE: &str = "commission_settlement";
pub const SETTLEMENT_EVERY: &str = "*/5 * * * *";
/// Actor of the units a settlement round writes.
pub const SETTLEMENT_ACTOR: &str = "job:commission_settlement";

/// The settlement job kind. One round at a time (cap 1): two rounds would only
/// contend on the same commissions — harmless (see the module comment), but wasted.
/// A failed round is not retried: the next firing, 5 minutes later, is the retry, and
/// the exhausted job raises an alert.
pub static COMMISSION_SETTLEMENT: JobKind = JobKind {
    lease_ms: SETTLEMENT_LEASE_MS,
    max_retry_count: 1,
    cap: Some(1),
    parallelism: 1,
    ..JobKind::new("commission_settlement", "CSETTLE")
};

/// What settling one commission did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Settled {
    /// Released now: the wallet moved pending → available.
    Released,
    /// Not due yet (`release_at` is after now).
    NotDue,
    /// Not PENDING any more (already released by another settler, frozen, invalid…).
    NotPending,
    /// No such commission.
    Unknown,
}

#[derive(Debug, thiserror::Error)]
pub enum SettleError {
    #[error(transparent)]
    Commission(#[from] CommissionError),
    #[error(transparent)]
    Wallet(#[from] WalletError),
    #[error("{0}")]
    Invariant(String),
}

/// Settle one commission at `now` in its own unit (fenced by the job's claim when a
/// job settles). Refusals that mean "someone else got there" are outcomes, not
/// errors.
pub async fn settle_one(
    store: &DynStore,
    metadata: &Metadata,
    commission_id: &str,
    now: chrono::DateTime<chrono::Utc>,
    fence: Option<Fence>,
) -> Result<(Settled, i64), UnitError<SettleError>> {
    let outcome = run_unit(store, metadata, |mut unit| async move {
        if let Some(f) = fence {
            unit.fence(f);
        }
        let mut commission = unit.load::<Commission, SettleError>(commission_id).await?;
        if commission.state.record.is_none() {
            return Ok((Settled::Unknown, unit));
        }
        let release = CommissionCommand::Release(ReleaseCommission { now });
        let events =
            match unit.decide::<Commission, SettleError>(&mut commission, commission_id, release) {
                Ok(events) => events,
                Err(UnitError::Refused(SettleError::Commission(CommissionError::NotDue {
                    ..
                }))) => return Ok((Settled::NotDue, unit)),
                Err(UnitError::Refused(SettleError::Commission(
                    CommissionError::IllegalTransition { .. },
                ))) => return Ok((Settled::NotPending, unit)),
                Err(e) => return Err(e),
            };
        for event in &events {
            let effect = commission
                .state
                .wallet_effect(event)
                .map_err(|v| UnitError::Invariant(v.0))?;
            if let Some(effect) = effect {
                let wid = effect.wallet_id.as_str().to_owned();
                let mut wallet = unit.load::<Wallet, SettleError>(&wid).await?;
                unit.decide::<Wallet, SettleError>(&mut wallet, &wid, effect.command)?;
            }
        }
        Ok((Settled::Released, unit))
    })
    .await?;
    Ok((outcome.value, outcome.position))
}

/// Whether a settle failure is the claim going away (stop the round) rather than
/// this commission's problem (report it, go on).
pub fn is_fenced(e: &UnitError<SettleError>) -> bool {
    matches!(e, UnitError::Store(StoreError::Fenced { .. }))
}

/// One commission the scan listed, as the projection saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueCommission {
    pub commission_id: String,
    /// `release_at` as stored (fixed-width RFC 3339, so text order is time order).
    pub release_at: String,
}

/// The due PENDING commissions of `commission_records` after `after` (keyset on
/// `(release_at, commission_id)`, the `ix_commission_records_due` index), at most
/// `limit`. A hint only: each must still go through [`settle_one`].
pub async fn due_commissions(
    db: &Db,
    now: DateTime<Utc>,
    after: Option<&DueCommission>,
    limit: i64,
) -> Result<Vec<DueCommission>, sqlx::Error> {
    let now = time_text(&now);
    // The first batch starts after ("", ""), before every row.
    let (at, id) = after
        .map(|a| (a.release_at.as_str(), a.commission_id.as_str()))
        .unwrap_or(("", ""));
    let status = CommissionStatus::Pending.as_str();
    let sql = due_sql(matches!(db, Db::Sqlite(_)), limit);
    macro_rules! go {
        ($p:expr, $text:expr, $keyset:expr) => {{
            use crate::infra::db::RowText;
            let mut q = sqlx::query(&sql).bind($text(status)).bind($text(&now));
            for k in $keyset {
                q = q.bind($text(k));
            }
            q.fetch_all($p)
                .await?
                .iter()
                .map(|r| {
                    Ok(DueCommission {
                        commission_id: r.text(0)?,
                        release_at: r.text(1)?,
                    })
                })
                .collect()
        }};
    }
    match db {
        // Text as bytes: MariaDB then compares with the `_bin` columns as they are and
        // walks the index in order (a utf8mb4_unicode_ci string parameter makes it
        // sort the range; see `reconcile.rs`).
        Db::Mysql(p) => go!(p, str::as_bytes, [at, at, id]),
        // SQLite compares a blob as greater than any text: bind text.
        Db::Sqlite(p) => go!(p, std::convert::identity::<&str>, [at, id]),
    }
}

/// The scan's SQL: one in-order range of `ix_commission_records_due (status,
/// release_at, commission_id)` per batch, in each backend's spelling of the keyset —
/// SQLite a row value, MariaDB an OR of column conditions (each plans the other's
/// spelling as a scan from the start of the range) — and the limit a literal (a
/// MariaDB prepared `LIMIT ?` read and sorted the whole range, see `reconcile.rs`).
/// Public so tests can EXPLAIN it.
pub fn due_sql(sqlite: bool, limit: i64) -> String {
    let keyset = if sqlite {
        "(release_at, commission_id) > (?, ?)"
    } else {
        "(release_at > ? OR (release_at = ? AND commission_id > ?))"
    };
    format!(
        "SELECT commission_id, release_at FROM commission_records \
         WHERE status = ? AND release_at <= ? AND {keyset} \
         ORDER BY release_at, commission_id LIMIT {}",
        limit.max(1)
    )
}

/// Bounds of one settlement round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoundLimits {
    pub batch_max: i64,
    pub batches_max: u32,
    pub time_max_ms: u64,
    pub projection_wait_ms: u64,
}

impl Default for RoundLimits {
    fn default() -> Self {
        RoundLimits {
            batch_max: SETTLEMENT_BATCH_MAX,
            batches_max: SETTLEMENT_BATCHES_PER_ROUND_MAX,
            time_max_ms: SETTLEMENT_ROUND_TIME_MAX_MS,
            projection_wait_ms: SETTLEMENT_PROJECTION_WAIT_MS,
        }
    }
}

/// A commission a round could not settle (it stays PENDING for the next firing).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SettleFailure {
    pub commission_id: String,
    pub error: String,
}

/// What one settlement round did: counts per outcome of [`settle_one`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SettlementReport {
    /// The `now` every commission of the round was decided at.
    pub now: String,
    /// Commissions the scan listed.
    pub scanned: u64,
    pub released: u64,
    pub not_due: u64,
    pub not_pending: u64,
    pub unknown: u64,
    pub failed: u64,
    pub batches: u32,
    /// The last batch was full: more may be due; the next firing takes them.
    pub more: bool,
    /// Global position of the last release (read-your-writes), 0 if none.
    pub last_position: i64,
    /// `commission_records`' checkpoint when the round scanned, and the log's head:
    /// rows after the checkpoint were not visible to the scan.
    pub projection_position: i64,
    pub head_position: i64,
    /// The first [`FAILURES_IN_SUMMARY_MAX`] failures (all are logged).
    pub failures: Vec<SettleFailure>,
}

#[derive(Debug, thiserror::Error)]
pub enum SettleRoundError {
    /// The claim fencing the round is gone (its lease was recovered): stop, write
    /// nothing more.
    #[error("the job claim fencing this settlement round is gone: {0}")]
    Fenced(String),
    #[error("settlement scan: {0}")]
    Scan(#[from] sqlx::Error),
    #[error("settlement: {0}")]
    Store(#[from] StoreError),
    #[error("settlement scan: {0}")]
    Projection(#[from] RunnerError),
    #[error("settlement stopped after {CONSECUTIVE_FAILURES_MAX} failures in a row; last: {0}")]
    Failing(String),
}

/// One settlement round at `now`: scan due commissions batch by batch and settle each
/// in its own unit fenced by `fence`. A fenced write (or `claim_lost()` turning true)
/// stops the round; any other failure of one commission is logged with its id,
/// counted, and the round goes on.
pub async fn settle_due(
    store: &DynStore,
    projections: &Db,
    metadata: &Metadata,
    now: DateTime<Utc>,
    fence: Option<Fence>,
    limits: RoundLimits,
    claim_lost: &(dyn Fn() -> bool + Send + Sync),
) -> Result<SettlementReport, SettleRoundError> {
    let started = Instant::now();
    let mut report = SettlementReport {
        now: time_text(&now),
        ..Default::default()
    };
    let projector = CommissionsProjector;
    report.head_position = store.head_position().await?;
    report.projection_position =
        caught_up(projections, &projector, report.head_position, limits).await?;
    let mut after: Option<DueCommission> = None;
    let mut failures_in_a_row = 0u32;
    while report.batches < limits.batches_max.max(1) {
        if report.batches > 0 && started.elapsed() >= Duration::from_millis(limits.time_max_ms) {
            break;
        }
        let batch = due_commissions(projections, now, after.as_ref(), limits.batch_max).await?;
        report.batches += 1;
        report.scanned += batch.len() as u64;
        report.more = batch.len() as i64 >= limits.batch_max;
        for due in &batch {
            if claim_lost() {
                return Err(SettleRoundError::Fenced(format!(
                    "claim lost before {}",
                    due.commission_id
                )));
            }
            match settle_one(store, metadata, &due.commission_id, now, fence).await {
                Ok((settled, position)) => {
                    failures_in_a_row = 0;
                    match settled {
                        Settled::Released => {
                            report.released += 1;
                            report.last_position = report.last_position.max(position);
                        }
                        Settled::NotDue => report.not_due += 1,
                        Settled::NotPending => report.not_pending += 1,
                        Settled::Unknown => report.unknown += 1,
                    }
                }
                Err(e) if is_fenced(&e) => return Err(SettleRoundError::Fenced(e.to_string())),
                Err(e) => {
                    tracing::error!(
                        commission_id = %due.commission_id,
                        error = %e,
                        "settlement of a commission failed; it stays PENDING for the next round"
                    );
                    report.failed += 1;
                    if report.failures.len() < FAILURES_IN_SUMMARY_MAX {
                        report.failures.push(SettleFailure {
                            commission_id: due.commission_id.clone(),
                            error: e.to_string(),
                        });
                    }
                    failures_in_a_row += 1;
                    if failures_in_a_row >= CONSECUTIVE_FAILURES_MAX {
                        return Err(SettleRoundError::Failing(e.to_string()));
                    }
                }
            }
        }
        match batch.last() {
            Some(last) if report.more => after = Some(last.clone()),
            _ => break,
        }
    }
    Ok(report)
}

/// Wait (bounded by `limits.projection_wait_ms`) for `commission_records` to reach
/// `head`; returns the checkpoint the scan will read at. Going on behind is safe.
async fn caught_up(
    projections: &Db,
    projector: &dyn Projector,
    head: i64,
    limits: RoundLimits,
) -> Result<i64, RunnerError> {
    let deadline = Instant::now() + Duration::from_millis(limits.projection_wait_ms);
    loop {
        let position = projections
            .checkpoint(projector.name(), projector.version())
            .await?;
        if position >= head || Instant::now() >= deadline {
            return Ok(position);
        }
        tokio::time::sleep(Duration::from_millis(PROJECTION_POLL_MS)).await;
    }
}

/// What "now" is for a settlement round (injected in tests).
pub type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// The handler of [`COMMISSION_SETTLEMENT`]: one [`settle_due`] round at the clock's
/// now, fenced by the job's claim.
pub struct SettlementHandler {
    store: DynStore,
    projections: Db,
    country_code: String,
    clock: Clock,
    limits: RoundLimits,
}

impl SettlementHandler {
    pub fn new(store: DynStore, projections: Db, country_code: &str) -> Self {
        SettlementHandler {
            store,
            projections,
            country_code: country_code.to_owned(),
            clock: Arc::new(Utc::now),
            limits: RoundLimits::default(),
        }
    }

    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    pub fn with_limits(mut self, limits: RoundLimits) -> Self {
        self.limits = limits;
        self
    }
}

#[async_trait]
impl JobHandler for SettlementHandler {
    async fn run(&self, job: &ClaimedJob) -> Result<RoundReport, JobFailure> {
        // One correlation id per round, so its releases are found together in audit.
        let mut metadata = super::service_metadata(SETTLEMENT_ACTOR, &self.country_code);
        metadata.causation_id = Some(job.code.clone());
        let now = (self.clock)();
        let claim_lost = || job.claim_lost();
        let report = settle_due(
            &self.store,
            &self.projections,
            &metadata,
            now,
            Some(job.fence()),
            self.limits,
            &claim_lost,
        )
        .await
        .map_err(|e| JobFailure {
            fenced: matches!(e, SettleRoundError::Fenced(_)),
            ..JobFailure::new(e.to_string())
        })?;
        tracing::info!(
            job = %job.code,
            released = report.released,
            not_due = report.not_due,
            not_pending = report.not_pending,
            unknown = report.unknown,
            failed = report.failed,
            more = report.more,
            "settlement round"
        );
        let summary = serde_json::to_value(&report).map_err(|e| JobFailure::new(e.to_string()))?;
        Ok(RoundReport {
            summary,
            // Level 3 only when nothing is left behind: no failure, no full last batch.
            business_done: report.failed == 0 && !report.more,
        })
    }
}
