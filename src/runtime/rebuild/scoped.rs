//! Scoped rebuild (`wallet:<id>`): one wallet's rows recomputed in the live tables
//! from its stream, in one transaction that holds the checkpoint row.

use crate::infra::db::Db;
use crate::infra::store::{DynStore, READ_LIMIT_MAX};
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
            let (rows, replayed) = wallet_rows_up_to(store, wallet_id, position).await?;
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
    Ok(match db {
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
    })
}

/// The rows a wallet's events up to `position` make, and how many events that was.
pub(super) async fn wallet_rows_up_to(
    store: &DynStore,
    wallet_id: &str,
    position: i64,
) -> Result<(Vec<WalletRow>, u64), RunnerError> {
    let mut rows = Vec::new();
    let mut replayed = 0u64;
    let mut next = 1;
    'read: loop {
        let page = store
            .read_stream(
                factledger_aggregates::wallet::WALLET_AGGREGATE_TYPE,
                wallet_id,
                next,
                READ_LIMIT_MAX,
            )
            .await?;
        if page.is_empty() {
            break;
        }
        for e in &page {
            if e.global_position > position {
                break 'read;
            }
            rows.extend(project_wallet_event(e)?);
            replayed += 1;
            next = e.sequence + 1;
        }
    }
    Ok((rows, replayed))
}
