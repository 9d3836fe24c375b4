//! A simulator of a payout provider shaped like Xendit's disbursement API, for tests,
//! demos and benchmarks: an HTTP server on loopback that takes idempotent payout
//! creates, settles them in the background, POSTs callbacks, serves a daily report,
//! and a control API that scripts faults per external id (timeouts after accepting,
//! 5xx before and after accepting, insufficient balance, failures, callbacks early,
//! twice, out of order, contradicting, or unreadable). The payout adapter talks to it
//! over a real socket, exactly as to the provider. State lives in memory behind one
//! mutex and nothing sleeps unless scripted: ten thousand payouts end to end are fast.
//!
//! The same server also simulates a **cash payment gateway** (seed 000: WeChat Pay,
//! Alipay, Apple): payments with HMAC-signed pay callbacks, idempotent refunds, refund
//! queries and their scripted faults, under `/gateway/…` and `/control/gateway/…`.
//! See [`gateway`] for that API; it shares the API key, the server, the reset and the
//! callback delivery described here.
//!
//! # The provider API (Xendit's shape, not factledger's)
//!
//! Every call needs `Authorization: Basic base64("<secret>:")` (the configured secret
//! key, an empty password); otherwise 401 `{"error_code": "INVALID_API_KEY"}`. Errors
//! are `{"error_code": "...", "message": "..."}`.
//!
//! - `POST /disbursements` with `X-IDEMPOTENCY-KEY: <key>` (required: 400
//!   `API_VALIDATION_ERROR` without it) and
//!   ```json
//!   {"external_id": "po-42", "amount": 150000, "currency": "IDR", "bank_code": "BCA",
//!    "account_holder_name": "Ani", "account_number": "1234567890",
//!    "description": "payout"}
//!   ```
//!   **Deviation from Xendit:** `amount` is an integer number of minor units (Xendit
//!   takes a JSON number of rupiah); a fraction, zero, a negative or a string is 400
//!   `API_VALIDATION_ERROR` with a message naming the field, as is any missing, empty
//!   or wrongly typed field, a currency other than `IDR` or a non-digit account number.
//!   Answers 200
//!   ```json
//!   {"id": "disb-1", "external_id": "po-42", "amount": 150000, "currency": "IDR",
//!    "bank_code": "BCA", "account_holder_name": "Ani", "account_number": "1234567890",
//!    "description": "payout", "status": "PENDING"}
//!   ```
//!   (`failure_code` appears once FAILED). **Idempotency:** a create with a key already
//!   used and the same body answers 200 with that same disbursement (its current
//!   status) and creates nothing; the same key with a different body is 400
//!   `DUPLICATE_TRANSACTION_ERROR`. One key never makes two disbursements. (Xendit
//!   answers every reuse with `DUPLICATE_TRANSACTION_ERROR`; the simulator replays, as
//!   most idempotent APIs do.) The external id is not unique: two keys, two payouts.
//! - `GET /disbursements?external_id=X`: 200 with a JSON array of the disbursements
//!   carrying that external id (normally one), oldest first; 404
//!   `DIRECT_DISBURSEMENT_NOT_FOUND_ERROR` when there are none.
//! - `GET /disbursements/{id}`: the one disbursement, or that 404.
//! - `GET /reports/disbursements?date=YYYY-MM-DD`: every disbursement created that UTC
//!   day, `[{"id", "external_id", "amount", "currency", "status", "failure_code",
//!   "created"}]` (`created` RFC 3339).
//!
//! # Lifecycle and callbacks
//!
//! A new disbursement is `PENDING`; `complete_after_ms` after its answer (0: right
//! after) a background task settles it `COMPLETED` (or `FAILED` when scripted) and, if a
//! callback URL is configured, POSTs to it with `x-callback-token: <callback token>`:
//!
//! ```json
//! {"event_id": "evt-7", "id": "disb-1", "external_id": "po-42", "amount": 150000,
//!  "currency": "IDR", "status": "COMPLETED", "failure_code": null,
//!  "updated": "2026-05-01T10:00:00.123Z"}
//! ```
//!
//! `status` is `PENDING`, `COMPLETED` or `FAILED`. **Deviation from Xendit:** Xendit's
//! callbacks carry no event id; the simulator adds a unique `event_id` per event (a
//! duplicate delivery repeats it) so the receiver can dedupe. A callback answered
//! non-2xx or not at all is retried up to [`CALLBACK_ATTEMPTS_MAX`] attempts in all,
//! [`CALLBACK_BACKOFF_MS`] doubling between them; the callbacks of one settlement are
//! delivered one after the other, in order.
//!
//! # The control API (tests and demos only, no authorization)
//!
//! - `POST /control/faults` `{"faults": [{"external_id": "po-42", "kind": "...", ...}]}`:
//!   faults queue per external id; each create request carrying that external id (a
//!   retry too) takes the next fault of its queue, so `[{"kind":
//!   "error_5xx_before_accept"}]` fails the first attempt and lets the retry through.
//!   Kinds (optional fields with their defaults):
//!   - `accept_then_timeout` `{"delay_ms": 60000}`: creates (it settles as usual), then
//!     holds the answer that long (at most [`DELAY_MS_MAX`]): a client timeout after
//!     the money moved.
//!   - `error_5xx_before_accept` `{"status": 503}`: answers that 5xx, creates nothing.
//!   - `error_5xx_after_accept` `{"status": 502}`: creates, answers that 5xx.
//!   - `insufficient_balance`: 400 `{"error_code": "INSUFFICIENT_BALANCE"}`, creates
//!     nothing.
//!   - `fail` `{"failure_code": "INVALID_DESTINATION"}`: creates; it settles `FAILED`.
//!   - `slow_success` `{"delay_ms": N}` (required): creates, answers after `delay_ms`;
//!     it settles as usual from then on, also when the caller hung up before.
//!   - `webhook_before_response`: settles and delivers the callbacks before answering
//!     the create (the answer still says `PENDING`, as computed at acceptance).
//!   - `duplicate_webhook`: every callback of the settlement is sent twice, same
//!     `event_id` (the same event twice).
//!   - `out_of_order_webhooks`: the `COMPLETED` callback, then a stale `PENDING` one
//!     (a new `event_id`, an older `updated`): paid before processing.
//!   - `failed_after_completed` `{"failure_code": "INVALID_DESTINATION"}`: settles
//!     `COMPLETED`, then a contradicting `FAILED` callback; the provider reports it
//!     `FAILED` from then on (a bank return): failed after paid.
//!   - `garbage_body`: creates (it settles as usual), answers 200 with a non-JSON body.
//!   - `garbage_webhook`: a callback whose body is not JSON, then the real one.
//!
//!   The faults acting on callbacks and `fail` take effect only on a request that
//!   creates; on an idempotent replay they are used up without effect.
//! - `GET /control/payouts`: `{"disbursements": [...], "creates_per_external_id":
//!   {"po-42": 1}}` (every field, `created`, `updated` and `idempotency_key` too).
//! - `GET /control/requests`: `{"create", "query", "get", "report", "unauthorized"}`
//!   call counts.
//! - `GET /control/callbacks`: every callback attempt `{"event_id", "disbursement_id",
//!   "external_id", "status", "attempt", "http_status", "error", "delivered"}`.
//! - `POST /control/settings` `{"complete_after_ms", "callback_url", "callback_token"}`
//!   (each optional; `"callback_url": ""` turns callbacks off); `GET` shows them.
//! - `POST /control/complete` `{"external_id", "status": "COMPLETED"|"FAILED",
//!   "failure_code"}`: settles the latest disbursement of that external id by hand,
//!   whatever its status (a second call contradicts the first), and sends its callbacks.
//!   For tests that set `complete_after_ms` very large.
//! - `POST /control/reset`: forgets disbursements, keys, faults, counts and callbacks,
//!   returns to the configured settings, and drops pending settlements (the gateway's
//!   state too).
//!
//! The same server also simulates the **App Store** sending App Store Server
//! Notifications V2 (`{"signedPayload": JWS}` signed under its own minted chain), under
//! `/control/appstore/…`: see [`appstore`].
//!
//! # In process
//!
//! [`spawn`]`(`[`SimConfig`]`) -> io::Result<`[`SimHandle`]`>` serves a simulator on
//! loopback; [`SimHandle::base_url`] is both APIs' base URL, [`SimHandle::sim`] the
//! payouts' state and [`SimHandle::gateway`] the gateway's.
#![forbid(unsafe_code)]

pub mod appstore;
pub mod appstore_certs;
pub mod gateway;
mod gateway_state;
mod http;
mod model;
mod plumbing;
mod respond;
mod sim;

pub use http::{router, IDEMPOTENCY_KEY_HEADER};
pub use model::{
    CreateRequest, Disbursement, Fault, Status, CURRENCIES, DELAY_MS_MAX, FAILURE_CODE_DEFAULT,
    TIMEOUT_DELAY_MS_DEFAULT,
};
pub use plumbing::{
    ControlError, CALLBACK_ATTEMPTS_MAX, CALLBACK_BACKOFF_MS, CALLBACK_TIMEOUT_MS, GARBAGE_BODY,
};
pub use sim::{
    CallbackAttempt, CreateVerdict, Endpoint, Payouts, RequestCounts, Settings, Sim,
    CALLBACK_LOG_MAX, FAULTS_PER_EXTERNAL_ID_MAX,
};

use std::net::SocketAddr;
use std::time::Duration;

/// The header every callback carries the configured callback token in.
pub const CALLBACK_TOKEN_HEADER: &str = "x-callback-token";
/// How long [`SimHandle::shutdown`] lets answers in flight finish.
pub const SHUTDOWN_GRACE_MS: u64 = 1_000;

/// How to start a simulator.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Where to listen; loopback only (port 0 picks a free port).
    pub listen: SocketAddr,
    /// The secret API key callers authenticate with.
    pub secret: String,
    /// Where callbacks go; `None`: no callbacks.
    pub callback_url: Option<String>,
    pub callback_token: String,
    /// How long after its create answer a disbursement settles (0: right after).
    pub complete_after_ms: u64,
    /// Where the payment gateway's pay callbacks go; `None`: none.
    pub gateway_callback_url: Option<String>,
    /// The secret pay callbacks are signed with (HMAC-SHA256, `x-gateway-signature`).
    pub gateway_callback_secret: String,
    /// Speak Alipay's wire format instead of paysim's ([`gateway::alipay`]).
    pub alipay: Option<gateway::alipay::AlipayMode>,
}

impl Default for SimConfig {
    fn default() -> SimConfig {
        SimConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            secret: "xnd_development_payout_sim".into(),
            callback_url: None,
            callback_token: "payout-sim-callback-token".into(),
            complete_after_ms: 0,
            gateway_callback_url: None,
            gateway_callback_secret: gateway::CALLBACK_SECRET_DEFAULT.into(),
            alipay: None,
        }
    }
}

/// A running simulator. Dropping it stops the server and the background work;
/// [`SimHandle::shutdown`] stops it gracefully.
pub struct SimHandle {
    pub addr: SocketAddr,
    /// The simulator itself, for in-process control (the same state the control API
    /// changes).
    pub sim: Sim,
    /// The simulated App Store (its own chain; settings start at their defaults).
    pub appstore: appstore::AppStoreSim,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl SimHandle {
    /// `http://127.0.0.1:<port>`: the provider API's (and the gateway API's) base URL.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The simulated payment gateway, for in-process control.
    pub fn gateway(&self) -> gateway::GatewaySim {
        self.sim.gateway()
    }

    /// Stops accepting, lets answers in flight finish (at most
    /// [`SHUTDOWN_GRACE_MS`]; scripted delays are cut short), then ends.
    pub async fn shutdown(mut self) {
        self.sim.stop();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let grace = Duration::from_millis(SHUTDOWN_GRACE_MS);
        if tokio::time::timeout(grace, &mut self.task).await.is_err() {
            self.task.abort();
        }
    }
}

impl Drop for SimHandle {
    fn drop(&mut self) {
        self.sim.stop();
        self.task.abort();
    }
}

/// Binds `config.listen` (loopback only) and serves a new simulator in the background.
pub async fn spawn(config: SimConfig) -> std::io::Result<SimHandle> {
    if !config.listen.ip().is_loopback() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "the payout simulator binds to loopback only, not {}",
                config.listen
            ),
        ));
    }
    let listener = tokio::net::TcpListener::bind(config.listen).await?;
    let addr = listener.local_addr()?;
    let sim = Sim::new(&config);
    let appstore = appstore::AppStoreSim::new(appstore::AppStoreSettings::default())
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let app = router(sim.clone()).merge(appstore::routes(appstore.clone()));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        // An accept error ends the server; callers then see connection errors.
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stopped.await;
            })
            .await;
    });
    Ok(SimHandle {
        addr,
        sim,
        appstore,
        stop: Some(stop),
        task,
    })
}
