//! The service order (seed 000 `tieup_order`, issue 18 item 2): one stream per order
//! (stream id = the order number). A cash order is created (status 0), maybe paying
//! (1), paid by a gateway callback (2), then delivered (3): candy credited, an
//! entitlement granted or a booking activated. Unpaid past its timeout it closes (4);
//! a refund of its payment ends it refunded (6). A candy order (a booking) is created
//! paid: its payment is the hold on the payer's candy, in the same unit.
//!
//! **A callback after the close** (R-CB-2, the rule this system chose): the order
//! stays closed and its recharge with it; the payment is recorded as
//! `LatePaymentReceived` and owed back, and the unit that records it requests a full
//! cash refund. Re-opening was not chosen: the payer was already told the order
//! closed, and a recharge delivered after its close would surprise them. A second
//! transaction on a paid order is owed back the same way.
//!
//! Cash postings (`crate::ledger::order_posting`): a payment debits the gateway's
//! clearing account and credits the service's sales; a late payment credits
//! `refund_payable` instead, and its refund moves it back out of clearing.

mod commands;
mod events;

pub use commands::{CreateOrder, OrderBusiness, OrderCommand, Payment};
pub use events::{LateReason, OrderEvent, ORDER_EVENT_VERSION};

use crate::decide::{Decide, InvariantViolation, LedgerRef};
use crate::services::{PaymentMethod, CANDY_AMOUNT_MAX};
use cqrs_es::event_sink::EventSink;
use cqrs_es::Aggregate;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const ORDER_AGGREGATE_TYPE: &str = "service_order";
/// `ref_type` of an order's payment posting (`ref_id` = the transaction number).
pub const ORDER_REF_TYPE: &str = "ORDER";
/// `ref_type` of a late payment (`ref_id` = the gateway's transaction number).
pub const PAYMENT_REF_TYPE: &str = "PAYMENT";
/// `ref_type` of a refund (`ref_id` = refund number).
pub const REFUND_REF_TYPE: &str = "REFUND";
/// Longest order, booking, transaction or refund number.
pub const NO_CHARS_MAX: usize = 64;
/// Most days one subscription order buys.
pub const SUBSCRIPTION_DAYS_MAX: i64 = 366;
/// Most payments one order records (kept and late ones).
pub const PAYMENTS_MAX: usize = 16;

/// The seed's order statuses, stored as their numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum OrderStatus {
    #[default]
    Created = 0,
    Paying = 1,
    Paid = 2,
    Delivered = 3,
    Closed = 4,
    Refunded = 6,
}

impl OrderStatus {
    pub fn code(self) -> i64 {
        self as i64
    }

    pub fn as_str(self) -> &'static str {
        match self {
            OrderStatus::Created => "CREATED",
            OrderStatus::Paying => "PAYING",
            OrderStatus::Paid => "PAID",
            OrderStatus::Delivered => "DELIVERED",
            OrderStatus::Closed => "CLOSED",
            OrderStatus::Refunded => "REFUNDED",
        }
    }

    /// Unpaid: may still be paid, or closed by its timeout.
    pub fn is_open(self) -> bool {
        matches!(self, OrderStatus::Created | OrderStatus::Paying)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ServiceOrder {
    pub order: Option<CreateOrder>,
    pub status: OrderStatus,
    /// The payment the order keeps.
    pub payment: Option<Payment>,
    /// Payments owed back, by transaction number.
    pub late: BTreeMap<String, Payment>,
    /// Refunds that succeeded, by refund number: (transaction, amount).
    pub refunds: BTreeMap<String, (String, i64)>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OrderError {
    #[error("order does not exist")]
    NotFound,
    #[error("order exists already")]
    AlreadyExists,
    #[error("{field}: {rule}")]
    Invalid {
        field: &'static str,
        rule: &'static str,
    },
    #[error("the order is {status:?}: {rule}")]
    WrongStatus {
        status: OrderStatus,
        rule: &'static str,
    },
    #[error("the payment does not match the order: {field} {rule}")]
    PaymentMismatch {
        field: &'static str,
        rule: &'static str,
    },
    #[error("the order has not timed out yet")]
    NotTimedOut,
    #[error("transaction {transaction_no} is not a payment of this order that is owed back")]
    NoSuchPayment { transaction_no: String },
    #[error("the order records the maximum of {max} payments")]
    TooManyPayments { max: usize },
}

impl OrderError {
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotFound => "ORDER_NOT_FOUND",
            Self::AlreadyExists => "ORDER_EXISTS",
            Self::Invalid { .. } => "INVALID_FIELD",
            Self::WrongStatus { .. } => "ORDER_STATUS_CONFLICT",
            Self::PaymentMismatch { .. } => "PAYMENT_MISMATCH",
            Self::NotTimedOut => "ORDER_NOT_TIMED_OUT",
            Self::NoSuchPayment { .. } => "PAYMENT_NOT_FOUND",
            Self::TooManyPayments { .. } => "ORDER_PAYMENTS_LIMIT",
        }
    }

    pub fn field(&self) -> Option<&'static str> {
        match self {
            Self::Invalid { field, .. } | Self::PaymentMismatch { field, .. } => Some(field),
            Self::NoSuchPayment { .. } => Some("transaction_no"),
            _ => None,
        }
    }
}

/// A business number: 1 to [`NO_CHARS_MAX`] of `[A-Za-z0-9_-]`.
pub fn valid_no(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= NO_CHARS_MAX
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn invalid(field: &'static str, rule: &'static str) -> OrderError {
    OrderError::Invalid { field, rule }
}

fn create(cmd: CreateOrder) -> Result<Vec<OrderEvent>, OrderError> {
    if !valid_no(&cmd.order_no) {
        return Err(invalid("order_no", "1 to 64 of A-Z a-z 0-9 _ -"));
    }
    if cmd.timeout_at <= cmd.created_at {
        return Err(invalid("timeout_at", "must be after created_at"));
    }
    let candy_order = cmd.method == PaymentMethod::Candy;
    if cmd.amount <= 0 || (candy_order && cmd.amount > CANDY_AMOUNT_MAX) {
        return Err(invalid(
            "amount",
            "must be a positive whole number of minor units",
        ));
    }
    match (candy_order, cmd.currency) {
        (true, Some(_)) => return Err(invalid("currency", "a candy order has no currency")),
        (false, None) => return Err(invalid("currency", "a cash order needs its currency")),
        _ => {}
    }
    match &cmd.business {
        OrderBusiness::Recharge { candy } => {
            if candy_order {
                return Err(invalid("method", "candy is recharged with cash"));
            }
            if *candy <= 0 || *candy > CANDY_AMOUNT_MAX {
                return Err(invalid(
                    "candy",
                    "must be a positive whole number of 1/100 candy",
                ));
            }
        }
        OrderBusiness::Subscription { days, .. } => {
            if candy_order {
                return Err(invalid("method", "a subscription is paid with cash"));
            }
            if *days <= 0 || *days > SUBSCRIPTION_DAYS_MAX {
                return Err(invalid("days", "must be 1 to 366"));
            }
        }
        OrderBusiness::Booking { booking_no, .. } => {
            if !candy_order {
                return Err(invalid("method", "a booking is paid with candy"));
            }
            if !valid_no(booking_no) {
                return Err(invalid("booking_no", "1 to 64 of A-Z a-z 0-9 _ -"));
            }
        }
    }
    let mut out = Vec::new();
    if candy_order {
        // The payment is the hold on the payer's candy, in the same unit.
        let paid = Payment {
            transaction_no: format!("candy-{}", cmd.order_no),
            method: PaymentMethod::Candy,
            account_id: cmd.user_id.to_string(),
            amount_minor: cmd.amount,
            currency: crate::services::CANDY_CURRENCY_CODE.to_owned(),
            paid_at: cmd.created_at,
        };
        let business = cmd.business.type_name().to_owned();
        out.push(OrderEvent::OrderCreated(cmd));
        out.push(OrderEvent::OrderPaid {
            business,
            payment: paid,
        });
    } else {
        out.push(OrderEvent::OrderCreated(cmd));
    }
    Ok(out)
}

impl ServiceOrder {
    fn record_payment(
        &self,
        order: &CreateOrder,
        payment: Payment,
    ) -> Result<Vec<OrderEvent>, OrderError> {
        let known = self.payment.as_ref().map(|p| &p.transaction_no)
            == Some(&payment.transaction_no)
            || self.late.contains_key(&payment.transaction_no);
        if known {
            // The same transaction told again (a duplicate or replayed callback).
            return Ok(Vec::new());
        }
        if !payment.method.is_cash() || payment.method != order.method {
            return Err(OrderError::PaymentMismatch {
                field: "method",
                rule: "must be the order's payment method",
            });
        }
        if payment.amount_minor != order.amount {
            return Err(OrderError::PaymentMismatch {
                field: "amount_minor",
                rule: "must equal the order's amount",
            });
        }
        if Some(payment.currency.as_str()) != order.currency.as_ref().map(|c| c.as_str()) {
            return Err(OrderError::PaymentMismatch {
                field: "currency",
                rule: "must equal the order's currency",
            });
        }
        if !valid_no(&payment.transaction_no) {
            return Err(invalid("transaction_no", "1 to 64 of A-Z a-z 0-9 _ -"));
        }
        if self.late.len() + 1 >= PAYMENTS_MAX {
            return Err(OrderError::TooManyPayments { max: PAYMENTS_MAX });
        }
        Ok(vec![match self.status {
            OrderStatus::Created | OrderStatus::Paying => OrderEvent::OrderPaid {
                business: order.business.type_name().to_owned(),
                payment,
            },
            // A refunded order is a closed one whose late payment went back (only a
            // closed order ends refunded): it was never paid either.
            OrderStatus::Closed | OrderStatus::Refunded => OrderEvent::LatePaymentReceived {
                payment,
                reason: LateReason::Closed,
            },
            OrderStatus::Paid | OrderStatus::Delivered => OrderEvent::LatePaymentReceived {
                payment,
                reason: LateReason::AlreadyPaid,
            },
        }])
    }

    fn record_refund(
        &self,
        refund_no: String,
        transaction_no: String,
        amount_minor: i64,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<OrderEvent>, OrderError> {
        if self.refunds.contains_key(&refund_no) {
            return Ok(Vec::new());
        }
        if self.refunds.values().any(|(t, _)| *t == transaction_no) {
            // Given back already under another refund: never twice.
            return Err(OrderError::NoSuchPayment { transaction_no });
        }
        let Some(p) = self.late.get(&transaction_no) else {
            return Err(OrderError::NoSuchPayment { transaction_no });
        };
        if amount_minor != p.amount_minor {
            return Err(invalid("amount_minor", "must be the whole late payment"));
        }
        Ok(vec![OrderEvent::OrderRefunded {
            refund_no,
            method: p.method,
            transaction_no,
            amount_minor,
            order_refunded: self.status == OrderStatus::Closed,
            at,
        }])
    }
}

impl Decide for ServiceOrder {
    const SNAPSHOT_VERSION: i32 = 1;
    const OUTBOX: bool = true;

    fn decide(&self, command: OrderCommand) -> Result<Vec<OrderEvent>, OrderError> {
        let order = match (&self.order, command) {
            (None, OrderCommand::Create(cmd)) => return create(cmd),
            (Some(_), OrderCommand::Create(_)) => return Err(OrderError::AlreadyExists),
            (None, _) => return Err(OrderError::NotFound),
            (Some(order), command) => (order, command),
        };
        let (order, command) = order;
        let status = self.status;
        match command {
            OrderCommand::Create(_) => Err(OrderError::AlreadyExists),
            OrderCommand::StartPayment { at } => match status {
                OrderStatus::Created if order.method.is_cash() => {
                    Ok(vec![OrderEvent::PaymentStarted { at }])
                }
                OrderStatus::Paying => Ok(Vec::new()),
                _ => Err(OrderError::WrongStatus {
                    status,
                    rule: "only an unpaid cash order starts paying",
                }),
            },
            OrderCommand::RecordPayment { payment, .. } => self.record_payment(order, payment),
            OrderCommand::Deliver { at } => match status {
                OrderStatus::Paid => Ok(vec![OrderEvent::OrderDelivered {
                    business: order.business.type_name().to_owned(),
                    at,
                }]),
                OrderStatus::Delivered => Ok(Vec::new()),
                _ => Err(OrderError::WrongStatus {
                    status,
                    rule: "only a paid order is delivered",
                }),
            },
            OrderCommand::Close { at } => match status {
                s if s.is_open() && at >= order.timeout_at => Ok(vec![OrderEvent::OrderClosed {
                    business: order.business.type_name().to_owned(),
                    at,
                }]),
                s if s.is_open() => Err(OrderError::NotTimedOut),
                // Paid, delivered or closed since the scan read it: nothing to close.
                _ => Ok(Vec::new()),
            },
            OrderCommand::RecordRefund {
                refund_no,
                transaction_no,
                amount_minor,
                at,
            } => self.record_refund(refund_no, transaction_no, amount_minor, at),
        }
    }

    fn check(&self, event: &OrderEvent) -> Result<(), InvariantViolation> {
        let fail = |why: &str| Err(InvariantViolation(format!("{}: {why}", event.name())));
        match (event, &self.order) {
            (OrderEvent::OrderCreated(_), None) => return Ok(()),
            (OrderEvent::OrderCreated(_), Some(_)) => return fail("created twice"),
            (_, None) => return fail("order does not exist"),
            _ => {}
        }
        let ok = match event {
            OrderEvent::OrderCreated(_) => false,
            OrderEvent::PaymentStarted { .. } => self.status == OrderStatus::Created,
            OrderEvent::OrderPaid { .. } => self.status.is_open(),
            OrderEvent::LatePaymentReceived { payment, .. } => {
                !self.status.is_open() && !self.late.contains_key(&payment.transaction_no)
            }
            OrderEvent::OrderDelivered { .. } => self.status == OrderStatus::Paid,
            OrderEvent::OrderClosed { .. } => self.status.is_open(),
            OrderEvent::OrderRefunded {
                refund_no,
                transaction_no,
                amount_minor,
                order_refunded,
                ..
            } => {
                *order_refunded == (self.status == OrderStatus::Closed)
                    && !self.refunds.contains_key(refund_no)
                    && self.late.get(transaction_no).map(|p| p.amount_minor) == Some(*amount_minor)
            }
        };
        if ok {
            Ok(())
        } else {
            fail(&format!("not allowed in status {:?}", self.status))
        }
    }

    fn ledger_ref(event: &OrderEvent) -> Option<LedgerRef> {
        let (ref_type, ref_id, entry) = match event {
            OrderEvent::OrderPaid { payment: p, .. } if p.method.is_cash() => {
                (ORDER_REF_TYPE, p.transaction_no.clone(), "ORDER_PAID")
            }
            OrderEvent::LatePaymentReceived { payment, .. } => (
                PAYMENT_REF_TYPE,
                payment.transaction_no.clone(),
                "LATE_PAYMENT",
            ),
            OrderEvent::OrderRefunded { refund_no, .. } => {
                (REFUND_REF_TYPE, refund_no.clone(), "ORDER_REFUNDED")
            }
            _ => return None,
        };
        Some(LedgerRef {
            ref_type: ref_type.to_owned(),
            ref_id,
            entry_type: entry.to_owned(),
        })
    }
}

impl Aggregate for ServiceOrder {
    const TYPE: &'static str = ORDER_AGGREGATE_TYPE;
    type Command = OrderCommand;
    type Event = OrderEvent;
    type Error = OrderError;
    type Services = ();

    async fn handle(
        &mut self,
        command: OrderCommand,
        _service: &(),
        sink: &EventSink<Self>,
    ) -> Result<(), OrderError> {
        for event in self.decide(command)? {
            sink.write(event, self).await;
        }
        Ok(())
    }

    fn apply(&mut self, event: OrderEvent) {
        debug_assert_eq!(self.check(&event), Ok(()));
        match event {
            OrderEvent::OrderCreated(o) => self.order = Some(o),
            OrderEvent::PaymentStarted { .. } => self.status = OrderStatus::Paying,
            OrderEvent::OrderPaid { payment, .. } => {
                self.status = OrderStatus::Paid;
                self.payment = Some(payment);
            }
            OrderEvent::LatePaymentReceived { payment, .. } => {
                self.late.insert(payment.transaction_no.clone(), payment);
            }
            OrderEvent::OrderDelivered { .. } => self.status = OrderStatus::Delivered,
            OrderEvent::OrderClosed { .. } => self.status = OrderStatus::Closed,
            OrderEvent::OrderRefunded {
                refund_no,
                transaction_no,
                amount_minor,
                order_refunded,
                ..
            } => {
                if order_refunded {
                    self.status = OrderStatus::Refunded;
                }
                self.refunds
                    .insert(refund_no, (transaction_no, amount_minor));
            }
        }
    }
}

#[cfg(test)]
mod tests;
