//! Running a registered rebuild, full or scoped, to its end, and recording the outcome.

use super::full::*;
use super::lease::*;
use super::model::*;
use super::scoped::*;
use crate::infra::db::Db;
use crate::infra::store::{DynStore, StoreError};
use crate::runtime::projection::{now, resolve_hold, RunnerError};

/// Run a registered rebuild to its end. On failure the rebuild is marked failed, its
/// hold (if any) resolved and its lease released; the live tables are as they were
/// (or, if the failure came after the swap, the rebuilt ones).
pub async fn run(
    store: &DynStore,
    db: &Db,
    rebuild: &Rebuild,
    options: &RebuildOptions,
    progress: &(dyn Fn(Progress) + Send + Sync),
) -> Result<RebuildStatus, RebuildError> {
    let outcome = match &rebuild.scope {
        Scope::Full => full(store, db, rebuild, options, progress).await,
        Scope::Wallet(wallet_id) => rebuild_wallet_scoped(store, db, wallet_id)
            .await
            .map(|applied| {
                progress(Progress {
                    stage: "done",
                    position: rebuild.target_position,
                    target_position: rebuild.target_position,
                    events_applied: applied as i64,
                });
                (rebuild.target_position, applied as i64)
            })
            .map_err(RebuildError::from),
    };
    match outcome {
        Ok((position, applied)) => {
            finish(db, &rebuild.id, "succeeded", position, applied, None).await?;
        }
        Err(e) => {
            if rebuild.scope == Scope::Full {
                // Resolve our own hold as a crash would be resolved; free the lease.
                let _ = resolve_hold(db, Some(&rebuild.id)).await;
                let _ = release_lease(db, &rebuild.id).await;
            }
            let _ = finish(db, &rebuild.id, "failed", -1, -1, Some(&e.to_string())).await;
            return Err(e);
        }
    }
    status(db, &rebuild.id).await?.ok_or_else(|| {
        RebuildError::Runner(RunnerError::Store(StoreError::Corrupt(format!(
            "rebuild {} vanished",
            rebuild.id
        ))))
    })
}

/// Mark a rebuild finished. `position`/`applied` of -1 keep the stored values.
pub(super) async fn finish(
    db: &Db,
    id: &str,
    status: &str,
    position: i64,
    applied: i64,
    error: Option<&str>,
) -> Result<(), RebuildError> {
    let sql = "UPDATE projection_rebuilds SET status = ?, \
               stage = CASE WHEN ? = 'succeeded' THEN 'done' ELSE stage END, \
               position = CASE WHEN ? < 0 THEN position ELSE ? END, \
               events_applied = CASE WHEN ? < 0 THEN events_applied ELSE ? END, \
               updated_at = ?, finished_at = ?, error = ? WHERE id = ?";
    let t = now();
    macro_rules! go {
        ($p:expr) => {
            sqlx::query(sql)
                .bind(status)
                .bind(status)
                .bind(position)
                .bind(position)
                .bind(applied)
                .bind(applied)
                .bind(&t)
                .bind(&t)
                .bind(error)
                .bind(id)
                .execute($p)
                .await?
                .rows_affected()
        };
    }
    match db {
        Db::Mysql(p) => go!(p),
        Db::Sqlite(p) => go!(p),
    };
    Ok(())
}
