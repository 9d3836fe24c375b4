//! The projection runner: rows and checkpoint in one transaction, compare-and-set on
//! the checkpoint, stop at a failing event. Both backends.

mod common;

use common::{run, TestDb};
use factledger::bus::CommandBus;
use factledger::projection::{catch_up_wallet, ProjectionStatus, RunnerError, SharedStatus};
use factledger::store;
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
    match rows.projections {
        factledger::projection::ProjectionDb::Mysql(p) => {
            sqlx::query_as(&sql).fetch_one(&p).await.unwrap()
        }
        factledger::projection::ProjectionDb::Sqlite(p) => {
            sqlx::query_as(&sql).fetch_one(&p).await.unwrap()
        }
    }
}

async fn count(db: &TestDb, sql: &str) -> i64 {
    let rows = store::open(&db.url).await.unwrap();
    match rows.projections {
        factledger::projection::ProjectionDb::Mysql(p) => {
            sqlx::query_scalar(sql).fetch_one(&p).await.unwrap()
        }
        factledger::projection::ProjectionDb::Sqlite(p) => {
            sqlx::query_scalar(sql).fetch_one(&p).await.unwrap()
        }
    }
}

both_backends!(
    the_wallet_projection_matches_the_aggregates_and_catches_up_once,
    |db: TestDb| async move {
        let bus = CommandBus::<Wallet>::start(db.store.clone());
        history(&bus).await;
        let projections = store::open(&db.url).await.unwrap().projections;
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
        let a = store::open(&db.url).await.unwrap().projections;
        let b = store::open(&db.url).await.unwrap().projections;
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
        let projections = store::open(&db.url).await.unwrap().projections;
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
        let projections = store::open(&db.url).await.unwrap().projections;
        let status = factledger::projection::spawn_wallet(db.store.clone(), projections.clone());
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
