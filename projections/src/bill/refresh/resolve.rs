//! Resolution of each scope type to station-months, written against plain data a
//! resolver loads ([`PartnerBillRef`], [`DiffRef`], [`OrderBillRef`], …): one
//! station-month per partner bill, diff or payment order line, and the account scope's
//! station-months one page at a time ([`account_scope_page`]).

use super::error::ScopeResolveError;
use super::kind::RefreshMode;
use super::limits::ACCOUNT_SCOPE_PAGE_STATION_MONTHS_MAX;
use super::scope::{AccountScope, Locator, StationMonthScope};
use crate::bill::{PaymentStatus, StationMonth, YearMonth};
use std::collections::BTreeSet;

/// A partner bill as resolution reads it (`fi_customer_bill_partner`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartnerBillRef {
    pub id: i64,
    pub partner_account_id: i64,
    pub month: YearMonth,
}

/// A partner account (reference data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartnerAccountRef {
    pub id: i64,
    pub partner_org_id: i64,
    /// `None`: recorded as unmapped — resolution through it is an error.
    pub platform_station_id: Option<i64>,
}

/// A difference-ledger row (`fi_monthly_income_difference`): its station id and share
/// month are the station-month.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiffRef {
    pub id: i64,
    pub station_month: StationMonth,
    /// `None`: recorded without a partner bill (legal).
    pub partner_bill_id: Option<i64>,
}

/// A payment order line (`order_bill`) with the publish identity it was listed under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrderBillRef {
    pub id: i64,
    pub order_id: i64,
    pub station_month: StationMonth,
    pub publish_version: i64,
    pub submit_round: i64,
    pub deleted: bool,
}

/// A payment order master with its current publish identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrderRef {
    pub id: i64,
    /// `build_status = PUBLISHED`.
    pub published: bool,
    pub publish_version: i64,
    pub submit_round: i64,
    pub deleted: bool,
}

/// `PARTNER_BILL(20)`: partner bill → its partner account → `platform_station_id`
/// (unmapped → error) → exactly one diff of the partner bill (none or several → error).
/// The station-month is the platform station and the partner bill's month; the diff
/// must be of that station-month. `diffs` are the diffs whose partner bill is this one.
pub fn resolve_partner_bill(
    partner_bill_id: i64,
    bill: Option<&PartnerBillRef>,
    account: Option<&PartnerAccountRef>,
    diffs: &[DiffRef],
) -> Result<StationMonthScope, ScopeResolveError> {
    let bill = bill
        .filter(|b| b.id == partner_bill_id)
        .ok_or(ScopeResolveError::PartnerBillNotFound { partner_bill_id })?;
    let account = partner_account_of(bill, account)?;
    let station_id =
        account
            .platform_station_id
            .ok_or(ScopeResolveError::PlatformStationMissing {
                partner_account_id: account.id,
            })?;
    let station_month = StationMonth {
        station_id,
        month: bill.month,
    };
    let diff = unique_diff(partner_bill_id, diffs)?;
    if diff.station_month != station_month {
        return Err(ScopeResolveError::LocatorInconsistent {
            fields: "partner_bill_id, diff_id",
            detail: format!(
                "partner bill {partner_bill_id} resolves to {station_month}, its diff {} is of {}",
                diff.id, diff.station_month
            ),
        });
    }
    Ok(StationMonthScope {
        station_month,
        locator: full_locator(Some(account), Some(bill.id), Some(diff.id)),
    })
}

/// `DIFF(30)`: the diff's recorded station id and share month, with its real locator
/// fields — the partner bill and account when it has a partner bill (`partner`, loaded
/// through `diff.partner_bill_id`), the diff alone when it has none (legal).
pub fn resolve_diff(
    diff_id: i64,
    diff: Option<&DiffRef>,
    partner: Option<(&PartnerBillRef, &PartnerAccountRef)>,
) -> Result<StationMonthScope, ScopeResolveError> {
    let diff = diff
        .filter(|d| d.id == diff_id)
        .ok_or(ScopeResolveError::DiffNotFound { diff_id })?;
    let Some(partner_bill_id) = diff.partner_bill_id else {
        return Ok(StationMonthScope {
            station_month: diff.station_month,
            locator: full_locator(None, None, Some(diff.id)),
        });
    };
    let (bill, account) = partner
        .filter(|(b, _)| b.id == partner_bill_id)
        .ok_or(ScopeResolveError::PartnerBillNotFound { partner_bill_id })?;
    let account = partner_account_of(bill, Some(account))?;
    Ok(StationMonthScope {
        station_month: diff.station_month,
        locator: full_locator(Some(account), Some(bill.id), Some(diff.id)),
    })
}

/// `ORDER_BILL(40)`: the line must belong to a PUBLISHED master, carry the master's
/// current publish version and submit round, and neither may be deleted.
pub fn resolve_order_bill(
    order_bill_id: i64,
    line: Option<&OrderBillRef>,
    order: Option<&OrderRef>,
) -> Result<StationMonth, ScopeResolveError> {
    use ScopeResolveError as E;
    let line = line
        .filter(|l| l.id == order_bill_id)
        .ok_or(E::OrderBillNotFound { order_bill_id })?;
    if line.deleted {
        return Err(E::OrderBillDeleted { order_bill_id });
    }
    let order_id = line.order_id;
    let order = order.filter(|o| o.id == order_id).ok_or(E::OrderNotFound {
        order_bill_id,
        order_id,
    })?;
    if order.deleted {
        return Err(E::OrderDeleted {
            order_bill_id,
            order_id,
        });
    }
    if !order.published {
        return Err(E::OrderNotPublished {
            order_bill_id,
            order_id,
        });
    }
    if (line.publish_version, line.submit_round) != (order.publish_version, order.submit_round) {
        return Err(E::NotCurrentPublication {
            order_bill_id,
            order_id,
            line_identity: (line.publish_version, line.submit_round),
            current_identity: (order.publish_version, order.submit_round),
        });
    }
    Ok(line.station_month)
}

fn partner_account_of<'a>(
    bill: &PartnerBillRef,
    account: Option<&'a PartnerAccountRef>,
) -> Result<&'a PartnerAccountRef, ScopeResolveError> {
    account.filter(|a| a.id == bill.partner_account_id).ok_or(
        ScopeResolveError::PartnerAccountNotFound {
            partner_account_id: bill.partner_account_id,
        },
    )
}

pub(super) fn unique_diff(
    partner_bill_id: i64,
    diffs: &[DiffRef],
) -> Result<&DiffRef, ScopeResolveError> {
    let found: Vec<&DiffRef> = diffs
        .iter()
        .filter(|d| d.partner_bill_id == Some(partner_bill_id))
        .collect();
    match found.as_slice() {
        [one] => Ok(one),
        [] => Err(ScopeResolveError::PartnerBillWithoutDiff { partner_bill_id }),
        _ => Err(ScopeResolveError::PartnerBillWithSeveralDiffs {
            partner_bill_id,
            diff_ids: found.iter().map(|d| d.id).collect(),
        }),
    }
}

pub(super) fn full_locator(
    account: Option<&PartnerAccountRef>,
    partner_bill_id: Option<i64>,
    diff_id: Option<i64>,
) -> Locator {
    Locator {
        partner_org_id: account.map(|a| a.partner_org_id),
        partner_bill_id,
        partner_account_id: account.map(|a| a.id),
        diff_id,
    }
}

/// A bill an account scope can expand to: a small bill (by its customer account) or a
/// partner bill (by its partner account), with the station-month's projected status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccountBillRef {
    pub station_month: StationMonth,
    pub small_account_id: Option<i64>,
    pub partner_account_id: Option<i64>,
    /// The projected `payment_status`, read at execution time (`None`: never projected).
    pub payment_status: Option<PaymentStatus>,
}

/// One page of an account scope's station-months.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountScopePage {
    /// Sorted, distinct, at most [`ACCOUNT_SCOPE_PAGE_STATION_MONTHS_MAX`].
    pub station_months: Vec<StationMonth>,
    /// Where the next page starts (exclusive); `None` when this is the last page. Saved
    /// with the page's progress, so a retry resumes after it.
    pub next_cursor: Option<StationMonth>,
}

/// `ACCOUNT_SCOPE(50)` expansion, one page: the station-months of the scope's accounts'
/// bills with month ≤ `month_end`, admitted by `mode` (status evaluated now), after
/// `cursor`, in order, at most [`ACCOUNT_SCOPE_PAGE_STATION_MONTHS_MAX`]. A DB resolver
/// does the same with `WHERE (station_id, month) > cursor ORDER BY … LIMIT 101`.
pub fn account_scope_page(
    scope: &AccountScope,
    mode: RefreshMode,
    bills: &[AccountBillRef],
    cursor: Option<StationMonth>,
) -> AccountScopePage {
    let in_scope = |b: &&AccountBillRef| {
        let small = b
            .small_account_id
            .is_some_and(|id| scope.small_account_ids.binary_search(&id).is_ok());
        let partner = b
            .partner_account_id
            .is_some_and(|id| scope.partner_account_ids.binary_search(&id).is_ok());
        (small || partner)
            && b.station_month.month <= scope.month_end
            && after_cursor(cursor, b.station_month)
            && mode.admits(b.payment_status)
    };
    let all: BTreeSet<StationMonth> = bills
        .iter()
        .filter(in_scope)
        .map(|b| b.station_month)
        .collect();
    let station_months: Vec<_> = all
        .iter()
        .copied()
        .take(ACCOUNT_SCOPE_PAGE_STATION_MONTHS_MAX)
        .collect();
    let next_cursor = (all.len() > ACCOUNT_SCOPE_PAGE_STATION_MONTHS_MAX)
        .then(|| station_months.last().copied())
        .flatten();
    AccountScopePage {
        station_months,
        next_cursor,
    }
}

/// Whether `station_month` comes after the page cursor (every one does without a
/// cursor). A `match`, not `Option::is_none_or`: that needs Rust 1.82, the workspace
/// declares 1.80.
fn after_cursor(cursor: Option<StationMonth>, station_month: StationMonth) -> bool {
    match cursor {
        None => true,
        Some(c) => station_month > c,
    }
}
