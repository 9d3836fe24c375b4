//! `serve`: start the service, its metrics listener, and stop on a signal.

use super::args::*;
use super::common::{Global, Layout};
use anyhow::Context;
use std::process::ExitCode;

/// `serve`'s flags.
pub(super) struct ServeFlags {
    pub(super) listen: String,
    pub(super) http: Box<HttpArgs>,
    pub(super) read_database_url: Option<String>,
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

/// `serve`: run the HTTP service until a signal: one unpartitioned ledger, or every
/// partition `layout` serves, each started as a service of its own.
pub(super) async fn serve(layout: &Layout, f: ServeFlags) -> anyhow::Result<ExitCode> {
    let cwd = std::env::current_dir()?;
    let served = layout.served();
    if f.read_database_url.is_some() && served.len() > 1 {
        anyhow::bail!(
            "--read-database-url names one replica, and this process serves {} partitions: \
             run one process per partition (--partition <CODE>), each with its replica",
            served.len()
        );
    }
    let mut partitions = Vec::with_capacity(served.len());
    for g in &served {
        let (country_code, key_dir) = match &g.partition {
            None => (f.country_code.clone(), cwd.clone()),
            Some(code) => {
                let dir = cwd.join("partitions").join(code);
                std::fs::create_dir_all(&dir)
                    .with_context(|| format!("cannot create {}", dir.display()))?;
                (code.clone(), dir)
            }
        };
        let options = options(g, &f)?;
        let started =
            factledger::server::start_with(&g.database_url, &country_code, &key_dir, options)
                .await
                .with_context(|| match &g.partition {
                    Some(code) => format!("partition {code}"),
                    None => "the ledger".to_owned(),
                })?;
        if let Some(key) = &started.admin_key {
            let whose = g
                .partition
                .as_ref()
                .map(|c| format!(" of partition {c}"))
                .unwrap_or_default();
            println!(
                "First start: created admin API key{whose} (shown once, also written to {}):\n{}",
                key_dir
                    .join(factledger::infra::auth::ADMIN_KEY_FILE)
                    .display(),
                key.secret
            );
        }
        partitions.push((country_code, g.partition.is_some(), started.state));
    }
    let listener = tokio::net::TcpListener::bind(&f.listen)
        .await
        .with_context(|| format!("cannot listen on {}", f.listen))?;
    println!("factledger listening on http://{}", listener.local_addr()?);
    let Some((_, _, first)) = partitions.first() else {
        anyhow::bail!("no partition to serve");
    };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(());
    let metrics = match &f.http.metrics_listen {
        Some(addr) => Some(serve_metrics(first, addr, &f.http.limits, stop_rx).await?),
        None => None,
    };
    let shutdown = async move {
        shutdown_signal().await;
        let _ = stop_tx.send(());
    };
    match partitions.as_slice() {
        [(_, false, state)] => {
            factledger::server::serve(state.clone(), listener, shutdown).await?;
        }
        _ => {
            let routed = partitions.into_iter().map(|(c, _, s)| (c, s)).collect();
            factledger::server::serve_partitions(routed, listener, shutdown).await?;
        }
    }
    if let Some(task) = metrics {
        task.await??;
    }
    Ok(ExitCode::SUCCESS)
}

/// One partition's service options from the flags: its outbox subjects and stream,
/// and the platform sync pairs of its own country only.
fn options(g: &Global, f: &ServeFlags) -> anyhow::Result<factledger::server::ServeOptions> {
    let mut platform_sync =
        factledger::affiliate::sync::SyncConfig::from_env(&f.platform_countries)?;
    if let Some(code) = &g.partition {
        platform_sync.pairs.retain(|p| p.country.as_str() == code);
    }
    let sinks = f.outbox.as_ref().clone().sinks(g.partition.as_deref())?;
    let (payouts, payout_provider_config, payout_lease_ms) =
        f.payouts.as_ref().clone().wiring(g.partition.as_deref())?;
    let services = f.services.wiring(g.partition.as_deref())?;
    tracing::info!(
        partition = g.partition.as_deref().unwrap_or("-"),
        sinks = ?sinks.iter().map(|s| s.name().to_owned()).collect::<Vec<_>>(),
        "outbox sinks"
    );
    Ok(factledger::server::ServeOptions {
        partitioned: g.partition.is_some(),
        read_database_url: f.read_database_url.clone(),
        environment: Some(f.environment.clone()),
        public_url: f.public_url.clone(),
        cron_lease_ms: f.cron_lease_ms,
        test_cron_heartbeat: f.test_cron_heartbeat.clone(),
        outbox_sinks: sinks,
        platform_sync,
        settlement_cron: factledger::server::SettlementCron::parse(&f.settlement_every),
        integrity_keys: Some(g.integrity_keys.clone()),
        anchor_file: Some(g.anchor_file.clone()),
        anchor_every: (f.anchor_every_s > 0)
            .then(|| std::time::Duration::from_secs(f.anchor_every_s)),
        http_limits: f.http.limits.clone(),
        payouts,
        payout_provider_config,
        payout_lease_ms: Some(payout_lease_ms),
        services: services.services,
        services_cron: services.cron,
        services_callbacks: services.callbacks,
        appstore: services.appstore,
        ..Default::default()
    })
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
