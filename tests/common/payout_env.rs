//! A service paying through an in-process payout simulator, with a funded user who
//! has a payment password, verified KYC and a verified payout account.

use crate::common::app::{spawn_app, App};
use crate::common::TestDb;
use factledger::payouts::password::Cost;
use factledger::payouts::policy::{Limits, PayoutPolicy};
use factledger::server::payouts::PayoutProviderConfig;
use payout_sim::{Fault, SimConfig, SimHandle};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Shaped like a Xendit test-mode secret key (the adapter refuses any other shape).
pub const SECRET: &str = "xnd_development_sim_secret";
pub const CALLBACK_TOKEN: &str = "cb-token";
pub const PASSWORD: &str = "123456-right";

pub struct PayoutEnv {
    pub app: App,
    pub sim: SimHandle,
}

/// Limits for tests: 1,000 to 1,000,000, 5 a day, review at 500,000, no new-account
/// review (each test verifies its account just before).
pub fn test_limits() -> Limits {
    Limits {
        min_minor: 1_000,
        max_minor: 1_000_000,
        daily_count: 5,
        daily_amount_minor: 5_000_000,
        review_at_or_above_minor: 500_000,
        review_account_younger_than_hours: 0,
    }
}

impl PayoutEnv {
    /// The service with the simulator as its provider (1 s client timeout), and
    /// callbacks from the simulator to the service.
    pub async fn start(db: &TestDb) -> PayoutEnv {
        PayoutEnv::start_with(db, test_limits()).await
    }

    pub async fn start_with(db: &TestDb, limits: Limits) -> PayoutEnv {
        PayoutEnv::start_configured(db, limits, |_| {}).await
    }

    /// [`PayoutEnv::start_with`], and `extra` changes the options further.
    pub async fn start_configured(
        db: &TestDb,
        limits: Limits,
        extra: impl FnOnce(&mut factledger::server::ServeOptions) + Send + 'static,
    ) -> PayoutEnv {
        let sim = payout_sim::spawn(SimConfig {
            secret: SECRET.into(),
            callback_token: CALLBACK_TOKEN.into(),
            ..SimConfig::default()
        })
        .await
        .expect("simulator starts");
        let base_url = sim.base_url();
        let app = spawn_app(db)
            .settlement_off()
            .configure(move |o| {
                o.job_scan_interval_ms = Some(100);
                o.payout_provider_config = Some(PayoutProviderConfig {
                    base_url,
                    secret_key: SECRET.into(),
                    callback_token: CALLBACK_TOKEN.into(),
                    timeout: Some(Duration::from_millis(1_000)),
                });
                o.payouts.policy = Arc::new(PayoutPolicy {
                    default: limits,
                    currencies: Default::default(),
                });
                // Cheap hashes: the tests exercise the rules, not argon2's cost.
                o.payouts.password_cost = Cost {
                    memory_kib: 1_024,
                    iterations: 1,
                    lanes: 1,
                };
                extra(o);
            })
            .spawn()
            .await;
        sim.sim
            .set_settings(
                None,
                Some(format!("{}/v1/callbacks/xendit", app.base)),
                None,
            )
            .expect("simulator settings");
        PayoutEnv { app, sim }
    }

    pub async fn send(
        &self,
        method: &str,
        path: &str,
        key: Option<&str>,
        body: Value,
    ) -> (u16, Value, bool) {
        let url = format!("{}{path}", self.app.base);
        let mut r = match method {
            "PUT" => self.app.client.put(url),
            _ => self.app.client.post(url),
        }
        .bearer_auth(&self.app.admin)
        .json(&body);
        if let Some(k) = key {
            r = r.header("Idempotency-Key", k);
        }
        let r = r.send().await.expect("request");
        let status = r.status().as_u16();
        let replayed = r.headers().get("idempotent-replayed").is_some();
        (status, r.json().await.unwrap_or(Value::Null), replayed)
    }

    /// User `user` with wallet `w-{user}` holding `available` IDR, a payment password,
    /// verified KYC and the verified account `pa-{user}`.
    pub async fn user(&self, user: &str, available: i64) {
        let wallet = format!("/v1/wallets/w-{user}/commands");
        for body in [
            json!({"type": "Open", "user_id": user, "currency": "IDR"}),
            json!({"type": "CreditPending", "ref_type": "COMMISSION", "ref_id": format!("c-{user}"), "amount_minor": available}),
            json!({"type": "ReleasePending", "ref_type": "COMMISSION", "ref_id": format!("c-{user}"), "amount_minor": available}),
        ] {
            let (status, answer) = self.app.post(&wallet, body).await;
            assert_eq!(status, 200, "{answer}");
        }
        let (status, answer, _) = self
            .send(
                "PUT",
                &format!("/v1/users/{user}/payment-password"),
                None,
                json!({"password": PASSWORD}),
            )
            .await;
        assert_eq!(status, 204, "{answer}");
        let steps = [
            (
                format!("/v1/users/{user}/kyc"),
                json!({"status": "VERIFIED", "reason": "documents checked"}),
            ),
            (
                format!("/v1/users/{user}/payout-accounts"),
                json!({"account_id": format!("pa-{user}"), "channel_code": "ID_BCA",
                       "account_number": "1234567890", "account_holder": "Budi Santoso"}),
            ),
            (
                format!("/v1/users/{user}/payout-accounts/pa-{user}:verify"),
                json!({}),
            ),
        ];
        for (path, body) in steps {
            let (status, answer) = self.app.post(&path, body).await;
            assert_eq!(status, 200, "{path}: {answer}");
        }
    }

    pub fn request_body(user: &str, amount: i64) -> Value {
        json!({"user_id": user, "wallet_id": format!("w-{user}"), "amount_minor": amount,
               "currency": "IDR", "payout_account_id": format!("pa-{user}"),
               "payment_password": PASSWORD})
    }

    /// Request `amount` for `user` under `key`; the withdrawal id.
    pub async fn request(&self, user: &str, amount: i64, key: &str) -> String {
        let (status, answer, _) = self
            .send(
                "POST",
                "/v1/withdrawals",
                Some(key),
                Self::request_body(user, amount),
            )
            .await;
        assert_eq!(status, 201, "{answer}");
        answer["withdrawal_id"].as_str().unwrap().to_owned()
    }

    /// Script a fault for the payout of withdrawal `id` (its first reference).
    pub fn fault(&self, reference: &str, fault: Fault) {
        self.sim.sim.add_fault(reference, fault).expect("fault");
    }

    pub async fn withdrawal(&self, id: &str) -> Value {
        let (status, answer) = self.app.get(&format!("/v1/withdrawals/{id}")).await;
        assert_eq!(status, 200, "{answer}");
        answer
    }

    /// Wait (at most 30 s) until withdrawal `id` is in `status`.
    pub async fn wait_status(&self, id: &str, status: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let w = self.withdrawal(id).await;
            if w["status"] == status {
                return w;
            }
            assert!(
                Instant::now() < deadline,
                "{id} never reached {status}: {w:#}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The wallet of `user`, from its stream (`/v1/wallets/{id}` waits for the
    /// projection to pass the withdrawal's position).
    pub async fn wallet(&self, user: &str) -> Value {
        let head = self.app.store.head_position().await.expect("head");
        let (status, answer) = self
            .app
            .get(&format!("/v1/wallets/w-{user}?min_position={head}"))
            .await;
        assert_eq!(status, 200, "{answer}");
        answer
    }

    /// How many payouts the simulator created for each reference.
    pub fn creates(&self, reference: &str) -> u64 {
        self.sim
            .sim
            .payouts()
            .creates_per_external_id
            .get(reference)
            .copied()
            .unwrap_or(0)
    }
}
