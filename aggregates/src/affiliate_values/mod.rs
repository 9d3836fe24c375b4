//! Values shared by the affiliate order and commission aggregates: the order status
//! matrix and the signal an order update sends to its commissions
//! ([`OrderStatus`], [`OrderSignal`]), and the commission amount arithmetic
//! ([`commission_amounts`], [`CommissionAmounts`], [`AmountError`],
//! [`BeneficiaryRole`]).
//!
//! **Architecture invariant:** this module sits below both aggregates. `affiliate_order`
//! and `commission` import from here and never from each other, so the dependency runs
//! one way only; this module imports neither of them. Both aggregates re-export these
//! names at their old paths (`affiliate_order::OrderStatus`,
//! `commission::CommissionAmounts`, …), so callers are unchanged.

mod amounts;
mod order_status;

pub use amounts::{
    commission_amounts, commission_base_minor, share_minor, AmountError, BeneficiaryRole,
    CommissionAmounts,
};
pub use order_status::{OrderSignal, OrderStatus};
