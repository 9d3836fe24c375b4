//! Completing rounds: the completer task writes batches of completions, each a
//! compare-and-set on the job's claim.

use super::state::*;
use super::types::*;
use crate::infra::db::{now_ms, Db};
use crate::infra::jobs::{truncate_error, JobStatus};
use serde_json::{json, Value};
use std::collections::HashMap;
use tokio::sync::{mpsc, oneshot};

/// Write completions in batches: one transaction for whatever is waiting.
pub(super) async fn completer(
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
pub(super) async fn complete_batch(
    db: &Db,
    batch: &[Completion],
) -> Result<Vec<Completed>, sqlx::Error> {
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
    match db {
        Db::Mysql(p) => complete_mysql(p, batch, &current_sql(" FOR UPDATE"), &decide, now).await,
        Db::Sqlite(p) => complete_sqlite(p, batch, &current_sql(""), &decide, now).await,
    }
}

/// Each job's `(status, running_attempt, request_generation)`, as read.
type Current = HashMap<i64, (i64, i64, i64)>;
/// Each completion's outcome and the row it writes, given what was read.
type Decide<'a> = dyn Fn(&Current) -> Vec<(Completed, Option<Set>)> + Sync + 'a;

/// MariaDB: the claims read under row locks, then one UPDATE for the whole batch.
async fn complete_mysql(
    p: &sqlx::MySqlPool,
    batch: &[Completion],
    current_sql: &str,
    decide: &Decide<'_>,
    now: i64,
) -> Result<Vec<Completed>, sqlx::Error> {
    use crate::infra::store::mysql::lit;
    let mut tx = p.begin().await?;
    let current: HashMap<i64, (i64, i64, i64)> =
        sqlx::query_as::<_, (i64, i64, i64, i64)>(current_sql)
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

/// SQLite: the claims read inside BEGIN IMMEDIATE, then one compare-and-set each.
async fn complete_sqlite(
    p: &sqlx::SqlitePool,
    batch: &[Completion],
    current_sql: &str,
    decide: &Decide<'_>,
    now: i64,
) -> Result<Vec<Completed>, sqlx::Error> {
    const WHERE_CLAIM: &str = "WHERE id = ? AND status = 1 AND running_attempt = ?";
    let mut tx = p.begin_with("BEGIN IMMEDIATE").await?;
    let current: HashMap<i64, (i64, i64, i64)> =
        sqlx::query_as::<_, (i64, i64, i64, i64)>(current_sql)
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

pub(super) struct Set {
    pub(super) status: i32,
    pub(super) retry_count: i32,
    pub(super) last_error: Option<String>,
    pub(super) first_failed_at_ms: Option<i64>,
    pub(super) next_execute_at_ms: i64,
    pub(super) last_round: String,
}

/// What a completion writes, given the job's current `(status, running_attempt,
/// request_generation)`; `None` when the claim is stale (nothing may be written).
pub(super) fn decide_completion(
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

    fn completion(outcome: Result<RoundReport, JobFailure>) -> Completion {
        Completion {
            id: 1,
            running_attempt: 4,
            generation: 7,
            retry_count: 1,
            max_retry_count: 3,
            backoff: crate::infra::jobs::Backoff::Minutes5,
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
