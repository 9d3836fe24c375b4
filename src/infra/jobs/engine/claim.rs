//! Taking work: selector lookup, expired-lease recovery and the claim transaction.

use super::state::*;
use super::types::*;
use crate::infra::alerts::AlertKind;
use crate::infra::db::{now_ms, Db, RowText};
use crate::infra::jobs::{truncate_error, JobError, JobKind};
use std::collections::BTreeMap;
use tokio::sync::watch;

impl Engine {
    pub(super) fn registered(&self, kind: &str) -> Result<&Registered, JobError> {
        self.inner
            .kinds
            .get(kind)
            .ok_or_else(|| JobError::UnknownKind(kind.to_owned()))
    }

    /// Ids and kinds of the jobs a selector names (codes OR stored business keys).
    pub(super) async fn find(&self, s: &Selector) -> Result<Vec<(i64, String)>, JobError> {
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
    pub(super) async fn recover_expired(&self, kind: &'static JobKind) -> Result<u32, JobError> {
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
    pub(super) async fn claim(
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

    pub(super) fn claimed(
        &self,
        kind: &'static JobKind,
        c: &Candidate,
    ) -> (ClaimedJob, watch::Sender<bool>) {
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

    pub(super) async fn ensure_quota_row(&self, kind: &str) -> Result<(), JobError> {
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
}
