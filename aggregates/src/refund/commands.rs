//! Refund commands.

use crate::services::PaymentMethod;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// What a refund gives back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RefundBusiness {
    /// A booking's hold, after an artist or both no-show.
    BookingNoShow,
    /// A payment that arrived after its order closed (or paid it twice).
    LatePayment,
}

impl RefundBusiness {
    pub fn as_str(self) -> &'static str {
        match self {
            RefundBusiness::BookingNoShow => "BOOKING_NO_SHOW",
            RefundBusiness::LatePayment => "LATE_PAYMENT",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestRefund {
    pub refund_no: String,
    pub order_no: String,
    pub booking_no: Option<String>,
    pub business: RefundBusiness,
    /// `CANDY` goes back through the candy account; anything else through its gateway.
    pub method: PaymentMethod,
    pub transaction_no: String,
    pub account_id: String,
    /// Minor units of `currency` (1/100 candy for a candy refund).
    pub amount: i64,
    pub currency: String,
    pub at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum RefundCommand {
    Request(RequestRefund),
    /// About to ask the gateway: REFUNDING from here on, so compensation only queries.
    Submit {
        at: DateTime<Utc>,
    },
    /// The gateway's answer that settles nothing (processing, or no answer).
    RecordResponse {
        response: String,
        at: DateTime<Utc>,
    },
    Succeed {
        gateway_refund_id: Option<String>,
        response: String,
        at: DateTime<Utc>,
    },
    Fail {
        reason: String,
        response: String,
        at: DateTime<Utc>,
    },
    Close {
        response: String,
        at: DateTime<Utc>,
    },
}
