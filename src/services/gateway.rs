//! The payment-gateway boundary (seed 000: WeChat Pay, Alipay, Apple): what the
//! services capability asks of a cash gateway, and the answers it gets.
//!
//! Three things cross it:
//! - **pay callbacks**: the gateway tells us an order was paid. They arrive through
//!   the verified callback inbox (`POST /v1/callbacks/{gateway}`), and
//!   [`PaymentGateway::parse_payment`] turns the stored, normalised payload into a
//!   [`PaymentNotice`];
//! - **refunds**: [`PaymentGateway::refund`] asks the gateway to pay a refund back. It is
//!   idempotent by our refund number, so a retried call never refunds twice;
//! - **refund queries**: [`PaymentGateway::query_refund`] asks where a refund stands and
//!   never starts one. R-REF-1: once a refund is REFUNDING, compensation only queries.
//!
//! The one rule this boundary exists for (as for payouts): an answer is definite
//! ([`RefundAnswer::Succeeded`], [`RefundAnswer::Failed`], [`RefundAnswer::Closed`]),
//! in progress ([`RefundAnswer::Processing`]), or nobody knows
//! ([`RefundAnswer::Unknown`]: a timeout, a 5xx, an unreadable body). Unknown is not a
//! failure: the money may have moved, so the refund stays REFUNDING and is queried
//! again, never re-sent under a new number.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// Most bytes of a gateway's answer kept with a refund (4 KiB).
pub const GATEWAY_RESPONSE_BYTES_MAX: usize = 4 * 1024;

/// The cash payment methods of seed 000.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PayMethod {
    Wechat,
    Alipay,
    Apple,
}

impl PayMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            PayMethod::Wechat => "WECHAT",
            PayMethod::Alipay => "ALIPAY",
            PayMethod::Apple => "APPLE",
        }
    }

    pub fn parse(s: &str) -> Option<PayMethod> {
        Some(match s {
            "WECHAT" => PayMethod::Wechat,
            "ALIPAY" => PayMethod::Alipay,
            "APPLE" => PayMethod::Apple,
            _ => return None,
        })
    }
}

/// A gateway's word that an order was paid (from a verified, normalised callback).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentNotice {
    /// The gateway's event id (the callback inbox deduplicates by it).
    pub event_id: String,
    /// Our order number, as we gave it to the gateway.
    pub order_no: String,
    /// The gateway's transaction number of the payment.
    pub transaction_no: String,
    pub method: PayMethod,
    /// The gateway's merchant account the money arrived at.
    pub account_id: String,
    /// Integer minor units, strictly positive.
    pub amount_minor: i64,
    /// ISO 4217, as the gateway wrote it.
    pub currency: String,
    /// Epoch milliseconds, as the gateway reported it.
    pub paid_at_ms: i64,
}

/// One refund to make.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefundRequest {
    /// Our refund number: the gateway's idempotency key, so a retried call never
    /// makes a second refund.
    pub refund_no: String,
    pub order_no: String,
    /// The gateway's transaction number of the payment being refunded.
    pub transaction_no: String,
    pub method: PayMethod,
    pub account_id: String,
    /// Integer minor units, strictly positive, at most what was paid.
    pub amount_minor: i64,
    pub currency: String,
    /// What the refunded payment was, in minor units (WeChat Pay's `amount.total`);
    /// `None` when the payment is not on its order (then `amount_minor`).
    #[serde(default)]
    pub paid_minor: Option<i64>,
}

/// Where a refund stands at the gateway (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RefundAnswer {
    /// The money went back to the payer.
    Succeeded {
        gateway_refund_id: String,
        response: String,
    },
    /// Accepted and not finished yet.
    Processing { response: String },
    /// The gateway will not refund it (e.g. the payment is too old).
    Failed { reason: String, response: String },
    /// The gateway closed the refund without paying it.
    Closed { response: String },
    /// No definite answer: a timeout, a transport error, a 5xx, an unreadable body.
    Unknown { error: String },
}

impl RefundAnswer {
    /// The gateway's words (or the transport error), cut to
    /// [`GATEWAY_RESPONSE_BYTES_MAX`] on a character boundary, as stored.
    pub fn response(&self) -> String {
        let text = match self {
            RefundAnswer::Succeeded { response, .. }
            | RefundAnswer::Processing { response }
            | RefundAnswer::Failed { response, .. }
            | RefundAnswer::Closed { response } => response,
            RefundAnswer::Unknown { error } => error,
        };
        truncate(text, GATEWAY_RESPONSE_BYTES_MAX)
    }
}

/// A string field of a gateway's JSON: present, a string, not blank, at most `max`
/// characters; the error names the field.
pub fn string_field<'a>(
    body: &'a serde_json::Map<String, serde_json::Value>,
    name: &str,
    max: usize,
) -> Result<&'a str, String> {
    use serde_json::Value;
    match body.get(name) {
        None | Some(Value::Null) => Err(format!("{name}: missing")),
        Some(Value::String(s)) if s.trim().is_empty() => Err(format!("{name}: must not be blank")),
        Some(Value::String(s)) if s.chars().count() > max => {
            Err(format!("{name}: longer than {max} characters"))
        }
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(format!("{name}: must be a string, got {other}")),
    }
}

/// A [`string_field`] that also keys our records: `BoundedId`'s characters.
pub fn id_field(
    body: &serde_json::Map<String, serde_json::Value>,
    name: &str,
    max: usize,
) -> Result<String, String> {
    let s = string_field(body, name, max)?;
    factledger_aggregates::BoundedId::parse(s)
        .map(|id| id.as_str().to_owned())
        .map_err(|e| format!("{name}: {e}"))
}

/// `s` cut to at most `max` bytes on a character boundary.
pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

/// A cash gateway (see the module docs). Implementations are called outside any
/// database transaction (R-INV-6).
#[async_trait]
pub trait PaymentGateway: Send + Sync + 'static {
    /// The gateway's name: its callback provider name (`/v1/callbacks/{name}`) and the
    /// qualifier of its clearing account.
    fn name(&self) -> &str;

    /// Read a pay callback's normalised payload; an error names the field.
    fn parse_payment(&self, data: &serde_json::Value) -> Result<PaymentNotice, String>;

    /// Ask the gateway to refund (idempotent by `refund_no`).
    async fn refund(&self, request: &RefundRequest) -> RefundAnswer;

    /// Ask where refund `refund_no` stands; never starts a refund.
    async fn query_refund(&self, refund_no: &str) -> RefundAnswer;

    /// Ask where `request`'s refund stands; never starts a refund. A gateway whose
    /// query names the payment too (Alipay's names the trade) overrides it; by
    /// default it asks by the refund number alone.
    async fn query_refund_of(&self, request: &RefundRequest) -> RefundAnswer {
        self.query_refund(&request.refund_no).await
    }
}
