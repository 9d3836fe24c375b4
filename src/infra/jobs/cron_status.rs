//! The cron operator view (`GET /v1/cron`, `factledger cron list`): the lease, each
//! schedule with its next firing and its last firings, read from the tables the
//! scheduler (`super::cron`) writes.

use super::cron::{CronError, CronExpr, CronSchedule, Scheduler, LAST_FIRINGS_SHOWN, LEASE_NAME};
use super::JobStatus;
use crate::infra::db::{now_ms, Db, RowText};

impl Scheduler {
    /// The operator view (`GET /v1/cron`, `factledger cron list`).
    pub async fn status(&self) -> Result<CronStatus, CronError> {
        let (db, schedules) = self.db_and_schedules();
        status(db, schedules, now_ms()).await
    }
}

#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct CronStatus {
    pub lease: LeaseView,
    pub schedules: Vec<ScheduleView>,
}

#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct LeaseView {
    /// The process that holds (or last held) the lease: `host:pid:suffix`.
    pub owner: Option<String>,
    /// Bumped by every takeover.
    pub epoch: i64,
    pub lease_until_ms: i64,
    /// The lease has not expired: its owner is firing.
    pub live: bool,
    pub acquired_at_ms: Option<i64>,
    pub renewed_at_ms: Option<i64>,
}

#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct ScheduleView {
    pub name: String,
    pub expression: String,
    pub job_kind: String,
    /// Registered in the process that answers (a row alone may be a schedule another
    /// version registered).
    pub registered_here: bool,
    /// The last fire time handled (fired or skipped); absent before the first tick.
    pub cursor_ms: Option<i64>,
    /// The next fire time after the cursor (or after now, before the first tick).
    pub next_fire_at_ms: Option<i64>,
    pub skipped_firings: i64,
    /// The newest firings, newest first (at most [`LAST_FIRINGS_SHOWN`]).
    pub last_firings: Vec<FiringView>,
}

#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct FiringView {
    pub fire_at_ms: i64,
    pub job_code: String,
    /// The holder that recorded it, and its lease epoch.
    pub owner: String,
    pub lease_epoch: i64,
    pub recorded_at_ms: i64,
    /// The status of the firing's job (absent once the job was purged).
    pub job_status: Option<JobStatus>,
}

/// Read the lease, every schedule row and `registered` (merged by name), and each
/// schedule's newest firings with their jobs' status.
pub async fn status(
    db: &Db,
    registered: &[CronSchedule],
    now_ms: i64,
) -> Result<CronStatus, CronError> {
    macro_rules! read {
        ($p:expr) => {{
            use sqlx::Row;
            let p = $p;
            let r = sqlx::query(
                "SELECT owner, epoch, lease_until_ms, acquired_at_ms, renewed_at_ms \
                 FROM cron_leases WHERE name = ?",
            )
            .bind(LEASE_NAME)
            .fetch_one(p)
            .await?;
            let until: i64 = r.try_get(2)?;
            let lease = LeaseView {
                owner: r.opt_text(0)?,
                epoch: r.try_get(1)?,
                lease_until_ms: until,
                live: until > now_ms,
                acquired_at_ms: r.try_get(3)?,
                renewed_at_ms: r.try_get(4)?,
            };
            let rows = sqlx::query(
                "SELECT name, expression, job_kind, cursor_ms, skipped_firings \
                 FROM cron_schedules ORDER BY name",
            )
            .fetch_all(p)
            .await?;
            let mut stored = Vec::new();
            for r in &rows {
                stored.push((
                    r.text(0)?,
                    r.text(1)?,
                    r.text(2)?,
                    r.try_get::<i64, _>(3)?,
                    r.try_get::<i64, _>(4)?,
                ));
            }
            let mut views: Vec<ScheduleView> = Vec::new();
            for (name, expression, job_kind, cursor, skipped) in stored {
                let here = registered.iter().find(|s| s.name == name);
                let expr = here
                    .map(|s| s.expr.clone())
                    .or_else(|| CronExpr::parse(&expression).ok());
                views.push(ScheduleView {
                    registered_here: here.is_some(),
                    next_fire_at_ms: expr.and_then(|e| e.next_after(cursor)),
                    name,
                    expression,
                    job_kind,
                    cursor_ms: Some(cursor),
                    skipped_firings: skipped,
                    last_firings: Vec::new(),
                });
            }
            for s in registered {
                if !views.iter().any(|v| v.name == s.name) {
                    views.push(ScheduleView {
                        name: s.name.clone(),
                        expression: s.expr.as_str().to_owned(),
                        job_kind: s.kind.name.to_owned(),
                        registered_here: true,
                        cursor_ms: None,
                        next_fire_at_ms: s.expr.next_after(now_ms),
                        skipped_firings: 0,
                        last_firings: Vec::new(),
                    });
                }
            }
            for v in &mut views {
                let rows = sqlx::query(
                    "SELECT f.fire_at_ms, f.job_code, f.owner, f.lease_epoch, f.recorded_at_ms, \
                     CAST(j.status AS SIGNED) FROM cron_firings f \
                     LEFT JOIN jobs j ON j.code = f.job_code \
                     WHERE f.schedule = ? ORDER BY f.fire_at_ms DESC LIMIT ?",
                )
                .bind(&v.name)
                .bind(LAST_FIRINGS_SHOWN)
                .fetch_all(p)
                .await?;
                for r in &rows {
                    let status: Option<i64> = r.try_get(5)?;
                    v.last_firings.push(FiringView {
                        fire_at_ms: r.try_get(0)?,
                        job_code: r.text(1)?,
                        owner: r.text(2)?,
                        lease_epoch: r.try_get(3)?,
                        recorded_at_ms: r.try_get(4)?,
                        job_status: status.and_then(JobStatus::from_code),
                    });
                }
            }
            views.sort_by(|a, b| a.name.cmp(&b.name));
            Ok(CronStatus {
                lease,
                schedules: views,
            })
        }};
    }
    match db {
        Db::Mysql(p) => read!(p),
        Db::Sqlite(p) => read!(p),
    }
}
