//! The writer task of one aggregate type: group commit (see [`super`]).
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
    BATCH_COMMANDS_MAX, CONFLICT_BACKOFF_MS_MAX, CONFLICT_RETRIES_MAX, LINGER_YIELDS_MAX,
};
use crate::infra::store::lookups::{existing_ledger_refs, RefKey};
use crate::infra::store::{CommittedUnit, EventView, LedgerRefRow, StoreError, UnitOfWork};
use factledger_aggregates::Decide;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

pub(super) struct Pending<A: Decide> {
    /// One command, or the items of an atomic batch in request order.
    pub envs: Vec<CommandEnvelope<A::Command>>,
    pub reply: oneshot::Sender<Reply<A>>,
    pub attempts: u32,
}

impl<A: Decide> Pending<A> {
    fn commands(&self) -> usize {
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

pub(super) async fn writer_loop<A>(inner: Arc<Inner<A>>, mut rx: mpsc::Receiver<Pending<A>>)
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
        let mut commands = first.commands();
        let mut batch = vec![first];
        let mut yields = 0;
        loop {
            while commands < BATCH_COMMANDS_MAX {
                match rx.try_recv() {
                    Ok(p) => {
                        commands += p.commands();
                        batch.push(p);
                    }
                    Err(_) => break,
                }
            }
            if commands >= BATCH_COMMANDS_MAX
                || batch.len() >= expected
                || yields >= LINGER_YIELDS_MAX
            {
                break;
            }
            yields += 1;
            tokio::task::yield_now().await;
        }
        expected = batch.len();
        metrics::histogram!("factledger_bus_batch_commands", "aggregate" => A::TYPE)
            .record(commands as f64);
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

struct Accepted<A: Decide> {
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
async fn try_batch<A>(
    inner: &Inner<A>,
    mut batch: Vec<Pending<A>>,
) -> Option<(Vec<Pending<A>>, StoreError)>
where
    A: Decide + Clone,
    A::Command: Clone,
{
    // The streams' states before this batch, loaded once for every pass.
    let missing = uncached(inner, &batch);
    let mut base = preload(inner, missing).await;
    loop {
        let (mut accepted, later, work) = decide_all(inner, &mut base, batch).await;
        match refuse_taken_refs(inner, accepted, later).await {
            Ok((kept, later)) => {
                accepted = kept;
                return commit(inner, accepted, later, work).await;
            }
            // Commands held stored references: they were answered; decide the others
            // again on the pre-batch states.
            Err(rest) => batch = rest,
        }
    }
}

/// The batch's streams the cache does not hold, each once.
fn uncached<A: Decide>(inner: &Inner<A>, batch: &[Pending<A>]) -> Vec<String> {
    let cache = lock(&inner.cache);
    let mut seen = HashSet::new();
    let mut missing = Vec::new();
    for env in batch.iter().flat_map(|p| &p.envs) {
        if !cache.contains_key(&env.aggregate_id) && seen.insert(env.aggregate_id.as_str()) {
            missing.push(env.aggregate_id.clone());
        }
    }
    missing
}

/// The pre-batch states of `missing` in one read (`load_many`); a stream it misses
/// is loaded alone when it is needed.
async fn preload<A>(inner: &Inner<A>, missing: Vec<String>) -> HashMap<String, Loaded<A>>
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

type Decided<A> = (
    Vec<Accepted<A>>,
    Vec<Pending<A>>,
    HashMap<String, Loaded<A>>,
);

/// One pass: decide every pending in order on working states. Refusals are answered
/// here; an atomic batch with a refused item leaves no trace in the working states.
/// Returns the accepted, the ones deferred after the batch (an idempotency key
/// already in it) and the working states.
async fn decide_all<A>(
    inner: &Inner<A>,
    base: &mut HashMap<String, Loaded<A>>,
    batch: Vec<Pending<A>>,
) -> Decided<A>
where
    A: Decide + Clone,
    A::Command: Clone,
{
    let mut work: HashMap<String, Loaded<A>> = HashMap::new();
    let mut accepted: Vec<Accepted<A>> = Vec::with_capacity(batch.len());
    let mut later: Vec<Pending<A>> = Vec::new();
    let mut keys = HashSet::new();
    let mut refs = HashSet::new();
    let keyring = inner.store.keyring().clone();
    for p in batch {
        let pkeys: Vec<(String, String)> = p
            .envs
            .iter()
            .filter_map(|e| e.idempotency.as_ref())
            .map(|i| (i.scope.clone(), i.key.clone()))
            .collect();
        if pkeys.iter().any(|k| keys.contains(k)) {
            // The same key twice in one batch: settle it after this batch, when the
            // first one's record is visible.
            later.push(p);
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
                    let idem = p.envs[i].idempotency.clone();
                    failed = Some((i, refusal(inner, idem, e).await));
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
            let _ = p.reply.send(Err((i, failure)));
            continue;
        }
        accepted.push(Accepted {
            pending: p,
            units,
            views,
        });
    }
    (accepted, later, work)
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

/// Append every accepted unit in one transaction and answer their callers; then the
/// deferred ones, alone.
async fn commit<A>(
    inner: &Inner<A>,
    mut accepted: Vec<Accepted<A>>,
    later: Vec<Pending<A>>,
    work: HashMap<String, Loaded<A>>,
) -> Option<(Vec<Pending<A>>, StoreError)>
where
    A: Decide + Clone,
    A::Command: Clone,
{
    let counts: Vec<usize> = accepted.iter().map(|a| a.units.len()).collect();
    let units: Vec<UnitOfWork> = accepted
        .iter_mut()
        .flat_map(|a| a.units.drain(..))
        .collect();
    let result = if units.is_empty() {
        Ok(Vec::new())
    } else {
        inner.store.append(&units).await
    };
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
