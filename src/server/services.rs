//! Wiring paid services (`crate::services`) to the rest: their job kinds and cron
//! scans on the engine, and a cash gateway's pay callbacks through the callback inbox
//! (verified, normalised, deduplicated by event id) into
//! `services::flow::payment_received`, and the reconciliation check that every payment
//! the inbox holds was applied. Capabilities never import each other; this adapter is
//! where callbacks meet paid services.

use crate::callbacks::{CallbackFailure, CallbackHandler, NormalizedCallback};
use crate::infra::db::{Db, Get};
use crate::infra::jobs::cron::{CronError, CronSchedule, EngineSlot};
use crate::infra::jobs::{JobHandler, JobKind};
use crate::infra::store::{Database, Fence};
use crate::runtime::reconcile::{ExternalCheck, Finding, FindingKind};
use crate::services::gateway::PaymentGateway;
use crate::services::scans::{self, Scan, ScanHandler};
use crate::services::{jobs, Ctx, Services};
use async_trait::async_trait;
use factledger_projections::table::{ColType, Column};
use serde_json::json;
use std::sync::Arc;

/// When the paid-services scans fire (`serve --services-cron`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ServicesCron {
    /// Not scheduled (embedding and most tests); the kinds are registered either way,
    /// so `factledger compensate` and `jobs retry` still run them.
    #[default]
    Off,
    /// Seed 000's schedules (every minute, every 5 minutes, hourly).
    Default,
    /// Every scan on this one expression (tests).
    Every(String),
}

impl ServicesCron {
    pub fn parse(s: &str) -> ServicesCron {
        match s {
            "off" => ServicesCron::Off,
            "default" => ServicesCron::Default,
            expr => ServicesCron::Every(expr.to_owned()),
        }
    }
}

/// The context every job and scan of paid services runs with.
pub fn ctx(db: &Database, slot: &EngineSlot, services: &Services, country_code: &str) -> Ctx {
    Ctx::new(
        db.store.clone(),
        db.db.clone(),
        slot.clone(),
        services.clone(),
        country_code,
    )
}

/// The single-item kinds and the scan kinds, with their handlers.
pub fn job_kinds(ctx: &Ctx) -> Vec<(&'static JobKind, Arc<dyn JobHandler>)> {
    let mut kinds: Vec<(&'static JobKind, Arc<dyn JobHandler>)> = Vec::new();
    let single: Arc<dyn JobHandler> =
        Arc::new(crate::services::rounds::ServiceJobs::new(ctx.clone()));
    for kind in jobs::kinds() {
        kinds.push((kind, single.clone()));
    }
    for scan in Scan::ALL {
        kinds.push((scan.kind(), Arc::new(ScanHandler::new(ctx.clone(), scan))));
    }
    kinds
}

/// The scans' schedules as `cron` says.
pub fn schedules(cron: &ServicesCron) -> Result<Vec<CronSchedule>, CronError> {
    match cron {
        ServicesCron::Off => Ok(Vec::new()),
        ServicesCron::Default => scans::schedules(None),
        ServicesCron::Every(expr) => scans::schedules(Some(expr)),
    }
}

/// A gateway's pay callbacks: parsed by the gateway, recorded on their order and
/// delivered.
pub struct PaymentCallbacks {
    pub ctx: Ctx,
    pub gateway: Arc<dyn PaymentGateway>,
}

#[async_trait]
impl CallbackHandler for PaymentCallbacks {
    async fn handle(
        &self,
        cb: &NormalizedCallback,
        fence: Option<Fence>,
    ) -> Result<(), CallbackFailure> {
        use factledger_aggregates::service_order::Payment;
        use factledger_aggregates::services::PaymentMethod;
        let notice = self
            .gateway
            .parse_payment(&cb.data)
            .map_err(CallbackFailure::new)?;
        let paid_at = chrono::DateTime::from_timestamp_millis(notice.paid_at_ms)
            .ok_or_else(|| CallbackFailure::new("paid_at_ms: not an instant"))?;
        let method = PaymentMethod::parse(notice.method.as_str())
            .ok_or_else(|| CallbackFailure::new("method: not a gateway method"))?;
        let payment = Payment {
            transaction_no: notice.transaction_no,
            method,
            account_id: notice.account_id,
            amount_minor: notice.amount_minor,
            currency: notice.currency,
            paid_at,
        };
        crate::services::flow::payment_received(
            &self.ctx,
            &notice.order_no,
            payment,
            chrono::Utc::now(),
            fence,
        )
        .await
        .map(|_| ())
        .map_err(|e| match e {
            crate::runtime::unit::UnitError::Store(s) => s.into(),
            other => CallbackFailure::new(other.to_string()),
        })
    }
}

/// Every gateway payment the callback inbox holds is applied (issue 32 item 0): a
/// reconciliation check (`ExternalCheck`) the composition root registers with the
/// gateway. It reads the gateway's verified, normalised callbacks that own their event
/// id (duplicates are the owner's business), keeps those whose payload is a payment
/// notice, and looks each transaction up in `payment_transactions` (a payment on
/// time or late, delivered or refunded, is recorded there). A payment received more
/// than [`PAYMENT_APPLY_GRACE_MS`] ago and recorded nowhere is a
/// `payment_not_applied` finding: money taken at the gateway that the ledger never
/// credited nor refunded can no longer go unnoticed, whatever became of its callback
/// row (failed past its replays, pending after a crash, or wrongly marked handled).
pub struct PaymentsApplied {
    db: Db,
    gateway: Arc<dyn PaymentGateway>,
}

/// A payment younger than this may still be in its replay schedule (the replay job's
/// eight rounds end about 26 minutes after delivery; a crash is swept after 10).
pub const PAYMENT_APPLY_GRACE_MS: i64 = 30 * 60 * 1_000;
/// Callbacks read per page.
const PAYMENTS_PAGE_ROWS: i64 = 500;

impl PaymentsApplied {
    pub fn new(db: Db, gateway: Arc<dyn PaymentGateway>) -> Self {
        PaymentsApplied { db, gateway }
    }

    async fn unapplied(&self, now_ms: i64) -> Result<Vec<Finding>, sqlx::Error> {
        use factledger_projections::table::Cell;
        const CALLBACK: [Column; 4] = [
            Column {
                name: "id",
                ty: ColType::Int,
            },
            Column {
                name: "payload",
                ty: ColType::Text,
            },
            Column {
                name: "received_at_ms",
                ty: ColType::Int,
            },
            Column {
                name: "handle_status",
                ty: ColType::Int,
            },
        ];
        const TXN: [Column; 1] = [Column {
            name: "transaction_no",
            ty: ColType::Text,
        }];
        let mut found = Vec::new();
        let mut after = 0i64;
        loop {
            let page = self
                .db
                .fetch(
                    "SELECT id, normalized_payload, received_at_ms, handle_status \
                     FROM callback_inbox WHERE provider = ? AND id > ? AND verify_status = 1 \
                     AND normalized_payload IS NOT NULL AND duplicate_of IS NULL \
                     AND received_at_ms < ? ORDER BY id LIMIT ?",
                    &[
                        Cell::text(self.gateway.name()),
                        Cell::Int(after),
                        Cell::Int(now_ms - PAYMENT_APPLY_GRACE_MS),
                        Cell::Int(PAYMENTS_PAGE_ROWS),
                    ],
                    &CALLBACK,
                )
                .await?;
            let Some(last) = page.last() else {
                return Ok(found);
            };
            after = last.int("id")?;
            let mut notices = Vec::new();
            for row in &page {
                let payload: crate::callbacks::Normalized =
                    match serde_json::from_str(&row.text("payload")?) {
                        Ok(n) => n,
                        Err(_) => continue,
                    };
                // Not a payment notice (a refund notification, say): not this check's.
                if let Ok(notice) = self.gateway.parse_payment(&payload.data) {
                    notices.push((row.int("id")?, row.int("handle_status")?, notice));
                }
            }
            if notices.is_empty() {
                continue;
            }
            let marks = vec!["?"; notices.len()].join(", ");
            let args: Vec<Cell> = notices
                .iter()
                .map(|(_, _, n)| Cell::text(n.transaction_no.clone()))
                .collect();
            let recorded: std::collections::BTreeSet<String> = self
                .db
                .fetch(
                    &format!(
                        "SELECT transaction_no FROM payment_transactions \
                         WHERE transaction_no IN ({marks})"
                    ),
                    &args,
                    &TXN,
                )
                .await?
                .iter()
                .map(|r| r.text("transaction_no"))
                .collect::<Result<_, _>>()?;
            for (id, status, n) in notices {
                if recorded.contains(&n.transaction_no) {
                    continue;
                }
                let status = crate::callbacks::HandleStatus::from_code(status)
                    .map_or_else(|| status.to_string(), |s| format!("{s:?}").to_uppercase());
                found.push(
                    Finding::new(
                        FindingKind::PaymentNotApplied,
                        "",
                        "callback_inbox",
                        format!("id={id}"),
                        format!(
                            "the gateway's payment {} of {} {} for order {} (callback {id}, \
                             handling {status}) is recorded on no order: the customer paid \
                             and was neither delivered nor refunded; replay the callback \
                             (`factledger callbacks replay-failed --revive`) or refund it",
                            n.transaction_no, n.amount_minor, n.currency, n.order_no
                        ),
                    )
                    .values(
                        Some(json!({"order_no": n.order_no, "transaction_no": n.transaction_no})),
                        None,
                    ),
                );
            }
        }
    }
}

#[async_trait]
impl ExternalCheck for PaymentsApplied {
    fn name(&self) -> &'static str {
        "gateway_payments_applied"
    }

    async fn findings(&self) -> Result<Vec<Finding>, String> {
        self.unapplied(crate::infra::db::now_ms())
            .await
            .map_err(|e| e.to_string())
    }
}
