//! Paid-services orders over the gateway simulator (SPEC §10): unpaid orders close on
//! their timeout with their recharge (R-CB-2); a payment after the close is refunded,
//! never re-opens the order (this system's rule for a late callback, see
//! `factledger_aggregates::service_order`); a delivery that failed after the payment
//! is compensated by its job or its scan, crediting once; a cash refund is marked
//! REFUNDING, sent once, and afterwards only queried, each query outcome settling it
//! as R-REF-1 says.

use crate::common::TestDb;
use crate::services_env::ServicesEnv;
use chrono::{Duration, Utc};
use factledger::services::scans::Scan;
use factledger::services::units::orders::late_refund_no;
use payout_sim::gateway::{GatewayFault, RefundStatus as SimRefund};
use serde_json::{json, Value};
use std::sync::atomic::Ordering::SeqCst;

/// Past the default 15-minute order timeout.
fn after_timeout() -> chrono::DateTime<Utc> {
    Utc::now() + Duration::minutes(16)
}

/// Close unpaid `order_no` by the timeout scan, and wait for the read to show it.
async fn close(env: &ServicesEnv, order_no: &str) -> Value {
    let report = env
        .scan(Scan::OrderTimeoutClose, Some(order_no), after_timeout())
        .await;
    assert_eq!((report.acted, report.failed), (1, 0), "{report:?}");
    env.wait_order(order_no, |o| o["status"] == 4).await
}

/// The refund read once it satisfies `done`.
async fn wait_refund(env: &ServicesEnv, refund_no: &str, done: impl Fn(&Value) -> bool) -> Value {
    env.wait(&format!("/v1/refunds/{refund_no}"), done).await
}

/// The gateway's create requests under `refund_no` so far.
fn creates(env: &ServicesEnv, refund_no: &str) -> u64 {
    env.sim
        .gateway()
        .refunds()
        .create_requests_per_refund_no
        .get(refund_no)
        .copied()
        .unwrap_or(0)
}

/// The jobs of `kind` (`GET /v1/jobs?kind=`).
async fn jobs_of(env: &ServicesEnv, kind: &str) -> Vec<Value> {
    let (status, page) = env.app.get(&format!("/v1/jobs?kind={kind}")).await;
    assert_eq!(status, 200, "{page}");
    page["jobs"].as_array().cloned().unwrap_or_default()
}

both_backends!(
    r_cb_2_an_unpaid_order_closes_on_its_timeout_with_its_recharge,
    |db: TestDb| async move {
        let env = ServicesEnv::start(&db).await;
        env.recharge_order("TC-1", 11, 600).await;
        env.recharge_order("TC-2", 12, 600).await;
        env.recharge_order("TC-PAID", 13, 600).await;
        env.pay("TC-PAID", 600, "CNY").await;
        env.wait_order("TC-PAID", |o| o["status"] == 3).await;

        // Not timed out yet: the scan takes nothing.
        let report = env
            .scan(
                Scan::OrderTimeoutClose,
                None,
                Utc::now() + Duration::minutes(1),
            )
            .await;
        assert_eq!((report.candidates, report.acted), (0, 0), "{report:?}");
        for no in ["TC-1", "TC-2"] {
            let o = env.order(no).await;
            assert_eq!(o["status"], 0, "{o}");
            assert_eq!(o["recharge"]["status"], "PENDING", "{o}");
        }

        // Past the timeout: both unpaid orders close, with their recharge; the paid
        // one is not a candidate.
        let report = env
            .scan(Scan::OrderTimeoutClose, None, after_timeout())
            .await;
        assert_eq!(
            (report.candidates, report.acted, report.failed),
            (2, 2, 0),
            "{report:?}"
        );
        for no in ["TC-1", "TC-2"] {
            let o = env.wait_order(no, |o| o["status"] == 4).await;
            assert_eq!(o["status_name"], "CLOSED", "{o}");
            assert_eq!(o["recharge"]["status"], "CLOSED", "{o}");
            assert!(o["closed_at"].is_string(), "{o}");
        }
        // A paid order is never closed, even named explicitly (the stream re-checks).
        let report = env
            .scan(Scan::OrderTimeoutClose, Some("TC-PAID"), after_timeout())
            .await;
        assert_eq!((report.acted, report.failed), (0, 0), "{report:?}");
        let o = env.order("TC-PAID").await;
        assert_eq!(o["status"], 3, "{o}");
        assert_eq!(o["recharge"]["status"], "CREDITED", "{o}");
        // Closing again changes nothing.
        let report = env
            .scan(Scan::OrderTimeoutClose, Some("TC-1"), after_timeout())
            .await;
        assert_eq!((report.acted, report.failed), (0, 0), "{report:?}");
        assert_eq!(env.candy(11).await, (0, 0));
        assert_eq!(env.candy(13).await, (600, 0));
    }
);

both_backends!(
    r_cb_2_a_payment_after_the_close_is_refunded_and_never_reopens_the_order,
    |db: TestDb| async move {
        let env = ServicesEnv::start(&db).await;
        env.recharge_order("LATE-1", 21, 800).await;
        close(&env, "LATE-1").await;

        let paid = env.pay("LATE-1", 800, "CNY").await;
        assert_eq!(paid["callback"]["http_status"], 200, "{paid}");
        let txn = paid["payment"]["transaction_no"]
            .as_str()
            .expect("transaction no")
            .to_owned();
        let refund_no = late_refund_no(&txn);
        assert!(refund_no.starts_with("RFL"), "{refund_no}");

        // The refund job ran at once: REFUNDING, with the gateway's answer kept.
        let r = wait_refund(&env, &refund_no, |r| {
            r["status"] == 2 && r["gateway_response"].is_string()
        })
        .await;
        assert_eq!(
            (
                &r["business"],
                &r["method"],
                &r["order_no"],
                &r["transaction_no"]
            ),
            (
                &json!("LATE_PAYMENT"),
                &json!("WECHAT"),
                &json!("LATE-1"),
                &json!(txn)
            ),
            "{r}"
        );
        assert_eq!((&r["amount"], &r["currency"]), (&json!(800), &json!("CNY")));
        let jobs = jobs_of(&env, "service_refund").await;
        assert_eq!(jobs.len(), 1, "{jobs:?}");
        assert_eq!(jobs[0]["business_key"], format!("refund:{refund_no}"));

        // The order stays closed, its recharge too, and no candy was credited.
        let o = env.order("LATE-1").await;
        assert_eq!(o["status"], 4, "{o}");
        assert_eq!(o["recharge"]["status"], "CLOSED", "{o}");
        assert_eq!(
            o["payment_transactions"][0]["status"], "LATE_AFTER_CLOSE",
            "{o}"
        );
        assert_eq!(env.candy(21).await, (0, 0));

        // The refund scan queries (never refunds again) and settles it.
        let report = env.scan(Scan::Refund, None, Utc::now()).await;
        assert_eq!(
            (report.candidates, report.acted, report.failed),
            (1, 1, 0),
            "{report:?}"
        );
        let r = wait_refund(&env, &refund_no, |r| r["status"] == 3).await;
        assert_eq!(r["status_name"], "SUCCEEDED", "{r}");
        assert!(r["gateway_refund_id"].is_string(), "{r}");
        let o = env.wait_order("LATE-1", |o| o["status"] == 6).await;
        assert_eq!(o["status_name"], "REFUNDED", "{o}");
        assert_eq!(o["refund_no"], json!(refund_no), "{o}");
        assert_eq!(o["recharge"]["status"], "CLOSED", "{o}");
        let t = &o["payment_transactions"];
        assert_eq!(t.as_array().map(Vec::len), Some(1), "{o}");
        assert_eq!(
            (&t[0]["status"], &t[0]["refund_no"]),
            (&json!("REFUNDED"), &json!(refund_no)),
            "{o}"
        );
        assert_eq!(env.candy(21).await, (0, 0));

        let gateway = env.sim.gateway();
        assert_eq!(gateway.refunds_made(&refund_no), 1);
        let refunds = gateway.refunds();
        assert_eq!(refunds.refunds_per_transaction_no.get(&txn), Some(&1));
        assert_eq!(
            refunds.refunded_minor_per_transaction_no.get(&txn),
            Some(&800)
        );
        assert_eq!(creates(&env, &refund_no), 1);
        assert_eq!(
            gateway.peek(&refund_no).map(|r| r.status),
            Some(SimRefund::Succeeded)
        );
        // Settled: a further scan takes nothing and asks nothing.
        let queries = gateway.requests().query;
        let report = env.scan(Scan::Refund, None, Utc::now()).await;
        assert_eq!(report.candidates, 0, "{report:?}");
        assert_eq!(gateway.requests().query, queries);
        assert_eq!(creates(&env, &refund_no), 1);

        // A pay callback told twice (same event) credits once.
        env.recharge_order("DUP-1", 22, 500).await;
        gateway
            .add_fault("DUP-1", GatewayFault::DuplicateCallback)
            .expect("fault");
        let paid = env.pay("DUP-1", 500, "CNY").await;
        assert_eq!(paid["callback"]["state"], "DELIVERED", "{paid}");
        let copies: Vec<_> = gateway
            .callbacks()
            .into_iter()
            .filter(|c| c.order_no == "DUP-1" && c.delivered)
            .map(|c| c.copy)
            .collect();
        assert_eq!(copies, vec![1, 2]);
        let o = env.wait_order("DUP-1", |o| o["status"] == 3).await;
        assert_eq!(o["payment_transactions"].as_array().map(Vec::len), Some(1));
        assert_eq!(env.candy(22).await, (500, 0));
        env.conserved().await;
    }
);

both_backends!(
    r_cb_2_a_failed_delivery_is_compensated_by_its_job_at_once,
    |db: TestDb| async move {
        let env = ServicesEnv::start(&db).await;
        // Hold the job engine so the order can be seen paid and undelivered.
        let (status, body) = env
            .app
            .post(
                "/v1/jobs:pause",
                json!({"reason": "see the order paid first"}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        env.recharge_order("DLV-1", 31, 700).await;
        env.services.faults.delivery.store(1, SeqCst);
        let paid = env.pay("DLV-1", 700, "CNY").await;
        assert_eq!(paid["callback"]["http_status"], 200, "{paid}");
        assert_eq!(env.services.faults.delivery.load(SeqCst), 0);
        let o = env.wait_order("DLV-1", |o| o["status"] == 2).await;
        assert_eq!(o["recharge"]["status"], "PENDING", "{o}");
        assert_eq!(o["payment_transactions"][0]["status"], "PAID", "{o}");
        assert_eq!(env.candy(31).await, (0, 0));
        let jobs = jobs_of(&env, "payment_delivery").await;
        assert_eq!(jobs.len(), 1, "{jobs:?}");
        assert_eq!(
            (&jobs[0]["business_key"], &jobs[0]["status"]),
            (&json!("order:DLV-1"), &json!("PENDING"))
        );

        let (status, body) = env.app.post("/v1/jobs:resume", json!({})).await;
        assert_eq!(status, 200, "{body}");
        let o = env.wait_order("DLV-1", |o| o["status"] == 3).await;
        assert_eq!(o["recharge"]["status"], "CREDITED", "{o}");
        assert_eq!(env.candy(31).await, (700, 0));
        // The scan behind the job finds nothing left to deliver.
        let report = env
            .scan(
                Scan::PaymentDelivery,
                None,
                Utc::now() + Duration::minutes(1),
            )
            .await;
        assert_eq!(report.candidates, 0, "{report:?}");
        assert_eq!(env.candy(31).await, (700, 0));
        env.conserved().await;
    }
);

both_backends!(
    r_cb_2_a_delivery_whose_job_could_not_be_queued_is_delivered_by_the_scan_once,
    |db: TestDb| async move {
        let env = ServicesEnv::start(&db).await;
        env.recharge_order("DLV-2", 32, 900).await;
        env.services.faults.delivery.store(1, SeqCst);
        env.services.faults.enqueue.store(1, SeqCst);
        let paid = env.pay("DLV-2", 900, "CNY").await;
        assert_eq!(paid["callback"]["http_status"], 200, "{paid}");
        assert_eq!(env.services.faults.delivery.load(SeqCst), 0);
        assert_eq!(env.services.faults.enqueue.load(SeqCst), 0);
        env.wait_order("DLV-2", |o| o["status"] == 2).await;
        assert!(jobs_of(&env, "payment_delivery").await.is_empty());
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let o = env.order("DLV-2").await;
        assert_eq!(o["status"], 2, "nothing delivers it but the scan: {o}");
        assert_eq!(env.candy(32).await, (0, 0));

        // Within the 30 s grace the scan leaves it to the job; after it, it delivers.
        let report = env.scan(Scan::PaymentDelivery, None, Utc::now()).await;
        assert_eq!(report.candidates, 0, "{report:?}");
        let report = env
            .scan(
                Scan::PaymentDelivery,
                None,
                Utc::now() + Duration::minutes(1),
            )
            .await;
        assert_eq!(
            (report.candidates, report.acted, report.failed),
            (1, 1, 0),
            "{report:?}"
        );
        let o = env.wait_order("DLV-2", |o| o["status"] == 3).await;
        assert_eq!(o["recharge"]["status"], "CREDITED", "{o}");
        assert_eq!(env.candy(32).await, (900, 0));

        // Again: nothing to take; named explicitly, the delivery is idempotent.
        let report = env
            .scan(
                Scan::PaymentDelivery,
                None,
                Utc::now() + Duration::minutes(1),
            )
            .await;
        assert_eq!(report.candidates, 0, "{report:?}");
        let report = env
            .scan(
                Scan::PaymentDelivery,
                Some("DLV-2"),
                Utc::now() + Duration::minutes(1),
            )
            .await;
        assert_eq!(report.failed, 0, "{report:?}");
        assert_eq!(env.candy(32).await, (900, 0));
        let t = env.conserved().await;
        assert_eq!(t.issued, 900);
    }
);

/// A late payment of a closed recharge whose refund only the scans drive: the pay
/// callback is held until `script` is queued under the refund number, and the
/// refund job's enqueue fails (the 5-minute scan is its backstop). The refund is
/// PENDING; (transaction no, refund no).
async fn late_refund(
    env: &ServicesEnv,
    order_no: &str,
    user: i64,
    amount: i64,
    script: Vec<GatewayFault>,
) -> (String, String) {
    env.recharge_order(order_no, user, amount).await;
    close(env, order_no).await;
    let gateway = env.sim.gateway();
    gateway
        .add_fault(order_no, GatewayFault::HoldCallback)
        .expect("hold fault");
    let paid = env.pay(order_no, amount, "CNY").await;
    assert_eq!(paid["callback"]["state"], "HELD", "{paid}");
    let txn = paid["payment"]["transaction_no"]
        .as_str()
        .expect("transaction no")
        .to_owned();
    let refund_no = late_refund_no(&txn);
    for fault in script {
        gateway.add_fault(&refund_no, fault).expect("refund fault");
    }
    env.services.faults.enqueue.store(1, SeqCst);
    let released = gateway.release(order_no).await.expect("release");
    assert_eq!(released.len(), 1);
    assert_eq!(released[0].http_status, Some(200), "{released:?}");
    assert_eq!(
        env.services.faults.enqueue.load(SeqCst),
        0,
        "the refund job's enqueue failed"
    );
    let r = wait_refund(env, &refund_no, |r| r["status"] == 1).await;
    assert_eq!(r["business"], "LATE_PAYMENT", "{r}");
    assert!(jobs_of(env, "service_refund").await.is_empty());
    assert_eq!(creates(env, &refund_no), 0);
    (txn, refund_no)
}

/// One refund scan, as its cron would fire it.
async fn refund_scan(env: &ServicesEnv) -> factledger::services::scans::ScanReport {
    env.scan(Scan::Refund, None, Utc::now() + Duration::minutes(1))
        .await
}

/// Submit the PENDING refund: REFUNDING with the gateway's PROCESSING answer kept.
async fn submit(env: &ServicesEnv, refund_no: &str) {
    let report = refund_scan(env).await;
    assert_eq!(
        (report.candidates, report.acted, report.failed),
        (1, 0, 0),
        "{report:?}"
    );
    let r = wait_refund(env, refund_no, |r| {
        r["status"] == 2 && r["gateway_response"].is_string()
    })
    .await;
    assert!(
        r["gateway_response"]
            .as_str()
            .unwrap_or("")
            .contains("PROCESSING"),
        "{r}"
    );
    assert_eq!(creates(env, refund_no), 1);
    assert_eq!(env.sim.gateway().refunds_made(refund_no), 1);
}

both_backends!(
    r_ref_1_a_refund_the_query_confirms_settles_refund_order_and_transaction,
    |db: TestDb| async move {
        let env = ServicesEnv::start(&db).await;
        let (txn, refund_no) = late_refund(&env, "RQ-OK", 41, 1_200, Vec::new()).await;
        submit(&env, &refund_no).await;
        let o = env.order("RQ-OK").await;
        assert_eq!(
            o["status"], 4,
            "not refunded before the gateway says so: {o}"
        );

        let report = refund_scan(&env).await;
        assert_eq!((report.acted, report.failed), (1, 0), "{report:?}");
        let r = wait_refund(&env, &refund_no, |r| r["status"] == 3).await;
        assert!(r["gateway_refund_id"].is_string(), "{r}");
        assert!(
            r["gateway_response"]
                .as_str()
                .unwrap_or("")
                .contains("SUCCEEDED"),
            "{r}"
        );
        let o = env.wait_order("RQ-OK", |o| o["status"] == 6).await;
        assert_eq!(o["refund_no"], json!(refund_no), "{o}");
        assert_eq!(o["recharge"]["status"], "CLOSED", "{o}");
        let t = &o["payment_transactions"][0];
        assert_eq!(
            (&t["transaction_no"], &t["status"], &t["refund_no"]),
            (&json!(txn), &json!("REFUNDED"), &json!(refund_no)),
            "{o}"
        );

        // The scans queried; the create went once; nothing moves after settling.
        let gateway = env.sim.gateway();
        assert_eq!(creates(&env, &refund_no), 1);
        assert_eq!(
            gateway.refunds().refunds_per_transaction_no.get(&txn),
            Some(&1)
        );
        let queries = gateway.requests().query;
        let report = refund_scan(&env).await;
        assert_eq!(report.candidates, 0, "{report:?}");
        assert_eq!(gateway.requests().query, queries);
        assert_eq!(creates(&env, &refund_no), 1);
        assert_eq!(env.candy(41).await, (0, 0));
    }
);

both_backends!(
    r_ref_1_a_refund_the_query_reports_failed_fails_alone,
    |db: TestDb| async move {
        let env = ServicesEnv::start(&db).await;
        let script = vec![GatewayFault::ProcessingThen {
            times: 0,
            status: SimRefund::Failed,
            failure_reason: Some("ACCOUNT_FROZEN".into()),
        }];
        let (txn, refund_no) = late_refund(&env, "RQ-FAIL", 42, 1_300, script).await;
        submit(&env, &refund_no).await;

        let report = refund_scan(&env).await;
        assert_eq!((report.acted, report.failed), (1, 0), "{report:?}");
        let r = wait_refund(&env, &refund_no, |r| r["status"] == 4).await;
        assert_eq!(r["status_name"], "FAILED", "{r}");
        assert!(
            r["failure_reason"]
                .as_str()
                .unwrap_or("")
                .contains("ACCOUNT_FROZEN"),
            "{r}"
        );
        // The refund only: the order stays closed, its transaction still owed back.
        let head = env.app.state.store.head_position().await.expect("head");
        let (status, o) = env
            .app
            .get(&format!("/v1/service-orders/RQ-FAIL?min_position={head}"))
            .await;
        assert_eq!(status, 200, "{o}");
        assert_eq!(o["status"], 4, "{o}");
        assert!(o["refund_no"].is_null(), "{o}");
        let t = &o["payment_transactions"][0];
        assert_eq!(
            (&t["transaction_no"], &t["status"], &t["refund_no"]),
            (&json!(txn), &json!("LATE_AFTER_CLOSE"), &Value::Null),
            "{o}"
        );
        // Settled: never sent again, never asked again.
        let queries = env.sim.gateway().requests().query;
        let report = refund_scan(&env).await;
        assert_eq!(report.candidates, 0, "{report:?}");
        assert_eq!(env.sim.gateway().requests().query, queries);
        assert_eq!(creates(&env, &refund_no), 1);
    }
);

both_backends!(
    r_ref_1_a_refund_the_query_reports_closed_closes_alone,
    |db: TestDb| async move {
        let env = ServicesEnv::start(&db).await;
        let script = vec![GatewayFault::ProcessingThen {
            times: 1,
            status: SimRefund::Closed,
            failure_reason: None,
        }];
        let (txn, refund_no) = late_refund(&env, "RQ-CLOSE", 43, 1_400, script).await;
        submit(&env, &refund_no).await;

        // One more PROCESSING answer first: still REFUNDING, queried not re-sent.
        let report = refund_scan(&env).await;
        assert_eq!(
            (report.candidates, report.acted, report.failed),
            (1, 0, 0),
            "{report:?}"
        );
        let r = env.refund(&refund_no).await;
        assert_eq!(r["status"], 2, "{r}");
        assert_eq!(creates(&env, &refund_no), 1);

        let report = refund_scan(&env).await;
        assert_eq!((report.acted, report.failed), (1, 0), "{report:?}");
        let r = wait_refund(&env, &refund_no, |r| r["status"] == 5).await;
        assert_eq!(r["status_name"], "CLOSED", "{r}");
        let head = env.app.state.store.head_position().await.expect("head");
        let (_, o) = env
            .app
            .get(&format!("/v1/service-orders/RQ-CLOSE?min_position={head}"))
            .await;
        assert_eq!(o["status"], 4, "{o}");
        let t = &o["payment_transactions"][0];
        assert_eq!(
            (&t["transaction_no"], &t["status"]),
            (&json!(txn), &json!("LATE_AFTER_CLOSE")),
            "{o}"
        );
        assert_eq!(creates(&env, &refund_no), 1);
        assert_eq!(env.sim.gateway().refunds_made(&refund_no), 1);
    }
);

both_backends!(
    r_ref_1_a_temporary_error_keeps_refunding_and_the_next_scan_queries_it_settled,
    |db: TestDb| async move {
        let env = ServicesEnv::start(&db).await;
        // The gateway makes the refund but answers after the client gave up (1 s),
        // then its first query answers 503.
        let script = vec![
            GatewayFault::AcceptThenTimeout { delay_ms: 3_000 },
            GatewayFault::Query5xx {
                times: 1,
                status: 503,
            },
        ];
        let (txn, refund_no) = late_refund(&env, "RQ-TEMP", 44, 1_500, script).await;

        let report = refund_scan(&env).await;
        assert_eq!(
            (report.candidates, report.acted, report.failed),
            (1, 0, 1),
            "{report:?}"
        );
        let r = wait_refund(&env, &refund_no, |r| {
            r["status"] == 2 && r["gateway_response"].is_string()
        })
        .await;
        let first = r["gateway_response"].as_str().unwrap_or("").to_owned();
        assert!(first.contains("no answer"), "{r}");
        let gateway = env.sim.gateway();
        assert_eq!(gateway.refunds_made(&refund_no), 1, "the gateway made it");
        assert_eq!(creates(&env, &refund_no), 1);

        // The query's 503: still REFUNDING, the answer kept, no second create.
        let report = refund_scan(&env).await;
        assert_eq!(
            (report.candidates, report.acted, report.failed),
            (1, 0, 1),
            "{report:?}"
        );
        let r = wait_refund(&env, &refund_no, |r| {
            r["gateway_response"]
                .as_str()
                .is_some_and(|g| g.contains("503"))
        })
        .await;
        assert_eq!(r["status"], 2, "{r}");
        assert_eq!(creates(&env, &refund_no), 1);
        assert_eq!(env.order("RQ-TEMP").await["status"], 4);

        // The fault is used up: the next scan's query settles it.
        let report = refund_scan(&env).await;
        assert_eq!((report.acted, report.failed), (1, 0), "{report:?}");
        wait_refund(&env, &refund_no, |r| r["status"] == 3).await;
        let o = env.wait_order("RQ-TEMP", |o| o["status"] == 6).await;
        assert_eq!(o["payment_transactions"][0]["status"], "REFUNDED", "{o}");
        assert_eq!(creates(&env, &refund_no), 1);
        let refunds = gateway.refunds();
        assert_eq!(refunds.refunds_per_refund_no.get(&refund_no), Some(&1));
        assert_eq!(refunds.refunds_per_transaction_no.get(&txn), Some(&1));
        assert_eq!(
            refunds.refunded_minor_per_transaction_no.get(&txn),
            Some(&1_500)
        );
    }
);

both_backends!(
    a_pay_callback_whose_first_handling_failed_is_replayed_by_the_gateway_provider_and_pays_the_order,
    |db: TestDb| async move {
        use factledger::callbacks::CALLBACK_REPLAY;
        use factledger::infra::jobs::Selector;
        let env = ServicesEnv::start(&db).await;
        // The gateway's signed callback arrives before the order's commit is visible:
        // its first handling fails and a replay job is left for it.
        let paid = env.pay("EARLY-1", 700, "CNY").await;
        assert_eq!(paid["callback"]["http_status"], 202, "{paid}");
        let replays = jobs_of(&env, CALLBACK_REPLAY.name).await;
        assert_eq!(replays.len(), 1, "{replays:?}");
        let code = replays[0]["code"].as_str().unwrap().to_owned();
        // Reconciliation reports the payment the inbox holds and no order records,
        // once it is past its replay schedule (received an hour ago, say).
        backdate_callbacks(&env).await;
        let unapplied = payment_not_applied(&env).await;
        assert_eq!(unapplied.len(), 1, "{unapplied:?}");
        assert_eq!(unapplied[0]["expected"]["order_no"], "EARLY-1", "{unapplied:?}");
        env.recharge_order("EARLY-1", 31, 700).await;
        // The replay round runs in this process's engine and finds the gateway's
        // provider (it was registered before the replay handler was built).
        let run = env
            .app
            .state
            .jobs
            .retry(&Selector::parse(vec![code.clone()], vec![]).unwrap())
            .await
            .unwrap();
        // (The engine's own scan may have claimed it first: either way no round fails.)
        assert_eq!(run.failed, 0, "{run:?}");
        let o = env.wait_order("EARLY-1", |o| o["status"] == 3).await;
        assert_eq!(o["recharge"]["status"], "CREDITED", "{o}");
        assert_eq!(env.candy(31).await, (700, 0));
        assert!(payment_not_applied(&env).await.is_empty());
    }
);

/// Move every callback's receipt an hour back (past the check's grace period).
async fn backdate_callbacks(env: &ServicesEnv) {
    crate::common::exec(
        &env.app.state.db,
        "UPDATE callback_inbox SET received_at_ms = received_at_ms - 3600000",
    )
    .await;
}

/// The `payment_not_applied` findings of a reconciliation run through the API.
async fn payment_not_applied(env: &ServicesEnv) -> Vec<Value> {
    let done = env.app.reconciled(json!({})).await;
    done["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "payment_not_applied")
        .cloned()
        .collect()
}
