//! The job engine: claim, run, complete (R-JOB-3 … R-JOB-10).
//!
//! Three entry points take work, and every one goes through the same claim:
//! - **scan** (per kind, in the background loop or by hand): recover expired leases
//!   first, then take the due PENDING/FAILED jobs with retries left, ordered by due
//!   time, retries, id; at most `min(max_task_count, auto_target)` candidates
//!   (normalised as R-JOB-5 says), skipped ones never back-filled;
//! - **manual retry** by codes and/or business keys: serial, no quota, ignores due
//!   time and the retry limit, still only PENDING/FAILED;
//! - **kick** after a commit: the named jobs, with the scan's due-time, retry-limit
//!   and quota checks (seed §9.1 fixed: a kick is a faster scan, not a bypass).
//!
//! **The claim** is one transaction: it reads the maintenance pause under a shared
//! lock (a pause waits for claims in flight and every later claim sees it), locks the
//! quota rows of a capped kind and counts live leases (so quotas are exact under
//! concurrency), selects candidates (MariaDB ≥ 10.6: `FOR UPDATE SKIP LOCKED`, a
//! speed-up only) and takes each by compare-and-set on status, `running_attempt` and
//! `request_generation`. Correctness rests on the compare-and-set alone, so the engine
//! is correct without SKIP LOCKED (TiDB); tests run both ways.
//!
//! **A round** runs the kind's handler with a heartbeat that renews the lease every
//! third of it (a lost lease flags the round as lost; its writes are fenced anyway).
//! **Completion** is again a compare-and-set on the claim: a newer request generation
//! sends the job back to PENDING (retries 0, error cleared, due now) instead of
//! SUCCESS or FAILED; a failure adds one retry and sets the due time by the kind's
//! backoff; a stale claim's completion is refused and alerted. Completions of many
//! rounds are written in one transaction by a completer task.

use super::{
    check_payload, truncate_error, JobError, JobKind, JobStatus, BUSINESS_KEY_CHARS_MAX,
    PARALLELISM_MAX,
};
use crate::infra::alerts::{self, Alert, AlertContext, AlertKind};
use crate::infra::db::{now_ms, Db, RowText};
use crate::infra::store::{DynStore, Fence, StoreError, UnitOfWork};
use async_trait::async_trait;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, watch, Semaphore};

/// R-JOB-5: `max_task_count` missing or ≤ 0 means 100, over 500 means 500.
pub const MAX_TASK_COUNT_DEFAULT: i64 = 100;
pub const MAX_TASK_COUNT_MAX: i64 = 500;
/// R-JOB-5: candidates per automatic run, default 50, at most 200.
pub const AUTO_TARGET_DEFAULT: i64 = 50;
pub const AUTO_TARGET_MAX: i64 = 200;
/// How often the background loop scans each kind when idle.
pub const SCAN_INTERVAL_MS_DEFAULT: u64 = 1_000;
/// Most codes and keys one manual selector or kick may name.
pub const SELECTOR_ENTRIES_MAX: usize = 500;
/// Completions written per transaction by the completer.
const COMPLETIONS_PER_TX_MAX: usize = 256;
/// Kicks waiting for the kick task; beyond this a kick is dropped (harmless: the scan
/// is the backstop).
const KICK_QUEUE_MAX: usize = 4_096;
/// Scheduler runs kept in `job_runs`; older rows are pruned now and then.
const RUNS_KEPT: i64 = 10_000;

/// Engine settings.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// This process's lease owner id.
    pub owner: String,
    /// Running jobs of all capped kinds together (raised to the sum of kind caps).
    pub total_cap: i64,
    /// Candidates per automatic run (clamped to 1 … [`AUTO_TARGET_MAX`]).
    pub auto_target: i64,
    pub scan_interval_ms: u64,
    /// Use `FOR UPDATE SKIP LOCKED` in claims (MariaDB ≥ 10.6 only; a speed-up).
    pub skip_locked: bool,
    pub alerts: AlertContext,
}

impl EngineConfig {
    pub fn new(owner: impl Into<String>) -> Self {
        EngineConfig {
            owner: owner.into(),
            total_cap: super::TOTAL_CAP_DEFAULT,
            auto_target: AUTO_TARGET_DEFAULT,
            scan_interval_ms: SCAN_INTERVAL_MS_DEFAULT,
            skip_locked: false,
            alerts: AlertContext::default(),
        }
    }
}

/// A job as its handler sees it, with its claim.
#[derive(Debug)]
pub struct ClaimedJob {
    pub id: i64,
    pub kind: &'static str,
    pub code: String,
    pub business_key: String,
    pub payload: String,
    /// Retries before this round.
    pub retry_count: i32,
    pub max_retry_count: i32,
    /// The fencing token of this round.
    pub running_attempt: i64,
    /// The request generation this round works on.
    pub generation: i64,
    pub request_id: Option<String>,
    pub trace_id: Option<String>,
    pub first_failed_at_ms: Option<i64>,
    lost: watch::Receiver<bool>,
}

impl ClaimedJob {
    /// Fence for every unit this round writes (`UnitOfWork::fence`,
    /// `CommandEnvelope::fence`): it commits only while this claim is current.
    pub fn fence(&self) -> Fence {
        Fence {
            job_id: self.id,
            running_attempt: self.running_attempt,
        }
    }

    /// True once the heartbeat found the claim gone (lease recovered, re-claimed).
    /// Handlers may stop early; their writes are refused either way.
    pub fn claim_lost(&self) -> bool {
        *self.lost.borrow()
    }

    pub fn payload_json(&self) -> Result<Value, JobFailure> {
        serde_json::from_str(&self.payload)
            .map_err(|e| JobFailure::new(format!("payload is not JSON: {e}")))
    }
}

/// What a round did, for `GET /v1/jobs/{code}` (R-JOB-10).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RoundReport {
    /// Counts and facts the handler reports ("resolved 0 scopes", "changed 0 rows").
    pub summary: Value,
    /// Level 3: the business data and everything downstream are done (not only this
    /// round's own part).
    pub business_done: bool,
}

impl RoundReport {
    pub fn done(summary: Value) -> Self {
        RoundReport {
            summary,
            business_done: true,
        }
    }
}

/// A failed round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobFailure {
    pub message: String,
    /// Stop automatic retries (retry count set to the limit): the request itself can
    /// never succeed (oversize payload).
    pub exhaust: bool,
    /// The round's business write was refused by its fence.
    pub fenced: bool,
}

impl JobFailure {
    pub fn new(message: impl Into<String>) -> Self {
        JobFailure {
            message: message.into(),
            exhaust: false,
            fenced: false,
        }
    }
}

impl From<StoreError> for JobFailure {
    fn from(e: StoreError) -> Self {
        JobFailure {
            fenced: matches!(e, StoreError::Fenced { .. }),
            message: e.to_string(),
            exhaust: false,
        }
    }
}

/// The business side of a kind: one round of one job.
#[async_trait]
pub trait JobHandler: Send + Sync + 'static {
    async fn run(&self, job: &ClaimedJob) -> Result<RoundReport, JobFailure>;
}

/// Which entry point took the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    Scan,
    Manual,
    Kick,
}

impl Entry {
    fn as_str(self) -> &'static str {
        match self {
            Entry::Scan => "scan",
            Entry::Manual => "manual",
            Entry::Kick => "kick",
        }
    }
}

/// Level 1 of R-JOB-10: what one scheduler run found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct RunReport {
    pub run_id: i64,
    pub entry: String,
    pub kind: Option<String>,
    /// The run stopped before claiming anything: jobs are paused.
    pub paused: bool,
    pub recovered: u32,
    pub candidates: u32,
    pub claimed: u32,
    /// Candidates not claimed: lost the compare-and-set, no quota, not claimable.
    pub skipped: u32,
    pub succeeded: u32,
    pub failed: u32,
    /// Rounds that ended while a newer request generation was waiting: back to PENDING.
    pub requeued: u32,
    /// Rounds whose claim was stale when they completed (completion refused).
    pub fenced: u32,
    pub codes: Vec<String>,
}

/// A manual retry selector (R-JOB-6): codes OR business keys, merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    pub codes: Vec<String>,
    pub business_keys: Vec<String>,
}

impl Selector {
    /// Parse a selector; a malformed one is an error naming the field, never a silent
    /// fall-back to an automatic scan (seed §3.1).
    pub fn parse(codes: Vec<String>, business_keys: Vec<String>) -> Result<Selector, JobError> {
        if codes.is_empty() && business_keys.is_empty() {
            return Err(JobError::Invalid {
                field: "codes",
                reason: "name at least one job code or business key (an empty selector \
                         never falls back to an automatic scan)"
                    .into(),
            });
        }
        if codes.len() + business_keys.len() > SELECTOR_ENTRIES_MAX {
            return Err(JobError::Invalid {
                field: "codes",
                reason: format!("at most {SELECTOR_ENTRIES_MAX} codes and business keys together"),
            });
        }
        for (i, c) in codes.iter().enumerate() {
            if !is_code(c) {
                return Err(JobError::Invalid {
                    field: "codes",
                    reason: format!(
                        "codes[{i}] = {c:?} is not a job code (<PREFIX>:<32 lowercase hex>)"
                    ),
                });
            }
        }
        for (i, k) in business_keys.iter().enumerate() {
            let n = k.chars().count();
            if k.trim().is_empty() || n > BUSINESS_KEY_CHARS_MAX {
                return Err(JobError::Invalid {
                    field: "business_keys",
                    reason: format!(
                        "business_keys[{i}] must be 1 to {BUSINESS_KEY_CHARS_MAX} characters"
                    ),
                });
            }
        }
        let mut codes = codes;
        codes.sort();
        codes.dedup();
        let mut business_keys = business_keys;
        business_keys.sort();
        business_keys.dedup();
        Ok(Selector {
            codes,
            business_keys,
        })
    }
}

/// `<PREFIX>:<md5 hex>`.
pub fn is_code(c: &str) -> bool {
    match c.split_once(':') {
        Some((p, h)) => {
            !p.is_empty()
                && p.len() <= 16
                && p.bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
                && h.len() == 32
                && h.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        }
        None => false,
    }
}

/// Normalised candidate count of one automatic run (R-JOB-5).
pub fn candidate_count(max_task_count: Option<i64>, auto_target: i64) -> i64 {
    let max = match max_task_count {
        None => MAX_TASK_COUNT_DEFAULT,
        Some(n) if n <= 0 => MAX_TASK_COUNT_DEFAULT,
        Some(n) => n.min(MAX_TASK_COUNT_MAX),
    };
    let target = if auto_target <= 0 {
        AUTO_TARGET_DEFAULT
    } else {
        auto_target.min(AUTO_TARGET_MAX)
    };
    max.min(target)
}

struct Registered {
    kind: &'static JobKind,
    handler: Arc<dyn JobHandler>,
}

struct Inner {
    db: Db,
    store: DynStore,
    kinds: BTreeMap<&'static str, Registered>,
    /// Capped kinds, for the total quota.
    capped: Vec<&'static str>,
    total_cap: i64,
    config: EngineConfig,
    kicks: mpsc::Sender<Vec<String>>,
    kick_rx: std::sync::Mutex<Option<mpsc::Receiver<Vec<String>>>>,
    completions: mpsc::Sender<(Completion, oneshot::Sender<Result<Completed, String>>)>,
}

/// The job engine of this process. Cheap to clone.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

/// A handle on an engine that does not keep it alive: for handlers that use the
/// engine they are registered in (a strong handle there would be a cycle that never
/// drops the pool or the completer).
#[derive(Clone, Default)]
pub struct WeakEngine {
    inner: std::sync::Weak<Inner>,
}

impl WeakEngine {
    pub fn upgrade(&self) -> Option<Engine> {
        self.inner.upgrade().map(|inner| Engine { inner })
    }
}

/// Background tasks of a started engine; dropping it stops them (rounds in flight are
/// abandoned like a crash: their leases expire and are recovered).
pub struct Running {
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Columns of a job read for a claim (the order `claimed_from_row` reads).
const CLAIM_COLUMNS: &str = "id, code, business_key, payload, retry_count, \
     max_retry_count, running_attempt, request_generation, request_id, trace_id, \
     first_failed_at_ms";

struct Candidate {
    id: i64,
    code: String,
    business_key: String,
    payload: String,
    retry_count: i32,
    max_retry_count: i32,
    running_attempt: i64,
    request_generation: i64,
    request_id: Option<String>,
    trace_id: Option<String>,
    first_failed_at_ms: Option<i64>,
}

/// Decode a [`CLAIM_COLUMNS`] row of either backend.
macro_rules! candidate {
    ($r:expr) => {{
        use sqlx::Row;
        let r = $r;
        Ok::<Candidate, sqlx::Error>(Candidate {
            id: r.try_get(0)?,
            code: r.text(1)?,
            business_key: r.text(2)?,
            payload: r.text(3)?,
            retry_count: r.try_get(4)?,
            max_retry_count: r.try_get(5)?,
            running_attempt: r.try_get(6)?,
            request_generation: r.try_get(7)?,
            request_id: r.opt_text(8)?,
            trace_id: r.opt_text(9)?,
            first_failed_at_ms: r.try_get(10)?,
        })
    }};
}

/// How a claim picks and checks its jobs.
#[derive(Debug, Clone)]
enum Pick {
    /// The automatic scan's query, at most this many.
    Due(i64),
    /// These job ids; `auto` applies the scan's due-time, retry-limit and quota rules
    /// (kick), without it none of them (manual retry).
    Ids { ids: Vec<i64>, auto: bool },
}

/// What completing a round writes.
#[derive(Debug)]
struct Completion {
    id: i64,
    running_attempt: i64,
    generation: i64,
    retry_count: i32,
    max_retry_count: i32,
    backoff: super::Backoff,
    outcome: Result<RoundReport, JobFailure>,
    started_at_ms: i64,
}

/// What completing did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Completed {
    Succeeded,
    Failed {
        exhausted: bool,
    },
    Requeued,
    /// The claim was no longer current: nothing was written.
    Stale,
}

/// Run a query on whichever pool `$db` holds: `both!($db, |p| expr)`.
macro_rules! both {
    ($db:expr, |$p:ident| $body:expr) => {
        match $db {
            Db::Mysql($p) => $body,
            Db::Sqlite($p) => $body,
        }
    };
}

impl Engine {
    /// An engine for these kinds (names and prefixes unique) and their handlers.
    pub fn new(
        db: Db,
        store: DynStore,
        config: EngineConfig,
        kinds: Vec<(&'static JobKind, Arc<dyn JobHandler>)>,
    ) -> Result<Engine, JobError> {
        super::check_kinds(kinds.iter().map(|(k, _)| *k))?;
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
    pub async fn submit(&self, job: &super::JobSubmit) -> Result<String, JobError> {
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

    fn registered(&self, kind: &str) -> Result<&Registered, JobError> {
        self.inner
            .kinds
            .get(kind)
            .ok_or_else(|| JobError::UnknownKind(kind.to_owned()))
    }

    /// Ids and kinds of the jobs a selector names (codes OR stored business keys).
    async fn find(&self, s: &Selector) -> Result<Vec<(i64, String)>, JobError> {
        let mut keys: Vec<String> = Vec::new();
        for k in &s.business_keys {
            // The stored form depends on the kind's prefix when the key is long.
            for reg in self.inner.kinds.values() {
                keys.push(reg.kind.stored_key(k));
            }
            keys.push(k.clone());
        }
        keys.sort();
        keys.dedup();
        let mut found = BTreeMap::new();
        for (column, values) in [("code", &s.codes), ("business_key", &keys)] {
            for chunk in values.chunks(100) {
                if chunk.is_empty() {
                    continue;
                }
                let sql = format!(
                    "SELECT id, kind FROM jobs WHERE {column} IN ({}) ORDER BY id",
                    vec!["?"; chunk.len()].join(", ")
                );
                let rows: Vec<(i64, String)> = both!(&self.inner.db, |p| {
                    let mut q = sqlx::query(&sql);
                    for v in chunk {
                        q = q.bind(v);
                    }
                    q.fetch_all(p)
                        .await?
                        .iter()
                        .map(|r| Ok((sqlx::Row::try_get(r, 0)?, r.text(1)?)))
                        .collect::<Result<Vec<_>, sqlx::Error>>()?
                });
                found.extend(rows);
            }
        }
        Ok(found.into_iter().collect())
    }

    /// Recover the kind's RUNNING jobs whose lease expired (R-JOB-3): FAILED, one
    /// more retry, a timeout error, due now (the retry limit still applies). Alerts
    /// for the ones that have no retry left.
    async fn recover_expired(&self, kind: &'static JobKind) -> Result<u32, JobError> {
        let now = now_ms();
        // Runs before every scan: first the ids alone, from the index (usually none).
        let expired_ids: Vec<i64> = both!(&self.inner.db, |p| sqlx::query_scalar(
            "SELECT id FROM jobs WHERE kind = ? AND status = 1 AND lease_until_ms < ?"
        )
        .bind(kind.name)
        .bind(now)
        .fetch_all(p)
        .await?);
        if expired_ids.is_empty() {
            return Ok(0);
        }
        let find = format!(
            "SELECT id, running_attempt, lease_owner, code, business_key, payload, \
             retry_count, max_retry_count, request_id, trace_id, first_failed_at_ms \
             FROM jobs WHERE id IN ({}) AND status = 1 AND lease_until_ms < ?",
            expired_ids
                .iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        type Expired = (i64, i64, Option<String>, String, String, String, i32, i32);
        type Context = (Option<String>, Option<String>, Option<i64>);
        let expired: Vec<(Expired, Context)> = both!(&self.inner.db, |p| {
            sqlx::query(&find)
                .bind(now)
                .fetch_all(p)
                .await?
                .iter()
                .map(|r| {
                    use sqlx::Row;
                    Ok((
                        (
                            r.try_get(0)?,
                            r.try_get(1)?,
                            r.opt_text(2)?,
                            r.text(3)?,
                            r.text(4)?,
                            r.text(5)?,
                            r.try_get(6)?,
                            r.try_get(7)?,
                        ),
                        (r.opt_text(8)?, r.opt_text(9)?, r.try_get(10)?),
                    ))
                })
                .collect::<Result<Vec<_>, sqlx::Error>>()?
        });
        let recover = "UPDATE jobs SET status = 3, retry_count = retry_count + 1, \
                       next_execute_at_ms = ?, last_error = ?, \
                       first_failed_at_ms = COALESCE(first_failed_at_ms, ?), \
                       lease_owner = NULL, lease_until_ms = NULL, updated_at_ms = ? \
                       WHERE id = ? AND status = 1 AND running_attempt = ? AND lease_until_ms < ?";
        let mut recovered = 0;
        for ((id, attempt, owner, code, key, payload, retry, max), (req, trace, first)) in expired {
            let error = truncate_error(&format!(
                "lease expired: attempt {attempt} of {} stopped renewing it; recovered as failed",
                owner.as_deref().unwrap_or("an unknown owner")
            ));
            let n = both!(&self.inner.db, |p| sqlx::query(recover)
                .bind(now)
                .bind(&error)
                .bind(now)
                .bind(now)
                .bind(id)
                .bind(attempt)
                .bind(now)
                .execute(p)
                .await?
                .rows_affected());
            if n == 1 {
                recovered += 1;
                tracing::warn!(kind = kind.name, code = %code, attempt, "recovered an expired lease");
                if retry + 1 >= max {
                    self.alert_job(
                        AlertKind::JobRetriesExhausted,
                        kind,
                        (&code, &key, &payload),
                        (req, trace, first.or(Some(now))),
                        i64::from(retry + 1),
                        &error,
                    )
                    .await;
                }
            }
        }
        Ok(recovered)
    }

    /// One claim transaction. Returns the candidates it considered, the jobs it
    /// claimed and whether it found jobs paused.
    async fn claim(
        &self,
        kind: &'static JobKind,
        pick: Pick,
        run_id: i64,
    ) -> Result<(u32, Vec<ClaimedJob>, bool), JobError> {
        let now = now_ms();
        let quota = kind.cap.is_some() && !matches!(pick, Pick::Ids { auto: false, .. });
        if quota {
            self.ensure_quota_row(kind.name).await?;
        }
        let mysql = matches!(self.inner.db, Db::Mysql(_));
        let skip_locked = if mysql && self.inner.config.skip_locked {
            " FOR UPDATE SKIP LOCKED"
        } else {
            ""
        };
        let (select, binds): (String, Vec<i64>) = match &pick {
            Pick::Due(n) => (
                format!(
                    "SELECT {CLAIM_COLUMNS} FROM jobs WHERE kind = ? AND auto_eligible = 1 \
                     AND next_execute_at_ms <= ? ORDER BY next_execute_at_ms, retry_count, id \
                     LIMIT {n}{skip_locked}"
                ),
                vec![now],
            ),
            Pick::Ids { ids, auto } => {
                let filter = if *auto {
                    "AND auto_eligible = 1 AND next_execute_at_ms <= ? \
                     ORDER BY next_execute_at_ms, retry_count, id"
                } else {
                    "AND status IN (0, 3) ORDER BY id"
                };
                (
                    format!(
                        "SELECT {CLAIM_COLUMNS} FROM jobs WHERE kind = ? AND id IN ({}) \
                         {filter}{skip_locked}",
                        ids.iter()
                            .map(|i| i.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    if *auto { vec![now] } else { Vec::new() },
                )
            }
        };
        let guard = match &pick {
            Pick::Ids { auto: false, .. } => "",
            _ => " AND retry_count < max_retry_count AND next_execute_at_ms <= ?",
        };
        let take = format!(
            "UPDATE jobs SET status = 1, running_attempt = running_attempt + 1, \
             running_generation = request_generation, lease_owner = ?, lease_until_ms = ?, \
             heartbeat_at_ms = ?, last_error = NULL, last_run_id = ?, updated_at_ms = ? \
             WHERE status IN (0, 3){guard}"
        );
        let lease_until = now + kind.lease_ms;
        let owner = &self.inner.config.owner;
        let capped = &self.inner.capped;
        let total_cap = self.inner.total_cap;
        let pause_sql = if mysql {
            "SELECT paused FROM job_control WHERE id = 1 LOCK IN SHARE MODE"
        } else {
            "SELECT paused FROM job_control WHERE id = 1"
        };
        macro_rules! claim_tx {
            ($tx:ident) => {{
                let paused: bool = sqlx::query_scalar(pause_sql).fetch_one(&mut *$tx).await?;
                if paused {
                    return Ok((0, Vec::new(), true));
                }
                let mut room = i64::MAX;
                if quota {
                    let lock = if mysql {
                        "SELECT name FROM job_quota_locks WHERE name IN ('*', ?) \
                         ORDER BY name FOR UPDATE"
                    } else {
                        "SELECT name FROM job_quota_locks WHERE name IN ('*', ?)"
                    };
                    sqlx::query(lock)
                        .bind(kind.name)
                        .fetch_all(&mut *$tx)
                        .await?;
                    let live = "SELECT COUNT(*) FROM jobs WHERE status = 1 AND kind = ? \
                                AND lease_until_ms > ?";
                    let running: i64 = sqlx::query_scalar(live)
                        .bind(kind.name)
                        .bind(now)
                        .fetch_one(&mut *$tx)
                        .await?;
                    let all = format!(
                        "SELECT COUNT(*) FROM jobs WHERE status = 1 AND kind IN ({}) \
                         AND lease_until_ms > ?",
                        vec!["?"; capped.len()].join(", ")
                    );
                    let mut q = sqlx::query_scalar(&all);
                    for k in capped {
                        q = q.bind(*k);
                    }
                    let running_all: i64 = q.bind(now).fetch_one(&mut *$tx).await?;
                    room = (kind.cap.unwrap_or(i64::MAX) - running)
                        .min(total_cap - running_all)
                        .max(0);
                }
                let mut q = sqlx::query(&select).bind(kind.name);
                for b in &binds {
                    q = q.bind(*b);
                }
                let candidates = q
                    .fetch_all(&mut *$tx)
                    .await?
                    .iter()
                    .map(|r| candidate!(r))
                    .collect::<Result<Vec<_>, sqlx::Error>>()?;
                // One compare-and-set statement for every candidate within quota (a
                // row each: status, running_attempt and request_generation as read);
                // the rows it did take are the ones now carrying this run and owner.
                let wanted: Vec<&Candidate> =
                    candidates.iter().take(room.clamp(0, i64::MAX) as usize).collect();
                let mut claimed = Vec::new();
                if !wanted.is_empty() {
                    let cas = wanted
                        .iter()
                        .map(|c| {
                            format!(
                                "(id = {} AND running_attempt = {} AND request_generation = {})",
                                c.id, c.running_attempt, c.request_generation
                            )
                        })
                        .collect::<Vec<_>>()
                        .join(" OR ");
                    let ids = wanted
                        .iter()
                        .map(|c| c.id.to_string())
                        .collect::<Vec<_>>()
                        .join(", ");
                    // `id IN` first: the rows are found by primary key.
                    let take = format!("{take} AND id IN ({ids}) AND ({cas})");
                    let mut q = sqlx::query(&take)
                        .bind(owner)
                        .bind(lease_until)
                        .bind(now)
                        .bind(run_id)
                        .bind(now);
                    if !guard.is_empty() {
                        q = q.bind(now);
                    }
                    let taken = q.execute(&mut *$tx).await?.rows_affected();
                    if taken as usize == wanted.len() {
                        claimed = wanted;
                    } else if taken > 0 {
                        let ours: std::collections::HashMap<i64, i64> = sqlx::query_as::<_, (i64, i64)>(
                            &format!(
                                "SELECT id, running_attempt FROM jobs WHERE id IN ({ids}) \
                                 AND status = 1 AND last_run_id = ? AND lease_owner = ?"
                            ),
                        )
                        .bind(run_id)
                        .bind(owner)
                        .fetch_all(&mut *$tx)
                        .await?
                        .into_iter()
                        .collect();
                        claimed = wanted
                            .into_iter()
                            .filter(|c| ours.get(&c.id) == Some(&(c.running_attempt + 1)))
                            .collect();
                    }
                }
                let claimed = claimed.into_iter().map(|c| self.claimed(kind, c)).collect();
                (candidates.len() as u32, claimed)
            }};
        }
        let (n, claimed): (u32, Vec<(ClaimedJob, watch::Sender<bool>)>) = match &self.inner.db {
            Db::Mysql(p) => {
                let mut tx = p.begin().await?;
                let out = claim_tx!(tx);
                tx.commit().await?;
                out
            }
            Db::Sqlite(p) => {
                let mut tx = p.begin_with("BEGIN IMMEDIATE").await?;
                let out = claim_tx!(tx);
                tx.commit().await?;
                out
            }
        };
        // Heartbeats start at the claim, so a job waiting for a free handler slot
        // keeps its lease.
        let jobs = claimed
            .into_iter()
            .map(|(job, lost)| {
                self.spawn_heartbeat(kind, job.id, job.running_attempt, lost);
                job
            })
            .collect();
        Ok((n, jobs, false))
    }

    fn claimed(&self, kind: &'static JobKind, c: &Candidate) -> (ClaimedJob, watch::Sender<bool>) {
        let (tx, rx) = watch::channel(false);
        (
            ClaimedJob {
                id: c.id,
                kind: kind.name,
                code: c.code.clone(),
                business_key: c.business_key.clone(),
                payload: c.payload.clone(),
                retry_count: c.retry_count,
                max_retry_count: c.max_retry_count,
                running_attempt: c.running_attempt + 1,
                generation: c.request_generation,
                request_id: c.request_id.clone(),
                trace_id: c.trace_id.clone(),
                first_failed_at_ms: c.first_failed_at_ms,
                lost: rx,
            },
            tx,
        )
    }

    async fn ensure_quota_row(&self, kind: &str) -> Result<(), JobError> {
        let sql = "INSERT INTO job_quota_locks (name) SELECT ? WHERE NOT EXISTS \
                   (SELECT 1 FROM job_quota_locks WHERE name = ?)";
        let created = both!(&self.inner.db, |p| sqlx::query(sql)
            .bind(kind)
            .bind(kind)
            .execute(p)
            .await
            .map(|_| ()));
        match created {
            // Two first uses at once: the row is there either way.
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => Ok(()),
            other => other.map(|_| ()).map_err(JobError::from),
        }
    }

    /// Renew the lease every third of it while the round runs; flag the round as lost
    /// when the claim is gone. Stops when the round's receiver is dropped.
    fn spawn_heartbeat(
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
    async fn run_all(&self, reg: &Registered, jobs: Vec<ClaimedJob>, report: &mut RunReport) {
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
    async fn round(
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

    async fn alert_job(
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

    async fn begin_run(&self, entry: Entry, kind: Option<&str>) -> Result<RunReport, JobError> {
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

    async fn end_run(&self, r: &RunReport, outcome: &Result<(), JobError>) {
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

/// Write completions in batches: one transaction for whatever is waiting.
async fn completer(
    db: Db,
    mut rx: mpsc::Receiver<(Completion, oneshot::Sender<Result<Completed, String>>)>,
) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < COMPLETIONS_PER_TX_MAX {
            match rx.try_recv() {
                Ok(c) => batch.push(c),
                Err(_) => break,
            }
        }
        let (completions, replies): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
        match complete_batch(&db, &completions).await {
            Ok(results) => {
                for (reply, r) in replies.into_iter().zip(results) {
                    let _ = reply.send(Ok(r));
                }
            }
            Err(e) => {
                let e = e.to_string();
                for reply in replies {
                    let _ = reply.send(Err(e.clone()));
                }
            }
        }
    }
}

/// Complete rounds by compare-and-set on their claims, in one transaction: read the
/// jobs' current claim and generation (locked), decide each completion, write them
/// (MariaDB: one script, one round trip).
async fn complete_batch(db: &Db, batch: &[Completion]) -> Result<Vec<Completed>, sqlx::Error> {
    let now = now_ms();
    let ids = batch
        .iter()
        .map(|c| c.id.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let current_sql = |lock: &str| {
        format!(
            "SELECT id, status, running_attempt, request_generation FROM jobs \
             WHERE id IN ({ids}){lock}"
        )
    };
    let decide = |current: &HashMap<i64, (i64, i64, i64)>| {
        batch
            .iter()
            .map(|c| decide_completion(c, current.get(&c.id).copied(), now))
            .collect::<Vec<_>>()
    };
    const WHERE_CLAIM: &str = "WHERE id = ? AND status = 1 AND running_attempt = ?";
    match db {
        Db::Mysql(p) => {
            use crate::infra::store::mysql::lit;
            let mut tx = p.begin().await?;
            let current: HashMap<i64, (i64, i64, i64)> =
                sqlx::query_as::<_, (i64, i64, i64, i64)>(&current_sql(" FOR UPDATE"))
                    .fetch_all(&mut *tx)
                    .await?
                    .into_iter()
                    .map(|(id, s, a, g)| (id, (s, a, g)))
                    .collect();
            let decided = decide(&current);
            // One UPDATE for the whole batch, each column a CASE on the id. The rows
            // are locked and were checked above, so every one of them matches; the
            // compare-and-set stays in the WHERE all the same.
            let writes: Vec<(&Completion, &Set)> = batch
                .iter()
                .zip(&decided)
                .filter_map(|(c, (_, set))| set.as_ref().map(|s| (c, s)))
                .collect();
            if !writes.is_empty() {
                let opt = |v: &Option<String>| v.as_deref().map_or_else(|| "NULL".to_owned(), lit);
                let opt_n = |v: Option<i64>| v.map_or_else(|| "NULL".to_owned(), |n| n.to_string());
                let case = |value: &dyn Fn(&Set) -> String| {
                    let mut out = String::from("CASE id");
                    for (c, set) in &writes {
                        out.push_str(&format!(" WHEN {} THEN {}", c.id, value(set)));
                    }
                    out.push_str(" END");
                    out
                };
                let ids = writes
                    .iter()
                    .map(|(c, _)| c.id.to_string())
                    .collect::<Vec<_>>()
                    .join(", ");
                let claims = writes
                    .iter()
                    .map(|(c, _)| {
                        format!(
                            "(id = {} AND running_attempt = {})",
                            c.id, c.running_attempt
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(" OR ");
                let sql = format!(
                    "UPDATE jobs SET status = {}, retry_count = {}, last_error = {}, \
                     first_failed_at_ms = {}, next_execute_at_ms = {}, last_round = {}, \
                     lease_owner = NULL, lease_until_ms = NULL, updated_at_ms = {now} \
                     WHERE id IN ({ids}) AND status = 1 AND ({claims})",
                    case(&|s| s.status.to_string()),
                    case(&|s| s.retry_count.to_string()),
                    case(&|s| opt(&s.last_error)),
                    case(&|s| opt_n(s.first_failed_at_ms)),
                    case(&|s| s.next_execute_at_ms.to_string()),
                    case(&|s| lit(&s.last_round)),
                );
                let n = crate::infra::db::mysql_execute_text(&mut tx, &sql).await?;
                if n as usize != writes.len() {
                    tx.rollback().await?;
                    return Err(sqlx::Error::Protocol(format!(
                        "completing {} locked jobs changed {n} rows",
                        writes.len()
                    )));
                }
            }
            tx.commit().await?;
            Ok(decided.into_iter().map(|(result, _)| result).collect())
        }
        Db::Sqlite(p) => {
            let mut tx = p.begin_with("BEGIN IMMEDIATE").await?;
            let current: HashMap<i64, (i64, i64, i64)> =
                sqlx::query_as::<_, (i64, i64, i64, i64)>(&current_sql(""))
                    .fetch_all(&mut *tx)
                    .await?
                    .into_iter()
                    .map(|(id, s, a, g)| (id, (s, a, g)))
                    .collect();
            let mut results = Vec::with_capacity(batch.len());
            for (c, (result, set)) in batch.iter().zip(decide(&current)) {
                let Some(set) = set else {
                    results.push(result);
                    continue;
                };
                let n = sqlx::query(&format!(
                    "UPDATE jobs SET status = ?, retry_count = ?, last_error = ?, \
                     first_failed_at_ms = ?, next_execute_at_ms = ?, last_round = ?, \
                     lease_owner = NULL, lease_until_ms = NULL, updated_at_ms = ? {WHERE_CLAIM}"
                ))
                .bind(set.status)
                .bind(set.retry_count)
                .bind(&set.last_error)
                .bind(set.first_failed_at_ms)
                .bind(set.next_execute_at_ms)
                .bind(&set.last_round)
                .bind(now)
                .bind(c.id)
                .bind(c.running_attempt)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                results.push(if n == 1 { result } else { Completed::Stale });
            }
            tx.commit().await?;
            Ok(results)
        }
    }
}

struct Set {
    status: i32,
    retry_count: i32,
    last_error: Option<String>,
    first_failed_at_ms: Option<i64>,
    next_execute_at_ms: i64,
    last_round: String,
}

/// What a completion writes, given the job's current `(status, running_attempt,
/// request_generation)`; `None` when the claim is stale (nothing may be written).
fn decide_completion(
    c: &Completion,
    current: Option<(i64, i64, i64)>,
    now: i64,
) -> (Completed, Option<Set>) {
    let Some((status, attempt, generation)) = current else {
        return (Completed::Stale, None);
    };
    if status != JobStatus::Running as i64 || attempt != c.running_attempt {
        return (Completed::Stale, None);
    }
    let newer = generation > c.generation;
    let (summary, business_done, error) = match &c.outcome {
        Ok(r) => (r.summary.clone(), r.business_done, None),
        Err(f) => (Value::Null, false, Some(truncate_error(&f.message))),
    };
    let (completed, set) = if newer {
        // A newer fact arrived while this round ran: run again, from a clean slate.
        (
            Completed::Requeued,
            (JobStatus::Pending, 0, None, None, now),
        )
    } else {
        match &c.outcome {
            Ok(_) => (
                Completed::Succeeded,
                (JobStatus::Success, c.retry_count, None, None, now),
            ),
            Err(f) => {
                let retry = if f.exhaust {
                    c.max_retry_count.max(c.retry_count + 1)
                } else {
                    c.retry_count + 1
                };
                (
                    Completed::Failed {
                        exhausted: retry >= c.max_retry_count,
                    },
                    (
                        JobStatus::Failed,
                        retry,
                        error.clone(),
                        Some(now),
                        now + c.backoff.delay_ms(retry),
                    ),
                )
            }
        }
    };
    let outcome = match completed {
        Completed::Succeeded => "succeeded",
        Completed::Failed { .. } => "failed",
        Completed::Requeued => "requeued_for_newer_generation",
        Completed::Stale => "stale",
    };
    let last_round = json!({
        "attempt": c.running_attempt,
        "generation": c.generation,
        "round_ok": c.outcome.is_ok(),
        "outcome": outcome,
        "business_done": business_done && completed == Completed::Succeeded,
        "summary": summary,
        "error": error,
        "started_at_ms": c.started_at_ms,
        "finished_at_ms": now,
    })
    .to_string();
    let (status, retry_count, last_error, first_failed, next) = set;
    (
        completed,
        Some(Set {
            status: status as i32,
            retry_count,
            last_error,
            // The first failure of a run of failures is kept (for alerts); a success
            // or a requeue clears it.
            first_failed_at_ms: first_failed,
            next_execute_at_ms: next,
            last_round,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_candidate_count_is_the_smaller_of_the_normalised_limits() {
        assert_eq!(candidate_count(None, 50), 50);
        assert_eq!(candidate_count(Some(0), 50), 50);
        assert_eq!(candidate_count(Some(-3), 500), 100);
        assert_eq!(candidate_count(Some(500), 50), 50);
        assert_eq!(candidate_count(Some(900), 1_000), 200);
        assert_eq!(candidate_count(Some(900), 300), 200);
        assert_eq!(candidate_count(Some(30), 50), 30);
        assert_eq!(candidate_count(Some(400), 0), 50);
    }

    #[test]
    fn a_malformed_selector_is_an_error_never_an_automatic_scan() {
        assert!(Selector::parse(vec![], vec![]).is_err());
        assert!(Selector::parse(vec!["nope".into()], vec![]).is_err());
        assert!(Selector::parse(vec!["RIPSR:ABC".into()], vec![]).is_err());
        assert!(Selector::parse(vec![], vec!["  ".into()]).is_err());
        let code = format!("RIPSR:{}", super::super::md5_hex("k"));
        let s = Selector::parse(vec![code.clone(), code.clone()], vec!["k".into()])
            .expect("valid selector");
        assert_eq!(s.codes, vec![code]);
        assert_eq!(s.business_keys, vec!["k".to_owned()]);
    }

    fn completion(outcome: Result<RoundReport, JobFailure>) -> Completion {
        Completion {
            id: 1,
            running_attempt: 4,
            generation: 7,
            retry_count: 1,
            max_retry_count: 3,
            backoff: super::super::Backoff::Minutes5,
            outcome,
            started_at_ms: 0,
        }
    }

    #[test]
    fn a_newer_generation_sends_a_finished_round_back_to_pending() {
        for outcome in [Ok(RoundReport::default()), Err(JobFailure::new("boom"))] {
            let (done, set) = decide_completion(&completion(outcome), Some((1, 4, 8)), 1_000);
            let set = set.expect("written");
            assert_eq!(done, Completed::Requeued);
            assert_eq!((set.status, set.retry_count), (0, 0));
            assert_eq!((set.last_error, set.next_execute_at_ms), (None, 1_000));
        }
    }

    #[test]
    fn a_failure_adds_a_retry_and_backs_off_by_the_new_count() {
        let (done, set) =
            decide_completion(&completion(Err(JobFailure::new("x"))), Some((1, 4, 7)), 0);
        let set = set.expect("written");
        assert_eq!(done, Completed::Failed { exhausted: false });
        assert_eq!((set.status, set.retry_count), (3, 2));
        assert_eq!(set.next_execute_at_ms, 15 * 60 * 1_000);
        let mut c = completion(Err(JobFailure::new("x")));
        c.retry_count = 2;
        let (done, _) = decide_completion(&c, Some((1, 4, 7)), 0);
        assert_eq!(done, Completed::Failed { exhausted: true });
    }

    #[test]
    fn an_oversize_request_exhausts_its_retries_at_once() {
        let f = JobFailure {
            message: "too big".into(),
            exhaust: true,
            fenced: false,
        };
        let (done, set) = decide_completion(&completion(Err(f)), Some((1, 4, 7)), 0);
        assert_eq!(done, Completed::Failed { exhausted: true });
        assert_eq!(set.expect("written").retry_count, 3);
    }

    #[test]
    fn a_stale_claim_writes_nothing() {
        let c = completion(Ok(RoundReport::default()));
        assert_eq!(
            decide_completion(&c, Some((1, 5, 7)), 0).0,
            Completed::Stale
        );
        assert_eq!(
            decide_completion(&c, Some((3, 4, 7)), 0).0,
            Completed::Stale
        );
        assert!(decide_completion(&c, None, 0).1.is_none());
    }

    #[test]
    fn success_keeps_the_retry_count_and_clears_the_error() {
        let (done, set) = decide_completion(
            &completion(Ok(RoundReport::done(json!({"rows": 0})))),
            Some((1, 4, 7)),
            0,
        );
        let set = set.expect("written");
        assert_eq!(done, Completed::Succeeded);
        assert_eq!((set.status, set.retry_count, set.last_error), (2, 1, None));
        assert!(set.last_round.contains("\"business_done\":true"));
    }
}
