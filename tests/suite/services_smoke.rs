//! Paid services end to end over HTTP (issue 18): a recharge paid by the gateway's
//! signed callback credits candy once; a booking holds it; a finished call settles
//! the hold to the artist once; candy adds up across streams after each step.

use crate::common::TestDb;
use crate::services_env::{ServicesEnv, PRICE};
use chrono::Duration;
use serde_json::json;

both_backends!(
    a_recharge_paid_by_callback_credits_candy_once_and_a_finished_call_pays_the_artist,
    |db: TestDb| async move {
        let env = ServicesEnv::start(&db).await;
        env.recharge_order("R-1", 11, 10_000).await;
        let order = env.order("R-1").await;
        assert_eq!(order["status"], 0, "{order}");
        assert_eq!(order["recharge"]["status"], "PENDING", "{order}");
        let paid = env.pay("R-1", 10_000, "CNY").await;
        assert_eq!(paid["callback"]["http_status"], 200, "{paid}");
        let order = env.wait_order("R-1", |o| o["status"] == 3).await;
        assert_eq!(order["recharge"]["status"], "CREDITED", "{order}");
        assert_eq!(
            order["payment_transactions"][0]["status"], "PAID",
            "{order}"
        );
        assert_eq!(env.candy(11).await, (10_000, 0));
        env.conserved().await;

        env.book("BK-1", 11, 22, Duration::minutes(5)).await;
        let booked = env.booking("BK-1").await;
        assert_eq!(booked["status"], 1, "activated on delivery: {booked}");
        assert_eq!(booked["hold"]["state"], "OPEN", "{booked}");
        assert_eq!(env.candy(11).await, (10_000 - PRICE, PRICE));
        env.conserved().await;

        for party in ["FAN", "ARTIST"] {
            let (status, body) = env.action("BK-1", "join", json!({"party": party})).await;
            assert_eq!(status, 200, "{body}");
        }
        let (status, body) = env.action("BK-1", "start", json!({})).await;
        assert_eq!((status, body["status"].clone()), (200, json!(3)), "{body}");
        let (status, body) = env.action("BK-1", "finish", json!({})).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["status"], 4, "{body}");
        assert_eq!(body["hold"]["state"], "SETTLED", "{body}");
        assert_eq!(env.candy(11).await, (10_000 - PRICE, 0));
        let t = env.conserved().await;
        assert_eq!((t.issued, t.holds, t.open_holds), (10_000, PRICE, 0));
        // The artist's income is a journal account.
        let (status, account) = env
            .app
            .get(&format!(
                "/v1/accounts/artist_income:22:ZZC?min_position={}",
                env.app.state.store.head_position().await.unwrap()
            ))
            .await;
        assert_eq!(status, 200, "{account}");
        assert_eq!(account["balance_minor"], PRICE, "{account}");
    }
);

both_backends!(
    an_order_the_payer_took_to_the_gateway_is_paying_and_still_closes_on_its_timeout,
    |db: TestDb| async move {
        use factledger::services::scans::Scan;
        let env = ServicesEnv::start(&db).await;
        env.recharge_order("P-1", 12, 500).await;
        let (status, order) = env.app.post("/v1/service-orders/P-1:pay", json!({})).await;
        assert_eq!(status, 200, "{order}");
        assert_eq!(env.order("P-1").await["status"], 1);
        // Again: nothing more; an unknown order is 404; another action is 404.
        let (status, _) = env.app.post("/v1/service-orders/P-1:pay", json!({})).await;
        assert_eq!(status, 200);
        let (status, body) = env.app.post("/v1/service-orders/NOPE:pay", json!({})).await;
        assert_eq!(
            (status, body["code"].clone()),
            (404, json!("ORDER_NOT_FOUND")),
            "{body}"
        );
        let (status, _) = env.app.post("/v1/service-orders/P-1:ship", json!({})).await;
        assert_eq!(status, 404);
        let report = env
            .scan(
                Scan::OrderTimeoutClose,
                None,
                chrono::Utc::now() + Duration::minutes(16),
            )
            .await;
        assert_eq!(report.acted, 1, "{report:?}");
        let order = env.order("P-1").await;
        assert_eq!(order["status"], 4, "{order}");
        assert_eq!(order["recharge"]["status"], "CLOSED", "{order}");
        // A paid order cannot be taken to the gateway again.
        env.recharge_order("P-2", 12, 500).await;
        env.pay("P-2", 500, "CNY").await;
        env.wait_order("P-2", |o| o["status"] == 3).await;
        let (status, body) = env.app.post("/v1/service-orders/P-2:pay", json!({})).await;
        assert_eq!(
            (status, body["code"].clone()),
            (409, json!("ORDER_STATUS_CONFLICT")),
            "{body}"
        );
    }
);
