//! Registering a rebuild and the lease that makes a full rebuild the only one: taking,
//! renewing (in every transaction a full rebuild writes), releasing it, the hold it sets
//! on the checkpoint, and the stored status.

use super::model::*;
use crate::infra::db::Db;
use crate::infra::store::DynStore;
use crate::runtime::projection::{lease_cutoff, now, RunnerError};
use factledger_projections::wallet::{self};

/// Register a rebuild of `projection`. A full rebuild first resolves a hold left by a
/// dead rebuild, then takes the lease (or reports who has it).
pub async fn begin(
    store: &DynStore,
    db: &Db,
    projection: &str,
    scope: Scope,
    requested_by: &str,
) -> Result<Rebuild, RebuildError> {
    if projection != wallet::NAME {
        return Err(RebuildError::UnknownProjection(projection.to_owned()));
    }
    db.checkpoint(wallet::NAME, wallet::VERSION).await?;
    let id = format!("rb_{}", uuid::Uuid::new_v4().simple());
    if scope == Scope::Full {
        resolve_stale_hold(db).await?;
        take_lease(db, &id).await?;
    }
    let target_position = store.head_position().await?;
    let started = now();
    let insert = "INSERT INTO projection_rebuilds (id, projection, scope, requested_by, status, \
                  stage, target_position, position, events_applied, started_at, updated_at) \
                  VALUES (?, ?, ?, ?, 'running', 'copying', ?, 0, 0, ?, ?)";
    macro_rules! register {
        ($p:expr) => {
            sqlx::query(insert)
                .bind(&id)
                .bind(wallet::NAME)
                .bind(scope.label())
                .bind(requested_by)
                .bind(target_position)
                .bind(&started)
                .bind(&started)
                .execute($p)
                .await?
                .rows_affected()
        };
    }
    match db {
        Db::Mysql(p) => register!(p),
        Db::Sqlite(p) => register!(p),
    };
    Ok(Rebuild {
        id,
        scope,
        target_position,
    })
}

pub(super) async fn take_lease(db: &Db, id: &str) -> Result<(), RebuildError> {
    let create = "INSERT INTO projection_leases (name, rebuild_id, heartbeat) \
                  SELECT ?, NULL, NULL WHERE NOT EXISTS \
                  (SELECT 1 FROM projection_leases WHERE name = ?)";
    let take = "UPDATE projection_leases SET rebuild_id = ?, heartbeat = ? \
                WHERE name = ? AND (rebuild_id IS NULL OR heartbeat < ?)";
    let holder = "SELECT rebuild_id FROM projection_leases WHERE name = ?";
    let abandon = "UPDATE projection_rebuilds SET status = 'failed', finished_at = ?, \
                   error = 'abandoned: its process stopped renewing the lease' \
                   WHERE projection = ? AND scope IS NULL AND status = 'running' AND id <> ?";
    macro_rules! take {
        ($p:expr, $holder:expr) => {{
            // A concurrent first use may insert the row first: then ours inserts nothing.
            let _ = sqlx::query(create)
                .bind(wallet::NAME)
                .bind(wallet::NAME)
                .execute($p)
                .await;
            let taken = sqlx::query(take)
                .bind(id)
                .bind(now())
                .bind(wallet::NAME)
                .bind(lease_cutoff())
                .execute($p)
                .await?
                .rows_affected();
            if taken != 1 {
                let row = sqlx::query(holder).bind(wallet::NAME).fetch_one($p).await?;
                // (Released again in between: the caller may simply retry.)
                let id: Option<String> = $holder(&row)?;
                return Err(RebuildError::AlreadyRunning {
                    projection: wallet::NAME.to_owned(),
                    id: id.unwrap_or_else(|| "(just finished)".to_owned()),
                });
            }
            sqlx::query(abandon)
                .bind(now())
                .bind(wallet::NAME)
                .bind(id)
                .execute($p)
                .await?;
        }};
    }
    use sqlx::Row;
    match db {
        Db::Mysql(p) => take!(p, |r: &sqlx::mysql::MySqlRow| {
            crate::infra::store::mysql::opt_text(r, 0)
        }),
        Db::Sqlite(p) => {
            take!(p, |r: &sqlx::sqlite::SqliteRow| r
                .try_get::<Option<String>, _>(0))
        }
    }
    Ok(())
}

pub(super) async fn release_lease(db: &Db, id: &str) -> Result<(), RebuildError> {
    let sql = "UPDATE projection_leases SET rebuild_id = NULL, heartbeat = NULL \
               WHERE name = ? AND rebuild_id = ?";
    match db {
        Db::Mysql(p) => {
            sqlx::query(sql)
                .bind(wallet::NAME)
                .bind(id)
                .execute(p)
                .await?;
        }
        Db::Sqlite(p) => {
            sqlx::query(sql)
                .bind(wallet::NAME)
                .bind(id)
                .execute(p)
                .await?;
        }
    };
    Ok(())
}

/// The stored state of a rebuild, if there is one with this id.
pub async fn status(db: &Db, id: &str) -> Result<Option<RebuildStatus>, RebuildError> {
    let sql = "SELECT id, projection, scope, requested_by, status, stage, target_position, \
               position, events_applied, started_at, updated_at, finished_at, error \
               FROM projection_rebuilds WHERE id = ?";
    use sqlx::Row;
    macro_rules! read {
        ($p:expr, $text:expr, $opt:expr) => {{
            let Some(r) = sqlx::query(sql).bind(id).fetch_optional($p).await? else {
                return Ok(None);
            };
            RebuildStatus {
                id: $text(&r, 0)?,
                projection: $text(&r, 1)?,
                scope: $opt(&r, 2)?,
                requested_by: $text(&r, 3)?,
                status: $text(&r, 4)?,
                stage: $text(&r, 5)?,
                target_position: r.try_get(6)?,
                position: r.try_get(7)?,
                events_applied: r.try_get(8)?,
                events_per_second: 0,
                started_at: $text(&r, 9)?,
                updated_at: $text(&r, 10)?,
                finished_at: $opt(&r, 11)?,
                error: $opt(&r, 12)?,
            }
        }};
    }
    let mut s = match db {
        Db::Mysql(p) => {
            read!(
                p,
                crate::infra::store::mysql::text,
                crate::infra::store::mysql::opt_text
            )
        }
        Db::Sqlite(p) => read!(
            p,
            |r: &sqlx::sqlite::SqliteRow, i: usize| r.try_get::<String, _>(i),
            |r: &sqlx::sqlite::SqliteRow, i: usize| r.try_get::<Option<String>, _>(i)
        ),
    };
    let parse = |t: &str| chrono::DateTime::parse_from_rfc3339(t).ok();
    if let (Some(a), Some(b)) = (parse(&s.started_at), parse(&s.updated_at)) {
        let ms = (b - a).num_milliseconds();
        if ms > 0 {
            s.events_per_second = s.events_applied.saturating_mul(1000) / ms;
        }
    }
    if s.status == "running" && s.updated_at < lease_cutoff() && s.scope.is_none() {
        s.status = "abandoned".into();
    }
    Ok(Some(s))
}

/// Renew the lease inside a transaction, or fail if another rebuild took it over.
macro_rules! renew {
    ($tx:ident, $id:expr) => {{
        let renewed = sqlx::query(
            "UPDATE projection_leases SET heartbeat = ? WHERE name = ? AND rebuild_id = ?",
        )
        .bind(now())
        .bind(wallet::NAME)
        .bind($id)
        .execute(&mut *$tx)
        .await?
        .rows_affected();
        if renewed != 1 {
            return Err(RebuildError::LeaseLost($id.to_owned()));
        }
    }};
}

/// Record a rebuild's progress (inside a batch's transaction).
macro_rules! record_progress {
    ($tx:ident, $id:expr, $stage:expr, $position:expr, $applied:expr) => {{
        sqlx::query(
            "UPDATE projection_rebuilds SET stage = ?, position = ?, events_applied = ?, \
             updated_at = ? WHERE id = ?",
        )
        .bind($stage)
        .bind($position)
        .bind($applied)
        .bind(now())
        .bind($id)
        .execute(&mut *$tx)
        .await?;
    }};
}

pub(crate) use {record_progress, renew};

/// Hold the checkpoint (`hold = 'catchup'`) while holding the lease: the runner
/// stops advancing the live tables.
pub(super) async fn set_hold(db: &Db, id: &str) -> Result<(), RebuildError> {
    let sql = "UPDATE projection_checkpoints SET hold = 'catchup', updated_at = ? \
               WHERE name = ? AND hold IS NULL";
    macro_rules! go {
        ($p:expr) => {{
            let mut tx = $p.begin().await?;
            renew!(tx, id);
            let n = sqlx::query(sql)
                .bind(now())
                .bind(wallet::NAME)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if n != 1 {
                return Err(RebuildError::Runner(RunnerError::Held(wallet::NAME)));
            }
            tx.commit().await?;
        }};
    }
    match db {
        Db::Mysql(p) => go!(p),
        Db::Sqlite(p) => go!(p),
    }
    Ok(())
}

/// [`crate::runtime::projection::resolve_stale_hold`], as rebuild's own API (called
/// before every full rebuild).
pub async fn resolve_stale_hold(db: &Db) -> Result<(), RebuildError> {
    Ok(crate::runtime::projection::resolve_stale_hold(db).await?)
}
