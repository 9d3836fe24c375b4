//! Acceptance 11 (R-PAY-5): the provider pays, the worker process is SIGKILLed before
//! it records the answer; after a restart the open attempt counts as unknown, the
//! query by reference restores PROCESSING/PAID, and the simulator shows exactly one
//! payout. A real `factledger serve` child process, both backends.

use crate::common::serve_child::ServeChild;
use crate::common::TestDb;
use payout_sim::{Fault, SimConfig};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// `factledger serve` paying through the simulator at `sim`, with a short payout lease.
fn start_serve(dir: &std::path::Path, url: &str, sim: &str) -> ServeChild {
    ServeChild::start(
        dir,
        url,
        &[
            "--payout-url",
            sim,
            "--payout-lease-ms",
            "1500",
            "--settlement-every",
            "off",
        ],
        &[
            ("FACTLEDGER_PAYOUT_SECRET", "xnd_development_crash_secret"),
            ("FACTLEDGER_PAYOUT_CALLBACK_TOKEN", "crash-token"),
            ("FACTLEDGER_PASSWORD_COST", "1024,1,1"),
        ],
    )
}

async fn call(
    base: &str,
    key: &str,
    method: reqwest::Method,
    path: &str,
    idem: Option<&str>,
    body: Value,
) -> Value {
    let mut r = reqwest::Client::new()
        .request(method, format!("{base}{path}"))
        .bearer_auth(key)
        .json(&body);
    if let Some(k) = idem {
        r = r.header("Idempotency-Key", k);
    }
    let r = r.send().await.expect("request");
    let status = r.status().as_u16();
    let v = r.json().await.unwrap_or(Value::Null);
    assert!((200..300).contains(&status), "{path}: {status} {v}");
    v
}

async fn wait_for(base: &str, key: &str, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(45);
    loop {
        let w = call(
            base,
            key,
            reqwest::Method::GET,
            &format!("/v1/withdrawals/{id}"),
            None,
            Value::Null,
        )
        .await;
        if done(&w) {
            return w;
        }
        assert!(Instant::now() < deadline, "gave up waiting: {w:#}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

both_backends!(
    acceptance_11_a_worker_killed_after_the_provider_paid_is_restored_by_the_query,
    |db: TestDb| async move {
        use reqwest::Method as M;
        // No webhooks: after the kill, only the query can tell what happened.
        let sim = payout_sim::spawn(SimConfig {
            secret: "xnd_development_crash_secret".into(),
            callback_token: "crash-token".into(),
            ..SimConfig::default()
        })
        .await
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let serve = start_serve(dir.path(), &db.url, &sim.base_url());
        let admin =
            std::fs::read_to_string(dir.path().join(factledger::infra::auth::ADMIN_KEY_FILE))
                .unwrap();
        let (base, key) = (serve.base.clone(), admin.trim().to_owned());
        for body in [
            json!({"type": "Open", "user_id": "u-1", "currency": "IDR"}),
            json!({"type": "CreditPending", "ref_type": "COMMISSION", "ref_id": "c-1", "amount_minor": 100_000}),
            json!({"type": "ReleasePending", "ref_type": "COMMISSION", "ref_id": "c-1", "amount_minor": 100_000}),
        ] {
            call(&base, &key, M::POST, "/v1/wallets/w-1/commands", None, body).await;
        }
        call(
            &base,
            &key,
            M::PUT,
            "/v1/users/u-1/payment-password",
            None,
            json!({"password": "pw-123456"}),
        )
        .await;
        call(
            &base,
            &key,
            M::POST,
            "/v1/users/u-1/kyc",
            None,
            json!({"status": "VERIFIED", "reason": "ok"}),
        )
        .await;
        call(&base, &key, M::POST, "/v1/users/u-1/payout-accounts", None,
             json!({"account_id": "pa-1", "channel_code": "ID_BCA", "account_number": "123", "account_holder": "Budi"})).await;
        call(
            &base,
            &key,
            M::POST,
            "/v1/users/u-1/payout-accounts/pa-1:verify",
            None,
            json!({}),
        )
        .await;
        // The account is new: the risk rule holds the request for review, which
        // leaves time to script the provider before the worker calls it.
        let w = call(
            &base,
            &key,
            M::POST,
            "/v1/withdrawals",
            Some("k-1"),
            json!({"user_id": "u-1", "wallet_id": "w-1", "amount_minor": 40_000, "currency": "IDR",
                   "payout_account_id": "pa-1", "payment_password": "pw-123456"}),
        )
        .await;
        assert_eq!(w["status"], "REQUESTED", "{w}");
        let id = w["withdrawal_id"].as_str().unwrap().to_owned();
        sim.sim
            .add_fault(&id, Fault::SlowSuccess { delay_ms: 5_000 })
            .unwrap();
        call(
            &base,
            &key,
            M::POST,
            &format!("/v1/withdrawals/{id}:approve"),
            None,
            json!({"reason": "checked"}),
        )
        .await;
        // The attempt is on record and the provider holds the call: kill the worker.
        wait_for(&base, &key, &id, |w| {
            w["attempts"][0]["started_at"].is_string()
        })
        .await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while sim.sim.payouts().disbursements.is_empty() {
            assert!(Instant::now() < deadline, "the provider never got the call");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        drop(serve);
        let before = call_after_restart_free(&sim, &id);
        assert_eq!(before, 1, "the provider made the payout before the kill");
        let serve = start_serve(dir.path(), &db.url, &sim.base_url());
        let w = wait_for(&serve.base, &key, &id, |w| {
            w["status"] == "PROCESSING" || w["status"] == "PAID"
        })
        .await;
        if w["status"] == "PROCESSING" {
            sim.sim
                .complete(&id, payout_sim::Status::Succeeded, None)
                .unwrap();
        }
        let w = wait_for(&serve.base, &key, &id, |w| w["status"] == "PAID").await;
        let names: Vec<&str> = w["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["event_type"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"PayoutOutcomeUnknown"), "{names:?}");
        assert_eq!(
            w["attempts"].as_array().unwrap().len(),
            1,
            "no second call: {names:?}"
        );
        assert_eq!(
            sim.sim.payouts().disbursements.len(),
            1,
            "exactly one payout"
        );
        assert_eq!(sim.sim.payouts().creates_per_external_id.get(&id), Some(&1));
        let position = w["position"].as_i64().unwrap();
        let wallet = call(
            &serve.base,
            &key,
            M::GET,
            &format!("/v1/wallets/w-1?min_position={position}"),
            None,
            Value::Null,
        )
        .await;
        assert_eq!(
            (
                wallet["available_minor"].as_i64(),
                wallet["frozen_minor"].as_i64()
            ),
            (Some(60_000), Some(0)),
            "{wallet}"
        );
    }
);

/// Payouts the simulator made for `id`.
fn call_after_restart_free(sim: &payout_sim::SimHandle, id: &str) -> u64 {
    sim.sim
        .payouts()
        .creates_per_external_id
        .get(id)
        .copied()
        .unwrap_or(0)
}
