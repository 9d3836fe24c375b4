//! The event store (SPEC §2): streams of immutable events with per-stream sequences,
//! a store-wide global position a reader can trust, hash chains, snapshots,
//! idempotency records and unique ledger references.
//!
//! One trait, [`EventStore`], two backends: [`mysql::MysqlStore`] (production) and
//! [`sqlite::SqliteStore`] (embedded default). Everything above this module talks to
//! the trait only.

pub mod hash;
mod head;
pub mod integrity;
pub mod lookups;
mod metadata;
pub mod mysql;
mod open;
pub mod sqlite;
pub mod time;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use std::sync::Arc;

pub use hash::{ChainKey, Hashed, GENESIS_HASH, LEGACY_KEY_ID};
pub(crate) use head::observe_append;
pub use head::HeadSignal;
pub use integrity::Keyring;
pub use time::{time_text, time_text_ago};

/// Longest page any read returns; callers ask for less.
pub const READ_LIMIT_MAX: i64 = 1_000;

pub use metadata::Metadata;
pub use open::{connect, load_keyring, open, open_replica, open_with, Database};

/// An event ready to be written: ids, time and hash chain already fixed.
#[derive(Debug, Clone, PartialEq)]
pub struct SealedEvent {
    pub event_id: uuid::Uuid,
    pub sequence: i64,
    pub event_type: String,
    pub event_version: i32,
    /// JSON text of the payload, exactly as hashed and stored.
    pub payload: String,
    /// JSON text of the metadata (includes `event_id` and `recorded_at`).
    pub metadata: String,
    pub recorded_at: DateTime<Utc>,
    pub hash: String,
    /// The id of the chain key `hash` was made with (stored as `hash_key`).
    pub hash_key: String,
    /// Copied out of the metadata into indexed columns for audit queries.
    pub correlation_id: String,
    pub actor: String,
}

/// The events one unit appends to one stream, with the version it expects the
/// stream to be at (optimistic concurrency, SPEC R-ES-2).
#[derive(Debug, Clone, PartialEq)]
pub struct StreamAppend {
    pub aggregate_type: String,
    pub aggregate_id: String,
    /// The stream's version (= last sequence, 0 for a new stream) the events were
    /// decided on. The append fails with a conflict if the stream moved on.
    pub expected_version: i64,
    /// The hash of the event at `expected_version` (`GENESIS_HASH` for a new
    /// stream): the head is identified by its content, not only its number, so a
    /// different event that took the same sequence (another writer, or a batch
    /// decided on a speculative head that never committed) is a conflict too.
    pub expected_hash: String,
    pub events: Vec<SealedEvent>,
}

/// The unique business key of a ledger event (SPEC R-INV-1), stored on the event
/// row itself under a unique index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerRefRow {
    pub ref_type: String,
    pub ref_id: String,
    pub entry_type: String,
    /// Index of the event inside the unit (counting across its streams) that the
    /// reference belongs to; the reference is stored on that event's row.
    pub event_index: usize,
}

/// An idempotency record written in the same transaction as the append (R-ES-9).
///
/// Keys are scoped per caller, as Stripe scopes them per API key (issue 14 F6): the
/// same `Idempotency-Key` from two callers names two different commands, and a caller
/// never sees another's stored response nor is blocked by it. The record's primary
/// key is `(scope, key)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyRow {
    /// Whose key it is: the caller's actor (`key:<api key id>`), or an internal
    /// actor's own name (`job:…`, a process manager) — never shared between callers.
    pub scope: String,
    pub key: String,
    /// SHA-256 of the request (method, path and body).
    pub request_hash: String,
}

/// A snapshot written in the same transaction as the events it covers (R-ES-7).
#[derive(Debug, Clone, PartialEq)]
pub struct SnapshotRow {
    pub aggregate_type: String,
    pub aggregate_id: String,
    pub snapshot_version: i32,
    pub stream_version: i64,
    pub last_hash: String,
    pub state: String,
}

/// A job submitted in the same transaction as a unit's events (issue 4: "append the
/// fact and enqueue the follow-up" is one transaction). Built and validated by
/// `crate::infra::jobs::JobSubmit`; the store only writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRow {
    pub kind: String,
    pub code: String,
    /// As stored: the full key, or `<PREFIX>_BK:` + MD5 when it is too long.
    pub business_key: String,
    pub payload: String,
    pub max_retry_count: i32,
    /// When a new job becomes due (epoch ms): now, or later for a delayed job.
    pub due_at_ms: i64,
    /// A fact-change submit (R-JOB-2): an existing job gets the new payload and
    /// generation + 1, and a job that is not running is revived to PENDING (retries
    /// 0, error cleared, due now). A plain submit creates or reuses, never resets.
    pub fact_change: bool,
    /// The submit time (epoch ms).
    pub now_ms: i64,
    /// The request that submitted it (alerts carry them, R-MON-1).
    pub request_id: Option<String>,
    pub trace_id: Option<String>,
}

/// An outbox row (SPEC R-OUT-1, Debezium-style columns) written in the money
/// transaction; its dense id is assigned by the store under the append lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxRow {
    pub aggregatetype: String,
    pub aggregateid: String,
    pub r#type: String,
    /// JSON text.
    pub payload: String,
}

/// The claim a job handler's unit is fenced by (defined beside the fenced transaction).
pub use crate::infra::db::Fence;

/// Everything one business action writes: all of it or nothing (SPEC R-ES-3).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct UnitOfWork {
    pub streams: Vec<StreamAppend>,
    pub ledger_refs: Vec<LedgerRefRow>,
    pub idempotency: Option<IdempotencyRow>,
    pub snapshots: Vec<SnapshotRow>,
    /// Follow-up jobs submitted with the events.
    pub jobs: Vec<JobRow>,
    /// Messages for the outside world, relayed after commit.
    pub outbox: Vec<OutboxRow>,
    /// The job claim this unit's writes are fenced by, when a job handler writes it.
    pub fence: Option<Fence>,
    /// Test hook (R-ES-3 proof): fail the write after this many streams were
    /// written, before the unit commits. Always `None` in the service.
    pub fail_after_streams: Option<usize>,
}

impl UnitOfWork {
    pub fn event_count(&self) -> usize {
        self.streams.iter().map(|s| s.events.len()).sum()
    }

    /// The ledger reference of each event of the unit (in unit order), if any. At
    /// most one per event, and only for events the unit has.
    pub fn ledger_refs_by_event(&self) -> Result<Vec<Option<&LedgerRefRow>>, StoreError> {
        let mut out = vec![None; self.event_count()];
        for r in &self.ledger_refs {
            match out.get_mut(r.event_index) {
                Some(slot @ None) => *slot = Some(r),
                Some(Some(_)) => {
                    return Err(StoreError::Invalid(format!(
                        "two ledger references for event {} of one unit",
                        r.event_index
                    )))
                }
                None => {
                    return Err(StoreError::Invalid(format!(
                        "ledger reference for event {} of a unit of {} events",
                        r.event_index,
                        out.len()
                    )))
                }
            }
        }
        Ok(out)
    }
}

/// The global positions a committed unit received, in the order of its events
/// (streams in order, events in order within each stream).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CommittedUnit {
    pub positions: Vec<i64>,
}

/// What an audit query selects on (each has its index on `events`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventFilter {
    Correlation(String),
    Actor(String),
    /// Events of one type recorded in `[from, to)`.
    TypeBetween {
        event_type: String,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    },
}

impl EventFilter {
    /// The WHERE clause (both backends) and its text parameters in order; the time
    /// bounds of `TypeBetween` follow as the backend's time type.
    fn clause(&self) -> (&'static str, &str) {
        match self {
            EventFilter::Correlation(c) => ("correlation_id = ?", c),
            EventFilter::Actor(a) => ("actor = ?", a),
            EventFilter::TypeBetween { event_type, .. } => (
                "event_type = ? AND recorded_at >= ? AND recorded_at < ?",
                event_type,
            ),
        }
    }
}

/// An event as read back from the store.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredEvent {
    pub global_position: i64,
    pub aggregate_type: String,
    pub aggregate_id: String,
    pub sequence: i64,
    pub event_type: String,
    pub event_version: i32,
    pub event_id: String,
    pub payload: String,
    /// The metadata that has no column of its own (see [`stored_metadata`]).
    pub metadata: String,
    pub correlation_id: String,
    pub actor: String,
    pub hash: String,
    /// The id of the chain key the hash was made with ('' for legacy SHA-256 rows).
    pub hash_key: String,
    pub recorded_at: DateTime<Utc>,
}

/// Metadata as stored in the `metadata` column: only what has no column of its own
/// (`event_id`, `correlation_id`, `actor` and `recorded_at` are columns), absent
/// options left out. Rows stay small, which is most of an append's cost.
pub fn stored_metadata(m: &Metadata) -> String {
    let mut o = serde_json::Map::new();
    if let Some(c) = &m.causation_id {
        o.insert("causation_id".into(), Value::from(c.as_str()));
    }
    if let Some(c) = &m.command_id {
        o.insert("command_id".into(), Value::from(c.as_str()));
    }
    o.insert("request_id".into(), Value::from(m.request_id.as_str()));
    o.insert("trace_id".into(), Value::from(m.trace_id.as_str()));
    o.insert("country_code".into(), Value::from(m.country_code.as_str()));
    Value::Object(o).to_string()
}

/// The complete metadata of an event (SPEC R-ES-5) as clients see it: the stored
/// part plus the columns.
pub fn full_metadata(
    stored: &str,
    event_id: &str,
    correlation_id: &str,
    actor: &str,
    recorded_at: &DateTime<Utc>,
) -> Result<Value, serde_json::Error> {
    let mut o = match serde_json::from_str::<Value>(stored)? {
        Value::Object(o) => o,
        _ => serde_json::Map::new(),
    };
    o.insert("event_id".into(), Value::from(event_id));
    o.insert("correlation_id".into(), Value::from(correlation_id));
    o.insert("actor".into(), Value::from(actor));
    o.insert("recorded_at".into(), Value::from(time_text(recorded_at)));
    o.entry("causation_id").or_insert(Value::Null);
    o.entry("command_id").or_insert(Value::Null);
    Ok(Value::Object(o))
}

impl SealedEvent {
    /// Seal one event of a stream: metadata as stored, and the hash chained to
    /// `prev_hash` under `key`. `recorded_at` must already be truncated to microseconds.
    #[allow(clippy::too_many_arguments)]
    pub fn seal(
        key: &ChainKey,
        prev_hash: &str,
        aggregate_type: &str,
        aggregate_id: &str,
        sequence: i64,
        event_type: String,
        event_version: i32,
        payload: String,
        m: &Metadata,
        event_id: uuid::Uuid,
        recorded_at: DateTime<Utc>,
    ) -> SealedEvent {
        let metadata = stored_metadata(m);
        let id = event_id.to_string();
        let hash = key.hash(&Hashed {
            prev_hash,
            aggregate_type,
            aggregate_id,
            sequence,
            event_type: &event_type,
            event_version,
            event_id: &id,
            correlation_id: &m.correlation_id,
            actor: &m.actor,
            recorded_at: &time_text(&recorded_at),
            payload: &payload,
            metadata: &metadata,
        });
        SealedEvent {
            event_id,
            sequence,
            event_type,
            event_version,
            payload,
            metadata,
            recorded_at,
            hash,
            hash_key: key.id.clone(),
            correlation_id: m.correlation_id.clone(),
            actor: m.actor.clone(),
        }
    }
}

impl StoredEvent {
    /// The payload in its current shape (SPEC R-ES-6): stored events are never
    /// rewritten; old versions are upcast on read.
    pub fn current_payload(&self) -> Result<(i32, Value), StoreError> {
        let raw: Value = serde_json::from_str(&self.payload)
            .map_err(|e| StoreError::Corrupt(format!("event {}: {e}", self.global_position)))?;
        factledger_aggregates::upcast::upcast(
            &self.aggregate_type,
            &self.event_type,
            self.event_version,
            raw,
        )
        .map_err(|e| StoreError::Corrupt(e.to_string()))
    }

    /// Recompute this event's hash given its predecessor's, under the key its row
    /// names; `None` when the keyring does not hold that key.
    pub fn recompute_hash(&self, keyring: &Keyring, prev_hash: &str) -> Option<String> {
        keyring.hash_with(
            &self.hash_key,
            &Hashed {
                prev_hash,
                aggregate_type: &self.aggregate_type,
                aggregate_id: &self.aggregate_id,
                sequence: self.sequence,
                event_type: &self.event_type,
                event_version: self.event_version,
                event_id: &self.event_id,
                correlation_id: &self.correlation_id,
                actor: &self.actor,
                recorded_at: &time_text(&self.recorded_at),
                payload: &self.payload,
                metadata: &self.metadata,
            },
        )
    }
}

/// An event as clients see it: payload upcast to its current shape, metadata parsed.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct EventView {
    pub global_position: i64,
    pub aggregate_type: String,
    pub aggregate_id: String,
    pub sequence: i64,
    pub event_id: String,
    pub event_type: String,
    /// The version of `payload`'s shape after upcasting.
    pub event_version: i32,
    /// The version the event was written in (below `event_version` when it was upcast
    /// on read; stored events are never rewritten).
    pub stored_version: i32,
    #[schema(value_type = Object)]
    pub payload: Value,
    #[schema(value_type = Object)]
    pub metadata: Value,
    pub hash: String,
    pub recorded_at: DateTime<Utc>,
}

impl StoredEvent {
    pub fn view(&self) -> Result<EventView, StoreError> {
        let (event_version, payload) = self.current_payload()?;
        let metadata = full_metadata(
            &self.metadata,
            &self.event_id,
            &self.correlation_id,
            &self.actor,
            &self.recorded_at,
        )
        .map_err(|e| StoreError::Corrupt(format!("event {}: {e}", self.global_position)))?;
        Ok(EventView {
            global_position: self.global_position,
            aggregate_type: self.aggregate_type.clone(),
            aggregate_id: self.aggregate_id.clone(),
            sequence: self.sequence,
            event_id: self.event_id.clone(),
            event_type: self.event_type.clone(),
            event_version,
            stored_version: self.event_version,
            payload,
            metadata,
            hash: self.hash.clone(),
            recorded_at: self.recorded_at,
        })
    }
}

/// One stream as `EventStore::load_streams` read it.
#[derive(Debug, Clone)]
pub struct StreamTail {
    pub aggregate_id: String,
    pub snapshot: Option<StoredSnapshot>,
    /// Events after the snapshot's version, in sequence order.
    pub events: Vec<StoredEvent>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct StoredSnapshot {
    pub snapshot_version: i32,
    pub stream_version: i64,
    pub last_hash: String,
    pub state: String,
}

/// What an idempotency key recorded: the request's hash and the positions of the
/// events the original command produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyRecord {
    pub request_hash: String,
    pub first_position: i64,
    pub last_position: i64,
}

/// The first broken link of a hash chain (SPEC R-ES-8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct BrokenLink {
    pub aggregate_type: String,
    pub aggregate_id: String,
    pub sequence: i64,
    pub global_position: i64,
    pub expected_hash: String,
    pub stored_hash: String,
    pub reason: String,
}

/// What `verify` found (see `integrity::verify`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct VerifyReport {
    /// No finding at all.
    pub ok: bool,
    pub streams_checked: u64,
    pub events_checked: u64,
    /// The first broken link in stream order (the per-stream chains).
    pub first_broken: Option<BrokenLink>,
    /// The finding at the lowest position, with its kind.
    pub first: Option<integrity::IntegrityFinding>,
    /// Every finding, by position (at most `integrity::verify::FINDINGS_MAX`).
    pub findings: Vec<integrity::IntegrityFinding>,
    /// How many findings there are (exact).
    pub findings_count: u64,
    /// The `event_sequence` row: the last position handed out.
    pub head_position: i64,
    /// The highest position found walking the log.
    pub highest_position: i64,
    /// Rows sealed before chains were keyed (plain SHA-256).
    pub legacy_events: u64,
    /// Signed anchors the log was compared with.
    pub anchors_checked: u64,
    pub latest_anchor: Option<integrity::Anchor>,
    /// The anchor file read, when there was one.
    pub anchor_file: Option<String>,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// A stream was not at the expected version: someone else appended first.
    #[error("stream {aggregate_type}/{aggregate_id} is not at version {expected_version}")]
    Conflict {
        aggregate_type: String,
        aggregate_id: String,
        expected_version: i64,
    },
    /// The unique ledger index refused a reference (R-INV-1).
    #[error("ledger reference already exists: {0}")]
    DuplicateLedgerRef(String),
    /// Another request with the same idempotency key committed first.
    #[error("idempotency key already used: {0}")]
    DuplicateIdempotencyKey(String),
    /// The database refused the unit; it was rolled back.
    #[error("database error: {0}")]
    Database(String),
    /// The connection failed while the unit was in flight: it may or may not have
    /// committed. Callers re-read before deciding anything.
    #[error("outcome unknown: {0}")]
    OutcomeUnknown(String),
    /// The database could not be reached, or the connection broke, outside an
    /// append (a read, or taking a connection before the unit was sent): a passing
    /// condition, e.g. the database restarting. Appends cut off mid-way report
    /// [`StoreError::OutcomeUnknown`] instead.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// Stored data does not parse or contradicts itself.
    #[error("corrupt store data: {0}")]
    Corrupt(String),
    /// The unit itself is malformed (a bug in the caller); nothing was written.
    #[error("invalid unit of work: {0}")]
    Invalid(String),
    #[error("injected failure after {0} streams (test hook)")]
    Injected(usize),
    /// The unit was fenced by a job claim that is no longer current (the job is not
    /// RUNNING with that attempt any more: its lease was recovered, maybe re-claimed);
    /// nothing of the unit was written.
    #[error("fenced: job {job_id} is no longer RUNNING with attempt {running_attempt}; nothing was written")]
    Fenced { job_id: i64, running_attempt: i64 },
}

#[async_trait]
pub trait EventStore: Send + Sync + 'static {
    /// `"mysql"` or `"sqlite"`.
    fn backend(&self) -> &'static str;

    /// The integrity keys events are sealed with and verified against.
    fn keyring(&self) -> &Arc<Keyring>;

    /// Append several units in ONE transaction: all of them or none (group commit).
    /// Each unit's positions are contiguous and in unit order.
    async fn append(&self, units: &[UnitOfWork]) -> Result<Vec<CommittedUnit>, StoreError>;

    /// Events of one stream with `sequence >= from_sequence`, at most `limit`.
    async fn read_stream(
        &self,
        aggregate_type: &str,
        aggregate_id: &str,
        from_sequence: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError>;

    /// Events with `global_position > after_position` in global order, at most `limit`.
    async fn read_all(
        &self,
        after_position: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError>;

    /// Events with positions in `[first, last]`.
    async fn read_positions(&self, first: i64, last: i64) -> Result<Vec<StoredEvent>, StoreError>;

    /// Audit queries: events matching `filter` with `global_position > after`, in
    /// global order, at most `limit`. Each filter is served by an index.
    async fn find_events(
        &self,
        filter: &EventFilter,
        after_position: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError>;

    /// The version (last sequence) and last hash of a stream; `(0, GENESIS)` if empty.
    async fn stream_head(
        &self,
        aggregate_type: &str,
        aggregate_id: &str,
    ) -> Result<(i64, String), StoreError>;

    async fn load_snapshot(
        &self,
        aggregate_type: &str,
        aggregate_id: &str,
    ) -> Result<Option<StoredSnapshot>, StoreError>;

    /// What `bus::load` reads, for many streams of one type at once: each stream's
    /// snapshot (if any) and its events after the snapshot's version (all of them
    /// without one), in sequence order. Streams without events or snapshot are left
    /// out. The caller checks that the events continue the snapshot (a snapshot taken
    /// between the two reads shows as a gap) and loads such a stream alone.
    async fn load_streams(
        &self,
        aggregate_type: &str,
        aggregate_ids: &[String],
    ) -> Result<Vec<StreamTail>, StoreError> {
        let mut out = Vec::new();
        for id in aggregate_ids {
            let snapshot = self.load_snapshot(aggregate_type, id).await?;
            let mut from = snapshot.as_ref().map_or(0, |s| s.stream_version) + 1;
            let mut events = Vec::new();
            loop {
                let page = self
                    .read_stream(aggregate_type, id, from, READ_LIMIT_MAX)
                    .await?;
                let Some(last) = page.last() else { break };
                from = last.sequence + 1;
                events.extend(page);
            }
            if snapshot.is_some() || !events.is_empty() {
                out.push(StreamTail {
                    aggregate_id: id.clone(),
                    snapshot,
                    events,
                });
            }
        }
        Ok(out)
    }

    /// Delete every snapshot (they are an optimisation only). Returns how many.
    async fn delete_snapshots(&self) -> Result<u64, StoreError>;

    /// The database handle under the store (set-wise lookups: [`lookups`]).
    fn db(&self) -> crate::infra::db::Db;

    /// The highest position this process has appended, updated after every commit:
    /// projectors wait on it instead of polling the database (see [`HeadSignal`]).
    fn head_watch(&self) -> Option<tokio::sync::watch::Receiver<i64>> {
        None
    }

    /// The record of `key` in `scope` (see [`IdempotencyRow`]).
    async fn find_idempotency(
        &self,
        scope: &str,
        key: &str,
    ) -> Result<Option<IdempotencyRecord>, StoreError>;

    /// The streams in key order after `(after_type, after_id)`, at most `limit`
    /// (keyset paging for verify).
    async fn list_streams(
        &self,
        after: Option<(String, String)>,
        limit: i64,
    ) -> Result<Vec<(String, String)>, StoreError>;

    /// The highest global position committed so far.
    async fn head_position(&self) -> Result<i64, StoreError>;

    /// How many rows have a position up to `up_to`, and the highest of them (0 when
    /// none): positions are dense, so `count < up_to` means rows were deleted. One
    /// index scan, no payloads (reconciliation asks before every repair).
    async fn count_positions(&self, up_to: i64) -> Result<(i64, i64), StoreError>;

    /// Raw SQL access for tests and operators (e.g. planting tamper cases).
    async fn execute_raw(&self, sql: &str) -> Result<u64, StoreError>;
}

pub type DynStore = Arc<dyn EventStore>;

/// Whether `e` is the connection failing (refused, reset, pool exhausted or closed)
/// rather than the database refusing a statement: the request may succeed when
/// retried, so the API answers 503, not 500.
pub fn is_connection_failure(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        // A Galera node outside the primary component (1047) is as good as down.
        sqlx::Error::Database(_) => mysql::db_number(e) == Some(mysql::ER_UNKNOWN_COM_ERROR),
        _ => false,
    }
}

/// Whether `migrator` has anything to apply to a database whose `_sqlx_migrations`
/// rows are `applied` (`None`: no such table yet). Every migration applied with its
/// checksum: nothing, and `serve` can run as a user that may not change the schema
/// (issue 14 item 3); anything else goes to the migrator, which applies it or says
/// why not (a changed migration, a missing privilege: run `factledger migrate` as
/// the database owner).
pub(crate) fn migrations_pending(
    migrator: &sqlx::migrate::Migrator,
    applied: Option<Vec<(i64, Vec<u8>, bool)>>,
) -> bool {
    let Some(applied) = applied else {
        return true;
    };
    migrator
        .iter()
        .filter(|m| m.migration_type.is_up_migration())
        .any(|m| {
            !applied
                .iter()
                .any(|(v, checksum, ok)| *v == m.version && *ok && checksum[..] == m.checksum[..])
        })
}

/// Whether applying the pending migrations applies `version` (not yet applied with
/// success): the process that does is the one to run that version's one-time step
/// (`auth::seal_unsealed` for `auth::KEY_MAC_MIGRATION`).
pub(crate) fn applies(applied: &Option<Vec<(i64, Vec<u8>, bool)>>, version: i64) -> bool {
    !applied
        .iter()
        .flatten()
        .any(|(v, _, ok)| *v == version && *ok)
}

/// Verify one stream's chain, or every stream's and the whole log's without anchors
/// (see [`integrity::verify_log`] for the check against anchors).
pub async fn verify(
    store: &dyn EventStore,
    stream: Option<(&str, &str)>,
) -> Result<VerifyReport, StoreError> {
    integrity::verify_with(store, stream, &[]).await
}
