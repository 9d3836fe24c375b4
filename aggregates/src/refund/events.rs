//! Refund events.

use super::commands::RequestRefund;
use chrono::{DateTime, Utc};
use cqrs_es::DomainEvent;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum RefundEvent {
    RefundRequested(RequestRefund),
    RefundSubmitted {
        at: DateTime<Utc>,
    },
    RefundResponseRecorded {
        response: String,
        at: DateTime<Utc>,
    },
    RefundSucceeded {
        gateway_refund_id: Option<String>,
        response: String,
        at: DateTime<Utc>,
    },
    RefundFailed {
        reason: String,
        response: String,
        at: DateTime<Utc>,
    },
    RefundClosed {
        response: String,
        at: DateTime<Utc>,
    },
}

pub const REFUND_EVENT_VERSION: i32 = 1;

impl RefundEvent {
    pub fn name(&self) -> &'static str {
        match self {
            Self::RefundRequested(_) => "RefundRequested",
            Self::RefundSubmitted { .. } => "RefundSubmitted",
            Self::RefundResponseRecorded { .. } => "RefundResponseRecorded",
            Self::RefundSucceeded { .. } => "RefundSucceeded",
            Self::RefundFailed { .. } => "RefundFailed",
            Self::RefundClosed { .. } => "RefundClosed",
        }
    }
}

impl DomainEvent for RefundEvent {
    fn event_type(&self) -> String {
        self.name().to_owned()
    }

    fn event_version(&self) -> String {
        REFUND_EVENT_VERSION.to_string()
    }
}
