//! The runner's error, and the SQL every writer of the wallet projection shares: one
//! transaction per batch, the checkpoint's compare-and-set, and the row writes (live
//! tables or a rebuild's shadow tables).

use crate::infra::store::StoreError;
use factledger_projections::ProjectionError;

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
    /// Another runner advanced the checkpoint first, or a rebuild holds it while it
    /// swaps tables; nothing of this batch was written.
    #[error("checkpoint of {0} moved under this runner (or a rebuild holds it)")]
    CheckpointMoved(&'static str),
    /// A full rebuild is swapping the projection's tables; retry in a moment.
    #[error("projection {0} is held by a full rebuild swapping its tables; retry shortly")]
    Held(&'static str),
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

/// Move a checkpoint `from → to` by compare-and-set, or fail with
/// `CheckpointMoved`: another runner got there first, a rebuild holds it, or the
/// live tables were swapped for a set of another generation (see `src/rebuild.rs`).
macro_rules! advance_checkpoint {
    ($tx:ident, $name:expr, $from:expr, $to:expr) => {{
        let moved = sqlx::query(
            "UPDATE projection_checkpoints SET position = ?, updated_at = ?, \
             last_error = NULL, error_position = NULL \
             WHERE name = ? AND position = ? AND hold IS NULL \
             AND generation = (SELECT generation FROM wallet_generation WHERE id = 1)",
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
    }};
}

/// Write wallet rows, in order, into the live tables (`$suffix` "") or the shadow tables
/// of a rebuild.
macro_rules! write_wallet_rows {
    ($tx:ident, $rows:expr, $suffix:expr) => {{
        for row in $rows {
            match row {
                WalletRow::Opened {
                    wallet_id,
                    user_id,
                    currency,
                    version,
                    last_position,
                } => {
                    sqlx::query(&format!(
                        "INSERT INTO wallet_balances{suffix} (wallet_id, user_id, currency, \
                         pending_minor, available_minor, frozen_minor, risk_hold_minor, \
                         version, last_position) VALUES (?, ?, ?, 0, 0, 0, 0, ?, ?)",
                        suffix = $suffix
                    ))
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
                    sqlx::query(&format!(
                        "UPDATE wallet_balances{suffix} SET pending_minor = ?, available_minor = ?, \
                         frozen_minor = ?, risk_hold_minor = ?, version = ?, last_position = ? \
                         WHERE wallet_id = ?",
                        suffix = $suffix
                    ))
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
                    sqlx::query(&format!(
                        "UPDATE wallet_balances{suffix} SET version = ?, last_position = ? \
                         WHERE wallet_id = ?",
                        suffix = $suffix
                    ))
                    .bind(version)
                    .bind(last_position)
                    .bind(wallet_id)
                    .execute(&mut *$tx)
                    .await?;
                }
                WalletRow::Blocked {
                    wallet_id,
                    ref_type,
                    ref_id,
                    reason,
                } => {
                    sqlx::query(&format!(
                        "INSERT INTO wallet_blocks{suffix} (wallet_id, ref_type, ref_id, reason) \
                         VALUES (?, ?, ?, ?)",
                        suffix = $suffix
                    ))
                    .bind(wallet_id)
                    .bind(ref_type)
                    .bind(ref_id)
                    .bind(reason)
                    .execute(&mut *$tx)
                    .await?;
                }
                WalletRow::Unblocked {
                    wallet_id,
                    ref_type,
                    ref_id,
                } => {
                    sqlx::query(&format!(
                        "DELETE FROM wallet_blocks{suffix} WHERE wallet_id = ? AND ref_type = ? \
                         AND ref_id = ?",
                        suffix = $suffix
                    ))
                    .bind(wallet_id)
                    .bind(ref_type)
                    .bind(ref_id)
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
                    sqlx::query(&format!(
                        "INSERT INTO wallet_ledger{suffix} (wallet_id, sequence, global_position, \
                         ref_type, ref_id, entry_type, amount_minor, delta_pending_minor, \
                         delta_available_minor, delta_frozen_minor, delta_risk_hold_minor, \
                         before_pending_minor, before_available_minor, before_frozen_minor, \
                         before_risk_hold_minor, after_pending_minor, after_available_minor, \
                         after_frozen_minor, after_risk_hold_minor, recorded_at) \
                         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        suffix = $suffix
                    ))
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

pub(crate) use {advance_checkpoint, with_tx, write_wallet_rows};
