//! What to seed: the id layout of the main set and of the scoped-refresh account, the
//! months, and the deterministic spread that picks each station's and chunk's case
//! (order kinds, payment cycles, record ways).

use chrono::{DateTime, Datelike, Duration as Days, NaiveDate, Utc};
use factledger_aggregates::bill::{RecordWayCode, ReferenceEvent, ShareRuleFact};

/// Stations of one platform station (their partner accounts share it: deduction and
/// cumulative paid sums read the group).
const GROUP_STATIONS: u64 = 4;
/// Stations of one partner org (a multiple of the group and of the chunk).
pub(super) const ORG_STATIONS: u64 = 48;
/// Stations paid by one payment order per month.
pub(super) const CHUNK_STATIONS: u64 = 16;
/// First month of the main set.
pub(super) const FIRST_MONTH: (i32, u32) = (2023, 1);
/// First month of the scoped-refresh account (120 months by default).
pub(super) const ACCOUNT_FIRST_MONTH: (i32, u32) = (2015, 1);
/// Ids of the scoped-refresh account's entities (far from the main set's).
pub(super) const ACCOUNT_STATION: i64 = 9_000_001;
pub(super) const ACCOUNT_CUSTOMER: i64 = 9_100_001;
pub(super) const ACCOUNT_PARTNER: i64 = 9_200_001;
pub(super) const ACCOUNT_PLATFORM: i64 = 9_300_001;
pub(super) const ACCOUNT_ORG: i64 = 9_400_001;
/// Id bases of the main set's entities.
const PLATFORM_BASE: i64 = 1_000_000;
const PARTNER_ACCOUNT_BASE: i64 = 2_000_000;
const CUSTOMER_ACCOUNT_BASE: i64 = 3_000_000;

/// A deterministic spread (splitmix64 of two numbers).
pub(super) fn mix(a: u64, b: u64) -> u64 {
    let mut z = a
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(b)
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The first day of month `first` + `idx`.
pub(super) fn month_start(first: (i32, u32), idx: u64) -> NaiveDate {
    let m0 = first.0 as i64 * 12 + first.1 as i64 - 1 + idx as i64;
    NaiveDate::from_ymd_opt((m0 / 12) as i32, (m0 % 12) as u32 + 1, 1).expect("a valid month")
}

pub(super) fn yyyymm(d: NaiveDate) -> String {
    format!("{:04}{:02}", d.year(), d.month())
}

/// Day `day` (0-based, may pass the month's end) of the month, plus `secs`.
pub(super) fn at(month: NaiveDate, day: i64, secs: i64) -> DateTime<Utc> {
    let t = month.and_hms_opt(0, 0, 0).expect("midnight") + Days::days(day) + Days::seconds(secs);
    t.and_utc()
}

/// The payment order kind of one (month, org, chunk), and how often it occurs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum OrderKind {
    /// No order this month: unpaid (R10) unless pre_rent says otherwise.
    None,
    /// Submitted and published under reserved locks (R1).
    InReview,
    /// Review rejected while the locks are still live (R1, seed §5 case).
    Rejected,
    /// Approved, locks active, no result yet (R2).
    AwaitingUnderLock,
    /// Approved without locks (R6).
    AwaitingWithoutLock,
    /// Approved and paid through the treasury, some lines partially, failed, voided or
    /// overpaid (R7, R8, R9, R10, Q4), master reconciled to PAID.
    Paid,
    /// Approved then voided (R10).
    Voided,
    /// UNQUALIFIED lines concluded, partner-visible or internal (Q1, Q2).
    Unqualified,
}

pub(super) fn order_kind(m: u64, org: u64, chunk: u64) -> OrderKind {
    match mix(m, org * 97 + chunk) % 100 {
        0..=44 => OrderKind::None,
        45..=49 => OrderKind::InReview,
        50..=51 => OrderKind::Rejected,
        52..=59 => OrderKind::AwaitingUnderLock,
        60..=62 => OrderKind::AwaitingWithoutLock,
        63..=92 => OrderKind::Paid,
        93..=95 => OrderKind::Voided,
        _ => OrderKind::Unqualified,
    }
}

/// Ids of the main set's station `s` (0-based).
#[derive(Clone, Copy)]
pub(super) struct Station {
    pub(super) id: i64,
    pub(super) customer_account: i64,
    pub(super) partner_account: i64,
    /// `None` for an unmapped partner account (2 %).
    pub(super) platform: Option<i64>,
    pub(super) org: i64,
}

pub(super) fn station(s: u64) -> Station {
    Station {
        id: s as i64 + 1,
        customer_account: CUSTOMER_ACCOUNT_BASE + s as i64,
        partner_account: PARTNER_ACCOUNT_BASE + s as i64,
        platform: (s % 50 != 49).then_some(PLATFORM_BASE + (s / GROUP_STATIONS) as i64),
        org: (s / ORG_STATIONS) as i64 + 1,
    }
}

/// The payment cycle of an org: every legal cycle, "not configured" and an illegal code.
pub(super) fn profile_event(org: i64, at: DateTime<Utc>) -> ReferenceEvent {
    let cycle = match org % 10 {
        0 | 1 | 7 => "MONTHLY",
        2 => "MONTH_PAY_PREVIOUS_MONTH",
        3 => "QUARTERLY",
        4 => "HALF_YEARLY",
        5 => "RECORD_WAY_COMPOSITE",
        6 => "SHARE_RULE_COMPOSITE",
        8 => {
            return ReferenceEvent::PartnerProfileNotConfigured {
                partner_org_id: org,
                recorded_at: at,
            }
        }
        _ => "WEEKLY",
    };
    ReferenceEvent::PartnerProfileConfigured {
        partner_org_id: org,
        payment_cycle: cycle.to_owned(),
        config_version: 1,
        recorded_at: at,
    }
}

pub(super) fn station_facts(station_id: i64, k: u64, at: DateTime<Utc>) -> ReferenceEvent {
    ReferenceEvent::StationFactsRecorded {
        station_id,
        record_way: Some(if k.is_multiple_of(2) {
            RecordWayCode::NaturalPerson
        } else {
            RecordWayCode::NonNaturalPerson
        }),
        share_rule: Some(ShareRuleFact {
            rent_pay_method: ["MONTHLY", "QUARTERLY", "HALF_YEARLY"][(k % 3) as usize].to_owned(),
            change_type: None,
            latest_generated_bill_month: None,
        }),
        recorded_at: at,
    }
}

/// Id counters of the seed.
#[derive(Default)]
pub(super) struct Ids {
    order: i64,
    result: i64,
}

impl Ids {
    pub(super) fn order(&mut self) -> i64 {
        self.order += 1;
        self.order
    }

    pub(super) fn result(&mut self) -> i64 {
        self.result += 1;
        self.result
    }
}
