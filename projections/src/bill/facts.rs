//! The input of the bill decision: every fact of one station-month, and what the rules
//! read across months (rents since the income start, cumulative results by business
//! account, deductions of the partner accounts, openings). SPEC R-BILL-1.
//!
//! The facts are already recorded (events, reference data as events): the assembler
//! that builds a [`BillFacts`] never fetches anything while projecting, and a value of
//! these types is valid by construction (parse, don't validate). Times arrive here;
//! nothing in the decision reads a clock.

use super::BillError;
use chrono::{DateTime, Utc};
use serde::Serialize;

/// The month and station-month values are the aggregates' own: one type each for
/// commands, events, the projections and the service.
pub use factledger_aggregates::bill::{StationMonth, YearMonth};

/// A `yyyymm` as the projections read it (stored rows, refresh requests, read paths):
/// any four-digit year ([`YearMonth::parse`]), refused as [`BillError::BadMonth`].
pub fn parse_month(s: &str) -> Result<YearMonth, BillError> {
    YearMonth::parse(s).map_err(|_| BillError::BadMonth(s.to_owned()))
}

/// A `<station_id>:<yyyymm>` ([`StationMonth::parse`]), refused as
/// [`BillError::BadStationMonth`].
pub fn parse_station_month(s: &str) -> Result<StationMonth, BillError> {
    StationMonth::parse(s).map_err(|_| BillError::BadStationMonth(s.to_owned()))
}

/// Everything [`decide`](super::decide) reads for one station-month.
#[derive(Debug, Clone, Serialize)]
pub struct BillFacts {
    pub station_month: StationMonth,
    /// The resident's bill of this station-month (`fi_customer_bill`). At most one:
    /// enforced when recorded (R-BILL-7, seed §9.6).
    pub small_bill: Option<SmallBill>,
    /// The small bill's customer account.
    pub small_account: Option<CustomerAccount>,
    /// The small account's bills of every month: the pre-rent check sums their rent
    /// from the income start month to the cutoff month.
    pub account_small_bills: Vec<SmallBillRent>,
    /// The partner's bill of this station-month (`fi_customer_bill_partner`).
    pub partner_bill: Option<PartnerBill>,
    /// The difference-ledger row; recorded with or without a partner bill.
    pub diff: Option<Diff>,
    /// The partner accounts of the platform station: the partner bill's own account is
    /// one of them, and the cumulative deduction sums over all of them.
    pub partner_accounts: Vec<PartnerAccount>,
    /// Every partner bill of those accounts (any month: the deduction has no month cap,
    /// seed §4.5 `sumDeductionByAccountIds`).
    pub account_partner_bills: Vec<PartnerBillDeduction>,
    /// The partner org's profile, as recorded (or not).
    pub partner_profile: PartnerProfile,
    /// Station facts composite cycles read.
    pub station: StationFacts,
    /// Which business account key the cumulative paid sums by (a runtime route in the
    /// seed, recorded here as reference data).
    pub account_route: AccountRoute,
    pub opening_paid_balances: Vec<OpeningPaidBalance>,
    pub opening_deductions: Vec<OpeningDeduction>,
    /// Payment orders (masters) referenced by the lines and locks.
    pub orders: Vec<PaymentOrder>,
    /// This station-month's payment order lines, of every publish identity.
    pub lines: Vec<BillLine>,
    /// This station-month's bill locks, of every state.
    pub locks: Vec<BillLock>,
    /// Payment results: this station-month's, and every result of the business
    /// account up to the target month (the cumulative paid reads them).
    pub results: Vec<PaymentResult>,
    pub unqualified_conclusions: Vec<UnqualifiedConclusion>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SmallBill {
    pub id: i64,
    pub account_id: i64,
    pub rent_minor: i64,
}

/// One small bill of the account, as the rent sum reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SmallBillRent {
    pub account_id: i64,
    pub month: YearMonth,
    pub rent_minor: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CustomerAccount {
    pub id: i64,
    /// Rent is payable from this month on.
    pub income_start_month: YearMonth,
    /// The account's own payable cutoff; cycles other than MONTH_PAY_PREVIOUS_MONTH
    /// cap their cutoff with it, and need it (empty → an error, seed §5.3).
    pub current_payable_cutoff_month: Option<YearMonth>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartnerBill {
    pub id: i64,
    pub partner_account_id: i64,
    /// The proposed amount of this month; `None` when the partner pushed none.
    pub pre_rent_minor: Option<i64>,
    pub deduction_minor: i64,
    /// `Some(0)` after a partner re-push: the bill waits for re-verification (R-BILL-5).
    pub last_unqualified_order_id: Option<i64>,
    pub last_unqualified_at: Option<DateTime<Utc>>,
    /// When the partner last re-pushed this bill: earlier unqualified conclusions are
    /// superseded by it.
    pub repushed_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Diff {
    pub id: i64,
    pub partner_bill_id: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PartnerAccount {
    pub id: i64,
    pub partner_org_id: i64,
    /// The platform station this account maps to; the platform route keys by it.
    pub platform_station_id: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PartnerBillDeduction {
    pub partner_account_id: i64,
    pub month: YearMonth,
    pub deduction_minor: i64,
}

/// The partner profile as recorded. "Not configured" is a fact of its own; a profile
/// never recorded at all is not the same thing (R-BILL-1 [dev], seed §9.3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum PartnerProfile {
    /// No profile event for the partner org: the decision fails (an error finding),
    /// never a silent null check.
    Unrecorded,
    /// Recorded as not configured: no formula, the check is null.
    NotConfigured,
    Configured {
        payment_cycle: PaymentCycle,
        config_version: i64,
    },
}

/// The partner profile's default payment cycle (seed §7.2: the profile's default,
/// not a history of cycles).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum PaymentCycle {
    /// `MONTH_PAY_PREVIOUS_MONTH`: the cutoff is the target month itself; do not
    /// subtract a month because of the name (seed §5.3).
    MonthPayPreviousMonth,
    /// Monthly: derived cutoff is the target month.
    Monthly,
    /// Quarterly: derived cutoff is the last month of the target month's quarter.
    Quarterly,
    /// Half-yearly: derived cutoff is the last month of the target month's half-year.
    HalfYearly,
    /// Composite by the station's `record_way`: non-natural person half-yearly,
    /// natural person quarterly (seed §7.2, "阳光").
    RecordWayComposite,
    /// Composite by the station's share rule (`rent_pay_method`, seed §7.2, "尚方").
    ShareRuleComposite,
    /// A cycle code that is no legal cycle: no formula, the check is null.
    Illegal(String),
}

impl PaymentCycle {
    pub fn as_str(&self) -> &str {
        match self {
            PaymentCycle::MonthPayPreviousMonth => "MONTH_PAY_PREVIOUS_MONTH",
            PaymentCycle::Monthly => "MONTHLY",
            PaymentCycle::Quarterly => "QUARTERLY",
            PaymentCycle::HalfYearly => "HALF_YEARLY",
            PaymentCycle::RecordWayComposite => "RECORD_WAY_COMPOSITE",
            PaymentCycle::ShareRuleComposite => "SHARE_RULE_COMPOSITE",
            PaymentCycle::Illegal(code) => code,
        }
    }
}

/// Station facts composite cycles read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StationFacts {
    pub record_way: Option<RecordWay>,
    pub share_rule: Option<ShareRule>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum RecordWay {
    NaturalPerson,
    NonNaturalPerson,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShareRule {
    /// The rent payment method: the cycle the share rule pays by.
    pub rent_pay_method: RentPayMethod,
    /// Recorded for audit. The seed names it as an input of the composite cycle but
    /// lists none of its branches (§7.2: "本文不自行补齐"); the decision does not read
    /// it until they are specified.
    pub change_type: Option<String>,
    /// Likewise recorded, not read (see `change_type`).
    pub latest_generated_bill_month: Option<YearMonth>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum RentPayMethod {
    Monthly,
    Quarterly,
    HalfYearly,
    /// A method no cycle can be derived from: the cycle is uncomputable (an error).
    Other(String),
}

/// The business account key the cumulative paid and the opening paid balance use
/// (seed §4.5).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub enum AccountRoute {
    /// `small_station_id + partner_org_id`.
    #[default]
    Default,
    /// `platform_station_id + partner_org_id` (platform migration on and
    /// `accountReadRoute=PLATFORM`).
    Platform,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct OpeningPaidBalance {
    pub id: i64,
    pub small_station_id: i64,
    pub platform_station_id: Option<i64>,
    pub partner_org_id: i64,
    pub opening_paid_minor: i64,
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct OpeningDeduction {
    pub id: i64,
    pub partner_account_id: i64,
    /// `status = 1`: only effective openings count.
    pub effective: bool,
    pub amount_minor: i64,
    pub updated_at: DateTime<Utc>,
}

/// A payment order's master status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum OrderStatus {
    Draft,
    InReview,
    ReviewRejected,
    /// `WAIT_PAY(40)`: approved, planned amounts frozen.
    WaitPay,
    /// `PAID(50)`: says nothing about every line being paid (seed §5.2).
    Paid,
    NoNeedPay,
    Void,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PaymentOrder {
    pub id: i64,
    pub status: OrderStatus,
    /// Whether the order is published; only published orders' current identity counts.
    pub published: bool,
    /// The current publish identity: lines and locks count only with the same pair.
    pub publish_version: i64,
    pub submit_round: i64,
    /// Paid through the treasury (vs offline).
    pub treasury: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum LineKind {
    Payable,
    Unqualified,
}

/// A line's own status, beside its latest result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum LineStatus {
    Unpaid,
    Paid,
    PartiallyPaid,
    Failed,
    /// An UNQUALIFIED line that counts (`UNQUALIFIED_EFFECTIVE`).
    UnqualifiedEffective,
    /// An UNQUALIFIED line that no longer counts (withdrawn, replaced).
    UnqualifiedIneffective,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BillLine {
    pub id: i64,
    pub order_id: i64,
    pub publish_version: i64,
    pub submit_round: i64,
    pub kind: LineKind,
    pub status: LineStatus,
    /// The line's latest payment result (`latest_result_id`).
    pub latest_result_id: Option<i64>,
    /// Frozen at approval; the snapshots (R-BILL-10) read it, the decision does not.
    pub planned_amount_minor: i64,
    /// A manual adjustment from the selection session, if any (a left join in the
    /// seed: most lines have none). Not read by R-BILL-2 … R-BILL-6.
    pub manual_adjustment_minor: Option<i64>,
    /// The line's update time: second key of the representative-line order.
    pub line_at: DateTime<Utc>,
    pub deleted: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum LockStatus {
    Reserved,
    Active,
    Released,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BillLock {
    pub id: i64,
    pub order_id: i64,
    /// The locked line (`order_bill_id`).
    pub line_id: i64,
    pub publish_version: i64,
    pub submit_round: i64,
    pub status: LockStatus,
    pub locked_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ResultStatus {
    /// Sent, no final outcome yet.
    Paying,
    /// `PAY_SUCCESS(30)`.
    Success,
    Fail,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ResultType {
    /// `NORMAL_PAYMENT(10)`.
    NormalPayment,
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ResultSource {
    /// `TREASURY(10)`.
    Treasury,
    /// `OFFLINE_IMPORT(20)`.
    OfflineImport,
    FailFallback,
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PaymentResult {
    pub id: i64,
    pub small_station_id: i64,
    pub platform_station_id: Option<i64>,
    pub partner_org_id: Option<i64>,
    pub month: YearMonth,
    pub status: ResultStatus,
    pub kind: ResultType,
    pub source: ResultSource,
    pub amount_minor: i64,
    pub paid_at: Option<DateTime<Utc>>,
    /// Voided results count in no paid sum (R-BILL-3 [dev]) and are no line's outcome.
    pub voided: bool,
}

/// An unqualified conclusion on an UNQUALIFIED line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnqualifiedConclusion {
    pub order_id: i64,
    pub line_id: i64,
    /// Partner-visible conclusions fail the partner query and fill `unqualified_*`;
    /// internal ones do neither.
    pub partner_visible: bool,
    pub reason: String,
    pub at: DateTime<Utc>,
}
