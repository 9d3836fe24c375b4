//! Rebuilding a projection from the log, on demand (issue 3).
//!
//! **Full rebuild.** Shadow tables `<table>__rebuild` are created empty and filled from
//! position 0 in batches while the live tables go on serving reads and the runner goes
//! on advancing them. A reader task streams events through a bounded channel, so memory
//! is a few batches however long the log is. Then:
//! 1. *hold*: the checkpoint row gets `hold = 'catchup'`; the runner's compare-and-set
//!    refuses to advance a held checkpoint, so the live tables stop moving;
//! 2. the shadow tables catch up to the head H as it is now, and the shadow set gets its
//!    generation row: generation g+1 at position H;
//! 3. *swap*: on SQLite, DDL is transactional: dropping the live tables, renaming the
//!    shadow ones and setting the checkpoint to (g+1, H) commit together. On MariaDB,
//!    DDL commits on its own: one `RENAME TABLE` swaps all tables atomically (live →
//!    `__old`, shadow → live), then the checkpoint adopts the set's generation and
//!    position and `__old` is dropped.
//!
//! The runner advances the checkpoint only while its generation is the live set's
//! (`wallet_generation`, swapped with the rows), so no interleaving of a swap with a
//! runner, a crash or a stalled rebuild can put rows of one set under the position of
//! another. A crash before the rename leaves the live tables untouched (the next
//! rebuild drops the shadow); after it, whoever meets the differing generations
//! ([`resolve_stale_hold`], called by the runner and by every full rebuild) makes the
//! checkpoint adopt the set's own position. A hold whose lease expired is cleared.
//!
//! One full rebuild per projection at a time: a lease row renewed in every batch's
//! transaction (a rebuild that lost its lease writes nothing more).
//!
//! **Scoped rebuild** (`wallet:<id>`): one transaction that locks the checkpoint row
//! (the runner waits for it), deletes that wallet's rows and writes them again from
//! its stream up to the checkpoint.

use crate::infra::db::Db;
use crate::infra::store::{time_text, DynStore, StoreError, READ_LIMIT_MAX};
use crate::runtime::projection::{project_wallet_event, with_tx, write_wallet_rows, RunnerError};
use factledger_aggregates::wallet::Buckets;
use factledger_projections::wallet::{self, LedgerRow, WalletRow};
use sqlx::{MySqlConnection, SqliteConnection};
use std::collections::BTreeMap;
use std::time::Duration;

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
/// Events written to the shadow tables per transaction (default).
pub const FLUSH_EVENTS_DEFAULT: usize = 5_000;
/// Batches read ahead of the writer: the reader never holds more than this.
const READ_AHEAD_BATCHES: usize = 2;
/// Ledger rows per multi-row INSERT on MariaDB.
const MYSQL_ROWS_PER_INSERT: usize = 1_000;

const SHADOW: &str = "__rebuild";
const OLD: &str = "__old";

#[derive(Debug, thiserror::Error)]
pub enum RebuildError {
    #[error("projection: unknown projection {0:?} (known: wallet)")]
    UnknownProjection(String),
    #[error("scope: {0:?} is not valid: expected wallet:<wallet id> (1 to 128 characters)")]
    BadScope(String),
    #[error("a full rebuild of {projection} is already running ({id}); wait for it or for its lease to expire ({LEASE_MS} ms without progress)")]
    AlreadyRunning { projection: String, id: String },
    #[error("rebuild {0} lost its lease: it made no progress for {LEASE_MS} ms and another rebuild took over")]
    LeaseLost(String),
    #[error(transparent)]
    Runner(#[from] RunnerError),
}

impl From<sqlx::Error> for RebuildError {
    fn from(e: sqlx::Error) -> Self {
        RebuildError::Runner(e.into())
    }
}

impl From<StoreError> for RebuildError {
    fn from(e: StoreError) -> Self {
        RebuildError::Runner(e.into())
    }
}

/// What a rebuild recomputes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every row, into shadow tables swapped in at the end.
    Full,
    /// Only this wallet's rows, in place.
    Wallet(String),
}

impl Scope {
    /// `None` is a full rebuild; `wallet:<id>` one wallet.
    pub fn parse(scope: Option<&str>) -> Result<Scope, RebuildError> {
        let Some(s) = scope else {
            return Ok(Scope::Full);
        };
        match s.split_once(':') {
            Some(("wallet", id)) if !id.is_empty() && id.chars().count() <= 128 => {
                Ok(Scope::Wallet(id.to_owned()))
            }
            _ => Err(RebuildError::BadScope(s.to_owned())),
        }
    }

    pub fn label(&self) -> Option<String> {
        match self {
            Scope::Full => None,
            Scope::Wallet(id) => Some(format!("wallet:{id}")),
        }
    }
}

/// Progress and outcome of one rebuild, as stored in `projection_rebuilds`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct RebuildStatus {
    pub id: String,
    pub projection: String,
    /// `wallet:<id>` for a scoped rebuild; absent for a full one.
    pub scope: Option<String>,
    pub requested_by: String,
    /// `running`, `succeeded`, `failed`, or `abandoned` (running, but its process
    /// stopped renewing its lease: killed or stalled).
    pub status: String,
    /// `copying` (filling the shadow tables), `waiting` (for running reconciliations
    /// to end before the swap), `catching_up` (live held, shadow reaching the head),
    /// `swapping`, `done`.
    pub stage: String,
    /// The head of the log when the rebuild started (what `copying` reads up to).
    pub target_position: i64,
    /// The last event written so far.
    pub position: i64,
    pub events_applied: i64,
    pub events_per_second: i64,
    pub started_at: String,
    pub updated_at: String,
    pub finished_at: Option<String>,
    pub error: Option<String>,
}

/// Tuning and test hooks.
#[derive(Debug, Clone)]
pub struct RebuildOptions {
    /// Events per shadow-table transaction.
    pub flush_events: usize,
    /// Sleep after each batch (a test hook to make a rebuild slow enough to kill;
    /// keep it well under [`LEASE_MS`]).
    pub pause_between_batches: Option<Duration>,
}

impl Default for RebuildOptions {
    fn default() -> Self {
        Self {
            flush_events: FLUSH_EVENTS_DEFAULT,
            pause_between_batches: None,
        }
    }
}

/// A progress report for a progress bar.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub stage: &'static str,
    pub position: i64,
    pub target_position: i64,
    pub events_applied: i64,
}

/// A rebuild that has been registered (and, if full, holds the lease).
#[derive(Debug, Clone)]
pub struct Rebuild {
    pub id: String,
    pub scope: Scope,
    pub target_position: i64,
}

fn now() -> String {
    time_text(&chrono::Utc::now())
}

fn lease_cutoff() -> String {
    crate::infra::store::time_text_ago(LEASE_MS)
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

async fn take_lease(db: &Db, id: &str) -> Result<(), RebuildError> {
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
async fn finish(
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

async fn release_lease(db: &Db, id: &str) -> Result<(), RebuildError> {
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

/// Full rebuild: fill the shadow tables, hold, catch up, swap. Returns the position
/// the rebuilt tables reflect and the events applied.
async fn full(
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
async fn copy(
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

/// The row changes of a run of events.
#[derive(Debug, Default)]
struct ShadowBatch {
    events: i64,
    last_position: i64,
    rows: Vec<WalletRow>,
}

/// A batch's balance-row changes coalesced per wallet (the last state wins), its
/// ledger rows, and its block changes in event order: what MariaDB writes in
/// multi-row statements.
#[derive(Debug, Default)]
struct Coalesced<'a> {
    balances: BTreeMap<&'a str, BalanceChange<'a>>,
    ledger: Vec<&'a LedgerRow>,
    blocks: Vec<&'a WalletRow>,
}

#[derive(Debug)]
struct BalanceChange<'a> {
    /// `(user_id, currency)` when the wallet was opened in this batch.
    opened: Option<(&'a str, &'a str)>,
    balances: Option<Buckets>,
    version: i64,
    last_position: i64,
}

impl<'a> Coalesced<'a> {
    fn of(rows: &'a [WalletRow]) -> Self {
        let mut c = Coalesced::default();
        for row in rows {
            match row {
                WalletRow::Opened {
                    wallet_id,
                    user_id,
                    currency,
                    version,
                    last_position,
                } => {
                    c.balances.insert(
                        wallet_id,
                        BalanceChange {
                            opened: Some((user_id, currency)),
                            balances: Some(Buckets::default()),
                            version: *version,
                            last_position: *last_position,
                        },
                    );
                }
                WalletRow::Balances {
                    wallet_id,
                    balances,
                    version,
                    last_position,
                } => {
                    c.touch(wallet_id, *version, *last_position).balances = Some(*balances);
                }
                WalletRow::Version {
                    wallet_id,
                    version,
                    last_position,
                } => {
                    c.touch(wallet_id, *version, *last_position);
                }
                WalletRow::Ledger(l) => c.ledger.push(l),
                b @ (WalletRow::Blocked { .. } | WalletRow::Unblocked { .. }) => c.blocks.push(b),
            }
        }
        c
    }

    fn touch(
        &mut self,
        wallet_id: &'a str,
        version: i64,
        last_position: i64,
    ) -> &mut BalanceChange<'a> {
        let c = self.balances.entry(wallet_id).or_insert(BalanceChange {
            opened: None,
            balances: None,
            version,
            last_position,
        });
        c.version = version;
        c.last_position = last_position;
        c
    }
}

/// Read and project events `(from, to]` in batches of about `flush_events`, sending
/// each (or the first error) to the writer. Stops when the writer hangs up.
async fn read_batches(
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

async fn create_shadow(db: &Db) -> Result<(), RebuildError> {
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

/// Longest a full rebuild waits for running reconciliations before it swaps anyway.
pub const RECONCILIATION_WAIT_MS_MAX: u64 = 10 * 60 * 1_000;

/// Wait (renewing the lease) while a reconciliation is running. Its snapshot reads the
/// live tables until it ends; on MariaDB a `RENAME TABLE` waits for it and every read
/// of those tables queues behind the rename, so the swap would stall the service's
/// reads. Better the rebuild waits. Runs whose heartbeat stopped do not count.
async fn wait_for_reconciliations(
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
        let fresh =
            crate::infra::store::time_text_ago(crate::runtime::reconcile::RUN_HEARTBEAT_TIMEOUT_MS);
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

/// Write one batch into the shadow tables, renewing the lease, in one transaction.
async fn write_shadow(
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
            write_shadow_mysql(&mut tx, b).await?;
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
                upsert_balance_sqlite(&mut tx, wallet_id, ch).await?;
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

/// MariaDB: one script of multi-row statements with escaped literals, sent as text
/// in one round trip (no statement to prepare: each is used once).
async fn write_shadow_mysql(c: &mut MySqlConnection, b: &ShadowBatch) -> Result<(), sqlx::Error> {
    use crate::infra::store::mysql::lit;
    use std::fmt::Write;
    let b = Coalesced::of(&b.rows);
    let balance_columns = "wallet_id, user_id, currency, pending_minor, available_minor, \
                           frozen_minor, risk_hold_minor, version, last_position";
    let mut opened = String::new();
    let mut moved = String::new();
    let mut touched = String::new();
    for (wallet_id, ch) in &b.balances {
        let z = Buckets::default();
        let v = ch.balances.as_ref().unwrap_or(&z);
        let (user_id, currency) = match &ch.opened {
            Some((u, c)) => (lit(u), lit(c)),
            None => ("''".to_owned(), "''".to_owned()),
        };
        let target = match (&ch.opened, &ch.balances) {
            (Some(_), _) => &mut opened,
            (None, Some(_)) => &mut moved,
            (None, None) => &mut touched,
        };
        if !target.is_empty() {
            target.push(',');
        }
        let _ = write!(
            target,
            "({},{user_id},{currency},{},{},{},{},{},{})",
            lit(wallet_id),
            v.pending_minor,
            v.available_minor,
            v.frozen_minor,
            v.risk_hold_minor,
            ch.version,
            ch.last_position
        );
    }
    let t = format!("wallet_balances{SHADOW}");
    let mut script = String::with_capacity(b.ledger.len() * 320 + 1024);
    if !opened.is_empty() {
        let _ = writeln!(
            script,
            "INSERT INTO {t} ({balance_columns}) VALUES {opened};"
        );
    }
    // The rows exist (a wallet's first event opens it); the insert half never applies
    // to a well-formed log, only the update half.
    if !moved.is_empty() {
        let _ = writeln!(
            script,
            "INSERT INTO {t} ({balance_columns}) VALUES {moved} ON DUPLICATE KEY UPDATE \
             pending_minor = VALUES(pending_minor), available_minor = VALUES(available_minor), \
             frozen_minor = VALUES(frozen_minor), risk_hold_minor = VALUES(risk_hold_minor), \
             version = VALUES(version), last_position = VALUES(last_position);"
        );
    }
    if !touched.is_empty() {
        let _ = writeln!(
            script,
            "INSERT INTO {t} ({balance_columns}) VALUES {touched} ON DUPLICATE KEY UPDATE \
             version = VALUES(version), last_position = VALUES(last_position);"
        );
    }
    for chunk in b.ledger.chunks(MYSQL_ROWS_PER_INSERT) {
        let _ = write!(
            script,
            "INSERT INTO wallet_ledger{SHADOW} ({LEDGER_COLUMNS}) VALUES "
        );
        for (i, l) in chunk.iter().enumerate() {
            if i > 0 {
                script.push(',');
            }
            let (d, bf, af) = (&l.delta, &l.before, &l.after);
            let _ = write!(
                script,
                "({},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{})",
                lit(&l.wallet_id),
                l.sequence,
                l.global_position,
                lit(&l.ref_type),
                lit(&l.ref_id),
                lit(l.entry_type),
                l.amount_minor,
                d.pending_minor,
                d.available_minor,
                d.frozen_minor,
                d.risk_hold_minor,
                bf.pending_minor,
                bf.available_minor,
                bf.frozen_minor,
                bf.risk_hold_minor,
                af.pending_minor,
                af.available_minor,
                af.frozen_minor,
                af.risk_hold_minor,
                lit(&l.recorded_at)
            );
        }
        script.push_str(";\n");
    }
    for row in b.blocks {
        match row {
            WalletRow::Blocked {
                wallet_id,
                ref_type,
                ref_id,
                reason,
            } => {
                let _ = writeln!(
                    script,
                    "INSERT INTO wallet_blocks{SHADOW} (wallet_id, ref_type, ref_id, reason) \
                     VALUES ({}, {}, {}, {});",
                    lit(wallet_id),
                    lit(ref_type),
                    lit(ref_id),
                    reason.as_deref().map_or_else(|| "NULL".to_owned(), lit)
                );
            }
            WalletRow::Unblocked {
                wallet_id,
                ref_type,
                ref_id,
            } => {
                let _ = writeln!(
                    script,
                    "DELETE FROM wallet_blocks{SHADOW} \
                     WHERE wallet_id = {} AND ref_type = {} AND ref_id = {};",
                    lit(wallet_id),
                    lit(ref_type),
                    lit(ref_id)
                );
            }
            _ => {}
        }
    }
    if !script.is_empty() {
        run_script(c, &script).await?;
    }
    Ok(())
}

/// A text-protocol script on one connection. Boxed: the executor's higher-ranked
/// lifetimes otherwise keep the caller's future from being `Send`.
fn run_script<'c>(
    c: &'c mut MySqlConnection,
    script: &'c str,
) -> futures::future::BoxFuture<'c, Result<(), sqlx::Error>> {
    Box::pin(async move {
        use futures::TryStreamExt;
        let mut results = sqlx::raw_sql(script).fetch_many(c);
        while results.try_next().await?.is_some() {}
        Ok(())
    })
}

const LEDGER_COLUMNS: &str = "wallet_id, sequence, global_position, ref_type, ref_id, \
     entry_type, amount_minor, delta_pending_minor, delta_available_minor, delta_frozen_minor, \
     delta_risk_hold_minor, before_pending_minor, before_available_minor, before_frozen_minor, \
     before_risk_hold_minor, after_pending_minor, after_available_minor, after_frozen_minor, \
     after_risk_hold_minor, recorded_at";

/// Insert or update a shadow balance row with a batch's last state of the wallet.
async fn upsert_balance_sqlite(
    c: &mut SqliteConnection,
    wallet_id: &str,
    ch: &BalanceChange<'_>,
) -> Result<(), sqlx::Error> {
    let z = Buckets::default();
    let v = ch.balances.as_ref().unwrap_or(&z);
    let (user_id, currency) = ch.opened.unwrap_or_default();
    // Only the version moved (a block): keep the stored buckets.
    let set = match (&ch.opened, &ch.balances) {
        (None, None) => "version = excluded.version, last_position = excluded.last_position",
        _ => {
            "pending_minor = excluded.pending_minor, available_minor = excluded.available_minor, \
             frozen_minor = excluded.frozen_minor, risk_hold_minor = excluded.risk_hold_minor, \
             version = excluded.version, last_position = excluded.last_position"
        }
    };
    sqlx::query(&format!(
        "INSERT INTO wallet_balances{SHADOW} (wallet_id, user_id, currency, pending_minor, \
         available_minor, frozen_minor, risk_hold_minor, version, last_position) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (wallet_id) DO UPDATE SET {set}"
    ))
    .bind(wallet_id)
    .bind(user_id)
    .bind(currency)
    .bind(v.pending_minor)
    .bind(v.available_minor)
    .bind(v.frozen_minor)
    .bind(v.risk_hold_minor)
    .bind(ch.version)
    .bind(ch.last_position)
    .execute(&mut *c)
    .await?;
    Ok(())
}

/// Hold the checkpoint (`hold = 'catchup'`) while holding the lease: the runner
/// stops advancing the live tables.
async fn set_hold(db: &Db, id: &str) -> Result<(), RebuildError> {
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

/// Make the checkpoint describe the live set: its generation and position (the
/// set's own, from `wallet_generation`), releasing any hold. A no-op when they agree.
const ADOPT_LIVE_SET: &str = "UPDATE projection_checkpoints SET \
     position = (SELECT position FROM wallet_generation WHERE id = 1), \
     generation = (SELECT generation FROM wallet_generation WHERE id = 1), \
     version = ?, hold = NULL, updated_at = ?, last_error = NULL, error_position = NULL \
     WHERE name = ? AND generation <> (SELECT generation FROM wallet_generation WHERE id = 1)";

/// Put the shadow tables in place of the live ones, and the checkpoint at `position`.
async fn swap(db: &Db, id: &str, position: i64) -> Result<(), RebuildError> {
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

const CHECKPOINT_SQL: &str =
    "SELECT generation, position FROM projection_checkpoints WHERE name = ?";

/// How long one `RENAME TABLE` attempt may wait for the tables' metadata locks.
const RENAME_LOCK_WAIT_S: u32 = 2;
/// Attempts before the swap gives up (and the rebuild fails, live tables kept).
const RENAME_ATTEMPTS_MAX: u32 = 30;

/// Run the swap's `RENAME TABLE`, waiting at most [`RENAME_LOCK_WAIT_S`] per attempt
/// for the metadata locks of transactions that read the live tables (a long
/// reconciliation snapshot): reads of those tables queue behind a waiting rename, so
/// it must not wait long; it retries instead.
async fn rename_waiting_briefly(db: &Db, id: &str, rename: &str) -> Result<(), RebuildError> {
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

/// Make the checkpoint describe the live tables again after a rebuild stopped: adopt
/// the live set's generation and position if a rename happened (always safe: the
/// set's own position is the truth about its rows), and clear a hold whose lease
/// expired. Called by the runner when its checkpoint does not move, and before a full
/// rebuild starts.
pub async fn resolve_stale_hold(db: &Db) -> Result<(), RebuildError> {
    resolve_hold(db, None).await
}

/// As [`resolve_stale_hold`]; with `own`, clear the hold of that rebuild whatever its
/// lease.
async fn resolve_hold(db: &Db, own: Option<&str>) -> Result<(), RebuildError> {
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
async fn wallet_rows_up_to(
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
