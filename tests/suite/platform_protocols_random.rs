//! TikTok Shop and Shopee through the simulator, randomized (issue 33, "Done means"):
//! a seeded run of sync rounds per platform (its own signed protocol, the real ingest
//! unit behind the job) while the platform delivers the same orders again (a page
//! repeated by offset drift, the same order twice in a listing, the overlap and the
//! lookback re-pulling windows already pulled, a round run twice at the same clock),
//! serves updates out of time order (an older status replayed after a newer one) and
//! refuses rounds signed with a forged secret. Money never moves twice: every order
//! has one order stream created once, every commission is credited at most once, and
//! the orders, commissions and wallets end equal to what the simulator's final orders
//! imply. The seed is `FACTLEDGER_PLATFORM_SEED` (default [`DEFAULT_SEED`]); a
//! failure prints it.

use crate::common::{meta, reference_data, scalar, TestDb};
use crate::platform_protocols::round_into;
use crate::platform_sync::order;
use async_trait::async_trait;
use chrono::Utc;
use factledger::affiliate::ingest::Ingestor;
use factledger::affiliate::sync::{SyncTask, OVERLAP_MS, SAFETY_LAG_MS};
use factledger::affiliate::{IngestError, IngestResult, OrderIngestor};
use factledger::infra::jobs::JobStatus;
use factledger::infra::store::Fence;
use factledger::runtime::bus::load;
use factledger::runtime::unit::run_command;
use factledger_aggregates::affiliate::Platform;
use factledger_aggregates::affiliate_order::{AffiliateOrder, NormalisedOrder, OrderStatus};
use factledger_aggregates::commission::{
    commission_id, BeneficiaryRole, Commission, CommissionStatus,
};
use factledger_aggregates::commission_rules::CommissionRuleSet;
use factledger_aggregates::wallet::Wallet;
use platform_sim::auth::{test_shopee_secret, TEST_TIKTOK_APP_SECRET};
use platform_sim::{Sim, SimOrder, SubId};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const MINUTE_MS: i64 = 60_000;
const HOUR_MS: i64 = 60 * MINUTE_MS;
/// Steps per run: each changes the platform's data and runs one or more rounds.
const STEPS: usize = 30;
/// How far the sync's clock moves per step: well inside the 30-minute overlap, so an
/// order's status changes for a few steps after its creation are re-pulled.
const STEP_MS: i64 = 5 * MINUTE_MS;
/// No new step starts after this long (the final checks still run).
const TIME_BUDGET: Duration = Duration::from_secs(90);
const DEFAULT_SEED: u64 = 33;
/// The attributed buyer (`reference_data`: link `TRACKING_ID:t-1`) and its inviter.
const OWNER_WALLET: &str = "u-1:IDR";
const INVITER_WALLET: &str = "u-0:IDR";
const FORGED: &str = "forged-secret";

fn seed() -> u64 {
    std::env::var("FACTLEDGER_PLATFORM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_SEED)
}

/// The real ingest unit, with what it was handed and what it answered counted.
struct Tap {
    inner: Ingestor,
    /// Orders handed over (duplicates included) and pages.
    delivered: Mutex<(usize, usize)>,
    /// Each order's ingest results (`created`, `updated`, `unchanged`, `ignored_stale` …).
    results: Mutex<HashMap<String, Vec<String>>>,
}

#[async_trait]
impl OrderIngestor for Tap {
    async fn ingest_page(
        &self,
        orders: Vec<NormalisedOrder>,
        fence: Option<Fence>,
    ) -> Result<Vec<IngestResult>, IngestError> {
        {
            let mut d = self.delivered.lock().unwrap();
            d.0 += orders.len();
            d.1 += 1;
        }
        let results = self.inner.ingest_page(orders, fence).await?;
        let mut by_order = self.results.lock().unwrap();
        for r in &results {
            by_order
                .entry(r.platform_order_id.clone())
                .or_default()
                .push(r.result.clone());
        }
        Ok(results)
    }
}

impl Tap {
    fn delivered(&self) -> (usize, usize) {
        *self.delivered.lock().unwrap()
    }

    fn count(&self, result: &str) -> usize {
        let by_order = self.results.lock().unwrap();
        by_order
            .values()
            .flatten()
            .filter(|r| r.as_str() == result)
            .count()
    }
}

/// The platform's orders as the test scripted them: each order's versions, oldest
/// first (the last is the simulator's current version).
#[derive(Default)]
struct Truth {
    versions: BTreeMap<String, Vec<SimOrder>>,
}

impl Truth {
    fn current(&self, id: &str) -> &SimOrder {
        self.versions[id].last().unwrap()
    }
}

/// What factledger keeps for a platform status (Shopee's conversions know no refund:
/// a refunded order is CANCELLED there).
fn stored_status(platform: Platform, status: &str) -> OrderStatus {
    match (platform, status) {
        (_, "PENDING") => OrderStatus::Pending,
        (_, "COMPLETED") => OrderStatus::Completed,
        (Platform::TikTok, _) => OrderStatus::Refunded,
        _ => OrderStatus::Cancelled,
    }
}

/// Cashback and inviter reward of an order under the test rules (base = min(platform
/// commission, 10 % of GMV); 60 % and 10 % of it, rounded down).
fn expected_amounts(o: &SimOrder) -> (i64, i64) {
    let base = o.commission_minor.min(o.gmv_minor * 1_000 / 10_000);
    (base * 6_000 / 10_000, base * 1_000 / 10_000)
}

async fn rules_for(db: &TestDb, platform: Platform) {
    reference_data(db).await;
    if platform == Platform::Shopee {
        return;
    }
    let id = format!("{}:ID", platform.as_str());
    run_command::<CommissionRuleSet>(
        &db.store,
        &meta(),
        &id,
        serde_json::from_value(serde_json::json!({"type": "AddVersion", "rule_set_id": id,
            "version": 1, "effective_from": "2026-01-01T00:00:00Z", "cashback_bps": 6000,
            "inviter_bps": 1000, "max_commission_base_bps": 1000, "release_delay_days": 7,
            "requested_at": "2025-12-31T00:00:00Z"}))
        .unwrap(),
    )
    .await
    .unwrap();
}

/// A new order of the run, attributed to `t-1` most of the time.
fn new_order(rng: &mut StdRng, n: usize, update_ms: i64) -> SimOrder {
    let gmv = rng.random_range(50..=500) * 1_000;
    let status = if rng.random_bool(0.8) {
        "PENDING"
    } else {
        "COMPLETED"
    };
    let mut o = order(&format!("R{n:03}"), status, gmv, update_ms);
    o.create_time_ms = update_ms;
    // 2 % to 15 % of GMV: above 10 % the rules' cap applies.
    o.commission_minor = gmv * rng.random_range(2..=15) / 100;
    if rng.random_bool(0.85) {
        o.sub_id = Some(SubId {
            kind: "TRACKING_ID".into(),
            value: "t-1".into(),
        });
    }
    o
}

/// The next status along the platform's life of an order, if it has one.
fn next_status(rng: &mut StdRng, status: &str) -> Option<&'static str> {
    match status {
        "PENDING" if rng.random_bool(0.6) => Some("COMPLETED"),
        "PENDING" | "COMPLETED" => Some("REFUNDED"),
        _ => None,
    }
}

async fn random_run(db: TestDb, platform: Platform) {
    let seed = seed();
    let ctx = format!("{platform} seed {seed} (FACTLEDGER_PLATFORM_SEED)");
    // One stream of choices per platform from the one seed.
    let salt = if platform == Platform::TikTok { 1 } else { 2 };
    let mut rng = StdRng::seed_from_u64(seed.wrapping_mul(31).wrapping_add(salt));
    rules_for(&db, platform).await;
    let sim = platform_sim::spawn("127.0.0.1:0".parse().unwrap(), Sim::new())
        .await
        .unwrap();
    let key = platform.as_str().to_ascii_lowercase();
    let (secret, documented) = match platform {
        Platform::TikTok => (TEST_TIKTOK_APP_SECRET.to_owned(), "error 106001"),
        _ => (test_shopee_secret("ID"), "error 10020: Invalid Signature"),
    };
    let tap = Arc::new(Tap {
        inner: Ingestor::new(db.store.clone(), meta()),
        delivered: Mutex::default(),
        results: Mutex::default(),
    });
    let ingest: Arc<dyn OrderIngestor> = tap.clone();

    let mut truth = Truth::default();
    let mut now = Utc::now().timestamp_millis() / MINUTE_MS * MINUTE_MS;
    // A few orders from the last day before the first round.
    for n in 0..4 {
        let o = new_order(&mut rng, n, now - (20 - n as i64) * HOUR_MS);
        sim.sim.upsert(&key, std::slice::from_ref(&o)).unwrap();
        truth.versions.insert(o.order_id.clone(), vec![o]);
    }
    let mut next_id = truth.versions.len();
    let (mut forged_rounds, mut stale_replays, mut duplicate_replays) = (0, 0, 0);
    let started = Instant::now();
    for step in 0..STEPS {
        if started.elapsed() > TIME_BUDGET {
            break;
        }
        let ctx = format!("{ctx}, step {step}");
        let before = now;
        now += STEP_MS;
        // Both platforms list by creation time: this step's new orders land in the
        // window the next round pulls, and a change of an order is seen when a window
        // covering its creation is pulled again (the overlap of the next round, or the
        // lookback sweep), so only orders the next round's overlap covers change.
        let window_from = before - SAFETY_LAG_MS;
        let recent = |o: &SimOrder| o.create_time_ms >= window_from - OVERLAP_MS;
        let mut touched: Vec<String> = Vec::new();
        for _ in 0..rng.random_range(1..=3) {
            let at = window_from + rng.random_range(0..STEP_MS / MINUTE_MS) * MINUTE_MS;
            let ids: Vec<String> = truth.versions.keys().cloned().collect();
            let pick = ids[rng.random_range(0..ids.len())].clone();
            match rng.random_range(0..6) {
                // A new order.
                0 | 1 => {
                    let o = new_order(&mut rng, next_id, at);
                    next_id += 1;
                    sim.sim.upsert(&key, std::slice::from_ref(&o)).unwrap();
                    touched.push(o.order_id.clone());
                    truth.versions.insert(o.order_id.clone(), vec![o]);
                }
                // An order moves on (one version per order per step: update times
                // only grow).
                2 | 3 if !touched.contains(&pick) && recent(truth.current(&pick)) => {
                    let current = truth.current(&pick).clone();
                    if let Some(status) = next_status(&mut rng, &current.order_status) {
                        let next = SimOrder {
                            order_status: status.into(),
                            update_time_ms: at,
                            ..current.clone()
                        };
                        sim.sim.upsert(&key, std::slice::from_ref(&next)).unwrap();
                        if rng.random_bool(0.4) {
                            // The older status comes again right behind it.
                            let older = SimOrder {
                                update_time_ms: (at - MINUTE_MS).max(current.create_time_ms),
                                ..current
                            };
                            sim.sim.replay(&key, &[older]).unwrap();
                            stale_replays += 1;
                        }
                        truth.versions.get_mut(&pick).unwrap().push(next);
                        touched.push(pick);
                    }
                }
                // An older status replayed after the newer one (an older update time,
                // the same creation: listed right after the current version).
                4 if recent(truth.current(&pick)) && truth.versions[&pick].len() >= 2 => {
                    let versions = &truth.versions[&pick];
                    let current = versions.last().unwrap();
                    let older = SimOrder {
                        update_time_ms: (current.update_time_ms - MINUTE_MS)
                            .max(current.create_time_ms),
                        ..versions[versions.len() - 2].clone()
                    };
                    sim.sim.replay(&key, &[older]).unwrap();
                    stale_replays += 1;
                }
                // The same version again (the same order twice in one listing, so
                // often on two pages).
                _ => {
                    let again = truth.current(&pick).clone();
                    sim.sim.replay(&key, &[again]).unwrap();
                    duplicate_replays += 1;
                }
            }
        }
        sim.sim.set_duplicate_page_boundary(rng.random_bool(0.3));

        // A round signed with a forged secret: refused, nothing ingested.
        if rng.random_bool(0.2) {
            let refusals = sim.sim.refusals().len();
            let delivered = tap.delivered();
            let (status, error) = round_into(
                &db,
                &sim,
                (platform, FORGED),
                now,
                SyncTask::Incremental,
                ingest.clone(),
            )
            .await;
            assert_eq!(status, JobStatus::Failed, "{ctx}: forged round");
            let error = error.unwrap_or_default();
            assert!(error.contains(documented), "{ctx}: {error}");
            assert_eq!(sim.sim.refusals().len(), refusals + 1, "{ctx}");
            assert_eq!(tap.delivered(), delivered, "{ctx}: forged round ingested");
            forged_rounds += 1;
        }
        let mut tasks = vec![SyncTask::Incremental];
        if rng.random_bool(0.2) {
            // The same window pulled twice at the same clock.
            tasks.push(SyncTask::Incremental);
        }
        if rng.random_bool(0.15) {
            tasks.push(SyncTask::Lookback);
        }
        for task in tasks {
            let (status, error) =
                round_into(&db, &sim, (platform, &secret), now, task, ingest.clone()).await;
            assert_eq!(status, JobStatus::Success, "{ctx}: {task:?} {error:?}");
        }
    }

    // Every order reached factledger once as a new order, through one order stream.
    let orders = truth.versions.len();
    let (delivered, pages) = tap.delivered();
    assert!(
        delivered > orders,
        "{ctx}: duplicates delivered ({delivered} deliveries, {orders} orders, {pages} pages)"
    );
    assert!(
        forged_rounds > 0 && stale_replays > 0 && duplicate_replays > 0,
        "{ctx}: every kind of delivery happened"
    );
    assert!(
        tap.count("unchanged") > 0,
        "{ctx}: duplicates reached the unit"
    );
    assert!(
        tap.count("ignored_stale") > 0,
        "{ctx}: stale versions reached the unit"
    );
    eprintln!(
        "{ctx}: {orders} orders, {delivered} deliveries in {pages} pages, {forged_rounds} forged \
         rounds, {stale_replays} stale and {duplicate_replays} duplicate replays; results: \
         {} unchanged, {} stale, {} illegal",
        tap.count("unchanged"),
        tap.count("ignored_stale"),
        tap.count("ignored_illegal_transition")
    );
    let by_order = tap.results.lock().unwrap().clone();
    for id in truth.versions.keys() {
        let results = by_order.get(id).map(Vec::as_slice).unwrap_or_default();
        let created = results.iter().filter(|r| *r == "created").count();
        assert_eq!(created, 1, "{ctx}: {id} {results:?}");
        assert!(
            results.iter().all(|r| !r.starts_with("rejected")),
            "{ctx}: {id} {results:?}"
        );
    }
    assert_eq!(by_order.len(), orders, "{ctx}: {:?}", by_order.keys());
    let store = db.database().await.db;
    let streams = scalar(
        &store,
        "SELECT COUNT(DISTINCT aggregate_id) FROM events WHERE aggregate_type = 'affiliate_order'",
    )
    .await;
    assert_eq!(streams, orders as i64, "{ctx}: one order stream per order");

    // The final state is the simulator's truth: each order, its commissions, the
    // wallets' balances.
    let (mut cashback_due, mut inviter_due, mut recorded) = (0, 0, 0);
    for (id, versions) in &truth.versions {
        let want = versions.last().unwrap();
        assert_eq!(
            sim.sim.current(&key, "ID", id).as_ref(),
            Some(want),
            "{ctx}: the simulator's current version"
        );
        let stream = format!("{}:{id}", platform.as_str());
        let known = load::<AffiliateOrder>(&db.store, &stream)
            .await
            .unwrap()
            .state
            .order
            .unwrap_or_else(|| panic!("{ctx}: {id} ingested"));
        let status = stored_status(platform, &want.order_status);
        assert_eq!(known.status, status, "{ctx}: {id}");
        assert_eq!(
            known.platform_updated_at.timestamp_millis(),
            want.update_time_ms,
            "{ctx}: {id}"
        );
        assert_eq!(known.gmv_minor, want.gmv_minor, "{ctx}: {id}");
        assert_eq!(
            known.platform_commission_minor, want.commission_minor,
            "{ctx}: {id}"
        );
        let attributed = want.sub_id.is_some();
        assert_eq!(
            known.owner_user_id.as_deref(),
            attributed.then_some("u-1"),
            "{ctx}: {id}"
        );
        let (cashback, inviter) = expected_amounts(want);
        for (role, amount) in [
            (BeneficiaryRole::Cashback, cashback),
            (BeneficiaryRole::InviterReward, inviter),
        ] {
            let cid = commission_id(&stream, role);
            let record = load::<Commission>(&db.store, &cid)
                .await
                .unwrap()
                .state
                .record;
            match record {
                None => assert!(
                    !attributed || amount == 0 || status.is_void(),
                    "{ctx}: {cid} never recorded"
                ),
                Some(c) => {
                    recorded += 1;
                    assert!(attributed, "{ctx}: {cid}");
                    assert_eq!(c.recorded_amount_minor, amount, "{ctx}: {cid}");
                    if status.is_valid() {
                        assert_eq!(c.status, CommissionStatus::Pending, "{ctx}: {cid}");
                        assert_eq!(c.amount_minor, amount, "{ctx}: {cid}");
                        match role {
                            BeneficiaryRole::Cashback => cashback_due += amount,
                            BeneficiaryRole::InviterReward => inviter_due += amount,
                        }
                    } else {
                        assert_eq!(c.status, CommissionStatus::Invalid, "{ctx}: {cid}");
                    }
                }
            }
        }
    }
    assert!(recorded > 0, "{ctx}: no commission at all");
    // Each commission credited (and reversed) at most once: one ledger entry per
    // commission and kind, and as many credits as commissions.
    for kind in ["PendingCredited", "PendingReversed"] {
        let twice = scalar(
            &store,
            &format!(
                "SELECT COUNT(*) FROM (SELECT ledger_ref_id FROM events \
                 WHERE aggregate_type = 'wallet' AND event_type = '{kind}' \
                 GROUP BY ledger_ref_type, ledger_ref_id HAVING COUNT(*) > 1) twice"
            ),
        )
        .await;
        assert_eq!(twice, 0, "{ctx}: a commission's {kind} entry twice");
    }
    let credits = scalar(
        &store,
        "SELECT COUNT(*) FROM events WHERE aggregate_type = 'wallet' \
         AND event_type = 'PendingCredited'",
    )
    .await;
    assert_eq!(credits, recorded, "{ctx}: one credit per commission");
    for (wallet, due) in [(OWNER_WALLET, cashback_due), (INVITER_WALLET, inviter_due)] {
        let w = load::<Wallet>(&db.store, wallet).await.unwrap().state;
        assert_eq!(w.balances.pending_minor, due, "{ctx}: {wallet} pending");
        assert_eq!(w.balances.available_minor, 0, "{ctx}: {wallet} available");
    }
    assert_eq!(sim.sim.refusals().len(), forged_rounds, "{ctx}");
}

both_backends!(
    tiktok_random_duplicates_reorders_and_forgeries_move_money_once,
    |db| async move { random_run(db, Platform::TikTok).await }
);

both_backends!(
    shopee_random_duplicates_reorders_and_forgeries_move_money_once,
    |db| async move { random_run(db, Platform::Shopee).await }
);
