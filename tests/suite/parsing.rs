//! Request parsing (issue 14 item 6): repeated JSON keys (F5) and currencies outside
//! ISO 4217, on a real server, both backends.

use crate::common;

use common::app::{spawn_roles, RoleApp};
use common::TestDb;

/// Every route that takes a JSON body, with a body that repeats a key, and the path of
/// the repeated key the answer must name.
const DUPLICATED: &[(&str, &str, &str)] = &[
    (
        "/v1/wallets/w-dup/commands",
        r#"{"type":"CreditPending","ref_type":"COMMISSION","ref_id":"c-1","amount_minor":1,"amount_minor":1000000}"#,
        "amount_minor",
    ),
    (
        "/v1/wallets/w-dup/commands",
        r#"{"type":"Open","user_id":"u-1","currency":"IDR","type":"Unfreeze"}"#,
        "type",
    ),
    (
        "/v1/orders:ingest",
        r#"{"orders":[{"platform":"SHOPEE"},{"platform":"SHOPEE","gmv_minor":1,"gmv_minor":2}]}"#,
        "orders[1].gmv_minor",
    ),
    (
        "/v1/commissions/SHOPEE:o-1:CASHBACK:resolve",
        r#"{"reason":"a","reason":"b"}"#,
        "reason",
    ),
    (
        "/v1/orders/SHOPEE/o-1:correct-attribution",
        r#"{"new_owner_user_id":"u-2","reason":"a","new_owner_user_id":"u-3"}"#,
        "new_owner_user_id",
    ),
    (
        "/v1/commission-rules/SHOPEE:ID/versions",
        r#"{"version":1,"cashback_bps":10,"cashback_bps":9000}"#,
        "cashback_bps",
    ),
    (
        "/v1/affiliate-links",
        r#"{"attribution":{"kind":"TRACKING_ID","value":"t-1","value":"t-2"},"user_id":"u-1"}"#,
        "attribution.value",
    ),
    (
        "/v1/users/u-1/inviter",
        r#"{"inviter_user_id":"u-2","inviter_user_id":"u-3"}"#,
        "inviter_user_id",
    ),
    (
        "/v1/campaigns/SHOPEE:ID",
        r#"{"quota_unit":"ORDERS","quota_limit":1,"quota_limit":100000}"#,
        "quota_limit",
    ),
    (
        "/v1/bills:refresh",
        r#"{"scope_type":"STATION_MONTH","station_months":[{"station_id":1,"bill_month":"202601","station_id":2}]}"#,
        "station_months[0].station_id",
    ),
    (
        "/v1/bills/small-bills",
        r#"{"station_id":100,"month":"202601","bill_id":1,"account_id":1,"rent_minor":1,"rent_minor":2}"#,
        "rent_minor",
    ),
    (
        "/v1/bills/diffs",
        r#"{"station_id":100,"station_id":101}"#,
        "station_id",
    ),
    (
        "/v1/bills/partner-bills",
        r#"{"partner_bill_id":1,"deduction_minor":1,"deduction_minor":2}"#,
        "deduction_minor",
    ),
    (
        "/v1/bills/partner-bills/1:repush",
        r#"{"repushed_at":"2026-01-01T00:00:00Z","repushed_at":"2026-01-02T00:00:00Z"}"#,
        "repushed_at",
    ),
    (
        "/v1/bills/reference/station-facts",
        r#"{"station_id":1,"station_id":2}"#,
        "station_id",
    ),
    (
        "/v1/bills/locks",
        r#"{"station_id":1,"station_id":2}"#,
        "station_id",
    ),
    (
        "/v1/bills/locks/100/202601/1:release",
        r#"{"reason":"a","reason":"b"}"#,
        "reason",
    ),
    (
        "/v1/bills/payment-results",
        r#"{"result_id":1,"amount_minor":1,"amount_minor":2}"#,
        "amount_minor",
    ),
    (
        "/v1/bills/payment-results/1:void",
        r#"{"trigger_source":"a","trigger_source":"b"}"#,
        "trigger_source",
    ),
    (
        "/v1/payment-orders",
        r#"{"order_id":1,"treasury":true,"treasury":false}"#,
        "treasury",
    ),
    (
        "/v1/payment-orders/1:reject",
        r#"{"reason":"a","reason":"b"}"#,
        "reason",
    ),
    (
        "/v1/payment-orders/1/lines",
        r#"{"line_id":1,"line_id":2}"#,
        "line_id",
    ),
    (
        "/v1/payment-orders/1/lines/1:adjust",
        r#"{"amount_minor":1,"amount_minor":2}"#,
        "amount_minor",
    ),
    (
        "/v1/projections/wallet/rebuild",
        r#"{"scope":"wallet:w-1","scope":"wallet:w-2"}"#,
        "scope",
    ),
    (
        "/v1/reconciliations",
        r#"{"repair":false,"repair":true}"#,
        "repair",
    ),
    ("/v1/jobs:retry", r#"{"codes":[],"codes":["x"]}"#, "codes"),
    ("/v1/jobs:pause", r#"{"reason":"a","reason":"b"}"#, "reason"),
    (
        "/v1/jobs:resume",
        r#"{"reason":"a","reason":"b"}"#,
        "reason",
    ),
    (
        "/v1/audit/verify",
        r#"{"stream":"wallet/w-1","stream":"wallet/w-2"}"#,
        "stream",
    ),
];

/// The head position, from `/health` with a key (without one it says only the status).
async fn head(app: &RoleApp) -> i64 {
    app.send(reqwest::Method::GET, "/health", Some(&app.admin), None, &[])
        .await
        .body["head_position"]
        .as_i64()
        .expect("head_position")
}

both_backends!(
    f5_duplicate_json_keys_are_refused_naming_the_field,
    |db: TestDb| async move {
        let app = spawn_roles(&db).await;
        let before = head(&app).await;
        for (path, body, field) in DUPLICATED {
            let r = app.post(path, &app.admin, body).await;
            assert_eq!(r.status.as_u16(), 422, "{path} {body}: {}", r.body);
            r.problem(422, "DUPLICATE_FIELD", Some(field));
            assert!(
                r.body["detail"].as_str().unwrap().contains(field),
                "{path}: {}",
                r.body
            );
        }
        // Nothing of any of them was written.
        assert_eq!(head(&app).await, before);
        // The same bodies without the repeat are parsed normally (here: a real credit).
        let open = r#"{"type":"Open","user_id":"u-1","currency":"IDR"}"#;
        let r = app
            .post("/v1/wallets/w-dup/commands", &app.admin, open)
            .await;
        assert_eq!(r.status.as_u16(), 200, "{}", r.body);
        let credit =
            r#"{"type":"CreditPending","ref_type":"COMMISSION","ref_id":"c-1","amount_minor":1}"#;
        let r = app
            .post("/v1/wallets/w-dup/commands", &app.admin, credit)
            .await;
        assert_eq!(r.status.as_u16(), 200, "{}", r.body);
        let events = r.body["events"].as_array().unwrap();
        assert_eq!(events[0]["payload"]["amount_minor"], 1, "{}", r.body);
    }
);

both_backends!(
    f5_the_role_is_checked_before_the_body_is_parsed,
    |db: TestDb| async move {
        // The role check comes first: an auditor gets 403, never a parse answer that
        // tells them about the body.
        let app = spawn_roles(&db).await;
        let body = r#"{"type":"Open","user_id":"u-1","currency":"IDR","currency":"USD"}"#;
        let r = app
            .post("/v1/wallets/w-a/commands", &app.auditor, body)
            .await;
        r.problem(403, "FORBIDDEN", None);
        let r = app
            .post("/v1/wallets/w-a/commands", &app.service, body)
            .await;
        r.problem(422, "DUPLICATE_FIELD", Some("currency"));
    }
);

both_backends!(
    currency_zzz_is_refused_on_every_command_that_names_a_currency,
    |db: TestDb| async move {
        let app = spawn_roles(&db).await;
        for code in ["ZZZ", "XXX", "XTS"] {
            let open = format!(r#"{{"type":"Open","user_id":"u-1","currency":"{code}"}}"#);
            let r = app
                .post("/v1/wallets/w-z/commands", &app.admin, &open)
                .await;
            r.problem(422, "INVALID_FIELD", Some("currency"));
            assert!(
                r.body["detail"].as_str().unwrap().contains("ISO 4217"),
                "{}",
                r.body
            );
        }
        let open = r#"{"type":"Open","user_id":"u-1","currency":"IDR"}"#;
        let r = app.post("/v1/wallets/w-z/commands", &app.admin, open).await;
        assert_eq!(r.status.as_u16(), 200, "{}", r.body);
        // The guard on a money movement.
        let credit = r#"{"type":"CreditPending","ref_type":"COMMISSION","ref_id":"c-1","amount_minor":5,"currency":"ZZZ"}"#;
        let r = app
            .post("/v1/wallets/w-z/commands", &app.admin, credit)
            .await;
        r.problem(422, "INVALID_FIELD", Some("currency"));
        // A campaign fund.
        let campaign = r#"{"quota_unit":"MINOR_UNITS","quota_limit":100,"currency":"ZZZ","starts_at":"2026-01-01T00:00:00Z"}"#;
        let r = app
            .post("/v1/campaigns/SHOPEE:ID", &app.admin, campaign)
            .await;
        r.problem(422, "INVALID_FIELD", Some("currency"));
        // An ingested order: rejected on its own, naming the order's field.
        let order = r#"{"orders":[{"platform":"SHOPEE","country":"ID","platform_order_id":"o-z","status":"PENDING","currency":"ZZZ","gmv_minor":100,"platform_commission_minor":10,"ordered_at":"2026-01-01T00:00:00Z","platform_updated_at":"2026-01-01T00:00:00Z"}]}"#;
        let r = app.post("/v1/orders:ingest", &app.admin, order).await;
        assert_eq!(r.status.as_u16(), 200, "{}", r.body);
        let result = &r.body["results"][0];
        assert_eq!(result["result"], "rejected", "{}", r.body);
        assert_eq!(result["field"], "orders[0].currency", "{}", r.body);
    }
);
