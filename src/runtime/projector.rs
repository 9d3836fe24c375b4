//! The generic projection runner, for every projector but the wallet's (which keeps
//! its tuned writer and shadow-table rebuild in `projection.rs` / `rebuild.rs`). The
//! guarantees are the wallet runner's:
//!
//! - events are read in global order in batches of [`BATCH_EVENTS_MAX`];
//! - a batch's rows and the checkpoint are written in ONE transaction, the checkpoint
//!   moving by compare-and-set on its previous value (two runners never both apply a
//!   batch; a held checkpoint is refused);
//! - an event the projector cannot apply — its payload does not decode, or its row
//!   change does not fit the rows (an update of a missing row, a duplicate insert) —
//!   stops the runner right before it: the events before it in its batch are
//!   applied, nothing after; the continuous runner retries with backoff, reports the
//!   error on `GET /v1/projections` and `/metrics`, and raises a stall alert.
//!
//! Each projector runs in its own task with its own checkpoint, so one failing never
//! stops another (issue 3 item 1).

use crate::infra::db::Db;
use crate::infra::store::{time_text, DynStore, StoredEvent};
use crate::runtime::projection::{RunnerError, SharedStatus, StallAlerts};
use factledger_projections::table::{Cell, MemRow, Projector, RowChange, TableDef};
use factledger_projections::{ProjectedEvent, ProjectionError};
use std::sync::Arc;

/// Events read and applied per transaction (the wallet runner's batch).
pub const BATCH_EVENTS_MAX: i64 = crate::runtime::projection::BATCH_EVENTS_MAX;

/// A shared projector.
pub type DynProjector = Arc<dyn Projector>;

/// Every generic projector `serve` runs (the affiliate ones, withdrawals and paid
/// services).
pub fn all() -> Vec<DynProjector> {
    let mut all = factledger_projections::affiliate::all();
    all.extend(factledger_projections::withdrawals::all());
    all.extend(factledger_projections::services::all());
    all
}

/// The generic projector called `name`, if there is one.
pub fn find(name: &str) -> Option<DynProjector> {
    all().into_iter().find(|p| p.name() == name)
}

/// The row changes one stored event makes (its payload upcast first). A payload that
/// does not parse or upcast stops the projector at the event, like one that does not
/// decode.
pub fn project_event(
    projector: &dyn Projector,
    e: &StoredEvent,
) -> Result<Vec<RowChange>, ProjectionError> {
    if !projector
        .aggregate_types()
        .contains(&e.aggregate_type.as_str())
    {
        return Ok(Vec::new());
    }
    let (_, payload) = e.current_payload().map_err(|err| ProjectionError {
        projection: projector.name(),
        global_position: e.global_position,
        reason: err.to_string(),
    })?;
    let recorded_at = time_text(&e.recorded_at);
    projector.project(&ProjectedEvent {
        global_position: e.global_position,
        aggregate_type: &e.aggregate_type,
        aggregate_id: &e.aggregate_id,
        sequence: e.sequence,
        event_type: &e.event_type,
        payload: &payload,
        recorded_at: &recorded_at,
    })
}

/// Why writing one event's rows failed.
enum WriteError {
    /// The change does not fit the rows: the event stops the projector.
    Event {
        position: i64,
        reason: String,
    },
    Database(sqlx::Error),
}

impl From<sqlx::Error> for WriteError {
    fn from(e: sqlx::Error) -> Self {
        WriteError::Database(e)
    }
}

fn table<'a>(defs: &'a [TableDef], name: &str) -> Result<&'a TableDef, String> {
    defs.iter()
        .find(|d| d.name == name)
        .ok_or_else(|| format!("unknown table {name}"))
}

/// The SQL and the values of one change (the same SQL on both backends).
fn change_sql(
    defs: &[TableDef],
    change: &RowChange,
    suffix: &str,
) -> Result<(String, Vec<Cell>), String> {
    match change {
        RowChange::Insert { table: t, row } => {
            let def = table(defs, t)?;
            let mut values = Vec::with_capacity(def.columns.len());
            for c in def.columns {
                let v = row
                    .iter()
                    .find(|(n, _)| *n == c.name)
                    .ok_or_else(|| format!("{t}: column {} missing", c.name))?;
                values.push(v.1.clone());
            }
            let names: Vec<&str> = def.columns.iter().map(|c| c.name).collect();
            let marks = vec!["?"; names.len()].join(", ");
            Ok((
                format!(
                    "INSERT INTO {t}{suffix} ({}) VALUES ({marks})",
                    names.join(", ")
                ),
                values,
            ))
        }
        RowChange::Update { table: t, key, set } => {
            let def = table(defs, t)?;
            let mut sets = Vec::new();
            let mut values = Vec::new();
            for (n, v) in set {
                let c = def
                    .column(n)
                    .ok_or_else(|| format!("{t}: unknown column {n}"))?;
                sets.push(format!("{} = ?", c.name));
                values.push(v.clone());
            }
            let mut wheres = Vec::new();
            for k in def.key {
                let v = key
                    .iter()
                    .find(|(n, _)| n == k)
                    .ok_or_else(|| format!("{t}: key column {k} missing"))?;
                wheres.push(format!("{k} = ?"));
                values.push(v.1.clone());
            }
            Ok((
                format!(
                    "UPDATE {t}{suffix} SET {} WHERE {}",
                    sets.join(", "),
                    wheres.join(" AND ")
                ),
                values,
            ))
        }
    }
}

/// Write the changes of a batch, event by event, inside `$tx`. An update must find
/// its row (both backends count matched rows, not changed ones: sqlx asks MariaDB
/// for `CLIENT_FOUND_ROWS`).
macro_rules! write_changes {
    ($tx:ident, $defs:expr, $batch:expr, $suffix:expr) => {{
        for (position, changes) in $batch {
            for change in changes {
                let (sql, values) =
                    change_sql($defs, change, $suffix).map_err(|reason| WriteError::Event {
                        position: *position,
                        reason,
                    })?;
                let q = crate::infra::db::bind_cells!(sqlx::query(&sql), &values);
                match q.execute(&mut *$tx).await {
                    Ok(done) => {
                        if matches!(change, RowChange::Update { .. }) && done.rows_affected() != 1 {
                            return Err(WriteError::Event {
                                position: *position,
                                reason: format!("{sql}: no row to update"),
                            });
                        }
                    }
                    Err(sqlx::Error::Database(d)) if d.is_unique_violation() => {
                        return Err(WriteError::Event {
                            position: *position,
                            reason: format!("{sql}: the row exists already"),
                        });
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }};
}

/// Move a generic projector's checkpoint `from → to` by compare-and-set (no rebuild
/// may hold it), inside `$tx`.
macro_rules! advance {
    ($tx:ident, $name:expr, $from:expr, $to:expr) => {{
        let moved = sqlx::query(ADVANCE_SQL)
            .bind($to)
            .bind(time_text(&chrono::Utc::now()))
            .bind($name)
            .bind($from)
            .execute(&mut *$tx)
            .await?
            .rows_affected();
        moved == 1
    }};
}

/// The checkpoint compare-and-set of [`advance!`] and [`advance_in`].
const ADVANCE_SQL: &str = "UPDATE projection_checkpoints SET position = ?, updated_at = ?, \
     last_error = NULL, error_position = NULL \
     WHERE name = ? AND position = ? AND hold IS NULL";

/// [`advance!`] on a backend-neutral transaction: the bill projector's runner
/// (`crate::bill::projection`) moves its checkpoint the same way.
pub async fn advance_in(
    tx: &mut crate::infra::db::Tx,
    name: &str,
    from: i64,
    to: i64,
) -> Result<bool, sqlx::Error> {
    let now = Cell::Text(time_text(&chrono::Utc::now()));
    let args = [Cell::Int(to), now, Cell::text(name), Cell::Int(from)];
    Ok(tx.exec(ADVANCE_SQL, &args).await? == 1)
}

type Batch = Vec<(i64, Vec<RowChange>)>;

/// Write a batch of rows and move the checkpoint `from → to`, atomically.
async fn apply(
    db: &Db,
    projector: &dyn Projector,
    from: i64,
    to: i64,
    batch: &Batch,
) -> Result<(), RunnerError> {
    let name = projector.name();
    let defs = projector.tables();
    macro_rules! go {
        ($p:expr) => {{
            let mut tx = $p.begin().await?;
            if !advance!(tx, name, from, to) {
                return Err(RunnerError::CheckpointMoved(name));
            }
            let written: Result<(), WriteError> = async {
                write_changes!(tx, defs, batch, "");
                Ok(())
            }
            .await;
            match written {
                Ok(()) => tx.commit().await?,
                Err(WriteError::Database(e)) => return Err(e.into()),
                Err(WriteError::Event { position, reason }) => {
                    // Dropping the transaction rolls the batch back.
                    return Err(RunnerError::Projection(ProjectionError {
                        projection: name,
                        global_position: position,
                        reason,
                    }));
                }
            }
        }};
    }
    match db {
        Db::Mysql(p) => go!(p),
        Db::Sqlite(p) => go!(p),
    }
    Ok(())
}

/// Bring one projector up to the head of the log; returns how many events it read.
/// Stops at (and returns) the first event it cannot apply, with every event before
/// it applied and the checkpoint right before it.
pub async fn catch_up(
    store: &DynStore,
    db: &Db,
    projector: &dyn Projector,
) -> Result<u64, RunnerError> {
    let mut position = db.checkpoint(projector.name(), projector.version()).await?;
    let mut applied = 0u64;
    loop {
        let events = store.read_all(position, BATCH_EVENTS_MAX).await?;
        let Some(last) = events.last().map(|e| e.global_position) else {
            return Ok(applied);
        };
        let mut batch: Batch = Vec::new();
        let mut failed = None;
        for e in &events {
            match project_event(projector, e) {
                Ok(changes) if changes.is_empty() => {}
                Ok(changes) => batch.push((e.global_position, changes)),
                Err(err) => {
                    failed = Some(err);
                    break;
                }
            }
        }
        let outcome = match failed {
            None => apply(db, projector, position, last, &batch).await,
            Some(err) => Err(RunnerError::Projection(err)),
        };
        match outcome {
            Ok(()) => {
                applied += events.len() as u64;
                position = last;
            }
            Err(RunnerError::Projection(err)) => {
                // Apply what comes before the failing event, so the projector stops
                // exactly at it, then report it.
                let before = err.global_position - 1;
                if before > position {
                    batch.retain(|(p, _)| *p < err.global_position);
                    apply(db, projector, position, before, &batch).await?;
                }
                return Err(RunnerError::Projection(err));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Run one projector continuously in its own task: catch up, then poll; stop at a
/// failing event, report it and retry with backoff, alerting a stall.
pub fn spawn(
    store: DynStore,
    db: Db,
    projector: DynProjector,
    alerts: Option<StallAlerts>,
) -> SharedStatus {
    let (name, version) = (projector.name(), projector.version());
    let (s, d) = (store.clone(), db.clone());
    crate::runtime::projection::spawn_runner(store, db, name, version, alerts, false, move || {
        let (store, db, projector) = (s.clone(), d.clone(), projector.clone());
        async move { catch_up(&store, &db, projector.as_ref()).await }
    })
}

// ---------------------------------------------------------------------------------
// Reading rows back (reads, rebuild checks, reconciliation).

pub use crate::infra::db::select_sql;

/// Rows of a projection table, on the live pool.
pub async fn select_rows(
    db: &Db,
    def: &TableDef,
    tail: &str,
    args: &[Cell],
) -> Result<Vec<MemRow>, sqlx::Error> {
    db.rows(def, tail, args).await
}

/// Every row of every table of a projector, ordered by key: what a rebuild must
/// reproduce exactly.
pub async fn dump(
    db: &Db,
    projector: &dyn Projector,
) -> Result<Vec<(&'static str, Vec<MemRow>)>, sqlx::Error> {
    let mut out = Vec::new();
    for def in projector.tables() {
        let order = format!("ORDER BY {}", def.key.join(", "));
        out.push((def.name, select_rows(db, def, &order, &[]).await?));
    }
    Ok(out)
}

/// Wait (bounded by [`crate::runtime::projection::MIN_POSITION_WAIT_MS_MAX`]) until the
/// projector has applied `min_position`; returns the position it reflects.
pub async fn wait_for(
    db: &Db,
    projector: &dyn Projector,
    min_position: i64,
) -> Result<i64, RunnerError> {
    wait_for_checkpoint(db, projector.name(), projector.version(), min_position).await
}

/// [`wait_for`] by checkpoint name and version: for the runners that are not a
/// [`Projector`] (the bill projector, the bill order-status follower).
pub async fn wait_for_checkpoint(
    db: &Db,
    name: &str,
    version: i32,
    min_position: i64,
) -> Result<i64, RunnerError> {
    let deadline = std::time::Instant::now()
        + std::time::Duration::from_millis(crate::runtime::projection::MIN_POSITION_WAIT_MS_MAX);
    loop {
        let position = db.checkpoint(name, version).await?;
        if position >= min_position || std::time::Instant::now() >= deadline {
            return Ok(position);
        }
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
}

// ---------------------------------------------------------------------------------
// Full rebuild.

/// What a full rebuild did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RebuildOutcome {
    pub projection: &'static str,
    /// Events read from position 0.
    pub events_read: u64,
    /// The checkpoint the rebuilt rows reflect.
    pub position: i64,
}

/// Rebuild a generic projector from position 0 in ONE transaction: lock its
/// checkpoint row, empty its tables, replay every event through the pure fold, set
/// the checkpoint to the last event replayed, commit. Readers see the old rows until
/// the commit and the new ones after — never a partial projection; the runner's
/// compare-and-set waits on the locked row and then finds the checkpoint moved.
///
/// The price: the transaction is as long as the log. On MariaDB that is undo space
/// and a long row lock on one checkpoint; on SQLite it holds the database's write
/// lock, so appends wait for it. The wallet's shadow-table swap (`src/rebuild.rs`)
/// avoids both and is the way to go when these tables grow.
pub async fn rebuild_full(
    store: &DynStore,
    db: &Db,
    projector: &dyn Projector,
) -> Result<RebuildOutcome, RunnerError> {
    let name = projector.name();
    let defs = projector.tables();
    db.checkpoint(name, projector.version()).await?;
    macro_rules! go {
        ($p:expr) => {{
            let mut tx = $p.begin().await?;
            let locked = sqlx::query(
                "UPDATE projection_checkpoints SET updated_at = ? WHERE name = ? AND hold IS NULL",
            )
            .bind(time_text(&chrono::Utc::now()))
            .bind(name)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if locked != 1 {
                return Err(RunnerError::Held(name));
            }
            for def in defs {
                sqlx::query(&format!("DELETE FROM {}", def.name))
                    .execute(&mut *tx)
                    .await?;
            }
            let (mut position, mut read) = (0i64, 0u64);
            loop {
                let events = store.read_all(position, BATCH_EVENTS_MAX).await?;
                let Some(last) = events.last().map(|e| e.global_position) else {
                    break;
                };
                let mut batch: Batch = Vec::new();
                for e in &events {
                    let changes = project_event(projector, e)?;
                    if !changes.is_empty() {
                        batch.push((e.global_position, changes));
                    }
                }
                let written: Result<(), WriteError> = async {
                    write_changes!(tx, defs, &batch, "");
                    Ok(())
                }
                .await;
                match written {
                    Ok(()) => {}
                    Err(WriteError::Database(e)) => return Err(e.into()),
                    Err(WriteError::Event { position, reason }) => {
                        return Err(RunnerError::Projection(ProjectionError {
                            projection: name,
                            global_position: position,
                            reason,
                        }))
                    }
                }
                read += events.len() as u64;
                position = last;
            }
            sqlx::query(
                "UPDATE projection_checkpoints SET position = ?, updated_at = ?, \
                 last_error = NULL, error_position = NULL WHERE name = ?",
            )
            .bind(position)
            .bind(time_text(&chrono::Utc::now()))
            .bind(name)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            (read, position)
        }};
    }
    let (events_read, position) = match db {
        Db::Mysql(p) => go!(p),
        Db::Sqlite(p) => go!(p),
    };
    tracing::info!(
        projection = name,
        events_read,
        position,
        "full rebuild done"
    );
    Ok(RebuildOutcome {
        projection: name,
        events_read,
        position,
    })
}
