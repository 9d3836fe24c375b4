//! [`WechatPayGateway`]: the cash gateway over WeChat Pay APIv3 (direct merchant),
//! built to its published documentation, and spoken by `tools/payout-sim`'s WeChat
//! Pay mode the same way.
//!
//! - **Pay notifications** (`TRANSACTION.SUCCESS`) and **refund notifications**
//!   (`REFUND.SUCCESS`, `REFUND.ABNORMAL`, `REFUND.CLOSED`) arrive through the
//!   callback inbox. The composition root (`server::gateway_wechatpay`) verifies them
//!   with [`crypto::PlatformKeys::verify`] (the four `Wechatpay-*` headers) before
//!   anything is stored, and normalises them with [`decode_notification`]: the event
//!   id is the notification `id` (WeChat re-sends a notification under the same id),
//!   the event type its `event_type`, and `data` the **decrypted resource** (the
//!   transaction, or the refund). A resource that does not decrypt is stored
//!   unnormalised and never handled. [`wire::parse_payment`] reads a transaction;
//!   [`wire::parse_refund_notice`] a refund.
//! - **Refunds**: `POST /v3/refund/domestic/refunds` `{"transaction_id",
//!   "out_refund_no", "reason", "notify_url"?, "amount": {"refund", "total",
//!   "currency"}}`, idempotent by `out_refund_no` (our refund number): WeChat makes
//!   one refund per number. `total` is the original payment's amount
//!   ([`RefundRequest::paid_minor`]).
//! - **Refund queries**: `GET /v3/refund/domestic/refunds/{out_refund_no}`.
//!
//! Every request is signed (`Authorization: WECHATPAY2-SHA256-RSA2048 …`, see
//! [`crypto`]), and every answer's signature is checked like a notification's: an
//! unsigned, forged, stale or unknown-serial answer is `Unknown`, never `Succeeded`
//! or `Failed`.
//!
//! # How answers map
//!
//! The rule of the boundary: `Failed` only when WeChat has said that no refund was
//! or will be made under this number; anything that leaves the money possibly moved
//! is `Unknown`, and the refund stays REFUNDING to be queried.
//!
//! | refund create answer (signed) | [`RefundAnswer`] |
//! |---|---|
//! | 200, the refund of this `out_refund_no` (same refund amount and currency) | by its `status` ([`wire`]'s table) |
//! | 400 `PARAM_ERROR` | `Failed`: the request is malformed, as it was on every earlier attempt under this number (the body is the same) |
//! | 404 `RESOURCE_NOT_EXISTS` | `Failed`: no such paid transaction, so no refund of it exists |
//! | 400 `INVALID_REQUEST` | `Unknown`: "fits the format but not the business rules" includes "already fully refunded", which a retry of a create that landed would also hear; the docs do not say the number is looked up first |
//! | 403 `NOT_ENOUGH` (balance), `NO_AUTH`, `USER_ACCOUNT_ABNORMAL`; 401 `SIGN_ERROR`; 429 `FREQUENCY_LIMITED`; 5xx `SYSTEM_ERROR` …; any other code | `Unknown`: the docs say to retry under the same `out_refund_no` (a NOT_ENOUGH refund is re-sent once the query finds nothing, i.e. once the balance allows) |
//! | unsigned or badly signed, timeout, connection error, unreadable, another refund | `Unknown` |
//!
//! | refund query answer (signed) | [`RefundAnswer`] |
//! |---|---|
//! | 200, the refund of this `out_refund_no` | by its `status` |
//! | 404 `RESOURCE_NOT_EXISTS` | `Unknown` starting with [`NOT_FOUND_PREFIX`]: the services flow re-sends the create under the same number (WeChat deduplicates it) |
//! | anything else | `Unknown` |
//!
//! Local refusals (nothing sent): a refund number blank or over
//! [`wire::ID_CHARS_MAX`] characters, or a non-positive amount, is `Failed`; a query
//! of such a number is `Unknown`.

pub mod config;
pub mod crypto;
pub mod wire;

pub use config::{WechatPayConfig, WechatPayConfigError};

use super::gateway::{PaymentGateway, PaymentNotice, RefundAnswer, RefundRequest};
use super::gateway_http::NOT_FOUND_PREFIX;
use crate::infra::outbound::{describe, read_body};
use crypto::{Authorization, SignedHeaders};
use serde_json::{json, Value};
use wire::{error_body, text_of};

/// Largest answer read (a refund is about a kilobyte).
pub const RESPONSE_BYTES_MAX: usize = 64 * 1024;
/// Connecting takes at most this long (within the call's timeout).
pub const CONNECT_TIMEOUT_MAX: std::time::Duration = std::time::Duration::from_secs(5);
/// The refund create path.
pub const REFUNDS_PATH: &str = "/v3/refund/domestic/refunds";
/// The refund reason we send (shown to the payer).
pub const REFUND_REASON: &str = "payment arrived after the order closed";
/// Most bytes of an answer quoted in an `Unknown`.
const QUOTED_BYTES_MAX: usize = 512;

/// What a notification normalises to (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedNotification {
    pub id: String,
    pub event_type: String,
    /// The decrypted resource.
    pub data: Value,
}

/// Reads a verified notification body and decrypts its resource under `key`: the
/// notification id, its event type and the resource as JSON. Pure.
pub fn decode_notification(
    raw: &[u8],
    key: &crypto::ApiV3Key,
) -> Result<DecodedNotification, String> {
    let body = crate::infra::json::parse_unique(raw).map_err(|e| e.to_string())?;
    let n: wire::Notification =
        serde_json::from_value(body).map_err(|e| format!("not a WeChat Pay notification: {e}"))?;
    let id = n.id.trim();
    if id.is_empty() || id.chars().count() > wire::ID_CHARS_MAX {
        return Err(format!("id: 1 to {} characters", wire::ID_CHARS_MAX));
    }
    if n.resource_type != wire::ENCRYPT_RESOURCE {
        return Err(format!(
            "resource_type: {:?} is not {:?}",
            n.resource_type,
            wire::ENCRYPT_RESOURCE
        ));
    }
    let expected = wire::original_type_of(&n.event_type)
        .ok_or_else(|| format!("event_type: unknown {:?}", n.event_type))?;
    let r = &n.resource;
    if r.algorithm != crypto::AEAD_AES_256_GCM {
        return Err(format!(
            "resource.algorithm: {:?} is not {}",
            r.algorithm,
            crypto::AEAD_AES_256_GCM
        ));
    }
    if r.original_type != expected {
        return Err(format!(
            "resource.original_type: {:?} for event {:?} (expected {expected:?})",
            r.original_type, n.event_type
        ));
    }
    let plain = key.decrypt(
        &r.ciphertext,
        &r.nonce,
        r.associated_data.as_deref().unwrap_or(""),
    )?;
    let data = crate::infra::json::parse_unique(&plain)
        .map_err(|e| format!("the decrypted resource is not JSON: {e}"))?;
    Ok(DecodedNotification {
        id: id.to_owned(),
        event_type: n.event_type,
        data,
    })
}

/// The adapter; cheap to share (one connection pool).
#[derive(Debug, Clone)]
pub struct WechatPayGateway {
    config: WechatPayConfig,
    base: reqwest::Url,
    client: reqwest::Client,
}

impl WechatPayGateway {
    pub fn new(config: WechatPayConfig) -> Result<WechatPayGateway, WechatPayConfigError> {
        let bad = |variable: &str, problem: String| WechatPayConfigError {
            variable: variable.to_owned(),
            problem,
        };
        let base = reqwest::Url::parse(&config.base_url)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && !u.cannot_be_a_base())
            .ok_or_else(|| bad(config::BASE_URL_VAR, "not an http(s) URL".into()))?;
        if config.timeout.is_zero() {
            return Err(bad("timeout", "must be positive".into()));
        }
        let client = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(CONNECT_TIMEOUT_MAX.min(config.timeout))
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("factledger/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| bad("client", e.to_string()))?;
        Ok(WechatPayGateway {
            config,
            base,
            client,
        })
    }

    pub fn config(&self) -> &WechatPayConfig {
        &self.config
    }

    /// The base URL with `path` (already percent-safe) appended.
    fn url(&self, path: &str) -> reqwest::Url {
        let mut url = self.base.clone();
        let prefix = url.path().trim_end_matches('/').to_owned();
        url.set_path(&format!("{prefix}{path}"));
        url
    }

    /// Sends a signed request; the status and the body of a **signed** answer, or
    /// why there is none.
    async fn call(
        &self,
        method: reqwest::Method,
        url: reqwest::Url,
        body: Option<String>,
    ) -> Result<(u16, Vec<u8>), String> {
        let signed_url = match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_owned(),
        };
        let nonce = crypto::nonce();
        let authorization = Authorization {
            mchid: &self.config.mchid,
            serial: &self.config.merchant_serial,
            timestamp: chrono::Utc::now().timestamp(),
            nonce: &nonce,
        }
        .header(
            &self.config.merchant_key,
            method.as_str(),
            &signed_url,
            body.as_deref().unwrap_or(""),
        );
        let mut request = self
            .client
            .request(method, url)
            .header(reqwest::header::AUTHORIZATION, authorization)
            .header(reqwest::header::ACCEPT, "application/json");
        if let Some(body) = body {
            request = request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body);
        }
        let response = request
            .send()
            .await
            .map_err(|e| describe(&e, self.config.timeout))?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let bytes = read_body(response, RESPONSE_BYTES_MAX)
            .await
            .map_err(|e| format!("HTTP {status}, then the body failed: {e}"))?;
        let signed = SignedHeaders::collect(
            headers
                .iter()
                .map(|(name, value)| (name.as_str(), value.as_bytes())),
        )
        .and_then(|h| {
            self.config
                .platform_keys
                .verify(&h, &bytes, chrono::Utc::now().timestamp_millis())
        });
        match signed {
            Ok(()) => Ok((status, bytes)),
            Err(e) => Err(format!(
                "HTTP {status} not signed by WeChat Pay ({e}): {}",
                quoted(&bytes)
            )),
        }
    }
}

fn quoted(body: &[u8]) -> String {
    super::gateway::truncate(&String::from_utf8_lossy(body), QUOTED_BYTES_MAX)
}

fn unknown(error: String) -> RefundAnswer {
    RefundAnswer::Unknown { error }
}

fn unknown_http(status: u16, body: &[u8]) -> RefundAnswer {
    unknown(format!("HTTP {status}: {}", quoted(body)))
}

/// A 200's body as a refund answer.
fn from_refund(
    refund_no: &str,
    amount: Option<(i64, &str)>,
    status: u16,
    body: &[u8],
) -> RefundAnswer {
    match serde_json::from_slice::<Value>(body) {
        Ok(v) => match wire::refund_answer(refund_no, amount, "status", &v, text_of(body)) {
            RefundAnswer::Unknown { error } => unknown(format!("HTTP {status}: {error}")),
            answer => answer,
        },
        Err(e) => unknown(format!("HTTP {status} with an unreadable body: {e}")),
    }
}

/// A signed refund create answer (the module docs' first table).
pub fn map_refund(request: &RefundRequest, status: u16, body: &[u8]) -> RefundAnswer {
    if status == 200 {
        let amount = Some((request.amount_minor, request.currency.as_str()));
        return from_refund(&request.refund_no, amount, status, body);
    }
    match (status, error_body(body)) {
        (400, Some(e)) if e.code == "PARAM_ERROR" => RefundAnswer::Failed {
            reason: format!("{}: {}", e.code, e.message),
            response: text_of(body),
        },
        (404, Some(e)) if e.code == "RESOURCE_NOT_EXISTS" => RefundAnswer::Failed {
            reason: format!("{}: {}", e.code, e.message),
            response: text_of(body),
        },
        _ => unknown_http(status, body),
    }
}

/// A signed refund query answer (the module docs' second table).
pub fn map_query(refund_no: &str, status: u16, body: &[u8]) -> RefundAnswer {
    match status {
        200 => from_refund(refund_no, None, status, body),
        404 if error_body(body).is_some_and(|e| e.code == "RESOURCE_NOT_EXISTS") => {
            unknown(format!(
                "{NOT_FOUND_PREFIX}: HTTP 404 RESOURCE_NOT_EXISTS for out_refund_no \
                 {refund_no:?} (never received, or not yet visible); a create may still \
                 land, so it is not a failure"
            ))
        }
        _ => unknown_http(status, body),
    }
}

/// Why `refund_no` cannot be sent, if it cannot.
fn bad_refund_no(refund_no: &str) -> Option<String> {
    let ok = !refund_no.is_empty()
        && refund_no.len() <= wire::ID_CHARS_MAX
        && refund_no
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-|*@".contains(&b));
    (!ok).then(|| {
        format!(
            "out_refund_no {refund_no:?}: 1 to {} of A-Z a-z 0-9 _ - | * @",
            wire::ID_CHARS_MAX
        )
    })
}

/// The refund create body (its text is what is signed and sent).
pub fn refund_body(request: &RefundRequest, notify_url: Option<&str>) -> String {
    let mut body = json!({
        "transaction_id": request.transaction_no,
        "out_refund_no": request.refund_no,
        "reason": REFUND_REASON,
        "amount": {
            "refund": request.amount_minor,
            "total": request.paid_minor.unwrap_or(request.amount_minor),
            "currency": request.currency,
        },
    });
    if let Some(url) = notify_url {
        body["notify_url"] = json!(url);
    }
    body.to_string()
}

#[async_trait::async_trait]
impl PaymentGateway for WechatPayGateway {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn parse_payment(&self, data: &Value) -> Result<PaymentNotice, String> {
        wire::parse_payment(data, &self.config.mchid, &self.config.appid)
    }

    #[tracing::instrument(skip_all, fields(gateway = %self.config.name, refund_no = %request.refund_no))]
    async fn refund(&self, request: &RefundRequest) -> RefundAnswer {
        let local = bad_refund_no(&request.refund_no).or_else(|| {
            (request.amount_minor <= 0)
                .then(|| format!("amount: must be positive, got {}", request.amount_minor))
        });
        if let Some(reason) = local {
            return RefundAnswer::Failed {
                reason: format!("not sent: {reason}"),
                response: String::new(),
            };
        }
        let body = refund_body(request, self.config.refund_notify_url.as_deref());
        let answer = match self
            .call(reqwest::Method::POST, self.url(REFUNDS_PATH), Some(body))
            .await
        {
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
        let url = self.url(&format!("{REFUNDS_PATH}/{refund_no}"));
        let answer = match self.call(reqwest::Method::GET, url, None).await {
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
