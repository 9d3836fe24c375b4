//! Cron on the job engine (issue 4 item 5; SPEC R-JOB-9).
//!
//! A [`CronSchedule`] names a cron expression (UTC, parsed by `croner`: the standard
//! five fields, or six with seconds first) and the job kind each firing submits. The
//! [`Scheduler`] fires them as a **singleton**: one lease row per deployment
//! (`cron_leases`, name `scheduler`) is taken by compare-and-set once it has expired
//! and renewed by its holder; only the holder fires. Each **firing is recorded once**:
//! a row of `cron_firings` whose primary key is `(schedule, fire_at_ms)`, written in
//! ONE transaction with the job it submits (a plain job, business key
//! `cron:<schedule>:<fire_at_ms>`) and the schedule's cursor, after checking — under a
//! row lock held to commit — that the lease is still this holder's. So a firing never
//! exists without its job or the other way round, a second record of the same firing
//! is refused by the key whoever tries it, and a holder that lost its lease (paused,
//! partitioned) records nothing. The job then runs on the ordinary engine (claims,
//! fencing, retries) on whichever server claims it.
//!
//! **Catch-up.** The cursor (`cron_schedules.cursor_ms`, the last fire time handled)
//! is committed with every firing, so a process that takes the lease over after the
//! holder died resumes exactly there and fires every firing missed meanwhile, each
//! once — at most the newest [`CATCH_UP_FIRINGS_MAX`] of them, from at most
//! [`CATCH_UP_WINDOW_MS`] back; older ones are skipped, counted in
//! `skipped_firings` and logged (every built-in schedule runs a scan that takes all
//! that is due, so the newest firing covers the ones before it). A schedule seen for
//! the first time starts at that moment: nothing fires retroactively.

use super::engine::{ClaimedJob, JobFailure, JobHandler, RoundReport, WeakEngine};
use super::{Engine, JobKind};
use crate::infra::db::{now_ms, Db, Get, Tx};
use async_trait::async_trait;
use factledger_projections::table::{Cell, ColType, Column};
use std::collections::HashSet;
use std::sync::{Arc, OnceLock};

/// The one lease row of the scheduler.
pub const LEASE_NAME: &str = "scheduler";
/// How long a holder keeps the lease without renewing it. A dead holder's firings wait
/// at most this long (plus one poll, a third of it) before another process takes over
/// and catches them up; short enough for every-minute schedules to slip by seconds
/// only, long enough that a busy database or a GC-like stall does not flap the lease.
pub const LEASE_MS_DEFAULT: i64 = 15_000;
/// Below this a lease would be renewed more often than a database round trip is
/// reliably fast.
pub const LEASE_MS_MIN: i64 = 300;
/// Firings are kept this long for audit and `GET /v1/cron`, then pruned.
pub const FIRINGS_KEPT_MS: i64 = 30 * 24 * 60 * 60 * 1_000;
/// How often the holder prunes old firings.
const PRUNE_EVERY_MS: i64 = 60 * 60 * 1_000;
/// Firings of each schedule shown by `GET /v1/cron`.
pub const LAST_FIRINGS_SHOWN: i64 = 5;
/// The scheduler never sleeps less than this between ticks (a clock that steps
/// backwards must not make it spin).
const SLEEP_MS_MIN: u64 = 5;

pub use super::schedule::{
    firing_payload, CronError, CronExpr, CronSchedule, Due, PayloadFn, CATCH_UP_FIRINGS_MAX,
    CATCH_UP_WINDOW_MS, EXPRESSION_CHARS_MAX, SCHEDULE_NAME_CHARS_MAX,
};

/// The holder's claim on the lease: its fencing token is the epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseToken {
    pub owner: String,
    pub epoch: i64,
}

/// What recording one firing did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FireOutcome {
    /// Recorded with its job.
    Recorded { job_code: String },
    /// Already recorded (by anyone): nothing written.
    Duplicate,
    /// The lease is not this token's any more: nothing written.
    LeaseLost,
}

/// Scheduler settings.
#[derive(Debug, Clone)]
pub struct CronConfig {
    /// This process's lease owner id (the engine's owner id).
    pub owner: String,
    pub lease_ms: i64,
}

impl CronConfig {
    pub fn new(owner: impl Into<String>) -> Self {
        CronConfig {
            owner: owner.into(),
            lease_ms: LEASE_MS_DEFAULT,
        }
    }
}

/// What one tick did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct TickReport {
    /// This process held the lease for the tick.
    pub holder: bool,
    /// The lease was taken (not renewed) in this tick.
    pub took_over: bool,
    /// `(schedule, fire_at_ms)` recorded by this tick.
    pub fired: Vec<(String, i64)>,
    /// Firings found already recorded.
    pub duplicates: u32,
    pub skipped: u64,
    /// The lease was lost during the tick (the rest was not fired).
    pub lost: bool,
}

struct Inner {
    db: Db,
    engine: Engine,
    schedules: Vec<CronSchedule>,
    config: CronConfig,
    /// Schedules whose row this process has written (expression, kind).
    ensured: std::sync::Mutex<HashSet<String>>,
    last_prune_ms: std::sync::atomic::AtomicI64,
}

/// The cron scheduler of this process. Cheap to clone.
#[derive(Clone)]
pub struct Scheduler {
    inner: Arc<Inner>,
}

/// The scheduler's background task; dropping it stops it (the lease then expires and
/// another process takes over).
pub struct Running {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `(owner, epoch, lease_until_ms)` of the lease row, locked to commit (`FOR UPDATE`
/// on MariaDB; the write transaction of [`Tx::begin_write`] holds SQLite's lock).
async fn read_lease(tx: &mut Tx) -> Result<(Option<String>, i64, i64), sqlx::Error> {
    const LEASE: &[Column] = &[
        Column {
            name: "owner",
            ty: ColType::OptText,
        },
        Column {
            name: "epoch",
            ty: ColType::Int,
        },
        Column {
            name: "lease_until_ms",
            ty: ColType::Int,
        },
    ];
    let sql = format!(
        "SELECT owner, epoch, lease_until_ms FROM cron_leases WHERE name = ?{}",
        tx.dialect().lock_rows()
    );
    let rows = tx.fetch(&sql, &[Cell::text(LEASE_NAME)], LEASE).await?;
    let row = rows.first().ok_or(sqlx::Error::RowNotFound)?;
    Ok((
        row.opt_text("owner")?,
        row.int("epoch")?,
        row.int("lease_until_ms")?,
    ))
}

/// Renew the lease for `lease_ms` from `now` (the caller checked it is ours).
async fn renew_lease(tx: &mut Tx, now: i64, lease_ms: i64) -> Result<(), sqlx::Error> {
    let sql = "UPDATE cron_leases SET lease_until_ms = ?, renewed_at_ms = ? WHERE name = ?";
    let args = [
        Cell::Int(now + lease_ms),
        Cell::Int(now),
        Cell::text(LEASE_NAME),
    ];
    tx.exec(sql, &args).await?;
    Ok(())
}

/// Whether the lease row names `lease` and has not run out at `now_ms`.
fn still_ours(read: &(Option<String>, i64, i64), lease: &LeaseToken, now_ms: i64) -> bool {
    let (owner, epoch, until) = read;
    owner.as_deref() == Some(lease.owner.as_str()) && *epoch == lease.epoch && *until > now_ms
}

fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.is_unique_violation())
}

/// Record one firing with its job and the schedule's cursor, in one transaction, if
/// `lease` is still the live lease at `now_ms` (checked under a row lock held to
/// commit, and renewed). A firing already recorded is left as it is.
pub async fn record_firing(
    db: &Db,
    lease: &LeaseToken,
    lease_ms: i64,
    schedule: &CronSchedule,
    fire_at_ms: i64,
    now_ms: i64,
) -> Result<FireOutcome, CronError> {
    let row = schedule.job(fire_at_ms).row(now_ms)?;
    let code = row.code.clone();
    let mut tx = Tx::begin_write(db).await?;
    if !still_ours(&read_lease(&mut tx).await?, lease, now_ms) {
        tx.rollback().await?;
        return Ok(FireOutcome::LeaseLost);
    }
    renew_lease(&mut tx, now_ms, lease_ms).await?;
    let insert = "INSERT INTO cron_firings (schedule, fire_at_ms, job_code, owner, lease_epoch, \
                  recorded_at_ms) VALUES (?, ?, ?, ?, ?, ?)";
    let args = [
        Cell::text(&schedule.name),
        Cell::Int(fire_at_ms),
        Cell::text(&code),
        Cell::text(&lease.owner),
        Cell::Int(lease.epoch),
        Cell::Int(now_ms),
    ];
    let outcome = match tx.exec(insert, &args).await {
        Err(e) if is_unique_violation(&e) => FireOutcome::Duplicate,
        Err(e) => return Err(e.into()),
        Ok(_) => {
            match &mut tx {
                Tx::Mysql(t) => t.insert_job(&row).await?,
                Tx::Sqlite(t) => t.insert_job(&row).await?,
            }
            let cursor = "UPDATE cron_schedules SET cursor_ms = CASE WHEN cursor_ms < ? THEN ? \
                          ELSE cursor_ms END, updated_at_ms = ? WHERE name = ?";
            let args = [
                Cell::Int(fire_at_ms),
                Cell::Int(fire_at_ms),
                Cell::Int(now_ms),
                Cell::text(&schedule.name),
            ];
            tx.exec(cursor, &args).await?;
            FireOutcome::Recorded { job_code: code }
        }
    };
    tx.finish(matches!(outcome, FireOutcome::Recorded { .. }))
        .await?;
    Ok(outcome)
}

/// The job insert of the store's own backend, so cron jobs are submitted exactly like
/// every other (R-JOB-2, plain: create or reuse, never reset).
#[async_trait]
trait InsertJob: Send {
    async fn insert_job(&mut self, row: &crate::infra::store::JobRow) -> Result<(), CronError>;
}

#[async_trait]
impl InsertJob for sqlx::Transaction<'static, sqlx::MySql> {
    async fn insert_job(&mut self, row: &crate::infra::store::JobRow) -> Result<(), CronError> {
        let sql = crate::infra::store::mysql::jobs_insert(&[row], false);
        crate::infra::db::mysql_execute_text(&mut **self, &sql).await?;
        Ok(())
    }
}

#[async_trait]
impl InsertJob for sqlx::Transaction<'static, sqlx::Sqlite> {
    async fn insert_job(&mut self, row: &crate::infra::store::JobRow) -> Result<(), CronError> {
        crate::infra::store::sqlite::submit_job(self, row).await?;
        Ok(())
    }
}

impl Scheduler {
    /// A scheduler for these schedules (names unique, each kind registered in
    /// `engine`).
    pub fn new(
        engine: Engine,
        schedules: Vec<CronSchedule>,
        config: CronConfig,
    ) -> Result<Scheduler, CronError> {
        if config.lease_ms < LEASE_MS_MIN {
            return Err(CronError::Config(format!(
                "the cron lease must be at least {LEASE_MS_MIN} ms, got {}",
                config.lease_ms
            )));
        }
        let mut names = HashSet::new();
        for s in &schedules {
            if !names.insert(s.name.clone()) {
                return Err(CronError::Config(format!(
                    "cron schedule {:?} is registered twice",
                    s.name
                )));
            }
            if engine.kind(s.kind.name).is_none() {
                return Err(CronError::Config(format!(
                    "cron schedule {:?}: its job kind {:?} is not registered in the job engine",
                    s.name, s.kind.name
                )));
            }
        }
        Ok(Scheduler {
            inner: Arc::new(Inner {
                db: engine.db().clone(),
                engine,
                schedules,
                config,
                ensured: Default::default(),
                last_prune_ms: std::sync::atomic::AtomicI64::new(0),
            }),
        })
    }

    pub fn schedules(&self) -> &[CronSchedule] {
        &self.inner.schedules
    }

    pub fn config(&self) -> &CronConfig {
        &self.inner.config
    }

    pub fn db(&self) -> &Db {
        &self.inner.db
    }

    /// Take the lease if it is free or expired, renew it if it is ours; `None` when
    /// another process holds it. The second value says whether it was taken now.
    pub async fn acquire(&self, now_ms: i64) -> Result<Option<(LeaseToken, bool)>, CronError> {
        let me = self.inner.config.owner.as_str();
        let lease_ms = self.inner.config.lease_ms;
        let mut tx = Tx::begin_write(&self.inner.db).await?;
        let (owner, epoch, until) = read_lease(&mut tx).await?;
        let out = if owner.as_deref() == Some(me) && until > now_ms {
            renew_lease(&mut tx, now_ms, lease_ms).await?;
            let token = LeaseToken {
                owner: me.to_owned(),
                epoch,
            };
            Some((token, false))
        } else if until <= now_ms {
            let take = "UPDATE cron_leases SET owner = ?, epoch = ?, lease_until_ms = ?, \
                        acquired_at_ms = ?, renewed_at_ms = ? WHERE name = ?";
            let args = [
                Cell::text(me),
                Cell::Int(epoch + 1),
                Cell::Int(now_ms + lease_ms),
                Cell::Int(now_ms),
                Cell::Int(now_ms),
                Cell::text(LEASE_NAME),
            ];
            tx.exec(take, &args).await?;
            let token = LeaseToken {
                owner: me.to_owned(),
                epoch: epoch + 1,
            };
            Some((token, true))
        } else {
            None
        };
        tx.finish(out.is_some()).await?;
        if let Some((token, true)) = &out {
            tracing::info!(owner = %token.owner, epoch = token.epoch, "took the cron lease");
        }
        Ok(out)
    }

    /// The schedule's cursor, creating its row (cursor = now) on first sight.
    async fn cursor(&self, s: &CronSchedule, now_ms: i64) -> Result<i64, CronError> {
        let fresh = !self
            .inner
            .ensured
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&s.name);
        let db = &self.inner.db;
        if fresh {
            let upsert = db.dialect().upsert(
                "cron_schedules",
                &[
                    "name",
                    "expression",
                    "job_kind",
                    "cursor_ms",
                    "created_at_ms",
                    "updated_at_ms",
                ],
                &["name"],
                &["expression", "job_kind"],
            );
            let args = [
                Cell::text(&s.name),
                Cell::text(s.expr.as_str()),
                Cell::text(s.kind.name),
                Cell::Int(now_ms),
                Cell::Int(now_ms),
                Cell::Int(now_ms),
            ];
            db.exec(&upsert, &args).await?;
            self.inner
                .ensured
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(s.name.clone());
        }
        let sql = "SELECT cursor_ms FROM cron_schedules WHERE name = ?";
        let cursor = db.fetch_i64(sql, &[Cell::text(&s.name)]).await?;
        Ok(cursor)
    }

    /// Move the cursor past skipped fire times (fenced by the lease like a firing).
    async fn record_skip(
        &self,
        lease: &LeaseToken,
        s: &CronSchedule,
        due: &Due,
        now_ms: i64,
    ) -> Result<bool, CronError> {
        let Some(up_to) = due.skipped_up_to else {
            return Ok(true);
        };
        let lease_ms = self.inner.config.lease_ms;
        let skipped = i64::try_from(due.skipped).unwrap_or(i64::MAX);
        let mut tx = Tx::begin_write(&self.inner.db).await?;
        let ok = still_ours(&read_lease(&mut tx).await?, lease, now_ms);
        if ok {
            renew_lease(&mut tx, now_ms, lease_ms).await?;
            let skip = "UPDATE cron_schedules SET skipped_firings = skipped_firings + ?, \
                        cursor_ms = CASE WHEN cursor_ms < ? THEN ? ELSE cursor_ms END, \
                        updated_at_ms = ? WHERE name = ?";
            let args = [
                Cell::Int(skipped),
                Cell::Int(up_to),
                Cell::Int(up_to),
                Cell::Int(now_ms),
                Cell::text(&s.name),
            ];
            tx.exec(skip, &args).await?;
        }
        tx.finish(ok).await?;
        if ok {
            tracing::warn!(
                schedule = %s.name,
                skipped = due.skipped,
                up_to_ms = up_to,
                catch_up_max = CATCH_UP_FIRINGS_MAX,
                "missed cron firings beyond the catch-up bound were skipped"
            );
        }
        Ok(ok)
    }

    /// One tick at `now_ms`: take or renew the lease; as its holder, record every due
    /// firing of every schedule (catching up missed ones) and kick their jobs.
    pub async fn tick_at(&self, now_ms: i64) -> Result<TickReport, CronError> {
        let mut report = TickReport::default();
        let Some((lease, took_over)) = self.acquire(now_ms).await? else {
            return Ok(report);
        };
        report.holder = true;
        report.took_over = took_over;
        let mut codes = Vec::new();
        'schedules: for s in &self.inner.schedules {
            let cursor = self.cursor(s, now_ms).await?;
            let due = s.due(cursor, now_ms);
            if !self.record_skip(&lease, s, &due, now_ms).await? {
                report.lost = true;
                break;
            }
            report.skipped += due.skipped;
            for &t in &due.fire_at {
                match record_firing(
                    &self.inner.db,
                    &lease,
                    self.inner.config.lease_ms,
                    s,
                    t,
                    now_ms,
                )
                .await?
                {
                    FireOutcome::Recorded { job_code } => {
                        codes.push(job_code);
                        report.fired.push((s.name.clone(), t));
                    }
                    FireOutcome::Duplicate => report.duplicates += 1,
                    FireOutcome::LeaseLost => {
                        report.lost = true;
                        break 'schedules;
                    }
                }
            }
        }
        if report.lost {
            tracing::warn!(owner = %lease.owner, epoch = lease.epoch, "lost the cron lease mid-tick");
        }
        for (schedule, t) in &report.fired {
            tracing::info!(schedule = %schedule, fire_at_ms = t, "cron firing recorded");
        }
        // The jobs are durable; a lost kick only leaves them to the scan.
        self.inner.engine.kick_soon(codes);
        if !report.fired.is_empty() {
            self.prune(now_ms).await;
        }
        Ok(report)
    }

    pub async fn tick(&self) -> Result<TickReport, CronError> {
        self.tick_at(now_ms()).await
    }

    /// Delete firings older than [`FIRINGS_KEPT_MS`], at most every
    /// [`PRUNE_EVERY_MS`]. A failure is only logged: the next prune does it.
    async fn prune(&self, now_ms: i64) {
        use std::sync::atomic::Ordering;
        let last = self.inner.last_prune_ms.load(Ordering::Relaxed);
        if now_ms - last < PRUNE_EVERY_MS {
            return;
        }
        self.inner.last_prune_ms.store(now_ms, Ordering::Relaxed);
        let sql = "DELETE FROM cron_firings WHERE fire_at_ms < ?";
        if let Err(e) = self
            .inner
            .db
            .exec(sql, &[Cell::Int(now_ms - FIRINGS_KEPT_MS)])
            .await
        {
            tracing::warn!(error = %e, "pruning old cron firings failed");
        }
    }

    /// How long to sleep after a tick: until the next fire time while holding (at
    /// most a third of the lease, to renew it), else a third of the lease (a dead
    /// holder is replaced within about 4/3 of the lease).
    fn pause_ms(&self, holder: bool, now_ms: i64) -> u64 {
        let renew = (self.inner.config.lease_ms / 3).max(1);
        let mut wait = renew;
        if holder {
            for s in &self.inner.schedules {
                if let Some(t) = s.expr.next_after(now_ms) {
                    wait = wait.min(t - now_ms);
                }
            }
        }
        u64::try_from(wait).unwrap_or(0).max(SLEEP_MS_MIN)
    }

    /// Start the background loop.
    pub fn start(&self) -> Running {
        let scheduler = self.clone();
        let task = tokio::spawn(async move {
            let mut holder = false;
            loop {
                match scheduler.tick().await {
                    Ok(r) => holder = r.holder && !r.lost,
                    Err(e) => {
                        tracing::warn!(error = %e, "cron tick failed (retried at the next tick)");
                    }
                }
                let wait = scheduler.pause_ms(holder, now_ms());
                tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
            }
        });
        Running { task }
    }

    /// The database and the schedules this scheduler runs (the operator view reads
    /// them, `super::cron_status`).
    pub(crate) fn db_and_schedules(&self) -> (&Db, &[CronSchedule]) {
        (&self.inner.db, &self.inner.schedules)
    }
}

// ---------------------------------------------------------------------------------
// Built-in schedules.

/// Test only (`serve --test-cron-heartbeat EXPR`): a schedule whose jobs do nothing
/// but report their fire time, to prove singleton firing across processes.
pub static HEARTBEAT: JobKind = JobKind {
    // Short: a round cut off by a killed process is recovered and re-run within the
    // few seconds the two-process test watches.
    lease_ms: 3_000,
    cap: None,
    ..JobKind::new("cron_heartbeat", "CRHB")
};
pub const HEARTBEAT_SCHEDULE: &str = "heartbeat";

/// The engine a built-in handler runs with, set once the engine exists.
pub type EngineSlot = Arc<OnceLock<WeakEngine>>;

/// `cron_heartbeat`: does nothing, reports the firing.
pub struct HeartbeatHandler;

#[async_trait]
impl JobHandler for HeartbeatHandler {
    async fn run(&self, job: &ClaimedJob) -> Result<RoundReport, JobFailure> {
        Ok(RoundReport::done(job.payload_json()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::DateTime;

    fn at(s: &str) -> i64 {
        DateTime::parse_from_rfc3339(s)
            .map(|t| t.timestamp_millis())
            .unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn five_fields_fire_on_the_minute_in_utc() {
        let e = CronExpr::parse("*/2 * * * *").unwrap();
        assert_eq!(
            e.next_after(at("2026-03-01T10:00:00Z")),
            Some(at("2026-03-01T10:02:00Z"))
        );
        assert_eq!(
            e.next_after(at("2026-03-01T10:01:59.999Z")),
            Some(at("2026-03-01T10:02:00Z"))
        );
        let e = CronExpr::parse("30 2 * * *").unwrap();
        assert_eq!(
            e.next_after(at("2026-03-01T02:30:00Z")),
            Some(at("2026-03-02T02:30:00Z")),
            "strictly after, in UTC"
        );
    }

    #[test]
    fn six_fields_have_seconds_first() {
        let e = CronExpr::parse("* * * * * *").unwrap();
        assert_eq!(
            e.next_after(at("2026-03-01T10:00:00.400Z")),
            Some(at("2026-03-01T10:00:01Z"))
        );
        let e = CronExpr::parse("15 */5 * * * *").unwrap();
        assert_eq!(
            e.next_after(at("2026-03-01T10:00:15Z")),
            Some(at("2026-03-01T10:05:15Z"))
        );
    }

    #[test]
    fn a_bad_expression_is_an_error_naming_the_schedule() {
        static K: JobKind = JobKind::new("k", "K");
        for bad in ["", "* * *", "61 * * * *", "* * * * * * * *", "every minute"] {
            match CronSchedule::new("nightly_sync", bad, &K) {
                Err(e @ CronError::Expression { .. }) => {
                    assert!(e.to_string().contains("nightly_sync"), "{e}")
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        assert!(matches!(
            CronSchedule::new("Bad Name", "* * * * *", &K),
            Err(CronError::Config(_))
        ));
    }

    #[test]
    fn due_firings_are_the_ones_after_the_cursor_up_to_now() {
        static K: JobKind = JobKind::new("k", "K");
        let s = CronSchedule::new("s", "* * * * * *", &K).unwrap();
        let t0 = at("2026-03-01T10:00:00Z");
        let due = s.due(t0, t0 + 3_500);
        assert_eq!(due.fire_at, vec![t0 + 1_000, t0 + 2_000, t0 + 3_000]);
        assert_eq!((due.skipped, due.skipped_up_to), (0, None));
        assert!(s.due(t0 + 3_000, t0 + 3_999).fire_at.is_empty());
        assert_eq!(s.business_key(t0), format!("cron:s:{t0}"));
    }

    #[test]
    fn catch_up_keeps_the_newest_firings_and_counts_the_rest() {
        static K: JobKind = JobKind::new("k", "K");
        let s = CronSchedule::new("s", "* * * * * *", &K).unwrap();
        let t0 = at("2026-03-01T10:00:00Z");
        let n = CATCH_UP_FIRINGS_MAX as i64;
        let due = s.due(t0, t0 + (n + 30) * 1_000);
        assert_eq!(due.fire_at.len(), CATCH_UP_FIRINGS_MAX);
        assert_eq!(due.fire_at[0], t0 + 31_000);
        assert_eq!(due.fire_at.last(), Some(&(t0 + (n + 30) * 1_000)));
        assert_eq!((due.skipped, due.skipped_up_to), (30, Some(t0 + 30_000)));
        // A cursor older than the window is not walked from.
        let far = s.due(t0 - 10 * CATCH_UP_WINDOW_MS, t0);
        assert_eq!(far.fire_at.len(), CATCH_UP_FIRINGS_MAX);
        assert_eq!(far.fire_at.last(), Some(&t0));
    }
}
