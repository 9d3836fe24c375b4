//! WeChat Pay APIv3's bodies and how they map onto the gateway boundary: the
//! notification envelope and its decrypted resource, the transaction
//! (`original_type` `transaction`), the refund (`refund`, the same fields in a refund
//! create's answer, a query's answer and a refund notification's resource), and the
//! error body `{code, message}`.
//!
//! Amounts are integers in the currency's smallest unit (`amount.total` of a CNY
//! payment is fen), which is what factledger keeps: no decimal conversion happens.
//!
//! # Transaction states (`trade_state`)
//!
//! | trade_state | meaning | a [`PaymentNotice`]? |
//! |---|---|---|
//! | SUCCESS | paid | yes |
//! | REFUND | paid, then (part) refunded | no: its payment was a SUCCESS before |
//! | NOTPAY, USERPAYING | not paid (yet) | no |
//! | CLOSED, REVOKED, PAYERROR | not paid, will not be | no |
//!
//! Any other value is refused as unknown (never guessed to be a payment).
//!
//! # Refund statuses (`status` in answers, `refund_status` in notifications)
//!
//! | status | [`RefundAnswer`] |
//! |---|---|
//! | SUCCESS | `Succeeded` (the `refund_id`) |
//! | PROCESSING | `Processing` |
//! | CLOSED | `Closed` |
//! | ABNORMAL | `Processing`: the money could not reach the payer (card closed or frozen); WeChat holds it until the merchant re-routes it ("异常退款"), after which it turns SUCCESS — not final, so settling it `Failed` would contradict that later SUCCESS |
//! | anything else | `Unknown` |

use super::super::gateway::{
    truncate, PayMethod, PaymentNotice, RefundAnswer, GATEWAY_RESPONSE_BYTES_MAX,
};
use factledger_aggregates::Currency;
use serde::Deserialize;
use serde_json::{Map, Value};

/// The event type of a pay notification.
pub const TRANSACTION_SUCCESS: &str = "TRANSACTION.SUCCESS";
/// The event types of refund notifications.
pub const REFUND_SUCCESS: &str = "REFUND.SUCCESS";
pub const REFUND_ABNORMAL: &str = "REFUND.ABNORMAL";
pub const REFUND_CLOSED: &str = "REFUND.CLOSED";
/// `resource_type` of every APIv3 notification.
pub const ENCRYPT_RESOURCE: &str = "encrypt-resource";
/// Longest id read (WeChat's ids are at most 64; a notification id at most 36).
pub const ID_CHARS_MAX: usize = 64;

/// A notification as WeChat POSTs it.
#[derive(Debug, Clone, Deserialize)]
pub struct Notification {
    pub id: String,
    #[serde(default)]
    pub create_time: Option<String>,
    pub event_type: String,
    pub resource_type: String,
    #[serde(default)]
    pub summary: Option<String>,
    pub resource: Resource,
}

/// The encrypted resource of a notification.
#[derive(Debug, Clone, Deserialize)]
pub struct Resource {
    pub algorithm: String,
    pub ciphertext: String,
    #[serde(default)]
    pub associated_data: Option<String>,
    pub nonce: String,
    pub original_type: String,
}

/// What a notification's resource decrypted to must be, by its event type.
pub fn original_type_of(event_type: &str) -> Option<&'static str> {
    if event_type.starts_with("TRANSACTION.") {
        Some("transaction")
    } else if event_type.starts_with("REFUND.") {
        Some("refund")
    } else {
        None
    }
}

/// A transaction's state (see the module docs' table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TradeState {
    Success,
    Refund,
    NotPay,
    Closed,
    Revoked,
    UserPaying,
    PayError,
}

impl TradeState {
    pub fn parse(s: &str) -> Option<TradeState> {
        Some(match s {
            "SUCCESS" => TradeState::Success,
            "REFUND" => TradeState::Refund,
            "NOTPAY" => TradeState::NotPay,
            "CLOSED" => TradeState::Closed,
            "REVOKED" => TradeState::Revoked,
            "USERPAYING" => TradeState::UserPaying,
            "PAYERROR" => TradeState::PayError,
            _ => return None,
        })
    }
}

fn field<'a>(body: &'a Map<String, Value>, name: &str) -> Result<&'a str, String> {
    super::super::gateway::string_field(body, name, ID_CHARS_MAX)
}

fn id_field(body: &Map<String, Value>, name: &str) -> Result<String, String> {
    super::super::gateway::id_field(body, name, ID_CHARS_MAX)
}

fn object<'a>(body: &'a Map<String, Value>, name: &str) -> Result<&'a Map<String, Value>, String> {
    body.get(name)
        .and_then(Value::as_object)
        .ok_or_else(|| format!("{name}: missing or not an object"))
}

/// A positive integer amount in minor units at `amount.<name>`.
fn minor(amount: &Map<String, Value>, name: &str) -> Result<i64, String> {
    let v = amount
        .get(name)
        .ok_or_else(|| format!("amount.{name}: missing"))?;
    v.as_i64()
        .filter(|a| *a > 0)
        .ok_or_else(|| format!("amount.{name}: must be a positive integer of minor units, got {v}"))
}

/// `amount.currency` as an ISO 4217 code (WeChat omits it for CNY in places: CNY).
fn currency(amount: &Map<String, Value>) -> Result<String, String> {
    let text = match amount.get("currency") {
        None | Some(Value::Null) => "CNY",
        Some(Value::String(s)) => s.as_str(),
        Some(other) => return Err(format!("amount.currency: must be a string, got {other}")),
    };
    Currency::parse(text)
        .map(|c| c.as_str().to_owned())
        .map_err(|e| format!("amount.currency: {e}"))
}

/// RFC 3339 (`2018-06-08T10:34:56+08:00`) as epoch milliseconds.
fn instant_ms(body: &Map<String, Value>, name: &str) -> Result<i64, String> {
    let text = field(body, name)?;
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| t.timestamp_millis())
        .map_err(|e| format!("{name}: not an RFC 3339 time ({e})"))
}

/// The merchant a transaction or refund is for: ours, or refused.
fn ours(body: &Map<String, Value>, mchid: &str) -> Result<(), String> {
    let theirs = field(body, "mchid")?;
    if theirs != mchid {
        return Err(format!("mchid: {theirs:?} is not our merchant ({mchid:?})"));
    }
    Ok(())
}

/// A decrypted transaction as a [`PaymentNotice`] of merchant `mchid` (and app
/// `appid`): only a SUCCESS is one (the module docs' table). The notice's
/// `event_id` is the `transaction_id`: the transaction carries no notification id
/// (the inbox deduplicated by that one already).
pub fn parse_payment(data: &Value, mchid: &str, appid: &str) -> Result<PaymentNotice, String> {
    let body = data
        .as_object()
        .ok_or_else(|| format!("the transaction is not a JSON object: {data}"))?;
    let state_text = field(body, "trade_state")?;
    let state = TradeState::parse(state_text)
        .ok_or_else(|| format!("trade_state: unknown state {state_text:?}"))?;
    if state != TradeState::Success {
        return Err(format!(
            "trade_state: {state_text:?} is not a payment (only SUCCESS is)"
        ));
    }
    ours(body, mchid)?;
    let their_app = field(body, "appid")?;
    if their_app != appid {
        return Err(format!("appid: {their_app:?} is not our app ({appid:?})"));
    }
    let transaction_no = id_field(body, "transaction_id")?;
    let amount = object(body, "amount")?;
    Ok(PaymentNotice {
        event_id: transaction_no.clone(),
        order_no: id_field(body, "out_trade_no")?,
        transaction_no,
        method: PayMethod::Wechat,
        account_id: mchid.to_owned(),
        amount_minor: minor(amount, "total")?,
        currency: currency(amount)?,
        paid_at_ms: instant_ms(body, "success_time")?,
    })
}

/// A refund's status (see the module docs' table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefundStatus {
    Success,
    Processing,
    Closed,
    Abnormal,
}

impl RefundStatus {
    pub fn parse(s: &str) -> Option<RefundStatus> {
        Some(match s {
            "SUCCESS" => RefundStatus::Success,
            "PROCESSING" => RefundStatus::Processing,
            "CLOSED" => RefundStatus::Closed,
            "ABNORMAL" => RefundStatus::Abnormal,
            _ => return None,
        })
    }
}

/// The body as stored text (lossy UTF-8, cut to what a refund keeps).
pub fn text_of(body: &[u8]) -> String {
    truncate(&String::from_utf8_lossy(body), GATEWAY_RESPONSE_BYTES_MAX)
}

/// What a refund object (an answer's body, or a refund notification's resource)
/// says of refund `refund_no`: `Unknown` unless it is that refund (with `amount`'s
/// refund and currency, when given) in a known status. `status_field` is `status`
/// in answers and `refund_status` in notifications.
pub fn refund_answer(
    refund_no: &str,
    amount: Option<(i64, &str)>,
    status_field: &str,
    refund: &Value,
    response: String,
) -> RefundAnswer {
    let unknown = |error: String| RefundAnswer::Unknown { error };
    let Some(body) = refund.as_object() else {
        return unknown(format!("the refund is not a JSON object: {response}"));
    };
    match field(body, "out_refund_no") {
        Ok(theirs) if theirs == refund_no => {}
        Ok(theirs) => {
            return unknown(format!(
                "answered out_refund_no {theirs:?} for {refund_no:?}"
            ))
        }
        Err(e) => return unknown(e),
    }
    if let Some((minor_sent, currency_sent)) = amount {
        let Ok(a) = object(body, "amount") else {
            return unknown("amount: missing".into());
        };
        let got = (minor(a, "refund"), currency(a));
        if got.0.as_ref().ok() != Some(&minor_sent) || got.1.as_deref().ok() != Some(currency_sent)
        {
            return unknown(format!(
                "answered {:?} {:?} for a refund of {minor_sent} {currency_sent}",
                got.0, got.1
            ));
        }
    }
    let status_text = match field(body, status_field) {
        Ok(s) => s,
        Err(e) => return unknown(e),
    };
    match RefundStatus::parse(status_text) {
        Some(RefundStatus::Success) => match id_field(body, "refund_id") {
            Ok(gateway_refund_id) => RefundAnswer::Succeeded {
                gateway_refund_id,
                response,
            },
            Err(e) => unknown(format!("SUCCESS without a usable refund_id: {e}")),
        },
        Some(RefundStatus::Processing | RefundStatus::Abnormal) => {
            RefundAnswer::Processing { response }
        }
        Some(RefundStatus::Closed) => RefundAnswer::Closed { response },
        None => unknown(format!("unknown refund status {status_text:?}")),
    }
}

/// A refund notification's decrypted resource: the refund number it is about and
/// what it says, for merchant `mchid`.
pub fn parse_refund_notice(data: &Value, mchid: &str) -> Result<(String, RefundAnswer), String> {
    let body = data
        .as_object()
        .ok_or_else(|| format!("the refund is not a JSON object: {data}"))?;
    ours(body, mchid)?;
    let refund_no = id_field(body, "out_refund_no")?;
    let response = truncate(&data.to_string(), GATEWAY_RESPONSE_BYTES_MAX);
    match refund_answer(&refund_no, None, "refund_status", data, response) {
        RefundAnswer::Unknown { error } => Err(error),
        answer => Ok((refund_no, answer)),
    }
}

/// WeChat's error body.
#[derive(Debug, Clone, Deserialize)]
pub struct ErrorBody {
    pub code: String,
    #[serde(default)]
    pub message: String,
}

pub fn error_body(body: &[u8]) -> Option<ErrorBody> {
    serde_json::from_slice::<ErrorBody>(body)
        .ok()
        .filter(|e| !e.code.trim().is_empty())
}
