//! The engine's entry points: construction, accessors, background start, submit,
//! maintenance pause, scan, manual retry and kick.

use super::complete::completer;
use super::state::*;
use super::types::*;
use crate::infra::db::{now_ms, Db};
use crate::infra::jobs::{truncate_error, JobError, JobKind};
use crate::infra::store::{DynStore, UnitOfWork};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::mpsc;

impl Engine {
    /// An engine for these kinds (names and prefixes unique) and their handlers.
    pub fn new(
        db: Db,
        store: DynStore,
        config: EngineConfig,
        kinds: Vec<(&'static JobKind, Arc<dyn JobHandler>)>,
    ) -> Result<Engine, JobError> {
        crate::infra::jobs::check_kinds(kinds.iter().map(|(k, _)| *k))?;
        let capped: Vec<&'static str> = kinds
            .iter()
            .filter(|(k, _)| k.cap.is_some())
            .map(|(k, _)| k.name)
            .collect();
        let caps: i64 = kinds.iter().filter_map(|(k, _)| k.cap).sum();
        let total_cap = config.total_cap.max(caps);
        let (kicks, kick_rx) = mpsc::channel(KICK_QUEUE_MAX);
        let (completions, completion_rx) = mpsc::channel(COMPLETIONS_PER_TX_MAX * 4);
        let inner = Arc::new(Inner {
            db: db.clone(),
            store,
            kinds: kinds
                .into_iter()
                .map(|(kind, handler)| (kind.name, Registered { kind, handler }))
                .collect(),
            capped,
            total_cap,
            config,
            kicks,
            kick_rx: std::sync::Mutex::new(Some(kick_rx)),
            completions,
            quota_rows: Default::default(),
        });
        tokio::spawn(completer(db, completion_rx));
        Ok(Engine { inner })
    }

    pub fn db(&self) -> &Db {
        &self.inner.db
    }

    pub fn downgrade(&self) -> WeakEngine {
        WeakEngine {
            inner: Arc::downgrade(&self.inner),
        }
    }

    pub fn store(&self) -> &DynStore {
        &self.inner.store
    }

    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    /// The registered kind of this name.
    pub fn kind(&self, name: &str) -> Option<&'static JobKind> {
        self.inner.kinds.get(name).map(|r| r.kind)
    }

    pub fn kinds(&self) -> impl Iterator<Item = &'static JobKind> + '_ {
        self.inner.kinds.values().map(|r| r.kind)
    }

    /// The total quota in force (the configured one, raised to the sum of kind caps).
    pub fn total_cap(&self) -> i64 {
        self.inner.total_cap
    }

    /// Start the background loop: a scan task per kind (scanning again at once while
    /// it finds work, else every `scan_interval_ms`) and the kick task.
    pub fn start(&self) -> Running {
        let mut tasks = Vec::new();
        for name in self.inner.kinds.keys().copied() {
            let engine = self.clone();
            tasks.push(tokio::spawn(async move {
                let pause = std::time::Duration::from_millis(engine.inner.config.scan_interval_ms);
                loop {
                    let busy = match engine.scan(name, None).await {
                        Ok(r) => r.claimed > 0,
                        Err(e) => {
                            tracing::warn!(kind = name, error = %e, "job scan failed");
                            false
                        }
                    };
                    if !busy {
                        tokio::time::sleep(pause).await;
                    }
                }
            }));
        }
        let rx = self
            .inner
            .kick_rx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(mut rx) = rx {
            let engine = self.clone();
            tasks.push(tokio::spawn(async move {
                while let Some(mut codes) = rx.recv().await {
                    while codes.len() < SELECTOR_ENTRIES_MAX {
                        match rx.try_recv() {
                            Ok(more) => codes.extend(more),
                            Err(_) => break,
                        }
                    }
                    codes.sort();
                    codes.dedup();
                    let engine = engine.clone();
                    // Rounds may be long: each kick runs on its own.
                    tokio::spawn(async move {
                        if let Err(e) = engine.kick(&codes).await {
                            tracing::warn!(error = %e, "kick failed (the scan will take the jobs)");
                        }
                    });
                }
            }));
        }
        Running { tasks }
    }

    /// Ask the kick task to take these jobs soon (after the commit that submitted
    /// them). Never blocks; a kick lost to a full queue is harmless.
    pub fn kick_soon(&self, codes: Vec<String>) {
        if !codes.is_empty() && self.inner.kicks.try_send(codes).is_err() {
            tracing::debug!("kick queue full; the scan will take the jobs");
        }
    }

    /// Submit a job on its own (not with events) and kick it.
    pub async fn submit(&self, job: &crate::infra::jobs::JobSubmit) -> Result<String, JobError> {
        let row = job.row(now_ms())?;
        let code = row.code.clone();
        self.inner
            .store
            .append(&[UnitOfWork {
                jobs: vec![row],
                ..Default::default()
            }])
            .await?;
        self.kick_soon(vec![code.clone()]);
        Ok(code)
    }

    /// Whether jobs are paused (R-JOB-8).
    pub async fn paused(&self) -> Result<bool, JobError> {
        let sql = "SELECT paused FROM job_control WHERE id = 1";
        Ok(both!(&self.inner.db, |p| sqlx::query_scalar::<_, bool>(
            sql
        )
        .fetch_one(p)
        .await?))
    }

    /// Pause (or resume) every entry point; submissions are still accepted. On
    /// MariaDB the change waits for claims in flight (they hold the row shared).
    pub async fn set_paused(
        &self,
        paused: bool,
        by: &str,
        reason: Option<&str>,
    ) -> Result<(), JobError> {
        let sql = "UPDATE job_control SET paused = ?, reason = ?, changed_by = ?, \
                   changed_at_ms = ? WHERE id = 1";
        let reason = reason.map(truncate_error);
        both!(&self.inner.db, |p| sqlx::query(sql)
            .bind(paused)
            .bind(&reason)
            .bind(by)
            .bind(now_ms())
            .execute(p)
            .await
            .map(|_| ())?);
        tracing::warn!(paused, by, reason = ?reason, "job maintenance pause changed");
        Ok(())
    }

    /// One automatic scan of one kind (R-JOB-4/5): recover expired leases, claim due
    /// candidates within quota, run them, complete them.
    pub async fn scan(
        &self,
        kind: &str,
        max_task_count: Option<i64>,
    ) -> Result<RunReport, JobError> {
        let reg = self.registered(kind)?;
        let mut report = self.begin_run(Entry::Scan, Some(reg.kind.name)).await?;
        let outcome = async {
            if self.paused().await? {
                report.paused = true;
                return Ok(());
            }
            report.recovered = self.recover_expired(reg.kind).await?;
            let n = candidate_count(max_task_count, self.inner.config.auto_target);
            let (candidates, claimed, paused) =
                self.claim(reg.kind, Pick::Due(n), report.run_id).await?;
            report.paused = paused;
            report.candidates = candidates;
            report.claimed = claimed.len() as u32;
            report.skipped = candidates - claimed.len() as u32;
            self.run_all(reg, claimed, &mut report).await;
            Ok(())
        }
        .await;
        self.end_run(&report, &outcome).await;
        outcome.map(|()| report)
    }

    /// Manual retry (R-JOB-6): the jobs named by code or business key (merged), one
    /// after the other, without quota, due time or retry limit; only PENDING or
    /// FAILED ones are claimed. Refused while paused.
    pub async fn retry(&self, selector: &Selector) -> Result<RunReport, JobError> {
        let mut report = self.begin_run(Entry::Manual, None).await?;
        let outcome = async {
            if self.paused().await? {
                report.paused = true;
                return Err(JobError::Paused);
            }
            let found = self.find(selector).await?;
            report.candidates = found.len() as u32;
            for (id, kind) in found {
                let Some(reg) = self.inner.kinds.get(kind.as_str()) else {
                    report.skipped += 1;
                    continue;
                };
                let (_, claimed, paused) = self
                    .claim(
                        reg.kind,
                        Pick::Ids {
                            ids: vec![id],
                            auto: false,
                        },
                        report.run_id,
                    )
                    .await?;
                if paused {
                    report.paused = true;
                    return Err(JobError::Paused);
                }
                if claimed.is_empty() {
                    report.skipped += 1;
                    continue;
                }
                report.claimed += 1;
                self.run_all(reg, claimed, &mut report).await;
            }
            Ok(())
        }
        .await;
        self.end_run(&report, &outcome).await;
        outcome.map(|()| report)
    }

    /// Kick (R-JOB-7): take the named jobs now if the scan would take them — due,
    /// retries left, within quota, not paused.
    pub async fn kick(&self, codes: &[String]) -> Result<RunReport, JobError> {
        let mut report = self.begin_run(Entry::Kick, None).await?;
        let outcome = async {
            if self.paused().await? {
                report.paused = true;
                return Ok(());
            }
            let found = self
                .find(&Selector {
                    codes: codes.to_vec(),
                    business_keys: Vec::new(),
                })
                .await?;
            let mut by_kind: BTreeMap<String, Vec<i64>> = BTreeMap::new();
            for (id, kind) in found {
                by_kind.entry(kind).or_default().push(id);
            }
            for (kind, ids) in by_kind {
                let Some(reg) = self.inner.kinds.get(kind.as_str()) else {
                    continue;
                };
                // Candidates are the named jobs the scan would take (due, retries
                // left); skipped ones lost the compare-and-set or found no quota.
                let (candidates, claimed, paused) = self
                    .claim(reg.kind, Pick::Ids { ids, auto: true }, report.run_id)
                    .await?;
                report.paused |= paused;
                report.candidates += candidates;
                report.claimed += claimed.len() as u32;
                report.skipped += candidates - claimed.len() as u32;
                self.run_all(reg, claimed, &mut report).await;
            }
            Ok(())
        }
        .await;
        self.end_run(&report, &outcome).await;
        outcome.map(|()| report)
    }
}
