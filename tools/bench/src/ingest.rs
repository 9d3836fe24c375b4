//! Ingest throughput (issue 5 item 8): pages of orders through `Ingestor::ingest_page`,
//! every order attributed (owner with an inviter) in a platform × country with a
//! campaign, so each order writes its order event, two commissions, a campaign
//! reservation and two wallet credits (plus the wallet opens on first use). The
//! campaign of a platform × country is a hot spot: every order of it reserves there.
//! Afterwards the store is checked, so a fast but wrong run fails.

use factledger::affiliate::ingest::{wallet_id, Ingestor};
use factledger::affiliate::OrderIngestor;
use factledger::infra::store::{DynStore, GENESIS_HASH};
use factledger::runtime::bus::{load_many, Loaded};
use factledger::runtime::unit::{run_command, UnitBuilder};
use factledger_aggregates::affiliate::Platform;
use factledger_aggregates::affiliate_link::AffiliateLink;
use factledger_aggregates::affiliate_order::NormalisedOrder;
use factledger_aggregates::campaign::Campaign;
use factledger_aggregates::commission::{commission_id, BeneficiaryRole, Commission};
use factledger_aggregates::commission_rules::CommissionRuleSet;
use factledger_aggregates::invite::InviteRelation;
use factledger_aggregates::wallet::Wallet;
use factledger_aggregates::{Currency, Decide};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Orders per page, as a platform sync pulls them.
pub const PAGE_ORDERS: u64 = 100;
/// The one country of the deployment (R-INV-11).
const COUNTRY: &str = "ID";
/// GMV and platform commission of every order: M = min(12,000, 10 % × 100,000) =
/// 10,000, so cashback 6,000 (60 %) and inviter reward 1,000 (10 %).
const GMV_MINOR: i64 = 100_000;
const PLATFORM_COMMISSION_MINOR: i64 = 12_000;
const CASHBACK_MINOR: i64 = 6_000;
const INVITER_MINOR: i64 = 1_000;
/// Reference-data units per seeding transaction.
const SEED_UNITS: usize = 500;
/// Streams per verification read.
const VERIFY_CHUNK: usize = 1_000;

pub struct Options {
    pub orders: u64,
    pub max_secs: u64,
    pub users: u64,
    pub concurrency: usize,
    pub one_by_one: bool,
}

pub async fn bench(url: &str, o: &Options) -> anyhow::Result<()> {
    anyhow::ensure!(
        o.users >= 2,
        "--users: at least 2 (an owner and an inviter)"
    );
    let store = super::fresh_store(url).await?;
    let t = Instant::now();
    seed(&store, o).await?;
    let seed_s = t.elapsed().as_secs_f64();

    let pages = o.orders.div_ceil(PAGE_ORDERS);
    let next = Arc::new(AtomicU64::new(0));
    let latencies = Arc::new(Mutex::new(Vec::<Duration>::new()));
    let done = Arc::new(AtomicU64::new(0));
    let not_created = Arc::new(AtomicU64::new(0));
    let ingestor = Ingestor::new(store.clone(), super::metadata());
    let deadline = Instant::now() + Duration::from_secs(o.max_secs);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..o.concurrency.max(1) {
        let (next, latencies, done, not_created, ingestor) = (
            next.clone(),
            latencies.clone(),
            done.clone(),
            not_created.clone(),
            ingestor.clone(),
        );
        let (total, users, one_by_one) = (o.orders, o.users, o.one_by_one);
        tasks.push(tokio::spawn(async move {
            loop {
                let page = next.fetch_add(1, Ordering::Relaxed);
                if page >= pages || Instant::now() >= deadline {
                    return anyhow::Ok(());
                }
                let first = page * PAGE_ORDERS;
                let orders = (first..(first + PAGE_ORDERS).min(total))
                    .map(|k| order(k, users))
                    .collect::<anyhow::Result<Vec<_>>>()?;
                let n = orders.len() as u64;
                let t = Instant::now();
                let results = if one_by_one {
                    let mut out = Vec::new();
                    for order in orders {
                        out.push(ingestor.ingest_one(order, None).await?);
                    }
                    out
                } else {
                    ingestor.ingest_page(orders, None).await?
                };
                super::lock(&latencies).push(t.elapsed());
                let bad = results.iter().filter(|r| r.result != "created").count() as u64;
                if let Some(r) = results.iter().find(|r| r.result != "created") {
                    eprintln!("not created: {r:?}");
                }
                not_created.fetch_add(bad, Ordering::Relaxed);
                done.fetch_add(n, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    let secs = start.elapsed().as_secs_f64();
    let done = done.load(Ordering::Relaxed);
    let not_created = not_created.load(Ordering::Relaxed);
    let mut lat = std::mem::take(&mut *super::lock(&latencies));
    lat.sort();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    let events = verify(&store, done, o.users).await?;
    anyhow::ensure!(not_created == 0, "{not_created} orders were not created");
    println!(
        "| mode | concurrency | users | orders | seconds | orders/s | page p50 ms | page p99 ms | events | events/s | seed s |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    println!(
        "| {} | {} | {} | {done} | {secs:.1} | {:.0} | {:.1} | {:.1} | {events} | {:.0} | {seed_s:.1} |",
        if o.one_by_one {
            "one unit, one transaction per order"
        } else {
            "ingest_page"
        },
        o.concurrency,
        o.users,
        done as f64 / secs,
        pct(0.50),
        pct(0.99),
        events as f64 / secs,
    );
    Ok(())
}

fn user(i: u64) -> String {
    format!("u-{i}")
}

/// Order `k`: platforms in turn, owners spread over the users.
fn order(k: u64, users: u64) -> anyhow::Result<NormalisedOrder> {
    let platform = Platform::ALL[(k % Platform::ALL.len() as u64) as usize];
    Ok(serde_json::from_value(json!({
        "platform": platform.as_str(), "country": COUNTRY, "platform_order_id": format!("b-{k}"),
        "status": "PENDING", "currency": "IDR", "gmv_minor": GMV_MINOR,
        "platform_commission_minor": PLATFORM_COMMISSION_MINOR,
        "ordered_at": "2026-03-01T00:00:00Z", "platform_updated_at": "2026-03-01T00:01:00Z",
        "attribution": {"kind": "TRACKING_ID", "value": format!("t-{}", k % users)}
    }))?)
}

fn fresh<A: Decide>() -> Loaded<A> {
    Loaded {
        state: A::default(),
        version: 0,
        last_hash: GENESIS_HASH.to_owned(),
        events_since_snapshot: 0,
        snapshot_bytes: 0,
        bytes_since_snapshot: 0,
    }
}

/// Rule set and campaign per platform × country; each user's tracking id and
/// inviter (the next user), many users per transaction.
async fn seed(store: &DynStore, o: &Options) -> anyhow::Result<()> {
    let m = super::metadata();
    for p in Platform::ALL {
        let id = format!("{}:{COUNTRY}", p.as_str());
        run_command::<CommissionRuleSet>(
            store,
            &m,
            &id,
            serde_json::from_value(json!({"type": "AddVersion", "rule_set_id": id,
                "version": 1, "effective_from": "2026-01-01T00:00:00Z", "cashback_bps": 6000,
                "inviter_bps": 1000, "max_commission_base_bps": 1000, "release_delay_days": 7,
                "requested_at": "2025-12-31T00:00:00Z"}))?,
        )
        .await
        .map_err(|e| anyhow::anyhow!("rule set {id}: {e}"))?;
        run_command::<Campaign>(
            store,
            &m,
            &id,
            serde_json::from_value(json!({"type": "Open", "campaign_id": id,
                "quota_unit": "ORDERS", "quota_limit": o.orders,
                "starts_at": "2026-01-01T00:00:00Z"}))?,
        )
        .await
        .map_err(|e| anyhow::anyhow!("campaign {id}: {e}"))?;
    }
    let mut units = Vec::new();
    for i in 0..o.users {
        let mut unit = UnitBuilder::new(store.clone(), m.clone());
        let link = format!("TRACKING_ID:t-{i}");
        unit.decide::<AffiliateLink, _>(
            &mut fresh(),
            &link,
            serde_json::from_value(json!({"type": "Register",
                "attribution": {"kind": "TRACKING_ID", "value": format!("t-{i}")},
                "user_id": user(i), "actor": "bench", "registered_at": "2026-01-01T00:00:00Z"}))?,
        )
        .map_err(
            |e: factledger::runtime::unit::UnitError<
                factledger_aggregates::affiliate_link::LinkError,
            >| { anyhow::anyhow!("link {i}: {e}") },
        )?;
        unit.decide::<InviteRelation, _>(
            &mut fresh(),
            &user(i),
            serde_json::from_value(json!({"type": "SetInviter", "user_id": user(i),
                "inviter_user_id": user((i + 1) % o.users), "actor": "bench",
                "set_at": "2026-01-01T00:00:00Z"}))?,
        )
        .map_err(
            |e: factledger::runtime::unit::UnitError<
                factledger_aggregates::invite::InviteError,
            >| { anyhow::anyhow!("invite {i}: {e}") },
        )?;
        units.push(unit.finish().0);
        if units.len() >= SEED_UNITS {
            store.append(&std::mem::take(&mut units)).await?;
        }
    }
    if !units.is_empty() {
        store.append(&units).await?;
    }
    Ok(())
}

/// Check the store against what `done` created orders must have written; returns the
/// events the ingest appended.
async fn verify(store: &DynStore, done: u64, users: u64) -> anyhow::Result<u64> {
    let mut counts: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut after = 0;
    loop {
        let page = store
            .read_all(after, factledger::infra::store::READ_LIMIT_MAX)
            .await?;
        let Some(last) = page.last() else { break };
        after = last.global_position;
        for e in page {
            *counts.entry((e.aggregate_type, e.event_type)).or_default() += 1;
        }
    }
    let count = |t: &str, e: &str| {
        counts
            .get(&(t.to_owned(), e.to_owned()))
            .copied()
            .unwrap_or(0)
    };
    let used_users = done.min(users);
    // Owners u-0..u-(used-1) and their inviters u-1..u-used (mod users).
    let wallets = if used_users == users {
        users
    } else {
        used_users + 1
    };
    let expected = [
        ("affiliate_order", "OrderIngested", done),
        ("commission", "CommissionRecorded", 2 * done),
        ("campaign", "QuotaReserved", done),
        ("wallet", "WalletOpened", wallets),
        ("wallet", "PendingCredited", 2 * done),
    ];
    for (t, e, want) in expected {
        anyhow::ensure!(
            count(t, e) == want,
            "{t} {e}: {} events, want {want}",
            count(t, e)
        );
    }
    let ingest_events: u64 = expected.iter().map(|(_, _, n)| n).sum();
    // Σ commission amounts = Σ wallet pending = what the orders yield.
    let ids: Vec<String> = (0..done)
        .flat_map(|k| {
            let platform = Platform::ALL[(k % Platform::ALL.len() as u64) as usize];
            let order = format!("{}:b-{k}", platform.as_str());
            [BeneficiaryRole::Cashback, BeneficiaryRole::InviterReward]
                .map(|r| commission_id(&order, r))
        })
        .collect();
    let mut commissions = 0i64;
    for chunk in ids.chunks(VERIFY_CHUNK) {
        for (_, c) in load_many::<Commission>(store, chunk).await? {
            commissions += c.state.record.map_or(0, |r| r.amount_minor);
        }
    }
    let currency = Currency::parse("IDR")?;
    let ids: Vec<String> = (0..users).map(|i| wallet_id(&user(i), currency)).collect();
    let mut pending = 0i64;
    for chunk in ids.chunks(VERIFY_CHUNK) {
        for (_, w) in load_many::<Wallet>(store, chunk).await? {
            pending += w.state.balances.pending_minor;
        }
    }
    let want = done as i64 * (CASHBACK_MINOR + INVITER_MINOR);
    anyhow::ensure!(
        commissions == want && pending == want,
        "commissions {commissions}, wallet pending {pending}, want {want}"
    );
    Ok(ingest_events)
}
