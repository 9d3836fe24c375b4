//! The locator check: a station-month scope's exact-locating ids (diff, partner bill,
//! partner account, partner org) must belong together and to the scope's
//! station-month, checked at submission and completed with the ids they imply.

use super::error::ScopeResolveError;
use super::resolve::{full_locator, unique_diff, DiffRef, PartnerAccountRef, PartnerBillRef};
use super::scope::{Locator, StationMonthScope};
use crate::bill::StationMonth;

/// What a resolver loads to check a station-month scope's locator: the diff named by
/// `diff_id`; the partner bill named by `partner_bill_id`, else the diff's; the partner
/// account named by `partner_account_id`, else the bill's; and every diff of that
/// partner bill (for a partner bill given without its diff).
#[derive(Debug, Clone, Copy, Default)]
pub struct LocatorFacts<'a> {
    pub diff: Option<&'a DiffRef>,
    pub partner_bill: Option<&'a PartnerBillRef>,
    pub partner_account: Option<&'a PartnerAccountRef>,
    pub diffs_of_partner_bill: &'a [DiffRef],
}

/// Check a station-month scope's locator at submission (R-BILL-8 **[dev]**, seed §9.5)
/// and complete it with the ids it implies. A scope without exact ids passes as it is.
/// Rules, first failure wins:
/// - L1 a given diff exists and is of the scope's station-month;
/// - L2 a given partner bill is the given diff's partner bill;
/// - L3 the partner bill (given or the diff's) exists, is of the scope's month, and —
///   given without a diff — has exactly one diff, of the scope's station-month;
/// - L4 a given partner account is the partner bill's account;
/// - L5 the partner account (given or the bill's) exists and maps to the scope's
///   station as its platform station (unmapped → error);
/// - L6 a given partner org is the partner account's org.
///
/// A diff recorded without a partner bill is legal: the locator then holds the diff
/// (and any account given, checked by L5).
pub fn check_locator(
    scope: &StationMonthScope,
    facts: &LocatorFacts,
) -> Result<StationMonthScope, ScopeResolveError> {
    let sm = scope.station_month;
    let given = scope.locator;
    if !given.is_exact() {
        return Ok(*scope);
    }
    let diff = given_diff(sm, given, facts)?;
    diff_has_given_bill(diff, given)?;
    let (bill, diff) = partner_bill(sm, given, diff, facts)?;
    bill_has_given_account(bill, given)?;
    let account = partner_account(sm, given, bill, facts)?;
    account_has_given_org(account, given)?;
    let mut locator = full_locator(account, bill.map(|b| b.id), diff.map(|d| d.id));
    locator.partner_org_id = locator.partner_org_id.or(given.partner_org_id);
    Ok(StationMonthScope {
        station_month: sm,
        locator,
    })
}

fn inconsistent(fields: &'static str, detail: String) -> ScopeResolveError {
    ScopeResolveError::LocatorInconsistent { fields, detail }
}

/// L1: a given diff exists and is of the scope's station-month.
fn given_diff<'a>(
    sm: StationMonth,
    given: Locator,
    facts: &LocatorFacts<'a>,
) -> Result<Option<&'a DiffRef>, ScopeResolveError> {
    let Some(diff_id) = given.diff_id else {
        return Ok(None);
    };
    let d = facts
        .diff
        .filter(|d| d.id == diff_id)
        .ok_or(ScopeResolveError::DiffNotFound { diff_id })?;
    if d.station_month != sm {
        return Err(inconsistent(
            "diff_id, station_id, bill_month",
            format!("diff {diff_id} is of {}, not {sm}", d.station_month),
        ));
    }
    Ok(Some(d))
}

/// L2: a given partner bill is the given diff's partner bill.
fn diff_has_given_bill(diff: Option<&DiffRef>, given: Locator) -> Result<(), ScopeResolveError> {
    if let (Some(d), Some(pb)) = (diff, given.partner_bill_id) {
        if d.partner_bill_id != Some(pb) {
            return Err(inconsistent(
                "diff_id, partner_bill_id",
                format!(
                    "diff {} belongs to partner bill {:?}, not {pb}",
                    d.id, d.partner_bill_id
                ),
            ));
        }
    }
    Ok(())
}

/// L3: the partner bill (given or the diff's) exists, is of the scope's month, and —
/// given without a diff — has exactly one diff, of the scope's station-month. Returns
/// the bill and the diff (the given one, or the bill's).
fn partner_bill<'a>(
    sm: StationMonth,
    given: Locator,
    diff: Option<&'a DiffRef>,
    facts: &LocatorFacts<'a>,
) -> Result<(Option<&'a PartnerBillRef>, Option<&'a DiffRef>), ScopeResolveError> {
    let partner_bill_id = given
        .partner_bill_id
        .or(diff.and_then(|d| d.partner_bill_id));
    let Some(partner_bill_id) = partner_bill_id else {
        return Ok((None, diff));
    };
    let b = facts
        .partner_bill
        .filter(|b| b.id == partner_bill_id)
        .ok_or(ScopeResolveError::PartnerBillNotFound { partner_bill_id })?;
    if b.month != sm.month {
        return Err(inconsistent(
            "partner_bill_id, bill_month",
            format!(
                "partner bill {partner_bill_id} is of {}, not {}",
                b.month, sm.month
            ),
        ));
    }
    if diff.is_some() {
        return Ok((Some(b), diff));
    }
    let d = unique_diff(partner_bill_id, facts.diffs_of_partner_bill)?;
    if d.station_month != sm {
        return Err(inconsistent(
            "partner_bill_id, station_id, bill_month",
            format!(
                "partner bill {partner_bill_id}'s diff {} is of {}, not {sm}",
                d.id, d.station_month
            ),
        ));
    }
    Ok((Some(b), Some(d)))
}

/// L4: a given partner account is the partner bill's account.
fn bill_has_given_account(
    bill: Option<&PartnerBillRef>,
    given: Locator,
) -> Result<(), ScopeResolveError> {
    if let (Some(b), Some(pa)) = (bill, given.partner_account_id) {
        if b.partner_account_id != pa {
            return Err(inconsistent(
                "partner_bill_id, partner_account_id",
                format!(
                    "partner bill {} belongs to partner account {}, not {pa}",
                    b.id, b.partner_account_id
                ),
            ));
        }
    }
    Ok(())
}

/// L5: the partner account (given or the bill's) exists and maps to the scope's station
/// as its platform station (unmapped → error).
fn partner_account<'a>(
    sm: StationMonth,
    given: Locator,
    bill: Option<&PartnerBillRef>,
    facts: &LocatorFacts<'a>,
) -> Result<Option<&'a PartnerAccountRef>, ScopeResolveError> {
    let account_id = given
        .partner_account_id
        .or(bill.map(|b| b.partner_account_id));
    let Some(partner_account_id) = account_id else {
        return Ok(None);
    };
    let a = facts
        .partner_account
        .filter(|a| a.id == partner_account_id)
        .ok_or(ScopeResolveError::PartnerAccountNotFound { partner_account_id })?;
    let platform = a
        .platform_station_id
        .ok_or(ScopeResolveError::PlatformStationMissing { partner_account_id })?;
    if platform != sm.station_id {
        return Err(inconsistent(
            "partner_account_id, station_id",
            format!(
                "partner account {partner_account_id} maps to platform station {platform}, not {}",
                sm.station_id
            ),
        ));
    }
    Ok(Some(a))
}

/// L6: a given partner org is the partner account's org.
fn account_has_given_org(
    account: Option<&PartnerAccountRef>,
    given: Locator,
) -> Result<(), ScopeResolveError> {
    if let (Some(a), Some(org)) = (account, given.partner_org_id) {
        if a.partner_org_id != org {
            return Err(inconsistent(
                "partner_account_id, partner_org_id",
                format!(
                    "partner account {} belongs to partner org {}, not {org}",
                    a.id, a.partner_org_id
                ),
            ));
        }
    }
    Ok(())
}
