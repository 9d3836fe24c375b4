//! The projection runner: reads events in global order in batches, folds them with
//! the pure projectors of `factledger-projections`, and writes the rows and the
//! checkpoint in ONE transaction. The checkpoint advances by compare-and-set on its
//! previous value, so two runners of one projector can never both apply a batch.
//! A projector that fails on an event stops there (money views never skip) and
//! reports the error; the caller retries with backoff.

use crate::store::{time_text, DynStore, StoreError};
use factledger_projections::wallet::{self, LedgerRow, WalletRow};
use factledger_projections::{ProjectedEvent, ProjectionError};
use sqlx::{MySqlPool, SqlitePool};

/// Events read and applied per transaction.
pub const BATCH_EVENTS_MAX: i64 = 500;

#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Projection(#[from] ProjectionError),
    #[error("projection database: {0}")]
    Database(#[from] sqlx::Error),
    /// Another runner advanced the checkpoint first; nothing of this batch was written.
    #[error("checkpoint of {0} moved under this runner")]
    CheckpointMoved(&'static str),
}

/// Where projection rows and checkpoints live: the same database as the events.
#[derive(Clone)]
pub enum ProjectionDb {
    Mysql(MySqlPool),
    Sqlite(SqlitePool),
}

/// The same SQL on both backends (plain `?` placeholders, no upserts), expanded once
/// per pool type.
macro_rules! with_tx {
    ($pool:expr, |$tx:ident| $body:block) => {{
        let mut $tx = $pool.begin().await?;
        let out = $body;
        $tx.commit().await?;
        out
    }};
}

macro_rules! apply_rows {
    ($tx:ident, $name:expr, $from:expr, $to:expr, $rows:expr) => {{
        let moved = sqlx::query(
            "UPDATE projection_checkpoints SET position = ?, updated_at = ?, \
             last_error = NULL, error_position = NULL WHERE name = ? AND position = ?",
        )
        .bind($to)
        .bind(time_text(&chrono::Utc::now()))
        .bind($name)
        .bind($from)
        .execute(&mut *$tx)
        .await?
        .rows_affected();
        if moved != 1 {
            return Err(RunnerError::CheckpointMoved($name));
        }
        for row in $rows {
            match row {
                WalletRow::Opened {
                    wallet_id,
                    user_id,
                    currency,
                    version,
                    last_position,
                } => {
                    sqlx::query(
                        "INSERT INTO wallet_balances (wallet_id, user_id, currency, \
                         pending_minor, available_minor, frozen_minor, risk_hold_minor, \
                         version, last_position) VALUES (?, ?, ?, 0, 0, 0, 0, ?, ?)",
                    )
                    .bind(wallet_id)
                    .bind(user_id)
                    .bind(currency)
                    .bind(version)
                    .bind(last_position)
                    .execute(&mut *$tx)
                    .await?;
                }
                WalletRow::Balances {
                    wallet_id,
                    balances: b,
                    version,
                    last_position,
                } => {
                    sqlx::query(
                        "UPDATE wallet_balances SET pending_minor = ?, available_minor = ?, \
                         frozen_minor = ?, risk_hold_minor = ?, version = ?, last_position = ? \
                         WHERE wallet_id = ?",
                    )
                    .bind(b.pending_minor)
                    .bind(b.available_minor)
                    .bind(b.frozen_minor)
                    .bind(b.risk_hold_minor)
                    .bind(version)
                    .bind(last_position)
                    .bind(wallet_id)
                    .execute(&mut *$tx)
                    .await?;
                }
                WalletRow::Version {
                    wallet_id,
                    version,
                    last_position,
                } => {
                    sqlx::query(
                        "UPDATE wallet_balances SET version = ?, last_position = ? \
                         WHERE wallet_id = ?",
                    )
                    .bind(version)
                    .bind(last_position)
                    .bind(wallet_id)
                    .execute(&mut *$tx)
                    .await?;
                }
                WalletRow::Ledger(LedgerRow {
                    wallet_id,
                    sequence,
                    global_position,
                    ref_type,
                    ref_id,
                    entry_type,
                    amount_minor,
                    delta: d,
                    before: b,
                    after: a,
                    recorded_at,
                }) => {
                    sqlx::query(
                        "INSERT INTO wallet_ledger (wallet_id, sequence, global_position, \
                         ref_type, ref_id, entry_type, amount_minor, delta_pending_minor, \
                         delta_available_minor, delta_frozen_minor, delta_risk_hold_minor, \
                         before_pending_minor, before_available_minor, before_frozen_minor, \
                         before_risk_hold_minor, after_pending_minor, after_available_minor, \
                         after_frozen_minor, after_risk_hold_minor, recorded_at) \
                         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    )
                    .bind(wallet_id)
                    .bind(sequence)
                    .bind(global_position)
                    .bind(ref_type)
                    .bind(ref_id)
                    .bind(entry_type)
                    .bind(amount_minor)
                    .bind(d.pending_minor)
                    .bind(d.available_minor)
                    .bind(d.frozen_minor)
                    .bind(d.risk_hold_minor)
                    .bind(b.pending_minor)
                    .bind(b.available_minor)
                    .bind(b.frozen_minor)
                    .bind(b.risk_hold_minor)
                    .bind(a.pending_minor)
                    .bind(a.available_minor)
                    .bind(a.frozen_minor)
                    .bind(a.risk_hold_minor)
                    .bind(recorded_at)
                    .execute(&mut *$tx)
                    .await?;
                }
            }
        }
    }};
}

impl ProjectionDb {
    /// The checkpoint of a projector, created at 0 on first use.
    pub async fn checkpoint(&self, name: &str, version: i32) -> Result<i64, RunnerError> {
        let now = time_text(&chrono::Utc::now());
        let insert = "INSERT INTO projection_checkpoints (name, version, position, updated_at) \
                      SELECT ?, ?, 0, ? WHERE NOT EXISTS \
                      (SELECT 1 FROM projection_checkpoints WHERE name = ?)";
        let select = "SELECT position FROM projection_checkpoints WHERE name = ?";
        Ok(match self {
            ProjectionDb::Mysql(p) => {
                sqlx::query(insert)
                    .bind(name)
                    .bind(version)
                    .bind(&now)
                    .bind(name)
                    .execute(p)
                    .await?;
                sqlx::query_scalar(select).bind(name).fetch_one(p).await?
            }
            ProjectionDb::Sqlite(p) => {
                sqlx::query(insert)
                    .bind(name)
                    .bind(version)
                    .bind(&now)
                    .bind(name)
                    .execute(p)
                    .await?;
                sqlx::query_scalar(select).bind(name).fetch_one(p).await?
            }
        })
    }

    /// Write a batch of wallet rows and move the checkpoint `from → to`, atomically.
    async fn apply_wallet(
        &self,
        from: i64,
        to: i64,
        rows: Vec<WalletRow>,
    ) -> Result<(), RunnerError> {
        match self {
            ProjectionDb::Mysql(p) => {
                with_tx!(p, |tx| { apply_rows!(tx, wallet::NAME, from, to, rows) })
            }
            ProjectionDb::Sqlite(p) => {
                with_tx!(p, |tx| { apply_rows!(tx, wallet::NAME, from, to, rows) })
            }
        }
        Ok(())
    }
}

/// Bring the wallet projection up to the head of the log. Returns how many events it
/// applied. Stops at (and returns) the first error: nothing of a failed batch is
/// written and the checkpoint stays before it.
pub async fn catch_up_wallet(store: &DynStore, db: &ProjectionDb) -> Result<u64, RunnerError> {
    let mut position = db.checkpoint(wallet::NAME, wallet::VERSION).await?;
    let mut applied = 0u64;
    loop {
        let events = store.read_all(position, BATCH_EVENTS_MAX).await?;
        let Some(last) = events.last().map(|e| e.global_position) else {
            return Ok(applied);
        };
        let mut rows = Vec::new();
        for e in &events {
            let (_, payload) = e.current_payload()?;
            let recorded_at = time_text(&e.recorded_at);
            rows.extend(wallet::project(&ProjectedEvent {
                global_position: e.global_position,
                aggregate_type: &e.aggregate_type,
                aggregate_id: &e.aggregate_id,
                sequence: e.sequence,
                event_type: &e.event_type,
                payload: &payload,
                recorded_at: &recorded_at,
            })?);
        }
        db.apply_wallet(position, last, rows).await?;
        applied += events.len() as u64;
        position = last;
    }
}
