//! Replaying failed callbacks (SPEC R-CB-1; seed 000 "回调重放"): a job of the built-in
//! kind `callback_replay` per failed callback, keyed `callback:<id>`, on the seconds
//! backoff of seed 000 (`10, 30, 60, 300` s). Its round re-reads the row and runs the
//! provider's handler FROM THE STORED NORMALISED PAYLOAD — never from the raw body and
//! never re-verifying with whatever code runs today — and only when the row is
//! verified, normalised and failed ([`super::replayable`]); otherwise the round ends
//! without handling and reports why. An unverified or unnormalised callback never
//! gets a replay job from us, and one submitted by hand changes nothing.
//!
//! [`replay_failed`] is the backstop (an operator's `factledger callbacks
//! replay-failed`, or the cron scan every 2 min of seed 000): it submits a replay job
//! for every failed, verified, normalised callback that lost its job (a submit that
//! failed after the failure was recorded), and first turns handlings that were
//! interrupted (pending long after delivery: the process died) into failures.

use super::{
    inbox, replayable, CallbackError, HandleStatus, Normalized, NormalizedCallback, Registry,
};
use crate::infra::db::{now_ms, Db};
use crate::infra::jobs::cron::{CronError, CronSchedule, EngineSlot};
use crate::infra::jobs::engine::WeakEngine;
use crate::infra::jobs::engine::{ClaimedJob, JobFailure, JobHandler, RoundReport};
use crate::infra::jobs::{Backoff, Engine, JobKind, JobSubmit};
use crate::infra::store::UnitOfWork;
use async_trait::async_trait;
use serde_json::{json, Value};

/// Rounds of a replay job: eight, about 26 minutes of the `10, 30, 60, 300` s
/// schedule after the failed delivery. A callback still failing then needs a person
/// (the engine alerts `job.retries_exhausted`); `factledger callbacks replay-failed
/// --revive` or `POST /v1/jobs:retry` with `callback:<id>` starts it again (not the
/// CLI's `jobs retry`: it runs the round in its own process, which has no providers).
pub const REPLAY_ROUNDS_MAX: i32 = 8;
/// A handler applies one callback to the ledger: minutes would be a hang.
pub const REPLAY_LEASE_MS: i64 = 2 * 60 * 1_000;
/// Replays running at once: they are a backlog, never a reason to starve other kinds.
pub const REPLAY_CAP: i64 = 4;
/// A verified, normalised callback still pending this long after delivery had its
/// handling interrupted: twice the default request timeout (a handler running longer
/// was cancelled by it), so a row the process died on is picked up within a minute of
/// the restart (`serve` sweeps once this long after it starts, then the cron scan
/// every 2 min), not left pending. A second handling of one that was only slow is
/// harmless: handlers are idempotent (R-INV-7).
pub const INTERRUPTED_AFTER_MS: i64 =
    2 * crate::runtime::http::limits::REQUEST_TIMEOUT_MS_DEFAULT as i64;
/// Replay jobs one `replay_failed` call submits at most; it reports `more` beyond.
pub const REPLAY_SUBMITS_MAX: usize = 1_000;
/// Callbacks read, and replay jobs submitted in one transaction, per page.
const REPLAY_PAGE_ROWS: i64 = 100;

/// Seconds from the failed delivery to the first replay round: the first step of seed
/// 000's `10, 30, 60, 300`.
pub const FIRST_REPLAY_DELAY_MS: i64 = 10_000;
/// The rest of seed 000's schedule, between failed replay rounds (the job's own
/// backoff). The delivery was attempt 1 and the first round waits
/// [`FIRST_REPLAY_DELAY_MS`], so the gaps between attempts are `10, 30, 60, 300, 300 …`
/// seconds — the seed's schedule, not `10, 10, 30 …`.
pub const REPLAY_BACKOFF_S: &[i64] = &[30, 60, 300];

/// The built-in job kind that replays failed callbacks.
pub static CALLBACK_REPLAY: JobKind = JobKind {
    lease_ms: REPLAY_LEASE_MS,
    backoff: Backoff::Seconds(REPLAY_BACKOFF_S),
    max_retry_count: REPLAY_ROUNDS_MAX,
    cap: Some(REPLAY_CAP),
    parallelism: REPLAY_CAP as usize,
    ..JobKind::new("callback_replay", "CBR")
};

/// The replay job's business key: `callback:<id>`.
pub fn business_key(id: i64) -> String {
    format!("callback:{id}")
}

/// The replay job's payload: which row (the provider is read from the row; it is
/// here as `platform` for alerts, R-MON-1).
pub fn payload(id: i64, provider: &str) -> Value {
    json!({"callback_id": id, "platform": provider})
}

/// The `callback_replay` handler: one round replays one callback.
pub struct ReplayHandler {
    db: Db,
    registry: Registry,
}

impl ReplayHandler {
    pub fn new(db: Db, registry: Registry) -> Self {
        ReplayHandler { db, registry }
    }
}

/// A round that ends without handling, saying why.
fn not_handled(id: i64, reason: &str, business_done: bool) -> RoundReport {
    RoundReport {
        summary: json!({"callback_id": id, "handled": false, "reason": reason}),
        business_done,
    }
}

#[async_trait]
impl JobHandler for ReplayHandler {
    async fn run(&self, job: &ClaimedJob) -> Result<RoundReport, JobFailure> {
        let id = job.payload_json()?["callback_id"]
            .as_i64()
            .ok_or_else(|| exhausted("payload has no integer callback_id"))?;
        let row = inbox::load(&self.db, id)
            .await
            .map_err(|e| JobFailure::new(e.to_string()))?
            .ok_or_else(|| exhausted(&format!("no callback {id}")))?;
        let s = &row.summary;
        if let Err(reason) = replayable(
            s.verify_status,
            row.normalized_payload.is_some(),
            s.handle_status,
        ) {
            tracing::info!(
                callback_id = id,
                reason,
                "callback replay round ends without handling"
            );
            // Already handled (or a duplicate of a handled one) is done; the rest can
            // never become replayable by retrying.
            let done = matches!(
                s.handle_status,
                HandleStatus::Handled | HandleStatus::Duplicate
            );
            return Ok(not_handled(id, reason, done));
        }
        let provider = self.registry.get(&s.provider).ok_or_else(|| {
            JobFailure::new(format!(
                "callback provider {:?} is not configured in this process",
                s.provider
            ))
        })?;
        // The stored normalised payload, exactly as accepted at delivery.
        let stored = row.normalized_payload.as_deref().unwrap_or_default();
        let n: Normalized = serde_json::from_str(stored)
            .map_err(|e| exhausted(&format!("stored normalised payload is unreadable: {e}")))?;
        let cb = NormalizedCallback::new(id, &s.provider, n);
        let fence = job.fence();
        let outcome = provider.handler.handle(&cb, Some(fence)).await;
        let recorded = inbox::record_replay_outcome(
            &self.db,
            id,
            fence,
            outcome.as_ref().map(|_| ()).map_err(|f| f.message.as_str()),
        )
        .await
        .map_err(|e| JobFailure::new(e.to_string()))?;
        match outcome {
            Err(f) => Err(JobFailure {
                message: f.message,
                exhaust: false,
                fenced: f.fenced,
            }),
            Ok(()) if !recorded => Err(JobFailure {
                message: format!(
                    "callback {id} was handled, but the outcome was not recorded: the \
                     round's claim is stale or the row is no longer failed"
                ),
                exhaust: false,
                fenced: true,
            }),
            Ok(()) => Ok(RoundReport::done(
                json!({"callback_id": id, "handled": true, "attempt": s.handle_attempts + 1}),
            )),
        }
    }
}

/// A failure no retry can mend.
fn exhausted(message: &str) -> JobFailure {
    JobFailure {
        message: message.to_owned(),
        exhaust: true,
        fenced: false,
    }
}

/// How [`replay_failed`] submits.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReplayFailedOptions {
    /// Submit as a fact change: a replay job that exhausted its rounds (or ended) is
    /// revived with its retries reset. Off for the cron backstop (it would retry a
    /// hopeless callback forever); on for an operator who fixed the cause.
    pub revive: bool,
    /// Pending this long after delivery counts as interrupted ([`INTERRUPTED_AFTER_MS`]
    /// when `None`).
    pub interrupted_after_ms: Option<i64>,
}

/// What [`replay_failed`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct ReplayFailedReport {
    /// Pending callbacks whose handling was interrupted, now failed.
    pub interrupted: u64,
    /// Replay jobs submitted (a plain submit of an existing job changes nothing).
    pub submitted: usize,
    pub codes: Vec<String>,
    /// More failed callbacks wait than one call submits ([`REPLAY_SUBMITS_MAX`]).
    pub more: bool,
}

/// Submit a replay job for every failed, verified, normalised callback (R-CB-1: no
/// other callback is ever selected), at most [`REPLAY_SUBMITS_MAX`]; first mark
/// handlings interrupted for [`INTERRUPTED_AFTER_MS`] as failed. Jobs are due now.
pub async fn replay_failed(
    engine: &Engine,
    options: ReplayFailedOptions,
) -> Result<ReplayFailedReport, CallbackError> {
    let db = engine.db();
    let mut report = ReplayFailedReport {
        interrupted: inbox::fail_interrupted(
            db,
            options.interrupted_after_ms.unwrap_or(INTERRUPTED_AFTER_MS),
        )
        .await?,
        ..Default::default()
    };
    let mut after = 0;
    while report.submitted < REPLAY_SUBMITS_MAX {
        let limit = REPLAY_PAGE_ROWS.min((REPLAY_SUBMITS_MAX - report.submitted) as i64);
        let page = inbox::replayable_ids(db, after, limit).await?;
        let Some(&(last, _)) = page.last() else {
            break;
        };
        let jobs: Vec<JobSubmit> = page
            .iter()
            .map(|(id, provider)| {
                let key = business_key(*id);
                let payload = payload(*id, provider);
                if options.revive {
                    JobSubmit::fact_change(&CALLBACK_REPLAY, key, payload)
                } else {
                    JobSubmit::plain(&CALLBACK_REPLAY, key, payload)
                }
            })
            .collect();
        let codes = submit_all(engine, &jobs, true).await?;
        report.submitted += codes.len();
        report.codes.extend(codes);
        after = last;
        if (page.len() as i64) < limit {
            break;
        }
    }
    if report.submitted >= REPLAY_SUBMITS_MAX {
        report.more = !inbox::replayable_ids(db, after, 1).await?.is_empty();
    }
    tracing::info!(
        interrupted = report.interrupted,
        submitted = report.submitted,
        more = report.more,
        "replay of failed callbacks submitted"
    );
    Ok(report)
}

/// Submit jobs in one transaction (what `Engine::submit` does for one) and, with
/// `kick`, kick them; a job due later gains nothing from a kick.
pub(super) async fn submit_all(
    engine: &Engine,
    jobs: &[JobSubmit],
    kick: bool,
) -> Result<Vec<String>, CallbackError> {
    let now = now_ms();
    let rows = jobs
        .iter()
        .map(|j| j.row(now))
        .collect::<Result<Vec<_>, _>>()?;
    let codes: Vec<String> = rows.iter().map(|r| r.code.clone()).collect();
    engine
        .store()
        .append(&[UnitOfWork {
            jobs: rows,
            ..Default::default()
        }])
        .await
        .map_err(crate::infra::jobs::JobError::from)?;
    if kick {
        engine.kick_soon(codes.clone());
    }
    Ok(codes)
}

// ---------------------------------------------------------------------------------
// The cron schedule that finds failed callbacks which lost their replay job.

/// The kind of the failed-callback replay scan's firings (seed 000: every 2 min).
/// One round is one `callbacks::replay_failed`; a failed round is not retried — the
/// next firing, two minutes later, is the retry — and two never run at once.
pub static CALLBACK_REPLAY_SCAN: JobKind = JobKind {
    // Short: the engine's heartbeat renews it while a round runs, so it only decides
    // how long a killed round keeps the next firing waiting (cap 1).
    lease_ms: 10_000,
    max_retry_count: 1,
    cap: Some(1),
    parallelism: 1,
    ..JobKind::new("callback_replay_scan", "CBRS")
};
pub const CALLBACK_REPLAY_SCAN_SCHEDULE: &str = "callback_replay_scan";
/// Seed 000: "已验签失败回调重放每 2 分钟扫描".
pub const CALLBACK_REPLAY_SCAN_EVERY: &str = "*/2 * * * *";

/// The replay scan's cron schedule (the composition root registers it).
pub fn replay_scan_schedule() -> Result<CronSchedule, CronError> {
    CronSchedule::new(
        CALLBACK_REPLAY_SCAN_SCHEDULE,
        CALLBACK_REPLAY_SCAN_EVERY,
        &CALLBACK_REPLAY_SCAN,
    )
}

/// `callback_replay_scan`: submit replay jobs for failed callbacks that lost theirs.
pub struct ReplayScanHandler {
    engine: EngineSlot,
    options: ReplayFailedOptions,
}

impl ReplayScanHandler {
    /// `interrupted_after_ms`: see [`ReplayFailedOptions::interrupted_after_ms`].
    pub fn new(engine: EngineSlot, interrupted_after_ms: Option<i64>) -> Self {
        ReplayScanHandler {
            engine,
            options: ReplayFailedOptions {
                revive: false,
                interrupted_after_ms,
            },
        }
    }
}

/// `serve`'s one sweep after a start: once the interrupted threshold has passed since
/// the start, turn the handlings a crash left pending into failures and replay them
/// (the cron scan would, but only at its next firing).
pub async fn sweep_after_start(
    engine: crate::infra::jobs::engine::WeakEngine,
    interrupted_after_ms: Option<i64>,
) {
    let wait = interrupted_after_ms.unwrap_or(INTERRUPTED_AFTER_MS).max(0) as u64;
    tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
    let Some(engine) = engine.upgrade() else {
        return;
    };
    let options = ReplayFailedOptions {
        revive: false,
        interrupted_after_ms,
    };
    if let Err(e) = replay_failed(&engine, options).await {
        tracing::warn!(error = %e, "the failed-callback sweep after start failed; the cron scan retries");
    }
}

#[async_trait]
impl JobHandler for ReplayScanHandler {
    async fn run(&self, _job: &ClaimedJob) -> Result<RoundReport, JobFailure> {
        let engine = self
            .engine
            .get()
            .and_then(WeakEngine::upgrade)
            .ok_or_else(|| JobFailure::new("the job engine is shutting down"))?;
        let report = replay_failed(&engine, self.options)
            .await
            .map_err(|e| JobFailure::new(e.to_string()))?;
        Ok(RoundReport {
            summary: json!({
                "interrupted": report.interrupted,
                "submitted": report.submitted,
                "more": report.more,
            }),
            // The replay jobs it submitted are their own jobs (level 3 is theirs).
            business_done: !report.more,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_are_spaced_by_seed_000_s_seconds_schedule() {
        let gaps: Vec<i64> = std::iter::once(FIRST_REPLAY_DELAY_MS)
            .chain((1..=4).map(|retry| CALLBACK_REPLAY.backoff.delay_ms(retry)))
            .map(|ms| ms / 1_000)
            .collect();
        assert_eq!(&gaps[..4], crate::infra::jobs::BACKOFF_SECONDS_DEFAULT);
        assert_eq!(gaps, vec![10, 30, 60, 300, 300]);
        assert!(crate::infra::jobs::check_kinds([&CALLBACK_REPLAY]).is_ok());
    }
}
