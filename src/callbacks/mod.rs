//! The callback inbox (issue 4 item 7; SPEC R-PAY-4, R-CB-1; seed 000 "回调重放"):
//! providers (payment gateways, payout providers) tell us about events by calling
//! `POST /v1/callbacks/{provider}`.
//!
//! A delivery goes through these steps, in this order:
//! 1. **admit** — a token bucket per provider (`guard`): a flood is refused with 429
//!    before any work;
//! 2. **verify first** (HMAC-SHA256 over the raw body, or a provider token; constant
//!    time). An unverified delivery stores nothing but a counter
//!    (`factledger_callbacks_rejected_total{provider,reason}`) and, a few times a
//!    minute, a bounded sample for forensics (`guard`): an unauthenticated URL can never
//!    fill the table;
//! 3. **persist** the verified raw body and the headers worth keeping — unless the
//!    provider's backlog of unhandled callbacks is at its cap (503 and an alert) —
//!    then **normalise** to `{event_id, event_type, data}` and **dedupe** by the
//!    provider's event id (a unique key; only verified, normalised rows take it);
//! 4. **handle** — outside any transaction (R-INV-6), with the provider's
//!    [`CallbackHandler`], from the normalised payload;
//! 5. record the outcome. A failed handling submits a `callback_replay` job
//!    (`replay.rs`) that retries FROM THE STORED NORMALISED PAYLOAD.
//!
//! **R-CB-1:** only a callback that was verified, whose normalised payload was stored
//! and whose handling failed is ever replayed ([`replayable`]); an unverified or
//! unnormalised one never reaches a handler, neither at delivery nor later — not even
//! through a replay job submitted by hand. Replays never re-verify or re-normalise
//! with today's code: the stored verdict and payload are what was accepted.
//!
//! Duplicates (R-PAY-4): every verified delivery is stored (a provider re-sending an
//! event is worth seeing, and one re-sending it with a different body even more so);
//! the first verified, normalised delivery of an event id owns it, later ones are
//! marked `DUPLICATE` with `duplicate_of`. A duplicate of an event whose handling has
//! FINISHED is answered 200 without handling. A duplicate of one whose handling never
//! finished (still pending: the process died mid-handling; or failed, waiting for its
//! replay) **takes over**: the owner's stored payload is handled again now and the
//! outcome recorded on the owner — the provider's retry is never dropped as a
//! duplicate of work nobody completed. Handlers must be idempotent (R-INV-7): a
//! takeover or replay may run beside, or after, a handling whose outcome was lost.
//!
//! Every provider registered here is replayable in every process that runs jobs: the
//! composition root registers them all before it builds the replay handler.

pub mod api;
pub mod guard;
pub mod inbox;
pub mod normalize;
pub mod replay;
pub mod verify;

/// This capability's HTTP routes; the composition root merges them (`server::router`).
pub fn routes() -> axum::Router<crate::runtime::http::AppState> {
    use axum::routing::get;
    axum::Router::new()
        .route("/v1/callbacks", get(api::list))
        .route(
            "/v1/callbacks/{provider_or_id}",
            get(api::show).post(api::receive),
        )
}

pub use api::AnswerFormat;
pub use guard::CallbackLimits;
pub use normalize::{JsonPointers, NormalizeError, Normalized, Normalizer};
pub use replay::{replay_failed, ReplayFailedOptions, ReplayFailedReport, CALLBACK_REPLAY};
pub use verify::{Authenticator, Secret, Verifier, VerifyError};

use crate::infra::jobs::{Engine, JobSubmit};
use crate::infra::store::{Fence, StoreError};
use async_trait::async_trait;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Longest provider name (the `provider` column; also part of the URL).
pub const PROVIDER_CHARS_MAX: usize = 64;
/// Request headers always kept with a callback (besides the verifier's header and a
/// provider's `keep_headers`): enough to trace a delivery, nothing that authenticates
/// anyone else.
pub const STORED_HEADERS: &[&str] = &[
    "content-type",
    "user-agent",
    "x-request-id",
    "x-forwarded-for",
];
/// A stored header value keeps this many characters.
pub const HEADER_VALUE_CHARS_MAX: usize = 1_024;
/// Headers one provider may ask to keep besides [`STORED_HEADERS`].
pub const KEEP_HEADERS_MAX: usize = 16;

/// `verify_status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum VerifyStatus {
    /// Stored, not checked yet (or the process stopped before it was).
    Pending = 0,
    Verified = 1,
    Failed = 2,
}

impl VerifyStatus {
    pub fn from_code(code: i64) -> Option<VerifyStatus> {
        Some(match code {
            0 => VerifyStatus::Pending,
            1 => VerifyStatus::Verified,
            2 => VerifyStatus::Failed,
            _ => return None,
        })
    }
}

/// `handle_status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum HandleStatus {
    Pending = 0,
    Handled = 1,
    /// Handling failed: a replay retries it from the stored normalised payload.
    Failed = 2,
    /// Not handled because it was not verified or not normalisable; never replayed.
    Skipped = 3,
    /// Another delivery of the same provider event id was first; not handled again.
    Duplicate = 4,
}

impl HandleStatus {
    pub fn from_code(code: i64) -> Option<HandleStatus> {
        Some(match code {
            0 => HandleStatus::Pending,
            1 => HandleStatus::Handled,
            2 => HandleStatus::Failed,
            3 => HandleStatus::Skipped,
            4 => HandleStatus::Duplicate,
            _ => return None,
        })
    }

    /// A name (`FAILED`) or its number (`2`).
    pub fn parse(s: &str) -> Option<HandleStatus> {
        Some(match s.to_ascii_uppercase().as_str() {
            "PENDING" | "0" => HandleStatus::Pending,
            "HANDLED" | "1" => HandleStatus::Handled,
            "FAILED" | "2" => HandleStatus::Failed,
            "SKIPPED" | "3" => HandleStatus::Skipped,
            "DUPLICATE" | "4" => HandleStatus::Duplicate,
            _ => return None,
        })
    }
}

/// A callback as its handler sees it: the stored normalised payload and where it
/// came from. Never the raw body.
#[derive(Debug, Clone, PartialEq)]
pub struct NormalizedCallback {
    /// The `callback_inbox` row.
    pub callback_id: i64,
    pub provider: String,
    pub event_id: String,
    pub event_type: String,
    pub data: Value,
}

impl NormalizedCallback {
    fn new(callback_id: i64, provider: &str, n: Normalized) -> Self {
        NormalizedCallback {
            callback_id,
            provider: provider.to_owned(),
            event_id: n.event_id,
            event_type: n.event_type,
            data: n.data,
        }
    }
}

/// A handling that failed; it will be replayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallbackFailure {
    pub message: String,
    /// The handler's business write was refused by the replay round's fence.
    pub fenced: bool,
}

impl CallbackFailure {
    pub fn new(message: impl Into<String>) -> Self {
        CallbackFailure {
            message: message.into(),
            fenced: false,
        }
    }
}

impl From<StoreError> for CallbackFailure {
    fn from(e: StoreError) -> Self {
        CallbackFailure {
            fenced: matches!(e, StoreError::Fenced { .. }),
            message: e.to_string(),
        }
    }
}

impl<E: std::error::Error> From<crate::runtime::bus::BusError<E>> for CallbackFailure {
    fn from(e: crate::runtime::bus::BusError<E>) -> Self {
        match e {
            crate::runtime::bus::BusError::Store(s) => s.into(),
            other => CallbackFailure::new(other.to_string()),
        }
    }
}

/// Applies a provider's callbacks to the ledger.
#[async_trait]
pub trait CallbackHandler: Send + Sync + 'static {
    /// Apply one callback. Must be idempotent (R-INV-7): a replay can follow a
    /// handling whose success was never recorded, and business writes should take
    /// effect once by their own keys (ledger references, compare-and-set on state).
    /// `fence` is `Some` in a replay round: pass it to every unit the handler writes
    /// (`UnitOfWork::fence`, `CommandEnvelope::fence`) so a stale round writes nothing.
    async fn handle(
        &self,
        cb: &NormalizedCallback,
        fence: Option<Fence>,
    ) -> Result<(), CallbackFailure>;
}

/// One provider: how its callbacks are verified, normalised and handled.
#[derive(Clone)]
pub struct CallbackProvider {
    /// `[a-z0-9_-]`, 1 to 64 characters: the URL segment and the `provider` column.
    pub name: String,
    pub verifier: Verifier,
    pub normalizer: Arc<dyn Normalizer>,
    pub handler: Arc<dyn CallbackHandler>,
    /// Request headers kept with the raw body besides [`STORED_HEADERS`] and the
    /// verifier's (lower-case names; at most [`KEEP_HEADERS_MAX`]).
    pub keep_headers: Vec<String>,
    /// How the provider expects to be answered.
    pub answer: AnswerFormat,
}

impl CallbackProvider {
    pub fn new(
        name: impl Into<String>,
        verifier: Verifier,
        normalizer: Arc<dyn Normalizer>,
        handler: Arc<dyn CallbackHandler>,
    ) -> Self {
        CallbackProvider {
            name: name.into(),
            verifier,
            normalizer,
            handler,
            keep_headers: Vec::new(),
            answer: AnswerFormat::Json,
        }
    }

    /// Keep these request headers too (lower-case names).
    pub fn keeping(mut self, headers: &[&str]) -> Self {
        self.keep_headers = headers.iter().map(|h| (*h).to_owned()).collect();
        self
    }

    /// Answer deliveries in `answer`'s format.
    pub fn answering(mut self, answer: AnswerFormat) -> Self {
        self.answer = answer;
        self
    }

    fn check(&self) -> Result<(), CallbackError> {
        let name_ok = !self.name.is_empty()
            && self.name.len() <= PROVIDER_CHARS_MAX
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if !name_ok {
            return Err(CallbackError::Config(format!(
                "callback provider {:?}: names are [a-z0-9_-]{{1,{PROVIDER_CHARS_MAX}}}",
                self.name
            )));
        }
        let header_ok = |h: &str| {
            !h.is_empty()
                && h.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        };
        if !header_ok(self.verifier.header())
            || self.keep_headers.len() > KEEP_HEADERS_MAX
            || !self.keep_headers.iter().all(|h| header_ok(h))
        {
            return Err(CallbackError::Config(format!(
                "callback provider {}: header names are lower-case [a-z0-9_-], at most \
                 {KEEP_HEADERS_MAX} kept besides the standard ones",
                self.name
            )));
        }
        Ok(())
    }

    /// The headers of a delivery worth keeping, as a JSON object (a token verifier's
    /// header only as a fingerprint).
    fn stored_headers(&self, headers: &[(String, Vec<u8>)]) -> String {
        let mut kept: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for (name, value) in headers {
            let name = name.as_str();
            let text = if name == self.verifier.header() {
                self.verifier.stored_value(value)
            } else if STORED_HEADERS.contains(&name) || self.keep_headers.iter().any(|h| h == name)
            {
                String::from_utf8_lossy(value).into_owned()
            } else {
                continue;
            };
            kept.entry(name)
                .or_default()
                .push(text.chars().take(HEADER_VALUE_CHARS_MAX).collect());
        }
        let object: serde_json::Map<String, Value> = kept
            .into_iter()
            .map(|(k, mut v)| {
                let value = if v.len() == 1 {
                    Value::String(v.remove(0))
                } else {
                    json!(v)
                };
                (k.to_owned(), value)
            })
            .collect();
        Value::Object(object).to_string()
    }
}

/// The configured providers. Cheap to clone; empty by default (`serve` adds the payout
/// provider's when one is configured; embedders and tests register theirs through
/// `ServeOptions::callbacks`). Clones share one [`guard::Guard`] (rate buckets).
#[derive(Clone)]
pub struct Registry {
    providers: Arc<BTreeMap<String, CallbackProvider>>,
    guard: Arc<guard::Guard>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            providers: Arc::default(),
            guard: guard::Guard::new(CallbackLimits::default()),
        }
    }
}

impl Registry {
    /// A registry of these providers (valid, unique names).
    pub fn new(providers: Vec<CallbackProvider>) -> Result<Registry, CallbackError> {
        Registry::build(providers, CallbackLimits::default())
    }

    fn build(
        providers: Vec<CallbackProvider>,
        limits: CallbackLimits,
    ) -> Result<Registry, CallbackError> {
        let mut map = BTreeMap::new();
        for p in providers {
            p.check()?;
            let name = p.name.clone();
            if map.insert(name.clone(), p).is_some() {
                return Err(CallbackError::Config(format!(
                    "callback provider {name} is registered twice"
                )));
            }
        }
        if limits.rate_per_s == 0 || limits.burst == 0 || limits.backlog_max < 1 {
            return Err(CallbackError::Config(format!(
                "callback limits: rate, burst and backlog must be at least 1 (got {limits:?})"
            )));
        }
        Ok(Registry {
            providers: Arc::new(map),
            guard: guard::Guard::new(limits),
        })
    }

    /// These providers and `provider` (a new name), with the same limits.
    pub fn with(&self, provider: CallbackProvider) -> Result<Registry, CallbackError> {
        let mut all: Vec<CallbackProvider> = self.providers.values().cloned().collect();
        all.push(provider);
        Registry::build(all, self.guard.limits())
    }

    /// These providers under other limits.
    pub fn with_limits(&self, limits: CallbackLimits) -> Result<Registry, CallbackError> {
        Registry::build(self.providers.values().cloned().collect(), limits)
    }

    pub fn get(&self, name: &str) -> Option<&CallbackProvider> {
        self.providers.get(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.providers.keys().map(String::as_str)
    }
}

/// Errors of the callback inbox.
#[derive(Debug, thiserror::Error)]
pub enum CallbackError {
    #[error("provider: no callback provider {0:?} is configured")]
    UnknownProvider(String),
    #[error("callback configuration: {0}")]
    Config(String),
    #[error("callback inbox: {0}")]
    Internal(String),
    #[error("callback inbox database: {0}")]
    Database(#[from] sqlx::Error),
    #[error("provider {0}: too many callbacks at once; retry later")]
    RateLimited(String),
    #[error(
        "provider {provider}: {backlog} callbacks are stored and not handled yet (the cap); \
         retry later"
    )]
    Backlog { provider: String, backlog: i64 },
    #[error(transparent)]
    Job(#[from] crate::infra::jobs::JobError),
}

/// One HTTP delivery, as the API hands it over (names lower-case, values as sent).
#[derive(Debug, Clone)]
pub struct Delivery {
    pub provider: String,
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
}

/// What became of a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Receipt {
    Handled {
        id: i64,
    },
    Duplicate {
        id: i64,
        duplicate_of: i64,
    },
    /// Handling failed; `replay_job` (a job code) will retry it. `None` when the job
    /// could not be submitted: `replay_failed` (the cron backstop) will.
    Failed {
        id: i64,
        replay_job: Option<String>,
    },
    /// Signature or token wrong or missing: never handled; only counted, and kept as
    /// a bounded forensic sample (`sample`) a few times a minute.
    Unverified {
        sample: Option<i64>,
        error: VerifyError,
    },
    /// Verified, but the body could not be normalised: stored, never handled.
    NotNormalised {
        id: i64,
        error: NormalizeError,
    },
}

/// Receive one delivery: admit, verify, persist, normalise, dedupe, handle, record
/// (the module's steps). Database errors after the row is stored leave it behind with
/// whatever the last step wrote; the provider, seeing a 5xx, delivers again, and that
/// delivery takes the unfinished handling over.
#[tracing::instrument(skip_all, fields(provider = %delivery.provider, callback_id))]
pub async fn receive(
    engine: &Engine,
    registry: &Registry,
    delivery: Delivery,
) -> Result<Receipt, CallbackError> {
    let db = engine.db();
    let provider = registry
        .get(&delivery.provider)
        .ok_or_else(|| CallbackError::UnknownProvider(delivery.provider.clone()))?;
    if !registry.guard.admit(&provider.name) {
        metrics::counter!(
            "factledger_callbacks_rejected_total",
            "provider" => provider.name.clone(),
            "reason" => "rate_limited",
        )
        .increment(1);
        return Err(CallbackError::RateLimited(provider.name.clone()));
    }
    let headers = provider.stored_headers(&delivery.headers);
    if let Err(error) = provider.verifier.verify_delivery(
        &provider.name,
        &delivery.headers,
        &delivery.body,
        crate::infra::db::now_ms(),
    ) {
        tracing::warn!(%error, "callback refused: not verified");
        let sample = registry
            .guard
            .refused(
                db,
                &provider.name,
                error.reason(),
                &headers,
                &delivery.body,
                &error.to_string(),
            )
            .await?;
        return Ok(Receipt::Unverified { sample, error });
    }
    let backlog_max = registry.guard.limits().backlog_max;
    let backlog = inbox::unprocessed(db, &provider.name, backlog_max).await?;
    if backlog >= backlog_max {
        backlog_alert(engine, registry, &provider.name, backlog).await;
        return Err(CallbackError::Backlog {
            provider: provider.name.clone(),
            backlog,
        });
    }
    let id = inbox::insert_raw(db, &provider.name, &headers, &delivery.body).await?;
    tracing::Span::current().record("callback_id", id);
    let normalized = match provider
        .normalizer
        .normalize_delivery(&delivery.headers, &delivery.body)
    {
        Ok(n) => n,
        Err(error) => {
            tracing::warn!(callback_id = id, %error, "verified callback could not be normalised");
            inbox::record_unnormalised(db, id, &error.0).await?;
            return Ok(Receipt::NotNormalised { id, error });
        }
    };
    match inbox::claim_event(db, id, &provider.name, &normalized).await? {
        inbox::Claim::Duplicate { of } => takeover(engine, provider, id, of).await,
        inbox::Claim::Owner => {
            let cb = NormalizedCallback::new(id, &provider.name, normalized);
            handle_inline(engine, provider, &cb).await
        }
    }
}

/// A duplicate delivery of event `owner`: answered as a duplicate when the owner's
/// handling finished; otherwise the owner's stored payload is handled now (see the
/// module docs) and the outcome recorded on the owner.
async fn takeover(
    engine: &Engine,
    provider: &CallbackProvider,
    id: i64,
    owner: i64,
) -> Result<Receipt, CallbackError> {
    let db = engine.db();
    let row = inbox::load(db, owner)
        .await?
        .ok_or_else(|| CallbackError::Internal(format!("callback {owner} vanished")))?;
    let unfinished = matches!(
        row.summary.handle_status,
        HandleStatus::Pending | HandleStatus::Failed
    );
    let stored = row.normalized_payload.as_deref();
    let Some(n) = stored
        .filter(|_| unfinished)
        .and_then(|p| serde_json::from_str::<Normalized>(p).ok())
    else {
        tracing::info!(callback_id = id, duplicate_of = owner, "duplicate callback");
        return Ok(Receipt::Duplicate {
            id,
            duplicate_of: owner,
        });
    };
    tracing::info!(
        callback_id = id,
        duplicate_of = owner,
        owner_status = ?row.summary.handle_status,
        "duplicate of an unfinished callback: handling it now"
    );
    let cb = NormalizedCallback::new(owner, &provider.name, n);
    let outcome = provider.handler.handle(&cb, None).await;
    inbox::record_takeover_outcome(
        db,
        owner,
        outcome.as_ref().map(|_| ()).map_err(|f| f.message.as_str()),
    )
    .await?;
    match outcome {
        Ok(()) => Ok(Receipt::Handled { id: owner }),
        Err(failure) => {
            tracing::warn!(callback_id = owner, error = %failure.message, "callback handling failed again; a replay will retry it");
            let replay_job = submit_replay(engine, owner, &provider.name).await;
            Ok(Receipt::Failed {
                id: owner,
                replay_job,
            })
        }
    }
}

/// Raise the `callback.backlog` alert (at most once a minute per provider).
async fn backlog_alert(engine: &Engine, registry: &Registry, provider: &str, backlog: i64) {
    if !registry.guard.backlog_alert_due(provider) {
        return;
    }
    let alert = crate::infra::alerts::Alert {
        kind: crate::infra::alerts::AlertKind::CallbackBacklog,
        subject: provider.to_owned(),
        message: format!(
            "provider {provider}: {backlog} callbacks stored and not handled (the cap); new \
             deliveries are refused with 503 until handling catches up"
        ),
        job: None,
        platform: Some(provider.to_owned()),
        business_id: None,
        user_affiliate_code: None,
        request_id: None,
        trace_id: None,
        first_failure_at_ms: None,
        retry_count: None,
        audit_path: format!("/v1/callbacks?provider={provider}&handle_status=FAILED"),
    };
    if let Err(e) =
        crate::infra::alerts::raise(engine.store(), &engine.config().alerts, &alert).await
    {
        tracing::error!(provider, error = %e, "could not raise the callback backlog alert");
    }
}

/// Step 3 and 4 at delivery: handle once, record; on failure submit the replay job.
async fn handle_inline(
    engine: &Engine,
    provider: &CallbackProvider,
    cb: &NormalizedCallback,
) -> Result<Receipt, CallbackError> {
    let id = cb.callback_id;
    let outcome = provider.handler.handle(cb, None).await;
    let recorded = inbox::record_inline_outcome(
        engine.db(),
        id,
        outcome.as_ref().map(|_| ()).map_err(|f| f.message.as_str()),
    )
    .await?;
    if !recorded {
        // Only `fail_interrupted` moves a pending row, and only long after delivery.
        tracing::warn!(
            callback_id = id,
            "callback was no longer pending; outcome not recorded"
        );
    }
    match outcome {
        Ok(()) => Ok(Receipt::Handled { id }),
        Err(failure) => {
            tracing::warn!(callback_id = id, error = %failure.message, "callback handling failed; a replay will retry it");
            let replay_job = submit_replay(engine, id, &provider.name).await;
            Ok(Receipt::Failed { id, replay_job })
        }
    }
}

/// Submit the replay job of a failed callback. The first round waits one backoff step
/// (the delivery itself was the first attempt; retrying at once would mostly meet the
/// same failure), so it is not kicked. A submit that fails is logged and left to
/// `replay_failed`: it never undoes the recorded failure (R-JOB-9).
async fn submit_replay(engine: &Engine, id: i64, provider: &str) -> Option<String> {
    let job = JobSubmit::plain(
        &CALLBACK_REPLAY,
        replay::business_key(id),
        replay::payload(id, provider),
    )
    .due_at_ms(crate::infra::db::now_ms() + replay::FIRST_REPLAY_DELAY_MS);
    match replay::submit_all(engine, &[job], false).await {
        Ok(mut codes) => codes.pop(),
        Err(e) => {
            tracing::error!(callback_id = id, provider, error = %e, "could not submit the callback replay job; replay_failed will");
            None
        }
    }
}

/// Why a stored callback may not be replayed, or `Ok` when it may (R-CB-1): verified,
/// normalised payload stored, handling failed. Everything else is refused, whoever
/// asks.
pub fn replayable(
    verify_status: VerifyStatus,
    normalized: bool,
    handle_status: HandleStatus,
) -> Result<(), &'static str> {
    if verify_status != VerifyStatus::Verified {
        return Err("not replayed: the callback was not verified");
    }
    if !normalized {
        return Err("not replayed: the callback has no normalised payload");
    }
    match handle_status {
        HandleStatus::Failed => Ok(()),
        HandleStatus::Handled => Err("nothing to replay: the callback is already handled"),
        HandleStatus::Duplicate => Err("not replayed: the callback is a duplicate"),
        HandleStatus::Skipped => Err("not replayed: the callback was skipped"),
        HandleStatus::Pending => Err("not replayed: the callback's handling has not failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_verified_normalised_failed_callbacks_are_replayable() {
        use HandleStatus as H;
        use VerifyStatus as V;
        // (verify, normalised, handle) → replayable
        let table = [
            (V::Verified, true, H::Failed, true),
            (V::Verified, true, H::Handled, false),
            (V::Verified, true, H::Pending, false),
            (V::Verified, true, H::Duplicate, false),
            (V::Verified, false, H::Failed, false),
            (V::Verified, false, H::Skipped, false),
            // Counter-intuitive: a row someone marked failed by hand is still refused
            // when its signature never verified.
            (V::Failed, true, H::Failed, false),
            (V::Failed, false, H::Failed, false),
            (V::Pending, true, H::Failed, false),
            (V::Failed, false, H::Skipped, false),
        ];
        for (v, n, h, ok) in table {
            assert_eq!(replayable(v, n, h).is_ok(), ok, "{v:?} {n} {h:?}");
        }
    }

    #[test]
    fn handle_statuses_parse_by_name_or_number() {
        assert_eq!(HandleStatus::parse("failed"), Some(HandleStatus::Failed));
        assert_eq!(HandleStatus::parse("4"), Some(HandleStatus::Duplicate));
        assert_eq!(HandleStatus::parse("done"), None);
        for code in 0..5 {
            assert_eq!(HandleStatus::from_code(code).map(|s| s as i64), Some(code));
        }
    }

    struct Nop;

    #[async_trait]
    impl CallbackHandler for Nop {
        async fn handle(
            &self,
            _: &NormalizedCallback,
            _: Option<Fence>,
        ) -> Result<(), CallbackFailure> {
            Ok(())
        }
    }

    fn provider(name: &str, verifier: Verifier) -> CallbackProvider {
        CallbackProvider::new(
            name,
            verifier,
            Arc::new(JsonPointers::new("/id", "/type")),
            Arc::new(Nop),
        )
    }

    #[test]
    fn providers_need_unique_well_formed_names() {
        let v = || Verifier::hmac(None, "x-sig");
        assert!(Registry::new(vec![provider("acme-pay", v())]).is_ok());
        assert!(Registry::new(vec![provider("acme", v()), provider("acme", v())]).is_err());
        assert!(Registry::new(vec![provider("Acme Pay", v())]).is_err());
        assert!(Registry::new(vec![provider("acme", Verifier::hmac(None, "X Sig"))]).is_err());
    }

    #[test]
    fn stored_headers_keep_what_traces_a_delivery_and_never_a_token() {
        let p = CallbackProvider {
            keep_headers: vec!["webhook-id".into()],
            ..provider(
                "xendit",
                Verifier::token(Some(Secret::new("tok")), "x-callback-token"),
            )
        };
        let headers = vec![
            ("content-type".to_owned(), b"application/json".to_vec()),
            ("x-callback-token".to_owned(), b"tok".to_vec()),
            ("webhook-id".to_owned(), b"wh-1".to_vec()),
            ("authorization".to_owned(), b"Bearer other".to_vec()),
            ("cookie".to_owned(), b"a=b".to_vec()),
        ];
        let stored: Value = serde_json::from_str(&p.stored_headers(&headers)).unwrap();
        assert_eq!(stored["content-type"], "application/json");
        assert_eq!(stored["webhook-id"], "wh-1");
        assert!(stored["x-callback-token"]
            .as_str()
            .unwrap()
            .starts_with("redacted"));
        assert!(stored.get("authorization").is_none() && stored.get("cookie").is_none());
    }
}
