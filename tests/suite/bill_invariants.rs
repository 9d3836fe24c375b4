//! Issue 14 item 4 over HTTP, both backends: every constraint the bill projection
//! enforces is checked when the command is accepted (F2: an id names one stream's row,
//! also under racing requests; F12: a partner bill has one diff; F13: of the diff's
//! month; F14: a lock holds a real line), so the bill projector always reaches the
//! head; a read takes `min_position` (read-your-writes); and a stuck projector turns
//! `/health` to 503 `degraded` and raises its stall alert.

use crate::common;

use common::{Server, TestDb};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

#[track_caller]
pub(crate) fn problem(got: &(u16, Value), status: u16, code: &str, field: &str) {
    assert_eq!(got.0, status, "{}", got.1);
    assert_eq!(got.1["code"], code, "{}", got.1);
    assert_eq!(got.1["field"], field, "{}", got.1);
}

#[track_caller]
pub(crate) fn ok(got: &(u16, Value)) -> i64 {
    assert!(got.0 == 201 || got.0 == 200, "{}", got.1);
    got.1["position"].as_i64().unwrap_or(0)
}

pub(crate) async fn stream(db: &TestDb, aggregate_type: &str, id: &str) -> Vec<String> {
    db.store
        .read_stream(aggregate_type, id, 1, 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.event_type)
        .collect()
}

fn small_bill(station_id: i64, bill_id: i64) -> Value {
    json!({"station_id": station_id, "month": "202609", "bill_id": bill_id,
           "account_id": 7, "rent_minor": 1000})
}

fn diff(station_id: i64, diff_id: i64, partner_bill_id: Option<i64>) -> Value {
    json!({"station_id": station_id, "month": "202609", "diff_id": diff_id,
           "partner_bill_id": partner_bill_id})
}

async fn partner_bill(app: &Server, id: i64, month: &str) {
    ok(&app
        .post(
            "/v1/bills/partner-bills",
            json!({"partner_bill_id": id, "partner_account_id": 3, "month": month,
                   "pre_rent_minor": 500, "deduction_minor": 0}),
        )
        .await);
}

/// The bill projector at the head of the log with no error (bounded wait).
pub(crate) async fn bill_projector_at_head(app: &Server, db: &TestDb) -> Value {
    let head = db.store.head_position().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, list) = app.get("/v1/projections").await;
        let bill = list
            .as_array()
            .and_then(|l| l.iter().find(|s| s["name"] == "bill"))
            .cloned()
            .unwrap_or(Value::Null);
        assert_eq!(bill["last_error"], Value::Null, "{bill}");
        if bill["position"] == head {
            return bill;
        }
        assert!(
            Instant::now() < deadline,
            "bill projector not at {head}: {bill}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Two requests at once: exactly one is accepted, the other refused with `code`.
async fn race(app: &std::sync::Arc<Server>, path: &str, bodies: [Value; 2], code: &str) {
    let mut set = tokio::task::JoinSet::new();
    for body in bodies {
        let (a, p) = (app.clone(), path.to_owned());
        set.spawn(async move { a.post(&p, body).await });
    }
    let answers = set.join_all().await;
    let won = answers.iter().filter(|a| a.0 == 201).count();
    let refused = answers
        .iter()
        .filter(|a| a.0 == 409 && a.1["code"] == code)
        .count();
    assert_eq!((won, refused), (1, 1), "{answers:?}");
}

both_backends!(
    f2_a_bill_id_of_another_station_is_refused_and_the_projector_reaches_the_head,
    |db: TestDb| async move {
        let app = std::sync::Arc::new(Server::start(&db).await);
        ok(&app.post("/v1/bills/small-bills", small_bill(100, 7)).await);
        problem(
            &app.post("/v1/bills/small-bills", small_bill(200, 7)).await,
            409,
            "BILL_ID_TAKEN",
            "bill_id",
        );
        ok(&app.post("/v1/bills/diffs", diff(100, 5, None)).await);
        problem(
            &app.post("/v1/bills/diffs", diff(200, 5, None)).await,
            409,
            "DIFF_ID_TAKEN",
            "diff_id",
        );
        assert!(stream(&db, "bill_station_month", "200:202609")
            .await
            .is_empty());
        // Racing requests for one id on two stations: one 201, one 409.
        for round in 0..4 {
            let (a, b) = (300 + 2 * round, 301 + 2 * round);
            race(
                &app,
                "/v1/bills/small-bills",
                [small_bill(a, 50 + round), small_bill(b, 50 + round)],
                "BILL_ID_TAKEN",
            )
            .await;
            race(
                &app,
                "/v1/bills/diffs",
                [diff(a, 60 + round, None), diff(b, 60 + round, None)],
                "DIFF_ID_TAKEN",
            )
            .await;
        }
        bill_projector_at_head(&app, &db).await;
        let (status, read) = app.get("/v1/bills/100/202609").await;
        assert_eq!(status, 200, "{read}");
        assert_eq!(read["fi_customer_bill"]["id"], 7, "{read}");
        assert_eq!(read["fi_monthly_income_difference"]["id"], 5, "{read}");
    }
);

both_backends!(
    f12_a_partner_bill_linked_by_one_diff_is_refused_to_another_until_released,
    |db: TestDb| async move {
        let app = std::sync::Arc::new(Server::start(&db).await);
        for id in [9, 10, 11] {
            partner_bill(&app, id, "202609").await;
        }
        ok(&app.post("/v1/bills/diffs", diff(100, 5, Some(9))).await);
        problem(
            &app.post("/v1/bills/diffs", diff(200, 6, Some(9))).await,
            409,
            "PARTNER_BILL_ALREADY_LINKED",
            "partner_bill_id",
        );
        // Re-linked to another bill, 100's diff lets go of 9; then 200 may link it.
        ok(&app.post("/v1/bills/diffs", diff(100, 5, Some(10))).await);
        ok(&app.post("/v1/bills/diffs", diff(200, 6, Some(9))).await);
        problem(
            &app.post("/v1/bills/diffs", diff(100, 5, Some(9))).await,
            409,
            "PARTNER_BILL_ALREADY_LINKED",
            "partner_bill_id",
        );
        race(
            &app,
            "/v1/bills/diffs",
            [diff(300, 7, Some(11)), diff(301, 8, Some(11))],
            "PARTNER_BILL_ALREADY_LINKED",
        )
        .await;
        bill_projector_at_head(&app, &db).await;
        // Each partner bill row belongs to the one station-month whose diff links it,
        // and no station-month reports a partner bill linked twice.
        for (station, partner) in [(100, 10), (200, 9)] {
            let (status, read) = app.get(&format!("/v1/bills/{station}/202609")).await;
            assert_eq!(status, 200, "{read}");
            let row = &read["fi_customer_bill_partner"];
            assert_eq!(row["id"], partner, "{read}");
            assert_eq!(row["decided_station_month"], format!("{station}:202609"));
            assert_ne!(
                read["finding"]["code"], "PARTNER_BILL_LINKED_TWICE",
                "{read}"
            );
        }
    }
);

both_backends!(
    f13_a_diff_links_only_a_recorded_partner_bill_of_its_own_month,
    |db: TestDb| async move {
        let app = Server::start(&db).await;
        partner_bill(&app, 9, "202608").await;
        problem(
            &app.post("/v1/bills/diffs", diff(100, 5, Some(9))).await,
            422,
            "PARTNER_BILL_MONTH_MISMATCH",
            "partner_bill_id",
        );
        problem(
            &app.post("/v1/bills/diffs", diff(100, 5, Some(77))).await,
            422,
            "PARTNER_BILL_UNRECORDED",
            "partner_bill_id",
        );
        assert!(stream(&db, "bill_station_month", "100:202609")
            .await
            .is_empty());
        partner_bill(&app, 10, "202609").await;
        ok(&app.post("/v1/bills/diffs", diff(100, 5, Some(10))).await);
        bill_projector_at_head(&app, &db).await;
    }
);

/// Order `order_id` with a payable line per `(line_id, station_id)` of 202609,
/// published and submitted; its current `(publish_version, submit_round)`.
pub(crate) async fn submitted_order(
    app: &Server,
    order_id: i64,
    lines: &[(i64, i64)],
) -> (i64, i64) {
    ok(&app
        .post(
            "/v1/payment-orders",
            json!({"order_id": order_id, "treasury": true}),
        )
        .await);
    for (line_id, station_id) in lines {
        ok(&app
            .post(
                &format!("/v1/payment-orders/{order_id}/lines"),
                json!({"line_id": line_id, "station_id": station_id, "month": "202609",
                       "kind": "PAYABLE", "planned_amount_minor": 1000}),
            )
            .await);
    }
    let mut last = Value::Null;
    for action in ["publish", "submit"] {
        let got = app
            .post(
                &format!("/v1/payment-orders/{order_id}:{action}"),
                json!({}),
            )
            .await;
        ok(&got);
        last = got.1;
    }
    let published = last["events"]
        .as_array()
        .and_then(|e| {
            e.iter()
                .find(|e| e["event_type"] == "PaymentOrderPublished")
        })
        .expect("submit publishes")["payload"]
        .clone();
    (
        published["publish_version"].as_i64().unwrap(),
        published["submit_round"].as_i64().unwrap(),
    )
}

pub(crate) fn lock(
    lock_id: i64,
    station_id: i64,
    order_id: i64,
    line_id: i64,
    (v, r): (i64, i64),
) -> Value {
    json!({"lock_id": lock_id, "station_id": station_id, "month": "202609",
           "order_id": order_id, "line_id": line_id, "publish_version": v, "submit_round": r})
}

both_backends!(
    f14_a_lock_on_an_unknown_order_or_line_is_refused_and_blocks_no_real_lock,
    |db: TestDb| async move {
        let app = Server::start(&db).await;
        let identity = submitted_order(&app, 20, &[(1, 100), (2, 101)]).await;
        let (v, r) = identity;
        for (body, code, field) in [
            (
                lock(1, 100, 99, 1, identity),
                "LOCK_ORDER_NOT_FOUND",
                "order_id",
            ),
            (
                lock(1, 100, 20, 7, identity),
                "LOCK_LINE_NOT_FOUND",
                "line_id",
            ),
            (
                lock(1, 100, 20, 2, identity),
                "LOCK_LINE_NOT_FOUND",
                "line_id",
            ),
            (
                lock(1, 100, 20, 1, (v + 1, r)),
                "LOCK_PUBLISH_MISMATCH",
                "publish_version",
            ),
            (
                lock(1, 100, 20, 1, (v, r + 1)),
                "LOCK_PUBLISH_MISMATCH",
                "submit_round",
            ),
        ] {
            problem(&app.post("/v1/bills/locks", body).await, 422, code, field);
        }
        assert!(stream(&db, "bill_lock", "100:202609").await.is_empty());
        // Nothing bogus holds the station-month: the real lock goes through.
        ok(&app
            .post("/v1/bills/locks", lock(1, 100, 20, 1, identity))
            .await);
        // Line and lock ids name one row each (bill_fact_lines, bill_fact_locks).
        ok(&app
            .post(
                "/v1/payment-orders",
                json!({"order_id": 21, "treasury": true}),
            )
            .await);
        problem(
            &app.post(
                "/v1/payment-orders/21/lines",
                json!({"line_id": 1, "station_id": 102, "month": "202609",
                       "kind": "PAYABLE", "planned_amount_minor": 1}),
            )
            .await,
            409,
            "LINE_ID_TAKEN",
            "line_id",
        );
        problem(
            &app.post("/v1/bills/locks", lock(1, 101, 20, 2, identity))
                .await,
            409,
            "LOCK_ID_TAKEN",
            "lock_id",
        );
        ok(&app
            .post("/v1/bills/locks", lock(2, 101, 20, 2, identity))
            .await);
        bill_projector_at_head(&app, &db).await;
    }
);

both_backends!(
    f14_bills_read_your_own_write_with_min_position,
    |db: TestDb| async move {
        let app = Server::start(&db).await;
        for rent in [1000, 2000, 3000, 4000] {
            let mut bill = small_bill(100, 7);
            bill["rent_minor"] = json!(rent);
            let position = ok(&app.post("/v1/bills/small-bills", bill).await);
            let (status, read) = app
                .get(&format!("/v1/bills/100/202609?min_position={position}"))
                .await;
            assert_eq!(status, 200, "{read}");
            assert!(read["position"].as_i64().unwrap() >= position, "{read}");
            assert_eq!(read["fi_customer_bill"]["rent"], rent, "{read}");
        }
        let (status, read) = app.get("/v1/bills/100/202609?min_position=-1").await;
        assert_eq!(
            (status, &read["field"]),
            (422, &json!("min_position")),
            "{read}"
        );
        let far = db.store.head_position().await.unwrap() + 1000;
        for path in [
            format!("/v1/bills/100/202609?min_position={far}"),
            format!("/v1/bills/order-status-conflicts?min_position={far}"),
        ] {
            let (status, read) = app.get(&path).await;
            assert_eq!(status, 503, "{path}: {read}");
            assert_eq!(read["code"], "PROJECTION_BEHIND", "{read}");
        }
        let head = db.store.head_position().await.unwrap();
        let (status, read) = app
            .get(&format!(
                "/v1/bills/order-status-conflicts?min_position={head}"
            ))
            .await;
        assert_eq!(status, 200, "{read}");
    }
);

/// Break the event at `position` as the database owner would (the trigger dropped);
/// its original payload.
async fn corrupt(db: &TestDb, position: i64, payload: &str) -> String {
    let original = db.store.read_positions(position, position).await.unwrap()[0]
        .payload
        .clone();
    db.store
        .execute_raw("DROP TRIGGER IF EXISTS events_refuse_update")
        .await
        .unwrap();
    db.store
        .execute_raw(&format!(
            "UPDATE events SET payload = '{payload}' WHERE global_position = {position}"
        ))
        .await
        .unwrap();
    original
}

/// `/health` as a keyed caller sees it, once it answers `status` (bounded wait).
async fn health_until(app: &Server, status: u16) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = app
            .client
            .get(format!("{}/health", app.base))
            .bearer_auth(&app.admin)
            .send()
            .await
            .unwrap();
        let got = r.status().as_u16();
        let body: Value = r.json().await.unwrap_or(Value::Null);
        if got == status {
            return body;
        }
        assert!(Instant::now() < deadline, "health never {status}: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

both_backends!(
    f2_a_stuck_projector_turns_health_degraded_and_alerts,
    |db: TestDb| async move {
        // A small bill the bill projector cannot apply (a month it refuses), planted
        // before the service starts.
        let cmd = serde_json::from_value(json!({"type": "RecordSmallBill", "station_id": 100,
            "month": "202609", "bill_id": 7, "account_id": 7, "rent_minor": 1,
            "recorded_at": "2026-09-01T00:00:00Z"}))
        .unwrap();
        let done = factledger::runtime::unit::run_command::<
            factledger_aggregates::bill::StationMonthBills,
        >(&db.store, &common::meta(), "100:202609", cmd)
        .await
        .unwrap();
        let planted = done.position;
        let original = corrupt(
            &db,
            planted,
            r#"{"type":"SmallBillRecorded","station_id":100,"month":"202613","bill_id":7,"account_id":7,"rent_minor":1,"recorded_at":"2026-09-01T00:00:00Z"}"#,
        )
        .await;
        let options = factledger::server::ServeOptions {
            projection_stall_alert_ms: Some(300),
            settlement_cron: factledger::server::SettlementCron::Off,
            ..Default::default()
        };
        let app = Server::start_with(&db, options).await;
        let body = health_until(&app, 503).await;
        assert_eq!(body["status"], "degraded", "{body}");
        // Without a key: the status alone, no error text (issue 32 item 7).
        let r = app
            .client
            .get(format!("{}/health", app.base))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 503);
        assert_eq!(
            r.json::<Value>().await.unwrap(),
            json!({"status": "degraded"})
        );
        let stuck = body["projectors"].as_array().unwrap();
        assert_eq!(stuck.len(), 1, "{body}");
        assert_eq!(stuck[0]["name"], "bill", "{body}");
        assert_eq!(stuck[0]["error_position"], planted, "{body}");
        assert_eq!(stuck[0]["position"], planted - 1, "{body}");
        assert!(stuck[0]["lag"].as_i64().unwrap() >= 1, "{body}");
        assert!(
            stuck[0]["last_error"].as_str().unwrap().contains("202613"),
            "{body}"
        );
        // The same moment raises the stall alert, naming the stream.
        let deadline = Instant::now() + Duration::from_secs(20);
        let db2 = db.database().await.db;
        loop {
            let n = common::scalar(
                &db2,
                "SELECT COUNT(*) FROM outbox WHERE type = 'alert.projection.stalled' \
                 AND payload LIKE '%bill_station_month/100:202609%'",
            )
            .await;
            if n >= 1 {
                break;
            }
            assert!(Instant::now() < deadline, "no stall alert");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Mended, the projector moves on and health is ok again.
        db.store
            .execute_raw(&format!(
                "UPDATE events SET payload = '{original}' WHERE global_position = {planted}"
            ))
            .await
            .unwrap();
        let body = health_until(&app, 200).await;
        assert_eq!(body["status"], "ok", "{body}");
        bill_projector_at_head(&app, &db).await;
    }
);
