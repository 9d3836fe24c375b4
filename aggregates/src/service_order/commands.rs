//! Service order commands.

use crate::money::Currency;
use crate::services::{PaymentMethod, UserId};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// What an order buys; its delivery follows from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OrderBusiness {
    /// Candy credited to the payer (1/100-candy units).
    Recharge { candy: i64 },
    /// An entitlement to an artist for some days.
    Subscription { artist_id: UserId, days: i64 },
    /// A video-call booking, activated on delivery (paid with candy: the hold).
    Booking {
        booking_no: String,
        artist_id: UserId,
    },
}

impl OrderBusiness {
    pub fn type_name(&self) -> &'static str {
        match self {
            OrderBusiness::Recharge { .. } => "RECHARGE",
            OrderBusiness::Subscription { .. } => "SUBSCRIPTION",
            OrderBusiness::Booking { .. } => "BOOKING",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateOrder {
    pub order_no: String,
    pub user_id: UserId,
    pub business: OrderBusiness,
    pub method: PaymentMethod,
    /// Cash minor units of `currency`, or candy units for a candy order.
    pub amount: i64,
    /// The cash currency (`None` for candy).
    pub currency: Option<Currency>,
    pub created_at: DateTime<Utc>,
    /// Unpaid past this instant, the order closes (R-CB-2).
    pub timeout_at: DateTime<Utc>,
}

/// A gateway's pay notice, as the order checks it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Payment {
    pub transaction_no: String,
    pub method: PaymentMethod,
    pub account_id: String,
    pub amount_minor: i64,
    /// As the gateway wrote it.
    pub currency: String,
    pub paid_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum OrderCommand {
    Create(CreateOrder),
    /// The payer went to the gateway (status 0 → 1).
    StartPayment {
        at: DateTime<Utc>,
    },
    /// A gateway says the order was paid.
    RecordPayment {
        payment: Payment,
        at: DateTime<Utc>,
    },
    /// The business the order bought was delivered.
    Deliver {
        at: DateTime<Utc>,
    },
    /// Unpaid past its timeout: close it (a scan's re-check on the stream).
    Close {
        at: DateTime<Utc>,
    },
    /// A refund of one of the order's payments succeeded at the gateway.
    RecordRefund {
        refund_no: String,
        transaction_no: String,
        amount_minor: i64,
        at: DateTime<Utc>,
    },
}
