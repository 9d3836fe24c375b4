//! What a refresh request names: station-months with their locators, id lists,
//! account scopes — one [`RefreshScope`] per scope type, valid by construction (ids positive, lists non-empty, sorted, deduplicated and within
//! [`REFRESH_SCOPES_MAX`]).

use super::error::RefreshRequestError;
use super::kind::ScopeType;
use super::limits::REFRESH_SCOPES_MAX;
use crate::bill::{StationMonth, YearMonth};
use std::fmt;

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
