//! The bill decision, table-driven: one row per rule of each table (R-BILL-2 …
//! R-BILL-6), rows where two rules match to show the first one wins, and every
//! counter-intuitive case of seed §5 as a row or test of its own.

use super::*;
use chrono::{DateTime, TimeZone, Utc};

const STATION: i64 = 100;
const SMALL_ACCOUNT: i64 = 11;
const PARTNER_BILL: i64 = 21;
const PARTNER_ACCOUNT: i64 = 31;
const PARTNER_ORG: i64 = 51;
const PLATFORM_STATION: i64 = 61;

fn t(day: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 9, day, 10, 0, 0).unwrap()
}

fn ym(s: &str) -> YearMonth {
    YearMonth::parse(s).unwrap()
}

/// A station-month with a small bill (rent 1,000), a partner bill (pre_rent 1,000),
/// both accounts, a MONTH_PAY_PREVIOUS_MONTH profile and no payment yet.
fn base() -> BillFacts {
    BillFacts {
        station_month: StationMonth::parse("100:202609").unwrap(),
        small_bill: Some(SmallBill {
            id: 1,
            account_id: SMALL_ACCOUNT,
            rent_minor: 1_000,
        }),
        small_account: Some(CustomerAccount {
            id: SMALL_ACCOUNT,
            income_start_month: ym("202601"),
            current_payable_cutoff_month: Some(ym("202609")),
        }),
        account_small_bills: vec![rent("202609", 1_000)],
        partner_bill: Some(PartnerBill {
            id: PARTNER_BILL,
            partner_account_id: PARTNER_ACCOUNT,
            pre_rent_minor: Some(1_000),
            deduction_minor: 0,
            last_unqualified_order_id: None,
            last_unqualified_at: None,
            repushed_at: None,
        }),
        diff: Some(Diff {
            id: 41,
            partner_bill_id: Some(PARTNER_BILL),
        }),
        partner_accounts: vec![PartnerAccount {
            id: PARTNER_ACCOUNT,
            partner_org_id: PARTNER_ORG,
            platform_station_id: Some(PLATFORM_STATION),
        }],
        account_partner_bills: vec![],
        partner_profile: PartnerProfile::Configured {
            payment_cycle: PaymentCycle::MonthPayPreviousMonth,
            config_version: 1,
        },
        station: StationFacts::default(),
        account_route: AccountRoute::Default,
        opening_paid_balances: vec![],
        opening_deductions: vec![],
        orders: vec![],
        lines: vec![],
        locks: vec![],
        results: vec![],
        unqualified_conclusions: vec![],
    }
}

fn rent(month: &str, rent_minor: i64) -> SmallBillRent {
    SmallBillRent {
        account_id: SMALL_ACCOUNT,
        month: ym(month),
        rent_minor,
    }
}

fn order(id: i64, status: OrderStatus) -> PaymentOrder {
    PaymentOrder {
        id,
        status,
        published: true,
        publish_version: 1,
        submit_round: 1,
        treasury: true,
    }
}

fn line(id: i64, order_id: i64, status: LineStatus, latest_result_id: Option<i64>) -> BillLine {
    BillLine {
        id,
        order_id,
        publish_version: 1,
        submit_round: 1,
        kind: match status {
            LineStatus::UnqualifiedEffective | LineStatus::UnqualifiedIneffective => {
                LineKind::Unqualified
            }
            _ => LineKind::Payable,
        },
        status,
        latest_result_id,
        planned_amount_minor: 1_000,
        manual_adjustment_minor: None,
        line_at: t(2),
        deleted: false,
    }
}

fn lock(id: i64, order_id: i64, line_id: i64, status: LockStatus) -> BillLock {
    BillLock {
        id,
        order_id,
        line_id,
        publish_version: 1,
        submit_round: 1,
        status,
        locked_at: t(3),
    }
}

/// A normal-payment result of this station-month and business account.
fn result(id: i64, status: ResultStatus, source: ResultSource, amount_minor: i64) -> PaymentResult {
    PaymentResult {
        id,
        small_station_id: STATION,
        platform_station_id: Some(PLATFORM_STATION),
        partner_org_id: Some(PARTNER_ORG),
        month: ym("202609"),
        status,
        kind: ResultType::NormalPayment,
        source,
        amount_minor,
        paid_at: Some(t(4)),
        voided: false,
    }
}

fn success(id: i64, amount_minor: i64) -> PaymentResult {
    result(
        id,
        ResultStatus::Success,
        ResultSource::Treasury,
        amount_minor,
    )
}

fn conclusion(
    line_id: i64,
    partner_visible: bool,
    reason: &str,
    day: u32,
) -> UnqualifiedConclusion {
    UnqualifiedConclusion {
        order_id: 7,
        line_id,
        partner_visible,
        reason: reason.into(),
        at: t(day),
    }
}

/// An order 7 with payable line 70 (its latest result `result_id`), locked or not.
fn paying(
    f: &mut BillFacts,
    status: OrderStatus,
    line_status: LineStatus,
    result_id: Option<i64>,
    lock_status: Option<LockStatus>,
) {
    f.orders.push(order(7, status));
    f.lines.push(line(70, 7, line_status, result_id));
    if let Some(s) = lock_status {
        f.locks.push(lock(700, 7, 70, s));
    }
}

fn no_partner_bill(f: &mut BillFacts) {
    f.partner_bill = None;
    f.diff = Some(Diff {
        id: 41,
        partner_bill_id: None,
    });
}

fn with(change: impl FnOnce(&mut BillFacts)) -> BillFacts {
    let mut f = base();
    change(&mut f);
    f
}

fn decided(f: &BillFacts) -> Decision {
    decide(f).unwrap_or_else(|e| panic!("no decision: {e}"))
}

struct StatusRow {
    name: &'static str,
    facts: BillFacts,
    rule: StatusRule,
}

fn row(name: &'static str, rule: StatusRule, facts: BillFacts) -> StatusRow {
    StatusRow { name, facts, rule }
}

/// R-BILL-2: every rule in table order, first match wins.
fn status_rows() -> Vec<StatusRow> {
    use LineStatus as L;
    use LockStatus::{Active, Released, Reserved};
    use OrderStatus as O;
    use ResultSource as S;
    use ResultStatus as R;
    use StatusRule::*;
    vec![
        // R1
        row(
            "a valid reserved lock with the master in review is in review",
            R1InReview,
            with(|f| paying(f, O::InReview, L::Unpaid, None, Some(Reserved))),
        ),
        row(
            "a review-rejected order with a live lock is still in review (30)",
            R1InReview,
            with(|f| paying(f, O::ReviewRejected, L::Unpaid, None, Some(Active))),
        ),
        row(
            "in review wins over paid in full (R1 before R7)",
            R1InReview,
            with(|f| {
                paying(f, O::InReview, L::Paid, Some(1), Some(Active));
                f.results.push(success(1, 1_000));
            }),
        ),
        row(
            "a released lock is no valid lock, so review does not show",
            R10Unpaid,
            with(|f| paying(f, O::InReview, L::Unpaid, None, Some(Released))),
        ),
        row(
            "a lock of an older submit round is no valid lock",
            R10Unpaid,
            with(|f| {
                paying(f, O::InReview, L::Unpaid, None, None);
                f.locks.push(BillLock {
                    submit_round: 0,
                    ..lock(700, 7, 70, Active)
                });
            }),
        ),
        row(
            "a lock of an unpublished master is no valid lock",
            R10Unpaid,
            with(|f| {
                paying(f, O::InReview, L::Unpaid, None, Some(Active));
                f.orders[0].published = false;
            }),
        ),
        // R2
        row(
            "a valid lock with the master waiting to pay and no final result awaits payment",
            R2AwaitingPaymentUnderLock,
            with(|f| paying(f, O::WaitPay, L::Unpaid, None, Some(Reserved))),
        ),
        row(
            "master PAID but the selected line without a final result awaits payment (40)",
            R2AwaitingPaymentUnderLock,
            with(|f| paying(f, O::Paid, L::Unpaid, None, Some(Active))),
        ),
        row(
            "a result still paying is no final result",
            R2AwaitingPaymentUnderLock,
            with(|f| {
                paying(f, O::WaitPay, L::Unpaid, Some(1), Some(Active));
                f.results.push(result(1, R::Paying, S::Treasury, 1_000));
            }),
        ),
        row(
            "awaiting payment under a lock wins over small bill paid offline (R2 before R3)",
            R2AwaitingPaymentUnderLock,
            with(|f| {
                no_partner_bill(f);
                paying(f, O::WaitPay, L::Unpaid, None, Some(Active));
                f.results.push(result(1, R::Success, S::OfflineImport, 300));
            }),
        ),
        row(
            "a final success on the selected line ends awaiting under the lock",
            R7Paid,
            with(|f| {
                paying(f, O::Paid, L::Paid, Some(1), Some(Active));
                f.results.push(success(1, 1_000));
            }),
        ),
        row(
            "the selected line prefers a treasury result over a newer line without one",
            R7Paid,
            with(|f| {
                paying(f, O::Paid, L::Paid, Some(1), Some(Active));
                f.results.push(success(1, 1_000));
                f.lines.push(BillLine {
                    line_at: t(9),
                    ..line(71, 7, L::Unpaid, None)
                });
            }),
        ),
        row(
            "a voided result is no final result, so the locked bill awaits payment again",
            R2AwaitingPaymentUnderLock,
            with(|f| {
                paying(f, O::Paid, L::Paid, Some(1), Some(Active));
                f.results.push(PaymentResult {
                    voided: true,
                    ..success(1, 1_000)
                });
            }),
        ),
        // R3
        row(
            "small bill only with an offline payment is paid, whatever its rent",
            R3SmallBillOfflinePaid,
            with(|f| {
                no_partner_bill(f);
                f.results.push(result(1, R::Success, S::OfflineImport, 1));
            }),
        ),
        // R4
        row(
            "small bill only without an offline payment: partner bill not pushed",
            R4PartnerBillNotPushed,
            with(no_partner_bill),
        ),
        row(
            "small bill only paid by the treasury is still not pushed (R3 reads offline only)",
            R4PartnerBillNotPushed,
            with(|f| {
                no_partner_bill(f);
                f.results.push(success(1, 1_000));
            }),
        ),
        // R5
        row(
            "pre_rent 0 needs no payment",
            R5NoPaymentNeeded,
            with(|f| f.partner_bill.as_mut().unwrap().pre_rent_minor = Some(0)),
        ),
        row(
            "pre_rent 0 needs no payment even with a failed line (R5 before R9)",
            R5NoPaymentNeeded,
            with(|f| {
                f.partner_bill.as_mut().unwrap().pre_rent_minor = Some(0);
                paying(f, O::WaitPay, L::Failed, None, None);
            }),
        ),
        // R6
        row(
            "no lock, latest master waiting to pay, nothing paid: awaiting payment",
            R6AwaitingPaymentWithoutLock,
            with(|f| paying(f, O::WaitPay, L::Unpaid, None, None)),
        ),
        row(
            "awaiting without a lock wins over a failed line status (R6 before R9)",
            R6AwaitingPaymentWithoutLock,
            with(|f| paying(f, O::WaitPay, L::Failed, None, None)),
        ),
        row(
            "something paid already is not awaiting without a lock (R8)",
            R8PartialPayment,
            with(|f| {
                paying(f, O::WaitPay, L::Unpaid, None, None);
                f.results.push(success(1, 400));
            }),
        ),
        // R7
        row(
            "paid equal to pre_rent is paid",
            R7Paid,
            with(|f| f.results.push(success(1, 1_000))),
        ),
        row(
            "paid over pre_rent is paid, with a negative current payment amount",
            R7Paid,
            with(|f| f.results.push(success(1, 1_200))),
        ),
        // R8
        row(
            "paid below pre_rent is partially paid",
            R8PartialPayment,
            with(|f| f.results.push(success(1, 400))),
        ),
        row(
            "partial success plus a failure is partially paid (60), not failed (70)",
            R8PartialPayment,
            with(|f| {
                paying(f, O::Paid, L::Failed, Some(2), None);
                f.results.push(success(1, 400));
                f.results.push(result(2, R::Fail, S::Treasury, 600));
            }),
        ),
        // R9
        row(
            "a failed result on the latest payable line fails the payment",
            R9PaymentFailed,
            with(|f| {
                paying(f, O::Paid, L::Unpaid, Some(2), None);
                f.results.push(result(2, R::Fail, S::Treasury, 1_000));
            }),
        ),
        row(
            "a failed line status alone fails the payment",
            R9PaymentFailed,
            with(|f| paying(f, O::Paid, L::Failed, None, None)),
        ),
        row(
            "a failed line without pre_rent is unpaid: the current amount is null",
            R10Unpaid,
            with(|f| {
                f.partner_bill.as_mut().unwrap().pre_rent_minor = None;
                paying(f, O::Paid, L::Failed, None, None);
            }),
        ),
        // R10
        row(
            "nothing paid and nothing in flight is unpaid",
            R10Unpaid,
            base(),
        ),
        row(
            "a paid bill whose result is voided goes back to unpaid",
            R10Unpaid,
            with(|f| {
                f.results.push(PaymentResult {
                    voided: true,
                    ..success(1, 1_000)
                })
            }),
        ),
        row(
            "neither bill, nothing paid: unpaid",
            R10Unpaid,
            with(|f| {
                f.small_bill = None;
                no_partner_bill(f);
            }),
        ),
    ]
}

#[test]
fn every_payment_status_rule_fires_first_in_table_order() {
    let rows = status_rows();
    let mut failures = Vec::new();
    for r in &rows {
        let d = decided(&r.facts);
        if d.decided_by != r.rule || d.payment_status != r.rule.status() {
            failures.push(format!(
                "{}: expected {} ({}), got {} ({})",
                r.name,
                r.rule,
                r.rule.status().code(),
                d.decided_by,
                d.payment_status.code()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // At least one row per rule.
    for rule in [
        StatusRule::R1InReview,
        StatusRule::R2AwaitingPaymentUnderLock,
        StatusRule::R3SmallBillOfflinePaid,
        StatusRule::R4PartnerBillNotPushed,
        StatusRule::R5NoPaymentNeeded,
        StatusRule::R6AwaitingPaymentWithoutLock,
        StatusRule::R7Paid,
        StatusRule::R8PartialPayment,
        StatusRule::R9PaymentFailed,
        StatusRule::R10Unpaid,
    ] {
        assert!(rows.iter().any(|r| r.rule == rule), "no row for {rule}");
    }
}

#[test]
fn status_codes_and_rule_labels_are_the_specs() {
    let codes: Vec<_> = [
        StatusRule::R1InReview,
        StatusRule::R2AwaitingPaymentUnderLock,
        StatusRule::R3SmallBillOfflinePaid,
        StatusRule::R4PartnerBillNotPushed,
        StatusRule::R5NoPaymentNeeded,
        StatusRule::R6AwaitingPaymentWithoutLock,
        StatusRule::R7Paid,
        StatusRule::R8PartialPayment,
        StatusRule::R9PaymentFailed,
        StatusRule::R10Unpaid,
    ]
    .iter()
    .map(|r| r.status().code())
    .collect();
    assert_eq!(codes, [30, 40, 50, 99, 10, 40, 50, 60, 70, 20]);
    assert_eq!(
        StatusRule::R8PartialPayment.to_string(),
        "R8 partial payment"
    );
}

// ---- the seed §5 counter-intuitive cases, each on its own ----

#[test]
fn a_review_rejected_order_with_a_live_lock_shows_in_review() {
    let f = with(|f| {
        paying(
            f,
            OrderStatus::ReviewRejected,
            LineStatus::Unpaid,
            None,
            Some(LockStatus::Active),
        )
    });
    let d = decided(&f);
    assert_eq!(
        (d.payment_status.code(), d.decided_by),
        (30, StatusRule::R1InReview)
    );
}

#[test]
fn a_paid_master_with_the_selected_line_without_a_final_result_awaits_payment() {
    let f = with(|f| {
        paying(
            f,
            OrderStatus::Paid,
            LineStatus::Unpaid,
            None,
            Some(LockStatus::Reserved),
        )
    });
    let d = decided(&f);
    assert_eq!(
        (d.payment_status.code(), d.decided_by),
        (40, StatusRule::R2AwaitingPaymentUnderLock)
    );
}

#[test]
fn partial_success_plus_a_failure_is_partially_paid_not_failed() {
    let f = with(|f| {
        paying(f, OrderStatus::Paid, LineStatus::Failed, Some(2), None);
        f.results.push(success(1, 400));
        f.results
            .push(result(2, ResultStatus::Fail, ResultSource::Treasury, 600));
    });
    let d = decided(&f);
    assert_eq!(
        (d.payment_status.code(), d.decided_by),
        (60, StatusRule::R8PartialPayment)
    );
}

#[test]
fn a_small_bill_only_paid_offline_is_paid_while_the_partner_status_stays_unchecked() {
    let f = with(|f| {
        no_partner_bill(f);
        f.results.push(result(
            1,
            ResultStatus::Success,
            ResultSource::OfflineImport,
            300,
        ));
    });
    let d = decided(&f);
    assert_eq!(
        (d.payment_status.code(), d.decided_by),
        (50, StatusRule::R3SmallBillOfflinePaid)
    );
    assert_eq!(
        (d.partner_query_status.code(), d.partner_query_decided_by),
        (10, PartnerQueryRule::Q5SmallBillOfflinePaid)
    );
    assert_eq!(d.paid_amount_minor, 300);
    // Without a partner bill: no current amount, cumulative counts as 0.
    assert_eq!(d.current_payment_amount_minor, None);
    assert_eq!(d.cumulative_paid_amount_minor, 0);
}

#[test]
fn an_overpaid_bill_has_a_negative_current_payment_amount() {
    let f = with(|f| f.results.push(success(1, 1_200)));
    let d = decided(&f);
    assert_eq!(d.current_payment_amount_minor, Some(-200));
    assert_eq!(d.payment_status, PaymentStatus::Paid);
    // pre_rent below paid fails the partner query (R-BILL-5 rule 4).
    assert_eq!(d.partner_query_status, PartnerQueryStatus::Failed);
    assert_eq!(
        d.partner_query_decided_by,
        PartnerQueryRule::Q4PreRentBelowPaid
    );
}

#[test]
fn the_pre_rent_check_compares_available_with_pre_rent_not_the_current_amount() {
    // Seed §5.3: pre_rent 1,000, paid 400, current 600, available 800 → 800 ≥ 1,000
    // fails (800 ≥ 600 would pass).
    let f = with(|f| {
        f.account_small_bills = vec![rent("202608", 200), rent("202609", 1_000)];
        f.results.push(success(1, 400));
    });
    let d = decided(&f);
    assert_eq!(d.current_payment_amount_minor, Some(600));
    assert_eq!(
        d.pre_rent_check,
        Some(PreRentCheck {
            result: PreRentCheckResult::AvailableNotEnough,
            reason: Some(PreRentCheckReason::AvailablePayableNotEnough),
            available_minor: Some(800),
        })
    );
    assert_eq!(d.pre_rent_check.unwrap().result.code(), 20);
    // A failed pre-rent check alone never fails the partner query.
    assert_ne!(d.partner_query_status, PartnerQueryStatus::Failed);
}

#[test]
fn no_formula_result_is_a_null_check_not_a_pass() {
    let f = with(|f| f.partner_profile = PartnerProfile::NotConfigured);
    assert_eq!(decided(&f).pre_rent_check, None);
    let f = with(|f| {
        f.partner_profile = PartnerProfile::Configured {
            payment_cycle: PaymentCycle::Illegal("WEEKLY".into()),
            config_version: 2,
        }
    });
    assert_eq!(decided(&f).pre_rent_check, None);
}

#[test]
fn an_uncomputable_cycle_is_an_error() {
    let f = with(|f| {
        f.partner_profile = PartnerProfile::Configured {
            payment_cycle: PaymentCycle::RecordWayComposite,
            config_version: 1,
        };
        f.station.record_way = None;
    });
    let err = decide(&f).unwrap_err();
    assert!(
        matches!(err, BillError::CycleUncomputable { ref cycle, .. } if cycle == "RECORD_WAY_COMPOSITE"),
        "{err}"
    );
    let f = with(|f| {
        f.partner_profile = PartnerProfile::Configured {
            payment_cycle: PaymentCycle::ShareRuleComposite,
            config_version: 1,
        };
        f.station.share_rule = Some(ShareRule {
            rent_pay_method: RentPayMethod::Other("BY_HARVEST".into()),
            change_type: None,
            latest_generated_bill_month: None,
        });
    });
    assert!(matches!(
        decide(&f),
        Err(BillError::CycleUncomputable { .. })
    ));
}

// ---- R-BILL-3 amounts ----

#[test]
fn paid_amount_counts_only_successful_normal_treasury_or_offline_results_of_this_month() {
    use ResultSource as S;
    use ResultStatus as R;
    let f = with(|f| {
        f.results = vec![
            result(1, R::Success, S::Treasury, 100),
            result(2, R::Success, S::OfflineImport, 20),
            result(3, R::Success, S::FailFallback, 4_000),
            result(4, R::Fail, S::Treasury, 5_000),
            result(5, R::Paying, S::Treasury, 6_000),
            PaymentResult {
                voided: true,
                ..result(6, R::Success, S::Treasury, 7_000)
            },
            PaymentResult {
                kind: ResultType::Other,
                ..result(7, R::Success, S::Treasury, 8_000)
            },
            PaymentResult {
                month: ym("202608"),
                ..result(8, R::Success, S::Treasury, 9_000)
            },
            PaymentResult {
                small_station_id: 999,
                ..result(9, R::Success, S::Treasury, 10_000)
            },
        ];
    });
    let d = decided(&f);
    assert_eq!(d.paid_amount_minor, 120);
    assert_eq!(d.current_payment_amount_minor, Some(880));
}

#[test]
fn cumulative_paid_is_the_latest_opening_plus_the_account_results_up_to_the_month_of_any_type() {
    let opening = |id, updated, amount| OpeningPaidBalance {
        id,
        small_station_id: STATION,
        platform_station_id: Some(PLATFORM_STATION),
        partner_org_id: PARTNER_ORG,
        opening_paid_minor: amount,
        updated_at: t(updated),
    };
    let f = with(|f| {
        f.opening_paid_balances = vec![opening(1, 5, 50), opening(2, 6, 70), opening(3, 6, 90)];
        f.results = vec![
            success(1, 400),
            PaymentResult {
                month: ym("202601"),
                ..success(2, 1_000)
            },
            // The cumulative sum does not filter the result type (seed §4.5).
            PaymentResult {
                kind: ResultType::Other,
                ..success(3, 5)
            },
            // After the target month, another partner org (earlier month), voided: not counted.
            PaymentResult {
                month: ym("202610"),
                ..success(4, 10_000)
            },
            PaymentResult {
                partner_org_id: Some(52),
                month: ym("202605"),
                ..success(5, 10_000)
            },
            PaymentResult {
                voided: true,
                ..success(6, 10_000)
            },
        ];
    });
    let d = decided(&f);
    assert_eq!(d.paid_amount_minor, 400);
    // Opening 90 (latest update time, then the larger id) + 400 + 1,000 + 5.
    assert_eq!(d.cumulative_paid_amount_minor, 1_495);
}

#[test]
fn the_platform_route_keys_the_cumulative_paid_by_platform_station_and_partner_org() {
    let f = with(|f| {
        f.account_route = AccountRoute::Platform;
        f.results = vec![
            success(1, 400),
            // Another small station of the same platform station counts on this route.
            PaymentResult {
                small_station_id: 200,
                month: ym("202605"),
                ..success(2, 300)
            },
            PaymentResult {
                small_station_id: 300,
                platform_station_id: Some(62),
                ..success(3, 10_000)
            },
        ];
        f.opening_paid_balances = vec![OpeningPaidBalance {
            id: 1,
            small_station_id: 200,
            platform_station_id: Some(PLATFORM_STATION),
            partner_org_id: PARTNER_ORG,
            opening_paid_minor: 60,
            updated_at: t(1),
        }];
    });
    assert_eq!(decided(&f).cumulative_paid_amount_minor, 760);
    // On the default route the other small station's result and opening do not count.
    let f = BillFacts {
        account_route: AccountRoute::Default,
        ..f
    };
    assert_eq!(decided(&f).cumulative_paid_amount_minor, 400);
}

#[test]
fn duplicate_openings_on_the_platform_route_are_an_error() {
    let opening = |id| OpeningPaidBalance {
        id,
        small_station_id: STATION,
        platform_station_id: Some(PLATFORM_STATION),
        partner_org_id: PARTNER_ORG,
        opening_paid_minor: 10,
        updated_at: t(1),
    };
    let f = with(|f| {
        f.account_route = AccountRoute::Platform;
        f.opening_paid_balances = vec![opening(1), opening(2)];
    });
    assert!(matches!(
        decide(&f),
        Err(BillError::DuplicateOpeningPaidBalance { count: 2, .. })
    ));
}

#[test]
fn an_unknown_business_account_falls_back_to_this_months_paid() {
    let f = with(|f| {
        f.partner_accounts.clear();
        f.results = vec![
            success(1, 400),
            PaymentResult {
                month: ym("202601"),
                ..success(2, 1_000)
            },
        ];
    });
    assert_eq!(decided(&f).cumulative_paid_amount_minor, 400);
    let f = with(|f| {
        f.account_route = AccountRoute::Platform;
        f.partner_accounts[0].platform_station_id = None;
        f.results = vec![
            success(1, 400),
            PaymentResult {
                month: ym("202601"),
                ..success(2, 1_000)
            },
        ];
    });
    assert_eq!(decided(&f).cumulative_paid_amount_minor, 400);
}

#[test]
fn without_pre_rent_the_current_amount_is_null_and_the_cumulative_zero() {
    let f = with(|f| {
        f.partner_bill.as_mut().unwrap().pre_rent_minor = None;
        f.results = vec![success(1, 400)];
    });
    let d = decided(&f);
    assert_eq!(d.paid_amount_minor, 400);
    assert_eq!(d.current_payment_amount_minor, None);
    assert_eq!(d.cumulative_paid_amount_minor, 0);
}

// ---- R-BILL-4 pre-rent check ----

fn check(f: &BillFacts) -> Option<PreRentCheck> {
    decided(f).pre_rent_check
}

fn cycle(f: &mut BillFacts, payment_cycle: PaymentCycle) {
    f.partner_profile = PartnerProfile::Configured {
        payment_cycle,
        config_version: 1,
    };
}

/// Rent 100 a month from 202601 to 202612.
fn monthly_rents(f: &mut BillFacts) {
    f.account_small_bills = (1..=12)
        .map(|m| rent(&format!("2026{m:02}"), 100))
        .collect();
}

fn available(f: &BillFacts) -> i64 {
    check(f)
        .and_then(|c| c.available_minor)
        .expect("a formula result")
}

#[test]
fn the_pre_rent_check_passes_when_available_covers_pre_rent() {
    let f = with(|f| f.account_small_bills = vec![rent("202608", 500), rent("202609", 1_000)]);
    let c = check(&f).unwrap();
    assert_eq!(
        (c.result.code(), c.reason, c.available_minor),
        (10, None, Some(1_500))
    );
}

#[test]
fn each_missing_side_has_its_result_code_and_precise_reason() {
    use PreRentCheckReason as Why;
    let cases: Vec<(&str, BillFacts, i32, Why)> = vec![
        (
            "no small bill",
            with(|f| f.small_bill = None),
            30,
            Why::SmallBillMissing,
        ),
        (
            "no small account",
            with(|f| f.small_account = None),
            30,
            Why::SmallAccountMissing,
        ),
        (
            "no partner bill",
            with(no_partner_bill),
            40,
            Why::PartnerBillMissing,
        ),
        (
            "no partner account",
            with(|f| f.partner_accounts.clear()),
            40,
            Why::PartnerAccountMissing,
        ),
        (
            "no pre_rent",
            with(|f| f.partner_bill.as_mut().unwrap().pre_rent_minor = None),
            40,
            Why::PreRentMissing,
        ),
    ];
    for (name, f, code, why) in cases {
        let c = check(&f).unwrap_or_else(|| panic!("{name}: no check"));
        assert_eq!((c.result.code(), c.reason), (code, Some(why)), "{name}");
        assert!(!why.as_str().is_empty());
    }
    assert_eq!(
        PreRentCheckReason::AvailablePayableNotEnough.as_str(),
        "AVAILABLE_PAYABLE_NOT_ENOUGH"
    );
}

#[test]
fn month_pay_previous_month_cuts_off_at_the_target_month_itself() {
    let f = with(|f| {
        monthly_rents(f);
        // The account's own cutoff does not cap this cycle.
        f.small_account
            .as_mut()
            .unwrap()
            .current_payable_cutoff_month = Some(ym("202603"));
    });
    // 202601..=202609, nothing subtracted for "previous month".
    assert_eq!(available(&f), 900);
}

#[test]
fn other_cycles_cut_off_at_the_earlier_of_their_period_end_and_the_account_cutoff() {
    let cases: Vec<(&str, PaymentCycle, StationFacts, &str, i64)> = vec![
        (
            "monthly, account later",
            PaymentCycle::Monthly,
            StationFacts::default(),
            "202612",
            900,
        ),
        (
            "monthly, account earlier",
            PaymentCycle::Monthly,
            StationFacts::default(),
            "202607",
            700,
        ),
        (
            "quarterly: end of Q3",
            PaymentCycle::Quarterly,
            StationFacts::default(),
            "202612",
            900,
        ),
        (
            "half-yearly: end of H2",
            PaymentCycle::HalfYearly,
            StationFacts::default(),
            "202612",
            1_200,
        ),
        (
            "half-yearly capped",
            PaymentCycle::HalfYearly,
            StationFacts::default(),
            "202610",
            1_000,
        ),
        (
            "record way, natural person: quarterly",
            PaymentCycle::RecordWayComposite,
            StationFacts {
                record_way: Some(RecordWay::NaturalPerson),
                share_rule: None,
            },
            "202612",
            900,
        ),
        (
            "record way, non-natural person: half-yearly",
            PaymentCycle::RecordWayComposite,
            StationFacts {
                record_way: Some(RecordWay::NonNaturalPerson),
                share_rule: None,
            },
            "202612",
            1_200,
        ),
        (
            "share rule paying half-yearly",
            PaymentCycle::ShareRuleComposite,
            StationFacts {
                record_way: None,
                share_rule: Some(ShareRule {
                    rent_pay_method: RentPayMethod::HalfYearly,
                    change_type: None,
                    latest_generated_bill_month: None,
                }),
            },
            "202611",
            1_100,
        ),
    ];
    for (name, c, station, account_cutoff, expected) in cases {
        let f = with(|f| {
            monthly_rents(f);
            cycle(f, c);
            f.station = station;
            f.small_account
                .as_mut()
                .unwrap()
                .current_payable_cutoff_month = Some(ym(account_cutoff));
        });
        assert_eq!(available(&f), expected, "{name}");
    }
}

#[test]
fn a_cycle_needing_an_empty_account_cutoff_is_an_error_not_unconfigured() {
    let f = with(|f| {
        cycle(f, PaymentCycle::Quarterly);
        f.small_account
            .as_mut()
            .unwrap()
            .current_payable_cutoff_month = None;
    });
    assert!(matches!(
        decide(&f),
        Err(BillError::CutoffMonthMissing {
            account_id: SMALL_ACCOUNT,
            ..
        })
    ));
}

#[test]
fn a_partner_without_any_recorded_profile_is_an_error_not_a_null_check() {
    let f = with(|f| f.partner_profile = PartnerProfile::Unrecorded);
    assert!(matches!(
        decide(&f),
        Err(BillError::PartnerProfileUnrecorded {
            partner_org_id: PARTNER_ORG,
            ..
        })
    ));
    // A missing side decides the check before the profile is needed.
    let f = with(|f| {
        f.partner_profile = PartnerProfile::Unrecorded;
        no_partner_bill(f);
    });
    assert_eq!(
        check(&f).unwrap().result,
        PreRentCheckResult::PartnerSideMissing
    );
}

#[test]
fn rent_counts_from_the_income_start_month() {
    let f = with(|f| {
        monthly_rents(f);
        f.small_account.as_mut().unwrap().income_start_month = ym("202606");
        f.account_small_bills.push(SmallBillRent {
            account_id: 12,
            ..rent("202609", 5_000)
        });
    });
    assert_eq!(available(&f), 400);
}

#[test]
fn available_subtracts_cumulative_paid_and_every_deduction_with_no_month_cap() {
    let f = with(|f| {
        monthly_rents(f);
        f.results = vec![
            success(1, 100),
            PaymentResult {
                month: ym("202602"),
                ..success(2, 50)
            },
        ];
        f.opening_paid_balances = vec![OpeningPaidBalance {
            id: 1,
            small_station_id: STATION,
            platform_station_id: None,
            partner_org_id: PARTNER_ORG,
            opening_paid_minor: 25,
            updated_at: t(1),
        }];
        f.partner_accounts.push(PartnerAccount {
            id: 32,
            partner_org_id: PARTNER_ORG,
            platform_station_id: Some(PLATFORM_STATION),
        });
        f.account_partner_bills = vec![
            PartnerBillDeduction {
                partner_account_id: PARTNER_ACCOUNT,
                month: ym("202609"),
                deduction_minor: 10,
            },
            // A later month counts: the deduction has no month cap.
            PartnerBillDeduction {
                partner_account_id: 32,
                month: ym("202612"),
                deduction_minor: 20,
            },
            PartnerBillDeduction {
                partner_account_id: 99,
                month: ym("202609"),
                deduction_minor: 1_000,
            },
        ];
        let opening = |id, account, effective, amount, day| OpeningDeduction {
            id,
            partner_account_id: account,
            effective,
            amount_minor: amount,
            updated_at: t(day),
        };
        f.opening_deductions = vec![
            opening(1, PARTNER_ACCOUNT, true, 3, 1),
            opening(2, PARTNER_ACCOUNT, true, 4, 2),
            opening(3, PARTNER_ACCOUNT, false, 1_000, 9),
            opening(4, 32, true, 5, 1),
        ];
    });
    // 900 rent − (25 + 100 + 50) paid − (10 + 20 + 4 + 5) deduction.
    assert_eq!(available(&f), 686);
}

// ---- R-BILL-5 partner query status and unqualified fields ----

struct QueryRow {
    name: &'static str,
    facts: BillFacts,
    status: PartnerQueryStatus,
    rule: PartnerQueryRule,
}

fn query_rows() -> Vec<QueryRow> {
    use LineStatus as L;
    use LockStatus::Active;
    use OrderStatus as O;
    use PartnerQueryRule::*;
    use PartnerQueryStatus::{Failed, Passed, Unchecked};
    let unqualified = |f: &mut BillFacts, visible: bool| {
        f.orders.push(order(7, O::WaitPay));
        f.lines.push(line(72, 7, L::UnqualifiedEffective, None));
        f.unqualified_conclusions
            .push(conclusion(72, visible, "ROOF_MISMATCH", 5));
    };
    let repushed = |f: &mut BillFacts| {
        let bill = f.partner_bill.as_mut().unwrap();
        bill.last_unqualified_order_id = Some(0);
        bill.repushed_at = Some(t(4));
    };
    let q = |name, facts, status, rule| QueryRow {
        name,
        facts,
        status,
        rule,
    };
    vec![
        q(
            "a partner-visible unqualified conclusion fails the query",
            with(|f| unqualified(f, true)),
            Failed,
            Q1PartnerVisibleUnqualified,
        ),
        q(
            "a visible conclusion wins over a paid bill (Q1 before Q6)",
            with(|f| {
                unqualified(f, true);
                f.results.push(success(1, 1_000));
            }),
            Failed,
            Q1PartnerVisibleUnqualified,
        ),
        q(
            "an internal-only conclusion leaves the query unchecked",
            with(|f| unqualified(f, false)),
            Unchecked,
            Q2InternalUnqualifiedOnly,
        ),
        q(
            "an internal conclusion wins over pre_rent below paid (Q2 before Q4)",
            with(|f| {
                unqualified(f, false);
                f.results.push(success(1, 1_200));
            }),
            Unchecked,
            Q2InternalUnqualifiedOnly,
        ),
        q(
            "a conclusion on an ineffective unqualified line does not count",
            with(|f| {
                unqualified(f, true);
                f.lines[0].status = L::UnqualifiedIneffective;
            }),
            Unchecked,
            Q6Otherwise,
        ),
        q(
            "a re-push supersedes earlier conclusions and waits: unchecked without a hold",
            with(|f| {
                unqualified(f, true);
                f.unqualified_conclusions[0].at = t(3);
                repushed(f);
            }),
            Unchecked,
            Q3RepushPending,
        ),
        q(
            "a re-push with a payable approval hold taken after it passes",
            with(|f| {
                repushed(f);
                paying(f, O::WaitPay, L::Unpaid, None, Some(Active));
                f.locks[0].locked_at = t(5);
            }),
            Passed,
            Q3RepushPending,
        ),
        q(
            "a hold taken before the re-push does not pass it",
            with(|f| {
                repushed(f);
                paying(f, O::WaitPay, L::Unpaid, None, Some(Active));
                f.locks[0].locked_at = t(3);
            }),
            Unchecked,
            Q3RepushPending,
        ),
        q(
            "a visible conclusion after the re-push fails again (Q1 before Q3)",
            with(|f| {
                repushed(f);
                unqualified(f, true);
            }),
            Failed,
            Q1PartnerVisibleUnqualified,
        ),
        q(
            "a later effective payable conclusion supersedes an unqualified one",
            with(|f| {
                unqualified(f, true);
                f.lines.push(BillLine {
                    line_at: t(6),
                    ..line(70, 7, L::Unpaid, None)
                });
            }),
            Passed,
            Q6PaymentStatusChecked,
        ),
        q(
            "pre_rent below paid fails the query",
            with(|f| f.results.push(success(1, 1_200))),
            Failed,
            Q4PreRentBelowPaid,
        ),
        q(
            "small bill only, paid offline: unchecked",
            with(|f| {
                no_partner_bill(f);
                f.results.push(result(
                    1,
                    ResultStatus::Success,
                    ResultSource::OfflineImport,
                    300,
                ));
            }),
            Unchecked,
            Q5SmallBillOfflinePaid,
        ),
        q(
            "no payment needed (10) passes",
            with(|f| f.partner_bill.as_mut().unwrap().pre_rent_minor = Some(0)),
            Passed,
            Q6PaymentStatusChecked,
        ),
        q(
            "awaiting payment (40) passes",
            with(|f| paying(f, O::WaitPay, L::Unpaid, None, None)),
            Passed,
            Q6PaymentStatusChecked,
        ),
        q(
            "paid (50) passes",
            with(|f| f.results.push(success(1, 1_000))),
            Passed,
            Q6PaymentStatusChecked,
        ),
        q(
            "payment failed (70) passes",
            with(|f| paying(f, O::Paid, L::Failed, None, None)),
            Passed,
            Q6PaymentStatusChecked,
        ),
        q("unpaid (20) is unchecked", base(), Unchecked, Q6Otherwise),
        q(
            "in review (30) is unchecked",
            with(|f| paying(f, O::InReview, L::Unpaid, None, Some(Active))),
            Unchecked,
            Q6Otherwise,
        ),
        q(
            "partially paid (60) is unchecked",
            with(|f| f.results.push(success(1, 400))),
            Unchecked,
            Q6Otherwise,
        ),
        q(
            "partner bill not pushed (99) is unchecked",
            with(no_partner_bill),
            Unchecked,
            Q6Otherwise,
        ),
        q(
            "a failed pre-rent check alone does not fail the query",
            with(|f| f.account_small_bills = vec![rent("202609", 10)]),
            Unchecked,
            Q6Otherwise,
        ),
    ]
}

#[test]
fn every_partner_query_rule_fires_first_in_table_order() {
    let mut failures = Vec::new();
    for r in query_rows() {
        let d = decided(&r.facts);
        if (d.partner_query_status, d.partner_query_decided_by) != (r.status, r.rule) {
            failures.push(format!(
                "{}: expected {} ({}), got {} ({})",
                r.name,
                r.rule,
                r.status.code(),
                d.partner_query_decided_by,
                d.partner_query_status.code()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(
        [
            PartnerQueryStatus::Unchecked,
            PartnerQueryStatus::Passed,
            PartnerQueryStatus::Failed
        ]
        .map(PartnerQueryStatus::code),
        [10, 20, 30]
    );
}

#[test]
fn unqualified_fields_carry_the_latest_partner_visible_reason_only() {
    let f = with(|f| {
        f.orders.push(order(7, OrderStatus::WaitPay));
        f.lines
            .push(line(72, 7, LineStatus::UnqualifiedEffective, None));
        f.lines
            .push(line(73, 7, LineStatus::UnqualifiedEffective, None));
        f.unqualified_conclusions = vec![
            conclusion(72, true, "ROOF_MISMATCH", 5),
            conclusion(73, true, "METER_MISSING", 6),
            conclusion(73, false, "INTERNAL_NOTE", 8),
        ];
    });
    let d = decided(&f);
    assert!(d.unqualified_flag);
    assert_eq!(d.unqualified_reason.as_deref(), Some("METER_MISSING"));
    assert_eq!(
        d.last_unqualified,
        Some(LastUnqualified {
            order_id: 7,
            at: Some(t(6))
        })
    );
}

#[test]
fn internal_conclusions_set_no_unqualified_flag_and_a_re_push_keeps_its_zero_marker() {
    let f = with(|f| {
        f.orders.push(order(7, OrderStatus::WaitPay));
        f.lines
            .push(line(72, 7, LineStatus::UnqualifiedEffective, None));
        f.unqualified_conclusions = vec![conclusion(72, false, "INTERNAL_NOTE", 5)];
        let bill = f.partner_bill.as_mut().unwrap();
        bill.last_unqualified_order_id = Some(0);
        bill.last_unqualified_at = Some(t(1));
    });
    let d = decided(&f);
    assert!(!d.unqualified_flag);
    assert_eq!(d.unqualified_reason, None);
    assert_eq!(
        d.last_unqualified,
        Some(LastUnqualified {
            order_id: 0,
            at: Some(t(1))
        })
    );
}

// ---- R-BILL-6 lock projection ----

#[test]
fn the_lock_projection_shows_the_valid_lock_and_clears_without_one() {
    let locked = with(|f| {
        paying(
            f,
            OrderStatus::WaitPay,
            LineStatus::Unpaid,
            None,
            Some(LockStatus::Reserved),
        )
    });
    let d = decided(&locked);
    assert_eq!(
        (d.locked_payment_order_id, d.locked_order_bill_id),
        (Some(7), Some(70))
    );

    let released = with(|f| {
        paying(
            f,
            OrderStatus::WaitPay,
            LineStatus::Unpaid,
            None,
            Some(LockStatus::Released),
        )
    });
    let d = decided(&released);
    assert_eq!(
        (d.locked_payment_order_id, d.locked_order_bill_id),
        (None, None)
    );

    let republished = with(|f| {
        paying(
            f,
            OrderStatus::WaitPay,
            LineStatus::Unpaid,
            None,
            Some(LockStatus::Active),
        );
        f.orders[0].publish_version = 2;
    });
    let d = decided(&republished);
    assert_eq!(
        (d.locked_payment_order_id, d.locked_order_bill_id),
        (None, None)
    );
}

#[test]
fn the_decision_names_the_rows_it_is_written_to() {
    let d = decided(&base());
    assert_eq!(d.station_month.to_string(), "100:202609");
    assert_eq!(
        (d.partner_bill_id, d.diff_id),
        (Some(PARTNER_BILL), Some(41))
    );
}

// ---- parsing ----

#[test]
fn a_station_month_parses_from_station_colon_yyyymm_and_nothing_else() {
    let sm = StationMonth::parse("100:202609").unwrap();
    assert_eq!(
        (sm.station_id, sm.month.year(), sm.month.month()),
        (100, 2026, 9)
    );
    for bad in [
        "",
        "100",
        "100:2026",
        "100:202613",
        "100:202600",
        "x:202609",
        ":202609",
        "0:202609",
        "-1:202609",
        "100:2026-9",
    ] {
        assert!(
            matches!(parse_station_month(bad), Err(BillError::BadStationMonth(_))),
            "{bad}"
        );
    }
}

#[test]
fn bill_months_order_by_time_and_know_their_period_ends() {
    assert!(ym("202512") < ym("202601"));
    assert_eq!(ym("202608").end_of_period(3), ym("202609"));
    assert_eq!(ym("202601").end_of_period(6), ym("202606"));
    assert_eq!(ym("202607").end_of_period(1), ym("202607"));
    assert!(matches!(parse_month("2026x9"), Err(BillError::BadMonth(_))));
}

#[test]
fn a_months_rent_is_read_from_the_first_month_of_its_half_year_to_the_half_years_end() {
    let ym = |s: &str| YearMonth::parse(s).unwrap();
    for (month, first_reader, last_read) in [
        ("202601", "202601", "202606"),
        ("202606", "202601", "202606"),
        ("202607", "202607", "202612"),
        ("202609", "202607", "202612"),
        ("202612", "202607", "202612"),
    ] {
        assert_eq!(
            ym(month).first_month_reading_rent(),
            ym(first_reader),
            "{month}"
        );
        assert_eq!(ym(month).last_rent_month_read(), ym(last_read), "{month}");
        // The two agree: a month reads a rent iff the rent's first reader is not after it
        // and the rent is not after the month's last read month.
        for other in ["202512", "202601", "202606", "202607", "202612", "202701"] {
            let reads = ym(other) <= ym(month).last_rent_month_read();
            let read_by = ym(month) >= ym(other).first_month_reading_rent();
            assert_eq!(reads, read_by, "{month} reads {other}");
        }
    }
}
