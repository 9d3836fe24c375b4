//! Scoped rebuild (`wallet:<id>`): one wallet's rows recomputed in the live tables
//! from its stream, in one transaction that holds the checkpoint row.
//!
//! The stream is read BEFORE that transaction, never inside it: on SQLite the
//! transaction holds the database's write lock, and a read on another pooled
//! connection could wait for a connection that every other task holds while it waits
//! for that same lock (seen as a 503 after the pool's 10 s). The log's head is read
//! first, so the read holds every event of the stream up to it; if the checkpoint
//! the transaction finds is past that head, the projector moved on meanwhile and the
//! stream is read again.

use crate::infra::db::Db;
use crate::infra::store::{DynStore, StoredEvent, READ_LIMIT_MAX};
use crate::runtime::projection::{
    project_wallet_event, with_tx, write_wallet_rows, RunnerError, WALLET_ROW_TABLES,
};
use factledger_projections::wallet::{self, LedgerRow, WalletRow};

/// Recompute one wallet's rows in the live tables from its stream, up to the
/// checkpoint, in one transaction that holds the checkpoint row (the runner waits).
/// Rows of that wallet that should not exist are deleted. Returns the events replayed.
pub async fn rebuild_wallet_scoped(
    store: &DynStore,
    db: &Db,
    wallet_id: &str,
) -> Result<u64, RunnerError> {
    db.checkpoint(wallet::NAME, wallet::VERSION).await?;
    for _ in 0..SCOPED_READ_ATTEMPTS_MAX {
        let read_head = store.head_position().await?;
        let events = wallet_events(store, wallet_id).await?;
        if let Some(replayed) = rebuild_from(db, wallet_id, &events, read_head).await? {
            return Ok(replayed);
        }
    }
    Err(RunnerError::Held(wallet::NAME))
}

/// Reads of the stream before giving up on a projector that keeps moving past them.
const SCOPED_READ_ATTEMPTS_MAX: u32 = 5;

/// The transaction of [`rebuild_wallet_scoped`] on `events`, read when the log's
/// head was `read_head`; `None` when the checkpoint is past it (read again).
async fn rebuild_from(
    db: &Db,
    wallet_id: &str,
    events: &[StoredEvent],
    read_head: i64,
) -> Result<Option<u64>, RunnerError> {
    macro_rules! scoped {
        ($tx:ident, $lock_sql:expr, $opt:expr) => {{
            let row = sqlx::query($lock_sql)
                .bind(wallet::NAME)
                .fetch_one(&mut *$tx)
                .await?;
            let position: i64 = sqlx::Row::try_get(&row, 0)?;
            let (ours, live): (i64, i64) =
                (sqlx::Row::try_get(&row, 2)?, sqlx::Row::try_get(&row, 3)?);
            // Held by a full rebuild, or the live set is not (yet) the checkpoint's.
            if $opt(&row)?.is_some() || ours != live {
                return Err(RunnerError::Held(wallet::NAME));
            }
            if position > read_head {
                return Ok(None);
            }
            let (rows, replayed) = wallet_rows_up_to(events, position)?;
            for t in WALLET_ROW_TABLES {
                sqlx::query(&format!("DELETE FROM {t} WHERE wallet_id = ?"))
                    .bind(wallet_id)
                    .execute(&mut *$tx)
                    .await?;
            }
            write_wallet_rows!($tx, rows, "");
            replayed
        }};
    }
    Ok(Some(match db {
        Db::Mysql(p) => with_tx!(p, |tx| {
            scoped!(
                tx,
                "SELECT c.position, c.hold, c.generation, g.generation \
                 FROM projection_checkpoints c, wallet_generation g \
                 WHERE c.name = ? AND g.id = 1 FOR UPDATE",
                |r: &sqlx::mysql::MySqlRow| crate::infra::store::mysql::opt_text(r, 1)
            )
        }),
        Db::Sqlite(p) => {
            let mut tx = p.begin_with("BEGIN IMMEDIATE").await?;
            let replayed = scoped!(
                tx,
                "SELECT c.position, c.hold, c.generation, g.generation \
                 FROM projection_checkpoints c, wallet_generation g \
                 WHERE c.name = ? AND g.id = 1",
                |r: &sqlx::sqlite::SqliteRow| sqlx::Row::try_get::<Option<String>, _>(r, 1)
            );
            tx.commit().await?;
            replayed
        }
    }))
}

/// Every event of one wallet's stream, in order.
async fn wallet_events(store: &DynStore, wallet_id: &str) -> Result<Vec<StoredEvent>, RunnerError> {
    let mut events = Vec::new();
    let mut next = 1;
    loop {
        let page = store
            .read_stream(
                factledger_aggregates::wallet::WALLET_AGGREGATE_TYPE,
                wallet_id,
                next,
                READ_LIMIT_MAX,
            )
            .await?;
        let Some(last) = page.last() else {
            return Ok(events);
        };
        next = last.sequence + 1;
        events.extend(page);
    }
}

/// The rows a wallet's events up to `position` make, and how many events that was.
fn wallet_rows_up_to(
    events: &[StoredEvent],
    position: i64,
) -> Result<(Vec<WalletRow>, u64), RunnerError> {
    let mut rows = Vec::new();
    let mut replayed = 0u64;
    for e in events.iter().take_while(|e| e.global_position <= position) {
        rows.extend(project_wallet_event(e)?);
        replayed += 1;
    }
    Ok((rows, replayed))
}
