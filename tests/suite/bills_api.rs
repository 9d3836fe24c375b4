//! The bill write API over HTTP (issue 6 item 1): every endpoint's happy path and the
//! events it stored, a bad field naming the field with nothing written, one small bill
//! per station-month (R-BILL-7), the payment-order state machine, locks, results with
//! their line write-back, and idempotent replays (200, nothing written). Both backends.

use crate::common;

use common::{Server, TestDb};
use serde_json::{json, Value};

#[track_caller]
fn problem(got: &(u16, Value), status: u16, code: &str, field: Option<&str>) {
    assert_eq!(got.0, status, "{}", got.1);
    assert_eq!(got.1["code"], code, "{}", got.1);
    assert_eq!(got.1["field"].as_str(), field, "{}", got.1);
}

/// 201 with these event types, in order.
#[track_caller]
fn created(got: &(u16, Value), types: &[&str]) {
    assert_eq!(got.0, 201, "{}", got.1);
    let written: Vec<&str> = got.1["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(written, types, "{}", got.1);
    assert!(got.1["position"].as_i64().unwrap() > 0, "{}", got.1);
}

/// 200 and nothing written: a replay of facts already recorded.
#[track_caller]
fn replayed(got: &(u16, Value)) {
    assert_eq!(got.0, 200, "{}", got.1);
    assert_eq!(got.1["events"], json!([]), "{}", got.1);
    assert_eq!(got.1["position"], 0, "{}", got.1);
}

/// The event types stored on a stream.
async fn stored(db: &TestDb, aggregate_type: &str, id: &str) -> Vec<String> {
    db.store
        .read_stream(aggregate_type, id, 1, 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.event_type)
        .collect()
}

/// The payload of the last event of a stream.
async fn last_payload(db: &TestDb, aggregate_type: &str, id: &str) -> Value {
    let events = db
        .store
        .read_stream(aggregate_type, id, 1, 1000)
        .await
        .unwrap();
    serde_json::from_str(&events.last().expect("an event").payload).unwrap()
}

fn small_bill(bill_id: i64) -> Value {
    json!({"station_id": 100, "month": "202609", "bill_id": bill_id, "account_id": 7,
           "rent_minor": 100_000})
}

both_backends!(
    one_small_bill_and_one_diff_per_station_month,
    |db: TestDb| async move {
        let app = Server::start(&db).await;
        let first = app.post("/v1/bills/small-bills", small_bill(1)).await;
        // The bill id is claimed for the station-month in the same unit (issue 14 F2).
        created(&first, &["SmallBillRecorded", "IdClaimed"]);
        assert_eq!(first.1["events"][0]["aggregate_id"], "100:202609");
        assert_eq!(first.1["events"][0]["payload"]["rent_minor"], 100_000);
        replayed(&app.post("/v1/bills/small-bills", small_bill(1)).await);

        // R-BILL-7: another small bill for the station-month is refused, nothing written.
        problem(
            &app.post("/v1/bills/small-bills", small_bill(2)).await,
            409,
            "SMALL_BILL_ALREADY_RECORDED",
            Some("bill_id"),
        );
        // The same bill may change its rent.
        let mut changed = small_bill(1);
        changed["rent_minor"] = json!(120_000);
        created(
            &app.post("/v1/bills/small-bills", changed).await,
            &["SmallBillRecorded"],
        );

        // Bad fields name the field; the server owns the time.
        for (field, value) in [
            ("month", json!("202613")),
            ("station_id", json!(0)),
            ("rent_minor", json!(-1)),
            ("rent_minor", json!(1.5)),
            ("extra", json!(1)),
        ] {
            let mut bad = small_bill(3);
            bad[field] = value;
            problem(
                &app.post("/v1/bills/small-bills", bad).await,
                422,
                "INVALID_FIELD",
                Some(field),
            );
        }
        let mut missing = small_bill(3);
        missing.as_object_mut().unwrap().remove("account_id");
        problem(
            &app.post("/v1/bills/small-bills", missing).await,
            422,
            "INVALID_FIELD",
            Some("account_id"),
        );
        let mut owned = small_bill(1);
        owned["recorded_at"] = json!("2020-01-01T00:00:00Z");
        problem(
            &app.post("/v1/bills/small-bills", owned).await,
            422,
            "SERVER_OWNED_FIELD",
            Some("recorded_at"),
        );
        assert_eq!(
            stored(&db, "bill_station_month", "100:202609").await,
            ["SmallBillRecorded", "SmallBillRecorded"]
        );

        // A diff with or without a partner bill; one per station-month.
        let diff = json!({"station_id": 100, "month": "202609", "diff_id": 5});
        created(
            &app.post("/v1/bills/diffs", diff.clone()).await,
            &["DiffRecorded", "IdClaimed"],
        );
        replayed(&app.post("/v1/bills/diffs", diff).await);
        let linked =
            json!({"station_id": 100, "month": "202609", "diff_id": 5, "partner_bill_id": 9});
        // A diff links only a recorded partner bill (issue 14 F13), then claims it (F12).
        problem(
            &app.post("/v1/bills/diffs", linked.clone()).await,
            422,
            "PARTNER_BILL_UNRECORDED",
            Some("partner_bill_id"),
        );
        created(
            &app.post(
                "/v1/bills/partner-bills",
                json!({"partner_bill_id": 9, "partner_account_id": 3, "month": "202609",
                       "deduction_minor": 0}),
            )
            .await,
            &["PartnerBillRecorded"],
        );
        created(
            &app.post("/v1/bills/diffs", linked).await,
            &["DiffRecorded", "IdClaimed"],
        );
        problem(
            &app.post(
                "/v1/bills/diffs",
                json!({"station_id": 100, "month": "202609", "diff_id": 6}),
            )
            .await,
            409,
            "DIFF_ALREADY_RECORDED",
            Some("diff_id"),
        );
        assert_eq!(
            last_payload(&db, "bill_station_month", "100:202609").await["partner_bill_id"],
            9
        );
    }
);

both_backends!(
    partner_bills_are_recorded_and_repushed_once_recorded,
    |db: TestDb| async move {
        let app = Server::start(&db).await;
        let bill = json!({"partner_bill_id": 9, "partner_account_id": 201, "month": "202609",
            "pre_rent_minor": 100_000, "deduction_minor": 0});
        let at = json!({"repushed_at": "2026-09-03T10:00:00Z"});
        problem(
            &app.post("/v1/bills/partner-bills/9:repush", at.clone())
                .await,
            404,
            "PARTNER_BILL_NOT_FOUND",
            Some("partner_bill_id"),
        );
        created(
            &app.post("/v1/bills/partner-bills", bill.clone()).await,
            &["PartnerBillRecorded"],
        );
        replayed(&app.post("/v1/bills/partner-bills", bill.clone()).await);
        let mut other_month = bill.clone();
        other_month["month"] = json!("202610");
        problem(
            &app.post("/v1/bills/partner-bills", other_month).await,
            409,
            "PARTNER_BILL_IDENTITY_CHANGED",
            Some("month"),
        );
        let mut negative = bill.clone();
        negative["deduction_minor"] = json!(-5);
        problem(
            &app.post("/v1/bills/partner-bills", negative).await,
            422,
            "INVALID_FIELD",
            Some("deduction_minor"),
        );
        created(
            &app.post("/v1/bills/partner-bills/9:repush", at.clone())
                .await,
            &["PartnerBillRepushed"],
        );
        replayed(&app.post("/v1/bills/partner-bills/9:repush", at).await);
        problem(
            &app.post("/v1/bills/partner-bills/9:push", json!({})).await,
            404,
            "NOT_FOUND",
            None,
        );
        problem(
            &app.post("/v1/bills/partner-bills/x:repush", json!({}))
                .await,
            422,
            "INVALID_FIELD",
            Some("partner_bill_id"),
        );
        assert_eq!(
            stored(&db, "bill_partner_bill", "9").await,
            ["PartnerBillRecorded", "PartnerBillRepushed"]
        );
    }
);

both_backends!(
    reference_data_is_recorded_per_entity_and_not_configured_explicitly,
    |db: TestDb| async move {
        let app = Server::start(&db).await;
        let rows = [
            (
                "customer-accounts",
                json!({"account_id": 7, "income_start_month": "202601",
                "current_payable_cutoff_month": "202609"}),
                "CustomerAccountRecorded",
                "customer_account:7",
            ),
            (
                "partner-accounts",
                json!({"partner_account_id": 201, "partner_org_id": 31,
                "platform_station_id": 500}),
                "PartnerAccountRecorded",
                "partner_account:201",
            ),
            (
                "partner-profiles",
                json!({"partner_org_id": 31, "payment_cycle": "MONTHLY",
                "config_version": 2}),
                "PartnerProfileConfigured",
                "partner_profile:31",
            ),
            (
                "partner-profiles:not-configured",
                json!({"partner_org_id": 32}),
                "PartnerProfileNotConfigured",
                "partner_profile:32",
            ),
            (
                "station-facts",
                json!({"station_id": 100, "record_way": "NON_NATURAL_PERSON",
                "share_rule": {"rent_pay_method": "HALF_YEARLY", "change_type": "RENEW"}}),
                "StationFactsRecorded",
                "station:100",
            ),
            (
                "account-route",
                json!({"route": "PLATFORM"}),
                "AccountRouteSet",
                "account_route",
            ),
            (
                "opening-paid-balances",
                json!({"opening_id": 3, "small_station_id": 100,
                "partner_org_id": 31, "opening_paid_minor": 5_000}),
                "OpeningPaidBalanceRecorded",
                "opening_paid:3",
            ),
            (
                "opening-deductions",
                json!({"opening_id": 4, "partner_account_id": 201,
                "effective": true, "amount_minor": 700}),
                "OpeningDeductionRecorded",
                "opening_deduction:4",
            ),
        ];
        for (kind, body, event_type, stream) in rows {
            let path = format!("/v1/bills/reference/{kind}");
            let got = app.post(&path, body.clone()).await;
            created(&got, &[event_type]);
            assert_eq!(got.1["events"][0]["aggregate_id"], stream, "{kind}");
            replayed(&app.post(&path, body).await);
            assert_eq!(stored(&db, "bill_reference", stream).await, [event_type]);
        }
        problem(
            &app.post(
                "/v1/bills/reference/partner-profiles",
                json!({"partner_org_id": 31, "payment_cycle": "QUARTERLY", "config_version": 1}),
            )
            .await,
            409,
            "CONFIG_VERSION_STALE",
            Some("config_version"),
        );
        problem(
            &app.post(
                "/v1/bills/reference/partner-profiles",
                json!({"partner_org_id": 31, "payment_cycle": "monthly", "config_version": 3}),
            )
            .await,
            422,
            "INVALID_FIELD",
            Some("payment_cycle"),
        );
        problem(
            &app.post(
                "/v1/bills/reference/opening-paid-balances",
                json!({"opening_id": 5, "small_station_id": 100, "partner_org_id": 31,
                       "opening_paid_minor": -1}),
            )
            .await,
            422,
            "INVALID_FIELD",
            Some("opening_paid_minor"),
        );
        problem(
            &app.post("/v1/bills/reference/stations", json!({})).await,
            404,
            "NOT_FOUND",
            None,
        );
        assert!(stored(&db, "bill_reference", "opening_paid:5")
            .await
            .is_empty());
        // "Not configured" is followed by a configured profile of the same partner.
        created(
            &app.post(
                "/v1/bills/reference/partner-profiles",
                json!({"partner_org_id": 32, "payment_cycle": "QUARTERLY", "config_version": 1}),
            )
            .await,
            &["PartnerProfileConfigured"],
        );
    }
);

/// Order 20 with a payable line 1 (station 100, planned 100 000) and an unqualified
/// line 2 (station 101).
async fn drafted_order(app: &Server) {
    created(
        &app.post(
            "/v1/payment-orders",
            json!({"order_id": 20, "treasury": true}),
        )
        .await,
        &["PaymentOrderCreated"],
    );
    let payable = json!({"line_id": 1, "station_id": 100, "month": "202609",
        "kind": "PAYABLE", "planned_amount_minor": 100_000});
    created(
        &app.post("/v1/payment-orders/20/lines", payable.clone())
            .await,
        &["LineAdded", "IdClaimed"],
    );
    replayed(&app.post("/v1/payment-orders/20/lines", payable).await);
    let unqualified = json!({"line_id": 2, "station_id": 101, "month": "202609",
        "kind": "UNQUALIFIED", "planned_amount_minor": 0});
    created(
        &app.post("/v1/payment-orders/20/lines", unqualified).await,
        &["LineAdded", "IdClaimed"],
    );
}

both_backends!(
    a_payment_order_moves_through_review_along_its_transition_table,
    |db: TestDb| async move {
        let app = Server::start(&db).await;
        drafted_order(&app).await;
        problem(
            &app.post(
                "/v1/payment-orders",
                json!({"order_id": 20, "treasury": false}),
            )
            .await,
            409,
            "ORDER_ALREADY_CREATED",
            Some("treasury"),
        );
        problem(
            &app.post("/v1/payment-orders/99:submit", json!({})).await,
            404,
            "ORDER_NOT_FOUND",
            Some("order_id"),
        );
        // Adjust (a negative adjustment is legal, a negative amount to pay is not).
        created(
            &app.post(
                "/v1/payment-orders/20/lines/1:adjust",
                json!({"manual_adjustment_minor": -5_000, "reason": "rounding"}),
            )
            .await,
            &["LineAdjusted"],
        );
        problem(
            &app.post(
                "/v1/payment-orders/20/lines/1:adjust",
                json!({"manual_adjustment_minor": -100_001, "reason": "too much"}),
            )
            .await,
            422,
            "ADJUSTED_AMOUNT_INVALID",
            Some("manual_adjustment_minor"),
        );
        problem(
            &app.post(
                "/v1/payment-orders/20/lines/1:adjust",
                json!({"manual_adjustment_minor": 1, "reason": " "}),
            )
            .await,
            422,
            "INVALID_FIELD",
            Some("reason"),
        );
        created(
            &app.post("/v1/payment-orders/20:publish", json!({})).await,
            &["PaymentOrderPublished"],
        );
        replayed(&app.post("/v1/payment-orders/20:publish", json!({})).await);
        problem(
            &app.post("/v1/payment-orders/20:approve", json!({})).await,
            409,
            "ILLEGAL_TRANSITION",
            None,
        );

        // Submit: a new round, published; lines are frozen under review.
        let submit = app.post("/v1/payment-orders/20:submit", json!({})).await;
        created(&submit, &["PaymentOrderSubmitted", "PaymentOrderPublished"]);
        assert_eq!(submit.1["events"][1]["payload"]["publish_version"], 2);
        assert_eq!(submit.1["events"][1]["payload"]["submit_round"], 1);
        assert_eq!(submit.1["events"][1]["payload"]["line_ids"], json!([1, 2]));
        replayed(&app.post("/v1/payment-orders/20:submit", json!({})).await);
        problem(
            &app.post(
                "/v1/payment-orders/20/lines",
                json!({"line_id": 3, "station_id": 102, "month": "202609",
                       "kind": "PAYABLE", "planned_amount_minor": 1}),
            )
            .await,
            409,
            "ORDER_NOT_EDITABLE",
            None,
        );
        problem(
            &app.post("/v1/payment-orders/20:publish", json!({})).await,
            409,
            "ILLEGAL_TRANSITION",
            None,
        );

        // Unqualified conclusions on the unqualified line.
        created(
            &app.post(
                "/v1/payment-orders/20/lines/2:conclude-unqualified",
                json!({"partner_visible": true, "reason": "pre_rent below paid"}),
            )
            .await,
            &["UnqualifiedConcluded"],
        );
        problem(
            &app.post(
                "/v1/payment-orders/20/lines/1:conclude-unqualified",
                json!({"partner_visible": true, "reason": "x"}),
            )
            .await,
            409,
            "LINE_KIND_MISMATCH",
            Some("line_id"),
        );
        created(
            &app.post(
                "/v1/payment-orders/20/lines/2:withdraw-unqualified",
                json!({"reason": "re-checked"}),
            )
            .await,
            &["UnqualifiedWithdrawn"],
        );

        // Reject (with a reason), edit, resubmit in round 2, approve.
        problem(
            &app.post("/v1/payment-orders/20:reject", json!({})).await,
            422,
            "INVALID_FIELD",
            Some("reason"),
        );
        created(
            &app.post(
                "/v1/payment-orders/20:reject",
                json!({"reason": "wrong amount"}),
            )
            .await,
            &["PaymentOrderRejected"],
        );
        created(
            &app.post(
                "/v1/payment-orders/20/lines/1:adjust",
                json!({"manual_adjustment_minor": -10_000, "reason": "agreed"}),
            )
            .await,
            &["LineAdjusted"],
        );
        let resubmit = app.post("/v1/payment-orders/20:submit", json!({})).await;
        created(
            &resubmit,
            &["PaymentOrderSubmitted", "PaymentOrderPublished"],
        );
        assert_eq!(resubmit.1["events"][0]["payload"]["submit_round"], 2);
        let approve = app.post("/v1/payment-orders/20:approve", json!({})).await;
        created(&approve, &["PaymentOrderApproved"]);
        assert_eq!(
            approve.1["events"][0]["payload"]["planned"],
            json!([{"line_id": 1, "planned_amount_minor": 90_000}])
        );
        replayed(&app.post("/v1/payment-orders/20:approve", json!({})).await);
        problem(
            &app.post("/v1/payment-orders/20:reject", json!({"reason": "late"}))
                .await,
            409,
            "ILLEGAL_TRANSITION",
            None,
        );
        problem(
            &app.post("/v1/payment-orders/20/lines/1:remove", json!({}))
                .await,
            409,
            "ORDER_NOT_EDITABLE",
            None,
        );
        created(
            &app.post(
                "/v1/payment-orders/20:void",
                json!({"reason": "duplicate order"}),
            )
            .await,
            &["PaymentOrderVoided"],
        );
        replayed(
            &app.post("/v1/payment-orders/20:void", json!({"reason": "again"}))
                .await,
        );
        problem(
            &app.post("/v1/payment-orders/20:no-need-pay", json!({"reason": "x"}))
                .await,
            409,
            "ILLEGAL_TRANSITION",
            None,
        );
        problem(
            &app.post("/v1/payment-orders/20:pay", json!({})).await,
            404,
            "NOT_FOUND",
            None,
        );
        assert_eq!(
            stored(&db, "bill_payment_order", "20").await,
            [
                "PaymentOrderCreated",
                "LineAdded",
                "LineAdded",
                "LineAdjusted",
                "PaymentOrderPublished",
                "PaymentOrderSubmitted",
                "PaymentOrderPublished",
                "UnqualifiedConcluded",
                "UnqualifiedWithdrawn",
                "PaymentOrderRejected",
                "LineAdjusted",
                "PaymentOrderSubmitted",
                "PaymentOrderPublished",
                "PaymentOrderApproved",
                "PaymentOrderVoided",
            ]
        );

        // A second order: lines removed before review, then no need to pay.
        created(
            &app.post(
                "/v1/payment-orders",
                json!({"order_id": 22, "treasury": false}),
            )
            .await,
            &["PaymentOrderCreated"],
        );
        created(
            &app.post(
                "/v1/payment-orders/22/lines",
                json!({"line_id": 3, "station_id": 100, "month": "202609",
                       "kind": "PAYABLE", "planned_amount_minor": 0}),
            )
            .await,
            &["LineAdded", "IdClaimed"],
        );
        created(
            &app.post("/v1/payment-orders/22/lines/3:remove", json!({}))
                .await,
            &["LineRemoved"],
        );
        replayed(
            &app.post("/v1/payment-orders/22/lines/3:remove", json!({}))
                .await,
        );
        problem(
            &app.post("/v1/payment-orders/22:submit", json!({})).await,
            409,
            "ORDER_HAS_NO_LINES",
            None,
        );
        created(
            &app.post(
                "/v1/payment-orders/22:no-need-pay",
                json!({"reason": "pre_rent is 0"}),
            )
            .await,
            &["PaymentOrderMarkedNoNeedPay"],
        );
    }
);

/// Order 20 drafted, published (version 1) and submitted (round 1, version 2): its
/// line 1 of 100:202609 is what [`lock`] holds (a lock holds a real line, issue 14
/// F14).
async fn submitted_order(app: &Server) {
    drafted_order(app).await;
    for action in ["publish", "submit"] {
        let got = app
            .post(&format!("/v1/payment-orders/20:{action}"), json!({}))
            .await;
        assert_eq!(got.0, 201, "{action}: {}", got.1);
    }
}

fn lock(lock_id: i64) -> Value {
    json!({"lock_id": lock_id, "station_id": 100, "month": "202609", "order_id": 20,
           "line_id": 1, "publish_version": 2, "submit_round": 1})
}

both_backends!(
    a_station_month_has_at_most_one_live_lock,
    |db: TestDb| async move {
        let app = Server::start(&db).await;
        submitted_order(&app).await;
        created(
            &app.post("/v1/bills/locks", lock(1)).await,
            &["BillLockReserved", "IdClaimed"],
        );
        replayed(&app.post("/v1/bills/locks", lock(1)).await);
        problem(
            &app.post("/v1/bills/locks", lock(2)).await,
            409,
            "LOCK_HELD",
            Some("lock_id"),
        );
        let mut bad = lock(2);
        bad["publish_version"] = json!(0);
        problem(
            &app.post("/v1/bills/locks", bad).await,
            422,
            "INVALID_FIELD",
            Some("publish_version"),
        );
        let base = "/v1/bills/locks/100/202609";
        created(
            &app.post(&format!("{base}/1:activate"), json!({})).await,
            &["BillLockActivated"],
        );
        replayed(&app.post(&format!("{base}/1:activate"), json!({})).await);
        problem(
            &app.post(&format!("{base}/7:release"), json!({})).await,
            404,
            "LOCK_NOT_FOUND",
            Some("lock_id"),
        );
        problem(
            &app.post("/v1/bills/locks/100/2026-09/1:release", json!({}))
                .await,
            422,
            "INVALID_FIELD",
            Some("month"),
        );
        created(
            &app.post(&format!("{base}/1:release"), json!({})).await,
            &["BillLockReleased"],
        );
        replayed(&app.post(&format!("{base}/1:release"), json!({})).await);
        problem(
            &app.post(&format!("{base}/1:activate"), json!({})).await,
            409,
            "LOCK_NOT_RESERVED",
            Some("lock_id"),
        );
        created(
            &app.post("/v1/bills/locks", lock(2)).await,
            &["BillLockReserved", "IdClaimed"],
        );
        assert_eq!(
            stored(&db, "bill_lock", "100:202609").await,
            [
                "BillLockReserved",
                "BillLockActivated",
                "BillLockReleased",
                "BillLockReserved"
            ]
        );
    }
);

fn result(result_id: i64, source: &str, line_id: Option<i64>, amount: i64) -> Value {
    json!({"result_id": result_id, "order_id": 20, "line_id": line_id,
           "small_station_id": 100, "partner_org_id": 31, "month": "202609",
           "status": "PAY_SUCCESS", "kind": "NORMAL_PAYMENT", "source": source,
           "amount_minor": amount, "paid_at": "2026-09-05T08:00:00Z",
           "trigger_source": "TREASURY_RESULT_WRITEBACK"})
}

both_backends!(
    a_treasury_result_is_recorded_once_and_written_to_its_line_in_the_same_unit,
    |db: TestDb| async move {
        let app = Server::start(&db).await;
        drafted_order(&app).await;
        for action in ["submit", "approve"] {
            let got = app
                .post(&format!("/v1/payment-orders/20:{action}"), json!({}))
                .await;
            assert_eq!(got.0, 201, "{}", got.1);
        }

        // The result and its line's write-back commit together.
        let got = app
            .post(
                "/v1/bills/payment-results",
                result(77, "TREASURY", Some(1), 40_000),
            )
            .await;
        created(&got, &["PaymentResultRecorded", "LineResultWritten"]);
        let events = got.1["events"].as_array().unwrap();
        assert_eq!(events[0]["aggregate_type"], "bill_payment_result");
        assert_eq!(events[1]["aggregate_type"], "bill_payment_order");
        assert_eq!(events[1]["payload"]["line_status"], "PARTIALLY_PAID");
        assert_eq!(events[1]["payload"]["result_id"], 77);
        let correlation = events[0]["metadata"]["correlation_id"].as_str();
        assert!(correlation.is_some_and(|c| !c.is_empty()), "{}", events[0]);
        assert_eq!(
            events[1]["metadata"]["correlation_id"].as_str(),
            correlation,
            "one unit, one request"
        );
        replayed(
            &app.post(
                "/v1/bills/payment-results",
                result(77, "TREASURY", Some(1), 40_000),
            )
            .await,
        );
        problem(
            &app.post(
                "/v1/bills/payment-results",
                result(77, "TREASURY", Some(1), 50_000),
            )
            .await,
            409,
            "RESULT_ALREADY_RECORDED",
            Some("result_id"),
        );

        // An offline import is recorded alone (reconciliation writes its line, R-BILL-9).
        created(
            &app.post(
                "/v1/bills/payment-results",
                result(78, "OFFLINE_IMPORT", Some(1), 10_000),
            )
            .await,
            &["PaymentResultRecorded"],
        );
        // A line that is not the order's refuses the whole unit: nothing written.
        problem(
            &app.post(
                "/v1/bills/payment-results",
                result(79, "FAIL_FALLBACK", Some(9), 0),
            )
            .await,
            404,
            "LINE_NOT_FOUND",
            Some("line_id"),
        );
        assert!(stored(&db, "bill_payment_result", "79").await.is_empty());
        let mut no_paid_at = result(80, "TREASURY", None, 1);
        no_paid_at["paid_at"] = Value::Null;
        problem(
            &app.post("/v1/bills/payment-results", no_paid_at).await,
            422,
            "PAID_AT_REQUIRED",
            Some("paid_at"),
        );
        let mut bad_source = result(80, "BANK", None, 1);
        bad_source["line_id"] = Value::Null;
        problem(
            &app.post("/v1/bills/payment-results", bad_source).await,
            422,
            "INVALID_FIELD",
            Some("source"),
        );
        assert!(stored(&db, "bill_payment_result", "80").await.is_empty());

        // Voided once.
        let void = json!({"trigger_source": "PAYMENT_IMPORT_DELETE"});
        created(
            &app.post("/v1/bills/payment-results/78:void", void.clone())
                .await,
            &["PaymentResultVoided"],
        );
        replayed(
            &app.post("/v1/bills/payment-results/78:void", void.clone())
                .await,
        );
        problem(
            &app.post("/v1/bills/payment-results/81:void", void).await,
            404,
            "RESULT_NOT_FOUND",
            Some("result_id"),
        );
        // The treasury write-back is on the order; the offline import and its void
        // reach it only through reconciliation (the R-BILL-9 process manager, running
        // in the background here: tests/suite/bill_order_status.rs).
        let written: Vec<Value> = db
            .store
            .read_stream("bill_payment_order", "20", 1, 1000)
            .await
            .unwrap()
            .into_iter()
            .map(|e| serde_json::from_str::<Value>(&e.payload).unwrap())
            .filter(|p| p["type"] == "LineResultWritten" && p["result_id"] == 77)
            .collect();
        assert_eq!(written.len(), 1, "{written:?}");
        assert_eq!(written[0]["paid_amount_minor"], 40_000);
    }
);

both_backends!(
    bill_endpoints_are_documented_and_need_an_api_key,
    |db: TestDb| async move {
        let app = Server::start(&db).await;
        let doc = app.get("/openapi.json").await;
        assert_eq!(doc.0, 200);
        for path in [
            "/v1/bills/small-bills",
            "/v1/bills/reference/{kind}",
            "/v1/payment-orders/{order_id}:{action}",
            "/v1/bills/payment-results",
        ] {
            assert!(doc.1["paths"].get(path).is_some(), "{path} is documented");
        }
        let unauthenticated = app
            .client
            .post(format!("{}/v1/bills/small-bills", app.base))
            .json(&small_bill(1))
            .send()
            .await
            .unwrap();
        assert_eq!(unauthenticated.status().as_u16(), 401);
        assert!(stored(&db, "bill_station_month", "100:202609")
            .await
            .is_empty());
    }
);

both_backends!(
    concurrent_small_bills_and_locks_of_one_station_month_leave_exactly_one,
    |db: TestDb| async move {
        let app = std::sync::Arc::new(Server::start(&db).await);
        submitted_order(&app).await;
        let racers = 6;
        let mut bills = tokio::task::JoinSet::new();
        let mut locks = tokio::task::JoinSet::new();
        for id in 1..=racers {
            let a = app.clone();
            bills.spawn(async move { a.post("/v1/bills/small-bills", small_bill(id)).await });
            let a = app.clone();
            locks.spawn(async move { a.post("/v1/bills/locks", lock(id)).await });
        }
        for (name, set, code) in [
            ("small bills", bills, "SMALL_BILL_ALREADY_RECORDED"),
            ("locks", locks, "LOCK_HELD"),
        ] {
            let answers = set.join_all().await;
            let won = answers.iter().filter(|a| a.0 == 201).count();
            let refused = answers
                .iter()
                .filter(|a| a.0 == 409 && a.1["code"] == code)
                .count();
            assert_eq!(
                (won, refused),
                (1, racers as usize - 1),
                "{name}: {answers:?}"
            );
        }
        assert_eq!(
            stored(&db, "bill_station_month", "100:202609").await,
            ["SmallBillRecorded"]
        );
        assert_eq!(
            stored(&db, "bill_lock", "100:202609").await,
            ["BillLockReserved"]
        );
    }
);
