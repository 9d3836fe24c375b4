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
    CommittedUnit, DynStore, EventView, Fence, IdempotencyRow, JobRow, LedgerRefRow, Metadata,
    StoreError, UnitOfWork, GENESIS_HASH, READ_LIMIT_MAX,
};
use factledger_aggregates::{Decide, InvariantViolation};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot};

mod seal;
pub(crate) use seal::seal_decided;

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

struct Pending<A: Decide> {
    env: CommandEnvelope<A::Command>,
    reply: oneshot::Sender<Reply<A>>,
    attempts: u32,
}

type Reply<A> = Result<CommandOutcome, Failure<<A as cqrs_es::Aggregate>::Error>>;

/// Failures inside the writer; `KeyRace` is resolved by the caller by reading the
/// winner's record.
enum Failure<E: std::error::Error> {
    Bus(BusError<E>),
    KeyRace,
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
    #[tracing::instrument(skip_all, fields(aggregate = A::TYPE, id = %env.aggregate_id))]
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
            env,
            reply,
            attempts: 0,
        };
        self.queue
            .send(pending)
            .await
            .map_err(|_| BusError::ShutDown)?;
        match rx.await.map_err(|_| BusError::ShutDown)? {
            Ok(outcome) => Ok(outcome),
            Err(Failure::Bus(e)) => Err(e),
            Err(Failure::KeyRace) => match &idem {
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

async fn writer_loop<A>(inner: Arc<Inner<A>>, mut rx: mpsc::Receiver<Pending<A>>)
where
    A: Decide + Clone + 'static,
    A::Command: Clone + Send + 'static,
    A::Event: Send,
    A::Error: Send + 'static,
{
    // Size of the previous batch: the callers it answered are likely to send their
    // next commands right away, so wait briefly for as many before committing.
    let mut expected = 1usize;
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        let mut yields = 0;
        loop {
            while batch.len() < BATCH_COMMANDS_MAX {
                match rx.try_recv() {
                    Ok(p) => batch.push(p),
                    Err(_) => break,
                }
            }
            if batch.len() >= expected.min(BATCH_COMMANDS_MAX) || yields >= LINGER_YIELDS_MAX {
                break;
            }
            yields += 1;
            tokio::task::yield_now().await;
        }
        expected = batch.len();
        metrics::histogram!("factledger_bus_batch_commands", "aggregate" => A::TYPE)
            .record(batch.len() as f64);
        let mut batch = batch;
        let mut retries = 0;
        let failed = loop {
            match try_batch(&inner, batch).await {
                None => break Vec::new(),
                // Another process moved a stream: no command is at fault, so re-decide
                // the whole batch on fresh state (the failed streams were evicted from
                // the cache) and keep group commit, instead of degrading every command
                // to a transaction of its own while the other process keeps writing.
                Some((failed, StoreError::Conflict { .. }))
                    if failed.len() > 1 && retries + 1 < CONFLICT_RETRIES_MAX =>
                {
                    retries += 1;
                    metrics::counter!("factledger_bus_conflict_retries_total", "aggregate" => A::TYPE)
                        .increment(1);
                    batch = failed;
                }
                Some((failed, _)) => break failed,
            }
        };
        // One transaction for all failed: re-run each alone so the culprit fails alone
        // and the others commit.
        for p in failed {
            run_single(&inner, p).await;
        }
    }
}

async fn run_single<A>(inner: &Inner<A>, mut p: Pending<A>)
where
    A: Decide + Clone,
    A::Command: Clone,
{
    loop {
        let Some((mut failed, err)) = try_batch(inner, vec![p]).await else {
            return;
        };
        let Some(back) = failed.pop() else { return };
        p = back;
        let failure = match err {
            StoreError::Conflict { .. } if p.attempts + 1 < CONFLICT_RETRIES_MAX => {
                p.attempts += 1;
                let ceiling_ms = (1u64 << p.attempts.min(6)).min(CONFLICT_BACKOFF_MS_MAX);
                let pause_us = rand::RngExt::random_range(&mut rand::rng(), 0..=ceiling_ms * 1000);
                tokio::time::sleep(std::time::Duration::from_micros(pause_us)).await;
                metrics::counter!("factledger_bus_conflict_retries_total", "aggregate" => A::TYPE)
                    .increment(1);
                continue;
            }
            StoreError::Conflict { .. } => Failure::Bus(BusError::Conflict(p.attempts + 1)),
            StoreError::DuplicateLedgerRef(r) => Failure::Bus(BusError::DuplicateLedgerRef(r)),
            StoreError::DuplicateIdempotencyKey(_) => Failure::KeyRace,
            other => Failure::Bus(BusError::Store(other)),
        };
        let _ = p.reply.send(Err(failure));
        return;
    }
}

struct Accepted<A: Decide> {
    pending: Pending<A>,
    unit: UnitOfWork,
    views: Vec<EventView>,
}

/// Decide every command of the batch and append all resulting units in one
/// transaction. Replies to every command it settles; returns the ones whose units
/// were in a failed append, with the error.
async fn try_batch<A>(
    inner: &Inner<A>,
    batch: Vec<Pending<A>>,
) -> Option<(Vec<Pending<A>>, StoreError)>
where
    A: Decide + Clone,
    A::Command: Clone,
{
    let mut work: HashMap<String, Loaded<A>> = HashMap::new();
    let mut accepted: Vec<Accepted<A>> = Vec::with_capacity(batch.len());
    let mut later: Vec<Pending<A>> = Vec::new();
    let mut keys = HashSet::new();
    let mut refs = HashSet::new();
    for p in batch {
        if let Some(idem) = &p.env.idempotency {
            if !keys.insert((idem.scope.clone(), idem.key.clone())) {
                // The same key twice in one batch: settle it after this batch, when
                // the first one's record is visible.
                later.push(p);
                continue;
            }
        }
        let id = p.env.aggregate_id.clone();
        if !work.contains_key(&id) {
            let cached = lock(&inner.cache).get(&id).cloned();
            let loaded = match cached {
                Some(l) => l,
                None => match load::<A>(&inner.store, &id).await {
                    Ok(l) => l,
                    Err(e) => {
                        let _ = p.reply.send(Err(Failure::Bus(e)));
                        continue;
                    }
                },
            };
            work.insert(id.clone(), loaded);
        }
        let Some(loaded) = work.get_mut(&id) else {
            continue;
        };
        match decide_one(inner.store.keyring().active(), loaded, &p.env, &mut refs) {
            Ok((unit, views)) => accepted.push(Accepted {
                pending: p,
                unit,
                views,
            }),
            Err(e) => {
                // A repeated request decided again after its twin committed (same key,
                // e.g. a second BlockWithdrawals) is refused by the new state: it is a
                // replay, not a refusal. The caller resolves KeyRace from the record.
                let failure = match &p.env.idempotency {
                    Some(idem) => {
                        match inner.store.find_idempotency(&idem.scope, &idem.key).await {
                            Ok(Some(_)) => Failure::KeyRace,
                            _ => Failure::Bus(e),
                        }
                    }
                    None => Failure::Bus(e),
                };
                let _ = p.reply.send(Err(failure));
            }
        }
    }
    let result = if accepted.is_empty() {
        Ok(Vec::new())
    } else {
        let units: Vec<UnitOfWork> = accepted.iter().map(|a| a.unit.clone()).collect();
        inner.store.append(&units).await
    };
    match result {
        Ok(committed) => {
            {
                let mut cache = lock(&inner.cache);
                if cache.len() + work.len() > CACHE_STREAMS_MAX {
                    cache.clear();
                }
                cache.extend(work);
            }
            for (a, c) in accepted.into_iter().zip(committed) {
                let _ = a.pending.reply.send(Ok(outcome(a.views, &c)));
            }
            for p in later {
                Box::pin(run_single(inner, p)).await;
            }
            None
        }
        Err(e) => {
            {
                let mut cache = lock(&inner.cache);
                for id in work.keys() {
                    cache.remove(id);
                }
            }
            let mut failed: Vec<Pending<A>> = accepted.into_iter().map(|a| a.pending).collect();
            failed.extend(later);
            Some((failed, e))
        }
    }
}

fn outcome(mut views: Vec<EventView>, committed: &CommittedUnit) -> CommandOutcome {
    for (v, p) in views.iter_mut().zip(&committed.positions) {
        v.global_position = *p;
    }
    CommandOutcome {
        position: committed.positions.last().copied().unwrap_or(0),
        events: views,
        replayed: false,
    }
}

/// Decide one command on the working state, check and apply its events, and seal
/// them into a unit of work.
fn decide_one<A>(
    key: &crate::infra::store::ChainKey,
    loaded: &mut Loaded<A>,
    env: &CommandEnvelope<A::Command>,
    refs: &mut HashSet<factledger_aggregates::decide::LedgerRef>,
) -> Result<(UnitOfWork, Vec<EventView>), BusError<A::Error>>
where
    A: Decide + Clone,
    A::Command: Clone,
{
    let events = loaded
        .state
        .decide(env.command.clone())
        .map_err(BusError::Domain)?;
    let sealed = seal_decided(key, loaded, &env.aggregate_id, &events, &env.metadata, refs)?;
    let unit = UnitOfWork {
        streams: vec![sealed.stream],
        ledger_refs: sealed
            .ledger_refs
            .into_iter()
            .map(|(i, r)| LedgerRefRow {
                ref_type: r.ref_type,
                ref_id: r.ref_id,
                entry_type: r.entry_type,
                event_index: i,
            })
            .collect(),
        idempotency: env.idempotency.clone(),
        snapshots: sealed.snapshot.into_iter().collect(),
        jobs: env.jobs.clone(),
        outbox: sealed.outbox,
        fence: env.fence,
        fail_after_streams: None,
    };
    Ok((unit, sealed.views))
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
