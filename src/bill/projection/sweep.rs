//! The sweep after a bulk catch-up (migrations/*/0017): a cursor over every
//! station-month, recomputed SWEEP_CHUNK per transaction, and what reads ask of it
//! (`sweep_pending`).

#[allow(unused_imports)]
use super::*;
use crate::infra::db::{Db, Tx};
use crate::infra::store::time_text;
use crate::runtime::projection::RunnerError;
use factledger_projections::bill::fold::{self, VERSION};
use factledger_projections::bill::tables::{DIFFS, SMALL_BILLS};
use factledger_projections::bill::StationMonth;
use factledger_projections::table::{Cell, ColType, Column};
use facts::*;
use std::collections::BTreeSet;

// ---------------------------------------------------------------------------------
// The sweep after a bulk catch-up (migrations/*/0017).

pub(super) const SWEEP_COLUMNS: &[Column] = &[
    Column {
        name: "last_station_id",
        ty: ColType::OptInt,
    },
    Column {
        name: "last_month",
        ty: ColType::OptText,
    },
];

/// Leave the sweep pending from the first station-month on (inside the bulk batch's
/// transaction: its facts are folded, nothing recomputed yet).
pub(super) async fn mark_sweep(tx: &mut Tx, position: i64) -> Result<(), sqlx::Error> {
    tx.exec(
        "DELETE FROM bill_projection_sweep WHERE name = ?",
        &[Cell::text(NAME)],
    )
    .await?;
    tx.exec(
        "INSERT INTO bill_projection_sweep \
         (name, last_station_id, last_month, marked_position, updated_at) \
         VALUES (?, NULL, NULL, ?, ?)",
        &[
            Cell::text(NAME),
            Cell::Int(position),
            Cell::Text(time_text(&chrono::Utc::now())),
        ],
    )
    .await?;
    Ok(())
}

/// The pending sweep's cursor: `None` without a sweep, `Some(None)` before its first
/// chunk, `Some(Some(sm))` after `sm`.
pub(super) async fn sweep_cursor(tx: &mut Tx) -> Result<Option<Option<StationMonth>>, RunnerError> {
    let rows = tx
        .fetch(
            "SELECT last_station_id, last_month FROM bill_projection_sweep WHERE name = ?",
            &[Cell::text(NAME)],
            SWEEP_COLUMNS,
        )
        .await?;
    let Some(row) = rows.first() else {
        return Ok(None);
    };
    let cursor = match (row.get("last_station_id"), row.get("last_month")) {
        (Some(Cell::Int(station_id)), Some(Cell::Text(_))) => Some(StationMonth {
            station_id: *station_id,
            month: fold::month_of(row, "last_month")
                .map_err(bad(0))
                .map_err(Step::into_runner)?,
        }),
        _ => None,
    };
    Ok(Some(cursor))
}

/// Up to `limit` station-months that can have rows, after `after`, in key order.
pub(super) async fn station_months_after(
    tx: &mut Tx,
    after: Option<StationMonth>,
    limit: i64,
) -> Result<BTreeSet<StationMonth>, Step> {
    let branch = |table: &str, month: &str, args: &mut Vec<Cell>| {
        let condition = match after {
            Some(sm) => {
                args.extend([
                    Cell::Int(sm.station_id),
                    Cell::Int(sm.station_id),
                    Cell::Text(sm.month.to_string()),
                ]);
                format!("WHERE station_id > ? OR (station_id = ? AND {month} > ?)")
            }
            None => String::new(),
        };
        format!(
            "SELECT station_id, month FROM (SELECT station_id, {month} AS month FROM {table} \
             {condition} ORDER BY station_id, {month} LIMIT {limit})"
        )
    };
    let mut args = Vec::new();
    let small = branch(SMALL_BILLS.name, "bill_yearmonth", &mut args);
    let diffs = branch(DIFFS.name, "share_month", &mut args);
    let sql = format!("{small} AS s UNION {diffs} AS d ORDER BY station_id, month LIMIT {limit}");
    let mut out = BTreeSet::new();
    station_months(tx, &sql, &args, &mut out).await?;
    Ok(out)
}

/// Recompute the next chunk of a pending sweep in one transaction that holds the
/// checkpoint at `position`; false when no sweep is pending.
pub(super) async fn sweep_step(db: &Db, position: i64, chunk: i64) -> Result<bool, RunnerError> {
    let mut tx = Tx::begin(db).await?;
    let Some(after) = sweep_cursor(&mut tx).await? else {
        tx.commit().await?;
        return Ok(false);
    };
    if !crate::runtime::projector::advance_in(&mut tx, NAME, position, position).await? {
        return Err(RunnerError::CheckpointMoved(NAME));
    }
    let sms = station_months_after(&mut tx, after, chunk.max(1))
        .await
        .map_err(Step::into_runner)?;
    recompute_in(&mut tx, &sms)
        .await
        .map_err(|e| at(e, position))
        .map_err(Step::into_runner)?;
    match sms.last() {
        Some(last) if sms.len() as i64 >= chunk.max(1) => {
            tx.exec(
                "UPDATE bill_projection_sweep SET last_station_id = ?, last_month = ?, \
                 updated_at = ? WHERE name = ?",
                &[
                    Cell::Int(last.station_id),
                    Cell::Text(last.month.to_string()),
                    Cell::Text(time_text(&chrono::Utc::now())),
                    Cell::text(NAME),
                ],
            )
            .await?;
        }
        _ => {
            tx.exec(
                "DELETE FROM bill_projection_sweep WHERE name = ?",
                &[Cell::text(NAME)],
            )
            .await?;
            tracing::info!(projection = NAME, position, "bulk catch-up sweep done");
        }
    }
    tx.commit().await?;
    Ok(true)
}

/// Recompute the next `chunk` station-months of a pending sweep, as the running
/// projector does at the head; false when no sweep is pending.
pub async fn sweep_chunk(db: &Db, chunk: i64) -> Result<bool, RunnerError> {
    let position = db.checkpoint(NAME, VERSION).await?;
    sweep_step(db, position, chunk).await
}

/// Whether the rows of `sm` still wait for a pending sweep (a bulk catch-up folded
/// facts they may read; they are recomputed when the sweep reaches them).
pub async fn sweep_pending(db: &Db, sm: StationMonth) -> Result<bool, RunnerError> {
    let mut tx = Tx::begin(db).await?;
    let cursor = sweep_cursor(&mut tx).await?;
    tx.commit().await?;
    Ok(match cursor {
        None => false,
        Some(None) => true,
        Some(Some(last)) => sm > last,
    })
}
