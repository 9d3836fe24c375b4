//! What a refresh request names: the scope type and mode, and the scopes themselves —
//! station-months with their locators, id lists, account scopes — valid by
//! construction (ids positive, lists non-empty, sorted, deduplicated and within
//! [`REFRESH_SCOPES_MAX`]).

use super::error::RefreshRequestError;
use super::{REFRESH_SCOPES_MAX, UNFINISHED_STATUSES};
use crate::bill::{PaymentStatus, StationMonth, YearMonth};
use serde_json::Value;
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
    /// two: see [`AccountScope`]).
    pub(super) fn list_field(self) -> &'static str {
        match self {
            ScopeType::StationMonth => "station_months",
            ScopeType::PartnerBill => "partner_bill_ids",
            ScopeType::Diff => "diff_ids",
            ScopeType::OrderBill => "order_bill_ids",
            ScopeType::AccountScope => "small_account_ids",
        }
    }

    /// `scope_type` as a code (`10`) or a name (`"STATION_MONTH"`).
    pub(super) fn parse(v: &Value) -> Result<ScopeType, RefreshRequestError> {
        let found = ScopeType::ALL.into_iter().find(|t| match v {
            Value::Number(n) => n.as_i64() == Some(t.code()),
            Value::String(s) => s == t.name(),
            _ => false,
        });
        found.ok_or_else(|| RefreshRequestError::InvalidField {
            field: "scope_type".into(),
            value: v.to_string(),
            rule: "must be one of 10 STATION_MONTH, 20 PARTNER_BILL, 30 DIFF, 40 ORDER_BILL, 50 ACCOUNT_SCOPE",
        })
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

    pub(super) fn parse(s: &str) -> Result<RefreshMode, RefreshRequestError> {
        match s {
            "ALL" => Ok(RefreshMode::All),
            "UNFINISHED" => Ok(RefreshMode::Unfinished),
            _ => Err(RefreshRequestError::InvalidField {
                field: "mode".into(),
                value: s.into(),
                rule: "must be ALL or UNFINISHED",
            }),
        }
    }
}

/// Exact-locating ids of a station-month scope (seed §4.5 "locator"): which diff,
/// partner bill and partner account the station-month is about. Every id present is
/// positive. Ordered field by field, so scopes sort and dedupe on all four ids.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Locator {
    pub(super) partner_org_id: Option<i64>,
    pub(super) partner_bill_id: Option<i64>,
    pub(super) partner_account_id: Option<i64>,
    pub(super) diff_id: Option<i64>,
}

impl Locator {
    /// No locator: the station-month is found by station and month alone.
    pub const NONE: Locator = Locator {
        partner_org_id: None,
        partner_bill_id: None,
        partner_account_id: None,
        diff_id: None,
    };

    /// Every id present must be positive; `field` prefixes the error's field name.
    pub fn new(
        field: &str,
        partner_org_id: Option<i64>,
        partner_bill_id: Option<i64>,
        partner_account_id: Option<i64>,
        diff_id: Option<i64>,
    ) -> Result<Locator, RefreshRequestError> {
        let ids = [
            ("partner_org_id", partner_org_id),
            ("partner_bill_id", partner_bill_id),
            ("partner_account_id", partner_account_id),
            ("diff_id", diff_id),
        ];
        for (name, id) in ids {
            if let Some(id) = id {
                positive(&format!("{field}.{name}"), id)?;
            }
        }
        Ok(Locator {
            partner_org_id,
            partner_bill_id,
            partner_account_id,
            diff_id,
        })
    }

    pub fn partner_org_id(&self) -> Option<i64> {
        self.partner_org_id
    }

    pub fn partner_bill_id(&self) -> Option<i64> {
        self.partner_bill_id
    }

    pub fn partner_account_id(&self) -> Option<i64> {
        self.partner_account_id
    }

    pub fn diff_id(&self) -> Option<i64> {
        self.diff_id
    }

    /// Seed §4.5: any of diff, partner bill, partner account present enters the exact
    /// (locator) branch; the partner org alone does not.
    pub fn is_exact(&self) -> bool {
        self.diff_id.is_some()
            || self.partner_bill_id.is_some()
            || self.partner_account_id.is_some()
    }
}

/// One station-month to refresh, with its optional locator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StationMonthScope {
    pub station_month: StationMonth,
    pub locator: Locator,
}

/// A non-empty, sorted, deduplicated list of positive ids of one scope type, at most
/// [`REFRESH_SCOPES_MAX`] of them (counted after dedupe, seed §4.3).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdList(pub(super) Vec<i64>);

impl IdList {
    pub fn new(
        field: &'static str,
        ids: impl IntoIterator<Item = i64>,
    ) -> Result<IdList, RefreshRequestError> {
        let mut list = Vec::new();
        for (i, id) in ids.into_iter().enumerate() {
            positive(&format!("{field}[{i}]"), id)?;
            list.push(id);
        }
        list.sort_unstable();
        list.dedup();
        if list.is_empty() {
            return Err(RefreshRequestError::EmptyScope { field });
        }
        too_many(field, list.len(), "distinct ids")?;
        Ok(IdList(list))
    }

    pub fn as_slice(&self) -> &[i64] {
        &self.0
    }
}

/// A non-empty, sorted list of station-month scopes, deduplicated on station, month
/// *and* the four locator ids (seed §4.4: the same station-month with another locator
/// is another scope). At most [`REFRESH_SCOPES_MAX`], counted as the input list length
/// before dedupe (seed §4.3).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StationMonthList(pub(super) Vec<StationMonthScope>);

impl StationMonthList {
    pub fn new(scopes: Vec<StationMonthScope>) -> Result<StationMonthList, RefreshRequestError> {
        const FIELD: &str = "station_months";
        too_many(FIELD, scopes.len(), "list length")?;
        let mut scopes = scopes;
        scopes.sort_unstable();
        scopes.dedup();
        if scopes.is_empty() {
            return Err(RefreshRequestError::EmptyScope { field: FIELD });
        }
        Ok(StationMonthList(scopes))
    }

    pub fn as_slice(&self) -> &[StationMonthScope] {
        &self.0
    }

    /// The distinct station-months, in order (what the business key encodes).
    pub fn station_months(&self) -> Vec<StationMonth> {
        let mut sms: Vec<_> = self.0.iter().map(|s| s.station_month).collect();
        sms.dedup(); // sorted by station-month first: equal ones are adjacent
        sms
    }
}

/// `ACCOUNT_SCOPE(50)`: the bills of these accounts with `bill_yearmonth ≤ month_end`.
/// At least one side; at most [`REFRESH_SCOPES_MAX`] account ids on both sides together
/// (seed §4.3: accounts, not the station-months they expand to — hence the pages).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AccountScope {
    pub(super) small_account_ids: Vec<i64>,
    pub(super) partner_account_ids: Vec<i64>,
    pub(super) month_end: YearMonth,
}

impl AccountScope {
    pub fn new(
        small_account_ids: impl IntoIterator<Item = i64>,
        partner_account_ids: impl IntoIterator<Item = i64>,
        month_end: YearMonth,
    ) -> Result<AccountScope, RefreshRequestError> {
        let side = |field: &str, ids: &mut dyn Iterator<Item = i64>| {
            let mut list = Vec::new();
            for (i, id) in ids.enumerate() {
                positive(&format!("{field}[{i}]"), id)?;
                list.push(id);
            }
            list.sort_unstable();
            list.dedup();
            Ok::<_, RefreshRequestError>(list)
        };
        let small = side("small_account_ids", &mut small_account_ids.into_iter())?;
        let partner = side("partner_account_ids", &mut partner_account_ids.into_iter())?;
        if small.is_empty() && partner.is_empty() {
            return Err(RefreshRequestError::NoAccountSide);
        }
        too_many(
            "small_account_ids + partner_account_ids",
            small.len() + partner.len(),
            "small + partner account ids",
        )?;
        Ok(AccountScope {
            small_account_ids: small,
            partner_account_ids: partner,
            month_end,
        })
    }

    pub fn small_account_ids(&self) -> &[i64] {
        &self.small_account_ids
    }

    pub fn partner_account_ids(&self) -> &[i64] {
        &self.partner_account_ids
    }

    pub fn month_end(&self) -> YearMonth {
        self.month_end
    }
}

/// What a request refreshes, one variant per scope type.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RefreshScope {
    StationMonths(StationMonthList),
    PartnerBills(IdList),
    Diffs(IdList),
    OrderBills(IdList),
    Accounts(AccountScope),
}

impl RefreshScope {
    pub fn scope_type(&self) -> ScopeType {
        match self {
            RefreshScope::StationMonths(_) => ScopeType::StationMonth,
            RefreshScope::PartnerBills(_) => ScopeType::PartnerBill,
            RefreshScope::Diffs(_) => ScopeType::Diff,
            RefreshScope::OrderBills(_) => ScopeType::OrderBill,
            RefreshScope::Accounts(_) => ScopeType::AccountScope,
        }
    }

    /// The normalised scope count: distinct scopes, distinct ids, or small + partner
    /// account ids. (The limit on station-months is checked on the input list length.)
    pub fn count(&self) -> usize {
        match self {
            RefreshScope::StationMonths(l) => l.0.len(),
            RefreshScope::PartnerBills(l)
            | RefreshScope::Diffs(l)
            | RefreshScope::OrderBills(l) => l.0.len(),
            RefreshScope::Accounts(a) => a.small_account_ids.len() + a.partner_account_ids.len(),
        }
    }

    /// The key's body, between `<TYPE>:` and `|MODE=`.
    pub(super) fn key_body(&self) -> String {
        let ids = |l: &IdList| join(l.0.iter());
        match self {
            RefreshScope::StationMonths(l) => join(l.station_months().iter()),
            RefreshScope::PartnerBills(l)
            | RefreshScope::Diffs(l)
            | RefreshScope::OrderBills(l) => ids(l),
            RefreshScope::Accounts(a) => {
                let mut parts = Vec::new();
                if !a.small_account_ids.is_empty() {
                    parts.push(format!("SMALL={}", join(a.small_account_ids.iter())));
                }
                if !a.partner_account_ids.is_empty() {
                    parts.push(format!("PARTNER={}", join(a.partner_account_ids.iter())));
                }
                parts.push(format!("MONTH_END={}", a.month_end));
                parts.join("|")
            }
        }
    }
}

fn join<T: fmt::Display>(items: impl Iterator<Item = T>) -> String {
    items.map(|i| i.to_string()).collect::<Vec<_>>().join(",")
}

pub(super) fn positive(field: &str, id: i64) -> Result<(), RefreshRequestError> {
    if id > 0 {
        return Ok(());
    }
    Err(RefreshRequestError::InvalidField {
        field: field.to_owned(),
        value: id.to_string(),
        rule: "must be a positive id",
    })
}

pub(super) fn too_many(
    field: &'static str,
    count: usize,
    counted_as: &'static str,
) -> Result<(), RefreshRequestError> {
    if count <= REFRESH_SCOPES_MAX {
        return Ok(());
    }
    Err(RefreshRequestError::TooManyScopes {
        field,
        count,
        counted_as,
        max: REFRESH_SCOPES_MAX,
    })
}
