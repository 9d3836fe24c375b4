//! What the paid-services units, jobs and scans run with: the store, the database,
//! the job engine (for single-item jobs queued after commit), the cash gateway, the
//! settings and the test fault points.

use super::gateway::PaymentGateway;
use crate::infra::db::Db;
use crate::infra::jobs::cron::EngineSlot;
use crate::infra::jobs::engine::WeakEngine;
use crate::infra::jobs::{Engine, JobSubmit};
use crate::infra::store::{DynStore, Metadata};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// Default time an unpaid order stays open (seed 000 closes unpaid orders by scan).
pub const ORDER_TIMEOUT_MS_DEFAULT: i64 = 15 * 60 * 1_000;
/// Rows one scan takes per firing (small batches over an index, seed 000).
pub const SCAN_BATCH_DEFAULT: i64 = 100;
/// Largest `--limit` of a manual compensation.
pub const SCAN_LIMIT_MAX: i64 = 10_000;
/// A paid order not delivered this long after its payment is the delivery scan's
/// (the inline delivery and its single-order job come first).
pub const DELIVERY_GRACE_MS: i64 = 30_000;

/// The capability's settings and hooks (in `AppState::parts`).
#[derive(Clone)]
pub struct Services {
    pub gateway: Option<Arc<dyn PaymentGateway>>,
    pub order_timeout_ms: i64,
    pub scan_batch: i64,
    pub faults: Arc<Faults>,
}

impl Default for Services {
    fn default() -> Self {
        Services {
            gateway: None,
            order_timeout_ms: ORDER_TIMEOUT_MS_DEFAULT,
            scan_batch: SCAN_BATCH_DEFAULT,
            faults: Arc::new(Faults::default()),
        }
    }
}

/// Test fault points: each counts down the next N operations of its kind to fail
/// ("injected failure"). Never set by the service itself.
#[derive(Debug, Default)]
pub struct Faults {
    /// Deliveries that fail before their unit is written.
    pub delivery: AtomicU32,
    /// Job submissions after commit that fail.
    pub enqueue: AtomicU32,
}

impl Faults {
    /// Whether the next operation counted by `counter` fails (and count it down).
    pub fn take(counter: &AtomicU32) -> bool {
        counter
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }
}

/// Everything a unit, job round or scan of this capability needs.
#[derive(Clone)]
pub struct Ctx {
    pub store: DynStore,
    pub db: Db,
    pub engine: EngineSlot,
    pub services: Services,
    pub country_code: String,
}

impl Ctx {
    pub fn new(
        store: DynStore,
        db: Db,
        engine: EngineSlot,
        services: Services,
        country: &str,
    ) -> Ctx {
        Ctx {
            store,
            db,
            engine,
            services,
            country_code: country.to_owned(),
        }
    }

    /// A context on a running engine (an HTTP handler's).
    pub fn with_engine(
        store: DynStore,
        db: Db,
        engine: &Engine,
        services: Services,
        country: &str,
    ) -> Ctx {
        let slot = EngineSlot::default();
        let _ = slot.set(engine.downgrade());
        Ctx::new(store, db, slot, services, country)
    }

    pub fn metadata(&self, actor: &str) -> Metadata {
        Metadata::service(actor, &self.country_code)
    }

    fn engine(&self) -> Option<Engine> {
        self.engine.get().and_then(WeakEngine::upgrade)
    }

    /// Queue a single-item job after its action committed. A failure is logged with
    /// the business ids and never undoes the action: the job's cron scan is the
    /// backstop (R-JOB-9). Returns whether it was queued.
    pub async fn enqueue(&self, job: JobSubmit, ids: &[(&str, &str)]) -> bool {
        let result = if Faults::take(&self.services.faults.enqueue) {
            Err("injected enqueue failure".to_owned())
        } else {
            match self.engine() {
                Some(engine) => engine.submit(&job).await.map_err(|e| e.to_string()),
                None => Err("the job engine is not running".to_owned()),
            }
        };
        match result {
            Ok(_) => true,
            Err(error) => {
                let ids = ids
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(" ");
                tracing::warn!(
                    target: "factledger::services::compensation",
                    kind = job.kind.name,
                    business_key = %job.business_key,
                    ids = %ids,
                    %error,
                    "could not queue the job; its cron scan will pick the work up"
                );
                metrics::counter!("factledger_services_enqueue_failures_total", "kind" => job.kind.name)
                    .increment(1);
                false
            }
        }
    }
}
