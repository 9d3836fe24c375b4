//! What Xendit's answers to a create and to a look-up by reference mean for us (the
//! tables are in the parent module's docs). Pure: status and body in, outcome out.

use super::wire::{ErrorBody, PayoutBody, INSUFFICIENT_BALANCE};
use crate::payouts::provider::{
    CreateOutcome, PayoutRequest, ProviderPayout, ProviderStatus, QueryOutcome,
};
use serde::Deserialize;

/// Error codes that say the idempotency key was used before: a payout under this
/// key may well exist (`DUPLICATE_ERROR`: same key, another body; the older names
/// Xendit's guides use for the same answer too).
pub const DUPLICATE_CODES: [&str; 3] = [
    "DUPLICATE_ERROR",
    "DUPLICATE_PAYOUT_ERROR",
    "DUPLICATE_TRANSACTION_ERROR",
];

fn error_of(status: u16, body: &[u8]) -> (String, String) {
    let error: ErrorBody = serde_json::from_slice(body).unwrap_or_default();
    (
        error.error_code.unwrap_or_else(|| format!("HTTP_{status}")),
        error.message.unwrap_or_default(),
    )
}

/// A create answer as an outcome.
pub fn map_create(request: &PayoutRequest, status: u16, body: &[u8]) -> CreateOutcome {
    let unknown = |reason: String| CreateOutcome::Unknown { reason };
    if (200..300).contains(&status) {
        let payout = serde_json::from_slice::<PayoutBody>(body)
            .map_err(|e| format!("HTTP {status} with an unreadable body: {e}"))
            .and_then(|b| b.payout(""));
        return match payout {
            Ok(p) => match contradiction(request, &p) {
                None => CreateOutcome::Created(p),
                Some(why) => unknown(why),
            },
            Err(e) => unknown(e),
        };
    }
    let (code, message) = error_of(status, body);
    match status {
        // Not about this payout: the key, the rate, the clock — it may exist.
        401 | 403 | 408 | 409 | 429 => unknown(format!("HTTP {status} {code}: {message}")),
        400..=499 if DUPLICATE_CODES.contains(&code.as_str()) => {
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
            "answered reference_id {:?} for reference {:?}",
            payout.reference, request.reference
        ));
    }
    if payout.amount_minor != request.amount_minor || payout.currency != request.currency.as_str() {
        return Some(format!(
            "answered {} {} (minor units) for a payout of {} {}",
            payout.amount_minor, payout.currency, request.amount_minor, request.currency
        ));
    }
    None
}

/// A `{data, has_more}` page of payouts (the SDKs' model of the list answer).
#[derive(Deserialize)]
struct Page {
    data: Vec<PayoutBody>,
    #[serde(default)]
    has_more: bool,
}

/// `GET /v2/payouts?reference_id=` answers a JSON array (the API reference); the
/// SDKs model a `{data, has_more}` page. Both are read (by the first character: an
/// untagged enum cannot carry the amounts' raw text); a page that says it has more
/// is not a complete answer.
fn listed(reference: &str, body: &[u8]) -> Result<Vec<PayoutBody>, String> {
    let array = body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[');
    let unreadable = |e: serde_json::Error| format!("HTTP 200 with an unreadable body: {e}");
    if array {
        return serde_json::from_slice(body).map_err(unreadable);
    }
    let page: Page = serde_json::from_slice(body).map_err(unreadable)?;
    if page.has_more {
        return Err(format!("more than one page of payouts for {reference:?}"));
    }
    Ok(page.data)
}

/// A look-up answer as an outcome. Several payouts with our reference must agree on
/// the amount; at most one may be live (accepted or succeeded) — two live ones are a
/// double payout, which only a person can sort out.
pub fn map_query(reference: &str, status: u16, body: &[u8]) -> QueryOutcome {
    let unknown = |reason: String| QueryOutcome::Unknown { reason };
    if status != 200 {
        let (code, message) = error_of(status, body);
        return unknown(format!("HTTP {status} {code}: {message}"));
    }
    let listed = match listed(reference, body) {
        Ok(l) => l,
        Err(e) => return unknown(e),
    };
    let mut mine = Vec::new();
    for b in listed.iter().filter(|b| b.reference_id == reference) {
        match b.payout("") {
            Ok(p) => mine.push(p),
            Err(e) => return unknown(e),
        }
    }
    let Some(first) = mine.first() else {
        // Documented: an empty array when no payout has the reference.
        return QueryOutcome::Absent;
    };
    if mine
        .iter()
        .any(|p| p.amount_minor != first.amount_minor || p.currency != first.currency)
    {
        return unknown(format!(
            "{} payouts for {reference:?} contradict each other's amounts",
            mine.len()
        ));
    }
    let live: Vec<&ProviderPayout> = mine
        .iter()
        .filter(|p| {
            matches!(
                p.status,
                ProviderStatus::Accepted | ProviderStatus::Succeeded
            )
        })
        .collect();
    match live.as_slice() {
        [one] => QueryOutcome::Found((*one).clone()),
        [] => mine
            .pop()
            .map(QueryOutcome::Found)
            .unwrap_or_else(|| unknown("no payout".into())),
        many => unknown(format!(
            "{} live payouts for {reference:?}: a double payout",
            many.len()
        )),
    }
}
