//! Platform order sync (issue 5 item 5; SPEC R-ORD-8, R-COM-4; seed 003 §10.1): the
//! `platform_sync` job pulls pages from the platform simulator over a real loopback
//! socket (the generic adapter, Traveloka's: the mechanics below need an update-time
//! window, which only the generic API offers; TikTok Shop and Shopee speak their
//! documented protocols in `platform_protocols.rs`), ingests them through a recording fake `OrderIngestor` (idempotent by the
//! latest `platform_updated_at` per order, as R-ORD-3 makes the real one) and keeps its
//! watermark and page checkpoint in the database. Both backends.

use crate::common;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use common::{scalar, TestDb};
use factledger::affiliate::platform::PlatformAdapter;
use factledger::affiliate::platforms::generic::HttpPlatformAdapter;
use factledger::affiliate::sync::{
    self, load_state, submit_sync_jobs, sync_job, SyncHandler, SyncPair, SyncSettings, SyncTask,
    LOOKBACK_SLICE_MS, OVERLAP_MS, PLATFORM_SYNC, SAFETY_LAG_MS, SYNC_INTERVAL_MS,
};
use factledger::affiliate::{IngestError, IngestResult, OrderIngestor};
use factledger::infra::jobs::engine::{Engine, EngineConfig};
use factledger::infra::jobs::{ops, JobStatus, Selector};
use factledger::infra::store::{Fence, StoreError};
use factledger_aggregates::affiliate::{CountryCode, Platform};
use factledger_aggregates::affiliate_order::{NormalisedOrder, OrderStatus};
use platform_sim::{Fault, Sim, SimOrder};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

const MINUTE_MS: i64 = 60_000;
const HOUR_MS: i64 = 60 * MINUTE_MS;
const DAY_MS: i64 = 24 * HOUR_MS;
/// Client timeout in these tests: short, so a scripted delay times out quickly.
const TIMEOUT_MS: u64 = 500;

/// An `OrderIngestor` that records every page it is given and answers like the real
/// one would for idempotency: `created` for a new order, `updated` for a newer
/// `platform_updated_at`, `unchanged` for the same, `ignored_stale` for an older one.
#[derive(Default)]
pub(crate) struct Recorder {
    latest: Mutex<HashMap<String, DateTime<Utc>>>,
    /// Every call's orders, failed calls included.
    calls: Mutex<Vec<Vec<NormalisedOrder>>>,
    fences: Mutex<Vec<Option<Fence>>>,
    /// Fail the call with this number (1-based, counting every call).
    fail_call: Mutex<Option<usize>>,
    /// At the call with this number, take the job away from the round (its lease
    /// recovered and re-claimed elsewhere: `running_attempt` moves on).
    steal_claim_at: Mutex<Option<(usize, factledger::infra::db::Db)>>,
}

impl Recorder {
    pub(crate) fn calls(&self) -> Vec<Vec<NormalisedOrder>> {
        self.calls.lock().unwrap().clone()
    }

    /// How many times each order was handed over (failed calls included).
    pub(crate) fn deliveries(&self) -> HashMap<String, usize> {
        let mut n = HashMap::new();
        for o in self.calls().iter().flatten() {
            *n.entry(o.platform_order_id.to_string()).or_default() += 1;
        }
        n
    }

    pub(crate) fn latest(&self, id: &str) -> Option<DateTime<Utc>> {
        self.latest.lock().unwrap().get(id).copied()
    }
}

#[async_trait]
impl OrderIngestor for Recorder {
    async fn ingest_page(
        &self,
        orders: Vec<NormalisedOrder>,
        fence: Option<Fence>,
    ) -> Result<Vec<IngestResult>, IngestError> {
        let call = {
            let mut calls = self.calls.lock().unwrap();
            calls.push(orders.clone());
            calls.len()
        };
        self.fences.lock().unwrap().push(fence);
        let steal = self.steal_claim_at.lock().unwrap().clone();
        if let (Some((at, db)), Some(f)) = (steal, fence) {
            if at == call {
                let sql = format!(
                    "UPDATE jobs SET running_attempt = running_attempt + 1 WHERE id = {}",
                    f.job_id
                );
                common::exec(&db, &sql).await;
            }
        }
        if *self.fail_call.lock().unwrap() == Some(call) {
            // The database went away mid-page: the process "crashes" here.
            return Err(IngestError::Store(StoreError::OutcomeUnknown(
                "connection reset by test".into(),
            )));
        }
        let mut latest = self.latest.lock().unwrap();
        Ok(orders
            .iter()
            .map(|o| {
                let id = o.platform_order_id.to_string();
                let result = match latest.get(&id) {
                    None => "created",
                    Some(t) if o.platform_updated_at > *t => "updated",
                    Some(t) if o.platform_updated_at == *t => "unchanged",
                    Some(_) => "ignored_stale",
                };
                if result == "created" || result == "updated" {
                    latest.insert(id.clone(), o.platform_updated_at);
                }
                IngestResult {
                    platform: o.platform.to_string(),
                    platform_order_id: id,
                    result: result.into(),
                    code: None,
                    reason: None,
                    field: None,
                    position: None,
                }
            })
            .collect())
    }
}

struct Harness {
    db: TestDb,
    engine: Engine,
    sim: platform_sim::Running,
    ingest: Arc<Recorder>,
    /// The sync's "now", epoch ms.
    clock: Arc<AtomicI64>,
    pair: SyncPair,
    /// The clock's start: a whole minute, now.
    base: i64,
}

fn pair() -> SyncPair {
    SyncPair {
        platform: Platform::Traveloka,
        country: CountryCode::parse("ID").unwrap(),
    }
}

async fn harness(db: TestDb, page_size: u32) -> Harness {
    let sim = platform_sim::spawn("127.0.0.1:0".parse().unwrap(), Sim::new())
        .await
        .expect("simulator on loopback");
    let base = Utc::now().timestamp_millis() / MINUTE_MS * MINUTE_MS;
    let clock = Arc::new(AtomicI64::new(base));
    let c = clock.clone();
    let settings = SyncSettings {
        page_size,
        clock: Arc::new(move || DateTime::from_timestamp_millis(c.load(Ordering::SeqCst)).unwrap()),
        ..SyncSettings::default()
    };
    let adapter: Arc<dyn PlatformAdapter> = Arc::new(
        HttpPlatformAdapter::new(Platform::Traveloka, &sim.base_url("traveloka"), TIMEOUT_MS)
            .unwrap(),
    );
    let ingest = Arc::new(Recorder::default());
    let database = db.database().await;
    let handler = SyncHandler::new(
        database.db.clone(),
        vec![adapter],
        vec![pair()],
        ingest.clone(),
        settings,
    );
    let engine = Engine::new(
        database.db,
        database.store,
        EngineConfig::new(format!("sync-{}", uuid::Uuid::new_v4().simple())),
        vec![(&PLATFORM_SYNC, Arc::new(handler))],
    )
    .expect("engine");
    Harness {
        db,
        engine,
        sim,
        ingest,
        clock,
        pair: pair(),
        base,
    }
}

pub(crate) fn order(id: &str, status: &str, gmv: i64, update_ms: i64) -> SimOrder {
    SimOrder {
        order_id: id.into(),
        region: "ID".into(),
        order_status: status.into(),
        currency: "IDR".into(),
        gmv_minor: gmv,
        commission_minor: gmv / 20,
        create_time_ms: update_ms - HOUR_MS,
        update_time_ms: update_ms,
        sub_id: None,
    }
}

impl Harness {
    fn code(&self, task: SyncTask) -> String {
        PLATFORM_SYNC.code(&sync::business_key(self.pair, task))
    }

    /// Submit the task's job as the cron does (a fact change) and run one round now.
    async fn round(&self, task: SyncTask) -> (JobStatus, Value, Option<String>) {
        self.engine
            .submit(&sync_job(self.pair, task))
            .await
            .unwrap();
        self.retry(task).await
    }

    /// Run the task's job now (manual retry: ignores its due time).
    async fn retry(&self, task: SyncTask) -> (JobStatus, Value, Option<String>) {
        let code = self.code(task);
        let run = self
            .engine
            .retry(&Selector::parse(vec![code.clone()], vec![]).unwrap())
            .await
            .unwrap();
        assert_eq!(run.claimed, 1, "{run:?}");
        let view = ops::show(self.engine.db(), &code).await.unwrap().unwrap();
        let summary = view
            .levels
            .round
            .as_ref()
            .map(|r| r.summary.clone())
            .unwrap_or(Value::Null);
        (view.job.status, summary, view.job.last_error)
    }

    fn advance(&self, ms: i64) {
        self.clock.fetch_add(ms, Ordering::SeqCst);
    }

    fn now(&self) -> i64 {
        self.clock.load(Ordering::SeqCst)
    }

    async fn state(&self, task: SyncTask) -> sync::SyncState {
        load_state(self.engine.db(), self.pair, task)
            .await
            .unwrap()
            .expect("sync state saved")
    }
}

fn count(summary: &Value, result: &str) -> u64 {
    summary["results"][result].as_u64().unwrap_or(0)
}

both_backends!(
    pages_through_a_window_and_ingests_every_order_once,
    |db| async move {
        let h = harness(db, 5).await;
        let seeded = h
            .sim
            .sim
            .seed(
                "traveloka",
                "ID",
                7,
                23,
                h.base - 20 * HOUR_MS,
                h.base - HOUR_MS,
            )
            .unwrap();
        // Another country's orders are not this pair's business.
        h.sim
            .sim
            .seed(
                "traveloka",
                "MY",
                7,
                4,
                h.base - 20 * HOUR_MS,
                h.base - HOUR_MS,
            )
            .unwrap();

        let (status, summary, _) = h.round(SyncTask::Incremental).await;
        assert_eq!(status, JobStatus::Success, "{summary}");
        assert_eq!(summary["pages"], 5, "{summary}");
        assert_eq!(summary["orders"], 23);
        assert_eq!(count(&summary, "created"), 23);
        assert_eq!(summary["complete"], true);

        let calls = h.ingest.calls();
        assert_eq!(calls.len(), 5);
        assert!(calls.iter().all(|c| c.len() <= 5));
        let deliveries = h.ingest.deliveries();
        assert_eq!(deliveries.len(), 23);
        assert!(deliveries.values().all(|n| *n == 1), "{deliveries:?}");
        for o in &seeded {
            assert_eq!(
                h.ingest.latest(&o.order_id).unwrap().timestamp_millis(),
                o.update_time_ms
            );
        }
        // Every page was fenced by the round's claim.
        assert!(h.ingest.fences.lock().unwrap().iter().all(Option::is_some));

        // One window, its pages chained by token, ending at now minus the safety lag.
        let requests = h.sim.sim.requests();
        assert_eq!(requests.len(), 5);
        assert!(requests[0].page_token.is_none());
        assert!(requests[1..].iter().all(|r| r.page_token.is_some()));
        let watermark = h.base - SAFETY_LAG_MS;
        assert!(requests
            .iter()
            .all(|r| r.updated_to == Some(watermark) && r.country.as_deref() == Some("ID")));
        let state = h.state(SyncTask::Incremental).await;
        assert_eq!(state.mark_ms, Some(watermark));
        assert_eq!((state.window_ms, state.page_token), (None, None));
        assert_eq!(state.windows_done, 1);
    }
);

both_backends!(
    the_overlap_repulls_the_boundary_and_duplicates_change_nothing,
    |db| async move {
        let h = harness(db, 4).await;
        let watermark = h.base - SAFETY_LAG_MS;
        h.sim
            .sim
            .seed(
                "traveloka",
                "ID",
                9,
                10,
                h.base - 20 * HOUR_MS,
                h.base - HOUR_MS,
            )
            .unwrap();
        let boundary: Vec<SimOrder> = [20, 15, 10]
            .iter()
            .enumerate()
            .map(|(i, m)| {
                order(
                    &format!("B{i}"),
                    "COMPLETED",
                    200_000,
                    watermark - m * MINUTE_MS,
                )
            })
            .collect();
        h.sim.sim.upsert("traveloka", &boundary).unwrap();
        // Offset drift: every page repeats the previous page's last order.
        h.sim.sim.set_duplicate_page_boundary(true);

        let (status, first, _) = h.round(SyncTask::Incremental).await;
        assert_eq!(status, JobStatus::Success, "{first}");
        assert_eq!(count(&first, "created"), 13, "{first}");
        assert!(count(&first, "unchanged") >= 3, "page duplicates: {first}");

        // The platform re-sends: a zero-amount sparse replay of B1 (Shopee style) and an
        // older PENDING of B2 after its COMPLETED.
        let mut sparse = order("B1", "COMPLETED", 0, watermark + 5 * MINUTE_MS);
        sparse.commission_minor = 0;
        let stale = order("B2", "PENDING", 200_000, watermark - 40 * MINUTE_MS);
        h.sim
            .sim
            .replay("traveloka", &[sparse, stale.clone()])
            .unwrap();
        let stale_in_window = order("B2", "PENDING", 200_000, watermark - 11 * MINUTE_MS);
        h.sim.sim.replay("traveloka", &[stale_in_window]).unwrap();

        h.advance(15 * MINUTE_MS);
        let before = h.ingest.calls().len();
        let (status, second, _) = h.round(SyncTask::Incremental).await;
        assert_eq!(status, JobStatus::Success, "{second}");
        // The second window starts an overlap before the watermark.
        let last = h.sim.sim.requests().last().cloned().unwrap();
        assert_eq!(last.updated_from, Some(watermark - OVERLAP_MS));
        assert_eq!(last.updated_to, Some(h.now() - SAFETY_LAG_MS));
        // The boundary orders came again and changed nothing.
        let again: Vec<NormalisedOrder> = h.ingest.calls()[before..].concat();
        for b in ["B0", "B1", "B2"] {
            assert!(
                again.iter().any(|o| o.platform_order_id.as_str() == b),
                "{b} re-pulled"
            );
        }
        assert_eq!(count(&second, "created"), 0, "{second}");
        assert!(count(&second, "unchanged") >= 3, "{second}");
        // The sparse replay reached the ingest unit with its zeros (it decides, R-ORD-6),
        // the older PENDING as what it is: stale. The one older than the overlap did not
        // come at all.
        let b1 = again
            .iter()
            .find(|o| o.platform_order_id.as_str() == "B1" && o.gmv_minor.is_sparse())
            .expect("sparse replay delivered");
        assert!(b1.platform_commission_minor.is_sparse());
        assert_eq!(count(&second, "updated"), 1, "{second}");
        let b2_pending: Vec<&NormalisedOrder> = again
            .iter()
            .filter(|o| o.platform_order_id.as_str() == "B2" && o.status == OrderStatus::Pending)
            .collect();
        assert_eq!(b2_pending.len(), 1);
        assert_eq!(count(&second, "ignored_stale"), 1, "{second}");
        assert_eq!(
            h.state(SyncTask::Incremental).await.mark_ms,
            Some(h.now() - SAFETY_LAG_MS)
        );
    }
);

both_backends!(
    a_late_update_is_caught_by_the_overlap_or_else_by_the_lookback,
    |db| async move {
        let h = harness(db, 10).await;
        let watermark = h.base - SAFETY_LAG_MS;
        h.sim
            .sim
            .upsert(
                "traveloka",
                &[
                    order("A", "PENDING", 100_000, h.base - 5 * HOUR_MS),
                    order("B", "PENDING", 100_000, h.base - 3 * DAY_MS - HOUR_MS),
                ],
            )
            .unwrap();
        let (status, first, _) = h.round(SyncTask::Incremental).await;
        assert_eq!(status, JobStatus::Success, "{first}");
        assert!(h.ingest.latest("A").is_some());
        assert!(h.ingest.latest("B").is_none(), "older than the first pull");

        // Late-arriving updates: A's lands 10 minutes inside the window already pulled, B's
        // three days back (far older than the overlap).
        let a_late = order("A", "COMPLETED", 100_000, watermark - 10 * MINUTE_MS);
        let b_late = order("B", "COMPLETED", 100_000, h.base - 3 * DAY_MS);
        h.sim
            .sim
            .upsert("traveloka", &[a_late.clone(), b_late.clone()])
            .unwrap();

        h.advance(15 * MINUTE_MS);
        let (_, second, _) = h.round(SyncTask::Incremental).await;
        assert_eq!(count(&second, "updated"), 1, "{second}");
        assert_eq!(
            h.ingest.latest("A").unwrap().timestamp_millis(),
            a_late.update_time_ms
        );
        assert!(
            h.ingest.latest("B").is_none(),
            "the overlap does not reach 3 days"
        );

        // The lookback sweep: its first slice covers the last four days.
        let (status, sweep, _) = h.round(SyncTask::Lookback).await;
        assert_eq!(status, JobStatus::Success, "{sweep}");
        assert_eq!(
            h.ingest.latest("B").unwrap().timestamp_millis(),
            b_late.update_time_ms
        );
        let top = h.now() - SAFETY_LAG_MS;
        let state = h.state(SyncTask::Lookback).await;
        assert_eq!(
            state.mark_ms,
            Some(top - LOOKBACK_SLICE_MS),
            "cursor moved back"
        );
        // The next lookback round sweeps the slice before it.
        h.advance(15 * MINUTE_MS);
        h.round(SyncTask::Lookback).await;
        let last = h.sim.sim.requests().last().cloned().unwrap();
        assert_eq!(last.updated_to, Some(top - LOOKBACK_SLICE_MS));
        assert_eq!(last.updated_from, Some(top - 2 * LOOKBACK_SLICE_MS));
    }
);

both_backends!(
    a_crash_mid_window_resumes_from_the_next_page_token,
    |db| async move {
        let h = harness(db, 5).await;
        h.sim
            .sim
            .seed(
                "traveloka",
                "ID",
                11,
                25,
                h.base - 20 * HOUR_MS,
                h.base - HOUR_MS,
            )
            .unwrap();
        // Page 3's ingest dies.
        *h.ingest.fail_call.lock().unwrap() = Some(3);
        let (status, _, error) = h.round(SyncTask::Incremental).await;
        assert_eq!(status, JobStatus::Failed);
        assert!(error.as_deref().unwrap().contains("page 3"), "{error:?}");
        let state = h.state(SyncTask::Incremental).await;
        assert_eq!(state.pages_done, 2);
        assert_eq!(
            state.mark_ms, None,
            "the watermark moves only at the window's end"
        );
        let first = h.sim.sim.requests();
        assert_eq!(first.len(), 3);
        assert_eq!(
            state.page_token, first[2].page_token,
            "checkpoint = page 3's token"
        );

        // The next round (later: the clock moved) resumes the same window at page 3.
        h.advance(15 * MINUTE_MS);
        let (status, summary, _) = h.retry(SyncTask::Incremental).await;
        assert_eq!(status, JobStatus::Success, "{summary}");
        assert_eq!(summary["resumed"], true);
        assert_eq!(summary["pages"], 3);
        let requests = h.sim.sim.requests();
        let resumed = &requests[3];
        assert_eq!(resumed.page_token, first[2].page_token);
        assert_eq!(
            (resumed.updated_from, resumed.updated_to),
            (first[0].updated_from, first[0].updated_to)
        );
        // At most one page was replayed: page 3's five orders came twice, the rest once,
        // and every order was ingested.
        let deliveries = h.ingest.deliveries();
        assert_eq!(deliveries.len(), 25);
        assert_eq!(deliveries.values().filter(|n| **n == 2).count(), 5);
        assert!(deliveries.values().all(|n| *n <= 2));
        assert_eq!(h.ingest.latest.lock().unwrap().len(), 25);
        assert_eq!(
            h.state(SyncTask::Incremental).await.mark_ms,
            first[0].updated_to
        );
    }
);

both_backends!(
    transient_failures_fail_the_round_and_the_retry_skips_nothing,
    |db| async move {
        let h = harness(db, 5).await;
        h.sim
            .sim
            .seed(
                "traveloka",
                "ID",
                13,
                15,
                h.base - 20 * HOUR_MS,
                h.base - HOUR_MS,
            )
            .unwrap();
        let code = h.code(SyncTask::Incremental);
        let due_in = |db: factledger::infra::db::Db, code: String| async move {
            let at = scalar(
                &db,
                &format!("SELECT next_execute_at_ms FROM jobs WHERE code = '{code}'"),
            )
            .await;
            at - factledger::infra::db::now_ms()
        };

        // A 503 on page 2.
        h.sim.sim.fault(2, Fault::Status { status: 503 });
        let (status, _, error) = h.round(SyncTask::Incremental).await;
        assert_eq!(status, JobStatus::Failed);
        let error = error.unwrap();
        assert!(
            error.contains("HTTP 503") && error.contains("page 2"),
            "{error}"
        );
        let wait = due_in(h.engine.db().clone(), code.clone()).await;
        assert!(
            (20_000..=30_000).contains(&wait),
            "first backoff 30 s, got {wait} ms"
        );
        // Not due yet: the scan leaves it alone.
        let scan = h.engine.scan(PLATFORM_SYNC.name, None).await.unwrap();
        assert_eq!(scan.claimed, 0);

        // Then a timeout on the same page, then a page that is not JSON.
        h.sim.sim.fault(
            1,
            Fault::Delay {
                delay_ms: 3 * TIMEOUT_MS,
            },
        );
        let (status, _, error) = h.retry(SyncTask::Incremental).await;
        assert_eq!(status, JobStatus::Failed);
        assert!(
            error
                .as_deref()
                .unwrap()
                .contains("no complete answer within 500 ms"),
            "{error:?}"
        );
        let wait = due_in(h.engine.db().clone(), code.clone()).await;
        assert!(
            (50_000..=60_000).contains(&wait),
            "second backoff 60 s, got {wait} ms"
        );
        h.sim.sim.fault(1, Fault::Garbage);
        let (status, _, error) = h.retry(SyncTask::Incremental).await;
        assert_eq!(status, JobStatus::Failed);
        assert!(
            error.as_deref().unwrap().contains("unreadable page"),
            "{error:?}"
        );

        // The retry succeeds from page 2: nothing skipped, nothing ingested twice.
        let (status, summary, _) = h.retry(SyncTask::Incremental).await;
        assert_eq!(status, JobStatus::Success, "{summary}");
        assert_eq!(summary["pages"], 2);
        let deliveries = h.ingest.deliveries();
        assert_eq!(deliveries.len(), 15);
        assert!(deliveries.values().all(|n| *n == 1), "{deliveries:?}");
        let view = ops::show(h.engine.db(), &code).await.unwrap().unwrap();
        assert_eq!(view.job.retry_count, 3);
    }
);

both_backends!(
    malformed_orders_are_reported_and_skipped_and_the_page_goes_on,
    |db| async move {
        let h = harness(db, 50).await;
        let t = h.base - 3 * HOUR_MS;
        h.sim
            .sim
            .upsert(
                "traveloka",
                &[
                    order("G1", "PENDING", 100_000, t),
                    order("G2", "COMPLETED", 100_000, t + MINUTE_MS),
                ],
            )
            .unwrap();
        let mut negative = serde_json::to_value(order("BAD1", "PENDING", 100_000, t)).unwrap();
        negative["gmv_minor"] = json!(-5);
        let mut shipped = serde_json::to_value(order("BAD2", "SHIPPED", 100_000, t)).unwrap();
        shipped["order_status"] = json!("SHIPPED");
        h.sim
            .sim
            .raw("traveloka", "ID", t + 30_000, negative)
            .unwrap();
        h.sim
            .sim
            .raw("traveloka", "ID", t + 30_000, shipped)
            .unwrap();
        h.sim
            .sim
            .raw("traveloka", "ID", t + 30_000, json!(["not", "an", "order"]))
            .unwrap();

        let (status, summary, _) = h.round(SyncTask::Incremental).await;
        assert_eq!(status, JobStatus::Success, "{summary}");
        assert_eq!(summary["malformed"], 3, "{summary}");
        assert_eq!(count(&summary, "created"), 2);
        let reported: Vec<String> = summary["malformed_orders"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| format!("{} {}", m["platform_order_id"], m["error"]))
            .collect();
        assert!(
            reported
                .iter()
                .any(|r| r.contains("BAD1") && r.contains("gmv_minor")),
            "{reported:?}"
        );
        assert!(
            reported
                .iter()
                .any(|r| r.contains("BAD2") && r.contains("SHIPPED")),
            "{reported:?}"
        );
        let ingested: Vec<String> = h.ingest.deliveries().into_keys().collect();
        assert_eq!(ingested.len(), 2, "{ingested:?}");
    }
);

both_backends!(
    the_cron_entry_submits_both_tasks_of_every_pair,
    |db| async move {
        let h = harness(db, 10).await;
        let codes = submit_sync_jobs(&h.engine, &[h.pair]).await.unwrap();
        assert_eq!(
            codes,
            vec![h.code(SyncTask::Incremental), h.code(SyncTask::Lookback)]
        );
        let run = h.engine.scan(PLATFORM_SYNC.name, None).await.unwrap();
        assert_eq!(run.succeeded, 2, "{run:?}");
        // The next firing revives the finished jobs (fact change, R-JOB-2).
        submit_sync_jobs(&h.engine, &[h.pair]).await.unwrap();
        let run = h.engine.scan(PLATFORM_SYNC.name, None).await.unwrap();
        assert_eq!(run.succeeded, 2, "{run:?}");
        for task in SyncTask::ALL {
            assert_eq!(h.state(task).await.windows_done, 2);
        }
        // An engine without the kind refuses instead of queueing jobs nobody runs.
        let database = h.db.database().await;
        let bare = Engine::new(
            database.db,
            database.store,
            EngineConfig::new("bare"),
            vec![],
        )
        .unwrap();
        assert!(submit_sync_jobs(&bare, &[h.pair]).await.is_err());
    }
);

both_backends!(
    a_round_that_lost_its_claim_saves_no_checkpoint,
    |db| async move {
        let h = harness(db, 5).await;
        h.sim
            .sim
            .seed(
                "traveloka",
                "ID",
                17,
                15,
                h.base - 20 * HOUR_MS,
                h.base - HOUR_MS,
            )
            .unwrap();
        *h.ingest.steal_claim_at.lock().unwrap() = Some((2, h.engine.db().clone()));
        h.engine
            .submit(&sync_job(h.pair, SyncTask::Incremental))
            .await
            .unwrap();
        let code = h.code(SyncTask::Incremental);
        let run = h
            .engine
            .retry(&Selector::parse(vec![code.clone()], vec![]).unwrap())
            .await
            .unwrap();
        // The round stopped at the refused checkpoint and its completion was refused too.
        assert_eq!((run.claimed, run.fenced), (1, 1), "{run:?}");
        assert_eq!(
            h.ingest.calls().len(),
            2,
            "no page after the refused checkpoint"
        );
        let state = h.state(SyncTask::Incremental).await;
        assert_eq!(state.pages_done, 1, "only page 1's checkpoint was saved");
        assert_eq!(state.page_token, h.sim.sim.requests()[1].page_token);
    }
);

/// One cron firing: both tasks of the pair run a round, then the clock moves on.
async fn cron_tick(h: &Harness) {
    for task in [SyncTask::Incremental, SyncTask::Lookback] {
        let (status, summary, error) = h.round(task).await;
        assert_eq!(status, JobStatus::Success, "{summary} {error:?}");
    }
    h.advance(SYNC_INTERVAL_MS);
}

// Seed §18 case 9 (SPEC §11, R-COM-4): refunds of orders up to 120 days old that the
// incremental pull cannot see (their update times are far behind its watermark) are
// all picked up by the lookback sweep within 24 hours of appearing, with the cron
// firing both tasks every SYNC_INTERVAL_MS as in production.
both_backends!(
    the_historical_refund_sweep_covers_the_last_120_days_within_24_hours,
    |db| async move {
        let h = harness(db, 50).await;
        // The sweep is mid-cycle when the refunds appear: a few ticks have run.
        for _ in 0..7 {
            cron_tick(&h).await;
        }

        // Refunds spread over the last 120 days (both ends included), all older than
        // the incremental window's overlap.
        let arrived = h.now();
        let ages_days = [1, 2, 10, 29, 45, 60, 77, 90, 101, 115, 119];
        let mut refunds: Vec<SimOrder> = ages_days
            .iter()
            .map(|d| order(&format!("R{d}"), "REFUNDED", 100_000, arrived - d * DAY_MS))
            .collect();
        // The oldest a sweep must reach: 120 days less a minute.
        refunds.push(order(
            "R120",
            "REFUNDED",
            100_000,
            arrived - 120 * DAY_MS + MINUTE_MS,
        ));
        h.sim.sim.upsert("traveloka", &refunds).unwrap();

        let ticks_in_a_day = DAY_MS / SYNC_INTERVAL_MS;
        let mut seen_after = HashMap::new();
        for n in 1..=ticks_in_a_day {
            cron_tick(&h).await;
            for r in &refunds {
                if h.ingest.latest(&r.order_id).is_some() {
                    seen_after.entry(r.order_id.clone()).or_insert(n);
                }
            }
            if seen_after.len() == refunds.len() {
                break;
            }
        }
        let missing: Vec<_> = refunds
            .iter()
            .filter(|r| !seen_after.contains_key(&r.order_id))
            .map(|r| r.order_id.clone())
            .collect();
        assert!(missing.is_empty(), "not swept within 24 h: {missing:?}");
        // Each refund was ingested with its refunded status and update time.
        for r in &refunds {
            assert_eq!(
                h.ingest.latest(&r.order_id).unwrap().timestamp_millis(),
                r.update_time_ms
            );
        }
        let refunded = h
            .ingest
            .calls()
            .into_iter()
            .flatten()
            .filter(|o| o.status == OrderStatus::Refunded)
            .count();
        assert!(refunded >= refunds.len());
        // And within 24 h means within one sweep cycle after arrival here (the bound
        // the constants promise): no refund waited longer than a cycle of rounds.
        let slowest = seen_after.values().max().copied().unwrap();
        assert!(
            slowest <= sync::LOOKBACK_ROUNDS_PER_CYCLE + 1,
            "slowest refund took {slowest} ticks"
        );
    }
);
