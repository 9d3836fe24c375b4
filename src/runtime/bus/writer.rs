//! Deciding and appending one batch of the writer task (the task's loop:
//! [`super::pipeline`]).
//!
//! A queued [`Pending`] is one command, or the items of an atomic batch (all or
//! nothing, in order). A batch is decided in passes on the streams' pre-batch
//! states: once the commands are decided, the ledger references they take are looked
//! up in one query, and a command holding one already stored is refused there and
//! then and the rest decided again (pure CPU) — so a retried delivery costs one
//! indexed read, and the other commands of its batch still commit together instead of
//! falling back to a transaction each.

use super::{
    load, load_many, lock, seal_decided, BusError, CommandEnvelope, CommandOutcome, Inner, Loaded,
    CONFLICT_BACKOFF_MS_MAX, CONFLICT_RETRIES_MAX,
};
use crate::infra::store::lookups::{existing_ledger_refs, RefKey};
use crate::infra::store::{CommittedUnit, EventView, LedgerRefRow, StoreError, UnitOfWork};
use factledger_aggregates::Decide;
use std::collections::{HashMap, HashSet};
use tokio::sync::oneshot;

pub(super) struct Pending<A: Decide> {
    /// One command, or the items of an atomic batch in request order.
    pub envs: Vec<CommandEnvelope<A::Command>>,
    pub reply: oneshot::Sender<Reply<A>>,
    pub attempts: u32,
}

impl<A: Decide> Pending<A> {
    pub(super) fn commands(&self) -> usize {
        self.envs.len()
    }
}

/// Every command's outcome in order, or the index of the one that failed (for an
/// atomic batch: nothing of it was written).
pub(super) type Reply<A> =
    Result<Vec<CommandOutcome>, (usize, Failure<<A as cqrs_es::Aggregate>::Error>)>;

/// Failures inside the writer; `KeyRace` is resolved by the caller by reading the
/// winner's record.
pub(super) enum Failure<E: std::error::Error> {
    Bus(BusError<E>),
    KeyRace,
}

pub(super) async fn run_single<A>(inner: &Inner<A>, mut p: Pending<A>)
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
        let retry = p.attempts + 1 < CONFLICT_RETRIES_MAX;
        let failure = match err {
            StoreError::Conflict { .. } if retry => {
                p.attempts += 1;
                let ceiling_ms = (1u64 << p.attempts.min(6)).min(CONFLICT_BACKOFF_MS_MAX);
                let pause_us = rand::RngExt::random_range(&mut rand::rng(), 0..=ceiling_ms * 1000);
                tokio::time::sleep(std::time::Duration::from_micros(pause_us)).await;
                metrics::counter!("factledger_bus_conflict_retries_total", "aggregate" => A::TYPE)
                    .increment(1);
                continue;
            }
            // Several commands, one taken reference (another process took it after
            // the look-up): decide again, and the look-up names the item at fault.
            StoreError::DuplicateLedgerRef(_) if p.envs.len() > 1 && retry => {
                p.attempts += 1;
                continue;
            }
            StoreError::Conflict { .. } => Failure::Bus(BusError::Conflict(p.attempts + 1)),
            StoreError::DuplicateLedgerRef(r) => Failure::Bus(BusError::DuplicateLedgerRef(r)),
            StoreError::DuplicateIdempotencyKey(_) => Failure::KeyRace,
            other => Failure::Bus(BusError::Store(other)),
        };
        let _ = p.reply.send(Err((0, failure)));
        return;
    }
}

pub(super) struct Accepted<A: Decide> {
    /// Its place in the batch as taken from the queue.
    order: usize,
    pending: Pending<A>,
    units: Vec<UnitOfWork>,
    views: Vec<Vec<EventView>>,
}

fn ref_key(r: &LedgerRefRow) -> RefKey {
    (r.ref_type.clone(), r.ref_id.clone(), r.entry_type.clone())
}

/// Decide every command of the batch and append all resulting units in one
/// transaction. Replies to every command it settles; returns the ones whose units
/// were in a failed append, with the error.
pub(super) async fn try_batch<A>(
    inner: &Inner<A>,
    batch: Vec<Pending<A>>,
) -> Option<(Vec<Pending<A>>, StoreError)>
where
    A: Decide + Clone,
    A::Command: Clone,
{
    match start(inner, batch).await {
        Some(flight) => land(inner, flight).await,
        None => None,
    }
}

/// Decide a batch on the stored states and start its append (nothing in flight).
pub(super) async fn start<A>(inner: &Inner<A>, mut batch: Vec<Pending<A>>) -> Option<Flight<A>>
where
    A: Decide + Clone,
    A::Command: Clone,
{
    if batch.is_empty() {
        return None;
    }
    let missing = uncached_beyond(inner, &batch, &HashMap::new());
    let mut base = preload(inner, missing).await;
    loop {
        let mut decided = decide_all(inner, &mut base, batch).await;
        decided.answer_refusals(inner).await;
        match decided.checked_refs(inner).await {
            Ok(ready) => return Some(launch(inner, ready)),
            Err(rest) => batch = rest,
        }
    }
}

/// The batch's streams neither the cache nor `known` hold, each once.
pub(super) fn uncached_beyond<A: Decide>(
    inner: &Inner<A>,
    batch: &[Pending<A>],
    known: &HashMap<String, Loaded<A>>,
) -> Vec<String> {
    let cache = lock(&inner.cache);
    let mut seen = HashSet::new();
    let mut missing = Vec::new();
    for env in batch.iter().flat_map(|p| &p.envs) {
        let id = env.aggregate_id.as_str();
        if !cache.contains_key(id) && !known.contains_key(id) && seen.insert(id) {
            missing.push(env.aggregate_id.clone());
        }
    }
    missing
}

/// The pre-batch states of `missing` in one read (`load_many`); a stream it misses
/// is loaded alone when it is needed.
pub(super) async fn preload<A>(inner: &Inner<A>, missing: Vec<String>) -> HashMap<String, Loaded<A>>
where
    A: Decide + Clone,
{
    if missing.len() < 2 {
        return HashMap::new();
    }
    match load_many::<A>(&inner.store, &missing).await {
        Ok(loaded) => loaded,
        Err(e) => {
            tracing::debug!(error = %e, "batch preload failed; streams load one by one");
            HashMap::new()
        }
    }
}

/// A stream's pre-batch state: preloaded, cached, or read now (then kept in `base`).
async fn pre_batch_state<A>(
    inner: &Inner<A>,
    base: &mut HashMap<String, Loaded<A>>,
    id: &str,
) -> Result<Loaded<A>, BusError<A::Error>>
where
    A: Decide + Clone,
{
    if let Some(l) = base.get(id) {
        return Ok(l.clone());
    }
    if let Some(l) = lock(&inner.cache).get(id) {
        return Ok(l.clone());
    }
    let l = load::<A>(&inner.store, id).await?;
    base.insert(id.to_owned(), l.clone());
    Ok(l)
}

/// A batch decided: what to append, what waits for after it, what was refused, and
/// the working states it leaves.
pub(super) struct Decided<A: Decide> {
    accepted: Vec<Accepted<A>>,
    /// An idempotency key already in the batch: settled after it.
    later: Vec<(usize, Pending<A>)>,
    /// Refused, not answered yet: (order, pending, item index, failure).
    refused: Vec<Refused<A>>,
    pub(super) work: HashMap<String, Loaded<A>>,
    /// Idempotency keys and ledger references the batch holds so far.
    keys: HashSet<(String, String)>,
    refs: HashSet<factledger_aggregates::decide::LedgerRef>,
    /// The queue order of the next command taken in.
    next_order: usize,
}

impl<A: Decide> Decided<A> {
    /// Nothing decided yet; commands with one of `keys` (the batch in flight's) wait
    /// for after this batch.
    pub(super) fn after(keys: HashSet<(String, String)>) -> Self {
        Self {
            keys,
            ..Self::default()
        }
    }
}

impl<A: Decide> Default for Decided<A> {
    fn default() -> Self {
        Self {
            accepted: Vec::new(),
            later: Vec::new(),
            refused: Vec::new(),
            work: HashMap::new(),
            keys: HashSet::new(),
            refs: HashSet::new(),
            next_order: 0,
        }
    }
}

type Refused<A> = (
    usize,
    Pending<A>,
    usize,
    Failure<<A as cqrs_es::Aggregate>::Error>,
);

/// Units ready to append, with their callers.
pub(super) struct Ready<A: Decide> {
    accepted: Vec<Accepted<A>>,
    later: Vec<Pending<A>>,
    work: HashMap<String, Loaded<A>>,
    keys: HashSet<(String, String)>,
}

impl<A: Decide + Clone> Decided<A>
where
    A::Command: Clone,
{
    /// Commands taken in so far.
    pub(super) fn commands(&self) -> usize {
        self.accepted
            .iter()
            .map(|a| a.pending.commands())
            .sum::<usize>()
            + self.later.iter().map(|(_, p)| p.commands()).sum::<usize>()
            + self
                .refused
                .iter()
                .map(|(_, p, _, _)| p.commands())
                .sum::<usize>()
    }

    /// Answer the refusals (once the states they were decided on are real).
    /// A refused command with a key is asked about here, not when it was decided: a
    /// twin in the batch before may have committed since (then it is a replay).
    pub(super) async fn answer_refusals(&mut self, inner: &Inner<A>) {
        for (_, p, i, failure) in std::mem::take(&mut self.refused) {
            let failure = match failure {
                Failure::Bus(e) => {
                    let idem = p.envs.get(i).and_then(|env| env.idempotency.clone());
                    refusal(inner, idem, e).await
                }
                race => race,
            };
            let _ = p.reply.send(Err((i, failure)));
        }
    }

    /// Every command back, unanswered, in queue order: the batch was decided on
    /// states that did not come to be.
    pub(super) fn into_pendings(self) -> Vec<Pending<A>> {
        let mut all: Vec<(usize, Pending<A>)> = self
            .accepted
            .into_iter()
            .map(|a| (a.order, a.pending))
            .chain(self.later)
            .chain(self.refused.into_iter().map(|(o, p, _, _)| (o, p)))
            .collect();
        all.sort_by_key(|(o, _)| *o);
        all.into_iter().map(|(_, p)| p).collect()
    }

    /// Look the accepted commands' ledger references up (see [`refuse_taken_refs`]):
    /// ready to append, or the commands to decide again.
    /// A batch of one command skips the look-up: a duplicate fails only that command's
    /// own append, which costs what the look-up would (and nothing when there is none).
    pub(super) async fn checked_refs(self, inner: &Inner<A>) -> Result<Ready<A>, Vec<Pending<A>>> {
        let alone = self.commands() <= 1;
        let later = self.later.into_iter().map(|(_, p)| p).collect();
        let (accepted, later) = if alone {
            (self.accepted, later)
        } else {
            refuse_taken_refs(inner, self.accepted, later).await?
        };
        Ok(Ready {
            accepted,
            later,
            work: self.work,
            keys: self.keys,
        })
    }
}

/// One pass: decide every pending in order on working states (`base`: the states
/// before the batch, filled as streams are read). Refusals are kept for the caller to
/// answer; an atomic batch with a refused item leaves no trace in the working states.
pub(super) async fn decide_all<A>(
    inner: &Inner<A>,
    base: &mut HashMap<String, Loaded<A>>,
    batch: Vec<Pending<A>>,
) -> Decided<A>
where
    A: Decide + Clone,
    A::Command: Clone,
{
    decide_more(inner, base, Decided::default(), batch).await
}

/// [`decide_all`] continued: `batch` decided after the commands `decided` holds, on
/// its working states (the commands that arrived while the batch before was in
/// flight, taken in before it is appended).
pub(super) async fn decide_more<A>(
    inner: &Inner<A>,
    base: &mut HashMap<String, Loaded<A>>,
    decided: Decided<A>,
    batch: Vec<Pending<A>>,
) -> Decided<A>
where
    A: Decide + Clone,
    A::Command: Clone,
{
    let Decided {
        mut accepted,
        mut later,
        mut refused,
        mut work,
        mut keys,
        mut refs,
        next_order,
    } = decided;
    let keyring = inner.store.keyring().clone();
    let first = next_order;
    let taken = batch.len();
    for (order, p) in (first..).zip(batch) {
        let pkeys: Vec<(String, String)> = p
            .envs
            .iter()
            .filter_map(|e| e.idempotency.as_ref())
            .map(|i| (i.scope.clone(), i.key.clone()))
            .collect();
        if pkeys.iter().any(|k| keys.contains(k)) {
            // The same key twice in one batch: settle it after this batch, when the
            // first one's record is visible.
            later.push((order, p));
            continue;
        }
        keys.extend(pkeys);
        let group = p.envs.len() > 1;
        // An atomic batch: what to put back if one of its items is refused.
        let saved_refs = group.then(|| refs.clone());
        let mut saved: HashMap<String, Option<Loaded<A>>> = HashMap::new();
        let mut units = Vec::with_capacity(p.envs.len());
        let mut views = Vec::with_capacity(p.envs.len());
        let mut failed = None;
        // By index, holding no borrow of a command across an await (the writer task
        // is `Send` without asking commands to be `Sync`).
        for i in 0..p.envs.len() {
            let id = p.envs[i].aggregate_id.clone();
            if group && !saved.contains_key(&id) {
                saved.insert(id.clone(), work.get(&id).cloned());
            }
            if !work.contains_key(&id) {
                match pre_batch_state(inner, base, &id).await {
                    Ok(l) => {
                        work.insert(id.clone(), l);
                    }
                    Err(e) => {
                        failed = Some((i, Failure::Bus(e)));
                        break;
                    }
                }
            }
            let Some(loaded) = work.get_mut(&id) else {
                continue;
            };
            let decided = decide_one(keyring.active(), loaded, &p.envs[i], &mut refs);
            match decided {
                Ok((unit, v)) => {
                    units.push(unit);
                    views.push(v);
                }
                Err(e) => {
                    failed = Some((i, Failure::Bus(e)));
                    break;
                }
            }
        }
        if let Some((i, failure)) = failed {
            if let Some(saved_refs) = saved_refs {
                refs = saved_refs;
                for (id, state) in saved {
                    match state {
                        Some(l) => work.insert(id, l),
                        None => work.remove(&id),
                    };
                }
            }
            refused.push((order, p, i, failure));
            continue;
        }
        accepted.push(Accepted {
            order,
            pending: p,
            units,
            views,
        });
    }
    Decided {
        accepted,
        later,
        refused,
        work,
        keys,
        refs,
        next_order: first + taken,
    }
}

/// A refused decision as the caller hears it. A repeated request decided again after
/// its twin committed (same key, e.g. a second BlockWithdrawals) is refused by the new
/// state: it is a replay, not a refusal, and the caller resolves `KeyRace` from the
/// record.
async fn refusal<A>(
    inner: &Inner<A>,
    idempotency: Option<crate::infra::store::IdempotencyRow>,
    e: BusError<A::Error>,
) -> Failure<A::Error>
where
    A: Decide,
{
    match &idempotency {
        Some(idem) => match inner.store.find_idempotency(&idem.scope, &idem.key).await {
            Ok(Some(_)) => Failure::KeyRace,
            _ => Failure::Bus(e),
        },
        None => Failure::Bus(e),
    }
}

/// Look the accepted commands' ledger references up in one query. None stored: the
/// accepted and the deferred back (`Ok`). Some stored: the commands holding them are
/// answered `DuplicateLedgerRef` and the others come back to be decided again
/// (`Err`). A failed look-up lets the append decide (the unique index still refuses).
#[allow(clippy::type_complexity)]
async fn refuse_taken_refs<A>(
    inner: &Inner<A>,
    accepted: Vec<Accepted<A>>,
    later: Vec<Pending<A>>,
) -> Result<(Vec<Accepted<A>>, Vec<Pending<A>>), Vec<Pending<A>>>
where
    A: Decide,
{
    let wanted: Vec<RefKey> = accepted
        .iter()
        .flat_map(|a| &a.units)
        .flat_map(|u| u.ledger_refs.iter().map(ref_key))
        .collect();
    if wanted.is_empty() {
        return Ok((accepted, later));
    }
    let taken = match existing_ledger_refs(&inner.store.db(), &wanted).await {
        Ok(taken) if !taken.is_empty() => taken,
        Ok(_) => return Ok((accepted, later)),
        Err(e) => {
            tracing::debug!(error = %e, "ledger reference look-up failed; the append decides");
            return Ok((accepted, later));
        }
    };
    let mut rest = Vec::with_capacity(accepted.len() + later.len());
    for a in accepted {
        let held = a.units.iter().enumerate().find_map(|(i, u)| {
            u.ledger_refs
                .iter()
                .map(ref_key)
                .find(|r| taken.contains(r))
                .map(|r| (i, r))
        });
        match held {
            Some((i, (t, id, e))) => {
                metrics::counter!("factledger_bus_duplicate_refs_total", "aggregate" => A::TYPE)
                    .increment(1);
                let dup = BusError::DuplicateLedgerRef(format!("{t}/{id}/{e}"));
                // The twin of a request that committed (same key): a replay.
                let idem = a.pending.envs[i].idempotency.clone();
                let failure = refusal(inner, idem, dup).await;
                let _ = a.pending.reply.send(Err((i, failure)));
            }
            None => rest.push(a.pending),
        }
    }
    rest.extend(later);
    Err(rest)
}

/// A batch whose append is in flight (its own task), with what settling it needs.
pub(super) struct Flight<A: Decide> {
    append: tokio::task::JoinHandle<Result<Vec<CommittedUnit>, StoreError>>,
    accepted: Vec<Accepted<A>>,
    counts: Vec<usize>,
    later: Vec<Pending<A>>,
    /// The states the batch leaves once it commits.
    pub(super) work: HashMap<String, Loaded<A>>,
    /// Its idempotency keys: the batch decided meanwhile defers a command with one of
    /// them until after it (a replay, once this batch has committed).
    pub(super) keys: HashSet<(String, String)>,
}

/// Start appending every accepted unit in one transaction.
pub(super) fn launch<A: Decide>(inner: &Inner<A>, ready: Ready<A>) -> Flight<A> {
    let Ready {
        mut accepted,
        later,
        work,
        keys,
    } = ready;
    let counts: Vec<usize> = accepted.iter().map(|a| a.units.len()).collect();
    let units: Vec<UnitOfWork> = accepted
        .iter_mut()
        .flat_map(|a| a.units.drain(..))
        .collect();
    let store = inner.store.clone();
    let append = tokio::spawn(async move {
        if units.is_empty() {
            Ok(Vec::new())
        } else {
            store.append(&units).await
        }
    });
    Flight {
        append,
        accepted,
        counts,
        later,
        work,
        keys,
    }
}

/// Wait for a batch's append and answer its callers; then the deferred ones, alone.
/// Returns the commands of a failed append, with the error.
pub(super) async fn land<A>(
    inner: &Inner<A>,
    flight: Flight<A>,
) -> Option<(Vec<Pending<A>>, StoreError)>
where
    A: Decide + Clone,
    A::Command: Clone,
{
    let Flight {
        append,
        accepted,
        counts,
        later,
        work,
        ..
    } = flight;
    let result = append.await.unwrap_or_else(|e| {
        Err(StoreError::OutcomeUnknown(format!(
            "the append task ended without an answer: {e}"
        )))
    });
    match result {
        Ok(committed) => {
            {
                let mut cache = lock(&inner.cache);
                if cache.len() + work.len() > super::CACHE_STREAMS_MAX {
                    cache.clear();
                }
                cache.extend(work);
            }
            let mut committed = committed.into_iter();
            for (a, n) in accepted.into_iter().zip(counts) {
                let outcomes = a
                    .views
                    .into_iter()
                    .zip(committed.by_ref().take(n))
                    .map(|(v, c)| outcome(v, &c))
                    .collect();
                let _ = a.pending.reply.send(Ok(outcomes));
            }
            for p in later {
                Box::pin(run_single(inner, p)).await;
            }
            None
        }
        Err(e) => {
            // A unique index refusing a row leaves every stream as it was: the cached
            // states still hold. Anything else may mean a stream moved (a conflict) or
            // the outcome is unknown: read those streams again next time.
            let streams_unchanged = matches!(
                e,
                StoreError::DuplicateLedgerRef(_) | StoreError::DuplicateIdempotencyKey(_)
            );
            if !streams_unchanged {
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
