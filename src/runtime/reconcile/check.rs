//! One reconciliation: every check in one snapshot (wallets, commissions, withdrawals,
//! affiliate projections, the log), then the repairs it may make.

use super::pages::*;
use super::pass::*;
use super::report::*;
use super::{affiliate, journal, log, withdrawal};
use crate::infra::db::Db;
use crate::infra::store::DynStore;
use std::collections::{BTreeMap, BTreeSet};

/// Every wallet, at one consistent cut.
pub(super) async fn check_all(
    db: &Db,
    keyring: std::sync::Arc<crate::infra::store::Keyring>,
    page_rows: i64,
) -> Result<Pass, ReconcileError> {
    let mut snap = Snapshot::open(db).await?;
    let up_to_position = snap.checkpoint().await?;
    let mut pass = Pass::new(keyring, up_to_position);
    let mut pages = Pages::new(&mut snap, None, pass.up_to_position, page_rows);
    check_wallets(&mut pages, &mut pass).await?;
    // Same snapshot, same cut: commissions against wallets, and each affiliate
    // projection against its own events.
    affiliate::check_commissions(&mut snap, &mut pass, page_rows).await?;
    let cut = pass.commissions_up_to_position;
    withdrawal::check_withdrawals(&mut snap, &mut pass, cut, page_rows).await?;
    for projector in crate::runtime::projector::all() {
        affiliate::check_projection(&mut snap, &mut pass, projector.as_ref(), page_rows).await?;
    }
    let up_to = pass.up_to_position;
    let (journal_position, accounts) = journal::check_journal(&mut snap, &mut pass, up_to).await?;
    pass.projections_checked.push(ProjectionChecked {
        name: factledger_projections::ledger::NAME.to_owned(),
        up_to_position: journal_position,
        rows_checked: accounts,
    });
    snap.close().await?;
    Ok(pass)
}

/// A few wallets, each read by its own keyset queries, all in one fresh snapshot.
pub(super) async fn check_some(
    db: &Db,
    keyring: std::sync::Arc<crate::infra::store::Keyring>,
    wallets: &[String],
    page_rows: i64,
) -> Result<Pass, ReconcileError> {
    let mut snap = Snapshot::open(db).await?;
    let up_to_position = snap.checkpoint().await?;
    let mut pass = Pass::new(keyring, up_to_position);
    for w in wallets {
        let mut pages = Pages::new(&mut snap, Some(w), pass.up_to_position, page_rows);
        check_wallets(&mut pages, &mut pass).await?;
    }
    snap.close().await?;
    Ok(pass)
}

/// Reconcile the wallet projection with the events (see the module docs), and with
/// `repair` rebuild the wallets that only drifted and check them again.
#[tracing::instrument(skip_all, fields(repair = options.repair))]
pub async fn reconcile(
    store: &DynStore,
    db: &Db,
    options: ReconcileOptions,
) -> Result<Report, ReconcileError> {
    let started = std::time::Instant::now();
    let mut pass = check_all(db, store.keyring().clone(), options.page_rows).await?;
    let log_findings = log::check_log(
        store,
        db,
        options.anchor_file.as_deref(),
        pass.up_to_position,
    )
    .await?;
    let log_broken = !log_findings.is_empty();
    for check in &options.external.0 {
        let found = check.findings().await.unwrap_or_else(|why| {
            vec![Finding::new(
                FindingKind::ProviderReportUnavailable,
                "",
                "external",
                format!("check={}", check.name()),
                format!("{} could not run: {why}", check.name()),
            )]
        });
        for f in found {
            pass.push(f);
        }
    }
    pass.block_contradicted();
    if log_broken {
        pass.counts.event += log_findings.len() as u64;
        for f in &mut pass.findings {
            if f.class == FindingClass::ProjectionDrift {
                f.repair = log::REFUSED_LOG.to_owned();
            }
        }
        let room = FINDINGS_STORED_MAX.saturating_sub(log_findings.len());
        pass.truncated |= pass.findings.len() > room;
        pass.findings.truncate(room);
        pass.findings.splice(0..0, log_findings);
        pass.drifted.clear();
        pass.drifted_projections.clear();
        tracing::error!("reconciliation: the event log failed its integrity check; no repair runs");
    }
    let mut report = Report {
        up_to_position: pass.up_to_position,
        repair: options.repair,
        events_checked: pass.events_checked,
        wallets_checked: pass.wallets_checked,
        commissions_checked: pass.commissions_checked,
        commissions_up_to_position: pass.commissions_up_to_position,
        withdrawals_checked: pass.withdrawals_checked,
        projections_checked: pass.projections_checked.clone(),
        duration_ms: 0,
        counts: pass.counts,
        remaining: pass.counts,
        findings_truncated: pass.truncated,
        findings: pass.findings,
        repair_outcome: None,
    };
    if options.repair && !log_broken {
        repair(store, db, &pass.drifted, options.page_rows, &mut report).await?;
        affiliate::repair(
            store,
            db,
            &pass.drifted_projections,
            options.page_rows,
            &mut report,
        )
        .await?;
    }
    report.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    for (class, n) in [
        ("projection_drift", report.remaining.projection_drift),
        ("event", report.remaining.event),
    ] {
        metrics::gauge!("factledger_reconciliation_findings", "class" => class).set(n as f64);
    }
    tracing::info!(
        up_to_position = report.up_to_position,
        events = report.events_checked,
        wallets = report.wallets_checked,
        drift = report.counts.projection_drift,
        event = report.counts.event,
        remaining = report.remaining.total(),
        duration_ms = report.duration_ms,
        "reconciliation done"
    );
    Ok(report)
}

/// Rebuild each drifted wallet (scoped), re-check them all in a fresh snapshot and
/// mark each finding repaired or not. Event findings, and drift in wallets with
/// event findings, were refused when they were found.
pub(super) async fn repair(
    store: &DynStore,
    db: &Db,
    drifted: &[(String, u64)],
    page_rows: i64,
    report: &mut Report,
) -> Result<(), ReconcileError> {
    let mut failed: BTreeMap<&str, String> = BTreeMap::new();
    for (wallet_id, _) in drifted {
        if let Err(e) = crate::runtime::rebuild::rebuild_wallet_scoped(store, db, wallet_id).await {
            tracing::error!(wallet_id, error = %e, "scoped rebuild failed");
            failed.insert(wallet_id, e.to_string());
        }
    }
    let wallets: Vec<String> = drifted.iter().map(|(w, _)| w.clone()).collect();
    let recheck = check_some(db, store.keyring().clone(), &wallets, page_rows).await?;
    let still: BTreeSet<(&str, &str, &str)> = recheck
        .findings
        .iter()
        .map(|f| (f.wallet_id.as_str(), f.table.as_str(), f.key.as_str()))
        .collect();
    let rebuilt: BTreeSet<&str> = drifted.iter().map(|(w, _)| w.as_str()).collect();
    let mut before: BTreeSet<(String, String, String)> = BTreeSet::new();
    for f in &mut report.findings {
        f.repaired = Some(false);
        if f.class != FindingClass::ProjectionDrift || !rebuilt.contains(f.wallet_id.as_str()) {
            continue;
        }
        before.insert((f.wallet_id.clone(), f.table.clone(), f.key.clone()));
        if let Some(e) = failed.get(f.wallet_id.as_str()) {
            f.repair = format!("failed: {e}");
            continue;
        }
        f.repaired =
            Some(!still.contains(&(f.wallet_id.as_str(), f.table.as_str(), f.key.as_str())));
    }
    // What the re-check found that was not there before (the wallet moved on, or
    // someone changed it meanwhile) is reported too, as not repaired.
    for mut f in recheck.findings {
        let key = (f.wallet_id.clone(), f.table.clone(), f.key.clone());
        if before.contains(&key) || report.findings.len() >= FINDINGS_STORED_MAX {
            continue;
        }
        f.detail = format!("found by the re-check after the repair: {}", f.detail);
        f.repaired = Some(false);
        report.findings.push(f);
    }
    let drift_rebuilt: u64 = drifted.iter().map(|(_, n)| n).sum();
    report.remaining = Counts {
        projection_drift: report.counts.projection_drift - drift_rebuilt
            + recheck.counts.projection_drift,
        event: report.counts.event + recheck.counts.event,
    };
    report.findings_truncated |= recheck.truncated;
    report.repair_outcome = Some(RepairOutcome {
        wallets_rebuilt: (drifted.len() - failed.len()) as u64,
        wallets_failed: failed.len() as u64,
        recheck_position: recheck.up_to_position,
    });
    Ok(())
}
