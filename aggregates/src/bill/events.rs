//! Resident-income bill facts as events (SPEC R-BILL-1, seed 001 §4.5, §6.3).
//!
//! Every fact the bill decision reads is recorded here: the bills, the reference data
//! (accounts, partner profiles, station facts, the account route, openings — "not
//! configured" recorded explicitly), payment orders with their lines, locks, results
//! and unqualified conclusions. The bill projector folds these events and never calls
//! out (seed §9.3/§9.4).
//!
//! Payloads are stored forever: changing a shape means a new `event_version` and an
//! upcaster in `crate::upcast`, never a rewrite. Ids are the source system's numeric
//! ids (positive `i64`); months are `yyyymm` text; money is `i64` minor units.
//!
//! Streams (aggregate type → stream id → event enum):
//!
//! | aggregate type            | stream id              | events                     |
//! |---------------------------|------------------------|----------------------------|
//! | `bill_station_month`      | `<station_id>:<yyyymm>`| [`StationMonthEvent`]      |
//! | `bill_partner_bill`       | partner bill id        | [`PartnerBillEvent`]       |
//! | `bill_reference`          | see [`ReferenceEvent`] | [`ReferenceEvent`]         |
//! | `bill_payment_order`      | payment order id       | [`PaymentOrderEvent`]      |
//! | `bill_lock`               | `<station_id>:<yyyymm>`| [`BillLockEvent`]          |
//! | `bill_payment_result`     | payment result id      | [`PaymentResultEvent`]     |

use chrono::{DateTime, Utc};
use cqrs_es::DomainEvent;
use serde::{Deserialize, Serialize};

/// Aggregate types of the bill facts in the event store.
pub const STATION_MONTH_AGGREGATE_TYPE: &str = "bill_station_month";
pub const PARTNER_BILL_AGGREGATE_TYPE: &str = "bill_partner_bill";
pub const REFERENCE_AGGREGATE_TYPE: &str = "bill_reference";
pub const PAYMENT_ORDER_AGGREGATE_TYPE: &str = "bill_payment_order";
pub const BILL_LOCK_AGGREGATE_TYPE: &str = "bill_lock";
pub const PAYMENT_RESULT_AGGREGATE_TYPE: &str = "bill_payment_result";

/// Every aggregate type whose events the bill projector reads.
pub const BILL_AGGREGATE_TYPES: &[&str] = &[
    STATION_MONTH_AGGREGATE_TYPE,
    PARTNER_BILL_AGGREGATE_TYPE,
    REFERENCE_AGGREGATE_TYPE,
    PAYMENT_ORDER_AGGREGATE_TYPE,
    BILL_LOCK_AGGREGATE_TYPE,
    PAYMENT_RESULT_AGGREGATE_TYPE,
];

/// Current schema version of every bill event.
pub const BILL_EVENT_VERSION: i32 = 1;

// ---------------------------------------------------------------------------------
// Station-month: the small bill and the difference-ledger row.
// ---------------------------------------------------------------------------------

/// Facts of one station-month (stream id `<station_id>:<yyyymm>`). One small bill per
/// station-month is enforced by the stream (R-BILL-7 [dev]); one diff row likewise.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum StationMonthEvent {
    /// The small bill was pushed, or changed (same bill id; a different id is refused).
    SmallBillRecorded {
        station_id: i64,
        /// `yyyymm`.
        month: String,
        bill_id: i64,
        /// The customer account the bill belongs to.
        account_id: i64,
        rent_minor: i64,
        recorded_at: DateTime<Utc>,
    },
    /// The difference-ledger row, with or without a partner bill (both legal).
    /// Re-recorded to change its partner bill link (same diff id).
    DiffRecorded {
        station_id: i64,
        month: String,
        diff_id: i64,
        partner_bill_id: Option<i64>,
        recorded_at: DateTime<Utc>,
    },
}

// ---------------------------------------------------------------------------------
// Partner bill.
// ---------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum PartnerBillEvent {
    /// The partner org pushed (or changed) its bill of a month.
    PartnerBillRecorded {
        partner_bill_id: i64,
        partner_account_id: i64,
        month: String,
        /// The proposed amount; `None` when the partner pushed none.
        pre_rent_minor: Option<i64>,
        deduction_minor: i64,
        recorded_at: DateTime<Utc>,
    },
    /// The partner re-pushed the bill: earlier unqualified conclusions are superseded
    /// and the bill waits for re-verification (`last_unqualified_order_id = 0`).
    PartnerBillRepushed {
        partner_bill_id: i64,
        repushed_at: DateTime<Utc>,
    },
}

// ---------------------------------------------------------------------------------
// Reference data.
// ---------------------------------------------------------------------------------

/// `record_way` of a station (composite cycle by record way).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RecordWayCode {
    NaturalPerson,
    NonNaturalPerson,
}

/// A station's share rule (composite cycle by share rule).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShareRuleFact {
    /// `MONTHLY`, `QUARTERLY`, `HALF_YEARLY`, or another code as recorded (then the
    /// cycle cannot be computed: an error finding, never "unconfigured").
    pub rent_pay_method: String,
    pub change_type: Option<String>,
    /// `yyyymm`.
    pub latest_generated_bill_month: Option<String>,
}

/// The business account key the cumulative paid sums by (seed §4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AccountRouteCode {
    /// `small_station_id + partner_org_id`.
    Default,
    /// `platform_station_id + partner_org_id`.
    Platform,
}

/// Reference data, one stream per entity. Stream ids: `customer_account:<id>`,
/// `partner_account:<id>`, `partner_profile:<partner_org_id>`, `station:<station_id>`,
/// `account_route` (one setting), `opening_paid:<id>`, `opening_deduction:<id>`.
/// Each event states the whole current value (latest wins).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum ReferenceEvent {
    CustomerAccountRecorded {
        account_id: i64,
        /// `yyyymm`: rent is payable from this month on.
        income_start_month: String,
        /// `yyyymm`; `None` is recorded as empty (cycles that need it fail).
        current_payable_cutoff_month: Option<String>,
        recorded_at: DateTime<Utc>,
    },
    PartnerAccountRecorded {
        partner_account_id: i64,
        partner_org_id: i64,
        /// The platform station the account maps to; `None` recorded as unmapped.
        platform_station_id: Option<i64>,
        recorded_at: DateTime<Utc>,
    },
    /// The partner org's profile with its default payment cycle code
    /// (`MONTH_PAY_PREVIOUS_MONTH`, `MONTHLY`, `QUARTERLY`, `HALF_YEARLY`,
    /// `RECORD_WAY_COMPOSITE`, `SHARE_RULE_COMPOSITE`, or any other code as recorded:
    /// an illegal cycle means no formula, a null check).
    PartnerProfileConfigured {
        partner_org_id: i64,
        payment_cycle: String,
        config_version: i64,
        recorded_at: DateTime<Utc>,
    },
    /// The profile source said "not configured" (R-BILL-1 [dev]): no formula, a null
    /// check. A partner with no profile event at all is an error finding instead.
    PartnerProfileNotConfigured {
        partner_org_id: i64,
        recorded_at: DateTime<Utc>,
    },
    StationFactsRecorded {
        station_id: i64,
        record_way: Option<RecordWayCode>,
        share_rule: Option<ShareRuleFact>,
        recorded_at: DateTime<Utc>,
    },
    AccountRouteSet {
        route: AccountRouteCode,
        recorded_at: DateTime<Utc>,
    },
    OpeningPaidBalanceRecorded {
        opening_id: i64,
        small_station_id: i64,
        platform_station_id: Option<i64>,
        partner_org_id: i64,
        opening_paid_minor: i64,
        updated_at: DateTime<Utc>,
    },
    OpeningDeductionRecorded {
        opening_id: i64,
        partner_account_id: i64,
        /// `status = 1`.
        effective: bool,
        amount_minor: i64,
        updated_at: DateTime<Utc>,
    },
}

// ---------------------------------------------------------------------------------
// Payment orders, their lines and unqualified conclusions.
// ---------------------------------------------------------------------------------

/// A payment order's master status (seed §5.2; codes as the seed's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OrderStatusCode {
    Draft,
    InReview,
    ReviewRejected,
    /// `WAIT_PAY(40)`.
    WaitPay,
    /// `PAID(50)`.
    Paid,
    NoNeedPay,
    Void,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum LineKindCode {
    Payable,
    Unqualified,
}

/// A payable line's own payment status, written back from its results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum LineStatusCode {
    Unpaid,
    Paid,
    PartiallyPaid,
    Failed,
}

/// A line's planned amount frozen at review approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlannedAmount {
    pub line_id: i64,
    pub planned_amount_minor: i64,
}

/// Where a change of payment facts came from (R-BILL-9 whitelists some of these).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TriggerSource {
    PaymentImportEffective,
    PaymentImportDelete,
    TreasuryPlaceholderReserved,
    TreasuryResultWriteback,
    PaymentFailFallback,
    PaymentStatusAsyncRefresh,
    PaymentOrderStatusDataRepair,
    /// A fact recorded by an operator or another source outside the whitelist.
    Manual,
}

impl TriggerSource {
    /// The R-BILL-9 whitelist: these sources reconcile payment-order statuses.
    pub fn reconciles_order_status(self) -> bool {
        !matches!(self, TriggerSource::Manual)
    }
}

/// Facts of one payment order (master + lines; stream id = order id). Lines carry the
/// publish identity of the last publication that listed them; only the master's
/// current identity counts (R-BILL-2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum PaymentOrderEvent {
    PaymentOrderCreated {
        order_id: i64,
        /// Paid through the treasury (vs offline).
        treasury: bool,
        actor: String,
        created_at: DateTime<Utc>,
    },
    LineAdded {
        order_id: i64,
        line_id: i64,
        station_id: i64,
        month: String,
        kind: LineKindCode,
        planned_amount_minor: i64,
        at: DateTime<Utc>,
    },
    /// The line is deleted: it no longer counts anywhere.
    LineRemoved {
        order_id: i64,
        line_id: i64,
        at: DateTime<Utc>,
    },
    /// A manual adjustment from the selection session, audited.
    LineAdjusted {
        order_id: i64,
        line_id: i64,
        manual_adjustment_minor: i64,
        actor: String,
        reason: String,
        at: DateTime<Utc>,
    },
    /// Published with a new publish version and the current submit round: every live
    /// line listed takes this identity.
    PaymentOrderPublished {
        order_id: i64,
        publish_version: i64,
        submit_round: i64,
        line_ids: Vec<i64>,
        at: DateTime<Utc>,
    },
    /// Submitted for review (status IN_REVIEW), in a new submit round.
    PaymentOrderSubmitted {
        order_id: i64,
        submit_round: i64,
        actor: String,
        at: DateTime<Utc>,
    },
    /// Review approved: WAIT_PAY, planned amounts frozen for every live payable line.
    PaymentOrderApproved {
        order_id: i64,
        planned: Vec<PlannedAmount>,
        actor: String,
        at: DateTime<Utc>,
    },
    PaymentOrderRejected {
        order_id: i64,
        actor: String,
        reason: String,
        at: DateTime<Utc>,
    },
    PaymentOrderMarkedNoNeedPay {
        order_id: i64,
        actor: String,
        reason: String,
        at: DateTime<Utc>,
    },
    PaymentOrderVoided {
        order_id: i64,
        actor: String,
        reason: String,
        at: DateTime<Utc>,
    },
    /// R-BILL-9: the master status moved by compare-and-set on its publish identity
    /// and old status.
    PaymentOrderStatusReconciled {
        order_id: i64,
        from: OrderStatusCode,
        to: OrderStatusCode,
        publish_version: i64,
        submit_round: i64,
        trigger_source: TriggerSource,
        at: DateTime<Utc>,
    },
    /// A line's latest result written back (treasury write-back, fail fallback, or
    /// R-BILL-9 on PAYMENT_IMPORT_EFFECTIVE): `latest_result_id` and the line status.
    LineResultWritten {
        order_id: i64,
        line_id: i64,
        result_id: i64,
        line_status: LineStatusCode,
        paid_amount_minor: i64,
        paid_at: Option<DateTime<Utc>>,
        fail_reason: Option<String>,
        trigger_source: TriggerSource,
        at: DateTime<Utc>,
    },
    /// An unqualified conclusion on an UNQUALIFIED line; it makes the line
    /// `UNQUALIFIED_EFFECTIVE`.
    UnqualifiedConcluded {
        order_id: i64,
        line_id: i64,
        /// Partner-visible conclusions fail the partner query and fill
        /// `unqualified_flag/reason`; internal ones do neither.
        partner_visible: bool,
        reason: String,
        actor: String,
        at: DateTime<Utc>,
    },
    /// The line's conclusion no longer counts (`UNQUALIFIED_INEFFECTIVE`).
    UnqualifiedWithdrawn {
        order_id: i64,
        line_id: i64,
        actor: String,
        reason: String,
        at: DateTime<Utc>,
    },
}

// ---------------------------------------------------------------------------------
// Bill locks.
// ---------------------------------------------------------------------------------

/// The lock of one station-month (stream id `<station_id>:<yyyymm>`): at most one live
/// (RESERVED or ACTIVE) lock at a time. Projecting never changes a lock (R-BILL-6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum BillLockEvent {
    BillLockReserved {
        lock_id: i64,
        station_id: i64,
        month: String,
        order_id: i64,
        line_id: i64,
        publish_version: i64,
        submit_round: i64,
        at: DateTime<Utc>,
    },
    BillLockActivated {
        lock_id: i64,
        at: DateTime<Utc>,
    },
    BillLockReleased {
        lock_id: i64,
        at: DateTime<Utc>,
    },
}

// ---------------------------------------------------------------------------------
// Payment results.
// ---------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ResultStatusCode {
    Paying,
    /// `PAY_SUCCESS(30)`.
    PaySuccess,
    PayFail,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ResultTypeCode {
    /// `NORMAL_PAYMENT(10)`.
    NormalPayment,
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ResultSourceCode {
    /// `TREASURY(10)`.
    Treasury,
    /// `OFFLINE_IMPORT(20)`.
    OfflineImport,
    FailFallback,
    Other,
}

/// A payment result (stream id = result id): recorded once, then possibly voided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum PaymentResultEvent {
    PaymentResultRecorded {
        result_id: i64,
        /// The line (and its order) the result pays, when known.
        order_id: Option<i64>,
        line_id: Option<i64>,
        small_station_id: i64,
        platform_station_id: Option<i64>,
        partner_org_id: Option<i64>,
        month: String,
        status: ResultStatusCode,
        kind: ResultTypeCode,
        source: ResultSourceCode,
        amount_minor: i64,
        paid_at: Option<DateTime<Utc>>,
        fail_reason: Option<String>,
        trigger_source: TriggerSource,
        recorded_at: DateTime<Utc>,
    },
    /// Voided results count in no paid sum (R-BILL-3 [dev]) and are no line's outcome.
    PaymentResultVoided {
        result_id: i64,
        trigger_source: TriggerSource,
        voided_at: DateTime<Utc>,
    },
}

macro_rules! domain_event {
    ($ty:ty { $($variant:ident),+ $(,)? }) => {
        impl $ty {
            pub fn name(&self) -> &'static str {
                match self {
                    $(Self::$variant { .. } => stringify!($variant),)+
                }
            }
        }

        impl DomainEvent for $ty {
            fn event_type(&self) -> String {
                self.name().to_owned()
            }

            fn event_version(&self) -> String {
                BILL_EVENT_VERSION.to_string()
            }
        }
    };
}

domain_event!(StationMonthEvent {
    SmallBillRecorded,
    DiffRecorded
});
domain_event!(PartnerBillEvent {
    PartnerBillRecorded,
    PartnerBillRepushed
});
domain_event!(ReferenceEvent {
    CustomerAccountRecorded,
    PartnerAccountRecorded,
    PartnerProfileConfigured,
    PartnerProfileNotConfigured,
    StationFactsRecorded,
    AccountRouteSet,
    OpeningPaidBalanceRecorded,
    OpeningDeductionRecorded,
});
domain_event!(PaymentOrderEvent {
    PaymentOrderCreated,
    LineAdded,
    LineRemoved,
    LineAdjusted,
    PaymentOrderPublished,
    PaymentOrderSubmitted,
    PaymentOrderApproved,
    PaymentOrderRejected,
    PaymentOrderMarkedNoNeedPay,
    PaymentOrderVoided,
    PaymentOrderStatusReconciled,
    LineResultWritten,
    UnqualifiedConcluded,
    UnqualifiedWithdrawn,
});
domain_event!(BillLockEvent {
    BillLockReserved,
    BillLockActivated,
    BillLockReleased
});
domain_event!(PaymentResultEvent {
    PaymentResultRecorded,
    PaymentResultVoided
});
