//! The Xendit disbursement adapter: [`PayoutProvider`] over Xendit's HTTP API
//! (`POST /disbursements`, `GET /disbursements?external_id=`, and the daily report),
//! and the parsing of its callbacks. `tools/payout-sim` simulates the same API.
//!
//! How answers map (the rule: `Refused` only when nothing can have been created):
//!
//! | create answer                                         | outcome                        |
//! |-------------------------------------------------------|--------------------------------|
//! | 2xx, a disbursement matching the request              | `Created` (PENDING → Accepted, COMPLETED → Succeeded, FAILED → Failed) |
//! | 400 `INSUFFICIENT_BALANCE`                            | `Refused { recoverable: true }` |
//! | other 4xx (validation: the request is wrong)          | `Refused { recoverable: false }` |
//! | 401, 403, 408, 409, 429, `DUPLICATE_TRANSACTION_ERROR` | `Unknown` (says nothing about whether this reference's payout exists) |
//! | 5xx, timeout, connection error, unreadable or contradicting 2xx | `Unknown`            |
//!
//! A query is `Absent` only on 404 with `DIRECT_DISBURSEMENT_NOT_FOUND_ERROR` (a 404
//! from a proxy or a wrong path proves nothing), `Found` on 200 with the disbursement
//! of this reference, `Unknown` otherwise.
//!
//! The secret key is sent as HTTP Basic auth and appears in no log, error or
//! [`CallRecord`].

use super::provider::{
    truncate_response, CallRecord, CreateOutcome, PayoutProvider, PayoutRequest, ProviderError,
    ProviderPayout, ProviderStatus, QueryOutcome,
};
use crate::infra::outbound::{describe, read_body};
use serde::Deserialize;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// This provider's name in records and logs.
pub const NAME: &str = "xendit";
/// Xendit's API (live and test mode share it; the secret key chooses).
pub const PRODUCTION_URL: &str = "https://api.xendit.co";
/// The header Xendit's callbacks carry the verification token in.
pub const CALLBACK_TOKEN_HEADER: &str = "x-callback-token";
/// The header a create's idempotency key goes in.
pub const IDEMPOTENCY_KEY_HEADER: &str = "X-IDEMPOTENCY-KEY";
/// Where a callback's event id is (RFC 6901). Xendit itself sends none; the
/// simulator and a relay in front of Xendit add `event_id` so deliveries dedupe.
pub const CALLBACK_EVENT_ID_POINTER: &str = "/event_id";
/// Where a callback's event type is: the disbursement status it reports.
pub const CALLBACK_EVENT_TYPE_POINTER: &str = "/status";
/// A create or query answer's time limit unless configured.
pub const TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);
/// Connecting takes at most this long (within the call's timeout).
pub const CONNECT_TIMEOUT_MAX: Duration = Duration::from_secs(5);
/// Largest create or query answer read (a disbursement is a few hundred bytes).
pub const RESPONSE_BYTES_MAX: usize = 1024 * 1024;
/// Largest daily report read (10,000 payouts are about 2 MB).
pub const REPORT_BYTES_MAX: usize = 64 * 1024 * 1024;
/// A report's time limit (it is large and read by a batch job).
pub const REPORT_TIMEOUT: Duration = Duration::from_secs(120);
/// The failure code that means "try again later": the provider balance was short.
pub const INSUFFICIENT_BALANCE: &str = "INSUFFICIENT_BALANCE";
/// Xendit's error code for "no disbursement with this external id".
pub const NOT_FOUND_CODE: &str = "DIRECT_DISBURSEMENT_NOT_FOUND_ERROR";

/// Where the callback normaliser finds a callback's event id and type; the
/// composition root turns them into the callback inbox's JSON pointers (this
/// capability does not import the callbacks capability).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallbackPointers {
    pub event_id: &'static str,
    pub event_type: &'static str,
}

/// The JSON pointers of a Xendit (simulator-shaped) disbursement callback.
pub const fn callback_pointers() -> CallbackPointers {
    CallbackPointers {
        event_id: CALLBACK_EVENT_ID_POINTER,
        event_type: CALLBACK_EVENT_TYPE_POINTER,
    }
}

/// How to reach Xendit.
#[derive(Clone)]
pub struct XenditConfig {
    /// e.g. `https://api.xendit.co`, or the simulator's `http://127.0.0.1:9200`.
    pub base_url: String,
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

/// A disbursement as Xendit answers it (create, query, callback).
#[derive(Debug, Deserialize)]
struct DisbursementBody {
    id: String,
    external_id: String,
    /// Integer minor units (the simulator's deviation from Xendit, see payout-sim).
    amount: i64,
    currency: String,
    status: String,
    #[serde(default)]
    failure_code: Option<String>,
}

impl DisbursementBody {
    fn payout(self) -> Result<ProviderPayout, String> {
        let status = status(&self.status, self.failure_code.as_deref())?;
        Ok(ProviderPayout {
            provider_id: self.id,
            reference: self.external_id,
            amount_minor: self.amount,
            currency: self.currency,
            status,
        })
    }
}

/// Xendit's status (and failure code) as a [`ProviderStatus`]; an unknown status is
/// an error, never a guess.
fn status(status: &str, failure_code: Option<&str>) -> Result<ProviderStatus, String> {
    match status {
        "PENDING" => Ok(ProviderStatus::Accepted),
        "COMPLETED" => Ok(ProviderStatus::Succeeded),
        "FAILED" => {
            let code = failure_code
                .filter(|c| !c.is_empty())
                .unwrap_or("UNKNOWN_FAILURE");
            Ok(ProviderStatus::Failed {
                code: code.to_owned(),
                recoverable: code == INSUFFICIENT_BALANCE,
            })
        }
        other => Err(format!("unknown disbursement status {other:?}")),
    }
}

/// Reads a callback body (the disbursement it reports, see the crate docs of
/// payout-sim for the shape).
pub fn parse_callback(data: &Value) -> Result<ProviderPayout, String> {
    let body: DisbursementBody =
        serde_json::from_value(data.clone()).map_err(|e| format!("callback: {e}"))?;
    body.payout().map_err(|e| format!("callback: {e}"))
}

/// Xendit's error body.
#[derive(Debug, Default, Deserialize)]
struct ErrorBody {
    #[serde(default)]
    error_code: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

/// A create answer as an outcome (see the module docs' table).
fn map_create(request: &PayoutRequest, status: u16, body: &[u8]) -> CreateOutcome {
    let unknown = |reason: String| CreateOutcome::Unknown { reason };
    if (200..300).contains(&status) {
        let payout = serde_json::from_slice::<DisbursementBody>(body)
            .map_err(|e| format!("HTTP {status} with an unreadable body: {e}"))
            .and_then(DisbursementBody::payout);
        return match payout {
            Ok(p) => match contradiction(request, &p) {
                None => CreateOutcome::Created(p),
                Some(why) => unknown(why),
            },
            Err(e) => unknown(e),
        };
    }
    let error: ErrorBody = serde_json::from_slice(body).unwrap_or_default();
    let code = error.error_code.unwrap_or_else(|| format!("HTTP_{status}"));
    let message = error.message.unwrap_or_default();
    match status {
        // Not about this payout: the key, the rate, the clock — it may exist.
        401 | 403 | 408 | 409 | 429 => unknown(format!("HTTP {status} {code}: {message}")),
        // The key was used before: a payout for this reference may well exist.
        400..=499 if code == "DUPLICATE_TRANSACTION_ERROR" => {
            unknown(format!("HTTP {status} {code}: {message}"))
        }
        400..=499 => CreateOutcome::Refused {
            recoverable: code == INSUFFICIENT_BALANCE,
            code,
            message,
        },
        _ => unknown(format!("HTTP {status} {code}: {message}")),
    }
}

/// Why `payout` is not the payout `request` asked for, if it is not.
fn contradiction(request: &PayoutRequest, payout: &ProviderPayout) -> Option<String> {
    if payout.reference != request.reference {
        return Some(format!(
            "answered external_id {:?} for reference {:?}",
            payout.reference, request.reference
        ));
    }
    if payout.amount_minor != request.amount_minor || payout.currency != request.currency.as_str() {
        return Some(format!(
            "answered {} {} for a payout of {} {}",
            payout.amount_minor, payout.currency, request.amount_minor, request.currency
        ));
    }
    None
}

/// A query answer as an outcome. Several disbursements with our reference: they must
/// agree on the amount; at most one may be live (not FAILED) — two live ones are a
/// double payout, which only a person can sort out.
fn map_query(reference: &str, status: u16, body: &[u8]) -> QueryOutcome {
    let unknown = |reason: String| QueryOutcome::Unknown { reason };
    match status {
        200 => {}
        404 => {
            let error: ErrorBody = serde_json::from_slice(body).unwrap_or_default();
            return if error.error_code.as_deref() == Some(NOT_FOUND_CODE) {
                QueryOutcome::Absent
            } else {
                unknown(format!("HTTP 404 without {NOT_FOUND_CODE}"))
            };
        }
        _ => return unknown(format!("HTTP {status}")),
    }
    let listed: Vec<DisbursementBody> = match serde_json::from_slice(body) {
        Ok(l) => l,
        Err(e) => return unknown(format!("HTTP 200 with an unreadable body: {e}")),
    };
    let mut mine = Vec::new();
    for d in listed.into_iter().filter(|d| d.external_id == reference) {
        match d.payout() {
            Ok(p) => mine.push(p),
            Err(e) => return unknown(e),
        }
    }
    let Some(first) = mine.first() else {
        return unknown(format!(
            "HTTP 200 lists no disbursement with external_id {reference:?}"
        ));
    };
    if mine
        .iter()
        .any(|p| p.amount_minor != first.amount_minor || p.currency != first.currency)
    {
        return unknown(format!(
            "{} disbursements for {reference:?} contradict each other's amounts",
            mine.len()
        ));
    }
    let live: Vec<&ProviderPayout> = mine
        .iter()
        .filter(|p| !matches!(p.status, ProviderStatus::Failed { .. }))
        .collect();
    match live.as_slice() {
        [one] => QueryOutcome::Found((*one).clone()),
        [] => mine
            .pop()
            .map(QueryOutcome::Found)
            .unwrap_or_else(|| unknown("no disbursement".into())),
        many => unknown(format!(
            "{} live disbursements for {reference:?}: a double payout",
            many.len()
        )),
    }
}

/// A daily report row.
#[derive(Debug, Deserialize)]
struct ReportRow {
    id: String,
    external_id: String,
    amount: i64,
    currency: String,
    status: String,
    #[serde(default)]
    failure_code: Option<String>,
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
        let body = json!({
            "external_id": request.reference,
            "amount": request.amount_minor,
            "currency": request.currency.as_str(),
            "bank_code": request.channel_code,
            "account_holder_name": request.account_holder,
            "account_number": request.account_number,
            "description": request.description,
        });
        let start = Instant::now();
        let answer = self
            .call(
                self.client
                    .post(self.url("/disbursements"))
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
        let sent = json!({"idempotency_key": request.reference, "body": body});
        (outcome, record("create", sent, &answer, start))
    }

    #[tracing::instrument(skip_all, fields(provider = NAME, %reference))]
    async fn query(&self, reference: &str) -> (QueryOutcome, CallRecord) {
        let start = Instant::now();
        let answer = self
            .call(
                self.client
                    .get(self.url("/disbursements"))
                    .query(&[("external_id", reference)]),
            )
            .await;
        let outcome = match (answer.status, &answer.body) {
            (Some(status), Ok(bytes)) => map_query(reference, status, bytes),
            (_, Err(e)) => QueryOutcome::Unknown { reason: e.clone() },
            (None, Ok(_)) => QueryOutcome::Unknown {
                reason: "no answer".into(),
            },
        };
        let sent = json!({"external_id": reference});
        (outcome, record("query", sent, &answer, start))
    }

    #[tracing::instrument(skip_all, fields(provider = NAME, %date))]
    async fn report(&self, date: chrono::NaiveDate) -> Result<Vec<ProviderPayout>, ProviderError> {
        let response = self
            .client
            .get(self.url("/reports/disbursements"))
            .query(&[("date", date.format("%Y-%m-%d").to_string())])
            .timeout(REPORT_TIMEOUT)
            .basic_auth(&self.config.secret_key, None::<&str>)
            .send()
            .await
            .map_err(|e| ProviderError::Transport(describe(&e, REPORT_TIMEOUT)))?;
        let status = response.status().as_u16();
        let body = read_body(response, REPORT_BYTES_MAX)
            .await
            .map_err(ProviderError::Transport)?;
        if status != 200 {
            return Err(ProviderError::Status {
                status,
                body: truncate_response(&body),
            });
        }
        let rows: Vec<ReportRow> =
            serde_json::from_slice(&body).map_err(|e| ProviderError::Body(e.to_string()))?;
        rows.into_iter()
            .map(|r| {
                Ok(ProviderPayout {
                    status: status_of_row(&r)?,
                    provider_id: r.id,
                    reference: r.external_id,
                    amount_minor: r.amount,
                    currency: r.currency,
                })
            })
            .collect()
    }
}

fn status_of_row(r: &ReportRow) -> Result<ProviderStatus, ProviderError> {
    status(&r.status, r.failure_code.as_deref())
        .map_err(|e| ProviderError::Body(format!("report row {}: {e}", r.id)))
}

#[cfg(test)]
mod tests;
