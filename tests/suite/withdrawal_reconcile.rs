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
use std::time::Duration;

/// Start a reconciliation over HTTP and wait for its run.
async fn reconcile(env: &PayoutEnv) -> (String, Value) {
    let run = env.app.reconciled(serde_json::json!({})).await;
    (run["id"].as_str().unwrap().to_owned(), run)
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
            .complete(&failed, payout_sim::Status::Succeeded, None)
            .unwrap();
        let ghost = serde_json::json!({"reference_id": "wd-ghost", "channel_code": "ID_BCA",
            "channel_properties": {"account_number": "1", "account_holder_name": "X"},
            "amount": 5000, "currency": "IDR", "description": "?"});
        let created = reqwest::Client::new()
            .post(format!("{}/v2/payouts", env.sim.base_url()))
            .basic_auth(crate::payout_env::SECRET, Some(""))
            .header("Idempotency-key", "wd-ghost")
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

        crate::common::eventually(Duration::from_secs(10), || async {
            env.withdrawal(&failed).await["contradictions"] == 1
        })
        .await
        .expect("the contradicting webhook arrives");
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

both_backends!(
    a_wallet_whose_frozen_bucket_contradicts_its_withdrawal_in_flight_is_never_repaired,
    |db: TestDb| async move {
        let env = PayoutEnv::start(&db).await;
        env.user("u-1", 100_000).await;
        // The provider holds the payout PENDING: the withdrawal stays in flight with
        // 40,000 frozen.
        env.sim.sim.set_settings(Some(600_000), None, None).unwrap();
        let flying = env.request("u-1", 40_000, "k-flying").await;
        env.wait_status(&flying, "PROCESSING").await;
        // Someone with access to the append path unfreezes the money on the wallet
        // alone (the wallet aggregate checks only its bucket) ...
        let bus =
            factledger::runtime::bus::CommandBus::<factledger_aggregates::wallet::Wallet>::start(
                db.store.clone(),
            );
        crate::common::run(
            &bus,
            "w-u-1",
            serde_json::json!({"type": "Unfreeze", "ref_type": "WITHDRAWAL", "ref_id": flying, "amount_minor": 40_000}),
        )
        .await;
        let head = db.store.head_position().await.unwrap();
        let (status, w) = env
            .app
            .get(&format!("/v1/wallets/w-u-1?min_position={head}"))
            .await;
        assert_eq!((status, w["frozen_minor"].as_i64()), (200, Some(0)), "{w}");
        // ... while the projection still says what the withdrawals say.
        env.app
            .state
            .store
            .execute_raw(
                "UPDATE wallet_balances SET frozen_minor = 40000, available_minor = 60000 \
                 WHERE wallet_id = 'w-u-1'",
            )
            .await
            .unwrap();

        // Drift to the wallet pass, a contradiction to the withdrawal check: repair
        // refuses the wallet rather than drop the freeze the withdrawal still holds.
        let run = env
            .app
            .reconciled(serde_json::json!({"repair": true}))
            .await;
        let findings = run["findings"].as_array().unwrap();
        assert!(
            findings
                .iter()
                .any(|f| f["class"] == "event" && f["wallet_id"] == "w-u-1"),
            "{run:#}"
        );
        let drift: Vec<_> = findings
            .iter()
            .filter(|f| f["class"] == "projection_drift" && f["wallet_id"] == "w-u-1")
            .collect();
        assert!(!drift.is_empty(), "{run:#}");
        for f in drift {
            assert_ne!(f["repaired"], true, "{f}");
            assert!(f["repair"].as_str().unwrap().contains("contradict"), "{f}");
        }
        let frozen = crate::common::scalar(
            &env.app.state.db,
            "SELECT frozen_minor FROM wallet_balances WHERE wallet_id = 'w-u-1'",
        )
        .await;
        assert_eq!(
            frozen, 40_000,
            "the freeze the withdrawal holds was not dropped"
        );
    }
);
