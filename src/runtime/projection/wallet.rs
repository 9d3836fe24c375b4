//! The wallet projection's checkpoint and batches: the rows one stored event makes, a
//! batch applied with its checkpoint move, and a synchronous catch-up.

use super::coalesce::{upsert_balance_sqlite, write_rows_mysql, Coalesced};
use super::write::*;
use crate::infra::db::Db;
use crate::infra::store::{time_text, DynStore, StoredEvent};
use factledger_projections::wallet::{self, LedgerRow, WalletRow};
use factledger_projections::ProjectedEvent;

impl Db {
    /// The checkpoint of a projector, created at 0 on first use.
    pub async fn checkpoint(&self, name: &str, version: i32) -> Result<i64, RunnerError> {
        let select = "SELECT position FROM projection_checkpoints WHERE name = ?";
        // Polled every few milliseconds: a plain read, and the insert only once.
        let found: Option<i64> = match self {
            Db::Mysql(p) => {
                sqlx::query_scalar(select)
                    .bind(name)
                    .fetch_optional(p)
                    .await?
            }
            Db::Sqlite(p) => {
                sqlx::query_scalar(select)
                    .bind(name)
                    .fetch_optional(p)
                    .await?
            }
        };
        if let Some(position) = found {
            return Ok(position);
        }
        let now = time_text(&chrono::Utc::now());
        let insert = "INSERT INTO projection_checkpoints (name, version, position, updated_at) \
                      SELECT ?, ?, 0, ? WHERE NOT EXISTS \
                      (SELECT 1 FROM projection_checkpoints WHERE name = ?)";
        macro_rules! create {
            ($p:expr) => {{
                let created = sqlx::query(insert)
                    .bind(name)
                    .bind(version)
                    .bind(&now)
                    .bind(name)
                    .execute($p)
                    .await;
                match created {
                    // Two first uses at once both see no row (MariaDB, READ
                    // COMMITTED); the second insert hits the key: the row is there.
                    Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {}
                    other => {
                        other?;
                    }
                }
                sqlx::query_scalar(select).bind(name).fetch_one($p).await?
            }};
        }
        Ok(match self {
            Db::Mysql(p) => create!(p),
            Db::Sqlite(p) => create!(p),
        })
    }

    /// Write a batch of wallet rows and move the checkpoint `from → to`, atomically.
    pub(super) async fn apply_wallet(
        &self,
        from: i64,
        to: i64,
        rows: Vec<WalletRow>,
    ) -> Result<(), RunnerError> {
        // Coalesced (see `coalesce`): a batch of 500 credits to 16 wallets is 16
        // balance rows and one ledger INSERT, not 1,000 statements.
        match self {
            Db::Mysql(p) => with_tx!(p, |tx| {
                advance_checkpoint!(tx, wallet::NAME, from, to);
                write_rows_mysql(&mut tx, &rows, "").await?;
            }),
            Db::Sqlite(p) => with_tx!(p, |tx| {
                advance_checkpoint!(tx, wallet::NAME, from, to);
                let coalesced = Coalesced::of(&rows);
                for (wallet_id, ch) in &coalesced.balances {
                    upsert_balance_sqlite(&mut tx, wallet_id, ch, "").await?;
                }
                let others = rows.iter().filter(|r| {
                    !matches!(
                        r,
                        WalletRow::Opened { .. }
                            | WalletRow::Balances { .. }
                            | WalletRow::Version { .. }
                    )
                });
                write_wallet_rows!(tx, others, "")
            }),
        }
        Ok(())
    }
}

/// The wallet rows one stored event makes (its payload upcast first).
pub fn project_wallet_event(e: &StoredEvent) -> Result<Vec<WalletRow>, RunnerError> {
    if e.aggregate_type != factledger_aggregates::wallet::WALLET_AGGREGATE_TYPE {
        return Ok(Vec::new());
    }
    let (_, payload) = e.current_payload()?;
    let recorded_at = time_text(&e.recorded_at);
    Ok(wallet::project(&ProjectedEvent {
        global_position: e.global_position,
        aggregate_type: &e.aggregate_type,
        aggregate_id: &e.aggregate_id,
        sequence: e.sequence,
        event_type: &e.event_type,
        payload: &payload,
        recorded_at: &recorded_at,
    })?)
}

/// Bring the wallet projection up to the head of the log. Returns how many events it
/// applied. Stops at (and returns) the first error: an event the projector cannot
/// apply leaves the checkpoint right before it (the events before it in its batch are
/// applied); a failed write leaves nothing of its batch.
pub async fn catch_up_wallet(store: &DynStore, db: &Db) -> Result<u64, RunnerError> {
    let mut position = db.checkpoint(wallet::NAME, wallet::VERSION).await?;
    let mut applied = 0u64;
    loop {
        let events = store.read_all(position, BATCH_EVENTS_MAX).await?;
        let Some(last) = events.last().map(|e| e.global_position) else {
            return Ok(applied);
        };
        let mut rows = Vec::new();
        for (i, e) in events.iter().enumerate() {
            match project_wallet_event(e) {
                Ok(r) => rows.extend(r),
                Err(failed) => {
                    // Apply what comes before the failing event, so the projection
                    // stops exactly at it, then report it.
                    if let Some(before) = i.checked_sub(1).map(|j| events[j].global_position) {
                        db.apply_wallet(position, before, rows).await?;
                    }
                    return Err(failed);
                }
            }
        }
        db.apply_wallet(position, last, rows).await?;
        applied += events.len() as u64;
        position = last;
    }
}
