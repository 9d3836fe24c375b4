//! Alipay's asynchronous notification (异步通知): a `POST` of an
//! `application/x-www-form-urlencoded` form to our `notify_url`, answered with the
//! text `success` (anything else and Alipay re-sends, 8 times over about 25 hours).
//!
//! **Verifying** ([`NotifyVerifier::verify`]), before anything is stored:
//! 1. the body is read as a form ([`parse_form`]: UTF-8, no repeated name);
//! 2. `sign_type` must be `RSA2` (`RSA`, i.e. SHA1withRSA, is refused);
//! 3. `sign` is checked over the notification's signing string (all fields but
//!    `sign` and `sign_type`, empty ones dropped, sorted, `k=v` joined with `&`, the
//!    decoded values) with the Alipay public key;
//! 4. `app_id` must be ours, and `seller_id`, when sent, our seller's.
//!
//! **Normalising** ([`normalize`]): the form becomes a JSON object of strings (every
//! field, `sign` included: it lets an auditor re-check the stored body); the event
//! id is `notify_id` (the same notification re-sent keeps it; another state change of
//! the same trade gets a new one); the event type is `trade_status`:
//!
//! | `trade_status`   | meaning (Alipay)                         | what we do |
//! |------------------|------------------------------------------|------------|
//! | `TRADE_SUCCESS`  | paid, refundable                         | a payment ([`parse_payment`]) — unless it carries a refund (`out_biz_no`, `refund_fee` > 0 or `gmt_refund`): then a **refund notice**, acknowledged only (refunds settle by query, R-REF-1) |
//! | `TRADE_FINISHED` | paid, no longer refundable (direct, or when the refund window of a `TRADE_SUCCESS` ends) | a payment; the second notice of a trade restates the recorded payment |
//! | `WAIT_BUYER_PAY` | created, not paid                        | acknowledged, nothing recorded |
//! | `TRADE_CLOSED`   | closed unpaid, or fully refunded         | acknowledged, nothing recorded (the order's timeout closes an unpaid order; a refund settles by query) |
//! | anything else    |                                          | not normalisable (stored, never handled) |
//!
//! **Reading a payment** ([`parse_payment`]): `out_trade_no` is our order number,
//! `trade_no` the transaction number, `seller_id` the account, `total_amount` (yuan,
//! exactly) the amount in fen, currency CNY, `gmt_payment` (Beijing time) the paid
//! instant.

use super::sign::{signing_string, AlipayPublicKey, NOTIFY_UNSIGNED, SIGN_TYPE_RSA2};
use super::wire::{parse_beijing_time, parse_form, parse_yuan, CURRENCY};
use crate::services::gateway::{PayMethod, PaymentNotice};
use factledger_aggregates::BoundedId;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The body field whose refusal is named (a public-key signature is no secret).
pub const SIGN_FIELD: &str = "sign";
/// The field that is the inbox's event id.
pub const EVENT_ID_FIELD: &str = "notify_id";
/// The field that is the event type.
pub const EVENT_TYPE_FIELD: &str = "trade_status";
/// Longest `notify_id` taken (Alipay: String(128)).
pub const NOTIFY_ID_CHARS_MAX: usize = 128;

/// A trade's state as a notification reports it (exhaustive: anything else is not
/// normalisable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TradeStatus {
    WaitBuyerPay,
    TradeClosed,
    TradeSuccess,
    TradeFinished,
}

impl TradeStatus {
    pub fn parse(s: &str) -> Option<TradeStatus> {
        Some(match s {
            "WAIT_BUYER_PAY" => TradeStatus::WaitBuyerPay,
            "TRADE_CLOSED" => TradeStatus::TradeClosed,
            "TRADE_SUCCESS" => TradeStatus::TradeSuccess,
            "TRADE_FINISHED" => TradeStatus::TradeFinished,
            _ => return None,
        })
    }

    /// Whether the money arrived (TRADE_SUCCESS, TRADE_FINISHED).
    pub fn is_paid(self) -> bool {
        matches!(self, TradeStatus::TradeSuccess | TradeStatus::TradeFinished)
    }
}

/// What a normalised notification is about (see the module table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoticeKind {
    Payment,
    Refund,
    /// WAIT_BUYER_PAY, TRADE_CLOSED: nothing to record.
    Other,
}

/// The kind of a normalised notification's `data`.
pub fn kind(data: &Value) -> NoticeKind {
    let text = |name: &str| data.get(name).and_then(Value::as_str).unwrap_or("");
    match TradeStatus::parse(text(EVENT_TYPE_FIELD)) {
        Some(s) if s.is_paid() => {
            let refunded = !text("out_biz_no").is_empty()
                || !text("gmt_refund").is_empty()
                || parse_yuan(text("refund_fee")).is_ok_and(|f| f > 0);
            if refunded {
                NoticeKind::Refund
            } else {
                NoticeKind::Payment
            }
        }
        _ => NoticeKind::Other,
    }
}

/// Why a notification was refused before anything was stored: `reason` is the
/// metric label, `message` says why (never the key).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct NotifyRefusal {
    pub reason: &'static str,
    pub message: String,
}

fn refuse(reason: &'static str, message: impl Into<String>) -> NotifyRefusal {
    NotifyRefusal {
        reason,
        message: message.into(),
    }
}

/// Who we are to Alipay, and the key its notifications are signed with.
#[derive(Debug, Clone)]
pub struct NotifyVerifier {
    pub app_id: String,
    /// Our seller (`2088…`); a notification naming another seller is refused.
    pub seller_id: String,
    pub alipay_public_key: AlipayPublicKey,
}

impl NotifyVerifier {
    /// Checks one notification body (see the module docs).
    pub fn verify(&self, body: &[u8]) -> Result<(), NotifyRefusal> {
        let form = parse_form(body).map_err(|e| refuse("malformed", e))?;
        let Some(sign) = form.get(SIGN_FIELD).filter(|s| !s.is_empty()) else {
            return Err(refuse("missing_signature", "the field is missing"));
        };
        match form.get("sign_type").map(String::as_str) {
            Some(SIGN_TYPE_RSA2) => {}
            Some(other) => {
                return Err(refuse(
                    "unsupported_sign_type",
                    format!("sign_type {other:?} is refused; only RSA2 (SHA256withRSA) is taken"),
                ))
            }
            None => {
                return Err(refuse(
                    "unsupported_sign_type",
                    "sign_type is missing; only RSA2 is taken",
                ))
            }
        }
        let content = signing_string(
            form.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            NOTIFY_UNSIGNED,
        );
        self.alipay_public_key
            .verify(&content, sign)
            .map_err(|e| refuse("bad_signature", e.to_string()))?;
        if form.get("app_id") != Some(&self.app_id) {
            return Err(refuse(
                "wrong_app",
                format!("app_id {:?} is not ours", form.get("app_id")),
            ));
        }
        if let Some(seller) = form.get("seller_id") {
            if *seller != self.seller_id {
                return Err(refuse(
                    "wrong_account",
                    format!("seller_id {seller:?} is not our seller"),
                ));
            }
        }
        Ok(())
    }
}

/// A verified notification as (event id, event type, data): see the module docs.
pub fn normalize(body: &[u8]) -> Result<(String, String, Value), String> {
    let form = parse_form(body)?;
    let notify_id = form
        .get(EVENT_ID_FIELD)
        .map(|s| s.trim())
        .filter(|s| !s.is_empty() && s.chars().count() <= NOTIFY_ID_CHARS_MAX)
        .ok_or_else(|| format!("{EVENT_ID_FIELD}: missing, blank or too long"))?
        .to_owned();
    let status = form
        .get(EVENT_TYPE_FIELD)
        .ok_or_else(|| format!("{EVENT_TYPE_FIELD}: missing"))?;
    if TradeStatus::parse(status).is_none() {
        return Err(format!(
            "{EVENT_TYPE_FIELD}: {status:?} is none of WAIT_BUYER_PAY, TRADE_CLOSED, \
             TRADE_SUCCESS, TRADE_FINISHED"
        ));
    }
    let status = status.clone();
    Ok((notify_id, status, data_of(form)))
}

fn data_of(form: BTreeMap<String, String>) -> Value {
    Value::Object(
        form.into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect::<Map<String, Value>>(),
    )
}

fn text<'a>(data: &'a Map<String, Value>, name: &str) -> Result<&'a str, String> {
    match data.get(name) {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s),
        Some(Value::String(_)) => Err(format!("{name}: must not be blank")),
        None | Some(Value::Null) => Err(format!("{name}: missing")),
        Some(other) => Err(format!("{name}: must be a string, got {other}")),
    }
}

fn id(data: &Map<String, Value>, name: &str) -> Result<String, String> {
    BoundedId::parse(text(data, name)?)
        .map(|i| i.as_str().to_owned())
        .map_err(|e| format!("{name}: {e}"))
}

/// Reads a payment from a normalised notification's `data` (see the module docs);
/// anything not a payment (another trade status, a refund notice) is an error naming
/// why.
pub fn parse_payment(data: &Value) -> Result<PaymentNotice, String> {
    let body = data
        .as_object()
        .ok_or_else(|| format!("the notification is not a JSON object: {data}"))?;
    let status = text(body, EVENT_TYPE_FIELD)?;
    match kind(data) {
        NoticeKind::Payment => {}
        NoticeKind::Refund => {
            return Err(format!(
                "a refund notice ({EVENT_TYPE_FIELD} {status:?} with refund fields), not a payment"
            ))
        }
        NoticeKind::Other => {
            return Err(format!(
                "{EVENT_TYPE_FIELD}: {status:?} is not a payment (TRADE_SUCCESS, TRADE_FINISHED)"
            ))
        }
    }
    if let Some(currency) = body.get("trans_currency").and_then(Value::as_str) {
        if currency != CURRENCY {
            return Err(format!(
                "trans_currency: {currency:?}; only {CURRENCY} amounts are read"
            ));
        }
    }
    let amount_text = text(body, "total_amount")?;
    let amount_minor = parse_yuan(amount_text).map_err(|e| format!("total_amount: {e}"))?;
    if amount_minor <= 0 {
        return Err(format!("total_amount: {amount_text:?} is not positive"));
    }
    let paid_at_ms =
        parse_beijing_time(text(body, "gmt_payment")?).map_err(|e| format!("gmt_payment: {e}"))?;
    Ok(PaymentNotice {
        event_id: text(body, EVENT_ID_FIELD)?.trim().to_owned(),
        order_no: id(body, "out_trade_no")?,
        transaction_no: id(body, "trade_no")?,
        method: PayMethod::Alipay,
        account_id: id(body, "seller_id")?,
        amount_minor,
        currency: CURRENCY.to_owned(),
        paid_at_ms,
    })
}
