//! The checkpoint's hold and the leases around it, below both the runner and rebuild:
//! a full rebuild holds the wallet checkpoint while it swaps tables, and whoever finds
//! a hold (or a swapped-in set) left by a rebuild that stopped resolves it here: the
//! runner, every full rebuild, and a rebuild releasing its own. Also the heartbeat
//! constants of reconciliation runs, which a full rebuild waits for before it swaps.

use super::write::RunnerError;
use crate::infra::db::Db;
use crate::infra::store::time_text;
use factledger_projections::wallet;

/// The tables holding the wallet projection's rows.
pub const WALLET_ROW_TABLES: [&str; 3] = ["wallet_balances", "wallet_ledger", "wallet_blocks"];
/// The tables swapped together: the rows and the set's own generation and position.
pub const WALLET_TABLES: [&str; 4] = [
    "wallet_balances",
    "wallet_ledger",
    "wallet_blocks",
    "wallet_generation",
];
/// A rebuild that has not renewed its lease for this long may be taken over.
pub const LEASE_MS: i64 = 5_000;

/// A running run renews its heartbeat this often...
pub const RUN_HEARTBEAT_MS: u64 = 1_000;
/// ...and is reported `abandoned` when its heartbeat is older than this.
pub const RUN_HEARTBEAT_TIMEOUT_MS: i64 = 10_000;

/// Suffix of the live tables a MariaDB swap renamed away, dropped after it.
pub(crate) const OLD: &str = "__old";

pub(crate) fn now() -> String {
    time_text(&chrono::Utc::now())
}

pub(crate) fn lease_cutoff() -> String {
    crate::infra::store::time_text_ago(LEASE_MS)
}

/// Make the checkpoint describe the live set: its generation and position (the
/// set's own, from `wallet_generation`), releasing any hold. A no-op when they agree.
pub(crate) const ADOPT_LIVE_SET: &str = "UPDATE projection_checkpoints SET \
     position = (SELECT position FROM wallet_generation WHERE id = 1), \
     generation = (SELECT generation FROM wallet_generation WHERE id = 1), \
     version = ?, hold = NULL, updated_at = ?, last_error = NULL, error_position = NULL \
     WHERE name = ? AND generation <> (SELECT generation FROM wallet_generation WHERE id = 1)";

/// Make the checkpoint describe the live tables again after a rebuild stopped: adopt
/// the live set's generation and position if a rename happened (always safe: the
/// set's own position is the truth about its rows), and clear a hold whose lease
/// expired. Called by the runner when its checkpoint does not move, and before a full
/// rebuild starts.
pub async fn resolve_stale_hold(db: &Db) -> Result<(), RunnerError> {
    resolve_hold(db, None).await
}

/// As [`resolve_stale_hold`]; with `own`, clear the hold of that rebuild whatever its
/// lease.
pub(crate) async fn resolve_hold(db: &Db, own: Option<&str>) -> Result<(), RunnerError> {
    use sqlx::Row;
    let t = now();
    let adopted = match db {
        Db::Mysql(p) => sqlx::query(ADOPT_LIVE_SET)
            .bind(wallet::VERSION)
            .bind(&t)
            .bind(wallet::NAME)
            .execute(p)
            .await?
            .rows_affected(),
        Db::Sqlite(p) => sqlx::query(ADOPT_LIVE_SET)
            .bind(wallet::VERSION)
            .bind(&t)
            .bind(wallet::NAME)
            .execute(p)
            .await?
            .rows_affected(),
    };
    if adopted > 0 {
        tracing::warn!(
            projection = wallet::NAME,
            "the checkpoint adopted the position of tables swapped in by a rebuild"
        );
    }
    let sql = "SELECT c.hold, l.rebuild_id, l.heartbeat FROM projection_checkpoints c \
               LEFT JOIN projection_leases l ON l.name = c.name WHERE c.name = ?";
    use crate::infra::store::mysql::opt_text;
    let (hold, holder, heartbeat) = match db {
        Db::Mysql(p) => {
            let Some(r) = sqlx::query(sql)
                .bind(wallet::NAME)
                .fetch_optional(p)
                .await?
            else {
                return Ok(());
            };
            (opt_text(&r, 0)?, opt_text(&r, 1)?, opt_text(&r, 2)?)
        }
        Db::Sqlite(p) => {
            let Some(r) = sqlx::query(sql)
                .bind(wallet::NAME)
                .fetch_optional(p)
                .await?
            else {
                return Ok(());
            };
            (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)
        }
    };
    let Some(hold) = hold else {
        return Ok(());
    };
    match own {
        Some(id) if holder.as_deref() != Some(id) => return Ok(()),
        None if heartbeat.is_some_and(|h| h >= lease_cutoff()) => return Ok(()),
        _ => {}
    }
    macro_rules! go {
        ($p:expr) => {{
            // No rename happened (or it was adopted above): the live tables are true to
            // the checkpoint; release them to the runner.
            sqlx::query(
                "UPDATE projection_checkpoints SET hold = NULL, updated_at = ? \
                 WHERE name = ? AND hold = ?",
            )
            .bind(&t)
            .bind(wallet::NAME)
            .bind(&hold)
            .execute($p)
            .await?;
            if let Some(holder) = &holder {
                sqlx::query(
                    "UPDATE projection_leases SET rebuild_id = NULL, heartbeat = NULL \
                     WHERE name = ? AND rebuild_id = ?",
                )
                .bind(wallet::NAME)
                .bind(holder)
                .execute($p)
                .await?;
            }
        }};
    }
    tracing::warn!(projection = wallet::NAME, hold = %hold, holder = ?holder,
        "released the hold of a rebuild that stopped");
    match db {
        Db::Mysql(p) => {
            go!(p);
            for table in WALLET_TABLES {
                sqlx::query(&format!("DROP TABLE IF EXISTS {table}{OLD}"))
                    .execute(p)
                    .await?;
            }
        }
        Db::Sqlite(p) => go!(p),
    }
    Ok(())
}
