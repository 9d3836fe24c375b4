//! Platform order sync (SPEC R-ORD-8, R-COM-4; seed 003 §10.1): the job kind
//! `platform_sync`, one job per platform × country × task, keyed
//! `platform_sync:<PLATFORM>:<COUNTRY>:<task>`:
//!
//! - **incremental** pulls `[watermark − OVERLAP_MS, now − SAFETY_LAG_MS)`: the overlap
//!   re-pulls the end of the previous window, which catches updates the platform
//!   indexed late (their `update_time` lies in a window already pulled) and status
//!   re-sends; duplicates are harmless because the ingest is idempotent (R-ORD-3).
//! - **lookback** sweeps the last [`LOOKBACK_SPAN_MS`] in slices of
//!   [`LOOKBACK_SLICE_MS`], one slice per round, newest first, wrapping back to "now"
//!   after the oldest: a late order (or a late refund, R-COM-4) older than the overlap
//!   is caught within 24 hours. The cursor moves backwards and wraps; nothing relies
//!   on a cursor that only moves forward.
//!
//! A round pages through its window: after EACH page it ingests the page through the
//! [`OrderIngestor`] (every unit fenced by the job claim), then saves the page
//! checkpoint (the next page's token) — so a crash replays at most the one page that
//! was being ingested, and the ingest is idempotent. At the window's last page the
//! watermark (or the lookback cursor) moves and the checkpoint is cleared. A page that
//! cannot be fetched (5xx, timeout, garbage) fails the round; the job retries with
//! backoff from the saved checkpoint, so nothing is skipped. The platform is only ever
//! called outside a database transaction (R-INV-6); each checkpoint write is its own
//! short transaction, fenced by the claim.
//!
//! **Scheduling.** The cron (R-JOB-9, "about every 15 minutes") calls
//! [`submit_sync_jobs`] every [`SYNC_INTERVAL_MS`]: it submits both tasks of every
//! configured pair as fact changes, so a finished (or failed) job runs again, and a
//! running one runs once more right after its round. The lookback arithmetic below
//! assumes that period.

use super::platform::{
    FetchError, MalformedOrder, PageRequest, PlatformAdapter, Window, PAGE_SIZE_DEFAULT,
    REQUEST_TIMEOUT_MS_DEFAULT,
};
use super::platforms::config::{self, Protocol, Source};
use super::platforms::shopee::ShopeeAdapter;
use super::platforms::tiktok::TikTokAdapter;
use super::{IngestError, IngestResult, OrderIngestor};
use crate::infra::db::{now_ms, Db, Get, Tx};
use crate::infra::jobs::engine::{ClaimedJob, JobFailure, JobHandler, RoundReport};
use crate::infra::jobs::{Backoff, Engine, JobError, JobKind, JobSubmit};
use crate::infra::store::{Fence, StoreError};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use factledger_aggregates::affiliate::{CountryCode, Platform};
use factledger_projections::table::{Cell, ColType, Column};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

const MINUTE_MS: i64 = 60 * 1_000;
const HOUR_MS: i64 = 60 * MINUTE_MS;
const DAY_MS: i64 = 24 * HOUR_MS;

/// How often the cron submits the sync jobs (seed 003 §10.1: about every 15 minutes).
pub const SYNC_INTERVAL_MS: i64 = 15 * MINUTE_MS;
/// How far each incremental pull reaches back before the watermark: platforms index
/// updates late and re-send statuses; 30 minutes covers their usual delay twice over
/// for the cost of re-pulling two intervals' worth of boundary orders.
pub const OVERLAP_MS: i64 = 30 * MINUTE_MS;
/// Pulls end this long before "now": an update being written at the platform right
/// now may not be listed yet, and a window ending in the past is stable.
pub const SAFETY_LAG_MS: i64 = 2 * MINUTE_MS;
/// The first incremental pull of a pair (no watermark yet) starts this long ago; the
/// lookback sweep covers everything older.
pub const FIRST_PULL_MS: i64 = DAY_MS;
/// R-COM-4: late orders and refunds up to 120 days old must be caught.
pub const LATE_ORDER_AGE_MAX_MS: i64 = 120 * DAY_MS;
/// The range the lookback sweeps: 120 days plus one sweep cycle, because an order that
/// arrives just after the sweep passed its time is caught by the NEXT cycle, which
/// starts up to one cycle later (see [`LOOKBACK_CYCLE_MS`]).
pub const LOOKBACK_SPAN_MS: i64 = 121 * DAY_MS;
/// Update-time range of one lookback round.
pub const LOOKBACK_SLICE_MS: i64 = 4 * DAY_MS;
/// Lookback rounds per sweep cycle: `ceil(121 / 4)` = 31.
pub const LOOKBACK_ROUNDS_PER_CYCLE: i64 =
    (LOOKBACK_SPAN_MS + LOOKBACK_SLICE_MS - 1) / LOOKBACK_SLICE_MS;
/// One sweep cycle at one round per firing: 31 × 15 min = 7 h 45 min.
pub const LOOKBACK_CYCLE_MS: i64 = LOOKBACK_ROUNDS_PER_CYCLE * SYNC_INTERVAL_MS;
/// The coverage promise of R-COM-4.
pub const LOOKBACK_LATENCY_MAX_MS: i64 = DAY_MS;

// The arithmetic of R-COM-4, checked at compile time. Worst case, an order arrives
// just after the sweep passed its update time: the current cycle ends within one cycle,
// the next one reaches it within another. So two cycles (plus one firing of jitter)
// must fit in 24 hours — 15 h 45 min here, leaving 8 h for missed or retried firings —
// and the span must still include an order 120 days old when that next cycle starts.
const _: () = assert!(2 * LOOKBACK_CYCLE_MS + SYNC_INTERVAL_MS <= LOOKBACK_LATENCY_MAX_MS);
const _: () = assert!(LOOKBACK_SPAN_MS >= LATE_ORDER_AGE_MAX_MS + LOOKBACK_CYCLE_MS);
// The simpler form: slice length × runs per day ≥ 120 days.
const _: () = assert!(LOOKBACK_SLICE_MS * (DAY_MS / SYNC_INTERVAL_MS) >= LATE_ORDER_AGE_MAX_MS);

/// Pages one round pulls at most (100 orders each): the rest of the window waits for
/// the next firing, from the saved checkpoint.
pub const ROUND_PAGES_MAX_DEFAULT: u32 = 500;
/// A round stops at the next page boundary after this long (checkpoint saved), so a
/// huge backlog never holds a job for hours.
pub const ROUND_TIME_MAX_MS_DEFAULT: u64 = 10 * 60 * 1_000;
/// Lease of a sync round; the heartbeat renews it while pages are pulled.
pub const SYNC_LEASE_MS: i64 = 5 * 60 * 1_000;
/// Retries are fast: a transient 5xx should not wait for the next 15-minute firing.
pub const SYNC_BACKOFF_S: &[i64] = &[30, 60, 120, 300];
/// The first round plus 4 retries (about 8.5 minutes); the next firing revives it.
pub const SYNC_ROUNDS_MAX: i32 = 5;
/// Sync rounds at once (4 platforms × 2 tasks): pulls are I/O-bound, but they must not
/// starve the money jobs of the total cap.
pub const SYNC_CAP: i64 = 8;
/// Platform × country pairs one deployment syncs at most (4 platforms × 16 countries).
pub const SYNC_PAIRS_MAX: usize = 64;
/// Malformed orders listed in a round's summary (all are logged).
const MALFORMED_IN_SUMMARY_MAX: usize = 10;

/// The job kind of the platform sync.
pub static PLATFORM_SYNC: JobKind = JobKind {
    lease_ms: SYNC_LEASE_MS,
    backoff: Backoff::Seconds(SYNC_BACKOFF_S),
    max_retry_count: SYNC_ROUNDS_MAX,
    cap: Some(SYNC_CAP),
    parallelism: SYNC_CAP as usize,
    ..JobKind::new("platform_sync", "PSYNC")
};

/// Which sweep a sync job does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SyncTask {
    Incremental,
    Lookback,
}

impl SyncTask {
    pub const ALL: [SyncTask; 2] = [SyncTask::Incremental, SyncTask::Lookback];

    pub fn as_str(self) -> &'static str {
        match self {
            SyncTask::Incremental => "incremental",
            SyncTask::Lookback => "lookback",
        }
    }
}

/// One platform × country to sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SyncPair {
    pub platform: Platform,
    pub country: CountryCode,
}

/// `platform_sync:<PLATFORM>:<COUNTRY>:<task>` (R-ORD-8: one key per platform × country
/// × task).
pub fn business_key(pair: SyncPair, task: SyncTask) -> String {
    format!(
        "platform_sync:{}:{}:{}",
        pair.platform,
        pair.country,
        task.as_str()
    )
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SyncPayload {
    platform: Platform,
    country: CountryCode,
    task: SyncTask,
}

/// The job that syncs one pair × task (a fact change: it revives a finished job).
pub fn sync_job(pair: SyncPair, task: SyncTask) -> JobSubmit {
    JobSubmit::fact_change(
        &PLATFORM_SYNC,
        business_key(pair, task),
        json!({"platform": pair.platform, "country": pair.country, "task": task}),
    )
}

/// Submit the incremental and the lookback job of every pair — what the cron calls
/// every [`SYNC_INTERVAL_MS`]. Returns the job codes. Refused when the engine does not
/// run `platform_sync` (the jobs would wait forever).
pub async fn submit_sync_jobs(
    engine: &Engine,
    pairs: &[SyncPair],
) -> Result<Vec<String>, JobError> {
    if engine.kind(PLATFORM_SYNC.name).is_none() {
        return Err(JobError::UnknownKind(PLATFORM_SYNC.name.to_owned()));
    }
    let mut codes = Vec::with_capacity(pairs.len() * 2);
    for pair in pairs.iter().take(SYNC_PAIRS_MAX) {
        for task in SyncTask::ALL {
            codes.push(engine.submit(&sync_job(*pair, task)).await?);
        }
    }
    Ok(codes)
}

/// The cron schedule that submits the sync jobs, its expression and its job kind
/// (R-JOB-9: "platform order sync about every 15 min"). Each firing's job only
/// submits (fact changes); the pulls are the `platform_sync` jobs' rounds.
pub const PLATFORM_SYNC_SCHEDULE: &str = "platform_sync";
pub const PLATFORM_SYNC_EVERY: &str = "*/15 * * * *";
// The lookback arithmetic above assumes one firing every SYNC_INTERVAL_MS.
const _: () = assert!(SYNC_INTERVAL_MS == 15 * MINUTE_MS);

/// The kind of the sync schedule's firings. A round is a few inserts: a short lease,
/// one at a time, no retry (the next firing, 15 minutes later, submits again).
pub static PLATFORM_SYNC_SCAN: JobKind = JobKind {
    lease_ms: 60 * 1_000,
    max_retry_count: 1,
    cap: Some(1),
    parallelism: 1,
    ..JobKind::new("platform_sync_scan", "PSYNCSCAN")
};

/// `platform_sync_scan`: [`submit_sync_jobs`] for the configured pairs, on the engine
/// it is registered in (modelled on `callbacks::replay::ReplayScanHandler`).
pub struct SyncScanHandler {
    engine: crate::infra::jobs::cron::EngineSlot,
    pairs: Vec<SyncPair>,
}

impl SyncScanHandler {
    pub fn new(engine: crate::infra::jobs::cron::EngineSlot, pairs: Vec<SyncPair>) -> Self {
        SyncScanHandler { engine, pairs }
    }
}

#[async_trait]
impl JobHandler for SyncScanHandler {
    async fn run(&self, _job: &ClaimedJob) -> Result<RoundReport, JobFailure> {
        let engine = self
            .engine
            .get()
            .and_then(crate::infra::jobs::engine::WeakEngine::upgrade)
            .ok_or_else(|| JobFailure::new("the job engine is shutting down"))?;
        let codes = submit_sync_jobs(&engine, &self.pairs)
            .await
            .map_err(|e| JobFailure::new(e.to_string()))?;
        Ok(RoundReport {
            summary: json!({"pairs": self.pairs.len(), "submitted": codes.len()}),
            // Its business is the submits, all done; the pulls are the sync jobs' own
            // rounds (level 3 is theirs).
            business_done: true,
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("platform sync configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Fetch(#[from] FetchError),
    #[error("platform sync state: {0}")]
    Database(#[from] sqlx::Error),
}

/// The environment variable holding a platform's base URL, e.g.
/// `FACTLEDGER_PLATFORM_TIKTOK_URL`.
pub fn url_env_var(platform: Platform) -> String {
    format!("FACTLEDGER_PLATFORM_{}_URL", platform.as_str())
}

/// Which pairs this deployment syncs, where each platform's API is, and which
/// adapter (with its credentials) speaks to it.
#[derive(Debug, Clone, Default)]
pub struct SyncConfig {
    pub urls: BTreeMap<Platform, String>,
    pub pairs: Vec<SyncPair>,
    pub request_timeout_ms: u64,
    /// The adapter of each synced platform (see `platforms::config`).
    pub protocols: BTreeMap<Platform, Protocol>,
}

impl SyncConfig {
    /// From `--platform-countries` (comma separated: `ID` syncs country ID on every
    /// platform that has a URL, `TIKTOK:ID` one pair) and the platforms' URLs
    /// (`env(url_env_var(p))`). Empty `platform_countries` syncs nothing.
    pub fn parse(
        platform_countries: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<SyncConfig, SyncError> {
        Self::parse_with_files(platform_countries, env, |path| {
            std::fs::read_to_string(path).map_err(|e| e.to_string())
        })
    }

    /// [`SyncConfig::parse`], reading `*_FILE` secrets with `read_file`. Every synced
    /// platform's credentials are checked here (a missing or malformed one is refused,
    /// naming its variable), so `serve` refuses to start rather than fail each round.
    pub fn parse_with_files(
        platform_countries: &str,
        env: impl Fn(&str) -> Option<String>,
        read_file: impl Fn(&str) -> Result<String, String>,
    ) -> Result<SyncConfig, SyncError> {
        let urls: BTreeMap<Platform, String> = Platform::ALL
            .into_iter()
            .filter_map(|p| {
                env(&url_env_var(p))
                    .filter(|u| !u.trim().is_empty())
                    .map(|u| (p, u.trim().to_owned()))
            })
            .collect();
        let bad = |entry: &str, why: String| SyncError::Config(format!("{entry:?}: {why}"));
        let mut pairs = BTreeSet::new();
        for entry in platform_countries
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
        {
            let (platforms, country) = match entry.split_once(':') {
                Some((p, c)) => {
                    let p = Platform::parse(p).map_err(|e| bad(entry, e.rule))?;
                    if !urls.contains_key(&p) {
                        return Err(bad(entry, format!("{} is not set", url_env_var(p))));
                    }
                    (vec![p], c)
                }
                None => (urls.keys().copied().collect(), entry),
            };
            if platforms.is_empty() {
                return Err(bad(
                    entry,
                    "no platform has a URL (FACTLEDGER_PLATFORM_<PLATFORM>_URL)".into(),
                ));
            }
            let country = CountryCode::parse(country).map_err(|e| bad(entry, e.rule))?;
            pairs.extend(
                platforms
                    .into_iter()
                    .map(|platform| SyncPair { platform, country }),
            );
        }
        if pairs.len() > SYNC_PAIRS_MAX {
            return Err(SyncError::Config(format!(
                "{} platform × country pairs, at most {SYNC_PAIRS_MAX}",
                pairs.len()
            )));
        }
        let source = Source {
            env: &env,
            read_file: &read_file,
        };
        let mut protocols = BTreeMap::new();
        for (platform, url) in &urls {
            let countries: Vec<CountryCode> = pairs
                .iter()
                .filter(|p| p.platform == *platform)
                .map(|p| p.country)
                .collect();
            if !countries.is_empty() {
                let protocol = config::protocol(*platform, url, &countries, &source)
                    .map_err(SyncError::Config)?;
                protocols.insert(*platform, protocol);
            }
        }
        Ok(SyncConfig {
            urls,
            pairs: pairs.into_iter().collect(),
            request_timeout_ms: REQUEST_TIMEOUT_MS_DEFAULT,
            protocols,
        })
    }

    /// [`SyncConfig::parse`] with the process environment.
    pub fn from_env(platform_countries: &str) -> Result<SyncConfig, SyncError> {
        Self::parse(platform_countries, |k| std::env::var(k).ok())
    }

    /// The `platform_sync` handler over HTTP adapters for these pairs.
    pub fn handler(
        &self,
        db: Db,
        ingestor: Arc<dyn OrderIngestor>,
        settings: SyncSettings,
    ) -> Result<SyncHandler, SyncError> {
        let adapters = self
            .urls
            .iter()
            .filter(|(p, _)| self.pairs.iter().any(|pair| pair.platform == **p))
            .map(|(p, url)| self.adapter(*p, url))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(SyncHandler::new(
            db,
            adapters,
            self.pairs.clone(),
            ingestor,
            settings,
        ))
    }
}

impl SyncConfig {
    /// The adapter `platform` speaks (the generic one when no protocol was read).
    fn adapter(
        &self,
        platform: Platform,
        url: &str,
    ) -> Result<Arc<dyn PlatformAdapter>, FetchError> {
        let timeout_ms = self.request_timeout_ms;
        Ok(match self.protocols.get(&platform) {
            Some(Protocol::TikTok(c)) => Arc::new(TikTokAdapter::new(url, c.clone(), timeout_ms)?),
            Some(Protocol::Shopee(accounts)) => {
                Arc::new(ShopeeAdapter::new(accounts.clone(), timeout_ms)?)
            }
            Some(Protocol::Generic) | None => Arc::new(
                crate::affiliate::platforms::generic::HttpPlatformAdapter::new(
                    platform, url, timeout_ms,
                )?,
            ),
        })
    }
}

/// The clock windows are computed from (tests move it; the service uses the system's).
pub type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// Tunables of a sync round.
#[derive(Clone)]
pub struct SyncSettings {
    pub page_size: u32,
    pub round_pages_max: u32,
    pub round_time_max_ms: u64,
    pub clock: Clock,
}

impl Default for SyncSettings {
    fn default() -> Self {
        SyncSettings {
            page_size: PAGE_SIZE_DEFAULT,
            round_pages_max: ROUND_PAGES_MAX_DEFAULT,
            round_time_max_ms: ROUND_TIME_MAX_MS_DEFAULT,
            clock: Arc::new(Utc::now),
        }
    }
}

/// A pair × task's saved progress (`platform_sync_state`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncState {
    /// Incremental: the watermark; lookback: the sweep cursor (see the migration).
    pub mark_ms: Option<i64>,
    /// The window in progress, `[from, to)` in epoch ms.
    pub window_ms: Option<(i64, i64)>,
    /// The next page of the window in progress.
    pub page_token: Option<String>,
    pub pages_done: i32,
    pub windows_done: i64,
}

/// The columns of `platform_sync_state`, its key first.
const STATE_KEY: &[&str] = &["platform", "country", "task"];
const STATE_COLUMNS: &[&str] = &[
    "platform",
    "country",
    "task",
    "mark_ms",
    "window_from_ms",
    "window_to_ms",
    "page_token",
    "pages_done",
    "windows_done",
    "updated_at_ms",
];

fn state_key(pair: SyncPair, task: SyncTask) -> [Cell; 3] {
    [
        Cell::text(pair.platform.as_str()),
        Cell::text(pair.country.as_str()),
        Cell::text(task.as_str()),
    ]
}

/// The saved progress of one pair × task, if any.
pub async fn load_state(
    db: &Db,
    pair: SyncPair,
    task: SyncTask,
) -> Result<Option<SyncState>, sqlx::Error> {
    const READ: &[Column] = &[
        Column {
            name: "mark_ms",
            ty: ColType::OptInt,
        },
        Column {
            name: "window_from_ms",
            ty: ColType::OptInt,
        },
        Column {
            name: "window_to_ms",
            ty: ColType::OptInt,
        },
        Column {
            name: "page_token",
            ty: ColType::OptText,
        },
        Column {
            name: "pages_done",
            ty: ColType::Int,
        },
        Column {
            name: "windows_done",
            ty: ColType::Int,
        },
    ];
    let sql = "SELECT mark_ms, window_from_ms, window_to_ms, page_token, pages_done, \
               windows_done FROM platform_sync_state \
               WHERE platform = ? AND country = ? AND task = ?";
    let Some(row) = db.fetch_optional(sql, &state_key(pair, task), READ).await? else {
        return Ok(None);
    };
    let pages_done = row.int("pages_done")?;
    Ok(Some(SyncState {
        mark_ms: row.opt_int("mark_ms")?,
        window_ms: row
            .opt_int("window_from_ms")?
            .zip(row.opt_int("window_to_ms")?),
        page_token: row.opt_text("page_token")?,
        pages_done: i32::try_from(pages_done)
            .map_err(|e| sqlx::Error::Decode(format!("pages_done {pages_done}: {e}").into()))?,
        windows_done: row.int("windows_done")?,
    }))
}

/// Save the progress of one pair × task, only while `fence` is the job's current claim.
/// False when fenced (nothing written).
async fn save_state(
    db: &Db,
    fence: Fence,
    pair: SyncPair,
    task: SyncTask,
    s: &SyncState,
) -> Result<bool, sqlx::Error> {
    let Some(mut tx) = Tx::fenced(db, fence).await? else {
        return Ok(false);
    };
    let upsert = tx.dialect().upsert(
        "platform_sync_state",
        STATE_COLUMNS,
        STATE_KEY,
        &STATE_COLUMNS[STATE_KEY.len()..],
    );
    let opt = |v: Option<i64>| v.map_or(Cell::Null, Cell::Int);
    let mut args = state_key(pair, task).to_vec();
    args.extend([
        opt(s.mark_ms),
        opt(s.window_ms.map(|w| w.0)),
        opt(s.window_ms.map(|w| w.1)),
        Cell::opt_text(s.page_token.clone()),
        Cell::Int(i64::from(s.pages_done)),
        Cell::Int(s.windows_done),
        Cell::Int(now_ms()),
    ]);
    tx.exec(&upsert, &args).await?;
    tx.commit().await?;
    Ok(true)
}

/// The next incremental window: from the watermark minus the overlap (or
/// [`FIRST_PULL_MS`] ago on the first pull) to now minus the safety lag.
pub fn incremental_window(watermark_ms: Option<i64>, now_ms: i64) -> (i64, i64) {
    let to = now_ms - SAFETY_LAG_MS;
    let from = watermark_ms.map_or(to - FIRST_PULL_MS, |w| w - OVERLAP_MS);
    (from, to)
}

/// The next lookback slice: it ends at the cursor (the lower end of the previous
/// slice), or wraps back to now minus the safety lag once the previous slice reached
/// the bottom of the span (or the cursor is in the future: the clock went back).
pub fn lookback_slice(cursor_ms: Option<i64>, now_ms: i64) -> (i64, i64) {
    let top_max = now_ms - SAFETY_LAG_MS;
    let bottom = top_max - LOOKBACK_SPAN_MS;
    let top = match cursor_ms {
        Some(c) if c > bottom && c <= top_max => c,
        _ => top_max,
    };
    ((top - LOOKBACK_SLICE_MS).max(bottom), top)
}

fn to_time(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

/// What a round did, for its summary.
#[derive(Debug, Default)]
struct Tally {
    pages: u32,
    orders: usize,
    malformed: Vec<MalformedOrder>,
    malformed_count: usize,
    results: BTreeMap<String, usize>,
}

impl Tally {
    fn add(&mut self, results: &[IngestResult]) {
        self.orders += results.len();
        for r in results {
            *self.results.entry(r.result.clone()).or_default() += 1;
        }
    }
}

/// The `platform_sync` handler: one round pulls one window (or the rest of it).
pub struct SyncHandler {
    db: Db,
    adapters: HashMap<Platform, Arc<dyn PlatformAdapter>>,
    pairs: BTreeSet<SyncPair>,
    ingestor: Arc<dyn OrderIngestor>,
    settings: SyncSettings,
}

impl SyncHandler {
    pub fn new(
        db: Db,
        adapters: Vec<Arc<dyn PlatformAdapter>>,
        pairs: Vec<SyncPair>,
        ingestor: Arc<dyn OrderIngestor>,
        settings: SyncSettings,
    ) -> SyncHandler {
        SyncHandler {
            db,
            adapters: adapters.into_iter().map(|a| (a.platform(), a)).collect(),
            pairs: pairs.into_iter().collect(),
            ingestor,
            settings,
        }
    }

    async fn save(
        &self,
        job: &ClaimedJob,
        pair: SyncPair,
        task: SyncTask,
        s: &SyncState,
    ) -> Result<(), JobFailure> {
        let saved = save_state(&self.db, job.fence(), pair, task, s)
            .await
            .map_err(|e| JobFailure::new(format!("saving the sync checkpoint: {e}")))?;
        if saved {
            Ok(())
        } else {
            Err(JobFailure {
                message: "the sync checkpoint was not saved: the round's job claim is gone".into(),
                exhaust: false,
                fenced: true,
            })
        }
    }
}

/// A failure no retry can mend (a payload or pair this process does not know).
fn exhausted(message: String) -> JobFailure {
    JobFailure {
        message,
        exhaust: true,
        fenced: false,
    }
}

fn ingest_failure(e: IngestError, at: &str) -> JobFailure {
    let fenced = matches!(
        e,
        IngestError::Fenced(_) | IngestError::Store(StoreError::Fenced { .. })
    );
    JobFailure {
        message: format!("{at}: ingest: {e}"),
        exhaust: false,
        fenced,
    }
}

impl SyncHandler {
    /// Pull one page of `window` (outside any transaction), ingest its orders fenced
    /// by the job's claim, and move `state` to the next page. True when the window
    /// has no page after this one.
    async fn pull_page(
        &self,
        job: &ClaimedJob,
        adapter: &dyn PlatformAdapter,
        (pair, task): (SyncPair, SyncTask),
        (from, to): (i64, i64),
        state: &mut SyncState,
        tally: &mut Tally,
    ) -> Result<bool, JobFailure> {
        let window = Window {
            from: to_time(from),
            to: to_time(to),
        };
        if job.claim_lost() {
            return Err(JobFailure {
                message: "the round's job claim was lost; stopping before the next page".into(),
                exhaust: false,
                fenced: true,
            });
        }
        let at = format!(
            "{} {} {}: page {} of window [{}, {})",
            pair.platform,
            pair.country,
            task.as_str(),
            state.pages_done + 1,
            window.from.to_rfc3339(),
            window.to.to_rfc3339()
        );
        let request = PageRequest {
            country: pair.country,
            window,
            page_token: state.page_token.clone(),
            page_size: self.settings.page_size,
        };
        // Outside any transaction (R-INV-6); a failure leaves the checkpoint where
        // it was, so the retry asks for this very page again.
        let page = adapter.fetch_page(&request).await.map_err(|e| JobFailure {
            message: format!("{at}: {e}"),
            // Refused credentials or a bad signature: retrying the page cannot help;
            // the next cron firing revives the job once an operator fixed them.
            exhaust: !e.is_retryable(),
            fenced: false,
        })?;
        for m in &page.malformed {
            tracing::warn!(
                platform = %pair.platform,
                country = %pair.country,
                platform_order_id = m.platform_order_id.as_deref().unwrap_or("?"),
                error = %m.error,
                "malformed platform order skipped"
            );
        }
        tally.malformed_count += page.malformed.len();
        let room = MALFORMED_IN_SUMMARY_MAX.saturating_sub(tally.malformed.len());
        tally
            .malformed
            .extend(page.malformed.into_iter().take(room));
        if !page.orders.is_empty() {
            let results = self
                .ingestor
                .ingest_page(page.orders, Some(job.fence()))
                .await
                .map_err(|e| ingest_failure(e, &at))?;
            tally.add(&results);
        }
        tally.pages += 1;
        match page.next_page_token {
            Some(next) if Some(&next) == state.page_token.as_ref() => {
                // Following it would pull the same page forever.
                return Err(JobFailure::new(format!(
                    "{at}: the platform returned the page's own token as the next one"
                )));
            }
            Some(next) => {
                state.window_ms = Some((from, to));
                state.page_token = Some(next);
                state.pages_done += 1;
            }
            None => return Ok(true),
        }
        Ok(false)
    }
}

#[async_trait]
impl JobHandler for SyncHandler {
    async fn run(&self, job: &ClaimedJob) -> Result<RoundReport, JobFailure> {
        let payload: SyncPayload =
            serde_json::from_str(&job.payload).map_err(|e| exhausted(format!("payload: {e}")))?;
        let (pair, task) = (
            SyncPair {
                platform: payload.platform,
                country: payload.country,
            },
            payload.task,
        );
        let adapter = self
            .adapters
            .get(&pair.platform)
            .filter(|_| self.pairs.contains(&pair))
            .ok_or_else(|| {
                exhausted(format!(
                    "{} {} is not configured for platform sync in this process",
                    pair.platform, pair.country
                ))
            })?;
        let mut state = load_state(&self.db, pair, task)
            .await
            .map_err(|e| JobFailure::new(format!("reading the sync state: {e}")))?
            .unwrap_or_default();
        let now = (self.settings.clock)().timestamp_millis();
        let resumed = state.window_ms.is_some();
        let (from, to) = state.window_ms.unwrap_or_else(|| match task {
            SyncTask::Incremental => incremental_window(state.mark_ms, now),
            SyncTask::Lookback => lookback_slice(state.mark_ms, now),
        });
        if !resumed {
            state.page_token = None;
            state.pages_done = 0;
        }
        let window = Window {
            from: to_time(from),
            to: to_time(to),
        };
        let mut tally = Tally::default();
        let started = std::time::Instant::now();
        let mut complete = window.is_empty();
        while !complete && tally.pages < self.settings.round_pages_max {
            complete = self
                .pull_page(
                    job,
                    adapter.as_ref(),
                    (pair, task),
                    (from, to),
                    &mut state,
                    &mut tally,
                )
                .await?;
            if !complete {
                // The page checkpoint: a crash from here on replays from the next page.
                self.save(job, pair, task, &state).await?;
                if started.elapsed().as_millis() >= u128::from(self.settings.round_time_max_ms) {
                    break;
                }
            }
        }
        if complete {
            state.mark_ms = Some(match task {
                // Never move the watermark back (a window computed before a clock step).
                SyncTask::Incremental => state.mark_ms.map_or(to, |w| w.max(to)),
                SyncTask::Lookback => from,
            });
            state.window_ms = None;
            state.page_token = None;
            state.pages_done = 0;
            state.windows_done += 1;
            self.save(job, pair, task, &state).await?;
        }
        let summary = json!({
            "platform": pair.platform,
            "country": pair.country,
            "task": task,
            "window": {"from": window.from.to_rfc3339(), "to": window.to.to_rfc3339()},
            "resumed": resumed,
            "complete": complete,
            "pages": tally.pages,
            "orders": tally.orders,
            "results": tally.results,
            "malformed": tally.malformed_count,
            "malformed_orders": tally.malformed.iter().map(|m| json!({
                "platform_order_id": m.platform_order_id,
                "error": m.error.to_string(),
            })).collect::<Vec<Value>>(),
            "mark": state.mark_ms.map(|ms| to_time(ms).to_rfc3339()),
        });
        tracing::info!(summary = %summary, "platform sync round");
        Ok(RoundReport {
            summary,
            business_done: complete,
        })
    }
}

#[cfg(test)]
#[path = "sync_tests.rs"]
mod tests;
