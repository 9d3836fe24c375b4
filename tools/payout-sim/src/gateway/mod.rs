//! A simulated cash payment gateway (seed 000: WeChat Pay, Alipay, Apple), served by
//! the same server as the payouts: payers pay orders (a test stands in for them),
//! the gateway POSTs signed pay callbacks, takes idempotent refunds and answers refund
//! queries, and a control API scripts faults per refund number or order number. It
//! shares the payout simulator's plumbing (`plumbing.rs`): the API key, the loopback
//! server, the reset/stop generation, scripted sleeps, and the callback POST with its
//! retries ([`CALLBACK_ATTEMPTS_MAX`](crate::CALLBACK_ATTEMPTS_MAX) attempts,
//! [`CALLBACK_BACKOFF_MS`](crate::CALLBACK_BACKOFF_MS) doubling). Its state
//! (`gateway_state.rs`) is held by the [`Sim`], which forgets it at a reset; this
//! module is what acts on it. Nothing sleeps unless scripted, and refunds move on when
//! queried, not with time, so tests are deterministic.
//!
//! # The gateway API
//!
//! Errors are `{"error_code": "...", "message": "..."}`; a 400's message names the
//! field or the rule at fault. Money is integer minor units (a fraction, zero, a
//! negative or a string is refused); currencies are three capital letters.
//!
//! - `POST /gateway/payments` (**test control**, no authorization: it stands in for
//!   the payer paying)
//!   ```json
//!   {"order_no": "o-1", "amount_minor": 600, "currency": "CNY", "method": "WECHAT",
//!    "account_id": "mch-1", "paid_at_ms": 1767225600000}
//!   ```
//!   (`method` is `WECHAT`, `ALIPAY` or `APPLE`; `paid_at_ms` is optional, now by
//!   default). Records a payment under a new `transaction_no` (`txn-<n>`) and POSTs
//!   its pay callback to the configured gateway callback URL before answering (unless a
//!   fault delays or holds it):
//!   ```json
//!   {"event_id": "gevt-1", "type": "payment.succeeded", "order_no": "o-1",
//!    "transaction_no": "txn-1", "method": "WECHAT", "account_id": "mch-1",
//!    "amount_minor": 600, "currency": "CNY", "paid_at_ms": 1767225600000}
//!   ```
//!   with `x-gateway-signature: <lower-case hex HMAC-SHA256(callback secret, raw
//!   body)>` ([`SIGNATURE_HEADER`], [`signature`]): what factledger's
//!   `Verifier::hmac` checks. Answers 200
//!   `{"payment": {...}, "callback": {"event_id", "state", "http_status"}}`, `state`
//!   being `DELIVERED` (a 2xx), `UNDELIVERED` (every attempt failed; `http_status` is
//!   the last one's, or null), `DELAYED`, `HELD` or `OFF` (no callback URL).
//!   The same order may be paid twice: two payments, two transaction numbers.
//! - `POST /gateway/refunds` (`Authorization: Basic base64("<secret>:")`, as the
//!   payout API; otherwise 401 `INVALID_API_KEY`)
//!   ```json
//!   {"refund_no": "r-1", "transaction_no": "txn-1", "amount_minor": 200,
//!    "currency": "CNY", "order_no": "o-1", "method": "WECHAT", "account_id": "mch-1"}
//!   ```
//!   (`order_no`, `method`, `account_id` optional; when given they must be the
//!   payment's). Answers 200
//!   ```json
//!   {"refund_no": "r-1", "gateway_refund_id": "grf-1", "transaction_no": "txn-1",
//!    "order_no": "o-1", "amount_minor": 200, "currency": "CNY",
//!    "status": "PROCESSING"}
//!   ```
//!   (`status` is `PROCESSING`, `SUCCEEDED`, `FAILED` or `CLOSED`; `failure_reason`
//!   appears when one is set). Checked in this order, each a 400:
//!   `INVALID_REQUEST` (a field: missing, blank, wrongly typed), then **idempotency by
//!   `refund_no`**: the same body again answers the same refund as it stands now and
//!   makes nothing; another body under a used `refund_no` is `REFUND_NO_REUSED`. Only
//!   then, for a new refund number: `TRANSACTION_NOT_FOUND` (names `transaction_no`),
//!   `CURRENCY_MISMATCH`, `PAYMENT_MISMATCH` (names `order_no`, `method` or
//!   `account_id`), `AMOUNT_EXCEEDS_REFUNDABLE` (names `amount_minor` and what is left:
//!   the payment less its PROCESSING and SUCCEEDED refunds). So a 400 other than
//!   `REFUND_NO_REUSED` proves no refund exists under that number; one refund number
//!   never makes two refunds.
//! - `GET /gateway/refunds/{refund_no}` (authorized): the same shape, or 404
//!   `REFUND_NOT_FOUND`. A query moves a PROCESSING refund along its course: by
//!   default the first query finds it `SUCCEEDED`; `processing_then` scripts N
//!   PROCESSING answers first and the final status.
//!
//! # The control API (tests and demos only, no authorization)
//!
//! - `POST /control/gateway/faults` `{"faults": [{"refund_no": "r-1", "kind": "...",
//!   ...}, {"order_no": "o-1", "kind": "..."}]}`: refund faults are keyed by
//!   `refund_no`, callback faults by `order_no` (the wrong key is a 400; a refused list
//!   queues nothing). Create faults queue per refund number and each create request
//!   takes the next (a retry too, so `error_5xx_before_accept` once lets the retry
//!   through); query faults likewise per query; callback faults per payment of the
//!   order. Kinds (optional fields with their defaults):
//!   - refund create: `accept_then_timeout` `{"delay_ms": 60000}` (makes the refund,
//!     holds the answer: the client times out, the refund exists);
//!     `error_5xx_before_accept` `{"status": 503}` (makes nothing);
//!     `error_5xx_after_accept` `{"status": 502}` (makes it, answers the 5xx);
//!     `reject` `{"error_code": "REFUND_NOT_ALLOWED", "message": "..."}` (400, makes
//!     nothing); `garbage_body` (makes it, answers 200 with a non-JSON body);
//!   - refund course: `processing_then` `{"times": 0, "status": "SUCCEEDED"|"FAILED"|
//!     "CLOSED", "failure_reason": null}` (required `status`): the refund answers
//!     PROCESSING to its create and to the next `times` queries, then `status`
//!     (FAILED carries `failure_reason`, `REFUND_FAILED` by default). Set before the
//!     refund is made, or on an existing one (replacing its course);
//!   - refund query: `query_5xx` `{"times": 1, "status": 503}` (the next `times`
//!     queries answer that 5xx; the course does not move); `query_timeout`
//!     `{"delay_ms": 60000}` (the next query's answer is held; the course does not
//!     move); `query_garbage_body` (200, not JSON);
//!   - pay callback: `duplicate_callback` (the same event, same body and signature,
//!     twice); `late_callback` `{"delay_ms": N}` (required: delivered N ms later in the
//!     background, after the payment answered `DELAYED`); `hold_callback` (kept until
//!     `POST /control/gateway/release`: a callback as late as the test wants);
//!     `bad_signature_callback` (signed with another secret).
//! - `GET /control/gateway/refunds`: `{"refunds": [...], "refunds_per_refund_no",
//!   "create_requests_per_refund_no", "refunds_per_transaction_no",
//!   "refunded_minor_per_transaction_no"}`; the last counts PROCESSING and SUCCEEDED
//!   refunds. "Never refunded twice" is `refunds_per_transaction_no` and the refunded
//!   amount staying put while `create_requests_per_refund_no` grows.
//! - `GET /control/gateway/payments`: every payment.
//! - `POST /control/gateway/settle` `{"refund_no", "status", "failure_reason"}`: sets a
//!   refund's status by hand (404 if unknown).
//! - `POST /control/gateway/release` `{"order_no"}`: delivers the held callbacks of that
//!   order now, answers `{"callbacks": [{"event_id", "state", "http_status"}]}`.
//! - `GET /control/gateway/callbacks`: every callback attempt `{"event_id", "order_no",
//!   "transaction_no", "copy", "attempt", "http_status", "error", "delivered",
//!   "signed", "at_ms"}` (`copy` 2 is a duplicate's second delivery; `signed` false for
//!   `bad_signature_callback`).
//! - `GET /control/gateway/requests`: `{"payment", "refund", "query", "unauthorized"}`.
//! - `POST /control/gateway/settings` `{"callback_url", "callback_secret"}` (each
//!   optional; `"callback_url": ""` turns callbacks off); `GET` shows them.
//! - `POST /control/reset` (the simulator's) forgets the gateway's state too.
//!
//! With [`crate::SimConfig::alipay`] set, the same gateway speaks Alipay's open-API
//! format instead ([`alipay`]: RSA2-signed notification forms, `POST /gateway.do`).
//!
//! In process, [`crate::SimHandle::gateway`] (or [`crate::Sim::gateway`]) gives a
//! [`GatewaySim`] with the same operations.

pub mod alipay;
mod alipay_http;
pub(crate) mod http;
pub mod model;
mod pay;
pub mod wechatpay;
mod wechatpay_http;

pub use model::{
    Course, GatewayFault, Method, Payment, PaymentRequest, Refund, RefundRequest, RefundStatus,
    Target, FAILURE_REASON_DEFAULT, ID_CHARS_MAX, PAYMENT_SUCCEEDED, REJECT_CODE_DEFAULT,
    TIMES_MAX,
};

pub use crate::gateway_state::{GatewayCallbackAttempt, GatewayCounts, GatewaySettings};
pub use crate::plumbing::signature;
pub use pay::{CallbackReport, CallbackState, PaymentOutcome};

use crate::gateway_state::{Shared, State};
use crate::plumbing::ControlError;
use crate::Sim;
use chrono::Utc;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::MutexGuard;

/// The header every pay callback carries its signature in.
pub const SIGNATURE_HEADER: &str = "x-gateway-signature";
/// The callback secret unless configured.
pub const CALLBACK_SECRET_DEFAULT: &str = "payout-sim-gateway-callback-secret";
/// What `bad_signature_callback` signs with instead of the callback secret.
pub const WRONG_SECRET: &str = "not-the-gateway-callback-secret";
/// Faults queued per refund or order number at most (a runaway script stops here).
pub const FAULTS_PER_KEY_MAX: usize = 1_000;

/// Which gateway endpoint a call was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GatewayEndpoint {
    Refund,
    Query,
}

/// Every refund, and the counts that show whether anything was refunded twice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatewayRefunds {
    pub refunds: Vec<Refund>,
    /// Refunds made per refund number (never more than 1).
    pub refunds_per_refund_no: BTreeMap<String, u64>,
    /// Create requests per refund number (retries and replays included).
    pub create_requests_per_refund_no: BTreeMap<String, u64>,
    pub refunds_per_transaction_no: BTreeMap<String, u64>,
    /// The PROCESSING and SUCCEEDED refunds' amounts per transaction.
    pub refunded_minor_per_transaction_no: BTreeMap<String, i64>,
}

/// What a refund create comes to.
#[derive(Debug, Clone)]
pub enum RefundVerdict {
    /// Answer this; nothing was made.
    Refused { status: u16, body: Value },
    /// The refund the number names (new when `created`), and the fault to act out.
    Accepted {
        refund: Box<Refund>,
        created: bool,
        fault: Option<GatewayFault>,
    },
}

/// What a refund query comes to.
#[derive(Debug, Clone)]
pub enum QueryVerdict {
    /// The refund as it now stands (its course moved on).
    Found(Box<Refund>),
    /// No refund has this number.
    NotFound,
    /// Answer this 5xx (`query_5xx`).
    Error { status: u16 },
    /// Hold the answer this long, then answer as it stands (`query_timeout`).
    Hold { delay_ms: u64 },
    /// Answer a non-JSON 200 (`query_garbage_body`).
    Garbage,
}

fn next(counter: &AtomicU64, prefix: &str) -> String {
    format!("{prefix}-{}", counter.fetch_add(1, Ordering::Relaxed) + 1)
}

fn now_ms() -> i64 {
    Utc::now().timestamp_millis()
}

fn refused(error_code: &str, message: String) -> RefundVerdict {
    RefundVerdict::Refused {
        status: 400,
        body: json!({"error_code": error_code, "message": message}),
    }
}

/// Why `request` does not fit `payment`, if it does not (the optional fields).
fn mismatch(request: &RefundRequest, payment: &Payment) -> Option<String> {
    let differs = |field: &str, sent: &str, theirs: &str| {
        format!("{field} {sent:?} is not the payment's ({theirs:?})")
    };
    if let Some(o) = request
        .order_no
        .as_deref()
        .filter(|o| *o != payment.order_no)
    {
        return Some(differs("order_no", o, &payment.order_no));
    }
    if let Some(m) = request.method.filter(|m| *m != payment.method) {
        return Some(differs("method", m.as_str(), payment.method.as_str()));
    }
    if let Some(a) = request
        .account_id
        .as_deref()
        .filter(|a| *a != payment.account_id)
    {
        return Some(differs("account_id", a, &payment.account_id));
    }
    None
}

impl Sim {
    /// The payment gateway simulated beside the payouts (same server, same API key).
    pub fn gateway(&self) -> GatewaySim {
        GatewaySim { sim: self.clone() }
    }
}

/// The simulated gateway: a view of the [`Sim`] it lives in; cheap to clone.
#[derive(Debug, Clone)]
pub struct GatewaySim {
    sim: Sim,
}

impl GatewaySim {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.sim.gateway_shared().lock()
    }

    fn shared(&self) -> &Shared {
        self.sim.gateway_shared()
    }

    /// Counts a call; `false` (and counted unauthorized) without the API key.
    pub fn admit(&self, endpoint: GatewayEndpoint, authorization: Option<&str>) -> bool {
        let ok = self.sim.authorized(authorization);
        let mut s = self.lock();
        match endpoint {
            GatewayEndpoint::Refund => s.counts.refund += 1,
            GatewayEndpoint::Query => s.counts.query += 1,
        }
        if !ok {
            s.counts.unauthorized += 1;
        }
        ok
    }

    /// Counts a call of a gateway mode's API (WeChat Pay, Alipay; `authorized`: its
    /// signature held).
    pub fn count(&self, endpoint: GatewayEndpoint, authorized: bool) {
        let mut s = self.lock();
        match endpoint {
            GatewayEndpoint::Refund => s.counts.refund += 1,
            GatewayEndpoint::Query => s.counts.query += 1,
        }
        if !authorized {
            s.counts.unauthorized += 1;
        }
    }

    /// Decides one refund create (its refund number's next fault, then idempotency,
    /// then the payment's checks). One refund number never makes two refunds.
    pub fn refund(&self, request: RefundRequest) -> RefundVerdict {
        let mut guard = self.lock();
        let s = &mut *guard;
        *s.create_requests
            .entry(request.refund_no.clone())
            .or_insert(0) += 1;
        let fault = s
            .create_faults
            .get_mut(&request.refund_no)
            .and_then(VecDeque::pop_front);
        match &fault {
            Some(GatewayFault::Error5xxBeforeAccept { status }) => {
                return RefundVerdict::Refused {
                    status: *status,
                    body: json!({"error_code": "SERVER_ERROR",
                                 "message": "scripted failure before accepting the refund"}),
                }
            }
            Some(GatewayFault::Reject {
                error_code,
                message,
            }) => return refused(error_code, message.clone()),
            _ => {}
        }
        if let Some(&i) = s.by_refund_no.get(&request.refund_no) {
            let existing = &s.refunds[i];
            if existing.request != request {
                return refused(
                    "REFUND_NO_REUSED",
                    format!(
                        "refund_no {:?} was used with a different request",
                        request.refund_no
                    ),
                );
            }
            return RefundVerdict::Accepted {
                refund: Box::new(existing.clone()),
                created: false,
                fault,
            };
        }
        let Some(payment) = s
            .by_transaction
            .get(&request.transaction_no)
            .map(|&i| s.payments[i].clone())
        else {
            return refused(
                "TRANSACTION_NOT_FOUND",
                format!(
                    "transaction_no {:?} names no payment",
                    request.transaction_no
                ),
            );
        };
        if request.currency != payment.currency {
            return refused(
                "CURRENCY_MISMATCH",
                format!(
                    "currency {:?} is not the payment's ({:?})",
                    request.currency, payment.currency
                ),
            );
        }
        if let Some(why) = mismatch(&request, &payment) {
            return refused("PAYMENT_MISMATCH", why);
        }
        let held: i64 = s
            .refunds
            .iter()
            .filter(|r| r.transaction_no == payment.transaction_no && r.status.holds_amount())
            .map(|r| r.amount_minor)
            .sum();
        let left = payment.amount_minor - held;
        if request.amount_minor > left {
            return refused(
                "AMOUNT_EXCEEDS_REFUNDABLE",
                format!(
                    "amount_minor {} is more than the {left} left unrefunded of transaction {}",
                    request.amount_minor, payment.transaction_no
                ),
            );
        }
        let course = s.courses.remove(&request.refund_no).unwrap_or_default();
        let now = now_ms();
        let refund = Refund {
            refund_no: request.refund_no.clone(),
            gateway_refund_id: next(&self.shared().next_refund, "grf"),
            transaction_no: payment.transaction_no,
            order_no: payment.order_no,
            amount_minor: request.amount_minor,
            currency: request.currency.clone(),
            status: RefundStatus::Processing,
            failure_reason: None,
            created_at_ms: now,
            updated_at_ms: now,
            course,
            request,
        };
        s.by_refund_no
            .insert(refund.refund_no.clone(), s.refunds.len());
        s.refunds.push(refund.clone());
        RefundVerdict::Accepted {
            refund: Box::new(refund),
            created: true,
            fault,
        }
    }

    /// Decides one refund query: its next query fault, else the refund, moved along
    /// its course (a PROCESSING answer used up, or the final status reached).
    pub fn query(&self, refund_no: &str) -> QueryVerdict {
        let mut guard = self.lock();
        let s = &mut *guard;
        match s
            .query_faults
            .get_mut(refund_no)
            .and_then(VecDeque::pop_front)
        {
            Some(GatewayFault::Query5xx { status, .. }) => return QueryVerdict::Error { status },
            Some(GatewayFault::QueryTimeout { delay_ms }) => {
                return QueryVerdict::Hold { delay_ms }
            }
            Some(GatewayFault::QueryGarbageBody) => return QueryVerdict::Garbage,
            _ => {}
        }
        let Some(&i) = s.by_refund_no.get(refund_no) else {
            return QueryVerdict::NotFound;
        };
        let r = &mut s.refunds[i];
        if r.status == RefundStatus::Processing {
            if r.course.processing_queries > 0 {
                r.course.processing_queries -= 1;
            } else {
                r.status = r.course.status;
                r.failure_reason = r.course.failure_reason.clone();
                if r.status == RefundStatus::Failed && r.failure_reason.is_none() {
                    r.failure_reason = Some(FAILURE_REASON_DEFAULT.to_owned());
                }
                r.updated_at_ms = now_ms();
            }
        }
        QueryVerdict::Found(Box::new(r.clone()))
    }

    /// The refund `refund_no` as it stands; nothing moves.
    pub fn peek(&self, refund_no: &str) -> Option<Refund> {
        let s = self.lock();
        s.by_refund_no.get(refund_no).map(|&i| s.refunds[i].clone())
    }

    /// Queues `fault` under `key`: the refund number or the order number, as
    /// [`GatewayFault::target`] says. A `processing_then` replaces the course.
    pub fn add_fault(&self, key: &str, fault: GatewayFault) -> Result<(), ControlError> {
        fault.check().map_err(ControlError::BadRequest)?;
        if key.trim().is_empty() {
            return Err(ControlError::BadRequest("the fault's key is blank".into()));
        }
        let mut guard = self.lock();
        let s = &mut *guard;
        let queue = match fault.target() {
            Target::RefundCourse => {
                let GatewayFault::ProcessingThen {
                    times,
                    status,
                    failure_reason,
                } = fault
                else {
                    return Ok(());
                };
                let course = Course {
                    processing_queries: times,
                    status,
                    failure_reason,
                };
                match s.by_refund_no.get(key).copied() {
                    Some(i) => s.refunds[i].course = course,
                    None => {
                        s.courses.insert(key.to_owned(), course);
                    }
                }
                return Ok(());
            }
            Target::RefundCreate => s.create_faults.entry(key.to_owned()).or_default(),
            Target::RefundQuery => s.query_faults.entry(key.to_owned()).or_default(),
            Target::PayCallback => s.callback_faults.entry(key.to_owned()).or_default(),
        };
        // `query_5xx` with `times` N is N faults of one query each.
        let items = match fault {
            GatewayFault::Query5xx { times, status } => {
                vec![GatewayFault::Query5xx { times: 1, status }; times as usize]
            }
            other => vec![other],
        };
        if queue.len() + items.len() > FAULTS_PER_KEY_MAX {
            return Err(ControlError::BadRequest(format!(
                "at most {FAULTS_PER_KEY_MAX} faults per refund or order number"
            )));
        }
        queue.extend(items);
        Ok(())
    }

    /// Sets refund `refund_no`'s status by hand (FAILED without a reason gets
    /// [`FAILURE_REASON_DEFAULT`]).
    pub fn settle(
        &self,
        refund_no: &str,
        status: RefundStatus,
        failure_reason: Option<String>,
    ) -> Result<Refund, ControlError> {
        let mut guard = self.lock();
        let s = &mut *guard;
        let i = *s
            .by_refund_no
            .get(refund_no)
            .ok_or_else(|| ControlError::NotFound(format!("no refund has {refund_no:?}")))?;
        let r = &mut s.refunds[i];
        r.status = status;
        r.failure_reason = match status {
            RefundStatus::Failed => {
                Some(failure_reason.unwrap_or_else(|| FAILURE_REASON_DEFAULT.to_owned()))
            }
            RefundStatus::Closed => failure_reason,
            _ => None,
        };
        r.updated_at_ms = now_ms();
        Ok(r.clone())
    }

    pub fn payments(&self) -> Vec<Payment> {
        self.lock().payments.clone()
    }

    pub fn refunds(&self) -> GatewayRefunds {
        let s = self.lock();
        let mut per_no = BTreeMap::new();
        let mut per_txn = BTreeMap::new();
        let mut minor = BTreeMap::new();
        for r in &s.refunds {
            *per_no.entry(r.refund_no.clone()).or_insert(0) += 1;
            *per_txn.entry(r.transaction_no.clone()).or_insert(0) += 1;
            let held = minor.entry(r.transaction_no.clone()).or_insert(0);
            if r.status.holds_amount() {
                *held += r.amount_minor;
            }
        }
        GatewayRefunds {
            refunds: s.refunds.clone(),
            refunds_per_refund_no: per_no,
            create_requests_per_refund_no: s.create_requests.clone(),
            refunds_per_transaction_no: per_txn,
            refunded_minor_per_transaction_no: minor,
        }
    }

    /// How many refunds `refund_no` made (0 or 1).
    pub fn refunds_made(&self, refund_no: &str) -> u64 {
        self.lock()
            .refunds
            .iter()
            .filter(|r| r.refund_no == refund_no)
            .count() as u64
    }

    /// The pay callback attempts so far (the last [`CALLBACK_LOG_MAX`](crate::CALLBACK_LOG_MAX)).
    pub fn callbacks(&self) -> Vec<GatewayCallbackAttempt> {
        self.lock().callbacks.iter().cloned().collect()
    }

    pub fn requests(&self) -> GatewayCounts {
        self.lock().counts.clone()
    }

    pub fn settings(&self) -> GatewaySettings {
        self.lock().settings.clone()
    }

    /// Changes the given settings; `callback_url: ""` turns callbacks off.
    pub fn set_settings(
        &self,
        callback_url: Option<String>,
        callback_secret: Option<String>,
    ) -> Result<(), ControlError> {
        if let Some(url) = callback_url.as_deref().filter(|u| !u.is_empty()) {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(ControlError::BadRequest(format!(
                    "callback_url {url:?} is not http(s)"
                )));
            }
        }
        if callback_secret.as_deref().is_some_and(str::is_empty) {
            return Err(ControlError::BadRequest(
                "callback_secret must not be empty".into(),
            ));
        }
        let mut s = self.lock();
        if let Some(url) = callback_url {
            s.settings.callback_url = Some(url).filter(|u| !u.is_empty());
        }
        if let Some(secret) = callback_secret {
            s.settings.callback_secret = secret;
        }
        Ok(())
    }
}
