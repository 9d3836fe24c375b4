//! Store-level integration tests: units of work built by hand, on both backends.

use crate::common;

use chrono::{DateTime, SubsecRound, Utc};
use common::{Backend, TestDb};
use factledger::infra::store::{
    self, DynStore, IdempotencyRow, LedgerRefRow, Metadata, SealedEvent, SnapshotRow, StoreError,
    StreamAppend, UnitOfWork, GENESIS_HASH,
};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::{Duration, Instant};

const T: &str = "test";

fn meta() -> Metadata {
    Metadata {
        correlation_id: "corr-1".into(),
        causation_id: Some("cause-1".into()),
        command_id: None,
        actor: "tester".into(),
        request_id: "req-1".into(),
        trace_id: "trace-1".into(),
        country_code: "ID".into(),
    }
}

/// Seal `events` (type, version, payload) for a stream that is at `expected_version`
/// with last hash `prev_hash`: sequences follow the head, hashes chain from it, each
/// event gets a fresh uuid and its metadata JSON, exactly as the bus does.
fn seal(
    aggregate_type: &str,
    aggregate_id: &str,
    expected_version: i64,
    prev_hash: &str,
    events: Vec<(&str, i32, Value)>,
) -> StreamAppend {
    let now = Utc::now().trunc_subsecs(6);
    let m = meta();
    let mut prev = prev_hash.to_owned();
    let mut sealed = Vec::with_capacity(events.len());
    for (i, (event_type, event_version, payload)) in events.into_iter().enumerate() {
        let sequence = expected_version + 1 + i as i64;
        let event = SealedEvent::seal(
            &common::chain_key(),
            &prev,
            aggregate_type,
            aggregate_id,
            sequence,
            event_type.to_owned(),
            event_version,
            payload.to_string(),
            &m,
            uuid::Uuid::new_v4(),
            now,
        );
        prev = event.hash.clone();
        sealed.push(event);
    }
    StreamAppend {
        aggregate_type: aggregate_type.to_owned(),
        aggregate_id: aggregate_id.to_owned(),
        expected_version,
        expected_hash: prev_hash.to_owned(),
        events: sealed,
    }
}

/// `n` generic events tagged with `tag`.
fn noted(n: usize, tag: &str) -> Vec<(&'static str, i32, Value)> {
    (0..n)
        .map(|i| ("Noted", 1, json!({"type": "Noted", "tag": tag, "i": i})))
        .collect()
}

/// The version and last hash a stream has after `s` is appended.
fn after(s: &StreamAppend) -> (i64, String) {
    (
        s.expected_version + s.events.len() as i64,
        s.events.last().expect("events").hash.clone(),
    )
}

/// `n` events for the current head of a stream.
async fn next(store: &DynStore, id: &str, n: usize) -> StreamAppend {
    let (version, hash) = store.stream_head(T, id).await.unwrap();
    seal(T, id, version, &hash, noted(n, id))
}

fn unit(streams: Vec<StreamAppend>) -> UnitOfWork {
    UnitOfWork {
        streams,
        ..Default::default()
    }
}

fn key(k: &str) -> IdempotencyRow {
    IdempotencyRow {
        scope: "tester".to_owned(),
        key: k.to_owned(),
        request_hash: format!("{:0>64}", hex_of(k)),
    }
}

fn hex_of(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect::<String>()[..s.len().min(32)].to_owned()
}

fn ledger_ref(ref_id: &str, event_index: usize) -> LedgerRefRow {
    LedgerRefRow {
        ref_type: "COMMISSION".into(),
        ref_id: ref_id.into(),
        entry_type: "CREDIT_PENDING".into(),
        event_index,
    }
}

async fn all_events(store: &DynStore) -> Vec<store::StoredEvent> {
    let mut out = Vec::new();
    let mut last = 0;
    loop {
        let page = store.read_all(last, 500).await.unwrap();
        let Some(e) = page.last() else { return out };
        last = e.global_position;
        out.extend(page);
    }
}

async fn stream_len(store: &DynStore, id: &str) -> usize {
    store.read_stream(T, id, 1, 1000).await.unwrap().len()
}

fn assert_conflict(r: Result<Vec<store::CommittedUnit>, StoreError>, id: &str, expected: i64) {
    match r {
        Err(StoreError::Conflict {
            aggregate_type,
            aggregate_id,
            expected_version,
        }) => {
            assert_eq!(aggregate_type, T);
            assert_eq!(aggregate_id, id, "conflict names the stream that moved");
            assert_eq!(expected_version, expected);
        }
        other => panic!("expected a conflict on {id}, got {other:?}"),
    }
}

// 1 ---------------------------------------------------------------------------------

store_backends!(
    events_table_refuses_update_and_delete,
    |db: TestDb| async move {
        let store = db.store.clone();
        let s = next(&store, "a", 1).await;
        let original = s.events[0].payload.clone();
        store.append(&[unit(vec![s])]).await.unwrap();

        let upd = store.execute_raw("UPDATE events SET payload = '{}'").await;
        assert!(upd.is_err(), "UPDATE must be refused, got {upd:?}");
        let del = store.execute_raw("DELETE FROM events").await;
        assert!(del.is_err(), "DELETE must be refused, got {del:?}");

        let events = all_events(&store).await;
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].payload, original);
        assert!(store::verify(&*store, None)
            .await
            .unwrap()
            .first_broken
            .is_none());
    }
);

// 2 ---------------------------------------------------------------------------------

store_backends!(
    a_stale_expected_version_is_a_conflict_and_writes_nothing,
    |db: TestDb| async move {
        let store = db.store.clone();
        let s = next(&store, "a", 2).await;
        store.append(&[unit(vec![s.clone()])]).await.unwrap();
        let head = store.head_position().await.unwrap();

        // Decided on version 1 (stale: the stream is at 2).
        let stale = seal(T, "a", 1, &s.events[0].hash, noted(1, "stale"));
        assert_conflict(store.append(&[unit(vec![stale])]).await, "a", 1);
        // Decided as if the stream were new.
        let fresh = seal(T, "a", 0, GENESIS_HASH, noted(1, "stale"));
        assert_conflict(store.append(&[unit(vec![fresh])]).await, "a", 0);

        assert_eq!(store.head_position().await.unwrap(), head);
        assert_eq!(stream_len(&store, "a").await, 2);
        assert_eq!(store.stream_head(T, "a").await.unwrap(), after(&s));
    }
);

store_backends!(
    an_expected_version_ahead_of_the_head_is_a_conflict,
    |db: TestDb| async move {
        let store = db.store.clone();
        let s = next(&store, "a", 2).await;
        store.append(&[unit(vec![s.clone()])]).await.unwrap();
        let head = store.head_position().await.unwrap();

        // A gap: version 5 was never written.
        let gap = seal(T, "a", 5, GENESIS_HASH, noted(1, "gap"));
        assert_conflict(store.append(&[unit(vec![gap])]).await, "a", 5);
        // A gap on a stream that does not exist at all.
        let gap = seal(T, "nobody", 3, GENESIS_HASH, noted(1, "gap"));
        assert_conflict(store.append(&[unit(vec![gap])]).await, "nobody", 3);

        assert_eq!(store.head_position().await.unwrap(), head);
        assert_eq!(stream_len(&store, "a").await, 2);
        assert_eq!(stream_len(&store, "nobody").await, 0);
    }
);

store_backends!(
    a_head_with_the_right_number_but_another_hash_is_a_conflict,
    |db: TestDb| async move {
        // Writer X decided on a head (version 2, hash H) that never committed; the
        // stream got a different event 2 from writer Y. X's next append states the
        // right number but the wrong hash: it must not be chained onto Y's event.
        let store = db.store.clone();
        store
            .append(&[unit(vec![next(&store, "a", 1).await])])
            .await
            .unwrap();
        let imagined = next(&store, "a", 1).await; // X's event 2, never appended
        store
            .append(&[unit(vec![next(&store, "a", 1).await])])
            .await
            .unwrap(); // Y's event 2
        let (v, h) = after(&imagined);
        assert_eq!(v, 2);
        let head = store.head_position().await.unwrap();
        let on_imagined = seal(T, "a", v, &h, noted(1, "x"));
        assert_conflict(store.append(&[unit(vec![on_imagined])]).await, "a", 2);
        assert_eq!(store.head_position().await.unwrap(), head);
        assert_eq!(stream_len(&store, "a").await, 2);
    }
);

store_backends!(
    any_text_round_trips_exactly_and_keeps_its_hash,
    |db: TestDb| async move {
        // Quotes, backslashes, NUL, control characters, SQL and non-ASCII: stored and
        // read back byte for byte, so the hash chain still verifies.
        let nasty = "it's \\ \"quoted\" \u{0} \n\r\t \u{1a} '); DROP TABLE events; -- \
                     ünïcødé 🙂 \\' \\\\";
        let s = seal(
            T,
            "text",
            0,
            GENESIS_HASH,
            vec![("Noted", 1, json!({"type": "Noted", "text": nasty}))],
        );
        let payload = s.events[0].payload.clone();
        store_and_check(&db, s, &payload).await;
    }
);

async fn store_and_check(db: &TestDb, s: StreamAppend, payload: &str) {
    let store = db.store.clone();
    store.append(&[unit(vec![s])]).await.unwrap();
    let back = store.read_stream(T, "text", 1, 10).await.unwrap();
    assert_eq!(back[0].payload, payload);
    let report = store::verify(&*store, Some((T, "text"))).await.unwrap();
    assert_eq!(report.first_broken, None);
    assert_eq!(store.head_position().await.unwrap(), 1);
}

// 3 ---------------------------------------------------------------------------------

/// A unit over three new streams with a ledger ref, an idempotency key and a snapshot.
fn three_stream_unit() -> UnitOfWork {
    let a = seal(T, "s1", 0, GENESIS_HASH, noted(2, "s1"));
    let b = seal(T, "s2", 0, GENESIS_HASH, noted(1, "s2"));
    let c = seal(T, "s3", 0, GENESIS_HASH, noted(2, "s3"));
    let (v, h) = after(&a);
    UnitOfWork {
        streams: vec![a, b, c],
        ledger_refs: vec![ledger_ref("three-1", 0), ledger_ref("three-2", 4)],
        idempotency: Some(key("three-key")),
        snapshots: vec![SnapshotRow {
            aggregate_type: T.into(),
            aggregate_id: "s1".into(),
            snapshot_version: 1,
            stream_version: v,
            last_hash: h,
            state: "{}".into(),
        }],
        ..Default::default()
    }
}

store_backends!(
    a_failure_after_the_second_of_three_streams_leaves_nothing,
    |db: TestDb| async move {
        let store = db.store.clone();
        let mut u = three_stream_unit();
        u.fail_after_streams = Some(2);
        match store.append(&[u.clone()]).await {
            Err(StoreError::Injected(2)) => {}
            other => panic!("expected Injected(2), got {other:?}"),
        }
        assert!(all_events(&store).await.is_empty());
        assert_eq!(store.head_position().await.unwrap(), 0);
        assert_eq!(
            store.find_idempotency("tester", "three-key").await.unwrap(),
            None
        );
        assert_eq!(store.load_snapshot(T, "s1").await.unwrap(), None);
        for id in ["s1", "s2", "s3"] {
            assert_eq!(
                store.stream_head(T, id).await.unwrap(),
                (0, GENESIS_HASH.to_owned())
            );
        }

        // The very same unit without the fault commits: nothing of the first attempt
        // (events, ledger refs, key, position counter) is in its way.
        u.fail_after_streams = None;
        let done = store.append(&[u]).await.unwrap();
        assert_eq!(done[0].positions, vec![1, 2, 3, 4, 5]);
        let rec = store
            .find_idempotency("tester", "three-key")
            .await
            .unwrap()
            .unwrap();
        assert_eq!((rec.first_position, rec.last_position), (1, 5));
        assert_eq!(
            store
                .load_snapshot(T, "s1")
                .await
                .unwrap()
                .unwrap()
                .stream_version,
            2
        );
        assert_eq!(store.head_position().await.unwrap(), 5);
    }
);

store_backends!(
    a_conflict_on_the_third_stream_leaves_nothing_of_the_first_two,
    |db: TestDb| async move {
        let store = db.store.clone();
        // s3 already exists at version 2.
        let existing = seal(T, "s3", 0, GENESIS_HASH, noted(2, "first"));
        store.append(&[unit(vec![existing.clone()])]).await.unwrap();
        let before = all_events(&store).await;

        for (expected, prev) in [
            (1, existing.events[0].hash.clone()), // stale
            (0, GENESIS_HASH.to_owned()),         // stale: "new"
            (7, GENESIS_HASH.to_owned()),         // ahead of the head
        ] {
            let mut u = three_stream_unit();
            u.streams[2] = seal(T, "s3", expected, &prev, noted(2, "s3"));
            assert_conflict(store.append(&[u]).await, "s3", expected);
            assert_eq!(all_events(&store).await, before);
            assert_eq!(store.head_position().await.unwrap(), 2);
            assert_eq!(stream_len(&store, "s1").await, 0);
            assert_eq!(stream_len(&store, "s2").await, 0);
            assert_eq!(
                store.find_idempotency("tester", "three-key").await.unwrap(),
                None
            );
            assert_eq!(store.load_snapshot(T, "s1").await.unwrap(), None);
        }
        // And the ledger refs of the failed units were not written either.
        let mut u = three_stream_unit();
        u.streams[2] = seal(T, "s3", 2, &after(&existing).1, noted(2, "s3"));
        let done = store.append(&[u]).await.unwrap();
        assert_eq!(done[0].positions, vec![3, 4, 5, 6, 7]);
    }
);

// 4 ---------------------------------------------------------------------------------

store_backends!(
    a_ledger_reference_takes_effect_once,
    |db: TestDb| async move {
        let store = db.store.clone();
        let mut u1 = unit(vec![next(&store, "a", 1).await]);
        u1.ledger_refs.push(ledger_ref("r-1", 0));
        store.append(&[u1]).await.unwrap();
        let head = store.head_position().await.unwrap();

        let mut u2 = unit(vec![next(&store, "b", 2).await]);
        u2.ledger_refs.push(ledger_ref("r-1", 1));
        u2.idempotency = Some(key("u2"));
        match store.append(&[u2.clone()]).await {
            Err(StoreError::DuplicateLedgerRef(_)) => {}
            other => panic!("expected DuplicateLedgerRef, got {other:?}"),
        }
        assert_eq!(store.head_position().await.unwrap(), head);
        assert_eq!(stream_len(&store, "b").await, 0);
        assert_eq!(store.find_idempotency("tester", "u2").await.unwrap(), None);

        // The same ref with another entry type is another business action.
        u2.ledger_refs[0].entry_type = "RELEASE_PENDING".into();
        store.append(&[u2]).await.unwrap();
        assert_eq!(stream_len(&store, "b").await, 2);
    }
);

store_backends!(
    an_idempotency_key_is_recorded_once,
    |db: TestDb| async move {
        let store = db.store.clone();
        let mut u1 = unit(vec![next(&store, "a", 2).await]);
        u1.idempotency = Some(key("k-1"));
        let done = store.append(&[u1]).await.unwrap();
        assert_eq!(done[0].positions, vec![1, 2]);

        let mut u2 = unit(vec![next(&store, "b", 1).await]);
        u2.idempotency = Some(key("k-1"));
        u2.ledger_refs.push(ledger_ref("r-2", 0));
        match store.append(&[u2]).await {
            Err(StoreError::DuplicateIdempotencyKey(_)) => {}
            other => panic!("expected DuplicateIdempotencyKey, got {other:?}"),
        }
        assert_eq!(store.head_position().await.unwrap(), 2);
        assert_eq!(stream_len(&store, "b").await, 0);
        let rec = store
            .find_idempotency("tester", "k-1")
            .await
            .unwrap()
            .unwrap();
        assert_eq!((rec.first_position, rec.last_position), (1, 2));
        assert_eq!(rec.request_hash, key("k-1").request_hash);
        // r-2 was not recorded by the failed unit.
        let mut u3 = unit(vec![next(&store, "b", 1).await]);
        u3.ledger_refs.push(ledger_ref("r-2", 0));
        store.append(&[u3]).await.unwrap();
    }
);

// 5 ---------------------------------------------------------------------------------

store_backends!(
    a_batch_gets_contiguous_positions_in_unit_order,
    |db: TestDb| async move {
        let store = db.store.clone();
        store
            .append(&[unit(vec![next(&store, "z", 1).await])])
            .await
            .unwrap();

        // u1 and u3 append to the same stream "a": u3 is decided on u1's result, as the
        // bus does within one group commit. u2 appends to an existing stream.
        let a1 = next(&store, "a", 2).await;
        let (v, h) = after(&a1);
        let mut u1 = unit(vec![a1]);
        u1.idempotency = Some(key("b-1"));
        let mut u2 = unit(vec![next(&store, "z", 1).await]);
        u2.idempotency = Some(key("b-2"));
        u2.ledger_refs.push(ledger_ref("b-2", 0));
        let mut u3 = unit(vec![
            seal(T, "a", v, &h, noted(3, "a")),
            next(&store, "y", 1).await,
        ]);
        u3.idempotency = Some(key("b-3"));
        let done = store.append(&[u1, u2, u3]).await.unwrap();
        let positions: Vec<_> = done.iter().map(|c| c.positions.clone()).collect();
        assert_eq!(positions, vec![vec![2, 3], vec![4], vec![5, 6, 7, 8]]);
        for (k, (f, l)) in [("b-1", (2, 3)), ("b-2", (4, 4)), ("b-3", (5, 8))] {
            let rec = store.find_idempotency("tester", k).await.unwrap().unwrap();
            assert_eq!((rec.first_position, rec.last_position), (f, l), "{k}");
        }
        let events = all_events(&store).await;
        let order: Vec<_> = events
            .iter()
            .map(|e| (e.global_position, e.aggregate_id.as_str(), e.sequence))
            .collect();
        assert_eq!(
            order,
            vec![
                (1, "z", 1),
                (2, "a", 1),
                (3, "a", 2),
                (4, "z", 2),
                (5, "a", 3),
                (6, "a", 4),
                (7, "a", 5),
                (8, "y", 1)
            ]
        );
        assert_eq!(store.head_position().await.unwrap(), 8);
        assert!(store::verify(&*store, None)
            .await
            .unwrap()
            .first_broken
            .is_none());
    }
);

store_backends!(
    one_conflicting_unit_fails_the_whole_batch,
    |db: TestDb| async move {
        let store = db.store.clone();
        let x = next(&store, "x", 1).await;
        store.append(&[unit(vec![x.clone()])]).await.unwrap();

        let cases: Vec<(StreamAppend, i64)> = vec![
            (seal(T, "x", 0, GENESIS_HASH, noted(1, "x")), 0), // stale
            (seal(T, "x", 4, GENESIS_HASH, noted(1, "x")), 4), // gap
        ];
        for (bad, expected) in cases {
            let mut u1 = unit(vec![next(&store, "p", 2).await]);
            u1.idempotency = Some(key("c-1"));
            u1.ledger_refs.push(ledger_ref("c-1", 0));
            let mut u2 = unit(vec![bad]);
            u2.idempotency = Some(key("c-2"));
            let mut u3 = unit(vec![next(&store, "q", 1).await]);
            u3.idempotency = Some(key("c-3"));
            assert_conflict(store.append(&[u1, u2, u3]).await, "x", expected);
            assert_eq!(store.head_position().await.unwrap(), 1);
            assert_eq!(all_events(&store).await.len(), 1);
            for k in ["c-1", "c-2", "c-3"] {
                assert_eq!(store.find_idempotency("tester", k).await.unwrap(), None);
            }
        }

        // A unit chained on an earlier unit of the same batch must follow it exactly.
        let p = next(&store, "p", 1).await;
        let (v, h) = after(&p);
        let gap = seal(T, "p", v + 1, &h, noted(1, "p"));
        assert_conflict(
            store
                .append(&[unit(vec![p.clone()]), unit(vec![gap])])
                .await,
            "p",
            v + 1,
        );
        let overlap = seal(T, "p", v - 1, GENESIS_HASH, noted(1, "p"));
        assert_conflict(
            store.append(&[unit(vec![p]), unit(vec![overlap])]).await,
            "p",
            v - 1,
        );
        assert_eq!(store.head_position().await.unwrap(), 1);
    }
);

// 6 ---------------------------------------------------------------------------------

store_backends!(
    verify_finds_the_first_tampered_event,
    |db: TestDb| async move {
        let store = db.store.clone();
        // Three interleaved streams, three units each.
        for round in 0..3 {
            for id in ["a", "b", "c"] {
                store
                    .append(&[unit(vec![next(&store, id, round + 1).await])])
                    .await
                    .unwrap();
            }
        }
        let clean = store::verify(&*store, None).await.unwrap();
        assert_eq!(clean.first_broken, None);
        assert_eq!(clean.streams_checked, 3);
        assert_eq!(clean.events_checked, 18);
        assert_eq!(store.head_position().await.unwrap(), 18);

        // Tamper with b's 4th event (and, later in the chain, b's 6th).
        let b = store.read_stream(T, "b", 1, 100).await.unwrap();
        let target = &b[3];
        assert_eq!(target.sequence, 4);
        store
            .execute_raw("DROP TRIGGER events_refuse_update")
            .await
            .unwrap();
        let n = store
            .execute_raw(&format!(
                "UPDATE events SET payload = '{{\"type\":\"Noted\",\"tag\":\"forged\"}}' \
             WHERE global_position IN ({}, {})",
                target.global_position, b[5].global_position
            ))
            .await
            .unwrap();
        assert_eq!(n, 2);

        let all = store::verify(&*store, None).await.unwrap();
        let broken = all.first_broken.expect("tampering must be found");
        assert_eq!(broken.aggregate_id, "b");
        assert_eq!(broken.sequence, 4);
        assert_eq!(broken.global_position, target.global_position);
        assert_eq!(broken.stored_hash, target.hash);
        assert_ne!(broken.expected_hash, target.hash);

        let one = store::verify(&*store, Some((T, "b"))).await.unwrap();
        assert_eq!(one.first_broken, Some(broken));
        assert_eq!(one.streams_checked, 1);
        // Verification goes on past a broken link: b's 6th event is named too.
        assert_eq!(one.events_checked, 6);
        let named: Vec<i64> = all.findings.iter().map(|f| f.global_position).collect();
        assert_eq!(named, vec![target.global_position, b[5].global_position]);
        for id in ["a", "c"] {
            let r = store::verify(&*store, Some((T, id))).await.unwrap();
            assert_eq!(r.first_broken, None, "{id}");
            assert_eq!(r.events_checked, 6);
        }

        // The columns audit queries read are covered too: forging who did it, or
        // which request it belonged to, breaks the chain just the same.
        let a = store.read_stream(T, "a", 1, 100).await.unwrap();
        for (column, value) in [("actor", "key:forged"), ("correlation_id", "forged")] {
            let target = if column == "actor" { &a[1] } else { &a[0] };
            store
                .execute_raw(&format!(
                    "UPDATE events SET {column} = '{value}' WHERE global_position = {}",
                    target.global_position
                ))
                .await
                .unwrap();
            let r = store::verify(&*store, Some((T, "a"))).await.unwrap();
            let broken = r.first_broken.expect("a forged column must be found");
            assert_eq!(broken.global_position, target.global_position, "{column}");
        }
    }
);

store_backends!(
    verify_reports_a_deleted_event_and_reads_go_on,
    |db: TestDb| async move {
        let store = db.store.clone();
        for id in ["a", "b"] {
            for _ in 0..2 {
                store
                    .append(&[unit(vec![next(&store, id, 3).await])])
                    .await
                    .unwrap();
            }
        }
        let a = store.read_stream(T, "a", 1, 100).await.unwrap();
        store
            .execute_raw("DROP TRIGGER events_refuse_delete")
            .await
            .unwrap();
        let n = store
            .execute_raw(&format!(
                "DELETE FROM events WHERE global_position = {}",
                a[3].global_position
            ))
            .await
            .unwrap();
        assert_eq!(n, 1);

        let started = Instant::now();
        let report = store::verify(&*store, None).await.unwrap();
        let broken = report
            .first_broken
            .expect("a deleted event breaks the chain");
        assert_eq!((broken.aggregate_id.as_str(), broken.sequence), ("a", 5));
        assert_eq!(broken.global_position, a[4].global_position);
        assert!(broken.reason.contains("follows"), "{}", broken.reason);
        // The global tail never skips a hole (R-ES-4): after a short wait for a
        // commit race it fails naming the missing position; reads before it work.
        match store.read_all(a[2].global_position, 100).await {
            Err(StoreError::Corrupt(m)) => {
                assert!(m.contains(&a[3].global_position.to_string()), "{m}")
            }
            other => panic!("reading past a deleted event must fail, got {other:?}"),
        }
        let before = store.read_all(0, 100).await.unwrap();
        assert_eq!(
            before.last().unwrap().global_position,
            a[3].global_position - 1
        );
        assert!(started.elapsed() < Duration::from_secs(5));
    }
);

// 7 ---------------------------------------------------------------------------------

fn sql_str(s: &str) -> String {
    assert!(!s.contains('\\'), "no backslashes in hand-written SQL");
    format!("'{}'", s.replace('\'', "''"))
}

fn sql_time(backend: Backend, t: &DateTime<Utc>) -> String {
    match backend {
        Backend::Mysql => format!("'{}'", t.format("%Y-%m-%d %H:%M:%S%.6f")),
        Backend::Sqlite => format!("'{}'", t.format("%Y-%m-%dT%H:%M:%S%.6fZ")),
    }
}

store_backends!(
    a_v1_movement_is_upcast_on_read_and_loads,
    |db: TestDb| async move {
        use factledger_aggregates::wallet::{Wallet, WalletCommand};
        let store = db.store.clone();
        let id = "w-legacy";
        let opened = seal(
            "wallet",
            id,
            0,
            GENESIS_HASH,
            vec![(
                "WalletOpened",
                1,
                json!({"type": "WalletOpened", "user_id": "u-1", "currency": "IDR"}),
            )],
        );
        store.append(&[unit(vec![opened.clone()])]).await.unwrap();

        // A PendingCredited as release 1 wrote it: no `delta`, event_version 1.
        let v1 = json!({
            "type": "PendingCredited", "ref_type": "COMMISSION", "ref_id": "c-legacy",
            "entry_type": "CREDIT_PENDING", "amount_minor": 1500,
            "before": {"pending_minor": 0, "available_minor": 0, "frozen_minor": 0, "risk_hold_minor": 0},
            "after": {"pending_minor": 1500, "available_minor": 0, "frozen_minor": 0, "risk_hold_minor": 0}
        });
        let legacy = seal(
            "wallet",
            id,
            1,
            &after(&opened).1,
            vec![("PendingCredited", 1, v1)],
        );
        let e = &legacy.events[0];
        let position = store.head_position().await.unwrap() + 1;
        let sql = format!(
            "INSERT INTO events (global_position, aggregate_type, aggregate_id, sequence, \
         event_type, event_version, event_id, payload, metadata, correlation_id, actor, hash, \
         hash_key, recorded_at) VALUES ({position}, 'wallet', {}, 2, 'PendingCredited', 1, {}, \
         {}, {}, {}, {}, {}, {}, {}); UPDATE event_sequence SET last_position = {position} \
         WHERE id = 1",
            sql_str(id),
            sql_str(&e.event_id.to_string()),
            sql_str(&e.payload),
            sql_str(&e.metadata),
            sql_str(&e.correlation_id),
            sql_str(&e.actor),
            sql_str(&e.hash),
            sql_str(&e.hash_key),
            sql_time(db.backend, &e.recorded_at),
        );
        store.execute_raw(&sql).await.unwrap();
        assert_eq!(store.head_position().await.unwrap(), position);
        assert!(store::verify(&*store, None)
            .await
            .unwrap()
            .first_broken
            .is_none());

        let stored = store.read_stream("wallet", id, 2, 10).await.unwrap();
        assert_eq!(stored.len(), 1);
        assert_eq!(
            stored[0].event_version, 1,
            "stored events are never rewritten"
        );
        assert!(!stored[0].payload.contains("delta"));
        assert_eq!(stored[0].recorded_at, e.recorded_at);
        let view = stored[0].view().unwrap();
        assert_eq!(view.event_version, 2);
        assert_eq!(
            view.payload["delta"],
            json!({"pending_minor": 1500, "available_minor": 0, "frozen_minor": 0, "risk_hold_minor": 0})
        );
        assert_eq!(view.metadata["event_id"], json!(e.event_id.to_string()));

        let loaded = factledger::runtime::bus::load::<Wallet>(&store, id)
            .await
            .unwrap();
        assert_eq!(loaded.version, 2);
        assert_eq!(loaded.last_hash, e.hash);
        assert_eq!(loaded.state.balances.pending_minor, 1500);
        assert_eq!(loaded.state.user_id, "u-1");

        // The bus continues the chain after the legacy event.
        let bus = factledger::runtime::bus::CommandBus::<Wallet>::start(store.clone());
        let cmd: WalletCommand = serde_json::from_value(json!({
        "type": "CreditPending", "ref_type": "COMMISSION", "ref_id": "c-new", "amount_minor": 500
    }))
    .unwrap();
        let out = bus
            .execute(factledger::runtime::bus::CommandEnvelope {
                aggregate_id: id.into(),
                command: cmd,
                metadata: meta(),
                idempotency: None,
                jobs: Vec::new(),
                fence: None,
            })
            .await
            .unwrap();
        assert_eq!(out.events[0].sequence, 3);
        assert_eq!(
            out.events[0].payload["before"]["pending_minor"],
            json!(1500)
        );
        let loaded = factledger::runtime::bus::load::<Wallet>(&store, id)
            .await
            .unwrap();
        assert_eq!(loaded.state.balances.pending_minor, 2000);
        assert!(store::verify(&*store, None)
            .await
            .unwrap()
            .first_broken
            .is_none());
    }
);

// 8 ---------------------------------------------------------------------------------

const WRITERS: usize = 8;
const WRITE_FOR: Duration = Duration::from_millis(5_200);
const EVENTS_MAX: usize = 200_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn global_order_holds_under_8_concurrent_appenders() {
    let db = TestDb::new(Backend::Mysql).await;
    let store = db.store.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let written = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let start = Instant::now();

    // Tailing reader: positions must only ever go up, and none may be skipped.
    let reader = {
        let store = store.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut seen: Vec<i64> = Vec::new();
            let mut last = 0i64;
            let mut drained = false;
            loop {
                let page = store.read_all(last, 500).await.unwrap();
                for e in &page {
                    assert!(
                        e.global_position > last,
                        "read_all went back: {} after {last}",
                        e.global_position
                    );
                    last = e.global_position;
                    seen.push(last);
                }
                if page.is_empty() {
                    if drained {
                        return seen;
                    }
                    if stop.load(std::sync::atomic::Ordering::SeqCst) {
                        // Writers are done: one more pass to drain.
                        drained = true;
                    } else {
                        tokio::task::yield_now().await;
                    }
                }
            }
        })
    };

    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let store = store.clone();
        let written = written.clone();
        writers.push(tokio::spawn(async move {
            let mut heads: HashMap<String, (i64, String)> = HashMap::new();
            let mut positions = Vec::new();
            let mut i = 0usize;
            while start.elapsed() < WRITE_FOR
                && written.load(std::sync::atomic::Ordering::Relaxed) < EVENTS_MAX
            {
                i += 1;
                // Mostly one event on the writer's main stream; every 5th unit spans
                // 2-3 events over two of its streams.
                let mut streams = Vec::new();
                let plan: &[(usize, usize)] = match i % 10 {
                    5 => &[(0, 2)],
                    0 => &[(0, 1), (1, 2)],
                    _ => &[(0, 1)],
                };
                for &(s, n) in plan {
                    let id = format!("w{w}-s{s}");
                    let (v, h) = heads
                        .get(&id)
                        .cloned()
                        .unwrap_or((0, GENESIS_HASH.to_owned()));
                    let sa = seal(T, &id, v, &h, noted(n, &id));
                    heads.insert(id, after(&sa));
                    streams.push(sa);
                }
                let u = unit(streams);
                let n = u.event_count();
                let done = store.append(&[u]).await.expect("append");
                assert_eq!(done[0].positions.len(), n);
                positions.extend_from_slice(&done[0].positions);
                written.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            }
            positions
        }));
    }
    let mut appended = Vec::new();
    for w in writers {
        appended.extend(w.await.unwrap());
    }
    let elapsed = start.elapsed();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let seen = reader.await.unwrap();

    let head = store.head_position().await.unwrap();
    appended.sort_unstable();
    let n = appended.len();
    assert_eq!(
        head as usize, n,
        "head position equals the number of events"
    );
    assert!(
        appended.iter().copied().eq(1..=head),
        "positions returned to writers are exactly 1..=head"
    );
    let missed: Vec<i64> = {
        let seen: std::collections::HashSet<i64> = seen.iter().copied().collect();
        (1..=head).filter(|p| !seen.contains(p)).collect()
    };
    assert!(
        missed.is_empty(),
        "the tailing reader skipped {} of {n} events (committed but not yet visible \
         when a later position was read), first: {:?}",
        missed.len(),
        &missed[..missed.len().min(20)]
    );
    assert_eq!(
        seen.len(),
        n,
        "the tailing reader saw every event exactly once"
    );
    assert!(seen.iter().copied().eq(1..=head), "no gaps, no repeats");
    println!(
        "global order: {n} events by {WRITERS} writers in {:.2} s ({:.0} events/s), all seen in order",
        elapsed.as_secs_f64(),
        n as f64 / elapsed.as_secs_f64()
    );
    assert!(elapsed >= Duration::from_secs(5) || n >= EVENTS_MAX);
}

/// Audit queries are served by indexes, never a full scan (EXPLAIN on MariaDB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_queries_use_their_indexes() {
    use sqlx::{Connection, Row};
    let db = TestDb::new(common::Backend::Mysql).await;
    let store = db.store.clone();
    for id in ["a", "b", "c", "d"] {
        store
            .append(&[unit(vec![next(&store, id, 5).await])])
            .await
            .unwrap();
    }
    let mut conn = sqlx::MySqlConnection::connect(&db.url).await.unwrap();
    sqlx::Executor::execute(&mut conn, "ANALYZE TABLE events")
        .await
        .unwrap();
    for (sql, index) in [
        (
            "EXPLAIN SELECT * FROM events WHERE correlation_id = 'corr-1' \
             AND global_position > 0 ORDER BY global_position LIMIT 100",
            "ix_events_correlation",
        ),
        (
            "EXPLAIN SELECT * FROM events WHERE actor = 'tester' \
             AND global_position > 0 ORDER BY global_position LIMIT 100",
            "ix_events_actor",
        ),
        (
            "EXPLAIN SELECT * FROM events WHERE event_type = 'Noted' \
             AND recorded_at >= '2026-01-01' AND recorded_at < '2999-01-01' \
             AND global_position > 0 ORDER BY global_position LIMIT 100",
            "ix_events_type_time",
        ),
    ] {
        let row = sqlx::query(sql).fetch_one(&mut conn).await.unwrap();
        let access: String = row.try_get("type").unwrap();
        let key: Option<String> = row.try_get("key").unwrap();
        println!("{index}: type={access} key={key:?}");
        assert_ne!(access, "ALL", "{sql} scans the whole table");
        assert_eq!(key.as_deref(), Some(index), "{sql}");
    }
}
