//! Double entry (issue 16) as a property: **whatever mix of money commands runs, the
//! journal balances after every step and each wallet bucket account holds exactly
//! the wallet projection's bucket.** A seeded generator (xorshift, so a failing seed
//! replays exactly) mixes affiliate ingest (orders in any status order: completed,
//! refunding, partially refunded, refunded, cancelled — so commissions freeze,
//! unfreeze, invalidate and open recoveries), settlement rounds on a moving clock,
//! manual recovery write-offs, and withdrawal and risk-hold moves on the users'
//! wallets, against a cashback fund in minor units. After each step the wallet and
//! journal projections catch up and: the trial balance is zero per currency; every
//! bucket account equals the projected bucket; the fund's budget and reserved
//! accounts equal the campaign aggregate's quota. Bounded: `STEPS` per backend.

use crate::common;

use common::{meta, reference_data, Rng, TestDb};
use factledger::affiliate::ingest::Ingestor;
use factledger::affiliate::recovery::resolve_recovery;
use factledger::affiliate::settlement::{settle_due, RoundLimits};
use factledger::infra::db::Db;
use factledger::infra::store::{self, DynStore};
use factledger::ledger::{api, projection as journal};
use factledger::runtime::bus::load;
use factledger::runtime::unit::{run_command, UnitError};
use factledger_aggregates::campaign::Campaign;
use factledger_aggregates::commission::{Commission, CommissionStatus};
use factledger_aggregates::wallet::Wallet;
use factledger_projections::ledger::{NAME, VERSION};
use serde_json::json;
use std::collections::BTreeMap;

/// Steps per backend.
const STEPS: u64 = 160;
/// The cashback fund of the `SHOPEE:ID` campaign, in minor units of IDR.
const FUND_MINOR: i64 = 30_000;
const WALLETS: [&str; 2] = ["u-1:IDR", "u-0:IDR"];

/// What the steps did, so the test can insist on a real mix.
#[derive(Default, Debug)]
struct Mix {
    ingested: u64,
    released: u64,
    written_off: u64,
    wallet_accepted: u64,
    wallet_refused: u64,
}

async fn ingest_random(store: &DynStore, r: &mut Rng, step: u64, mix: &mut Mix) {
    let status = r.one(&[
        "PENDING",
        "COMPLETED",
        "COMPLETED",
        "REFUNDING",
        "PARTIALLY_REFUNDED",
        "REFUNDED",
        "CANCELLED",
    ]);
    // Later steps report later: a stale update is the ingest's to ignore anyway.
    let order: factledger_aggregates::affiliate_order::NormalisedOrder =
        serde_json::from_value(json!({
            "platform": "SHOPEE", "country": "ID",
            "platform_order_id": format!("o-{}", 1 + r.below(8)), "status": status,
            "currency": "IDR", "gmv_minor": (1 + r.below(5) as i64) * 20_000,
            "platform_commission_minor": (1 + r.below(5) as i64) * 2_000,
            "ordered_at": "2026-03-01T00:00:00Z",
            "platform_updated_at": format!("2026-03-01T{:02}:{:02}:00Z", step / 60, step % 60),
            "attribution": {"kind": "TRACKING_ID", "value": "t-1"}
        }))
        .unwrap();
    let outcome = Ingestor::new(store.clone(), meta())
        .ingest_one(order, None)
        .await
        .expect("an ingest is answered");
    mix.ingested += u64::from(matches!(outcome.result.as_str(), "created" | "updated"));
}

/// One settlement round at `day` of March 2026 (orders are due on the 8th).
async fn settle(store: &DynStore, p: &Db, day: u32, mix: &mut Mix) {
    let projector = factledger::runtime::projector::find("commission_records").expect("projector");
    factledger::runtime::projector::catch_up(store, p, projector.as_ref())
        .await
        .unwrap();
    let now = format!("2026-03-{day:02}T00:00:00Z").parse().unwrap();
    let report = settle_due(
        store,
        p,
        &meta(),
        now,
        None,
        RoundLimits::default(),
        &|| false,
    )
    .await
    .expect("a settlement round");
    assert_eq!(report.failed, 0, "{report:?}");
    mix.released += report.released;
}

/// Write off an open recovery of an order's cashback, if it has one.
async fn write_off(store: &DynStore, r: &mut Rng, mix: &mut Mix) {
    let id = format!("SHOPEE:o-{}:CASHBACK", 1 + r.below(8));
    let state = load::<Commission>(store, &id).await.unwrap().state;
    if state.record.map(|c| c.status) != Some(CommissionStatus::RecoveryReview) {
        return;
    }
    let command = serde_json::from_value(json!({"type": "ResolveRecovery", "actor": "finance",
        "reason": "written off", "resolved_at": "2026-04-01T00:00:00Z"}))
    .unwrap();
    resolve_recovery(store, &meta(), &id, command)
        .await
        .expect("an open recovery resolves and lifts its block");
    mix.written_off += 1;
}

/// A withdrawal or risk move on a user's wallet; refusals (not enough money, no
/// wallet yet, withdrawals blocked by a recovery) are part of the mix.
async fn wallet_move(store: &DynStore, r: &mut Rng, step: u64, mix: &mut Mix) {
    let wallet = WALLETS[r.below(2) as usize];
    let moves = [
        ("FreezeForWithdrawal", "WITHDRAWAL"),
        ("FreezeForWithdrawal", "WITHDRAWAL"),
        ("Unfreeze", "WITHDRAWAL"),
        ("PayOutFrozen", "WITHDRAWAL"),
        ("PlaceRiskHold", "RISK_REVIEW"),
        ("ReleaseRiskHold", "RISK_REVIEW"),
    ];
    let (kind, ref_type) = moves[r.below(moves.len() as u64) as usize];
    let command = serde_json::from_value(json!({"type": kind, "ref_type": ref_type,
        "ref_id": format!("m-{step}"), "amount_minor": (1 + r.below(10) as i64) * 50}))
    .unwrap();
    match run_command::<Wallet>(store, &meta(), wallet, command).await {
        Ok(_) => mix.wallet_accepted += 1,
        Err(UnitError::Refused(_)) => mix.wallet_refused += 1,
        Err(e) => panic!("step {step}: {kind} on {wallet}: {e:?}"),
    }
}

/// Every account's credit balance (credits − debits) after the journal caught up.
async fn credit_balances(p: &Db) -> BTreeMap<String, i64> {
    use factledger_projections::table::{ColType, Column};
    const COLS: &[Column] = &[
        Column {
            name: "account",
            ty: ColType::Text,
        },
        Column {
            name: "d",
            ty: ColType::Int,
        },
        Column {
            name: "c",
            ty: ColType::Int,
        },
    ];
    let rows = p
        .fetch(
            "SELECT account, debits_minor AS d, credits_minor AS c FROM account_balances",
            &[],
            COLS,
        )
        .await
        .unwrap();
    rows.iter()
        .map(|r| {
            use factledger::infra::db::Get;
            let (d, c) = (r.int("d").unwrap(), r.int("c").unwrap());
            (r.text("account").unwrap(), c - d)
        })
        .collect()
}

/// The three checks of every step.
async fn assert_books_agree(store: &DynStore, p: &Db, step: u64) {
    factledger::runtime::projection::catch_up_wallet(store, p)
        .await
        .unwrap();
    journal::catch_up(store, p).await.unwrap();
    let head = p.checkpoint(NAME, VERSION).await.unwrap();
    let tb = api::trial_balance_at(p, None, head).await.unwrap();
    assert!(tb.balanced, "step {step}: {tb:?}");
    let accounts = credit_balances(p).await;
    for wallet in WALLETS {
        let Some(projected) = p.wallet(wallet).await.unwrap() else {
            continue;
        };
        for (bucket, value) in [
            ("pending", projected.pending_minor),
            ("available", projected.available_minor),
            ("frozen", projected.frozen_minor),
            ("risk_hold", projected.risk_hold_minor),
        ] {
            let account = format!("wallet:{wallet}:{bucket}");
            assert_eq!(
                accounts.get(&account).copied().unwrap_or(0),
                value,
                "step {step}: {account} against the wallet projection"
            );
        }
    }
    let campaign = load::<Campaign>(store, "SHOPEE:ID").await.unwrap().state;
    let held = |kind: &str| {
        accounts
            .get(&format!("{kind}:SHOPEE:ID:IDR"))
            .copied()
            .unwrap_or(0)
    };
    assert_eq!(
        (held("campaign_reserved"), held("campaign_budget")),
        (campaign.reserved, FUND_MINOR - campaign.reserved),
        "step {step}: the fund's accounts against the campaign"
    );
}

async fn run_seed(db: &TestDb, seed: u64) -> Mix {
    reference_data(db).await;
    let open = serde_json::from_value(json!({"type": "Open", "campaign_id": "SHOPEE:ID",
        "quota_unit": "MINOR_UNITS", "quota_limit": FUND_MINOR, "currency": "IDR",
        "starts_at": "2026-01-01T00:00:00Z"}))
    .unwrap();
    run_command::<Campaign>(&db.store, &meta(), "SHOPEE:ID", open)
        .await
        .unwrap();
    let p = store::open(&db.url).await.unwrap().db;
    let mut r = Rng(0x9E37_79B9_7F4A_7C15 ^ seed.wrapping_mul(0xD1B5_4A32_D192_ED03));
    let mut mix = Mix::default();
    for step in 0..STEPS {
        match r.below(10) {
            0..=3 => ingest_random(&db.store, &mut r, step, &mut mix).await,
            4 => {
                settle(
                    &db.store,
                    &p,
                    2 + (step as u32 * 20 / STEPS as u32),
                    &mut mix,
                )
                .await
            }
            5 => write_off(&db.store, &mut r, &mut mix).await,
            _ => wallet_move(&db.store, &mut r, step, &mut mix).await,
        }
        assert_books_agree(&db.store, &p, step).await;
    }
    mix
}

/// How many journal lines of `entry_type` there are.
async fn lines_of(p: &Db, entry_type: &str) -> i64 {
    common::scalar(
        p,
        &format!("SELECT COUNT(*) FROM journal WHERE entry_type = '{entry_type}'"),
    )
    .await
}

both_backends!(
    mixed_money_commands_keep_the_trial_balance_zero_and_the_buckets_equal_after_every_step,
    |db: TestDb| async move {
        let mix = run_seed(&db, 1).await;
        assert!(
            mix.ingested > 15
                && mix.released > 0
                && mix.wallet_accepted > 5
                && mix.wallet_refused > 0,
            "a real mix: {mix:?}"
        );
        // Every kind of money movement the mix can make was made and journaled.
        let p = store::open(&db.url).await.unwrap().db;
        for entry in [
            "CREDIT_PENDING",
            "RELEASE_PENDING",
            "REVERSE_PENDING",
            "WITHDRAW_FREEZE",
            "QUOTA_RESERVED",
            "QUOTA_RELEASED",
        ] {
            assert!(lines_of(&p, entry).await > 0, "no {entry} in {mix:?}");
        }
    }
);
