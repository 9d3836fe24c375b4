//! The Xendit payout adapter: [`PayoutProvider`] over Xendit's **Payouts API (v2)**,
//! and the reading of its payout webhooks. `tools/payout-sim` speaks the same API.
//!
//! **Why the Payouts API and not the legacy `/disbursements`.** Xendit documents the
//! v2 Payouts API as the current one for bank and e-wallet payouts in every country
//! we pay out in (ID, PH, and later VN, TH, MY) under one `channel_code`
//! vocabulary (`ID_BCA`, `PH_GCASH`); its idempotency is a documented header with a
//! documented replay (same key and body → the first payout; same key, other body →
//! `DUPLICATE_ERROR`), it can be looked up by our reference and cancelled while
//! `ACCEPTED`, and its webhooks report `REVERSED`. The legacy disbursement API is
//! Indonesia-only and its callbacks never report a reversal. (`/v3/payouts` is newer:
//! versioned by an `api-version` header, shaped for cross-border payouts, with its
//! own `v3_payout.*` webhooks; v2 is the version Xendit's official SDKs — xendit-go,
//! xendit-node, xendit-python — publish models for, which the contract tests use.)
//! `POST /v2/payouts/{id}/cancel` is not used: the ledger never cancels a payout it
//! asked for (a withdrawal is settled by the provider's answer, never withdrawn).
//!
//! | call | request |
//! |---|---|
//! | create | `POST /v2/payouts`, `Idempotency-key: <our reference>`, body `{reference_id, channel_code, channel_properties: {account_number, account_holder_name}, amount, currency, description}` |
//! | look-up | `GET /v2/payouts?reference_id=<our reference>` |
//! | daily report | `GET /transactions?types=DISBURSEMENT&created[gte]=…&created[lt]=…` with cursor paging ([`report`]) |
//!
//! Every call authenticates with HTTP Basic, the secret key as user name and an empty
//! password; the key appears in no log, error or [`CallRecord`], and one not shaped
//! like a Xendit secret key is refused at start ([`wire::check_secret_key`]).
//! `amount` is a JSON number in the currency's major unit, written and read exactly
//! ([`amount`]).
//!
//! How a create answer maps (the rule: `Refused` only when nothing can have been
//! created):
//!
//! | create answer | outcome |
//! |---|---|
//! | 2xx, a Payout object matching the request | `Created`, its status mapped ([`wire`]) |
//! | 400 `INSUFFICIENT_BALANCE` | `Refused { recoverable: true }` |
//! | other 4xx (`API_VALIDATION_ERROR`, `CHANNEL_CODE_NOT_SUPPORTED_ERROR`, `RECIPIENT_ACCOUNT_NUMBER_ERROR`, `RECIPIENT_AMOUNT_ERROR`, `MAXIMUM_TRANSFER_LIMIT_ERROR`, …) | `Refused { recoverable: false }` |
//! | 401, 403, 408, 409, 429, or a duplicate-key code ([`answers::DUPLICATE_CODES`]) | `Unknown` (says nothing about whether this reference's payout exists) |
//! | 5xx, timeout, connection error, unreadable or contradicting 2xx | `Unknown` |
//!
//! A look-up is `Absent` only on 200 with no payout of this reference (Xendit
//! documents an empty array), `Found` on 200 with it, `Unknown` otherwise (a 404
//! from a proxy or a wrong path proves nothing).
//!
//! **Webhooks** ([`callback`]): authenticated by `x-callback-token`, deduplicated by
//! the `webhook-id` header where sent, else by `<payout id>:<status>`.

pub mod amount;
pub mod answers;
pub mod callback;
pub mod report;
pub mod wire;

pub use amount::{digits as currency_digits, from_major, to_major};
pub use wire::{check_callback_token, check_secret_key, INSUFFICIENT_BALANCE};

use super::provider::{
    truncate_response, CallRecord, CreateOutcome, PayoutProvider, PayoutRequest, ProviderError,
    ProviderPayout, QueryOutcome,
};
use crate::infra::outbound::{describe, read_body};
use answers::{map_create, map_query};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use wire::CreateBody;

/// This provider's name in records and logs.
pub const NAME: &str = "xendit";
/// Xendit's API (live and test mode share it; the secret key chooses).
pub const PRODUCTION_URL: &str = "https://api.xendit.co";
/// The header Xendit's webhooks carry the verification token in.
pub const CALLBACK_TOKEN_HEADER: &str = "x-callback-token";
/// The header a create's idempotency key goes in (as Xendit spells it).
pub const IDEMPOTENCY_KEY_HEADER: &str = "Idempotency-key";
/// Longest idempotency key Xendit takes; our references are at most 96 + 4 + 10.
pub const IDEMPOTENCY_KEY_CHARS_MAX: usize = 100;
/// A create or query answer's time limit unless configured.
pub const TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);
/// Connecting takes at most this long (within the call's timeout).
pub const CONNECT_TIMEOUT_MAX: Duration = Duration::from_secs(5);
/// Largest create or query answer read (a payout is about a kilobyte).
pub const RESPONSE_BYTES_MAX: usize = 1024 * 1024;
/// Largest page of the daily report read ([`report::PAGE_LIMIT`] transactions).
pub const REPORT_PAGE_BYTES_MAX: usize = 4 * 1024 * 1024;
/// One report page's time limit.
pub const REPORT_TIMEOUT: Duration = Duration::from_secs(60);

/// How to reach Xendit.
#[derive(Clone)]
pub struct XenditConfig {
    /// e.g. `https://api.xendit.co`, or the simulator's `http://127.0.0.1:9200`.
    pub base_url: String,
    /// `xnd_development_…` or `xnd_production_…`.
    pub secret_key: String,
    /// Time limit of one create or query ([`TIMEOUT_DEFAULT`]).
    pub timeout: Duration,
}

impl XenditConfig {
    pub fn new(base_url: impl Into<String>, secret_key: impl Into<String>) -> XenditConfig {
        XenditConfig {
            base_url: base_url.into(),
            secret_key: secret_key.into(),
            timeout: TIMEOUT_DEFAULT,
        }
    }
}

impl std::fmt::Debug for XenditConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XenditConfig")
            .field("base_url", &self.base_url)
            .field("secret_key", &"<redacted>")
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// The adapter; cheap to share (one connection pool).
#[derive(Debug, Clone)]
pub struct XenditProvider {
    config: XenditConfig,
    client: reqwest::Client,
}

fn elapsed_ms(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// What came back from one call: the status and body, or why nothing did.
struct Answer {
    status: Option<u16>,
    body: Result<Vec<u8>, String>,
}

impl XenditProvider {
    pub fn new(config: XenditConfig) -> Result<XenditProvider, ProviderError> {
        let url = &config.base_url;
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(ProviderError::Config(format!(
                "base URL {url:?} is not http(s)"
            )));
        }
        check_secret_key(&config.secret_key).map_err(ProviderError::Config)?;
        let client = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(CONNECT_TIMEOUT_MAX.min(config.timeout))
            // A payout API has no business redirecting; following one could send the
            // credentials elsewhere.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| ProviderError::Config(e.to_string()))?;
        Ok(XenditProvider { config, client })
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.config.base_url.trim_end_matches('/'))
    }

    /// Sends `request` with the credentials; the answer's status and body.
    async fn call(&self, request: reqwest::RequestBuilder) -> Answer {
        let sent = request
            .basic_auth(&self.config.secret_key, None::<&str>)
            .send()
            .await;
        match sent {
            Ok(response) => Answer {
                status: Some(response.status().as_u16()),
                body: read_body(response, RESPONSE_BYTES_MAX).await,
            },
            Err(e) => Answer {
                status: None,
                body: Err(describe(&e, self.config.timeout)),
            },
        }
    }
}

fn record(operation: &'static str, request: Value, answer: &Answer, start: Instant) -> CallRecord {
    CallRecord {
        operation,
        request,
        http_status: answer.status,
        response: answer.body.as_ref().ok().map(|b| truncate_response(b)),
        elapsed_ms: elapsed_ms(start),
    }
}

#[async_trait::async_trait]
impl PayoutProvider for XenditProvider {
    fn name(&self) -> &str {
        NAME
    }

    #[tracing::instrument(skip_all, fields(provider = NAME, reference = %request.reference))]
    async fn create(&self, request: &PayoutRequest) -> (CreateOutcome, CallRecord) {
        let start = Instant::now();
        let body = match CreateBody::of(request) {
            Ok(b) => b,
            // Nothing was sent: nothing can have been created.
            Err(message) => {
                let record = CallRecord {
                    operation: "create",
                    request: json!({"idempotency_key": request.reference}),
                    http_status: None,
                    response: None,
                    elapsed_ms: elapsed_ms(start),
                };
                let outcome = CreateOutcome::Refused {
                    code: "UNSUPPORTED_CURRENCY".into(),
                    message,
                    recoverable: false,
                };
                return (outcome, record);
            }
        };
        let answer = self
            .call(
                self.client
                    .post(self.url("/v2/payouts"))
                    .header(IDEMPOTENCY_KEY_HEADER, &request.reference)
                    .json(&body),
            )
            .await;
        let outcome = match (answer.status, &answer.body) {
            (Some(status), Ok(bytes)) => map_create(request, status, bytes),
            (Some(status), Err(e)) => CreateOutcome::Unknown {
                reason: format!("HTTP {status}, then the body failed: {e}"),
            },
            (None, Err(e)) => CreateOutcome::Unknown { reason: e.clone() },
            (None, Ok(_)) => CreateOutcome::Unknown {
                reason: "no answer".into(),
            },
        };
        if let CreateOutcome::Unknown { reason } = &outcome {
            tracing::warn!(%reason, "payout create outcome unknown");
        }
        (
            outcome,
            record("create", sent_record(request, &body), &answer, start),
        )
    }

    #[tracing::instrument(skip_all, fields(provider = NAME, %reference))]
    async fn query(&self, reference: &str) -> (QueryOutcome, CallRecord) {
        let start = Instant::now();
        let answer = self
            .call(
                self.client
                    .get(self.url("/v2/payouts"))
                    .query(&[("reference_id", reference)]),
            )
            .await;
        let outcome = match (answer.status, &answer.body) {
            (Some(status), Ok(bytes)) => map_query(reference, status, bytes),
            (_, Err(e)) => QueryOutcome::Unknown { reason: e.clone() },
            (None, Ok(_)) => QueryOutcome::Unknown {
                reason: "no answer".into(),
            },
        };
        let sent = json!({"reference_id": reference});
        (outcome, record("query", sent, &answer, start))
    }

    #[tracing::instrument(skip_all, fields(provider = NAME, %date))]
    async fn report(&self, date: chrono::NaiveDate) -> Result<Vec<ProviderPayout>, ProviderError> {
        let mut payouts = Vec::new();
        let mut after: Option<String> = None;
        for _ in 0..report::PAGES_MAX {
            let response = self
                .client
                .get(self.url("/transactions"))
                .query(&report::query(date, after.as_deref()))
                .timeout(REPORT_TIMEOUT)
                .basic_auth(&self.config.secret_key, None::<&str>)
                .send()
                .await
                .map_err(|e| ProviderError::Transport(describe(&e, REPORT_TIMEOUT)))?;
            let status = response.status().as_u16();
            let body = read_body(response, REPORT_PAGE_BYTES_MAX)
                .await
                .map_err(ProviderError::Transport)?;
            if status != 200 {
                return Err(ProviderError::Status {
                    status,
                    body: truncate_response(&body),
                });
            }
            let page = report::read_page(&body).map_err(ProviderError::Body)?;
            payouts.extend(page.payouts);
            match page.next_after_id {
                Some(id) => after = Some(id),
                None => return Ok(payouts),
            }
        }
        Err(ProviderError::Body(format!(
            "more than {} pages of transactions on {date}",
            report::PAGES_MAX
        )))
    }
}

/// What a create sent, for the audit trail: the key and the body, the amount as the
/// exact decimal text it went out as.
fn sent_record(request: &PayoutRequest, body: &CreateBody<'_>) -> Value {
    let mut sent = serde_json::to_value(body).unwrap_or(Value::Null);
    if let Some(obj) = sent.as_object_mut() {
        obj.insert("amount".into(), Value::String(body.amount.get().to_owned()));
    }
    json!({"idempotency_key": request.reference, "body": sent})
}

#[cfg(test)]
mod contract_tests;
#[cfg(test)]
mod tests;
