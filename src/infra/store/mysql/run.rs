//! Running an append's statements on one connection ([`run_append`]), and mapping
//! the statement that failed back to what it means ([`map_failure`]).

use super::append::{self, Stmt};
use crate::infra::store::{StoreError, UnitOfWork};
use futures::TryStreamExt;
use sqlx::Either;

/// Index of the statement that reserves positions (its OK packet carries the new last
/// position): right after BEGIN.
const RESERVE_STATEMENT: usize = 1;

/// The MariaDB error number of a database error, if it is one.
pub(crate) fn db_number(e: &sqlx::Error) -> Option<u16> {
    match e {
        sqlx::Error::Database(d) => d
            .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
            .map(|m| m.number()),
        _ => None,
    }
}

/// Deadlock, or (Galera) a certification failure: the transaction was rolled back.
pub(crate) const ER_LOCK_DEADLOCK: u16 = 1213;
/// "Got error … during COMMIT": the commit was refused (Galera replication) and
/// rolled back.
pub(crate) const ER_ERROR_DURING_COMMIT: u16 = 1180;
/// "WSREP has not yet prepared node for application use": a Galera node that is not
/// in the primary component (or not yet synced) refuses the statement.
pub(crate) const ER_UNKNOWN_COM_ERROR: u16 = 1047;

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
    if matches!(&e, sqlx::Error::Protocol(m) if m.starts_with(ENDED_EARLY)) {
        metrics::counter!("factledger_store_rolled_back_total", "error" => "ended_early")
            .increment(1);
        return first_conflict(units, &e.to_string());
    }
    if number.is_none() {
        return StoreError::OutcomeUnknown(e.to_string());
    }
    let conflict =
        |unit: usize, stream: usize| match units.get(unit).and_then(|u| u.streams.get(stream)) {
            Some(s) => stream_conflict(s),
            None => first_conflict(units, &e.to_string()),
        };
    match (kind, number) {
        // The server rolled the whole transaction back (InnoDB deadlock; on Galera a
        // certification failure at COMMIT is reported as 1213 too, and 1180 is a
        // commit the replication refused): nothing was written, so the unit is
        // decided again on fresh state like any concurrency conflict, never reported
        // as an unknown outcome.
        (_, Some(n @ (ER_LOCK_DEADLOCK | ER_ERROR_DURING_COMMIT))) => {
            metrics::counter!("factledger_store_rolled_back_total", "error" => n.to_string())
                .increment(1);
            conflict(0, 0)
        }
        // A Galera node outside the primary component refuses every statement: the
        // unit was not written, and the database is unavailable from this node.
        (_, Some(ER_UNKNOWN_COM_ERROR)) => StoreError::Unavailable(e.to_string()),
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
        // Outbox ids are reserved with the positions, under the sequence row's lock:
        // a duplicate means the reservation read a stale row (Galera: another node's
        // write set was applied meanwhile, and this transaction is being aborted).
        (Some(Stmt::Outbox), Some(1062)) => conflict(0, 0),
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

/// A conflict on the append's first stream with events: nothing was written, and
/// the unit is decided again (`why` when there is no such stream).
pub(super) fn first_conflict(units: &[UnitOfWork], why: &str) -> StoreError {
    match units
        .iter()
        .flat_map(|u| u.streams.iter())
        .find(|s| !s.events.is_empty())
    {
        Some(s) => stream_conflict(s),
        None => StoreError::Database(why.to_owned()),
    }
}

fn stream_conflict(s: &crate::infra::store::StreamAppend) -> StoreError {
    StoreError::Conflict {
        aggregate_type: s.aggregate_type.clone(),
        aggregate_id: s.aggregate_id.clone(),
        expected_version: s.expected_version,
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
        let (done, last, result) = run_script(conn, &text(stmts), Some(RESERVE_STATEMENT)).await;
        return (done, last, every_statement_ran(done, stmts.len(), result));
    };
    let (done, last, result) = run_script(conn, &text(&stmts[..at]), Some(RESERVE_STATEMENT)).await;
    let result = every_statement_ran(done, at, result);
    if result.is_err() {
        return (done, last, result);
    }
    for q in bound.queries() {
        if let Err(e) = q.execute(&mut *conn).await {
            return (at, last, Err(e));
        }
    }
    let (rest, _, result) = run_script(conn, &text(&stmts[at + 1..]), None).await;
    let result = every_statement_ran(rest, stmts.len() - at - 1, result);
    (at + 1 + rest, last, result)
}

/// What a script that answered fewer results than it has statements, without an
/// error, reports. Galera does this: a transaction brute-force aborted by a
/// replicated write between two statements of a multi-statement query ends the
/// query there, silently, and the rest — COMMIT included — never runs. Nothing was
/// committed, so it is a conflict to decide again; taking the missing results for
/// success acknowledged appends that were never written (`tests/scale.rs`).
pub(super) const ENDED_EARLY: &str = "the server ended the append script early";

fn every_statement_ran(
    done: usize,
    expected: usize,
    result: Result<(), sqlx::Error>,
) -> Result<(), sqlx::Error> {
    match result {
        Ok(()) if done < expected => Err(sqlx::Error::Protocol(format!(
            "{ENDED_EARLY}: {done} of {expected} statements answered, without an error"
        ))),
        other => other,
    }
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

/// Whether the event at `position` is the one this append wrote (`event_id`): on
/// Galera a COMMIT can answer OK for a transaction a replicated write set aborted
/// (seen under multi-primary load: two appends on two nodes were both acknowledged
/// for the same positions, and only one is in the log). Read on the same connection
/// right after the COMMIT, a committed append is always visible here.
pub(super) async fn committed_here(
    conn: &mut sqlx::MySqlConnection,
    position: i64,
    event_id: &str,
) -> Result<bool, sqlx::Error> {
    let found: Option<String> =
        sqlx::query_scalar("SELECT CAST(event_id AS CHAR) FROM events WHERE global_position = ?")
            .bind(position)
            .fetch_optional(&mut *conn)
            .await?;
    Ok(found.as_deref() == Some(event_id))
}
