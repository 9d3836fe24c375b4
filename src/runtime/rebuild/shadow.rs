//! Writing a full rebuild's batches into the shadow tables: rows coalesced per batch,
//! one multi-row script on MariaDB, a statement per row on SQLite.

use super::lease::*;
use super::model::*;
use crate::infra::db::Db;
use crate::runtime::projection::coalesce::{upsert_balance_sqlite, write_rows_mysql, Coalesced};
use crate::runtime::projection::{now, write_wallet_rows};
use factledger_projections::wallet::{self, LedgerRow, WalletRow};

/// The row changes of a run of events.
#[derive(Debug, Default)]
pub(super) struct ShadowBatch {
    pub(super) events: i64,
    pub(super) last_position: i64,
    pub(super) rows: Vec<WalletRow>,
}

/// Write one batch into the shadow tables, renewing the lease, in one transaction.
pub(super) async fn write_shadow(
    db: &Db,
    id: &str,
    stage: &str,
    b: &ShadowBatch,
    applied: i64,
) -> Result<(), RebuildError> {
    match db {
        Db::Mysql(p) => {
            let mut tx = p.begin().await?;
            renew!(tx, id);
            record_progress!(tx, id, stage, b.last_position, applied);
            write_rows_mysql(&mut tx, &b.rows, SHADOW).await?;
            tx.commit().await?;
        }
        Db::Sqlite(p) => {
            let mut tx = p.begin_with("BEGIN IMMEDIATE").await?;
            renew!(tx, id);
            record_progress!(tx, id, stage, b.last_position, applied);
            // In-process, a statement per row costs no round trip; but a balance row
            // is written once per batch (its last state), not once per movement.
            let coalesced = Coalesced::of(&b.rows);
            for (wallet_id, ch) in &coalesced.balances {
                upsert_balance_sqlite(&mut tx, wallet_id, ch, SHADOW).await?;
            }
            let others = b.rows.iter().filter(|r| {
                !matches!(
                    r,
                    WalletRow::Opened { .. }
                        | WalletRow::Balances { .. }
                        | WalletRow::Version { .. }
                )
            });
            write_wallet_rows!(tx, others, SHADOW);
            tx.commit().await?;
        }
    }
    Ok(())
}
