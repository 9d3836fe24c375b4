//! The provider's data: a create request as parsed from the body, the payout it
//! becomes, its status, the answers and webhook envelopes it is shown as, and the
//! faults a test can script.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// Longest text field of a create request (Xendit: `reference_id` 255, names 100;
/// the simulator is a little looser).
pub const TEXT_CHARS_MAX: usize = 1_000;
/// Longest `Idempotency-key` (Xendit: 100).
pub const IDEMPOTENCY_KEY_CHARS_MAX: usize = 100;
/// Currencies the simulated provider pays out in, with the digits after the point
/// its `amount` (a JSON number in the major unit) may have (Xendit's Create Payout:
/// IDR and VND integers, PHP, MYR and THB up to 2 places).
pub const CURRENCIES: [(&str, u32); 6] = [
    ("IDR", 0),
    ("MYR", 2),
    ("PHP", 2),
    ("THB", 2),
    ("USD", 2),
    ("VND", 0),
];
/// The `business_id` of the simulated Xendit account.
pub const BUSINESS_ID: &str = "5f27a14a9bf05c73dd040bc8";
/// Longest scripted delay: long enough to outlast any client timeout, short enough
/// that a forgotten fault cannot hang a test run.
pub const DELAY_MS_MAX: u64 = 120_000;
/// Delay of `accept_then_timeout` when the fault names none.
pub const TIMEOUT_DELAY_MS_DEFAULT: u64 = 60_000;
/// The failure code of `fail` and `failed_after_completed` when the fault names none.
pub const FAILURE_CODE_DEFAULT: &str = "INVALID_DESTINATION";

/// A `POST /v2/payouts` body, every field checked (see [`CreateRequest::parse`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateRequest {
    pub reference_id: String,
    pub channel_code: String,
    pub account_number: String,
    pub account_holder_name: String,
    /// The amount in minor units of `currency` (read exactly from the major-unit
    /// number on the wire).
    pub amount_minor: i64,
    pub currency: String,
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
/// or a string is refused, naming the field): the gateway's amounts.
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

/// The digits of `currency`, if the simulated provider pays out in it.
pub fn currency_digits(currency: &str) -> Option<u32> {
    CURRENCIES
        .iter()
        .find(|(c, _)| *c == currency)
        .map(|(_, d)| *d)
}

/// `minor` as the decimal text of the major unit (`12345`, 2 → `123.45`).
pub fn major_text(minor: i64, digits: u32) -> String {
    let sign = if minor < 0 { "-" } else { "" };
    let magnitude = minor.unsigned_abs().to_string();
    let d = digits as usize;
    if d == 0 {
        return format!("{sign}{magnitude}");
    }
    let padded = format!("{magnitude:0>width$}", width = d + 1);
    let (whole, fraction) = padded.split_at(padded.len() - d);
    format!("{sign}{whole}.{fraction}")
}

/// The JSON number text `text` in minor units, exactly: a string, an exponent, a
/// sign, more decimals than `digits` (`1.005` PHP, `100.5` IDR) or zero is refused.
pub fn parse_major(text: &str, digits: u32) -> Result<i64, String> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits_only = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits_only(whole) || (text.contains('.') && !digits_only(fraction)) {
        return Err(format!("amount must be a positive number, not {text}"));
    }
    if fraction.len() > digits as usize {
        return Err(format!(
            "amount {text} has more than {digits} decimal places for this currency"
        ));
    }
    let scaled = format!("{whole}{fraction:0<width$}", width = digits as usize);
    match scaled.parse::<i64>() {
        Ok(n) if n > 0 => Ok(n),
        Ok(_) => Err("amount must be greater than 0".into()),
        Err(_) => Err(format!("amount {text} is out of range")),
    }
}

/// Only the `amount` of a create body, as its raw text.
#[derive(Deserialize)]
struct RawAmount {
    amount: Option<Box<RawValue>>,
}

impl CreateRequest {
    /// Parses a create body; the error message names the field at fault.
    pub fn parse(body: &[u8]) -> Result<CreateRequest, String> {
        let map = &object(body)?;
        let currency = text(map, "currency")?;
        let digits = currency_digits(&currency).ok_or_else(|| {
            let names: Vec<&str> = CURRENCIES.iter().map(|(c, _)| *c).collect();
            format!("currency must be one of {names:?}")
        })?;
        let raw: RawAmount =
            serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
        let amount = raw.amount.ok_or("amount is required")?;
        if !matches!(map.get("amount"), Some(Value::Number(_))) {
            return Err("amount must be a number".into());
        }
        let amount_minor = parse_major(amount.get(), digits)?;
        let props = match map.get("channel_properties") {
            Some(Value::Object(p)) => p,
            Some(_) => return Err("channel_properties must be an object".into()),
            None => return Err("channel_properties is required".into()),
        };
        let account_number =
            text(props, "account_number").map_err(|e| format!("channel_properties.{e}"))?;
        if !account_number.chars().all(|c| c.is_ascii_digit()) {
            return Err("channel_properties.account_number must be digits only".into());
        }
        let account_holder_name =
            text(props, "account_holder_name").map_err(|e| format!("channel_properties.{e}"))?;
        Ok(CreateRequest {
            reference_id: text(map, "reference_id")?,
            channel_code: text(map, "channel_code")?,
            account_number,
            account_holder_name,
            amount_minor,
            currency,
            description: text(map, "description")?,
        })
    }
}

/// Where a payout is in its lifecycle (Xendit's statuses; the simulator never
/// sends one to a channel, so it goes from `ACCEPTED` straight to the end).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    Accepted,
    #[serde(alias = "COMPLETED")]
    Succeeded,
    Failed,
    Cancelled,
    /// Succeeded, then returned by the bank to the business's balance.
    Reversed,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Accepted => "ACCEPTED",
            Status::Succeeded => "SUCCEEDED",
            Status::Failed => "FAILED",
            Status::Cancelled => "CANCELLED",
            Status::Reversed => "REVERSED",
        }
    }

    /// The webhook event reporting this status (`ACCEPTED` has none at Xendit; the
    /// simulator's stale deliveries call it `payout.accepted`).
    pub fn event(self) -> &'static str {
        match self {
            Status::Accepted => "payout.accepted",
            Status::Succeeded => "payout.succeeded",
            Status::Failed => "payout.failed",
            Status::Cancelled => "payout.cancelled",
            Status::Reversed => "payout.reversed",
        }
    }
}

/// One payout as the provider keeps it (`Disbursement`: Xendit's ids still say
/// `disb-`).
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

/// The `channel_properties` of an answer.
#[derive(Debug, Serialize)]
pub struct ChannelPropertiesAnswer {
    pub account_number: String,
    pub account_holder_name: String,
}

/// A Payout object as the API shows it (create, get, list, webhook `data`): the
/// amount a JSON number in the major unit, written from its exact decimal text.
#[derive(Debug, Serialize)]
pub struct PayoutAnswer {
    pub id: String,
    pub amount: Box<RawValue>,
    pub channel_code: String,
    pub currency: String,
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_code: Option<String>,
    pub description: String,
    pub reference_id: String,
    pub created: String,
    pub updated: String,
    pub estimated_arrival_time: String,
    pub business_id: &'static str,
    pub channel_properties: ChannelPropertiesAnswer,
}

/// A payout webhook (docs, "Payout webhook").
#[derive(Debug, Serialize)]
pub struct WebhookEnvelope {
    pub event: &'static str,
    pub business_id: &'static str,
    pub created: String,
    pub data: PayoutAnswer,
}

/// A Transaction object of the Transactions API (`GET /transactions`).
#[derive(Debug, Serialize)]
pub struct TransactionAnswer {
    pub id: String,
    pub product_id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub status: &'static str,
    pub channel_category: &'static str,
    pub channel_code: String,
    pub reference_id: String,
    pub account_identifier: String,
    pub currency: String,
    pub amount: Box<RawValue>,
    pub cashflow: &'static str,
    pub settlement_status: &'static str,
    pub business_id: &'static str,
    pub created: String,
    pub updated: String,
}

impl Disbursement {
    fn amount_raw(&self) -> Box<RawValue> {
        let r = &self.request;
        let digits = currency_digits(&r.currency).unwrap_or(0);
        // Provably infallible: `major_text` writes digits with at most one point
        // between digits (amounts are positive), always a valid JSON number.
        RawValue::from_string(major_text(r.amount_minor, digits))
            .expect("a decimal text is a JSON number")
    }

    /// The API's Payout object, reporting `status` (the payout's own unless stale).
    pub fn answer_as(
        &self,
        status: Status,
        failure_code: Option<&str>,
        updated: DateTime<Utc>,
    ) -> PayoutAnswer {
        let r = &self.request;
        PayoutAnswer {
            id: self.id.clone(),
            amount: self.amount_raw(),
            channel_code: r.channel_code.clone(),
            currency: r.currency.clone(),
            status: status.as_str(),
            failure_code: failure_code.map(str::to_owned),
            description: r.description.clone(),
            reference_id: r.reference_id.clone(),
            created: rfc3339(self.created),
            updated: rfc3339(updated),
            estimated_arrival_time: rfc3339(self.created + chrono::Duration::minutes(15)),
            business_id: BUSINESS_ID,
            channel_properties: ChannelPropertiesAnswer {
                account_number: r.account_number.clone(),
                account_holder_name: r.account_holder_name.clone(),
            },
        }
    }

    /// The API's Payout object as the payout is now.
    pub fn answer(&self) -> PayoutAnswer {
        self.answer_as(self.status, self.failure_code.as_deref(), self.updated)
    }

    /// The payout as a Transaction of the Transactions API.
    pub fn transaction(&self) -> TransactionAnswer {
        let r = &self.request;
        let status = match self.status {
            Status::Accepted => "PENDING",
            Status::Succeeded => "SUCCESS",
            Status::Failed => "FAILED",
            Status::Cancelled => "VOIDED",
            Status::Reversed => "REVERSED",
        };
        TransactionAnswer {
            id: format!("txn_{}", self.id),
            product_id: self.id.clone(),
            kind: "DISBURSEMENT",
            status,
            channel_category: "BANK",
            channel_code: r.channel_code.clone(),
            reference_id: r.reference_id.clone(),
            account_identifier: r.account_number.clone(),
            currency: r.currency.clone(),
            amount: self.amount_raw(),
            cashflow: "MONEY_OUT",
            settlement_status: "SETTLED",
            business_id: BUSINESS_ID,
            created: rfc3339(self.created),
            updated: rfc3339(self.updated),
        }
    }

    /// A webhook body reporting `status` (which may be stale: see the faults).
    pub(crate) fn event(
        &self,
        status: Status,
        failure_code: Option<&str>,
        updated: DateTime<Utc>,
    ) -> String {
        let envelope = WebhookEnvelope {
            event: status.event(),
            business_id: BUSINESS_ID,
            created: rfc3339(updated),
            data: self.answer_as(status, failure_code, updated),
        };
        serde_json::to_string(&envelope).unwrap_or_default()
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

/// A scripted misbehaviour, queued per `reference_id`: each create request carrying
/// that reference takes the next fault of its queue (see the crate docs).
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
    /// The settling callback is followed by a stale one reporting `ACCEPTED` (a new
    /// webhook id, an older `updated`).
    OutOfOrderWebhooks,
    /// The payout settles SUCCEEDED, its callback is followed by a contradicting
    /// FAILED one with this code; the provider then reports it FAILED.
    FailedAfterCompleted {
        #[serde(default = "failure_code_default")]
        failure_code: String,
    },
    /// The payout settles SUCCEEDED, then the bank returns it: a `payout.reversed`
    /// callback follows and the provider reports it REVERSED from then on.
    ReversedAfterSucceeded,
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
    Reversed,
    Garbage,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(v: Value) -> Result<CreateRequest, String> {
        CreateRequest::parse(v.to_string().as_bytes())
    }

    /// Xendit's Create Payout example body (docs, `createPayoutExample`).
    fn good() -> Value {
        json!({"reference_id": "myref-1482928194", "channel_code": "ID_BCA",
               "channel_properties": {"account_number": "000000000099",
                                      "account_holder_name": "Michael Chen"},
               "amount": 10000, "description": "July payout", "currency": "IDR"})
    }

    #[test]
    fn every_field_is_checked_and_the_error_names_it() {
        assert_eq!(body(good()).unwrap().amount_minor, 10_000);
        let cases = [
            ("amount", json!(1.5), "amount"),
            ("amount", json!(0), "amount"),
            ("amount", json!("100"), "amount"),
            ("currency", json!("EUR"), "currency"),
            ("channel_code", json!(""), "channel_code"),
            ("description", json!(7), "description"),
            (
                "channel_properties",
                json!({"account_number": "12ab",
                                          "account_holder_name": "A"}),
                "account_number",
            ),
            (
                "channel_properties",
                json!({"account_number": "12"}),
                "account_holder_name",
            ),
        ];
        for (field, value, named) in cases {
            let mut b = good();
            b[field] = value;
            let e = body(b).unwrap_err();
            assert!(e.contains(named), "{field}: {e}");
        }
        let mut b = good();
        b.as_object_mut().unwrap().remove("reference_id");
        assert!(body(b).unwrap_err().contains("reference_id"));
        assert!(CreateRequest::parse(b"not json").is_err());
    }

    #[test]
    fn amounts_are_major_units_read_exactly_per_currency() {
        let php = |amount: &str| {
            let text = good()
                .to_string()
                .replace("10000", amount)
                .replace("IDR", "PHP");
            CreateRequest::parse(text.as_bytes()).map(|r| r.amount_minor)
        };
        assert_eq!(php("1.11"), Ok(111)); // Xendit's PHP example
        assert_eq!(php("123.4"), Ok(12_340));
        assert!(php("1.005").is_err());
        assert!(php("1e2").is_err());
        let d = Disbursement {
            id: "disb-1".into(),
            request: body(good()).unwrap(),
            status: Status::Accepted,
            failure_code: None,
            created: Utc::now(),
            updated: Utc::now(),
            idempotency_key: "k".into(),
        };
        let shown = serde_json::to_string(&d.answer()).unwrap();
        assert!(shown.contains(r#""amount":10000,"#), "{shown}");
        let mut php_payout = d.clone();
        php_payout.request.currency = "PHP".into();
        php_payout.request.amount_minor = 12_345;
        let shown = serde_json::to_string(&php_payout.answer()).unwrap();
        assert!(shown.contains(r#""amount":123.45,"#), "{shown}");
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
