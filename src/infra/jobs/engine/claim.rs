//! Taking work: selector lookup, expired-lease recovery and the claim transaction.

use super::state::*;
use super::types::*;
use crate::infra::alerts::AlertKind;
use crate::infra::db::{now_ms, Db, Dialect, Get, RowText, Tx};
use crate::infra::jobs::{truncate_error, JobError, JobKind};
use factledger_projections::table::{Cell, ColType, Column};
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
        let known = || {
            self.inner
                .quota_rows
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(kind.name)
        };
        if quota && !known() {
            self.ensure_quota_row(kind.name).await?;
            self.inner
                .quota_rows
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(kind.name);
        }
        // SQLite's BEGIN IMMEDIATE takes the database lock: reads stay as read.
        let mut tx = Tx::begin_write(&self.inner.db).await?;
        if paused_in(&mut tx).await? {
            return Ok((0, Vec::new(), true));
        }
        let room = if quota {
            self.room_in(&mut tx, kind, now).await?
        } else {
            i64::MAX
        };
        let candidates = self.candidates_in(&mut tx, kind, &pick, now).await?;
        // One compare-and-set statement for every candidate within quota (a row each:
        // status, running_attempt and request_generation as read); the rows it did
        // take are the ones now carrying this run and owner.
        let wanted: Vec<&Candidate> = candidates.iter().take(room.max(0) as usize).collect();
        let lease_until = now + kind.lease_ms;
        let claimed = self
            .take_in(&mut tx, &pick, wanted, run_id, now, lease_until)
            .await?;
        let claimed: Vec<(ClaimedJob, watch::Sender<bool>)> =
            claimed.into_iter().map(|c| self.claimed(kind, c)).collect();
        tx.commit().await?;
        // Heartbeats start at the claim, so a job waiting for a free handler slot
        // keeps its lease.
        let jobs = claimed
            .into_iter()
            .map(|(job, lost)| {
                self.spawn_heartbeat(kind, job.id, job.running_attempt, lost);
                job
            })
            .collect();
        Ok((candidates.len() as u32, jobs, false))
    }

    /// How many more jobs of `kind` may run: its own cap and the total cap of every
    /// capped kind, less the live leases (the quota rows locked to commit).
    async fn room_in(
        &self,
        tx: &mut Tx,
        kind: &'static JobKind,
        now: i64,
    ) -> Result<i64, JobError> {
        let lock = format!(
            "SELECT name FROM job_quota_locks WHERE name IN ('*', ?) ORDER BY name{}",
            tx.dialect().lock_rows()
        );
        tx.fetch(&lock, &[Cell::text(kind.name)], &[]).await?;
        let live = "SELECT COUNT(*) AS n FROM jobs WHERE status = 1 AND kind = ? \
                    AND lease_until_ms > ?";
        let running = count_in(tx, live, &[Cell::text(kind.name), Cell::Int(now)]).await?;
        let capped = &self.inner.capped;
        let all = format!(
            "SELECT COUNT(*) AS n FROM jobs WHERE status = 1 AND kind IN ({}) \
             AND lease_until_ms > ?",
            vec!["?"; capped.len()].join(", ")
        );
        let mut args: Vec<Cell> = capped.iter().map(|k| Cell::text(*k)).collect();
        args.push(Cell::Int(now));
        let running_all = count_in(tx, &all, &args).await?;
        Ok((kind.cap.unwrap_or(i64::MAX) - running)
            .min(self.inner.total_cap - running_all)
            .max(0))
    }

    /// The jobs `pick` names that may be claimed now, in claim order.
    async fn candidates_in(
        &self,
        tx: &mut Tx,
        kind: &'static JobKind,
        pick: &Pick,
        now: i64,
    ) -> Result<Vec<Candidate>, JobError> {
        let mysql = tx.dialect() == Dialect::Mysql;
        // A manual pick names its jobs: a row another transaction has locked for a
        // moment (a scan's next-key lock, a heartbeat, an upsert) is read, not skipped,
        // and the compare-and-set decides. Skipping is for scans and kicks, which take
        // whatever is free.
        let manual = matches!(pick, Pick::Ids { auto: false, .. });
        let skip_locked = if mysql && self.inner.config.skip_locked && !manual {
            " FOR UPDATE SKIP LOCKED"
        } else {
            ""
        };
        let (select, binds): (String, Vec<i64>) = match pick {
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
        let mut args = vec![Cell::text(kind.name)];
        args.extend(binds.into_iter().map(Cell::Int));
        let rows = tx.fetch(&select, &args, CANDIDATE_COLUMNS).await?;
        Ok(rows
            .iter()
            .map(Candidate::from_row)
            .collect::<Result<Vec<_>, sqlx::Error>>()?)
    }

    /// Take `wanted` by one compare-and-set UPDATE; the candidates it did take.
    async fn take_in<'c>(
        &self,
        tx: &mut Tx,
        pick: &Pick,
        wanted: Vec<&'c Candidate>,
        run_id: i64,
        now: i64,
        lease_until: i64,
    ) -> Result<Vec<&'c Candidate>, JobError> {
        if wanted.is_empty() {
            return Ok(Vec::new());
        }
        let guard = match pick {
            Pick::Ids { auto: false, .. } => "",
            _ => " AND retry_count < max_retry_count AND next_execute_at_ms <= ?",
        };
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
        let take = format!(
            "UPDATE jobs SET status = 1, running_attempt = running_attempt + 1, \
             running_generation = request_generation, lease_owner = ?, lease_until_ms = ?, \
             heartbeat_at_ms = ?, last_error = NULL, last_run_id = ?, updated_at_ms = ? \
             WHERE status IN (0, 3){guard} AND id IN ({ids}) AND ({cas})"
        );
        let owner = &self.inner.config.owner;
        let mut args = vec![
            Cell::text(owner),
            Cell::Int(lease_until),
            Cell::Int(now),
            Cell::Int(run_id),
            Cell::Int(now),
        ];
        if !guard.is_empty() {
            args.push(Cell::Int(now));
        }
        let taken = tx.exec(&take, &args).await?;
        if taken as usize == wanted.len() {
            return Ok(wanted);
        }
        if taken == 0 {
            return Ok(Vec::new());
        }
        const OURS: &[Column] = &[
            Column {
                name: "id",
                ty: ColType::Int,
            },
            Column {
                name: "running_attempt",
                ty: ColType::Int,
            },
        ];
        let sql = format!(
            "SELECT id, running_attempt FROM jobs WHERE id IN ({ids}) \
             AND status = 1 AND last_run_id = ? AND lease_owner = ?"
        );
        let mut ours = std::collections::HashMap::new();
        for r in tx
            .fetch(&sql, &[Cell::Int(run_id), Cell::text(owner)], OURS)
            .await?
        {
            ours.insert(r.int("id")?, r.int("running_attempt")?);
        }
        Ok(wanted
            .into_iter()
            .filter(|c| ours.get(&c.id) == Some(&(c.running_attempt + 1)))
            .collect())
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

/// Whether jobs are paused (the control row read under a share lock on MariaDB).
async fn paused_in(tx: &mut Tx) -> Result<bool, sqlx::Error> {
    const PAUSED: &[Column] = &[Column {
        name: "paused",
        ty: ColType::Int,
    }];
    let share = match tx.dialect() {
        Dialect::Mysql => " LOCK IN SHARE MODE",
        Dialect::Sqlite => "",
    };
    let sql = format!("SELECT paused FROM job_control WHERE id = 1{share}");
    let rows = tx.fetch(&sql, &[], PAUSED).await?;
    Ok(rows
        .first()
        .ok_or(sqlx::Error::RowNotFound)?
        .int("paused")?
        != 0)
}

/// The single count a query returns, inside `tx`.
async fn count_in(tx: &mut Tx, sql: &str, args: &[Cell]) -> Result<i64, sqlx::Error> {
    const N: &[Column] = &[Column {
        name: "n",
        ty: ColType::Int,
    }];
    let rows = tx.fetch(sql, args, N).await?;
    rows.first().ok_or(sqlx::Error::RowNotFound)?.int("n")
}
