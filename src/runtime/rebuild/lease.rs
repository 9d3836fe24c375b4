//! Registering a rebuild and the lease that makes a full rebuild the only one: taking,
//! renewing (in every transaction a full rebuild writes), releasing it, the hold it sets
//! on the checkpoint, and the stored status.

use super::model::*;
use crate::infra::db::{Db, Get, Tx};
use crate::infra::store::DynStore;
use crate::runtime::projection::{lease_cutoff, now, RunnerError};
use factledger_projections::table::{Cell, ColType, Column, TableDef};
use factledger_projections::wallet::{self};

/// Does [`begin`] rebuild `projection` (the wallet projection, full or one wallet)?
pub fn rebuildable(projection: &str) -> bool {
    projection == wallet::NAME
}

/// Register a rebuild of `projection`. A full rebuild first resolves a hold left by a
/// dead rebuild, then takes the lease (or reports who has it).
pub async fn begin(
    store: &DynStore,
    db: &Db,
    projection: &str,
    scope: Scope,
    requested_by: &str,
) -> Result<Rebuild, RebuildError> {
    if !rebuildable(projection) {
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
    let args = [
        Cell::text(&id),
        Cell::text(wallet::NAME),
        Cell::opt_text(scope.label()),
        Cell::text(requested_by),
        Cell::Int(target_position),
        Cell::text(&started),
        Cell::text(&started),
    ];
    db.exec(insert, &args).await?;
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
    let name = Cell::text(wallet::NAME);
    // A concurrent first use may insert the row first: then ours inserts nothing.
    let _ = db.exec(create, &[name.clone(), name.clone()]).await;
    let take_args = [
        Cell::text(id),
        Cell::text(now()),
        name.clone(),
        Cell::text(lease_cutoff()),
    ];
    if db.exec(take, &take_args).await? != 1 {
        const HOLDER: &[Column] = &[Column {
            name: "rebuild_id",
            ty: ColType::OptText,
        }];
        let row = db
            .fetch_optional(holder, std::slice::from_ref(&name), HOLDER)
            .await?;
        // (Released again in between: the caller may simply retry.)
        let id = match row {
            Some(r) => r.opt_text("rebuild_id")?,
            None => None,
        };
        return Err(RebuildError::AlreadyRunning {
            projection: wallet::NAME.to_owned(),
            id: id.unwrap_or_else(|| "(just finished)".to_owned()),
        });
    }
    db.exec(abandon, &[Cell::text(now()), name, Cell::text(id)])
        .await?;
    Ok(())
}

pub(super) async fn release_lease(db: &Db, id: &str) -> Result<(), RebuildError> {
    let sql = "UPDATE projection_leases SET rebuild_id = NULL, heartbeat = NULL \
               WHERE name = ? AND rebuild_id = ?";
    db.exec(sql, &[Cell::text(wallet::NAME), Cell::text(id)])
        .await?;
    Ok(())
}

/// The stored state of a rebuild, if there is one with this id.
pub async fn status(db: &Db, id: &str) -> Result<Option<RebuildStatus>, RebuildError> {
    let Some(r) = db
        .rows(&REBUILDS, "WHERE id = ?", &[Cell::text(id)])
        .await?
        .pop()
    else {
        return Ok(None);
    };
    let mut s = RebuildStatus {
        id: r.text("id")?,
        projection: r.text("projection")?,
        scope: r.opt_text("scope")?,
        requested_by: r.text("requested_by")?,
        status: r.text("status")?,
        stage: r.text("stage")?,
        target_position: r.int("target_position")?,
        position: r.int("position")?,
        events_applied: r.int("events_applied")?,
        events_per_second: 0,
        started_at: r.text("started_at")?,
        updated_at: r.text("updated_at")?,
        finished_at: r.opt_text("finished_at")?,
        error: r.opt_text("error")?,
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

/// Renew the lease: the heartbeat of the lease row this rebuild holds.
pub(crate) const RENEW_SQL: &str =
    "UPDATE projection_leases SET heartbeat = ? WHERE name = ? AND rebuild_id = ?";

/// Renew the lease inside a transaction, or fail if another rebuild took it over.
macro_rules! renew {
    ($tx:ident, $id:expr) => {{
        let renewed = sqlx::query($crate::runtime::rebuild::lease::RENEW_SQL)
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

/// [`renew!`] on a backend-neutral transaction.
async fn renew_in(tx: &mut Tx, id: &str) -> Result<(), RebuildError> {
    let args = [Cell::text(now()), Cell::text(wallet::NAME), Cell::text(id)];
    if tx.exec(RENEW_SQL, &args).await? != 1 {
        return Err(RebuildError::LeaseLost(id.to_owned()));
    }
    Ok(())
}

/// The columns of `projection_rebuilds` a status reads, in order.
const REBUILDS: TableDef = TableDef {
    name: "projection_rebuilds",
    key: &["id"],
    columns: &[
        Column {
            name: "id",
            ty: ColType::Text,
        },
        Column {
            name: "projection",
            ty: ColType::Text,
        },
        Column {
            name: "scope",
            ty: ColType::OptText,
        },
        Column {
            name: "requested_by",
            ty: ColType::Text,
        },
        Column {
            name: "status",
            ty: ColType::Text,
        },
        Column {
            name: "stage",
            ty: ColType::Text,
        },
        Column {
            name: "target_position",
            ty: ColType::Int,
        },
        Column {
            name: "position",
            ty: ColType::Int,
        },
        Column {
            name: "events_applied",
            ty: ColType::Int,
        },
        Column {
            name: "started_at",
            ty: ColType::Text,
        },
        Column {
            name: "updated_at",
            ty: ColType::Text,
        },
        Column {
            name: "finished_at",
            ty: ColType::OptText,
        },
        Column {
            name: "error",
            ty: ColType::OptText,
        },
    ],
};

/// Hold the checkpoint (`hold = 'catchup'`) while holding the lease: the runner
/// stops advancing the live tables.
pub(super) async fn set_hold(db: &Db, id: &str) -> Result<(), RebuildError> {
    let sql = "UPDATE projection_checkpoints SET hold = 'catchup', updated_at = ? \
               WHERE name = ? AND hold IS NULL";
    let mut tx = Tx::begin(db).await?;
    renew_in(&mut tx, id).await?;
    if tx
        .exec(sql, &[Cell::text(now()), Cell::text(wallet::NAME)])
        .await?
        != 1
    {
        return Err(RebuildError::Runner(RunnerError::Held(wallet::NAME)));
    }
    tx.commit().await?;
    Ok(())
}

/// [`crate::runtime::projection::resolve_stale_hold`], as rebuild's own API (called
/// before every full rebuild).
pub async fn resolve_stale_hold(db: &Db) -> Result<(), RebuildError> {
    Ok(crate::runtime::projection::resolve_stale_hold(db).await?)
}
