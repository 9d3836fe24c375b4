//! The output of the bill decision: what the three bill rows get (R-BILL-7), and which
//! rule decided each status, so a row can be explained from the facts.

use super::facts::StationMonth;
use chrono::{DateTime, Utc};
use std::fmt;

/// `payment_status` of the three bill rows (R-BILL-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PaymentStatus {
    NoPaymentNeeded,
    Unpaid,
    InReview,
    AwaitingPayment,
    Paid,
    PartiallyPaid,
    PaymentFailed,
    PartnerBillNotPushed,
}

impl PaymentStatus {
    /// Every status, in code order.
    pub const ALL: [PaymentStatus; 8] = [
        PaymentStatus::NoPaymentNeeded,
        PaymentStatus::Unpaid,
        PaymentStatus::InReview,
        PaymentStatus::AwaitingPayment,
        PaymentStatus::Paid,
        PaymentStatus::PartiallyPaid,
        PaymentStatus::PaymentFailed,
        PaymentStatus::PartnerBillNotPushed,
    ];

    /// The status a stored `payment_status` code names, `None` for any other code.
    pub fn from_code(code: i64) -> Option<PaymentStatus> {
        Self::ALL.into_iter().find(|s| i64::from(s.code()) == code)
    }

    pub fn code(self) -> i32 {
        match self {
            PaymentStatus::NoPaymentNeeded => 10,
            PaymentStatus::Unpaid => 20,
            PaymentStatus::InReview => 30,
            PaymentStatus::AwaitingPayment => 40,
            PaymentStatus::Paid => 50,
            PaymentStatus::PartiallyPaid => 60,
            PaymentStatus::PaymentFailed => 70,
            PaymentStatus::PartnerBillNotPushed => 99,
        }
    }
}

/// The R-BILL-2 rule that fired, in table order: the first that matches wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StatusRule {
    R1InReview,
    R2AwaitingPaymentUnderLock,
    R3SmallBillOfflinePaid,
    R4PartnerBillNotPushed,
    R5NoPaymentNeeded,
    R6AwaitingPaymentWithoutLock,
    R7Paid,
    R8PartialPayment,
    R9PaymentFailed,
    R10Unpaid,
}

impl StatusRule {
    pub fn status(self) -> PaymentStatus {
        match self {
            StatusRule::R1InReview => PaymentStatus::InReview,
            StatusRule::R2AwaitingPaymentUnderLock => PaymentStatus::AwaitingPayment,
            StatusRule::R3SmallBillOfflinePaid => PaymentStatus::Paid,
            StatusRule::R4PartnerBillNotPushed => PaymentStatus::PartnerBillNotPushed,
            StatusRule::R5NoPaymentNeeded => PaymentStatus::NoPaymentNeeded,
            StatusRule::R6AwaitingPaymentWithoutLock => PaymentStatus::AwaitingPayment,
            StatusRule::R7Paid => PaymentStatus::Paid,
            StatusRule::R8PartialPayment => PaymentStatus::PartiallyPaid,
            StatusRule::R9PaymentFailed => PaymentStatus::PaymentFailed,
            StatusRule::R10Unpaid => PaymentStatus::Unpaid,
        }
    }

    /// E.g. `"R8 partial payment"`: what audit findings and logs show.
    pub fn label(self) -> &'static str {
        match self {
            StatusRule::R1InReview => "R1 in review under a valid lock",
            StatusRule::R2AwaitingPaymentUnderLock => "R2 awaiting payment under a valid lock",
            StatusRule::R3SmallBillOfflinePaid => "R3 small bill only, paid offline",
            StatusRule::R4PartnerBillNotPushed => "R4 partner bill not pushed",
            StatusRule::R5NoPaymentNeeded => "R5 no payment needed",
            StatusRule::R6AwaitingPaymentWithoutLock => "R6 awaiting payment without a lock",
            StatusRule::R7Paid => "R7 paid",
            StatusRule::R8PartialPayment => "R8 partial payment",
            StatusRule::R9PaymentFailed => "R9 payment failed",
            StatusRule::R10Unpaid => "R10 unpaid",
        }
    }
}

impl fmt::Display for StatusRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// `pre_rent_check_result` (R-BILL-4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PreRentCheckResult {
    Passed,
    AvailableNotEnough,
    SmallSideMissing,
    PartnerSideMissing,
}

impl PreRentCheckResult {
    pub fn code(self) -> i32 {
        match self {
            PreRentCheckResult::Passed => 10,
            PreRentCheckResult::AvailableNotEnough => 20,
            PreRentCheckResult::SmallSideMissing => 30,
            PreRentCheckResult::PartnerSideMissing => 40,
        }
    }
}

/// `pre_rent_check_reason`: the precise reason beside a result other than a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PreRentCheckReason {
    AvailablePayableNotEnough,
    SmallBillMissing,
    SmallAccountMissing,
    PartnerBillMissing,
    PartnerAccountMissing,
    PreRentMissing,
}

impl PreRentCheckReason {
    pub fn as_str(self) -> &'static str {
        match self {
            PreRentCheckReason::AvailablePayableNotEnough => "AVAILABLE_PAYABLE_NOT_ENOUGH",
            PreRentCheckReason::SmallBillMissing => "SMALL_BILL_MISSING",
            PreRentCheckReason::SmallAccountMissing => "SMALL_ACCOUNT_MISSING",
            PreRentCheckReason::PartnerBillMissing => "PARTNER_BILL_MISSING",
            PreRentCheckReason::PartnerAccountMissing => "PARTNER_ACCOUNT_MISSING",
            PreRentCheckReason::PreRentMissing => "PRE_RENT_MISSING",
        }
    }
}

/// A pre-rent check that reached a conclusion. "No formula result" is not one of these:
/// it is `Decision::pre_rent_check == None`, never a pass by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreRentCheck {
    pub result: PreRentCheckResult,
    pub reason: Option<PreRentCheckReason>,
    /// The formula's available payable, when there was a formula (results 10 and 20).
    pub available_minor: Option<i64>,
}

/// `partner_query_status` (R-BILL-5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PartnerQueryStatus {
    Unchecked,
    /// **[dev]** the seed names no code for "passed"; factledger uses 20.
    Passed,
    Failed,
}

impl PartnerQueryStatus {
    pub fn code(self) -> i32 {
        match self {
            PartnerQueryStatus::Unchecked => 10,
            PartnerQueryStatus::Passed => 20,
            PartnerQueryStatus::Failed => 30,
        }
    }
}

/// The R-BILL-5 rule that fired, in table order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PartnerQueryRule {
    Q1PartnerVisibleUnqualified,
    Q2InternalUnqualifiedOnly,
    Q3RepushPending,
    Q4PreRentBelowPaid,
    Q5SmallBillOfflinePaid,
    Q6PaymentStatusChecked,
    Q6Otherwise,
}

impl PartnerQueryRule {
    pub fn label(self) -> &'static str {
        match self {
            PartnerQueryRule::Q1PartnerVisibleUnqualified => "Q1 partner-visible unqualified",
            PartnerQueryRule::Q2InternalUnqualifiedOnly => "Q2 internal unqualified only",
            PartnerQueryRule::Q3RepushPending => "Q3 re-push pending re-verification",
            PartnerQueryRule::Q4PreRentBelowPaid => "Q4 pre_rent below paid",
            PartnerQueryRule::Q5SmallBillOfflinePaid => "Q5 small bill only, paid offline",
            PartnerQueryRule::Q6PaymentStatusChecked => "Q6 payment status 10/40/50/70",
            PartnerQueryRule::Q6Otherwise => "Q6 otherwise unchecked",
        }
    }
}

impl fmt::Display for PartnerQueryRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// `last_unqualified_order_id/time` of the partner bill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastUnqualified {
    /// `0` marks a re-push waiting for re-verification.
    pub order_id: i64,
    pub at: Option<DateTime<Utc>>,
}

/// The payment projection of one station-month: the same decision is written to the
/// small bill, the partner bill and the diff row (R-BILL-7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub station_month: StationMonth,
    /// Which partner bill row and diff row get the partner-side fields.
    pub partner_bill_id: Option<i64>,
    pub diff_id: Option<i64>,

    pub payment_status: PaymentStatus,
    pub decided_by: StatusRule,

    /// This station-month's successful normal payments (R-BILL-3).
    pub paid_amount_minor: i64,
    /// `pre_rent − paid`; negative when overpaid; `None` without a partner bill or
    /// pre_rent.
    pub current_payment_amount_minor: Option<i64>,
    pub cumulative_paid_amount_minor: i64,

    /// `None`: no formula result (no check, not a pass).
    pub pre_rent_check: Option<PreRentCheck>,

    pub partner_query_status: PartnerQueryStatus,
    pub partner_query_decided_by: PartnerQueryRule,

    /// Partner-visible unqualified conclusions only.
    pub unqualified_flag: bool,
    pub unqualified_reason: Option<String>,
    pub last_unqualified: Option<LastUnqualified>,

    /// The current valid lock (R-BILL-6); both `None` clears the columns. Clearing
    /// them never releases the lock itself.
    pub locked_payment_order_id: Option<i64>,
    pub locked_order_bill_id: Option<i64>,
}
