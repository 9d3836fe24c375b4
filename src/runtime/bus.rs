//! The command bus: load an aggregate (cache, snapshot + tail), decide, append.
//!
//! Throughput comes from *group commit*: one writer task per aggregate type takes
//! every command waiting in its queue (up to [`BATCH_COMMANDS_MAX`]), decides them in
//! order on in-memory state — so commands on one stream are serialized in-process
//! instead of thrashing on conflicts — and appends all their units in ONE database
//! transaction. Each command stays all-or-nothing for its own caller: if the batch
//! transaction fails, every command of it is re-run alone, so one bad command only
//! fails itself.
//!
//! Conflicts with other processes (another `serve` on the same database) surface as
//! `StoreError::Conflict`: a stream's head is no longer the event (number and hash)
//! the command was decided on. A conflicting batch is re-decided as a whole on freshly
//! loaded state, a single command up to [`CONFLICT_RETRIES_MAX`] times with jittered
//! backoff, then reported as `CONCURRENCY_CONFLICT`.

use crate::infra::store::{
    DynStore, EventView, Fence, IdempotencyRow, JobRow, Metadata, StoreError, GENESIS_HASH,
    READ_LIMIT_MAX,
};
use factledger_aggregates::{Decide, InvariantViolation};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot};

mod batch;
mod pipeline;
mod seal;
mod writer;
pub use batch::{BatchItemDone, BATCH_ITEMS_MAX};
use pipeline::writer_loop;
pub(crate) use seal::seal_decided;
use writer::{Failure, Pending};

/// Most commands one group-commit transaction carries. Bounded so one transaction
/// stays short (latency) and its SQL stays well below `max_allowed_packet`.
pub const BATCH_COMMANDS_MAX: usize = 256;
/// How many times the writer yields, at most, waiting for the callers of the
/// previous batch to send their next commands (a few microseconds each; bounded so a
/// caller that went away costs nothing noticeable).
pub const LINGER_YIELDS_MAX: u32 = 64;
/// Commands waiting for the writer; callers wait (back-pressure) beyond this.
pub const QUEUE_COMMANDS_MAX: usize = 4_096;
/// Re-decisions on fresh state after a concurrency conflict before giving up.
pub const CONFLICT_RETRIES_MAX: u32 = 10;
/// Upper bound of the random pause before a re-decision (doubles per attempt from
/// 1 ms), so two processes colliding on one stream fall out of step.
pub const CONFLICT_BACKOFF_MS_MAX: u64 = 32;
/// A snapshot is written with the events every this many events of a stream (at the
/// earliest: not before the events since the last one are as large as it).
pub const SNAPSHOT_EVERY_EVENTS: i64 = 100;
/// Streams kept in the in-memory cache; the cache is dropped when it grows past it.
pub const CACHE_STREAMS_MAX: usize = 100_000;

/// One command for one aggregate, with its metadata.
#[derive(Debug, Clone)]
pub struct CommandEnvelope<C> {
    pub aggregate_id: String,
    pub command: C,
    pub metadata: Metadata,
    pub idempotency: Option<IdempotencyRow>,
    /// Follow-up jobs submitted in the same transaction as the events.
    pub jobs: Vec<JobRow>,
    /// Set when a job handler sends the command: the unit commits only while that
    /// claim is current (else `StoreError::Fenced`, nothing written).
    pub fence: Option<Fence>,
}

impl<C> CommandEnvelope<C> {
    /// A command with its metadata; no idempotency key, follow-ups or fence.
    pub fn new(aggregate_id: impl Into<String>, command: C, metadata: Metadata) -> Self {
        Self {
            aggregate_id: aggregate_id.into(),
            command,
            metadata,
            idempotency: None,
            jobs: Vec::new(),
            fence: None,
        }
    }
}

/// What a command did: its events with their global positions.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CommandOutcome {
    pub events: Vec<EventView>,
    /// The global position of the last event (read-your-writes token).
    pub position: i64,
    /// True when this is the stored result of an earlier request with the same
    /// idempotency key.
    pub replayed: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum BusError<E: std::error::Error> {
    #[error(transparent)]
    Domain(E),
    #[error("stream kept changing under the command; gave up after {0} attempts")]
    Conflict(u32),
    #[error("idempotency key was already used with a different request")]
    IdempotencyMismatch,
    #[error("ledger reference already exists: {0}")]
    DuplicateLedgerRef(String),
    #[error("stored events contradict the aggregate: {0}")]
    Invariant(#[from] InvariantViolation),
    #[error(transparent)]
    Store(StoreError),
    #[error("command bus is shut down")]
    ShutDown,
    /// An item of an atomic batch that was not applied because item `0` (its index in
    /// the request) was refused: nothing of the batch was written.
    #[error("not applied: item {0} of the atomic batch was refused")]
    Aborted(usize),
}

/// An aggregate's state as loaded: what it is, at which version, and the last hash
/// of its chain.
#[derive(Debug, Clone)]
pub struct Loaded<A> {
    pub state: A,
    pub version: i64,
    pub last_hash: String,
    pub events_since_snapshot: i64,
    /// Size of the stream's last snapshot (0 without one).
    pub snapshot_bytes: i64,
    /// Payload bytes of the events since that snapshot.
    pub bytes_since_snapshot: i64,
}

struct Inner<A: Decide> {
    store: DynStore,
    cache: Mutex<HashMap<String, Loaded<A>>>,
}

pub struct CommandBus<A: Decide> {
    inner: Arc<Inner<A>>,
    queue: mpsc::Sender<Pending<A>>,
}

impl<A: Decide> Clone for CommandBus<A> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            queue: self.queue.clone(),
        }
    }
}

impl<A> CommandBus<A>
where
    A: Decide + Clone + 'static,
    A::Command: Clone + Send + 'static,
    A::Event: Send,
    A::Error: Send + 'static,
{
    /// Start the writer task of this aggregate type.
    pub fn start(store: DynStore) -> Self {
        let inner = Arc::new(Inner {
            store,
            cache: Mutex::new(HashMap::new()),
        });
        let (queue, rx) = mpsc::channel(QUEUE_COMMANDS_MAX);
        tokio::spawn(writer_loop(inner.clone(), rx));
        Self { inner, queue }
    }

    /// Execute one command: decide on current state and append durably.
    #[tracing::instrument(level = "debug", skip_all, fields(aggregate = A::TYPE, id = %env.aggregate_id))]
    pub async fn execute(
        &self,
        env: CommandEnvelope<A::Command>,
    ) -> Result<CommandOutcome, BusError<A::Error>> {
        let idem = env.idempotency.clone();
        if let Some(idem) = &idem {
            if let Some(done) = self.replay(idem).await? {
                return Ok(done);
            }
        }
        let (reply, rx) = oneshot::channel();
        let pending = Pending {
            envs: vec![env],
            reply,
            attempts: 0,
        };
        self.queue
            .send(pending)
            .await
            .map_err(|_| BusError::ShutDown)?;
        match rx.await.map_err(|_| BusError::ShutDown)? {
            Ok(mut outcomes) => outcomes.pop().ok_or_else(|| {
                BusError::Store(StoreError::Corrupt("the writer answered no outcome".into()))
            }),
            Err((_, Failure::Bus(e))) => Err(e),
            Err((_, Failure::KeyRace)) => match &idem {
                Some(idem) => self.replay(idem).await?.ok_or_else(|| {
                    BusError::Store(StoreError::Corrupt(format!(
                        "idempotency key {} collided but has no record",
                        idem.key
                    )))
                }),
                None => Err(BusError::Store(StoreError::Corrupt(
                    "idempotency race without a key".into(),
                ))),
            },
        }
    }

    /// The stored result of an idempotency key, if it was used before.
    async fn replay(
        &self,
        idem: &IdempotencyRow,
    ) -> Result<Option<CommandOutcome>, BusError<A::Error>> {
        let store = &self.inner.store;
        let Some(rec) = store
            .find_idempotency(&idem.scope, &idem.key)
            .await
            .map_err(BusError::Store)?
        else {
            return Ok(None);
        };
        if rec.request_hash != idem.request_hash {
            return Err(BusError::IdempotencyMismatch);
        }
        let events = store
            .read_positions(rec.first_position, rec.last_position)
            .await
            .map_err(BusError::Store)?;
        let events = events
            .iter()
            .map(|e| e.view())
            .collect::<Result<Vec<_>, _>>()
            .map_err(BusError::Store)?;
        Ok(Some(CommandOutcome {
            position: rec.last_position,
            events,
            replayed: true,
        }))
    }

    /// Current state of one aggregate (cache if warm, else snapshot + tail).
    pub async fn state(&self, aggregate_id: &str) -> Result<Loaded<A>, BusError<A::Error>> {
        if let Some(hit) = lock(&self.inner.cache).get(aggregate_id) {
            return Ok(hit.clone());
        }
        load(&self.inner.store, aggregate_id).await
    }

    /// Forget every cached aggregate (tests; after operator surgery on the database).
    pub fn clear_cache(&self) {
        lock(&self.inner.cache).clear();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding the cache lock cannot leave it half-updated (inserts and
    // removes are single operations), so a poisoned lock is still usable.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Load an aggregate from its latest usable snapshot plus the events after it.
pub async fn load<A: Decide + Clone>(
    store: &DynStore,
    aggregate_id: &str,
) -> Result<Loaded<A>, BusError<A::Error>> {
    let snapshot = store
        .load_snapshot(A::TYPE, aggregate_id)
        .await
        .map_err(BusError::Store)?;
    let mut loaded = from_snapshot::<A>(snapshot.as_ref());
    loop {
        let page = store
            .read_stream(A::TYPE, aggregate_id, loaded.version + 1, READ_LIMIT_MAX)
            .await
            .map_err(BusError::Store)?;
        if page.is_empty() {
            return Ok(loaded);
        }
        fold(&mut loaded, &page)?;
    }
}

/// The state of an aggregate as of stream version `version` (its first `version`
/// events), for a read that must agree with a projection row of that version: a
/// value taken from the row and one taken from the stream then describe the same
/// moment (`GET /v1/wallets/{id}`: the balances and what the frozen bucket is made
/// of). From the latest snapshot when it is not past `version`, else from the start
/// of the stream (only a read racing a snapshot: one in `SNAPSHOT_EVERY_EVENTS`).
/// The answer's `version` is lower than asked only for a stream that is shorter.
pub async fn load_at<A: Decide + Clone>(
    store: &DynStore,
    aggregate_id: &str,
    version: i64,
) -> Result<Loaded<A>, BusError<A::Error>> {
    let snapshot = store
        .load_snapshot(A::TYPE, aggregate_id)
        .await
        .map_err(BusError::Store)?
        .filter(|s| s.stream_version <= version);
    let mut loaded = from_snapshot::<A>(snapshot.as_ref());
    while loaded.version < version {
        let limit = (version - loaded.version).min(READ_LIMIT_MAX);
        let page = store
            .read_stream(A::TYPE, aggregate_id, loaded.version + 1, limit)
            .await
            .map_err(BusError::Store)?;
        if page.is_empty() {
            break;
        }
        fold(&mut loaded, &page)?;
    }
    Ok(loaded)
}

/// Load many aggregates of one type at once (`EventStore::load_streams`: two round
/// trips on MariaDB). A stream whose snapshot is unusable, or whose events do not
/// continue it (a snapshot written between the two reads), is loaded alone with
/// [`load`]. Every id asked for is in the answer (a stream never written is the
/// default state at version 0).
pub async fn load_many<A: Decide + Clone>(
    store: &DynStore,
    aggregate_ids: &[String],
) -> Result<HashMap<String, Loaded<A>>, BusError<A::Error>> {
    let tails = store
        .load_streams(A::TYPE, aggregate_ids)
        .await
        .map_err(BusError::Store)?;
    let mut out: HashMap<String, Loaded<A>> = HashMap::with_capacity(aggregate_ids.len());
    for tail in tails {
        let mut loaded = from_snapshot::<A>(tail.snapshot.as_ref());
        let continues = tail.snapshot.as_ref().map_or(0, |s| s.stream_version) == loaded.version
            && tail
                .events
                .iter()
                .zip(loaded.version + 1..)
                .all(|(e, want)| e.sequence == want);
        let loaded = if continues {
            fold(&mut loaded, &tail.events)?;
            loaded
        } else {
            load::<A>(store, &tail.aggregate_id).await?
        };
        out.insert(tail.aggregate_id, loaded);
    }
    for id in aggregate_ids {
        if !out.contains_key(id) {
            out.insert(id.clone(), from_snapshot::<A>(None));
        }
    }
    Ok(out)
}

/// The state a usable snapshot holds, else the empty stream.
fn from_snapshot<A: Decide + Clone>(
    snapshot: Option<&crate::infra::store::StoredSnapshot>,
) -> Loaded<A> {
    let mut loaded = Loaded {
        state: A::default(),
        version: 0,
        last_hash: GENESIS_HASH.to_owned(),
        events_since_snapshot: 0,
        snapshot_bytes: 0,
        bytes_since_snapshot: 0,
    };
    if let Some(s) = snapshot.filter(|s| s.snapshot_version == A::SNAPSHOT_VERSION) {
        if let Ok(state) = serde_json::from_str::<A>(&s.state) {
            loaded.state = state;
            loaded.version = s.stream_version;
            loaded.last_hash = s.last_hash.clone();
            loaded.snapshot_bytes = s.state.len() as i64;
        }
    }
    loaded
}

/// Check and apply stored events (the next ones of the stream, in order).
fn fold<A: Decide + Clone>(
    loaded: &mut Loaded<A>,
    events: &[crate::infra::store::StoredEvent],
) -> Result<(), BusError<A::Error>> {
    let Some(last) = events.last() else {
        return Ok(());
    };
    let (last_sequence, last_hash) = (last.sequence, last.hash.clone());
    for stored in events {
        let (_, payload) = stored.current_payload().map_err(BusError::Store)?;
        let event: A::Event = serde_json::from_value(payload).map_err(|e| {
            BusError::Store(StoreError::Corrupt(format!(
                "event {} does not decode: {e}",
                stored.global_position
            )))
        })?;
        loaded.state.check(&event)?;
        loaded.state.apply(event);
        loaded.events_since_snapshot += 1;
        loaded.bytes_since_snapshot += stored.payload.len() as i64;
    }
    loaded.version = last_sequence;
    loaded.last_hash = last_hash;
    Ok(())
}

/// A bus failure inside a job round: a store failure keeps its retry class.
impl<E: std::error::Error> From<BusError<E>> for crate::infra::jobs::JobFailure {
    fn from(e: BusError<E>) -> Self {
        match e {
            BusError::Store(s) => s.into(),
            other => crate::infra::jobs::JobFailure::new(other.to_string()),
        }
    }
}
