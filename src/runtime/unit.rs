//! Multi-stream units of work (SPEC R-ES-3): one business action that appends to
//! several streams of several aggregate types — an order with its commissions, the
//! campaign quota and the wallets (R-ORD-2) — in ONE transaction, all or nothing.
//!
//! The command bus serves one aggregate type with group commit; a unit here is built
//! by the caller, decision by decision, each on the state of its own stream:
//!
//! ```text
//! run_unit(store, |mut unit| async move {
//!     let mut order = unit.load::<AffiliateOrder>("tiktok:1").await?;   // business root first
//!     let events = unit.decide(&mut order, "tiktok:1", command)?;      // R-WAL-3 lock order
//!     let mut wallet = unit.load::<Wallet>("w-1").await?;
//!     unit.decide(&mut wallet, "w-1", credit)?;
//!     Ok((outcome, unit))
//! })
//! ```
//!
//! Every stream states the head it was decided on, so a concurrent writer makes the
//! append fail with a conflict; [`run_unit`] then runs the whole closure again on
//! freshly loaded state, at most [`UNIT_CONFLICT_RETRIES_MAX`] times. A decision that
//! is refused ends the unit with nothing written.
//!
//! **Architecture invariant:** the order in which a unit loads and decides its streams
//! is the lock order of R-WAL-3 (business root, then entitlement/campaign, then
//! wallets sorted by id); the store appends streams in that order.

use crate::infra::store::{
    CommittedUnit, DynStore, EventView, Fence, IdempotencyRow, JobRow, LedgerRefRow, Metadata,
    OutboxRow, SnapshotRow, StoreError, StreamAppend, UnitOfWork,
};
use crate::runtime::bus::{load, seal_decided, BusError, Loaded};
use factledger_aggregates::decide::LedgerRef;
use factledger_aggregates::Decide;
use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Mutex;

/// Re-runs of a whole unit after a concurrency conflict before giving up.
pub const UNIT_CONFLICT_RETRIES_MAX: u32 = 10;
/// Upper bound of the random pause before a re-run, so two processes colliding on
/// one stream fall out of step.
pub const UNIT_CONFLICT_BACKOFF_MS_MAX: u64 = 32;
/// Streams one unit may touch: an order, its commissions, a campaign and a few
/// wallets need far fewer; a bound keeps one transaction short.
pub const UNIT_STREAMS_MAX: usize = 64;

/// Why a unit did not commit. Nothing of it was written.
#[derive(Debug, thiserror::Error)]
pub enum UnitError<E: std::error::Error> {
    /// The business refused (a domain error of whichever aggregate decided).
    #[error(transparent)]
    Refused(E),
    #[error("streams kept changing under the unit; gave up after {0} attempts")]
    Conflict(u32),
    #[error("ledger reference already exists: {0}")]
    DuplicateLedgerRef(String),
    #[error("the unit touches more than {UNIT_STREAMS_MAX} streams")]
    TooManyStreams,
    #[error("stored events contradict the aggregate: {0}")]
    Invariant(String),
    #[error(transparent)]
    Store(StoreError),
}

impl<E: std::error::Error> UnitError<E> {
    /// Carry a bus error of an aggregate whose domain errors convert into `E`.
    pub fn from_bus<F: std::error::Error + Into<E>>(e: BusError<F>) -> Self {
        match e {
            BusError::Domain(d) => UnitError::Refused(d.into()),
            BusError::Conflict(n) => UnitError::Conflict(n),
            BusError::DuplicateLedgerRef(r) => UnitError::DuplicateLedgerRef(r),
            BusError::Invariant(v) => UnitError::Invariant(v.0),
            BusError::Store(s) => UnitError::Store(s),
            other => UnitError::Store(StoreError::Invalid(other.to_string())),
        }
    }
}

/// One stream's part of the unit.
struct Part {
    stream: StreamAppend,
    /// Ledger references by the index of their event within `stream`.
    ledger_refs: Vec<(usize, LedgerRef)>,
    snapshot: Option<SnapshotRow>,
    /// The events as clients see them, in stream order (positions come in unit
    /// order: part by part).
    views: Vec<EventView>,
}

/// A unit being built: decisions sealed onto their streams, plus the jobs, outbox
/// rows, idempotency record and fence that commit with them.
pub struct UnitBuilder {
    store: DynStore,
    metadata: Metadata,
    parts: Vec<Part>,
    refs: HashSet<LedgerRef>,
    jobs: Vec<JobRow>,
    outbox: Vec<OutboxRow>,
    idempotency: Option<IdempotencyRow>,
    fence: Option<Fence>,
    fail_after_streams: Option<usize>,
    /// Every stream this attempt loaded and the version it saw: a refusal decided on
    /// a stream that has moved since is not a refusal but a stale read (see
    /// [`run_unit`]).
    loads: Loads,
    /// Set when the unit is one of a group decided together (see [`WorkingSet`]).
    group: Option<Mutex<GroupUse>>,
}

/// `(aggregate type, id)` of a stream.
type Key = (String, String);

/// One stream of a working set.
struct Slot {
    /// `Loaded<A>`, boxed by type; `None` while a unit has taken it.
    state: Option<Box<dyn Any + Send>>,
    /// The version the store had when the group read it.
    base: i64,
    /// The version of `state`.
    current: i64,
    /// Events of an accepted unit of the group are on it (not in the store yet).
    written: bool,
}

/// The streams a group of units (one ingest page) decides on, in memory: each unit
/// of the group sees the state the units before it left (decided, not yet in the
/// store), so the group's units can be appended together in ONE transaction, each
/// stream's events chained from one unit to the next. What came from the store is
/// read once per group. A unit that is refused leaves nothing in it: the streams it
/// touched are dropped (read again from the store when needed), and if one of them
/// holds events of an earlier unit of the group that are not in the store yet, the
/// group cannot go on ([`UnitBuilder::leave_group`] says so) and the caller runs its
/// units one by one instead.
#[derive(Default)]
pub struct WorkingSet {
    streams: HashMap<Key, Slot>,
}

/// Committed states kept from one group to the next (only of the aggregate types the
/// caller names: streams every group writes, such as the campaign and wallets, so a
/// stale one makes the append fail with a conflict instead of deciding on it). Like
/// the bus cache: filled only after a commit, taken out whole by the next group, so a
/// failed group leaves nothing in it.
#[derive(Default)]
pub struct StreamCache {
    streams: HashMap<Key, Slot>,
}

impl StreamCache {
    pub fn len(&self) -> usize {
        self.streams.len()
    }

    pub fn is_empty(&self) -> bool {
        self.streams.is_empty()
    }

    /// Keep the newer state of each stream.
    pub fn merge(&mut self, other: StreamCache) {
        if self.streams.is_empty() {
            self.streams = other.streams;
            return;
        }
        for (key, slot) in other.streams {
            match self.streams.get(&key) {
                Some(have) if have.current > slot.current => {}
                _ => {
                    self.streams.insert(key, slot);
                }
            }
        }
    }
}

impl WorkingSet {
    /// Add a stream read from the store (a prefetch); one already known is kept.
    pub fn insert<A: Decide + Clone + 'static>(&mut self, aggregate_id: &str, loaded: Loaded<A>) {
        let key = (A::TYPE.to_owned(), aggregate_id.to_owned());
        if self.streams.contains_key(&key) {
            return;
        }
        self.streams.insert(
            key,
            Slot {
                base: loaded.version,
                current: loaded.version,
                state: Some(Box::new(loaded)),
                written: false,
            },
        );
    }

    /// Whether the group knows this stream already.
    pub fn contains(&self, aggregate_type: &str, aggregate_id: &str) -> bool {
        self.streams
            .contains_key(&(aggregate_type.to_owned(), aggregate_id.to_owned()))
    }

    /// A working set that starts from committed states of earlier groups (no copy).
    pub fn from_cache(cache: StreamCache) -> WorkingSet {
        WorkingSet {
            streams: cache.streams,
        }
    }

    /// After the group committed: the states of the streams of these types (all
    /// committed now), for the next group.
    pub fn into_cache(mut self, types: &[&str]) -> StreamCache {
        self.streams.retain(|key, slot| {
            slot.base = slot.current;
            slot.written = false;
            slot.state.is_some() && types.contains(&key.0.as_str())
        });
        StreamCache {
            streams: self.streams,
        }
    }
}

/// A unit's use of its group's working set.
struct GroupUse {
    set: WorkingSet,
    /// Streams taken out by [`UnitBuilder::take`] and not put back yet.
    taken: HashSet<Key>,
}

/// `(aggregate type, id, version seen)` of each load of an attempt.
type Loads = std::sync::Arc<std::sync::Mutex<Vec<(&'static str, String, i64)>>>;

impl UnitBuilder {
    pub fn new(store: DynStore, metadata: Metadata) -> UnitBuilder {
        UnitBuilder {
            store,
            metadata,
            parts: Vec::new(),
            refs: HashSet::new(),
            jobs: Vec::new(),
            outbox: Vec::new(),
            idempotency: None,
            fence: None,
            fail_after_streams: None,
            loads: Loads::default(),
            group: None,
        }
    }

    /// A unit of a group: it decides on the group's working set (see [`WorkingSet`]).
    pub fn in_group(store: DynStore, metadata: Metadata, set: WorkingSet) -> UnitBuilder {
        let mut unit = UnitBuilder::new(store, metadata);
        unit.group = Some(Mutex::new(GroupUse {
            set,
            taken: HashSet::new(),
        }));
        unit
    }

    /// Leave the group: the working set for the group's next unit, with this unit's
    /// decisions if it is `accepted`, without them if it was refused. `None` when the
    /// set lost a stream the group wrote (the caller must drop the group's
    /// decisions). `None` too for a unit outside a group.
    pub fn leave_group(&mut self, accepted: bool) -> Option<WorkingSet> {
        let GroupUse { mut set, taken } = self
            .group
            .take()?
            .into_inner()
            .unwrap_or_else(|p| p.into_inner());
        for key in &taken {
            // Taken out and never put back: its state is gone; fine only if the
            // store still has all of it.
            let written = set.streams.get(key).is_some_and(|s| s.written);
            let touched = self
                .parts
                .iter()
                .any(|p| p.stream.aggregate_type == key.0 && p.stream.aggregate_id == key.1);
            if written || (accepted && touched) {
                return None;
            }
            set.streams.remove(key);
        }
        for p in &self.parts {
            let key = (
                p.stream.aggregate_type.clone(),
                p.stream.aggregate_id.clone(),
            );
            match set.streams.get_mut(&key) {
                Some(slot) if accepted => slot.written = true,
                Some(slot) if slot.written => return None,
                Some(_) => {
                    set.streams.remove(&key);
                }
                // Taken and not put back: handled above.
                None => {}
            }
        }
        Some(set)
    }

    /// Streams this unit loaded with the version the store had (for a refusal: did
    /// any move since? see [`moved_since`]).
    pub fn seen(&self) -> Vec<(&'static str, String, i64)> {
        self.loads.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// In a group: the stream's state in the working set (taken out, or a copy),
    /// `None` outside a group or when the set does not hold it yet.
    fn group_state<A: Decide + Clone + 'static, E: std::error::Error>(
        &self,
        aggregate_id: &str,
        take: bool,
    ) -> Result<Option<Loaded<A>>, UnitError<E>> {
        let Some(group) = &self.group else {
            return Ok(None);
        };
        let mut group = group.lock().unwrap_or_else(|p| p.into_inner());
        let key = (A::TYPE.to_owned(), aggregate_id.to_owned());
        if group.taken.contains(&key) {
            return Err(UnitError::Invariant(format!(
                "{} {aggregate_id} loaded again before it was put back",
                A::TYPE
            )));
        }
        let wrong = || UnitError::Invariant(format!("{} {aggregate_id}: wrong type", A::TYPE));
        let found = match group.set.streams.get_mut(&key) {
            Some(slot) => {
                let base = slot.base;
                let state: Option<Result<Loaded<A>, ()>> = if take {
                    slot.state
                        .take()
                        .map(|b| b.downcast::<Loaded<A>>().map(|l| *l).map_err(|_| ()))
                } else {
                    slot.state
                        .as_ref()
                        .map(|b| b.downcast_ref::<Loaded<A>>().cloned().ok_or(()))
                };
                match state {
                    Some(Ok(l)) => Some((l, base)),
                    Some(Err(_)) => return Err(wrong()),
                    None => None,
                }
            }
            None => None,
        };
        if take {
            group.taken.insert(key);
        }
        drop(group);
        Ok(found.map(|(loaded, base)| {
            self.loads.lock().unwrap_or_else(|p| p.into_inner()).push((
                A::TYPE,
                aggregate_id.to_owned(),
                base,
            ));
            loaded
        }))
    }

    /// Take a stream out of the group's working set to decide on (no copy); put it
    /// back with [`UnitBuilder::put_back`] once decided. Outside a group, `load`.
    pub async fn take<A: Decide + Clone + 'static, E: std::error::Error + From<A::Error>>(
        &self,
        aggregate_id: &str,
    ) -> Result<Loaded<A>, UnitError<E>> {
        if let Some(found) = self.group_state::<A, E>(aggregate_id, true)? {
            return Ok(found);
        }
        let loaded = self.load_store::<A, E>(aggregate_id).await?;
        if let Some(group) = &self.group {
            let mut group = group.lock().unwrap_or_else(|p| p.into_inner());
            // Held by the unit until put back.
            group.set.streams.insert(
                (A::TYPE.to_owned(), aggregate_id.to_owned()),
                Slot {
                    state: None,
                    base: loaded.version,
                    current: loaded.version,
                    written: false,
                },
            );
        }
        Ok(loaded)
    }

    /// Give a taken stream back to the group's working set (nothing outside a group).
    pub fn put_back<A: Decide + Clone + 'static>(&self, aggregate_id: &str, loaded: Loaded<A>) {
        if let Some(group) = &self.group {
            let mut group = group.lock().unwrap_or_else(|p| p.into_inner());
            let key = (A::TYPE.to_owned(), aggregate_id.to_owned());
            group.taken.remove(&key);
            let current = loaded.version;
            match group.set.streams.get_mut(&key) {
                Some(slot) => {
                    slot.current = current;
                    slot.state = Some(Box::new(loaded));
                }
                None => {
                    group.set.streams.insert(
                        key,
                        Slot {
                            state: Some(Box::new(loaded)),
                            base: current,
                            current,
                            written: false,
                        },
                    );
                }
            }
        }
    }

    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    pub fn store(&self) -> &DynStore {
        &self.store
    }

    /// Load a stream's current state (snapshot + tail) to decide on.
    /// In a group, a copy of the working set's state (read from the store once).
    pub async fn load<A: Decide + Clone + 'static, E: std::error::Error + From<A::Error>>(
        &self,
        aggregate_id: &str,
    ) -> Result<Loaded<A>, UnitError<E>> {
        if let Some(found) = self.group_state::<A, E>(aggregate_id, false)? {
            return Ok(found);
        }
        let loaded = self.load_store::<A, E>(aggregate_id).await?;
        if let Some(group) = &self.group {
            let mut group = group.lock().unwrap_or_else(|p| p.into_inner());
            group.set.insert(aggregate_id, loaded.clone());
        }
        Ok(loaded)
    }

    async fn load_store<A: Decide + Clone, E: std::error::Error + From<A::Error>>(
        &self,
        aggregate_id: &str,
    ) -> Result<Loaded<A>, UnitError<E>> {
        let loaded = load::<A>(&self.store, aggregate_id)
            .await
            .map_err(UnitError::from_bus)?;
        self.loads.lock().unwrap_or_else(|p| p.into_inner()).push((
            A::TYPE,
            aggregate_id.to_owned(),
            loaded.version,
        ));
        Ok(loaded)
    }

    /// Decide a command on a loaded stream, seal its events into the unit and move
    /// the loaded state on (so a second decision on the same stream sees the first).
    /// A refusal leaves the unit as it was.
    pub fn decide<A, E>(
        &mut self,
        loaded: &mut Loaded<A>,
        aggregate_id: &str,
        command: A::Command,
    ) -> Result<Vec<A::Event>, UnitError<E>>
    where
        A: Decide + Clone,
        E: std::error::Error + From<A::Error>,
    {
        let events = loaded
            .state
            .decide(command)
            .map_err(|e| UnitError::Refused(e.into()))?;
        self.append(loaded, aggregate_id, &events)?;
        Ok(events)
    }

    /// Seal events decided elsewhere (already known valid for `loaded`).
    pub fn append<A, E>(
        &mut self,
        loaded: &mut Loaded<A>,
        aggregate_id: &str,
        events: &[A::Event],
    ) -> Result<(), UnitError<E>>
    where
        A: Decide + Clone,
        E: std::error::Error + From<A::Error>,
    {
        if events.is_empty() {
            return Ok(());
        }
        let same =
            |p: &Part| p.stream.aggregate_type == A::TYPE && p.stream.aggregate_id == aggregate_id;
        if !self.parts.iter().any(same) && self.parts.len() >= UNIT_STREAMS_MAX {
            return Err(UnitError::TooManyStreams);
        }
        let key = self.store.keyring().active().clone();
        let sealed = seal_decided(
            &key,
            loaded,
            aggregate_id,
            events,
            &self.metadata,
            &mut self.refs,
        )
        .map_err(UnitError::from_bus)?;
        self.outbox.extend(sealed.outbox);
        match self.parts.iter_mut().find(|p| same(p)) {
            // The same stream again: its events continue the chain of the first part.
            Some(part) => {
                let base = part.stream.events.len();
                part.stream.events.extend(sealed.stream.events);
                part.ledger_refs
                    .extend(sealed.ledger_refs.into_iter().map(|(i, r)| (base + i, r)));
                if sealed.snapshot.is_some() {
                    part.snapshot = sealed.snapshot;
                }
                part.views.extend(sealed.views);
            }
            None => self.parts.push(Part {
                stream: sealed.stream,
                ledger_refs: sealed.ledger_refs,
                snapshot: sealed.snapshot,
                views: sealed.views,
            }),
        }
        Ok(())
    }

    /// A follow-up job committed with the unit (kick it after commit).
    pub fn job(&mut self, job: JobRow) {
        self.jobs.push(job);
    }

    /// A message for the outside world committed with the unit.
    pub fn outbox(&mut self, row: OutboxRow) {
        self.outbox.push(row);
    }

    pub fn idempotency(&mut self, row: IdempotencyRow) {
        self.idempotency = Some(row);
    }

    /// Fence the unit by a job's claim: it commits only while the claim is current.
    pub fn fence(&mut self, fence: Fence) {
        self.fence = Some(fence);
    }

    /// Test hook (acceptance case 3): the store fails the unit after writing this many
    /// streams, before it commits. Never set in the service.
    #[doc(hidden)]
    pub fn fail_after_streams(&mut self, streams: usize) {
        self.fail_after_streams = Some(streams);
    }

    /// True when no decision produced an event and nothing else is to be written.
    pub fn is_empty(&self) -> bool {
        self.parts.is_empty() && self.jobs.is_empty() && self.outbox.is_empty()
    }

    /// The unit to append and the events it holds, in unit order.
    pub fn finish(self) -> (UnitOfWork, Vec<EventView>) {
        let mut unit = UnitOfWork {
            idempotency: self.idempotency,
            jobs: self.jobs,
            outbox: self.outbox,
            fence: self.fence,
            fail_after_streams: self.fail_after_streams,
            ..Default::default()
        };
        let mut base = 0;
        let mut views = Vec::new();
        for part in self.parts {
            views.extend(part.views);
            unit.ledger_refs
                .extend(part.ledger_refs.into_iter().map(|(i, r)| LedgerRefRow {
                    ref_type: r.ref_type,
                    ref_id: r.ref_id,
                    entry_type: r.entry_type,
                    event_index: base + i,
                }));
            base += part.stream.events.len();
            unit.snapshots.extend(part.snapshot);
            unit.streams.push(part.stream);
        }
        (unit, views)
    }
}

/// What a committed unit wrote.
#[derive(Debug, Clone)]
pub struct UnitOutcome<T> {
    /// What the closure returned with the unit.
    pub value: T,
    /// The events, with their global positions.
    pub events: Vec<EventView>,
    /// Global position of the last event (0 when the unit appended no event).
    pub position: i64,
    /// How many attempts it took (1 without conflicts).
    pub attempts: u32,
}

/// Build a unit with `build` and append it; on a concurrency conflict build it again
/// on fresh state (bounded, jittered backoff). A unit with nothing to write is not
/// appended.
///
/// A refusal is final only if every stream the attempt loaded is still at the version
/// it saw: a unit that loads one stream, then another that a concurrent unit has just
/// changed, may be refused on a mix of old and new state (a settler that read a
/// commission as PENDING and its wallet after another settler released it). Such a
/// refusal is a conflict, and the unit is built again.
pub async fn run_unit<T, E, F, Fut>(
    store: &DynStore,
    metadata: &Metadata,
    mut build: F,
) -> Result<UnitOutcome<T>, UnitError<E>>
where
    E: std::error::Error,
    F: FnMut(UnitBuilder) -> Fut,
    Fut: Future<Output = Result<(T, UnitBuilder), UnitError<E>>>,
{
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let builder = UnitBuilder::new(store.clone(), metadata.clone());
        let loads = builder.loads.clone();
        let (value, builder) = match build(builder).await {
            Ok(built) => built,
            Err(UnitError::Refused(e)) if attempts < UNIT_CONFLICT_RETRIES_MAX => {
                let seen = std::mem::take(&mut *loads.lock().unwrap_or_else(|p| p.into_inner()));
                if moved_since(store, &seen).await.map_err(UnitError::Store)? {
                    metrics::counter!("factledger_unit_conflict_retries_total").increment(1);
                    continue;
                }
                return Err(UnitError::Refused(e));
            }
            Err(e) => return Err(e),
        };
        if builder.is_empty() {
            return Ok(UnitOutcome {
                value,
                events: Vec::new(),
                position: 0,
                attempts,
            });
        }
        let (unit, mut events) = builder.finish();
        match store.append(std::slice::from_ref(&unit)).await {
            Ok(committed) => {
                let committed = committed.into_iter().next().unwrap_or(CommittedUnit {
                    positions: Vec::new(),
                });
                for (e, p) in events.iter_mut().zip(&committed.positions) {
                    e.global_position = *p;
                }
                return Ok(UnitOutcome {
                    value,
                    position: committed.positions.last().copied().unwrap_or(0),
                    events,
                    attempts,
                });
            }
            Err(StoreError::Conflict { .. }) if attempts < UNIT_CONFLICT_RETRIES_MAX => {
                let ceiling_ms = (1u64 << attempts.min(6)).min(UNIT_CONFLICT_BACKOFF_MS_MAX);
                let pause_us = rand::RngExt::random_range(&mut rand::rng(), 0..=ceiling_ms * 1000);
                tokio::time::sleep(std::time::Duration::from_micros(pause_us)).await;
                metrics::counter!("factledger_unit_conflict_retries_total").increment(1);
            }
            Err(StoreError::Conflict { .. }) => return Err(UnitError::Conflict(attempts)),
            Err(StoreError::DuplicateLedgerRef(r)) => return Err(UnitError::DuplicateLedgerRef(r)),
            Err(e) => return Err(UnitError::Store(e)),
        }
    }
}

/// Whether any of these streams has an event after the version that was seen.
pub async fn moved_since(
    store: &DynStore,
    seen: &[(&'static str, String, i64)],
) -> Result<bool, StoreError> {
    for (aggregate_type, id, version) in seen {
        if !store
            .read_stream(aggregate_type, id, version + 1, 1)
            .await?
            .is_empty()
        {
            return Ok(true);
        }
    }
    Ok(false)
}

/// One command on one stream as its own unit (reference data, manual actions): load,
/// decide, append; re-decided on fresh state after a conflict.
pub async fn run_command<A>(
    store: &DynStore,
    metadata: &Metadata,
    aggregate_id: &str,
    command: A::Command,
) -> Result<UnitOutcome<Vec<A::Event>>, UnitError<A::Error>>
where
    A: Decide + Clone + 'static,
    A::Command: Clone,
{
    run_unit(store, metadata, |mut unit| {
        let command = command.clone();
        async move {
            let mut loaded = unit.load::<A, A::Error>(aggregate_id).await?;
            let events = unit.decide::<A, A::Error>(&mut loaded, aggregate_id, command)?;
            Ok((events, unit))
        }
    })
    .await
}
