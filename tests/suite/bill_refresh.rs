//! Bill refresh requests (issue 6 items 4 and 7; SPEC R-BILL-8, R-BILL-11): submission
//! over HTTP with its limits and locator checks, the `bill_refresh` job round (scopes
//! resolved, mode UNFINISHED at execution, progress resumed after a failure unless the
//! generation changed, "resolved 0 scopes" / "changed 0 rows"), the inspection
//! findings, and an end-to-end read. Facts are recorded through the HTTP commands; the
//! server's bill projector and job engine run in the background. Both backends.

use crate::common;

use common::{exec, Server, TestDb};
use serde_json::{json, Value};
use std::time::Duration;

const MONTH: &str = "202609";

async fn ok(app: &Server, path: &str, body: Value) {
    let got = app.post(path, body.clone()).await;
    assert!(
        got.0 == 200 || got.0 == 201,
        "{path} {body}: {} {}",
        got.0,
        got.1
    );
}

/// Reference data shared by every station: customer account 101 (income from 202601,
/// cutoff 202612), partner org 301 with a monthly profile.
async fn reference(app: &Server) {
    ok(
        app,
        "/v1/bills/reference/customer-accounts",
        json!({"account_id": 101, "income_start_month": "202601",
               "current_payable_cutoff_month": "202612"}),
    )
    .await;
    ok(
        app,
        "/v1/bills/reference/partner-profiles",
        json!({"partner_org_id": 301, "payment_cycle": "MONTHLY", "config_version": 1}),
    )
    .await;
}

/// Station `s`, September 2026: small bill `s*10` (rent 1,000), partner account
/// `s+1000` on platform station `s`, partner bill `s+2000` proposing 600, diff `s+3000`
/// linking it.
async fn station(app: &Server, s: i64) {
    ok(
        app,
        "/v1/bills/small-bills",
        json!({"station_id": s, "month": MONTH, "bill_id": s * 10, "account_id": 101,
               "rent_minor": 1000}),
    )
    .await;
    ok(
        app,
        "/v1/bills/reference/partner-accounts",
        json!({"partner_account_id": s + 1000, "partner_org_id": 301,
               "platform_station_id": s}),
    )
    .await;
    ok(
        app,
        "/v1/bills/partner-bills",
        json!({"partner_bill_id": s + 2000, "partner_account_id": s + 1000, "month": MONTH,
               "pre_rent_minor": 600, "deduction_minor": 0}),
    )
    .await;
    ok(
        app,
        "/v1/bills/diffs",
        json!({"station_id": s, "month": MONTH, "diff_id": s + 3000,
               "partner_bill_id": s + 2000}),
    )
    .await;
}

/// An offline payment result of station `s` for org 301.
async fn paid(app: &Server, result_id: i64, s: i64, amount: i64) {
    ok(
        app,
        "/v1/bills/payment-results",
        json!({"result_id": result_id, "order_id": null, "line_id": null,
               "small_station_id": s, "partner_org_id": 301, "month": MONTH,
               "status": "PAY_SUCCESS", "kind": "NORMAL_PAYMENT", "source": "OFFLINE_IMPORT",
               "amount_minor": amount, "paid_at": "2026-09-05T08:00:00Z",
               "trigger_source": "PAYMENT_IMPORT_EFFECTIVE"}),
    )
    .await;
}

/// Wait until the projected status of station `s` is `status` (the projector runs in
/// the background).
async fn projected(app: &Server, s: i64, status: i64) -> Value {
    let mut last = Value::Null;
    for _ in 0..300 {
        let got = app.get(&format!("/v1/bills/{s}/{MONTH}")).await;
        if got.0 == 200 && got.1["decision"]["payment_status"] == json!(status) {
            return got.1;
        }
        last = got.1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("station {s} never projected status {status}: {last}");
}

fn station_months(stations: &[i64]) -> Value {
    Value::Array(
        stations
            .iter()
            .map(|s| json!({"station_id": s, "bill_month": MONTH}))
            .collect(),
    )
}

async fn refresh(app: &Server, body: Value) -> Value {
    let got = app.post("/v1/bills:refresh", body.clone()).await;
    assert_eq!(got.0, 202, "{body}: {}", got.1);
    got.1
}

/// Wait until the job is SUCCESS or FAILED and no longer running; its view.
async fn settled(app: &Server, code: &str, generation: i64) -> Value {
    let mut last = Value::Null;
    for _ in 0..300 {
        let got = app.get(&format!("/v1/jobs/{code}")).await;
        assert_eq!(got.0, 200, "{}", got.1);
        let status = got.1["status"].as_str().unwrap_or_default().to_owned();
        let round_generation = got.1["levels"]["round"]["generation"].as_i64();
        if (status == "SUCCESS" || status == "FAILED") && round_generation == Some(generation) {
            return got.1;
        }
        last = got.1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("job {code} never settled: {last}");
}

fn summary(job: &Value) -> &Value {
    &job["levels"]["round"]["summary"]
}

fn problem(got: &(u16, Value), status: u16, code: &str, field: &str) {
    assert_eq!(got.0, status, "{}", got.1);
    assert_eq!(got.1["code"], code, "{}", got.1);
    assert_eq!(got.1["field"], field, "{}", got.1);
}

async fn progress_rows(db: &TestDb) -> i64 {
    common::scalar(
        &db.database().await.db,
        "SELECT COUNT(*) FROM bill_refresh_progress",
    )
    .await
}

both_backends!(
    each_scope_type_resolves_and_inconsistent_locators_are_refused,
    |db: TestDb| async move {
        let app = Server::start(&db).await;
        reference(&app).await;
        for s in [11, 12] {
            station(&app, s).await;
        }
        // A diff recorded without a partner bill is legal.
        ok(
            &app,
            "/v1/bills/small-bills",
            json!({"station_id": 13, "month": MONTH, "bill_id": 130, "account_id": 101,
                   "rent_minor": 1000}),
        )
        .await;
        ok(
            &app,
            "/v1/bills/diffs",
            json!({"station_id": 13, "month": MONTH, "diff_id": 3013}),
        )
        .await;
        // A partner bill no diff links.
        ok(
            &app,
            "/v1/bills/partner-bills",
            json!({"partner_bill_id": 2099, "partner_account_id": 1011, "month": MONTH,
                   "pre_rent_minor": 600, "deduction_minor": 0}),
        )
        .await;
        projected(&app, 11, 20).await;
        projected(&app, 13, 99).await;

        // STATION_MONTH with a consistent locator: completed with the ids it implies.
        let got = refresh(
            &app,
            json!({"scope_type": "STATION_MONTH", "station_months": [
                {"station_id": 11, "bill_month": MONTH, "partner_bill_id": 2011}]}),
        )
        .await;
        assert_eq!(got["business_key"], "STATION_MONTH:11:202609|MODE=ALL");
        assert_eq!(
            got["job_code"],
            format!(
                "RIPSR:{}",
                factledger::infra::jobs::md5_hex("STATION_MONTH:11:202609|MODE=ALL")
            )
        );
        assert_eq!(got["scope_count"], 1);
        assert_eq!(got["request"]["station_months"][0]["diff_id"], 3011);
        assert_eq!(
            got["request"]["station_months"][0]["partner_account_id"],
            1011
        );
        let job = settled(&app, got["job_code"].as_str().unwrap(), 0).await;
        assert_eq!(job["status"], "SUCCESS", "{job}");
        assert_eq!(summary(&job)["processed"], json!(["11:202609"]));

        // Ids that do not belong together are refused naming the fields.
        problem(
            &app.post(
                "/v1/bills:refresh",
                json!({"scope_type": "STATION_MONTH", "station_months": [
                    {"station_id": 11, "bill_month": MONTH, "diff_id": 3012}]}),
            )
            .await,
            422,
            "LOCATOR_INCONSISTENT",
            "diff_id, station_id, bill_month",
        );
        problem(
            &app.post(
                "/v1/bills:refresh",
                json!({"scope_type": "STATION_MONTH", "station_months": [
                    {"station_id": 11, "bill_month": MONTH, "diff_id": 3011,
                     "partner_bill_id": 2012}]}),
            )
            .await,
            422,
            "LOCATOR_INCONSISTENT",
            "diff_id, partner_bill_id",
        );

        // PARTNER_BILL: exactly one diff, or an error.
        let got = refresh(
            &app,
            json!({"scope_type": "PARTNER_BILL", "partner_bill_ids": [2011, 2012]}),
        )
        .await;
        assert_eq!(got["business_key"], "PARTNER_BILL:2011,2012|MODE=ALL");
        assert_eq!(got["scope_count"], 2);
        let job = settled(&app, got["job_code"].as_str().unwrap(), 0).await;
        assert_eq!(
            summary(&job)["processed"],
            json!(["11:202609", "12:202609"])
        );
        problem(
            &app.post(
                "/v1/bills:refresh",
                json!({"scope_type": "PARTNER_BILL", "partner_bill_ids": [2099]}),
            )
            .await,
            422,
            "SCOPE_NOT_RESOLVED",
            "partner_bill_id",
        );

        // DIFF, with and without a partner bill.
        let got = refresh(
            &app,
            json!({"scope_type": "DIFF", "diff_ids": [3013, 3012]}),
        )
        .await;
        assert_eq!(got["business_key"], "DIFF:3012,3013|MODE=ALL");
        let job = settled(&app, got["job_code"].as_str().unwrap(), 0).await;
        assert_eq!(
            summary(&job)["processed"],
            json!(["12:202609", "13:202609"])
        );
        problem(
            &app.post(
                "/v1/bills:refresh",
                json!({"scope_type": "DIFF", "diff_ids": [9999]}),
            )
            .await,
            422,
            "SCOPE_NOT_RESOLVED",
            "diff_id",
        );

        // ORDER_BILL: a line of a master that is not published is refused.
        ok(
            &app,
            "/v1/payment-orders",
            json!({"order_id": 20, "treasury": false}),
        )
        .await;
        ok(
            &app,
            "/v1/payment-orders/20/lines",
            json!({"line_id": 1, "station_id": 11, "month": MONTH, "kind": "PAYABLE",
                   "planned_amount_minor": 600}),
        )
        .await;
        let mut refused = (0, Value::Null);
        for _ in 0..100 {
            refused = app
                .post(
                    "/v1/bills:refresh",
                    json!({"scope_type": "ORDER_BILL", "order_bill_ids": [1]}),
                )
                .await;
            if refused.1["detail"]
                .as_str()
                .is_some_and(|d| d.contains("not PUBLISHED"))
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        problem(&refused, 422, "SCOPE_NOT_RESOLVED", "order_bill_id");
        ok(&app, "/v1/payment-orders/20:publish", json!({})).await;
        let mut accepted = (0, Value::Null);
        for _ in 0..100 {
            accepted = app
                .post(
                    "/v1/bills:refresh",
                    json!({"scope_type": "ORDER_BILL", "order_bill_ids": [1],
                           "mode": "UNFINISHED"}),
                )
                .await;
            if accepted.0 == 202 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(accepted.0, 202, "{}", accepted.1);
        assert_eq!(accepted.1["business_key"], "ORDER_BILL:1|MODE=UNFINISHED");
        let job = settled(&app, accepted.1["job_code"].as_str().unwrap(), 0).await;
        assert_eq!(summary(&job)["processed"], json!(["11:202609"]));

        // ACCOUNT_SCOPE: the small account's bills up to month_end.
        let got = refresh(
            &app,
            json!({"scope_type": "ACCOUNT_SCOPE", "small_account_ids": [101],
                   "month_end": MONTH}),
        )
        .await;
        assert_eq!(
            got["business_key"],
            "ACCOUNT_SCOPE:SMALL=101|MONTH_END=202609|MODE=ALL"
        );
        assert_eq!(got["scope_count"], 1);
        let job = settled(&app, got["job_code"].as_str().unwrap(), 0).await;
        assert_eq!(
            summary(&job)["processed"],
            json!(["11:202609", "12:202609", "13:202609"])
        );
        assert_eq!(summary(&job)["account_scope_pages"], 1);
        assert_eq!(
            progress_rows(&db).await,
            0,
            "a finished round keeps no progress"
        );
    }
);

both_backends!(
    limits_and_bad_fields_are_refused_at_submission,
    |db: TestDb| async move {
        let app = Server::start(&db).await;
        let many: Vec<i64> = (1..=201).collect();
        problem(
            &app.post(
                "/v1/bills:refresh",
                json!({"scope_type": "STATION_MONTH", "station_months": station_months(&many)}),
            )
            .await,
            422,
            "REFRESH_REQUEST_TOO_LARGE",
            "station_months",
        );
        problem(
            &app.post(
                "/v1/bills:refresh",
                json!({"scope_type": "DIFF", "diff_ids": many}),
            )
            .await,
            422,
            "REFRESH_REQUEST_TOO_LARGE",
            "diff_ids",
        );
        let huge = "x".repeat(17_000);
        problem(
            &app.post(
                "/v1/bills:refresh",
                json!({"scope_type": "DIFF", "diff_ids": [1], "trigger_sources": [huge]}),
            )
            .await,
            413,
            "REFRESH_REQUEST_TOO_LARGE",
            "task_data",
        );
        problem(
            &app.post(
                "/v1/bills:refresh",
                json!({"scope_type": "ACCOUNT_SCOPE", "small_account_ids": [1]}),
            )
            .await,
            422,
            "INVALID_FIELD",
            "month_end",
        );
        problem(
            &app.post(
                "/v1/bills:refresh",
                json!({"scope_type": "DIFF", "diff_ids": [1], "mode": "SOME"}),
            )
            .await,
            422,
            "INVALID_FIELD",
            "mode",
        );
        let jobs = common::scalar(
            &db.database().await.db,
            "SELECT COUNT(*) FROM jobs WHERE kind = 'bill_refresh'",
        )
        .await;
        assert_eq!(jobs, 0, "nothing refused was submitted");
        let doc = app.get("/openapi.json").await;
        for path in ["/v1/bills:refresh", "/v1/bills/inspections"] {
            assert!(doc.1["paths"].get(path).is_some(), "{path} is documented");
        }
    }
);

both_backends!(
    unfinished_skips_a_paid_station_month_and_refreshes_a_partial_one,
    |db: TestDb| async move {
        let app = Server::start(&db).await;
        reference(&app).await;
        for s in [21, 22] {
            station(&app, s).await;
        }
        paid(&app, 1, 21, 600).await;
        paid(&app, 2, 22, 300).await;
        projected(&app, 21, 50).await;
        projected(&app, 22, 60).await;
        let got = refresh(
            &app,
            json!({"scope_type": "STATION_MONTH", "station_months": station_months(&[21, 22]),
                   "mode": "UNFINISHED"}),
        )
        .await;
        assert_eq!(
            got["business_key"],
            "STATION_MONTH:21:202609,22:202609|MODE=UNFINISHED"
        );
        let job = settled(&app, got["job_code"].as_str().unwrap(), 0).await;
        assert_eq!(job["status"], "SUCCESS", "{job}");
        let s = summary(&job);
        assert_eq!(s["station_months_done"], 1, "{s}");
        assert_eq!(s["station_months_skipped"], 1, "{s}");
        assert_eq!(s["processed"], json!(["22:202609"]));
        // Nothing changed: the projector had already decided both.
        assert_eq!(s["changed_rows"], 0);
        assert!(s["notes"]
            .as_array()
            .unwrap()
            .contains(&json!("changed 0 rows")));
        // Then snapshot refresh (R-BILL-10): its own job, for the one bill processed.
        assert_eq!(s["snapshot_refresh"]["submitted"], true, "{s}");
        assert_eq!(s["snapshot_refresh"]["bills"], 1, "{s}");
        let snapshot_job = s["snapshot_refresh"]["jobs"][0]
            .as_str()
            .unwrap()
            .to_owned();
        let (status, shown) = app.get(&format!("/v1/jobs/{snapshot_job}")).await;
        assert_eq!(status, 200, "{shown}");
        // An operator request with no whitelisted source reconciles no order status.
        assert_eq!(s["order_status_reconciliation"]["ran"], false, "{s}");

        // With a whitelisted source (merged into the same request) it runs after the
        // recompute: no payment order names these station-months, so no master.
        let got = refresh(
            &app,
            json!({"scope_type": "STATION_MONTH", "station_months": station_months(&[21, 22]),
                   "mode": "UNFINISHED", "trigger_sources": ["PAYMENT_STATUS_ASYNC_REFRESH"]}),
        )
        .await;
        let job = settled(&app, got["job_code"].as_str().unwrap(), 1).await;
        assert_eq!(job["status"], "SUCCESS", "{job}");
        let s = summary(&job);
        let reconciled = &s["order_status_reconciliation"];
        assert_eq!(reconciled["ran"], true, "{s}");
        assert_eq!(reconciled["trigger_source"], "PAYMENT_STATUS_ASYNC_REFRESH");
        assert_eq!(reconciled["masters"], 0, "{s}");
    }
);

/// A trigger that fails every write of station `station`'s small bill row.
async fn plant_failure(db: &TestDb, station: i64) {
    let sql = match db.backend {
        common::Backend::Mysql => format!(
            "CREATE TRIGGER planted_failure BEFORE INSERT ON fi_customer_bill FOR EACH ROW \
             BEGIN IF NEW.station_id = {station} THEN \
             SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'planted failure'; END IF; END"
        ),
        common::Backend::Sqlite => format!(
            "CREATE TRIGGER planted_failure BEFORE INSERT ON fi_customer_bill \
             WHEN NEW.station_id = {station} BEGIN SELECT RAISE(ABORT, 'planted failure'); END"
        ),
    };
    exec(&db.database().await.db, &sql).await;
}

async fn remove_failure(db: &TestDb) {
    exec(&db.database().await.db, "DROP TRIGGER planted_failure").await;
}

both_backends!(
    a_failed_round_resumes_after_the_last_committed_station_month,
    |db: TestDb| async move {
        let app = Server::start(&db).await;
        reference(&app).await;
        let stations = [31, 32, 33, 34];
        for s in stations {
            station(&app, s).await;
        }
        for s in stations {
            projected(&app, s, 20).await;
        }
        let body = json!({"scope_type": "STATION_MONTH",
                          "station_months": station_months(&stations)});
        plant_failure(&db, 33).await;
        let got = refresh(&app, body.clone()).await;
        let code = got["job_code"].as_str().unwrap().to_owned();
        let job = settled(&app, &code, 0).await;
        assert_eq!(job["status"], "FAILED", "{job}");
        let error = job["last_error"].as_str().unwrap();
        assert!(
            error.contains("33:202609") && error.contains("2 station-months committed"),
            "{error}"
        );
        let store = db.database().await;
        let saved = |sql: &'static str| {
            let db = store.db.clone();
            async move { common::scalar(&db, sql).await }
        };
        assert_eq!(
            saved("SELECT last_station_id FROM bill_refresh_progress").await,
            32
        );
        // The failed station-month was rolled back: its rows are still there.
        assert_eq!(
            saved("SELECT COUNT(*) FROM fi_customer_bill WHERE station_id = 33").await,
            1
        );

        // A retry of the same generation resumes at the third.
        remove_failure(&db).await;
        let retry = app.post("/v1/jobs:retry", json!({"codes": [code]})).await;
        assert_eq!(retry.0, 200, "{}", retry.1);
        let mut job = settled(&app, &code, 0).await;
        for _ in 0..300 {
            if job["status"] == "SUCCESS" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            job = settled(&app, &code, 0).await;
        }
        assert_eq!(job["status"], "SUCCESS", "{job}");
        let s = summary(&job);
        assert_eq!(s["resumed_after"], "32:202609", "{s}");
        assert_eq!(s["processed"], json!(["33:202609", "34:202609"]));

        // Fail again under a new generation (a resubmit merges and bumps it) …
        plant_failure(&db, 33).await;
        let again = refresh(&app, body.clone()).await;
        assert_eq!(again["resubmitted"], true);
        let job = settled(&app, &code, 1).await;
        assert_eq!(job["status"], "FAILED", "{job}");
        remove_failure(&db).await;
        // … and the next generation starts from the first station-month.
        refresh(&app, body).await;
        let job = settled(&app, &code, 2).await;
        assert_eq!(job["status"], "SUCCESS", "{job}");
        let s = summary(&job);
        assert_eq!(s["resumed_after"], Value::Null, "{s}");
        assert_eq!(
            s["processed"],
            json!(["31:202609", "32:202609", "33:202609", "34:202609"])
        );
    }
);

both_backends!(
    a_round_that_resolved_nothing_says_so,
    |db: TestDb| async move {
        let app = Server::start(&db).await;
        let got = refresh(
            &app,
            json!({"scope_type": "ACCOUNT_SCOPE", "small_account_ids": [999],
                   "partner_account_ids": [998], "month_end": MONTH,
                   "trigger_sources": ["MANUAL"]}),
        )
        .await;
        let job = settled(&app, got["job_code"].as_str().unwrap(), 0).await;
        assert_eq!(job["status"], "SUCCESS", "{job}");
        let s = summary(&job);
        assert_eq!(s["station_months_resolved"], 0);
        assert_eq!(s["notes"], json!(["resolved 0 scopes", "changed 0 rows"]));
        assert_eq!(s["order_status_reconciliation"]["ran"], false);

        // A resubmit of the same key merges the trigger sources and runs again under a
        // new generation (a whitelisted source now asks for reconciliation).
        let again = refresh(
            &app,
            json!({"scope_type": "ACCOUNT_SCOPE", "small_account_ids": [999],
                   "partner_account_ids": [998], "month_end": MONTH,
                   "trigger_sources": ["PAYMENT_IMPORT_DELETE"]}),
        )
        .await;
        assert_eq!(again["job_code"], got["job_code"]);
        assert_eq!(again["resubmitted"], true);
        assert_eq!(
            again["request"]["trigger_sources"],
            json!(["PAYMENT_IMPORT_DELETE", "MANUAL"])
        );
        let job = settled(&app, got["job_code"].as_str().unwrap(), 1).await;
        assert_eq!(job["status"], "SUCCESS", "{job}");
        assert_eq!(summary(&job)["order_status_reconciliation"]["ran"], true);
    }
);

both_backends!(
    an_account_scope_is_expanded_in_pages_of_at_most_100,
    |db: TestDb| async move {
        let app = Server::start(&db).await;
        reference(&app).await;
        let stations: Vec<i64> = (601..=705).collect();
        for s in &stations {
            ok(
                &app,
                "/v1/bills/small-bills",
                json!({"station_id": s, "month": MONTH, "bill_id": s * 10,
                       "account_id": 101, "rent_minor": 1000}),
            )
            .await;
        }
        projected(&app, 705, 99).await;
        let got = refresh(
            &app,
            json!({"scope_type": "ACCOUNT_SCOPE", "small_account_ids": [101],
                   "month_end": MONTH}),
        )
        .await;
        let job = settled(&app, got["job_code"].as_str().unwrap(), 0).await;
        assert_eq!(job["status"], "SUCCESS", "{job}");
        let s = summary(&job);
        assert_eq!(s["account_scope_pages"], 2, "{s}");
        assert_eq!(s["station_months_resolved"], 105);
        assert_eq!(s["station_months_done"], 105);
        let processed: Vec<String> = stations.iter().map(|s| format!("{s}:{MONTH}")).collect();
        assert_eq!(s["processed"], json!(processed));
    }
);

both_backends!(
    inspection_findings_of_a_broken_row_are_served,
    |db: TestDb| async move {
        let app = Server::start(&db).await;
        reference(&app).await;
        station(&app, 41).await;
        paid(&app, 1, 41, 600).await;
        projected(&app, 41, 50).await;
        // Break the paid small bill behind the projector's back; an UNFINISHED refresh
        // skips it (paid), and the inspection of the visited station-month finds it.
        exec(
            &db.database().await.db,
            "UPDATE fi_customer_bill SET paid_amount = 999 WHERE station_id = 41",
        )
        .await;
        let got = refresh(
            &app,
            json!({"scope_type": "STATION_MONTH", "station_months": station_months(&[41]),
                   "mode": "UNFINISHED"}),
        )
        .await;
        let code = got["job_code"].as_str().unwrap().to_owned();
        let job = settled(&app, &code, 0).await;
        assert_eq!(job["status"], "SUCCESS", "{job}");
        assert_eq!(summary(&job)["station_months_skipped"], 1);
        let found = app
            .get(&format!(
                "/v1/bills/inspections?station_id=41&month={MONTH}&job={code}"
            ))
            .await;
        assert_eq!(found.0, 200, "{}", found.1);
        let rules: Vec<&str> = found.1["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["rule_id"].as_str().unwrap())
            .collect();
        assert!(rules.contains(&"I3_ROWS_AGREE"), "{}", found.1);
        assert!(
            rules.contains(&"I4_PAID_WITHIN_SUCCESS_RESULTS"),
            "{}",
            found.1
        );
        assert_eq!(found.1["findings"][0]["job_code"], code);
        assert!(found.1["findings"][0]["found_at"].is_string());

        // An ALL refresh repairs the row; its inspection finds nothing.
        let got = refresh(
            &app,
            json!({"scope_type": "STATION_MONTH", "station_months": station_months(&[41])}),
        )
        .await;
        let code = got["job_code"].as_str().unwrap().to_owned();
        let job = settled(&app, &code, 0).await;
        assert_eq!(summary(&job)["changed_rows"], 1);
        assert_eq!(summary(&job)["inspection"]["findings"], 0);
        let found = app.get(&format!("/v1/bills/inspections?job={code}")).await;
        assert_eq!(found.1["findings"], json!([]));
        let bad = app.get("/v1/bills/inspections?month=202613").await;
        assert_eq!(bad.0, 422, "{}", bad.1);

        // Findings that cannot be stored are logged; the round still succeeds.
        let d = db.database().await;
        exec(
            &d.db,
            "UPDATE fi_customer_bill SET paid_amount = 999 WHERE station_id = 41",
        )
        .await;
        exec(
            &d.db,
            "ALTER TABLE bill_inspection_findings RENAME TO bill_inspection_findings_away",
        )
        .await;
        let unfinished = json!({"scope_type": "STATION_MONTH",
            "station_months": station_months(&[41]), "mode": "UNFINISHED"});
        let got = refresh(&app, unfinished).await;
        assert_eq!(got["resubmitted"], true);
        let job = settled(&app, got["job_code"].as_str().unwrap(), 1).await;
        exec(
            &d.db,
            "ALTER TABLE bill_inspection_findings_away RENAME TO bill_inspection_findings",
        )
        .await;
        assert_eq!(job["status"], "SUCCESS", "{job}");
        let inspection = &summary(&job)["inspection"];
        assert!(inspection["errors"].as_i64() >= Some(1), "{inspection}");
    }
);

both_backends!(
    facts_recorded_over_http_are_read_back_with_their_rule_after_a_refresh,
    |db: TestDb| async move {
        let app = Server::start(&db).await;
        reference(&app).await;
        station(&app, 51).await;
        // A payment order for the station-month through review and publication.
        ok(
            &app,
            "/v1/payment-orders",
            json!({"order_id": 70, "treasury": false}),
        )
        .await;
        ok(
            &app,
            "/v1/payment-orders/70/lines",
            json!({"line_id": 7, "station_id": 51, "month": MONTH, "kind": "PAYABLE",
                   "planned_amount_minor": 600}),
        )
        .await;
        for action in ["publish", "submit", "approve"] {
            ok(&app, &format!("/v1/payment-orders/70:{action}"), json!({})).await;
        }
        // Half paid: partial payment.
        paid(&app, 71, 51, 300).await;
        let read = projected(&app, 51, 60).await;
        assert_eq!(
            read["decision"]["decided_by"], "R8 partial payment",
            "{read}"
        );

        let got = refresh(
            &app,
            json!({"scope_type": "ORDER_BILL", "order_bill_ids": [7],
                   "trigger_sources": ["PAYMENT_IMPORT_EFFECTIVE"]}),
        )
        .await;
        let job = settled(&app, got["job_code"].as_str().unwrap(), 0).await;
        assert_eq!(job["status"], "SUCCESS", "{job}");
        let s = summary(&job);
        assert_eq!(s["processed"], json!(["51:202609"]));
        // R-BILL-9 ran for order 70 (already reconciled on the result event by the
        // process manager: unchanged), then the snapshot refresh of diff bill.
        let reconciled = &s["order_status_reconciliation"];
        assert_eq!(reconciled["ran"], true, "{s}");
        assert_eq!(reconciled["masters"], 1, "{s}");
        assert_eq!(reconciled["outcomes"]["conflict"], Value::Null, "{s}");
        assert_eq!(s["snapshot_refresh"]["submitted"], true, "{s}");
        assert_eq!(s["inspection"]["findings"], 0, "{s}");
        let read = projected(&app, 51, 60).await;
        assert_eq!(read["fi_customer_bill"]["payment_status"], 60);
        assert_eq!(read["fi_customer_bill"]["paid_amount"], 300);
        assert_eq!(read["decision"]["decided_by"], "R8 partial payment");
    }
);

both_backends!(
    the_snapshot_and_the_order_status_conflicts_are_served,
    |db: TestDb| async move {
        let app = Server::start(&db).await;
        reference(&app).await;
        station(&app, 41).await;
        let read = projected(&app, 41, 20).await;
        assert_eq!(read["snapshot"], Value::Null, "no order approved: {read}");
        assert_eq!(read["sweep_pending"], false, "{read}");

        // The bill's snapshot (R-BILL-10) beside its rows.
        let d = db.database().await.db;
        exec(
            &d,
            &format!(
                "INSERT INTO bill_dimension_snapshot (bill_key, diff_id, station_id, \
                 bill_yearmonth, order_id, planned_amount, paid_amount, paid_count, \
                 failed_amount, failed_count, status, latest_paid_at, source, \
                 refresh_version, payment_diff, approved_at) VALUES \
                 ('STATION_MONTH:41:{MONTH}', NULL, 41, '{MONTH}', 7, 600, 400, 1, 0, 0, \
                 'PARTIAL', '2026-09-05T08:00:00Z', 'TREASURY', 2, -200, \
                 '2026-09-01T08:00:00Z')"
            ),
        )
        .await;
        let got = app.get(&format!("/v1/bills/41/{MONTH}")).await;
        assert_eq!(got.0, 200, "{}", got.1);
        let snapshot = &got.1["snapshot"];
        assert_eq!(snapshot["bill_key"], format!("STATION_MONTH:41:{MONTH}"));
        assert_eq!(
            (&snapshot["planned_amount"], &snapshot["payment_diff"]),
            (&json!(600), &json!(-200)),
            "{snapshot}"
        );

        // Conflicts the R-BILL-9 process manager reported, oldest first, by order, paged.
        for (order, position) in [(7, 11), (8, 12), (7, 13)] {
            exec(
                &d,
                &format!(
                    "INSERT INTO bill_order_status_conflicts (order_id, global_position, \
                     trigger_source, attempts, message, recorded_at) VALUES ({order}, \
                     {position}, 'TREASURY_RESULT_WRITEBACK', 2, 'moved twice', \
                     '2026-09-05T08:00:00Z')"
                ),
            )
            .await;
        }
        let path = "/v1/bills/order-status-conflicts";
        let got = app.get(path).await;
        assert_eq!(got.0, 200, "{}", got.1);
        let positions = |v: &Value| -> Vec<i64> {
            v["conflicts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["global_position"].as_i64().unwrap())
                .collect()
        };
        assert_eq!(positions(&got.1), [11, 12, 13]);
        assert_eq!(got.1["conflicts"][0]["attempts"], 2);
        let got = app.get(&format!("{path}?order_id=7")).await;
        assert_eq!(positions(&got.1), [11, 13]);
        let first = app.get(&format!("{path}?limit=2")).await;
        assert_eq!(positions(&first.1), [11, 12]);
        let after = first.1["next_after_id"].as_i64().unwrap();
        let rest = app.get(&format!("{path}?after_id={after}")).await;
        assert_eq!(positions(&rest.1), [13]);
        problem(
            &app.get(&format!("{path}?limit=0")).await,
            422,
            "INVALID_FIELD",
            "limit",
        );
        let unknown = app.get(&format!("{path}?order=7")).await;
        assert_eq!(unknown.0, 422, "{}", unknown.1);
    }
);
