//! The gateway's data: a payment and a refund as parsed from their bodies, what they
//! become, their statuses, and the faults a test can script (see the module docs of
//! [`crate::gateway`] for the JSON).

use crate::model::{object, positive_minor, text_max, DELAY_MS_MAX, TIMEOUT_DELAY_MS_DEFAULT};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// Longest id the gateway takes (order, refund, transaction numbers, account ids).
pub const ID_CHARS_MAX: usize = 128;
/// The event type of every pay callback.
pub const PAYMENT_SUCCEEDED: &str = "payment.succeeded";
/// Most queries a `processing_then` or `query_5xx` fault may name.
pub const TIMES_MAX: u32 = 1_000;
/// The error code and message of a `reject` fault when it names none.
pub const REJECT_CODE_DEFAULT: &str = "REFUND_NOT_ALLOWED";
pub const REJECT_MESSAGE_DEFAULT: &str = "the gateway will not refund this payment (scripted)";
/// The reason a refund scripted to end FAILED carries when the fault names none.
pub const FAILURE_REASON_DEFAULT: &str = "REFUND_FAILED";

/// The cash payment methods (seed 000).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Method {
    Wechat,
    Alipay,
    Apple,
}

impl Method {
    pub const ALL: [Method; 3] = [Method::Wechat, Method::Alipay, Method::Apple];

    pub fn as_str(self) -> &'static str {
        match self {
            Method::Wechat => "WECHAT",
            Method::Alipay => "ALIPAY",
            Method::Apple => "APPLE",
        }
    }

    pub fn parse(s: &str) -> Option<Method> {
        Method::ALL.into_iter().find(|m| m.as_str() == s)
    }
}

fn id(body: &Map<String, Value>, field: &str) -> Result<String, String> {
    text_max(body, field, ID_CHARS_MAX)
}

fn optional_id(body: &Map<String, Value>, field: &str) -> Result<Option<String>, String> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(_) => id(body, field).map(Some),
    }
}

fn method(body: &Map<String, Value>, field: &str) -> Result<Method, String> {
    let text = id(body, field)?;
    Method::parse(&text)
        .ok_or_else(|| format!("{field} must be WECHAT, ALIPAY or APPLE, not {text:?}"))
}

/// An ISO 4217 shape: three capital letters.
fn currency(body: &Map<String, Value>) -> Result<String, String> {
    let c = id(body, "currency")?;
    if c.len() == 3 && c.bytes().all(|b| b.is_ascii_uppercase()) {
        Ok(c)
    } else {
        Err(format!(
            "currency must be an ISO 4217 code (3 capital letters), not {c:?}"
        ))
    }
}

/// A `POST /gateway/payments` body: the payer paying an order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentRequest {
    pub order_no: String,
    /// Integer minor units, strictly positive.
    pub amount_minor: i64,
    pub currency: String,
    pub method: Method,
    /// The merchant account the money arrives at.
    pub account_id: String,
    /// When it was paid (epoch ms); now unless given.
    #[serde(default)]
    pub paid_at_ms: Option<i64>,
}

impl PaymentRequest {
    /// Parses a payment body; the error message names the field at fault.
    pub fn parse(body: &[u8]) -> Result<PaymentRequest, String> {
        let body = &object(body)?;
        let paid_at_ms = match body.get("paid_at_ms") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                v.as_i64()
                    .filter(|t| *t >= 0)
                    .ok_or("paid_at_ms must be a non-negative integer (epoch ms)")?,
            ),
        };
        Ok(PaymentRequest {
            order_no: id(body, "order_no")?,
            amount_minor: positive_minor(body, "amount_minor")?,
            currency: currency(body)?,
            method: method(body, "method")?,
            account_id: id(body, "account_id")?,
            paid_at_ms,
        })
    }
}

/// A payment the gateway took.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Payment {
    /// `txn-<n>`, unique for the simulator process.
    pub transaction_no: String,
    pub order_no: String,
    pub method: Method,
    pub account_id: String,
    pub amount_minor: i64,
    pub currency: String,
    pub paid_at_ms: i64,
    /// The event id of its pay callback (`gevt-<n>`; a duplicate repeats it).
    pub event_id: String,
}

impl Payment {
    /// The pay callback's body.
    pub fn callback_body(&self) -> Value {
        json!({
            "event_id": self.event_id,
            "type": PAYMENT_SUCCEEDED,
            "order_no": self.order_no,
            "transaction_no": self.transaction_no,
            "method": self.method,
            "account_id": self.account_id,
            "amount_minor": self.amount_minor,
            "currency": self.currency,
            "paid_at_ms": self.paid_at_ms,
        })
    }
}

/// Where a refund stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RefundStatus {
    /// Accepted, not finished.
    Processing,
    /// The money went back to the payer.
    Succeeded,
    /// The gateway could not pay it back.
    Failed,
    /// The gateway closed it without paying.
    Closed,
}

impl RefundStatus {
    /// Whether the refund holds (or spent) part of the payment: PROCESSING or
    /// SUCCEEDED. FAILED and CLOSED release their amount.
    pub fn holds_amount(self) -> bool {
        matches!(self, RefundStatus::Processing | RefundStatus::Succeeded)
    }
}

/// A `POST /gateway/refunds` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefundRequest {
    /// The caller's refund number: the idempotency key.
    pub refund_no: String,
    pub transaction_no: String,
    /// Integer minor units, strictly positive, at most what is left unrefunded.
    pub amount_minor: i64,
    pub currency: String,
    /// Optional; when given it must be the payment's.
    #[serde(default)]
    pub order_no: Option<String>,
    #[serde(default)]
    pub method: Option<Method>,
    #[serde(default)]
    pub account_id: Option<String>,
}

impl RefundRequest {
    /// Parses a refund body; the error message names the field at fault.
    pub fn parse(body: &[u8]) -> Result<RefundRequest, String> {
        let body = &object(body)?;
        let method = match body.get("method") {
            None | Some(Value::Null) => None,
            Some(_) => Some(method(body, "method")?),
        };
        Ok(RefundRequest {
            refund_no: id(body, "refund_no")?,
            transaction_no: id(body, "transaction_no")?,
            amount_minor: positive_minor(body, "amount_minor")?,
            currency: currency(body)?,
            order_no: optional_id(body, "order_no")?,
            method,
            account_id: optional_id(body, "account_id")?,
        })
    }
}

/// How a refund goes on: PROCESSING to the next `processing_queries` queries, then
/// `status` (the default: SUCCEEDED on the first query).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Course {
    pub processing_queries: u32,
    pub status: RefundStatus,
    pub failure_reason: Option<String>,
}

impl Default for Course {
    fn default() -> Course {
        Course {
            processing_queries: 0,
            status: RefundStatus::Succeeded,
            failure_reason: None,
        }
    }
}

/// A refund as the gateway keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refund {
    pub refund_no: String,
    /// `grf-<n>`, unique for the simulator process.
    pub gateway_refund_id: String,
    pub transaction_no: String,
    pub order_no: String,
    pub amount_minor: i64,
    pub currency: String,
    pub status: RefundStatus,
    /// Set when FAILED (or CLOSED with a reason).
    pub failure_reason: Option<String>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    /// What the next queries will answer while it is PROCESSING.
    pub course: Course,
    /// The request that made it (an idempotent replay must repeat it).
    pub request: RefundRequest,
}

impl Refund {
    /// The gateway API's answer for this refund (create, replay, query).
    pub fn answer(&self) -> Value {
        let mut v = json!({
            "refund_no": self.refund_no,
            "gateway_refund_id": self.gateway_refund_id,
            "transaction_no": self.transaction_no,
            "order_no": self.order_no,
            "amount_minor": self.amount_minor,
            "currency": self.currency,
            "status": self.status,
        });
        if let (Some(reason), Some(obj)) = (&self.failure_reason, v.as_object_mut()) {
            obj.insert("failure_reason".into(), json!(reason));
        }
        v
    }
}

fn timeout_delay_default() -> u64 {
    TIMEOUT_DELAY_MS_DEFAULT
}
fn status_503() -> u16 {
    503
}
fn status_502() -> u16 {
    502
}
fn once() -> u32 {
    1
}
fn reject_code_default() -> String {
    REJECT_CODE_DEFAULT.to_owned()
}
fn reject_message_default() -> String {
    REJECT_MESSAGE_DEFAULT.to_owned()
}

/// A scripted misbehaviour of the gateway. Refund faults are keyed by `refund_no`,
/// callback faults by `order_no` ([`GatewayFault::target`]); see the module docs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum GatewayFault {
    /// Refund create: make the refund, then hold the answer this long.
    AcceptThenTimeout {
        #[serde(default = "timeout_delay_default")]
        delay_ms: u64,
    },
    /// Refund create: answer this 5xx, make nothing.
    #[serde(rename = "error_5xx_before_accept")]
    Error5xxBeforeAccept {
        #[serde(default = "status_503")]
        status: u16,
    },
    /// Refund create: make the refund, answer this 5xx.
    #[serde(rename = "error_5xx_after_accept")]
    Error5xxAfterAccept {
        #[serde(default = "status_502")]
        status: u16,
    },
    /// Refund create: answer 400 with this error, make nothing.
    Reject {
        #[serde(default = "reject_code_default")]
        error_code: String,
        #[serde(default = "reject_message_default")]
        message: String,
    },
    /// Refund create: make the refund, answer 200 with a body that is not JSON.
    GarbageBody,
    /// The refund's course: PROCESSING to the next `times` queries, then `status`
    /// (SUCCEEDED, FAILED or CLOSED).
    ProcessingThen {
        #[serde(default)]
        times: u32,
        status: RefundStatus,
        #[serde(default)]
        failure_reason: Option<String>,
    },
    /// Refund query: the next `times` queries answer this 5xx.
    #[serde(rename = "query_5xx")]
    Query5xx {
        #[serde(default = "once")]
        times: u32,
        #[serde(default = "status_503")]
        status: u16,
    },
    /// Refund query: the next query's answer is held this long.
    QueryTimeout {
        #[serde(default = "timeout_delay_default")]
        delay_ms: u64,
    },
    /// Refund query: the next query answers 200 with a body that is not JSON.
    QueryGarbageBody,
    /// Pay callback: delivered twice, same event id and body.
    DuplicateCallback,
    /// Pay callback: delivered this long after the payment, in the background.
    LateCallback { delay_ms: u64 },
    /// Pay callback: held until `POST /control/gateway/release`.
    HoldCallback,
    /// Pay callback: signed with the wrong secret.
    BadSignatureCallback,
}

/// What a fault acts on (and so which key it is queued under).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The next create request of the `refund_no`.
    RefundCreate,
    /// The course of the refund `refund_no` (now, or when it is made).
    RefundCourse,
    /// The next query of the `refund_no`.
    RefundQuery,
    /// The next payment of the `order_no`.
    PayCallback,
}

impl GatewayFault {
    pub fn target(&self) -> Target {
        use GatewayFault::*;
        match self {
            AcceptThenTimeout { .. }
            | Error5xxBeforeAccept { .. }
            | Error5xxAfterAccept { .. }
            | Reject { .. }
            | GarbageBody => Target::RefundCreate,
            ProcessingThen { .. } => Target::RefundCourse,
            Query5xx { .. } | QueryTimeout { .. } | QueryGarbageBody => Target::RefundQuery,
            DuplicateCallback | LateCallback { .. } | HoldCallback | BadSignatureCallback => {
                Target::PayCallback
            }
        }
    }

    /// Refuses faults that cannot be carried out (a 5xx fault with a 4xx status …).
    pub fn check(&self) -> Result<(), String> {
        use GatewayFault::*;
        match self {
            AcceptThenTimeout { delay_ms }
            | QueryTimeout { delay_ms }
            | LateCallback { delay_ms }
                if *delay_ms > DELAY_MS_MAX =>
            {
                Err(format!("delay_ms must be at most {DELAY_MS_MAX}"))
            }
            Error5xxBeforeAccept { status }
            | Error5xxAfterAccept { status }
            | Query5xx { status, .. }
                if !(500..=599).contains(status) =>
            {
                Err(format!("status must be 500 to 599, not {status}"))
            }
            Query5xx { times, .. } if *times == 0 || *times > TIMES_MAX => {
                Err(format!("times must be 1 to {TIMES_MAX}"))
            }
            ProcessingThen { times, .. } if *times > TIMES_MAX => {
                Err(format!("times must be at most {TIMES_MAX}"))
            }
            ProcessingThen {
                status: RefundStatus::Processing,
                ..
            } => Err("status must be SUCCEEDED, FAILED or CLOSED".into()),
            Reject { error_code, .. } if error_code.trim().is_empty() => {
                Err("error_code must not be empty".into())
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payment(v: Value) -> Result<PaymentRequest, String> {
        PaymentRequest::parse(v.to_string().as_bytes())
    }

    fn good_payment() -> Value {
        json!({"order_no": "o-1", "amount_minor": 600, "currency": "CNY",
               "method": "WECHAT", "account_id": "mch-1"})
    }

    #[test]
    fn payment_and_refund_fields_are_checked_and_the_error_names_them() {
        assert_eq!(payment(good_payment()).unwrap().method, Method::Wechat);
        let cases = [
            ("amount_minor", json!(1.5)),
            ("amount_minor", json!(0)),
            ("amount_minor", json!("600")),
            ("currency", json!("cny")),
            ("method", json!("PAYPAL")),
            ("order_no", json!("  ")),
            ("account_id", json!(7)),
            ("paid_at_ms", json!(-1)),
        ];
        for (field, value) in cases {
            let mut b = good_payment();
            b[field] = value;
            let e = payment(b).unwrap_err();
            assert!(e.contains(field), "{field}: {e}");
        }
        let refund = |v: Value| RefundRequest::parse(v.to_string().as_bytes());
        let good = json!({"refund_no": "r-1", "transaction_no": "txn-1",
                          "amount_minor": 100, "currency": "CNY"});
        let r = refund(good.clone()).unwrap();
        assert_eq!((r.order_no, r.method), (None, None));
        for field in ["refund_no", "transaction_no", "amount_minor", "currency"] {
            let mut b = good.clone();
            b.as_object_mut().unwrap().remove(field);
            assert!(refund(b).unwrap_err().contains(field), "{field}");
        }
        let mut b = good;
        b["method"] = json!("CARD");
        assert!(refund(b).unwrap_err().contains("method"));
    }

    #[test]
    fn faults_parse_from_their_documented_json_and_know_their_target() {
        let f: GatewayFault = serde_json::from_value(json!({"kind": "processing_then", "times": 2,
                                          "status": "CLOSED"}))
        .unwrap();
        assert_eq!(f.target(), Target::RefundCourse);
        let f: GatewayFault = serde_json::from_value(json!({"kind": "query_5xx"})).unwrap();
        assert_eq!(
            f,
            GatewayFault::Query5xx {
                times: 1,
                status: 503
            }
        );
        let f: GatewayFault =
            serde_json::from_value(json!({"kind": "late_callback", "delay_ms": 50})).unwrap();
        assert_eq!(f.target(), Target::PayCallback);
        assert!(GatewayFault::ProcessingThen {
            times: 1,
            status: RefundStatus::Processing,
            failure_reason: None
        }
        .check()
        .is_err());
        assert!(GatewayFault::Query5xx {
            times: 0,
            status: 503
        }
        .check()
        .is_err());
        assert!(GatewayFault::Error5xxAfterAccept { status: 404 }
            .check()
            .is_err());
    }
}
