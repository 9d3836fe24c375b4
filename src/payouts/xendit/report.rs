//! A day's payouts from Xendit's Transactions API (docs, "List Transactions";
//! Xendit publishes no payout report endpoint for the Payouts API):
//!
//! `GET /transactions?types=DISBURSEMENT&created[gte]=<day>T00:00:00.000Z
//! &created[lt]=<next day>T00:00:00.000Z&limit=<n>[&after_id=<last id>]`
//!
//! answers `{"has_more": bool, "data": [Transaction], "links": [...]}`, ordered by
//! creation; while `has_more`, the next page starts after the last id. A payout is a
//! transaction of type `DISBURSEMENT` whose `product_id` is the payout id
//! (`disb-…`) and `reference_id` our reference, `amount` a number in the major unit.
//!
//! | transaction `status` | [`ProviderStatus`] |
//! |---|---|
//! | `PENDING` | `Accepted` |
//! | `SUCCESS` | `Succeeded` |
//! | `FAILED`, `VOIDED` | `Failed { code: the status, recoverable: false }` |
//! | `REVERSED` | `Reversed` |
//! | anything else | the report fails, naming the row |

use super::amount;
use crate::payouts::provider::{ProviderPayout, ProviderStatus};
use chrono::NaiveDate;
use serde::Deserialize;
use serde_json::value::RawValue;

/// The transaction type of a payout.
pub const PAYOUT_TYPE: &str = "DISBURSEMENT";
/// Transactions asked for per page.
pub const PAGE_LIMIT: usize = 50;
/// Pages read for one day at most (50,000 payouts); past it the report fails
/// rather than reconcile a partial day.
pub const PAGES_MAX: usize = 1_000;

/// The query of one page of `date`'s payouts.
pub fn query(date: NaiveDate, after_id: Option<&str>) -> Vec<(&'static str, String)> {
    let day = |d: NaiveDate| format!("{}T00:00:00.000Z", d.format("%Y-%m-%d"));
    let next = date.succ_opt().unwrap_or(date);
    let mut q = vec![
        ("types", PAYOUT_TYPE.to_owned()),
        ("created[gte]", day(date)),
        ("created[lt]", day(next)),
        ("limit", PAGE_LIMIT.to_string()),
    ];
    if let Some(id) = after_id {
        q.push(("after_id", id.to_owned()));
    }
    q
}

#[derive(Debug, Deserialize)]
struct Transaction {
    id: String,
    product_id: String,
    #[serde(rename = "type")]
    kind: String,
    status: String,
    reference_id: String,
    currency: String,
    amount: Box<RawValue>,
}

#[derive(Debug, Deserialize)]
struct Page {
    has_more: bool,
    data: Vec<Transaction>,
}

/// One page read: the payouts on it, and the id to continue after when it has more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRead {
    pub payouts: Vec<ProviderPayout>,
    pub next_after_id: Option<String>,
}

fn status(t: &Transaction) -> Result<ProviderStatus, String> {
    match t.status.as_str() {
        "PENDING" => Ok(ProviderStatus::Accepted),
        "SUCCESS" => Ok(ProviderStatus::Succeeded),
        "FAILED" | "VOIDED" => Ok(ProviderStatus::Failed {
            code: t.status.clone(),
            recoverable: false,
        }),
        "REVERSED" => Ok(ProviderStatus::Reversed),
        other => Err(format!("transaction {}: unknown status {other:?}", t.id)),
    }
}

/// Reads one page (other transaction types on it are skipped).
pub fn read_page(body: &[u8]) -> Result<PageRead, String> {
    let page: Page = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let next_after_id = match (page.has_more, page.data.last()) {
        (true, Some(last)) => Some(last.id.clone()),
        (true, None) => return Err("has_more with an empty page".into()),
        (false, _) => None,
    };
    let mut payouts = Vec::new();
    for t in page.data.iter().filter(|t| t.kind == PAYOUT_TYPE) {
        let digits = amount::digits(&t.currency)
            .ok_or_else(|| format!("transaction {}: currency {:?}", t.id, t.currency))?;
        let amount_minor = amount::from_major(t.amount.get(), digits)
            .map_err(|e| format!("transaction {}: {e}", t.id))?;
        payouts.push(ProviderPayout {
            provider_id: t.product_id.clone(),
            reference: t.reference_id.clone(),
            amount_minor,
            currency: t.currency.clone(),
            status: status(t)?,
        });
    }
    Ok(PageRead {
        payouts,
        next_after_id,
    })
}
