//! Issue 32 item 6 over HTTP, both backends: a bill lock holds a line that is there.
//! A locked line is not removed (`LINE_LOCKED`) nor its order voided or marked
//! no-need-pay (`ORDER_LOCKED`); a reserved lock whose line went away is not
//! activated (`LOCK_LINE_GONE`), only released; a voided order's line takes no lock
//! (`LOCK_ORDER_CLOSED`). A live lock whose line is gone anyway (written past these
//! checks) is a reconciliation finding (`bill_lock_line_gone`) until released.

use crate::bill_invariants::{bill_projector_at_head, lock, ok, problem, stream, submitted_order};
use crate::common;

use common::{Server, TestDb};
use factledger_aggregates::bill::PaymentOrder;
use serde_json::{json, Value};

/// A command written straight to an order's stream, past the API's lock checks: how
/// a lock's line went away before those checks existed, or in a race with them.
async fn behind_the_api(db: &TestDb, order_id: i64, cmd: Value) {
    let cmd = serde_json::from_value(cmd).unwrap();
    factledger::runtime::unit::run_command::<PaymentOrder>(
        &db.store,
        &common::meta(),
        &order_id.to_string(),
        cmd,
    )
    .await
    .unwrap();
}

fn remove_line(order_id: i64, line_id: i64) -> Value {
    json!({"type": "RemoveLine", "order_id": order_id, "line_id": line_id,
           "at": "2026-09-02T00:00:00Z"})
}

both_backends!(
    issue32_6_locks_on_lines_that_are_gone_are_refused_with_named_codes,
    |db: TestDb| async move {
        let app = Server::start(&db).await;
        let identity = submitted_order(&app, 20, &[(1, 100), (2, 101)]).await;
        ok(&app
            .post("/v1/bills/locks", lock(1, 100, 20, 1, identity))
            .await);
        ok(&app
            .post("/v1/payment-orders/20:reject", json!({"reason": "recheck"}))
            .await);
        // The locked line stays, and so does its order.
        let events = stream(&db, "bill_payment_order", "20").await;
        problem(
            &app.post("/v1/payment-orders/20/lines/1:remove", json!({}))
                .await,
            409,
            "LINE_LOCKED",
            "line_id",
        );
        for action in ["void", "no-need-pay"] {
            problem(
                &app.post(
                    &format!("/v1/payment-orders/20:{action}"),
                    json!({"reason": "not needed"}),
                )
                .await,
                409,
                "ORDER_LOCKED",
                "order_id",
            );
        }
        assert_eq!(stream(&db, "bill_payment_order", "20").await, events);
        // A line no lock holds is removed as before.
        ok(&app
            .post("/v1/payment-orders/20/lines/2:remove", json!({}))
            .await);

        // The locked line removed behind the API: the reserved lock is not
        // activated, only released.
        behind_the_api(&db, 20, remove_line(20, 1)).await;
        let locks = stream(&db, "bill_lock", "100:202609").await;
        problem(
            &app.post("/v1/bills/locks/100/202609/1:activate", json!({}))
                .await,
            409,
            "LOCK_LINE_GONE",
            "lock_id",
        );
        assert_eq!(stream(&db, "bill_lock", "100:202609").await, locks);
        ok(&app
            .post("/v1/bills/locks/100/202609/1:release", json!({}))
            .await);

        // A voided order's line takes no lock.
        let identity = submitted_order(&app, 21, &[(3, 102)]).await;
        ok(&app
            .post("/v1/payment-orders/21:void", json!({"reason": "duplicate"}))
            .await);
        problem(
            &app.post("/v1/bills/locks", lock(3, 102, 21, 3, identity))
                .await,
            409,
            "LOCK_ORDER_CLOSED",
            "order_id",
        );
        assert!(stream(&db, "bill_lock", "102:202609").await.is_empty());
        bill_projector_at_head(&app, &db).await;
    }
);

/// Start a reconciliation and wait (bounded) for its finished run.
async fn reconciled(app: &Server) -> Value {
    app.reconciled(json!({})).await
}

/// The `bill_lock_line_gone` findings of a run.
fn gone(run: &Value) -> Vec<Value> {
    run["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "bill_lock_line_gone")
        .cloned()
        .collect()
}

both_backends!(
    issue32_6_a_live_lock_whose_line_is_gone_is_a_reconciliation_finding,
    |db: TestDb| async move {
        let app = Server::start(&db).await;
        let identity = submitted_order(&app, 30, &[(1, 100)]).await;
        ok(&app
            .post("/v1/bills/locks", lock(7, 100, 30, 1, identity))
            .await);
        ok(&app
            .post("/v1/bills/locks/100/202609/7:activate", json!({}))
            .await);
        // A healthy lock is no finding.
        bill_projector_at_head(&app, &db).await;
        assert_eq!(gone(&reconciled(&app).await), Vec::<Value>::new());

        ok(&app
            .post("/v1/payment-orders/30:reject", json!({"reason": "recheck"}))
            .await);
        behind_the_api(&db, 30, remove_line(30, 1)).await;
        bill_projector_at_head(&app, &db).await;
        let run = reconciled(&app).await;
        let found = gone(&run);
        assert_eq!(found.len(), 1, "{run}");
        let f = &found[0];
        assert_eq!(f["class"], "event", "{f}");
        assert_eq!(f["table"], "bill_fact_locks", "{f}");
        assert_eq!(f["key"], "lock_id=7", "{f}");
        let detail = f["detail"].as_str().unwrap();
        assert!(
            detail.contains("ACTIVE lock 7 of 100:202609") && detail.contains("was removed"),
            "{detail}"
        );
        assert!(run["counts"]["event"].as_u64().unwrap() >= 1, "{run}");

        // Released, it blocks nothing and is no finding.
        ok(&app
            .post("/v1/bills/locks/100/202609/7:release", json!({}))
            .await);
        bill_projector_at_head(&app, &db).await;
        assert_eq!(gone(&reconciled(&app).await), Vec::<Value>::new());
    }
);
