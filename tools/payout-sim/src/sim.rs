//! The simulator's state behind one mutex: disbursements, idempotency keys, scripted
//! faults, request counts and the callback log. Every method takes the lock briefly
//! and never across an await, so ten thousand creates stay cheap.
//!
//! The [`Sim`] runs on the plumbing it shares with the payment gateway
//! (`plumbing.rs`: the API key check, the reset/stop generation that ends background
//! work, scripted sleeps, the callback POST), and holds the gateway's state
//! (`gateway_state.rs`) beside the payouts' behind its own mutex (locked after this
//! one, never before), so that a reset forgets both. What the gateway does with its
//! state is in `gateway/`, which builds on this module, never the other way.

use crate::gateway_state::{GatewaySettings, Shared as GatewayShared};
use crate::model::{CreateRequest, Disbursement, Fault, Status, WebhookFault};
use crate::plumbing::{ControlError, Plumbing, Signing, GARBAGE_BODY};
use crate::{SimConfig, CALLBACK_TOKEN_HEADER, WEBHOOK_ID_HEADER};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Callback attempts remembered for `GET /control/callbacks` (older ones dropped).
pub const CALLBACK_LOG_MAX: usize = 100_000;
/// Faults queued per external id at most (a runaway test script stops here).
pub const FAULTS_PER_EXTERNAL_ID_MAX: usize = 100;

/// The settings a test may change at run time (`POST /control/settings`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    /// How long after its create answer a disbursement settles (0: right after).
    pub complete_after_ms: u64,
    /// Where callbacks go; `None`: no callbacks.
    pub callback_url: Option<String>,
    /// Sent as `x-callback-token` with every callback.
    pub callback_token: String,
    /// Whether callbacks carry a `webhook-id` header (Xendit sends one on most
    /// deliveries; a receiver must dedupe without it too).
    #[serde(default = "yes")]
    pub webhook_id: bool,
}

fn yes() -> bool {
    true
}

/// How many calls each endpoint of the provider API has served.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestCounts {
    /// `POST /v2/payouts`, answered or not.
    pub create: u64,
    /// `GET /v2/payouts?reference_id=`.
    pub query: u64,
    /// `GET /v2/payouts/{id}`.
    pub get: u64,
    /// `GET /transactions` (pages).
    pub report: u64,
    /// Calls refused 401 (counted in their endpoint too).
    pub unauthorized: u64,
}

/// One attempt at delivering a callback.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallbackAttempt {
    /// The `webhook-id` of the delivery (sent as a header unless turned off);
    /// `None` for a garbage callback.
    pub event_id: Option<String>,
    pub disbursement_id: String,
    pub external_id: String,
    /// The status the callback reported (`None` for garbage).
    pub status: Option<Status>,
    /// 1-based attempt number of this callback.
    pub attempt: u32,
    pub http_status: Option<u16>,
    pub error: Option<String>,
    pub delivered: bool,
}

/// Every payout, and how many were created per reference id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Payouts {
    pub disbursements: Vec<Disbursement>,
    pub creates_per_external_id: BTreeMap<String, u64>,
}

/// What a create request comes to.
#[derive(Debug, Clone)]
pub enum CreateVerdict {
    /// Answer this, nothing was created.
    Refused { status: u16, body: Value },
    /// The disbursement the key names (new when `created`), and the fault to act out.
    Accepted {
        disbursement: Box<Disbursement>,
        created: bool,
        fault: Option<Fault>,
    },
}

#[derive(Debug)]
struct Record {
    d: Disbursement,
    /// Settle FAILED with this code (the `fail` fault).
    fail_with: Option<String>,
    /// Taken by the first settlement.
    webhook: Option<WebhookFault>,
}

#[derive(Debug)]
struct SimState {
    records: Vec<Record>,
    by_id: HashMap<String, usize>,
    by_key: HashMap<String, usize>,
    by_external_id: HashMap<String, Vec<usize>>,
    faults: HashMap<String, VecDeque<Fault>>,
    counts: RequestCounts,
    callbacks: VecDeque<CallbackAttempt>,
    settings: Settings,
}

impl SimState {
    fn new(settings: Settings) -> SimState {
        SimState {
            records: Vec::new(),
            by_id: HashMap::new(),
            by_key: HashMap::new(),
            by_external_id: HashMap::new(),
            faults: HashMap::new(),
            counts: RequestCounts::default(),
            callbacks: VecDeque::new(),
            settings,
        }
    }
}

#[derive(Debug)]
struct Inner {
    state: Mutex<SimState>,
    /// The settings a reset returns to.
    initial: Settings,
    /// The API key, the callbacks' HTTP client, and the reset/stop generation.
    plumbing: Plumbing,
    next_id: AtomicU64,
    next_event: AtomicU64,
    /// The payment gateway's state (served by `gateway/`).
    gateway: GatewayShared,
}

/// Which endpoint a call was for (request counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Create,
    Query,
    Get,
    Report,
}

/// The simulated provider; cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct Sim {
    inner: Arc<Inner>,
}

impl Sim {
    pub fn new(config: &SimConfig) -> Sim {
        let initial = Settings {
            complete_after_ms: config.complete_after_ms,
            callback_url: config.callback_url.clone(),
            callback_token: config.callback_token.clone(),
            webhook_id: true,
        };
        Sim {
            inner: Arc::new(Inner {
                state: Mutex::new(SimState::new(initial.clone())),
                initial,
                plumbing: Plumbing::new(&config.secret),
                next_id: AtomicU64::new(0),
                next_event: AtomicU64::new(0),
                gateway: GatewayShared::new(
                    GatewaySettings {
                        callback_url: config.gateway_callback_url.clone(),
                        callback_secret: config.gateway_callback_secret.clone(),
                    },
                    config.alipay.clone(),
                ),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, SimState> {
        // A panic while holding the lock leaves plain data behind: keep serving.
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn plumbing(&self) -> &Plumbing {
        &self.inner.plumbing
    }

    pub(crate) fn generation(&self) -> u64 {
        self.inner.plumbing.generation()
    }

    /// The gateway's state, for `gateway/` (whose `Sim::gateway` serves it).
    pub(crate) fn gateway_shared(&self) -> &GatewayShared {
        &self.inner.gateway
    }

    /// Whether `authorization` (the `Authorization` header) carries the configured
    /// secret: `Basic base64("<secret>:")`.
    pub fn authorized(&self, authorization: Option<&str>) -> bool {
        self.inner.plumbing.authorized(authorization)
    }

    /// Counts a call to `endpoint`; `false` (and counted as unauthorized) unless the
    /// `Authorization` header carries the configured secret.
    pub fn admit(&self, endpoint: Endpoint, authorization: Option<&str>) -> bool {
        let ok = self.authorized(authorization);
        let mut s = self.lock();
        let c = &mut s.counts;
        match endpoint {
            Endpoint::Create => c.create += 1,
            Endpoint::Query => c.query += 1,
            Endpoint::Get => c.get += 1,
            Endpoint::Report => c.report += 1,
        }
        if !ok {
            c.unauthorized += 1;
        }
        ok
    }

    /// Decides one create request (the fault queue of its external id, then the
    /// idempotency key). Never creates two disbursements for one key.
    pub fn create(&self, key: &str, request: CreateRequest) -> CreateVerdict {
        let mut s = self.lock();
        let fault = s
            .faults
            .get_mut(&request.reference_id)
            .and_then(VecDeque::pop_front);
        match &fault {
            Some(Fault::Error5xxBeforeAccept { status }) => {
                return CreateVerdict::Refused {
                    status: *status,
                    body: json!({"error_code": "SERVER_ERROR",
                                 "message": "scripted failure before accepting"}),
                }
            }
            Some(Fault::InsufficientBalance) => {
                return CreateVerdict::Refused {
                    status: 400,
                    body: json!({"error_code": "INSUFFICIENT_BALANCE",
                                 "message": "the balance cannot cover this payout"}),
                }
            }
            _ => {}
        }
        if let Some(&i) = s.by_key.get(key) {
            let existing = &s.records[i].d;
            if existing.request != request {
                return CreateVerdict::Refused {
                    status: 409,
                    body: json!({"error_code": "DUPLICATE_ERROR",
                                 "message": "this Idempotency-key was used with a different request"}),
                };
            }
            return CreateVerdict::Accepted {
                disbursement: Box::new(existing.clone()),
                created: false,
                fault,
            };
        }
        let n = self.inner.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let now = Utc::now();
        let d = Disbursement {
            id: format!("disb-{n}"),
            request,
            status: Status::Accepted,
            failure_code: None,
            created: now,
            updated: now,
            idempotency_key: key.to_owned(),
        };
        let record = Record {
            d: d.clone(),
            fail_with: match &fault {
                Some(Fault::Fail { failure_code }) => Some(failure_code.clone()),
                _ => None,
            },
            webhook: match &fault {
                Some(Fault::DuplicateWebhook) => Some(WebhookFault::Duplicate),
                Some(Fault::OutOfOrderWebhooks) => Some(WebhookFault::OutOfOrder),
                Some(Fault::FailedAfterCompleted { failure_code }) => {
                    Some(WebhookFault::FailedAfterCompleted {
                        failure_code: failure_code.clone(),
                    })
                }
                Some(Fault::GarbageWebhook) => Some(WebhookFault::Garbage),
                Some(Fault::ReversedAfterSucceeded) => Some(WebhookFault::Reversed),
                _ => None,
            },
        };
        let i = s.records.len();
        s.records.push(record);
        s.by_id.insert(d.id.clone(), i);
        s.by_key.insert(key.to_owned(), i);
        s.by_external_id
            .entry(d.request.reference_id.clone())
            .or_default()
            .push(i);
        CreateVerdict::Accepted {
            disbursement: Box::new(d),
            created: true,
            fault,
        }
    }

    /// The disbursements carrying `external_id`, oldest first.
    pub fn by_external_id(&self, external_id: &str) -> Vec<Disbursement> {
        let s = self.lock();
        s.by_external_id
            .get(external_id)
            .map(|is| is.iter().map(|&i| s.records[i].d.clone()).collect())
            .unwrap_or_default()
    }

    pub fn by_id(&self, id: &str) -> Option<Disbursement> {
        let s = self.lock();
        s.by_id.get(id).map(|&i| s.records[i].d.clone())
    }

    /// The payouts created in `[from, to)`, in creation order, after the one whose
    /// transaction id is `after` (the Transactions API's cursor), at most `limit`;
    /// and whether more follow.
    pub fn transactions(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        after: Option<&str>,
        limit: usize,
    ) -> (Vec<Disbursement>, bool) {
        let s = self.lock();
        let mut matching = s
            .records
            .iter()
            .map(|r| &r.d)
            .filter(|d| d.created >= from && d.created < to)
            .skip_while(|d| after.is_some_and(|a| format!("txn_{}", d.id) != a))
            .skip(usize::from(after.is_some()));
        let page: Vec<Disbursement> = matching.by_ref().take(limit).cloned().collect();
        let more = matching.next().is_some();
        (page, more)
    }

    /// Queues `fault` for the next create request of `external_id` not yet given one.
    pub fn add_fault(&self, external_id: &str, fault: Fault) -> Result<(), ControlError> {
        fault.check().map_err(ControlError::BadRequest)?;
        let mut s = self.lock();
        let queue = s.faults.entry(external_id.to_owned()).or_default();
        if queue.len() >= FAULTS_PER_EXTERNAL_ID_MAX {
            return Err(ControlError::BadRequest(format!(
                "at most {FAULTS_PER_EXTERNAL_ID_MAX} faults per external id"
            )));
        }
        queue.push_back(fault);
        Ok(())
    }

    pub fn payouts(&self) -> Payouts {
        let s = self.lock();
        let mut per = BTreeMap::new();
        for r in &s.records {
            *per.entry(r.d.request.reference_id.clone()).or_insert(0) += 1;
        }
        Payouts {
            disbursements: s.records.iter().map(|r| r.d.clone()).collect(),
            creates_per_external_id: per,
        }
    }

    pub fn requests(&self) -> RequestCounts {
        self.lock().counts.clone()
    }

    /// The callback attempts so far (the last [`CALLBACK_LOG_MAX`]).
    pub fn callbacks(&self) -> Vec<CallbackAttempt> {
        self.lock().callbacks.iter().cloned().collect()
    }

    pub(crate) fn log_callback(&self, attempt: CallbackAttempt) {
        let mut s = self.lock();
        if s.callbacks.len() >= CALLBACK_LOG_MAX {
            s.callbacks.pop_front();
        }
        s.callbacks.push_back(attempt);
    }

    pub fn settings(&self) -> Settings {
        self.lock().settings.clone()
    }

    /// Changes the given settings; `callback_url: ""` turns callbacks off.
    pub fn set_settings(
        &self,
        complete_after_ms: Option<u64>,
        callback_url: Option<String>,
        callback_token: Option<String>,
    ) -> Result<(), ControlError> {
        if let Some(url) = callback_url.as_deref().filter(|u| !u.is_empty()) {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(ControlError::BadRequest(format!(
                    "callback_url {url:?} is not http(s)"
                )));
            }
        }
        let mut s = self.lock();
        if let Some(ms) = complete_after_ms {
            s.settings.complete_after_ms = ms;
        }
        if let Some(url) = callback_url {
            s.settings.callback_url = Some(url).filter(|u| !u.is_empty());
        }
        if let Some(token) = callback_token {
            s.settings.callback_token = token;
        }
        Ok(())
    }

    /// Whether callbacks carry the `webhook-id` header.
    pub fn set_webhook_id(&self, send: bool) {
        self.lock().settings.webhook_id = send;
    }

    /// Forgets every disbursement, key, fault, count and callback (the gateway's
    /// payments, refunds, faults and callbacks too), and returns to the configured
    /// settings; pending settlements and deliveries are dropped.
    pub fn reset(&self) {
        let mut s = self.lock();
        *s = SimState::new(self.inner.initial.clone());
        let mut g = self.inner.gateway.lock();
        self.inner.gateway.reset_locked(&mut g);
        // Under the locks, so background work checking the generation under a lock
        // never acts on the new state.
        self.inner.plumbing.next_generation();
    }

    /// Ends background work (settlements waiting, deliveries retrying).
    pub fn stop(&self) {
        let _s = self.lock();
        self.inner.plumbing.next_generation();
    }

    /// Sleeps `ms`; `false` when a reset or stop came first.
    pub(crate) async fn sleep(&self, generation: u64, ms: u64) -> bool {
        self.inner.plumbing.sleep(generation, ms).await
    }

    fn event_id(&self) -> String {
        format!(
            "evt-{}",
            self.inner.next_event.fetch_add(1, Ordering::Relaxed) + 1
        )
    }

    /// A callback reporting `status` of payout `i` under a new webhook id.
    fn callback(
        &self,
        d: &Disbursement,
        status: Status,
        failure_code: Option<&str>,
        updated: chrono::DateTime<Utc>,
    ) -> Callback {
        Callback::Event {
            body: d.event(status, failure_code, updated),
            webhook_id: self.event_id(),
            status,
        }
    }

    /// Moves payout `i` to `status` (at `at`).
    fn set_status(
        s: &mut SimState,
        i: usize,
        status: Status,
        code: Option<String>,
        at: DateTime<Utc>,
    ) {
        let d = &mut s.records[i].d;
        d.status = status;
        d.failure_code = code;
        d.updated = at;
    }

    /// Settles payout `i` to `status` and plans its callbacks (per its webhook
    /// fault, taken here). `None` when there is nothing to deliver.
    fn settle_locked(
        &self,
        s: &mut SimState,
        i: usize,
        status: Status,
        failure_code: Option<String>,
    ) -> Option<Plan> {
        let now = Utc::now();
        let stale_updated = s.records[i].d.updated;
        Self::set_status(s, i, status, failure_code.clone(), now);
        let webhook = s.records[i].webhook.take();
        let first = self.callback(&s.records[i].d, status, failure_code.as_deref(), now);
        let later = now + chrono::Duration::milliseconds(1);
        let mut items = Vec::new();
        match webhook {
            None => items.push(first),
            Some(WebhookFault::Duplicate) => {
                items.push(first.clone());
                items.push(first);
            }
            Some(WebhookFault::OutOfOrder) => {
                items.push(first);
                let d = &s.records[i].d;
                items.push(self.callback(d, Status::Accepted, None, stale_updated));
            }
            Some(WebhookFault::FailedAfterCompleted { failure_code }) => {
                items.push(first);
                if status == Status::Succeeded {
                    Self::set_status(s, i, Status::Failed, Some(failure_code.clone()), later);
                    let d = &s.records[i].d;
                    items.push(self.callback(d, Status::Failed, Some(&failure_code), later));
                }
            }
            Some(WebhookFault::Reversed) => {
                items.push(first);
                if status == Status::Succeeded {
                    Self::set_status(s, i, Status::Reversed, None, later);
                    let d = &s.records[i].d;
                    items.push(self.callback(d, Status::Reversed, None, later));
                }
            }
            Some(WebhookFault::Garbage) => {
                items.push(Callback::Garbage);
                items.push(first);
            }
        }
        let url = s.settings.callback_url.clone()?;
        let d = &s.records[i].d;
        Some(Plan {
            url,
            token: s.settings.callback_token.clone(),
            webhook_id: s.settings.webhook_id,
            disbursement_id: d.id.clone(),
            external_id: d.request.reference_id.clone(),
            items,
        })
    }

    /// The automatic settlement of payout `id` (SUCCEEDED, or FAILED when
    /// scripted), if it is still ACCEPTED and no reset came in between.
    fn settle_auto(&self, generation: u64, id: &str) -> Option<Plan> {
        let mut s = self.lock();
        if self.generation() != generation {
            return None;
        }
        let i = *s.by_id.get(id)?;
        if s.records[i].d.status != Status::Accepted {
            return None;
        }
        let (status, code) = match s.records[i].fail_with.clone() {
            Some(code) => (Status::Failed, Some(code)),
            None => (Status::Succeeded, None),
        };
        self.settle_locked(&mut s, i, status, code)
    }

    /// Settles `id` after `complete_after_ms`, in the background.
    pub(crate) fn spawn_settlement(&self, id: String) {
        self.spawn_settlement_after(id, 0);
    }

    /// Settles `id` after `delay_ms` and then `complete_after_ms`, in the background:
    /// on its own task, so it happens whatever becomes of the request that created
    /// it (a caller that hangs up drops the request's future, never the settlement).
    pub(crate) fn spawn_settlement_after(&self, id: String, delay_ms: u64) {
        let sim = self.clone();
        let generation = self.generation();
        let after_ms = self
            .lock()
            .settings
            .complete_after_ms
            .saturating_add(delay_ms);
        tokio::spawn(async move {
            if !sim.sleep(generation, after_ms).await {
                return;
            }
            if let Some(plan) = sim.settle_auto(generation, &id) {
                deliver(&sim, generation, plan).await;
            }
        });
    }

    /// Settles `id` now and delivers its callbacks before returning
    /// (`webhook_before_response`).
    pub(crate) async fn settle_now(&self, id: &str) {
        let generation = self.generation();
        if let Some(plan) = self.settle_auto(generation, id) {
            deliver(self, generation, plan).await;
        }
    }

    /// Settles the latest disbursement of `external_id` by hand, whatever its status
    /// (so a test can also contradict an earlier settlement), and delivers its
    /// callbacks in the background.
    pub fn complete(
        &self,
        external_id: &str,
        status: Status,
        failure_code: Option<String>,
    ) -> Result<Disbursement, ControlError> {
        if status == Status::Failed && failure_code.as_deref().is_none_or(str::is_empty) {
            return Err(ControlError::BadRequest(
                "a FAILED settlement needs a failure_code".into(),
            ));
        }
        let failure_code = failure_code.filter(|_| status == Status::Failed);
        let generation = self.generation();
        let (d, plan) = {
            let mut s = self.lock();
            let i = *s
                .by_external_id
                .get(external_id)
                .and_then(|is| is.last())
                .ok_or_else(|| {
                    ControlError::NotFound(format!(
                        "no disbursement has external_id {external_id:?}"
                    ))
                })?;
            let plan = self.settle_locked(&mut s, i, status, failure_code);
            (s.records[i].d.clone(), plan)
        };
        if let Some(plan) = plan {
            let sim = self.clone();
            tokio::spawn(async move { deliver(&sim, generation, plan).await });
        }
        Ok(d)
    }
}

// ---------------------------------------------------------------------------------
// Callback delivery: each planned callback in order, each retried a few times on a
// non-2xx answer or a connection error, with a short doubling backoff (the plumbing's
// callback POST).

/// One callback to deliver.
#[derive(Debug, Clone)]
pub(crate) enum Callback {
    /// A webhook envelope (JSON text) and its `webhook-id`.
    Event {
        body: String,
        webhook_id: String,
        status: Status,
    },
    /// A body that is not JSON.
    Garbage,
}

/// The callbacks of one settlement, in delivery order.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub url: String,
    pub token: String,
    /// Send the `webhook-id` header.
    pub webhook_id: bool,
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
        Callback::Event {
            body,
            webhook_id,
            status,
        } => (body.clone(), Some(webhook_id.clone()), Some(*status)),
        Callback::Garbage => (GARBAGE_BODY.to_owned(), None, None),
    };
    let signing = Signing::Token {
        header: CALLBACK_TOKEN_HEADER,
        token: plan.token.clone(),
    };
    let extra: Vec<(&'static str, String)> = match &event_id {
        Some(id) if plan.webhook_id => vec![(WEBHOOK_ID_HEADER, id.clone())],
        _ => vec![],
    };
    sim.plumbing()
        .post_callback_with(generation, &plan.url, &signing, &extra, &body, |d| {
            sim.log_callback(CallbackAttempt {
                event_id: event_id.clone(),
                disbursement_id: plan.disbursement_id.clone(),
                external_id: plan.external_id.clone(),
                status,
                attempt: d.attempt,
                http_status: d.http_status,
                error: d.error.clone(),
                delivered: d.delivered,
            })
        })
        .await;
}
