//! The affiliate write API over HTTP: reference data, the ingest page with a result
//! per order, the audited recovery resolution and attribution correction, and the
//! errors that name the field and the rule. Both backends.

use crate::common;

use common::{meta, Server, TestDb};
use factledger::affiliate::settlement::{settle_one, Settled};
use serde_json::{json, Value};

fn time(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn order(id: &str, status: &str, ordered_at: &str, updated_at: &str) -> Value {
    json!({
        "platform": "SHOPEE", "country": "ID", "platform_order_id": id, "status": status,
        "currency": "IDR", "gmv_minor": 100_000, "platform_commission_minor": 12_000,
        "ordered_at": ordered_at, "platform_updated_at": updated_at,
        "attribution": {"kind": "TRACKING_ID", "value": "t-1"}
    })
}

#[track_caller]
fn problem(got: &(u16, Value), status: u16, code: &str, field: Option<&str>) {
    assert_eq!(got.0, status, "{}", got.1);
    assert_eq!(got.1["code"], code, "{}", got.1);
    assert_eq!(got.1["field"].as_str(), field, "{}", got.1);
}

/// Rules from a few seconds from now (never back-dated), the link t-1 → u-1, u-0
/// invited u-1, and a campaign; returns the time orders are placed at.
async fn reference_data(app: &Server) -> String {
    let now = chrono::Utc::now();
    let from = time(now + chrono::Duration::seconds(5));
    let rules = json!({"version": 1, "effective_from": from, "cashback_bps": 6000,
        "inviter_bps": 1000, "max_commission_base_bps": 1000, "release_delay_days": 0});
    let mut back_dated = rules.clone();
    back_dated["requested_at"] = json!("2020-01-01T00:00:00Z");
    problem(
        &app.post("/v1/commission-rules/SHOPEE:ID/versions", back_dated)
            .await,
        422,
        "SERVER_OWNED_FIELD",
        Some("requested_at"),
    );
    let mut too_much = rules.clone();
    too_much["cashback_bps"] = json!(10_001);
    let bad = app
        .post("/v1/commission-rules/SHOPEE:ID/versions", too_much)
        .await;
    problem(&bad, 422, "INVALID_FIELD", Some("cashback_bps"));
    let added = app
        .post("/v1/commission-rules/SHOPEE:ID/versions", rules)
        .await;
    assert_eq!(added.0, 200, "{}", added.1);
    assert_eq!(added.1["events"][0]["event_type"], "RuleVersionAdded");

    let link = json!({"attribution": {"kind": "TRACKING_ID", "value": "t-1"}, "user_id": "u-1"});
    assert_eq!(app.post("/v1/affiliate-links", link).await.0, 200);
    let other = json!({"attribution": {"kind": "TRACKING_ID", "value": "t-1"}, "user_id": "u-9"});
    problem(
        &app.post("/v1/affiliate-links", other).await,
        422,
        "LINK_ALREADY_REGISTERED",
        Some("user_id"),
    );
    let invite = app
        .post("/v1/users/u-1/inviter", json!({"inviter_user_id": "u-0"}))
        .await;
    assert_eq!(invite.0, 200, "{}", invite.1);
    problem(
        &app.post("/v1/users/u-1/inviter", json!({"inviter_user_id": "u-1"}))
            .await,
        422,
        "SELF_INVITE",
        Some("inviter_user_id"),
    );
    let campaign = json!({"quota_unit": "ORDERS", "quota_limit": 5, "starts_at": from});
    let opened = app.post("/v1/campaigns/SHOPEE:ID", campaign).await;
    assert_eq!(opened.0, 200, "{}", opened.1);
    time(now + chrono::Duration::seconds(6))
}

both_backends!(
    orders_are_ingested_over_http_with_a_result_per_order,
    |db: TestDb| async move {
        let app = Server::start(&db).await;
        let at = reference_data(&app).await;
        let mut negative = order("o-2", "PENDING", &at, &at);
        negative["gmv_minor"] = json!(-5);
        let mut typo = order("o-3", "PENDING", &at, &at);
        typo["gmv"] = json!(1);
        let page = json!({"orders": [order("o-1", "PENDING", &at, &at), negative, typo]});
        let (status, body) = app.post("/v1/orders:ingest", page).await;
        assert_eq!(status, 200, "{body}");
        let results = body["results"].as_array().unwrap();
        assert_eq!(results.len(), 3);
        assert_eq!(results[0]["result"], "created", "{body}");
        assert_eq!(results[1]["result"], "rejected");
        assert_eq!(results[1]["code"], "INVALID_ORDER");
        assert_eq!(results[1]["field"], "orders[1].gmv_minor", "{body}");
        assert_eq!(results[2]["result"], "rejected");
        assert_eq!(results[2]["field"], "orders[2].gmv", "{body}");
        let position = results[0]["position"].as_i64().unwrap();
        // The projections read it back.
        let (status, o) = app
            .get(&format!("/v1/orders/shopee/o-1?min_position={position}"))
            .await;
        assert_eq!(status, 200, "{o}");
        assert_eq!(o["status"], "PENDING", "{o}");
        let (status, c) = app
            .get(&format!(
                "/v1/commissions?user_id=u-1&min_position={position}"
            ))
            .await;
        assert_eq!(status, 200, "{c}");
        assert_eq!(c["commissions"][0]["amount_minor"], 6_000, "{c}");
        // Page limits, named.
        problem(
            &app.post("/v1/orders:ingest", json!({"orders": []})).await,
            422,
            "INVALID_FIELD",
            Some("orders"),
        );
        let big: Vec<Value> = (0..501)
            .map(|i| order(&format!("b-{i}"), "PENDING", &at, &at))
            .collect();
        problem(
            &app.post("/v1/orders:ingest", json!({"orders": big})).await,
            422,
            "INVALID_FIELD",
            Some("orders"),
        );
    }
);

both_backends!(
    a_recovery_review_is_resolved_by_hand_and_lifts_the_withdrawal_block,
    |db: TestDb| async move {
        let app = Server::start(&db).await;
        let at = reference_data(&app).await;
        let later = time(
            at.parse::<chrono::DateTime<chrono::Utc>>().unwrap() + chrono::Duration::seconds(1),
        );
        let page = json!({"orders": [order("o-1", "COMPLETED", &at, &at)]});
        assert_eq!(app.post("/v1/orders:ingest", page).await.0, 200);
        let cid = "SHOPEE:o-1:CASHBACK";
        let due = chrono::Utc::now() + chrono::Duration::days(1);
        let (settled, _) = settle_one(&db.store, &meta(), cid, due, None)
            .await
            .unwrap();
        assert_eq!(settled, Settled::Released);
        let page = json!({"orders": [order("o-1", "REFUNDED", &at, &later)]});
        let (_, body) = app.post("/v1/orders:ingest", page).await;
        assert_eq!(body["results"][0]["result"], "updated", "{body}");
        problem(
            &app.post(&format!("/v1/commissions/{cid}:resolve"), json!({}))
                .await,
            422,
            "INVALID_FIELD",
            Some("reason"),
        );
        problem(
            &app.post(
                "/v1/commissions/SHOPEE:o-9:CASHBACK:resolve",
                json!({"reason": "x"}),
            )
            .await,
            404,
            "COMMISSION_NOT_FOUND",
            None,
        );
        let (status, done) = app
            .post(
                &format!("/v1/commissions/{cid}:resolve"),
                json!({"reason": "recovered offline"}),
            )
            .await;
        assert_eq!(status, 200, "{done}");
        let types: Vec<&str> = done["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["event_type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["RecoveryManuallyResolved", "WithdrawalsUnblocked"]);
        let resolved = &done["events"][0];
        assert_eq!(resolved["payload"]["reason"], "recovered offline");
        assert_eq!(
            resolved["payload"]["actor"],
            format!("key:{}", app.admin_key_id)
        );
        let position = done["position"].as_i64().unwrap();
        let (_, w) = app
            .get(&format!("/v1/wallets/u-1:IDR?min_position={position}"))
            .await;
        assert_eq!(w["withdrawals_blocked"], false, "{w}");
        assert_eq!(w["available_minor"], 6_000, "{w}");
        // Once only.
        let again = app
            .post(
                &format!("/v1/commissions/{cid}:resolve"),
                json!({"reason": "again"}),
            )
            .await;
        assert_eq!(
            again.1["code"], "ILLEGAL_COMMISSION_TRANSITION",
            "{}",
            again.1
        );
    }
);

both_backends!(
    an_attribution_correction_is_audited_with_old_and_new_owner,
    |db: TestDb| async move {
        let app = Server::start(&db).await;
        let at = reference_data(&app).await;
        app.post(
            "/v1/orders:ingest",
            json!({"orders": [order("o-2", "PENDING", &at, &at)]}),
        )
        .await;
        let path = "/v1/orders/SHOPEE/o-2:correct-attribution";
        problem(
            &app.post(path, json!({"new_owner_user_id": "u-3", "reason": " "}))
                .await,
            422,
            "INVALID_FIELD",
            Some("reason"),
        );
        let (status, body) = app
            .post(
                path,
                json!({"new_owner_user_id": "u-3", "reason": "support ticket 7"}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        let p = &body["events"][0]["payload"];
        assert_eq!(body["events"][0]["event_type"], "AttributionCorrected");
        assert_eq!(
            (
                p["old_owner_user_id"].as_str(),
                p["new_owner_user_id"].as_str()
            ),
            (Some("u-1"), Some("u-3"))
        );
        assert_eq!(p["actor"], format!("key:{}", app.admin_key_id));
        assert_eq!(p["reason"], "support ticket 7");
        problem(
            &app.post(
                "/v1/orders/SHOPEE/o-404:correct-attribution",
                json!({"reason": "x"}),
            )
            .await,
            404,
            "ORDER_NOT_FOUND",
            None,
        );
    }
);
