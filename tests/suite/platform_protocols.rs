//! TikTok Shop and Shopee through the simulator speaking their documented protocols
//! (issue 33 items 5 and 7): the `platform_sync` job with each platform's own adapter
//! (signed requests, its paging and time encoding, decimal amounts) pulls the same
//! orders the generic tests pull and ingests each once; a request with a forged
//! signature is refused by the simulator with the platform's documented auth error,
//! ingests nothing and exhausts the job (an operator must mend the credentials).

use crate::common::TestDb;
use crate::platform_sync::{order, Recorder};
use chrono::{DateTime, Utc};
use factledger::affiliate::platform::PlatformAdapter;
use factledger::affiliate::platforms::shopee::{ShopeeAccount, ShopeeAdapter};
use factledger::affiliate::platforms::tiktok::{TikTokAdapter, TikTokCredentials};
use factledger::affiliate::platforms::PlatformSecret;
use factledger::affiliate::sync::{
    self, sync_job, SyncHandler, SyncPair, SyncSettings, SyncTask, PLATFORM_SYNC,
};
use factledger::affiliate::OrderIngestor;
use factledger::infra::jobs::engine::{Engine, EngineConfig};
use factledger::infra::jobs::{ops, JobStatus, Selector};
use factledger_aggregates::affiliate::{CountryCode, Platform};
use factledger_aggregates::affiliate_order::OrderStatus;
use platform_sim::auth::{
    test_shopee_app_id, test_shopee_secret, test_tiktok_token, TEST_TIKTOK_APP_KEY,
    TEST_TIKTOK_APP_SECRET,
};
use platform_sim::{Sim, SimOrder};
use std::sync::Arc;

const MINUTE_MS: i64 = 60_000;
const HOUR_MS: i64 = 60 * MINUTE_MS;

pub(crate) fn id() -> CountryCode {
    CountryCode::parse("ID").unwrap()
}

pub(crate) fn adapter(
    platform: Platform,
    base_url: &str,
    secret: &str,
) -> Arc<dyn PlatformAdapter> {
    match platform {
        Platform::TikTok => Arc::new(
            TikTokAdapter::new(
                base_url,
                TikTokCredentials {
                    app_key: TEST_TIKTOK_APP_KEY.into(),
                    app_secret: PlatformSecret::new(secret),
                    access_tokens: [(id(), PlatformSecret::new(&test_tiktok_token("ID")))].into(),
                },
                2_000,
            )
            .unwrap(),
        ),
        _ => Arc::new(
            ShopeeAdapter::new(
                [(
                    id(),
                    ShopeeAccount {
                        base_url: base_url.into(),
                        app_id: test_shopee_app_id("ID"),
                        secret: PlatformSecret::new(secret),
                    },
                )]
                .into(),
                2_000,
            )
            .unwrap(),
        ),
    }
}

struct Run {
    status: JobStatus,
    error: Option<String>,
    ingest: Arc<Recorder>,
}

/// One incremental round of `platform` × ID against `sim`, signing with `secret`.
async fn round(
    db: &TestDb,
    sim: &platform_sim::Running,
    platform: Platform,
    secret: &str,
    now_ms: i64,
) -> Run {
    let ingest = Arc::new(Recorder::default());
    let (status, error) = round_into(
        db,
        sim,
        (platform, secret),
        now_ms,
        SyncTask::Incremental,
        ingest.clone(),
    )
    .await;
    Run {
        status,
        error,
        ingest,
    }
}

/// One round of `task` for `platform` × ID against `sim` at `now_ms`, signing with
/// `secret` and ingesting into `ingest` (a recorder or the real ingest unit): the
/// job's status and last error after the round.
pub(crate) async fn round_into(
    db: &TestDb,
    sim: &platform_sim::Running,
    (platform, secret): (Platform, &str),
    now_ms: i64,
    task: SyncTask,
    ingest: Arc<dyn OrderIngestor>,
) -> (JobStatus, Option<String>) {
    let pair = SyncPair {
        platform,
        country: id(),
    };
    let settings = SyncSettings {
        page_size: 5,
        clock: Arc::new(move || DateTime::from_timestamp_millis(now_ms).unwrap()),
        ..SyncSettings::default()
    };
    let database = db.database().await;
    let base = sim.base_url(platform.as_str());
    let handler = SyncHandler::new(
        database.db.clone(),
        vec![adapter(platform, &base, secret)],
        vec![pair],
        ingest,
        settings,
    );
    let engine = Engine::new(
        database.db,
        database.store,
        EngineConfig::new(format!("proto-{}", uuid::Uuid::new_v4().simple())),
        vec![(&PLATFORM_SYNC, Arc::new(handler))],
    )
    .unwrap();
    engine.submit(&sync_job(pair, task)).await.unwrap();
    let code = PLATFORM_SYNC.code(&sync::business_key(pair, task));
    engine
        .retry(&Selector::parse(vec![code.clone()], vec![]).unwrap())
        .await
        .unwrap();
    let view = ops::show(engine.db(), &code).await.unwrap().unwrap();
    (view.job.status, view.job.last_error)
}

/// Twelve orders created within the last day (whole minutes: the platforms speak
/// seconds), a mix of statuses, one with attribution.
fn orders(base: i64) -> Vec<SimOrder> {
    let statuses = ["PENDING", "COMPLETED", "REFUNDED"];
    (0..12)
        .map(|i| {
            let mut o = order(
                &format!("O{i:02}"),
                statuses[i % 3],
                100_000 + i as i64 * 1_250,
                base - (20 - i as i64) * HOUR_MS,
            );
            if i == 4 {
                o.sub_id = Some(platform_sim::SubId {
                    kind: "TRACKING_ID".into(),
                    value: "u-42".into(),
                });
            }
            o
        })
        .collect()
}

both_backends!(
    tiktok_and_shopee_syncs_through_the_simulator_ingest_every_order_once,
    |db| async move {
        let sim = platform_sim::spawn("127.0.0.1:0".parse().unwrap(), Sim::new())
            .await
            .unwrap();
        let base = Utc::now().timestamp_millis() / MINUTE_MS * MINUTE_MS;
        for (platform, secret) in [
            (Platform::TikTok, TEST_TIKTOK_APP_SECRET.to_owned()),
            (Platform::Shopee, test_shopee_secret("ID")),
        ] {
            let key = platform.as_str().to_ascii_lowercase();
            let seeded = orders(base);
            sim.sim.upsert(&key, &seeded).unwrap();
            let run = round(&db, &sim, platform, &secret, base).await;
            assert_eq!(
                run.status,
                JobStatus::Success,
                "{platform}: {:?}",
                run.error
            );
            let deliveries = run.ingest.deliveries();
            assert_eq!(deliveries.len(), 12, "{platform}: {deliveries:?}");
            assert!(deliveries.values().all(|n| *n == 1), "{platform}");
            let got = run.ingest.calls().concat();
            for o in &seeded {
                let n = got
                    .iter()
                    .find(|n| n.platform_order_id.as_str() == o.order_id)
                    .unwrap();
                assert_eq!(n.platform, platform);
                assert_eq!(n.gmv_minor.get(), o.gmv_minor, "{platform} {}", o.order_id);
                assert_eq!(n.platform_commission_minor.get(), o.commission_minor);
                assert_eq!(n.platform_updated_at.timestamp_millis(), o.update_time_ms);
                assert_eq!(n.ordered_at.timestamp_millis(), o.create_time_ms);
                let expected = match (platform, o.order_status.as_str()) {
                    (_, "PENDING") => OrderStatus::Pending,
                    (_, "COMPLETED") => OrderStatus::Completed,
                    (Platform::TikTok, _) => OrderStatus::Refunded,
                    // Shopee's conversions know no refund: a refunded order is CANCELLED.
                    _ => OrderStatus::Cancelled,
                };
                assert_eq!(n.status, expected, "{platform} {}", o.order_id);
                assert_eq!(n.attribution.is_some(), o.sub_id.is_some());
            }
            assert!(sim.sim.refusals().is_empty(), "{:?}", sim.sim.refusals());
        }
    }
);

both_backends!(
    a_forged_signature_is_refused_by_the_platform_and_ingests_nothing,
    |db| async move {
        let sim = platform_sim::spawn("127.0.0.1:0".parse().unwrap(), Sim::new())
            .await
            .unwrap();
        let base = Utc::now().timestamp_millis() / MINUTE_MS * MINUTE_MS;
        for (platform, documented) in [
            (Platform::TikTok, "error 106001"),
            (Platform::Shopee, "error 10020: Invalid Signature"),
        ] {
            let key = platform.as_str().to_ascii_lowercase();
            sim.sim.upsert(&key, &orders(base)).unwrap();
            let before = sim.sim.refusals().len();
            let run = round(&db, &sim, platform, "forged-secret", base).await;
            assert_eq!(run.status, JobStatus::Failed, "{platform}");
            let error = run.error.unwrap_or_default();
            assert!(error.contains(documented), "{platform}: {error}");
            assert!(
                run.ingest.calls().is_empty(),
                "{platform}: nothing ingested"
            );
            assert_eq!(sim.sim.refusals().len(), before + 1, "{platform}");
        }
    }
);
