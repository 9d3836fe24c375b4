//! The two choices every refresh request makes: its scope type ([`ScopeType`], how it
//! names its bills) and its mode ([`RefreshMode`], which of them a round recomputes).

use super::limits::UNFINISHED_STATUSES;
use crate::bill::PaymentStatus;
use std::fmt;

/// `scope_type`: the five ways a request names its bills (seed §4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScopeType {
    StationMonth,
    PartnerBill,
    Diff,
    OrderBill,
    AccountScope,
}

impl ScopeType {
    pub const ALL: [ScopeType; 5] = [
        ScopeType::StationMonth,
        ScopeType::PartnerBill,
        ScopeType::Diff,
        ScopeType::OrderBill,
        ScopeType::AccountScope,
    ];

    pub fn code(self) -> i64 {
        match self {
            ScopeType::StationMonth => 10,
            ScopeType::PartnerBill => 20,
            ScopeType::Diff => 30,
            ScopeType::OrderBill => 40,
            ScopeType::AccountScope => 50,
        }
    }

    /// The name, also the business key's first segment.
    pub fn name(self) -> &'static str {
        match self {
            ScopeType::StationMonth => "STATION_MONTH",
            ScopeType::PartnerBill => "PARTNER_BILL",
            ScopeType::Diff => "DIFF",
            ScopeType::OrderBill => "ORDER_BILL",
            ScopeType::AccountScope => "ACCOUNT_SCOPE",
        }
    }

    /// The request field that carries this type's list of ids (the account scope has
    /// two: see `AccountScope`).
    pub(super) fn list_field(self) -> &'static str {
        match self {
            ScopeType::StationMonth => "station_months",
            ScopeType::PartnerBill => "partner_bill_ids",
            ScopeType::Diff => "diff_ids",
            ScopeType::OrderBill => "order_bill_ids",
            ScopeType::AccountScope => "small_account_ids",
        }
    }
}

impl fmt::Display for ScopeType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.name(), self.code())
    }
}

/// `mode`: which of the resolved bills a round recomputes. Fact-driven recomputation is
/// always [`RefreshMode::All`], because a paid bill can become unpaid again (R-BILL-8).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RefreshMode {
    /// Every resolved bill (the default, as the seed's `onlyRefreshUnfinished=false`).
    #[default]
    All,
    /// Only bills whose current status is in [`UNFINISHED_STATUSES`], evaluated at
    /// execution time, for every scope type (**[dev]**: the seed filtered the account
    /// scope only, §4.4).
    Unfinished,
}

impl RefreshMode {
    pub fn as_str(self) -> &'static str {
        match self {
            RefreshMode::All => "ALL",
            RefreshMode::Unfinished => "UNFINISHED",
        }
    }

    /// Whether a bill whose projected status is `status` is recomputed in this mode.
    /// A station-month never projected (`None`) is not finished, so UNFINISHED takes it.
    pub fn admits(self, status: Option<PaymentStatus>) -> bool {
        match (self, status) {
            (RefreshMode::All, _) | (RefreshMode::Unfinished, None) => true,
            (RefreshMode::Unfinished, Some(s)) => UNFINISHED_STATUSES.contains(&s),
        }
    }
}
