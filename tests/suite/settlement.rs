//! Settlement as a cron job (issue 5 item 4, SPEC R-COM-2): the
//! `commission_settlement` round scans `commission_records` and releases each due
//! commission in its own unit, fenced by its claim; acceptance case 14 of seed 003
//! §18 (the lock expires, two workers scan the same commissions: each is released
//! once); and the cron wiring of settlement and platform sync. Both backends.

use crate::common;

use async_trait::async_trait;
use common::{exec, meta, reference_data, scalar, TestDb};
use factledger::affiliate::ingest::Ingestor;
use factledger::affiliate::settlement::{
    settle_due, Clock, RoundLimits, SettlementHandler, COMMISSION_SETTLEMENT, SETTLEMENT_BATCH_MAX,
    SETTLEMENT_EVERY, SETTLEMENT_SCHEDULE,
};
use factledger::affiliate::sync::{
    SyncConfig, PLATFORM_SYNC, PLATFORM_SYNC_EVERY, PLATFORM_SYNC_SCAN, PLATFORM_SYNC_SCHEDULE,
};
use factledger::infra::db::{now_ms, Db};
use factledger::infra::jobs::cron::CronSchedule;
use factledger::infra::jobs::engine::{Engine, EngineConfig, JobFailure, JobHandler, RoundReport};
use factledger::infra::jobs::{ClaimedJob, JobKind, JobStatus, JobSubmit};
use factledger::runtime::bus::load;
use factledger::server::{ServeOptions, SettlementCron};
use factledger_aggregates::affiliate_order::NormalisedOrder;
use factledger_aggregates::commission::{Commission, CommissionStatus};
use factledger_aggregates::wallet::Wallet;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

const OWNER_WALLET: &str = "u-1:IDR";
const INVITER_WALLET: &str = "u-0:IDR";
/// M = min(12,000, 10 % × 100,000) = 10,000: cashback 60 %, inviter reward 10 %.
const CASHBACK_MINOR: i64 = 6_000;
const INVITER_MINOR: i64 = 1_000;
/// Any await the tests make on a round is bounded by this.
const ROUND_WAIT: Duration = Duration::from_secs(60);

/// Order `id` ordered on day `day` of March 2026 (due 7 days later), as the platform
/// reports it at `minute` past midnight that day.
fn order(id: &str, status: &str, day: u32, minute: u32) -> NormalisedOrder {
    serde_json::from_value(json!({
        "platform": "SHOPEE", "country": "ID", "platform_order_id": id,
        "status": status, "currency": "IDR", "gmv_minor": 100_000,
        "platform_commission_minor": 12_000,
        "ordered_at": format!("2026-03-{day:02}T00:00:00Z"),
        "platform_updated_at": format!("2026-03-{day:02}T00:{minute:02}:00Z"),
        "attribution": {"kind": "TRACKING_ID", "value": "t-1"}
    }))
    .unwrap()
}

async fn ingest(db: &TestDb, o: NormalisedOrder) {
    let r = Ingestor::new(db.store.clone(), meta())
        .ingest_one(o, None)
        .await
        .unwrap();
    assert!(matches!(r.result.as_str(), "created" | "updated"), "{r:?}");
}

fn ms(s: &str) -> i64 {
    s.parse::<chrono::DateTime<chrono::Utc>>()
        .unwrap()
        .timestamp_millis()
}

/// A clock the test moves.
fn clock_at(at: &Arc<AtomicI64>) -> Clock {
    let at = at.clone();
    Arc::new(move || {
        chrono::DateTime::from_timestamp_millis(at.load(Ordering::SeqCst)).expect("in range")
    })
}

async fn projections(db: &TestDb) -> Db {
    db.database().await.db
}

/// Bring `commission_records` to the head, as the projector task of `serve` does.
async fn catch_up_commissions(db: &TestDb, p: &Db) {
    let projector = factledger::runtime::projector::find("commission_records").expect("projector");
    factledger::runtime::projector::catch_up(&db.store, p, projector.as_ref())
        .await
        .expect("commission_records catches up");
}

/// An engine running settlement rounds of `kind` with `handler`, on its own pool.
async fn engine(db: &TestDb, kind: &'static JobKind, handler: Arc<dyn JobHandler>) -> Engine {
    let d = db.database().await;
    let config = EngineConfig::new(format!("settle-{}", uuid::Uuid::new_v4().simple()));
    Engine::new(d.db, d.store, config, vec![(kind, handler)]).expect("engine")
}

async fn settlement_handler(db: &TestDb, clock: Clock) -> SettlementHandler {
    let d = db.database().await;
    SettlementHandler::new(d.store, d.db, "ID").with_clock(clock)
}

/// The job the settlement schedule's firing at `fire_at_ms` submits.
fn firing(fire_at_ms: i64) -> JobSubmit {
    CronSchedule::new(
        SETTLEMENT_SCHEDULE,
        SETTLEMENT_EVERY,
        &COMMISSION_SETTLEMENT,
    )
    .expect("schedule")
    .job(fire_at_ms)
}

/// The last round's summary and the job's status.
async fn round(db: &Db, code: &str) -> (Value, Value) {
    let job = factledger::infra::jobs::ops::show(db, code)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("no job {code}"));
    let v = serde_json::to_value(&job).unwrap();
    (v["levels"]["round"]["summary"].clone(), v["status"].clone())
}

/// The counts of a summary: released, not_due, not_pending, unknown, failed.
fn counts(summary: &Value) -> [i64; 5] {
    ["released", "not_due", "not_pending", "unknown", "failed"].map(|k| {
        summary[k]
            .as_i64()
            .unwrap_or_else(|| panic!("{k} in {summary}"))
    })
}

async fn balances(db: &TestDb, wallet: &str) -> (i64, i64) {
    let w = load::<Wallet>(&db.store, wallet).await.unwrap().state;
    (w.balances.pending_minor, w.balances.available_minor)
}

/// How many events of `event_type` the stream holds.
async fn count_events(db: &TestDb, aggregate_type: &str, id: &str, event_type: &str) -> usize {
    db.store
        .read_stream(aggregate_type, id, 1, 1_000)
        .await
        .unwrap()
        .iter()
        .filter(|e| e.event_type == event_type)
        .count()
}

/// `RELEASE_PENDING` ledger rows, and how many distinct commissions they name, after
/// the wallet projection caught up.
async fn release_ledger(db: &TestDb) -> (i64, i64) {
    let d = db.database().await;
    factledger::runtime::projection::catch_up_wallet(&db.store, &d.db)
        .await
        .unwrap();
    let w = "FROM wallet_ledger WHERE entry_type = 'RELEASE_PENDING' AND ref_type = 'COMMISSION'";
    (
        scalar(&d.db, &format!("SELECT COUNT(*) {w}")).await,
        scalar(&d.db, &format!("SELECT COUNT(DISTINCT ref_id) {w}")).await,
    )
}

async fn released_outbox_rows(db: &Db) -> i64 {
    scalar(
        db,
        "SELECT COUNT(*) FROM outbox WHERE type = 'wallet.PendingReleased'",
    )
    .await
}

async fn status_of(db: &TestDb, commission_id: &str) -> CommissionStatus {
    load::<Commission>(&db.store, commission_id)
        .await
        .unwrap()
        .state
        .record
        .expect("recorded")
        .status
}

// -----------------------------------------------------------------------------------

both_backends!(
    one_settlement_round_releases_the_due_commissions_once_with_counts_per_outcome,
    |db: TestDb| async move {
        reference_data(&db).await;
        // o-1…o-4 due on 8 March; o-5, o-6 on 12 March; o-7 due but its refund opens
        // after the projection saw it PENDING (a stale row).
        for (i, day) in [(1, 1), (2, 1), (3, 1), (4, 1), (5, 5), (6, 5), (7, 1)] {
            ingest(&db, order(&format!("o-{i}"), "COMPLETED", day, 1)).await;
        }
        let p = projections(&db).await;
        catch_up_commissions(&db, &p).await;
        ingest(&db, order("o-7", "REFUNDING", 1, 2)).await;
        let pending_before = balances(&db, OWNER_WALLET).await;
        assert_eq!(pending_before, (7 * CASHBACK_MINOR, 0));

        let now = Arc::new(AtomicI64::new(ms("2026-03-09T00:00:00Z")));
        let handler = settlement_handler(&db, clock_at(&now)).await;
        let e = engine(&db, &COMMISSION_SETTLEMENT, Arc::new(handler)).await;
        let code = e.submit(&firing(1)).await.unwrap();
        let scan = e.scan(COMMISSION_SETTLEMENT.name, None).await.unwrap();
        assert_eq!((scan.claimed, scan.succeeded), (1, 1), "{scan:?}");
        let (summary, status) = round(e.db(), &code).await;
        assert_eq!(status, "SUCCESS");
        // 4 orders × 2 roles released; o-7's two rows were stale: re-checked, refused.
        assert_eq!(counts(&summary), [8, 0, 2, 0, 0], "{summary}");
        assert_eq!(summary["scanned"], 10, "{summary}");
        assert_eq!(summary["more"], false, "{summary}");
        assert_eq!(
            balances(&db, OWNER_WALLET).await,
            (3 * CASHBACK_MINOR, 4 * CASHBACK_MINOR)
        );
        assert_eq!(
            balances(&db, INVITER_WALLET).await,
            (3 * INVITER_MINOR, 4 * INVITER_MINOR)
        );
        assert_eq!(
            status_of(&db, "SHOPEE:o-1:CASHBACK").await,
            CommissionStatus::Available
        );
        assert_eq!(
            status_of(&db, "SHOPEE:o-5:CASHBACK").await,
            CommissionStatus::Pending
        );
        assert_eq!(
            status_of(&db, "SHOPEE:o-7:CASHBACK").await,
            CommissionStatus::Frozen
        );

        // The next firing, with the projection caught up: nothing left to do.
        catch_up_commissions(&db, &p).await;
        let code = e.submit(&firing(2)).await.unwrap();
        e.scan(COMMISSION_SETTLEMENT.name, None).await.unwrap();
        let (summary, _) = round(e.db(), &code).await;
        assert_eq!(counts(&summary), [0, 0, 0, 0, 0], "{summary}");
        assert_eq!(summary["scanned"], 0, "{summary}");

        // After 12 March the rest is released, and only the rest.
        now.store(ms("2026-03-12T00:00:00Z"), Ordering::SeqCst);
        let code = e.submit(&firing(3)).await.unwrap();
        e.scan(COMMISSION_SETTLEMENT.name, None).await.unwrap();
        let (summary, _) = round(e.db(), &code).await;
        assert_eq!(counts(&summary), [4, 0, 0, 0, 0], "{summary}");
        assert_eq!(
            balances(&db, OWNER_WALLET).await,
            (CASHBACK_MINOR, 6 * CASHBACK_MINOR)
        );
        assert_eq!(
            balances(&db, INVITER_WALLET).await,
            (INVITER_MINOR, 6 * INVITER_MINOR)
        );
        // One wallet movement, one ledger entry and one outbox message per release.
        assert_eq!(
            count_events(&db, "wallet", OWNER_WALLET, "PendingReleased").await,
            6
        );
        assert_eq!(
            count_events(&db, "wallet", INVITER_WALLET, "PendingReleased").await,
            6
        );
        assert_eq!(release_ledger(&db).await, (12, 12));
        assert_eq!(released_outbox_rows(e.db()).await, 12);
    }
);

both_backends!(
    a_full_batch_says_more_may_be_due_and_later_batches_page_past_it,
    |db: TestDb| async move {
        assert_eq!(SETTLEMENT_BATCH_MAX, 200);
        reference_data(&db).await;
        for i in 0..5 {
            ingest(&db, order(&format!("o-{i}"), "COMPLETED", 1, 1)).await;
        }
        let p = projections(&db).await;
        catch_up_commissions(&db, &p).await;
        let d = db.database().await;
        let now = "2026-03-09T00:00:00Z".parse().unwrap();
        let limits = |batches_max| RoundLimits {
            batch_max: 3,
            batches_max,
            // The stale rows are the point here: do not wait for a projector that
            // this test does not run.
            projection_wait_ms: 0,
            ..RoundLimits::default()
        };
        // Ten due commissions, batches of three, at most two batches: six released,
        // and the round says more may be due.
        let first = settle_due(&d.store, &p, &meta(), now, None, limits(2), &|| false)
            .await
            .unwrap();
        assert_eq!(
            (first.released, first.batches, first.more),
            (6, 2, true),
            "{first:?}"
        );
        // The next round pages past the stale rows of those six (the projection has
        // not caught up) and releases the other four.
        let second = settle_due(&d.store, &p, &meta(), now, None, limits(4), &|| false)
            .await
            .unwrap();
        assert_eq!(
            (
                second.released,
                second.not_pending,
                second.batches,
                second.more
            ),
            (4, 6, 4, false),
            "{second:?}"
        );
        assert_eq!(balances(&db, OWNER_WALLET).await, (0, 5 * CASHBACK_MINOR));
        assert_eq!(release_ledger(&db).await, (10, 10));
    }
);

/// Acceptance case 14 stages two rounds at once, which the real kind's cap of one
/// forbids while both leases are live — the case is that guard failing (the seed's
/// Redis lock expiring). So the race runs the very same handler under an uncapped
/// kind.
static SETTLEMENT_RACE: JobKind = JobKind {
    cap: None,
    lease_ms: 60_000,
    ..JobKind::new("settlement_race", "SRACE")
};

both_backends!(
    two_settlement_rounds_scanning_the_same_commissions_release_each_once,
    |db: TestDb| async move {
        reference_data(&db).await;
        const DUE_ORDERS: i64 = 20;
        for i in 0..DUE_ORDERS {
            ingest(&db, order(&format!("o-{i:02}"), "COMPLETED", 1, 1)).await;
        }
        // Two not due yet.
        ingest(&db, order("late-1", "COMPLETED", 20, 1)).await;
        ingest(&db, order("late-2", "COMPLETED", 20, 1)).await;
        let p = projections(&db).await;
        catch_up_commissions(&db, &p).await;
        let due = 2 * DUE_ORDERS;

        let now = Arc::new(AtomicI64::new(ms("2026-03-09T00:00:00Z")));
        let a = engine(
            &db,
            &SETTLEMENT_RACE,
            Arc::new(settlement_handler(&db, clock_at(&now)).await),
        )
        .await;
        let b = engine(
            &db,
            &SETTLEMENT_RACE,
            Arc::new(settlement_handler(&db, clock_at(&now)).await),
        )
        .await;
        let job_a = a
            .submit(&JobSubmit::plain(&SETTLEMENT_RACE, "race:a", json!({})))
            .await
            .unwrap();
        let job_b = b
            .submit(&JobSubmit::plain(&SETTLEMENT_RACE, "race:b", json!({})))
            .await
            .unwrap();
        // Both workers run a round at once over the same projection rows. The
        // projection is not caught up in between, so whatever the interleaving, each
        // scan lists every due commission: the scan result is all they share.
        let (codes_a, codes_b) = ([job_a.clone()], [job_b.clone()]);
        let (ra, rb) = tokio::time::timeout(ROUND_WAIT, async {
            tokio::join!(a.kick(&codes_a), b.kick(&codes_b))
        })
        .await
        .expect("both rounds end");
        let (ra, rb) = (ra.unwrap(), rb.unwrap());
        assert_eq!((ra.claimed, ra.succeeded), (1, 1), "{ra:?}");
        assert_eq!((rb.claimed, rb.succeeded), (1, 1), "{rb:?}");
        let (sa, _) = round(a.db(), &job_a).await;
        let (sb, _) = round(b.db(), &job_b).await;
        assert_eq!(sa["scanned"], due, "{sa}");
        assert_eq!(sb["scanned"], due, "{sb}");
        let (ca, cb) = (counts(&sa), counts(&sb));
        // Each commission released by exactly one of them; the other was refused.
        assert_eq!(ca[0] + cb[0], due, "{sa} {sb}");
        assert_eq!(ca[2] + cb[2], due, "{sa} {sb}");
        assert_eq!((ca[4], cb[4], ca[1] + cb[1], ca[3] + cb[3]), (0, 0, 0, 0));

        // Money: every due commission moved pending → available once.
        assert_eq!(
            balances(&db, OWNER_WALLET).await,
            (2 * CASHBACK_MINOR, DUE_ORDERS * CASHBACK_MINOR)
        );
        assert_eq!(
            balances(&db, INVITER_WALLET).await,
            (2 * INVITER_MINOR, DUE_ORDERS * INVITER_MINOR)
        );
        assert_eq!(
            count_events(&db, "wallet", OWNER_WALLET, "PendingReleased").await,
            DUE_ORDERS as usize
        );
        assert_eq!(
            count_events(&db, "wallet", INVITER_WALLET, "PendingReleased").await,
            DUE_ORDERS as usize
        );
        for i in 0..DUE_ORDERS {
            for role in ["CASHBACK", "INVITER_REWARD"] {
                let id = format!("SHOPEE:o-{i:02}:{role}");
                assert_eq!(
                    count_events(&db, "commission", &id, "CommissionReleased").await,
                    1,
                    "{id}"
                );
            }
        }
        assert_eq!(release_ledger(&db).await, (due, due));
        assert_eq!(released_outbox_rows(a.db()).await, due);
        assert_eq!(
            status_of(&db, "SHOPEE:late-1:CASHBACK").await,
            CommissionStatus::Pending
        );
    }
);

/// Runs the real settlement handler, but stalls before it: a worker frozen past its
/// lease (GC pause, network partition).
struct Stalling {
    inner: SettlementHandler,
    entered: Arc<Notify>,
    resume: Arc<Notify>,
}

#[async_trait]
impl JobHandler for Stalling {
    async fn run(&self, job: &ClaimedJob) -> Result<RoundReport, JobFailure> {
        self.entered.notify_one();
        self.resume.notified().await;
        self.inner.run(job).await
    }
}

both_backends!(
    a_settlement_round_whose_claim_was_recovered_releases_nothing,
    |db: TestDb| async move {
        reference_data(&db).await;
        for i in 0..3 {
            ingest(&db, order(&format!("o-{i}"), "COMPLETED", 1, 1)).await;
        }
        let p = projections(&db).await;
        catch_up_commissions(&db, &p).await;
        let now = Arc::new(AtomicI64::new(ms("2026-03-09T00:00:00Z")));
        let (entered, resume) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let stalled = engine(
            &db,
            &COMMISSION_SETTLEMENT,
            Arc::new(Stalling {
                inner: settlement_handler(&db, clock_at(&now)).await,
                entered: entered.clone(),
                resume: resume.clone(),
            }),
        )
        .await;
        let other = engine(
            &db,
            &COMMISSION_SETTLEMENT,
            Arc::new(settlement_handler(&db, clock_at(&now)).await),
        )
        .await;
        let code = stalled.submit(&firing(1)).await.unwrap();
        let worker = {
            let e = stalled.clone();
            tokio::spawn(async move { e.scan(COMMISSION_SETTLEMENT.name, None).await })
        };
        tokio::time::timeout(ROUND_WAIT, entered.notified())
            .await
            .expect("the round starts");
        // Its lease runs out; another worker's scan recovers it.
        exec(
            stalled.db(),
            &format!(
                "UPDATE jobs SET lease_until_ms = {} WHERE code = '{code}'",
                now_ms() - 1
            ),
        )
        .await;
        let recovery = other.scan(COMMISSION_SETTLEMENT.name, None).await.unwrap();
        assert_eq!(recovery.recovered, 1, "{recovery:?}");
        // The stale worker wakes up and settles under its old claim: refused at the
        // first write, the round stops, nothing moved.
        resume.notify_one();
        let r = tokio::time::timeout(ROUND_WAIT, worker)
            .await
            .expect("the stale round ends")
            .unwrap()
            .unwrap();
        assert_eq!((r.claimed, r.succeeded, r.fenced), (1, 0, 1), "{r:?}");
        assert_eq!(balances(&db, OWNER_WALLET).await, (3 * CASHBACK_MINOR, 0));
        assert_eq!(
            count_events(&db, "wallet", OWNER_WALLET, "PendingReleased").await,
            0
        );
        assert_eq!(
            status_of(&db, "SHOPEE:o-0:CASHBACK").await,
            CommissionStatus::Pending
        );
        // The recovered job stays failed (the next firing is the retry) …
        let (_, status) = round(other.db(), &code).await;
        assert_eq!(status, "FAILED");
        // … and the next firing releases everything, once.
        let next = other.submit(&firing(2)).await.unwrap();
        let scan = other.scan(COMMISSION_SETTLEMENT.name, None).await.unwrap();
        assert_eq!(scan.succeeded, 1, "{scan:?}");
        let (summary, _) = round(other.db(), &next).await;
        assert_eq!(counts(&summary), [6, 0, 0, 0, 0], "{summary}");
        assert_eq!(release_ledger(&db).await, (6, 6));
    }
);

both_backends!(
    the_cron_fires_settlement_every_five_minutes_and_platform_sync_every_fifteen,
    |db: TestDb| async move {
        use factledger::callbacks::replay::CALLBACK_REPLAY_SCAN_SCHEDULE;
        reference_data(&db).await;
        for i in 0..2 {
            ingest(&db, order(&format!("o-{i}"), "COMPLETED", 1, 1)).await;
        }
        let database = db.database().await;
        catch_up_commissions(&db, &database.db).await;
        // One pair; the platform is never called here (only the submits are).
        let platform_sync = SyncConfig::parse("TRAVELOKA:ID", |k| {
            (k == "FACTLEDGER_PLATFORM_TRAVELOKA_URL").then(|| "http://127.0.0.1:9".to_owned())
        })
        .unwrap();
        let mut options = ServeOptions {
            platform_sync,
            ..Default::default()
        };
        let e = factledger::server::job_engine(&database, "ID", &mut options)
            .await
            .unwrap();
        let s = factledger::server::cron_scheduler(&e, &options).unwrap();
        let schedules: Vec<(String, String, String)> = s
            .schedules()
            .iter()
            .map(|s| {
                (
                    s.name.clone(),
                    s.expr.as_str().to_owned(),
                    s.kind.name.to_owned(),
                )
            })
            .collect();
        for expected in [
            (
                SETTLEMENT_SCHEDULE,
                "*/5 * * * *",
                COMMISSION_SETTLEMENT.name,
            ),
            (
                PLATFORM_SYNC_SCHEDULE,
                "*/15 * * * *",
                PLATFORM_SYNC_SCAN.name,
            ),
        ] {
            let expected = (
                expected.0.to_owned(),
                expected.1.to_owned(),
                expected.2.to_owned(),
            );
            assert!(schedules.contains(&expected), "{schedules:?}");
        }
        assert_eq!(
            (SETTLEMENT_EVERY, PLATFORM_SYNC_EVERY),
            ("*/5 * * * *", "*/15 * * * *")
        );

        // Fifteen minutes of firings from a quarter-hour boundary an hour ago.
        let t = (now_ms() / 900_000) * 900_000 - 3_600_000;
        s.tick_at(t + 1).await.unwrap();
        let r = s.tick_at(t + 15 * 60_000 + 1).await.unwrap();
        let fired = |name: &str| -> Vec<i64> {
            r.fired
                .iter()
                .filter(|f| f.0 == name)
                .map(|f| f.1)
                .collect()
        };
        assert_eq!(
            fired(SETTLEMENT_SCHEDULE),
            [t + 300_000, t + 600_000, t + 900_000]
        );
        assert_eq!(fired(PLATFORM_SYNC_SCHEDULE), [t + 900_000]);
        assert!(!fired(CALLBACK_REPLAY_SCAN_SCHEDULE).is_empty());

        // The settlement firings' jobs run the settlement handler, one at a time (cap
        // 1): the first releases both orders' commissions, the others find nothing.
        let mut released = 0;
        for fire_at in [t + 300_000, t + 600_000, t + 900_000] {
            let scan = e.scan(COMMISSION_SETTLEMENT.name, None).await.unwrap();
            assert_eq!((scan.claimed, scan.succeeded), (1, 1), "{scan:?}");
            let code = COMMISSION_SETTLEMENT.code(&format!("cron:{SETTLEMENT_SCHEDULE}:{fire_at}"));
            let (summary, status) = round(e.db(), &code).await;
            assert_eq!(status, "SUCCESS", "{summary}");
            assert_eq!(summary["failed"], 0, "{summary}");
            released += summary["released"].as_i64().unwrap();
            // The log moved: let the projection see it, as the projector task would.
            catch_up_commissions(&db, &database.db).await;
        }
        assert_eq!(released, 4);
        assert_eq!(balances(&db, OWNER_WALLET).await, (0, 2 * CASHBACK_MINOR));

        // The sync firing's job submits both tasks of the pair.
        let scan = e.scan(PLATFORM_SYNC_SCAN.name, None).await.unwrap();
        assert_eq!((scan.claimed, scan.succeeded), (1, 1), "{scan:?}");
        let code =
            PLATFORM_SYNC_SCAN.code(&format!("cron:{PLATFORM_SYNC_SCHEDULE}:{}", t + 900_000));
        let (summary, _) = round(e.db(), &code).await;
        assert_eq!(summary, json!({"pairs": 1, "submitted": 2}));
        let keys = scalar(
            e.db(),
            &format!(
                "SELECT COUNT(*) FROM jobs WHERE kind = '{}' AND status = {} AND business_key IN \
                 ('platform_sync:TRAVELOKA:ID:incremental', 'platform_sync:TRAVELOKA:ID:lookback')",
                PLATFORM_SYNC.name,
                JobStatus::Pending as i64
            ),
        )
        .await;
        assert_eq!(keys, 2);

        // Without pairs there is no sync schedule (nor its kind); settlement can be
        // moved or turned off.
        for (cron, expected) in [
            (SettlementCron::Default, Some("*/5 * * * *")),
            (SettlementCron::Every("0 * * * *".into()), Some("0 * * * *")),
            (SettlementCron::Off, None),
        ] {
            let mut options = ServeOptions {
                settlement_cron: cron,
                ..Default::default()
            };
            let e = factledger::server::job_engine(&database, "ID", &mut options)
                .await
                .unwrap();
            assert!(e.kind(COMMISSION_SETTLEMENT.name).is_some());
            assert!(e.kind(PLATFORM_SYNC_SCAN.name).is_none());
            let s = factledger::server::cron_scheduler(&e, &options).unwrap();
            let names: Vec<&str> = s.schedules().iter().map(|s| s.name.as_str()).collect();
            assert!(!names.contains(&PLATFORM_SYNC_SCHEDULE), "{names:?}");
            let settlement = s
                .schedules()
                .iter()
                .find(|s| s.name == SETTLEMENT_SCHEDULE)
                .map(|s| s.expr.as_str());
            assert_eq!(settlement, expected);
        }
        assert_eq!(SettlementCron::parse("off"), SettlementCron::Off);
        assert_eq!(
            SettlementCron::parse("*/10 * * * *"),
            SettlementCron::Every("*/10 * * * *".into())
        );
    }
);

/// The scan is one in-order range of `ix_commission_records_due` per batch: no full
/// scan, no sort (EXPLAIN on MariaDB, EXPLAIN QUERY PLAN on SQLite), over a table
/// where most rows are not PENDING.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_settlement_scan_reads_the_due_index_in_order() {
    use factledger::affiliate::settlement::due_sql;
    use sqlx::Row;
    for backend in [common::Backend::Sqlite, common::Backend::Mysql] {
        let db = TestDb::new(backend).await;
        let d = db.database().await;
        let rows: Vec<String> = (0..600)
            .map(|i| {
                let status = ["PENDING", "AVAILABLE", "FROZEN", "INVALID"][i % 4];
                format!(
                    "('SHOPEE:{i}:CASHBACK', 'SHOPEE:{i}', 'CASHBACK', 'u-{u}', 'u-{u}:IDR', \
                     '{status}', 100, 100, 'IDR', '2026-03-{day:02}T00:00:00.000000Z', NULL, \
                     'SHOPEE:ID', 1, 6000, 1000, 1000, 1, 1, {i})",
                    u = i % 7,
                    day = 1 + i % 28
                )
            })
            .collect();
        exec(
            &d.db,
            &format!(
                "INSERT INTO commission_records (commission_id, order_id, role, \
                 beneficiary_user_id, wallet_id, status, amount_minor, recorded_amount_minor, \
                 currency, release_at, released_at, rule_set_id, rule_version, cashback_bps, \
                 inviter_bps, max_commission_base_bps, order_revision, version, last_position) \
                 VALUES {}",
                rows.join(", ")
            ),
        )
        .await;
        let (now, at, id) = (
            "2026-03-20T00:00:00.000000Z",
            "2026-03-02T00:00:00.000000Z",
            "x",
        );
        match &d.db {
            Db::Mysql(p) => {
                exec(&d.db, "ANALYZE TABLE commission_records").await;
                let sql = format!("EXPLAIN {}", due_sql(false, SETTLEMENT_BATCH_MAX));
                let row = sqlx::query(&sql)
                    .bind("PENDING".as_bytes())
                    .bind(now.as_bytes())
                    .bind(at.as_bytes())
                    .bind(at.as_bytes())
                    .bind(id.as_bytes())
                    .fetch_one(p)
                    .await
                    .unwrap();
                let key: Option<String> = row.try_get("key").unwrap();
                let extra: Option<String> = row.try_get("Extra").unwrap();
                let access: String = row.try_get("type").unwrap();
                assert_eq!(
                    key.as_deref(),
                    Some("ix_commission_records_due"),
                    "{extra:?}"
                );
                assert_ne!(access, "ALL");
                assert!(
                    !extra.unwrap_or_default().contains("filesort"),
                    "the scan sorts"
                );
            }
            Db::Sqlite(p) => {
                let sql = format!("EXPLAIN QUERY PLAN {}", due_sql(true, SETTLEMENT_BATCH_MAX));
                let plan: Vec<String> = sqlx::query(&sql)
                    .bind("PENDING")
                    .bind(now)
                    .bind(at)
                    .bind(id)
                    .fetch_all(p)
                    .await
                    .unwrap()
                    .iter()
                    .map(|r| r.get::<String, _>("detail"))
                    .collect();
                let plan = plan.join(" | ");
                assert!(plan.contains("INDEX ix_commission_records_due"), "{plan}");
                assert!(!plan.contains("TEMP B-TREE"), "{plan}");
            }
        }
        // And it finds what it should: PENDING, due, after the keyset, in order.
        let due = factledger::affiliate::settlement::due_commissions(
            &d.db,
            now.parse().unwrap(),
            Some(&factledger::affiliate::settlement::DueCommission {
                commission_id: id.into(),
                release_at: at.into(),
            }),
            1_000,
        )
        .await
        .unwrap();
        let mut expected: Vec<(String, String)> = (0..600)
            .filter(|i| i % 4 == 0 && (3..=20).contains(&(1 + i % 28)))
            .map(|i| {
                (
                    format!("2026-03-{:02}T00:00:00.000000Z", 1 + i % 28),
                    format!("SHOPEE:{i}:CASHBACK"),
                )
            })
            .collect();
        expected.sort();
        let got: Vec<(String, String)> = due
            .into_iter()
            .map(|c| (c.release_at, c.commission_id))
            .collect();
        assert_eq!(got, expected);
    }
}
