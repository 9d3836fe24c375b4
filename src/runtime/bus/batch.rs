//! Many commands in one call (`POST /v1/commands:batch`, `factledger commands
//! apply`). Every item carries its own idempotency key and gets its own result, in
//! request order.
//!
//! - The keys are looked up first, all at once: an item already done answers its
//!   original position (`replayed`), or `IdempotencyMismatch` when its key was used
//!   with a different request. A retried batch therefore replays every item.
//! - **Independent** (default): each remaining item is queued to the writer as its own
//!   command, in request order, so items of one stream are decided in that order; the
//!   writer commits them in groups like any other commands and each succeeds or fails
//!   alone.
//! - **Atomic**: the remaining items are queued as ONE pending: decided in order on
//!   working state and appended in one transaction, or — when one is refused —
//!   nothing is written, that item gets its problem and every other one
//!   [`BusError::Aborted`] naming it (TigerBeetle's linked events).

use super::writer::{Failure, Pending};
use super::{BusError, CommandBus, CommandEnvelope};
use crate::infra::store::lookups::find_idempotency_many;
use crate::infra::store::{IdempotencyRecord, StoreError};
use factledger_aggregates::Decide;
use std::collections::HashMap;
use tokio::sync::oneshot;

/// Most items one batch may carry (TigerBeetle's 8,190 events per request).
pub const BATCH_ITEMS_MAX: usize = 8_190;
/// Attempts of an atomic batch whose idempotency key another request took meanwhile
/// (each attempt looks the keys up again, so the second one normally replays).
const KEY_RACE_ATTEMPTS_MAX: u32 = 3;

/// What one item of a batch did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct BatchItemDone {
    /// The global position of the item's last event (read-your-writes token).
    pub position: i64,
    /// True when this is the stored result of an earlier request with its key.
    pub replayed: bool,
}

type ItemResult<E> = Result<BatchItemDone, BusError<E>>;

impl<A> CommandBus<A>
where
    A: Decide + Clone + 'static,
    A::Command: Clone + Send + 'static,
    A::Event: Send,
    A::Error: Send + 'static,
{
    /// Execute many commands: one result per item, in order (see the module doc).
    pub async fn execute_batch(
        &self,
        items: Vec<CommandEnvelope<A::Command>>,
        atomic: bool,
    ) -> Vec<ItemResult<A::Error>> {
        let mut attempts = 0;
        loop {
            attempts += 1;
            let mut results: Vec<Option<ItemResult<A::Error>>> =
                self.replays(&items).await.into_iter().collect();
            if !atomic {
                self.independent(&items, &mut results).await;
                return finish(results);
            }
            match self.atomic(&items, &mut results).await {
                Some(()) => return finish(results),
                None if attempts < KEY_RACE_ATTEMPTS_MAX => continue,
                None => {
                    return items
                        .iter()
                        .map(|_| Err(BusError::Conflict(attempts)))
                        .collect()
                }
            }
        }
    }

    /// Each item's replay (or key mismatch) when its key was used before; `None` for
    /// the items still to do.
    async fn replays(
        &self,
        items: &[CommandEnvelope<A::Command>],
    ) -> Vec<Option<ItemResult<A::Error>>> {
        let mut by_scope: HashMap<&str, Vec<String>> = HashMap::new();
        for idem in items.iter().filter_map(|i| i.idempotency.as_ref()) {
            by_scope
                .entry(idem.scope.as_str())
                .or_default()
                .push(idem.key.clone());
        }
        let db = self.inner.store.db();
        let mut records: HashMap<(String, String), IdempotencyRecord> = HashMap::new();
        for (scope, keys) in by_scope {
            match find_idempotency_many(&db, scope, &keys).await {
                Ok(found) => {
                    records.extend(found.into_iter().map(|(k, r)| ((scope.to_owned(), k), r)))
                }
                Err(e) => return items.iter().map(|_| Some(Err(store(&e)))).collect(),
            }
        }
        items
            .iter()
            .map(|item| {
                let idem = item.idempotency.as_ref()?;
                let rec = records.get(&(idem.scope.clone(), idem.key.clone()))?;
                Some(if rec.request_hash == idem.request_hash {
                    Ok(BatchItemDone {
                        position: rec.last_position,
                        replayed: true,
                    })
                } else {
                    Err(BusError::IdempotencyMismatch)
                })
            })
            .collect()
    }

    /// Queue every item still to do as its own command, in order, then collect.
    async fn independent(
        &self,
        items: &[CommandEnvelope<A::Command>],
        results: &mut [Option<ItemResult<A::Error>>],
    ) {
        let mut waiting = Vec::new();
        for (i, item) in items.iter().enumerate() {
            if results[i].is_some() {
                continue;
            }
            let (reply, rx) = oneshot::channel();
            let pending = Pending {
                envs: vec![item.clone()],
                reply,
                attempts: 0,
            };
            if self.queue.send(pending).await.is_err() {
                results[i] = Some(Err(BusError::ShutDown));
                continue;
            }
            waiting.push((i, rx));
        }
        for (i, rx) in waiting {
            results[i] = Some(match rx.await {
                Err(_) => Err(BusError::ShutDown),
                Ok(Ok(outcomes)) => Ok(BatchItemDone {
                    position: outcomes.last().map_or(0, |o| o.position),
                    replayed: false,
                }),
                Ok(Err((_, Failure::Bus(e)))) => Err(e),
                // Its key was taken meanwhile: the record is the answer.
                Ok(Err((_, Failure::KeyRace))) => match &items[i].idempotency {
                    Some(idem) => match self.replay(idem).await {
                        Ok(Some(done)) => Ok(BatchItemDone {
                            position: done.position,
                            replayed: true,
                        }),
                        Ok(None) => Err(BusError::Store(StoreError::Corrupt(format!(
                            "idempotency key {} collided but has no record",
                            idem.key
                        )))),
                        Err(e) => Err(e),
                    },
                    None => Err(BusError::Store(StoreError::Corrupt(
                        "idempotency race without a key".into(),
                    ))),
                },
            });
        }
    }

    /// Queue the items still to do as one all-or-nothing pending. `None`: one of its
    /// keys was taken by another request meanwhile (look the keys up again).
    async fn atomic(
        &self,
        items: &[CommandEnvelope<A::Command>],
        results: &mut [Option<ItemResult<A::Error>>],
    ) -> Option<()> {
        let todo: Vec<usize> = (0..items.len()).filter(|i| results[*i].is_none()).collect();
        // A key used with a different request refuses the whole batch.
        if let Some(bad) = (0..items.len()).find(|i| matches!(results[*i], Some(Err(_)))) {
            for i in todo {
                results[i] = Some(Err(BusError::Aborted(bad)));
            }
            return Some(());
        }
        if todo.is_empty() {
            return Some(());
        }
        let (reply, rx) = oneshot::channel();
        let pending = Pending {
            envs: todo.iter().map(|i| items[*i].clone()).collect(),
            reply,
            attempts: 0,
        };
        if self.queue.send(pending).await.is_err() {
            for i in todo {
                results[i] = Some(Err(BusError::ShutDown));
            }
            return Some(());
        }
        match rx.await {
            Err(_) => {
                for i in todo {
                    results[i] = Some(Err(BusError::ShutDown));
                }
            }
            Ok(Ok(outcomes)) => {
                for (i, o) in todo.into_iter().zip(outcomes) {
                    results[i] = Some(Ok(BatchItemDone {
                        position: o.position,
                        replayed: false,
                    }));
                }
            }
            Ok(Err((_, Failure::KeyRace))) => return None,
            Ok(Err((k, Failure::Bus(e)))) => {
                let culprit = todo.get(k).copied().unwrap_or(todo[0]);
                for i in todo {
                    results[i] = Some(Err(BusError::Aborted(culprit)));
                }
                results[culprit] = Some(Err(e));
            }
        }
        Some(())
    }
}

fn store<E: std::error::Error>(e: &StoreError) -> BusError<E> {
    BusError::Store(e.clone())
}

fn finish<E: std::error::Error>(results: Vec<Option<ItemResult<E>>>) -> Vec<ItemResult<E>> {
    results
        .into_iter()
        .map(|r| {
            r.unwrap_or_else(|| {
                Err(BusError::Store(StoreError::Corrupt(
                    "a batch item was left without a result".into(),
                )))
            })
        })
        .collect()
}
