//! Paid services with Alipay as the cash gateway, end to end over HTTP against the
//! simulator's Alipay mode (issue 33 item 3): an order paid by a signed async
//! notification is delivered once, whatever re-sends, later statuses and forgeries
//! arrive; a late payment's refund goes out as a signed `alipay.trade.refund`, is
//! queried with `alipay.trade.fastpay.refund.query`, and is made once.

use crate::common::app::spawn_app;
use crate::common::{eventually, Rng, TestDb};
use crate::services_env::ServicesEnv;
use chrono::{Duration, Utc};
use factledger::server::gateways::GatewayCallbacks;
use factledger::services::alipay::config::{
    ENV_APP_ID, ENV_APP_PRIVATE_KEY, ENV_GATEWAY_URL, ENV_PUBLIC_KEY, ENV_SELLER_ID,
};
use factledger::services::alipay::{AlipayConfig, AlipayGateway};
use factledger::services::scans::Scan;
use factledger::services::units::orders::late_refund_no;
use factledger::services::Services;
use payout_sim::gateway::alipay::{self, AlipayMode};
use payout_sim::gateway::model::PaymentRequest;
use payout_sim::gateway::{GatewayFault, Method, Payment, RefundStatus as SimRefund};
use payout_sim::SimConfig;
use rsa::pkcs8::{EncodePrivateKey, EncodePublicKey, LineEnding};
use rsa::RsaPrivateKey;
use serde_json::{json, Value};
use std::sync::{Arc, OnceLock};

const APP_ID: &str = "2021000000000001";
const SELLER_ID: &str = "2088000000000001";
/// Within this the service settles what the test waits for.
const WITHIN: std::time::Duration = std::time::Duration::from_secs(30);

/// (our app key, "Alipay's" key): minted once per test binary.
fn keys() -> &'static (RsaPrivateKey, RsaPrivateKey) {
    static KEYS: OnceLock<(RsaPrivateKey, RsaPrivateKey)> = OnceLock::new();
    KEYS.get_or_init(|| {
        let mint = || RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048).expect("key");
        (mint(), mint())
    })
}

/// The service wired to the simulator in Alipay mode, configured the way
/// production is: from the variables, keys as PEM.
async fn start(db: &TestDb) -> (ServicesEnv, AlipayMode) {
    let (app_key, alipay_key) = keys();
    let app_public = app_key
        .to_public_key()
        .to_public_key_pem(LineEnding::LF)
        .expect("pem");
    let mode = AlipayMode::with_key(APP_ID, &app_public, alipay_key.clone()).expect("mode");
    let sim = payout_sim::spawn(SimConfig {
        alipay: Some(mode.clone()),
        ..SimConfig::default()
    })
    .await
    .expect("simulator starts");
    let private_pem = app_key
        .to_pkcs8_pem(LineEnding::LF)
        .expect("pem")
        .to_string();
    let gateway_url = format!("{}/gateway.do", sim.base_url());
    let alipay_public = mode.alipay_public_key_pem().to_owned();
    let mut config = AlipayConfig::from_lookup(|k| match k {
        ENV_APP_ID => Some(APP_ID.into()),
        ENV_SELLER_ID => Some(SELLER_ID.into()),
        ENV_APP_PRIVATE_KEY => Some(private_pem.clone()),
        ENV_PUBLIC_KEY => Some(alipay_public.clone()),
        ENV_GATEWAY_URL => Some(gateway_url.clone()),
        _ => None,
    })
    .expect("config");
    config.timeout = std::time::Duration::from_millis(1_000);
    let verifier = config.verifier();
    let services = Services {
        gateway: Some(Arc::new(AlipayGateway::new(config).expect("gateway"))),
        ..Services::default()
    };
    let wired = services.clone();
    let app = spawn_app(db)
        .settlement_off()
        .configure(move |o| {
            o.job_scan_interval_ms = Some(100);
            o.services = wired;
            o.services_callbacks = GatewayCallbacks::Alipay(verifier);
        })
        .spawn()
        .await;
    sim.gateway()
        .set_settings(Some(format!("{}/v1/callbacks/alipay", app.base)), None)
        .expect("settings");
    (ServicesEnv { app, sim, services }, mode)
}

/// A recharge order of `candy` paid with Alipay.
async fn order(env: &ServicesEnv, order_no: &str, user: i64, candy: i64) {
    let (status, body) = env
        .create_order(json!({
            "order_no": order_no, "user_id": user,
            "business": {"kind": "RECHARGE", "candy": candy},
            "method": "ALIPAY", "amount_minor": candy, "currency": "CNY"
        }))
        .await;
    assert_eq!(status, 201, "{body}");
}

/// The payer pays through Alipay: the simulator notifies before answering.
async fn pay(env: &ServicesEnv, order_no: &str, amount_minor: i64) -> (Payment, Value) {
    let out = env
        .sim
        .gateway()
        .pay(PaymentRequest {
            order_no: order_no.into(),
            amount_minor,
            currency: "CNY".into(),
            method: Method::Alipay,
            account_id: SELLER_ID.into(),
            paid_at_ms: None,
        })
        .await;
    let v = serde_json::to_value(&out).expect("outcome");
    (out.payment, v)
}

/// POSTs a notification body as Alipay does; (status, text).
async fn post_notification(env: &ServicesEnv, body: String) -> (u16, String) {
    let r = reqwest::Client::new()
        .post(format!("{}/v1/callbacks/alipay", env.app.base))
        .header(
            "content-type",
            "application/x-www-form-urlencoded; charset=utf-8",
        )
        .body(body)
        .send()
        .await
        .expect("delivered");
    (r.status().as_u16(), r.text().await.unwrap_or_default())
}

async fn close(env: &ServicesEnv, order_no: &str) {
    let later = Utc::now() + Duration::minutes(16);
    let report = env
        .scan(Scan::OrderTimeoutClose, Some(order_no), later)
        .await;
    assert_eq!((report.acted, report.failed), (1, 0), "{report:?}");
    env.wait_order(order_no, |o| o["status"] == 4).await;
}

/// Waits until refund `refund_no` reads `status` (3 SUCCEEDED), running the
/// refund scan (which queries, or re-sends under the same number) meanwhile.
async fn settle_refund(env: &ServicesEnv, refund_no: &str, status: i64) -> Value {
    let path = format!("/v1/refunds/{refund_no}");
    let settled = eventually(WITHIN, || async {
        let (code, r) = env.app.get(&path).await;
        if code == 200 && r["status"] == status {
            return true;
        }
        env.scan(Scan::Refund, None, Utc::now()).await;
        false
    })
    .await;
    let (_, r) = env.app.get(&path).await;
    assert!(
        settled.is_ok(),
        "refund {refund_no} never reached {status}: {r}"
    );
    r
}

both_backends!(
    an_alipay_order_is_paid_by_its_signed_notification_and_a_late_payment_refunded_once,
    |db: TestDb| async move {
        let (env, mode) = start(&db).await;
        order(&env, "ALI-1", 31, 888).await;
        let (payment, out) = pay(&env, "ALI-1", 888).await;
        assert_eq!(out["callback"]["state"], "DELIVERED", "{out}");
        let o = env.wait_order("ALI-1", |o| o["status"] == 3).await;
        assert_eq!(
            o["payment_transactions"][0]["transaction_no"],
            json!(payment.transaction_no),
            "{o}"
        );
        assert_eq!(env.candy(31).await, (888, 0));

        // Alipay's later notices of the same trade: TRADE_FINISHED (its refund window
        // ended), a TRADE_CLOSED, a re-send: stored, answered success, paid once.
        for status in ["TRADE_FINISHED", "TRADE_CLOSED"] {
            let r = env
                .sim
                .gateway()
                .alipay_notify(&payment.transaction_no, status)
                .await;
            assert_eq!(
                r.expect("notified").state,
                payout_sim::gateway::CallbackState::Delivered
            );
        }
        let again =
            alipay::notification(&mode, &payment, &payment.event_id, "TRADE_SUCCESS", false);
        assert_eq!(
            post_notification(&env, again).await,
            (200, "success".into())
        );
        let (_, page) = env.app.get("/v1/callbacks?provider=alipay").await;
        let stored = page["callbacks"].as_array().map_or(0, Vec::len);
        assert_eq!(stored, 4, "{page}");
        let o = env.order("ALI-1").await;
        assert_eq!(
            o["payment_transactions"].as_array().map(Vec::len),
            Some(1),
            "{o}"
        );
        assert_eq!(env.candy(31).await, (888, 0));

        // A late payment of a closed order: refunded with alipay.trade.refund,
        // settled by its answer (fund_change Y), made once.
        order(&env, "ALI-LATE", 32, 500).await;
        close(&env, "ALI-LATE").await;
        let (late, _) = pay(&env, "ALI-LATE", 500).await;
        let refund_no = late_refund_no(&late.transaction_no);
        let r = settle_refund(&env, &refund_no, 3).await;
        assert_eq!(
            r["gateway_refund_id"],
            json!(format!("{}:{refund_no}", late.transaction_no)),
            "{r}"
        );
        let gateway = env.sim.gateway();
        assert_eq!(gateway.refunds_made(&refund_no), 1);
        assert_eq!(
            gateway.peek(&refund_no).map(|r| r.status),
            Some(SimRefund::Succeeded)
        );
        assert_eq!(env.candy(32).await, (0, 0));

        // A refund Alipay finishes later: answered fund_change N, queried, re-sent
        // under the same out_request_no while the query finds nothing, settled once.
        order(&env, "ALI-SLOW", 33, 300).await;
        close(&env, "ALI-SLOW").await;
        let held = GatewayFault::HoldCallback;
        gateway.add_fault("ALI-SLOW", held).expect("fault");
        let (slow, _) = pay(&env, "ALI-SLOW", 300).await;
        let slow_no = late_refund_no(&slow.transaction_no);
        let course = GatewayFault::ProcessingThen {
            times: 2,
            status: SimRefund::Succeeded,
            failure_reason: None,
        };
        gateway.add_fault(&slow_no, course).expect("course");
        gateway.release("ALI-SLOW").await.expect("released");
        settle_refund(&env, &slow_no, 3).await;
        assert_eq!(gateway.refunds_made(&slow_no), 1);
        let refunds = gateway.refunds();
        assert_eq!(
            refunds
                .refunded_minor_per_transaction_no
                .get(&slow.transaction_no),
            Some(&300)
        );
        assert_eq!(
            gateway.requests().unauthorized,
            0,
            "every request we sent was signed"
        );
    }
);

both_backends!(
    duplicates_reorders_and_forged_alipay_notifications_pay_once_and_refund_once,
    |db: TestDb| async move {
        let seed: u64 = std::env::var("FACTLEDGER_ALIPAY_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0x05EE_DA11);
        let mut rng = Rng(seed);
        let (env, mode) = start(&db).await;
        let gateway = env.sim.gateway();
        let orders = 8;
        let mut bodies = Vec::new();
        let mut late = Vec::new();
        for i in 0..orders {
            let no = format!("RND-{i}");
            let user = 100 + i;
            let amount = 100 + 10 * i;
            order(&env, &no, user, amount).await;
            // Some orders close before they are paid: their payment is refunded.
            let closed = rng.below(3) == 0;
            if closed {
                close(&env, &no).await;
            }
            match rng.below(3) {
                0 => gateway
                    .add_fault(&no, GatewayFault::DuplicateCallback)
                    .expect("fault"),
                1 => gateway
                    .add_fault(&no, GatewayFault::HoldCallback)
                    .expect("fault"),
                _ => {}
            }
            let (payment, _) = pay(&env, &no, amount).await;
            bodies.push(alipay::notification(
                &mode,
                &payment,
                &payment.event_id,
                "TRADE_SUCCESS",
                false,
            ));
            bodies.push(alipay::notification(
                &mode,
                &payment,
                &payment.event_id,
                "TRADE_SUCCESS",
                true,
            ));
            let tampered =
                alipay::notification(&mode, &payment, &payment.event_id, "TRADE_SUCCESS", false)
                    .replace(
                        &format!("total_amount={}", alipay::yuan(amount)),
                        "total_amount=99999.00",
                    );
            bodies.push(tampered);
            late.push((no, user, amount, closed, payment));
        }
        // Re-sends and forgeries in a shuffled order, then the held ones released.
        for i in (1..bodies.len()).rev() {
            bodies.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let mut refused = 0;
        for body in bodies {
            let (status, text) = post_notification(&env, body).await;
            match status {
                200 => assert_eq!(text, "success"),
                401 => {
                    assert_eq!(text, "fail");
                    refused += 1;
                }
                other => panic!("notification answered {other}: {text}"),
            }
        }
        assert_eq!(
            refused,
            2 * orders,
            "every forged or tampered copy is refused"
        );
        for (no, ..) in &late {
            let _ = gateway.release(no).await;
        }

        for (no, user, amount, closed, payment) in &late {
            if *closed {
                let refund_no = late_refund_no(&payment.transaction_no);
                settle_refund(&env, &refund_no, 3).await;
                assert_eq!(gateway.refunds_made(&refund_no), 1, "{no}");
                assert_eq!(env.candy(*user).await, (0, 0), "{no}");
            } else {
                let o = env.wait_order(no, |o| o["status"] == 3).await;
                assert_eq!(
                    o["payment_transactions"].as_array().map(Vec::len),
                    Some(1),
                    "{o}"
                );
                assert_eq!(env.candy(*user).await, (*amount, 0), "{no}");
            }
            let refunds = gateway.refunds();
            let made = refunds
                .refunds_per_transaction_no
                .get(&payment.transaction_no);
            assert_eq!(
                made,
                closed.then_some(&1),
                "{no}: one refund, only of a closed order"
            );
        }
        // A forged copy is at most kept as a refused sample: never normalised, never
        // handled.
        let (_, page) = env.app.get("/v1/callbacks?provider=alipay&limit=200").await;
        for cb in page["callbacks"].as_array().cloned().unwrap_or_default() {
            if cb["verify_status"] != "VERIFIED" {
                assert_eq!(
                    (&cb["handle_status"], &cb["normalized"]),
                    (&json!("SKIPPED"), &json!(false)),
                    "{cb}"
                );
            }
        }
        env.conserved().await;
    }
);
