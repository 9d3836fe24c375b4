//! R-BILL-11, table-driven: a consistent station-month has no finding; each row breaks
//! one invariant and must produce exactly that rule's finding.

use super::*;
use crate::bill::{
    AccountRoute, BillLock, Diff, PartnerAccount, PartnerBill, PaymentResult, ResultSource,
    ResultType, SmallBill, StationFacts, YearMonth,
};
use chrono::{TimeZone, Utc};

fn sm() -> StationMonth {
    StationMonth::parse("100:202609").unwrap()
}

fn success(id: i64, amount_minor: i64) -> PaymentResult {
    PaymentResult {
        id,
        small_station_id: 100,
        platform_station_id: Some(61),
        partner_org_id: Some(51),
        month: YearMonth::parse("202609").unwrap(),
        status: ResultStatus::Success,
        kind: ResultType::NormalPayment,
        source: ResultSource::Treasury,
        amount_minor,
        paid_at: None,
        voided: false,
    }
}

fn lock(status: LockStatus) -> BillLock {
    BillLock {
        id: 700,
        order_id: 7,
        line_id: 70,
        publish_version: 1,
        submit_round: 1,
        status,
        locked_at: Utc.with_ymd_and_hms(2026, 9, 3, 10, 0, 0).unwrap(),
    }
}

/// Small bill 1, partner bill 21 (pre_rent 1,000), diff 41, 400 paid, a live lock.
fn facts() -> BillFacts {
    BillFacts {
        station_month: sm(),
        small_bill: Some(SmallBill {
            id: 1,
            account_id: 11,
            rent_minor: 1_000,
        }),
        small_account: None,
        account_small_bills: vec![],
        partner_bill: Some(PartnerBill {
            id: 21,
            partner_account_id: 31,
            pre_rent_minor: Some(1_000),
            deduction_minor: 0,
            last_unqualified_order_id: None,
            last_unqualified_at: None,
            repushed_at: None,
        }),
        diff: Some(Diff {
            id: 41,
            partner_bill_id: Some(21),
        }),
        partner_accounts: vec![PartnerAccount {
            id: 31,
            partner_org_id: 51,
            platform_station_id: Some(61),
        }],
        account_partner_bills: vec![],
        partner_profile: PartnerProfile::NotConfigured,
        station: StationFacts::default(),
        account_route: AccountRoute::Default,
        opening_paid_balances: vec![],
        opening_deductions: vec![],
        orders: vec![],
        lines: vec![],
        locks: vec![lock(LockStatus::Active)],
        results: vec![success(1, 400)],
        unqualified_conclusions: vec![],
    }
}

fn row(table: BillTable, row_id: i64) -> ProjectedRow {
    ProjectedRow {
        table,
        row_id,
        payment_status_code: 60,
        paid_amount_minor: 400,
        cumulative_paid_amount_minor: 400,
        current_payment_amount_minor: match table {
            BillTable::SmallBill => None,
            _ => Some(600),
        },
        locked_payment_order_id: Some(7),
        locked_order_bill_id: Some(70),
    }
}

fn rows() -> Vec<ProjectedRow> {
    vec![
        row(BillTable::SmallBill, 1),
        row(BillTable::PartnerBill, 21),
        row(BillTable::Diff, 41),
    ]
}

/// Apply `change` to every row.
fn all_rows(change: impl Fn(&mut ProjectedRow)) -> Vec<ProjectedRow> {
    let mut rs = rows();
    rs.iter_mut().for_each(change);
    rs
}

struct Row {
    name: &'static str,
    facts: BillFacts,
    rows: Vec<ProjectedRow>,
    /// The rules that must fire (in rule order, duplicates per row).
    want: Vec<InspectionRule>,
}

fn inspection_rows() -> Vec<Row> {
    use InspectionRule as I;
    let case = |name, facts, rows, want| Row {
        name,
        facts,
        rows,
        want,
    };
    let with = |change: fn(&mut BillFacts)| {
        let mut f = facts();
        change(&mut f);
        f
    };
    vec![
        case(
            "a consistent station-month has no finding",
            facts(),
            rows(),
            vec![],
        ),
        case(
            "I1 a diff row of another diff",
            facts(),
            {
                let mut rs = rows();
                rs[2].row_id = 42;
                rs
            },
            vec![I::RowMatchesFacts],
        ),
        case(
            "I1 two small bill rows for one station-month",
            facts(),
            {
                let mut rs = rows();
                rs.push(row(BillTable::SmallBill, 2));
                rs
            },
            // Row 2 is not the facts' small bill; and two rows of one table.
            vec![I::RowMatchesFacts, I::RowMatchesFacts],
        ),
        case(
            "I2 an unknown status code",
            facts(),
            all_rows(|r| r.payment_status_code = 55),
            vec![I::StatusCodeKnown, I::StatusCodeKnown, I::StatusCodeKnown],
        ),
        case(
            "I3 the diff row kept an older status",
            facts(),
            {
                let mut rs = rows();
                rs[2].payment_status_code = 20;
                rs
            },
            vec![I::RowsAgree],
        ),
        case(
            "I4 paid above the sum of success results (a voided result does not count)",
            with(|f| {
                f.results.push(PaymentResult {
                    voided: true,
                    ..success(2, 300)
                })
            }),
            all_rows(|r| {
                r.paid_amount_minor = 700;
                r.current_payment_amount_minor = r.current_payment_amount_minor.map(|_| 300);
            }),
            vec![
                I::PaidWithinSuccessResults,
                I::PaidWithinSuccessResults,
                I::PaidWithinSuccessResults,
            ],
        ),
        case(
            "I4 paid below 0",
            facts(),
            all_rows(|r| {
                r.paid_amount_minor = -1;
                r.current_payment_amount_minor = r.current_payment_amount_minor.map(|_| 1_001);
            }),
            vec![
                I::PaidWithinSuccessResults,
                I::PaidWithinSuccessResults,
                I::PaidWithinSuccessResults,
            ],
        ),
        case(
            "I5 current payment amount is not pre_rent − paid",
            facts(),
            {
                let mut rs = rows();
                rs[1].current_payment_amount_minor = Some(1_000);
                rs
            },
            vec![I::CurrentIsPreRentMinusPaid],
        ),
        case(
            "I5 a current payment amount without pre_rent",
            with(|f| f.partner_bill.as_mut().unwrap().pre_rent_minor = None),
            rows(),
            vec![I::CurrentIsPreRentMinusPaid, I::CurrentIsPreRentMinusPaid],
        ),
        case(
            "I5 an overpaid bill's current amount is negative, and that is right",
            with(|f| f.results.push(success(2, 800))),
            all_rows(|r| {
                r.payment_status_code = 50;
                r.paid_amount_minor = 1_200;
                r.cumulative_paid_amount_minor = 1_200;
                r.current_payment_amount_minor = r.current_payment_amount_minor.map(|_| -200);
            }),
            vec![],
        ),
        case(
            "I6 locked ids of a released lock",
            with(|f| f.locks = vec![lock(LockStatus::Released)]),
            rows(),
            vec![
                I::LockedIdsPointToLiveLock,
                I::LockedIdsPointToLiveLock,
                I::LockedIdsPointToLiveLock,
            ],
        ),
        case(
            "I6 a locked order without its line",
            facts(),
            all_rows(|r| r.locked_order_bill_id = None),
            vec![
                I::LockedIdsPointToLiveLock,
                I::LockedIdsPointToLiveLock,
                I::LockedIdsPointToLiveLock,
            ],
        ),
        case(
            "I6 no locked ids is fine whatever the locks",
            facts(),
            all_rows(|r| {
                r.locked_payment_order_id = None;
                r.locked_order_bill_id = None;
            }),
            vec![],
        ),
        case(
            "I7 status 50 with nothing paid",
            with(|f| f.results.clear()),
            all_rows(|r| {
                r.payment_status_code = 50;
                r.paid_amount_minor = 0;
                r.cumulative_paid_amount_minor = 0;
                r.current_payment_amount_minor = r.current_payment_amount_minor.map(|_| 1_000);
            }),
            vec![
                I::PaidStatusHasPayment,
                I::PaidStatusHasPayment,
                I::PaidStatusHasPayment,
            ],
        ),
        case(
            "I8 status 99 while a partner bill is recorded",
            facts(),
            all_rows(|r| r.payment_status_code = 99),
            vec![
                I::NotPushedHasNoPartnerBill,
                I::NotPushedHasNoPartnerBill,
                I::NotPushedHasNoPartnerBill,
            ],
        ),
        case(
            "I8 status 99 on a small bill alone is right",
            with(|f| {
                f.partner_bill = None;
                f.diff = None;
            }),
            vec![ProjectedRow {
                payment_status_code: 99,
                ..row(BillTable::SmallBill, 1)
            }],
            vec![],
        ),
        case(
            "I9 a partner bill whose partner has no profile at all is an error finding",
            with(|f| f.partner_profile = PartnerProfile::Unrecorded),
            rows(),
            vec![I::PartnerProfileRecorded],
        ),
        case(
            "I9 a profile recorded as not configured is no finding",
            with(|f| f.partner_profile = PartnerProfile::NotConfigured),
            rows(),
            vec![],
        ),
    ]
}

#[test]
fn each_rule_finds_what_it_guards() {
    for r in inspection_rows() {
        let findings = inspect(&r.facts, &r.rows).unwrap();
        let got: Vec<_> = findings.iter().map(|f| f.rule).collect();
        assert_eq!(got, r.want, "{}: {findings:#?}", r.name);
        for f in &findings {
            assert_eq!(f.station_month, sm(), "{}", r.name);
            assert!(!f.message.is_empty(), "{}", r.name);
        }
    }
}

#[test]
fn every_rule_has_a_row_and_a_stable_distinct_id() {
    let covered: Vec<InspectionRule> = inspection_rows().into_iter().flat_map(|r| r.want).collect();
    let mut ids = Vec::new();
    for rule in InspectionRule::ALL {
        assert!(covered.contains(&rule), "{rule} has no table row");
        assert!(rule.id().starts_with('I'), "{rule}");
        ids.push(rule.id());
    }
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), InspectionRule::ALL.len());
}

#[test]
fn a_finding_names_its_row_and_says_why() {
    let mut rs = rows();
    rs[1].current_payment_amount_minor = Some(1_000);
    let findings = inspect(&facts(), &rs).unwrap();
    assert_eq!(findings.len(), 1);
    let f = &findings[0];
    assert_eq!(f.row, Some((BillTable::PartnerBill, 21)));
    assert_eq!(f.severity, Severity::Error);
    assert!(f.message.contains("pre_rent Some(1000)"), "{}", f.message);
    assert_eq!(f.rule.id(), "I5_CURRENT_IS_PRE_RENT_MINUS_PAID");
}

#[test]
fn an_overflowing_result_sum_is_an_inspection_error() {
    let mut f = facts();
    f.results.push(success(2, i64::MAX));
    assert!(matches!(
        inspect(&f, &rows()),
        Err(InspectError::AmountOverflow { .. })
    ));
}
