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

use crate::bus::{load, seal_decided, BusError, Loaded};
use crate::store::{
    CommittedUnit, DynStore, EventView, Fence, IdempotencyRow, JobRow, LedgerRefRow, Metadata,
    OutboxRow, SnapshotRow, StoreError, StreamAppend, UnitOfWork,
};
use factledger_aggregates::decide::LedgerRef;
use factledger_aggregates::Decide;
use std::collections::HashSet;
use std::future::Future;

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
        }
    }

    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    pub fn store(&self) -> &DynStore {
        &self.store
    }

    /// Load a stream's current state (snapshot + tail) to decide on.
    pub async fn load<A: Decide + Clone, E: std::error::Error + From<A::Error>>(
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
        let sealed = seal_decided(loaded, aggregate_id, events, &self.metadata, &mut self.refs)
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
                let pause_us = rand::Rng::gen_range(&mut rand::thread_rng(), 0..=ceiling_ms * 1000);
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
async fn moved_since(
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
    A: Decide + Clone,
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
