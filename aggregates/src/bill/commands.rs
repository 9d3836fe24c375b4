//! Bill commands, one enum per aggregate, tagged by `"type"` on the wire; unknown
//! fields are refused. Every command names the ids of its stream (checked against the
//! stream) and carries its time: the aggregates never read a clock.

use super::events::{
    AccountRouteCode, LineKindCode, RecordWayCode, ResultSourceCode, ResultStatusCode,
    ResultTypeCode, TriggerSource,
};
use super::month::YearMonth;
use super::values::{BillCode, BillId, NonNegativeMinor};
use crate::affiliate::AuditReason;
use crate::money::BoundedId;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

macro_rules! command_names {
    ($ty:ident { $($variant:ident),+ $(,)? }) => {
        impl $ty {
            /// The command's name as it appears in `"type"`, for logs and metrics.
            pub fn name(&self) -> &'static str {
                match self {
                    $(Self::$variant(_) => stringify!($variant),)+
                }
            }
        }
    };
}

// ---------------------------------------------------------------------------------
// Station-month (stream `<station_id>:<yyyymm>`).
// ---------------------------------------------------------------------------------

/// The small bill of a station-month was pushed or changed. A second, different bill
/// id for the same station-month is refused (R-BILL-7 [dev]); the same content again
/// writes nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordSmallBill {
    pub station_id: BillId,
    pub month: YearMonth,
    pub bill_id: BillId,
    pub account_id: BillId,
    pub rent_minor: NonNegativeMinor,
    pub recorded_at: DateTime<Utc>,
}

/// The difference-ledger row of a station-month, with or without a partner bill.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordDiff {
    pub station_id: BillId,
    pub month: YearMonth,
    pub diff_id: BillId,
    #[serde(default)]
    pub partner_bill_id: Option<BillId>,
    pub recorded_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum StationMonthCommand {
    RecordSmallBill(RecordSmallBill),
    RecordDiff(RecordDiff),
}
command_names!(StationMonthCommand {
    RecordSmallBill,
    RecordDiff
});

// ---------------------------------------------------------------------------------
// Partner bill (stream = partner bill id).
// ---------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordPartnerBill {
    pub partner_bill_id: BillId,
    pub partner_account_id: BillId,
    pub month: YearMonth,
    /// `None` when the partner pushed no proposed amount (the check then reports the
    /// partner side missing, R-BILL-4).
    #[serde(default)]
    pub pre_rent_minor: Option<NonNegativeMinor>,
    pub deduction_minor: NonNegativeMinor,
    pub recorded_at: DateTime<Utc>,
}

/// The partner re-pushed a recorded bill. `repushed_at` is the partner's push time (a
/// source fact): the same time again is a replay and writes nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepushPartnerBill {
    pub partner_bill_id: BillId,
    pub repushed_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum PartnerBillCommand {
    RecordPartnerBill(RecordPartnerBill),
    RepushPartnerBill(RepushPartnerBill),
}
command_names!(PartnerBillCommand {
    RecordPartnerBill,
    RepushPartnerBill
});

// ---------------------------------------------------------------------------------
// Reference data (one stream per entity, see `ReferenceEvent`).
// ---------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordCustomerAccount {
    pub account_id: BillId,
    pub income_start_month: YearMonth,
    /// Recorded as empty when `None` (cycles that need it fail, R-BILL-4).
    #[serde(default)]
    pub current_payable_cutoff_month: Option<YearMonth>,
    pub recorded_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordPartnerAccount {
    pub partner_account_id: BillId,
    pub partner_org_id: BillId,
    /// `None` is recorded as unmapped.
    #[serde(default)]
    pub platform_station_id: Option<BillId>,
    pub recorded_at: DateTime<Utc>,
}

/// The partner org's profile. `config_version` only moves forward; the same version
/// with another cycle is refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigurePartnerProfile {
    pub partner_org_id: BillId,
    pub payment_cycle: BillCode,
    pub config_version: BillId,
    pub recorded_at: DateTime<Utc>,
}

/// The profile source answered "not configured" (R-BILL-1 [dev]): recorded
/// explicitly, unlike a source that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MarkPartnerProfileNotConfigured {
    pub partner_org_id: BillId,
    pub recorded_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShareRule {
    pub rent_pay_method: BillCode,
    #[serde(default)]
    pub change_type: Option<BillCode>,
    #[serde(default)]
    pub latest_generated_bill_month: Option<YearMonth>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordStationFacts {
    pub station_id: BillId,
    #[serde(default)]
    pub record_way: Option<RecordWayCode>,
    #[serde(default)]
    pub share_rule: Option<ShareRule>,
    pub recorded_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetAccountRoute {
    pub route: AccountRouteCode,
    pub recorded_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordOpeningPaidBalance {
    pub opening_id: BillId,
    pub small_station_id: BillId,
    #[serde(default)]
    pub platform_station_id: Option<BillId>,
    pub partner_org_id: BillId,
    pub opening_paid_minor: NonNegativeMinor,
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordOpeningDeduction {
    pub opening_id: BillId,
    pub partner_account_id: BillId,
    /// The source's `status = 1`.
    pub effective: bool,
    pub amount_minor: NonNegativeMinor,
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum ReferenceCommand {
    RecordCustomerAccount(RecordCustomerAccount),
    RecordPartnerAccount(RecordPartnerAccount),
    ConfigurePartnerProfile(ConfigurePartnerProfile),
    MarkPartnerProfileNotConfigured(MarkPartnerProfileNotConfigured),
    RecordStationFacts(RecordStationFacts),
    SetAccountRoute(SetAccountRoute),
    RecordOpeningPaidBalance(RecordOpeningPaidBalance),
    RecordOpeningDeduction(RecordOpeningDeduction),
}
command_names!(ReferenceCommand {
    RecordCustomerAccount,
    RecordPartnerAccount,
    ConfigurePartnerProfile,
    MarkPartnerProfileNotConfigured,
    RecordStationFacts,
    SetAccountRoute,
    RecordOpeningPaidBalance,
    RecordOpeningDeduction,
});

impl ReferenceCommand {
    /// The stream of the entity the command is about (see `ReferenceEvent`).
    pub fn stream_id(&self) -> String {
        match self {
            Self::RecordCustomerAccount(c) => format!("customer_account:{}", c.account_id),
            Self::RecordPartnerAccount(c) => format!("partner_account:{}", c.partner_account_id),
            Self::ConfigurePartnerProfile(c) => format!("partner_profile:{}", c.partner_org_id),
            Self::MarkPartnerProfileNotConfigured(c) => {
                format!("partner_profile:{}", c.partner_org_id)
            }
            Self::RecordStationFacts(c) => format!("station:{}", c.station_id),
            Self::SetAccountRoute(_) => "account_route".to_owned(),
            Self::RecordOpeningPaidBalance(c) => format!("opening_paid:{}", c.opening_id),
            Self::RecordOpeningDeduction(c) => format!("opening_deduction:{}", c.opening_id),
        }
    }
}

// ---------------------------------------------------------------------------------
// Payment orders (stream = order id).
// ---------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreatePaymentOrder {
    pub order_id: BillId,
    /// Paid through the treasury (vs offline).
    pub treasury: bool,
    pub actor: BoundedId,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddLine {
    pub order_id: BillId,
    pub line_id: BillId,
    pub station_id: BillId,
    pub month: YearMonth,
    pub kind: LineKindCode,
    pub planned_amount_minor: NonNegativeMinor,
    pub at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoveLine {
    pub order_id: BillId,
    pub line_id: BillId,
    pub at: DateTime<Utc>,
}

/// Set a payable line's manual adjustment (the whole adjustment, not a delta). It may
/// be negative, but `planned + adjustment` may not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdjustLine {
    pub order_id: BillId,
    pub line_id: BillId,
    pub manual_adjustment_minor: i64,
    pub actor: BoundedId,
    pub reason: AuditReason,
    pub at: DateTime<Utc>,
}

/// Publish (DRAFT or REVIEW_REJECTED): a new publish version stamped on every live
/// line with the current submit round.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublishPaymentOrder {
    pub order_id: BillId,
    pub at: DateTime<Utc>,
}

/// An order action with only an actor (submit, approve).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrderAction {
    pub order_id: BillId,
    pub actor: BoundedId,
    pub at: DateTime<Utc>,
}

/// An order action that must say why (reject, void, no need to pay).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReasonedOrderAction {
    pub order_id: BillId,
    pub actor: BoundedId,
    pub reason: AuditReason,
    pub at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConcludeUnqualified {
    pub order_id: BillId,
    pub line_id: BillId,
    pub partner_visible: bool,
    pub reason: AuditReason,
    pub actor: BoundedId,
    pub at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WithdrawUnqualified {
    pub order_id: BillId,
    pub line_id: BillId,
    pub actor: BoundedId,
    pub reason: AuditReason,
    pub at: DateTime<Utc>,
}

/// Write a payment result back to its payable line (treasury write-back, fail
/// fallback): the line's latest result id and status. Decided in the result's unit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteLineResult {
    pub order_id: BillId,
    pub line_id: BillId,
    pub result_id: BillId,
    /// The result's station-month, checked against the line's.
    pub station_id: BillId,
    pub month: YearMonth,
    pub status: ResultStatusCode,
    pub amount_minor: NonNegativeMinor,
    #[serde(default)]
    pub paid_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub fail_reason: Option<AuditReason>,
    pub trigger_source: TriggerSource,
    pub at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum PaymentOrderCommand {
    CreatePaymentOrder(CreatePaymentOrder),
    AddLine(AddLine),
    RemoveLine(RemoveLine),
    AdjustLine(AdjustLine),
    PublishPaymentOrder(PublishPaymentOrder),
    SubmitPaymentOrder(OrderAction),
    ApprovePaymentOrder(OrderAction),
    RejectPaymentOrder(ReasonedOrderAction),
    VoidPaymentOrder(ReasonedOrderAction),
    MarkPaymentOrderNoNeedPay(ReasonedOrderAction),
    ConcludeUnqualified(ConcludeUnqualified),
    WithdrawUnqualified(WithdrawUnqualified),
    WriteLineResult(WriteLineResult),
}
command_names!(PaymentOrderCommand {
    CreatePaymentOrder,
    AddLine,
    RemoveLine,
    AdjustLine,
    PublishPaymentOrder,
    SubmitPaymentOrder,
    ApprovePaymentOrder,
    RejectPaymentOrder,
    VoidPaymentOrder,
    MarkPaymentOrderNoNeedPay,
    ConcludeUnqualified,
    WithdrawUnqualified,
    WriteLineResult,
});

impl PaymentOrderCommand {
    /// The order the command is about (its stream id).
    pub fn order_id(&self) -> BillId {
        match self {
            Self::CreatePaymentOrder(c) => c.order_id,
            Self::AddLine(c) => c.order_id,
            Self::RemoveLine(c) => c.order_id,
            Self::AdjustLine(c) => c.order_id,
            Self::PublishPaymentOrder(c) => c.order_id,
            Self::SubmitPaymentOrder(c) | Self::ApprovePaymentOrder(c) => c.order_id,
            Self::RejectPaymentOrder(c)
            | Self::VoidPaymentOrder(c)
            | Self::MarkPaymentOrderNoNeedPay(c) => c.order_id,
            Self::ConcludeUnqualified(c) => c.order_id,
            Self::WithdrawUnqualified(c) => c.order_id,
            Self::WriteLineResult(c) => c.order_id,
        }
    }
}

// ---------------------------------------------------------------------------------
// Locks (stream `<station_id>:<yyyymm>`).
// ---------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReserveLock {
    pub lock_id: BillId,
    pub station_id: BillId,
    pub month: YearMonth,
    pub order_id: BillId,
    pub line_id: BillId,
    pub publish_version: BillId,
    pub submit_round: BillId,
    pub at: DateTime<Utc>,
}

/// Activate or release a lock of the station-month.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockAction {
    pub station_id: BillId,
    pub month: YearMonth,
    pub lock_id: BillId,
    pub at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum BillLockCommand {
    ReserveLock(ReserveLock),
    ActivateLock(LockAction),
    ReleaseLock(LockAction),
}
command_names!(BillLockCommand {
    ReserveLock,
    ActivateLock,
    ReleaseLock
});

// ---------------------------------------------------------------------------------
// Payment results (stream = result id).
// ---------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordPaymentResult {
    pub result_id: BillId,
    #[serde(default)]
    pub order_id: Option<BillId>,
    #[serde(default)]
    pub line_id: Option<BillId>,
    pub small_station_id: BillId,
    #[serde(default)]
    pub platform_station_id: Option<BillId>,
    #[serde(default)]
    pub partner_org_id: Option<BillId>,
    pub month: YearMonth,
    pub status: ResultStatusCode,
    pub kind: ResultTypeCode,
    pub source: ResultSourceCode,
    pub amount_minor: NonNegativeMinor,
    #[serde(default)]
    pub paid_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub fail_reason: Option<AuditReason>,
    pub trigger_source: TriggerSource,
    pub recorded_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VoidPaymentResult {
    pub result_id: BillId,
    pub trigger_source: TriggerSource,
    pub voided_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum PaymentResultCommand {
    RecordPaymentResult(RecordPaymentResult),
    VoidPaymentResult(VoidPaymentResult),
}
command_names!(PaymentResultCommand {
    RecordPaymentResult,
    VoidPaymentResult
});
