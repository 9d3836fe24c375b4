//! Xendit's payout webhook (docs, "Payout webhook"): a POST with the
//! `x-callback-token` header (the dashboard's verification token) and the envelope
//!
//! ```json
//! {"event": "payout.succeeded", "business_id": "5f27a14a9bf05c73dd040bc8",
//!  "created": "2025-01-01T23:55:59Z",
//!  "data": {"id": "disb-571f3644d2b4edf0745e9703", "amount": 10000,
//!           "channel_code": "ID_BCA", "currency": "IDR", "status": "SUCCEEDED",
//!           "reference_id": "myref-1482928194", ...}}
//! ```
//!
//! Events: `payout.succeeded`, `payout.failed` (with `data.failure_code`),
//! `payout.reversed` (a success bounced back to our balance). Xendit retries a
//! delivery not answered 2xx within 30 s for 24 h, and an operator can resend any
//! event from the dashboard, so one event arrives more than once.
//!
//! **The dedupe id.** The envelope carries no event id. Deliveries carry a
//! `webhook-id` header; where it is sent it is the event id. Where it is not, the
//! event id is `<data.id>:<data.status>`: a payout reaches each status once, so two
//! deliveries of one status change share it and different changes never do.

use super::wire::PayoutBody;
use crate::payouts::provider::ProviderPayout;
use serde::Deserialize;

/// The header carrying a delivery's id where Xendit sends one.
pub const WEBHOOK_ID_HEADER: &str = "webhook-id";

/// Longest event id we accept (the callback inbox keeps 128 characters).
pub const EVENT_ID_CHARS_MAX: usize = 128;

/// The envelope's events and the payout status each reports.
pub const EVENTS: [(&str, &str); 3] = [
    ("payout.succeeded", "SUCCEEDED"),
    ("payout.failed", "FAILED"),
    ("payout.reversed", "REVERSED"),
];

#[derive(Debug, Deserialize)]
struct Envelope {
    event: String,
    data: PayoutBody,
}

/// One delivery, read: its dedupe id, its event and the payout it reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallbackEvent {
    pub event_id: String,
    pub event_type: String,
    pub payout: ProviderPayout,
}

/// Reads a delivery: `webhook_id` is the `webhook-id` header when sent, `raw` the
/// body. An envelope whose `event` contradicts `data.status`, an unknown status,
/// or an amount the currency cannot have is an error naming the field.
pub fn parse(webhook_id: Option<&str>, raw: &[u8]) -> Result<CallbackEvent, String> {
    let envelope: Envelope =
        serde_json::from_slice(raw).map_err(|e| format!("the body is no payout webhook: {e}"))?;
    let data = &envelope.data;
    if let Some((_, status)) = EVENTS.iter().find(|(e, _)| *e == envelope.event) {
        if *status != data.status {
            return Err(format!(
                "event {:?} with data.status {:?}",
                envelope.event, data.status
            ));
        }
    }
    let payout = data.payout("data.")?;
    let event_id = match webhook_id.map(str::trim).filter(|w| !w.is_empty()) {
        Some(w) => w.to_owned(),
        None => format!("{}:{}", data.id, data.status),
    };
    let n = event_id.chars().count();
    if n > EVENT_ID_CHARS_MAX {
        return Err(format!(
            "the event id is {n} characters, more than {EVENT_ID_CHARS_MAX}"
        ));
    }
    Ok(CallbackEvent {
        event_id,
        event_type: envelope.event,
        payout,
    })
}
