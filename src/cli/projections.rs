//! `catch-up`, `rebuild` and `reconcile`: the projections and their checks.

use super::common::{audit, open_db, Global};
use anyhow::Context;
use factledger::infra::store;
use factledger_aggregates::admin_action::AdminAction;
use std::process::ExitCode;

/// `catch-up`: apply new events to every projection.
pub(super) async fn catch_up(g: &Global) -> anyhow::Result<ExitCode> {
    let db = open_db(&g.database_url, &g.integrity_keys).await?;
    let started = std::time::Instant::now();
    let applied = factledger::runtime::projection::catch_up_wallet(&db.store, &db.db).await?;
    let position = db
        .db
        .checkpoint(
            factledger_projections::wallet::NAME,
            factledger_projections::wallet::VERSION,
        )
        .await?;
    println!(
        "wallet: applied {applied} events in {:.1} s, now at position {position}",
        started.elapsed().as_secs_f64()
    );
    for projector in factledger::runtime::projector::all() {
        let started = std::time::Instant::now();
        let applied =
            factledger::runtime::projector::catch_up(&db.store, &db.db, projector.as_ref()).await?;
        let position = db
            .db
            .checkpoint(projector.name(), projector.version())
            .await?;
        println!(
            "{}: applied {applied} events in {:.1} s, now at position {position}",
            projector.name(),
            started.elapsed().as_secs_f64()
        );
    }
    let started = std::time::Instant::now();
    let applied = factledger::ledger::projection::catch_up(&db.store, &db.db).await?;
    let position = db
        .db
        .checkpoint(
            factledger_projections::ledger::NAME,
            factledger_projections::ledger::VERSION,
        )
        .await?;
    println!(
        "journal: applied {applied} events in {:.1} s, now at position {position}",
        started.elapsed().as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}

/// `rebuild`: one projection, in full or one scope.
pub(super) async fn rebuild(
    g: &Global,
    projection: String,
    scope: Option<String>,
    batch_events: usize,
    pause_ms: Option<u64>,
) -> anyhow::Result<ExitCode> {
    use factledger::runtime::rebuild::{self, RebuildOptions, Scope};
    let db = open_db(&g.database_url, &g.integrity_keys).await?;
    // Recorded once the rebuild is under way (a refused attempt — another
    // rebuild holds the lease — is no action); the one-transaction rebuilds
    // of the other projections record it just before they start.
    let target = format!("projection:{projection}");
    let detail = format!("scope {}", scope.as_deref().unwrap_or("full"));
    if projection == factledger_projections::ledger::NAME {
        audit(
            &db,
            AdminAction::RebuildStarted,
            &target,
            None,
            Some(detail),
        )
        .await?;
        println!("{}", rebuild_journal(&db, scope.as_deref()).await?);
        return Ok(ExitCode::SUCCESS);
    }
    if projection == factledger::bill::projection::NAME {
        audit(
            &db,
            AdminAction::RebuildStarted,
            &target,
            None,
            Some(detail),
        )
        .await?;
        let done = rebuild_bill(&db, scope.as_deref()).await?;
        println!("{done}");
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(projector) = factledger::runtime::projector::find(&projection) {
        if scope.is_some() {
            anyhow::bail!("{projection} has full rebuilds only: drop --scope");
        }
        // Recorded first, so the rebuilt rows reach the head, this event included.
        audit(
            &db,
            AdminAction::RebuildStarted,
            &target,
            None,
            Some(detail),
        )
        .await?;
        let done =
            factledger::runtime::projector::rebuild_full(&db.store, &db.db, projector.as_ref())
                .await?;
        println!("{}", serde_json::to_string(&done)?);
        return Ok(ExitCode::SUCCESS);
    }
    let scope = Scope::parse(scope.as_deref())?;
    let started = rebuild::begin(&db.store, &db.db, &projection, scope, "cli").await?;
    let detail = format!("rebuild {} {detail}", started.id);
    audit(
        &db,
        AdminAction::RebuildStarted,
        &target,
        None,
        Some(detail),
    )
    .await?;
    eprintln!(
        "rebuild {} of {projection}: {} events to copy",
        started.id, started.target_position
    );
    let bar = indicatif::ProgressBar::new(started.target_position.max(0) as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg:12} [{elapsed_precise}] {wide_bar} {pos}/{len} events \
             {events_per_s} ETA {eta}",
        )
        .context("progress bar template")?
        .with_key(
            "events_per_s",
            |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{:.0}/s", s.per_sec());
            },
        ),
    );
    let options = RebuildOptions {
        flush_events: batch_events,
        pause_between_batches: pause_ms.map(std::time::Duration::from_millis),
    };
    let status = rebuild::run(&db.store, &db.db, &started, &options, &|p| {
        bar.set_message(p.stage);
        bar.set_length(p.target_position.max(0) as u64);
        bar.set_position(p.position.max(0) as u64);
    })
    .await;
    bar.finish_and_clear();
    println!("{}", serde_json::to_string(&status?)?);
    Ok(ExitCode::SUCCESS)
}

/// `reconcile`: compare the projections with the log (and repair them).
pub(super) async fn reconcile(g: &Global, repair: bool) -> anyhow::Result<ExitCode> {
    use factledger::runtime::reconcile::{self, ReconcileOptions, RunStatus};
    let db = open_db(&g.database_url, &g.integrity_keys).await?;
    let options = ReconcileOptions {
        repair,
        ..ReconcileOptions::default()
    };
    let run = reconcile::start_run(&db.db, options, "cli").await?;
    if repair {
        let target = format!("reconciliation:{}", run.id);
        let action = AdminAction::ReconciliationRepairStarted;
        audit(&db, action, &target, None, None).await?;
    }
    let run = reconcile::finish_run(
        &db.store,
        &db.db,
        run,
        Some(g.anchor_file.clone()),
        reconcile::ExternalChecks::default(),
    )
    .await?;
    println!("{}", serde_json::to_string_pretty(&run)?);
    match (&run.status, &run.report) {
        (RunStatus::Succeeded, Some(r)) if r.remaining.total() == 0 => Ok(ExitCode::SUCCESS),
        (RunStatus::Succeeded, Some(_)) => Ok(ExitCode::from(2)),
        _ => anyhow::bail!(
            "reconciliation {} failed: {}",
            run.id,
            run.error.as_deref().unwrap_or("no report")
        ),
    }
}

/// one scope recomputed from the fact tables. The outcome as JSON.
async fn rebuild_bill(db: &store::Database, scope: Option<&str>) -> anyhow::Result<String> {
    use factledger::bill::projection::{self as bills, Account};
    use factledger_projections::bill::parse_station_month;
    let Some(scope) = scope else {
        let done = bills::rebuild_full(&db.store, &db.db).await?;
        return Ok(serde_json::to_string(&done)?);
    };
    let bad = || {
        anyhow::anyhow!(
            "--scope {scope}: expected station-month:<station_id>:<yyyymm>, \
             account:small:<id> or account:partner:<id>"
        )
    };
    let recomputed = if let Some(sm) = scope.strip_prefix("station-month:") {
        let sm = parse_station_month(sm).map_err(|e| anyhow::anyhow!("--scope: {e}"))?;
        bills::recompute_station_months(&db.db, &[sm]).await?
    } else if let Some(account) = scope.strip_prefix("account:") {
        let (side, id) = account.split_once(':').ok_or_else(bad)?;
        let id: i64 = id.parse().ok().filter(|id| *id > 0).ok_or_else(bad)?;
        let account = match side {
            "small" => Account::Small(id),
            "partner" => Account::Partner(id),
            _ => return Err(bad()),
        };
        bills::rebuild_account(&db.db, account).await?
    } else {
        return Err(bad());
    };
    Ok(
        serde_json::json!({"projection": bills::NAME, "scope": scope,
        "station_months_recomputed": recomputed})
        .to_string(),
    )
}

/// `rebuild journal`: in full, or one stream's postings (`stream:<type>:<id>`). The
/// outcome as JSON.
async fn rebuild_journal(db: &store::Database, scope: Option<&str>) -> anyhow::Result<String> {
    use factledger::ledger::projection as journal;
    let Some(scope) = scope else {
        let done = factledger::ledger::rebuild::rebuild_full(&db.store, &db.db).await?;
        return Ok(serde_json::to_string(&done)?);
    };
    let (stream_type, stream_id) = scope
        .strip_prefix("stream:")
        .and_then(|s| s.split_once(':'))
        .filter(|(t, id)| !t.is_empty() && !id.is_empty())
        .ok_or_else(|| anyhow::anyhow!("--scope {scope}: expected stream:<type>:<id>"))?;
    let lines = journal::rebuild_stream(&db.store, &db.db, stream_type, stream_id).await?;
    Ok(
        serde_json::json!({"projection": "journal", "stream": scope, "lines_written": lines})
            .to_string(),
    )
}

/// `accounts trial-balance`: the journal's trial balance as JSON (after catching the
/// journal up); exit 2 when a currency does not balance.
pub(super) async fn accounts(
    g: &Global,
    action: super::args::AccountsAction,
) -> anyhow::Result<ExitCode> {
    use factledger::ledger::{api, projection as journal};
    let super::args::AccountsAction::TrialBalance { as_of_position } = action;
    let db = open_db(&g.database_url, &g.integrity_keys).await?;
    journal::catch_up(&db.store, &db.db).await?;
    let position = db
        .db
        .checkpoint(
            factledger_projections::ledger::NAME,
            factledger_projections::ledger::VERSION,
        )
        .await?;
    if let Some(p) = as_of_position {
        anyhow::ensure!(
            (0..=position).contains(&p),
            "--as-of-position {p}: must be between 0 and the journal's position {position}"
        );
    }
    let tb = api::trial_balance_at(&db.db, as_of_position, position).await?;
    println!("{}", serde_json::to_string_pretty(&tb)?);
    Ok(if tb.balanced {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}
