//! Wiring: open the database, start the command buses, serve HTTP.

use crate::api::{self, AppState, ServiceConfig};
use crate::auth::NewKey;
use crate::bus::CommandBus;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, OnceLock};

/// Default listen address (loopback: expose deliberately, behind TLS).
pub const LISTEN_DEFAULT: &str = "127.0.0.1:8080";
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
    _jobs: crate::jobs::engine::Running,
}

/// Settings of `serve` beyond the database and country.
#[derive(Default)]
pub struct ServeOptions {
    /// `FACTLEDGER_ENV`, stamped on alerts (default `dev`).
    pub environment: Option<String>,
    /// Base URL of the API for links in alerts (default `http://127.0.0.1:8080`).
    pub public_url: Option<String>,
    /// Job kinds (and handlers) besides the built-in ones (tests, embedding).
    pub extra_job_kinds: Vec<(
        &'static crate::jobs::JobKind,
        std::sync::Arc<dyn crate::jobs::JobHandler>,
    )>,
    /// How often each kind is scanned when idle (default 1 s).
    pub job_scan_interval_ms: Option<u64>,
    /// Callback providers served at `POST /v1/callbacks/{provider}` (none by default).
    pub callbacks: crate::callbacks::Registry,
    /// A projector failing on one event this long raises `projection.stalled`
    /// (default [`crate::projection::STALL_ALERT_AFTER_MS_DEFAULT`]).
    pub projection_stall_alert_ms: Option<u64>,
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
pub async fn supports_skip_locked(db: &crate::db::Db) -> bool {
    let crate::db::Db::Mysql(p) = db else {
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

/// The job engine with every kind this service runs (the built-in ones — so far
/// `callback_replay`, with the providers of `options.callbacks` — and
/// `options.extra_job_kinds`, which it takes). `serve` starts its loop; the CLI uses
/// it for one-off operations (`factledger jobs retry`).
pub async fn job_engine(
    db: &crate::store::Database,
    country_code: &str,
    options: &mut ServeOptions,
) -> anyhow::Result<crate::jobs::Engine> {
    let mut config = crate::jobs::EngineConfig::new(owner_id());
    config.skip_locked = supports_skip_locked(&db.db).await;
    if let Some(ms) = options.job_scan_interval_ms {
        config.scan_interval_ms = ms;
    }
    config.alerts = crate::alerts::AlertContext {
        environment: options.environment.clone().unwrap_or_else(|| "dev".into()),
        country_code: country_code.to_owned(),
        public_url: options
            .public_url
            .clone()
            .unwrap_or_else(|| format!("http://{LISTEN_DEFAULT}")),
    };
    let mut kinds = std::mem::take(&mut options.extra_job_kinds);
    let replay =
        crate::callbacks::replay::ReplayHandler::new(db.db.clone(), options.callbacks.clone());
    kinds.push((&crate::callbacks::CALLBACK_REPLAY, Arc::new(replay)));
    Ok(crate::jobs::Engine::new(
        db.db.clone(),
        db.store.clone(),
        config,
        kinds,
    )?)
}

/// [`start`] with options.
pub async fn start_with(
    database_url: &str,
    country_code: &str,
    key_dir: &Path,
    mut options: ServeOptions,
) -> anyhow::Result<Started> {
    let metrics = metrics_handle();
    let db = crate::store::open(database_url).await?;
    let admin_key = crate::auth::bootstrap_admin(&db.keys, key_dir).await?;
    let jobs = job_engine(&db, country_code, &mut options).await?;
    let background = Arc::new(Background {
        _jobs: jobs.start(),
    });
    let stall_alerts = crate::projection::StallAlerts {
        context: jobs.config().alerts.clone(),
        after_ms: options
            .projection_stall_alert_ms
            .unwrap_or(crate::projection::STALL_ALERT_AFTER_MS_DEFAULT),
    };
    // Each projector in its own task with its own checkpoint: one stopped at an
    // event it cannot apply never holds the others back.
    let mut projection_statuses = vec![crate::projection::spawn_wallet_alerting(
        db.store.clone(),
        db.projections.clone(),
        Some(stall_alerts.clone()),
    )];
    for projector in crate::projector::all() {
        projection_statuses.push(crate::projector::spawn(
            db.store.clone(),
            db.projections.clone(),
            projector,
            Some(stall_alerts.clone()),
        ));
    }
    let state = AppState {
        wallets: CommandBus::start(db.store.clone()),
        projections: db.projections,
        projection_statuses: Arc::new(projection_statuses),
        store: db.store,
        keys: db.keys,
        config: Arc::new(ServiceConfig {
            country_code: country_code.to_owned(),
        }),
        metrics,
        jobs,
        background,
        callbacks: options.callbacks.clone(),
    };
    Ok(Started { state, admin_key })
}

/// Serve until the future `shutdown` completes.
pub async fn serve(
    state: AppState,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let addr: SocketAddr = listener.local_addr()?;
    tracing::info!(%addr, database = state.store.backend(), "factledger listening");
    axum::serve(listener, api::router(state))
        .with_graceful_shutdown(shutdown)
        .await?;
    Ok(())
}
