//! Running claimed jobs: lease heartbeats, parallel rounds, job alerts and the run
//! log (`job_runs`).

use super::state::*;
use super::types::*;
use crate::infra::alerts::{self, Alert, AlertKind};
use crate::infra::db::{now_ms, Db};
use crate::infra::jobs::{check_payload, truncate_error, JobError, JobKind, PARALLELISM_MAX};
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::sync::{oneshot, watch, Semaphore};

impl Engine {
    /// Renew the lease every third of it while the round runs; flag the round as lost
    /// when the claim is gone. Stops when the round's receiver is dropped.
    pub(super) fn spawn_heartbeat(
        &self,
        kind: &'static JobKind,
        id: i64,
        attempt: i64,
        lost: watch::Sender<bool>,
    ) {
        let db = self.inner.db.clone();
        let every = std::time::Duration::from_millis((kind.lease_ms / 3).max(1) as u64);
        tokio::spawn(async move {
            let sql = "UPDATE jobs SET lease_until_ms = ?, heartbeat_at_ms = ? \
                       WHERE id = ? AND status = 1 AND running_attempt = ?";
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(every) => {}
                    _ = lost.closed() => return,
                }
                let now = now_ms();
                let renewed = both!(&db, |p| sqlx::query(sql)
                    .bind(now + kind.lease_ms)
                    .bind(now)
                    .bind(id)
                    .bind(attempt)
                    .execute(p)
                    .await
                    .map(|r| r.rows_affected()));
                match renewed {
                    Ok(1) => {}
                    Ok(_) => {
                        tracing::warn!(
                            kind = kind.name,
                            id,
                            attempt,
                            "the claim is gone: round flagged as lost"
                        );
                        let _ = lost.send(true);
                        return;
                    }
                    Err(e) => tracing::warn!(kind = kind.name, id, error = %e, "heartbeat failed"),
                }
            }
        });
    }

    /// Run claimed jobs of one kind, at most `parallelism` (and the cap) at once, and
    /// complete each; adds the outcomes to `report`.
    pub(super) async fn run_all(
        &self,
        reg: &Registered,
        jobs: Vec<ClaimedJob>,
        report: &mut RunReport,
    ) {
        if jobs.is_empty() {
            return;
        }
        let width = reg
            .kind
            .parallelism
            .clamp(1, PARALLELISM_MAX)
            .min(reg.kind.cap.map_or(usize::MAX, |c| c as usize));
        let slots = Arc::new(Semaphore::new(width));
        let mut rounds = tokio::task::JoinSet::new();
        for job in jobs {
            report.codes.push(job.code.clone());
            let engine = self.clone();
            let slots = slots.clone();
            let kind = reg.kind;
            let handler = reg.handler.clone();
            rounds.spawn(async move { engine.round(kind, handler, job, slots).await });
        }
        while let Some(done) = rounds.join_next().await {
            match done {
                Ok(Completed::Succeeded) => report.succeeded += 1,
                Ok(Completed::Failed { .. }) => report.failed += 1,
                Ok(Completed::Requeued) => report.requeued += 1,
                Ok(Completed::Stale) => report.fenced += 1,
                Err(e) => {
                    tracing::error!(error = %e, "a job round panicked; its lease will be recovered");
                    report.failed += 1;
                }
            }
        }
    }

    /// One round: check the request, run the handler, complete.
    pub(super) async fn round(
        &self,
        kind: &'static JobKind,
        handler: Arc<dyn JobHandler>,
        job: ClaimedJob,
        slots: Arc<Semaphore>,
    ) -> Completed {
        // The slot bounds handlers at work, not completions waiting to be written.
        let slot = slots.acquire_owned().await;
        let started_at_ms = now_ms();
        // The request is checked after the claim, before any business read (seed
        // §4.3): an oversize one can never succeed and exhausts its retries.
        let outcome = match serde_json::from_str::<Value>(&job.payload) {
            Err(e) => Err(JobFailure::new(format!("payload is not JSON: {e}"))),
            Ok(v) => match check_payload(&v) {
                Err(e) => Err(JobFailure {
                    message: e.to_string(),
                    exhaust: true,
                    fenced: false,
                }),
                Ok(_) => {
                    let span = tracing::info_span!("job", kind = kind.name, code = %job.code,
                        attempt = job.running_attempt, generation = job.generation);
                    tracing::Instrument::instrument(handler.run(&job), span).await
                }
            },
        };
        drop(slot);
        let fenced_write = matches!(&outcome, Err(f) if f.fenced);
        let failure_message = outcome.as_ref().err().map(|f| f.message.clone());
        let completion = Completion {
            id: job.id,
            running_attempt: job.running_attempt,
            generation: job.generation,
            retry_count: job.retry_count,
            max_retry_count: job.max_retry_count,
            backoff: kind.backoff,
            outcome,
            started_at_ms,
        };
        let (tx, rx) = oneshot::channel();
        let completed = match self.inner.completions.send((completion, tx)).await {
            Ok(()) => rx.await.unwrap_or_else(|_| Err("completer stopped".into())),
            Err(_) => Err("completer stopped".into()),
        };
        let completed = match completed {
            Ok(c) => c,
            Err(e) => {
                // The round's result is not recorded; the lease will expire and the job
                // be recovered (at least once, effect once).
                tracing::error!(code = %job.code, error = %e, "could not complete a job round");
                return Completed::Stale;
            }
        };
        let context = (
            job.request_id.clone(),
            job.trace_id.clone(),
            job.first_failed_at_ms.or(Some(started_at_ms)),
        );
        let subject = (
            job.code.as_str(),
            job.business_key.as_str(),
            job.payload.as_str(),
        );
        if fenced_write || completed == Completed::Stale {
            let why = if completed == Completed::Stale {
                format!(
                    "attempt {} of job {} finished after its claim was recovered: its \
                     completion was refused",
                    job.running_attempt, job.code
                )
            } else {
                failure_message.clone().unwrap_or_default()
            };
            self.alert_job(
                AlertKind::JobFenced,
                kind,
                subject,
                context.clone(),
                i64::from(job.retry_count),
                &why,
            )
            .await;
        }
        if let Completed::Failed { exhausted: true } = completed {
            self.alert_job(
                AlertKind::JobRetriesExhausted,
                kind,
                subject,
                context,
                i64::from(job.max_retry_count.max(job.retry_count + 1)),
                failure_message.as_deref().unwrap_or(""),
            )
            .await;
        }
        completed
    }

    pub(super) async fn alert_job(
        &self,
        kind: AlertKind,
        job_kind: &'static JobKind,
        (code, business_key, payload): (&str, &str, &str),
        (request_id, trace_id, first_failure_at_ms): (Option<String>, Option<String>, Option<i64>),
        retry_count: i64,
        message: &str,
    ) {
        let payload: Value = serde_json::from_str(payload).unwrap_or(Value::Null);
        let alert = Alert {
            kind,
            subject: code.to_owned(),
            message: truncate_error(message),
            job: Some(json!({"kind": job_kind.name, "code": code, "business_key": business_key})),
            platform: alerts::payload_field(&payload, &["platform"]),
            business_id: Some(business_key.to_owned()),
            user_affiliate_code: alerts::payload_field(
                &payload,
                &["user_affiliate_code", "affiliate_code", "referral_code"],
            ),
            request_id,
            trace_id,
            first_failure_at_ms,
            retry_count: Some(retry_count),
            audit_path: format!("/v1/jobs/{code}"),
        };
        if let Err(e) = alerts::raise(&self.inner.store, &self.inner.config.alerts, &alert).await {
            tracing::error!(code, error = %e, "could not record an alert in the outbox");
        }
    }

    pub(super) async fn begin_run(
        &self,
        entry: Entry,
        kind: Option<&str>,
    ) -> Result<RunReport, JobError> {
        let sql = "INSERT INTO job_runs (entry, kind, owner, started_at_ms) VALUES (?, ?, ?, ?)";
        let id = match &self.inner.db {
            Db::Mysql(p) => sqlx::query(sql)
                .bind(entry.as_str())
                .bind(kind)
                .bind(&self.inner.config.owner)
                .bind(now_ms())
                .execute(p)
                .await?
                .last_insert_id() as i64,
            Db::Sqlite(p) => sqlx::query(sql)
                .bind(entry.as_str())
                .bind(kind)
                .bind(&self.inner.config.owner)
                .bind(now_ms())
                .execute(p)
                .await?
                .last_insert_rowid(),
        };
        if id % 100 == 0 {
            let prune = "DELETE FROM job_runs WHERE id < ?";
            let _ = both!(&self.inner.db, |p| sqlx::query(prune)
                .bind(id - RUNS_KEPT)
                .execute(p)
                .await
                .map(|_| ()));
        }
        Ok(RunReport {
            run_id: id,
            entry: entry.as_str().into(),
            kind: kind.map(str::to_owned),
            ..Default::default()
        })
    }

    pub(super) async fn end_run(&self, r: &RunReport, outcome: &Result<(), JobError>) {
        let sql = "UPDATE job_runs SET finished_at_ms = ?, ok = ?, paused = ?, recovered = ?, \
                   candidates = ?, claimed = ?, skipped = ?, succeeded = ?, failed = ?, \
                   requeued = ?, fenced = ?, error = ? WHERE id = ?";
        let error = outcome
            .as_ref()
            .err()
            .map(|e| truncate_error(&e.to_string()));
        let ok = outcome.is_ok() && !r.paused;
        let written = both!(&self.inner.db, |p| sqlx::query(sql)
            .bind(now_ms())
            .bind(ok)
            .bind(r.paused)
            .bind(r.recovered)
            .bind(r.candidates)
            .bind(r.claimed)
            .bind(r.skipped)
            .bind(r.succeeded)
            .bind(r.failed)
            .bind(r.requeued)
            .bind(r.fenced)
            .bind(&error)
            .bind(r.run_id)
            .execute(p)
            .await
            .map(|_| ()));
        if let Err(e) = written {
            tracing::warn!(run = r.run_id, error = %e, "could not record the end of a job run");
        }
        metrics::counter!("factledger_job_rounds_total", "outcome" => "succeeded")
            .increment(u64::from(r.succeeded));
        metrics::counter!("factledger_job_rounds_total", "outcome" => "failed")
            .increment(u64::from(r.failed));
        metrics::counter!("factledger_job_rounds_total", "outcome" => "requeued")
            .increment(u64::from(r.requeued));
        metrics::counter!("factledger_job_rounds_total", "outcome" => "fenced")
            .increment(u64::from(r.fenced));
    }
}
