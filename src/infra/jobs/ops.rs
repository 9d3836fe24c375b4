//! Operator reads of jobs: `GET /v1/jobs?kind=&status=` and `GET /v1/jobs/{code}`,
//! which reports each level of success separately (R-JOB-10): the scheduler run that
//! last took the job, the job's last round (which may have ended PENDING because a
//! newer request generation arrived), and whether the business data and everything
//! downstream are done.

use super::{JobError, JobStatus};
use crate::infra::db::{Db, RowText};
use serde::Serialize;
use serde_json::Value;

/// Most jobs one page lists.
pub const PAGE_JOBS_MAX: i64 = 500;

fn time(ms: Option<i64>) -> Option<String> {
    ms.and_then(chrono::DateTime::from_timestamp_millis)
        .map(|t| crate::infra::store::time_text(&t))
}

/// A job in a list.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct JobSummary {
    pub id: i64,
    pub kind: String,
    pub code: String,
    pub business_key: String,
    pub status: JobStatus,
    pub retry_count: i32,
    pub max_retry_count: i32,
    pub next_execute_at: Option<String>,
    pub request_generation: i64,
    pub running_attempt: i64,
    pub last_error: Option<String>,
    pub updated_at: Option<String>,
}

/// Level 1: the scheduler run that last took the job.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct SchedulerLevel {
    pub run_id: i64,
    /// scan | manual | kick
    pub entry: String,
    pub owner: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    /// The run itself finished without error (individual jobs may have failed).
    pub ok: Option<bool>,
    pub claimed: i64,
    pub succeeded: i64,
    pub failed: i64,
}

/// Level 2: the job's last round.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct RoundLevel {
    /// The round's own work succeeded.
    pub ok: bool,
    /// succeeded | failed | requeued_for_newer_generation
    pub outcome: String,
    pub attempt: i64,
    /// The request generation the round worked on.
    pub generation: i64,
    /// A newer generation arrived: the job is PENDING again although the round was ok.
    pub newer_generation_pending: bool,
    /// What the handler reported (counts; "resolved 0 scopes", "changed 0 rows").
    #[schema(value_type = Object)]
    pub summary: Value,
    pub error: Option<String>,
    pub finished_at: Option<String>,
}

/// Level 3: business data and downstream.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct BusinessLevel {
    pub done: bool,
    /// Why it is not done (or that it is).
    pub reason: String,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct JobLevels {
    pub scheduler: Option<SchedulerLevel>,
    pub round: Option<RoundLevel>,
    pub business: BusinessLevel,
}

/// One job, whole.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct JobView {
    #[serde(flatten)]
    pub job: JobSummary,
    #[schema(value_type = Object)]
    pub payload: Value,
    pub running_generation: i64,
    pub lease_owner: Option<String>,
    pub lease_until: Option<String>,
    pub heartbeat_at: Option<String>,
    pub first_failed_at: Option<String>,
    pub request_id: Option<String>,
    pub trace_id: Option<String>,
    pub fenced_writes: i64,
    pub created_at: Option<String>,
    pub levels: JobLevels,
}

const SUMMARY_COLUMNS: &str = "id, kind, code, business_key, status, retry_count, \
     max_retry_count, next_execute_at_ms, request_generation, running_attempt, last_error, \
     updated_at_ms";

macro_rules! summary {
    ($r:expr) => {{
        use sqlx::Row;
        let r = $r;
        let status: i64 = r.try_get(4)?;
        Ok::<JobSummary, sqlx::Error>(JobSummary {
            id: r.try_get(0)?,
            kind: r.text(1)?,
            code: r.text(2)?,
            business_key: r.text(3)?,
            status: JobStatus::from_code(status).unwrap_or(JobStatus::Failed),
            retry_count: r.try_get(5)?,
            max_retry_count: r.try_get(6)?,
            next_execute_at: time(Some(r.try_get(7)?)),
            request_generation: r.try_get(8)?,
            running_attempt: r.try_get(9)?,
            last_error: r.opt_text(10)?,
            updated_at: time(Some(r.try_get(11)?)),
        })
    }};
}

/// Jobs with `id > after`, optionally of one kind and status, in id order.
pub async fn list(
    db: &Db,
    kind: Option<&str>,
    status: Option<JobStatus>,
    after: i64,
    limit: i64,
) -> Result<Vec<JobSummary>, JobError> {
    let mut sql = format!("SELECT {SUMMARY_COLUMNS} FROM jobs WHERE id > ?");
    if kind.is_some() {
        sql.push_str(" AND kind = ?");
    }
    if status.is_some() {
        sql.push_str(" AND status = ?");
    }
    sql.push_str(" ORDER BY id LIMIT ?");
    let limit = limit.clamp(1, PAGE_JOBS_MAX);
    macro_rules! go {
        ($p:expr) => {{
            let mut q = sqlx::query(&sql).bind(after);
            if let Some(k) = kind {
                q = q.bind(k);
            }
            if let Some(s) = status {
                q = q.bind(s as i32);
            }
            q.bind(limit)
                .fetch_all($p)
                .await?
                .iter()
                .map(|r| summary!(r))
                .collect::<Result<Vec<_>, sqlx::Error>>()?
        }};
    }
    Ok(match db {
        Db::Mysql(p) => go!(p),
        Db::Sqlite(p) => go!(p),
    })
}

/// One job by code, with its levels of success.
pub async fn show(db: &Db, code: &str) -> Result<Option<JobView>, JobError> {
    let sql = format!(
        "SELECT {SUMMARY_COLUMNS}, payload, running_generation, lease_owner, lease_until_ms, \
         heartbeat_at_ms, first_failed_at_ms, request_id, trace_id, fenced_writes, \
         created_at_ms, last_round, last_run_id FROM jobs WHERE code = ?"
    );
    let run_sql = "SELECT id, entry, owner, started_at_ms, finished_at_ms, ok, claimed, \
                   succeeded, failed FROM job_runs WHERE id = ?";
    macro_rules! go {
        ($p:expr) => {{
            use sqlx::Row;
            let Some(r) = sqlx::query(&sql).bind(code).fetch_optional($p).await? else {
                return Ok(None);
            };
            let job = summary!(&r)?;
            let payload = r.text(12)?;
            let last_round = r.opt_text(22)?;
            let last_run_id: Option<i64> = r.try_get(23)?;
            let scheduler = match last_run_id {
                Some(id) => sqlx::query(run_sql)
                    .bind(id)
                    .fetch_optional($p)
                    .await?
                    .map(|r| {
                        Ok::<SchedulerLevel, sqlx::Error>(SchedulerLevel {
                            run_id: r.try_get(0)?,
                            entry: r.text(1)?,
                            owner: r.text(2)?,
                            started_at: time(r.try_get(3)?),
                            finished_at: time(r.try_get(4)?),
                            ok: r.try_get(5)?,
                            claimed: r.try_get(6)?,
                            succeeded: r.try_get(7)?,
                            failed: r.try_get(8)?,
                        })
                    })
                    .transpose()?,
                None => None,
            };
            let view = JobView {
                payload: serde_json::from_str(&payload).unwrap_or(Value::String(payload)),
                running_generation: r.try_get(13)?,
                lease_owner: r.opt_text(14)?,
                lease_until: time(r.try_get(15)?),
                heartbeat_at: time(r.try_get(16)?),
                first_failed_at: time(r.try_get(17)?),
                request_id: r.opt_text(18)?,
                trace_id: r.opt_text(19)?,
                fenced_writes: r.try_get(20)?,
                created_at: time(Some(r.try_get(21)?)),
                levels: levels(&job, scheduler, last_round.as_deref()),
                job,
            };
            view
        }};
    }
    Ok(Some(match db {
        Db::Mysql(p) => go!(p),
        Db::Sqlite(p) => go!(p),
    }))
}

fn levels(
    job: &JobSummary,
    scheduler: Option<SchedulerLevel>,
    last_round: Option<&str>,
) -> JobLevels {
    let round: Option<Value> = last_round.and_then(|t| serde_json::from_str(t).ok());
    let round = round.map(|v| {
        let generation = v["generation"].as_i64().unwrap_or(0);
        RoundLevel {
            ok: v["round_ok"].as_bool().unwrap_or(false),
            outcome: v["outcome"].as_str().unwrap_or("").to_owned(),
            attempt: v["attempt"].as_i64().unwrap_or(0),
            generation,
            newer_generation_pending: job.request_generation > generation,
            summary: v["summary"].clone(),
            error: v["error"].as_str().map(str::to_owned),
            finished_at: time(v["finished_at_ms"].as_i64()),
        }
    });
    let business_done = round
        .as_ref()
        .is_some_and(|r| r.outcome == "succeeded" && r.generation == job.request_generation)
        && last_round
            .and_then(|t| serde_json::from_str::<Value>(t).ok())
            .and_then(|v| v["business_done"].as_bool())
            .unwrap_or(false)
        && job.status == JobStatus::Success;
    let reason = if business_done {
        "the last round succeeded on the newest request generation and reported its business \
         data and downstream work done"
            .to_owned()
    } else {
        match (&round, job.status) {
            (None, _) => "no round has finished yet".to_owned(),
            (Some(r), _) if r.newer_generation_pending => format!(
                "a newer request generation ({}) is waiting; the last round worked on {}",
                job.request_generation, r.generation
            ),
            (Some(r), JobStatus::Success) if r.outcome == "succeeded" => {
                "the round succeeded but reported downstream work not yet done".to_owned()
            }
            (Some(_), status) => format!("the job is {status:?}"),
        }
    };
    JobLevels {
        scheduler,
        round,
        business: BusinessLevel {
            done: business_done,
            reason,
        },
    }
}
