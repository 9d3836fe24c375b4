//! Pipelined ingest pages (`Ingestor::ingest_page`, issue 19 item 4) under injected
//! commit failures, as a property.
//!
//! One ingestor, cloned into 4 callers that each send 8 pages of 5–16 orders at once:
//! page N+1 is decided on the campaign and wallet states page N left in the shared
//! cache while N's append is on its way. Orders are drawn from a pool of 90, each with
//! a fixed chain of platform reports (PENDING, then COMPLETED, REFUNDING, REFUNDED,
//! CANCELLED … at later `platform_updated_at`), so pages collide on order streams,
//! on commissions, on the one campaign and on five wallets, and the same report or a
//! newer or an older one comes back in other pages. The store fails appends at
//! random: before anything is written (15 %), or AFTER the commit with the answer
//! lost (10 %). A caller retries a page that failed, and the orders of a page refused
//! on a conflict or a store error, up to 25 times; nothing else may be refused.
//!
//! Then, from the real store's log (every order reported is ingested by then, so its
//! final state is its newest report):
//!
//! - every stream's sequences are 1..n, and the hash chains verify;
//! - every order stream starts with its one `OrderIngested`, its reports are in it in
//!   strictly increasing `platform_updated_at` (a report written twice would repeat
//!   one), it ends in the newest report sent, with the owner and inviter its link
//!   gives; an order reported `created` (or `audit_only_invalid`) was created by that
//!   very report, at most once; an order reported `updated` has that report in it;
//! - every commission stream starts with its one `CommissionRecorded`, exists for each
//!   role of an order that ends valid, with the amount the rules give and the status
//!   the order's final status gives; its wallet holds exactly one credit for it (same
//!   wallet, same amount) and one reversal per invalidation;
//! - the campaign's active reservations are exactly the owned orders that end valid
//!   (its quota is never reached), released ones only orders that end void, one
//!   `QuotaReserved` per reservation and one `QuotaReleased` per release;
//! - each wallet's pending balance is what the orders' final states give it — the
//!   sum of the cashback and inviter shares of the orders that end valid — and the
//!   sum of its credits minus its reversals in the log; no ledger entry twice.
//!
//! A second, deterministic test (`pages_after_a_failed_one`) checks that pages after
//! a failed one still go to the store as one group.
//!
//! Seeded (`FACTLEDGER_INGEST_PIPELINE_SEED` picks another; a failure prints the
//! seed). The failures' interleaving with the callers is not replayed exactly (the
//! hook's generator is shared by concurrent appends), the orders sent are.

use crate::common::hooked_store::{AppendHook, Flaky, HookedStore};
use crate::common::{meta, reference_data, Rng, TestDb};
use factledger::affiliate::ingest::Ingestor;
use factledger::affiliate::{IngestResult, OrderIngestor};
use factledger::infra::store::{
    CommittedUnit, DynStore, StoreError, StoredEvent, UnitOfWork, READ_LIMIT_MAX,
};
use factledger::runtime::bus::load;
use factledger::runtime::unit::run_command;
use factledger_aggregates::affiliate_link::AffiliateLink;
use factledger_aggregates::affiliate_order::{AffiliateOrder, NormalisedOrder};
use factledger_aggregates::campaign::Campaign;
use factledger_aggregates::commission::{Commission, CommissionStatus};
use factledger_aggregates::invite::InviteRelation;
use factledger_aggregates::wallet::Wallet;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const CALLERS: u64 = 4;
const PAGES_PER_CALLER: u64 = 8;
/// Orders per page: 5 up to 5 + `PAGE_SPREAD` - 1.
const PAGE_SPREAD: u64 = 12;
/// Distinct orders the pages draw from.
const POOL: u64 = 90;
/// Attempts of one page (its first send and the retries of what is still open).
const ATTEMPTS_MAX: u32 = 25;
const SEED_ENV: &str = "FACTLEDGER_INGEST_PIPELINE_SEED";
/// Most an append waits before it reaches the store.
const LATENCY_US_MAX: u64 = 3_000;
const CAMPAIGN: &str = "SHOPEE:ID";
/// Far above the orders of the pool: every owned valid order reserves.
const QUOTA: i64 = 10_000;

/// The platform's reports of one order, oldest first: (status, minute of
/// `platform_updated_at`). Every step is a legal transition (R-ORD-3), so a report
/// is either newer than what is known (applied), the same (unchanged) or older
/// (ignored as stale).
const CHAINS: [&[(&str, u32)]; 6] = [
    &[("PENDING", 1), ("COMPLETED", 5)],
    &[("PENDING", 1), ("COMPLETED", 5), ("REFUNDING", 9)],
    &[("PENDING", 1), ("COMPLETED", 5), ("REFUNDED", 9)],
    &[("PENDING", 1), ("REFUNDING", 5), ("REFUNDED", 9)],
    &[("PENDING", 1), ("CANCELLED", 5)],
    &[("PENDING", 1), ("REFUNDING", 5), ("COMPLETED", 9)],
];

/// Tracking ids: (id, owner, owner's inviter). `t-1` (u-1, invited by u-0) is
/// `common::reference_data`'s; t-2..t-4 are registered here; t-9 is nobody's.
const LINKS: [(&str, Option<&str>, Option<&str>); 5] = [
    ("t-1", Some("u-1"), Some("u-0")),
    ("t-2", Some("u-2"), Some("u-0")),
    ("t-3", Some("u-3"), Some("u-1")),
    ("t-4", Some("u-4"), None),
    ("t-9", None, None),
];
const USERS: [&str; 5] = ["u-0", "u-1", "u-2", "u-3", "u-4"];

/// One order of the pool.
struct Spec {
    platform_order_id: String,
    /// Index in [`LINKS`]; `None`: no attribution at all.
    link: Option<usize>,
    gmv: i64,
    platform_commission: i64,
    chain: &'static [(&'static str, u32)],
}

impl Spec {
    fn new(i: u64, rng: &mut Rng) -> Spec {
        // t-1 three times as often as the others, so pages meet on its wallets.
        let link = match rng.below(9) {
            0..=2 => Some(0),
            3 | 4 => Some(1),
            5 => Some(2),
            6 => Some(3),
            7 => Some(4),
            _ => None,
        };
        Spec {
            platform_order_id: format!("p-{i}"),
            link,
            // Bases are multiples of 500: the 60 % and 10 % shares are exact.
            gmv: 10_000 * (5 + rng.below(20) as i64),
            platform_commission: 500 * (4 + rng.below(40) as i64),
            chain: CHAINS[rng.below(CHAINS.len() as u64) as usize],
        }
    }

    fn stream_id(&self) -> String {
        format!("SHOPEE:{}", self.platform_order_id)
    }

    fn report(&self, version: usize) -> NormalisedOrder {
        let (status, minute) = self.chain[version];
        let mut v = json!({
            "platform": "SHOPEE", "country": "ID",
            "platform_order_id": self.platform_order_id,
            "status": status, "currency": "IDR", "gmv_minor": self.gmv,
            "platform_commission_minor": self.platform_commission,
            "ordered_at": "2026-03-01T00:00:00Z",
            "platform_updated_at": updated_at(minute).to_rfc3339(),
        });
        if let Some(l) = self.link {
            v["attribution"] = json!({"kind": "TRACKING_ID", "value": LINKS[l].0});
        }
        serde_json::from_value(v).expect("order")
    }

    fn owner(&self) -> Option<&'static str> {
        self.link.and_then(|l| LINKS[l].1)
    }

    fn inviter(&self) -> Option<&'static str> {
        self.link.and_then(|l| LINKS[l].2)
    }

    /// M = min(platform commission, 10 % of GMV) (rules of `reference_data`).
    fn base(&self) -> i64 {
        self.platform_commission.min(self.gmv / 10)
    }

    /// The commissions the order earns: (stream id, beneficiary, amount).
    fn roles(&self) -> Vec<(String, &'static str, i64)> {
        let mut out = Vec::new();
        if let Some(owner) = self.owner() {
            out.push((
                format!("{}:CASHBACK", self.stream_id()),
                owner,
                self.base() * 6 / 10,
            ));
            if let Some(inviter) = self.inviter() {
                out.push((
                    format!("{}:INVITER_REWARD", self.stream_id()),
                    inviter,
                    self.base() / 10,
                ));
            }
        }
        out
    }
}

fn updated_at(minute: u32) -> chrono::DateTime<chrono::Utc> {
    format!("2026-03-01T00:{minute:02}:00Z")
        .parse()
        .expect("timestamp")
}

fn is_void(status: &str) -> bool {
    matches!(status, "REFUNDED" | "CANCELLED")
}

/// One report's settled answer.
struct Answer {
    order: usize,
    version: usize,
    result: IngestResult,
}

/// What one caller sent and was told.
#[derive(Default)]
struct Sent {
    answers: Vec<Answer>,
    page_errors: u64,
    orders_retried: u64,
}

/// One caller: pages of reports drawn from the pool, each retried until settled.
async fn caller(ingestor: Ingestor, pool: Arc<Vec<Spec>>, mut rng: Rng, seed: u64) -> Sent {
    let mut sent = Sent::default();
    for page in 0..PAGES_PER_CALLER {
        let size = 5 + rng.below(PAGE_SPREAD);
        let mut open: Vec<(usize, usize)> = (0..size)
            .map(|_| {
                let order = rng.below(POOL) as usize;
                let last = pool[order].chain.len() - 1;
                let version = match rng.below(10) {
                    0..=4 => 0,
                    5..=7 => 1,
                    _ => 2,
                }
                .min(last);
                (order, version)
            })
            .collect();
        let mut attempts = 0;
        while !open.is_empty() {
            attempts += 1;
            assert!(
                attempts <= ATTEMPTS_MAX,
                "page {page}: {} orders still open after {ATTEMPTS_MAX} attempts (seed {seed})",
                open.len()
            );
            let orders: Vec<NormalisedOrder> =
                open.iter().map(|(o, v)| pool[*o].report(*v)).collect();
            let results = match ingestor.ingest_page(orders, None).await {
                Ok(r) => r,
                Err(_) => {
                    sent.page_errors += 1;
                    continue;
                }
            };
            assert_eq!(results.len(), open.len(), "one result per order");
            let mut again = Vec::new();
            for ((order, version), result) in open.into_iter().zip(results) {
                assert_eq!(
                    result.platform_order_id, pool[order].platform_order_id,
                    "results in page order (seed {seed})"
                );
                match result.result.as_str() {
                    "rejected"
                        if matches!(
                            result.code.as_deref(),
                            Some("CONCURRENCY_CONFLICT" | "STORE_ERROR")
                        ) =>
                    {
                        sent.orders_retried += 1;
                        again.push((order, version));
                    }
                    "created" | "updated" | "unchanged" | "ignored_stale"
                    | "audit_only_invalid" => sent.answers.push(Answer {
                        order,
                        version,
                        result,
                    }),
                    _ => panic!(
                        "{} report {version} ({:?}): unexpected {result:?} (seed {seed})",
                        pool[order].platform_order_id, pool[order].chain[version]
                    ),
                }
            }
            open = again;
        }
    }
    sent
}

fn seed() -> u64 {
    crate::common::env_seed(SEED_ENV, 0x1A9E_57ED)
}

/// Links t-2..t-4, and the inviters of u-2 and u-3 (t-1 and u-1's are
/// `reference_data`'s); the campaign.
async fn more_reference_data(db: &TestDb) {
    let m = meta();
    for (tracking, owner, inviter) in &LINKS[1..] {
        let Some(owner) = owner else { continue };
        run_command::<AffiliateLink>(
            &db.store,
            &m,
            &format!("TRACKING_ID:{tracking}"),
            serde_json::from_value(json!({"type": "Register",
                "attribution": {"kind": "TRACKING_ID", "value": tracking}, "user_id": owner,
                "actor": "ops", "registered_at": "2026-01-01T00:00:00Z"}))
            .expect("command"),
        )
        .await
        .expect("link");
        if let Some(inviter) = inviter {
            run_command::<InviteRelation>(
                &db.store,
                &m,
                owner,
                serde_json::from_value(json!({"type": "SetInviter", "user_id": owner,
                    "inviter_user_id": inviter, "actor": "ops",
                    "set_at": "2026-01-01T00:00:00Z"}))
                .expect("command"),
            )
            .await
            .expect("invite");
        }
    }
    run_command::<Campaign>(
        &db.store,
        &m,
        CAMPAIGN,
        serde_json::from_value(json!({"type": "Open", "campaign_id": CAMPAIGN,
            "quota_unit": "ORDERS", "quota_limit": QUOTA,
            "starts_at": "2026-01-01T00:00:00Z"}))
        .expect("command"),
    )
    .await
    .expect("campaign");
}

/// Every stream of the log, its events in position order.
async fn read_log(store: &DynStore) -> BTreeMap<(String, String), Vec<StoredEvent>> {
    let mut streams: BTreeMap<(String, String), Vec<StoredEvent>> = BTreeMap::new();
    let mut after = 0;
    loop {
        let page = store.read_all(after, READ_LIMIT_MAX).await.expect("read");
        let Some(last) = page.last() else { break };
        after = last.global_position;
        for e in page {
            streams
                .entry((e.aggregate_type.clone(), e.aggregate_id.clone()))
                .or_default()
                .push(e);
        }
    }
    streams
}

fn payload(e: &StoredEvent) -> Value {
    serde_json::from_str(&e.payload).expect("payload")
}

fn at(v: &Value) -> chrono::DateTime<chrono::Utc> {
    v.as_str().expect("timestamp").parse().expect("timestamp")
}

both_backends!(
    pipelined_pages_under_injected_failures_write_each_order_once,
    |db: TestDb| async move {
        let seed = seed();
        eprintln!(
            "ingest_pipeline[{:?}]: seed {seed} (replay: {SEED_ENV}={seed})",
            db.backend
        );
        let started = std::time::Instant::now();
        reference_data(&db).await;
        more_reference_data(&db).await;
        let mut rng = Rng(seed | 1);
        let pool: Arc<Vec<Spec>> = Arc::new((0..POOL).map(|i| Spec::new(i, &mut rng)).collect());

        let hook = Flaky::new(Rng(seed ^ 0x5DEE_CE66), LATENCY_US_MAX);
        let counts = hook.counts.clone();
        let flaky: DynStore = Arc::new(HookedStore {
            inner: db.store.clone(),
            hook,
        });
        let ingestor = Ingestor::new(flaky, meta());
        let tasks: Vec<_> = (0..CALLERS)
            .map(|who| {
                tokio::spawn(caller(
                    ingestor.clone(),
                    pool.clone(),
                    Rng(seed ^ ((who + 1) * 0x9E37_79B9)),
                    seed,
                ))
            })
            .collect();
        let mut answers = Vec::new();
        let (mut page_errors, mut orders_retried) = (0, 0);
        for t in tasks {
            let s = t.await.expect("caller");
            answers.extend(s.answers);
            page_errors += s.page_errors;
            orders_retried += s.orders_retried;
        }
        let ingested = started.elapsed();

        // What the pool's reports give: each order reported ends in its newest report.
        let mut newest: BTreeMap<usize, usize> = BTreeMap::new();
        for a in &answers {
            let v = newest.entry(a.order).or_default();
            *v = (*v).max(a.version);
        }
        let final_status = |o: usize| pool[o].chain[newest[&o]].0;
        let by_stream: BTreeMap<String, usize> =
            newest.keys().map(|o| (pool[*o].stream_id(), *o)).collect();

        let log = read_log(&db.store).await;
        let stream = |t: &str, id: &str| log.get(&(t.to_owned(), id.to_owned()));
        let of_type = |t: &'static str| {
            log.iter()
                .filter(move |((ty, _), _)| ty == t)
                .map(|((_, id), events)| (id.clone(), events))
        };

        // Every stream: sequences 1..n, no gap, no repeat.
        for ((t, id), events) in &log {
            let seqs: Vec<i64> = events.iter().map(|e| e.sequence).collect();
            let want: Vec<i64> = (1..=events.len() as i64).collect();
            assert_eq!(seqs, want, "{t} {id}: sequences (seed {seed})");
        }
        let report = factledger::infra::store::verify(db.store.as_ref(), None)
            .await
            .expect("verify");
        assert!(report.ok, "hash chains: {report:?} (seed {seed})");

        // Orders: one creation, reports in increasing order, the newest one last.
        let order_streams: BTreeSet<String> =
            of_type("affiliate_order").map(|(id, _)| id).collect();
        assert_eq!(
            order_streams,
            by_stream.keys().cloned().collect::<BTreeSet<_>>(),
            "order streams are the orders reported (seed {seed})"
        );
        for (id, &o) in &by_stream {
            let spec = &pool[o];
            let events = stream("affiliate_order", id).expect("order stream");
            let types: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
            assert_eq!(types[0], "OrderIngested", "{id}: {types:?} (seed {seed})");
            assert!(
                types[1..].iter().all(|t| *t == "OrderUpdated"),
                "{id}: {types:?} (seed {seed})"
            );
            let written: Vec<(String, chrono::DateTime<chrono::Utc>)> = events
                .iter()
                .map(|e| {
                    let p = payload(e);
                    (
                        p["status"].as_str().expect("status").to_owned(),
                        at(&p["platform_updated_at"]),
                    )
                })
                .collect();
            assert!(
                written.windows(2).all(|w| w[0].1 < w[1].1),
                "{id}: reports written out of order or twice: {written:?} (seed {seed})"
            );
            let state = load::<AffiliateOrder>(&db.store, id)
                .await
                .expect("load order")
                .state
                .order
                .expect("order known");
            let (status, minute) = spec.chain[newest[&o]];
            assert_eq!(
                (state.status.as_str(), state.platform_updated_at),
                (status, updated_at(minute)),
                "{id}: final state (seed {seed})"
            );
            assert_eq!(state.revision as usize, events.len(), "{id}: revision");
            assert_eq!(
                (
                    state.owner_user_id.as_deref(),
                    state.inviter_user_id.as_deref()
                ),
                (spec.owner(), spec.inviter()),
                "{id}: attribution (seed {seed})"
            );
        }
        // What the callers were told agrees with the log.
        let mut creations: BTreeMap<usize, usize> = BTreeMap::new();
        for a in &answers {
            let id = pool[a.order].stream_id();
            let (status, minute) = pool[a.order].chain[a.version];
            let this = (status.to_owned(), updated_at(minute));
            let events = stream("affiliate_order", &id).expect("order stream");
            match a.result.result.as_str() {
                "created" | "audit_only_invalid" => {
                    *creations.entry(a.order).or_default() += 1;
                    let p = payload(&events[0]);
                    assert_eq!(
                        (
                            p["status"].as_str().unwrap_or_default().to_owned(),
                            at(&p["platform_updated_at"])
                        ),
                        this,
                        "{id}: {:?} for report {} is not the creation (seed {seed})",
                        a.result,
                        a.version
                    );
                    assert_eq!(
                        a.result.result == "audit_only_invalid",
                        is_void(status),
                        "{id}: {:?} (seed {seed})",
                        a.result
                    );
                }
                "updated" => {
                    let found = events[1..].iter().any(|e| {
                        let p = payload(e);
                        (
                            p["status"].as_str().unwrap_or_default().to_owned(),
                            at(&p["platform_updated_at"]),
                        ) == this
                    });
                    assert!(
                        found,
                        "{id}: {:?} for report {} not in the log (seed {seed})",
                        a.result, a.version
                    );
                }
                _ => {}
            }
        }
        for (o, n) in &creations {
            assert_eq!(
                *n,
                1,
                "{} reported created {n} times (seed {seed})",
                pool[*o].stream_id()
            );
        }

        // Commissions, and their wallet entries.
        let mut credits: BTreeMap<String, Vec<(String, i64)>> = BTreeMap::new();
        let mut reversals: BTreeMap<String, Vec<(String, i64)>> = BTreeMap::new();
        let mut entries: BTreeSet<(String, String, String)> = BTreeSet::new();
        let mut from_log: BTreeMap<String, i64> = BTreeMap::new();
        for (wid, events) in of_type("wallet") {
            assert_eq!(events[0].event_type, "WalletOpened", "{wid} (seed {seed})");
            for e in events {
                let p = payload(e);
                let (Some(ref_type), Some(ref_id)) = (p["ref_type"].as_str(), p["ref_id"].as_str())
                else {
                    assert_ne!(e.event_type, "PendingCredited");
                    continue;
                };
                assert!(
                    entries.insert((ref_type.to_owned(), ref_id.to_owned(), e.event_type.clone())),
                    "ledger entry {ref_type}/{ref_id} {} twice (seed {seed})",
                    e.event_type
                );
                let amount = p["amount_minor"].as_i64().expect("amount");
                let into = match e.event_type.as_str() {
                    "PendingCredited" => {
                        *from_log.entry(wid.clone()).or_default() += amount;
                        &mut credits
                    }
                    "PendingReversed" => {
                        *from_log.entry(wid.clone()).or_default() -= amount;
                        &mut reversals
                    }
                    other => panic!("{wid}: unexpected {other} (seed {seed})"),
                };
                assert_eq!(ref_type, "COMMISSION", "{wid}: {p} (seed {seed})");
                into.entry(ref_id.to_owned())
                    .or_default()
                    .push((wid.clone(), amount));
            }
        }
        let mut expected_commissions = BTreeSet::new();
        let mut expected_pending: BTreeMap<String, i64> = BTreeMap::new();
        for (id, &o) in &by_stream {
            let ends_valid = !is_void(final_status(o));
            for (cid, user, amount) in pool[o].roles() {
                expected_commissions.insert(cid.clone());
                let wallet = format!("{user}:IDR");
                let Some(events) = stream("commission", &cid) else {
                    assert!(!ends_valid, "{id} ends valid without {cid} (seed {seed})");
                    continue;
                };
                let types: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
                assert_eq!(
                    types[0], "CommissionRecorded",
                    "{cid}: {types:?} (seed {seed})"
                );
                assert_eq!(
                    types.iter().filter(|t| **t == "CommissionRecorded").count(),
                    1,
                    "{cid}: {types:?} (seed {seed})"
                );
                let recorded = payload(&events[0]);
                assert_eq!(
                    (
                        recorded["wallet_id"].as_str(),
                        recorded["amount_minor"].as_i64()
                    ),
                    (Some(wallet.as_str()), Some(amount)),
                    "{cid}: recorded (seed {seed})"
                );
                let c = load::<Commission>(&db.store, &cid)
                    .await
                    .expect("load commission")
                    .state
                    .record
                    .expect("recorded");
                let want = match final_status(o) {
                    "PENDING" | "COMPLETED" => CommissionStatus::Pending,
                    "REFUNDING" => CommissionStatus::Frozen,
                    _ => CommissionStatus::Invalid,
                };
                assert_eq!(
                    (c.status, c.amount_minor),
                    (want, amount),
                    "{cid}: order ends {} (seed {seed})",
                    final_status(o)
                );
                if ends_valid {
                    *expected_pending.entry(wallet.clone()).or_default() += amount;
                }
                assert_eq!(
                    credits.get(&cid).cloned().unwrap_or_default(),
                    [(wallet.clone(), amount)],
                    "{cid}: credits (seed {seed})"
                );
                let invalidated: Vec<(String, i64)> = events
                    .iter()
                    .filter(|e| e.event_type == "CommissionInvalidated")
                    .map(|e| {
                        (
                            wallet.clone(),
                            payload(e)["amount_minor"].as_i64().expect("amount"),
                        )
                    })
                    .collect();
                assert_eq!(
                    reversals.get(&cid).cloned().unwrap_or_default(),
                    invalidated,
                    "{cid}: reversals (seed {seed})"
                );
            }
        }
        let commission_streams: BTreeSet<String> =
            of_type("commission").map(|(id, _)| id).collect();
        assert!(
            commission_streams.is_subset(&expected_commissions),
            "commissions of no owned order: {:?} (seed {seed})",
            commission_streams
                .difference(&expected_commissions)
                .collect::<Vec<_>>()
        );
        for cid in credits.keys().chain(reversals.keys()) {
            assert!(
                commission_streams.contains(cid),
                "entry for no commission {cid} (seed {seed})"
            );
        }

        // Wallets: what the orders' final states give them, and what their entries say.
        let wallets: BTreeSet<String> = of_type("wallet").map(|(id, _)| id).collect();
        for user in USERS {
            let wid = format!("{user}:IDR");
            let w = load::<Wallet>(&db.store, &wid)
                .await
                .expect("load wallet")
                .state;
            let want = expected_pending.get(&wid).copied().unwrap_or(0);
            assert_eq!(
                (w.balances.pending_minor, w.balances.available_minor),
                (want, 0),
                "{wid}: balances (seed {seed})"
            );
            assert_eq!(
                w.balances.pending_minor,
                from_log.get(&wid).copied().unwrap_or(0),
                "{wid}: pending vs its entries (seed {seed})"
            );
            if let Some(events) = stream("wallet", &wid) {
                assert_eq!(
                    events
                        .iter()
                        .filter(|e| e.event_type == "WalletOpened")
                        .count(),
                    1,
                    "{wid} (seed {seed})"
                );
            }
        }
        assert!(
            wallets
                .iter()
                .all(|w| USERS.iter().any(|u| *w == format!("{u}:IDR"))),
            "{wallets:?}"
        );

        // The campaign: one reservation per owned order that ends valid, no other.
        let campaign = load::<Campaign>(&db.store, CAMPAIGN)
            .await
            .expect("load campaign")
            .state;
        let active: BTreeSet<String> = campaign
            .reservations
            .iter()
            .filter(|(_, r)| !r.released)
            .map(|(id, _)| id.clone())
            .collect();
        let released: BTreeSet<String> = campaign
            .reservations
            .iter()
            .filter(|(_, r)| r.released)
            .map(|(id, _)| id.clone())
            .collect();
        let owned = |o: usize| pool[o].owner().is_some();
        let want_active: BTreeSet<String> = by_stream
            .iter()
            .filter(|(_, &o)| owned(o) && !is_void(final_status(o)))
            .map(|(id, _)| id.clone())
            .collect();
        assert_eq!(active, want_active, "active reservations (seed {seed})");
        for id in &released {
            let o = by_stream[id];
            assert!(
                owned(o) && is_void(final_status(o)),
                "{id} released (seed {seed})"
            );
        }
        assert_eq!(
            campaign.reserved,
            active.len() as i64,
            "reserved (seed {seed})"
        );
        let events = stream("campaign", CAMPAIGN).expect("campaign stream");
        let count = |t: &str| events.iter().filter(|e| e.event_type == t).count();
        assert_eq!(events[0].event_type, "CampaignOpened");
        assert_eq!(count("CampaignOpened"), 1);
        assert_eq!(
            (count("QuotaReserved"), count("QuotaReleased")),
            (campaign.reservations.len(), released.len()),
            "campaign events (seed {seed})"
        );

        let c = |a: &AtomicU64| a.load(Ordering::Relaxed);
        eprintln!(
            "ingest_pipeline[{:?}]: {} reports ({} orders) in {:.1?} (checked in {:.1?}): \
             {} appends, {} failed before writing, {} after the commit, {} group commits; \
             {page_errors} page errors, {orders_retried} orders refused and retried; \
             {} reservations ({} released), pending {:?}",
            db.backend,
            answers.len(),
            by_stream.len(),
            ingested,
            started.elapsed() - ingested,
            c(&counts.appends),
            c(&counts.failed_before),
            c(&counts.failed_after),
            c(&counts.groups_committed),
            campaign.reservations.len(),
            released.len(),
            expected_pending,
        );
        assert!(
            c(&counts.failed_before) > 0 && c(&counts.failed_after) > 0,
            "no failure injected (seed {seed})"
        );
        // Pages keep going as groups after failures (1 in 4 at least; 19–28 of 32
        // when measured): a failed page must not leave the ingestor one by one.
        assert!(
            c(&counts.groups_committed) >= 8,
            "{} pages went as a group (seed {seed})",
            c(&counts.groups_committed)
        );
    }
);

/// Fails the first append of more than one unit (before writing); counts the others.
#[derive(Default)]
struct FailFirstGroup {
    failed: std::sync::atomic::AtomicBool,
    groups: AtomicU64,
    singles: AtomicU64,
}

#[async_trait::async_trait]
impl AppendHook for Arc<FailFirstGroup> {
    async fn append(
        &self,
        inner: &DynStore,
        units: &[UnitOfWork],
    ) -> Result<Vec<CommittedUnit>, StoreError> {
        if units.len() > 1 && !self.failed.swap(true, Ordering::SeqCst) {
            return Err(StoreError::Database(
                "injected: failed before writing".into(),
            ));
        }
        let counter = if units.len() > 1 {
            &self.groups
        } else {
            &self.singles
        };
        counter.fetch_add(1, Ordering::SeqCst);
        inner.append(units).await
    }
}

/// A page whose append failed must not poison the ingestor: its landing stays in the
/// turn, and the pages after it used to chain on it, see it failed, answer `Conflict`
/// without appending and leave their own failed landing for the next — so after
/// `UNIT_CONFLICT_RETRIES_MAX` decisions every page went one by one, for good (found
/// by the property above: 1–4 group commits of 32 pages).
async fn pages_after_a_failed_one(db: TestDb) {
    reference_data(&db).await;
    more_reference_data(&db).await;
    let hook = Arc::new(FailFirstGroup::default());
    let store: DynStore = Arc::new(HookedStore {
        inner: db.store.clone(),
        hook: hook.clone(),
    });
    let ingestor = Ingestor::new(store, meta());
    let page = |from: u64| -> Vec<NormalisedOrder> {
        (from..from + 3)
            .map(|i| {
                Spec {
                    platform_order_id: format!("p-{i}"),
                    link: Some(0),
                    gmv: 100_000,
                    platform_commission: 12_000,
                    chain: CHAINS[0],
                }
                .report(0)
            })
            .collect()
    };
    // The first page's group append fails: it goes one by one.
    let first = ingestor.ingest_page(page(0), None).await.expect("page 1");
    assert!(first.iter().all(|r| r.result == "created"), "{first:?}");
    assert_eq!(hook.groups.load(Ordering::SeqCst), 0);
    // The pages after it, one at a time, nothing failing any more.
    for n in 1..4 {
        let started = std::time::Instant::now();
        let r = ingestor.ingest_page(page(3 * n), None).await.expect("page");
        assert!(r.iter().all(|r| r.result == "created"), "{r:?}");
        eprintln!(
            "page {n}: {:.1?}, {} group appends, {} single appends so far",
            started.elapsed(),
            hook.groups.load(Ordering::SeqCst),
            hook.singles.load(Ordering::SeqCst)
        );
    }
    assert_eq!(
        hook.groups.load(Ordering::SeqCst),
        3,
        "pages after a failed one went one by one ({} single appends)",
        hook.singles.load(Ordering::SeqCst)
    );
}

mod after_one_failed_page_the_next_pages_still_go_as_a_group {
    use crate::common::{Backend, TestDb};

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn sqlite() {
        super::pages_after_a_failed_one(TestDb::new(Backend::Sqlite).await).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn mysql() {
        super::pages_after_a_failed_one(TestDb::new(Backend::Mysql).await).await;
    }
}
