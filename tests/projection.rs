//! The projection runner: rows and checkpoint in one transaction, compare-and-set on
//! the checkpoint, stop at a failing event. Both backends.

mod common;

use common::{run, TestDb};
use factledger::bus::CommandBus;
use factledger::projection::{catch_up_wallet, RunnerError};
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
        // Nothing of the failing batch was written; the checkpoint did not move.
        assert_eq!(projections.checkpoint("wallet", 1).await.unwrap(), 0);
        assert_eq!(count(&db, "SELECT COUNT(*) FROM wallet_ledger").await, 0);
        assert!(head > 5);
    }
);
