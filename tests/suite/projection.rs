//! The projection runner: rows and checkpoint in one transaction, compare-and-set on
//! the checkpoint, stop at a failing event. Both backends.

use crate::common;

use common::{run, TestDb};
use factledger::infra::store;
use factledger::runtime::bus::CommandBus;
use factledger::runtime::projection::{
    catch_up_wallet, ProjectionStatus, RunnerError, SharedStatus,
};
use factledger_aggregates::wallet::Wallet;
use serde_json::json;

/// Three wallets: 3 opens, 13 money movements (9 credits, 2 releases, a freeze, a
/// risk hold) and a withdrawal block.
async fn history(bus: &CommandBus<Wallet>) {
    for w in ["w-1", "w-2", "w-3"] {
        run(
            bus,
            w,
            json!({"type": "Open", "user_id": format!("u-{w}"), "currency": "IDR"}),
        )
        .await;
        for c in 1..=3 {
            run(
                bus,
                w,
                json!({"type": "CreditPending", "ref_type": "COMMISSION",
                "ref_id": format!("{w}-c{c}"), "amount_minor": 100 * c}),
            )
            .await;
        }
    }
    run(
        bus,
        "w-1",
        json!({"type": "ReleasePending", "ref_type": "COMMISSION",
        "ref_id": "w-1-c3", "amount_minor": 300}),
    )
    .await;
    run(
        bus,
        "w-1",
        json!({"type": "FreezeForWithdrawal", "ref_type": "WITHDRAWAL",
        "ref_id": "wd-1", "amount_minor": 120}),
    )
    .await;
    run(
        bus,
        "w-2",
        json!({"type": "ReleasePending", "ref_type": "COMMISSION",
            "ref_id": "w-2-c1", "amount_minor": 100}),
    )
    .await;
    run(
        bus,
        "w-2",
        json!({"type": "PlaceRiskHold", "ref_type": "RISK", "ref_id": "x", "amount_minor": 1}),
    )
    .await;
    run(
        bus,
        "w-2",
        json!({"type": "BlockWithdrawals", "ref_type": "RISK", "ref_id": "r-1"}),
    )
    .await;
}

async fn balances(db: &TestDb, id: &str) -> (i64, i64, i64, i64, i64) {
    let rows = store::open(&db.url).await.unwrap();
    let sql = format!(
        "SELECT pending_minor, available_minor, frozen_minor, risk_hold_minor, version \
         FROM wallet_balances WHERE wallet_id = '{id}'"
    );
    match rows.db {
        factledger::infra::db::Db::Mysql(p) => sqlx::query_as(&sql).fetch_one(&p).await.unwrap(),
        factledger::infra::db::Db::Sqlite(p) => sqlx::query_as(&sql).fetch_one(&p).await.unwrap(),
    }
}

async fn count(db: &TestDb, sql: &str) -> i64 {
    let rows = store::open(&db.url).await.unwrap();
    match rows.db {
        factledger::infra::db::Db::Mysql(p) => sqlx::query_scalar(sql).fetch_one(&p).await.unwrap(),
        factledger::infra::db::Db::Sqlite(p) => {
            sqlx::query_scalar(sql).fetch_one(&p).await.unwrap()
        }
    }
}

both_backends!(
    the_wallet_projection_matches_the_aggregates_and_catches_up_once,
    |db: TestDb| async move {
        let bus = CommandBus::<Wallet>::start(db.store.clone());
        history(&bus).await;
        let projections = store::open(&db.url).await.unwrap().db;
        let applied = catch_up_wallet(&db.store, &projections).await.unwrap();
        assert_eq!(applied as i64, db.store.head_position().await.unwrap());
        for w in ["w-1", "w-2", "w-3"] {
            let loaded = bus.state(w).await.unwrap();
            let b = loaded.state.balances;
            assert_eq!(
                balances(&db, w).await,
                (
                    b.pending_minor,
                    b.available_minor,
                    b.frozen_minor,
                    b.risk_hold_minor,
                    loaded.version
                ),
                "{w}"
            );
        }
        assert_eq!(count(&db, "SELECT COUNT(*) FROM wallet_ledger").await, 13);
        // Ledger deltas sum to the balances (R-INV-2), per wallet.
        let sum = count(
            &db,
            "SELECT CAST(SUM(delta_pending_minor) AS SIGNED) FROM wallet_ledger WHERE wallet_id = 'w-1'",
        )
        .await;
        assert_eq!(sum, balances(&db, "w-1").await.0);
        // A second catch-up has nothing to do and changes nothing.
        assert_eq!(catch_up_wallet(&db.store, &projections).await.unwrap(), 0);
        assert_eq!(count(&db, "SELECT COUNT(*) FROM wallet_ledger").await, 13);
    }
);

both_backends!(
    two_runners_never_both_apply_a_batch,
    |db: TestDb| async move {
        let bus = CommandBus::<Wallet>::start(db.store.clone());
        history(&bus).await;
        let a = store::open(&db.url).await.unwrap().db;
        let b = store::open(&db.url).await.unwrap().db;
        let (sa, sb) = (db.store.clone(), db.store.clone());
        let (ra, rb) = tokio::join!(async move { catch_up_wallet(&sa, &a).await }, async move {
            catch_up_wallet(&sb, &b).await
        },);
        // Each either applied its batches or lost the compare-and-set; never both.
        let applied: u64 = [ra, rb]
            .into_iter()
            .map(|r| match r {
                Ok(n) => n,
                Err(RunnerError::CheckpointMoved(_)) => 0,
                Err(e) => panic!("unexpected: {e}"),
            })
            .sum();
        assert_eq!(applied as i64, db.store.head_position().await.unwrap());
        assert_eq!(count(&db, "SELECT COUNT(*) FROM wallet_ledger").await, 13);
        assert_eq!(count(&db, "SELECT COUNT(*) FROM wallet_balances").await, 3);
    }
);

both_backends!(
    a_failing_event_stops_the_projection_there,
    |db: TestDb| async move {
        let bus = CommandBus::<Wallet>::start(db.store.clone());
        history(&bus).await;
        let head = db.store.head_position().await.unwrap();
        // Break the 5th event as the database owner would: the projector cannot
        // decode it, so it must stop before it and never skip it.
        db.store
            .execute_raw("DROP TRIGGER events_refuse_update")
            .await
            .unwrap();
        db.store
            .execute_raw(
                "UPDATE events SET payload = '{\"type\":\"PendingCredited\",\"amount_minor\":\"x\"}' \
                 WHERE global_position = 5",
            )
            .await
            .unwrap();
        let projections = store::open(&db.url).await.unwrap().db;
        let err = catch_up_wallet(&db.store, &projections).await.unwrap_err();
        assert!(
            matches!(err, RunnerError::Projection(ref p) if p.global_position == 5),
            "{err}"
        );
        // It stopped exactly before the failing event: events 1-4 (w-1 opened and
        // credited three times) are applied, nothing after them.
        assert_eq!(projections.checkpoint("wallet", 1).await.unwrap(), 4);
        assert_eq!(count(&db, "SELECT COUNT(*) FROM wallet_ledger").await, 3);
        assert!(head > 5);
    }
);

/// Poll a running projector's status until `done` holds (at most 15 s).
async fn wait_status(
    status: &SharedStatus,
    what: &str,
    done: impl Fn(&ProjectionStatus) -> bool,
) -> ProjectionStatus {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let s = status.lock().unwrap().clone();
        if done(&s) {
            return s;
        }
        assert!(std::time::Instant::now() < deadline, "{what}: {s:?}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

both_backends!(
    the_running_projector_reports_the_failing_event_retries_and_recovers,
    |db: TestDb| async move {
        let bus = CommandBus::<Wallet>::start(db.store.clone());
        history(&bus).await;
        let head = db.store.head_position().await.unwrap();
        let original = db.store.read_positions(5, 5).await.unwrap()[0]
            .payload
            .clone();
        assert!(!original.contains('\''));
        db.store
            .execute_raw("DROP TRIGGER events_refuse_update")
            .await
            .unwrap();
        db.store
            .execute_raw(
                "UPDATE events SET payload = '{\"type\":\"PendingCredited\",\"amount_minor\":\"x\"}' \
                 WHERE global_position = 5",
            )
            .await
            .unwrap();
        let projections = store::open(&db.url).await.unwrap().db;
        let status =
            factledger::runtime::projection::spawn_wallet(db.store.clone(), projections.clone());
        // It stops at event 5, says so, and keeps retrying (with backoff) there.
        let stuck = wait_status(&status, "stopped at 5, retried", |s| s.retries >= 3).await;
        assert_eq!(stuck.position, 4, "{stuck:?}");
        assert_eq!(stuck.error_position, Some(5), "{stuck:?}");
        assert_eq!(stuck.lag_events, head - 4, "{stuck:?}");
        let error = stuck.last_error.clone().unwrap_or_default();
        assert!(error.contains("event 5"), "{error}");
        // Once the event is readable again, the next retry goes through.
        db.store
            .execute_raw(&format!(
                "UPDATE events SET payload = '{original}' WHERE global_position = 5"
            ))
            .await
            .unwrap();
        let recovered = wait_status(&status, "recovered to the head", |s| s.position == head).await;
        assert_eq!(recovered.last_error, None, "{recovered:?}");
        assert_eq!(recovered.error_position, None, "{recovered:?}");
        assert_eq!(count(&db, "SELECT COUNT(*) FROM wallet_ledger").await, 13);
    }
);

async fn texts(db: &TestDb, sql: &str) -> Vec<String> {
    let rows = store::open(&db.url).await.unwrap();
    match rows.db {
        // utf8mb4_bin text reads back as bytes on MariaDB.
        factledger::infra::db::Db::Mysql(p) => sqlx::query_scalar::<_, Vec<u8>>(sql)
            .fetch_all(&p)
            .await
            .unwrap()
            .into_iter()
            .map(|b| String::from_utf8(b).unwrap())
            .collect(),
        factledger::infra::db::Db::Sqlite(p) => {
            sqlx::query_scalar(sql).fetch_all(&p).await.unwrap()
        }
    }
}

async fn stall_alerts(db: &TestDb) -> Vec<serde_json::Value> {
    texts(
        db,
        "SELECT payload FROM outbox WHERE type = 'alert.projection.stalled' ORDER BY id",
    )
    .await
    .iter()
    .map(|p| serde_json::from_str(p).unwrap())
    .collect()
}

both_backends!(
    a_stalled_projector_is_alerted_once_per_failing_event_with_its_context,
    |db: TestDb| async move {
        let bus = CommandBus::<Wallet>::start(db.store.clone());
        history(&bus).await;
        let head = db.store.head_position().await.unwrap();
        // Events 5 (w-2 opens) and 9 (w-3 opens) become unreadable.
        let payload = |p: i64| {
            let store = db.store.clone();
            async move { store.read_positions(p, p).await.unwrap()[0].payload.clone() }
        };
        let (fifth, ninth) = (payload(5).await, payload(9).await);
        db.store
            .execute_raw("DROP TRIGGER events_refuse_update")
            .await
            .unwrap();
        db.store
            .execute_raw(
                "UPDATE events SET payload = '{\"type\":\"Opened\",\"user_id\":7}' \
                 WHERE global_position IN (5, 9)",
            )
            .await
            .unwrap();
        let projections = store::open(&db.url).await.unwrap().db;
        let context = factledger::infra::alerts::AlertContext {
            environment: "staging".into(),
            country_code: "ID".into(),
            public_url: "https://ledger.example".into(),
        };
        let status = factledger::runtime::projection::spawn_wallet_alerting(
            db.store.clone(),
            projections.clone(),
            Some(factledger::runtime::projection::StallAlerts {
                context,
                after_ms: 1_000,
            }),
        );
        // A failure younger than the threshold is not a stall yet.
        wait_status(&status, "stopped at 5", |s| s.error_position == Some(5)).await;
        assert!(
            stall_alerts(&db).await.is_empty(),
            "alerted before the threshold"
        );
        // Past it: one alert, however often it keeps retrying.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        while stall_alerts(&db).await.is_empty() {
            assert!(std::time::Instant::now() < deadline, "no stall alert");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let retried = lock_retries(&status) + 4;
        wait_status(&status, "retried after the alert", |s| s.retries >= retried).await;
        let alerts = stall_alerts(&db).await;
        assert_eq!(alerts.len(), 1, "{alerts:?}");
        let a = &alerts[0];
        common::assert_alert_context(a);
        assert_eq!(a["alert"], "projection.stalled");
        assert_eq!(a["environment"], "staging");
        assert_eq!(a["data_centre"], "ID");
        assert_eq!(a["business_id"], "wallet/w-2");
        assert_eq!(
            a["audit_link"],
            "https://ledger.example/v1/streams/wallet/w-2/events?from=1"
        );
        assert!(a["retry_count"].as_i64().unwrap() >= 1, "{a}");
        assert!(a["first_failure_at"].is_string(), "{a}");
        assert!(a["message"].as_str().unwrap().contains("event 5"), "{a}");
        // Event 5 mended: the projector moves on to 9 and stalls there — a new stall,
        // a second alert, naming w-3.
        db.store
            .execute_raw(&format!(
                "UPDATE events SET payload = '{fifth}' WHERE global_position = 5"
            ))
            .await
            .unwrap();
        wait_status(&status, "stopped at 9", |s| s.error_position == Some(9)).await;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        while stall_alerts(&db).await.len() < 2 {
            assert!(
                std::time::Instant::now() < deadline,
                "no second stall alert"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        db.store
            .execute_raw(&format!(
                "UPDATE events SET payload = '{ninth}' WHERE global_position = 9"
            ))
            .await
            .unwrap();
        wait_status(&status, "recovered to the head", |s| s.position == head).await;
        let alerts = stall_alerts(&db).await;
        assert_eq!(alerts.len(), 2, "{alerts:?}");
        assert_eq!(alerts[1]["business_id"], "wallet/w-3");
    }
);

fn lock_retries(status: &SharedStatus) -> u64 {
    status.lock().unwrap().retries
}
