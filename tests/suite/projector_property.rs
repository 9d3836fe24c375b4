//! Issue 14 item 4, as a property: **no sequence of commands the API accepts can stop
//! a projector.** A seeded generator (a small xorshift, so a failing seed replays
//! exactly) drives random commands per domain through the HTTP API — wallets,
//! affiliate orders, and bills with the shapes that used to stop or corrupt the bill
//! projection: ids reused across stations (F2), partner bills re-linked by other
//! station-months and of other months (F12, F13), locks on unknown orders and lines
//! (F14), line and lock ids reused across orders and station-months. Ids come from
//! small pools so collisions are the rule. Any answer but 5xx is fine (the API
//! refuses what is not valid); then every projector must reach the head with no
//! error and `/health` must be ok. Bounded: `SEEDS` × `STEPS` commands per backend.

use crate::common;

use common::{Server, TestDb};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Seeds run per backend (each its own fresh database).
const SEEDS: u64 = 2;
/// Commands per seed, spread over the three domains.
const STEPS: usize = 240;

/// xorshift64*: small, deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// 1..=n.
    fn pick(&mut self, n: u64) -> i64 {
        (self.next() % n) as i64 + 1
    }

    fn one<'a>(&mut self, of: &[&'a str]) -> &'a str {
        of[(self.next() % of.len() as u64) as usize]
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

const MONTHS: &[&str] = &["202608", "202609"];

fn month(r: &mut Rng) -> &'static str {
    r.one(MONTHS)
}

/// A random bill command: `(path, body)`.
fn bill_command(r: &mut Rng) -> (String, Value) {
    let (station, m) = (r.pick(4), month(r));
    match r.pick(14) {
        1 | 2 => (
            "/v1/bills/small-bills".into(),
            json!({"station_id": station, "month": m, "bill_id": r.pick(6),
                   "account_id": r.pick(2), "rent_minor": r.pick(5) * 1000}),
        ),
        3 | 4 => {
            let partner = r.chance(70).then(|| r.pick(4));
            (
                "/v1/bills/diffs".into(),
                json!({"station_id": station, "month": m, "diff_id": r.pick(6),
                       "partner_bill_id": partner}),
            )
        }
        5 => (
            "/v1/bills/partner-bills".into(),
            json!({"partner_bill_id": r.pick(4), "partner_account_id": r.pick(2),
                   "month": m, "pre_rent_minor": r.pick(4) * 500,
                   "deduction_minor": r.pick(3) * 100}),
        ),
        6 => reference(r),
        7 => (
            "/v1/payment-orders".into(),
            json!({"order_id": r.pick(3), "treasury": r.chance(50)}),
        ),
        8 => (
            format!("/v1/payment-orders/{}/lines", r.pick(3)),
            json!({"line_id": r.pick(6), "station_id": station, "month": m,
                   "kind": r.one(&["PAYABLE", "PAYABLE", "UNQUALIFIED"]),
                   "planned_amount_minor": r.pick(5) * 1000}),
        ),
        9 => {
            let action = r.one(&["publish", "submit", "approve", "reject", "void"]);
            (
                format!("/v1/payment-orders/{}:{action}", r.pick(3)),
                json!({"reason": "property"}),
            )
        }
        10 | 11 => (
            "/v1/bills/locks".into(),
            json!({"lock_id": r.pick(4), "station_id": station, "month": m,
                   "order_id": r.pick(4), "line_id": r.pick(7),
                   "publish_version": r.pick(3), "submit_round": r.pick(2)}),
        ),
        12 => {
            let action = r.one(&["activate", "release"]);
            (
                format!("/v1/bills/locks/{station}/{m}/{}:{action}", r.pick(4)),
                json!({}),
            )
        }
        13 => {
            let status = r.one(&["PAYING", "PAY_SUCCESS", "PAY_FAIL"]);
            (
                "/v1/bills/payment-results".into(),
                json!({"result_id": r.pick(8), "order_id": r.pick(3), "line_id": r.pick(6),
                       "small_station_id": station, "partner_org_id": 1, "month": m,
                       "status": status, "kind": "NORMAL_PAYMENT",
                       "source": r.one(&["TREASURY", "OFFLINE_IMPORT", "FAIL_FALLBACK"]),
                       "amount_minor": r.pick(5) * 1000,
                       "paid_at": "2026-09-05T08:00:00Z",
                       "trigger_source": r.one(&["TREASURY_RESULT_WRITEBACK", "MANUAL"])}),
            )
        }
        _ => (
            format!("/v1/bills/payment-results/{}:void", r.pick(8)),
            json!({"trigger_source": "PAYMENT_IMPORT_DELETE"}),
        ),
    }
}

/// Reference data the decision reads, so some station-months decide for real.
fn reference(r: &mut Rng) -> (String, Value) {
    let (kind, body) = match r.pick(4) {
        1 => (
            "customer-accounts",
            json!({"account_id": r.pick(2), "income_start_month": "202601",
                   "current_payable_cutoff_month": "202612"}),
        ),
        2 => (
            "partner-accounts",
            json!({"partner_account_id": r.pick(2), "partner_org_id": 1,
                   "platform_station_id": r.pick(4)}),
        ),
        3 => (
            "partner-profiles",
            json!({"partner_org_id": 1, "payment_cycle": "MONTHLY",
                   "config_version": r.pick(3)}),
        ),
        _ => (
            "account-route",
            json!({"route": r.one(&["DEFAULT", "PLATFORM"])}),
        ),
    };
    (format!("/v1/bills/reference/{kind}"), body)
}

/// A random wallet command on one of three wallets.
fn wallet_command(r: &mut Rng) -> (String, Value) {
    let wallet = format!("w-{}", r.pick(3));
    let types = [
        "Open",
        "CreditPending",
        "CreditPending",
        "ReleasePending",
        "ReversePending",
        "FreezeForWithdrawal",
        "Unfreeze",
        "PayOutFrozen",
        "PlaceRiskHold",
        "ReleaseRiskHold",
        "BlockWithdrawals",
        "UnblockWithdrawals",
    ];
    let kind = r.one(&types);
    let body = match kind {
        "Open" => json!({"type": "Open", "user_id": format!("u-{wallet}"), "currency": "IDR"}),
        "BlockWithdrawals" | "UnblockWithdrawals" => json!({"type": kind,
            "ref_type": "RECOVERY_RISK", "ref_id": format!("rr-{}", r.pick(2))}),
        _ => json!({"type": kind, "ref_type": "COMMISSION",
            "ref_id": format!("c-{}", r.pick(5)), "amount_minor": r.pick(4) * 100}),
    };
    (format!("/v1/wallets/{wallet}/commands"), body)
}

/// A random ingest page of affiliate orders (statuses in any order: illegal edges
/// and stale updates are the API's to refuse or ignore).
fn affiliate_command(r: &mut Rng, step: usize) -> (String, Value) {
    let updated = format!("2026-03-01T00:{:02}:{:02}Z", step / 60 % 60, step % 60);
    let orders: Vec<Value> = (0..r.pick(3))
        .map(|_| {
            let status = r.one(&[
                "PENDING",
                "COMPLETED",
                "REFUNDING",
                "PARTIALLY_REFUNDED",
                "REFUNDED",
                "CANCELLED",
            ]);
            json!({"platform": "SHOPEE", "country": "ID",
                   "platform_order_id": format!("o-{}", r.pick(5)), "status": status,
                   "currency": "IDR", "gmv_minor": r.pick(5) * 20_000,
                   "platform_commission_minor": r.pick(5) * 2_000,
                   "ordered_at": "2026-03-01T00:00:00Z", "platform_updated_at": updated,
                   "attribution": {"kind": "TRACKING_ID", "value": "t-1"}})
        })
        .collect();
    ("/v1/orders:ingest".into(), json!({ "orders": orders }))
}

/// Every projector at `head` with no error, within a bounded wait.
async fn all_projectors_at_head(app: &Server, head: i64, seed: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, list) = app.get("/v1/projections").await;
        let list = list.as_array().cloned().unwrap_or_default();
        let errors: Vec<&Value> = list.iter().filter(|s| !s["last_error"].is_null()).collect();
        assert!(
            errors.is_empty(),
            "seed {seed}: a projector stopped: {errors:?}"
        );
        if !list.is_empty() && list.iter().all(|s| s["position"] == head) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "seed {seed}: not all at {head}: {list:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn run_seed(db: &TestDb, seed: u64) {
    common::reference_data(db).await;
    let app = Server::start(db).await;
    let mut r = Rng(0x9E37_79B9_7F4A_7C15 ^ seed.wrapping_mul(0xD1B5_4A32_D192_ED03));
    let mut accepted = 0usize;
    for step in 0..STEPS {
        let (path, body) = match step % 4 {
            0 => wallet_command(&mut r),
            1 => affiliate_command(&mut r, step),
            _ => bill_command(&mut r),
        };
        let (status, answer) = app.post(&path, body.clone()).await;
        assert!(
            status < 500,
            "seed {seed} step {step}: {path} {body} → {status} {answer}"
        );
        accepted += usize::from(status < 300);
    }
    assert!(
        accepted > STEPS / 4,
        "seed {seed}: only {accepted} accepted"
    );
    let head = db.store.head_position().await.unwrap();
    all_projectors_at_head(&app, head, seed).await;
    let health = app
        .client
        .get(format!("{}/health", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status().as_u16(), 200, "seed {seed}");
}

both_backends!(
    f2_random_valid_commands_never_stop_a_projector,
    |db: TestDb| async move {
        let backend = db.backend;
        run_seed(&db, 1).await;
        drop(db);
        for seed in 2..=SEEDS {
            // A fresh database per seed, of the same backend.
            run_seed(&TestDb::new(backend).await, seed).await;
        }
    }
);
