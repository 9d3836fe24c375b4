//! Full rebuild: shadow tables created and filled from a reader task, held checkpoint,
//! catch-up to the head, a wait for running reconciliations, then the swap.

use super::lease::*;
use super::model::*;
use super::shadow::*;
use super::swap::*;
use crate::infra::db::Db;
use crate::infra::store::{DynStore, StoreError, READ_LIMIT_MAX};
use crate::runtime::projection::{
    now, project_wallet_event, RUN_HEARTBEAT_TIMEOUT_MS, WALLET_TABLES,
};
use factledger_projections::wallet::{self};
use std::time::Duration;

/// Full rebuild: fill the shadow tables, hold, catch up, swap. Returns the position
/// the rebuilt tables reflect and the events applied.
pub(super) async fn full(
    store: &DynStore,
    db: &Db,
    rebuild: &Rebuild,
    options: &RebuildOptions,
    progress: &(dyn Fn(Progress) + Send + Sync),
) -> Result<(i64, i64), RebuildError> {
    create_shadow(db).await?;
    let mut applied = 0i64;
    let target = rebuild.target_position;
    let mut position = copy(
        store,
        db,
        rebuild,
        options,
        progress,
        "copying",
        (0, target),
        &mut applied,
    )
    .await?;
    wait_for_reconciliations(db, rebuild, position, target, applied, progress).await?;
    // Hold: the runner stops advancing the live tables.
    set_hold(db, &rebuild.id).await?;
    let head = store.head_position().await?;
    position = copy(
        store,
        db,
        rebuild,
        options,
        progress,
        "catching_up",
        (position, head),
        &mut applied,
    )
    .await?;
    progress(Progress {
        stage: "swapping",
        position,
        target_position: head,
        events_applied: applied,
    });
    swap(db, &rebuild.id, position).await?;
    progress(Progress {
        stage: "done",
        position,
        target_position: head,
        events_applied: applied,
    });
    Ok((position, applied))
}

/// Stream events `(from, to]` into the shadow tables. Returns the last position written.
#[allow(clippy::too_many_arguments)]
pub(super) async fn copy(
    store: &DynStore,
    db: &Db,
    rebuild: &Rebuild,
    options: &RebuildOptions,
    progress: &(dyn Fn(Progress) + Send + Sync),
    stage: &'static str,
    (from, to): (i64, i64),
    applied: &mut i64,
) -> Result<i64, RebuildError> {
    let (tx, mut rx) = tokio::sync::mpsc::channel(READ_AHEAD_BATCHES);
    let reader = tokio::spawn(read_batches(
        store.clone(),
        from,
        to,
        options.flush_events.max(1),
        tx,
    ));
    let mut position = from;
    while let Some(batch) = rx.recv().await {
        let batch: ShadowBatch = batch?;
        write_shadow(db, &rebuild.id, stage, &batch, *applied + batch.events).await?;
        *applied += batch.events;
        position = batch.last_position;
        progress(Progress {
            stage,
            position,
            target_position: to,
            events_applied: *applied,
        });
        if let Some(pause) = options.pause_between_batches {
            tokio::time::sleep(pause).await;
        }
    }
    // The reader ends after its last batch (or after sending its error).
    let _ = reader.await;
    Ok(position)
}

/// Read and project events `(from, to]` in batches of about `flush_events`, sending
/// each (or the first error) to the writer. Stops when the writer hangs up.
pub(super) async fn read_batches(
    store: DynStore,
    from: i64,
    to: i64,
    flush_events: usize,
    tx: tokio::sync::mpsc::Sender<Result<ShadowBatch, RebuildError>>,
) {
    let mut position = from;
    let mut batch = ShadowBatch::default();
    while position < to {
        let events = match store
            .read_all(position, (to - position).min(READ_LIMIT_MAX))
            .await
        {
            Ok(events) if events.is_empty() => {
                let e = StoreError::Corrupt(format!(
                    "no event after position {position}, though the head was {to}"
                ));
                let _ = tx.send(Err(e.into())).await;
                return;
            }
            Ok(events) => events,
            Err(e) => {
                let _ = tx.send(Err(e.into())).await;
                return;
            }
        };
        for e in &events {
            match project_wallet_event(e) {
                Ok(rows) => batch.rows.extend(rows),
                Err(err) => {
                    let _ = tx.send(Err(err.into())).await;
                    return;
                }
            }
            batch.events += 1;
            batch.last_position = e.global_position;
            position = e.global_position;
        }
        let full = batch.events as usize >= flush_events || position >= to;
        if full && tx.send(Ok(std::mem::take(&mut batch))).await.is_err() {
            return;
        }
    }
}

pub(super) async fn create_shadow(db: &Db) -> Result<(), RebuildError> {
    match db {
        Db::Mysql(p) => {
            for t in WALLET_TABLES {
                sqlx::query(&format!("DROP TABLE IF EXISTS {t}{SHADOW}"))
                    .execute(p)
                    .await?;
                sqlx::query(&format!("CREATE TABLE {t}{SHADOW} LIKE {t}"))
                    .execute(p)
                    .await?;
            }
        }
        Db::Sqlite(p) => {
            for t in WALLET_TABLES {
                sqlx::query(&format!("DROP TABLE IF EXISTS {t}{SHADOW}"))
                    .execute(p)
                    .await?;
                // The live table's definition under the shadow name; its secondary
                // indexes are made after the swap (bulk loads go faster without).
                let ddl: String = sqlx::query_scalar(
                    "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?",
                )
                .bind(t)
                .fetch_one(p)
                .await?;
                let columns = ddl.find('(').ok_or_else(|| {
                    StoreError::Corrupt(format!("definition of {t} has no column list"))
                })?;
                sqlx::query(&format!("CREATE TABLE {t}{SHADOW} {}", &ddl[columns..]))
                    .execute(p)
                    .await?;
            }
        }
    }
    Ok(())
}

/// Longest a full rebuild waits for running reconciliations before it swaps anyway.
pub const RECONCILIATION_WAIT_MS_MAX: u64 = 10 * 60 * 1_000;

/// Wait (renewing the lease) while a reconciliation is running. Its snapshot reads the
/// live tables until it ends; on MariaDB a `RENAME TABLE` waits for it and every read
/// of those tables queues behind the rename, so the swap would stall the service's
/// reads. Better the rebuild waits. Runs whose heartbeat stopped do not count.
pub(super) async fn wait_for_reconciliations(
    db: &Db,
    rebuild: &Rebuild,
    position: i64,
    target: i64,
    applied: i64,
    progress: &(dyn Fn(Progress) + Send + Sync),
) -> Result<(), RebuildError> {
    let sql = "SELECT COUNT(*) FROM reconciliations WHERE status = 'running' \
               AND heartbeat_at >= ?";
    let started = std::time::Instant::now();
    loop {
        let fresh = crate::infra::store::time_text_ago(RUN_HEARTBEAT_TIMEOUT_MS);
        let running: i64 = match db {
            Db::Mysql(p) => sqlx::query_scalar(sql).bind(&fresh).fetch_one(p).await?,
            Db::Sqlite(p) => sqlx::query_scalar(sql).bind(&fresh).fetch_one(p).await?,
        };
        if running == 0 {
            return Ok(());
        }
        if started.elapsed() >= Duration::from_millis(RECONCILIATION_WAIT_MS_MAX) {
            tracing::warn!(rebuild = %rebuild.id, running, "swapping although reconciliations still run");
            return Ok(());
        }
        progress(Progress {
            stage: "waiting",
            position,
            target_position: target,
            events_applied: applied,
        });
        macro_rules! keep {
            ($p:expr) => {{
                let mut tx = $p.begin().await?;
                renew!(tx, &rebuild.id);
                record_progress!(tx, &rebuild.id, "waiting", position, applied);
                tx.commit().await?;
            }};
        }
        match db {
            Db::Mysql(p) => keep!(p),
            Db::Sqlite(p) => keep!(p),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
