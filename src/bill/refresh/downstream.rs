//! The steps after a refresh round (R-BILL-8: "then order-status reconciliation, then
//! snapshot refresh"): reconciliation failing fails the job; the snapshot refresh is
//! its own job and never does. Nothing committed by the round is undone.

use super::BillRefreshHandler;
use crate::bill::order_status::MasterOutcome;
use crate::infra::jobs::JobFailure;
use crate::runtime::projector::select_rows;
use factledger_projections::bill::fold;
use factledger_projections::bill::refresh::RefreshRequest;
use factledger_projections::bill::snapshot::BillKey;
use factledger_projections::bill::tables::DIFFS;
use factledger_projections::bill::StationMonth;
use factledger_projections::table::Cell;
use serde_json::{json, Value};

impl BillRefreshHandler {
    /// R-BILL-9 after the run, when any (merged) trigger source is whitelisted: the
    /// masters of the processed station-months reconciled, each its own unit.
    pub(super) async fn reconcile_order_status_after_refresh(
        &self,
        request: &RefreshRequest,
        processed: &[StationMonth],
    ) -> Result<Value, JobFailure> {
        let source = request
            .trigger_sources()
            .iter()
            .copied()
            .find(|s| s.reconciles_order_status());
        let (Some(source), Some(orders)) = (source, &self.orders) else {
            return Ok(json!({"ran": false, "reason": "no whitelisted trigger source"}));
        };
        let outcomes = orders
            .reconcile_station_months(processed, source)
            .await
            .map_err(|e| JobFailure::new(format!("order-status reconciliation: {e}")))?;
        let mut counts = std::collections::BTreeMap::<&str, u64>::new();
        let mut conflicts = Vec::new();
        for o in &outcomes {
            let kind = match o {
                MasterOutcome::Applied { .. } => "applied",
                MasterOutcome::Unchanged { .. } => "unchanged",
                MasterOutcome::Conflict { order_id, .. } => {
                    conflicts.push(*order_id);
                    "conflict"
                }
            };
            *counts.entry(kind).or_default() += 1;
        }
        if !conflicts.is_empty() {
            return Err(JobFailure::new(format!(
                "order-status reconciliation: compare-and-set conflict on payment orders \
                 {conflicts:?} after {} attempts",
                factledger_projections::bill::order_status::RECONCILE_ATTEMPTS_MAX
            )));
        }
        Ok(
            json!({"ran": true, "trigger_source": source, "masters": outcomes.len(),
                  "outcomes": counts}),
        )
    }

    /// R-BILL-10: submit the snapshot refresh of the processed station-months' bills
    /// (a diff's bill when it has a diff, else the station-month's), at the job's
    /// generation. Its own job: its failure never fails this one.
    pub(super) async fn refresh_snapshots_after_refresh(
        &self,
        generation: i64,
        processed: &[StationMonth],
    ) -> Value {
        let Some(engine) = self
            .engine
            .as_ref()
            .and_then(|s| s.get())
            .and_then(|w| w.upgrade())
        else {
            return json!({"submitted": false, "reason": "no job engine (shutting down)"});
        };
        let mut bills = Vec::new();
        for sm in processed {
            let diffs = select_rows(
                &self.projections,
                &DIFFS,
                "WHERE station_id = ? AND share_month = ?",
                &[Cell::Int(sm.station_id), Cell::text(sm.month.to_string())],
            )
            .await;
            match diffs
                .as_deref()
                .map(|d| d.first().and_then(|d| fold::int_of(d, "diff_id").ok()))
            {
                Ok(Some(id)) => bills.push(BillKey::Diff(id)),
                Ok(None) => bills.push(BillKey::StationMonth(*sm)),
                Err(e) => return json!({"submitted": false, "error": e.to_string()}),
            }
        }
        if bills.is_empty() {
            return json!({"submitted": false, "reason": "no station-month processed"});
        }
        match crate::bill::snapshots::submit_snapshot_refresh(&engine, &bills, generation).await {
            Ok(jobs) => json!({"submitted": true, "bills": bills.len(), "jobs": jobs}),
            Err(e) => {
                tracing::warn!(error = %e, "snapshot refresh not submitted");
                json!({"submitted": false, "error": e.to_string()})
            }
        }
    }
}
