//! `serve`: start the service, its metrics listener, and stop on a signal.

use super::args::*;
use super::common::Global;
use anyhow::Context;
use std::process::ExitCode;

/// `serve`'s flags.
pub(super) struct ServeFlags {
    pub(super) listen: String,
    pub(super) http: Box<HttpArgs>,
    pub(super) country_code: String,
    pub(super) environment: String,
    pub(super) public_url: Option<String>,
    pub(super) cron_lease_ms: Option<i64>,
    pub(super) test_cron_heartbeat: Option<String>,
    pub(super) outbox: Box<OutboxArgs>,
    pub(super) platform_countries: String,
    pub(super) settlement_every: String,
    pub(super) anchor_every_s: u64,
    pub(super) payouts: Box<PayoutArgs>,
    pub(super) services: Box<ServicesArgs>,
}

/// `serve`: run the HTTP service until a signal.
pub(super) async fn serve(g: &Global, f: ServeFlags) -> anyhow::Result<ExitCode> {
    let ServeFlags {
        listen,
        http,
        country_code,
        environment,
        public_url,
        cron_lease_ms,
        test_cron_heartbeat,
        outbox,
        platform_countries,
        settlement_every,
        anchor_every_s,
        payouts,
        services,
    } = f;
    let cwd = std::env::current_dir()?;
    let platform_sync = factledger::affiliate::sync::SyncConfig::from_env(&platform_countries)?;
    let sinks = (*outbox).sinks()?;
    let (payouts, payout_provider_config, payout_lease_ms) = (*payouts).wiring()?;
    let (services, services_cron, services_callback_secret) = services.wiring()?;
    tracing::info!(
        sinks = ?sinks.iter().map(|s| s.name().to_owned()).collect::<Vec<_>>(),
        "outbox sinks"
    );
    let options = factledger::server::ServeOptions {
        environment: Some(environment),
        public_url,
        cron_lease_ms,
        test_cron_heartbeat,
        outbox_sinks: sinks,
        platform_sync,
        settlement_cron: factledger::server::SettlementCron::parse(&settlement_every),
        integrity_keys: Some(g.integrity_keys.clone()),
        anchor_file: Some(g.anchor_file.clone()),
        anchor_every: (anchor_every_s > 0).then(|| std::time::Duration::from_secs(anchor_every_s)),
        http_limits: http.limits.clone(),
        payouts,
        payout_provider_config,
        payout_lease_ms: Some(payout_lease_ms),
        services,
        services_cron,
        services_callback_secret,
        ..Default::default()
    };
    let started =
        factledger::server::start_with(&g.database_url, &country_code, &cwd, options).await?;
    if let Some(key) = &started.admin_key {
        println!(
            "First start: created admin API key (shown once, also written to {}):\n{}",
            factledger::infra::auth::ADMIN_KEY_FILE,
            key.secret
        );
    }
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    println!("factledger listening on http://{}", listener.local_addr()?);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(());
    let metrics = match &http.metrics_listen {
        Some(addr) => Some(serve_metrics(&started.state, addr, &http.limits, stop_rx).await?),
        None => None,
    };
    let shutdown = async move {
        shutdown_signal().await;
        let _ = stop_tx.send(());
    };
    factledger::server::serve(started.state, listener, shutdown).await?;
    if let Some(task) = metrics {
        task.await??;
    }
    Ok(ExitCode::SUCCESS)
}

/// Bind `addr` and serve `/metrics` there until `stop` changes.
async fn serve_metrics(
    state: &factledger::runtime::http::AppState,
    addr: &str,
    limits: &factledger::runtime::http::limits::HttpLimits,
    mut stop: tokio::sync::watch::Receiver<()>,
) -> anyhow::Result<tokio::task::JoinHandle<anyhow::Result<()>>> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} (--metrics-listen)"))?;
    println!("metrics on http://{}/metrics", listener.local_addr()?);
    let (metrics, limits) = (state.metrics.clone(), limits.clone());
    Ok(tokio::spawn(async move {
        let stopped = async move {
            let _ = stop.changed().await;
        };
        factledger::server::serve_metrics(metrics, listener, limits, stopped).await
    }))
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
