//! Issue 17 item 8: reconciliation holds each withdrawal's stream to its ledger
//! entries and each wallet's frozen bucket to its withdrawals in flight, and compares
//! our payouts with the provider's daily report (missing on either side, or settled
//! differently) — every disagreement an `event` finding for a person, in the JSON
//! and the HTML report. Both backends.

use crate::common::{meta, TestDb};
use crate::payout_env::PayoutEnv;
use factledger::runtime::unit::run_unit;
use factledger_aggregates::withdrawal::{
    OutcomeSource, PayoutOutcome, Withdrawal, WithdrawalError, WithdrawalEvent,
};
use payout_sim::Fault;
use serde_json::Value;
use std::time::{Duration, Instant};

/// Start a reconciliation over HTTP and wait for its run.
async fn reconcile(env: &PayoutEnv) -> (String, Value) {
    let (status, started) = env
        .app
        .post("/v1/reconciliations", serde_json::json!({}))
        .await;
    assert_eq!(status, 202, "{started}");
    let id = started["id"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, run) = env.app.get(&format!("/v1/reconciliations/{id}")).await;
        if run["status"] != "running" {
            assert_eq!(run["status"], "succeeded", "{run}");
            return (id, run);
        }
        assert!(Instant::now() < deadline, "reconciliation never finished");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn kinds(run: &Value) -> Vec<(String, String)> {
    let mut k: Vec<_> = run["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["kind"].as_str().unwrap().to_owned(),
                f["key"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    k.sort();
    k
}

both_backends!(
    reconciliation_holds_withdrawals_to_their_ledger_and_to_the_providers_report,
    |db: TestDb| async move {
        let env = PayoutEnv::start(&db).await;
        env.user("u-1", 200_000).await;
        let scope = format!("key:{}", env.app.admin_key_id);
        let id_of = |key: &str| factledger::payouts::api::withdrawal_id_for(&scope, key);
        let paid = env.request("u-1", 10_000, "k-paid").await;
        let failed = id_of("k-failed");
        env.fault(
            &failed,
            Fault::Fail {
                failure_code: "INVALID_DESTINATION".into(),
            },
        );
        env.request("u-1", 20_000, "k-failed").await;
        env.wait_status(&paid, "PAID").await;
        env.wait_status(&failed, "FAILED").await;
        // One left in flight: the provider holds it PENDING.
        env.sim.sim.set_settings(Some(600_000), None, None).unwrap();
        let flying = env.request("u-1", 30_000, "k-flying").await;
        env.wait_status(&flying, "PROCESSING").await;

        let (_, clean) = reconcile(&env).await;
        assert_eq!(clean["counts"]["event"], 0, "{clean:#}");
        assert!(
            clean["withdrawals_checked"].as_u64().unwrap() >= 3,
            "{clean}"
        );

        // The provider turns the failed payout into a success (its webhook only
        // records a contradiction), and pays a reference we never asked for.
        env.sim
            .sim
            .complete(&failed, payout_sim::Status::Completed, None)
            .unwrap();
        let ghost = serde_json::json!({"external_id": "wd-ghost", "amount": 5000, "currency": "IDR",
            "bank_code": "ID_BCA", "account_holder_name": "X", "account_number": "1", "description": "?"});
        let created = reqwest::Client::new()
            .post(format!("{}/disbursements", env.sim.base_url()))
            .basic_auth(crate::payout_env::SECRET, Some(""))
            .header("X-IDEMPOTENCY-KEY", "wd-ghost")
            .json(&ghost)
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), 200);
        // Someone with database access marks the one in flight PAID without its
        // payout in the wallet.
        let outcome = PayoutOutcome {
            actor: "intruder".into(),
            reason: "edited".into(),
            source: OutcomeSource::Operator,
            attempt: None,
            idempotency_key: flying.clone(),
            provider_payout_id: None,
            call: None,
            at: chrono::Utc::now(),
        };
        let f = flying.clone();
        let edited = run_unit::<(), WithdrawalError, _, _>(&db.store, &meta(), |mut unit| {
            let (f, outcome) = (f.clone(), outcome.clone());
            async move {
                let mut w = unit.load::<Withdrawal, WithdrawalError>(&f).await?;
                unit.append::<Withdrawal, WithdrawalError>(
                    &mut w,
                    &f,
                    &[WithdrawalEvent::PayoutSucceeded(outcome)],
                )?;
                Ok(((), unit))
            }
        })
        .await
        .unwrap();
        // The provider check reads `withdrawal_records`: wait until the projection has
        // the edit (this store does not wake the service's projectors, they poll).
        let (status, page) = env
            .app
            .get(&format!(
                "/v1/withdrawals?limit=1&min_position={}",
                edited.position
            ))
            .await;
        assert_eq!(status, 200, "{page}");
        assert!(
            page["position"].as_i64().unwrap() >= edited.position,
            "{page}"
        );

        let deadline = Instant::now() + Duration::from_secs(10);
        while env.withdrawal(&failed).await["contradictions"] != 1 {
            assert!(
                Instant::now() < deadline,
                "the contradicting webhook never arrived"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (id, run) = reconcile(&env).await;
        let found = kinds(&run);
        let want = [
            (
                "provider_report_mismatch".to_owned(),
                format!("withdrawal={failed}"),
            ),
            (
                "provider_report_mismatch".to_owned(),
                "withdrawal=wd-ghost".to_owned(),
            ),
            // PAID here, still PENDING at the provider.
            (
                "provider_report_mismatch".to_owned(),
                format!("withdrawal={flying}"),
            ),
            (
                "withdrawal_ledger_mismatch".to_owned(),
                format!("withdrawal={flying}"),
            ),
            (
                "withdrawal_ledger_mismatch".to_owned(),
                "wallet_id=w-u-1".to_owned(),
            ),
        ];
        for w in &want {
            assert!(found.contains(w), "{w:?} not in {found:?}");
        }
        assert!(
            run["findings"]
                .as_array()
                .unwrap()
                .iter()
                .all(|f| f["class"] == "event"),
            "never repaired automatically: {run:#}"
        );
        let page = env
            .app
            .client
            .get(format!(
                "{}/v1/reconciliations/{id}/report.html",
                env.app.base
            ))
            .bearer_auth(&env.app.admin)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            page.contains("provider_report_mismatch")
                && page.contains("withdrawal_ledger_mismatch"),
            "{page}"
        );
    }
);
