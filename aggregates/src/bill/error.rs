//! Why a bill command was refused: one error enum for every bill aggregate (one
//! boundary), so a unit that decides on several bill streams (a payment result and its
//! order's line) has one error type. Nothing is written when a command is refused.

use super::events::OrderStatusCode;
use super::values::ClaimKind;

pub use crate::refusal::RefusalKind;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BillError {
    #[error("{field} {given} does not belong to this stream ({stream})")]
    StreamMismatch {
        field: &'static str,
        given: String,
        stream: String,
    },
    #[error("station-month already has small bill {existing}; one small bill per station-month (R-BILL-7)")]
    SmallBillAlreadyRecorded { existing: i64 },
    #[error("station-month already has diff {existing}; one diff per station-month")]
    DiffAlreadyRecorded { existing: i64 },
    #[error("partner bill {0} is not recorded")]
    PartnerBillNotFound(i64),
    #[error("partner bill already recorded with {field} {existing}; a different {field} is another bill")]
    PartnerBillIdentityChanged {
        field: &'static str,
        existing: String,
    },
    #[error("re-push at {given} is earlier than the last re-push at {last}")]
    RepushOutOfOrder { given: String, last: String },
    #[error("config version {given} is older than the recorded version {current}")]
    ConfigVersionStale { given: i64, current: i64 },
    #[error("config version {0} is already recorded with another payment cycle; bump the version")]
    ConfigVersionReused(i64),
    #[error("payment order {0} does not exist")]
    OrderNotFound(i64),
    #[error("payment order already created with treasury = {existing}")]
    OrderAlreadyCreated { existing: bool },
    #[error("a payment order in status {from:?} cannot {action} (see ORDER_TRANSITIONS)")]
    IllegalTransition {
        from: OrderStatusCode,
        action: &'static str,
    },
    #[error("lines change only before review (DRAFT or REVIEW_REJECTED), not in {0:?}")]
    OrderNotEditable(OrderStatusCode),
    #[error("the payment order has no live line to publish or submit")]
    OrderHasNoLines,
    #[error("line {0} is not on this payment order")]
    LineNotFound(i64),
    #[error("line {0} is already on the order with other content")]
    LineAlreadyAdded(i64),
    #[error("line {0} was removed; a removed line id is not reused")]
    LineRemoved(i64),
    #[error("line {line_id} is {actual:?}, the command needs a {needed} line")]
    LineKindMismatch {
        line_id: i64,
        actual: super::events::LineKindCode,
        needed: &'static str,
    },
    #[error("live line {existing} already covers this station-month and kind on the order")]
    StationMonthAlreadyOnOrder { existing: i64 },
    #[error("planned {planned} + adjustment {adjustment} is negative or overflows; the amount to pay cannot be below zero")]
    AdjustedAmountInvalid { planned: i64, adjustment: i64 },
    #[error("line {0} already has an effective unqualified conclusion; withdraw it first")]
    UnqualifiedAlreadyConcluded(i64),
    #[error("line {0} has no unqualified conclusion to withdraw")]
    UnqualifiedNotConcluded(i64),
    #[error("a result for station-month {result} cannot be written to line {line_id} of {line}")]
    ResultLineMismatch {
        line_id: i64,
        result: String,
        line: String,
    },
    #[error("station-month is held by live lock {live}; release it first (one live lock per station-month)")]
    LockHeld { live: i64 },
    #[error("lock {0} is already reserved with other content")]
    LockIdReused(i64),
    #[error("lock {0} does not exist on this station-month")]
    LockNotFound(i64),
    #[error("lock {0} is released; only a reserved lock is activated")]
    LockNotReserved(i64),
    #[error("payment result {0} is already recorded with other content; results are facts, recorded once")]
    ResultAlreadyRecorded(i64),
    #[error("payment result {0} is not recorded")]
    ResultNotFound(i64),
    #[error("a PAY_SUCCESS result needs the time it was paid")]
    PaidAtRequired,
    #[error("a result for a line names the line's payment order")]
    OrderIdRequired,
    /// Issue 14 F2: the id already names another stream's row in the projection.
    #[error("{} {id} is already {} {holder}; an id names one row", kind.field(), kind.holder_noun())]
    IdTaken {
        kind: ClaimKind,
        id: i64,
        holder: String,
    },
    #[error("the {} claim of {id} is permanent and is never released", kind.as_str())]
    ClaimPermanent { kind: ClaimKind, id: i64 },
    /// Issue 14 F13: a diff links only a recorded partner bill, so its month is known.
    #[error("partner bill {0} is not recorded; record it before a diff links it")]
    PartnerBillUnrecorded(i64),
    /// Issue 14 F13: seed §4.5 reads a station-month's partner bill by station and
    /// month, so the partner bill a diff links is of the diff's month.
    #[error("partner bill {partner_bill_id} is of {partner_month}; a diff of {diff_month} links only a partner bill of {diff_month}")]
    PartnerBillMonthMismatch {
        partner_bill_id: i64,
        partner_month: String,
        diff_month: String,
    },
    /// Issue 14 F14: a lock holds a line of an existing payment order.
    #[error("payment order {0} does not exist; a lock holds a line of an existing order")]
    LockOrderNotFound(i64),
    #[error("line {line_id} of payment order {order_id} {why}; a lock holds a live line of its station-month")]
    LockLineNotFound {
        order_id: i64,
        line_id: i64,
        why: &'static str,
    },
    #[error("{field} {given} is not the current {field} {current} of the order and line; a lock holds the current publication")]
    LockPublishMismatch {
        field: &'static str,
        given: i64,
        current: i64,
    },
    /// Issue 32 item 6: a lock holds a line of an order that can still be paid; a
    /// voided (or no-need-pay) order's line never held a payment.
    #[error("payment order {order_id} is {status:?}; a lock holds a line of an order that can still be paid")]
    LockOrderClosed {
        order_id: i64,
        status: OrderStatusCode,
    },
    /// Issue 32 item 6: the line a reserved lock holds is gone (removed, or its order
    /// closed) since the reservation; such a lock is released, never activated.
    #[error("lock {lock_id} holds line {line_id} of payment order {order_id}, which {why}; release the lock")]
    LockLineGone {
        lock_id: i64,
        order_id: i64,
        line_id: i64,
        why: String,
    },
    /// Issue 32 item 6: a line held by a live lock is not removed (the lock would
    /// hold nothing and still block its station-month).
    #[error(
        "line {line_id} is held by live lock {lock_id} of {station_month}; release the lock first"
    )]
    LineLocked {
        line_id: i64,
        lock_id: i64,
        station_month: String,
    },
    /// Issue 32 item 6: an order whose lines are held by a live lock is not voided or
    /// marked no-need-pay.
    #[error("line {line_id} of the order is held by live lock {lock_id} of {station_month}; release the lock before the order is {action}")]
    OrderLocked {
        line_id: i64,
        lock_id: i64,
        station_month: String,
        action: &'static str,
    },
}

impl BillError {
    /// Stable machine-readable code for clients.
    pub fn code(&self) -> &'static str {
        match self {
            Self::StreamMismatch { .. } => "STREAM_MISMATCH",
            Self::SmallBillAlreadyRecorded { .. } => "SMALL_BILL_ALREADY_RECORDED",
            Self::DiffAlreadyRecorded { .. } => "DIFF_ALREADY_RECORDED",
            Self::PartnerBillNotFound(_) => "PARTNER_BILL_NOT_FOUND",
            Self::PartnerBillIdentityChanged { .. } => "PARTNER_BILL_IDENTITY_CHANGED",
            Self::RepushOutOfOrder { .. } => "REPUSH_OUT_OF_ORDER",
            Self::ConfigVersionStale { .. } => "CONFIG_VERSION_STALE",
            Self::ConfigVersionReused(_) => "CONFIG_VERSION_REUSED",
            Self::OrderNotFound(_) => "ORDER_NOT_FOUND",
            Self::OrderAlreadyCreated { .. } => "ORDER_ALREADY_CREATED",
            Self::IllegalTransition { .. } => "ILLEGAL_TRANSITION",
            Self::OrderNotEditable(_) => "ORDER_NOT_EDITABLE",
            Self::OrderHasNoLines => "ORDER_HAS_NO_LINES",
            Self::LineNotFound(_) => "LINE_NOT_FOUND",
            Self::LineAlreadyAdded(_) => "LINE_ALREADY_ADDED",
            Self::LineRemoved(_) => "LINE_REMOVED",
            Self::LineKindMismatch { .. } => "LINE_KIND_MISMATCH",
            Self::StationMonthAlreadyOnOrder { .. } => "STATION_MONTH_ALREADY_ON_ORDER",
            Self::AdjustedAmountInvalid { .. } => "ADJUSTED_AMOUNT_INVALID",
            Self::UnqualifiedAlreadyConcluded(_) => "UNQUALIFIED_ALREADY_CONCLUDED",
            Self::UnqualifiedNotConcluded(_) => "UNQUALIFIED_NOT_CONCLUDED",
            Self::ResultLineMismatch { .. } => "RESULT_LINE_MISMATCH",
            Self::LockHeld { .. } => "LOCK_HELD",
            Self::LockIdReused(_) => "LOCK_ID_REUSED",
            Self::LockNotFound(_) => "LOCK_NOT_FOUND",
            Self::LockNotReserved(_) => "LOCK_NOT_RESERVED",
            Self::ResultAlreadyRecorded(_) => "RESULT_ALREADY_RECORDED",
            Self::ResultNotFound(_) => "RESULT_NOT_FOUND",
            Self::PaidAtRequired => "PAID_AT_REQUIRED",
            Self::OrderIdRequired => "ORDER_ID_REQUIRED",
            Self::IdTaken { kind, .. } => kind.taken_code(),
            Self::ClaimPermanent { .. } => "CLAIM_PERMANENT",
            Self::PartnerBillUnrecorded(_) => "PARTNER_BILL_UNRECORDED",
            Self::PartnerBillMonthMismatch { .. } => "PARTNER_BILL_MONTH_MISMATCH",
            Self::LockOrderNotFound(_) => "LOCK_ORDER_NOT_FOUND",
            Self::LockLineNotFound { .. } => "LOCK_LINE_NOT_FOUND",
            Self::LockPublishMismatch { .. } => "LOCK_PUBLISH_MISMATCH",
            Self::LockOrderClosed { .. } => "LOCK_ORDER_CLOSED",
            Self::LockLineGone { .. } => "LOCK_LINE_GONE",
            Self::LineLocked { .. } => "LINE_LOCKED",
            Self::OrderLocked { .. } => "ORDER_LOCKED",
        }
    }

    /// The request field the error is about, when there is one. A transition refusal
    /// is about the order's state, not a field.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            Self::StreamMismatch { field, .. } => Some(field),
            Self::SmallBillAlreadyRecorded { .. } => Some("bill_id"),
            Self::DiffAlreadyRecorded { .. } => Some("diff_id"),
            Self::PartnerBillNotFound(_) => Some("partner_bill_id"),
            Self::PartnerBillIdentityChanged { field, .. } => Some(field),
            Self::RepushOutOfOrder { .. } => Some("repushed_at"),
            Self::ConfigVersionStale { .. } | Self::ConfigVersionReused(_) => {
                Some("config_version")
            }
            Self::OrderNotFound(_) => Some("order_id"),
            Self::OrderAlreadyCreated { .. } => Some("treasury"),
            Self::IllegalTransition { .. } | Self::OrderNotEditable(_) | Self::OrderHasNoLines => {
                None
            }
            Self::LineNotFound(_)
            | Self::LineAlreadyAdded(_)
            | Self::LineRemoved(_)
            | Self::LineKindMismatch { .. }
            | Self::UnqualifiedAlreadyConcluded(_)
            | Self::UnqualifiedNotConcluded(_)
            | Self::ResultLineMismatch { .. } => Some("line_id"),
            Self::StationMonthAlreadyOnOrder { .. } => Some("station_id"),
            Self::AdjustedAmountInvalid { .. } => Some("manual_adjustment_minor"),
            Self::LockHeld { .. }
            | Self::LockIdReused(_)
            | Self::LockNotFound(_)
            | Self::LockNotReserved(_) => Some("lock_id"),
            Self::ResultAlreadyRecorded(_) | Self::ResultNotFound(_) => Some("result_id"),
            Self::PaidAtRequired => Some("paid_at"),
            Self::OrderIdRequired | Self::LockOrderNotFound(_) => Some("order_id"),
            Self::IdTaken { kind, .. } | Self::ClaimPermanent { kind, .. } => Some(kind.field()),
            Self::PartnerBillUnrecorded(_) | Self::PartnerBillMonthMismatch { .. } => {
                Some("partner_bill_id")
            }
            Self::LockLineNotFound { .. } => Some("line_id"),
            Self::LockPublishMismatch { field, .. } => Some(field),
            Self::LockOrderClosed { .. } | Self::OrderLocked { .. } => Some("order_id"),
            Self::LockLineGone { .. } => Some("lock_id"),
            Self::LineLocked { .. } => Some("line_id"),
        }
    }

    pub fn kind(&self) -> RefusalKind {
        match self {
            Self::PartnerBillNotFound(_)
            | Self::OrderNotFound(_)
            | Self::LineNotFound(_)
            | Self::LockNotFound(_)
            | Self::ResultNotFound(_) => RefusalKind::NotFound,
            Self::StreamMismatch { .. }
            | Self::AdjustedAmountInvalid { .. }
            | Self::ResultLineMismatch { .. }
            | Self::PaidAtRequired
            | Self::OrderIdRequired
            | Self::PartnerBillUnrecorded(_)
            | Self::PartnerBillMonthMismatch { .. }
            | Self::LockOrderNotFound(_)
            | Self::LockLineNotFound { .. }
            | Self::LockPublishMismatch { .. } => RefusalKind::Invalid,
            _ => RefusalKind::Conflict,
        }
    }
}
