//! Bill-dimension snapshots (issue 6 item 6, SPEC R-BILL-10): created at review
//! approval with the planned amount frozen, refreshed by the snapshot refresh job
//! (EXISTING_ONLY, ≤ 100 bills a round with a cursor, a newer generation back to
//! PENDING). Both backends.

use crate::bill_env;
use crate::common;

use async_trait::async_trait;
use bill_env::Env;
use common::{exec, scalar};
use factledger::bill::snapshots::{
    submit_snapshot_refresh, SnapshotRefreshHandler, BILL_SNAPSHOT_REFRESH,
};
use factledger::infra::jobs::engine::{ClaimedJob, JobFailure, JobHandler, RoundReport};
use factledger::infra::jobs::{Engine, EngineConfig};
use factledger_projections::bill::snapshot::BillKey;
use factledger_projections::bill::{StationMonth, YearMonth};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn sm(station_id: i64) -> BillKey {
    BillKey::StationMonth(StationMonth {
        station_id,
        month: YearMonth::parse("202609").expect("month"),
    })
}

/// Runs the real handler; when armed, a fact-change submit lands while the round runs
/// (the request generation moves under it).
struct Interfering {
    inner: SnapshotRefreshHandler,
    db: factledger::infra::db::Db,
    armed: AtomicBool,
}

#[async_trait]
impl JobHandler for Interfering {
    async fn run(&self, job: &ClaimedJob) -> Result<RoundReport, JobFailure> {
        let out = self.inner.run(job).await;
        if self.armed.swap(false, Ordering::SeqCst) {
            exec(
                &self.db,
                &format!(
                    "UPDATE jobs SET request_generation = request_generation + 1 WHERE id = {}",
                    job.id
                ),
            )
            .await;
        }
        out
    }
}

async fn engine(env: &Env) -> (Engine, Arc<Interfering>) {
    let database = env.db.database().await;
    let handler = Arc::new(Interfering {
        inner: SnapshotRefreshHandler::new(env.proj.clone()),
        db: database.db.clone(),
        armed: AtomicBool::new(false),
    });
    let config = EngineConfig::new(format!("test-{}", uuid::Uuid::new_v4().simple()));
    let kinds: Vec<(
        &'static factledger::infra::jobs::JobKind,
        Arc<dyn JobHandler>,
    )> = vec![(&BILL_SNAPSHOT_REFRESH, handler.clone())];
    let engine = Engine::new(database.db, database.store, config, kinds).expect("engine");
    (engine, handler)
}

async fn int(env: &Env, sql: &str) -> i64 {
    scalar(&env.db.database().await.db, sql).await
}

async fn snapshot(env: &Env, station_id: i64, column: &str) -> i64 {
    int(
        env,
        &format!(
            "SELECT {column} FROM bill_dimension_snapshot WHERE station_id = {station_id} \
             AND bill_yearmonth = '202609'"
        ),
    )
    .await
}

async fn job_status(env: &Env, code: &str) -> i64 {
    int(
        env,
        &format!("SELECT status FROM jobs WHERE code = '{code}'"),
    )
    .await
}

async fn last_round_has(env: &Env, code: &str, needle: &str) -> bool {
    int(
        env,
        &format!(
            "SELECT COUNT(*) FROM jobs WHERE code = '{code}' AND last_round LIKE '%{needle}%'"
        ),
    )
    .await
        == 1
}

both_backends!(
    approval_creates_the_snapshot_with_the_frozen_plan,
    |db| async move {
        let env = Env::new(db).await;
        env.order(1, false, &[(11, 100, 1_000), (12, 101, 2_500)], true)
            .await;
        // Submitted, not approved: no snapshot.
        env.order(2, false, &[(21, 102, 700)], false).await;
        env.settle().await;
        assert_eq!(snapshot(&env, 100, "planned_amount").await, 1_000);
        assert_eq!(snapshot(&env, 101, "planned_amount").await, 2_500);
        assert_eq!(snapshot(&env, 101, "payment_diff").await, -2_500);
        assert_eq!(snapshot(&env, 101, "paid_amount").await, 0);
        assert_eq!(
            int(
                &env,
                "SELECT COUNT(*) FROM bill_dimension_snapshot WHERE station_id = 102"
            )
            .await,
            0
        );
        // Replaying the approval (the manager re-reads its events) changes nothing.
        env.settle().await;
        assert_eq!(
            int(&env, "SELECT COUNT(*) FROM bill_dimension_snapshot").await,
            2
        );
    }
);

both_backends!(
    refresh_after_a_payment_never_rewrites_the_plan,
    |db| async move {
        let env = Env::new(db).await;
        env.order(1, false, &[(11, 100, 1_000)], true).await;
        env.settle().await;
        // A second order for the same bill, approved with another amount: the frozen plan
        // of the first approval stays.
        env.order(2, false, &[(21, 100, 3_000)], true).await;
        env.result(
            501,
            (1, 11, 100),
            "OFFLINE_IMPORT",
            "PAY_SUCCESS",
            600,
            "PAYMENT_IMPORT_EFFECTIVE",
        )
        .await;
        env.settle().await;
        assert_eq!(
            snapshot(&env, 100, "paid_amount").await,
            0,
            "not refreshed yet"
        );
        let (engine, _) = engine(&env).await;
        let codes = submit_snapshot_refresh(&engine, &[sm(100)], 7)
            .await
            .expect("submit");
        let run = engine.kick(&codes).await.expect("kick");
        assert_eq!(run.succeeded, 1, "{run:?}");
        assert_eq!(snapshot(&env, 100, "planned_amount").await, 1_000);
        assert_eq!(snapshot(&env, 100, "paid_amount").await, 600);
        assert_eq!(snapshot(&env, 100, "paid_count").await, 1);
        assert_eq!(snapshot(&env, 100, "payment_diff").await, 600 - 1_000);
        assert_eq!(snapshot(&env, 100, "refresh_version").await, 7);
        assert_eq!(
            int(
                &env,
                "SELECT COUNT(*) FROM bill_dimension_snapshot WHERE station_id = 100 \
             AND status = 'PARTIALLY_PAID' AND source = 'OFFLINE_IMPORT' \
             AND latest_paid_at IS NOT NULL"
            )
            .await,
            1
        );
        assert!(last_round_has(&env, &codes[0], "\"updated\":1").await);
    }
);

both_backends!(
    a_bill_without_snapshot_is_skipped_and_counted,
    |db| async move {
        let env = Env::new(db).await;
        env.order(1, false, &[(11, 100, 1_000)], true).await;
        env.settle().await;
        let (engine, _) = engine(&env).await;
        let codes = submit_snapshot_refresh(&engine, &[sm(100), sm(999)], 1)
            .await
            .expect("submit");
        let run = engine.kick(&codes).await.expect("kick");
        assert_eq!(run.succeeded, 1, "{run:?}");
        assert!(last_round_has(&env, &codes[0], "\"updated\":1").await);
        assert!(last_round_has(&env, &codes[0], "\"skipped\":1").await);
        assert_eq!(
            int(
                &env,
                "SELECT COUNT(*) FROM bill_dimension_snapshot WHERE station_id = 999"
            )
            .await,
            0,
            "EXISTING_ONLY: never created by a refresh"
        );
    }
);

both_backends!(two_hundred_fifty_bills_take_three_rounds, |db| async move {
    let env = Env::new(db).await;
    let database = env.db.database().await;
    let mut values = Vec::new();
    for s in 1..=250 {
        values.push(format!(
            "('STATION_MONTH:{s}:202609', NULL, {s}, '202609', 1, 100, 0, 0, 0, 0, \
             'AWAITING_PAYMENT', NULL, NULL, 0, -100, '2026-10-01T00:00:00Z')"
        ));
    }
    exec(
        &database.db,
        &format!(
            "INSERT INTO bill_dimension_snapshot (bill_key, diff_id, station_id, \
             bill_yearmonth, order_id, planned_amount, paid_amount, paid_count, \
             failed_amount, failed_count, status, latest_paid_at, source, refresh_version, \
             payment_diff, approved_at) VALUES {}",
            values.join(", ")
        ),
    )
    .await;
    let (engine, _) = engine(&env).await;
    let bills: Vec<BillKey> = (1..=250).map(sm).collect();
    let codes = submit_snapshot_refresh(&engine, &bills, 3)
        .await
        .expect("submit");
    let refreshed = "SELECT COUNT(*) FROM bill_dimension_snapshot WHERE refresh_version = 3";
    for (round, (count, requeued)) in [(100, 1), (200, 1), (250, 0)].into_iter().enumerate() {
        let run = engine.kick(&codes).await.expect("kick");
        assert_eq!(run.requeued, requeued, "round {round}: {run:?}");
        assert_eq!(int(&env, refreshed).await, count, "round {round}");
        let status = job_status(&env, &codes[0]).await;
        assert_eq!(status, if requeued == 1 { 0 } else { 2 }, "round {round}");
    }
    assert!(last_round_has(&env, &codes[0], "\"cursor\":\"STATION_MONTH:200:202609\"").await);
    assert!(last_round_has(&env, &codes[0], "\"updated\":50").await);
});

both_backends!(
    a_newer_generation_sends_it_back_to_pending,
    |db| async move {
        let env = Env::new(db).await;
        env.order(1, false, &[(11, 100, 1_000)], true).await;
        env.settle().await;
        let (engine, handler) = engine(&env).await;
        let codes = submit_snapshot_refresh(&engine, &[sm(100)], 1)
            .await
            .expect("submit");
        handler.armed.store(true, Ordering::SeqCst);
        let run = engine.kick(&codes).await.expect("kick");
        assert_eq!(run.requeued, 1, "{run:?}");
        assert_eq!(job_status(&env, &codes[0]).await, 0, "PENDING");
        let run = engine.kick(&codes).await.expect("kick");
        assert_eq!(run.succeeded, 1, "{run:?}");
        assert_eq!(job_status(&env, &codes[0]).await, 2, "SUCCESS");
        // A newer request for the same bills revives the finished job.
        let again = submit_snapshot_refresh(&engine, &[sm(100)], 2)
            .await
            .expect("submit");
        assert_eq!(again, codes, "the same job");
        assert_eq!(job_status(&env, &codes[0]).await, 0, "PENDING");
        engine.kick(&codes).await.expect("kick");
        assert_eq!(snapshot(&env, 100, "refresh_version").await, 2);
    }
);
