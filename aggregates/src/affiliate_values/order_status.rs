//! The order status matrix (SPEC R-ORD-3) and the signals an order update sends to
//! its commissions (R-COM-1, R-COM-3).
//!
//! Statuses are the platforms' statuses, normalised by the adapters. The matrix only
//! ever moves forward: a message that would move an order backwards (COMPLETED →
//! PENDING) is ignored even when its `platform_updated_at` is not older, so a replay
//! `PENDING → COMPLETED → old PENDING` always ends COMPLETED.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OrderStatus {
    /// Placed, not yet confirmed by the platform (delivery, stay, …).
    Pending,
    /// Confirmed by the platform; the commission is earned once released.
    Completed,
    /// A refund or return is in progress.
    Refunding,
    /// Part of the order was refunded; amounts are (or will be) lower.
    PartiallyRefunded,
    /// Fully refunded. Terminal.
    Refunded,
    /// Cancelled or declared invalid by the platform. Terminal.
    Cancelled,
}

impl OrderStatus {
    pub const ALL: [OrderStatus; 6] = [
        OrderStatus::Pending,
        OrderStatus::Completed,
        OrderStatus::Refunding,
        OrderStatus::PartiallyRefunded,
        OrderStatus::Refunded,
        OrderStatus::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            OrderStatus::Pending => "PENDING",
            OrderStatus::Completed => "COMPLETED",
            OrderStatus::Refunding => "REFUNDING",
            OrderStatus::PartiallyRefunded => "PARTIALLY_REFUNDED",
            OrderStatus::Refunded => "REFUNDED",
            OrderStatus::Cancelled => "CANCELLED",
        }
    }

    /// The platform says the order earns nothing (R-ORD-5: an order first seen in
    /// such a status is recorded for audit only and credits nothing).
    pub fn is_void(self) -> bool {
        matches!(self, OrderStatus::Refunded | OrderStatus::Cancelled)
    }

    /// A refund is open: the commission must not be released (R-COM-1 → FROZEN).
    pub fn is_refund_open(self) -> bool {
        matches!(
            self,
            OrderStatus::Refunding | OrderStatus::PartiallyRefunded
        )
    }

    /// The order is in good standing (may earn and release its commission).
    pub fn is_valid(self) -> bool {
        matches!(self, OrderStatus::Pending | OrderStatus::Completed)
    }

    /// The status matrix. Staying in the same status is always allowed (amounts and
    /// `platform_updated_at` may still change); every other pair not listed here is
    /// ignored as an out-of-order or contradictory message.
    pub fn can_move_to(self, to: OrderStatus) -> bool {
        use OrderStatus::*;
        self == to
            || matches!(
                (self, to),
                (
                    Pending,
                    Completed | Refunding | PartiallyRefunded | Refunded | Cancelled
                ) | (
                    Completed,
                    Refunding | PartiallyRefunded | Refunded | Cancelled
                )
                    // refund rejected or withdrawn: back to where the order was
                    | (
                        Refunding,
                        Pending | Completed | PartiallyRefunded | Refunded | Cancelled
                    )
                    // another refund request; full refund; or the partial refund
                    // settled and the platform completed the order at the lower amount
                    | (PartiallyRefunded, Refunding | Refunded | Completed | Cancelled)
            )
    }
}

/// What an order update means for its commissions, computed once per update from the
/// status edge and the commission base `M` before and after (sparse zeros already
/// replaced by known amounts, so a sparse replay is never a decrease). Carried in
/// `OrderUpdated` and handed to `Commission` in `ReactToOrder`; edge-triggered, so a
/// replay of the same order state (which writes no order event) signals nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OrderSignal {
    /// Nothing a commission reacts to (e.g. only `platform_updated_at` moved).
    None,
    /// PENDING → COMPLETED at an unchanged or higher base.
    Completed,
    /// The base went down while the order is in good standing (a lower positive
    /// amount snapshot) → a PENDING commission freezes.
    AmountDecreased,
    /// The base went up while the order is in good standing. Commissions are never
    /// raised automatically (a second credit needs its own ledger key); reported for
    /// projections and for un-freezing.
    AmountIncreased,
    /// A refund was opened (→ REFUNDING).
    RefundStarted,
    /// Part of the order was refunded (→ PARTIALLY_REFUNDED, or lower again there).
    PartiallyRefunded,
    /// REFUNDING → PENDING/COMPLETED: the refund was rejected or withdrawn.
    RefundRejected,
    /// PARTIALLY_REFUNDED → COMPLETED: the partial refund settled; the order earns
    /// its new, lower base.
    PartialRefundSettled,
    /// → REFUNDED.
    RefundConfirmed,
    /// → CANCELLED.
    Cancelled,
}

impl OrderSignal {
    pub const ALL: [OrderSignal; 10] = [
        OrderSignal::None,
        OrderSignal::Completed,
        OrderSignal::AmountDecreased,
        OrderSignal::AmountIncreased,
        OrderSignal::RefundStarted,
        OrderSignal::PartiallyRefunded,
        OrderSignal::RefundRejected,
        OrderSignal::PartialRefundSettled,
        OrderSignal::RefundConfirmed,
        OrderSignal::Cancelled,
    ];

    /// The signal of an allowed update `from → to` whose base moves `old → new`.
    /// Status changes that cost money come first, then amount changes.
    pub fn of_update(
        from: OrderStatus,
        to: OrderStatus,
        old_base_minor: i64,
        new_base_minor: i64,
    ) -> OrderSignal {
        use OrderStatus as S;
        let lower = new_base_minor < old_base_minor;
        let higher = new_base_minor > old_base_minor;
        match (from, to) {
            (f, S::Cancelled) if f != S::Cancelled => OrderSignal::Cancelled,
            (f, S::Refunded) if f != S::Refunded => OrderSignal::RefundConfirmed,
            (f, S::Refunding) if f != S::Refunding => OrderSignal::RefundStarted,
            (f, S::PartiallyRefunded) if f != S::PartiallyRefunded || lower => {
                OrderSignal::PartiallyRefunded
            }
            (S::Refunding, t) if t.is_valid() => OrderSignal::RefundRejected,
            (S::PartiallyRefunded, S::Completed) => OrderSignal::PartialRefundSettled,
            (_, t) if t.is_valid() && lower => OrderSignal::AmountDecreased,
            (S::Pending, S::Completed) => OrderSignal::Completed,
            (_, t) if t.is_valid() && higher => OrderSignal::AmountIncreased,
            _ => OrderSignal::None,
        }
    }
}
