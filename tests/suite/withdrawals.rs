//! Issue 17: withdrawals end to end through the payout simulator, both backends —
//! the request unit (acceptance 10, limits under concurrency, the checks of R-PAY-1),
//! the worker against provider faults (timeouts, 5xx, the provider's balance), the
//! webhooks (acceptance 12) and the reads.

use crate::common::TestDb;
use crate::payout_env::{test_limits, PayoutEnv, PASSWORD};
use payout_sim::Fault;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The event types of a withdrawal read, in order.
fn event_names(w: &Value) -> Vec<String> {
    w["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event_type"].as_str().unwrap().to_owned())
        .collect()
}

/// The id the next request of the admin under `key` will get (to script a fault).
fn id_for(env: &PayoutEnv, key: &str) -> String {
    factledger::payouts::api::withdrawal_id_for(&format!("key:{}", env.app.admin_key_id), key)
}

/// The wallet's buckets: (available, frozen).
async fn buckets(env: &PayoutEnv, user: &str) -> (i64, i64) {
    let w = env.wallet(user).await;
    (
        w["available_minor"].as_i64().unwrap(),
        w["frozen_minor"].as_i64().unwrap(),
    )
}

/// Ledger entries of the wallet of `user` with this entry type.
async fn entries(env: &PayoutEnv, user: &str, entry_type: &str) -> Vec<Value> {
    // Read-your-writes: the ledger projection has applied everything so far.
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
        .cloned()
        .collect()
}

both_backends!(
    acceptance_10_a_request_retried_after_a_timeout_freezes_once,
    |db: TestDb| async move {
        let env = PayoutEnv::start(&db).await;
        env.user("u-1", 100_000).await;
        // The client timed out and retries: the same key, the same body, four at once.
        let body = PayoutEnv::request_body("u-1", 40_000);
        let tries = (0..4).map(|_| env.send("POST", "/v1/withdrawals", Some("k-1"), body.clone()));
        let answers = futures::future::join_all(tries).await;
        let ids: std::collections::BTreeSet<_> = answers
            .iter()
            .map(|(status, a, _)| {
                assert!(*status == 201 || *status == 200, "{a}");
                a["withdrawal_id"].as_str().unwrap().to_owned()
            })
            .collect();
        assert_eq!(ids.len(), 1, "one withdrawal for one key");
        assert!(answers.iter().filter(|(_, _, replayed)| *replayed).count() >= 1);
        let id = ids.into_iter().next().unwrap();
        env.wait_status(&id, "PAID").await;
        assert_eq!(entries(&env, "u-1", "WITHDRAW_FREEZE").await.len(), 1);
        assert_eq!(buckets(&env, "u-1").await, (60_000, 0));
        assert_eq!(env.creates(&id), 1);
        // The same key with another body is refused, and writes nothing.
        let (status, answer, _) = env
            .send(
                "POST",
                "/v1/withdrawals",
                Some("k-1"),
                PayoutEnv::request_body("u-1", 41_000),
            )
            .await;
        assert_eq!(
            (status, answer["code"].as_str()),
            (422, Some("IDEMPOTENCY_KEY_REUSED")),
            "{answer}"
        );
        // No key at all is refused too: a money-out request must be retry-safe.
        let (status, answer, _) = env.send("POST", "/v1/withdrawals", None, body).await;
        assert_eq!(
            (status, answer["field"].as_str()),
            (422, Some("Idempotency-Key")),
            "{answer}"
        );
    }
);

both_backends!(
    a_paid_withdrawal_shows_its_attempts_events_and_list_row,
    |db: TestDb| async move {
        let env = PayoutEnv::start(&db).await;
        env.user("u-1", 100_000).await;
        let id = env.request("u-1", 25_000, "k-1").await;
        env.wait_status(&id, "PAID").await;
        // The webhook may report PAID before the worker records its call's answer.
        let deadline = Instant::now() + Duration::from_secs(30);
        let w = loop {
            let w = env.withdrawal(&id).await;
            if !w["attempts"][0]["call"].is_null() || Instant::now() > deadline {
                break w;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(w["amount_minor"], 25_000);
        assert_eq!(w["frozen_minor"], 0);
        assert_eq!(w["paid_minor"], 25_000);
        let attempt = &w["attempts"][0];
        assert_eq!(attempt["attempt"], 1);
        assert_eq!(attempt["idempotency_key"], id.as_str());
        assert!(attempt["call"]["elapsed_ms"].is_u64(), "{attempt}");
        assert_eq!(attempt["call"]["http_status"], 200);
        let names = event_names(&w);
        assert_eq!(
            names[..4],
            [
                "WithdrawalRequested",
                "WithdrawalApproved",
                "PayoutAttemptStarted",
                "PayoutAccepted"
            ]
        );
        // The webhook and the worker's own call answer race: when the webhook lands
        // first, the attempt is closed afterwards by a `PayoutAttemptEnded`.
        let tail: Vec<&str> = names[4..].iter().map(String::as_str).collect();
        assert!(
            tail == ["PayoutSucceeded"] || tail == ["PayoutSucceeded", "PayoutAttemptEnded"],
            "{names:?}"
        );
        let text = w.to_string();
        assert!(
            !text.contains(PASSWORD) && !text.contains("argon2"),
            "no password in a read"
        );
        let position = w["position"].as_i64().unwrap();
        let (status, page) = env
            .app
            .get(&format!(
                "/v1/withdrawals?user_id=u-1&status=PAID&min_position={position}"
            ))
            .await;
        assert_eq!(status, 200, "{page}");
        assert_eq!(page["withdrawals"][0]["withdrawal_id"], id.as_str());
        assert_eq!(page["withdrawals"][0]["attempts"], 1);
        // The payout went to the provider's clearing account.
        let payouts = entries(&env, "u-1", "WITHDRAW_PAYOUT").await;
        assert_eq!(payouts.len(), 1);
        let head = env.app.store.head_position().await.unwrap();
        let (status, account) = env
            .app
            .get(&format!(
                "/v1/accounts/provider_clearing:xendit:IDR?min_position={head}"
            ))
            .await;
        assert_eq!(status, 200, "{account}");
    }
);

both_backends!(
    a_large_request_waits_for_review_and_a_rejection_gives_the_money_back,
    |db: TestDb| async move {
        let env = PayoutEnv::start(&db).await;
        env.user("u-1", 2_000_000).await;
        let big = test_limits().review_at_or_above_minor;
        let id = env.request("u-1", big, "k-1").await;
        let w = env.withdrawal(&id).await;
        assert_eq!(w["status"], "REQUESTED");
        assert_eq!(w["review"]["mode"], "MANUAL");
        assert_eq!(buckets(&env, "u-1").await, (2_000_000 - big, big));
        // The wallet read says which withdrawal holds the frozen money.
        let frozen_by = &env.wallet("u-1").await["frozen_by"];
        assert_eq!(
            frozen_by,
            &serde_json::json!([{"ref_type": "WITHDRAWAL", "ref_id": id, "amount_minor": big}])
        );
        let (status, answer) = env
            .app
            .post(
                &format!("/v1/withdrawals/{id}:reject"),
                json!({"reason": ""}),
            )
            .await;
        assert_eq!(
            (status, answer["field"].as_str()),
            (422, Some("reason")),
            "{answer}"
        );
        let (status, answer) = env
            .app
            .post(
                &format!("/v1/withdrawals/{id}:reject"),
                json!({"reason": "holder name differs"}),
            )
            .await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["status"], "REJECTED");
        assert_eq!(buckets(&env, "u-1").await, (2_000_000, 0));
        let (status, answer) = env
            .app
            .post(
                &format!("/v1/withdrawals/{id}:approve"),
                json!({"reason": "too late"}),
            )
            .await;
        assert_eq!(
            (status, answer["code"].as_str()),
            (409, Some("WITHDRAWAL_NOT_REVIEWABLE")),
            "{answer}"
        );
        // Another large one is approved by an operator and paid.
        let id = env.request("u-1", big, "k-2").await;
        let (status, answer) = env
            .app
            .post(
                &format!("/v1/withdrawals/{id}:approve"),
                json!({"reason": "called the user"}),
            )
            .await;
        assert_eq!(status, 200, "{answer}");
        env.wait_status(&id, "PAID").await;
        assert_eq!(buckets(&env, "u-1").await, (2_000_000 - big, 0));
    }
);

both_backends!(
    requests_that_break_a_rule_are_refused_naming_it_and_write_nothing,
    |db: TestDb| async move {
        let env = PayoutEnv::start(&db).await;
        env.user("u-1", 100_000).await;
        let head = env.app.store.head_position().await.unwrap();
        let mut body = PayoutEnv::request_body("u-1", 999);
        let cases: Vec<(Value, u16, &str, &str)> = vec![
            (body.clone(), 422, "AMOUNT_BELOW_MINIMUM", "amount_minor"),
            (
                {
                    body["amount_minor"] = json!(200_000);
                    body.clone()
                },
                409,
                "INSUFFICIENT_BALANCE",
                "amount_minor",
            ),
            (
                {
                    body["amount_minor"] = json!(2_000);
                    body["currency"] = json!("USD");
                    body.clone()
                },
                422,
                "CURRENCY_MISMATCH",
                "currency",
            ),
            (
                {
                    body["currency"] = json!("IDR");
                    body["payout_account_id"] = json!("pa-9");
                    body.clone()
                },
                409,
                "PAYOUT_ACCOUNT_NOT_VERIFIED",
                "payout_account_id",
            ),
            (
                {
                    body["payout_account_id"] = json!("pa-u-1");
                    body["wallet_id"] = json!("w-9");
                    body.clone()
                },
                404,
                "WALLET_NOT_FOUND",
                "",
            ),
            (
                {
                    body["wallet_id"] = json!("w-u-1");
                    body["amount_minor"] = json!(-5);
                    body.clone()
                },
                422,
                "INVALID_FIELD",
                "amount_minor",
            ),
        ];
        for (i, (body, status, code, field)) in cases.into_iter().enumerate() {
            let (got, answer, _) = env
                .send("POST", "/v1/withdrawals", Some(&format!("bad-{i}")), body)
                .await;
            assert_eq!(
                (got, answer["code"].as_str().unwrap_or("")),
                (status, code),
                "case {i}: {answer}"
            );
            if !field.is_empty() {
                assert_eq!(answer["field"], field, "case {i}: {answer}");
            }
        }
        // KYC withdrawn: refused.
        let (status, _) = env
            .app
            .post(
                "/v1/users/u-1/kyc",
                json!({"status": "REJECTED", "reason": "expired id"}),
            )
            .await;
        assert_eq!(status, 200);
        let kyc_head = env.app.store.head_position().await.unwrap();
        let (status, answer, _) = env
            .send(
                "POST",
                "/v1/withdrawals",
                Some("kyc"),
                PayoutEnv::request_body("u-1", 2_000),
            )
            .await;
        assert_eq!(
            (status, answer["code"].as_str()),
            (409, Some("KYC_NOT_VERIFIED")),
            "{answer}"
        );
        assert_eq!(
            env.app.store.head_position().await.unwrap(),
            kyc_head,
            "nothing written"
        );
        assert_eq!(kyc_head, head + 1, "only the KYC change was written");
        // A recovery block on the wallet: the freeze is refused, nothing is written.
        env.app
            .post(
                "/v1/users/u-1/kyc",
                json!({"status": "VERIFIED", "reason": "renewed"}),
            )
            .await;
        let (status, _) = env
            .app
            .post(
                "/v1/wallets/w-u-1/commands",
                json!({"type": "BlockWithdrawals", "ref_type": "RECOVERY_REVIEW", "ref_id": "c-x"}),
            )
            .await;
        assert_eq!(status, 200);
        let blocked_head = env.app.store.head_position().await.unwrap();
        let (status, answer, _) = env
            .send(
                "POST",
                "/v1/withdrawals",
                Some("blocked"),
                PayoutEnv::request_body("u-1", 2_000),
            )
            .await;
        assert_eq!(
            (status, answer["code"].as_str()),
            (409, Some("WITHDRAWALS_BLOCKED")),
            "{answer}"
        );
        assert_eq!(env.app.store.head_position().await.unwrap(), blocked_head);
    }
);

both_backends!(
    wrong_payment_passwords_lock_the_user_out_and_no_hash_is_ever_shown,
    |db: TestDb| async move {
        let env = PayoutEnv::start(&db).await;
        env.user("u-1", 100_000).await;
        let mut body = PayoutEnv::request_body("u-1", 2_000);
        body["payment_password"] = json!("wrong-one");
        for i in 1..=4 {
            let (status, answer, _) = env
                .send(
                    "POST",
                    "/v1/withdrawals",
                    Some(&format!("w-{i}")),
                    body.clone(),
                )
                .await;
            assert_eq!(
                (status, answer["code"].as_str()),
                (422, Some("PAYMENT_PASSWORD_WRONG")),
                "{answer}"
            );
            assert_eq!(answer["field"], "payment_password");
        }
        let (status, answer, _) = env.send("POST", "/v1/withdrawals", Some("w-5"), body).await;
        assert_eq!(
            (status, answer["code"].as_str()),
            (423, Some("PAYMENT_PASSWORD_LOCKED")),
            "{answer}"
        );
        // Locked: even the right password is refused now.
        let (status, answer, _) = env
            .send(
                "POST",
                "/v1/withdrawals",
                Some("w-6"),
                PayoutEnv::request_body("u-1", 2_000),
            )
            .await;
        assert_eq!(
            (status, answer["code"].as_str()),
            (423, Some("PAYMENT_PASSWORD_LOCKED")),
            "{answer}"
        );
        // Setting it again lifts the lock.
        env.send(
            "PUT",
            "/v1/users/u-1/payment-password",
            None,
            json!({"password": PASSWORD}),
        )
        .await;
        env.request("u-1", 2_000, "w-7").await;
        let (status, profile) = env.app.get("/v1/users/u-1/payout-profile").await;
        assert_eq!(status, 200);
        assert_eq!(profile["payment_password_set"], true);
        let (_, events) = env.app.get("/v1/audit/events?limit=1000").await;
        for text in [profile.to_string(), events.to_string()] {
            assert!(
                !text.contains("argon2") && !text.contains(PASSWORD),
                "{text}"
            );
        }
    }
);

both_backends!(
    sixteen_concurrent_requests_against_a_daily_limit_of_five_pass_five,
    |db: TestDb| async move {
        let env = PayoutEnv::start(&db).await;
        env.user("u-1", 1_000_000).await;
        let keys: Vec<String> = (0..16).map(|i| format!("c-{i}")).collect();
        let tries = keys.iter().map(|k| {
            env.send(
                "POST",
                "/v1/withdrawals",
                Some(k.as_str()),
                PayoutEnv::request_body("u-1", 10_000),
            )
        });
        let answers = futures::future::join_all(tries).await;
        let passed = answers.iter().filter(|(s, _, _)| *s == 201).count();
        let refused: Vec<_> = answers
            .iter()
            .filter(|(s, _, _)| *s != 201)
            .map(|(_, a, _)| a["code"].as_str().unwrap_or("?").to_owned())
            .collect();
        assert_eq!(passed, 5, "{refused:?}");
        assert!(
            refused.iter().all(|c| c == "DAILY_COUNT_LIMIT"),
            "{refused:?}"
        );
        assert_eq!(entries(&env, "u-1", "WITHDRAW_FREEZE").await.len(), 5);
    }
);

both_backends!(
    a_timeout_after_the_provider_accepted_is_queried_and_paid_once,
    |db: TestDb| async move {
        let env = PayoutEnv::start(&db).await;
        env.user("u-1", 100_000).await;
        // The provider accepts, answers too late, and settles only when told to.
        env.sim.sim.set_settings(Some(600_000), None, None).unwrap();
        // The ids are derived from the key: script the faults for the id to come.
        let id = id_for(&env, "k-timeout");
        env.fault(&id, Fault::AcceptThenTimeout { delay_ms: 3_000 });
        assert_eq!(env.request("u-1", 30_000, "k-timeout").await, id);
        let w = env.wait_status(&id, "PROCESSING").await;
        let names = event_names(&w);
        assert_eq!(
            names,
            [
                "WithdrawalRequested",
                "WithdrawalApproved",
                "PayoutAttemptStarted",
                "PayoutOutcomeUnknown",
                "PayoutAccepted"
            ],
            "unknown, then found by the query"
        );
        assert_eq!(w["attempts"][0]["outcome"], "PayoutOutcomeUnknown");
        assert_eq!(
            buckets(&env, "u-1").await,
            (70_000, 30_000),
            "never unfrozen while unknown"
        );
        env.sim
            .sim
            .complete(&id, payout_sim::Status::Succeeded, None)
            .unwrap();
        env.wait_status(&id, "PAID").await;
        assert_eq!(
            env.creates(&id),
            1,
            "never a second create for an unknown outcome"
        );
        assert_eq!(buckets(&env, "u-1").await, (70_000, 0));
    }
);

both_backends!(
    a_5xx_before_accepting_is_confirmed_absent_and_retried_under_the_same_key,
    |db: TestDb| async move {
        let env = PayoutEnv::start(&db).await;
        env.user("u-1", 100_000).await;
        let id = id_for(&env, "k-5xx");
        env.fault(&id, Fault::Error5xxBeforeAccept { status: 503 });
        env.request("u-1", 30_000, "k-5xx").await;
        let w = env.wait_status(&id, "PAID").await;
        let names = event_names(&w);
        assert!(
            names.contains(&"PayoutConfirmedAbsent".to_owned()),
            "{names:?}"
        );
        assert_eq!(w["attempts"].as_array().unwrap().len(), 2);
        assert_eq!(
            w["attempts"][1]["idempotency_key"],
            id.as_str(),
            "same key again"
        );
        assert_eq!(env.sim.sim.payouts().disbursements.len(), 1);
    }
);

both_backends!(
    the_providers_balance_holds_funds_and_a_later_retry_pays_under_a_new_reference,
    |db: TestDb| async move {
        let env = PayoutEnv::start(&db).await;
        env.user("u-1", 100_000).await;
        let id = id_for(&env, "k-held");
        env.fault(&id, Fault::InsufficientBalance);
        env.request("u-1", 30_000, "k-held").await;
        let w = env.wait_status(&id, "PAID").await;
        let names = event_names(&w);
        assert!(names.contains(&"PayoutFundsHeld".to_owned()), "{names:?}");
        assert_eq!(w["provider_reference"], format!("{id}:r1"));
        assert_eq!(env.creates(&format!("{id}:r1")), 1);
        assert_eq!(env.creates(&id), 0, "the refused create made nothing");
        assert_eq!(buckets(&env, "u-1").await, (70_000, 0));
    }
);

both_backends!(
    acceptance_12_duplicate_and_out_of_order_webhooks_never_move_money_twice,
    |db: TestDb| async move {
        let env = PayoutEnv::start(&db).await;
        env.user("u-1", 1_000_000).await;
        let faults = [
            ("k-dup", Fault::DuplicateWebhook),
            ("k-ooo", Fault::OutOfOrderWebhooks),
            ("k-early", Fault::WebhookBeforeResponse),
            (
                "k-contra",
                Fault::FailedAfterCompleted {
                    failure_code: "REVERSED".into(),
                },
            ),
            (
                "k-fail",
                Fault::Fail {
                    failure_code: "INVALID_DESTINATION".into(),
                },
            ),
        ];
        let mut ids = Vec::new();
        for (key, fault) in faults {
            let id = id_for(&env, key);
            env.fault(&id, fault);
            assert_eq!(env.request("u-1", 10_000, key).await, id);
            ids.push(id);
        }
        for id in &ids[..4] {
            env.wait_status(id, "PAID").await;
        }
        env.wait_status(&ids[4], "FAILED").await;
        // Let the late and duplicate callbacks arrive and be applied.
        tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;
        for id in &ids[..4] {
            assert_eq!(env.withdrawal(id).await["status"], "PAID");
        }
        let contra = env.withdrawal(&ids[3]).await;
        assert_eq!(
            contra["contradictions"], 1,
            "FAILED after PAID is recorded, not applied"
        );
        assert_eq!(entries(&env, "u-1", "WITHDRAW_PAYOUT").await.len(), 4);
        assert_eq!(entries(&env, "u-1", "WITHDRAW_UNFREEZE").await.len(), 1);
        assert_eq!(buckets(&env, "u-1").await, (1_000_000 - 40_000, 0));
        let (status, callbacks) = env.app.get("/v1/callbacks?provider=xendit&limit=100").await;
        assert_eq!(status, 200, "{callbacks}");
        let dupes = callbacks["callbacks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["handle_status"] == "DUPLICATE")
            .count();
        assert!(
            dupes >= 1,
            "the repeated event was stored and not handled: {callbacks}"
        );
    }
);

both_backends!(
    acceptance_13_with_every_sink_down_withdrawals_pay_right_and_the_outbox_drains_after,
    |db: TestDb| async move {
        let sink = std::sync::Arc::new(crate::common::sinks::Downstream::default());
        let relay_sink = sink.clone();
        let env = PayoutEnv::start_configured(&db, test_limits(), move |o| {
            o.outbox_sinks = vec![relay_sink];
            o.outbox_relay = factledger::infra::outbox::RelayConfig {
                backoff_ms_min: 10,
                backoff_ms_max: 50,
                ..Default::default()
            };
        })
        .await;
        env.user("u-1", 100_000).await;
        let paid = env.request("u-1", 20_000, "k-1").await;
        let failed_id = id_for(&env, "k-2");
        env.fault(
            &failed_id,
            Fault::Fail {
                failure_code: "INVALID_DESTINATION".into(),
            },
        );
        env.request("u-1", 30_000, "k-2").await;
        env.wait_status(&paid, "PAID").await;
        env.wait_status(&failed_id, "FAILED").await;
        assert_eq!(buckets(&env, "u-1").await, (80_000, 0));
        let total = env
            .app
            .state
            .db
            .fetch_i64("SELECT COUNT(*) FROM outbox", &[])
            .await
            .unwrap();
        let got = sink.refuse_then_drain(3, total).await;
        let ids: Vec<i64> = got.iter().map(|(id, _, _)| *id).collect();
        assert_eq!(ids, (1..=total).collect::<Vec<_>>(), "every row, in order");
        for id in [&paid, &failed_id] {
            let told = got
                .iter()
                .filter(|(_, t, a)| t == "withdrawal" && a == id)
                .count();
            let events = env.withdrawal(id).await["events"].as_array().unwrap().len();
            assert_eq!(told, events, "every state change of {id} is published");
        }
    }
);

/// `factledger withdrawals …` against the service's database: its JSON output.
fn cli(db: &TestDb, args: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_factledger"))
        .current_dir(dir.path())
        .env("RUST_LOG", "warn")
        .args(["--database-url", &db.url, "withdrawals"])
        .args(args)
        .output()
        .expect("run factledger");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON output")
}

both_backends!(
    the_cli_lists_shows_approves_and_rejects_withdrawals,
    |db: TestDb| async move {
        let env = PayoutEnv::start(&db).await;
        env.user("u-1", 2_000_000).await;
        let big = test_limits().review_at_or_above_minor;
        let first = env.request("u-1", big, "k-1").await;
        let second = env.request("u-1", big, "k-2").await;
        // The CLI reads the projection: let it reach both requests first.
        let head = env.app.store.head_position().await.unwrap();
        let (status, _) = env
            .app
            .get(&format!("/v1/withdrawals?min_position={head}"))
            .await;
        assert_eq!(status, 200);
        let waiting = cli(&db, &["list", "--status", "requested", "--user-id", "u-1"]);
        let mut ids: Vec<&str> = waiting
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["withdrawal_id"].as_str().unwrap())
            .collect();
        ids.sort();
        let mut want = vec![first.as_str(), second.as_str()];
        want.sort();
        assert_eq!(ids, want);
        let rejected = cli(&db, &["reject", &first, "--reason", "holder name differs"]);
        assert_eq!(rejected["status"], "REJECTED", "{rejected}");
        let decided = &rejected["events"].as_array().unwrap().last().unwrap()["payload"];
        assert_eq!(decided["reason"], "holder name differs");
        assert!(
            decided["actor"].as_str().unwrap().starts_with("cli:"),
            "{decided}"
        );
        let approved = cli(&db, &["approve", &second, "--reason", "called the user"]);
        assert_ne!(approved["status"], "REQUESTED", "{approved}");
        // The running service's worker pays what the CLI approved.
        env.wait_status(&second, "PAID").await;
        let shown = cli(&db, &["show", &second]);
        assert_eq!(shown["status"], "PAID");
        assert_eq!(buckets(&env, "u-1").await, (2_000_000 - big, 0));
        // A decision on a settled withdrawal fails with the refusal's code.
        let dir = tempfile::tempdir().unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_factledger"))
            .current_dir(dir.path())
            .args([
                "--database-url",
                &db.url,
                "withdrawals",
                "approve",
                &first,
                "--reason",
                "x",
            ])
            .output()
            .unwrap();
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("WITHDRAWAL_NOT_REVIEWABLE"));
    }
);
