//! `jobs`, `cron`, `outbox` and `callbacks`: the background work, as JSON.

use super::args::*;
use super::common::{audit, open_db, Global};
use anyhow::Context;
use factledger_aggregates::admin_action::AdminAction;
use std::process::ExitCode;

/// `factledger jobs …`: the same operations as `/v1/jobs`, printed as JSON.
pub(super) async fn jobs(
    database_url: &str,
    keys: &std::path::Path,
    action: JobsAction,
) -> anyhow::Result<ExitCode> {
    use factledger::infra::jobs::{ops, JobStatus, Selector};
    let db = open_db(database_url, keys).await?;
    let country = std::env::var("FACTLEDGER_COUNTRY").unwrap_or_else(|_| "ID".into());
    let mut options = factledger::server::ServeOptions::default();
    let engine = factledger::server::job_engine(&db, &country, &mut options).await?;
    let actor = "cli";
    let out = match action {
        JobsAction::List {
            kind,
            status,
            after,
            limit,
        } => {
            let status = match status.as_deref() {
                None => None,
                Some(s) => Some(JobStatus::parse(s).with_context(|| {
                    format!(
                        "--status {s:?}: expected PENDING, RUNNING, SUCCESS, FAILED or CANCELLED"
                    )
                })?),
            };
            serde_json::to_value(ops::list(&db.db, kind.as_deref(), status, after, limit).await?)?
        }
        JobsAction::Show { code } => match ops::show(&db.db, &code).await? {
            Some(job) => serde_json::to_value(job)?,
            None => anyhow::bail!("code: no job with code {code:?}"),
        },
        JobsAction::Retry {
            codes,
            business_keys,
        } => {
            let selector = Selector::parse(codes, business_keys)?;
            let out = serde_json::to_value(engine.retry(&selector).await?)?;
            let detail = serde_json::json!({
                "codes": selector.codes, "business_keys": selector.business_keys,
            });
            let action = AdminAction::JobsRetried;
            audit(&db, action, "jobs", None, Some(detail.to_string())).await?;
            out
        }
        JobsAction::Pause { reason } => {
            engine.set_paused(true, actor, reason.as_deref()).await?;
            audit(
                &db,
                AdminAction::JobsPaused,
                "jobs",
                reason.as_deref(),
                None,
            )
            .await?;
            serde_json::json!({"paused": true})
        }
        JobsAction::Resume => {
            engine.set_paused(false, actor, None).await?;
            audit(&db, AdminAction::JobsResumed, "jobs", None, None).await?;
            serde_json::json!({"paused": false})
        }
        JobsAction::Kick { code } => {
            if ops::show(&db.db, &code).await?.is_none() {
                anyhow::bail!("code: no job with code {code:?}");
            }
            let out = serde_json::to_value(engine.kick(std::slice::from_ref(&code)).await?)?;
            audit(
                &db,
                AdminAction::JobKicked,
                &format!("job:{code}"),
                None,
                None,
            )
            .await?;
            out
        }
    };
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(ExitCode::SUCCESS)
}

/// `cron list`.
pub(super) async fn cron_list(g: &Global) -> anyhow::Result<ExitCode> {
    let db = open_db(&g.database_url, &g.integrity_keys).await?;
    let country = std::env::var("FACTLEDGER_COUNTRY").unwrap_or_else(|_| "ID".into());
    let mut options = factledger::server::ServeOptions::default();
    let engine = factledger::server::job_engine(&db, &country, &mut options).await?;
    let cron = factledger::server::cron_scheduler(&engine, &options)?;
    println!("{}", serde_json::to_string_pretty(&cron.status().await?)?);
    Ok(ExitCode::SUCCESS)
}

/// `outbox status`.
pub(super) async fn outbox_status(g: &Global) -> anyhow::Result<ExitCode> {
    let db = open_db(&g.database_url, &g.integrity_keys).await?;
    let status = factledger::infra::outbox::status(&db.db).await?;
    println!("{}", serde_json::to_string_pretty(&status)?);
    Ok(ExitCode::SUCCESS)
}

/// `outbox dead-letters`.
pub(super) async fn outbox_dead_letters(
    g: &Global,
    sink: Option<String>,
    all: bool,
    after: i64,
    limit: i64,
) -> anyhow::Result<ExitCode> {
    use factledger::infra::outbox::dead_letter::{self, PAGE_DEAD_LETTERS_MAX};
    if !(1..=PAGE_DEAD_LETTERS_MAX).contains(&limit) {
        anyhow::bail!("--limit must be between 1 and {PAGE_DEAD_LETTERS_MAX}");
    }
    let db = open_db(&g.database_url, &g.integrity_keys).await?;
    let list = dead_letter::list(&db.db, sink.as_deref(), all, after, limit).await?;
    println!("{}", serde_json::to_string_pretty(&list)?);
    Ok(ExitCode::SUCCESS)
}

/// `outbox replay <id>`: with the sinks `serve` would build from the same flags and
/// environment.
pub(super) async fn outbox_replay(
    g: &Global,
    id: i64,
    outbox: super::args::OutboxArgs,
) -> anyhow::Result<ExitCode> {
    use factledger::infra::outbox::{dead_letter, relay, ReplayError, Sinks};
    let sinks = Sinks(std::sync::Arc::new(outbox.sinks(g.partition.as_deref())?));
    let db = open_db(&g.database_url, &g.integrity_keys).await?;
    let actor = factledger::runtime::admin_log::cli_actor();
    match dead_letter::replay(&db.db, &sinks, id, &actor, relay::DELIVERY_TIMEOUT_MS).await {
        Ok(replayed) => {
            println!("{}", serde_json::to_string_pretty(&replayed)?);
            Ok(ExitCode::SUCCESS)
        }
        Err(e @ ReplayError::Delivery { .. }) => {
            eprintln!("{e}");
            Ok(ExitCode::from(2))
        }
        Err(e) => Err(e.into()),
    }
}

/// `callbacks replay-failed`.
pub(super) async fn callbacks_replay_failed(g: &Global, revive: bool) -> anyhow::Result<ExitCode> {
    let db = open_db(&g.database_url, &g.integrity_keys).await?;
    let country = std::env::var("FACTLEDGER_COUNTRY").unwrap_or_else(|_| "ID".into());
    let mut options = factledger::server::ServeOptions::default();
    let engine = factledger::server::job_engine(&db, &country, &mut options).await?;
    let options = factledger::callbacks::ReplayFailedOptions {
        revive,
        ..Default::default()
    };
    let report = factledger::callbacks::replay_failed(&engine, options).await?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(ExitCode::SUCCESS)
}
