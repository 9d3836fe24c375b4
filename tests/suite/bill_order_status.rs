//! Payment-order status reconciliation (issue 6 item 5, SPEC R-BILL-9) as a process
//! manager: facts recorded through the aggregates, the bill projector caught up, then
//! the manager; it moves masters WAIT_PAY ↔ PAID from their lines, never touches
//! protected statuses, ignores non-whitelisted sources, and reports a conflict after
//! two compare-and-set attempts. Both backends.

use crate::bill_env;
use crate::common;

use bill_env::{Env, AT};
use common::{meta, scalar};
use factledger::bill::order_status::MasterOutcome;
use factledger::runtime::unit::run_command;
use factledger_aggregates::bill::{
    LineStatusCode, OrderStatusCode, PaymentOrder, PaymentOrderCommand,
};
use serde_json::json;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

both_backends!(
    offline_import_pays_and_its_deletion_reopens,
    |db| async move {
        let env = Env::new(db).await;
        env.order(1, false, &[(11, 100, 1_000), (12, 101, 2_000)], true)
            .await;
        env.settle().await;
        assert_eq!(env.status(1).await, OrderStatusCode::WaitPay);

        // An offline import on line 11: the line is written back first, then the master
        // is PAID (non-treasury: one line succeeded is enough).
        env.result(
            501,
            (1, 11, 100),
            "OFFLINE_IMPORT",
            "PAY_SUCCESS",
            1_000,
            "PAYMENT_IMPORT_EFFECTIVE",
        )
        .await;
        env.settle().await;
        assert_eq!(env.line_status(1, 11).await, Some(LineStatusCode::Paid));
        assert_eq!(env.status(1).await, OrderStatusCode::Paid);
        let names = event_names(&env, 1).await;
        assert_eq!(
            &names[names.len() - 2..],
            ["LineResultWritten", "PaymentOrderStatusReconciled"],
            "write-back first, then the status, in one unit"
        );
        // Replaying the manager from the same facts writes nothing more.
        let version = env.loaded(1).await.version;
        env.settle().await;
        assert_eq!(env.loaded(1).await.version, version, "idempotent");

        // The import is deleted: the line is unpaid again and the master back to WAIT_PAY.
        env.void(501, "PAYMENT_IMPORT_DELETE").await;
        env.settle().await;
        assert_eq!(env.line_status(1, 11).await, Some(LineStatusCode::Unpaid));
        assert_eq!(env.status(1).await, OrderStatusCode::WaitPay);
        let fact_status = scalar(
        &env.db.database().await.db,
        "SELECT CASE WHEN status = 'WAIT_PAY' THEN 1 ELSE 0 END FROM bill_fact_orders WHERE order_id = 1",
    )
    .await;
        assert_eq!(fact_status, 1, "the bill projector folded the move");
    }
);

both_backends!(treasury_rules, |db| async move {
    let env = Env::new(db).await;
    env.order(2, true, &[(21, 200, 1_000), (22, 201, 1_000)], true)
        .await;
    // Line 21 paid through the treasury, line 22 still unpaid: WAIT_PAY stays.
    env.result(
        601,
        (2, 21, 200),
        "TREASURY",
        "PAY_SUCCESS",
        1_000,
        "TREASURY_RESULT_WRITEBACK",
    )
    .await;
    env.settle().await;
    assert_eq!(env.status(2).await, OrderStatusCode::WaitPay);
    // Line 22 failed: failed counts as ended, no line is unpaid → PAID.
    env.result(
        602,
        (2, 22, 201),
        "FAIL_FALLBACK",
        "PAY_FAIL",
        0,
        "PAYMENT_FAIL_FALLBACK",
    )
    .await;
    env.settle().await;
    assert_eq!(env.status(2).await, OrderStatusCode::Paid);
    // A treasury PAID master stays PAID even when a line is open again.
    env.result(
        603,
        (2, 22, 201),
        "TREASURY",
        "PAYING",
        0,
        "PAYMENT_STATUS_ASYNC_REFRESH",
    )
    .await;
    env.settle().await;
    assert_eq!(env.line_status(2, 22).await, Some(LineStatusCode::Unpaid));
    assert_eq!(env.status(2).await, OrderStatusCode::Paid);
});

both_backends!(
    protected_statuses_and_manual_source_are_untouched,
    |db| async move {
        let env = Env::new(db).await;
        // IN_REVIEW (submitted only), REJECTED, VOID, NO_NEED_PAY, and a WAIT_PAY order
        // whose import comes from a non-whitelisted source.
        env.order(31, false, &[(311, 300, 500)], false).await;
        env.order(32, false, &[(321, 301, 500)], false).await;
        env.order_action(32, "RejectPaymentOrder").await;
        env.order(33, false, &[(331, 302, 500)], true).await;
        env.order_action(33, "VoidPaymentOrder").await;
        env.order(34, false, &[(341, 303, 500)], false).await;
        env.order_action(34, "MarkPaymentOrderNoNeedPay").await;
        env.order(35, false, &[(351, 304, 500)], true).await;
        let cases = [
            (
                31,
                311,
                300,
                OrderStatusCode::InReview,
                "PAYMENT_IMPORT_EFFECTIVE",
            ),
            (
                32,
                321,
                301,
                OrderStatusCode::ReviewRejected,
                "PAYMENT_IMPORT_EFFECTIVE",
            ),
            (
                33,
                331,
                302,
                OrderStatusCode::Void,
                "PAYMENT_IMPORT_EFFECTIVE",
            ),
            (
                34,
                341,
                303,
                OrderStatusCode::NoNeedPay,
                "PAYMENT_IMPORT_EFFECTIVE",
            ),
            (35, 351, 304, OrderStatusCode::WaitPay, "MANUAL"),
        ];
        for (i, (order, line, station, _, trigger)) in cases.iter().enumerate() {
            env.result(
                700 + i as i64,
                (*order, *line, *station),
                "OFFLINE_IMPORT",
                "PAY_SUCCESS",
                500,
                trigger,
            )
            .await;
        }
        let manual_version = env.loaded(35).await.version;
        env.settle().await;
        for (order, _, _, status, trigger) in cases {
            assert_eq!(env.status(order).await, status, "order {order} ({trigger})");
            let names = event_names(&env, order).await;
            assert!(
                !names.iter().any(|n| n == "PaymentOrderStatusReconciled"),
                "order {order} ({trigger}): {names:?}"
            );
        }
        // A protected master's line still takes the import write-back (seed §7.3: the
        // write-back comes first); its status does not move.
        assert_eq!(env.line_status(31, 311).await, Some(LineStatusCode::Paid));
        // A non-whitelisted source reconciles nothing at all.
        assert_eq!(
            env.loaded(35).await.version,
            manual_version,
            "MANUAL: nothing written"
        );
        assert_eq!(env.line_status(35, 351).await, None);
    }
);

both_backends!(
    a_concurrent_change_twice_is_a_reported_conflict,
    |db| async move {
        let env = Env::new(db).await;
        env.order(4, false, &[(41, 400, 1_000)], true).await;
        env.result(
            801,
            (4, 41, 400),
            "OFFLINE_IMPORT",
            "PAY_SUCCESS",
            1_000,
            "PAYMENT_IMPORT_EFFECTIVE",
        )
        .await;
        factledger::bill::projection::catch_up(env.store(), &env.proj)
            .await
            .expect("bill projector");
        // Before each append, another writer changes the order stream (a new PAYING
        // result written back on the line).
        let calls = Arc::new(AtomicI64::new(0));
        let (store, hook_calls) = (env.store().clone(), calls.clone());
        let manager = env.manager().with_before_append(Arc::new(move |order_id| {
            let (store, calls) = (store.clone(), hook_calls.clone());
            Box::pin(async move {
                let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
                let cmd: PaymentOrderCommand = serde_json::from_value(json!({
                "type": "WriteLineResult", "order_id": order_id, "line_id": 41,
                "result_id": 9_000 + n, "station_id": 400, "month": "202609",
                "status": "PAYING", "amount_minor": 0, "trigger_source": "MANUAL",
                "at": AT}))
                .expect("command");
                run_command::<PaymentOrder>(&store, &meta(), &order_id.to_string(), cmd)
                    .await
                    .expect("concurrent change");
            })
        }));
        let outcome = manager
            .reconcile_master(
                4,
                factledger_aggregates::bill::TriggerSource::PaymentImportEffective,
            )
            .await
            .expect("reconcile");
        assert_eq!(
            outcome,
            MasterOutcome::Conflict {
                order_id: 4,
                attempts: 2
            }
        );
        assert_eq!(calls.load(Ordering::SeqCst), 2, "at most two attempts");
        assert_eq!(env.status(4).await, OrderStatusCode::WaitPay);

        // Through the event loop: the conflict is recorded as a row, and the manager moves on.
        manager.catch_up().await.expect("manager goes on");
        let conflicts = scalar(
            &env.db.database().await.db,
            "SELECT COUNT(*) FROM bill_order_status_conflicts WHERE order_id = 4 AND attempts = 2 \
         AND trigger_source = 'PAYMENT_IMPORT_EFFECTIVE'",
        )
        .await;
        assert_eq!(conflicts, 1);
        assert_eq!(calls.load(Ordering::SeqCst), 4);
        assert_eq!(env.status(4).await, OrderStatusCode::WaitPay);
        // Without the interference, a later run reconciles it.
        let done = env
            .manager()
            .reconcile_master(
                4,
                factledger_aggregates::bill::TriggerSource::PaymentImportEffective,
            )
            .await
            .expect("reconcile");
        assert!(
            matches!(done, MasterOutcome::Applied { attempts: 1, .. }),
            "{done:?}"
        );
        assert_eq!(env.status(4).await, OrderStatusCode::Paid);
    }
);

async fn event_names(env: &Env, order_id: i64) -> Vec<String> {
    env.store()
        .read_stream("bill_payment_order", &order_id.to_string(), 1, 1_000)
        .await
        .expect("read stream")
        .into_iter()
        .map(|e| e.event_type)
        .collect()
}
