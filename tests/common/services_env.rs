//! A service with paid services wired to the in-process gateway simulator: cash
//! orders paid by the simulator's signed callbacks, refunds through it, and a
//! [`Ctx`] to run flows and scans at a chosen instant (no-show 10 minutes after a
//! start, expiry after an end) without waiting for the clock.

use crate::common::app::{spawn_app, App};
use crate::common::TestDb;
use chrono::{DateTime, Duration, Utc};
use factledger::services::gateway_http::{HttpGateway, HttpGatewayConfig};
use factledger::services::scans::{Scan, ScanOptions, ScanReport};
use factledger::services::{Ctx, Services};
use payout_sim::gateway::model::PaymentRequest;
use payout_sim::{SimConfig, SimHandle};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Instant;

pub const SECRET: &str = "sim-secret";
pub const CALLBACK_SECRET: &str = "gateway-callback-secret";
/// The candy price of a test booking (1/100-candy units).
pub const PRICE: i64 = 3_000;

pub struct ServicesEnv {
    pub app: App,
    pub sim: SimHandle,
    pub services: Services,
}

impl ServicesEnv {
    pub async fn start(db: &TestDb) -> ServicesEnv {
        ServicesEnv::start_configured(db, |_| {}).await
    }

    /// The service with the simulator as its gateway (1 s client timeout);
    /// `extra` changes the options further.
    pub async fn start_configured(
        db: &TestDb,
        extra: impl FnOnce(&mut factledger::server::ServeOptions) + Send + 'static,
    ) -> ServicesEnv {
        let sim = payout_sim::spawn(SimConfig {
            secret: SECRET.into(),
            gateway_callback_secret: CALLBACK_SECRET.into(),
            ..SimConfig::default()
        })
        .await
        .expect("simulator starts");
        let mut config = HttpGatewayConfig::new(sim.base_url(), SECRET);
        config.timeout = std::time::Duration::from_millis(1_000);
        let services = Services {
            gateway: Some(Arc::new(HttpGateway::new(config).expect("gateway"))),
            ..Services::default()
        };
        let wired = services.clone();
        let app = spawn_app(db)
            .settlement_off()
            .configure(move |o| {
                o.job_scan_interval_ms = Some(100);
                o.services = wired;
                o.services_callbacks = factledger::server::gateways::GatewayCallbacks::Paysim {
                    secret: CALLBACK_SECRET.into(),
                };
                extra(o);
            })
            .spawn()
            .await;
        sim.gateway()
            .set_settings(
                Some(format!("{}/v1/callbacks/paysim", app.base)),
                Some(CALLBACK_SECRET.into()),
            )
            .expect("gateway settings");
        ServicesEnv { app, sim, services }
    }

    /// A context on the served engine, to run flows and scans at any instant.
    pub fn ctx(&self) -> Ctx {
        Ctx::with_engine(
            self.app.state.store.clone(),
            self.app.state.db.clone(),
            &self.app.state.jobs,
            self.services.clone(),
            &self.app.state.config.country_code,
        )
    }

    /// Run a scan at `now`.
    pub async fn scan(
        &self,
        scan: Scan,
        business_id: Option<&str>,
        now: DateTime<Utc>,
    ) -> ScanReport {
        let opts = ScanOptions {
            business_id: business_id.map(str::to_owned),
            limit: 1_000,
            now,
        };
        factledger::services::scans::run(&self.ctx(), scan, &opts)
            .await
            .expect("scan runs")
    }

    /// Create a cash order; (status, body).
    pub async fn create_order(&self, body: Value) -> (u16, Value) {
        self.app.post("/v1/service-orders", body).await
    }

    /// A recharge order of `candy` for `user`, paid 100 CNY minor units per candy/100.
    pub async fn recharge_order(&self, order_no: &str, user: i64, candy: i64) -> Value {
        let (status, body) = self
            .create_order(json!({
                "order_no": order_no, "user_id": user,
                "business": {"kind": "RECHARGE", "candy": candy},
                "method": "WECHAT", "amount_minor": candy, "currency": "CNY"
            }))
            .await;
        assert_eq!(status, 201, "{body}");
        self.order(order_no).await
    }

    /// The gateway pays `order_no` (it POSTs its signed callback before answering).
    pub async fn pay(&self, order_no: &str, amount_minor: i64, currency: &str) -> Value {
        let out = self
            .sim
            .gateway()
            .pay(PaymentRequest {
                order_no: order_no.into(),
                amount_minor,
                currency: currency.into(),
                method: payout_sim::gateway::Method::Wechat,
                account_id: "mch-1".into(),
                paid_at_ms: None,
            })
            .await;
        serde_json::to_value(&out).expect("payment outcome")
    }

    /// Give `user` `candy` through a paid, delivered recharge.
    pub async fn fund(&self, user: i64, candy: i64) {
        let order_no = format!("FUND-{user}-{}", uuid::Uuid::new_v4().simple());
        self.recharge_order(&order_no, user, candy).await;
        self.pay(&order_no, candy, "CNY").await;
        self.wait_order(&order_no, |o| o["status"] == 3).await;
    }

    /// A read; a projection still behind the write it waits for (503, on a loaded
    /// machine) is asked again, for at most 30 s.
    async fn read(&self, path: &str) -> (u16, Value) {
        let deadline = Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let (status, body) = self.app.get(path).await;
            if status != 503 || Instant::now() > deadline {
                return (status, body);
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    /// The log's head now: reads wait for it (read-your-writes).
    pub async fn head(&self) -> i64 {
        self.app.state.store.head_position().await.expect("head")
    }

    pub async fn order(&self, order_no: &str) -> Value {
        let at = self.head().await;
        let (status, body) = self
            .read(&format!("/v1/service-orders/{order_no}?min_position={at}"))
            .await;
        assert_eq!(status, 200, "{body}");
        body
    }

    pub async fn booking(&self, booking_no: &str) -> Value {
        let at = self.head().await;
        let (status, body) = self
            .read(&format!("/v1/bookings/{booking_no}?min_position={at}"))
            .await;
        assert_eq!(status, 200, "{body}");
        body
    }

    pub async fn refund(&self, refund_no: &str) -> Value {
        let at = self.head().await;
        let (status, body) = self
            .read(&format!("/v1/refunds/{refund_no}?min_position={at}"))
            .await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// (balance, held) of `user`'s candy account, or (0, 0) without one.
    pub async fn candy(&self, user: i64) -> (i64, i64) {
        let at = self.head().await;
        let (status, body) = self
            .read(&format!("/v1/candy-accounts/{user}?min_position={at}"))
            .await;
        match status {
            200 => (
                body["balance"].as_i64().unwrap(),
                body["held"].as_i64().unwrap(),
            ),
            404 => (0, 0),
            _ => panic!("candy account {user}: {status} {body}"),
        }
    }

    /// Book a call of `fan` with `artist` starting in `starts_in`, held at [`PRICE`].
    pub async fn book(
        &self,
        booking_no: &str,
        fan: i64,
        artist: i64,
        starts_in: Duration,
    ) -> Value {
        let (status, body) = self
            .app
            .post(
                "/v1/bookings",
                json!({"booking_no": booking_no, "fan_user_id": fan, "artist_id": artist,
                       "start_at": (Utc::now() + starts_in).to_rfc3339(), "minutes": 30,
                       "price_candy": PRICE}),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        self.booking(booking_no).await
    }

    /// `POST /v1/bookings/{no}:{action}`.
    pub async fn action(&self, booking_no: &str, action: &str, body: Value) -> (u16, Value) {
        self.app
            .post(&format!("/v1/bookings/{booking_no}:{action}"), body)
            .await
    }

    /// Wait (at most 30 s) until the order read satisfies `done`.
    pub async fn wait_order(&self, order_no: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let (status, o) = self.read(&format!("/v1/service-orders/{order_no}")).await;
            if status == 200 && done(&o) {
                return o;
            }
            assert!(
                Instant::now() < deadline,
                "order {order_no} never got there: {o}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// Wait (at most 30 s) until `path` answers 200 with a body satisfying `done`.
    pub async fn wait(&self, path: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let (status, v) = self.read(path).await;
            if status == 200 && done(&v) {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "{path} never got there: {status} {v}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// Candy conservation across streams (the reconciliation check's identities),
    /// once the projection caught up with the log.
    pub async fn conserved(&self) -> factledger::services::reconcile::CandyTotals {
        let head = self.app.state.store.head_position().await.expect("head");
        self.wait(
            &format!("/v1/subscriptions?fan_user_id=1&min_position={head}"),
            |_| true,
        )
        .await;
        let t = factledger::services::reconcile::totals(&self.app.state.db)
            .await
            .expect("totals");
        assert!(t.findings().is_empty(), "candy does not add up: {t:?}");
        t
    }
}
