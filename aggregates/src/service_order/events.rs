//! Service order events.

use super::commands::{CreateOrder, OrderBusiness, Payment};
use crate::services::PaymentMethod;
use chrono::{DateTime, Utc};
use cqrs_es::DomainEvent;
use serde::{Deserialize, Serialize};

/// Why a payment arrived that the order does not keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum LateReason {
    /// The order had closed unpaid (its timeout passed) before the callback came.
    Closed,
    /// The order was paid already by another transaction.
    AlreadyPaid,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum OrderEvent {
    OrderCreated(CreateOrder),
    PaymentStarted {
        at: DateTime<Utc>,
    },
    OrderPaid {
        /// The order's business type (`RECHARGE`, `SUBSCRIPTION`, `BOOKING`): whose
        /// sales account a cash payment credits.
        business: String,
        payment: Payment,
    },
    /// A payment the order does not keep: it is owed back (a refund follows in the
    /// same unit).
    LatePaymentReceived {
        payment: Payment,
        reason: LateReason,
    },
    OrderDelivered {
        /// The order's business type (a recharge's row follows its order).
        business: String,
        at: DateTime<Utc>,
    },
    OrderClosed {
        business: String,
        at: DateTime<Utc>,
    },
    OrderRefunded {
        refund_no: String,
        transaction_no: String,
        method: PaymentMethod,
        amount_minor: i64,
        /// Whether the order itself ends refunded: a closed order's late payment
        /// given back; a paid order keeps its status when a second payment is.
        order_refunded: bool,
        at: DateTime<Utc>,
    },
}

pub const ORDER_EVENT_VERSION: i32 = 1;

impl OrderEvent {
    pub fn name(&self) -> &'static str {
        match self {
            Self::OrderCreated(_) => "OrderCreated",
            Self::PaymentStarted { .. } => "PaymentStarted",
            Self::OrderPaid { .. } => "OrderPaid",
            Self::LatePaymentReceived { .. } => "LatePaymentReceived",
            Self::OrderDelivered { .. } => "OrderDelivered",
            Self::OrderClosed { .. } => "OrderClosed",
            Self::OrderRefunded { .. } => "OrderRefunded",
        }
    }
}

impl OrderBusiness {
    /// The booking an order activates, if it is a booking's.
    pub fn booking_no(&self) -> Option<&str> {
        match self {
            OrderBusiness::Booking { booking_no, .. } => Some(booking_no),
            _ => None,
        }
    }
}

impl DomainEvent for OrderEvent {
    fn event_type(&self) -> String {
        self.name().to_owned()
    }

    fn event_version(&self) -> String {
        ORDER_EVENT_VERSION.to_string()
    }
}
