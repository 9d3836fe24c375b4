//! Why a command was refused, told the same way by every aggregate: a stable `code`,
//! the request `field` at fault (when there is one) and the [`RefusalKind`]. The HTTP
//! edge turns any [`Refusal`] into its problem+json answer in one place
//! (`runtime::http::Problem::refusal`): 404, 422 or 409 by kind.

/// How a refusal reads to a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// The thing the command is about does not exist.
    NotFound,
    /// The request itself is wrong (a field contradicts the stream or another field).
    Invalid,
    /// The request is well formed but the current state does not allow it.
    Conflict,
}

/// A domain refusal. Nothing is written when a command is refused.
pub trait Refusal: std::error::Error {
    /// Stable machine-readable code, e.g. `INSUFFICIENT_BALANCE`.
    fn code(&self) -> &'static str;
    /// The request field the refusal is about, when there is one.
    fn field(&self) -> Option<&'static str>;
    /// By default: a code ending in `NOT_FOUND` is [`RefusalKind::NotFound`], a refusal
    /// about a field is [`RefusalKind::Invalid`], anything else is
    /// [`RefusalKind::Conflict`] (against the current state).
    fn kind(&self) -> RefusalKind {
        if self.code().ends_with("NOT_FOUND") {
            RefusalKind::NotFound
        } else if self.field().is_some() {
            RefusalKind::Invalid
        } else {
            RefusalKind::Conflict
        }
    }
}

/// `Refusal` for an error type whose inherent `code()` and `field()` already say it
/// (the default kind applies).
macro_rules! refusal_by_code {
    ($($t:ty),* $(,)?) => {$(
        impl $crate::refusal::Refusal for $t {
            fn code(&self) -> &'static str {
                <$t>::code(self)
            }
            fn field(&self) -> Option<&'static str> {
                <$t>::field(self)
            }
        }
    )*};
}

refusal_by_code!(
    crate::commission::CommissionError,
    crate::affiliate_order::OrderError,
    crate::commission_rules::RuleSetError,
    crate::affiliate_link::LinkError,
    crate::invite::InviteError,
    crate::campaign::CampaignError,
    crate::admin_action::AdminError,
    crate::withdrawal::WithdrawalError,
    crate::withdrawal::limits::LimitError,
    crate::withdrawal::profile::ProfileError,
    crate::candy::CandyError,
    crate::service_order::OrderError,
    crate::subscription::SubscriptionError,
    crate::booking::BookingError,
    crate::refund::RefundError,
    crate::im_member::ImMemberError,
);

impl Refusal for crate::bill::BillError {
    fn code(&self) -> &'static str {
        crate::bill::BillError::code(self)
    }
    fn field(&self) -> Option<&'static str> {
        crate::bill::BillError::field(self)
    }
    fn kind(&self) -> RefusalKind {
        crate::bill::BillError::kind(self)
    }
}

impl Refusal for crate::wallet::WalletError {
    fn code(&self) -> &'static str {
        crate::wallet::WalletError::code(self)
    }
    fn field(&self) -> Option<&'static str> {
        crate::wallet::WalletError::field(self)
    }
    fn kind(&self) -> RefusalKind {
        use crate::wallet::WalletError as E;
        match self {
            E::NotFound => RefusalKind::NotFound,
            E::CurrencyMismatch { .. } | E::BalanceOverflow { .. } | E::ReasonTooLong { .. } => {
                RefusalKind::Invalid
            }
            E::AlreadyOpen
            | E::InsufficientBalance { .. }
            | E::WithdrawalsBlocked { .. }
            | E::AlreadyBlocked { .. }
            | E::BlockNotFound { .. }
            | E::FreezeAlreadyOpen { .. }
            | E::FreezeNotOpen { .. }
            | E::FreezeAmountMismatch { .. } => RefusalKind::Conflict,
        }
    }
}
