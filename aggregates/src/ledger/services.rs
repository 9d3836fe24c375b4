//! The postings of seed 000's paid services (issue 18): candy accounts in `ZZC`
//! (1/100-candy units) and cash service orders in their order's currency.
//!
//! | event                          | debit                               | credit                              |
//! |--------------------------------|-------------------------------------|-------------------------------------|
//! | candy `CandyCredited`          | `candy_issued:RECHARGE:ZZC`         | `candy:{user}:balance`              |
//! | candy `HoldPlaced`             | `candy:{user}:balance`              | `candy:{user}:held`                 |
//! | candy `HoldSettled`            | `candy:{user}:held`                 | `artist_income:{artist}:ZZC`        |
//! | candy `HoldForfeited`          | `candy:{user}:held`                 | `candy_forfeited:{reason}:ZZC`      |
//! | candy `HoldRefunded`           | `candy:{user}:held`                 | `candy:{user}:balance`              |
//! | order `OrderPaid` (cash)       | `gateway_clearing:{method}:{CUR}`   | `service_sales:{business}:{CUR}`    |
//! | order `LatePaymentReceived`    | `gateway_clearing:{method}:{CUR}`   | `refund_payable:{method}:{CUR}`     |
//! | order `OrderRefunded`          | `refund_payable:{method}:{CUR}`     | `gateway_clearing:{method}:{CUR}`   |
//!
//! A candy order's payment posts nothing on the order: its hold is the posting. The
//! candy buckets carry the `debits_must_not_exceed_credits` flag, which the candy
//! aggregate checks when it decides, so no account of a user goes below zero.

use super::{system_account, AccountKind, Posting};
use crate::candy::{CandyEvent, BOOKING_REF_TYPE, RECHARGE_REF_TYPE};
use crate::money::Currency;
use crate::service_order::{OrderEvent, ORDER_REF_TYPE, PAYMENT_REF_TYPE, REFUND_REF_TYPE};
use crate::services::candy_currency;

/// `candy:{user_id}:{bucket}`.
pub fn candy_account(user_id: &str, bucket: &str) -> String {
    format!("{}:{user_id}:{bucket}", AccountKind::CandyBucket.prefix())
}

/// The posting of a candy event of account `user_id` (`None`: it moves nothing).
pub fn candy_posting(user_id: &str, event: &CandyEvent) -> Option<Posting> {
    let zzc = candy_currency();
    let balance = || candy_account(user_id, "balance");
    let held = || candy_account(user_id, "held");
    let (debit, credit, candy, ref_type, ref_id, entry) = match event {
        CandyEvent::CandyAccountOpened { .. } => return None,
        CandyEvent::CandyCredited {
            source,
            order_no,
            candy,
            ..
        } => (
            system_account(AccountKind::CandyIssued, source.as_str(), zzc),
            balance(),
            *candy,
            RECHARGE_REF_TYPE,
            order_no,
            "CANDY_CREDITED",
        ),
        CandyEvent::HoldPlaced {
            booking_no, candy, ..
        } => (
            balance(),
            held(),
            *candy,
            BOOKING_REF_TYPE,
            booking_no,
            "HOLD_PLACED",
        ),
        CandyEvent::HoldSettled {
            booking_no,
            artist_id,
            candy,
            ..
        } => (
            held(),
            system_account(AccountKind::ArtistIncome, &artist_id.to_string(), zzc),
            *candy,
            BOOKING_REF_TYPE,
            booking_no,
            "HOLD_SETTLED",
        ),
        CandyEvent::HoldForfeited {
            booking_no,
            reason,
            candy,
            ..
        } => (
            held(),
            system_account(AccountKind::CandyForfeited, reason, zzc),
            *candy,
            BOOKING_REF_TYPE,
            booking_no,
            "HOLD_FORFEITED",
        ),
        CandyEvent::HoldRefunded {
            booking_no, candy, ..
        } => (
            held(),
            balance(),
            *candy,
            BOOKING_REF_TYPE,
            booking_no,
            "HOLD_REFUNDED",
        ),
    };
    Some(Posting {
        debit,
        credit,
        amount_minor: candy,
        currency: zzc,
        ref_type: ref_type.to_owned(),
        ref_id: ref_id.clone(),
        entry_type: entry.to_owned(),
    })
}

/// The posting of a service order event of an order in cash `currency` (`None`: it
/// moves no cash).
pub fn order_posting(currency: Currency, event: &OrderEvent) -> Option<Posting> {
    let account = |kind, qualifier: &str| system_account(kind, qualifier, currency);
    let (debit, credit, amount, ref_type, ref_id, entry) = match event {
        OrderEvent::OrderPaid { business, payment } if payment.method.is_cash() => (
            account(AccountKind::GatewayClearing, payment.method.as_str()),
            account(AccountKind::ServiceSales, business),
            payment.amount_minor,
            ORDER_REF_TYPE,
            payment.transaction_no.clone(),
            "ORDER_PAID",
        ),
        OrderEvent::LatePaymentReceived { payment, .. } => (
            account(AccountKind::GatewayClearing, payment.method.as_str()),
            account(AccountKind::RefundPayable, payment.method.as_str()),
            payment.amount_minor,
            PAYMENT_REF_TYPE,
            payment.transaction_no.clone(),
            "LATE_PAYMENT",
        ),
        OrderEvent::OrderRefunded {
            refund_no,
            method,
            amount_minor,
            ..
        } => (
            account(AccountKind::RefundPayable, method.as_str()),
            account(AccountKind::GatewayClearing, method.as_str()),
            *amount_minor,
            REFUND_REF_TYPE,
            refund_no.clone(),
            "ORDER_REFUNDED",
        ),
        _ => return None,
    };
    Some(Posting {
        debit,
        credit,
        amount_minor: amount,
        currency,
        ref_type: ref_type.to_owned(),
        ref_id,
        entry_type: entry.to_owned(),
    })
}
