//! The command bus under injected commit failures (issue 19, item 3), as a property.
//!
//! Two buses (two processes' writers) on one database; 8 callers send credits with
//! their own idempotency keys — alone and in batches — to 6 wallets, drawing ledger
//! references from a pool so about one in five repeats one already used. The store
//! fails appends at random: before anything is written, or AFTER the commit (the
//! connection lost on the way back: the outcome is unknown to the bus). A caller
//! whose answer is a store failure or a conflict retries with the same key, as the
//! API asks clients to. Then, from the log:
//!
//! - every acknowledged command's key has exactly one event; every command refused
//!   as a duplicate reference has none (and its reference is held by an acknowledged
//!   command); a command still unknown after its retries has at most one;
//! - every reference is in the log once;
//! - each wallet's pending balance is the sum of its acknowledged credits.
//!
//! Seeded (`FACTLEDGER_BUS_SEED` picks another; a failure prints the seed), bounded
//! in commands and attempts.

use crate::common::hooked_store::{Flaky, HookedStore};
use crate::common::{meta, Rng, TestDb};
use factledger::infra::store::{DynStore, IdempotencyRow, READ_LIMIT_MAX};
use factledger::runtime::bus::{BusError, CommandBus, CommandEnvelope};
use factledger_aggregates::wallet::{Wallet, WalletCommand};
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

const CALLERS: u64 = 8;
const COMMANDS_PER_CALLER: u64 = 40;
const WALLETS: u64 = 6;
/// Attempts of one command (its first send and the retries with its key).
const ATTEMPTS_MAX: u32 = 25;
const SEED_ENV: &str = "FACTLEDGER_BUS_SEED";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Acknowledged,
    DuplicateRef,
    Unknown,
}

struct Sent {
    key: String,
    wallet: String,
    ref_id: String,
    amount: i64,
    fate: Fate,
}

fn credit(key: &str, wallet: &str, ref_id: &str, amount: i64) -> CommandEnvelope<WalletCommand> {
    let command: WalletCommand = serde_json::from_value(json!({
        "type": "CreditPending", "ref_type": "ORDER", "ref_id": ref_id, "amount_minor": amount
    }))
    .expect("command");
    let mut m = meta();
    m.command_id = Some(key.to_owned());
    let mut env = CommandEnvelope::new(wallet, command, m);
    env.idempotency = Some(IdempotencyRow {
        scope: "tester".into(),
        key: key.to_owned(),
        request_hash: format!("credit {wallet} {ref_id} {amount}"),
    });
    env
}

/// What an answer settles: `None` — ask again with the same key.
fn settled(r: &Result<(), BusError<factledger_aggregates::wallet::WalletError>>) -> Option<Fate> {
    match r {
        Ok(()) => Some(Fate::Acknowledged),
        Err(BusError::DuplicateLedgerRef(_)) => Some(Fate::DuplicateRef),
        Err(BusError::Store(_) | BusError::Conflict(_)) => None,
        Err(other) => panic!("unexpected answer: {other:?}"),
    }
}

/// One caller: commands alone and in batches of 5, each retried with its key.
async fn caller(bus: CommandBus<Wallet>, mut rng: Rng, who: u64, refs: u64) -> Vec<Sent> {
    let mut sent = Vec::new();
    let mut n = 0;
    while n < COMMANDS_PER_CALLER {
        let size = if rng.below(3) == 0 { 5 } else { 1 };
        let mut group: Vec<Sent> = (0..size)
            .map(|i| Sent {
                key: format!("c{who}-{}", n + i),
                wallet: format!("pw-{}", rng.below(WALLETS)),
                ref_id: format!("ref-{}", rng.below(refs)),
                amount: 1 + rng.below(1_000) as i64,
                fate: Fate::Unknown,
            })
            .collect();
        n += size;
        for _ in 0..ATTEMPTS_MAX {
            let open: Vec<usize> = (0..group.len())
                .filter(|i| group[*i].fate == Fate::Unknown)
                .collect();
            if open.is_empty() {
                break;
            }
            let envs: Vec<_> = open
                .iter()
                .map(|i| {
                    let s = &group[*i];
                    credit(&s.key, &s.wallet, &s.ref_id, s.amount)
                })
                .collect();
            let answers: Vec<_> = if envs.len() == 1 {
                let env = envs.into_iter().next().expect("one");
                vec![bus.execute(env).await.map(|_| ())]
            } else {
                bus.execute_batch(envs, false)
                    .await
                    .into_iter()
                    .map(|r| r.map(|_| ()))
                    .collect()
            };
            for (i, a) in open.into_iter().zip(answers) {
                if let Some(fate) = settled(&a) {
                    group[i].fate = fate;
                }
            }
        }
        sent.extend(group);
    }
    sent
}

fn seed() -> u64 {
    crate::common::env_seed(SEED_ENV, 0x0B05_F417)
}

both_backends!(
    every_acknowledged_command_is_in_the_log_once_under_injected_failures,
    |db: TestDb| async move {
        let seed = seed();
        eprintln!(
            "bus_failures[{:?}]: seed {seed} (replay: {SEED_ENV}={seed})",
            db.backend
        );
        let database = db.database().await;
        let clean = CommandBus::<Wallet>::start(database.store.clone());
        for w in 0..WALLETS {
            let open: WalletCommand =
                serde_json::from_value(json!({"type": "Open", "user_id": "u", "currency": "IDR"}))
                    .expect("command");
            clean
                .execute(CommandEnvelope::new(format!("pw-{w}"), open, meta()))
                .await
                .expect("open");
        }
        let flaky: DynStore = Arc::new(HookedStore {
            inner: database.store.clone(),
            hook: Flaky::new(Rng(seed), 0),
        });
        let buses = [
            CommandBus::<Wallet>::start(flaky.clone()),
            CommandBus::<Wallet>::start(flaky),
        ];
        let refs = CALLERS * COMMANDS_PER_CALLER * 4 / 5;
        let tasks: Vec<_> = (0..CALLERS)
            .map(|who| {
                let bus = buses[(who % 2) as usize].clone();
                tokio::spawn(caller(bus, Rng(seed ^ ((who + 1) * 0x9E37)), who, refs))
            })
            .collect();
        let mut sent = Vec::new();
        for t in tasks {
            sent.extend(t.await.expect("caller"));
        }

        // The log: events by command key and by reference.
        let mut by_key: HashMap<String, usize> = HashMap::new();
        let mut by_ref: HashMap<String, usize> = HashMap::new();
        let mut after = 0;
        loop {
            let page = database
                .store
                .read_all(after, READ_LIMIT_MAX)
                .await
                .expect("read");
            let Some(last) = page.last() else { break };
            after = last.global_position;
            for e in &page {
                if e.event_type != "PendingCredited" && !e.payload.contains("ref_id") {
                    continue;
                }
                let m: serde_json::Value = serde_json::from_str(&e.metadata).expect("metadata");
                if let Some(k) = m["command_id"].as_str() {
                    *by_key.entry(k.to_owned()).or_default() += 1;
                }
                let p: serde_json::Value = serde_json::from_str(&e.payload).expect("payload");
                if let Some(r) = p["ref_id"].as_str() {
                    *by_ref.entry(r.to_owned()).or_default() += 1;
                }
            }
        }
        let acknowledged: Vec<&Sent> = sent
            .iter()
            .filter(|s| s.fate == Fate::Acknowledged)
            .collect();
        let held: std::collections::HashSet<&str> =
            acknowledged.iter().map(|s| s.ref_id.as_str()).collect();
        for s in &sent {
            let events = by_key.get(&s.key).copied().unwrap_or(0);
            match s.fate {
                Fate::Acknowledged => assert_eq!(events, 1, "acknowledged {} (seed {seed})", s.key),
                Fate::DuplicateRef => {
                    assert_eq!(events, 0, "refused {} is in the log (seed {seed})", s.key);
                    assert!(
                        held.contains(s.ref_id.as_str()),
                        "{} refused for a free reference",
                        s.key
                    );
                }
                Fate::Unknown => assert!(events <= 1, "{} twice (seed {seed})", s.key),
            }
        }
        for (r, n) in &by_ref {
            assert_eq!(*n, 1, "reference {r} in the log {n} times (seed {seed})");
        }
        let mut expected: BTreeMap<String, i64> = BTreeMap::new();
        for s in &acknowledged {
            *expected.entry(s.wallet.clone()).or_default() += s.amount;
        }
        for w in 0..WALLETS {
            let id = format!("pw-{w}");
            let state = factledger::runtime::bus::load::<Wallet>(&database.store, &id)
                .await
                .expect("load");
            let unknown: i64 = sent
                .iter()
                .filter(|s| {
                    s.fate == Fate::Unknown && s.wallet == id && by_key.contains_key(&s.key)
                })
                .map(|s| s.amount)
                .sum();
            assert_eq!(
                state.state.balances.pending_minor,
                expected.get(&id).copied().unwrap_or(0) + unknown,
                "{id} (seed {seed})"
            );
        }
        let counts = |f: Fate| sent.iter().filter(|s| s.fate == f).count();
        eprintln!(
            "bus_failures: {} acknowledged, {} duplicates refused, {} unknown",
            counts(Fate::Acknowledged),
            counts(Fate::DuplicateRef),
            counts(Fate::Unknown)
        );
        assert!(counts(Fate::Acknowledged) > 100 && counts(Fate::DuplicateRef) > 10);
    }
);
