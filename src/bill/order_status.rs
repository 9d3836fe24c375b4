//! Payment-order status reconciliation (SPEC R-BILL-9; issue 6 item 5) as a process
//! manager: it follows the payment result events (`PaymentResultRecorded`,
//! `PaymentResultVoided`) in global order with its own checkpoint (row
//! [`NAME`] of `projection_checkpoints`), never ahead of the bill projector (it reads
//! the fact tables to find the affected lines and their results). For an event whose
//! trigger source is whitelisted it finds the masters (deduplicated from the current
//! published payable lines, `order_status::masters_to_reconcile`) and runs ONE unit
//! per master on the payment order stream: load the order, gather its lines' results,
//! `order_status::reconcile`, append the line write-backs and the status event. The
//! stream's expected version is the compare-and-set (the status event itself names
//! the publish version, submit round and old status): a concurrent change is retried
//! once, then reported as a conflict — a row of `bill_order_status_conflicts`, a
//! metric and a warning — and the manager goes on with the next event.
//!
//! A result voided by PAYMENT_IMPORT_DELETE (or any whitelisted source) that a line
//! still names as its latest result is taken off the line first: the line goes back
//! to UNPAID (a `LineResultWritten` naming the voided result, paid 0), and the results
//! that still count are written back on top (the import write-back rule), so a
//! non-treasury PAID master whose only success was voided goes back to WAIT_PAY.

use crate::infra::db::Db;
use crate::infra::store::{time_text, DynStore, Metadata, StoreError, StoredEvent};
use crate::runtime::bus::load;
use crate::runtime::projection::{RunnerError, SharedStatus, StallAlerts};
use crate::runtime::projector::select_rows;
use crate::runtime::unit::UnitBuilder;
use chrono::Utc;
use factledger_aggregates::bill::{
    BillError, LineKindCode, LineStatusCode, OrderStatusCode, PaymentOrder, PaymentOrderEvent,
    PaymentResult, PaymentResultEvent, ResultSourceCode, ResultStatusCode, ResultTypeCode,
    TriggerSource, PAYMENT_ORDER_AGGREGATE_TYPE, PAYMENT_RESULT_AGGREGATE_TYPE,
};
use factledger_projections::bill::fold::{int_of, line_of, opt_int_of, order_of, text_of};
use factledger_projections::bill::order_status::{
    after_cas, masters_to_reconcile, reconcile, CasOutcome, LineResult, Master, NextStep,
    OrderStatusError, ReconcileLine,
};
use factledger_projections::bill::tables::{LINES, ORDERS, RESULTS};
use factledger_projections::bill::{
    LineKind, LineStatus, OrderStatus, ResultSource, ResultStatus, ResultType, StationMonth,
};
use factledger_projections::table::{Cell, ColType, Column, MemRow, TableDef};
use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// The checkpoint row of the process manager.
pub const NAME: &str = "bill_order_status";
pub const VERSION: i32 = 1;

/// A hook run after a unit is decided and before it is appended (tests force a
/// concurrent change of the order stream there). Never set in the service.
pub type BeforeAppend =
    Arc<dyn Fn(i64) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync + 'static>;

/// How one master's reconciliation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MasterOutcome {
    /// Events were appended (write-backs and/or the status move).
    Applied {
        order_id: i64,
        events: usize,
        attempts: u32,
        status: OrderStatus,
    },
    /// Nothing to write: the master's status and lines are already right.
    Unchanged {
        order_id: i64,
        status: OrderStatus,
        rule: &'static str,
    },
    /// The stream moved under every attempt: reported, not written.
    Conflict { order_id: i64, attempts: u32 },
}

/// `bill_order_status_conflicts` (migrations/*/0016): one row per reported conflict,
/// served by `GET /v1/bills/order-status-conflicts`.
pub const CONFLICTS: TableDef = TableDef {
    name: "bill_order_status_conflicts",
    key: &["id"],
    columns: &[
        Column {
            name: "id",
            ty: ColType::Int,
        },
        Column {
            name: "order_id",
            ty: ColType::Int,
        },
        Column {
            name: "global_position",
            ty: ColType::Int,
        },
        Column {
            name: "trigger_source",
            ty: ColType::Text,
        },
        Column {
            name: "attempts",
            ty: ColType::Int,
        },
        Column {
            name: "message",
            ty: ColType::Text,
        },
        Column {
            name: "recorded_at",
            ty: ColType::Text,
        },
    ],
};

/// The process manager.
#[derive(Clone)]
pub struct OrderStatusManager {
    store: DynStore,
    db: Db,
    metadata: Metadata,
    before_append: Option<BeforeAppend>,
}

impl OrderStatusManager {
    pub fn new(store: DynStore, db: Db, metadata: Metadata) -> OrderStatusManager {
        OrderStatusManager {
            store,
            db,
            metadata,
            before_append: None,
        }
    }

    #[doc(hidden)]
    pub fn with_before_append(mut self, hook: BeforeAppend) -> OrderStatusManager {
        self.before_append = Some(hook);
        self
    }

    /// Process every result event up to the bill projector's checkpoint; returns how
    /// many events were read. A store or database error stops it before the event
    /// (which is processed again: reconciliation is idempotent).
    pub async fn catch_up(&self) -> Result<u64, RunnerError> {
        let mut position = self.db.checkpoint(NAME, VERSION).await?;
        let mut read = 0u64;
        loop {
            let ceiling = self
                .db
                .checkpoint(
                    factledger_projections::bill::fold::NAME,
                    factledger_projections::bill::fold::VERSION,
                )
                .await?;
            if ceiling <= position {
                return Ok(read);
            }
            let limit = (ceiling - position).min(crate::runtime::projection::BATCH_EVENTS_MAX);
            let events = self.store.read_all(position, limit).await?;
            let Some(last) = events
                .iter()
                .map(|e| e.global_position)
                .filter(|p| *p <= ceiling)
                .max()
            else {
                return Ok(read);
            };
            for e in events.iter().filter(|e| e.global_position <= ceiling) {
                let handled = if e.aggregate_type == PAYMENT_RESULT_AGGREGATE_TYPE {
                    self.on_event(e).await?;
                    true
                } else if e.aggregate_type == PAYMENT_ORDER_AGGREGATE_TYPE
                    && e.event_type == "PaymentOrderApproved"
                {
                    self.on_approved(e).await?;
                    true
                } else {
                    false
                };
                if handled {
                    // Move past each handled event so a restart does not redo it.
                    self.advance(position, e.global_position).await?;
                    position = e.global_position;
                }
                read += 1;
            }
            if last > position {
                self.advance(position, last).await?;
                position = last;
            }
        }
    }

    async fn advance(&self, from: i64, to: i64) -> Result<(), RunnerError> {
        let sql = "UPDATE projection_checkpoints SET position = ?, updated_at = ?, \
                   last_error = NULL, error_position = NULL \
                   WHERE name = ? AND position = ? AND hold IS NULL";
        let now = time_text(&Utc::now());
        let moved = match &self.db {
            Db::Mysql(p) => sqlx::query(sql)
                .bind(to)
                .bind(&now)
                .bind(NAME)
                .bind(from)
                .execute(p)
                .await?
                .rows_affected(),
            Db::Sqlite(p) => sqlx::query(sql)
                .bind(to)
                .bind(&now)
                .bind(NAME)
                .bind(from)
                .execute(p)
                .await?
                .rows_affected(),
        };
        if moved != 1 {
            return Err(RunnerError::CheckpointMoved(NAME));
        }
        Ok(())
    }

    /// Bill-dimension snapshots (R-BILL-10) are created at review approval: the
    /// approved order's bills get their row with the planned amount frozen.
    async fn on_approved(&self, e: &StoredEvent) -> Result<(), RunnerError> {
        let (_, payload) = e.current_payload()?;
        let event: PaymentOrderEvent = serde_json::from_value(payload)
            .map_err(|err| StoreError::Corrupt(format!("event {}: {err}", e.global_position)))?;
        if let PaymentOrderEvent::PaymentOrderApproved {
            order_id,
            planned,
            at,
            ..
        } = event
        {
            let planned: Vec<(i64, i64)> = planned
                .iter()
                .map(|p| (p.line_id, p.planned_amount_minor))
                .collect();
            crate::bill::snapshots::insert_on_approval(
                &self.db,
                order_id,
                &planned,
                &time_text(&at),
            )
            .await?;
        }
        Ok(())
    }

    /// Reconcile the masters one result event affects.
    pub async fn on_event(&self, e: &StoredEvent) -> Result<Vec<MasterOutcome>, RunnerError> {
        let (_, payload) = e.current_payload()?;
        let event: PaymentResultEvent = serde_json::from_value(payload)
            .map_err(|err| StoreError::Corrupt(format!("event {}: {err}", e.global_position)))?;
        let (result_id, trigger_source) = match &event {
            PaymentResultEvent::PaymentResultRecorded {
                result_id,
                trigger_source,
                ..
            }
            | PaymentResultEvent::PaymentResultVoided {
                result_id,
                trigger_source,
                ..
            } => (*result_id, *trigger_source),
        };
        if !trigger_source.reconciles_order_status() {
            metrics::counter!("factledger_bill_order_status_skipped_total").increment(1);
            return Ok(Vec::new());
        }
        let affected = self.affected_lines(result_id).await?;
        let order_ids: BTreeSet<i64> = affected.iter().map(|l| l.order_id).collect();
        let masters = self.fact_masters(&order_ids).await?;
        let mut outcomes = Vec::new();
        for order_id in masters_to_reconcile(&masters, &affected) {
            let outcome = self.reconcile_master(order_id, trigger_source).await?;
            if let MasterOutcome::Conflict { attempts, .. } = &outcome {
                self.report_conflict(order_id, e.global_position, trigger_source, *attempts)
                    .await?;
            }
            outcomes.push(outcome);
        }
        Ok(outcomes)
    }

    /// The lines a result concerns: its own line when it names one, else the lines
    /// of its station-month (read from the fact tables).
    async fn affected_lines(&self, result_id: i64) -> Result<Vec<ReconcileLine>, RunnerError> {
        let rows = select_rows(
            &self.db,
            &RESULTS,
            "WHERE result_id = ?",
            &[Cell::Int(result_id)],
        )
        .await?;
        let Some(row) = rows.first() else {
            return Ok(Vec::new());
        };
        let corrupt = |err: String| StoreError::Corrupt(format!("result {result_id}: {err}"));
        let line_rows = match opt_int_of(row, "line_id").map_err(corrupt)? {
            Some(line_id) => {
                select_rows(&self.db, &LINES, "WHERE line_id = ?", &[Cell::Int(line_id)]).await?
            }
            None => {
                select_rows(
                    &self.db,
                    &LINES,
                    "WHERE station_id = ? AND bill_yearmonth = ? ORDER BY line_id",
                    &[
                        Cell::Int(int_of(row, "small_station_id").map_err(corrupt)?),
                        Cell::text(text_of(row, "bill_yearmonth").map_err(corrupt)?),
                    ],
                )
                .await?
            }
        };
        Ok(reconcile_lines(&line_rows).map_err(corrupt)?)
    }

    /// R-BILL-9 after a refresh run (R-BILL-8: "then order-status reconciliation"):
    /// the masters of these station-months' current payable lines, each reconciled
    /// as for a result event of `trigger_source`; conflicts are reported the same
    /// way (at position 0: no event triggered them).
    pub async fn reconcile_station_months(
        &self,
        station_months: &[StationMonth],
        trigger_source: TriggerSource,
    ) -> Result<Vec<MasterOutcome>, RunnerError> {
        let mut affected = Vec::new();
        for sm in station_months {
            let rows = select_rows(
                &self.db,
                &LINES,
                "WHERE station_id = ? AND bill_yearmonth = ? ORDER BY line_id",
                &[Cell::Int(sm.station_id), Cell::text(sm.month.to_string())],
            )
            .await?;
            let corrupt = |err: String| StoreError::Corrupt(format!("lines of {sm}: {err}"));
            affected.extend(reconcile_lines(&rows).map_err(corrupt)?);
        }
        let order_ids: BTreeSet<i64> = affected.iter().map(|l| l.order_id).collect();
        let masters = self.fact_masters(&order_ids).await?;
        let mut outcomes = Vec::new();
        for order_id in masters_to_reconcile(&masters, &affected) {
            let outcome = self.reconcile_master(order_id, trigger_source).await?;
            if let MasterOutcome::Conflict { attempts, .. } = &outcome {
                self.report_conflict(order_id, 0, trigger_source, *attempts)
                    .await?;
            }
            outcomes.push(outcome);
        }
        Ok(outcomes)
    }

    async fn fact_masters(&self, order_ids: &BTreeSet<i64>) -> Result<Vec<Master>, RunnerError> {
        let mut masters = Vec::new();
        for id in order_ids {
            for row in
                select_rows(&self.db, &ORDERS, "WHERE order_id = ?", &[Cell::Int(*id)]).await?
            {
                let o = order_of(&row)
                    .map_err(|err| StoreError::Corrupt(format!("order {id}: {err}")))?;
                masters.push(Master {
                    order_id: o.id,
                    status: o.status,
                    treasury: o.treasury,
                    published: o.published,
                    publish_version: o.publish_version,
                    submit_round: o.submit_round,
                });
            }
        }
        Ok(masters)
    }

    /// One master: at most [`order_status::RECONCILE_ATTEMPTS_MAX`] compare-and-set
    /// attempts, each one unit on the order stream decided on freshly loaded state.
    pub async fn reconcile_master(
        &self,
        order_id: i64,
        trigger_source: TriggerSource,
    ) -> Result<MasterOutcome, RunnerError> {
        let stream = order_id.to_string();
        let mut attempt = 1u32;
        loop {
            let mut unit = UnitBuilder::new(self.store.clone(), self.metadata.clone());
            let mut loaded = unit
                .load::<PaymentOrder, BillError>(&stream)
                .await
                .map_err(unit_error)?;
            let Some((master, lines)) = master_of(&loaded.state) else {
                return Ok(MasterOutcome::Unchanged {
                    order_id,
                    status: OrderStatus::Draft,
                    rule: "order not created",
                });
            };
            let results = self.results_of(&lines).await?;
            let at = Utc::now();
            let mut events = Vec::new();
            let mut sources = BTreeSet::from([trigger_source]);
            let mut current = lines.clone();
            for line in current.iter_mut() {
                let voided_latest = line
                    .latest_result_id
                    .is_some_and(|id| results.iter().any(|r| r.result_id == id && r.voided));
                if voided_latest && line.kind == LineKind::Payable && !line.deleted {
                    events.push(PaymentOrderEvent::LineResultWritten {
                        order_id,
                        line_id: line.line_id,
                        result_id: line.latest_result_id.unwrap_or_default(),
                        line_status: LineStatusCode::Unpaid,
                        paid_amount_minor: 0,
                        paid_at: None,
                        fail_reason: None,
                        trigger_source,
                        at,
                    });
                    line.status = LineStatus::Unpaid;
                    line.latest_result_id = None;
                    line.paid_amount_minor = 0;
                    // What still counts for the line is written back on top.
                    sources.insert(TriggerSource::PaymentImportEffective);
                }
            }
            let rec = reconcile(&master, &current, &results, &sources).map_err(domain)?;
            events.extend(
                rec.write_backs
                    .iter()
                    .map(|w| w.to_event(trigger_source, at)),
            );
            events.extend(rec.decision.to_event(trigger_source, at));
            if events.is_empty() {
                return Ok(MasterOutcome::Unchanged {
                    order_id,
                    status: rec.decision.status(),
                    rule: rec.decision.rule().label(),
                });
            }
            unit.append::<PaymentOrder, BillError>(&mut loaded, &stream, &events)
                .map_err(unit_error)?;
            if let Some(hook) = &self.before_append {
                hook(order_id).await;
            }
            let (work, _) = unit.finish();
            let outcome = match self.store.append(std::slice::from_ref(&work)).await {
                Ok(_) => CasOutcome::Applied,
                Err(StoreError::Conflict { .. }) => CasOutcome::Conflict,
                Err(e) => return Err(e.into()),
            };
            metrics::counter!("factledger_bill_order_status_attempts_total").increment(1);
            match after_cas(order_id, attempt, outcome) {
                Ok(NextStep::Done) => {
                    return Ok(MasterOutcome::Applied {
                        order_id,
                        events: events.len(),
                        attempts: attempt,
                        status: rec.decision.status(),
                    })
                }
                Ok(NextStep::Retry { attempt: next }) => attempt = next,
                Err(OrderStatusError::Conflict { attempts, .. }) => {
                    return Ok(MasterOutcome::Conflict { order_id, attempts })
                }
                Err(e) => return Err(domain(e)),
            }
        }
    }

    /// Every result of these lines, from the result streams (the fact table finds
    /// their ids; the streams are the facts).
    async fn results_of(&self, lines: &[ReconcileLine]) -> Result<Vec<LineResult>, RunnerError> {
        let mut ids = BTreeSet::new();
        for l in lines {
            let rows = select_rows(
                &self.db,
                &RESULTS,
                "WHERE line_id = ?",
                &[Cell::Int(l.line_id)],
            )
            .await?;
            for r in &rows {
                ids.insert(
                    int_of(r, "result_id")
                        .map_err(|err| StoreError::Corrupt(format!("result row: {err}")))?,
                );
            }
            ids.extend(l.latest_result_id);
        }
        let mut results = Vec::new();
        for id in ids {
            let loaded = load::<PaymentResult>(&self.store, &id.to_string())
                .await
                .map_err(|e| StoreError::Invalid(e.to_string()))?;
            if let Some(r) = line_result_of(&loaded.state) {
                results.push(r);
            }
        }
        Ok(results)
    }

    async fn report_conflict(
        &self,
        order_id: i64,
        global_position: i64,
        trigger_source: TriggerSource,
        attempts: u32,
    ) -> Result<(), RunnerError> {
        let message = OrderStatusError::Conflict { order_id, attempts }.to_string();
        tracing::warn!(order_id, global_position, %message, "payment order status conflict");
        metrics::counter!("factledger_bill_order_status_conflicts_total").increment(1);
        let source = code_text(&trigger_source);
        let sql = "INSERT INTO bill_order_status_conflicts (order_id, global_position, \
                   trigger_source, attempts, message, recorded_at) VALUES (?, ?, ?, ?, ?, ?)";
        let now = time_text(&Utc::now());
        macro_rules! go {
            ($p:expr) => {
                sqlx::query(sql)
                    .bind(order_id)
                    .bind(global_position)
                    .bind(&source)
                    .bind(i64::from(attempts))
                    .bind(&message)
                    .bind(&now)
                    .execute($p)
                    .await?
                    .rows_affected()
            };
        }
        match &self.db {
            Db::Mysql(p) => go!(p),
            Db::Sqlite(p) => go!(p),
        };
        Ok(())
    }

    /// Run continuously (the generic runners' loop: status on `GET /v1/projections`
    /// as `bill_order_status`, backoff, stall alerts).
    pub fn spawn(self, alerts: Option<StallAlerts>) -> SharedStatus {
        let (store, db) = (self.store.clone(), self.db.clone());
        crate::runtime::projection::spawn_runner(
            store,
            db,
            NAME,
            VERSION,
            alerts,
            false,
            move || {
                let me = self.clone();
                async move { me.catch_up().await }
            },
        )
    }
}

fn unit_error(e: crate::runtime::unit::UnitError<BillError>) -> RunnerError {
    match e {
        crate::runtime::unit::UnitError::Store(s) => RunnerError::Store(s),
        other => RunnerError::Store(StoreError::Invalid(other.to_string())),
    }
}

fn domain(e: OrderStatusError) -> RunnerError {
    RunnerError::Store(StoreError::Invalid(e.to_string()))
}

/// A serde code as text (`"PAYMENT_IMPORT_DELETE"`).
pub fn code_text<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn order_status(s: OrderStatusCode) -> OrderStatus {
    match s {
        OrderStatusCode::Draft => OrderStatus::Draft,
        OrderStatusCode::InReview => OrderStatus::InReview,
        OrderStatusCode::ReviewRejected => OrderStatus::ReviewRejected,
        OrderStatusCode::WaitPay => OrderStatus::WaitPay,
        OrderStatusCode::Paid => OrderStatus::Paid,
        OrderStatusCode::NoNeedPay => OrderStatus::NoNeedPay,
        OrderStatusCode::Void => OrderStatus::Void,
    }
}

/// The master and its lines as the order stream has them.
fn master_of(o: &PaymentOrder) -> Option<(Master, Vec<ReconcileLine>)> {
    let status = order_status(o.status?);
    let master = Master {
        order_id: o.order_id,
        status,
        treasury: o.treasury,
        published: o.publish_version > 0,
        publish_version: o.publish_version,
        submit_round: o.submit_round,
    };
    let lines = o
        .lines
        .iter()
        .map(|(id, l)| ReconcileLine {
            line_id: *id,
            order_id: o.order_id,
            publish_version: l.publish_version,
            submit_round: l.submit_round,
            kind: match l.kind {
                LineKindCode::Payable => LineKind::Payable,
                LineKindCode::Unqualified => LineKind::Unqualified,
            },
            deleted: l.removed,
            status: match l.latest_result.as_ref().map(|r| r.line_status) {
                None | Some(LineStatusCode::Unpaid) => LineStatus::Unpaid,
                Some(LineStatusCode::Paid) => LineStatus::Paid,
                Some(LineStatusCode::PartiallyPaid) => LineStatus::PartiallyPaid,
                Some(LineStatusCode::Failed) => LineStatus::Failed,
            },
            latest_result_id: l.latest_result.as_ref().map(|r| r.result_id),
            paid_amount_minor: l.latest_result.as_ref().map_or(0, |r| r.paid_amount_minor),
            planned_amount_minor: l.frozen_planned_minor.unwrap_or(l.adjusted_minor()),
        })
        .collect();
    Some((master, lines))
}

/// A recorded result as reconciliation reads it (`None` for a result stream with no
/// result, or one not naming a line).
pub fn line_result_of(r: &PaymentResult) -> Option<LineResult> {
    let Some(PaymentResultEvent::PaymentResultRecorded {
        result_id,
        line_id: Some(line_id),
        status,
        kind,
        source,
        amount_minor,
        paid_at,
        fail_reason,
        ..
    }) = &r.recorded
    else {
        return None;
    };
    Some(LineResult {
        result_id: *result_id,
        line_id: *line_id,
        status: match status {
            ResultStatusCode::Paying => ResultStatus::Paying,
            ResultStatusCode::PaySuccess => ResultStatus::Success,
            ResultStatusCode::PayFail => ResultStatus::Fail,
        },
        kind: match kind {
            ResultTypeCode::NormalPayment => ResultType::NormalPayment,
            ResultTypeCode::Other => ResultType::Other,
        },
        source: match source {
            ResultSourceCode::Treasury => ResultSource::Treasury,
            ResultSourceCode::OfflineImport => ResultSource::OfflineImport,
            ResultSourceCode::FailFallback => ResultSource::FailFallback,
            ResultSourceCode::Other => ResultSource::Other,
        },
        amount_minor: *amount_minor,
        paid_at: *paid_at,
        fail_reason: fail_reason.clone(),
        voided: r.voided,
    })
}

/// The reconciliation view of fact-table line rows.
fn reconcile_lines(line_rows: &[MemRow]) -> Result<Vec<ReconcileLine>, String> {
    let mut lines = Vec::new();
    for r in line_rows {
        if let Some(l) = line_of(r)? {
            lines.push(ReconcileLine {
                line_id: l.id,
                order_id: l.order_id,
                publish_version: l.publish_version,
                submit_round: l.submit_round,
                kind: l.kind,
                deleted: l.deleted,
                status: l.status,
                latest_result_id: l.latest_result_id,
                paid_amount_minor: 0,
                planned_amount_minor: l.planned_amount_minor,
            });
        }
    }
    Ok(lines)
}
