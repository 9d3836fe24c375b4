//! The relay's tables (migrations `0007`, `0024`): reading `outbox` rows in id order
//! and moving each sink's checkpoint in `outbox_sinks`, with the failure streak
//! (`attempts`, `last_error`, `failing_since_ms`) and the refusals of the message at
//! the head (`refusals`, reset whenever the checkpoint moves). The same SQL on both
//! backends.

use super::{truncate_error, OutboxMessage};
use crate::infra::db::{Db, Get, RowText, Tx};
use factledger_projections::table::{Cell, ColType, Column};
use serde::Serialize;
use sqlx::Row;

/// Run the same query text against whichever pool `db` is.
macro_rules! on_pool {
    ($db:expr, |$p:ident| $body:expr) => {
        match $db {
            Db::Mysql($p) => $body,
            Db::Sqlite($p) => $body,
        }
    };
}

/// The checkpoint of `sink`, created on first use. A new sink starts before the oldest
/// row still kept, so it receives everything (at least once to every sink), and rows
/// purged by hand before it existed do not read as a hole.
pub async fn ensure_sink(db: &Db, sink: &str) -> Result<i64, sqlx::Error> {
    if let Some(id) = delivered_id(db, sink).await? {
        return Ok(id);
    }
    let insert = "INSERT INTO outbox_sinks (name, delivered_id, attempts, updated_at_ms) \
                  SELECT ?, COALESCE(MIN(id), 1) - 1, 0, ? FROM outbox";
    let created = on_pool!(db, |p| sqlx::query(insert)
        .bind(sink)
        .bind(crate::infra::db::now_ms())
        .execute(p)
        .await
        .map(|_| ()));
    match created {
        // Two relays of one sink starting at once: the second insert hits the key,
        // and the row is there.
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {}
        other => {
            other?;
        }
    }
    delivered_id(db, sink)
        .await?
        .ok_or(sqlx::Error::RowNotFound)
}

async fn delivered_id(db: &Db, sink: &str) -> Result<Option<i64>, sqlx::Error> {
    let select = "SELECT delivered_id FROM outbox_sinks WHERE name = ?";
    on_pool!(db, |p| sqlx::query_scalar(select)
        .bind(sink)
        .fetch_optional(p)
        .await)
}

/// Outbox rows with `id > after`, in id order, at most `limit`.
pub async fn read_after(
    db: &Db,
    after: i64,
    limit: i64,
) -> Result<Vec<OutboxMessage>, sqlx::Error> {
    let select = "SELECT id, aggregatetype, aggregateid, type, payload, created_at_ms \
                  FROM outbox WHERE id > ? ORDER BY id LIMIT ?";
    on_pool!(db, |p| {
        let rows = sqlx::query(select)
            .bind(after)
            .bind(limit)
            .fetch_all(p)
            .await?;
        rows.iter()
            .map(|r| {
                Ok(message(
                    r.try_get(0)?,
                    r.text(1)?,
                    r.text(2)?,
                    r.text(3)?,
                    &r.text(4)?,
                    r.try_get(5)?,
                ))
            })
            .collect()
    })
}

fn message(
    id: i64,
    aggregatetype: String,
    aggregateid: String,
    r#type: String,
    payload: &str,
    created_at_ms: i64,
) -> OutboxMessage {
    // The payload is JSON text by contract. A row that is not would otherwise stop
    // every sink for good; it is delivered as a JSON string instead (never skipped).
    let payload = serde_json::from_str(payload).unwrap_or_else(|e| {
        tracing::warn!(outbox_id = id, error = %e, "outbox payload is not JSON; sent as a string");
        serde_json::Value::String(payload.to_owned())
    });
    OutboxMessage {
        id,
        aggregatetype,
        aggregateid,
        r#type,
        payload,
        created_at: ms_text(created_at_ms),
    }
}

/// Milliseconds since the epoch as RFC 3339 UTC with milliseconds.
pub(crate) fn ms_text(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| ms.to_string())
}

/// Move `sink`'s checkpoint `from → to` by compare-and-set on `from`. Returns false when
/// it had moved already (another relay of the same sink, in another process, got
/// there first): then nothing is written. `clear_failure` ends a failure streak (the
/// whole batch went through); the head's refusal count starts again either way.
pub async fn advance(
    db: &Db,
    sink: &str,
    from: i64,
    to: i64,
    clear_failure: bool,
) -> Result<bool, sqlx::Error> {
    let sql = if clear_failure {
        "UPDATE outbox_sinks SET delivered_id = ?, updated_at_ms = ?, attempts = 0, \
         refusals = 0, last_error = NULL, failing_since_ms = NULL \
         WHERE name = ? AND delivered_id = ?"
    } else {
        "UPDATE outbox_sinks SET delivered_id = ?, updated_at_ms = ?, refusals = 0 \
         WHERE name = ? AND delivered_id = ?"
    };
    let moved = on_pool!(db, |p| sqlx::query(sql)
        .bind(to)
        .bind(crate::infra::db::now_ms())
        .bind(sink)
        .bind(from)
        .execute(p)
        .await?
        .rows_affected());
    Ok(moved == 1)
}

/// Record a failed attempt: one more attempt, the error, and when the streak began.
pub async fn record_failure(db: &Db, sink: &str, error: &str) -> Result<(), sqlx::Error> {
    let now = crate::infra::db::now_ms();
    let sql = "UPDATE outbox_sinks SET attempts = attempts + 1, last_error = ?, \
               failing_since_ms = COALESCE(failing_since_ms, ?), updated_at_ms = ? \
               WHERE name = ?";
    on_pool!(db, |p| sqlx::query(sql)
        .bind(truncate_error(error))
        .bind(now)
        .bind(now)
        .bind(sink)
        .execute(p)
        .await
        .map(|_| ()))?;
    Ok(())
}

/// Record a refusal of the message at the head (a failed attempt, see
/// [`record_failure`], that also counts against the retry schedule); the head's
/// refusals so far, this one included.
pub async fn record_refusal(db: &Db, sink: &str, error: &str) -> Result<i64, sqlx::Error> {
    let now = crate::infra::db::now_ms();
    let mut tx = Tx::begin_write(db).await?;
    let sql = "UPDATE outbox_sinks SET attempts = attempts + 1, refusals = refusals + 1, \
               last_error = ?, failing_since_ms = COALESCE(failing_since_ms, ?), \
               updated_at_ms = ? WHERE name = ?";
    let args = [
        Cell::Text(truncate_error(error)),
        Cell::Int(now),
        Cell::Int(now),
        Cell::Text(sink.to_owned()),
    ];
    tx.exec(sql, &args).await?;
    let select = "SELECT refusals FROM outbox_sinks WHERE name = ?";
    let rows = tx
        .fetch(select, &[Cell::Text(sink.to_owned())], REFUSALS)
        .await?;
    tx.commit().await?;
    rows.first()
        .ok_or(sqlx::Error::RowNotFound)
        .and_then(|r| r.int("refusals"))
}

const REFUSALS: &[Column] = &[Column {
    name: "refusals",
    ty: ColType::Int,
}];

/// The highest outbox id written so far (0 when none).
pub async fn max_id(db: &Db) -> Result<i64, sqlx::Error> {
    let sql = "SELECT COALESCE(MAX(id), 0) FROM outbox";
    on_pool!(db, |p| sqlx::query_scalar(sql).fetch_one(p).await)
}

/// One sink's checkpoint as `GET /v1/outbox/sinks` and `factledger outbox status`
/// show it.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct SinkStatus {
    pub name: String,
    /// The last outbox id this sink acknowledged (every id up to it was delivered).
    pub delivered_id: i64,
    /// Rows written but not yet delivered: `max outbox id − delivered_id`.
    pub backlog: i64,
    /// Failed attempts in the current failure streak (0 when healthy).
    pub attempts: i64,
    pub last_error: Option<String>,
    /// When the current failure streak began (RFC 3339), if the sink is failing.
    pub failing_since: Option<String>,
    /// Messages this sink gave up on that are not replayed yet
    /// (`GET /v1/outbox/dead-letters?sink=`).
    pub dead_letters: i64,
    pub updated_at: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct OutboxStatus {
    /// The highest outbox id written so far.
    pub max_id: i64,
    /// Every sink that ever had a checkpoint here (any process), by name.
    pub sinks: Vec<SinkStatus>,
}

/// Every sink's checkpoint and backlog.
pub async fn status(db: &Db) -> Result<OutboxStatus, sqlx::Error> {
    let max_id = max_id(db).await?;
    let select = "SELECT s.name, s.delivered_id, s.attempts, s.last_error, \
                  s.failing_since_ms, s.updated_at_ms, \
                  (SELECT COUNT(*) FROM outbox_dead_letters d \
                   WHERE d.sink = s.name AND d.replayed_at_ms IS NULL) \
                  FROM outbox_sinks s ORDER BY s.name";
    let sinks = on_pool!(db, |p| {
        let rows = sqlx::query(select).fetch_all(p).await?;
        rows.iter()
            .map(|r| {
                let delivered_id: i64 = r.try_get(1)?;
                let attempts: i64 = r.try_get::<i64, _>(2).or_else(|_| {
                    // MariaDB `INT` decodes as i32.
                    r.try_get::<i32, _>(2).map(i64::from)
                })?;
                let failing_since_ms: Option<i64> = r.try_get(4)?;
                Ok(SinkStatus {
                    name: r.text(0)?,
                    delivered_id,
                    backlog: (max_id - delivered_id).max(0),
                    attempts,
                    last_error: r.opt_text(3)?,
                    failing_since: failing_since_ms.map(ms_text),
                    dead_letters: r.try_get(6)?,
                    updated_at: ms_text(r.try_get(5)?),
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()
    })?;
    Ok(OutboxStatus { max_id, sinks })
}
