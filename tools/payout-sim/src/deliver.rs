//! Callback delivery: each planned callback in order, each retried a few times on a
//! non-2xx answer or a connection error, with a short doubling backoff.

use crate::sim::{CallbackAttempt, Sim};
use crate::CALLBACK_TOKEN_HEADER;
use serde_json::Value;
use std::time::Duration;

/// Attempts per callback (the first and the retries).
pub const CALLBACK_ATTEMPTS_MAX: u32 = 4;
/// Wait before the first retry; doubled before each further one (50, 100, 200 ms).
pub const CALLBACK_BACKOFF_MS: u64 = 50;
/// One attempt's time limit.
pub const CALLBACK_TIMEOUT_MS: u64 = 5_000;
/// The body of a `garbage_webhook` callback.
pub const GARBAGE_BODY: &str = "<html>502 Bad Gateway (upstream says hello)</html>";

/// One callback to deliver.
#[derive(Debug, Clone)]
pub(crate) enum Callback {
    Event(Value),
    /// A body that is not JSON.
    Garbage,
}

/// The callbacks of one settlement, in delivery order.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub url: String,
    pub token: String,
    pub disbursement_id: String,
    pub external_id: String,
    pub items: Vec<Callback>,
}

/// Delivers `plan`'s callbacks one after the other; stops at a reset or stop.
pub(crate) async fn deliver(sim: &Sim, generation: u64, plan: Plan) {
    for item in &plan.items {
        deliver_one(sim, generation, &plan, item).await;
    }
}

async fn deliver_one(sim: &Sim, generation: u64, plan: &Plan, item: &Callback) {
    let (body, event_id, status) = match item {
        Callback::Event(v) => (
            v.to_string(),
            v["event_id"].as_str().map(str::to_owned),
            serde_json::from_value(v["status"].clone()).ok(),
        ),
        Callback::Garbage => (GARBAGE_BODY.to_owned(), None, None),
    };
    for attempt in 1..=CALLBACK_ATTEMPTS_MAX {
        if sim.generation() != generation {
            return;
        }
        let sent = sim
            .http()
            .post(&plan.url)
            .header(CALLBACK_TOKEN_HEADER, &plan.token)
            .header("content-type", "application/json")
            .timeout(Duration::from_millis(CALLBACK_TIMEOUT_MS))
            .body(body.clone())
            .send()
            .await;
        let (http_status, error) = match sent {
            Ok(response) => {
                let status = response.status().as_u16();
                // Read the answer so the connection can be reused.
                let _ = response.bytes().await;
                (Some(status), None)
            }
            Err(e) => (None, Some(e.to_string())),
        };
        let delivered = http_status.is_some_and(|s| (200..300).contains(&s));
        sim.log_callback(CallbackAttempt {
            event_id: event_id.clone(),
            disbursement_id: plan.disbursement_id.clone(),
            external_id: plan.external_id.clone(),
            status,
            attempt,
            http_status,
            error,
            delivered,
        });
        if delivered || attempt == CALLBACK_ATTEMPTS_MAX {
            return;
        }
        let backoff_ms = CALLBACK_BACKOFF_MS << (attempt - 1);
        if !sim.sleep(generation, backoff_ms).await {
            return;
        }
    }
}
