//! Running an append's statements on one connection ([`run_append`]), and mapping
//! the statement that failed back to what it means ([`map_failure`]).

use super::append::{self, Stmt};
use crate::infra::store::{StoreError, UnitOfWork};
use futures::TryStreamExt;
use sqlx::Either;

/// Index of the statement that reserves positions (its OK packet carries the new last
/// position): right after BEGIN.
const RESERVE_STATEMENT: usize = 1;

fn db_number(e: &sqlx::Error) -> Option<u16> {
    match e {
        sqlx::Error::Database(d) => d
            .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
            .map(|m| m.number()),
        _ => None,
    }
}

/// `failed_check` is the guard's @fl_bad when the guard failed; `stale_fence` the
/// fence found stale when the fence statement failed.
pub(super) fn map_failure(
    units: &[UnitOfWork],
    kind: Option<&Stmt>,
    e: sqlx::Error,
    failed_check: Option<i64>,
    stale_fence: Option<crate::infra::store::Fence>,
) -> StoreError {
    let number = db_number(&e);
    if number.is_none() {
        return StoreError::OutcomeUnknown(e.to_string());
    }
    let first_stream = || {
        units
            .iter()
            .flat_map(|u| u.streams.iter())
            .find(|s| !s.events.is_empty())
    };
    let conflict = |unit: usize, stream: usize| {
        let s = units
            .get(unit)
            .and_then(|u| u.streams.get(stream))
            .or_else(first_stream);
        match s {
            Some(s) => StoreError::Conflict {
                aggregate_type: s.aggregate_type.clone(),
                aggregate_id: s.aggregate_id.clone(),
                expected_version: s.expected_version,
            },
            None => StoreError::Database(e.to_string()),
        }
    };
    match (kind, number) {
        (Some(Stmt::Events { .. } | Stmt::BoundEvents), Some(1062))
            if e.to_string().contains("uq_events_ledger_ref") =>
        {
            StoreError::DuplicateLedgerRef(match units {
                [one] => one
                    .ledger_refs
                    .iter()
                    .map(|r| format!("{}/{}/{}", r.ref_type, r.ref_id, r.entry_type))
                    .collect::<Vec<_>>()
                    .join(", "),
                _ => e.to_string(),
            })
        }
        (Some(Stmt::Events { unit, stream }), Some(1062)) => conflict(*unit, *stream),
        (Some(Stmt::BoundEvents), Some(1062)) => conflict(0, 0),
        (Some(Stmt::StreamGuard(checked, _)), Some(1048)) => {
            let (unit, stream) = failed_check
                .and_then(|i| usize::try_from(i).ok())
                .and_then(|i| checked.get(i))
                .or(checked.first())
                .copied()
                .unwrap_or((0, 0));
            conflict(unit, stream)
        }
        (Some(Stmt::CommandLog), Some(1062)) => StoreError::DuplicateIdempotencyKey(e.to_string()),
        (Some(Stmt::Fences(fences)), Some(1048)) => {
            // `stale` is the fence found stale after the rollback (or the first).
            match stale_fence.or(fences.first().copied()) {
                Some(f) => StoreError::Fenced {
                    job_id: f.job_id,
                    running_attempt: f.running_attempt,
                },
                None => StoreError::Database(e.to_string()),
            }
        }
        (Some(Stmt::Inject(n)), _) => StoreError::Injected(*n),
        _ => StoreError::Database(e.to_string()),
    }
}

/// Run a multi-statement script; returns how many statements completed, the last
/// position reserved by the statement at `reserve_at` ([`RESERVE_STATEMENT`]), and
/// the error that stopped it, if any.
fn run_script<'c>(
    conn: &'c mut sqlx::MySqlConnection,
    sql: &'c str,
    reserve_at: Option<usize>,
) -> futures::future::BoxFuture<'c, (usize, Option<i64>, Result<(), sqlx::Error>)> {
    Box::pin(async move {
        let mut done = 0usize;
        let mut last = None;
        let mut stream = sqlx::raw_sql(sql).fetch_many(conn);
        let result = loop {
            match stream.try_next().await {
                Ok(Some(Either::Left(r))) => {
                    if Some(done) == reserve_at {
                        last = i64::try_from(r.last_insert_id()).ok();
                    }
                    done += 1;
                }
                Ok(Some(Either::Right(_))) => {}
                Ok(None) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        (done, last, result)
    })
}

/// Run an append's script: in one round trip, or — when its events are bound — the
/// statements before them, the prepared INSERT, then the rest (COMMIT included).
/// Returns what [`run_script`] returns, counted over the whole list.
pub(super) async fn run_append(
    conn: &mut sqlx::MySqlConnection,
    script: &append::Script<'_>,
) -> (usize, Option<i64>, Result<(), sqlx::Error>) {
    let text = |stmts: &[(String, Stmt)]| {
        stmts
            .iter()
            .map(|(s, _)| s.as_str())
            .collect::<Vec<_>>()
            .join(";\n")
    };
    let stmts = &script.stmts;
    let (Some(bound), Some(at)) = (
        &script.bound,
        stmts
            .iter()
            .position(|(_, k)| matches!(k, Stmt::BoundEvents)),
    ) else {
        return run_script(conn, &text(stmts), Some(RESERVE_STATEMENT)).await;
    };
    let (done, last, result) = run_script(conn, &text(&stmts[..at]), Some(RESERVE_STATEMENT)).await;
    if result.is_err() {
        return (done, last, result);
    }
    for q in bound.queries() {
        if let Err(e) = q.execute(&mut *conn).await {
            return (at, last, Err(e));
        }
    }
    let (rest, _, result) = run_script(conn, &text(&stmts[at + 1..]), None).await;
    (at + 1 + rest, last, result)
}

/// The first fence whose job is not RUNNING with its attempt any more.
pub(super) async fn stale_fence(
    conn: &mut sqlx::MySqlConnection,
    fences: &[crate::infra::store::Fence],
) -> Option<crate::infra::store::Fence> {
    let ids = fences
        .iter()
        .map(|f| f.job_id.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let sql = format!("SELECT id, status, running_attempt FROM jobs WHERE id IN ({ids})");
    let rows: Vec<(i64, i64, i64)> = sqlx::query_as(&sql).fetch_all(&mut *conn).await.ok()?;
    fences.iter().copied().find(|f| {
        !rows.iter().any(|&(id, status, attempt)| {
            id == f.job_id && status == 1 && attempt == f.running_attempt
        })
    })
}

pub(super) fn rollback(
    conn: &mut sqlx::MySqlConnection,
) -> futures::future::BoxFuture<'_, Result<(), sqlx::Error>> {
    Box::pin(async move { sqlx::Executor::execute(conn, "ROLLBACK").await.map(|_| ()) })
}
