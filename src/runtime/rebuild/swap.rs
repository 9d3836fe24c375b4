//! The swap: the shadow tables take the live ones' place and the checkpoint adopts
//! their generation and position (one transaction on SQLite; one `RENAME TABLE`,
//! retried briefly while readers hold the tables, on MariaDB).

use super::lease::*;
use super::model::*;
use crate::infra::db::Db;
use crate::infra::store::StoreError;
use crate::runtime::projection::{now, RunnerError, ADOPT_LIVE_SET, OLD, WALLET_TABLES};
use factledger_projections::wallet::{self};
use std::time::Duration;

/// Put the shadow tables in place of the live ones, and the checkpoint at `position`.
pub(super) async fn swap(db: &Db, id: &str, position: i64) -> Result<(), RebuildError> {
    let generation_sql = "SELECT generation FROM projection_checkpoints WHERE name = ?";
    let mark = format!(
        "INSERT INTO wallet_generation{SHADOW} (id, generation, position) VALUES (1, ?, ?)"
    );
    let new_generation = match db {
        Db::Sqlite(p) => {
            let mut tx = p.begin_with("BEGIN IMMEDIATE").await?;
            renew!(tx, id);
            let generation: i64 = sqlx::query_scalar(generation_sql)
                .bind(wallet::NAME)
                .fetch_one(&mut *tx)
                .await?;
            sqlx::query(&mark)
                .bind(generation + 1)
                .bind(position)
                .execute(&mut *tx)
                .await?;
            for t in WALLET_TABLES {
                let indexes: Vec<String> = sqlx::query_scalar(
                    "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? \
                     AND sql IS NOT NULL",
                )
                .bind(t)
                .fetch_all(&mut *tx)
                .await?;
                sqlx::query(&format!("DROP TABLE {t}"))
                    .execute(&mut *tx)
                    .await?;
                sqlx::query(&format!("ALTER TABLE {t}{SHADOW} RENAME TO {t}"))
                    .execute(&mut *tx)
                    .await?;
                for ddl in indexes {
                    sqlx::query(&ddl).execute(&mut *tx).await?;
                }
            }
            sqlx::query(ADOPT_LIVE_SET)
                .bind(wallet::VERSION)
                .bind(now())
                .bind(wallet::NAME)
                .execute(&mut *tx)
                .await?;
            sqlx::query(
                "UPDATE projection_leases SET rebuild_id = NULL, heartbeat = NULL \
                 WHERE name = ? AND rebuild_id = ?",
            )
            .bind(wallet::NAME)
            .bind(id)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            generation + 1
        }
        Db::Mysql(p) => {
            let generation: i64 = sqlx::query_scalar(generation_sql)
                .bind(wallet::NAME)
                .fetch_one(p)
                .await?;
            sqlx::query(&mark)
                .bind(generation + 1)
                .bind(position)
                .execute(p)
                .await?;
            for t in WALLET_TABLES {
                sqlx::query(&format!("DROP TABLE IF EXISTS {t}{OLD}"))
                    .execute(p)
                    .await?;
            }
            let renames = WALLET_TABLES
                .iter()
                .map(|t| format!("{t} TO {t}{OLD}, {t}{SHADOW} TO {t}"))
                .collect::<Vec<_>>()
                .join(", ");
            rename_waiting_briefly(db, id, &format!("RENAME TABLE {renames}")).await?;
            // Adopt (or find that the runner's resolver already adopted) the new set.
            sqlx::query(ADOPT_LIVE_SET)
                .bind(wallet::VERSION)
                .bind(now())
                .bind(wallet::NAME)
                .execute(p)
                .await?;
            release_lease(db, id).await?;
            for t in WALLET_TABLES {
                sqlx::query(&format!("DROP TABLE IF EXISTS {t}{OLD}"))
                    .execute(p)
                    .await?;
            }
            generation + 1
        }
    };
    // The runner may already have moved on from `position`: never back, and only
    // within the new generation.
    let (now_generation, now_position): (i64, i64) = match db {
        Db::Mysql(p) => {
            sqlx::query_as(CHECKPOINT_SQL)
                .bind(wallet::NAME)
                .fetch_one(p)
                .await?
        }
        Db::Sqlite(p) => {
            sqlx::query_as(CHECKPOINT_SQL)
                .bind(wallet::NAME)
                .fetch_one(p)
                .await?
        }
    };
    if now_generation != new_generation || now_position < position {
        return Err(RebuildError::Runner(RunnerError::Store(
            StoreError::Corrupt(format!(
                "after the swap the checkpoint is at generation {now_generation}, position \
                 {now_position}, not at generation {new_generation}, position {position} \
                 or later"
            )),
        )));
    }
    Ok(())
}

pub(super) const CHECKPOINT_SQL: &str =
    "SELECT generation, position FROM projection_checkpoints WHERE name = ?";

/// How long one `RENAME TABLE` attempt may wait for the tables' metadata locks.
pub(super) const RENAME_LOCK_WAIT_S: u32 = 2;
/// Attempts before the swap gives up (and the rebuild fails, live tables kept).
pub(super) const RENAME_ATTEMPTS_MAX: u32 = 30;

/// Run the swap's `RENAME TABLE`, waiting at most [`RENAME_LOCK_WAIT_S`] per attempt
/// for the metadata locks of transactions that read the live tables (a long
/// reconciliation snapshot): reads of those tables queue behind a waiting rename, so
/// it must not wait long; it retries instead.
pub(super) async fn rename_waiting_briefly(
    db: &Db,
    id: &str,
    rename: &str,
) -> Result<(), RebuildError> {
    let Db::Mysql(p) = db else {
        return Ok(());
    };
    let mut conn = p.acquire().await?;
    sqlx::query(&format!(
        "SET SESSION lock_wait_timeout = {RENAME_LOCK_WAIT_S}"
    ))
    .execute(&mut *conn)
    .await?;
    let mut attempt = 1;
    let outcome = loop {
        // Keep the lease (and so the hold) alive while waiting for readers.
        let mut tx = p.begin().await?;
        renew!(tx, id);
        tx.commit().await?;
        match sqlx::query(rename).execute(&mut *conn).await {
            Ok(_) => break Ok(()),
            // ER_LOCK_WAIT_TIMEOUT: someone still reads the old tables.
            Err(sqlx::Error::Database(e))
                if e.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                    .is_some_and(|m| m.number() == 1205)
                    && attempt < RENAME_ATTEMPTS_MAX =>
            {
                tracing::warn!(attempt, "the swap waits for readers of the live tables");
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => break Err(e.into()),
        }
    };
    let reset = sqlx::query("SET SESSION lock_wait_timeout = DEFAULT")
        .execute(&mut *conn)
        .await;
    if reset.is_err() {
        // Never hand a connection with a 2-second lock wait back to the pool.
        let _ = conn.detach();
    }
    outcome
}
