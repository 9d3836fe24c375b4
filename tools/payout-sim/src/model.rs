//! The provider's data: a create request as parsed from the body, the disbursement it
//! becomes, its status, and the faults a test can script.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// Longest text field of a create request (Xendit allows about this much).
pub const TEXT_CHARS_MAX: usize = 1_000;
/// Longest `X-IDEMPOTENCY-KEY`.
pub const IDEMPOTENCY_KEY_CHARS_MAX: usize = 1_000;
/// Currencies the simulated provider pays out in (Xendit disbursements: IDR).
pub const CURRENCIES: [&str; 1] = ["IDR"];
/// Longest scripted delay: long enough to outlast any client timeout, short enough
/// that a forgotten fault cannot hang a test run.
pub const DELAY_MS_MAX: u64 = 120_000;
/// Delay of `accept_then_timeout` when the fault names none.
pub const TIMEOUT_DELAY_MS_DEFAULT: u64 = 60_000;
/// The failure code of `fail` and `failed_after_completed` when the fault names none.
pub const FAILURE_CODE_DEFAULT: &str = "INVALID_DESTINATION";

/// A `POST /disbursements` body, every field checked (see [`CreateRequest::parse`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateRequest {
    pub external_id: String,
    /// Integer minor units (Xendit sends a JSON number of rupiah; IDR has no minor
    /// unit in practice, but the simulator refuses anything but an integer).
    pub amount: i64,
    pub currency: String,
    pub bank_code: String,
    pub account_holder_name: String,
    pub account_number: String,
    pub description: String,
}

/// A text field: present, a string, 1 to [`TEXT_CHARS_MAX`] characters.
fn text(body: &Map<String, Value>, field: &str) -> Result<String, String> {
    text_max(body, field, TEXT_CHARS_MAX)
}

/// A text field: present, a string, 1 to `max` characters, not blank (the gateway's
/// bodies share this check).
pub(crate) fn text_max(
    body: &Map<String, Value>,
    field: &str,
    max: usize,
) -> Result<String, String> {
    match body.get(field) {
        Some(Value::String(s)) if !s.trim().is_empty() && s.chars().count() <= max => Ok(s.clone()),
        Some(Value::String(_)) => Err(format!("{field} must be 1 to {max} characters")),
        Some(_) => Err(format!("{field} must be a string")),
        None => Err(format!("{field} is required")),
    }
}

/// A JSON object's body, or why not.
pub(crate) fn object(body: &[u8]) -> Result<Map<String, Value>, String> {
    match serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))? {
        Value::Object(map) => Ok(map),
        _ => Err("the body must be a JSON object".to_owned()),
    }
}

/// A strictly positive integer amount of minor units (a fraction, zero, a negative
/// or a string is refused, naming the field).
pub(crate) fn positive_minor(body: &Map<String, Value>, field: &str) -> Result<i64, String> {
    match body.get(field) {
        Some(Value::Number(n)) => n
            .as_i64()
            .filter(|a| *a > 0)
            .ok_or_else(|| format!("{field} must be a positive integer number of minor units")),
        Some(_) => Err(format!("{field} must be a number")),
        None => Err(format!("{field} is required")),
    }
}

impl CreateRequest {
    /// Parses a create body; the error message names the field at fault.
    pub fn parse(body: &[u8]) -> Result<CreateRequest, String> {
        let body = &object(body)?;
        let amount = positive_minor(body, "amount")?;
        let currency = text(body, "currency")?;
        if !CURRENCIES.contains(&currency.as_str()) {
            return Err(format!("currency must be one of {CURRENCIES:?}"));
        }
        let account_number = text(body, "account_number")?;
        if !account_number.chars().all(|c| c.is_ascii_digit()) {
            return Err("account_number must be digits only".into());
        }
        Ok(CreateRequest {
            external_id: text(body, "external_id")?,
            amount,
            currency,
            bank_code: text(body, "bank_code")?,
            account_holder_name: text(body, "account_holder_name")?,
            account_number,
            description: text(body, "description")?,
        })
    }
}

/// Where a disbursement is in its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    Pending,
    Completed,
    Failed,
}

/// One disbursement as the provider keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Disbursement {
    /// `disb-<n>`, unique for the simulator process (not reused after a reset).
    pub id: String,
    #[serde(flatten)]
    pub request: CreateRequest,
    pub status: Status,
    pub failure_code: Option<String>,
    pub created: DateTime<Utc>,
    pub updated: DateTime<Utc>,
    pub idempotency_key: String,
}

pub(crate) fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

impl Disbursement {
    /// The provider API's answer for this disbursement (create, get, query).
    pub fn answer(&self) -> Value {
        let r = &self.request;
        let mut v = json!({
            "id": self.id,
            "external_id": r.external_id,
            "amount": r.amount,
            "currency": r.currency,
            "bank_code": r.bank_code,
            "account_holder_name": r.account_holder_name,
            "account_number": r.account_number,
            "description": r.description,
            "status": self.status,
        });
        if let (Some(code), Some(obj)) = (&self.failure_code, v.as_object_mut()) {
            obj.insert("failure_code".into(), json!(code));
        }
        v
    }

    /// One row of the daily report.
    pub fn report_row(&self) -> Value {
        json!({
            "id": self.id,
            "external_id": self.request.external_id,
            "amount": self.request.amount,
            "currency": self.request.currency,
            "status": self.status,
            "failure_code": self.failure_code,
            "created": rfc3339(self.created),
        })
    }

    /// A callback body reporting `status` (which may be stale: see the faults).
    pub(crate) fn event(
        &self,
        event_id: String,
        status: Status,
        failure_code: Option<&str>,
        updated: DateTime<Utc>,
    ) -> Value {
        json!({
            "event_id": event_id,
            "id": self.id,
            "external_id": self.request.external_id,
            "amount": self.request.amount,
            "currency": self.request.currency,
            "status": status,
            "failure_code": failure_code,
            "updated": rfc3339(updated),
        })
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
fn failure_code_default() -> String {
    FAILURE_CODE_DEFAULT.to_owned()
}

/// A scripted misbehaviour, queued per `external_id`: each create request carrying
/// that external id takes the next fault of its queue (see the crate docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Fault {
    /// Create the disbursement (it settles as usual), then hold the answer this long.
    AcceptThenTimeout {
        #[serde(default = "timeout_delay_default")]
        delay_ms: u64,
    },
    /// Answer this 5xx status and create nothing.
    #[serde(rename = "error_5xx_before_accept")]
    Error5xxBeforeAccept {
        #[serde(default = "status_503")]
        status: u16,
    },
    /// Create the disbursement (it settles as usual), answer this 5xx status.
    #[serde(rename = "error_5xx_after_accept")]
    Error5xxAfterAccept {
        #[serde(default = "status_502")]
        status: u16,
    },
    /// Answer 400 `INSUFFICIENT_BALANCE`, create nothing.
    InsufficientBalance,
    /// Create the disbursement; it settles FAILED with this code.
    Fail {
        #[serde(default = "failure_code_default")]
        failure_code: String,
    },
    /// Create the disbursement, answer after this long.
    SlowSuccess { delay_ms: u64 },
    /// Settle the disbursement and deliver its callbacks before the create answer.
    WebhookBeforeResponse,
    /// Every callback of the disbursement is delivered twice (same event id).
    DuplicateWebhook,
    /// The settling callback is followed by a stale `PENDING` one (a new event id,
    /// an older `updated`).
    OutOfOrderWebhooks,
    /// The disbursement settles COMPLETED, its callback is followed by a contradicting
    /// FAILED one with this code; the provider then reports it FAILED.
    FailedAfterCompleted {
        #[serde(default = "failure_code_default")]
        failure_code: String,
    },
    /// Create the disbursement, answer 200 with a body that is not JSON.
    GarbageBody,
    /// Before the settling callback, deliver one whose body is not JSON.
    GarbageWebhook,
}

impl Fault {
    /// Refuses faults that cannot be carried out (a 5xx fault with a 4xx status …).
    pub fn check(&self) -> Result<(), String> {
        match self {
            Fault::AcceptThenTimeout { delay_ms } | Fault::SlowSuccess { delay_ms }
                if *delay_ms > DELAY_MS_MAX =>
            {
                Err(format!("delay_ms must be at most {DELAY_MS_MAX}"))
            }
            Fault::Error5xxBeforeAccept { status } | Fault::Error5xxAfterAccept { status }
                if !(500..=599).contains(status) =>
            {
                Err(format!("status must be 500 to 599, not {status}"))
            }
            Fault::Fail { failure_code } | Fault::FailedAfterCompleted { failure_code }
                if failure_code.trim().is_empty() =>
            {
                Err("failure_code must not be empty".into())
            }
            _ => Ok(()),
        }
    }
}

/// How a disbursement's callbacks misbehave (from its create request's fault).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WebhookFault {
    Duplicate,
    OutOfOrder,
    FailedAfterCompleted { failure_code: String },
    Garbage,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(v: Value) -> Result<CreateRequest, String> {
        CreateRequest::parse(v.to_string().as_bytes())
    }

    fn good() -> Value {
        json!({"external_id": "p-1", "amount": 150_000, "currency": "IDR", "bank_code": "BCA",
               "account_holder_name": "Ani", "account_number": "1234567890",
               "description": "payout"})
    }

    #[test]
    fn every_field_is_checked_and_the_error_names_it() {
        assert_eq!(body(good()).unwrap().amount, 150_000);
        let cases = [
            ("amount", json!(1.5), "amount"),
            ("amount", json!(0), "amount"),
            ("amount", json!("100"), "amount"),
            ("currency", json!("USD"), "currency"),
            ("account_number", json!("12ab"), "account_number"),
            ("bank_code", json!(""), "bank_code"),
            ("description", json!(7), "description"),
        ];
        for (field, value, named) in cases {
            let mut b = good();
            b[field] = value;
            let e = body(b).unwrap_err();
            assert!(e.contains(named), "{field}: {e}");
        }
        let mut b = good();
        b.as_object_mut().unwrap().remove("external_id");
        assert!(body(b).unwrap_err().contains("external_id"));
        assert!(CreateRequest::parse(b"not json").is_err());
    }

    #[test]
    fn faults_parse_from_their_documented_json() {
        let f: Fault = serde_json::from_value(json!({"kind": "error_5xx_before_accept"})).unwrap();
        assert_eq!(f, Fault::Error5xxBeforeAccept { status: 503 });
        let f: Fault = serde_json::from_value(json!({"kind": "fail"})).unwrap();
        assert_eq!(
            f,
            Fault::Fail {
                failure_code: "INVALID_DESTINATION".into()
            }
        );
        let bad = Fault::Error5xxAfterAccept { status: 404 };
        assert!(bad.check().is_err());
    }
}
