//! From a verified notification to what paid services do with it (the table is in the
//! module doc of `super`), and Apple's prices in milliunits to our minor units.

use super::payload::{Notification, Transaction};
use factledger_aggregates::Currency;

/// Longest transaction id that still makes a renewal order number (`AP-` + id within
/// the order number's 64 characters).
pub const TRANSACTION_ID_CHARS_MAX: usize = 60;
/// The prefix of a renewal order's number: `AP-<transactionId>`.
pub const RENEWAL_ORDER_PREFIX: &str = "AP-";

/// What a notification asks of paid services.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// A purchase or renewal: record the payment on its order.
    Pay(Purchase),
    /// Apple refunded a transaction (`REFUND`).
    Refund(TransactionRef),
    /// The subscription ended at Apple (`EXPIRED`, `GRACE_PERIOD_EXPIRED`).
    Expire { order_no: String },
    /// Stored and answered 200, handled without effect: nothing of ours moves.
    NoEffect { why: &'static str },
}

/// A transaction and the order that holds (or will hold) it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionRef {
    /// The order the app named (`appAccountToken`).
    pub named_order_no: String,
    /// The order whose payment this transaction is: the named one for a first
    /// purchase (`transactionId == originalTransactionId`), else the renewal order
    /// `AP-<transactionId>`.
    pub order_no: String,
    pub transaction_id: String,
    /// Whether this is the first transaction of its purchase.
    pub first: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Purchase {
    pub tx: TransactionRef,
    pub amount_minor: i64,
    pub currency: Currency,
    pub purchased_at_ms: i64,
}

/// Why a notification that should move money cannot be mapped (the handling fails
/// and stays visible in the inbox).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct MappingError(pub String);

fn fail(msg: impl Into<String>) -> MappingError {
    MappingError(msg.into())
}

/// The ledger's minor-unit digits of `code` (`factledger_aggregates::money::
/// minor_digits`: ISO 4217's, whole rupiah for IDR).
pub fn minor_unit_digits(code: &str) -> u32 {
    factledger_aggregates::money::minor_digits(code)
}

/// `price` milliunits of `currency` as whole minor units, exactly: 9990 USD milliunits
/// are 999 cents, 120000 JPY milliunits 120 yen; a price that is not a whole number of
/// minor units (1 JPY milliunit) is refused, never rounded.
pub fn price_minor(price_milli: i64, currency: &str) -> Result<(i64, Currency), MappingError> {
    let c = Currency::parse(currency).map_err(|e| fail(format!("currency: {}", e.rule)))?;
    if price_milli <= 0 {
        return Err(fail(format!("price {price_milli}: must be positive")));
    }
    let digits = minor_unit_digits(c.as_str());
    // milliunits → minor units: × 10^digits / 1000 (digits ≤ 3).
    let scaled = price_milli
        .checked_mul(10i64.pow(digits))
        .ok_or_else(|| fail(format!("price {price_milli}: too large")))?;
    if scaled % 1_000 != 0 {
        return Err(fail(format!(
            "price {price_milli} milliunits of {currency} is not a whole number of minor units"
        )));
    }
    Ok((scaled / 1_000, c))
}

/// An `appAccountToken` as our order number: a UUID, lower-case hyphenated.
pub fn order_no_of(token: &str) -> Result<String, MappingError> {
    let u = uuid::Uuid::parse_str(token)
        .map_err(|_| fail(format!("appAccountToken {token:?} is not a UUID")))?;
    Ok(u.hyphenated().to_string())
}

fn transaction_ref(t: &Transaction) -> Result<TransactionRef, MappingError> {
    let token = t.app_account_token.as_deref().ok_or_else(|| {
        fail("the transaction has no appAccountToken: it names none of our orders")
    })?;
    let named_order_no = order_no_of(token)?;
    let id = &t.transaction_id;
    if id.is_empty()
        || id.len() > TRANSACTION_ID_CHARS_MAX
        || !id.bytes().all(|b| b.is_ascii_alphanumeric())
    {
        return Err(fail(format!(
            "transactionId {id:?}: 1 to {TRANSACTION_ID_CHARS_MAX} letters or digits"
        )));
    }
    // No original id: Apple always sends one; alone, a transaction is its own first.
    let first = match t.original_transaction_id.as_deref() {
        None => true,
        Some(o) => o == id,
    };
    let order_no = if first {
        named_order_no.clone()
    } else {
        format!("{RENEWAL_ORDER_PREFIX}{id}")
    };
    Ok(TransactionRef {
        named_order_no,
        order_no,
        transaction_id: id.clone(),
        first,
    })
}

fn transaction(n: &Notification) -> Result<&Transaction, MappingError> {
    n.data
        .as_ref()
        .and_then(|d| d.transaction_info.as_ref())
        .ok_or_else(|| {
            fail(format!(
                "{} carries no signedTransactionInfo",
                n.event_type()
            ))
        })
}

/// What `n` asks of paid services (the table in the module doc).
pub fn action(n: &Notification) -> Result<Action, MappingError> {
    let subtype = n.subtype.as_deref().unwrap_or("");
    match (n.notification_type.as_str(), subtype) {
        ("SUBSCRIBED", _) | ("DID_RENEW", _) | ("ONE_TIME_CHARGE", _) => {
            let t = transaction(n)?;
            let tx = transaction_ref(t)?;
            let (price, currency) = match (t.price, t.currency.as_deref()) {
                (Some(p), Some(c)) => (p, c),
                _ => return Err(fail("the transaction has no price and currency")),
            };
            let (amount_minor, currency) = price_minor(price, currency)?;
            let purchased_at_ms = t
                .purchase_date
                .ok_or_else(|| fail("the transaction has no purchaseDate"))?;
            Ok(Action::Pay(Purchase {
                tx,
                amount_minor,
                currency,
                purchased_at_ms,
            }))
        }
        ("REFUND", _) => Ok(Action::Refund(transaction_ref(transaction(n)?)?)),
        ("EXPIRED", _) | ("GRACE_PERIOD_EXPIRED", _) => {
            let t = transaction(n)?;
            Ok(Action::Expire {
                order_no: transaction_ref(t)?.named_order_no,
            })
        }
        ("DID_FAIL_TO_RENEW", _) => Ok(Action::NoEffect {
            why: "a failed renewal charged nothing; EXPIRED or DID_RENEW follows",
        }),
        ("DID_CHANGE_RENEWAL_PREF", _)
        | ("DID_CHANGE_RENEWAL_STATUS", _)
        | ("PRICE_INCREASE", _)
        | ("RENEWAL_EXTENDED", _)
        | ("RENEWAL_EXTENSION", _)
        | ("OFFER_REDEEMED", _) => Ok(Action::NoEffect {
            why: "a change to a future renewal: money moves only when it renews",
        }),
        ("REFUND_DECLINED", _) | ("CONSUMPTION_REQUEST", _) => Ok(Action::NoEffect {
            why: "a refund request that moved no money",
        }),
        ("REFUND_REVERSED", _) => Ok(Action::NoEffect {
            why: "a reversed refund: the service-order aggregate records no reversal; an \
                  operator reads it in the inbox",
        }),
        ("REVOKE", _) => Ok(Action::NoEffect {
            why: "Family Sharing revoked: the purchaser's payment is unchanged",
        }),
        _ => Ok(Action::NoEffect {
            why: "a notification type that moves no money here (TEST, metadata, \
                  external purchase tokens, …)",
        }),
    }
}
