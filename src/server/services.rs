//! Wiring paid services (`crate::services`) to the rest: their job kinds and cron
//! scans on the engine, and a cash gateway's pay callbacks through the callback inbox
//! (verified, normalised, deduplicated by event id) into
//! `services::flow::payment_received`. Capabilities never import each other; this
//! adapter is where callbacks meet paid services.

use crate::callbacks::{CallbackFailure, CallbackHandler, NormalizedCallback};
use crate::infra::jobs::cron::{CronError, CronSchedule, EngineSlot};
use crate::infra::jobs::{JobHandler, JobKind};
use crate::infra::store::{Database, Fence};
use crate::services::gateway::PaymentGateway;
use crate::services::scans::{self, Scan, ScanHandler};
use crate::services::{jobs, Ctx, Services};
use async_trait::async_trait;
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

/// The callback provider of `gateway` (`POST /v1/callbacks/{name}`): the HMAC of the
/// body under `secret` in the gateway's signature header, normalised by its event id
/// and type. Without a secret every callback fails verification (and is kept).
pub fn payment_callbacks(
    ctx: Ctx,
    gateway: Arc<dyn PaymentGateway>,
    secret: Option<&str>,
) -> crate::callbacks::CallbackProvider {
    use crate::callbacks::{CallbackProvider, JsonPointers, Secret, Verifier};
    use crate::services::gateway_http::callback_pointers;
    let p = callback_pointers();
    CallbackProvider::new(
        gateway.name().to_owned(),
        Verifier::hmac(secret.map(Secret::new), p.signature_header),
        Arc::new(JsonPointers::new(p.event_id, p.event_type)),
        Arc::new(PaymentCallbacks { ctx, gateway }),
    )
}
