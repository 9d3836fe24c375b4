//! A simulator of a payout provider speaking **Xendit's Payouts API (v2)** as
//! documented, for tests, demos and benchmarks: an HTTP server on loopback that takes
//! idempotent payout creates, settles them in the background, POSTs payout webhooks,
//! lists payouts by reference and as Transactions, and a control API that scripts
//! faults per reference id (timeouts after accepting, 5xx before and after accepting,
//! insufficient balance, failures, webhooks early, twice, out of order,
//! contradicting, reversed, or unreadable). factledger's Xendit adapter talks to it
//! over a real socket, exactly as to Xendit. State lives in memory behind one mutex
//! and nothing sleeps unless scripted: ten thousand payouts end to end are fast.
//!
//! The same server also simulates a **cash payment gateway** (seed 000: WeChat Pay,
//! Alipay, Apple): payments with HMAC-signed pay callbacks, idempotent refunds, refund
//! queries and their scripted faults, under `/gateway/…` and `/control/gateway/…`.
//! See [`gateway`] for that API; it shares the API key, the server, the reset and the
//! callback delivery described here.
//!
//! # The provider API (Xendit's shape)
//!
//! Every call needs `Authorization: Basic base64("<secret key>:")` (the configured
//! secret key, an empty password); otherwise 401 `{"error_code": "INVALID_API_KEY"}`.
//! Errors are `{"error_code": "...", "message": "..."}`.
//!
//! - `POST /v2/payouts` with `Idempotency-key: <key>` (required: 400
//!   `API_VALIDATION_ERROR` without it, or past 100 characters) and Xendit's body
//!   ```json
//!   {"reference_id": "myref-1482928194", "channel_code": "ID_BCA",
//!    "channel_properties": {"account_number": "000000000099",
//!                           "account_holder_name": "Michael Chen"},
//!    "amount": 10000, "description": "July payout", "currency": "IDR"}
//!   ```
//!   `amount` is a JSON number in the currency's major unit, read exactly: IDR and
//!   VND integers, PHP, MYR, THB and USD at most 2 decimals ([`CURRENCIES`]). A
//!   string, zero, an exponent, too many decimals, any missing, empty or wrongly
//!   typed field, another currency or a non-digit account number is 400
//!   `API_VALIDATION_ERROR` with a message naming the field. Answers 200 with the
//!   Payout object, status `ACCEPTED`:
//!   ```json
//!   {"id": "disb-1", "amount": 10000, "channel_code": "ID_BCA", "currency": "IDR",
//!    "status": "ACCEPTED", "description": "July payout",
//!    "reference_id": "myref-1482928194", "created": "…", "updated": "…",
//!    "estimated_arrival_time": "…", "business_id": "…",
//!    "channel_properties": {"account_number": "000000000099",
//!                           "account_holder_name": "Michael Chen"}}
//!   ```
//!   (`failure_code` appears once FAILED). **Idempotency**, as documented: the same
//!   key and the same body answers 200 with that same payout (its current status)
//!   and creates nothing; the same key with another body is 409 `DUPLICATE_ERROR`.
//!   One key never makes two payouts. The reference id is not unique: two keys, two
//!   payouts.
//! - `GET /v2/payouts?reference_id=X`: 200 with a JSON array of the payouts carrying
//!   that reference, oldest first — empty when there are none.
//! - `GET /v2/payouts/{id}`: the one payout, or 404 `DATA_NOT_FOUND`.
//! - `GET /transactions?types=DISBURSEMENT&created[gte]=<RFC 3339>&created[lt]=…
//!   &limit=<1..50>&after_id=<txn id>`: the payouts as Xendit Transactions
//!   (`{"id": "txn_disb-1", "product_id": "disb-1", "type": "DISBURSEMENT",
//!   "status": "PENDING"|"SUCCESS"|"FAILED"|"VOIDED"|"REVERSED", "reference_id",
//!   "currency", "amount", "cashflow": "MONEY_OUT", …}`), in creation order, one page
//!   `{"has_more", "data", "links"}`; the next page starts `after_id` the last one.
//!
//! Not simulated: `POST /v2/payouts/{id}/cancel` (factledger never cancels a payout)
//! and payout channels listing.
//!
//! # Lifecycle and webhooks
//!
//! A new payout is `ACCEPTED`; `complete_after_ms` after its answer (0: right after)
//! a background task settles it `SUCCEEDED` (or `FAILED` when scripted) and, if a
//! callback URL is configured, POSTs Xendit's webhook envelope to it with
//! `x-callback-token: <callback token>` and `webhook-id: <delivery id>` (the header
//! can be turned off: `POST /control/settings {"webhook_id": false}`):
//!
//! ```json
//! {"event": "payout.succeeded", "business_id": "…", "created": "…",
//!  "data": {"id": "disb-1", "amount": 10000, "currency": "IDR",
//!           "status": "SUCCEEDED", "reference_id": "myref-1482928194", …}}
//! ```
//!
//! Events: `payout.succeeded`, `payout.failed` (with `data.failure_code`),
//! `payout.reversed`. A duplicate delivery repeats its `webhook-id`. A callback
//! answered non-2xx or not at all is retried up to [`CALLBACK_ATTEMPTS_MAX`] attempts
//! in all, [`CALLBACK_BACKOFF_MS`] doubling between them; the callbacks of one
//! settlement are delivered one after the other, in order.
//!
//! # The control API (tests and demos only, no authorization)
//!
//! - `POST /control/faults` `{"faults": [{"reference_id": "po-42", "kind": "...", ...}]}`
//!   (`external_id` is accepted for `reference_id`): faults queue per reference id;
//!   each create request carrying that reference (a retry too) takes the next fault
//!   of its queue, so `[{"kind": "error_5xx_before_accept"}]` fails the first attempt
//!   and lets the retry through. Kinds (optional fields with their defaults):
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
//!   - `webhook_before_response`: settles and delivers the webhooks before answering
//!     the create (the answer still says `ACCEPTED`, as computed at acceptance).
//!   - `duplicate_webhook`: every webhook of the settlement is sent twice, same
//!     `webhook-id`.
//!   - `out_of_order_webhooks`: the `payout.succeeded` webhook, then a stale one
//!     reporting `ACCEPTED` (event `payout.accepted`, a new `webhook-id`, an older
//!     `updated`): a late delivery of an earlier state.
//!   - `failed_after_completed` `{"failure_code": "INVALID_DESTINATION"}`: settles
//!     `SUCCEEDED`, then a contradicting `payout.failed`; the provider reports it
//!     `FAILED` from then on.
//!   - `reversed_after_succeeded`: settles `SUCCEEDED`, then `payout.reversed` (the
//!     bank returned the money); the provider reports it `REVERSED` from then on.
//!   - `garbage_body`: creates (it settles as usual), answers 200 with a non-JSON body.
//!   - `garbage_webhook`: a callback whose body is not JSON, then the real one.
//!
//!   The faults acting on webhooks and `fail` take effect only on a request that
//!   creates; on an idempotent replay they are used up without effect.
//! - `GET /control/payouts`: `{"disbursements": [...], "creates_per_external_id":
//!   {"po-42": 1}}` (every field, amounts in minor units, `idempotency_key` too;
//!   keyed by reference id).
//! - `GET /control/requests`: `{"create", "query", "get", "report", "unauthorized"}`
//!   call counts (`report` counts transaction pages).
//! - `GET /control/callbacks`: every callback attempt `{"event_id" (the webhook id),
//!   "disbursement_id", "external_id" (the reference), "status", "attempt",
//!   "http_status", "error", "delivered"}`.
//! - `POST /control/settings` `{"complete_after_ms", "callback_url", "callback_token",
//!   "webhook_id"}` (each optional; `"callback_url": ""` turns callbacks off); `GET`
//!   shows them.
//! - `POST /control/complete` `{"reference_id", "status": "SUCCEEDED"|"FAILED"|
//!   "REVERSED", "failure_code"}`: settles the latest payout of that reference by
//!   hand, whatever its status (a second call contradicts the first), and sends its
//!   webhooks. For tests that set `complete_after_ms` very large.
//! - `POST /control/reset`: forgets payouts, keys, faults, counts and callbacks,
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
    currency_digits, major_text, parse_major, CreateRequest, Disbursement, Fault, PayoutAnswer,
    Status, BUSINESS_ID, CURRENCIES, DELAY_MS_MAX, FAILURE_CODE_DEFAULT, TIMEOUT_DELAY_MS_DEFAULT,
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
/// The header carrying a callback's delivery id (unless turned off).
pub const WEBHOOK_ID_HEADER: &str = "webhook-id";
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
