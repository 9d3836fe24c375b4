//! R-BILL-9, table-driven: one row per master rule (M0 … M8) with the seed's
//! counter-intuitive cases, the import write-back rules, the dedupe of masters, the
//! compare-and-set token and the two-attempt retry policy.

use super::*;
use chrono::TimeZone;

fn t(day: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 9, day, 10, 0, 0).unwrap()
}

fn master(status: OrderStatus, treasury: bool) -> Master {
    Master {
        order_id: 7,
        status,
        treasury,
        published: true,
        publish_version: 2,
        submit_round: 3,
    }
}

fn line(line_id: i64, status: LineStatus) -> ReconcileLine {
    ReconcileLine {
        line_id,
        order_id: 7,
        publish_version: 2,
        submit_round: 3,
        kind: LineKind::Payable,
        deleted: false,
        status,
        latest_result_id: None,
        paid_amount_minor: 0,
        planned_amount_minor: 1_000,
    }
}

fn success(result_id: i64, line_id: i64, amount_minor: i64, day: u32) -> LineResult {
    LineResult {
        result_id,
        line_id,
        status: ResultStatus::Success,
        kind: ResultType::NormalPayment,
        source: ResultSource::OfflineImport,
        amount_minor,
        paid_at: Some(t(day)),
        fail_reason: None,
        voided: false,
    }
}

fn sources(list: &[TriggerSource]) -> BTreeSet<TriggerSource> {
    list.iter().copied().collect()
}

const REPAIR: TriggerSource = TriggerSource::PaymentOrderStatusDataRepair;

struct MasterRow {
    name: &'static str,
    master: Master,
    lines: Vec<ReconcileLine>,
    sources: Vec<TriggerSource>,
    rule: ReconcileRule,
    status_after: OrderStatus,
}

fn master_rows() -> Vec<MasterRow> {
    use LineStatus as L;
    use OrderStatus as O;
    use ReconcileRule as M;
    let row = |name, master, lines, rule, status_after| MasterRow {
        name,
        master,
        lines,
        sources: vec![REPAIR],
        rule,
        status_after,
    };
    vec![
        MasterRow {
            sources: vec![TriggerSource::Manual],
            ..row(
                "M0 a source outside the whitelist reconciles nothing",
                master(O::WaitPay, false),
                vec![line(1, L::Paid)],
                M::M0NotWhitelisted,
                O::WaitPay,
            )
        },
        MasterRow {
            sources: vec![],
            ..row(
                "M0 no source at all reconciles nothing",
                master(O::WaitPay, false),
                vec![line(1, L::Paid)],
                M::M0NotWhitelisted,
                O::WaitPay,
            )
        },
        row(
            "M1 a master in review is protected even with every line paid",
            master(O::InReview, false),
            vec![line(1, L::Paid)],
            M::M1Protected,
            O::InReview,
        ),
        row(
            "M1 review-rejected is protected",
            master(O::ReviewRejected, true),
            vec![line(1, L::Paid)],
            M::M1Protected,
            O::ReviewRejected,
        ),
        row(
            "M1 void is protected",
            master(O::Void, false),
            vec![line(1, L::Paid)],
            M::M1Protected,
            O::Void,
        ),
        row(
            "M1 no-need-pay is protected",
            master(O::NoNeedPay, false),
            vec![line(1, L::Unpaid)],
            M::M1Protected,
            O::NoNeedPay,
        ),
        row(
            "M1 an unpublished master is protected",
            Master {
                published: false,
                ..master(O::WaitPay, false)
            },
            vec![line(1, L::Paid)],
            M::M1Protected,
            O::WaitPay,
        ),
        row(
            "M2 no current payable line leaves the master",
            master(O::Paid, false),
            vec![ReconcileLine {
                submit_round: 2,
                ..line(1, L::Unpaid)
            }],
            M::M2NoCurrentPayableLines,
            O::Paid,
        ),
        row(
            "M3 non-treasury: one line paid makes the master PAID though another is unpaid",
            master(O::WaitPay, false),
            vec![line(1, L::Paid), line(2, L::Unpaid)],
            M::M3NonTreasuryAnyLineSucceeded,
            O::Paid,
        ),
        row(
            "M3 non-treasury: a partial payment counts as a success",
            master(O::WaitPay, false),
            vec![line(1, L::PartiallyPaid), line(2, L::Unpaid)],
            M::M3NonTreasuryAnyLineSucceeded,
            O::Paid,
        ),
        row(
            "M4 non-treasury: every line failed is every line ended → PAID",
            master(O::WaitPay, false),
            vec![line(1, L::Failed), line(2, L::Failed)],
            M::M4NonTreasuryAllLinesEnded,
            O::Paid,
        ),
        row(
            "M5 non-treasury: PAID goes back to WAIT_PAY when no line succeeded (import deleted)",
            master(O::Paid, false),
            vec![line(1, L::Unpaid), line(2, L::Failed)],
            M::M5NonTreasuryOpen,
            O::WaitPay,
        ),
        row(
            "M5 non-treasury: WAIT_PAY stays while a line is open",
            master(O::WaitPay, false),
            vec![line(1, L::Unpaid)],
            M::M5NonTreasuryOpen,
            O::WaitPay,
        ),
        row(
            "M6 treasury PAID stays PAID even with an unpaid line",
            master(O::Paid, true),
            vec![line(1, L::Unpaid)],
            M::M6TreasuryPaidStays,
            O::Paid,
        ),
        row(
            "M7 treasury WAIT_PAY → PAID when partial and failed lines are all that is left",
            master(O::WaitPay, true),
            vec![
                line(1, L::PartiallyPaid),
                line(2, L::Failed),
                line(3, L::Paid),
            ],
            M::M7TreasuryNoLineUnpaid,
            O::Paid,
        ),
        row(
            "M8 treasury WAIT_PAY stays with one line unpaid",
            master(O::WaitPay, true),
            vec![line(1, L::Paid), line(2, L::Unpaid)],
            M::M8TreasuryOpen,
            O::WaitPay,
        ),
        row(
            "a deleted line does not count: the unpaid one left keeps WAIT_PAY",
            master(O::WaitPay, true),
            vec![
                ReconcileLine {
                    deleted: true,
                    ..line(1, L::Unpaid)
                },
                line(2, L::Unpaid),
            ],
            M::M8TreasuryOpen,
            O::WaitPay,
        ),
        row(
            "a deleted or stale unpaid line does not hold a treasury order back",
            master(O::WaitPay, true),
            vec![
                ReconcileLine {
                    deleted: true,
                    ..line(1, L::Unpaid)
                },
                ReconcileLine {
                    publish_version: 1,
                    ..line(2, L::Unpaid)
                },
                line(3, L::Failed),
            ],
            M::M7TreasuryNoLineUnpaid,
            O::Paid,
        ),
        row(
            "an unqualified line is no payable line",
            master(O::WaitPay, true),
            vec![
                ReconcileLine {
                    kind: LineKind::Unqualified,
                    ..line(1, L::UnqualifiedEffective)
                },
                line(2, L::Paid),
            ],
            M::M7TreasuryNoLineUnpaid,
            O::Paid,
        ),
        row(
            "a line of another master does not count",
            master(O::Paid, false),
            vec![ReconcileLine {
                order_id: 8,
                ..line(1, L::Paid)
            }],
            M::M2NoCurrentPayableLines,
            O::Paid,
        ),
    ]
}

#[test]
fn master_status_rules() {
    for r in master_rows() {
        let got = reconcile(&r.master, &r.lines, &[], &sources(&r.sources)).unwrap();
        assert_eq!(got.decision.rule(), r.rule, "{}", r.name);
        assert_eq!(got.decision.status(), r.status_after, "{}", r.name);
        let moved = matches!(got.decision, MasterDecision::Move { .. });
        assert_eq!(moved, r.status_after != r.master.status, "{}", r.name);
        if let MasterDecision::Move { cas, .. } = got.decision {
            assert_eq!(cas, CasToken::of(&r.master), "{}", r.name);
        }
        assert!(
            got.write_backs.is_empty(),
            "{}: no import, no write-back",
            r.name
        );
    }
}

#[test]
fn every_whitelisted_source_reconciles() {
    use TriggerSource as S;
    for s in [
        S::PaymentImportEffective,
        S::PaymentImportDelete,
        S::TreasuryPlaceholderReserved,
        S::TreasuryResultWriteback,
        S::PaymentFailFallback,
        S::PaymentStatusAsyncRefresh,
        S::PaymentOrderStatusDataRepair,
    ] {
        let got = reconcile(
            &master(OrderStatus::WaitPay, false),
            &[line(1, LineStatus::Paid)],
            &[],
            &sources(&[S::Manual, s]),
        )
        .unwrap();
        assert_eq!(got.decision.status(), OrderStatus::Paid, "{s:?}");
    }
}

/// The import write-back of line 1 (planned 1,000) from these results.
struct WriteBackRow {
    name: &'static str,
    results: Vec<LineResult>,
    line: ReconcileLine,
    /// `None`: skipped.
    want: Option<(i64, LineStatus, i64)>,
}

fn write_back_rows() -> Vec<WriteBackRow> {
    let row = |name, results, want| WriteBackRow {
        name,
        results,
        line: line(1, LineStatus::Unpaid),
        want,
    };
    vec![
        row("no result: skipped", vec![], None),
        row(
            "one offline success paid in full",
            vec![success(10, 1, 1_000, 4)],
            Some((10, LineStatus::Paid, 1_000)),
        ),
        row(
            "two successes: summed, the latest by paid time is the line's result",
            vec![success(12, 1, 300, 5), success(11, 1, 200, 6)],
            Some((11, LineStatus::PartiallyPaid, 500)),
        ),
        row(
            "treasury successes count too",
            vec![LineResult {
                source: ResultSource::Treasury,
                ..success(10, 1, 1_200, 4)
            }],
            Some((10, LineStatus::Paid, 1_200)),
        ),
        row(
            "a voided success does not count",
            vec![
                success(10, 1, 600, 4),
                LineResult {
                    voided: true,
                    ..success(11, 1, 400, 5)
                },
            ],
            Some((10, LineStatus::PartiallyPaid, 600)),
        ),
        row(
            "a failure is no successful result: skipped",
            vec![LineResult {
                status: ResultStatus::Fail,
                fail_reason: Some("account closed".into()),
                ..success(10, 1, 1_000, 4)
            }],
            None,
        ),
        row(
            "a non-normal payment does not count",
            vec![LineResult {
                kind: ResultType::Other,
                ..success(10, 1, 1_000, 4)
            }],
            None,
        ),
        row(
            "a fail-fallback source does not count",
            vec![LineResult {
                source: ResultSource::FailFallback,
                ..success(10, 1, 1_000, 4)
            }],
            None,
        ),
        row(
            "another line's result does not count",
            vec![success(10, 2, 1_000, 4)],
            None,
        ),
        WriteBackRow {
            line: ReconcileLine {
                latest_result_id: Some(10),
                paid_amount_minor: 1_000,
                ..line(1, LineStatus::Paid)
            },
            ..row(
                "already written back: skipped (a replay writes nothing)",
                vec![success(10, 1, 1_000, 4)],
                None,
            )
        },
    ]
}

#[test]
fn import_write_back_rules() {
    let effective = sources(&[TriggerSource::PaymentImportEffective]);
    for r in write_back_rows() {
        let got = reconcile(
            &master(OrderStatus::WaitPay, true),
            &[r.line],
            &r.results,
            &effective,
        )
        .unwrap();
        let got: Option<_> = got
            .write_backs
            .first()
            .map(|w| (w.result_id, w.line_status, w.paid_amount_minor));
        assert_eq!(got, r.want, "{}", r.name);
    }
}

#[test]
fn the_write_back_runs_only_on_import_effective_and_feeds_the_master_rule() {
    let m = master(OrderStatus::WaitPay, true);
    let lines = [line(1, LineStatus::Unpaid)];
    let results = [success(10, 1, 1_000, 4)];
    // Another whitelisted source: no write-back, the line is still unpaid.
    let other = reconcile(&m, &lines, &results, &sources(&[REPAIR])).unwrap();
    assert!(other.write_backs.is_empty());
    assert_eq!(other.decision.rule(), ReconcileRule::M8TreasuryOpen);
    // The import took effect: the line is written back PAID, then the master follows.
    let effective = sources(&[TriggerSource::PaymentImportEffective]);
    let got = reconcile(&m, &lines, &results, &effective).unwrap();
    assert_eq!(got.write_backs.len(), 1);
    assert_eq!(got.decision.rule(), ReconcileRule::M7TreasuryNoLineUnpaid);
    let wb = &got.write_backs[0];
    assert_eq!(
        (wb.result_status, wb.paid_at, wb.fail_reason.clone()),
        (ResultStatus::Success, Some(t(4)), None)
    );
    let event = wb.to_event(TriggerSource::PaymentImportEffective, t(9));
    assert!(matches!(
        event,
        PaymentOrderEvent::LineResultWritten {
            order_id: 7,
            line_id: 1,
            result_id: 10,
            line_status: LineStatusCode::Paid,
            paid_amount_minor: 1_000,
            ..
        }
    ));
    let moved = got
        .decision
        .to_event(TriggerSource::PaymentImportEffective, t(9));
    assert!(matches!(
        moved,
        Some(PaymentOrderEvent::PaymentOrderStatusReconciled {
            order_id: 7,
            from: OrderStatusCode::WaitPay,
            to: OrderStatusCode::Paid,
            publish_version: 2,
            submit_round: 3,
            ..
        })
    ));
}

#[test]
fn an_overflowing_paid_sum_is_an_error() {
    let got = reconcile(
        &master(OrderStatus::WaitPay, true),
        &[line(1, LineStatus::Unpaid)],
        &[success(10, 1, i64::MAX, 4), success(11, 1, 1, 5)],
        &sources(&[TriggerSource::PaymentImportEffective]),
    );
    assert_eq!(
        got,
        Err(OrderStatusError::PaidAmountOverflow {
            order_id: 7,
            line_id: 1
        })
    );
}

#[test]
fn masters_are_deduplicated_from_the_current_payable_lines() {
    let masters = [
        master(OrderStatus::WaitPay, true),
        Master {
            order_id: 9,
            ..master(OrderStatus::Paid, false)
        },
        Master {
            order_id: 8,
            published: false,
            ..master(OrderStatus::WaitPay, false)
        },
    ];
    let lines = [
        line(1, LineStatus::Unpaid),
        line(2, LineStatus::Paid),
        ReconcileLine {
            order_id: 9,
            ..line(3, LineStatus::Paid)
        },
        // Unpublished master, stale identity, unqualified, deleted, unknown master.
        ReconcileLine {
            order_id: 8,
            ..line(4, LineStatus::Paid)
        },
        ReconcileLine {
            order_id: 9,
            submit_round: 1,
            ..line(5, LineStatus::Paid)
        },
        ReconcileLine {
            kind: LineKind::Unqualified,
            ..line(6, LineStatus::UnqualifiedEffective)
        },
        ReconcileLine {
            order_id: 10,
            ..line(7, LineStatus::Paid)
        },
    ];
    assert_eq!(masters_to_reconcile(&masters, &lines), vec![7, 9]);
    let only_stale = [ReconcileLine {
        order_id: 9,
        deleted: true,
        ..line(5, LineStatus::Paid)
    }];
    assert!(masters_to_reconcile(&masters, &only_stale).is_empty());
}

#[test]
fn the_cas_token_holds_only_while_id_version_round_and_status_are_unchanged() {
    let read = master(OrderStatus::WaitPay, true);
    let token = CasToken::of(&read);
    assert!(token.holds_for(&read));
    let changed = [
        Master {
            status: OrderStatus::Paid,
            ..read
        },
        Master {
            publish_version: 3,
            ..read
        },
        Master {
            submit_round: 4,
            ..read
        },
        Master {
            order_id: 8,
            ..read
        },
    ];
    for now in changed {
        assert!(!token.holds_for(&now), "{now:?}");
    }
}

#[test]
fn at_most_two_attempts_then_a_conflict() {
    use CasOutcome::{Applied, Conflict};
    let rows = [
        (1, Applied, Ok(NextStep::Done)),
        (1, Conflict, Ok(NextStep::Retry { attempt: 2 })),
        (2, Applied, Ok(NextStep::Done)),
        (
            2,
            Conflict,
            Err(OrderStatusError::Conflict {
                order_id: 7,
                attempts: 2,
            }),
        ),
        (
            3,
            Applied,
            Err(OrderStatusError::AttemptOutOfRange {
                order_id: 7,
                attempt: 3,
            }),
        ),
        (
            0,
            Applied,
            Err(OrderStatusError::AttemptOutOfRange {
                order_id: 7,
                attempt: 0,
            }),
        ),
    ];
    for (attempt, outcome, want) in rows {
        assert_eq!(
            after_cas(7, attempt, outcome),
            want,
            "{attempt} {outcome:?}"
        );
    }
}
