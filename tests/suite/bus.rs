//! Command-bus integration tests: wallets through `CommandBus::execute`, both backends.

use crate::common;

use common::TestDb;
use factledger::infra::store::{DynStore, IdempotencyRow, Metadata};
use factledger::runtime::bus::{BusError, CommandBus, CommandEnvelope, CommandOutcome};
use factledger_aggregates::wallet::{Wallet, WalletCommand, WalletError};
use serde_json::json;

type Bus = CommandBus<Wallet>;
type Outcome = Result<CommandOutcome, BusError<WalletError>>;

fn meta(n: usize) -> Metadata {
    Metadata {
        correlation_id: format!("corr-{n}"),
        causation_id: Some(format!("cause-{n}")),
        command_id: Some(format!("cmd-{n}")),
        actor: "tester".into(),
        request_id: format!("req-{n}"),
        trace_id: format!("trace-{n}"),
        country_code: "ID".into(),
    }
}

fn env(id: &str, command: WalletCommand) -> CommandEnvelope<WalletCommand> {
    CommandEnvelope {
        aggregate_id: id.to_owned(),
        command,
        metadata: meta(0),
        idempotency: None,
        jobs: Vec::new(),
        fence: None,
    }
}

/// Commands are built from their wire form, as clients send them.
fn cmd(v: serde_json::Value) -> WalletCommand {
    serde_json::from_value(v).expect("valid command")
}

fn open() -> WalletCommand {
    cmd(json!({"type": "Open", "user_id": "user-1", "currency": "IDR"}))
}

fn moving(kind: &str, ref_id: &str, amount: i64) -> WalletCommand {
    cmd(json!({"type": kind, "ref_type": "COMMISSION", "ref_id": ref_id, "amount_minor": amount}))
}

fn credit(ref_id: &str, amount: i64) -> WalletCommand {
    moving("CreditPending", ref_id, amount)
}

fn idem(key: &str, request_hash: &str) -> Option<IdempotencyRow> {
    Some(IdempotencyRow {
        scope: "tester".to_owned(),
        key: key.to_owned(),
        request_hash: format!("{request_hash:0>64}"),
    })
}

async fn opened(store: &DynStore, id: &str) -> Bus {
    let bus = Bus::start(store.clone());
    bus.execute(env(id, open())).await.unwrap();
    bus
}

/// Run `commands` concurrently on `bus`, results in input order.
async fn burst(bus: &Bus, envs: Vec<CommandEnvelope<WalletCommand>>) -> Vec<Outcome> {
    let tasks: Vec<_> = envs
        .into_iter()
        .map(|e| {
            let bus = bus.clone();
            tokio::spawn(async move { bus.execute(e).await })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

// 9 ---------------------------------------------------------------------------------

both_backends!(
    state_is_the_same_with_and_without_snapshots,
    |db: TestDb| async move {
        let store = db.store.clone();
        let id = "w-snap";
        let bus = opened(&store, id).await;
        // 249 credits, a few at a time so batches of several commands on one stream occur.
        let mut expected = 0i64;
        let mut n = 0;
        while n < 249 {
            let envs: Vec<_> = (n..(n + 10).min(249))
                .map(|i| env(id, credit(&format!("snap-{i}"), 100 + i as i64)))
                .collect();
            for (k, r) in burst(&bus, envs).await.into_iter().enumerate() {
                r.unwrap();
                expected += 100 + (n + k) as i64;
            }
            n = (n + 10).min(249);
        }

        let warm = bus.state(id).await.unwrap();
        assert_eq!(warm.version, 250);
        assert_eq!(warm.state.balances.pending_minor, expected);

        // A snapshot was written every 100 events, with the events it covers.
        let snap = store
            .load_snapshot("wallet", id)
            .await
            .unwrap()
            .expect("snapshot");
        assert_eq!(snap.stream_version, 200);
        let at_200 = store.read_stream("wallet", id, 200, 1).await.unwrap();
        assert_eq!(snap.last_hash, at_200[0].hash);

        bus.clear_cache();
        let from_snapshot = bus.state(id).await.unwrap();
        let fresh = Bus::start(store.clone()).state(id).await.unwrap();
        for l in [&from_snapshot, &fresh] {
            assert_eq!(l.state, warm.state);
            assert_eq!(l.version, warm.version);
            assert_eq!(l.last_hash, warm.last_hash);
            assert_eq!(
                l.events_since_snapshot, 50,
                "only the tail after version 200 is read"
            );
        }

        // Loading really starts from the snapshot: a marked snapshot shows through.
        let mut marked: serde_json::Value = serde_json::from_str(&snap.state).unwrap();
        marked["user_id"] = json!("from-snapshot");
        store
            .execute_raw(&format!(
                "UPDATE snapshots SET state = '{}' WHERE aggregate_id = '{id}'",
                marked
            ))
            .await
            .unwrap();
        let l = factledger::runtime::bus::load::<Wallet>(&store, id)
            .await
            .unwrap();
        assert_eq!(l.state.user_id, "from-snapshot");
        assert_eq!(l.state.balances, warm.state.balances);

        // Without snapshots the full replay gives the identical state.
        assert!(store.delete_snapshots().await.unwrap() >= 1);
        assert_eq!(store.load_snapshot("wallet", id).await.unwrap(), None);
        bus.clear_cache();
        let replayed = bus.state(id).await.unwrap();
        assert_eq!(replayed.state, warm.state);
        assert_eq!(replayed.version, 250);
        assert_eq!(replayed.last_hash, warm.last_hash);
        assert_eq!(replayed.events_since_snapshot, 250);
    }
);

// 10 --------------------------------------------------------------------------------

both_backends!(
    a_repeated_idempotency_key_replays_the_first_outcome,
    |db: TestDb| async move {
        let store = db.store.clone();
        let id = "w-idem";
        let bus = opened(&store, id).await;
        let mut e = env(id, credit("idem-1", 700));
        e.idempotency = idem("key-1", "aaaa");

        let first = bus.execute(e.clone()).await.unwrap();
        assert!(!first.replayed);
        let head = store.head_position().await.unwrap();
        assert_eq!(first.position, head);

        let again = bus.execute(e.clone()).await.unwrap();
        assert!(again.replayed);
        assert_eq!(again.position, first.position);
        assert_eq!(again.events.len(), first.events.len());
        for (a, f) in again.events.iter().zip(&first.events) {
            assert_eq!(
                (
                    a.global_position,
                    a.sequence,
                    &a.event_id,
                    &a.hash,
                    &a.payload,
                    &a.metadata
                ),
                (
                    f.global_position,
                    f.sequence,
                    &f.event_id,
                    &f.hash,
                    &f.payload,
                    &f.metadata
                )
            );
        }
        assert_eq!(store.head_position().await.unwrap(), head);

        // Same key, another request: refused, nothing written.
        let mut other = env(id, credit("idem-2", 1));
        other.idempotency = idem("key-1", "bbbb");
        assert!(matches!(
            bus.execute(other).await,
            Err(BusError::IdempotencyMismatch)
        ));
        // A fresh bus (cold cache) replays the same way.
        let cold = Bus::start(store.clone()).execute(e).await.unwrap();
        assert!(cold.replayed);
        assert_eq!(cold.position, first.position);
        assert_eq!(store.head_position().await.unwrap(), head);
        assert_eq!(
            bus.state(id).await.unwrap().state.balances.pending_minor,
            700
        );
    }
);

both_backends!(
    fifty_concurrent_requests_with_one_key_write_once,
    |db: TestDb| async move {
        let store = db.store.clone();
        let id = "w-idem50";
        let bus = opened(&store, id).await;
        let head = store.head_position().await.unwrap();

        for (key, command) in [
            ("k-credit", credit("idem-50", 900)),
            // A command that would be refused if decided again after the first commits.
            (
                "k-block",
                cmd(json!({"type": "BlockWithdrawals", "ref_type": "RISK", "ref_id": "risk-1"})),
            ),
        ] {
            let envs = (0..50)
                .map(|_| {
                    let mut e = env(id, command.clone());
                    e.idempotency = idem(key, "cccc");
                    e
                })
                .collect();
            let results: Vec<_> = burst(&bus, envs)
                .await
                .into_iter()
                .map(|r| r.unwrap_or_else(|e| panic!("{key}: {e:?}")))
                .collect();
            let positions: Vec<i64> = results[0]
                .events
                .iter()
                .map(|e| e.global_position)
                .collect();
            assert_eq!(positions.len(), 1);
            for r in &results {
                let p: Vec<i64> = r.events.iter().map(|e| e.global_position).collect();
                assert_eq!(p, positions, "{key}: every request sees the same events");
                assert_eq!(r.position, results[0].position);
            }
            assert_eq!(results.iter().filter(|r| !r.replayed).count(), 1, "{key}");
        }
        assert_eq!(store.head_position().await.unwrap(), head + 2);
        assert_eq!(
            store.read_stream("wallet", id, 1, 100).await.unwrap().len(),
            3
        );
        bus.clear_cache();
        let s = bus.state(id).await.unwrap();
        assert_eq!(s.state.balances.pending_minor, 900);
        assert_eq!(s.state.withdrawal_blocks.len(), 1);
    }
);

// 11 --------------------------------------------------------------------------------

both_backends!(
    two_buses_on_one_store_re_decide_on_conflicts,
    |db: TestDb| async move {
        let store = db.store.clone();
        let id = "w-two";
        let bus_a = opened(&store, id).await;
        // A second bus on the same store: another process, with its own cache.
        let bus_b = Bus::start(store.clone());

        let mut tasks = Vec::new();
        for i in 0..200usize {
            let bus = if i % 2 == 0 {
                bus_a.clone()
            } else {
                bus_b.clone()
            };
            let amount = 1 + i as i64;
            let e = env(id, credit(&format!("two-{i}"), amount));
            tasks.push(tokio::spawn(async move { (amount, bus.execute(e).await) }));
        }
        let (mut sum, mut ok, mut conflicts) = (0i64, 0i64, 0usize);
        for t in tasks {
            match t.await.unwrap() {
                (amount, Ok(_)) => {
                    sum += amount;
                    ok += 1;
                }
                (_, Err(BusError::Conflict(_))) => conflicts += 1,
                (_, Err(e)) => panic!("unexpected failure: {e:?}"),
            }
        }
        println!("two buses: {ok} committed, {conflicts} gave up on conflicts");
        let s = factledger::runtime::bus::load::<Wallet>(&store, id)
            .await
            .unwrap();
        assert_eq!(s.state.balances.pending_minor, sum);
        assert_eq!(s.version, 1 + ok);
        assert_eq!(conflicts, 0, "every conflict was re-decided");
        assert_eq!(s.version, 201);
        assert_eq!(sum, (1..=200).sum::<i64>());
    }
);

// 12 --------------------------------------------------------------------------------

both_backends!(
    a_refused_command_fails_alone_in_a_concurrent_burst,
    |db: TestDb| async move {
        let store = db.store.clone();
        let id = "w-burst";
        let bus = opened(&store, id).await;
        bus.execute(env(id, credit("seed", 1_000))).await.unwrap();
        bus.execute(env(id, moving("ReleasePending", "seed", 1_000)))
            .await
            .unwrap();

        let mut envs = Vec::new();
        for i in 0..40 {
            if i == 20 {
                envs.push(env(id, moving("FreezeForWithdrawal", "wd-1", 10_000)));
            }
            envs.push(env(id, credit(&format!("burst-{i}"), 10)));
        }
        let results = burst(&bus, envs).await;
        for (i, r) in results.iter().enumerate() {
            if i == 20 {
                match r {
                    Err(BusError::Domain(WalletError::InsufficientBalance {
                        bucket,
                        balance_minor,
                        amount_minor,
                    })) => {
                        assert_eq!(*bucket, "available");
                        assert_eq!(*balance_minor, 1_000);
                        assert_eq!(*amount_minor, 10_000);
                    }
                    other => panic!("the freeze must be refused, got {other:?}"),
                }
            } else {
                assert!(r.is_ok(), "command {i}: {r:?}");
            }
        }
        bus.clear_cache();
        let s = bus.state(id).await.unwrap();
        assert_eq!(s.version, 3 + 40);
        assert_eq!(s.state.balances.pending_minor, 400);
        assert_eq!(s.state.balances.available_minor, 1_000);
        assert_eq!(s.state.balances.frozen_minor, 0);
    }
);

both_backends!(
    a_duplicate_ledger_ref_through_the_bus_is_refused,
    |db: TestDb| async move {
        let store = db.store.clone();
        let id = "w-dup";
        let bus = opened(&store, id).await;
        bus.execute(env(id, credit("dup-1", 50))).await.unwrap();
        let head = store.head_position().await.unwrap();
        match bus.execute(env(id, credit("dup-1", 60))).await {
            Err(BusError::DuplicateLedgerRef(_)) => {}
            other => panic!("expected DuplicateLedgerRef, got {other:?}"),
        }
        // Through another wallet and another bus (the database index decides).
        let other = opened(&store, "w-dup-2").await;
        let head = head + 1;
        match other.execute(env("w-dup-2", credit("dup-1", 70))).await {
            Err(BusError::DuplicateLedgerRef(_)) => {}
            other => panic!("expected DuplicateLedgerRef, got {other:?}"),
        }
        assert_eq!(store.head_position().await.unwrap(), head);

        // Ten concurrent commands with one ref: exactly one commits.
        let envs = (0..10).map(|i| env(id, credit("dup-2", 10 + i))).collect();
        let results = burst(&bus, envs).await;
        assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 1);
        for r in results.iter().filter(|r| r.is_err()) {
            assert!(matches!(r, Err(BusError::DuplicateLedgerRef(_))), "{r:?}");
        }
        assert_eq!(store.head_position().await.unwrap(), head + 1);
    }
);

// 13 --------------------------------------------------------------------------------

both_backends!(every_event_carries_its_metadata, |db: TestDb| async move {
    let store = db.store.clone();
    let id = "w-meta";
    let bus = Bus::start(store.clone());
    let commands = vec![
        open(),
        credit("m-1", 100),
        moving("ReleasePending", "m-1", 40),
        moving("FreezeForWithdrawal", "m-w", 30),
    ];
    let mut envs = Vec::new();
    for (n, c) in commands.into_iter().enumerate() {
        let mut e = env(id, c);
        e.metadata = meta(n);
        if n == 3 {
            e.metadata.causation_id = None;
            e.metadata.command_id = None;
        }
        envs.push(e);
    }
    let mut outcomes = Vec::new();
    for e in envs {
        outcomes.push(bus.execute(e).await.unwrap());
    }
    let events = store.read_stream("wallet", id, 1, 100).await.unwrap();
    assert_eq!(events.len(), 4);
    for (n, e) in events.iter().enumerate() {
        // The complete metadata: the stored part plus the columns it is split into.
        let m = e.view().unwrap().metadata;
        for field in [
            "event_id",
            "correlation_id",
            "causation_id",
            "command_id",
            "actor",
            "request_id",
            "trace_id",
            "country_code",
            "recorded_at",
        ] {
            assert!(
                m.get(field).is_some(),
                "event {n}: metadata lacks {field}: {m}"
            );
        }
        assert_eq!(m["event_id"], json!(e.event_id));
        assert_eq!(m["correlation_id"], json!(format!("corr-{n}")));
        assert_eq!(m["actor"], json!("tester"));
        assert_eq!(m["request_id"], json!(format!("req-{n}")));
        assert_eq!(m["trace_id"], json!(format!("trace-{n}")));
        assert_eq!(m["country_code"], json!("ID"));
        if n == 3 {
            assert_eq!(m["causation_id"], serde_json::Value::Null);
            assert_eq!(m["command_id"], serde_json::Value::Null);
        } else {
            assert_eq!(m["causation_id"], json!(format!("cause-{n}")));
            assert_eq!(m["command_id"], json!(format!("cmd-{n}")));
        }
        let at = chrono::DateTime::parse_from_rfc3339(m["recorded_at"].as_str().unwrap())
            .unwrap()
            .with_timezone(&chrono::Utc);
        assert_eq!(at, e.recorded_at, "metadata and column agree on the time");
        // What the caller got back is what was stored.
        let view = &outcomes[n].events[0];
        assert_eq!(view.metadata, m);
        assert_eq!(view.event_id, e.event_id);
        assert_eq!(view.global_position, e.global_position);
        assert_eq!(view.hash, e.hash);
    }
    let ids: std::collections::HashSet<_> = events.iter().map(|e| e.event_id.clone()).collect();
    assert_eq!(ids.len(), 4, "event ids are unique");
});
