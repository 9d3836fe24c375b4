//! The recorded facts: station-month events (small bills, diffs), partner-bill events
//! and reference events (accounts, partner profiles, station facts, the account route,
//! openings) → the fact rows they put and what they touch.

use super::cells::{
    code_cell, flag, month_cell, opt_int, opt_month_cell, put, station_month, time_cell,
};
use super::writes::{FactOp, Folded, Touch};
use crate::bill::tables::{
    CUSTOMER_ACCOUNTS, DIFFS, OPENING_DEDUCTIONS, OPENING_PAID, PARTNER_ACCOUNTS, PARTNER_BILLS,
    PARTNER_PROFILES, PARTNER_REPUSHES, SETTINGS, SMALL_BILLS, STATIONS,
};
use crate::table::Cell;
use chrono::{DateTime, Utc};
use factledger_aggregates::bill::{
    PartnerBillEvent, RecordWayCode, ReferenceEvent, ShareRuleFact, StationMonthEvent,
};

/// The one recorded setting: which business account key the cumulative paid uses.
pub const SETTING_ACCOUNT_ROUTE: &str = "account_route";

pub(super) fn fold_station_month(e: StationMonthEvent) -> Result<Folded, String> {
    Ok(match e {
        StationMonthEvent::SmallBillRecorded {
            station_id,
            month,
            bill_id,
            account_id,
            rent_minor,
            recorded_at,
        } => {
            let sm = station_month(station_id, &month)?;
            Folded {
                ops: vec![put(
                    &SMALL_BILLS,
                    vec![
                        ("station_id", Cell::Int(station_id)),
                        ("bill_yearmonth", month_cell(&month)?),
                        ("bill_id", Cell::Int(bill_id)),
                        ("account_id", Cell::Int(account_id)),
                        ("rent", Cell::Int(rent_minor)),
                        ("fact_at", time_cell(&recorded_at)),
                    ],
                )],
                touches: vec![Touch::StationMonth(sm), Touch::SmallBillAccount(sm)],
            }
        }
        StationMonthEvent::DiffRecorded {
            station_id,
            month,
            diff_id,
            partner_bill_id,
            recorded_at,
        } => {
            let sm = station_month(station_id, &month)?;
            Folded {
                ops: vec![put(
                    &DIFFS,
                    vec![
                        ("station_id", Cell::Int(station_id)),
                        ("share_month", month_cell(&month)?),
                        ("diff_id", Cell::Int(diff_id)),
                        ("partner_bill_id", opt_int(partner_bill_id)),
                        ("fact_at", time_cell(&recorded_at)),
                    ],
                )],
                touches: vec![Touch::StationMonth(sm), Touch::DiffPartnerBill(sm)],
            }
        }
    })
}

pub(super) fn fold_partner_bill(e: PartnerBillEvent) -> Result<Folded, String> {
    Ok(match e {
        PartnerBillEvent::PartnerBillRecorded {
            partner_bill_id,
            partner_account_id,
            month,
            pre_rent_minor,
            deduction_minor,
            recorded_at,
        } => Folded {
            ops: vec![put(
                &PARTNER_BILLS,
                vec![
                    ("partner_bill_id", Cell::Int(partner_bill_id)),
                    ("partner_account_id", Cell::Int(partner_account_id)),
                    ("bill_yearmonth", month_cell(&month)?),
                    ("pre_rent", opt_int(pre_rent_minor)),
                    ("deduction", Cell::Int(deduction_minor)),
                    ("fact_at", time_cell(&recorded_at)),
                ],
            )],
            touches: vec![Touch::PartnerBill(partner_bill_id)],
        },
        PartnerBillEvent::PartnerBillRepushed {
            partner_bill_id,
            repushed_at,
        } => Folded {
            ops: vec![put(
                &PARTNER_REPUSHES,
                vec![
                    ("partner_bill_id", Cell::Int(partner_bill_id)),
                    ("repushed_at", time_cell(&repushed_at)),
                ],
            )],
            touches: vec![Touch::PartnerBill(partner_bill_id)],
        },
    })
}

pub(super) fn fold_reference(e: ReferenceEvent) -> Result<Folded, String> {
    let one = |op: FactOp, touch: Touch| Folded {
        ops: vec![op],
        touches: vec![touch],
    };
    Ok(match e {
        ReferenceEvent::CustomerAccountRecorded {
            account_id,
            income_start_month,
            current_payable_cutoff_month,
            recorded_at,
        } => one(
            customer_account(
                account_id,
                &income_start_month,
                &current_payable_cutoff_month,
                &recorded_at,
            )?,
            Touch::CustomerAccount(account_id),
        ),
        ReferenceEvent::PartnerAccountRecorded {
            partner_account_id,
            partner_org_id,
            platform_station_id,
            recorded_at,
        } => one(
            put(
                &PARTNER_ACCOUNTS,
                vec![
                    ("partner_account_id", Cell::Int(partner_account_id)),
                    ("partner_org_id", Cell::Int(partner_org_id)),
                    ("platform_station_id", opt_int(platform_station_id)),
                    ("fact_at", time_cell(&recorded_at)),
                ],
            ),
            Touch::PartnerAccount(partner_account_id),
        ),
        ReferenceEvent::PartnerProfileConfigured {
            partner_org_id,
            payment_cycle,
            config_version,
            recorded_at,
        } => one(
            partner_profile(
                partner_org_id,
                Some((payment_cycle, config_version)),
                &recorded_at,
            ),
            Touch::PartnerOrg(partner_org_id),
        ),
        ReferenceEvent::PartnerProfileNotConfigured {
            partner_org_id,
            recorded_at,
        } => one(
            partner_profile(partner_org_id, None, &recorded_at),
            Touch::PartnerOrg(partner_org_id),
        ),
        ReferenceEvent::StationFactsRecorded {
            station_id,
            record_way,
            share_rule,
            recorded_at,
        } => one(
            station_facts(station_id, record_way, share_rule.as_ref(), &recorded_at)?,
            Touch::Station(station_id),
        ),
        ReferenceEvent::AccountRouteSet { route, recorded_at } => one(
            put(
                &SETTINGS,
                vec![
                    ("name", Cell::text(SETTING_ACCOUNT_ROUTE)),
                    ("value", code_cell(&route)?),
                    ("fact_at", time_cell(&recorded_at)),
                ],
            ),
            Touch::Everything,
        ),
        ReferenceEvent::OpeningPaidBalanceRecorded {
            opening_id,
            small_station_id,
            platform_station_id,
            partner_org_id,
            opening_paid_minor,
            updated_at,
        } => one(
            put(
                &OPENING_PAID,
                vec![
                    ("opening_id", Cell::Int(opening_id)),
                    ("small_station_id", Cell::Int(small_station_id)),
                    ("platform_station_id", opt_int(platform_station_id)),
                    ("partner_org_id", Cell::Int(partner_org_id)),
                    ("opening_paid", Cell::Int(opening_paid_minor)),
                    ("updated_at", time_cell(&updated_at)),
                ],
            ),
            Touch::OpeningPaid(opening_id),
        ),
        ReferenceEvent::OpeningDeductionRecorded {
            opening_id,
            partner_account_id,
            effective,
            amount_minor,
            updated_at,
        } => one(
            put(
                &OPENING_DEDUCTIONS,
                vec![
                    ("opening_id", Cell::Int(opening_id)),
                    ("partner_account_id", Cell::Int(partner_account_id)),
                    ("effective", flag(effective)),
                    ("amount", Cell::Int(amount_minor)),
                    ("updated_at", time_cell(&updated_at)),
                ],
            ),
            Touch::OpeningDeduction(opening_id),
        ),
    })
}

/// A partner org's profile row: configured with its payment cycle and config version,
/// or recorded as not configured (`None`; a recorded fact, not a missing one).
fn partner_profile(
    partner_org_id: i64,
    configured: Option<(String, i64)>,
    at: &DateTime<Utc>,
) -> FactOp {
    let configured_flag = configured.is_some();
    let (payment_cycle, config_version) = match configured {
        Some((cycle, version)) => (Cell::Text(cycle), Cell::Int(version)),
        None => (Cell::Null, Cell::Null),
    };
    put(
        &PARTNER_PROFILES,
        vec![
            ("partner_org_id", Cell::Int(partner_org_id)),
            ("configured", flag(configured_flag)),
            ("payment_cycle", payment_cycle),
            ("config_version", config_version),
            ("fact_at", time_cell(at)),
        ],
    )
}

/// A station's facts row: its record way and its share rule's columns (all NULL
/// without a share rule).
fn station_facts(
    station_id: i64,
    record_way: Option<RecordWayCode>,
    rule: Option<&ShareRuleFact>,
    at: &DateTime<Utc>,
) -> Result<FactOp, String> {
    Ok(put(
        &STATIONS,
        vec![
            ("station_id", Cell::Int(station_id)),
            (
                "record_way",
                record_way.as_ref().map_or(Ok(Cell::Null), code_cell)?,
            ),
            ("has_share_rule", flag(rule.is_some())),
            (
                "rent_pay_method",
                Cell::opt_text(rule.map(|r| r.rent_pay_method.clone())),
            ),
            (
                "change_type",
                Cell::opt_text(rule.and_then(|r| r.change_type.clone())),
            ),
            (
                "latest_generated_bill_month",
                opt_month_cell(&rule.and_then(|r| r.latest_generated_bill_month.clone()))?,
            ),
            ("fact_at", time_cell(at)),
        ],
    ))
}

/// A customer account's row: its income start and current payable cutoff months.
fn customer_account(
    account_id: i64,
    income_start_month: &str,
    current_payable_cutoff_month: &Option<String>,
    at: &DateTime<Utc>,
) -> Result<FactOp, String> {
    Ok(put(
        &CUSTOMER_ACCOUNTS,
        vec![
            ("account_id", Cell::Int(account_id)),
            ("income_start_month", month_cell(income_start_month)?),
            (
                "current_payable_cutoff_month",
                opt_month_cell(current_payable_cutoff_month)?,
            ),
            ("fact_at", time_cell(at)),
        ],
    ))
}
