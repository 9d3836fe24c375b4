//! MariaDB/MySQL backend.
//!
//! An append is ONE round trip: a multi-statement text query
//! `BEGIN; UPDATE event_sequence (lock, guard, reserve); INSERT command_log…;
//! INSERT events…; [snapshots]; COMMIT`. Values are escaped literals under a SQL mode
//! the connection sets itself (see `lit`), so no input can change the statement.
//!
//! **Bound events** (issue 19 item 2): an append of
//! [`append::BIND_EVENTS_MIN_DEFAULT`] events or more (an ingest page, a large bus
//! batch; `FACTLEDGER_MYSQL_BIND_EVENTS_MIN` changes it) sends its events as prepared
//! multi-row INSERTs over the binary protocol instead of literals, chunked to five row
//! counts so each stays prepared in the connection's cache (`run::run_append`: the
//! script up to the command log, the INSERTs, then the rest with COMMIT). The server
//! then no longer lexes the payloads (29 % of its CPU in an ingest run, `perf`); one
//! INSERT of the whole batch prepared anew each time saved nothing (the prepare
//! parses as much). A small append stays one round trip: its extra round trips,
//! taken while the sequence lock is held, would cost more than its parse.
//!
//! Global positions are `@fl_base + n`, where `@fl_base` is read from the single
//! `event_sequence` row by the UPDATE that locks it; the lock is held to COMMIT, so
//! appends commit in position order (R-ES-4).
//!
//! When a statement fails the server stops there; the statement's index tells which
//! part of the unit failed (stream conflict, duplicate ledger ref, duplicate key), and
//! the connection is rolled back before it returns to the pool.
//!
//! TLS (issue 14, F10): the URL's `ssl-mode` (`disabled`, `preferred` — sqlx's
//! default: TLS when the server offers it, unverified —, `required`, `verify_ca`,
//! `verify_identity`) and `ssl-ca=<PEM file>` choose it; sqlx does the handshake with
//! rustls. Over TLS a `caching_sha2_password`/`sha256_password` login sends the
//! password inside the TLS session and never takes the RSA key-exchange path (crate
//! `rsa`). A connection that fails says where to and under which `ssl-mode`, never
//! with the password.

use super::{
    CommittedUnit, EventStore, IdempotencyRecord, StoreError, StoredEvent, StoredSnapshot,
    StreamTail, UnitOfWork, GENESIS_HASH,
};
use anyhow::Context as _;
use async_trait::async_trait;
use chrono::NaiveDateTime;
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions, MySqlRow, MySqlSslMode};
use sqlx::{Connection, Row};

mod append;
pub mod failover;
mod run;

pub(crate) use run::{db_number, ER_UNKNOWN_COM_ERROR};
use run::{map_failure, rollback, run_append, stale_fence};

/// Connections in the pool: the writer, readers and background workers.
pub const POOL_CONNECTIONS_MAX: u32 = 16;
/// How long a task waits for a pooled connection before failing (sqlx's default is
/// 30 s; a wait this long means the pool is exhausted, and the caller should hear so
/// well inside the HTTP request timeout).
pub const POOL_ACQUIRE_TIMEOUT_S: u64 = 10;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/mysql");

pub struct MysqlStore {
    pool: MySqlPool,
    keyring: std::sync::Arc<super::Keyring>,
    head: super::HeadSignal,
    /// Appends of this many events or more bind them (see the module doc).
    bind_events_min: usize,
    /// The failover monitor of a URL with several hosts (`failover.rs`), stopped
    /// with the store.
    _failover: Option<FailoverTask>,
    /// The server is a Galera node: each append reads its last event back after
    /// COMMIT (`run::committed_here`).
    galera: bool,
}

struct FailoverTask(tokio::task::JoinHandle<()>);

impl Drop for FailoverTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The connect options of a `mysql://` URL, TLS included (`ssl-mode`, `ssl-ca`,
/// `ssl-cert`, `ssl-key`).
fn connect_options(url: &str) -> anyhow::Result<MySqlConnectOptions> {
    // The parser's errors name the parameter, never echo the URL (or its password).
    url.parse::<MySqlConnectOptions>()
        .map_err(|e| anyhow::anyhow!("database URL: {e}"))
}

/// `ssl-mode` as the URL spells it.
fn ssl_mode_name(mode: MySqlSslMode) -> &'static str {
    match mode {
        MySqlSslMode::Disabled => "disabled",
        MySqlSslMode::Preferred => "preferred",
        MySqlSslMode::Required => "required",
        MySqlSslMode::VerifyCa => "verify_ca",
        MySqlSslMode::VerifyIdentity => "verify_identity",
    }
}

impl MysqlStore {
    pub async fn connect(
        url: &str,
        keyring: std::sync::Arc<super::Keyring>,
    ) -> anyhow::Result<Self> {
        Self::open(url, keyring, false).await
    }

    /// A read replica (issue 21 item 4): never migrated, and every session is READ
    /// ONLY, so nothing this process does can write to it (a write on a replica
    /// would break its replication). Its rows lag the primary; readers wait for
    /// `min_position` on the replica's own checkpoints and head.
    pub async fn connect_replica(
        url: &str,
        keyring: std::sync::Arc<super::Keyring>,
    ) -> anyhow::Result<Self> {
        Self::open(url, keyring, true).await
    }

    async fn open(
        url: &str,
        keyring: std::sync::Arc<super::Keyring>,
        replica: bool,
    ) -> anyhow::Result<Self> {
        let hosts = failover::host_urls(url)
            .iter()
            .map(|u| connect_options(u))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let failover = (hosts.len() > 1).then(|| failover::Failover::new(hosts.clone()));
        let options = match &failover {
            Some(f) => f.choose_first().await,
            None => hosts[0].clone(),
        };
        let target = format!(
            "connecting to MariaDB at {}:{} (ssl-mode={})",
            options.get_host(),
            options.get_port(),
            ssl_mode_name(options.get_ssl_mode())
        );
        let mut pool_options = MySqlPoolOptions::new();
        if let Some(f) = &failover {
            let f = f.clone();
            pool_options = pool_options.before_acquire(move |_, meta| {
                let fresh = f.is_fresh(meta.age);
                Box::pin(async move { Ok(fresh) })
            });
        }
        let pool = pool_options
            .max_connections(POOL_CONNECTIONS_MAX)
            .acquire_timeout(std::time::Duration::from_secs(POOL_ACQUIRE_TIMEOUT_S))
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    // Strict mode is load-bearing: the append guard relies on a NULL
                    // into a NOT NULL column being an error, never a silent 0. And
                    // NO_BACKSLASH_ESCAPES must stay off: `lit` escapes with
                    // backslashes.
                    sqlx::Executor::execute(
                        &mut *conn,
                        "SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ZERO_DATE,\
                         NO_ZERO_IN_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION', \
                         time_zone = '+00:00'",
                    )
                    .await?;
                    // READ COMMITTED: the guard's subquery inside the reserving UPDATE
                    // is then a plain consistent read, not a shared next-key lock on
                    // `events` taken before the sequence lock (which deadlocks against
                    // the holder's INSERT). Correctness never rests on the isolation
                    // level: the sequence lock orders appends, the unique keys and the
                    // guard (heads only grow, so a stale read errs towards a conflict)
                    // refuse stale versions.
                    sqlx::Executor::execute(
                        &mut *conn,
                        "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
                    )
                    .await?;
                    if replica {
                        sqlx::Executor::execute(conn, "SET SESSION TRANSACTION READ ONLY").await?;
                    }
                    Ok(())
                })
            })
            .connect_with(options)
            .await
            .context(target)?;
        let applied = sqlx::query_as::<_, (i64, Vec<u8>, bool)>(
            "SELECT version, checksum, success FROM _sqlx_migrations",
        )
        .fetch_all(&pool)
        .await
        .ok();
        let seals_keys = super::applies(&applied, crate::infra::auth::KEY_MAC_MIGRATION);
        match (super::migrations_pending(&MIGRATOR, applied), replica) {
            (false, _) => {}
            (true, false) => {
                MIGRATOR.run(&pool).await?;
                if seals_keys {
                    let db = crate::infra::db::Db::Mysql(pool.clone());
                    crate::infra::auth::seal_unsealed(&db, &keyring).await?;
                }
            }
            (true, true) => anyhow::bail!(
                "the read replica has not (yet) replicated every migration of this version: \
                 wait for it to catch up, or check its replication"
            ),
        }
        let monitor = failover.map(|f| FailoverTask(f.monitor(pool.clone())));
        // MariaDB has @@wsrep_on (OFF without Galera); MySQL has no such variable.
        let galera = sqlx::query_scalar::<_, i64>("SELECT CAST(@@GLOBAL.wsrep_on AS SIGNED)")
            .fetch_one(&pool)
            .await
            .map(|on| on == 1)
            .unwrap_or(false);
        Ok(Self {
            pool,
            keyring,
            head: super::HeadSignal::default(),
            bind_events_min: append::bind_events_min(),
            _failover: monitor,
            galera,
        })
    }

    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }

    /// Bind the events of appends of `n` events or more (see the module doc); 0 binds
    /// every append (the test suite runs the store's tests both ways).
    pub fn bind_events_from(mut self, n: usize) -> Self {
        self.bind_events_min = n;
        self
    }
}

/// The id of the last event an append writes (positions follow units, streams and
/// events in order).
fn last_event_id(units: &[UnitOfWork]) -> Option<String> {
    units
        .iter()
        .flat_map(|u| u.streams.iter())
        .flat_map(|s| s.events.iter())
        .last()
        .map(|e| e.event_id.to_string())
}

fn db_err(e: sqlx::Error) -> StoreError {
    if crate::infra::store::is_connection_failure(&e) {
        StoreError::Unavailable(e.to_string())
    } else {
        StoreError::Database(e.to_string())
    }
}

const EVENT_COLUMNS: &str = "global_position, aggregate_type, aggregate_id, sequence, event_type, \
     event_version, event_id, payload, metadata, correlation_id, actor, hash, hash_key, recorded_at";

pub(crate) use crate::infra::db::{mysql_opt_text as opt_text, mysql_text as text};
pub(crate) use append::{jobs_insert, lit};
use append::{Stmt, GUARD_SET_FAILED};

fn event_from_row(r: &MySqlRow) -> Result<StoredEvent, sqlx::Error> {
    let recorded: NaiveDateTime = r.try_get("recorded_at")?;
    Ok(StoredEvent {
        global_position: r.try_get("global_position")?,
        aggregate_type: text(r, "aggregate_type")?,
        aggregate_id: text(r, "aggregate_id")?,
        sequence: r.try_get("sequence")?,
        event_type: text(r, "event_type")?,
        event_version: r.try_get("event_version")?,
        event_id: text(r, "event_id")?,
        payload: text(r, "payload")?,
        metadata: text(r, "metadata")?,
        correlation_id: text(r, "correlation_id")?,
        actor: text(r, "actor")?,
        hash: text(r, "hash")?,
        hash_key: text(r, "hash_key")?,
        recorded_at: recorded.and_utc(),
    })
}

fn events_from_rows(rows: Vec<MySqlRow>) -> Result<Vec<StoredEvent>, StoreError> {
    rows.iter()
        .map(event_from_row)
        .collect::<Result<_, _>>()
        .map_err(db_err)
}

/// How long a read keeps re-reading past a gap before it returns the rows as they are.
const GAP_WAIT_MAX: std::time::Duration = std::time::Duration::from_millis(200);

/// Global positions and stream sequences are dense (assigned under the
/// `event_sequence` lock; a rolled-back append gives its numbers back). Yet InnoDB
/// builds a statement's read view without stopping committers, so a reader can see a
/// transaction but not the one that committed just before it: position p+1 without
/// p. A tailing reader that moved past p would never see it (R-ES-4). So a read
/// returns only the contiguous run of rows starting at `first`; when even `first` is
/// not visible it reads again (a fresh statement, a fresh view). A gap that outlives
/// [`GAP_WAIT_MAX`] is not a race but a missing row (operator surgery). The global
/// tail never skips it ([`Hole::Fail`]: readers such as projectors stop there);
/// a single stream's history is returned as it is ([`Hole::Show`]) so `verify`
/// reports the broken chain.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Hole {
    Fail,
    Show,
}

async fn without_gaps<F, Fut>(
    first: i64,
    key: fn(&StoredEvent) -> i64,
    on_hole: Hole,
    read: F,
) -> Result<Vec<StoredEvent>, StoreError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<Vec<StoredEvent>, StoreError>>,
{
    let started = std::time::Instant::now();
    loop {
        let mut rows = read().await?;
        let contiguous = rows
            .iter()
            .zip(first..)
            .take_while(|(e, expected)| key(e) == *expected)
            .count();
        if contiguous == rows.len() {
            return Ok(rows);
        }
        if contiguous > 0 {
            rows.truncate(contiguous);
            return Ok(rows);
        }
        if started.elapsed() >= GAP_WAIT_MAX {
            return match on_hole {
                Hole::Show => Ok(rows),
                Hole::Fail => Err(StoreError::Corrupt(format!(
                    "event {} is missing: positions are dense, so it was deleted",
                    first + contiguous as i64
                ))),
            };
        }
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
}

#[async_trait]
impl EventStore for MysqlStore {
    fn backend(&self) -> &'static str {
        "mysql"
    }

    fn keyring(&self) -> &std::sync::Arc<super::Keyring> {
        &self.keyring
    }

    fn head_watch(&self) -> Option<tokio::sync::watch::Receiver<i64>> {
        Some(self.head.subscribe())
    }

    fn db(&self) -> crate::infra::db::Db {
        crate::infra::db::Db::Mysql(self.pool.clone())
    }

    async fn append(&self, units: &[UnitOfWork]) -> Result<Vec<CommittedUnit>, StoreError> {
        let started = std::time::Instant::now();
        let script = append::build(units, self.bind_events_min)?;
        let (stmts, total) = (&script.stmts, script.total);
        let mut conn = self.pool.acquire().await.map_err(db_err)?;
        let (done, last, result) = run_append(&mut conn, &script).await;
        match result {
            Ok(()) => {
                let base = match last {
                    Some(l) => l - total as i64,
                    None if total == 0 => 0,
                    None => {
                        return Err(StoreError::OutcomeUnknown(
                            "append committed but returned no position".into(),
                        ))
                    }
                };
                let mut next = base;
                let committed: Vec<CommittedUnit> = units
                    .iter()
                    .map(|u| {
                        let n = u.event_count() as i64;
                        let positions = (next + 1..=next + n).collect();
                        next += n;
                        CommittedUnit { positions }
                    })
                    .collect();
                debug_assert_eq!(next - base, total as i64);
                if let (true, Some(position), Some(event_id)) =
                    (self.galera, last, last_event_id(units))
                {
                    match run::committed_here(&mut conn, position, &event_id).await {
                        Ok(true) => {}
                        Ok(false) => {
                            metrics::counter!("factledger_store_rolled_back_total", "error" => "commit_not_applied")
                                .increment(1);
                            let _ = rollback(&mut conn).await;
                            return Err(run::first_conflict(
                                units,
                                "COMMIT answered OK but the append is not in the log",
                            ));
                        }
                        Err(e) => {
                            return Err(StoreError::OutcomeUnknown(format!(
                                "append committed, reading it back failed: {e}"
                            )))
                        }
                    }
                }
                self.head.committed(&committed);
                super::observe_append("mysql", units, started);
                Ok(committed)
            }
            Err(e) => {
                let kind = stmts.get(done).map(|(_, k)| k);
                // Never hand a connection with an open transaction back to the pool.
                let rolled_back = rollback(&mut conn).await.is_ok();
                // Which guard check failed: the session still holds @fl_bad.
                let failed_check = match kind {
                    Some(Stmt::StreamGuard(_, diagnose)) if rolled_back => {
                        let bad = sqlx::query_scalar::<_, i64>("SELECT CAST(@fl_bad AS SIGNED)")
                            .fetch_one(&mut *conn)
                            .await
                            .ok();
                        match (bad, diagnose) {
                            (Some(GUARD_SET_FAILED), Some(sql)) => {
                                sqlx::query_scalar::<_, i64>(sql.as_str())
                                    .fetch_one(&mut *conn)
                                    .await
                                    .ok()
                            }
                            _ => bad,
                        }
                    }
                    _ => None,
                };
                // Which fence was stale: read the claims as they are now.
                let stale_fence = match kind {
                    Some(Stmt::Fences(fences)) if rolled_back => {
                        stale_fence(&mut conn, fences).await
                    }
                    _ => None,
                };
                if !rolled_back {
                    let _ = conn.detach().close().await;
                }
                Err(map_failure(units, kind, e, failed_check, stale_fence))
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
        let read = || async {
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
        };
        without_gaps(from_sequence.max(1), |e| e.sequence, Hole::Show, read).await
    }

    async fn read_all(
        &self,
        after_position: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let read = || async {
            let rows = sqlx::query(&format!(
                "SELECT {EVENT_COLUMNS} FROM events WHERE global_position > ? \
                 ORDER BY global_position LIMIT ?"
            ))
            .bind(after_position)
            .bind(limit.clamp(0, super::READ_LIMIT_MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
            events_from_rows(rows)
        };
        without_gaps(
            after_position.max(0) + 1,
            |e| e.global_position,
            Hole::Fail,
            read,
        )
        .await
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
            q = q.bind(from.naive_utc()).bind(to.naive_utc());
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
                text(&r, "hash").map_err(db_err)?,
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
                last_hash: text(&r, "last_hash")?,
                state: text(&r, "state")?,
            })
        })
        .transpose()
        .map_err(db_err)
    }

    async fn load_streams(
        &self,
        aggregate_type: &str,
        aggregate_ids: &[String],
    ) -> Result<Vec<StreamTail>, StoreError> {
        if aggregate_ids.is_empty() {
            return Ok(Vec::new());
        }
        // Two round trips for all the streams: the snapshots, then every event after
        // its stream's snapshot (one primary-key probe of `snapshots` per stream).
        let marks = vec!["?"; aggregate_ids.len()].join(", ");
        let sql = format!(
            "SELECT aggregate_id, snapshot_version, stream_version, last_hash, state \
             FROM snapshots WHERE aggregate_type = ? AND aggregate_id IN ({marks})"
        );
        let mut query = sqlx::query(&sql).bind(aggregate_type);
        for id in aggregate_ids {
            query = query.bind(id);
        }
        let rows = query.fetch_all(&self.pool).await.map_err(db_err)?;
        let mut tails: std::collections::BTreeMap<String, StreamTail> = Default::default();
        for r in rows {
            let id = text(&r, "aggregate_id").map_err(db_err)?;
            let snapshot = StoredSnapshot {
                snapshot_version: r.try_get("snapshot_version").map_err(db_err)?,
                stream_version: r.try_get("stream_version").map_err(db_err)?,
                last_hash: text(&r, "last_hash").map_err(db_err)?,
                state: text(&r, "state").map_err(db_err)?,
            };
            tails.insert(
                id.clone(),
                StreamTail {
                    aggregate_id: id,
                    snapshot: Some(snapshot),
                    events: Vec::new(),
                },
            );
        }
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE aggregate_type = ? \
             AND aggregate_id IN ({marks}) AND sequence > COALESCE((SELECT s.stream_version \
             FROM snapshots s WHERE s.aggregate_type = events.aggregate_type \
             AND s.aggregate_id = events.aggregate_id), 0) ORDER BY aggregate_id, sequence"
        );
        let mut query = sqlx::query(&sql).bind(aggregate_type);
        for id in aggregate_ids {
            query = query.bind(id);
        }
        let rows = query.fetch_all(&self.pool).await.map_err(db_err)?;
        for r in rows {
            let e = event_from_row(&r).map_err(db_err)?;
            tails
                .entry(e.aggregate_id.clone())
                .or_insert_with(|| StreamTail {
                    aggregate_id: e.aggregate_id.clone(),
                    snapshot: None,
                    events: Vec::new(),
                })
                .events
                .push(e);
        }
        Ok(tails.into_values().collect())
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
                request_hash: text(&r, "request_hash")?,
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
        // sequence = 1 exists exactly once per stream: one index row per stream. Keys
        // are bound as bytes: compared with the `_bin` columns as they are, the range
        // is walked in index order (a text parameter makes MariaDB sort every page).
        let rows = sqlx::query(
            "SELECT aggregate_type, aggregate_id FROM events WHERE sequence = 1 AND \
             (aggregate_type > ? OR (aggregate_type = ? AND aggregate_id > ?)) \
             ORDER BY aggregate_type, aggregate_id LIMIT ?",
        )
        .bind(t.as_bytes())
        .bind(t.as_bytes())
        .bind(id.as_bytes())
        .bind(limit.clamp(0, super::READ_LIMIT_MAX))
        .fetch_all(&self.pool)
        .await
        .map_err(db_err)?;
        rows.iter()
            .map(|r| Ok((text(r, "aggregate_type")?, text(r, "aggregate_id")?)))
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
