//! Paid services over WeChat Pay APIv3, end to end through the HTTP API against
//! payout-sim's WeChat Pay mode: the simulator signs its notifications and answers
//! with the platform key it minted and seals resources with the APIv3 key; the
//! service signs its refund requests with the merchant key the simulator checks.
//! An order paid by a signed notification is delivered; a late payment's refund is
//! created, queried to SUCCESS, and its refund notifications agree with the query; a
//! forged notification is refused before anything is stored; and a seeded mix of
//! duplicates, reorders and forgeries pays each order once and refunds each late
//! payment once.

use crate::common::app::spawn_app;
use crate::common::{eventually, TestDb};
use crate::services_env::ServicesEnv;
use chrono::{Duration, Utc};
use factledger::server::gateway_wechatpay::WechatPayCallbacks;
use factledger::server::gateways::GatewayCallbacks;
use factledger::services::scans::Scan;
use factledger::services::units::orders::late_refund_no;
use factledger::services::wechatpay::crypto::{ApiV3Key, MerchantKey, PlatformKeys};
use factledger::services::wechatpay::{WechatPayConfig, WechatPayGateway};
use factledger::services::Services;
use payout_sim::gateway::wechatpay::WechatPaySetup;
use payout_sim::gateway::GatewayFault;
use payout_sim::SimConfig;
use rand::{RngExt, SeedableRng};
use rsa::pkcs8::{EncodePublicKey, LineEnding};
use serde_json::Value;
use std::sync::{Arc, OnceLock};

const MCHID: &str = "1230000109";
const APPID: &str = "wxd678efh567hg6787";
const APIV3_KEY: &str = "0123456789abcdefghijABCDEFGHIJ01";
const MERCHANT_SERIAL: &str = "1DDE55AD98ED71D6EDD4A4A16996DE7B47773A8C";
const WITHIN: std::time::Duration = std::time::Duration::from_secs(30);

/// The merchant's key, minted once per test binary (RSA-2048 is slow to mint).
fn merchant_key() -> &'static rsa::RsaPrivateKey {
    static KEY: OnceLock<rsa::RsaPrivateKey> = OnceLock::new();
    KEY.get_or_init(|| rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048).expect("key"))
}

/// The service with WeChat Pay as its gateway, the simulator in WeChat Pay mode.
async fn start(db: &TestDb) -> ServicesEnv {
    let sim = payout_sim::spawn(SimConfig::default()).await.expect("sim");
    let public = merchant_key()
        .to_public_key()
        .to_public_key_pem(LineEnding::LF)
        .expect("pem");
    let gateway_sim = sim.gateway();
    let platform = tokio::task::spawn_blocking(move || {
        gateway_sim.enable_wechatpay(WechatPaySetup {
            mchid: MCHID.into(),
            appid: APPID.into(),
            apiv3_key: APIV3_KEY.into(),
            merchant_serial: MERCHANT_SERIAL.into(),
            merchant_public_key_pem: public,
        })
    })
    .await
    .expect("join")
    .expect("WeChat Pay mode");
    let config = WechatPayConfig {
        name: "wechatpay".into(),
        base_url: sim.base_url(),
        mchid: MCHID.into(),
        appid: APPID.into(),
        merchant_serial: MERCHANT_SERIAL.into(),
        merchant_key: MerchantKey::from_key(merchant_key().clone()),
        apiv3_key: ApiV3Key::parse(APIV3_KEY).expect("key"),
        platform_keys: PlatformKeys::from_pems([(
            platform.serial.as_str(),
            platform.public_key_pem.as_str(),
        )])
        .expect("platform key"),
        refund_notify_url: None,
        timeout: std::time::Duration::from_millis(1_000),
    };
    let callbacks = GatewayCallbacks::WechatPay(WechatPayCallbacks::of(&config));
    let services = Services {
        gateway: Some(Arc::new(WechatPayGateway::new(config).expect("gateway"))),
        ..Services::default()
    };
    let wired = services.clone();
    let app = spawn_app(db)
        .settlement_off()
        .configure(move |o| {
            o.job_scan_interval_ms = Some(100);
            o.services = wired;
            o.services_callbacks = callbacks;
        })
        .spawn()
        .await;
    sim.gateway()
        .set_settings(Some(format!("{}/v1/callbacks/wechatpay", app.base)), None)
        .expect("settings");
    ServicesEnv { app, sim, services }
}

/// Close unpaid `order_no` by its timeout.
async fn close(env: &ServicesEnv, order_no: &str) {
    let report = env
        .scan(
            Scan::OrderTimeoutClose,
            Some(order_no),
            Utc::now() + Duration::minutes(16),
        )
        .await;
    assert_eq!((report.acted, report.failed), (1, 0), "{report:?}");
    env.wait_order(order_no, |o| o["status"] == 4).await;
}

/// The refund read once `done` holds.
async fn wait_refund(env: &ServicesEnv, refund_no: &str, done: impl Fn(&Value) -> bool) -> Value {
    env.wait(&format!("/v1/refunds/{refund_no}"), done).await
}

/// The wechatpay callbacks the inbox holds.
async fn inbox(env: &ServicesEnv) -> Vec<Value> {
    let (status, page) = env
        .app
        .get("/v1/callbacks?provider=wechatpay&limit=500")
        .await;
    assert_eq!(status, 200, "{page}");
    page["callbacks"].as_array().cloned().unwrap_or_default()
}

both_backends!(
    an_order_paid_by_a_signed_notification_is_delivered_and_a_late_payment_refunded_once,
    |db: TestDb| async move {
        let env = start(&db).await;
        env.recharge_order("WX-1", 71, 600).await;
        let paid = env.pay("WX-1", 600, "CNY").await;
        assert_eq!(paid["callback"]["state"], "DELIVERED", "{paid}");
        assert_eq!(paid["callback"]["http_status"], 200, "{paid}");
        let o = env.wait_order("WX-1", |o| o["status"] == 3).await;
        assert_eq!(o["recharge"]["status"], "CREDITED", "{o}");
        assert_eq!(env.candy(71).await.0, 600);
        let event_id = paid["payment"]["event_id"].as_str().expect("event id");
        let rows = inbox(&env).await;
        assert!(
            rows.iter()
                .any(|r| r["provider_event_id"] == event_id
                    && r["event_type"] == "TRANSACTION.SUCCESS"),
            "the notification id is the dedupe key: {rows:?}"
        );

        // A payment after the close: refunded through WeChat's refund API, created
        // once and settled by the query.
        env.recharge_order("WX-LATE", 72, 900).await;
        close(&env, "WX-LATE").await;
        let paid = env.pay("WX-LATE", 900, "CNY").await;
        let txn = paid["payment"]["transaction_no"].as_str().expect("txn");
        let refund_no = late_refund_no(txn);
        wait_refund(&env, &refund_no, |r| r["status"] == 2).await;
        env.scan(Scan::Refund, None, Utc::now() + Duration::minutes(1))
            .await;
        let r = wait_refund(&env, &refund_no, |r| r["status"] == 3).await;
        assert!(
            r["gateway_response"]
                .as_str()
                .unwrap_or("")
                .contains("SUCCESS"),
            "{r}"
        );
        let refunds = env.sim.gateway().refunds();
        assert_eq!(refunds.refunds_per_transaction_no.get(txn), Some(&1));
        assert_eq!(
            refunds.refunded_minor_per_transaction_no.get(txn),
            Some(&900)
        );
        assert_eq!(
            env.sim.gateway().requests().unauthorized,
            0,
            "every request was signed"
        );

        // Its REFUND.SUCCESS notification, twice, after the query: nothing moves again.
        let report = env
            .sim
            .gateway()
            .wechatpay_notify_refund(&refund_no, 2)
            .await
            .expect("notify");
        assert_eq!(report.http_status, Some(200), "{report:?}");
        let handled = eventually(WITHIN, || async {
            inbox(&env)
                .await
                .iter()
                .any(|r| r["event_type"] == "REFUND.SUCCESS" && r["handle_status"] == "HANDLED")
        })
        .await;
        assert!(handled.is_ok(), "{:?}", inbox(&env).await);
        let r = env.refund(&refund_no).await;
        assert_eq!(r["status"], 3, "{r}");
        assert_eq!(env.sim.gateway().refunds_made(&refund_no), 1);
    }
);

both_backends!(
    a_refund_notification_settles_a_refunding_refund_as_its_query_would,
    |db: TestDb| async move {
        let env = start(&db).await;
        env.recharge_order("WX-N", 73, 500).await;
        close(&env, "WX-N").await;
        let paid = env.pay("WX-N", 500, "CNY").await;
        let txn = paid["payment"]["transaction_no"].as_str().expect("txn");
        let refund_no = late_refund_no(txn);
        wait_refund(&env, &refund_no, |r| r["status"] == 2).await;
        env.sim
            .gateway()
            .settle(
                &refund_no,
                payout_sim::gateway::RefundStatus::Succeeded,
                None,
            )
            .expect("settle");
        let report = env
            .sim
            .gateway()
            .wechatpay_notify_refund(&refund_no, 1)
            .await
            .expect("notify");
        assert_eq!(report.http_status, Some(200), "{report:?}");
        wait_refund(&env, &refund_no, |r| r["status"] == 3).await;
        // The query afterwards agrees and changes nothing.
        env.scan(Scan::Refund, None, Utc::now() + Duration::minutes(1))
            .await;
        let r = env.refund(&refund_no).await;
        assert_eq!(r["status"], 3, "{r}");
        assert_eq!(env.sim.gateway().refunds_made(&refund_no), 1);
    }
);

both_backends!(
    a_forged_notification_is_refused_before_anything_is_stored,
    |db: TestDb| async move {
        let env = start(&db).await;
        env.recharge_order("WX-F", 74, 300).await;
        env.sim
            .gateway()
            .add_fault("WX-F", GatewayFault::BadSignatureCallback)
            .expect("fault");
        let paid = env.pay("WX-F", 300, "CNY").await;
        assert_eq!(paid["callback"]["state"], "UNDELIVERED", "{paid}");
        assert_eq!(paid["callback"]["http_status"], 401, "{paid}");
        let refused = inbox(&env).await;
        assert!(
            refused.iter().all(|r| r["verify_status"] != "VERIFIED"
                && r["provider_event_id"].is_null()
                && r["verify_error"]
                    .as_str()
                    .unwrap_or("")
                    .contains("wechatpay-signature")),
            "only refused samples, naming the header: {refused:?}"
        );
        let o = env.order("WX-F").await;
        assert_eq!(o["status"], 0, "{o}");
        // A notification with no signature headers at all: refused too, in WeChat's
        // answer format.
        let response = reqwest::Client::new()
            .post(format!("{}/v1/callbacks/wechatpay", env.app.base))
            .header("content-type", "application/json")
            .body(r#"{"id":"EV-x","event_type":"TRANSACTION.SUCCESS"}"#)
            .send()
            .await
            .expect("post");
        assert_eq!(response.status().as_u16(), 401);
        let body: Value = response.json().await.expect("json");
        assert_eq!(body["code"], "FAIL", "{body}");
        assert!(inbox(&env)
            .await
            .iter()
            .all(|r| r["verify_status"] != "VERIFIED" && r["provider_event_id"].is_null()));
    }
);

/// What happens to one order's notification in the randomized mix.
#[derive(Debug, Clone, Copy)]
enum Twist {
    Plain,
    Duplicate,
    Forged,
    Held,
    Late,
}

both_backends!(
    duplicates_reorders_and_forgeries_never_pay_or_refund_twice,
    |db: TestDb| async move {
        let env = start(&db).await;
        let mut rng = rand::rngs::StdRng::seed_from_u64(33);
        let gateway = env.sim.gateway();
        let mut orders = Vec::new();
        for i in 0..10i64 {
            let order_no = format!("WX-R{i}");
            let user = 100 + i;
            let amount = 100 * (1 + rng.random_range(0..9i64));
            env.recharge_order(&order_no, user, amount).await;
            let twist = match rng.random_range(0..5u8) {
                0 => Twist::Plain,
                1 => Twist::Duplicate,
                2 => Twist::Forged,
                3 => Twist::Held,
                _ => Twist::Late,
            };
            let fault = match twist {
                Twist::Plain => None,
                Twist::Duplicate => Some(GatewayFault::DuplicateCallback),
                Twist::Forged => Some(GatewayFault::BadSignatureCallback),
                Twist::Held => Some(GatewayFault::HoldCallback),
                Twist::Late => Some(GatewayFault::LateCallback { delay_ms: 200 }),
            };
            if let Some(f) = fault {
                gateway.add_fault(&order_no, f).expect("fault");
            }
            env.pay(&order_no, amount, "CNY").await;
            // A forged delivery is followed by the real one (WeChat re-sends), twice.
            if matches!(twist, Twist::Forged) {
                gateway
                    .add_fault(&order_no, GatewayFault::DuplicateCallback)
                    .expect("fault");
            }
            orders.push((order_no, user, amount, twist));
        }
        // Held notifications released in reverse order, after everything else.
        for (order_no, _, _, twist) in orders.iter().rev() {
            if matches!(twist, Twist::Held) {
                gateway.release(order_no).await.expect("release");
            }
        }
        for (order_no, user, amount, twist) in &orders {
            if matches!(twist, Twist::Forged) {
                let o = env.order(order_no).await;
                assert_eq!(o["status"], 0, "a forged notification paid {order_no}: {o}");
                continue;
            }
            env.wait_order(order_no, |o| o["status"] == 3).await;
            assert_eq!(
                env.candy(*user).await.0,
                *amount,
                "{order_no} credited once"
            );
        }
        // The forged orders are then paid for real, their notification duplicated,
        // and a second payment of a paid order is owed back: refunded exactly once
        // however its refund notification and queries interleave.
        let mut late = Vec::new();
        for (order_no, user, amount, twist) in &orders {
            if matches!(twist, Twist::Forged) {
                env.pay(order_no, *amount, "CNY").await;
                env.wait_order(order_no, |o| o["status"] == 3).await;
                assert_eq!(
                    env.candy(*user).await.0,
                    *amount,
                    "{order_no} credited once"
                );
            } else if rng.random_range(0..2u8) == 0 {
                let again = env.pay(order_no, *amount, "CNY").await;
                let txn = again["payment"]["transaction_no"]
                    .as_str()
                    .expect("txn")
                    .to_owned();
                late.push((late_refund_no(&txn), txn, *amount));
            }
        }
        for (refund_no, _, _) in &late {
            wait_refund(&env, refund_no, |r| r["status"] == 2).await;
            if rng.random_range(0..2u8) == 0 {
                gateway
                    .settle(
                        refund_no,
                        payout_sim::gateway::RefundStatus::Succeeded,
                        None,
                    )
                    .expect("settle");
                gateway
                    .wechatpay_notify_refund(refund_no, 2)
                    .await
                    .expect("notify");
            }
        }
        env.scan(Scan::Refund, None, Utc::now() + Duration::minutes(1))
            .await;
        let refunds = gateway.refunds();
        for (refund_no, txn, amount) in &late {
            wait_refund(&env, refund_no, |r| r["status"] == 3).await;
            assert_eq!(
                refunds.refunds_per_transaction_no.get(txn),
                Some(&1),
                "{refund_no}"
            );
            assert_eq!(
                refunds.refunded_minor_per_transaction_no.get(txn),
                Some(amount)
            );
        }
        for (order_no, user, amount, _) in &orders {
            assert_eq!(
                env.candy(*user).await.0,
                *amount,
                "{order_no} still credited once"
            );
        }
        env.conserved().await;
    }
);
