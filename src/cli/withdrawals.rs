//! `factledger withdrawals list|show|approve|reject`: the withdrawal reads and the
//! operator's review, on the database directly, printed as JSON. A review is the
//! same unit as `POST /v1/withdrawals/{id}:approve|:reject` (the rejection gives
//! the frozen money back; the approval submits the payout job, which a running
//! `serve` with a provider picks up), with the actor `cli:<user>`.

use super::args::WithdrawalsAction;
use super::common::{open_db, Global};
use anyhow::Context;
use factledger::payouts::{reads, units};
use factledger_aggregates::withdrawal::Decision;
use std::process::ExitCode;

fn problem(p: factledger::runtime::http::Problem) -> anyhow::Error {
    anyhow::anyhow!("{}: {}", p.code, p.detail)
}

pub(super) async fn withdrawals(g: &Global, action: WithdrawalsAction) -> anyhow::Result<ExitCode> {
    let db = open_db(&g.database_url, &g.integrity_keys).await?;
    let out = match action {
        WithdrawalsAction::List {
            user_id,
            status,
            after,
            limit,
        } => {
            let status = status
                .as_deref()
                .map(reads::parse_status)
                .transpose()
                .map_err(problem)
                .context("--status")?;
            let rows =
                reads::rows(&db.db, user_id.as_deref(), status, after.as_deref(), limit).await?;
            serde_json::to_value(rows)?
        }
        WithdrawalsAction::Show { id } => {
            serde_json::to_value(reads::detail(&db.store, &id).await.map_err(problem)?)?
        }
        WithdrawalsAction::Approve { id, reason } => review(&db, &id, reason, true).await?,
        WithdrawalsAction::Reject { id, reason } => review(&db, &id, reason, false).await?,
    };
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(ExitCode::SUCCESS)
}

/// An operator's decision as the CLI's actor; the withdrawal after it.
async fn review(
    db: &factledger::infra::store::Database,
    id: &str,
    reason: String,
    approve: bool,
) -> anyhow::Result<serde_json::Value> {
    let actor = factledger::runtime::admin_log::cli_actor();
    let metadata = factledger::runtime::admin_log::local_metadata(&actor);
    let decision = Decision {
        actor,
        reason,
        now: chrono::Utc::now(),
    };
    units::review(&db.store, &metadata, id, approve, decision)
        .await
        .map_err(|e| problem(factledger::payouts::api::unit_error(e)))?;
    Ok(serde_json::to_value(
        reads::detail(&db.store, id).await.map_err(problem)?,
    )?)
}
