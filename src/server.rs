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

/// Open the database (migrating it), bootstrap the first admin key into `key_dir`,
/// and start the command buses.
pub async fn start(
    database_url: &str,
    country_code: &str,
    key_dir: &Path,
) -> anyhow::Result<Started> {
    let metrics = metrics_handle();
    let db = crate::store::open(database_url).await?;
    let admin_key = crate::auth::bootstrap_admin(&db.keys, key_dir).await?;
    let projection_status =
        crate::projection::spawn_wallet(db.store.clone(), db.projections.clone());
    let state = AppState {
        wallets: CommandBus::start(db.store.clone()),
        projections: db.projections,
        projection_status,
        store: db.store,
        keys: db.keys,
        config: Arc::new(ServiceConfig {
            country_code: country_code.to_owned(),
        }),
        metrics,
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
