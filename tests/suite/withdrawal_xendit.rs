//! Issue 33 item 1: Xendit's payout webhooks in their documented shape, through the
//! HTTP API and the callback inbox. The provider side is the payout simulator held
//! at `ACCEPTED` (it never settles by itself), so whatever the worker's look-ups
//! find, only a webhook can settle a withdrawal: polling cannot pay anything here.

use crate::common::{eventually, TestDb};
use crate::payout_env::{PayoutEnv, CALLBACK_TOKEN};
use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};
use serde_json::{json, Value};
use std::time::Duration;

/// The settle delay that keeps every simulated payout ACCEPTED for the test.
const NEVER_MS: u64 = 3_600_000;

/// Xendit's payout webhook envelope (docs, "Payout webhook") for the simulator's
/// payout of `reference` reporting `status`.
fn envelope(env: &PayoutEnv, reference: &str, status: &str, failure_code: Option<&str>) -> Value {
    let d = env
        .sim
        .sim
        .by_external_id(reference)
        .pop()
        .expect("the payout exists");
    let event = match status {
        "SUCCEEDED" => "payout.succeeded",
        "FAILED" => "payout.failed",
        "REVERSED" => "payout.reversed",
        _ => "payout.accepted",
    };
    let mut data = json!({
        "id": d.id,
        "amount": d.request.amount_minor, // IDR: whole rupiah
        "channel_code": d.request.channel_code,
        "currency": "IDR",
        "status": status,
        "description": d.request.description,
        "reference_id": reference,
        "created": "2026-05-01T10:00:00Z",
        "updated": "2026-05-01T10:05:00Z",
        "estimated_arrival_time": "2026-05-01T10:15:00Z",
        "business_id": payout_sim::BUSINESS_ID,
        "channel_properties": {
            "account_number": d.request.account_number,
            "account_holder_name": d.request.account_holder_name,
        },
    });
    if let Some(code) = failure_code {
        data["failure_code"] = json!(code);
    }
    json!({"event": event, "business_id": payout_sim::BUSINESS_ID,
           "created": "2026-05-01T10:05:01Z", "data": data})
}

/// POSTs one webhook delivery to the service; the HTTP status.
async fn deliver(env: &PayoutEnv, token: &str, webhook_id: Option<&str>, body: &Value) -> u16 {
    let mut r = env
        .app
        .client
        .post(format!("{}/v1/callbacks/xendit", env.app.base))
        .header("x-callback-token", token)
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(id) = webhook_id {
        r = r.header("webhook-id", id);
    }
    r.send().await.expect("delivery").status().as_u16()
}

/// Ledger entries of `user`'s wallet with this entry type.
async fn entries(env: &PayoutEnv, user: &str, entry_type: &str) -> usize {
    let head = env.app.store.head_position().await.unwrap();
    let (status, page) = env
        .app
        .get(&format!(
            "/v1/wallets/w-{user}/ledger?limit=1000&min_position={head}"
        ))
        .await;
    assert_eq!(status, 200, "{page}");
    page["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["entry_type"] == entry_type)
        .count()
}

async fn status_of(env: &PayoutEnv, id: &str) -> String {
    env.withdrawal(id).await["status"]
        .as_str()
        .unwrap_or("?")
        .to_owned()
}

/// Waits (at most 30 s) until withdrawal `id` is in `status`.
async fn reaches(env: &PayoutEnv, id: &str, status: &str) {
    let reached = eventually(Duration::from_secs(30), || async {
        status_of(env, id).await == status
    })
    .await;
    assert!(
        reached.is_ok(),
        "{id} never reached {status}: {}",
        env.withdrawal(id).await
    );
}

both_backends!(
    a_documented_payout_succeeded_webhook_moves_a_withdrawal_to_paid_without_polling,
    |db: TestDb| async move {
        let env = PayoutEnv::start(&db).await;
        env.sim
            .sim
            .set_settings(Some(NEVER_MS), None, None)
            .unwrap();
        env.user("u-1", 100_000).await;
        let id = env.request("u-1", 25_000, "k-1").await;
        reaches(&env, &id, "PROCESSING").await;
        let body = envelope(&env, &id, "SUCCEEDED", None);
        // A forged token is refused before anything is stored.
        assert_eq!(
            deliver(&env, "not-the-token", Some("whk-1"), &body).await,
            401
        );
        assert_eq!(
            deliver(&env, CALLBACK_TOKEN, Some("whk-1"), &body).await,
            200
        );
        reaches(&env, &id, "PAID").await;
        let w = env.withdrawal(&id).await;
        let paid = w["events"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["event_type"] == "PayoutSucceeded")
            .expect("a PayoutSucceeded event")
            .clone();
        assert_eq!(paid["payload"]["source"], "WEBHOOK", "{paid}");
        assert_eq!(
            env.sim.sim.by_external_id(&id)[0].status,
            payout_sim::Status::Accepted,
            "the provider still says ACCEPTED: no look-up could have paid it"
        );
        // Xendit re-sends: the same webhook-id is a duplicate, and without the
        // header the id is `<payout id>:SUCCEEDED` — stored, and moves nothing.
        assert_eq!(
            deliver(&env, CALLBACK_TOKEN, Some("whk-1"), &body).await,
            200
        );
        assert_eq!(deliver(&env, CALLBACK_TOKEN, None, &body).await, 200);
        assert_eq!(deliver(&env, CALLBACK_TOKEN, None, &body).await, 200);
        let (status, list) = env.app.get("/v1/callbacks?provider=xendit&limit=100").await;
        assert_eq!(status, 200, "{list}");
        let ids: Vec<&str> = list["callbacks"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c["provider_event_id"].as_str())
            .collect();
        let payout_id = env.sim.sim.by_external_id(&id)[0].id.clone();
        assert!(ids.contains(&"whk-1"), "{list}");
        assert!(
            ids.contains(&format!("{payout_id}:SUCCEEDED").as_str()),
            "{list}"
        );
        assert_eq!(entries(&env, "u-1", "WITHDRAW_PAYOUT").await, 1);
    }
);

both_backends!(
    a_reversal_after_paid_is_recorded_reconciled_and_alerted_and_moves_no_money,
    |db: TestDb| async move {
        let env = PayoutEnv::start(&db).await;
        env.sim
            .sim
            .set_settings(Some(NEVER_MS), None, None)
            .unwrap();
        env.user("u-1", 100_000).await;
        let id = env.request("u-1", 25_000, "k-1").await;
        reaches(&env, &id, "PROCESSING").await;
        let paid = envelope(&env, &id, "SUCCEEDED", None);
        assert_eq!(deliver(&env, CALLBACK_TOKEN, None, &paid).await, 200);
        reaches(&env, &id, "PAID").await;
        let reversed = envelope(&env, &id, "REVERSED", None);
        assert_eq!(deliver(&env, CALLBACK_TOKEN, None, &reversed).await, 200);
        let recorded = eventually(Duration::from_secs(10), || async {
            env.withdrawal(&id).await["contradictions"] == 1
        })
        .await;
        assert!(recorded.is_ok(), "{}", env.withdrawal(&id).await);
        assert_eq!(
            status_of(&env, &id).await,
            "PAID",
            "never silently anything else"
        );
        assert_eq!(entries(&env, "u-1", "WITHDRAW_PAYOUT").await, 1);
        assert_eq!(entries(&env, "u-1", "WITHDRAW_UNFREEZE").await, 0);
        let alerts = env
            .app
            .state
            .db
            .fetch_i64(
                "SELECT COUNT(*) FROM outbox WHERE type = 'alert.payout.reversed'",
                &[],
            )
            .await
            .unwrap();
        assert_eq!(alerts, 1, "a person is told");
        // The provider's transactions say REVERSED too (no more webhooks from it):
        // reconciliation names the reversal, not a payout missing.
        env.sim
            .sim
            .set_settings(None, Some(String::new()), None)
            .unwrap();
        env.sim
            .sim
            .complete(&id, payout_sim::Status::Succeeded, None)
            .unwrap();
        env.sim
            .sim
            .complete(&id, payout_sim::Status::Reversed, None)
            .unwrap();
        let run = env.app.reconciled(json!({})).await;
        let reversal: Vec<&Value> = run["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["kind"] == "provider_report_mismatch")
            .collect();
        assert_eq!(reversal.len(), 1, "{run:#}");
        let message = reversal[0].to_string();
        assert!(message.contains("reversed"), "{message}");
    }
);

/// What one withdrawal's payout really came to at the provider.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Truth {
    Succeeded,
    Failed,
}

both_backends!(
    randomized_duplicate_reordered_and_forged_webhooks_never_pay_or_credit_twice,
    |db: TestDb| async move {
        const SEED: u64 = 0x5eed_0033;
        const USERS: usize = 2;
        const PER_USER: usize = 4;
        const AMOUNT: i64 = 10_000;
        let mut rng = rand::rngs::StdRng::seed_from_u64(SEED);
        let env = PayoutEnv::start(&db).await;
        env.sim
            .sim
            .set_settings(Some(NEVER_MS), None, None)
            .unwrap();
        let mut ids = Vec::new();
        for u in 0..USERS {
            let user = format!("u-{u}");
            env.user(&user, 1_000_000).await;
            for k in 0..PER_USER {
                let id = env.request(&user, AMOUNT, &format!("k-{u}-{k}")).await;
                ids.push((user.clone(), id));
            }
        }
        for (_, id) in &ids {
            reaches(&env, id, "PROCESSING").await;
        }
        // Each payout's truth, and a shuffled pile of deliveries about it: the true
        // event 1 to 3 times (a webhook-id repeated, or none: `<id>:<status>`), a
        // stale ACCEPTED, and forgeries (a wrong token, the opposite outcome).
        let mut truths = Vec::new();
        let mut pile: Vec<(bool, Option<String>, Value)> = Vec::new();
        for (n, (user, id)) in ids.iter().enumerate() {
            let truth = if rng.random_bool(0.5) {
                Truth::Succeeded
            } else {
                Truth::Failed
            };
            truths.push((user.clone(), id.clone(), truth));
            let real = match truth {
                Truth::Succeeded => envelope(&env, id, "SUCCEEDED", None),
                Truth::Failed => envelope(&env, id, "FAILED", Some("INVALID_DESTINATION")),
            };
            let webhook_id = format!("whk-{n}");
            for _ in 0..rng.random_range(1..=3) {
                let header = rng.random_bool(0.6).then(|| webhook_id.clone());
                pile.push((true, header, real.clone()));
            }
            if rng.random_bool(0.5) {
                pile.push((true, None, envelope(&env, id, "ACCEPTED", None)));
            }
            let opposite = match truth {
                Truth::Succeeded => envelope(&env, id, "FAILED", Some("INVALID_DESTINATION")),
                Truth::Failed => envelope(&env, id, "SUCCEEDED", None),
            };
            for _ in 0..rng.random_range(1..=2) {
                pile.push((false, Some(format!("forged-{n}")), opposite.clone()));
            }
        }
        pile.shuffle(&mut rng);
        for chunk in pile.chunks(4) {
            let sends = chunk.iter().map(|(genuine, header, body)| {
                let token = if *genuine {
                    CALLBACK_TOKEN
                } else {
                    "forged-token"
                };
                deliver(&env, token, header.as_deref(), body)
            });
            for (status, (genuine, _, _)) in
                futures::future::join_all(sends).await.iter().zip(chunk)
            {
                if *genuine {
                    assert!(*status == 200 || *status == 202, "{status}");
                } else {
                    assert_eq!(*status, 401, "a forged delivery is refused");
                }
            }
        }
        for (_, id, truth) in &truths {
            let want = if *truth == Truth::Succeeded {
                "PAID"
            } else {
                "FAILED"
            };
            reaches(&env, id, want).await;
        }
        for u in 0..USERS {
            let user = format!("u-{u}");
            let mine = || truths.iter().filter(|(who, _, _)| *who == user);
            let paid = mine().filter(|(_, _, t)| *t == Truth::Succeeded).count();
            let failed = mine().count() - paid;
            assert_eq!(
                entries(&env, &user, "WITHDRAW_PAYOUT").await,
                paid,
                "{user}"
            );
            assert_eq!(
                entries(&env, &user, "WITHDRAW_UNFREEZE").await,
                failed,
                "{user}"
            );
            let w = env.wallet(&user).await;
            assert_eq!(
                (
                    w["available_minor"].as_i64().unwrap(),
                    w["frozen_minor"].as_i64().unwrap()
                ),
                (1_000_000 - AMOUNT * paid as i64, 0),
                "{user}: seed {SEED:#x}"
            );
        }
        for (_, id, _) in &truths {
            let w = env.withdrawal(id).await;
            let settled = w["events"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| {
                    e["event_type"] == "PayoutSucceeded" || e["event_type"] == "PayoutFailed"
                })
                .count();
            assert_eq!(settled, 1, "{id} settled once: {w}");
        }
    }
);
