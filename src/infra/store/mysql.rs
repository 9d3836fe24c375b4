//! MariaDB/MySQL backend.
//!
//! An append is ONE round trip: a multi-statement text query
//! `BEGIN; UPDATE event_sequence (lock, guard, reserve); INSERT command_log…;
//! INSERT events…; [snapshots]; COMMIT`. Values are escaped literals under a SQL mode
//! the connection sets itself (see `lit`), so no input can change the statement.
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
use chrono::{DateTime, NaiveDateTime, Utc};
use futures::TryStreamExt;
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions, MySqlRow, MySqlSslMode};
use sqlx::{Connection, Either, Row};
use std::fmt::Write as _;

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
}

/// What each statement of an append does, to map a failure back to its meaning.
#[derive(Debug, Clone)]
enum Stmt {
    Plain,
    /// The (unit, stream) of each stream whose head is checked, and, when the guard
    /// was checked set-wise (@fl_bad = [`GUARD_SET_FAILED`]), the query that names
    /// the first stream that failed.
    StreamGuard(Vec<(usize, usize)>, Option<String>),
    Events {
        unit: usize,
        stream: usize,
    },
    CommandLog,
    Inject(usize),
    /// The fences of the batch's units.
    Fences(Vec<super::Fence>),
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
        let options = connect_options(url)?;
        let target = format!(
            "connecting to MariaDB at {}:{} (ssl-mode={})",
            options.get_host(),
            options.get_port(),
            ssl_mode_name(options.get_ssl_mode())
        );
        let pool = MySqlPoolOptions::new()
            .max_connections(POOL_CONNECTIONS_MAX)
            .acquire_timeout(std::time::Duration::from_secs(POOL_ACQUIRE_TIMEOUT_S))
            .after_connect(|conn, _| {
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
                        conn,
                        "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
                    )
                    .await
                    .map(|_| ())
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
        if super::migrations_pending(&MIGRATOR, applied) {
            MIGRATOR.run(&pool).await?;
        }
        Ok(Self { pool, keyring })
    }

    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }

    /// Build the statements of one append of `units`.
    fn build(units: &[UnitOfWork]) -> Result<(Vec<(String, Stmt)>, usize), StoreError> {
        let total: usize = units.iter().map(UnitOfWork::event_count).sum();
        let mut stmts: Vec<(String, Stmt)> = vec![("BEGIN".into(), Stmt::Plain)];
        // Guard: every stream must be at exactly the head its first append in this
        // batch expects (checked as MAX(sequence), one index dive per stream, while
        // taking the sequence lock, so nothing can move it until COMMIT); a later
        // append to the same stream in this batch must continue exactly where the
        // previous one ends (its rows do not exist yet when the guard runs). @fl_bad is
        // the index of the first failed check, -1 if none; the UPDATE below writes
        // NULL into a NOT NULL column (strict mode: error 1048) when a check failed,
        // which fails the unit before anything is inserted, and `append` reads
        // @fl_bad back to name the stream.
        let mut cases = String::new();
        let mut checked = Vec::new();
        // The same checks set-wise (see below): `(type, id, sequence)` that must not
        // exist (the event after each stream's expected head) and `(type, id,
        // sequence, hash)` that must (each expected head).
        let mut after_rows = String::new();
        let mut head_rows = String::new();
        let mut heads = 0usize;
        let mut set_wise = true;
        let mut ends: std::collections::HashMap<(&str, &str), i64> = Default::default();
        for (u, si, s) in units.iter().enumerate().flat_map(|(u, unit)| {
            unit.streams
                .iter()
                .enumerate()
                .map(move |(si, s)| (u, si, s))
        }) {
            if s.events.is_empty() {
                continue;
            }
            let key = (s.aggregate_type.as_str(), s.aggregate_id.as_str());
            let bad = match ends.get(&key) {
                Some(&end) if s.expected_version == end => None,
                Some(_) => {
                    set_wise = false;
                    Some("TRUE".to_owned())
                }
                // The head must be exactly the event decided on (number and hash),
                // with nothing after it. (The unique key would refuse "after" too,
                // but here the failure names its stream.)
                None => {
                    let (t, i) = (lit(&s.aggregate_type), lit(&s.aggregate_id));
                    let _ = write!(
                        after_rows,
                        "{}({t}, {i}, {})",
                        if after_rows.is_empty() { "" } else { ", " },
                        s.expected_version + 1
                    );
                    if s.expected_version != 0 {
                        let _ = write!(
                            head_rows,
                            "{}({t}, {i}, {}, {})",
                            if head_rows.is_empty() { "" } else { ", " },
                            s.expected_version,
                            lit(&s.expected_hash)
                        );
                        heads += 1;
                    }
                    let stream = format!(
                        "aggregate_type = {} AND aggregate_id = {}",
                        lit(&s.aggregate_type),
                        lit(&s.aggregate_id)
                    );
                    let after = format!(
                        "EXISTS (SELECT 1 FROM events WHERE {stream} AND sequence = {})",
                        s.expected_version + 1
                    );
                    Some(if s.expected_version == 0 {
                        after
                    } else {
                        format!(
                            "NOT EXISTS (SELECT 1 FROM events WHERE {stream} AND sequence = {} \
                             AND hash = {}) OR {after}",
                            s.expected_version,
                            lit(&s.expected_hash)
                        )
                    })
                }
            };
            ends.insert(key, s.expected_version + s.events.len() as i64);
            if let Some(bad) = bad {
                let _ = write!(cases, " WHEN {bad} THEN {}", checked.len());
                checked.push((u, si));
            }
        }
        // Set-wise, the guard is two range reads of the stream index (row IN lists,
        // which MariaDB reads as ranges up to `in_predicate_conversion_threshold`
        // elements) instead of one or two subqueries per stream, each parsed and
        // optimized on its own (most of the server's time in a page of ingest).
        // It only says whether some check failed; which one is asked after the
        // rollback with the per-stream CASE (`diagnose`). Streams only grow, so a
        // check that failed under the lock still fails then (but a head that was
        // missing may have appeared: then the first checked stream is named).
        set_wise = set_wise && !checked.is_empty() && checked.len() <= GUARD_SET_ROWS_MAX;
        let per_stream = format!("CASE{cases} ELSE -1 END");
        let (bad, diagnose) = if checked.is_empty() {
            ("-1".to_owned(), None)
        } else if set_wise {
            let heads_ok = if heads == 0 {
                String::new()
            } else {
                format!(
                    " OR (SELECT COUNT(*) FROM events WHERE (aggregate_type, aggregate_id, \
                     sequence, hash) IN ({head_rows})) <> {heads}"
                )
            };
            (
                format!(
                    "IF(EXISTS (SELECT 1 FROM events WHERE (aggregate_type, aggregate_id, \
                     sequence) IN ({after_rows})){heads_ok}, {GUARD_SET_FAILED}, -1)"
                ),
                Some(format!("SELECT CAST({per_stream} AS SIGNED)")),
            )
        } else {
            (per_stream, None)
        };
        let outbox_total: usize = units.iter().map(|u| u.outbox.len()).sum();
        // Outbox ids are reserved by the same locking UPDATE (assignments run left to
        // right, so @fl_obase is the id before this batch's rows).
        let outbox_reserve = if outbox_total > 0 {
            format!("last_outbox_id = (@fl_obase := last_outbox_id) + {outbox_total}, ")
        } else {
            String::new()
        };
        // One statement takes the sequence lock, runs the guard and reserves the
        // positions; LAST_INSERT_ID(expr) hands the new last position back in the OK
        // packet, so no SELECT is needed to learn it. A batch that appends no event
        // and no outbox row (jobs submitted on their own) takes no lock at all.
        if total > 0 || outbox_total > 0 || !checked.is_empty() {
            stmts.push((
                format!(
                    "UPDATE event_sequence SET {outbox_reserve}last_position = \
                     IF((@fl_bad := {bad}) < 0, \
                     LAST_INSERT_ID((@fl_base := last_position) + {total}), NULL) WHERE id = 1"
                ),
                Stmt::StreamGuard(checked, diagnose),
            ));
        }
        // Fences, right after the sequence lock (lock order: sequence, then job rows,
        // as for jobs submitted in a unit; claims and completions take job rows only),
        // in ONE statement for the batch. A claim that is no longer current writes
        // NULL into a NOT NULL column: strict mode makes that error 1048 and the whole
        // batch rolls back (the bus then re-runs its units one by one, so only the
        // stale one fails). The UPDATE also locks the job rows to COMMIT, so a lease
        // cannot be recovered and re-claimed between this check and the commit.
        let fences: Vec<super::Fence> = units.iter().filter_map(|u| u.fence).collect();
        if !fences.is_empty() {
            let mut by_job: std::collections::BTreeMap<i64, (Vec<i64>, usize)> = Default::default();
            for f in &fences {
                let e = by_job.entry(f.job_id).or_default();
                e.0.push(f.running_attempt);
                e.1 += 1;
            }
            let mut case = String::from("CASE id");
            for (id, (attempts, n)) in &by_job {
                // Two units fenced by different attempts of one job: one is stale, and
                // no row can match both.
                let claims = attempts
                    .iter()
                    .map(|a| format!("running_attempt = {a}"))
                    .collect::<Vec<_>>()
                    .join(" AND ");
                let _ = write!(
                    case,
                    " WHEN {id} THEN IF(status = 1 AND {claims}, fenced_writes + {n}, NULL)"
                );
            }
            case.push_str(" END");
            let ids = by_job
                .keys()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(", ");
            stmts.push((
                format!("UPDATE jobs SET fenced_writes = {case} WHERE id IN ({ids})"),
                Stmt::Fences(fences),
            ));
        }
        // One multi-row INSERT for the whole batch, unless a unit asks for an
        // injected failure between its streams (tests): then one per stream.
        let split = units.iter().any(|u| u.fail_after_streams.is_some());
        let mut batch_rows = String::new();
        let mut offset = 0usize; // events of earlier units
        let mut log = String::new();
        let mut snaps = String::new();
        for (u, unit) in units.iter().enumerate() {
            let refs = unit.ledger_refs_by_event()?;
            let mut in_unit = 0usize;
            for (si, s) in unit.streams.iter().enumerate() {
                if unit.fail_after_streams == Some(si) {
                    stmts.push((
                        "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'fl_injected_failure'".into(),
                        Stmt::Inject(si),
                    ));
                }
                if s.events.is_empty() {
                    continue;
                }
                let mut sql = String::new();
                for e in &s.events {
                    if !sql.is_empty() {
                        sql.push(',');
                    }
                    let ledger = match refs.get(in_unit).copied().flatten() {
                        Some(r) => format!(
                            "{}, {}, {}",
                            lit(&r.ref_type),
                            lit(&r.ref_id),
                            lit(&r.entry_type)
                        ),
                        None => "NULL, NULL, NULL".to_owned(),
                    };
                    let _ = write!(
                        sql,
                        "(@fl_base + {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {ledger})",
                        offset + in_unit + 1,
                        lit(&s.aggregate_type),
                        lit(&s.aggregate_id),
                        e.sequence,
                        lit(&e.event_type),
                        e.event_version,
                        lit(&e.event_id.to_string()),
                        lit(&e.payload),
                        lit(&e.metadata),
                        lit(&e.correlation_id),
                        lit(&e.actor),
                        lit(&e.hash),
                        lit(&e.hash_key),
                        time_lit(&e.recorded_at),
                    );
                    in_unit += 1;
                }
                if split {
                    stmts.push((
                        format!("{INSERT_EVENTS}{sql}"),
                        Stmt::Events {
                            unit: u,
                            stream: si,
                        },
                    ));
                } else {
                    if !batch_rows.is_empty() {
                        batch_rows.push(',');
                    }
                    batch_rows.push_str(&sql);
                }
            }
            if unit.fail_after_streams == Some(unit.streams.len()) {
                stmts.push((
                    "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'fl_injected_failure'".into(),
                    Stmt::Inject(unit.streams.len()),
                ));
            }
            if let Some(idem) = &unit.idempotency {
                let (first, last) = if in_unit == 0 {
                    ("0".to_owned(), "0".to_owned())
                } else {
                    (
                        format!("@fl_base + {}", offset + 1),
                        format!("@fl_base + {}", offset + in_unit),
                    )
                };
                log.push_str(if log.is_empty() { "" } else { "," });
                let _ = write!(
                    log,
                    "({}, {}, {}, {first}, {last}, UTC_TIMESTAMP(6))",
                    lit(&idem.scope),
                    lit(&idem.key),
                    lit(&idem.request_hash)
                );
            }
            for s in &unit.snapshots {
                snaps.push_str(if snaps.is_empty() { "" } else { "," });
                let _ = write!(
                    snaps,
                    "({}, {}, {}, {}, {}, {}, UTC_TIMESTAMP(6))",
                    lit(&s.aggregate_type),
                    lit(&s.aggregate_id),
                    s.snapshot_version,
                    s.stream_version,
                    lit(&s.last_hash),
                    lit(&s.state)
                );
            }
            offset += in_unit;
        }
        // The key first: a repeated request is reported as such (and replayed by the
        // bus), not as a duplicate of the ledger refs it would write again.
        if !log.is_empty() {
            stmts.push((
                format!(
                    "INSERT INTO command_log (scope, idempotency_key, request_hash, \
                     first_position, last_position, created_at) VALUES {log}"
                ),
                Stmt::CommandLog,
            ));
        }
        if !batch_rows.is_empty() {
            stmts.push((
                format!("{INSERT_EVENTS}{batch_rows}"),
                Stmt::Events { unit: 0, stream: 0 },
            ));
        }
        let mut outbox = String::new();
        let mut next_outbox = 0usize;
        let mut plain_jobs = Vec::new();
        let mut fact_jobs = Vec::new();
        for unit in units {
            for o in &unit.outbox {
                next_outbox += 1;
                outbox.push_str(if outbox.is_empty() { "" } else { "," });
                let _ = write!(
                    outbox,
                    "(@fl_obase + {next_outbox}, {}, {}, {}, {}, {})",
                    lit(&o.aggregatetype),
                    lit(&o.aggregateid),
                    lit(&o.r#type),
                    lit(&o.payload),
                    chrono::Utc::now().timestamp_millis()
                );
            }
            for j in &unit.jobs {
                if j.fact_change {
                    fact_jobs.push(j);
                } else {
                    plain_jobs.push(j);
                }
            }
        }
        if !outbox.is_empty() {
            stmts.push((
                format!(
                    "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, \
                     created_at_ms) VALUES {outbox}"
                ),
                Stmt::Plain,
            ));
        }
        if !plain_jobs.is_empty() {
            stmts.push((jobs_insert(&plain_jobs, false), Stmt::Plain));
        }
        if !fact_jobs.is_empty() {
            stmts.push((jobs_insert(&fact_jobs, true), Stmt::Plain));
        }
        if !snaps.is_empty() {
            stmts.push((
                format!(
                    "INSERT INTO snapshots (aggregate_type, aggregate_id, snapshot_version, \
                     stream_version, last_hash, state, taken_at) VALUES {snaps} \
                     ON DUPLICATE KEY UPDATE snapshot_version = VALUES(snapshot_version), \
                     stream_version = VALUES(stream_version), last_hash = VALUES(last_hash), \
                     state = VALUES(state), taken_at = VALUES(taken_at)"
                ),
                Stmt::Plain,
            ));
        }
        debug_assert_eq!(offset, total);
        stmts.push(("COMMIT".into(), Stmt::Plain));
        Ok((stmts, offset))
    }
}

/// Submit jobs (R-JOB-2). Plain: create or reuse, never reset (`id = id` is a no-op
/// on a duplicate code). Fact change: new payload, generation + 1, and a job that is
/// not RUNNING revived to PENDING with retries 0, error cleared, due now; a RUNNING
/// one keeps running and goes back to PENDING when its round ends (the completion
/// sees the newer generation). MariaDB evaluates these assignments left to right, so
/// `status` is assigned last: every `IF` before it reads the old status.
pub(crate) fn jobs_insert(rows: &[&super::JobRow], fact_change: bool) -> String {
    let mut values = String::new();
    for j in rows {
        values.push_str(if values.is_empty() { "" } else { "," });
        let _ = write!(
            values,
            "({}, {}, {}, {}, 0, 0, {}, {}, 0, 0, 0, {}, {}, {}, {})",
            lit(&j.kind),
            lit(&j.code),
            lit(&j.business_key),
            lit(&j.payload),
            j.max_retry_count,
            j.due_at_ms,
            j.now_ms,
            j.now_ms,
            j.request_id
                .as_deref()
                .map_or_else(|| "NULL".to_owned(), lit),
            j.trace_id.as_deref().map_or_else(|| "NULL".to_owned(), lit),
        );
    }
    let on_duplicate = if fact_change {
        "payload = VALUES(payload), request_generation = request_generation + 1, \
         retry_count = IF(status = 1, retry_count, 0), \
         last_error = IF(status = 1, last_error, NULL), \
         first_failed_at_ms = IF(status = 1, first_failed_at_ms, NULL), \
         next_execute_at_ms = IF(status = 1, next_execute_at_ms, VALUES(next_execute_at_ms)), \
         request_id = VALUES(request_id), trace_id = VALUES(trace_id), \
         updated_at_ms = VALUES(updated_at_ms), status = IF(status = 1, 1, 0)"
    } else {
        "id = id"
    };
    format!(
        "INSERT INTO jobs (kind, code, business_key, payload, status, retry_count, \
         max_retry_count, next_execute_at_ms, request_generation, running_generation, \
         running_attempt, created_at_ms, updated_at_ms, request_id, trace_id) VALUES {values} \
         ON DUPLICATE KEY UPDATE {on_duplicate}"
    )
}

const INSERT_EVENTS: &str = "INSERT INTO events (global_position, aggregate_type, aggregate_id, \
     sequence, event_type, event_version, event_id, payload, metadata, correlation_id, actor, hash, \
     hash_key, recorded_at, ledger_ref_type, ledger_ref_id, ledger_entry_type) VALUES ";

/// Guarded streams checked set-wise at most (each row IN list stays below MariaDB's
/// default `in_predicate_conversion_threshold` of 1,000, so it is read as ranges);
/// a batch with more is checked stream by stream.
const GUARD_SET_ROWS_MAX: usize = 900;
/// @fl_bad of a set-wise guard that failed (which stream is asked afterwards): not
/// negative (a negative @fl_bad means the guard passed) and above any check index.
const GUARD_SET_FAILED: i64 = 1_000_000_000;

/// Index of the statement that reserves positions (its OK packet carries the new last
/// position): right after BEGIN.
const RESERVE_STATEMENT: usize = 1;

/// A string as a quoted SQL literal. Safe because every connection sets its SQL mode
/// without `NO_BACKSLASH_ESCAPES` (see `connect`) and talks utf8mb4, where no byte of
/// a multi-byte character can be a quote or a backslash. (Hex literals were as safe
/// but twice as long; the server parses these measurably faster.)
pub(crate) fn lit(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\0' => out.push_str("\\0"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\u{1a}' => out.push_str("\\Z"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

fn time_lit(t: &DateTime<Utc>) -> String {
    format!("'{}'", t.format("%Y-%m-%d %H:%M:%S%.6f"))
}

fn db_number(e: &sqlx::Error) -> Option<u16> {
    match e {
        sqlx::Error::Database(d) => d
            .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
            .map(|m| m.number()),
        _ => None,
    }
}

/// `failed_check` is the guard's @fl_bad when the guard failed; `stale_fence` the
/// fence found stale when the fence statement failed.
fn map_failure(
    units: &[UnitOfWork],
    kind: Option<&Stmt>,
    e: sqlx::Error,
    failed_check: Option<i64>,
    stale_fence: Option<super::Fence>,
) -> StoreError {
    let number = db_number(&e);
    if number.is_none() {
        return StoreError::OutcomeUnknown(e.to_string());
    }
    let first_stream = || {
        units
            .iter()
            .flat_map(|u| u.streams.iter())
            .find(|s| !s.events.is_empty())
    };
    let conflict = |unit: usize, stream: usize| {
        let s = units
            .get(unit)
            .and_then(|u| u.streams.get(stream))
            .or_else(first_stream);
        match s {
            Some(s) => StoreError::Conflict {
                aggregate_type: s.aggregate_type.clone(),
                aggregate_id: s.aggregate_id.clone(),
                expected_version: s.expected_version,
            },
            None => StoreError::Database(e.to_string()),
        }
    };
    match (kind, number) {
        (Some(Stmt::Events { .. }), Some(1062))
            if e.to_string().contains("uq_events_ledger_ref") =>
        {
            StoreError::DuplicateLedgerRef(match units {
                [one] => one
                    .ledger_refs
                    .iter()
                    .map(|r| format!("{}/{}/{}", r.ref_type, r.ref_id, r.entry_type))
                    .collect::<Vec<_>>()
                    .join(", "),
                _ => e.to_string(),
            })
        }
        (Some(Stmt::Events { unit, stream }), Some(1062)) => conflict(*unit, *stream),
        (Some(Stmt::StreamGuard(checked, _)), Some(1048)) => {
            let (unit, stream) = failed_check
                .and_then(|i| usize::try_from(i).ok())
                .and_then(|i| checked.get(i))
                .or(checked.first())
                .copied()
                .unwrap_or((0, 0));
            conflict(unit, stream)
        }
        (Some(Stmt::CommandLog), Some(1062)) => StoreError::DuplicateIdempotencyKey(e.to_string()),
        (Some(Stmt::Fences(fences)), Some(1048)) => {
            // `stale` is the fence found stale after the rollback (or the first).
            match stale_fence.or(fences.first().copied()) {
                Some(f) => StoreError::Fenced {
                    job_id: f.job_id,
                    running_attempt: f.running_attempt,
                },
                None => StoreError::Database(e.to_string()),
            }
        }
        (Some(Stmt::Inject(n)), _) => StoreError::Injected(*n),
        _ => StoreError::Database(e.to_string()),
    }
}

/// Run a multi-statement script; returns how many statements completed, the last
/// position reserved by [`RESERVE_STATEMENT`], and the error that stopped it, if any.
fn run_script<'c>(
    conn: &'c mut sqlx::MySqlConnection,
    sql: &'c str,
) -> futures::future::BoxFuture<'c, (usize, Option<i64>, Result<(), sqlx::Error>)> {
    Box::pin(async move {
        let mut done = 0usize;
        let mut last = None;
        let mut stream = sqlx::raw_sql(sql).fetch_many(conn);
        let result = loop {
            match stream.try_next().await {
                Ok(Some(Either::Left(r))) => {
                    if done == RESERVE_STATEMENT {
                        last = i64::try_from(r.last_insert_id()).ok();
                    }
                    done += 1;
                }
                Ok(Some(Either::Right(_))) => {}
                Ok(None) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        (done, last, result)
    })
}

/// The first fence whose job is not RUNNING with its attempt any more.
async fn stale_fence(
    conn: &mut sqlx::MySqlConnection,
    fences: &[super::Fence],
) -> Option<super::Fence> {
    let ids = fences
        .iter()
        .map(|f| f.job_id.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let sql = format!("SELECT id, status, running_attempt FROM jobs WHERE id IN ({ids})");
    let rows: Vec<(i64, i64, i64)> = sqlx::query_as(&sql).fetch_all(&mut *conn).await.ok()?;
    fences.iter().copied().find(|f| {
        !rows.iter().any(|&(id, status, attempt)| {
            id == f.job_id && status == 1 && attempt == f.running_attempt
        })
    })
}

fn rollback(
    conn: &mut sqlx::MySqlConnection,
) -> futures::future::BoxFuture<'_, Result<(), sqlx::Error>> {
    Box::pin(async move { sqlx::Executor::execute(conn, "ROLLBACK").await.map(|_| ()) })
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

/// Text of a column. Columns with a `_bin` collation (ids must be case-sensitive)
/// are reported with the binary flag, which sqlx will not decode as `String`; read
/// the bytes and check they are UTF-8.
pub(crate) fn text<I>(r: &MySqlRow, column: I) -> Result<String, sqlx::Error>
where
    I: sqlx::ColumnIndex<MySqlRow> + std::fmt::Display + Copy,
{
    let bytes: Vec<u8> = r.try_get(column)?;
    String::from_utf8(bytes).map_err(|e| sqlx::Error::ColumnDecode {
        index: column.to_string(),
        source: Box::new(e),
    })
}

/// Text of a nullable column (see [`text`]).
pub(crate) fn opt_text(r: &MySqlRow, column: usize) -> Result<Option<String>, sqlx::Error> {
    let bytes: Option<Vec<u8>> = r.try_get(column)?;
    bytes
        .map(|b| {
            String::from_utf8(b).map_err(|e| sqlx::Error::ColumnDecode {
                index: column.to_string(),
                source: Box::new(e),
            })
        })
        .transpose()
}

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

    async fn append(&self, units: &[UnitOfWork]) -> Result<Vec<CommittedUnit>, StoreError> {
        let (stmts, total) = Self::build(units)?;
        let sql = stmts
            .iter()
            .map(|(s, _)| s.as_str())
            .collect::<Vec<_>>()
            .join(";\n");
        let mut conn = self.pool.acquire().await.map_err(db_err)?;
        let (done, last, result) = run_script(&mut conn, &sql).await;
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
                let committed = units
                    .iter()
                    .map(|u| {
                        let n = u.event_count() as i64;
                        let positions = (next + 1..=next + n).collect();
                        next += n;
                        CommittedUnit { positions }
                    })
                    .collect();
                debug_assert_eq!(next - base, total as i64);
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
