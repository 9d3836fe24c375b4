//! factledger-aggregates: the pure domain of factledger.
//!
//! Money types, commands, events, aggregates (on cqrs-es' `Aggregate` trait),
//! transition tables and errors.
//!
//! **Architecture invariant:** this crate does no I/O. No sqlx, no network, no clock:
//! time arrives inside commands. Everything here is a pure function of state and input,
//! which is what makes replay, rebuild and reconciliation trustworthy.
#![forbid(unsafe_code)]

pub mod accounts;
pub mod admin_action;
pub mod affiliate;
pub mod affiliate_link;
pub mod affiliate_order;
pub mod affiliate_values;
pub mod bill;
pub mod booking;
pub mod campaign;
pub mod candy;
pub mod commission;
pub mod commission_rules;
pub mod decide;
pub mod im_member;
pub mod invite;
mod iso4217;
pub mod ledger;
pub mod money;
pub mod refund;
pub mod refusal;
pub mod service_order;
pub mod services;
pub mod subscription;
pub mod upcast;
pub mod wallet;
pub mod withdrawal;

pub use decide::{Decide, InvariantViolation};
pub use money::{iso_currency, iso_currency_opt, AmountMinor, BoundedId, Currency, ParseError};
pub use refusal::{Refusal, RefusalKind};
