//! The refund record (seed 000 `tieup_refund_record`, R-REF-1, issue 18 item 5): one
//! stream per refund (stream id = the refund number).
//!
//! A candy refund (a booking's hold) succeeds directly through the candy account: the
//! unit that records `RefundSucceeded` also returns the hold. A cash refund is first
//! marked REFUNDING (`RefundSubmitted`, before the gateway is called), keeps the
//! gateway's answer (`RefundResponseRecorded`), and from then on compensation only
//! **queries** the gateway: success settles the refund together with its order
//! (`OrderRefunded`, the order event, in the same unit); failed or closed settle the
//! refund alone; a temporary error leaves it REFUNDING. A settled refund never moves
//! again.

mod commands;
mod events;

pub use commands::{RefundBusiness, RefundCommand, RequestRefund};
pub use events::{RefundEvent, REFUND_EVENT_VERSION};

use crate::decide::{Decide, InvariantViolation, LedgerRef};
use crate::service_order::valid_no;
use crate::services::PaymentMethod;
use cqrs_es::event_sink::EventSink;
use cqrs_es::Aggregate;
use serde::{Deserialize, Serialize};

pub const REFUND_AGGREGATE_TYPE: &str = "refund";
/// Most characters of a gateway answer or reason kept in an event.
pub const RESPONSE_CHARS_MAX: usize = 4_096;

/// The seed's refund statuses, stored as their numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum RefundStatus {
    #[default]
    Pending = 1,
    Refunding = 2,
    Succeeded = 3,
    Failed = 4,
    Closed = 5,
}

impl RefundStatus {
    pub fn code(self) -> i64 {
        self as i64
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "PENDING",
            Self::Refunding => "REFUNDING",
            Self::Succeeded => "SUCCEEDED",
            Self::Failed => "FAILED",
            Self::Closed => "CLOSED",
        }
    }

    pub fn is_final(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Closed)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Refund {
    pub request: Option<RequestRefund>,
    pub status: RefundStatus,
    pub last_response: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefundError {
    #[error("refund does not exist")]
    NotFound,
    #[error("refund exists already")]
    AlreadyExists,
    #[error("{field}: {rule}")]
    Invalid {
        field: &'static str,
        rule: &'static str,
    },
    #[error("the refund is {status:?}: {rule}")]
    WrongStatus {
        status: RefundStatus,
        rule: &'static str,
    },
}

impl RefundError {
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotFound => "REFUND_NOT_FOUND",
            Self::AlreadyExists => "REFUND_EXISTS",
            Self::Invalid { .. } => "INVALID_FIELD",
            Self::WrongStatus { .. } => "REFUND_STATUS_CONFLICT",
        }
    }

    pub fn field(&self) -> Option<&'static str> {
        match self {
            Self::Invalid { field, .. } => Some(field),
            _ => None,
        }
    }
}

fn cut(s: String) -> String {
    if s.chars().count() <= RESPONSE_CHARS_MAX {
        s
    } else {
        s.chars().take(RESPONSE_CHARS_MAX).collect()
    }
}

fn request(r: RequestRefund) -> Result<Vec<RefundEvent>, RefundError> {
    let invalid = |field, rule| Err(RefundError::Invalid { field, rule });
    if !valid_no(&r.refund_no) {
        return invalid("refund_no", "1 to 64 of A-Z a-z 0-9 _ -");
    }
    if r.amount <= 0 {
        return invalid("amount", "must be a positive whole number of minor units");
    }
    if r.method == PaymentMethod::Candy && r.booking_no.is_none() {
        return invalid("booking_no", "a candy refund returns a booking's hold");
    }
    Ok(vec![RefundEvent::RefundRequested(r)])
}

impl Decide for Refund {
    const SNAPSHOT_VERSION: i32 = 1;
    const OUTBOX: bool = true;

    fn decide(&self, command: RefundCommand) -> Result<Vec<RefundEvent>, RefundError> {
        let req = match (&self.request, command) {
            (None, RefundCommand::Request(r)) => return request(r),
            (Some(_), RefundCommand::Request(_)) => return Err(RefundError::AlreadyExists),
            (None, _) => return Err(RefundError::NotFound),
            (Some(req), command) => (req, command),
        };
        let (req, command) = req;
        let status = self.status;
        let wrong = |rule| Err(RefundError::WrongStatus { status, rule });
        match command {
            RefundCommand::Request(_) => Err(RefundError::AlreadyExists),
            RefundCommand::Submit { at } => match status {
                RefundStatus::Pending if req.method.is_cash() => {
                    Ok(vec![RefundEvent::RefundSubmitted { at }])
                }
                RefundStatus::Refunding => Ok(Vec::new()),
                _ => wrong("only a pending cash refund is submitted to its gateway"),
            },
            RefundCommand::RecordResponse { response, at } => match status {
                RefundStatus::Refunding => {
                    let response = cut(response);
                    if self.last_response.as_ref() == Some(&response) {
                        return Ok(Vec::new());
                    }
                    Ok(vec![RefundEvent::RefundResponseRecorded { response, at }])
                }
                s if s.is_final() => Ok(Vec::new()),
                _ => wrong("a gateway answer is kept only while refunding"),
            },
            RefundCommand::Succeed {
                gateway_refund_id,
                response,
                at,
            } => match status {
                RefundStatus::Succeeded => Ok(Vec::new()),
                RefundStatus::Refunding => Ok(vec![RefundEvent::RefundSucceeded {
                    gateway_refund_id,
                    response: cut(response),
                    at,
                }]),
                RefundStatus::Pending if !req.method.is_cash() => {
                    Ok(vec![RefundEvent::RefundSucceeded {
                        gateway_refund_id,
                        response: cut(response),
                        at,
                    }])
                }
                _ => wrong("a cash refund succeeds only from REFUNDING"),
            },
            RefundCommand::Fail {
                reason,
                response,
                at,
            } => match status {
                RefundStatus::Failed => Ok(Vec::new()),
                RefundStatus::Refunding => Ok(vec![RefundEvent::RefundFailed {
                    reason: cut(reason),
                    response: cut(response),
                    at,
                }]),
                _ => wrong("only a refund at its gateway fails"),
            },
            RefundCommand::Close { response, at } => match status {
                RefundStatus::Closed => Ok(Vec::new()),
                RefundStatus::Refunding => Ok(vec![RefundEvent::RefundClosed {
                    response: cut(response),
                    at,
                }]),
                _ => wrong("only a refund at its gateway closes"),
            },
        }
    }

    fn check(&self, event: &RefundEvent) -> Result<(), InvariantViolation> {
        let s = self.status;
        let cash = self.request.as_ref().is_some_and(|r| r.method.is_cash());
        let ok = match event {
            RefundEvent::RefundRequested(_) => self.request.is_none(),
            _ if self.request.is_none() => false,
            RefundEvent::RefundSubmitted { .. } => s == RefundStatus::Pending && cash,
            RefundEvent::RefundResponseRecorded { .. }
            | RefundEvent::RefundFailed { .. }
            | RefundEvent::RefundClosed { .. } => s == RefundStatus::Refunding,
            RefundEvent::RefundSucceeded { .. } => {
                s == RefundStatus::Refunding || (s == RefundStatus::Pending && !cash)
            }
        };
        if ok {
            Ok(())
        } else {
            Err(InvariantViolation(format!(
                "{}: not allowed in status {s:?}",
                event.name()
            )))
        }
    }

    /// The money of a refund moves on its order (cash) or candy account (candy).
    fn ledger_ref(_event: &RefundEvent) -> Option<LedgerRef> {
        None
    }
}

impl Aggregate for Refund {
    const TYPE: &'static str = REFUND_AGGREGATE_TYPE;
    type Command = RefundCommand;
    type Event = RefundEvent;
    type Error = RefundError;
    type Services = ();

    async fn handle(
        &mut self,
        command: RefundCommand,
        _service: &(),
        sink: &EventSink<Self>,
    ) -> Result<(), RefundError> {
        for event in self.decide(command)? {
            sink.write(event, self).await;
        }
        Ok(())
    }

    fn apply(&mut self, event: RefundEvent) {
        debug_assert_eq!(self.check(&event), Ok(()));
        match event {
            RefundEvent::RefundRequested(r) => self.request = Some(r),
            RefundEvent::RefundSubmitted { .. } => self.status = RefundStatus::Refunding,
            RefundEvent::RefundResponseRecorded { response, .. } => {
                self.last_response = Some(response)
            }
            RefundEvent::RefundSucceeded { response, .. } => {
                self.status = RefundStatus::Succeeded;
                self.last_response = Some(response);
            }
            RefundEvent::RefundFailed { response, .. } => {
                self.status = RefundStatus::Failed;
                self.last_response = Some(response);
            }
            RefundEvent::RefundClosed { response, .. } => {
                self.status = RefundStatus::Closed;
                self.last_response = Some(response);
            }
        }
    }
}

#[cfg(test)]
mod tests;
