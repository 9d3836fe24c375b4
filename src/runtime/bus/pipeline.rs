//! The writer task of one aggregate type: group commit, pipelined.
//!
//! While batch N's append is in flight (its own task), the writer takes the commands
//! queued meanwhile and decides them as batch N+1 on the states N leaves. When N
//! commits, N's callers are answered, the commands that arrived since join N+1
//! (decided on after the others), N+1's refusals are answered, its ledger references
//! looked up and its append started — so deciding (and sealing: JSON, hashes, the
//! SQL) overlaps the database's round trip, and each commit still carries every
//! command that was waiting for it (appends are serial: the sequence row is locked
//! to COMMIT, so commands per commit is what throughput is made of).
//!
//! Nothing of N+1 is answered before N's outcome is known: a refusal decided on N's
//! states is only true if N commits. If N fails, every command of N+1 is taken back
//! unanswered, N's failure is handled as without pipelining (conflicts re-decided,
//! each command then alone), and N+1's commands are decided again from the stored
//! states. Even a batch appended on states that did not come to be could not commit:
//! each stream's guard checks the exact head (number and hash) it was decided on.
//! Items of one stream keep their queue order throughout.

use super::writer::{
    decide_more, land, launch, preload, run_single, start, try_batch, uncached_beyond, Decided,
    Flight, Pending,
};
use super::{Inner, BATCH_COMMANDS_MAX, CONFLICT_RETRIES_MAX, LINGER_YIELDS_MAX};
use crate::infra::store::StoreError;
use factledger_aggregates::Decide;
use std::sync::Arc;
use tokio::sync::mpsc;

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
    let mut flight: Option<Flight<A>> = None;
    loop {
        let batch = match &flight {
            None => match rx.recv().await {
                Some(first) => gather(&mut rx, first, expected, true).await,
                None => break,
            },
            // The callers of the batch in flight wait for it: take what is queued.
            Some(_) => match rx.try_recv() {
                Ok(first) => gather(&mut rx, first, expected, false).await,
                Err(_) => Vec::new(),
            },
        };
        if !batch.is_empty() {
            expected = batch.len();
            metrics::histogram!("factledger_bus_batch_commands", "aggregate" => A::TYPE)
                .record(batch.iter().map(Pending::commands).sum::<usize>() as f64);
        }
        let Some(previous) = flight.take() else {
            flight = start(&inner, batch).await;
            continue;
        };
        if batch.is_empty() {
            settle(&inner, previous).await;
            continue;
        }
        // Decide the next batch on the states the one in flight leaves.
        let mut base = previous.work.clone();
        let missing = uncached_beyond(&inner, &batch, &base);
        base.extend(preload(&inner, missing).await);
        let pending = Decided::after(previous.keys.clone());
        let mut decided = decide_more(&inner, &mut base, pending, batch).await;
        match land(&inner, previous).await {
            None => {
                // What arrived while it was in flight joins this batch: a commit then
                // carries every command waiting, not only those decided early.
                let room = BATCH_COMMANDS_MAX.saturating_sub(decided.commands());
                let more = take_queued(&mut rx, room);
                if !more.is_empty() {
                    let missing = uncached_beyond(&inner, &more, &base);
                    base.extend(preload(&inner, missing).await);
                    decided = decide_more(&inner, &mut base, decided, more).await;
                }
                decided.answer_refusals(&inner).await;
                flight = match decided.checked_refs(&inner).await {
                    Ok(ready) => Some(launch(&inner, ready)),
                    Err(rest) => start(&inner, rest).await,
                };
            }
            Some((failed, e)) => {
                let back = decided.into_pendings();
                recover(&inner, failed, e).await;
                flight = start(&inner, back).await;
            }
        }
    }
    if let Some(f) = flight {
        settle(&inner, f).await;
    }
}

/// The first command and whatever else is queued, up to [`BATCH_COMMANDS_MAX`]
/// commands; with `linger`, yielding a few times for the callers of the previous
/// batch to send their next ones.
async fn gather<A: Decide>(
    rx: &mut mpsc::Receiver<Pending<A>>,
    first: Pending<A>,
    expected: usize,
    linger: bool,
) -> Vec<Pending<A>> {
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
        if !linger
            || commands >= BATCH_COMMANDS_MAX
            || batch.len() >= expected
            || yields >= LINGER_YIELDS_MAX
        {
            return batch;
        }
        yields += 1;
        tokio::task::yield_now().await;
    }
}

/// Whatever is queued, up to `room` commands (at least one pending when there is
/// room at all), without waiting.
fn take_queued<A: Decide>(rx: &mut mpsc::Receiver<Pending<A>>, room: usize) -> Vec<Pending<A>> {
    let mut more = Vec::new();
    let mut commands = 0;
    while commands < room {
        match rx.try_recv() {
            Ok(p) => {
                commands += p.commands();
                more.push(p);
            }
            Err(_) => break,
        }
    }
    more
}

/// Wait for a batch in flight and handle its failure, if any.
async fn settle<A>(inner: &Inner<A>, flight: Flight<A>)
where
    A: Decide + Clone,
    A::Command: Clone,
{
    if let Some((failed, e)) = land(inner, flight).await {
        recover(inner, failed, e).await;
    }
}

/// The commands of a failed append. Another process moved a stream: no command is
/// at fault, so the whole batch is decided again on fresh states (the failed streams
/// were evicted from the cache), keeping group commit instead of degrading every
/// command to a transaction of its own while the other process keeps writing.
/// Anything else: each command alone, so the culprit fails alone and the others
/// commit.
async fn recover<A>(inner: &Inner<A>, mut failed: Vec<Pending<A>>, mut e: StoreError)
where
    A: Decide + Clone,
    A::Command: Clone,
{
    let mut retries = 0;
    while matches!(e, StoreError::Conflict { .. })
        && failed.len() > 1
        && retries + 1 < CONFLICT_RETRIES_MAX
    {
        retries += 1;
        metrics::counter!("factledger_bus_conflict_retries_total", "aggregate" => A::TYPE)
            .increment(1);
        match try_batch(inner, failed).await {
            None => return,
            Some((f, err)) => (failed, e) = (f, err),
        }
    }
    // One command whose reference is taken: that is its answer (running it again
    // alone would only fail the same way).
    if let (StoreError::DuplicateLedgerRef(r), [one]) = (&e, failed.as_slice()) {
        if one.envs.len() == 1 && one.envs[0].idempotency.is_none() {
            if let Some(p) = failed.pop() {
                let dup = super::BusError::DuplicateLedgerRef(r.clone());
                let _ = p.reply.send(Err((0, super::Failure::Bus(dup))));
            }
            return;
        }
    }
    for p in failed {
        run_single(inner, p).await;
    }
}
