//! The console's business pages over HTTP (issue 20 item 8), both backends: a bill
//! page shows the API's figures and decision with links to the streams behind them,
//! and refreshes through the API; a withdrawal awaiting approval is in the queue and
//! an operator approves it from the console (a double submit is one action), while an
//! auditor sees no review buttons and a forged review is 403 and changes nothing; a
//! POST without the CSRF token is 403; a booking page shows the API's status and hold.

use crate::common::app::spawn_app;
use crate::common::console::ConsoleClient;
use crate::common::TestDb;
use crate::payout_env::PayoutEnv;
use crate::services_env::{ServicesEnv, PRICE};
use factledger::infra::auth::Role;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The text of the element with `id="{id}"` (up to its first closing tag).
fn by_id<'a>(html: &'a str, id: &str) -> &'a str {
    let at = html
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id} in {html}"));
    let rest = &html[at..];
    let open = rest.find('>').unwrap() + 1;
    let close = rest[open..].find("</").unwrap() + open;
    &rest[open..close]
}

/// `1234567` as the console groups it.
fn grouped(v: i64) -> String {
    let digits = v.unsigned_abs().to_string();
    let mut out = String::new();
    if v < 0 {
        out.push('-');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The row of field `name` in the table `#{table}`.
fn field_row<'a>(html: &'a str, table: &str, name: &str) -> &'a str {
    let at = html
        .find(&format!("id=\"{table}\""))
        .unwrap_or_else(|| panic!("no #{table}"));
    let t = &html[at..];
    let t = &t[..t.find("</table>").unwrap()];
    let row = t
        .find(&format!("data-field=\"{name}\""))
        .unwrap_or_else(|| panic!("no {name} in #{table}: {t}"));
    let r = &t[row..];
    &r[..r.find("</tr>").unwrap()]
}

async fn ok(app: &crate::common::app::App, path: &str, body: Value) {
    let (status, answer) = app.post(path, body).await;
    assert!(status == 200 || status == 201, "{path}: {status} {answer}");
}

both_backends!(
    a_bill_page_shows_the_api_figures_and_refreshes_through_the_api,
    |db: TestDb| async move {
        let app = spawn_app(&db)
            .settlement_off()
            .role_keys(&[Role::Operator, Role::Auditor])
            .spawn()
            .await;
        ok(&app, "/v1/bills/reference/customer-accounts",
            json!({"account_id": 101, "income_start_month": "202601", "current_payable_cutoff_month": "202612"})).await;
        ok(&app, "/v1/bills/small-bills",
            json!({"station_id": 100, "month": "202609", "bill_id": 7, "account_id": 101, "rent_minor": 123_456})).await;
        ok(&app, "/v1/bills/partner-bills",
            json!({"partner_bill_id": 9, "partner_account_id": 3, "month": "202609", "pre_rent_minor": 500, "deduction_minor": 0})).await;
        ok(
            &app,
            "/v1/bills/diffs",
            json!({"station_id": 100, "month": "202609", "diff_id": 5, "partner_bill_id": 9}),
        )
        .await;
        // The projector runs in the background: wait until it has every fact.
        let head = app.store.head_position().await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let bill = loop {
            let (status, b) = app
                .get(&format!("/v1/bills/100/202609?min_position={head}"))
                .await;
            if status == 200 && (b["decision"].is_object() || b["finding"].is_object()) {
                break b;
            }
            assert!(Instant::now() < deadline, "no decision: {status} {b}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let op = ConsoleClient::sign_in(&app.base, &app.operator).await;
        // The form sends a valid station-month to its page; a bad month is named.
        let p = op.get("/console/bills?station_id=100&month=202609").await;
        assert_eq!(
            (p.status, p.location.as_deref()),
            (303, Some("/console/bills/100/202609"))
        );
        let p = op.get("/console/bills?station_id=100&month=202613").await;
        assert_eq!(p.status, 422, "{}", p.html);
        assert!(p.html.contains("month: `202613`"), "{}", p.html);
        let p = op.get("/console/bills?station_id=x&month=202609").await;
        assert_eq!(p.status, 422);
        assert!(p.html.contains("station_id: `x`"), "{}", p.html);

        let page = op.get("/console/bills/100/202609").await;
        assert_eq!(page.status, 200, "{}", page.html);
        let html = &page.html;
        assert_eq!(by_id(html, "station-month"), "100:202609");
        if let Some(by) = bill["decision"]["decided_by"].as_str() {
            assert_eq!(by_id(html, "decided-by"), by, "{html}");
        }
        // Every figure of the three rows is the API's, amounts grouped in minor units.
        for (table, row) in [
            ("bill-customer", &bill["fi_customer_bill"]),
            ("bill-partner", &bill["fi_customer_bill_partner"]),
            ("bill-difference", &bill["fi_monthly_income_difference"]),
        ] {
            let Some(o) = row.as_object() else { continue };
            for (k, v) in o {
                let r = field_row(html, table, k);
                assert!(
                    r.contains(&format!(
                        "data-value=\"{}\"",
                        v.to_string().replace('"', "&quot;")
                    )),
                    "{table}.{k}: {r}"
                );
            }
        }
        assert_eq!(bill["fi_customer_bill"]["rent"], 123_456, "{bill}");
        assert!(field_row(html, "bill-customer", "rent").contains(&grouped(123_456)));
        // Links to the streams the facts came from.
        assert!(
            html.contains("href=\"/console/streams/bill_station_month/100%3A202609\""),
            "{html}"
        );
        assert!(
            html.contains("href=\"/console/streams/bill_partner_bill/9\""),
            "{html}"
        );
        assert!(html.contains("id=\"refresh-bill\""));

        // The auditor sees the bill but no refresh button; a forged refresh is 403.
        let au = ConsoleClient::sign_in(&app.base, &app.auditor).await;
        let p = au.get("/console/bills/100/202609").await;
        assert_eq!(p.status, 200);
        assert!(!p.html.contains("id=\"refresh-bill\""));
        let p = au
            .post("/console/bills/100/202609/refresh", &[("mode", "ALL")])
            .await;
        assert_eq!(p.status, 403, "{}", p.html);
        // Without the token: 403.
        let p = op
            .post_raw("/console/bills/100/202609/refresh", &[("mode", "ALL")])
            .await;
        assert_eq!(p.status, 403, "{}", p.html);
        assert!(p.html.contains("CSRF_TOKEN_INVALID"));
        // The operator's refresh is a bill_refresh job, submitted through the API.
        let p = op
            .post("/console/bills/100/202609/refresh", &[("mode", "ALL")])
            .await;
        assert_eq!(p.status, 303, "{}", p.html);
        let to = p.location.unwrap();
        assert!(
            to.starts_with("/console/bills/100/202609?done=refresh+submitted"),
            "{to}"
        );
        let p = op.get(&to).await;
        assert!(p.html.contains("refresh submitted: job "), "{}", p.html);
        // The operator's refresh is audited with the operator as actor.
        let operator_actor = format!("key:{}", app.operator.split('_').nth(1).unwrap());
        let (status, audit) = app
            .get("/v1/audit/events?event_type=AdminActionRecorded&from=2000-01-01T00:00:00Z&to=2100-01-01T00:00:00Z")
            .await;
        assert_eq!(status, 200, "{audit}");
        let refreshes: Vec<&serde_json::Value> = audit["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| &e["payload"])
            .filter(|p| p["action"] == "bill_refresh_requested")
            .collect();
        assert_eq!(refreshes.len(), 1, "{audit}");
        assert_eq!(refreshes[0]["actor"], operator_actor.as_str());
        assert!(
            refreshes[0]["target"].as_str().unwrap().starts_with("job:"),
            "{audit}"
        );
        // Unknown station-month: the API's 404 on the page.
        let p = op.get("/console/bills/100/202610").await;
        assert_eq!(p.status, 404, "{}", p.html);
        assert!(p.html.contains("100:202610"));
    }
);

both_backends!(
    an_operator_approves_a_queued_withdrawal_and_an_auditor_cannot,
    |db: TestDb| async move {
        let env = PayoutEnv::start(&db).await;
        env.user("77", 2_000_000).await;
        // At or above 500,000 the risk rule sends it to manual review.
        let id = env.request("77", 600_000, "console-big").await;
        let other = env.request("77", 700_000, "console-big-2").await;
        assert_eq!(env.withdrawal(&id).await["status"], "REQUESTED");
        let operator_key = env.app.keys.create(Role::Operator).await.unwrap();
        let operator = operator_key.secret.clone();
        let auditor = env.app.keys.create(Role::Auditor).await.unwrap().secret;
        let op = ConsoleClient::sign_in(&env.app.base, &operator).await;
        let au = ConsoleClient::sign_in(&env.app.base, &auditor).await;

        // The queue (from the projection: wait until it shows the request).
        let deadline = Instant::now() + Duration::from_secs(30);
        let queue = loop {
            let p = op.get("/console/withdrawals").await;
            assert_eq!(p.status, 200, "{}", p.html);
            if p.html.contains(&format!("id=\"approve-{id}\"")) {
                break p.html;
            }
            assert!(Instant::now() < deadline, "{id} never queued: {}", p.html);
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let q_at = queue.find("id=\"approval-queue\"").expect("queue");
        let q = &queue[q_at..queue[q_at..].find("</table>").unwrap() + q_at];
        assert!(q.contains(&format!("data-withdrawal=\"{id}\"")));
        assert!(q.contains(&format!("id=\"reject-{id}\"")));
        assert!(q.contains(&grouped(600_000)));
        // The queue comes before the full list.
        assert!(q_at < queue.find("id=\"withdrawals\"").unwrap());
        // Filters: a bad status is named; REJECTED lists none yet.
        let p = op.get("/console/withdrawals?status=NOPE").await;
        assert_eq!(p.status, 422);
        assert!(p.html.contains("status: `NOPE`"), "{}", p.html);
        let p = op
            .get("/console/withdrawals?status=REJECTED&user_id=77")
            .await;
        assert_eq!(p.status, 200);
        assert!(
            p.html.contains("id=\"withdrawals\" data-empty=\"true\""),
            "{}",
            p.html
        );

        // The detail page: the API's figures and events.
        let api = env.withdrawal(&id).await;
        let page = op.get(&format!("/console/withdrawals/{id}")).await;
        assert_eq!(page.status, 200, "{}", page.html);
        assert!(by_id(&page.html, "withdrawal-amount").contains(&grouped(600_000)));
        assert!(
            page.html.contains("id=\"withdrawal-status\">REQUESTED<"),
            "{}",
            page.html
        );
        for e in api["events"].as_array().unwrap() {
            let pos = e["global_position"].as_i64().unwrap();
            assert!(
                page.html
                    .contains(&format!("href=\"/console/events/{pos}\"")),
                "{pos}"
            );
        }
        assert!(page
            .html
            .contains(&format!("href=\"/console/streams/withdrawal/{id}\"")));
        let form_key = {
            let html = &page.html;
            let form = &html[html
                .find(&format!("/console/withdrawals/{id}/approve"))
                .unwrap()..];
            let at = form.find("name=\"form_key\" value=\"").unwrap()
                + "name=\"form_key\" value=\"".len();
            form[at..].split('"').next().unwrap().to_owned()
        };

        // The auditor: the page without buttons; a forged approve is 403, nothing changes.
        let p = au.get(&format!("/console/withdrawals/{id}")).await;
        assert_eq!(p.status, 200);
        assert!(!p.html.contains(&format!("id=\"approve-{id}\"")));
        assert!(!p.html.contains(&format!("id=\"reject-{id}\"")));
        let p = au.get("/console/withdrawals").await;
        assert!(!p.html.contains("id=\"approve-"), "{}", p.html);
        let p = au
            .post(
                &format!("/console/withdrawals/{id}/approve"),
                &[("reason", "forged"), ("form_key", "k-forged")],
            )
            .await;
        assert_eq!(p.status, 403, "{}", p.html);
        let p = au
            .post(
                &format!("/console/withdrawals/{id}/reject"),
                &[("reason", "forged"), ("form_key", "k-forged-2")],
            )
            .await;
        assert_eq!(p.status, 403, "{}", p.html);
        // Without the CSRF token: 403.
        let p = op
            .post_raw(
                &format!("/console/withdrawals/{id}/approve"),
                &[("reason", "no token"), ("form_key", &form_key)],
            )
            .await;
        assert_eq!(p.status, 403, "{}", p.html);
        assert_eq!(env.withdrawal(&id).await["status"], "REQUESTED");
        assert_eq!(env.withdrawal(&id).await["events"], api["events"]);

        // A reject needs a reason, named.
        let p = op
            .post(
                &format!("/console/withdrawals/{other}/reject"),
                &[("reason", " "), ("form_key", "k-r1")],
            )
            .await;
        assert_eq!(p.status, 422, "{}", p.html);
        assert!(p.html.contains("reason"), "{}", p.html);

        // The operator approves; the same form sent twice is one action.
        let p = op
            .post(
                &format!("/console/withdrawals/{id}/approve"),
                &[("reason", "checked by phone"), ("form_key", &form_key)],
            )
            .await;
        assert_eq!(p.status, 303, "{}", p.html);
        let to = p.location.clone().unwrap();
        assert!(
            to.starts_with(&format!("/console/withdrawals/{id}?done=")),
            "{to}"
        );
        let again = op
            .post(
                &format!("/console/withdrawals/{id}/approve"),
                &[("reason", "checked by phone"), ("form_key", &form_key)],
            )
            .await;
        assert_eq!(
            (again.status, again.location.as_deref()),
            (303, Some(to.as_str()))
        );
        let after = env.withdrawal(&id).await;
        let approvals: Vec<&Value> = after["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["event_type"] == "WithdrawalApproved")
            .collect();
        assert_eq!(approvals.len(), 1, "{after:#}");
        assert_eq!(approvals[0]["payload"]["reason"], "checked by phone");
        // Recorded with the operator's key as the actor.
        assert_eq!(
            approvals[0]["metadata"]["actor"],
            format!("key:{}", operator_key.key_id),
            "{}",
            approvals[0]
        );
        assert_ne!(after["status"], "REQUESTED");
        let p = op.get(&to).await;
        assert!(
            p.html.contains(&format!("withdrawal {id} approved")),
            "{}",
            p.html
        );
        assert!(!p.html.contains(&format!("id=\"approve-{id}\"")));

        // The other one is rejected with a reason: its freeze is given back.
        let p = op.get(&format!("/console/withdrawals/{other}")).await;
        let html = &p.html;
        let form = &html[html
            .find(&format!("/console/withdrawals/{other}/reject"))
            .unwrap()..];
        let at =
            form.find("name=\"form_key\" value=\"").unwrap() + "name=\"form_key\" value=\"".len();
        let key = form[at..].split('"').next().unwrap().to_owned();
        let p = op
            .post(
                &format!("/console/withdrawals/{other}/reject"),
                &[("reason", "account mismatch"), ("form_key", &key)],
            )
            .await;
        assert_eq!(p.status, 303, "{}", p.html);
        assert_eq!(env.withdrawal(&other).await["status"], "REJECTED");
        // Approving what is no longer reviewable: the API's 409 on the page.
        let p = op
            .post(
                &format!("/console/withdrawals/{other}/approve"),
                &[("reason", "late"), ("form_key", "k-late")],
            )
            .await;
        assert_eq!(p.status, 409, "{}", p.html);
    }
);

both_backends!(
    a_booking_page_shows_the_api_status_and_hold,
    |db: TestDb| async move {
        let env = ServicesEnv::start(&db).await;
        env.fund(501, 10_000).await;
        let booked = env
            .book("BK-CONSOLE-1", 501, 601, chrono::Duration::hours(2))
            .await;
        let auditor = env.app.keys.create(Role::Auditor).await.unwrap().secret;
        let au = ConsoleClient::sign_in(&env.app.base, &auditor).await;

        let p = au.get("/console/bookings?booking_no=BK-CONSOLE-1").await;
        assert_eq!(
            (p.status, p.location.as_deref()),
            (303, Some("/console/bookings/BK-CONSOLE-1"))
        );
        let p = au.get("/console/bookings?user_id=abc").await;
        assert_eq!(p.status, 422);
        assert!(p.html.contains("user_id: `abc`"), "{}", p.html);

        let page = au.get("/console/bookings/BK-CONSOLE-1").await;
        assert_eq!(page.status, 200, "{}", page.html);
        let html = &page.html;
        assert!(
            html.contains(&format!("data-status=\"{}\"", booked["status"])),
            "{html}"
        );
        assert!(
            by_id(html, "booking-status").starts_with(booked["status_name"].as_str().unwrap()),
            "{html}"
        );
        assert_eq!(
            by_id(html, "hold-state"),
            booked["hold"]["state"].as_str().unwrap()
        );
        assert!(by_id(html, "booking-price").contains(&grouped(PRICE)));
        assert!(html.contains("href=\"/console/streams/booking/BK-CONSOLE-1\""));
        let last = booked["last_position"].as_i64().unwrap();
        assert!(
            html.contains(&format!("href=\"/console/events/{last}\"")),
            "{html}"
        );
        let order_no = booked["order_no"].as_str().unwrap();
        assert!(
            html.contains(&format!("href=\"/console/bookings/orders/{order_no}\"")),
            "{html}"
        );

        // The fan's candy account: the API's balance and hold.
        let (balance, held) = env.candy(501).await;
        let p = au.get("/console/bookings/users/501").await;
        assert_eq!(p.status, 200, "{}", p.html);
        assert!(
            by_id(&p.html, "candy-balance").contains(&grouped(balance)),
            "{}",
            p.html
        );
        assert!(
            by_id(&p.html, "candy-held").contains(&grouped(held)),
            "{}",
            p.html
        );
        assert_eq!(held, PRICE);
        // The candy order of the booking.
        let p = au
            .get(&format!("/console/bookings/orders/{order_no}"))
            .await;
        assert_eq!(p.status, 200, "{}", p.html);
        let order = env.order(order_no).await;
        assert!(by_id(&p.html, "order-status").starts_with(order["status_name"].as_str().unwrap()));
        // Unknown: the API's 404.
        let p = au.get("/console/bookings/BK-NOPE").await;
        assert_eq!(p.status, 404, "{}", p.html);
        // No operator actions exist for bookings: a POST is not a route.
        let p = au.post("/console/bookings/BK-CONSOLE-1", &[]).await;
        assert_eq!(p.status, 405);
    }
);
