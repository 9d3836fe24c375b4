//! Building one MariaDB append: the statements of a batch of units as one
//! multi-statement text query (see `store::mysql` for the round trip), each tagged
//! with what it does ([`Stmt`]) so a failure maps back to its stream, its ledger
//! reference or its fence. The steps: the stream guard and the sequence lock
//! ([`guard`]), the fences ([`fences`]), the events with their command log and
//! snapshot rows ([`event_rows`]), then outbox rows and jobs ([`outbox_and_jobs`]).

use crate::infra::store::{Fence, JobRow, StoreError, StreamAppend, UnitOfWork};
use chrono::{DateTime, Utc};
use std::fmt::Write as _;

/// What each statement of an append does, to map a failure back to its meaning.
#[derive(Debug, Clone)]
pub(super) enum Stmt {
    Plain,
    /// The (unit, stream) of each stream whose head is checked, and, when the guard
    /// was checked set-wise (@fl_bad = [`GUARD_SET_FAILED`]), the query that names
    /// the first stream that failed.
    StreamGuard(Vec<(usize, usize)>, Option<String>),
    Events {
        unit: usize,
        stream: usize,
    },
    /// The batch's events as one prepared INSERT with bound values ([`Bound`]): its
    /// text in the list is empty, the executor runs [`Bound::sql`] in its place.
    BoundEvents,
    CommandLog,
    /// The outbox rows, whose ids come from the sequence row's reservation.
    Outbox,
    Inject(usize),
    /// The fences of the batch's units.
    Fences(Vec<Fence>),
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
pub(super) const GUARD_SET_FAILED: i64 = 1_000_000_000;

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

pub(super) fn time_lit(t: &DateTime<Utc>) -> String {
    format!("'{}'", t.format("%Y-%m-%d %H:%M:%S%.6f"))
}

/// Submit jobs (R-JOB-2). Plain: create or reuse, never reset (`id = id` is a no-op
/// on a duplicate code). Fact change: new payload, generation + 1, and a job that is
/// not RUNNING revived to PENDING with retries 0, error cleared, due now; a RUNNING
/// one keeps running and goes back to PENDING when its round ends (the completion
/// sees the newer generation). MariaDB evaluates these assignments left to right, so
/// `status` is assigned last: every `IF` before it reads the old status.
pub(crate) fn jobs_insert(rows: &[&JobRow], fact_change: bool) -> String {
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

/// One append: its statements in order (see [`Stmt`]), and its events as bound rows
/// when they go as a prepared statement.
pub(super) struct Script<'a> {
    pub(super) stmts: Vec<(String, Stmt)>,
    pub(super) bound: Option<Bound<'a>>,
    /// Events the append writes.
    pub(super) total: usize,
}

/// The statements of one append of `units`, and how many events they write.
pub(super) fn build(units: &[UnitOfWork], bind_min: usize) -> Result<Script<'_>, StoreError> {
    let total: usize = units.iter().map(UnitOfWork::event_count).sum();
    let split = units.iter().any(|u| u.fail_after_streams.is_some());
    let bind = !split && total > 0 && total >= bind_min;
    let mut stmts: Vec<(String, Stmt)> = vec![("BEGIN".into(), Stmt::Plain)];
    let (bad, checked, diagnose) = guard(units);
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
    stmts.extend(fences(units));
    let rows = event_rows(units, &mut stmts, bind)?;
    let Rows {
        log,
        snaps,
        batch_rows,
        ..
    } = &rows;
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
    let bound = if bind {
        stmts.push((String::new(), Stmt::BoundEvents));
        Some(Bound::of(units)?)
    } else {
        if !batch_rows.is_empty() {
            stmts.push((
                format!("{INSERT_EVENTS}{batch_rows}"),
                Stmt::Events { unit: 0, stream: 0 },
            ));
        }
        None
    };
    outbox_and_jobs(units, &mut stmts);
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
    debug_assert_eq!(rows.offset, total);
    stmts.push(("COMMIT".into(), Stmt::Plain));
    Ok(Script {
        stmts,
        bound,
        total: rows.offset,
    })
}

/// The per-stream head checks of a batch, in both forms (see [`guard`]).
#[derive(Default)]
struct Checks {
    /// `WHEN <failed> THEN <index>` per checked stream.
    cases: String,
    /// The (unit, stream) of each check, by index.
    checked: Vec<(usize, usize)>,
    /// `(type, id, sequence)` that must not exist: the event after each expected head.
    after_rows: String,
    /// `(type, id, sequence, hash)` that must exist: each expected head.
    head_rows: String,
    heads: usize,
    set_wise: bool,
}

/// The guard of an append: @fl_bad's expression, the checks it names, and (when the
/// check is set-wise) the query that names the stream that failed.
fn guard(units: &[UnitOfWork]) -> (String, Vec<(usize, usize)>, Option<String>) {
    let c = stream_checks(units);
    // Set-wise, the guard is two range reads of the stream index (row IN lists,
    // which MariaDB reads as ranges up to `in_predicate_conversion_threshold`
    // elements) instead of one or two subqueries per stream, each parsed and
    // optimized on its own (most of the server's time in a page of ingest).
    // It only says whether some check failed; which one is asked after the
    // rollback with the per-stream CASE (`diagnose`). Streams only grow, so a
    // check that failed under the lock still fails then (but a head that was
    // missing may have appeared: then the first checked stream is named).
    let set_wise = c.set_wise && !c.checked.is_empty() && c.checked.len() <= GUARD_SET_ROWS_MAX;
    let per_stream = format!("CASE{} ELSE -1 END", c.cases);
    let (bad, diagnose) = if c.checked.is_empty() {
        ("-1".to_owned(), None)
    } else if set_wise {
        let heads_ok = if c.heads == 0 {
            String::new()
        } else {
            format!(
                " OR (SELECT COUNT(*) FROM events WHERE (aggregate_type, aggregate_id, \
                 sequence, hash) IN ({})) <> {}",
                c.head_rows, c.heads
            )
        };
        (
            format!(
                "IF(EXISTS (SELECT 1 FROM events WHERE (aggregate_type, aggregate_id, \
                 sequence) IN ({})){heads_ok}, {GUARD_SET_FAILED}, -1)",
                c.after_rows
            ),
            Some(format!("SELECT CAST({per_stream} AS SIGNED)")),
        )
    } else {
        (per_stream, None)
    };
    (bad, c.checked, diagnose)
}

fn stream_checks(units: &[UnitOfWork]) -> Checks {
    // Guard: every stream must be at exactly the head its first append in this
    // batch expects (checked as MAX(sequence), one index dive per stream, while
    // taking the sequence lock, so nothing can move it until COMMIT); a later
    // append to the same stream in this batch must continue exactly where the
    // previous one ends (its rows do not exist yet when the guard runs). @fl_bad is
    // the index of the first failed check, -1 if none; the UPDATE below writes
    // NULL into a NOT NULL column (strict mode: error 1048) when a check failed,
    // which fails the unit before anything is inserted, and `append` reads
    // @fl_bad back to name the stream.
    let mut c = Checks {
        set_wise: true,
        ..Checks::default()
    };
    // The same checks set-wise (see below): `(type, id, sequence)` that must not
    // exist (the event after each stream's expected head) and `(type, id,
    // sequence, hash)` that must (each expected head).
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
                c.set_wise = false;
                Some("TRUE".to_owned())
            }
            // The head must be exactly the event decided on (number and hash),
            // with nothing after it. (The unique key would refuse "after" too,
            // but here the failure names its stream.)
            None => {
                let (t, i) = (lit(&s.aggregate_type), lit(&s.aggregate_id));
                let _ = write!(
                    c.after_rows,
                    "{}({t}, {i}, {})",
                    if c.after_rows.is_empty() { "" } else { ", " },
                    s.expected_version + 1
                );
                if s.expected_version != 0 {
                    let _ = write!(
                        c.head_rows,
                        "{}({t}, {i}, {}, {})",
                        if c.head_rows.is_empty() { "" } else { ", " },
                        s.expected_version,
                        lit(&s.expected_hash)
                    );
                    c.heads += 1;
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
            let _ = write!(c.cases, " WHEN {bad} THEN {}", c.checked.len());
            c.checked.push((u, si));
        }
    }
    c
}

/// The fences of the batch's units, checked in ONE statement.
fn fences(units: &[UnitOfWork]) -> Option<(String, Stmt)> {
    // Fences, right after the sequence lock (lock order: sequence, then job rows,
    // as for jobs submitted in a unit; claims and completions take job rows only),
    // in ONE statement for the batch. A claim that is no longer current writes
    // NULL into a NOT NULL column: strict mode makes that error 1048 and the whole
    // batch rolls back (the bus then re-runs its units one by one, so only the
    // stale one fails). The UPDATE also locks the job rows to COMMIT, so a lease
    // cannot be recovered and re-claimed between this check and the commit.
    let fences: Vec<Fence> = units.iter().filter_map(|u| u.fence).collect();
    if fences.is_empty() {
        return None;
    }
    {
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
        Some((
            format!("UPDATE jobs SET fenced_writes = {case} WHERE id IN ({ids})"),
            Stmt::Fences(fences),
        ))
    }
}

/// What [`event_rows`] gathered besides its statements.
struct Rows {
    /// Command-log rows (idempotency keys), written before the events.
    log: String,
    /// Snapshot rows.
    snaps: String,
    /// The events of all units.
    offset: usize,
    /// The events of the batch as one multi-row INSERT's values (empty when split).
    batch_rows: String,
}

/// The event rows of every unit (one multi-row INSERT unless a unit injects a
/// failure between its streams), and their command-log and snapshot rows.
fn event_rows(
    units: &[UnitOfWork],
    stmts: &mut Vec<(String, Stmt)>,
    bind: bool,
) -> Result<Rows, StoreError> {
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
            if bind {
                in_unit += s.events.len();
                continue;
            }
            let sql = stream_rows(s, &refs, offset, &mut in_unit);
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
    Ok(Rows {
        log,
        snaps,
        offset,
        batch_rows,
    })
}

/// The rows of one stream's events, numbered after `offset + in_unit`.
fn stream_rows(
    s: &StreamAppend,
    refs: &[Option<&crate::infra::store::LedgerRefRow>],
    offset: usize,
    in_unit: &mut usize,
) -> String {
    let mut sql = String::new();
    for e in &s.events {
        if !sql.is_empty() {
            sql.push(',');
        }
        let ledger = match refs.get(*in_unit).copied().flatten() {
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
            offset + *in_unit + 1,
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
        *in_unit += 1;
    }
    sql
}

/// Outbox rows (ids reserved by the sequence lock) and the jobs the units submit.
fn outbox_and_jobs(units: &[UnitOfWork], stmts: &mut Vec<(String, Stmt)>) {
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
            Stmt::Outbox,
        ));
    }
    if !plain_jobs.is_empty() {
        stmts.push((jobs_insert(&plain_jobs, false), Stmt::Plain));
    }
    if !fact_jobs.is_empty() {
        stmts.push((jobs_insert(&fact_jobs, true), Stmt::Plain));
    }
}

/// Events per append from which they go as one prepared multi-row INSERT with bound
/// values instead of escaped literals in the script ([`BIND_EVENTS_MIN_DEFAULT`],
/// or `FACTLEDGER_MYSQL_BIND_EVENTS_MIN`; 0 binds every append). See `store::mysql`.
pub(super) fn bind_events_min() -> usize {
    static MIN: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *MIN.get_or_init(|| {
        std::env::var("FACTLEDGER_MYSQL_BIND_EVENTS_MIN")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(BIND_EVENTS_MIN_DEFAULT)
    })
}

/// See [`bind_events_min`]: measured with `bench ingest` and `bench commands`
/// (issue 19 note).
pub const BIND_EVENTS_MIN_DEFAULT: usize = 64;

/// Rows per prepared INSERT of [`Bound`]: a batch's rows go greedily in chunks of
/// these sizes, so every statement has one of five shapes and stays prepared in the
/// connection's statement cache (a statement of any other row count would be
/// prepared — parsed — anew each time, which costs what binding saves).
const BOUND_CHUNK_ROWS: [usize; 5] = [256, 64, 16, 4, 1];

/// One event row's values, borrowed from its unit.
struct BoundRow<'a> {
    /// 1-based index in the batch: the row's position is `@fl_base + n`.
    n: i64,
    stream: &'a StreamAppend,
    event: &'a crate::infra::store::SealedEvent,
    ledger: Option<&'a crate::infra::store::LedgerRefRow>,
}

/// The events of a batch as INSERTs with bound values (see [`BOUND_CHUNK_ROWS`]).
pub(super) struct Bound<'a> {
    rows: Vec<BoundRow<'a>>,
}

/// The INSERT of `rows` bound rows.
fn bound_insert(rows: usize) -> &'static str {
    static SQL: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let all = SQL.get_or_init(|| {
        BOUND_CHUNK_ROWS
            .iter()
            .map(|&n| {
                let row = "(@fl_base + ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
                format!("{INSERT_EVENTS}{}", vec![row; n].join(", "))
            })
            .collect()
    });
    let i = BOUND_CHUNK_ROWS.iter().position(|&n| n == rows);
    all[i.expect("a chunk size")].as_str()
}

impl<'a> Bound<'a> {
    fn of(units: &'a [UnitOfWork]) -> Result<Bound<'a>, StoreError> {
        let mut rows = Vec::new();
        for unit in units {
            let refs = unit.ledger_refs_by_event()?;
            let mut in_unit = 0usize;
            for s in &unit.streams {
                for event in &s.events {
                    rows.push(BoundRow {
                        n: rows.len() as i64 + 1,
                        stream: s,
                        event,
                        ledger: refs.get(in_unit).copied().flatten(),
                    });
                    in_unit += 1;
                }
            }
        }
        Ok(Bound { rows })
    }

    /// The INSERTs, their values bound, in order.
    pub(super) fn queries(
        &self,
    ) -> Vec<sqlx::query::Query<'_, sqlx::MySql, sqlx::mysql::MySqlArguments>> {
        let mut out = Vec::new();
        let mut rest = &self.rows[..];
        while !rest.is_empty() {
            let n = BOUND_CHUNK_ROWS
                .into_iter()
                .find(|&n| n <= rest.len())
                .unwrap_or(1);
            let (chunk, more) = rest.split_at(n);
            rest = more;
            let mut q = sqlx::query(bound_insert(n));
            for r in chunk {
                let (s, e) = (r.stream, r.event);
                q = q
                    .bind(r.n)
                    .bind(s.aggregate_type.as_str())
                    .bind(s.aggregate_id.as_str())
                    .bind(e.sequence)
                    .bind(e.event_type.as_str())
                    .bind(e.event_version)
                    .bind(e.event_id.to_string())
                    .bind(e.payload.as_str())
                    .bind(e.metadata.as_str())
                    .bind(e.correlation_id.as_str())
                    .bind(e.actor.as_str())
                    .bind(e.hash.as_str())
                    .bind(e.hash_key.as_str())
                    .bind(e.recorded_at.naive_utc())
                    .bind(r.ledger.map(|l| l.ref_type.as_str()))
                    .bind(r.ledger.map(|l| l.ref_id.as_str()))
                    .bind(r.ledger.map(|l| l.entry_type.as_str()));
            }
            out.push(q);
        }
        out
    }
}
