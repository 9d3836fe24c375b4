//! Double entry (issue 16): the journal projection, the trial balance and account
//! API, the journal's reconciliation checks and its rebuilds. Both backends.

use crate::common;

use common::{meta, run, TestDb};
use factledger::infra::db::Db;
use factledger::infra::store;
use factledger::ledger::{api, projection as journal};
use factledger::runtime::bus::{CommandBus, CommandEnvelope};
use factledger_aggregates::wallet::{Wallet, WalletCommand};
use factledger_projections::ledger::{NAME, VERSION};
use serde_json::{json, Value};

async fn projection_db(db: &TestDb) -> Db {
    store::open(&db.url).await.unwrap().db
}

/// A wallet's whole life, plus a second wallet: credited, released, frozen, paid
/// out, unfrozen, risk-held, reversed, blocked.
async fn history(bus: &CommandBus<Wallet>) {
    let steps: Vec<(&str, Value)> = vec![
        (
            "w-1",
            json!({"type": "Open", "user_id": "u-1", "currency": "IDR"}),
        ),
        (
            "w-2",
            json!({"type": "Open", "user_id": "u-2", "currency": "USD"}),
        ),
        (
            "w-1",
            json!({"type": "CreditPending", "ref_type": "COMMISSION", "ref_id": "SHOPEE:o1:CASHBACK", "amount_minor": 1000}),
        ),
        (
            "w-1",
            json!({"type": "CreditPending", "ref_type": "COMMISSION", "ref_id": "SHOPEE:o2:INVITER_REWARD", "amount_minor": 300}),
        ),
        (
            "w-1",
            json!({"type": "ReleasePending", "ref_type": "COMMISSION", "ref_id": "SHOPEE:o1:CASHBACK", "amount_minor": 1000}),
        ),
        (
            "w-1",
            json!({"type": "ReversePending", "ref_type": "COMMISSION", "ref_id": "SHOPEE:o2:INVITER_REWARD", "amount_minor": 300}),
        ),
        (
            "w-1",
            json!({"type": "FreezeForWithdrawal", "ref_type": "WITHDRAWAL", "ref_id": "wd-1", "amount_minor": 600}),
        ),
        (
            "w-1",
            json!({"type": "PayOutFrozen", "ref_type": "WITHDRAWAL", "ref_id": "wd-1", "amount_minor": 600}),
        ),
        (
            "w-1",
            json!({"type": "FreezeForWithdrawal", "ref_type": "WITHDRAWAL", "ref_id": "wd-2", "amount_minor": 100}),
        ),
        (
            "w-1",
            json!({"type": "Unfreeze", "ref_type": "WITHDRAWAL", "ref_id": "wd-2", "amount_minor": 100}),
        ),
        (
            "w-1",
            json!({"type": "PlaceRiskHold", "ref_type": "RISK_REVIEW", "ref_id": "r-1", "amount_minor": 50}),
        ),
        (
            "w-1",
            json!({"type": "BlockWithdrawals", "ref_type": "RISK_REVIEW", "ref_id": "r-1"}),
        ),
        (
            "w-2",
            json!({"type": "CreditPending", "ref_type": "PROMO", "ref_id": "p-1", "amount_minor": 70}),
        ),
    ];
    for (w, c) in steps {
        run(bus, w, c).await;
    }
}

/// `(account, debits, credits)` of every account, ordered.
async fn balances(db: &Db) -> Vec<(String, i64, i64)> {
    use factledger::infra::db::Get;
    use factledger_projections::table::{ColType, Column};
    const COLS: &[Column] = &[
        Column {
            name: "account",
            ty: ColType::Text,
        },
        Column {
            name: "debits_minor",
            ty: ColType::Int,
        },
        Column {
            name: "credits_minor",
            ty: ColType::Int,
        },
    ];
    let sql = "SELECT account, debits_minor, credits_minor FROM account_balances ORDER BY account";
    db.fetch(sql, &[], COLS)
        .await
        .unwrap()
        .iter()
        .map(|r| {
            (
                r.text("account").unwrap(),
                r.int("debits_minor").unwrap(),
                r.int("credits_minor").unwrap(),
            )
        })
        .collect()
}

async fn count(db: &Db, sql: &str) -> i64 {
    db.fetch_i64(sql, &[]).await.unwrap()
}

/// Each bucket account of `wallet` holds what the aggregate's bucket holds.
async fn assert_buckets_match(db: &Db, bus: &CommandBus<Wallet>, wallet: &str) {
    let b = bus.state(wallet).await.unwrap().state.balances;
    let all = balances(db).await;
    let held = |bucket: &str| {
        let name = format!("wallet:{wallet}:{bucket}");
        all.iter()
            .find(|(a, _, _)| *a == name)
            .map(|(_, d, c)| c - d)
            .unwrap_or_else(|| panic!("no account {name}"))
    };
    assert_eq!(
        [
            held("pending"),
            held("available"),
            held("frozen"),
            held("risk_hold")
        ],
        [
            b.pending_minor,
            b.available_minor,
            b.frozen_minor,
            b.risk_hold_minor
        ],
        "{wallet}"
    );
}

both_backends!(
    a_history_written_before_double_entry_rebuilds_into_a_balanced_journal,
    |db: TestDb| async move {
        // The events are written with no journal running, as before this change.
        let bus = CommandBus::<Wallet>::start(db.store.clone());
        history(&bus).await;
        let pdb = projection_db(&db).await;
        let read = journal::catch_up(&db.store, &pdb).await.unwrap();
        assert_eq!(read as i64, db.store.head_position().await.unwrap());
        // 10 movements, two lines each; opens and blocks post nothing.
        assert_eq!(count(&pdb, "SELECT COUNT(*) FROM journal").await, 20);
        let head = pdb.checkpoint(NAME, VERSION).await.unwrap();
        let tb = api::trial_balance_at(&pdb, None, head).await.unwrap();
        assert!(tb.balanced, "{tb:?}");
        let idr = tb.currencies.iter().find(|c| c.currency == "IDR").unwrap();
        assert_eq!((idr.debits_minor, idr.credits_minor), (4050, 4050));
        assert_eq!(tb.currencies.len(), 2, "IDR and USD apart");
        for w in ["w-1", "w-2"] {
            assert_buckets_match(&pdb, &bus, w).await;
        }
        let all = balances(&pdb).await;
        let get = |a: &str| all.iter().find(|(n, _, _)| n == a).cloned().unwrap();
        assert_eq!(
            get("commission_expense:SHOPEE:IDR"),
            ("commission_expense:SHOPEE:IDR".into(), 1000, 0)
        );
        assert_eq!(
            get("inviter_rewards:SHOPEE:IDR"),
            ("inviter_rewards:SHOPEE:IDR".into(), 300, 300)
        );
        assert_eq!(
            get("provider_clearing:UNASSIGNED:IDR"),
            ("provider_clearing:UNASSIGNED:IDR".into(), 0, 600)
        );
        assert_eq!(
            get("external:PROMO:USD"),
            ("external:PROMO:USD".into(), 70, 0)
        );
        // As of an earlier position: only the lines up to it.
        let early = api::trial_balance_at(&pdb, Some(3), head).await.unwrap();
        let idr = early
            .currencies
            .iter()
            .find(|c| c.currency == "IDR")
            .unwrap();
        assert_eq!(
            (idr.debits_minor, idr.credits_minor, early.as_of_position),
            (1000, 1000, 3)
        );
        // Caught up: nothing more; a full rebuild writes the same rows.
        assert_eq!(journal::catch_up(&db.store, &pdb).await.unwrap(), 0);
        let before = balances(&pdb).await;
        let done = factledger::ledger::rebuild::rebuild_full(&db.store, &pdb)
            .await
            .unwrap();
        assert_eq!(done.position, head);
        assert_eq!(balances(&pdb).await, before);
        assert_eq!(count(&pdb, "SELECT COUNT(*) FROM journal").await, 20);
    }
);

both_backends!(
    a_refused_overdraft_posts_nothing_and_names_the_flag_it_would_break,
    |db: TestDb| async move {
        let bus = CommandBus::<Wallet>::start(db.store.clone());
        run(
            &bus,
            "w-1",
            json!({"type": "Open", "user_id": "u-1", "currency": "IDR"}),
        )
        .await;
        run(&bus, "w-1", json!({"type": "CreditPending", "ref_type": "COMMISSION", "ref_id": "SHOPEE:o1:CASHBACK", "amount_minor": 10})).await;
        // Releasing more than pending holds would debit `wallet:w-1:pending` past its
        // credits: the bucket's debits_must_not_exceed_credits flag.
        let command: WalletCommand = serde_json::from_value(json!({"type": "ReleasePending",
            "ref_type": "COMMISSION", "ref_id": "SHOPEE:o1:CASHBACK", "amount_minor": 11}))
        .unwrap();
        let refused = bus
            .execute(CommandEnvelope {
                aggregate_id: "w-1".into(),
                command,
                metadata: meta(),
                idempotency: None,
                jobs: Vec::new(),
                fence: None,
            })
            .await
            .unwrap_err();
        assert!(
            refused.to_string().contains("INSUFFICIENT")
                || format!("{refused:?}").contains("Insufficient"),
            "{refused:?}"
        );
        let pdb = projection_db(&db).await;
        journal::catch_up(&db.store, &pdb).await.unwrap();
        assert_eq!(count(&pdb, "SELECT COUNT(*) FROM journal").await, 2);
        assert_buckets_match(&pdb, &bus, "w-1").await;
    }
);

use crate::common::Rng;

both_backends!(
    random_wallet_commands_keep_the_trial_balance_zero_after_every_step,
    |db: TestDb| async move {
        let bus = CommandBus::<Wallet>::start(db.store.clone());
        let pdb = projection_db(&db).await;
        let wallets = ["w-a", "w-b", "w-c"];
        for (w, cur) in wallets.iter().zip(["IDR", "IDR", "MYR"]) {
            run(
                &bus,
                w,
                json!({"type": "Open", "user_id": w, "currency": cur}),
            )
            .await;
        }
        let kinds = [
            ("CreditPending", "COMMISSION"),
            ("CreditPending", "COMMISSION_ADJUSTMENT"),
            ("ReleasePending", "COMMISSION"),
            ("ReversePending", "COMMISSION"),
            ("FreezeForWithdrawal", "WITHDRAWAL"),
            ("Unfreeze", "WITHDRAWAL"),
            ("PayOutFrozen", "WITHDRAWAL"),
            ("PlaceRiskHold", "RISK_REVIEW"),
            ("ReleaseRiskHold", "RISK_REVIEW"),
            ("CreditPending", "PROMO"),
        ];
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let (mut accepted, mut refused) = (0, 0);
        for step in 0..120u64 {
            let w = wallets[rng.below(3) as usize];
            let (ty, ref_type) = kinds[rng.below(kinds.len() as u64) as usize];
            let platform = ["SHOPEE", "LAZADA"][rng.below(2) as usize];
            let role = ["CASHBACK", "INVITER_REWARD"][rng.below(2) as usize];
            let ref_id = if ref_type.starts_with("COMMISSION") {
                format!("{platform}:s{step}:{role}")
            } else {
                format!("r-{step}")
            };
            let amount = 1 + rng.below(400) as i64;
            let command: WalletCommand = serde_json::from_value(json!({"type": ty,
                "ref_type": ref_type, "ref_id": ref_id, "amount_minor": amount}))
            .unwrap();
            let outcome = bus
                .execute(CommandEnvelope {
                    aggregate_id: w.to_owned(),
                    command,
                    metadata: meta(),
                    idempotency: None,
                    jobs: Vec::new(),
                    fence: None,
                })
                .await;
            match outcome {
                Ok(_) => accepted += 1,
                Err(_) => refused += 1,
            }
            journal::catch_up(&db.store, &pdb).await.unwrap();
            let head = pdb.checkpoint(NAME, VERSION).await.unwrap();
            let tb = api::trial_balance_at(&pdb, None, head).await.unwrap();
            assert!(tb.balanced, "step {step}: {tb:?}");
            if step % 20 == 19 {
                for w in wallets {
                    assert_buckets_match(&pdb, &bus, w).await;
                }
            }
        }
        assert!(
            accepted > 30 && refused > 10,
            "a mix: {accepted} accepted, {refused} refused"
        );
        for w in wallets {
            assert_buckets_match(&pdb, &bus, w).await;
        }
    }
);

both_backends!(
    reconciliation_finds_a_journal_that_does_not_balance_and_repairs_nothing,
    |db: TestDb| async move {
        use factledger::runtime::reconcile::{self, FindingKind, ReconcileOptions};
        let bus = CommandBus::<Wallet>::start(db.store.clone());
        history(&bus).await;
        let pdb = projection_db(&db).await;
        factledger::runtime::projection::catch_up_wallet(&db.store, &pdb)
            .await
            .unwrap();
        journal::catch_up(&db.store, &pdb).await.unwrap();
        let clean = reconcile::reconcile(&db.store, &pdb, ReconcileOptions::default())
            .await
            .unwrap();
        assert_eq!(clean.remaining.total(), 0, "{:?}", clean.findings);
        assert!(clean
            .projections_checked
            .iter()
            .any(|p| p.name == NAME && p.rows_checked > 0));
        // A DBA edits one account's totals and drops one journal line.
        pdb.exec(
            "UPDATE account_balances SET credits_minor = credits_minor + 5 WHERE account = 'wallet:w-1:available'",
            &[],
        )
        .await
        .unwrap();
        pdb.exec("DELETE FROM journal WHERE position = 3 AND leg = 1", &[])
            .await
            .unwrap();
        let options = ReconcileOptions {
            repair: true,
            ..ReconcileOptions::default()
        };
        let found = reconcile::reconcile(&db.store, &pdb, options)
            .await
            .unwrap();
        let journal_findings: Vec<_> = found
            .findings
            .iter()
            .filter(|f| f.kind == FindingKind::JournalImbalance)
            .collect();
        let details: Vec<&str> = journal_findings.iter().map(|f| f.detail.as_str()).collect();
        assert!(
            details.iter().any(|d| d.contains("trial balance not zero")),
            "{details:?}"
        );
        assert!(
            details.iter().any(|d| d.contains("journal lines sum")),
            "{details:?}"
        );
        assert!(
            details.iter().any(|d| d.contains("bucket account")),
            "{details:?}"
        );
        assert!(
            journal_findings
                .iter()
                .all(|f| f.repair.starts_with("refused")),
            "{journal_findings:?}"
        );
        assert!(found.remaining.event >= journal_findings.len() as u64);
        // A scoped rebuild of the wallet's stream restores its lines and totals.
        journal::rebuild_stream(&db.store, &pdb, "wallet", "w-1")
            .await
            .unwrap();
        let after = reconcile::reconcile(&db.store, &pdb, ReconcileOptions::default())
            .await
            .unwrap();
        assert_eq!(after.remaining.total(), 0, "{:?}", after.findings);
    }
);

both_backends!(
    the_accounts_api_serves_the_trial_balance_and_paged_statements,
    |db: TestDb| async move {
        let app = common::spawn_app(&db).spawn().await;
        let cmd = |c: Value| async { app.post("/v1/wallets/w-1/commands", c).await };
        cmd(json!({"type": "Open", "user_id": "u-1", "currency": "IDR"})).await;
        for i in 0..3 {
            let (status, body) = cmd(json!({"type": "CreditPending", "ref_type": "COMMISSION",
                "ref_id": format!("LAZADA:o{i}:CASHBACK"), "amount_minor": 100}))
            .await;
            assert_eq!(status, 200, "{body}");
        }
        let (_, last) = cmd(json!({"type": "ReleasePending", "ref_type": "COMMISSION",
            "ref_id": "LAZADA:o0:CASHBACK", "amount_minor": 100}))
        .await;
        let head = last["position"].as_i64().unwrap();
        let (status, tb) = app
            .get(&format!("/v1/accounts/trial-balance?min_position={head}"))
            .await;
        assert_eq!(status, 200, "{tb}");
        assert_eq!(tb["balanced"], true, "{tb}");
        assert_eq!(tb["partition"], "default");
        assert_eq!(tb["currencies"][0]["debits_minor"], 400, "{tb}");
        let (status, acct) = app
            .get(&format!(
                "/v1/accounts/wallet:w-1:pending?limit=2&min_position={head}"
            ))
            .await;
        assert_eq!(status, 200, "{acct}");
        assert_eq!(acct["balance_minor"], 200, "{acct}");
        assert_eq!(acct["normal_side"], "CREDIT");
        assert_eq!(acct["entries"].as_array().unwrap().len(), 2);
        let after = acct["next_after"].as_i64().expect("a second page");
        let (_, page2) = app
            .get(&format!(
                "/v1/accounts/wallet:w-1:pending?limit=2&after={after}"
            ))
            .await;
        assert_eq!(page2["entries"].as_array().unwrap().len(), 2, "{page2}");
        assert_eq!(
            page2["entries"][1]["debit_minor"], 100,
            "the release leaves pending"
        );
        let (_, expense) = app.get("/v1/accounts/commission_expense:LAZADA:IDR").await;
        assert_eq!(expense["balance_minor"], 300, "{expense}");
        assert_eq!(expense["normal_side"], "DEBIT");
        let (status, body) = app.get("/v1/accounts/nonsense:x").await;
        assert_eq!(
            (status, body["code"].as_str(), body["field"].as_str()),
            (422, Some("INVALID_FIELD"), Some("account")),
            "{body}"
        );
        let (status, body) = app.get("/v1/accounts/wallet:nobody:pending").await;
        assert_eq!(
            (status, body["code"].as_str()),
            (404, Some("ACCOUNT_NOT_FOUND")),
            "{body}"
        );
        let (status, body) = app
            .get("/v1/accounts/trial-balance?as_of_position=999999")
            .await;
        assert_eq!(
            (status, body["code"].as_str(), body["field"].as_str()),
            (409, Some("JOURNAL_BEHIND"), Some("as_of_position")),
            "{body}"
        );
        let (status, body) = app.get("/v1/accounts/trial-balance?as_of=1").await;
        assert_eq!(status, 422, "unknown parameter: {body}");
    }
);
