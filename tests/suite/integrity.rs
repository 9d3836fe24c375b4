//! Tamper evidence that holds against a database administrator (issue 14 items 1–2),
//! named after the findings: each way of changing history with root on the database is
//! planted by hand and must be found with its kind, and reconciliation must never
//! "repair" a loss of events. Both backends.

use crate::common;

use common::{run, Backend, TestDb};
use factledger::infra::store::integrity::{self, anchor, AnchorSinks, TamperKind};
use factledger::infra::store::{self, Keyring, StoredEvent, VerifyReport, LEGACY_KEY_ID};
use factledger::runtime::bus::CommandBus;
use factledger::runtime::projection::catch_up_wallet;
use factledger::runtime::reconcile::{self, FindingKind, ReconcileOptions};
use factledger_aggregates::wallet::Wallet;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// w-1 earns 500, releases it and freezes 200 for a withdrawal; w-2 earns 100 twice.
/// The freeze is the newest event.
async fn history(db: &TestDb) {
    let bus = CommandBus::<Wallet>::start(db.store.clone());
    for w in ["w-2", "w-1"] {
        run(
            &bus,
            w,
            json!({"type": "Open", "user_id": format!("u-{w}"), "currency": "IDR"}),
        )
        .await;
    }
    for c in 1..=2 {
        run(
            &bus,
            "w-2",
            json!({"type": "CreditPending", "ref_type": "COMMISSION",
            "ref_id": format!("w-2-c{c}"), "amount_minor": 100}),
        )
        .await;
    }
    for c in [
        json!({"type": "CreditPending", "ref_type": "COMMISSION", "ref_id": "c-1", "amount_minor": 500}),
        json!({"type": "ReleasePending", "ref_type": "COMMISSION", "ref_id": "c-1", "amount_minor": 500}),
        json!({"type": "FreezeForWithdrawal", "ref_type": "WITHDRAWAL", "ref_id": "wd-1", "amount_minor": 200}),
    ] {
        run(&bus, "w-1", c).await;
    }
}

/// Run statements as the database owner would (triggers dropped first when needed).
async fn tamper(db: &TestDb, sql: &str) {
    db.store
        .execute_raw(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

async fn drop_append_only_triggers(db: &TestDb) {
    tamper(db, "DROP TRIGGER events_refuse_update").await;
    tamper(db, "DROP TRIGGER events_refuse_delete").await;
}

fn anchor_file(dir: &Path) -> PathBuf {
    dir.join("anchors.jsonl")
}

async fn sign_anchor(db: &TestDb, file: &Path) -> integrity::Anchor {
    let d = db.database().await;
    let sinks = AnchorSinks {
        file: Some(file.to_owned()),
    };
    anchor::create(&d.store, &d.db, &sinks, "test", false)
        .await
        .expect("anchor")
        .expect("an anchor is made on demand")
}

async fn verify(db: &TestDb, file: &Path) -> VerifyReport {
    let d = db.database().await;
    integrity::verify_log(&d.store, &d.db, Some(file))
        .await
        .expect("verify runs")
}

fn first(report: &VerifyReport) -> (TamperKind, i64) {
    let f = report
        .first
        .as_ref()
        .unwrap_or_else(|| panic!("tampering must be found: {report:?}"));
    (f.kind, f.global_position)
}

async fn frozen_in_projection(db: &TestDb, wallet: &str) -> i64 {
    let d = db.database().await;
    common::scalar(
        &d.db,
        &format!("SELECT frozen_minor FROM wallet_balances WHERE wallet_id = '{wallet}'"),
    )
    .await
}

both_backends!(
    a_clean_log_verifies_against_its_anchors,
    |db: TestDb| async move {
        let dir = tempfile::tempdir().unwrap();
        history(&db).await;
        let a1 = sign_anchor(&db, &anchor_file(dir.path())).await;
        assert_eq!(a1.anchor_seq, 1);
        assert_eq!(a1.head_position, 7);
        let bus = CommandBus::<Wallet>::start(db.store.clone());
        run(
            &bus,
            "w-2",
            json!({"type": "ReleasePending", "ref_type": "COMMISSION",
            "ref_id": "w-2-c1", "amount_minor": 100}),
        )
        .await;
        let a2 = sign_anchor(&db, &anchor_file(dir.path())).await;
        assert_eq!((a2.anchor_seq, a2.head_position), (2, 8));
        let report = verify(&db, &anchor_file(dir.path())).await;
        assert!(report.ok, "{report:?}");
        assert_eq!(report.first, None);
        assert_eq!(report.events_checked, 8);
        // Each anchor is in the file and in the database (deduplicated: two).
        assert_eq!(report.anchors_checked, 2);
        assert_eq!(report.latest_anchor.as_ref(), Some(&a2));
        assert_eq!(
            anchor::read_file(&anchor_file(dir.path())).unwrap(),
            vec![a1, a2.clone()]
        );
        // ...and published to the outbox for NATS and webhooks.
        let d = db.database().await;
        let published = common::scalar(
            &d.db,
            "SELECT COUNT(*) FROM outbox WHERE type = 'chain.anchor' AND aggregatetype = 'chain'",
        )
        .await;
        assert_eq!(published, 2);
        // The periodic anchorer signs only news.
        let sinks = AnchorSinks {
            file: Some(anchor_file(dir.path())),
        };
        let none = anchor::create(&d.store, &d.db, &sinks, "test", true)
            .await
            .unwrap();
        assert_eq!(none, None);
    }
);

both_backends!(
    f3_deleting_the_newest_event_is_found_as_truncated_and_never_repaired,
    |db: TestDb| async move {
        let dir = tempfile::tempdir().unwrap();
        history(&db).await;
        let p = db.database().await.db;
        catch_up_wallet(&db.store, &p).await.unwrap();
        assert_eq!(frozen_in_projection(&db, "w-1").await, 200);
        let newest = db.store.head_position().await.unwrap();
        let freeze = db.store.read_positions(newest, newest).await.unwrap();
        assert_eq!(freeze[0].event_type, "WithdrawalFrozen");
        // F3 as reported: the delete trigger dropped, the freeze deleted, the trigger
        // re-created; no anchor yet.
        tamper(&db, "DROP TRIGGER events_refuse_delete").await;
        tamper(
            &db,
            &format!("DELETE FROM events WHERE global_position = {newest}"),
        )
        .await;
        let report = verify(&db, &anchor_file(dir.path())).await;
        assert!(!report.ok);
        assert_eq!(
            first(&report),
            (TamperKind::Truncated, newest),
            "{report:?}"
        );

        // Reconciliation with repair: the loss is a log_integrity finding, and no row is
        // "repaired" — the frozen money stays frozen in the projection.
        let options = ReconcileOptions {
            repair: true,
            ..ReconcileOptions::default()
        };
        let rec = reconcile::reconcile(&db.store, &p, options).await.unwrap();
        let log: Vec<_> = rec
            .findings
            .iter()
            .filter(|f| f.kind == FindingKind::LogIntegrity)
            .collect();
        assert!(!log.is_empty(), "{:?}", rec.findings);
        assert!(
            log.iter().any(|f| f.detail.starts_with("truncated")),
            "{log:?}"
        );
        assert_eq!(
            rec.repair_outcome, None,
            "no repair may run over a broken log"
        );
        assert!(rec.findings.iter().all(|f| f.repaired != Some(true)));
        assert!(
            rec.findings
                .iter()
                .filter(|f| f.kind != FindingKind::LogIntegrity)
                .all(|f| f.repair.starts_with("refused")),
            "{:?}",
            rec.findings
        );
        assert!(rec.remaining.event >= 1);
        assert_eq!(frozen_in_projection(&db, "w-1").await, 200);
    }
);

both_backends!(
    a_freeze_moved_to_another_stream_is_found_by_verify_and_reconciliation_and_blocks_repair,
    |db: TestDb| async move {
        let dir = tempfile::tempdir().unwrap();
        history(&db).await;
        let p = db.database().await.db;
        catch_up_wallet(&db.store, &p).await.unwrap();
        sign_anchor(&db, &anchor_file(dir.path())).await;
        // A few more events after the anchor: the anchor's own event stays untouched.
        let bus = CommandBus::<Wallet>::start(db.store.clone());
        run(
            &bus,
            "w-2",
            json!({"type": "CreditPending", "ref_type": "COMMISSION", "ref_id": "w-2-c3", "amount_minor": 100}),
        )
        .await;
        catch_up_wallet(&db.store, &p).await.unwrap();
        let freeze = db
            .store
            .read_stream("wallet", "w-1", 4, 1)
            .await
            .unwrap()
            .remove(0);
        assert_eq!(freeze.event_type, "WithdrawalFrozen");
        let at = freeze.global_position;
        // The reported attack: the row moved into another stream, positions dense,
        // w-1's own chain intact (the freeze was its newest event).
        tamper(&db, "DROP TRIGGER events_refuse_update").await;
        tamper(
            &db,
            &format!(
                "UPDATE events SET aggregate_type = 'zz', aggregate_id = 'filler', sequence = 1, \
                 ledger_ref_type = NULL, ledger_ref_id = NULL, ledger_entry_type = NULL \
                 WHERE global_position = {at}"
            ),
        )
        .await;
        let report = verify(&db, &anchor_file(dir.path())).await;
        assert_eq!(first(&report), (TamperKind::Edited, at), "{report:?}");

        // Reconciliation finds it too, and repair refuses, naming the position: w-1
        // keeps its 200 frozen instead of getting it back as available.
        let options = ReconcileOptions {
            repair: true,
            anchor_file: Some(anchor_file(dir.path())),
            ..ReconcileOptions::default()
        };
        let rec = reconcile::reconcile(&db.store, &p, options).await.unwrap();
        let log: Vec<_> = rec
            .findings
            .iter()
            .filter(|f| f.kind == FindingKind::LogIntegrity)
            .collect();
        assert!(
            log.iter().any(|f| f.key == format!("global_position={at}")
                && f.detail.starts_with("edited")
                && f.detail.contains("zz/filler")),
            "{log:?}"
        );
        assert_eq!(
            rec.repair_outcome, None,
            "no repair over a log that fails verify"
        );
        assert_eq!(frozen_in_projection(&db, "w-1").await, 200);
    }
);

/// Start the service on `db` with `file` as its anchor file; the error if it refuses.
async fn serve_refusal(db: &TestDb, file: &Path) -> Option<String> {
    let key_dir = tempfile::tempdir().unwrap();
    let options = factledger::server::ServeOptions {
        anchor_file: Some(file.to_owned()),
        ..Default::default()
    };
    factledger::server::start_with(&db.url, "ID", key_dir.path(), options)
        .await
        .err()
        .map(|e| format!("{e:#}"))
}

both_backends!(
    serve_refuses_a_log_behind_its_newest_anchor_or_re_sealed_below_its_keyed_floor,
    |db: TestDb| async move {
        let dir = tempfile::tempdir().unwrap();
        history(&db).await;
        let anchored = sign_anchor(&db, &anchor_file(dir.path())).await;
        assert_eq!(anchored.keyed_floor, Some(1), "{anchored:?}");
        assert_eq!(serve_refusal(&db, &anchor_file(dir.path())).await, None);

        // The first row re-sealed as an unkeyed "legacy" row: the floor moved.
        tamper(&db, "DROP TRIGGER events_refuse_update").await;
        tamper(
            &db,
            "UPDATE events SET hash_key = '' WHERE global_position = 1",
        )
        .await;
        let refused = serve_refusal(&db, &anchor_file(dir.path()))
            .await
            .expect("refused");
        assert!(refused.contains("keyed from position 1"), "{refused}");
        let report = verify(&db, &anchor_file(dir.path())).await;
        assert!(
            report
                .findings
                .iter()
                .any(|f| f.kind == TamperKind::ReChained
                    && f.detail.contains("keyed from position 1")),
            "{report:?}"
        );
        let key = db.store.keyring().active().id.clone();
        tamper(
            &db,
            &format!("UPDATE events SET hash_key = '{key}' WHERE global_position = 1"),
        )
        .await;
        assert_eq!(serve_refusal(&db, &anchor_file(dir.path())).await, None);

        // The anchored tail deleted, the anchor table emptied: the file still knows.
        tamper(&db, "DROP TRIGGER events_refuse_delete").await;
        tamper(
            &db,
            &format!(
                "DELETE FROM events WHERE global_position = {}",
                anchored.head_position
            ),
        )
        .await;
        tamper(&db, "DELETE FROM chain_anchors").await;
        let refused = serve_refusal(&db, &anchor_file(dir.path()))
            .await
            .expect("refused");
        assert!(
            refused.contains(&format!("vouches for position {}", anchored.head_position)),
            "{refused}"
        );
    }
);

both_backends!(
    f3_deleting_an_event_in_the_middle_is_a_gap_at_its_position,
    |db: TestDb| async move {
        let dir = tempfile::tempdir().unwrap();
        history(&db).await;
        sign_anchor(&db, &anchor_file(dir.path())).await;
        drop_append_only_triggers(&db).await;
        tamper(&db, "DELETE FROM events WHERE global_position = 4").await;
        let report = verify(&db, &anchor_file(dir.path())).await;
        assert_eq!(first(&report), (TamperKind::Gap, 4), "{report:?}");
        let kinds: Vec<_> = report.findings.iter().map(|f| f.kind).collect();
        assert!(kinds.contains(&TamperKind::Gap));
    }
);

both_backends!(
    f3_a_truncated_table_is_found_even_with_the_sequence_and_anchor_table_reset,
    |db: TestDb| async move {
        let dir = tempfile::tempdir().unwrap();
        history(&db).await;
        let a = sign_anchor(&db, &anchor_file(dir.path())).await;
        let truncate = match db.backend {
            Backend::Mysql => "TRUNCATE TABLE events",
            Backend::Sqlite => "DROP TRIGGER events_refuse_delete; DELETE FROM events",
        };
        tamper(&db, truncate).await;
        let report = verify(&db, &anchor_file(dir.path())).await;
        assert_eq!(first(&report), (TamperKind::Truncated, 1), "{report:?}");
        // Covering the tracks in the database too: the sequence and the anchor table.
        tamper(
            &db,
            "UPDATE event_sequence SET last_position = 0 WHERE id = 1",
        )
        .await;
        tamper(&db, "DELETE FROM chain_anchors").await;
        let report = verify(&db, &anchor_file(dir.path())).await;
        assert_eq!(first(&report), (TamperKind::Truncated, 1), "{report:?}");
        assert!(report
            .first
            .unwrap()
            .detail
            .contains(&a.head_position.to_string()));
        assert_eq!(report.events_checked, 0);
    }
);

/// Re-hash one stream from `target` on, as someone without the key can: plain SHA-256,
/// with the row's key id either kept or cleared to the legacy one.
async fn rehash_without_the_key(db: &TestDb, target: &StoredEvent, key_id: &str) {
    let ring = db.store.keyring().clone();
    let events = db
        .store
        .read_stream(&target.aggregate_type, &target.aggregate_id, 1, 100)
        .await
        .unwrap();
    let mut prev = store::GENESIS_HASH.to_owned();
    for e in events {
        if e.sequence < target.sequence {
            prev = e.hash.clone();
            continue;
        }
        let mut forged = e.clone();
        if e.sequence == target.sequence {
            forged.payload = forged.payload.replace("500", "900000");
        }
        forged.hash_key = LEGACY_KEY_ID.to_owned();
        let hash = forged.recompute_hash(&ring, &prev).expect("legacy hash");
        tamper(
            db,
            &format!(
                "UPDATE events SET payload = '{}', hash = '{hash}', hash_key = '{key_id}' \
                 WHERE global_position = {}",
                forged.payload, e.global_position
            ),
        )
        .await;
        prev = hash;
    }
}

both_backends!(
    f3_an_edit_rehashed_without_the_key_is_found_as_edited_or_re_chained,
    |db: TestDb| async move {
        let dir = tempfile::tempdir().unwrap();
        history(&db).await;
        drop_append_only_triggers(&db).await;
        let w1 = db.store.read_stream("wallet", "w-1", 1, 10).await.unwrap();
        let credit = w1
            .iter()
            .find(|e| e.event_type == "PendingCredited")
            .unwrap()
            .clone();
        assert!(credit.payload.contains("500"));
        // Keeping the key id: the plain SHA-256 is not the keyed hash.
        let kept = credit.hash_key.clone();
        rehash_without_the_key(&db, &credit, &kept).await;
        let report = verify(&db, &anchor_file(dir.path())).await;
        assert_eq!(
            first(&report),
            (TamperKind::Edited, credit.global_position),
            "{report:?}"
        );
        // Claiming the rows are legacy (unkeyed): they are, end to end, consistent —
        // but an unkeyed row after keyed ones was re-chained by someone without the key.
        rehash_without_the_key(&db, &credit, LEGACY_KEY_ID).await;
        let report = verify(&db, &anchor_file(dir.path())).await;
        assert!(
            report.first_broken.is_none(),
            "the forged chain is self-consistent"
        );
        assert_eq!(
            first(&report),
            (TamperKind::ReChained, credit.global_position),
            "{report:?}"
        );
    }
);

both_backends!(
    f3_a_history_renumbered_and_rechained_is_found_by_the_signed_anchor,
    |db: TestDb| async move {
        let dir = tempfile::tempdir().unwrap();
        history(&db).await;
        let a = sign_anchor(&db, &anchor_file(dir.path())).await;
        // w-2's newest event (its second credit, position 4) deleted and every later
        // position moved down by one: every stream chain still verifies and the
        // positions are dense again.
        drop_append_only_triggers(&db).await;
        tamper(&db, "DELETE FROM events WHERE global_position = 4").await;
        for p in 5..=a.head_position {
            tamper(
                &db,
                &format!(
                    "UPDATE events SET global_position = {} WHERE global_position = {p}",
                    p - 1
                ),
            )
            .await;
        }
        tamper(
            &db,
            &format!(
                "UPDATE event_sequence SET last_position = {} WHERE id = 1",
                a.head_position - 1
            ),
        )
        .await;
        let bus = CommandBus::<Wallet>::start(db.store.clone());
        run(&bus, "w-1", json!({"type": "Unfreeze", "ref_type": "WITHDRAWAL", "ref_id": "wd-1", "amount_minor": 200})).await;
        let report = verify(&db, &anchor_file(dir.path())).await;
        assert!(
            report.first_broken.is_none(),
            "every stream chain verifies: {report:?}"
        );
        assert_eq!(
            first(&report),
            (TamperKind::ReChained, a.head_position),
            "{report:?}"
        );
    }
);

both_backends!(
    f4_an_insert_that_would_replace_an_event_is_refused,
    |db: TestDb| async move {
        history(&db).await;
        let before = db.store.read_positions(3, 3).await.unwrap();
        let columns = "global_position, aggregate_type, aggregate_id, sequence, event_type, \
             event_version, event_id, payload, metadata, correlation_id, actor, hash, hash_key, \
             recorded_at";
        let e = &before[0];
        let time = match db.backend {
            Backend::Mysql => e.recorded_at.format("%Y-%m-%d %H:%M:%S%.6f").to_string(),
            Backend::Sqlite => store::time_text(&e.recorded_at),
        };
        let values = format!(
            "{}, '{}', '{}', {}, '{}', {}, '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{time}'",
            e.global_position,
            e.aggregate_type,
            e.aggregate_id,
            e.sequence,
            e.event_type,
            e.event_version,
            e.event_id,
            e.payload.replace("100", "100000"),
            e.metadata,
            e.correlation_id,
            e.actor,
            e.hash,
            e.hash_key
        );
        let replace = match db.backend {
            Backend::Mysql => format!("REPLACE INTO events ({columns}) VALUES ({values})"),
            Backend::Sqlite => {
                format!("INSERT OR REPLACE INTO events ({columns}) VALUES ({values})")
            }
        };
        let refused = db
            .store
            .execute_raw(&replace)
            .await
            .unwrap_err()
            .to_string();
        assert!(refused.contains("append-only"), "{refused}");
        assert_eq!(db.store.read_positions(3, 3).await.unwrap(), before);
        // With every trigger dropped the rewrite goes through — and verify names it.
        if db.backend == Backend::Sqlite {
            for t in [
                "events_refuse_replace_position",
                "events_refuse_replace_sequence",
                "events_refuse_replace_ledger_ref",
            ] {
                tamper(&db, &format!("DROP TRIGGER {t}")).await;
            }
            tamper(&db, &replace).await;
            let dir = tempfile::tempdir().unwrap();
            let report = verify(&db, &anchor_file(dir.path())).await;
            assert_eq!(first(&report), (TamperKind::Edited, 3), "{report:?}");
        }
    }
);

both_backends!(
    a_forged_anchor_line_is_found_and_a_rotated_key_keeps_old_events_verifiable,
    |db: TestDb| async move {
        let dir = tempfile::tempdir().unwrap();
        history(&db).await;
        let a = sign_anchor(&db, &anchor_file(dir.path())).await;
        // Rotation: a key file of this test's own, copied from the suite's, rotated.
        let keys = dir.path().join("keys");
        std::fs::copy(common::integrity_keys_path(), &keys).unwrap();
        let rotated = Keyring::rotate(&keys).unwrap();
        assert_ne!(rotated.active().id, db.store.keyring().active().id);
        let d = store::open_with(&db.url, Arc::new(rotated.clone()))
            .await
            .unwrap();
        let bus = CommandBus::<Wallet>::start(d.store.clone());
        run(
            &bus,
            "w-2",
            json!({"type": "ReleasePending", "ref_type": "COMMISSION",
            "ref_id": "w-2-c2", "amount_minor": 100}),
        )
        .await;
        let newest = d.store.read_positions(8, 8).await.unwrap();
        assert_eq!(newest[0].hash_key, rotated.active().id);
        let report = integrity::verify_log(&d.store, &d.db, Some(&anchor_file(dir.path())))
            .await
            .unwrap();
        assert!(report.ok, "{report:?}");
        // The suite's keyring lacks the new key: the newest event cannot be checked,
        // and opening the log with it is refused outright.
        let stale = store::verify(db.store.as_ref(), None).await.unwrap();
        assert_eq!(first(&stale), (TamperKind::Edited, 8));
        assert!(store::open(&db.url).await.is_err());
        // A forged anchor (head moved back, signature kept) is named.
        let mut forged = a.clone();
        forged.head_position -= 1;
        forged.anchor_seq = 7;
        std::fs::write(
            anchor_file(dir.path()),
            format!("{}\n", serde_json::to_string(&forged).unwrap()),
        )
        .unwrap();
        let report = integrity::verify_log(&d.store, &d.db, Some(&anchor_file(dir.path())))
            .await
            .unwrap();
        let f = report.first.expect("forged anchor found");
        assert_eq!(f.kind, TamperKind::ReChained);
        assert!(f.detail.contains("signature"), "{f:?}");
    }
);
