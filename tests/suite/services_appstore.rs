//! App Store Server Notifications V2 end to end (issue 33 item 4): the simulated App
//! Store (payout-sim's, with its own minted chain pinned by the service) POSTs
//! `{"signedPayload": JWS}` to `/v1/callbacks/appstore`; a purchase pays and delivers
//! the order its `appAccountToken` names, a renewal pays its own `AP-<transactionId>`
//! order, `REFUND` settles a late payment's refund, `EXPIRED` ends a subscription past
//! its paid end; forged notifications are refused before anything is stored, and a
//! seeded mix of duplicates, reorders and forgeries never pays twice.

use crate::common::app::{spawn_app, App};
use crate::common::{eventually, TestDb};
use chrono::{Duration, Utc};
use factledger::services::appstore::{AppStoreConfig, Environment};
use factledger::services::{Ctx, Services};
use payout_sim::appstore::{
    AppStoreFault, AppStoreSettings, AppStoreSim, NotifySpec, TransactionSpec,
};
use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};
use serde_json::{json, Value};

const BUNDLE: &str = "com.example.factledger";
/// 9.99 USD in Apple's milliunits, 999 cents in ours.
const PRICE_MILLI: i64 = 9_990;
const PRICE_MINOR: i64 = 999;
const WAIT: std::time::Duration = std::time::Duration::from_secs(30);

struct Env {
    app: App,
    store: AppStoreSim,
}

impl Env {
    /// The service with the App Store provider pinned to the simulator's root, and no
    /// cash gateway (Apple has no refund API: a late payment's refund waits for
    /// Apple's REFUND notification).
    async fn start(db: &TestDb) -> Env {
        let store = AppStoreSim::new(AppStoreSettings::default()).expect("App Store sim");
        let config = AppStoreConfig::new(BUNDLE, Environment::Sandbox, None)
            .expect("config")
            .pinning(&store.root_der())
            .expect("root");
        let app = spawn_app(db)
            .settlement_off()
            .configure(move |o| {
                o.job_scan_interval_ms = Some(100);
                o.appstore = Some(config);
            })
            .spawn()
            .await;
        store.configure(AppStoreSettings {
            callback_url: Some(format!("{}/v1/callbacks/appstore", app.base)),
            ..AppStoreSettings::default()
        });
        Env { app, store }
    }

    fn ctx(&self) -> Ctx {
        Ctx::with_engine(
            self.app.state.store.clone(),
            self.app.state.db.clone(),
            &self.app.state.jobs,
            Services::default(),
            &self.app.state.config.country_code,
        )
    }

    async fn order_created(&self, order_no: &str, user: i64, business: Value) {
        let (status, body) = self
            .app
            .post(
                "/v1/service-orders",
                json!({"order_no": order_no, "user_id": user, "business": business,
                       "method": "APPLE", "amount_minor": PRICE_MINOR, "currency": "USD"}),
            )
            .await;
        assert_eq!(status, 201, "{body}");
    }

    /// Send `spec`; the HTTP status of its (last) delivery.
    async fn notify(&self, spec: &NotifySpec) -> Option<u16> {
        let (_, attempts) = self.store.notify(spec).await;
        attempts.last().and_then(|a| a.http_status)
    }

    async fn read(&self, path: &str) -> (u16, Value) {
        let at = self.app.state.store.head_position().await.expect("head");
        let sep = if path.contains('?') { '&' } else { '?' };
        self.app.get(&format!("{path}{sep}min_position={at}")).await
    }

    /// Wait until `path` reads 200 with `done`; the last read.
    async fn wait(&self, path: &str, done: impl Fn(&Value) -> bool) -> Value {
        let last = std::sync::Mutex::new(Value::Null);
        let reached = eventually(WAIT, || async {
            let (status, body) = self.app.get(path).await;
            let ok = status == 200 && done(&body);
            *last.lock().expect("last read") = body;
            ok
        })
        .await;
        let last = last.into_inner().expect("last read");
        assert!(reached.is_ok(), "{path} never got there: {last}");
        last
    }
}

fn tx(txn: &str, original: &str, token: &str, kind: &str) -> TransactionSpec {
    TransactionSpec {
        transaction_id: txn.into(),
        original_transaction_id: Some(original.into()),
        app_account_token: Some(token.into()),
        product_id: "com.example.factledger.premium".into(),
        price: PRICE_MILLI,
        currency: "USD".into(),
        purchase_date: None,
        expires_date: None,
        kind: kind.into(),
        bundle_id: None,
    }
}

fn spec(kind: &str, subtype: Option<&str>, t: TransactionSpec) -> NotifySpec {
    NotifySpec {
        notification_type: kind.into(),
        subtype: subtype.map(str::to_owned),
        notification_uuid: None,
        transaction: Some(t),
        renewal_info: true,
        fault: None,
    }
}

both_backends!(
    an_app_store_purchase_pays_its_order_and_a_renewal_pays_its_own_order,
    |db: TestDb| async move {
        let env = Env::start(&db).await;
        let token = uuid::Uuid::new_v4().to_string();
        let sub = json!({"kind": "SUBSCRIPTION", "artist_id": 900, "days": 30});
        env.order_created(&token, 91, sub).await;

        let first = tx(
            "2000000001",
            "2000000001",
            &token,
            "Auto-Renewable Subscription",
        );
        let status = env
            .notify(&spec("SUBSCRIBED", Some("INITIAL_BUY"), first))
            .await;
        assert_eq!(status, Some(200));
        let order = env
            .wait(&format!("/v1/service-orders/{token}"), |o| o["status"] == 3)
            .await;
        assert_eq!(order["method"], "APPLE", "{order}");

        // The renewal: a new transaction of the same purchase, its own order.
        let renewal = tx(
            "2000000002",
            "2000000001",
            &token,
            "Auto-Renewable Subscription",
        );
        assert_eq!(
            env.notify(&spec("DID_RENEW", None, renewal.clone())).await,
            Some(200)
        );
        env.wait("/v1/service-orders/AP-2000000002", |o| o["status"] == 3)
            .await;
        // Told again under a new UUID (Apple's two notifications about one
        // transaction): nothing moves twice.
        assert_eq!(
            env.notify(&spec("DID_RENEW", None, renewal)).await,
            Some(200)
        );
        let subs = env
            .wait("/v1/subscriptions?artist_id=900&fan_user_id=91", |s| {
                s.to_string().contains("\"status\":1")
            })
            .await;
        let (_, o) = env.read("/v1/service-orders/AP-2000000002").await;
        assert_eq!(o["status"], 3, "{o}");
        assert!(subs.to_string().contains("91"), "{subs}");
        let (_, callbacks) = env.app.get("/v1/callbacks?provider=appstore").await;
        assert!(callbacks.to_string().contains("DID_RENEW"), "{callbacks}");
    }
);

both_backends!(
    forged_notifications_are_refused_before_anything_is_stored,
    |db: TestDb| async move {
        let env = Env::start(&db).await;
        let token = uuid::Uuid::new_v4().to_string();
        env.order_created(&token, 92, json!({"kind": "RECHARGE", "candy": 500}))
            .await;
        let t = tx("3000000001", "3000000001", &token, "Consumable");
        for fault in [AppStoreFault::WrongChain, AppStoreFault::BadSignature] {
            let forged = NotifySpec {
                fault: Some(fault),
                ..spec("ONE_TIME_CHARGE", None, t.clone())
            };
            assert_eq!(env.notify(&forged).await, Some(401), "{fault:?}");
        }
        let (status, listed) = env.app.get("/v1/callbacks?provider=appstore").await;
        assert_eq!(status, 200, "{listed}");
        assert!(!listed.to_string().contains("ONE_TIME_CHARGE"), "{listed}");
        let (_, order) = env.read(&format!("/v1/service-orders/{token}")).await;
        assert_eq!(order["status"], 0, "{order}");
        // The real one pays.
        assert_eq!(
            env.notify(&spec("ONE_TIME_CHARGE", None, t)).await,
            Some(200)
        );
        env.wait(&format!("/v1/service-orders/{token}"), |o| o["status"] == 3)
            .await;
    }
);

both_backends!(
    a_refund_from_apple_settles_a_late_payment_s_refund_and_a_kept_one_fails_visibly,
    |db: TestDb| async move {
        let env = Env::start(&db).await;
        let ctx = env.ctx();
        // A recharge that closed unpaid, then paid at Apple: owed back.
        let late = uuid::Uuid::new_v4().to_string();
        env.order_created(&late, 93, json!({"kind": "RECHARGE", "candy": 500}))
            .await;
        let meta = ctx.metadata("test:close");
        let after_timeout = Utc::now() + Duration::minutes(20);
        factledger::services::units::orders::close(&ctx.store, &meta, &late, after_timeout, None)
            .await
            .expect("closes");
        let t = tx("4000000001", "4000000001", &late, "Consumable");
        assert_eq!(
            env.notify(&spec("ONE_TIME_CHARGE", None, t.clone())).await,
            Some(200)
        );
        let refund_no = factledger::services::units::orders::late_refund_no("4000000001");
        env.wait(&format!("/v1/refunds/{refund_no}"), |r| {
            r["status_name"].is_string()
        })
        .await;
        assert_eq!(env.notify(&spec("REFUND", None, t)).await, Some(200));
        let r = env
            .wait(&format!("/v1/refunds/{refund_no}"), |r| {
                r["status_name"] == "SUCCEEDED"
            })
            .await;
        assert!(r.to_string().contains("appstore:4000000001"), "{r}");
        env.wait(&format!("/v1/service-orders/{late}"), |o| o["status"] == 6)
            .await;

        // A refund of a delivered order's payment: not supported, left FAILED (202).
        let kept = uuid::Uuid::new_v4().to_string();
        env.order_created(&kept, 94, json!({"kind": "RECHARGE", "candy": 500}))
            .await;
        let t = tx("4000000002", "4000000002", &kept, "Consumable");
        assert_eq!(
            env.notify(&spec("ONE_TIME_CHARGE", None, t.clone())).await,
            Some(200)
        );
        env.wait(&format!("/v1/service-orders/{kept}"), |o| o["status"] == 3)
            .await;
        assert_eq!(env.notify(&spec("REFUND", None, t)).await, Some(202));
        let (_, failed) = env
            .app
            .get("/v1/callbacks?provider=appstore&handle_status=FAILED")
            .await;
        assert!(failed.to_string().contains("REFUND"), "{failed}");
    }
);

both_backends!(
    an_expired_notification_ends_a_subscription_past_its_paid_end,
    |db: TestDb| async move {
        let env = Env::start(&db).await;
        let ctx = env.ctx();
        let token = uuid::Uuid::new_v4().to_string();
        env.order_created(
            &token,
            95,
            json!({"kind": "SUBSCRIPTION", "artist_id": 901, "days": 1}),
        )
        .await;
        // Paid and delivered two days ago (the flow at a chosen instant): its one day
        // is over, and no expiry scan runs in this service.
        let two_days_ago = Utc::now() - Duration::days(2);
        let payment = factledger_aggregates::service_order::Payment {
            transaction_no: "5000000001".into(),
            method: factledger_aggregates::services::PaymentMethod::Apple,
            account_id: BUNDLE.into(),
            amount_minor: PRICE_MINOR,
            currency: "USD".into(),
            paid_at: two_days_ago,
        };
        factledger::services::flow::payment_received(&ctx, &token, payment, two_days_ago, None)
            .await
            .expect("paid");
        env.wait("/v1/subscriptions?artist_id=901&fan_user_id=95", |s| {
            s.to_string().contains("\"status\":1")
        })
        .await;
        let t = tx(
            "5000000001",
            "5000000001",
            &token,
            "Auto-Renewable Subscription",
        );
        assert_eq!(
            env.notify(&spec("EXPIRED", Some("VOLUNTARY"), t)).await,
            Some(200)
        );
        env.wait("/v1/subscriptions?artist_id=901&fan_user_id=95", |s| {
            s.to_string().contains("\"status\":2")
        })
        .await;
    }
);

both_backends!(
    a_seeded_mix_of_duplicates_reorders_and_forgeries_never_pays_twice,
    |db: TestDb| async move {
        let env = Env::start(&db).await;
        let seed = 33u64;
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut sends: Vec<NotifySpec> = Vec::new();
        let mut expected_candy = std::collections::BTreeMap::<i64, i64>::new();
        let mut renewals = Vec::new();
        for i in 0..6i64 {
            let user = 200 + i;
            let token = uuid::Uuid::new_v4().to_string();
            let txn = format!("{}", 6_000_000_000 + i * 10);
            if i % 2 == 0 {
                env.order_created(&token, user, json!({"kind": "RECHARGE", "candy": 700}))
                    .await;
                *expected_candy.entry(user).or_default() += 700;
                sends.push(spec(
                    "ONE_TIME_CHARGE",
                    None,
                    tx(&txn, &txn, &token, "Consumable"),
                ));
            } else {
                let sub = json!({"kind": "SUBSCRIPTION", "artist_id": 902, "days": 30});
                env.order_created(&token, user, sub).await;
                let kind = "Auto-Renewable Subscription";
                sends.push(spec(
                    "SUBSCRIBED",
                    Some("INITIAL_BUY"),
                    tx(&txn, &txn, &token, kind),
                ));
                for r in 1..=rng.random_range(1..3i64) {
                    let renewal = format!("{}", 6_000_000_000 + i * 10 + r);
                    renewals.push(format!("AP-{renewal}"));
                    sends.push(spec("DID_RENEW", None, tx(&renewal, &txn, &token, kind)));
                }
            }
        }
        // Duplicates (the same UUID again), forgeries of each, then any order.
        let mut all = Vec::new();
        for s in sends {
            let uuid = uuid::Uuid::new_v4().to_string();
            let s = NotifySpec {
                notification_uuid: Some(uuid),
                ..s
            };
            if rng.random_bool(0.5) {
                all.push((s.clone(), true));
            }
            let fault = if rng.random_bool(0.5) {
                AppStoreFault::BadSignature
            } else {
                AppStoreFault::WrongChain
            };
            all.push((
                NotifySpec {
                    fault: Some(fault),
                    ..s.clone()
                },
                false,
            ));
            all.push((s, true));
        }
        all.shuffle(&mut rng);
        for (s, genuine) in &all {
            let status = env.notify(s).await;
            let want = if *genuine { Some(200) } else { Some(401) };
            assert_eq!(
                status, want,
                "seed {seed}: {} {:?}",
                s.notification_type, s.fault
            );
        }
        for (user, candy) in &expected_candy {
            env.wait(&format!("/v1/candy-accounts/{user}"), |a| {
                a["balance"] == *candy
            })
            .await;
        }
        for order_no in &renewals {
            env.wait(&format!("/v1/service-orders/{order_no}"), |o| {
                o["status"] == 3
            })
            .await;
        }
        // Settled: the balances stay exactly one recharge each, every order has one
        // payment transaction.
        for (user, candy) in &expected_candy {
            let (_, a) = env.read(&format!("/v1/candy-accounts/{user}")).await;
            assert_eq!(a["balance"], *candy, "seed {seed}: user {user} {a}");
        }
        for order_no in &renewals {
            let (_, o) = env.read(&format!("/v1/service-orders/{order_no}")).await;
            let txns = o["payment_transactions"].as_array().map_or(0, Vec::len);
            assert_eq!(txns, 1, "seed {seed}: {o}");
        }
    }
);
