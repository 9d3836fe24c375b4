//! SQLite backend: the embedded, zero-setup default.
//!
//! SQLite has one writer at a time; an append is a `BEGIN IMMEDIATE` transaction with
//! bound statements (in-process, so round trips cost nothing). Positions come from the
//! `event_sequence` row inside that transaction, so they commit in order (R-ES-4).
//! WAL mode with `synchronous = FULL`: a commit is durable when `append` returns.

use super::{
    CommittedUnit, EventStore, IdempotencyRecord, StoreError, StoredEvent, StoredSnapshot,
    UnitOfWork, GENESIS_HASH,
};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{Row, Sqlite, Transaction};
use std::str::FromStr;
use std::time::Duration;

/// Readers in the pool (WAL lets them run beside the one writer).
pub const POOL_CONNECTIONS_MAX: u32 = 8;
/// How long a writer waits for the database lock before failing (below the HTTP
/// request timeout, so a locked database answers as a store error first).
pub const BUSY_TIMEOUT_S: u64 = 10;
/// How long a task waits for a pooled connection before failing (sqlx's default is
/// 30 s; a wait this long means the pool is exhausted, and the caller should hear so).
pub const POOL_ACQUIRE_TIMEOUT_S: u64 = 10;
/// Mode of a database file this process creates: owner only. SQLite gives the `-wal`
/// and `-shm` files it creates beside it the database file's mode.
#[cfg(unix)]
pub const DATABASE_FILE_MODE: u32 = 0o600;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");

pub struct SqliteStore {
    pool: SqlitePool,
    keyring: std::sync::Arc<super::Keyring>,
    head: super::HeadSignal,
}

/// Create a missing database file with [`DATABASE_FILE_MODE`] before SQLite opens it
/// (SQLite would create it 0644 under the usual umask; issue 14, F11). An existing
/// file keeps its mode: an operator may have chosen it; a readable one is warned of.
fn create_private(url: &str, path: &std::path::Path) -> anyhow::Result<()> {
    let name = path.to_string_lossy();
    let not_a_new_file = url.contains("mode=ro") || url.contains("mode=memory");
    if not_a_new_file || name.is_empty() || name == ":memory:" || name.starts_with("file:") {
        return Ok(());
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(DATABASE_FILE_MODE)
            .open(path)
        {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let mode = std::fs::metadata(path)?.permissions().mode();
                if mode & 0o077 != 0 {
                    tracing::warn!(path = %name, mode = format!("{:o}", mode & 0o777),
                        "the database file is readable by others than its owner; chmod 600 it");
                }
            }
            Err(e) => {
                return Err(anyhow::anyhow!(
                    "cannot create the database file {name}: {e}"
                ))
            }
        }
    }
    Ok(())
}

impl SqliteStore {
    pub async fn connect(
        url: &str,
        keyring: std::sync::Arc<super::Keyring>,
    ) -> anyhow::Result<Self> {
        let opts = SqliteConnectOptions::from_str(url)?;
        create_private(url, opts.get_filename())?;
        let opts = opts
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(BUSY_TIMEOUT_S))
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(POOL_CONNECTIONS_MAX)
            .acquire_timeout(Duration::from_secs(POOL_ACQUIRE_TIMEOUT_S))
            .connect_with(opts)
            .await?;
        let applied = sqlx::query_as::<_, (i64, Vec<u8>, bool)>(
            "SELECT version, checksum, success FROM _sqlx_migrations",
        )
        .fetch_all(&pool)
        .await
        .ok();
        let seals_keys = super::applies(&applied, crate::infra::auth::KEY_MAC_MIGRATION);
        if super::migrations_pending(&MIGRATOR, applied) {
            MIGRATOR.run(&pool).await?;
            if seals_keys {
                let db = crate::infra::db::Db::Sqlite(pool.clone());
                crate::infra::auth::seal_unsealed(&db, &keyring).await?;
            }
        }
        Ok(Self {
            pool,
            keyring,
            head: super::HeadSignal::default(),
        })
    }

    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    async fn append_in(
        tx: &mut Transaction<'_, Sqlite>,
        units: &[UnitOfWork],
    ) -> Result<Vec<CommittedUnit>, StoreError> {
        let base: i64 = sqlx::query_scalar("SELECT last_position FROM event_sequence WHERE id = 1")
            .fetch_one(&mut **tx)
            .await
            .map_err(db_err)?;
        let mut next = base;
        let mut next_outbox: i64 =
            sqlx::query_scalar("SELECT last_outbox_id FROM event_sequence WHERE id = 1")
                .fetch_one(&mut **tx)
                .await
                .map_err(db_err)?;
        let mut committed = Vec::with_capacity(units.len());
        for unit in units {
            // The fence first: a stale claim writes nothing (BEGIN IMMEDIATE holds the
            // database lock, so nothing can recover the lease before this commits).
            if let Some(f) = &unit.fence {
                hold_fence(tx, f).await?;
            }
            let refs = unit.ledger_refs_by_event()?;
            let mut positions = Vec::with_capacity(unit.event_count());
            // The key first: a repeated request is reported as such (and replayed by
            // the bus), not as a duplicate of the ledger refs it would write again.
            if let Some(idem) = &unit.idempotency {
                let n = unit.event_count() as i64;
                let (f, l) = if n == 0 { (0, 0) } else { (next + 1, next + n) };
                log_key(tx, idem, f, l).await?;
            }
            for (si, s) in unit.streams.iter().enumerate() {
                if unit.fail_after_streams == Some(si) {
                    return Err(StoreError::Injected(si));
                }
                if !s.events.is_empty() {
                    append_stream(tx, s, &refs, &mut next, &mut positions).await?;
                }
            }
            if unit.fail_after_streams == Some(unit.streams.len()) {
                return Err(StoreError::Injected(unit.streams.len()));
            }
            write_snapshots(tx, &unit.snapshots).await?;
            write_outbox(tx, &unit.outbox, &mut next_outbox).await?;
            for j in &unit.jobs {
                submit_job(tx, j).await?;
            }
            committed.push(CommittedUnit { positions });
        }
        sqlx::query("UPDATE event_sequence SET last_position = ?, last_outbox_id = ? WHERE id = 1")
            .bind(next)
            .bind(next_outbox)
            .execute(&mut **tx)
            .await
            .map_err(db_err)?;
        Ok(committed)
    }
}

/// Count a fenced write on the job, or refuse the unit when `f` is no longer the
/// job's current claim.
async fn hold_fence(tx: &mut Transaction<'_, Sqlite>, f: &super::Fence) -> Result<(), StoreError> {
    let fenced = sqlx::query(
        "UPDATE jobs SET fenced_writes = fenced_writes + 1 \
         WHERE id = ? AND status = 1 AND running_attempt = ?",
    )
    .bind(f.job_id)
    .bind(f.running_attempt)
    .execute(&mut **tx)
    .await
    .map_err(db_err)?
    .rows_affected();
    if fenced != 1 {
        return Err(StoreError::Fenced {
            job_id: f.job_id,
            running_attempt: f.running_attempt,
        });
    }
    Ok(())
}

/// Record a unit's idempotency key with the positions it writes.
async fn log_key(
    tx: &mut Transaction<'_, Sqlite>,
    idem: &super::IdempotencyRow,
    first: i64,
    last: i64,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO command_log (scope, idempotency_key, request_hash, \
         first_position, last_position, created_at) VALUES (?, ?, ?, ?, ?, ?)",
    )
    .bind(&idem.scope)
    .bind(&idem.key)
    .bind(&idem.request_hash)
    .bind(first)
    .bind(last)
    .bind(time_text(&Utc::now()))
    .execute(&mut **tx)
    .await
    .map_err(|e| unique_or(e, StoreError::DuplicateIdempotencyKey))?;
    Ok(())
}

/// Check a stream's head and insert its events at the next positions.
async fn append_stream(
    tx: &mut Transaction<'_, Sqlite>,
    s: &super::StreamAppend,
    refs: &[Option<&super::LedgerRefRow>],
    next: &mut i64,
    positions: &mut Vec<i64>,
) -> Result<(), StoreError> {
    // The head must be exactly the event decided on: its number and hash.
    let head: Option<(i64, String)> = sqlx::query_as(
        "SELECT sequence, hash FROM events WHERE aggregate_type = ? \
         AND aggregate_id = ? ORDER BY sequence DESC LIMIT 1",
    )
    .bind(&s.aggregate_type)
    .bind(&s.aggregate_id)
    .fetch_optional(&mut **tx)
    .await
    .map_err(db_err)?;
    let (version, hash) = head.unwrap_or((0, GENESIS_HASH.to_owned()));
    if version != s.expected_version || hash != s.expected_hash {
        return Err(StoreError::Conflict {
            aggregate_type: s.aggregate_type.clone(),
            aggregate_id: s.aggregate_id.clone(),
            expected_version: s.expected_version,
        });
    }
    for e in &s.events {
        *next += 1;
        let ledger = refs.get(positions.len()).copied().flatten();
        sqlx::query(
            "INSERT INTO events (global_position, aggregate_type, aggregate_id, \
             sequence, event_type, event_version, event_id, payload, metadata, \
             correlation_id, actor, hash, hash_key, recorded_at, ledger_ref_type, \
             ledger_ref_id, ledger_entry_type) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(*next)
        .bind(&s.aggregate_type)
        .bind(&s.aggregate_id)
        .bind(e.sequence)
        .bind(&e.event_type)
        .bind(e.event_version)
        .bind(e.event_id.to_string())
        .bind(&e.payload)
        .bind(&e.metadata)
        .bind(&e.correlation_id)
        .bind(&e.actor)
        .bind(&e.hash)
        .bind(&e.hash_key)
        .bind(time_text(&e.recorded_at))
        .bind(ledger.map(|r| &r.ref_type))
        .bind(ledger.map(|r| &r.ref_id))
        .bind(ledger.map(|r| &r.entry_type))
        .execute(&mut **tx)
        .await
        .map_err(|err| match ledger {
            Some(r) => unique_or(err, |_| {
                StoreError::DuplicateLedgerRef(format!(
                    "{}/{}/{}",
                    r.ref_type, r.ref_id, r.entry_type
                ))
            }),
            None => db_err(err),
        })?;
        positions.push(*next);
    }
    Ok(())
}

/// Store (or replace) a unit's snapshots.
async fn write_snapshots(
    tx: &mut Transaction<'_, Sqlite>,
    snapshots: &[super::SnapshotRow],
) -> Result<(), StoreError> {
    for s in snapshots {
        sqlx::query(
            "INSERT INTO snapshots (aggregate_type, aggregate_id, snapshot_version, \
             stream_version, last_hash, state, taken_at) VALUES (?, ?, ?, ?, ?, ?, ?) \
             ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET \
             snapshot_version = excluded.snapshot_version, \
             stream_version = excluded.stream_version, last_hash = excluded.last_hash, \
             state = excluded.state, taken_at = excluded.taken_at",
        )
        .bind(&s.aggregate_type)
        .bind(&s.aggregate_id)
        .bind(s.snapshot_version)
        .bind(s.stream_version)
        .bind(&s.last_hash)
        .bind(&s.state)
        .bind(time_text(&Utc::now()))
        .execute(&mut **tx)
        .await
        .map_err(db_err)?;
    }
    Ok(())
}

/// A unit's outbox rows, at the next outbox ids.
async fn write_outbox(
    tx: &mut Transaction<'_, Sqlite>,
    outbox: &[super::OutboxRow],
    next_outbox: &mut i64,
) -> Result<(), StoreError> {
    let now_ms = Utc::now().timestamp_millis();
    for o in outbox {
        *next_outbox += 1;
        sqlx::query(
            "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, \
             created_at_ms) VALUES (?, ?, ?, ?, ?, ?)",
        )
        .bind(*next_outbox)
        .bind(&o.aggregatetype)
        .bind(&o.aggregateid)
        .bind(&o.r#type)
        .bind(&o.payload)
        .bind(now_ms)
        .execute(&mut **tx)
        .await
        .map_err(db_err)?;
    }
    Ok(())
}

/// Submit one job (R-JOB-2): plain creates or reuses and never resets; a fact change
/// takes the new payload, bumps the generation and revives a job that is not RUNNING
/// to PENDING (retries 0, error cleared, due now). SQLite evaluates every assignment
/// against the old row.
pub(crate) async fn submit_job(
    tx: &mut Transaction<'_, Sqlite>,
    j: &super::JobRow,
) -> Result<(), StoreError> {
    let on_conflict = if j.fact_change {
        "UPDATE SET payload = excluded.payload, request_generation = request_generation + 1, \
         retry_count = CASE WHEN status = 1 THEN retry_count ELSE 0 END, \
         last_error = CASE WHEN status = 1 THEN last_error ELSE NULL END, \
         first_failed_at_ms = CASE WHEN status = 1 THEN first_failed_at_ms ELSE NULL END, \
         next_execute_at_ms = CASE WHEN status = 1 THEN next_execute_at_ms \
         ELSE excluded.next_execute_at_ms END, \
         request_id = excluded.request_id, trace_id = excluded.trace_id, \
         updated_at_ms = excluded.updated_at_ms, \
         status = CASE WHEN status = 1 THEN 1 ELSE 0 END"
    } else {
        "NOTHING"
    };
    sqlx::query(&format!(
        "INSERT INTO jobs (kind, code, business_key, payload, status, retry_count, \
         max_retry_count, next_execute_at_ms, request_generation, running_generation, \
         running_attempt, created_at_ms, updated_at_ms, request_id, trace_id) \
         VALUES (?, ?, ?, ?, 0, 0, ?, ?, 0, 0, 0, ?, ?, ?, ?) ON CONFLICT (code) DO {on_conflict}"
    ))
    .bind(&j.kind)
    .bind(&j.code)
    .bind(&j.business_key)
    .bind(&j.payload)
    .bind(j.max_retry_count)
    .bind(j.due_at_ms)
    .bind(j.now_ms)
    .bind(j.now_ms)
    .bind(&j.request_id)
    .bind(&j.trace_id)
    .execute(&mut **tx)
    .await
    .map_err(db_err)?;
    Ok(())
}

fn time_text(t: &DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

fn parse_time(s: &str) -> Result<DateTime<Utc>, StoreError> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| StoreError::Corrupt(format!("recorded_at {s:?}: {e}")))
}

fn db_err(e: sqlx::Error) -> StoreError {
    StoreError::Database(e.to_string())
}

/// The message of migration 0018's trigger for a ledger reference already taken.
const LEDGER_REF_TAKEN: &str = "events are append-only: ledger reference taken";

fn unique_or(e: sqlx::Error, f: impl FnOnce(String) -> StoreError) -> StoreError {
    match &e {
        sqlx::Error::Database(d) if d.is_unique_violation() => f(d.message().to_owned()),
        // The trigger that closes INSERT OR REPLACE (migration 0018) answers a taken
        // ledger reference before the unique index can.
        sqlx::Error::Database(d) if d.message().contains(LEDGER_REF_TAKEN) => {
            f(d.message().to_owned())
        }
        _ => db_err(e),
    }
}

const EVENT_COLUMNS: &str = "global_position, aggregate_type, aggregate_id, sequence, event_type, \
     event_version, event_id, payload, metadata, correlation_id, actor, hash, hash_key, recorded_at";

fn event_from_row(r: &SqliteRow) -> Result<StoredEvent, StoreError> {
    let get = |e: sqlx::Error| db_err(e);
    let recorded: String = r.try_get("recorded_at").map_err(get)?;
    Ok(StoredEvent {
        global_position: r.try_get("global_position").map_err(get)?,
        aggregate_type: r.try_get("aggregate_type").map_err(get)?,
        aggregate_id: r.try_get("aggregate_id").map_err(get)?,
        sequence: r.try_get("sequence").map_err(get)?,
        event_type: r.try_get("event_type").map_err(get)?,
        event_version: r.try_get("event_version").map_err(get)?,
        event_id: r.try_get("event_id").map_err(get)?,
        payload: r.try_get("payload").map_err(get)?,
        metadata: r.try_get("metadata").map_err(get)?,
        correlation_id: r.try_get("correlation_id").map_err(get)?,
        actor: r.try_get("actor").map_err(get)?,
        hash: r.try_get("hash").map_err(get)?,
        hash_key: r.try_get("hash_key").map_err(get)?,
        recorded_at: parse_time(&recorded)?,
    })
}

fn events_from_rows(rows: Vec<SqliteRow>) -> Result<Vec<StoredEvent>, StoreError> {
    rows.iter().map(event_from_row).collect()
}

#[async_trait]
impl EventStore for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    fn keyring(&self) -> &std::sync::Arc<super::Keyring> {
        &self.keyring
    }

    fn head_watch(&self) -> Option<tokio::sync::watch::Receiver<i64>> {
        Some(self.head.subscribe())
    }

    fn db(&self) -> crate::infra::db::Db {
        crate::infra::db::Db::Sqlite(self.pool.clone())
    }

    async fn append(&self, units: &[UnitOfWork]) -> Result<Vec<CommittedUnit>, StoreError> {
        let started = std::time::Instant::now();
        let mut tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(db_err)?;
        match Self::append_in(&mut tx, units).await {
            Ok(committed) => {
                tx.commit()
                    .await
                    .map_err(|e| StoreError::OutcomeUnknown(e.to_string()))?;
                self.head.committed(&committed);
                super::observe_append("sqlite", units, started);
                Ok(committed)
            }
            Err(e) => {
                // Dropping the transaction would roll back too; doing it explicitly
                // makes the connection clean before it returns to the pool.
                let _ = tx.rollback().await;
                Err(e)
            }
        }
    }

    async fn read_stream(
        &self,
        aggregate_type: &str,
        aggregate_id: &str,
        from_sequence: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE aggregate_type = ? AND aggregate_id = ? \
             AND sequence >= ? ORDER BY sequence LIMIT ?"
        ))
        .bind(aggregate_type)
        .bind(aggregate_id)
        .bind(from_sequence)
        .bind(limit.clamp(0, super::READ_LIMIT_MAX))
        .fetch_all(&self.pool)
        .await
        .map_err(db_err)?;
        events_from_rows(rows)
    }

    async fn read_all(
        &self,
        after_position: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE global_position > ? \
             ORDER BY global_position LIMIT ?"
        ))
        .bind(after_position)
        .bind(limit.clamp(0, super::READ_LIMIT_MAX))
        .fetch_all(&self.pool)
        .await
        .map_err(db_err)?;
        let mut events = events_from_rows(rows)?;
        // Positions are dense; a hole is a deleted event and is never skipped
        // (R-ES-4). Return what precedes it; fail when it is the first one asked for.
        let contiguous = events
            .iter()
            .zip(after_position.max(0) + 1..)
            .take_while(|(e, expected)| e.global_position == *expected)
            .count();
        if contiguous == 0 && !events.is_empty() {
            return Err(StoreError::Corrupt(format!(
                "event {} is missing: positions are dense, so it was deleted",
                after_position.max(0) + 1
            )));
        }
        events.truncate(contiguous);
        Ok(events)
    }

    async fn read_positions(&self, first: i64, last: i64) -> Result<Vec<StoredEvent>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE global_position BETWEEN ? AND ? \
             ORDER BY global_position LIMIT ?"
        ))
        .bind(first)
        .bind(last)
        .bind(super::READ_LIMIT_MAX)
        .fetch_all(&self.pool)
        .await
        .map_err(db_err)?;
        events_from_rows(rows)
    }

    async fn find_events(
        &self,
        filter: &super::EventFilter,
        after_position: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let (clause, text) = filter.clause();
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE {clause} AND global_position > ? \
             ORDER BY global_position LIMIT ?"
        );
        let mut q = sqlx::query(&sql).bind(text);
        if let super::EventFilter::TypeBetween { from, to, .. } = filter {
            q = q.bind(time_text(from)).bind(time_text(to));
        }
        let rows = q
            .bind(after_position)
            .bind(limit.clamp(0, super::READ_LIMIT_MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
        events_from_rows(rows)
    }

    async fn stream_head(
        &self,
        aggregate_type: &str,
        aggregate_id: &str,
    ) -> Result<(i64, String), StoreError> {
        let row = sqlx::query(
            "SELECT sequence, hash FROM events WHERE aggregate_type = ? AND aggregate_id = ? \
             ORDER BY sequence DESC LIMIT 1",
        )
        .bind(aggregate_type)
        .bind(aggregate_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(db_err)?;
        match row {
            Some(r) => Ok((
                r.try_get("sequence").map_err(db_err)?,
                r.try_get("hash").map_err(db_err)?,
            )),
            None => Ok((0, GENESIS_HASH.to_owned())),
        }
    }

    async fn load_snapshot(
        &self,
        aggregate_type: &str,
        aggregate_id: &str,
    ) -> Result<Option<StoredSnapshot>, StoreError> {
        let row = sqlx::query(
            "SELECT snapshot_version, stream_version, last_hash, state FROM snapshots \
             WHERE aggregate_type = ? AND aggregate_id = ?",
        )
        .bind(aggregate_type)
        .bind(aggregate_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(db_err)?;
        row.map(|r| {
            Ok(StoredSnapshot {
                snapshot_version: r.try_get("snapshot_version")?,
                stream_version: r.try_get("stream_version")?,
                last_hash: r.try_get("last_hash")?,
                state: r.try_get("state")?,
            })
        })
        .transpose()
        .map_err(db_err)
    }

    async fn delete_snapshots(&self) -> Result<u64, StoreError> {
        let r = sqlx::query("DELETE FROM snapshots")
            .execute(&self.pool)
            .await
            .map_err(db_err)?;
        Ok(r.rows_affected())
    }

    async fn find_idempotency(
        &self,
        scope: &str,
        key: &str,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        let row = sqlx::query(
            "SELECT request_hash, first_position, last_position FROM command_log \
             WHERE scope = ? AND idempotency_key = ?",
        )
        .bind(scope)
        .bind(key)
        .fetch_optional(&self.pool)
        .await
        .map_err(db_err)?;
        row.map(|r| {
            Ok(IdempotencyRecord {
                request_hash: r.try_get("request_hash")?,
                first_position: r.try_get("first_position")?,
                last_position: r.try_get("last_position")?,
            })
        })
        .transpose()
        .map_err(db_err)
    }

    async fn list_streams(
        &self,
        after: Option<(String, String)>,
        limit: i64,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let (t, id) = after.unwrap_or_default();
        // A row value: SQLite plans it as a range of the stream index (an OR of column
        // conditions it would scan from the start of the index, every page).
        let rows = sqlx::query(
            "SELECT aggregate_type, aggregate_id FROM events WHERE sequence = 1 AND \
             (aggregate_type, aggregate_id) > (?, ?) \
             ORDER BY aggregate_type, aggregate_id LIMIT ?",
        )
        .bind(&t)
        .bind(&id)
        .bind(limit.clamp(0, super::READ_LIMIT_MAX))
        .fetch_all(&self.pool)
        .await
        .map_err(db_err)?;
        rows.iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .collect::<Result<_, sqlx::Error>>()
            .map_err(db_err)
    }

    async fn head_position(&self) -> Result<i64, StoreError> {
        sqlx::query_scalar("SELECT last_position FROM event_sequence WHERE id = 1")
            .fetch_one(&self.pool)
            .await
            .map_err(db_err)
    }

    async fn count_positions(&self, up_to: i64) -> Result<(i64, i64), StoreError> {
        let row = sqlx::query(
            "SELECT COUNT(*), COALESCE(MAX(global_position), 0) FROM events \
             WHERE global_position <= ?",
        )
        .bind(up_to)
        .fetch_one(&self.pool)
        .await
        .map_err(db_err)?;
        Ok((
            row.try_get(0).map_err(db_err)?,
            row.try_get(1).map_err(db_err)?,
        ))
    }

    async fn execute_raw(&self, sql: &str) -> Result<u64, StoreError> {
        let r = sqlx::raw_sql(sql)
            .execute(&self.pool)
            .await
            .map_err(db_err)?;
        Ok(r.rows_affected())
    }
}
