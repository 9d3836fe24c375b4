//! `factledger compensate <scan> [--business-id …] [--limit N]`: one of seed 000's
//! compensation scans run now, on the database directly — the same `scans::run` a
//! cron firing runs, with the same re-check of every row on its stream. Jobs it
//! queues (a refund, a membership sync) are picked up by a running `serve`.

use super::args::ServicesArgs;
use super::common::{open_db, Global};
use factledger::services::scans::{self, Scan, ScanOptions};
use std::process::ExitCode;

pub(super) async fn compensate(
    g: &Global,
    job: String,
    business_id: Option<String>,
    limit: i64,
    services: &ServicesArgs,
) -> anyhow::Result<ExitCode> {
    let Some(scan) = Scan::parse(&job) else {
        let names: Vec<&str> = Scan::ALL.iter().map(|s| s.name()).collect();
        anyhow::bail!(
            "job: {job:?} is not a compensation scan; one of {}",
            names.join(", ")
        );
    };
    let services = services.wiring(None)?.services;
    let db = open_db(&g.database_url, &g.integrity_keys).await?;
    let country = std::env::var("FACTLEDGER_COUNTRY").unwrap_or_else(|_| "ID".into());
    let mut options = factledger::server::ServeOptions {
        services: services.clone(),
        ..Default::default()
    };
    let engine = factledger::server::job_engine(&db, &country, &mut options).await?;
    let ctx = factledger::services::Ctx::with_engine(
        db.store.clone(),
        db.db.clone(),
        &engine,
        services,
        &country,
    );
    let opts = ScanOptions {
        business_id,
        limit,
        now: chrono::Utc::now(),
    };
    let report = scans::run(&ctx, scan, &opts).await?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(if report.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
