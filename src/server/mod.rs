//! Wiring: open the database, start the command buses, serve HTTP.

use crate::runtime::http::{self, AppState, ServiceConfig};

pub mod appstore;
#[cfg(test)]
mod contract_tests;
pub mod gateway_alipay;
pub mod gateway_wechatpay;
pub mod gateways;
pub mod partitions;
pub mod payouts;
pub mod router;
pub mod services;
pub mod system;
use crate::infra::auth::NewKey;
use crate::runtime::bus::CommandBus;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, OnceLock};

pub use crate::infra::LISTEN_DEFAULT;
/// Default database: an SQLite file in the working directory, created if missing.
pub const DATABASE_URL_DEFAULT: &str = "sqlite://factledger.db";

/// The process-wide Prometheus recorder (installed once).
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            PrometheusBuilder::new()
                .install_recorder()
                .unwrap_or_else(|_| PrometheusBuilder::new().build_recorder().handle())
        })
        .clone()
}

pub struct Started {
    pub state: AppState,
    /// The admin key created on first start, if this was the first start.
    pub admin_key: Option<NewKey>,
}

/// What runs in the background of a started service; dropping it stops it.
pub struct Background {
    _jobs: crate::infra::jobs::engine::Running,
    /// The cron scheduler (`GET /v1/cron` reads through it).
    pub cron: crate::infra::jobs::cron::Scheduler,
    _cron: crate::infra::jobs::cron::Running,
    _outbox: crate::infra::outbox::Running,
    _anchors: Option<AbortOnDrop>,
    _callback_sweep: AbortOnDrop,
}

/// A background task that stops with its owner.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Settings of `serve` beyond the database and country.
#[derive(Default)]
pub struct ServeOptions {
    /// A read replica of the database (issue 21 item 4): wallet, journal and audit
    /// reads are served from it, waiting for `min_position` on it.
    pub read_database_url: Option<String>,
    /// Whether this is one partition of several (`serve --partitions`, issue 21):
    /// the countries requests state are then checked against this one's.
    pub partitioned: bool,
    /// `FACTLEDGER_ENV`, stamped on alerts (default `dev`).
    pub environment: Option<String>,
    /// Base URL of the API for links in alerts (default `http://127.0.0.1:8080`).
    pub public_url: Option<String>,
    /// Job kinds (and handlers) besides the built-in ones (tests, embedding).
    pub extra_job_kinds: Vec<(
        &'static crate::infra::jobs::JobKind,
        std::sync::Arc<dyn crate::infra::jobs::JobHandler>,
    )>,
    /// How often each kind is scanned when idle (default 1 s).
    pub job_scan_interval_ms: Option<u64>,
    /// Callback providers served at `POST /v1/callbacks/{provider}` (none by default).
    pub callbacks: crate::callbacks::Registry,
    /// A callback handling pending this long is interrupted
    /// (`callbacks::replay::INTERRUPTED_AFTER_MS` when `None`; tests shorten it).
    pub callback_interrupted_after_ms: Option<i64>,
    /// A projector failing on one event this long raises `projection.stalled`
    /// (default [`crate::runtime::projection::STALL_ALERT_AFTER_MS_DEFAULT`]).
    pub projection_stall_alert_ms: Option<u64>,
    /// Cron schedules besides the built-in ones (tests, embedding); their job kinds
    /// must be among the engine's (built-in or `extra_job_kinds`).
    pub cron_schedules: Vec<crate::infra::jobs::cron::CronSchedule>,
    /// The cron lease (default `cron::LEASE_MS_DEFAULT`).
    pub cron_lease_ms: Option<i64>,
    /// Test only: also fire the no-op `heartbeat` schedule (job kind
    /// `cron_heartbeat`) with this expression (`serve --test-cron-heartbeat`).
    pub test_cron_heartbeat: Option<String>,
    /// Outbox sinks this process relays to, one relay task each (none by default;
    /// the `serve` command adds the log sink, NATS and webhooks from its flags and
    /// environment). Names must be unique.
    pub outbox_sinks: Vec<Arc<dyn crate::infra::outbox::Sink>>,
    /// The relays' batch size, polling and backoff (default: the named constants of
    /// `crate::infra::outbox::relay`).
    pub outbox_relay: crate::infra::outbox::RelayConfig,
    /// Platform order sync (R-ORD-8): the platform × country pairs and their URLs
    /// (`--platform-countries`, `FACTLEDGER_PLATFORM_<PLATFORM>_URL`). The
    /// `platform_sync` kind is registered when pairs are configured; the cron calls
    /// [`crate::affiliate::sync::submit_sync_jobs`] with `platform_sync.pairs`.
    pub platform_sync: crate::affiliate::sync::SyncConfig,
    /// What synced pages go through (tests); default: the ingest unit
    /// (`affiliate::ingest::Ingestor`) on this service's store.
    pub order_ingestor: Option<Arc<dyn crate::affiliate::OrderIngestor>>,
    /// When the `commission_settlement` schedule fires (R-COM-2; default every 5
    /// minutes). The job kind is registered either way, so a round can be run by hand.
    pub settlement_cron: SettlementCron,
    /// The append-only file signed chain anchors are written to (besides the
    /// database and the outbox); `None`: none.
    pub anchor_file: Option<std::path::PathBuf>,
    /// Sign an anchor this often when the log moved; `None`: only on demand.
    pub anchor_every: Option<std::time::Duration>,
    /// The integrity key file; `None`: the environment's or the default one (see
    /// `store::open`).
    pub integrity_keys: Option<std::path::PathBuf>,
    /// Timeouts, connection cap and per-key rate limit of the HTTP listener (default:
    /// the named constants of [`crate::runtime::http::limits`]).
    pub http_limits: crate::runtime::http::limits::HttpLimits,
    /// Withdrawals: the request-time settings, and the payout provider the worker
    /// pays through (without one, approved withdrawals wait in PAYOUT_PENDING).
    pub payouts: crate::payouts::Payouts,
    pub payout_provider: Option<Arc<dyn crate::payouts::provider::PayoutProvider>>,
    /// The Xendit-shaped provider to pay through and to take webhooks from
    /// (`POST /v1/callbacks/xendit`); sets `payout_provider` unless one is given.
    pub payout_provider_config: Option<payouts::PayoutProviderConfig>,
    /// The payout claim's lease (default `payouts::job::PAYOUT`'s 2 min).
    pub payout_lease_ms: Option<i64>,
    /// Paid services: the cash gateway, order timeout, scan batch and test faults.
    pub services: crate::services::Services,
    /// When the paid-services scans fire (default: not at all; `serve` turns them on).
    pub services_cron: services::ServicesCron,
    /// How the gateway's callbacks are verified and read (its secrets come from the
    /// environment or files).
    pub services_callbacks: gateways::GatewayCallbacks,
    /// App Store Server Notifications V2 (`POST /v1/callbacks/appstore`), when set
    /// (`appstore::config_from_env`: bundle id, environment, pinned root).
    pub appstore: Option<crate::services::appstore::AppStoreConfig>,
}

/// When settlement fires (`serve --settlement-every`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum SettlementCron {
    /// [`crate::affiliate::settlement::SETTLEMENT_EVERY`]: every 5 minutes.
    #[default]
    Default,
    /// This cron expression.
    Every(String),
    /// Not at all (tests of other features whose commissions must stay PENDING;
    /// a deployment where another process settles).
    Off,
}

impl SettlementCron {
    /// `off` turns it off; anything else is a cron expression.
    pub fn parse(s: &str) -> SettlementCron {
        match s.trim() {
            "" => SettlementCron::Default,
            t if t.eq_ignore_ascii_case("off") => SettlementCron::Off,
            t => SettlementCron::Every(t.to_owned()),
        }
    }
}

/// Open the database (migrating it), bootstrap the first admin key into `key_dir`,
/// and start the command buses.
pub async fn start(
    database_url: &str,
    country_code: &str,
    key_dir: &Path,
) -> anyhow::Result<Started> {
    start_with(database_url, country_code, key_dir, ServeOptions::default()).await
}

/// This process's lease owner id for jobs: host, pid and a random suffix.
pub fn owner_id() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "host".into());
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}:{}:{}", std::process::id(), &suffix[..8])
}

/// Whether the database supports `FOR UPDATE SKIP LOCKED` (MariaDB ≥ 10.6, MySQL ≥
/// 8.0). The engine is correct without it; with it claims contend less.
pub async fn supports_skip_locked(db: &crate::infra::db::Db) -> bool {
    let crate::infra::db::Db::Mysql(p) = db else {
        return false;
    };
    let Ok(version) = sqlx::query_scalar::<_, String>("SELECT VERSION()")
        .fetch_one(p)
        .await
    else {
        return false;
    };
    let mut parts = version
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse::<u32>().ok());
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if version.to_ascii_lowercase().contains("mariadb") {
        (major, minor) >= (10, 6)
    } else {
        major >= 8
    }
}

/// The job engine with every kind this service runs (the built-in ones —
/// `callback_replay` with the providers of `options.callbacks`, the cron scans,
/// `commission_settlement`, and `platform_sync` with `platform_sync_scan` when sync
/// pairs are configured — and `options.extra_job_kinds`, which it takes). `serve` starts its loop; the CLI uses
/// it for one-off operations (`factledger jobs retry`).
pub async fn job_engine(
    db: &crate::infra::store::Database,
    country_code: &str,
    options: &mut ServeOptions,
) -> anyhow::Result<crate::infra::jobs::Engine> {
    let mut config = crate::infra::jobs::EngineConfig::new(owner_id());
    config.skip_locked = supports_skip_locked(&db.db).await;
    if let Some(ms) = options.job_scan_interval_ms {
        config.scan_interval_ms = ms;
    }
    config.alerts = crate::infra::alerts::AlertContext {
        environment: options.environment.clone().unwrap_or_else(|| "dev".into()),
        country_code: country_code.to_owned(),
        public_url: options
            .public_url
            .clone()
            .unwrap_or_else(|| format!("http://{LISTEN_DEFAULT}")),
    };
    let mut kinds = std::mem::take(&mut options.extra_job_kinds);
    // Cron's built-in kinds; the replay scan runs with the engine it is registered in.
    let slot = crate::infra::jobs::cron::EngineSlot::default();
    // Paid services: single-item jobs and the seed 000 scans, on this engine. The
    // gateway's callback provider is registered BEFORE the replay handler takes its
    // copy of the registry: a replay must find every provider a delivery could name.
    let services_ctx = services::ctx(db, &slot, &options.services, country_code);
    kinds.extend(services::job_kinds(&services_ctx));
    if let Some(config) = options.appstore.clone() {
        options.callbacks = options
            .callbacks
            .with(appstore::provider(services_ctx.clone(), config))?;
    }
    if let Some(gateway) = options.services.gateway.clone() {
        options.callbacks = options.callbacks.with(gateways::payment_callbacks(
            services_ctx,
            gateway,
            &options.services_callbacks,
        ))?;
    }
    let replay =
        crate::callbacks::replay::ReplayHandler::new(db.db.clone(), options.callbacks.clone());
    kinds.push((&crate::callbacks::CALLBACK_REPLAY, Arc::new(replay)));
    kinds.push((
        &crate::callbacks::replay::CALLBACK_REPLAY_SCAN,
        Arc::new(crate::callbacks::replay::ReplayScanHandler::new(
            slot.clone(),
            options.callback_interrupted_after_ms,
        )),
    ));
    if options.test_cron_heartbeat.is_some() {
        kinds.push((
            &crate::infra::jobs::cron::HEARTBEAT,
            Arc::new(crate::infra::jobs::cron::HeartbeatHandler),
        ));
    }
    // Bill-dimension snapshot refresh (R-BILL-10), submitted by bill refresh requests.
    kinds.push((
        &crate::bill::snapshots::BILL_SNAPSHOT_REFRESH,
        Arc::new(crate::bill::snapshots::SnapshotRefreshHandler::new(
            db.db.clone(),
        )),
    ));
    // Settlement (R-COM-2) is always registered: its cron may be off, but a round
    // can still be run by hand (`jobs retry`).
    kinds.push((
        &crate::affiliate::settlement::COMMISSION_SETTLEMENT,
        Arc::new(crate::affiliate::settlement::SettlementHandler::new(
            db.store.clone(),
            db.db.clone(),
            country_code,
        )),
    ));
    // Bill refresh requests (R-BILL-8): submitted by `POST /v1/bills:refresh`.
    kinds.push((
        &crate::bill::refresh::BILL_REFRESH,
        Arc::new(
            crate::bill::refresh::BillRefreshHandler::new(db.db.clone(), db.db.clone())
                .with_downstream(
                    crate::bill::order_status::OrderStatusManager::new(
                        db.store.clone(),
                        db.db.clone(),
                        crate::affiliate::service_metadata("job:bill_refresh", country_code),
                    ),
                    slot.clone(),
                ),
        ),
    ));
    if !options.platform_sync.pairs.is_empty() {
        // The cron's firings submit the sync jobs through the engine itself.
        kinds.push((
            &crate::affiliate::sync::PLATFORM_SYNC_SCAN,
            Arc::new(crate::affiliate::sync::SyncScanHandler::new(
                slot.clone(),
                options.platform_sync.pairs.clone(),
            )),
        ));
        // Synced pages go through the ingest unit, as `POST /v1/orders:ingest` does.
        let ingestor = options.order_ingestor.clone().unwrap_or_else(|| {
            Arc::new(crate::affiliate::ingest::Ingestor::new(
                db.store.clone(),
                crate::affiliate::service_metadata("job:platform_sync", country_code),
            ))
        });
        let handler = options.platform_sync.handler(
            db.db.clone(),
            ingestor,
            crate::affiliate::sync::SyncSettings::default(),
        )?;
        kinds.push((&crate::affiliate::sync::PLATFORM_SYNC, Arc::new(handler)));
    }
    if let Some(provider) = &options.payout_provider {
        // The payout worker (R-PAY-3): one job per approved withdrawal.
        kinds.push((
            crate::payouts::job::kind(options.payout_lease_ms),
            Arc::new(crate::payouts::worker::PayoutHandler::new(
                db.store.clone(),
                provider.clone(),
                crate::affiliate::service_metadata(
                    crate::payouts::worker::WORKER_ACTOR,
                    country_code,
                ),
            )),
        ));
    }
    let engine = crate::infra::jobs::Engine::new(db.db.clone(), db.store.clone(), config, kinds)?;
    let _ = slot.set(engine.downgrade());
    Ok(engine)
}

/// The cron scheduler of this service: the built-in schedules (the failed callback
/// replay scan every 2 min; commission settlement as `options.settlement_cron` says,
/// by default every 5 min), platform sync every 15 min when pairs are configured,
/// the test heartbeat if asked for, and `options.cron_schedules`, on `engine` (which
/// must come from [`job_engine`] with the same options).
pub fn cron_scheduler(
    engine: &crate::infra::jobs::Engine,
    options: &ServeOptions,
) -> anyhow::Result<crate::infra::jobs::cron::Scheduler> {
    use crate::affiliate::{settlement, sync};
    use crate::infra::jobs::cron;
    // The schedules every `serve` runs: the failed-callback replay scan every 2 min
    // and commission settlement every 5 min (R-COM-2; `--settlement-every` may change
    // or turn off the latter).
    let mut schedules = vec![
        crate::callbacks::replay::replay_scan_schedule()?,
        cron::CronSchedule::new(
            settlement::SETTLEMENT_SCHEDULE,
            settlement::SETTLEMENT_EVERY,
            &settlement::COMMISSION_SETTLEMENT,
        )?,
    ];
    match &options.settlement_cron {
        SettlementCron::Default => {}
        SettlementCron::Off => schedules.retain(|s| s.name != settlement::SETTLEMENT_SCHEDULE),
        SettlementCron::Every(expr) => {
            for s in schedules
                .iter_mut()
                .filter(|s| s.name == settlement::SETTLEMENT_SCHEDULE)
            {
                *s = cron::CronSchedule::new(
                    settlement::SETTLEMENT_SCHEDULE,
                    expr,
                    &settlement::COMMISSION_SETTLEMENT,
                )?;
            }
        }
    }
    if !options.platform_sync.pairs.is_empty() {
        schedules.push(cron::CronSchedule::new(
            sync::PLATFORM_SYNC_SCHEDULE,
            sync::PLATFORM_SYNC_EVERY,
            &sync::PLATFORM_SYNC_SCAN,
        )?);
    }
    if let Some(expr) = &options.test_cron_heartbeat {
        schedules.push(cron::CronSchedule::new(
            cron::HEARTBEAT_SCHEDULE,
            expr,
            &cron::HEARTBEAT,
        )?);
    }
    schedules.extend(services::schedules(&options.services_cron)?);
    schedules.extend(options.cron_schedules.iter().cloned());
    let mut config = cron::CronConfig::new(engine.config().owner.clone());
    if let Some(ms) = options.cron_lease_ms {
        config.lease_ms = ms;
    }
    Ok(cron::Scheduler::new(engine.clone(), schedules, config)?)
}

/// [`start`] with options.
pub async fn start_with(
    database_url: &str,
    country_code: &str,
    key_dir: &Path,
    mut options: ServeOptions,
) -> anyhow::Result<Started> {
    options.http_limits.check()?;
    let metrics = metrics_handle();
    let db = match &options.integrity_keys {
        Some(path) => {
            crate::infra::store::open_with(database_url, crate::infra::store::load_keyring(path)?)
                .await?
        }
        None => crate::infra::store::open(database_url).await?,
    };
    // A log behind its newest signed anchor, or re-sealed below its keyed floor, is
    // not served (issue 32 item 2): `factledger verify` says what happened to it.
    crate::infra::store::integrity::check_before_serving(
        &db.store,
        &db.db,
        options.anchor_file.as_deref(),
    )
    .await?;
    // The first admin key of an empty database is not an admin *action* (nobody took
    // it; see `admin_log`), so it is not recorded as an event: the log of a fresh
    // ledger starts with its first business event.
    // Never on a database with history (issue 32 item 5): that is `keys bootstrap`.
    let log_head = db.store.head_position().await?;
    let admin_key = crate::infra::auth::bootstrap_admin(&db.keys, key_dir, log_head).await?;
    if let Some(config) = options.payout_provider_config.clone() {
        if options.payout_provider.is_none() {
            options.payout_provider = Some(payouts::xendit_provider(&config)?);
        }
        let alerts = crate::infra::alerts::AlertContext {
            environment: options.environment.clone().unwrap_or_else(|| "dev".into()),
            country_code: country_code.to_owned(),
            public_url: options
                .public_url
                .clone()
                .unwrap_or_else(|| format!("http://{LISTEN_DEFAULT}")),
        };
        options.callbacks = options.callbacks.with(payouts::xendit_callbacks(
            db.store.clone(),
            country_code,
            &config.callback_token,
            alerts,
        )?)?;
    }
    let jobs = job_engine(&db, country_code, &mut options).await?;
    let cron = cron_scheduler(&jobs, &options)?;
    let sinks = std::mem::take(&mut options.outbox_sinks);
    check_sink_names(&sinks)?;
    // The same sinks for the operator's dead-letter replay (`ops::outbox`).
    let live_sinks = crate::infra::outbox::Sinks(Arc::new(sinks.clone()));
    let callback_sweep = AbortOnDrop(tokio::spawn(crate::callbacks::replay::sweep_after_start(
        jobs.downgrade(),
        options.callback_interrupted_after_ms,
    )));
    let background = Arc::new(Background {
        _callback_sweep: callback_sweep,
        _jobs: jobs.start(),
        _cron: cron.start(),
        cron,
        _outbox: crate::infra::outbox::spawn(db.db.clone(), sinks, options.outbox_relay.clone()),
        _anchors: options.anchor_every.map(|every| {
            AbortOnDrop(crate::infra::store::integrity::anchor::spawn_periodic(
                db.store.clone(),
                db.db.clone(),
                crate::infra::store::integrity::AnchorSinks {
                    file: options.anchor_file.clone(),
                },
                every,
            ))
        }),
    });
    let stall_alerts = crate::runtime::projection::StallAlerts {
        context: jobs.config().alerts.clone(),
        after_ms: options
            .projection_stall_alert_ms
            .unwrap_or(crate::runtime::projection::STALL_ALERT_AFTER_MS_DEFAULT),
    };
    // Each projector in its own task with its own checkpoint: one stopped at an
    // event it cannot apply never holds the others back.
    let mut projection_statuses = vec![crate::runtime::projection::spawn_wallet_alerting(
        db.store.clone(),
        db.db.clone(),
        Some(stall_alerts.clone()),
    )];
    for projector in crate::runtime::projector::all() {
        projection_statuses.push(crate::runtime::projector::spawn(
            db.store.clone(),
            db.db.clone(),
            projector,
            Some(stall_alerts.clone()),
        ));
    }
    // The journal remembers each stream's currency: a runner path of its own.
    projection_statuses.push(crate::ledger::projection::spawn(
        db.store.clone(),
        db.db.clone(),
        Some(stall_alerts.clone()),
    ));
    // The bill projector reads its own fact rows: a runner path of its own.
    projection_statuses.push(crate::bill::projection::spawn(
        db.store.clone(),
        db.db.clone(),
        Some(stall_alerts.clone()),
    ));
    // Payment-order status reconciliation (R-BILL-9) follows the result events behind
    // the bill projector, with its own checkpoint.
    projection_statuses.push(
        crate::bill::order_status::OrderStatusManager::new(
            db.store.clone(),
            db.db.clone(),
            crate::affiliate::service_metadata("process:bill_order_status", country_code),
        )
        .spawn(Some(stall_alerts.clone())),
    );
    // Reconciliation compares our payouts with the provider's reports.
    let mut external_checks = crate::runtime::reconcile::ExternalChecks::default();
    external_checks.0.push(Arc::new(
        crate::services::reconcile::CandyConservation::new(db.db.clone()),
    ));
    if let Some(gateway) = &options.services.gateway {
        external_checks
            .0
            .push(Arc::new(services::PaymentsApplied::new(
                db.db.clone(),
                gateway.clone(),
            )));
    }
    external_checks
        .0
        .push(Arc::new(crate::bill::reconcile::LocksHoldLiveLines::new(
            db.db.clone(),
        )));
    if let Some(provider) = &options.payout_provider {
        external_checks.0.push(Arc::new(
            crate::payouts::reconcile::ProviderReportCheck::new(db.db.clone(), provider.clone()),
        ));
    }
    let (read_store, read_db) = match &options.read_database_url {
        Some(url) => crate::infra::store::open_replica(url, db.store.keyring().clone()).await?,
        None => (db.store.clone(), db.db.clone()),
    };
    let state = AppState {
        wallets: CommandBus::start(db.store.clone()),
        db: db.db,
        projection_statuses: Arc::new(projection_statuses),
        store: db.store,
        keys: db.keys,
        config: Arc::new(ServiceConfig {
            country_code: country_code.to_owned(),
            partitioned: options.partitioned,
            anchor_file: options.anchor_file.clone(),
        }),
        metrics,
        jobs,
        cron: background.cron.clone(),
        background: background.clone(),
        parts: Arc::new({
            let mut parts = axum::http::Extensions::new();
            parts.insert(options.callbacks.clone());
            parts.insert(options.payouts.clone());
            parts.insert(options.services.clone());
            parts.insert(external_checks);
            parts.insert(live_sinks);
            parts
        }),
        limits: Arc::new(crate::runtime::http::limits::Limits::new(
            options.http_limits.clone(),
        )),
        read_db,
        read_store,
    };
    Ok(Started { state, admin_key })
}

/// Each sink has its own checkpoint row, so two sinks of one name would share (and
/// fight over) one; names also have to fit the column.
fn check_sink_names(sinks: &[Arc<dyn crate::infra::outbox::Sink>]) -> anyhow::Result<()> {
    let mut seen = std::collections::BTreeSet::new();
    for s in sinks {
        let name = s.name();
        if name.is_empty() || name.chars().count() > crate::infra::outbox::SINK_NAME_LEN_MAX {
            anyhow::bail!(
                "outbox sink name {name:?} must be 1-{} characters",
                crate::infra::outbox::SINK_NAME_LEN_MAX
            );
        }
        if !seen.insert(name) {
            anyhow::bail!("two outbox sinks are named {name:?}");
        }
    }
    Ok(())
}

/// Serve until the future `shutdown` completes, within the state's HTTP limits
/// (connections over the cap, slow heads and idle connections: see
/// [`crate::runtime::http::conn`]).
pub async fn serve(
    state: AppState,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let addr: SocketAddr = listener.local_addr()?;
    tracing::info!(%addr, database = state.store.backend(), "factledger listening");
    let limits = state.limits.http.clone();
    http::conn::serve(listener, router::router(state), &limits, shutdown).await?;
    Ok(())
}

/// Serve several partitions on one listener (`serve --partitions`): each request
/// goes to the partition it names (`partitions::dispatcher`).
pub async fn serve_partitions(
    partitions: Vec<(String, AppState)>,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let addr: SocketAddr = listener.local_addr()?;
    let Some((_, first)) = partitions.first() else {
        anyhow::bail!("no partition to serve");
    };
    let limits = first.limits.http.clone();
    let codes: Vec<&str> = partitions.iter().map(|(c, _)| c.as_str()).collect();
    tracing::info!(%addr, partitions = ?codes, "factledger listening");
    http::conn::serve(
        listener,
        partitions::dispatcher(partitions),
        &limits,
        shutdown,
    )
    .await?;
    Ok(())
}

/// Serve `/metrics` alone, unauthenticated, until `shutdown` completes
/// (`serve --metrics-listen`: bind it to a private address only). The same
/// connection limits apply.
pub async fn serve_metrics(
    metrics: PrometheusHandle,
    listener: tokio::net::TcpListener,
    limits: crate::runtime::http::limits::HttpLimits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let addr: SocketAddr = listener.local_addr()?;
    tracing::info!(%addr, "metrics listening (no authentication)");
    http::conn::serve(listener, router::metrics_router(metrics), &limits, shutdown).await?;
    Ok(())
}
