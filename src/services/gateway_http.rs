//! [`HttpGateway`]: a [`PaymentGateway`] over HTTP, speaking the gateway API that
//! `tools/payout-sim` simulates (see `payout_sim::gateway` for the shapes): refunds
//! are `POST /gateway/refunds`, idempotent by our refund number; queries are
//! `GET /gateway/refunds/{refund_no}`; pay callbacks arrive through the callback inbox,
//! signed `x-gateway-signature: hex(HMAC-SHA256(secret, raw body))`, and
//! [`parse_payment`] reads their normalised payload (the whole verified body).
//!
//! # How answers map
//!
//! The rule of the boundary: `Failed` only when the gateway has said, about this
//! refund number, that no refund was or will be made; anything that leaves the money
//! possibly moved is `Unknown`, and the refund stays REFUNDING to be queried.
//!
//! | refund create answer                                             | [`RefundAnswer`] |
//! |------------------------------------------------------------------|------------------|
//! | 2xx, the refund of this `refund_no` (same amount and currency)  | by its `status`: PROCESSING → `Processing`, SUCCEEDED → `Succeeded`, FAILED → `Failed` (its `failure_reason`), CLOSED → `Closed` |
//! | 400 or 422 with the gateway's error body, except `REFUND_NO_REUSED` | `Failed`, reason `"<error_code>: <message>"` |
//! | 400 `REFUND_NO_REUSED`                                           | `Unknown`: a refund under this number exists (with another body: our bug), so money may have moved |
//! | any other 4xx (401, 403, 404, 405, 408, 409, 429 …), or a 4xx without the gateway's error body | `Unknown` |
//! | 5xx, timeout, connection error, a body unreadable, too large, with an unknown status, or about another refund | `Unknown` |
//!
//! Why only 400/422 are `Failed`: the gateway looks a refund number up before it
//! applies its business rules (unknown transaction, currency, amount left …), so such
//! a refusal proves no refund exists under the number — on this attempt and on every
//! earlier one, which sent the same request. A 400 for a malformed field proves the
//! same: the request was as malformed on every attempt. A 401/403 (our key), a
//! 404/405 (a wrong base URL or a proxy), a 408/429 (try later) or a 409 (a
//! concurrent call) says nothing about whether an earlier attempt under the same
//! number made a refund: `refund` may be a retry.
//!
//! | refund query answer                                   | [`RefundAnswer`] |
//! |-------------------------------------------------------|------------------|
//! | 200, the refund of this `refund_no`                   | by its `status`, as above |
//! | 404 `REFUND_NOT_FOUND`                                | `Unknown` (see below) |
//! | anything else: other 4xx, 5xx, timeout, connection error, an unreadable body, another refund | `Unknown` |
//!
//! A query never answers `Failed` from an HTTP error, only from a refund the gateway
//! reports FAILED. **A 404 `REFUND_NOT_FOUND` is `Unknown`, not `Failed`**: the
//! boundary has no "absent" answer, and "not found" proves no money moved only if no
//! create under that number can still land (a create that timed out may still be in
//! flight, or not yet visible to the query side of a real gateway). Turning it into
//! `Failed` would let the service give the money back in candy while the cash refund
//! may still be paid. Its `error` starts with [`NOT_FOUND_PREFIX`] so the service (or
//! an operator) can tell "the gateway never got it" from "the gateway did not
//! answer", and escalate a refund that stays there.
//!
//! Local refusals (nothing is sent): a `refund` whose `refund_no` is blank or
//! longer than [`ID_CHARS_MAX`], or whose amount is not positive, is `Failed` (no
//! refund can have been made under it); a `query_refund` of such a number is `Unknown`.
//!
//! # Callbacks
//!
//! [`callback_pointers`] names what the composition root registers the gateway's
//! callback provider with: `Verifier::hmac(secret, SIGNATURE_HEADER)` (the simulator
//! signs exactly what it checks: lower-case hex HMAC-SHA256 of the raw body) and
//! `JsonPointers::new("/event_id", "/type")` with the whole body as `data`. This
//! capability does not import the callbacks capability, hence plain constants.
//!
//! The API key goes as HTTP Basic auth (`<key>:`) and appears in no answer, error or
//! log; redirects are not followed.

use super::gateway::{
    truncate, PayMethod, PaymentGateway, PaymentNotice, RefundAnswer, RefundRequest,
    GATEWAY_RESPONSE_BYTES_MAX,
};
use crate::infra::outbound::{describe, read_body};
use factledger_aggregates::Currency;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::time::Duration;

/// The gateway's name unless configured: its callback provider name.
pub const NAME_DEFAULT: &str = "paysim";
/// The header a pay callback's signature is in (HMAC-SHA256 of the raw body, hex).
pub const SIGNATURE_HEADER: &str = "x-gateway-signature";
/// Where a pay callback's event id is (RFC 6901).
pub const CALLBACK_EVENT_ID_POINTER: &str = "/event_id";
/// Where a pay callback's event type is.
pub const CALLBACK_EVENT_TYPE_POINTER: &str = "/type";
/// The event type of a pay callback.
pub const PAYMENT_SUCCEEDED: &str = "payment.succeeded";
/// A refund or query call's time limit unless configured.
pub const TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);
/// Connecting takes at most this long (within the call's timeout).
pub const CONNECT_TIMEOUT_MAX: Duration = Duration::from_secs(5);
/// Largest answer read (a refund is a few hundred bytes).
pub const RESPONSE_BYTES_MAX: usize = 64 * 1024;
/// Longest id read from or sent to the gateway.
pub const ID_CHARS_MAX: usize = 128;
/// The gateway's error code for a query of a refund number it does not know.
pub const REFUND_NOT_FOUND: &str = "REFUND_NOT_FOUND";
/// The gateway's error code for a refund number used with another request.
pub const REFUND_NO_REUSED: &str = "REFUND_NO_REUSED";
/// How the `error` of an `Unknown` from a 404 `REFUND_NOT_FOUND` query starts.
pub const NOT_FOUND_PREFIX: &str = "not found at the gateway";
/// Most bytes of an answer's body quoted in an `Unknown` error.
const QUOTED_BYTES_MAX: usize = 512;

/// What the composition root needs to register this gateway's callback provider
/// (`POST /v1/callbacks/{name}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallbackPointers {
    /// The header `Verifier::hmac` reads.
    pub signature_header: &'static str,
    /// JSON pointer of the event id (the inbox's dedupe key).
    pub event_id: &'static str,
    /// JSON pointer of the event type.
    pub event_type: &'static str,
}

/// The pay callback's signature header and JSON pointers (the whole body is `data`).
pub const fn callback_pointers() -> CallbackPointers {
    CallbackPointers {
        signature_header: SIGNATURE_HEADER,
        event_id: CALLBACK_EVENT_ID_POINTER,
        event_type: CALLBACK_EVENT_TYPE_POINTER,
    }
}

/// How to reach the gateway.
#[derive(Clone)]
pub struct HttpGatewayConfig {
    /// The gateway's name (`[a-z0-9_-]`, 1 to 64): its callback provider name.
    pub name: String,
    /// e.g. the simulator's `http://127.0.0.1:9200`; a path prefix is kept.
    pub base_url: String,
    /// The API key, sent as HTTP Basic auth `<key>:`.
    pub api_key: String,
    /// Time limit of one refund or query call ([`TIMEOUT_DEFAULT`]).
    pub timeout: Duration,
}

impl HttpGatewayConfig {
    /// [`NAME_DEFAULT`] and [`TIMEOUT_DEFAULT`].
    pub fn new(base_url: impl Into<String>, api_key: impl Into<String>) -> HttpGatewayConfig {
        HttpGatewayConfig {
            name: NAME_DEFAULT.to_owned(),
            base_url: base_url.into(),
            api_key: api_key.into(),
            timeout: TIMEOUT_DEFAULT,
        }
    }
}

impl std::fmt::Debug for HttpGatewayConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpGatewayConfig")
            .field("name", &self.name)
            .field("base_url", &self.base_url)
            .field("api_key", &"<redacted>")
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// Why an [`HttpGateway`] could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("payment gateway config: {0}")]
pub struct GatewayConfigError(pub String);

/// The adapter; cheap to share (one connection pool).
#[derive(Debug, Clone)]
pub struct HttpGateway {
    config: HttpGatewayConfig,
    base: reqwest::Url,
    client: reqwest::Client,
}

impl HttpGateway {
    pub fn new(config: HttpGatewayConfig) -> Result<HttpGateway, GatewayConfigError> {
        let name = &config.name;
        let name_ok = (1..=64).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if !name_ok {
            return Err(GatewayConfigError(format!(
                "name {name:?} must be 1 to 64 of [a-z0-9_-]"
            )));
        }
        let base = reqwest::Url::parse(&config.base_url)
            .map_err(|e| GatewayConfigError(format!("base URL {:?}: {e}", config.base_url)))?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            return Err(GatewayConfigError(format!(
                "base URL {:?} is not http(s)",
                config.base_url
            )));
        }
        if config.timeout.is_zero() {
            return Err(GatewayConfigError("timeout must be positive".into()));
        }
        let client = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(CONNECT_TIMEOUT_MAX.min(config.timeout))
            // A gateway has no business redirecting; following one could send the
            // credentials elsewhere.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| GatewayConfigError(e.to_string()))?;
        Ok(HttpGateway {
            config,
            base,
            client,
        })
    }

    pub fn config(&self) -> &HttpGatewayConfig {
        &self.config
    }

    /// The base URL with `segments` appended, each percent-encoded.
    fn url(&self, segments: &[&str]) -> reqwest::Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    /// Sends `request` with the credentials: the status and body, or why none came.
    async fn call(&self, request: reqwest::RequestBuilder) -> Result<(u16, Vec<u8>), String> {
        let response = request
            .basic_auth(&self.config.api_key, None::<&str>)
            .send()
            .await
            .map_err(|e| describe(&e, self.config.timeout))?;
        let status = response.status().as_u16();
        let body = read_body(response, RESPONSE_BYTES_MAX)
            .await
            .map_err(|e| format!("HTTP {status}, then the body failed: {e}"))?;
        Ok((status, body))
    }
}

/// The body as stored text (lossy UTF-8, cut to what a refund keeps).
fn text_of(body: &[u8]) -> String {
    truncate(&String::from_utf8_lossy(body), GATEWAY_RESPONSE_BYTES_MAX)
}

fn unknown(error: String) -> RefundAnswer {
    RefundAnswer::Unknown { error }
}

/// `HTTP <status>` and the start of the body, for an `Unknown`.
fn unknown_http(status: u16, body: &[u8]) -> RefundAnswer {
    let quoted = truncate(&String::from_utf8_lossy(body), QUOTED_BYTES_MAX);
    unknown(format!("HTTP {status}: {quoted}"))
}

/// A refund as the gateway answers it (create, replay, query).
#[derive(Debug, Deserialize)]
struct RefundBody {
    refund_no: String,
    #[serde(default)]
    gateway_refund_id: Option<String>,
    status: String,
    #[serde(default)]
    amount_minor: Option<i64>,
    #[serde(default)]
    currency: Option<String>,
    #[serde(default)]
    failure_reason: Option<String>,
}

/// A 2xx refund body as an answer: `Unknown` unless it is refund `refund_no` (with
/// `amount` in minor units and currency, when given) in a known status.
fn from_refund_body(
    refund_no: &str,
    amount: Option<(i64, &str)>,
    status: u16,
    body: &[u8],
) -> RefundAnswer {
    let r: RefundBody = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => return unknown(format!("HTTP {status} with an unreadable body: {e}")),
    };
    if r.refund_no != refund_no {
        return unknown(format!(
            "HTTP {status} answered refund_no {:?} for {refund_no:?}",
            r.refund_no
        ));
    }
    if let Some((minor, currency)) = amount {
        let differs = r.amount_minor.is_some_and(|a| a != minor)
            || r.currency.as_deref().is_some_and(|c| c != currency);
        if differs {
            return unknown(format!(
                "HTTP {status} answered {:?} {:?} for a refund of {minor} {currency}",
                r.amount_minor, r.currency
            ));
        }
    }
    let response = text_of(body);
    match r.status.as_str() {
        "PROCESSING" => RefundAnswer::Processing { response },
        "SUCCEEDED" => match r.gateway_refund_id.filter(|id| !id.trim().is_empty()) {
            Some(gateway_refund_id) => RefundAnswer::Succeeded {
                gateway_refund_id,
                response,
            },
            None => unknown(format!(
                "HTTP {status}: SUCCEEDED without a gateway_refund_id"
            )),
        },
        "FAILED" => RefundAnswer::Failed {
            reason: r
                .failure_reason
                .filter(|f| !f.trim().is_empty())
                .unwrap_or_else(|| "FAILED".to_owned()),
            response,
        },
        "CLOSED" => RefundAnswer::Closed { response },
        other => unknown(format!("HTTP {status}: unknown refund status {other:?}")),
    }
}

/// The gateway's error body.
#[derive(Debug, Deserialize)]
struct ErrorBody {
    error_code: String,
    #[serde(default)]
    message: String,
}

fn error_body(body: &[u8]) -> Option<ErrorBody> {
    serde_json::from_slice::<ErrorBody>(body)
        .ok()
        .filter(|e| !e.error_code.trim().is_empty())
}

/// A refund create's answer (see the module docs' first table).
fn map_refund(request: &RefundRequest, status: u16, body: &[u8]) -> RefundAnswer {
    if (200..300).contains(&status) {
        let amount = Some((request.amount_minor, request.currency.as_str()));
        return from_refund_body(&request.refund_no, amount, status, body);
    }
    match (status, error_body(body)) {
        (400 | 422, Some(e)) if e.error_code != REFUND_NO_REUSED => RefundAnswer::Failed {
            reason: format!("{}: {}", e.error_code, e.message),
            response: text_of(body),
        },
        _ => unknown_http(status, body),
    }
}

/// A refund query's answer (see the module docs' second table).
fn map_query(refund_no: &str, status: u16, body: &[u8]) -> RefundAnswer {
    match status {
        200 => from_refund_body(refund_no, None, status, body),
        404 if error_body(body).is_some_and(|e| e.error_code == REFUND_NOT_FOUND) => {
            unknown(format!(
                "{NOT_FOUND_PREFIX}: HTTP 404 {REFUND_NOT_FOUND} for refund_no {refund_no:?} \
                 (never received, or not yet visible); a create may still land, so it is not \
                 a failure"
            ))
        }
        _ => unknown_http(status, body),
    }
}

/// Why `refund_no` cannot be sent, if it cannot.
fn bad_refund_no(refund_no: &str) -> Option<String> {
    if refund_no.trim().is_empty() {
        return Some("refund_no: must not be blank".into());
    }
    if refund_no.chars().count() > ID_CHARS_MAX {
        return Some(format!("refund_no: longer than {ID_CHARS_MAX} characters"));
    }
    None
}

fn field<'a>(body: &'a Map<String, Value>, name: &str) -> Result<&'a str, String> {
    super::gateway::string_field(body, name, ID_CHARS_MAX)
}

fn id_field(body: &Map<String, Value>, name: &str) -> Result<String, String> {
    super::gateway::id_field(body, name, ID_CHARS_MAX)
}

/// Reads a pay callback's normalised payload (the whole verified body, see the module
/// docs); every error names the field at fault.
pub fn parse_payment(data: &Value) -> Result<PaymentNotice, String> {
    let body = data
        .as_object()
        .ok_or_else(|| format!("the pay callback is not a JSON object: {data}"))?;
    let event_type = field(body, "type")?;
    if event_type != PAYMENT_SUCCEEDED {
        return Err(format!(
            "type: {event_type:?} is not a payment ({PAYMENT_SUCCEEDED:?})"
        ));
    }
    let event_id = field(body, "event_id")?.to_owned();
    let order_no = id_field(body, "order_no")?;
    let transaction_no = id_field(body, "transaction_no")?;
    let method_text = field(body, "method")?;
    let method = PayMethod::parse(method_text).ok_or_else(|| {
        format!("method: unknown payment method {method_text:?} (WECHAT, ALIPAY or APPLE)")
    })?;
    let account_id = id_field(body, "account_id")?;
    let amount_minor = match body.get("amount_minor") {
        None | Some(Value::Null) => return Err("amount_minor: missing".into()),
        Some(v) => v.as_i64().filter(|a| *a > 0).ok_or_else(|| {
            format!("amount_minor: must be a positive integer number of minor units, got {v}")
        })?,
    };
    let currency = field(body, "currency")?;
    let currency = Currency::parse(currency)
        .map_err(|e| format!("currency: {e}"))?
        .as_str()
        .to_owned();
    let paid_at_ms = match body.get("paid_at_ms") {
        None | Some(Value::Null) => return Err("paid_at_ms: missing".into()),
        Some(v) => v.as_i64().filter(|t| *t >= 0).ok_or_else(|| {
            format!("paid_at_ms: must be a non-negative integer (epoch milliseconds), got {v}")
        })?,
    };
    Ok(PaymentNotice {
        event_id,
        order_no,
        transaction_no,
        method,
        account_id,
        amount_minor,
        currency,
        paid_at_ms,
    })
}

#[async_trait::async_trait]
impl PaymentGateway for HttpGateway {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn parse_payment(&self, data: &Value) -> Result<PaymentNotice, String> {
        parse_payment(data)
    }

    #[tracing::instrument(skip_all, fields(gateway = %self.config.name, refund_no = %request.refund_no))]
    async fn refund(&self, request: &RefundRequest) -> RefundAnswer {
        let local = bad_refund_no(&request.refund_no).or_else(|| {
            (request.amount_minor <= 0).then(|| {
                format!(
                    "amount_minor: must be a positive integer number of minor units, got {}",
                    request.amount_minor
                )
            })
        });
        if let Some(reason) = local {
            return RefundAnswer::Failed {
                reason: format!("not sent: {reason}"),
                response: String::new(),
            };
        }
        let body = json!({
            "refund_no": request.refund_no,
            "transaction_no": request.transaction_no,
            "amount_minor": request.amount_minor,
            "currency": request.currency,
            "order_no": request.order_no,
            "method": request.method.as_str(),
            "account_id": request.account_id,
        });
        let sent = self
            .call(
                self.client
                    .post(self.url(&["gateway", "refunds"]))
                    .json(&body),
            )
            .await;
        let answer = match sent {
            Ok((status, bytes)) => map_refund(request, status, &bytes),
            Err(e) => unknown(e),
        };
        if let RefundAnswer::Unknown { error } = &answer {
            tracing::warn!(%error, "refund outcome unknown");
        }
        answer
    }

    #[tracing::instrument(skip_all, fields(gateway = %self.config.name, %refund_no))]
    async fn query_refund(&self, refund_no: &str) -> RefundAnswer {
        if let Some(reason) = bad_refund_no(refund_no) {
            return unknown(format!("not sent: {reason}"));
        }
        let sent = self
            .call(
                self.client
                    .get(self.url(&["gateway", "refunds", refund_no])),
            )
            .await;
        let answer = match sent {
            Ok((status, bytes)) => map_query(refund_no, status, &bytes),
            Err(e) => unknown(e),
        };
        if let RefundAnswer::Unknown { error } = &answer {
            tracing::warn!(%error, "refund query unanswered");
        }
        answer
    }
}

#[cfg(test)]
mod tests;
