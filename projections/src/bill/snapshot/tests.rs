//! R-BILL-10, table-driven: the aggregate (which lines and results count), the
//! EXISTING_ONLY refresh (one row per outcome and status, the frozen planned amount,
//! `payment_diff`), the counts, the 100-bill pages and the round transition.

use super::*;
use crate::bill::{LineStatus, OrderStatus};
use chrono::TimeZone;

fn t(day: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 9, day, 10, 0, 0).unwrap()
}

fn sm(s: &str) -> StationMonth {
    StationMonth::parse(s).unwrap()
}

const BILL: BillKey = BillKey::Diff(41);

fn order() -> PaymentOrder {
    PaymentOrder {
        id: 7,
        status: OrderStatus::WaitPay,
        published: true,
        publish_version: 2,
        submit_round: 3,
        treasury: true,
    }
}

fn line(id: i64) -> BillLine {
    BillLine {
        id,
        order_id: 7,
        publish_version: 2,
        submit_round: 3,
        kind: LineKind::Payable,
        status: LineStatus::Unpaid,
        latest_result_id: None,
        planned_amount_minor: 1_000,
        manual_adjustment_minor: None,
        line_at: t(1),
        deleted: false,
    }
}

fn result(
    result_id: i64,
    line_id: i64,
    status: ResultStatus,
    amount_minor: i64,
    day: u32,
) -> LineResult {
    LineResult {
        result_id,
        line_id,
        status,
        kind: ResultType::NormalPayment,
        source: ResultSource::Treasury,
        amount_minor,
        paid_at: Some(t(day)),
        fail_reason: None,
        voided: false,
    }
}

fn ok(id: i64, line_id: i64, amount: i64, day: u32) -> LineResult {
    result(id, line_id, ResultStatus::Success, amount, day)
}

fn fail(id: i64, line_id: i64, amount: i64, day: u32) -> LineResult {
    result(id, line_id, ResultStatus::Fail, amount, day)
}

struct AggregateRow {
    name: &'static str,
    lines: Vec<BillLine>,
    results: Vec<LineResult>,
    /// (lines, paid, paid count, failed, failed count)
    want: (u32, i64, u32, i64, u32),
}

fn aggregate_rows() -> Vec<AggregateRow> {
    let row = |name, lines, results, want| AggregateRow {
        name,
        lines,
        results,
        want,
    };
    vec![
        row("no line, nothing", vec![], vec![], (0, 0, 0, 0, 0)),
        row(
            "a line without results",
            vec![line(1)],
            vec![],
            (1, 0, 0, 0, 0),
        ),
        row(
            "successes sum, failures sum apart",
            vec![line(1), line(2)],
            vec![ok(10, 1, 300, 4), ok(11, 2, 200, 5), fail(12, 2, 500, 3)],
            (2, 500, 2, 500, 1),
        ),
        row(
            "voided results count nowhere",
            vec![line(1)],
            vec![
                LineResult {
                    voided: true,
                    ..ok(10, 1, 300, 4)
                },
                LineResult {
                    voided: true,
                    ..fail(11, 1, 300, 4)
                },
            ],
            (1, 0, 0, 0, 0),
        ),
        row(
            "a non-normal or fail-fallback success is not paid",
            vec![line(1)],
            vec![
                LineResult {
                    kind: ResultType::Other,
                    ..ok(10, 1, 300, 4)
                },
                LineResult {
                    source: ResultSource::FailFallback,
                    ..ok(11, 1, 300, 4)
                },
            ],
            (1, 0, 0, 0, 0),
        ),
        row(
            "a fail-fallback failure is a failure",
            vec![line(1)],
            vec![LineResult {
                source: ResultSource::FailFallback,
                ..fail(10, 1, 300, 4)
            }],
            (1, 0, 0, 300, 1),
        ),
        row(
            "a line of an older submit round, a deleted or unqualified line, and their results, do not count",
            vec![
                BillLine {
                    submit_round: 2,
                    ..line(1)
                },
                BillLine {
                    deleted: true,
                    ..line(2)
                },
                BillLine {
                    kind: LineKind::Unqualified,
                    ..line(3)
                },
                line(4),
            ],
            vec![ok(10, 1, 100, 4), ok(11, 2, 100, 4), ok(12, 3, 100, 4), ok(13, 4, 100, 4)],
            (1, 100, 1, 0, 0),
        ),
        row(
            "a result of a line not of this bill does not count",
            vec![line(1)],
            vec![ok(10, 99, 100, 4)],
            (1, 0, 0, 0, 0),
        ),
    ]
}

#[test]
fn aggregate_counts_the_current_lines_results() {
    for r in aggregate_rows() {
        let a = aggregate(BILL, &[order()], &r.lines, &r.results).unwrap();
        assert_eq!(
            (
                a.line_count,
                a.paid_amount_minor,
                a.paid_count,
                a.failed_amount_minor,
                a.failed_count
            ),
            r.want,
            "{}",
            r.name
        );
    }
}

#[test]
fn the_latest_paid_time_and_source_are_the_latest_success() {
    let results = [
        ok(10, 1, 100, 6),
        LineResult {
            source: ResultSource::OfflineImport,
            ..ok(11, 1, 100, 8)
        },
        fail(12, 1, 100, 9),
    ];
    let a = aggregate(BILL, &[order()], &[line(1)], &results).unwrap();
    assert_eq!(a.latest_paid_at, Some(t(8)));
    assert_eq!(a.latest_paid_source, Some(ResultSource::OfflineImport));
    let unpublished = PaymentOrder {
        published: false,
        ..order()
    };
    let none = aggregate(BILL, &[unpublished], &[line(1)], &results).unwrap();
    assert_eq!(none, BillAggregate::default());
}

fn existing(planned: i64, version: i64) -> BillSnapshot {
    BillSnapshot {
        bill: BILL,
        planned_amount_minor: planned,
        paid_amount_minor: 0,
        paid_count: 0,
        failed_amount_minor: 0,
        failed_count: 0,
        status: SnapshotStatus::AwaitingPayment,
        latest_paid_at: None,
        source: None,
        refresh_version: version,
        payment_diff_minor: -planned,
    }
}

fn agg(line_count: u32, paid: i64, failed_count: u32) -> BillAggregate {
    BillAggregate {
        line_count,
        paid_amount_minor: paid,
        paid_count: u32::from(paid > 0),
        failed_amount_minor: i64::from(failed_count) * 100,
        failed_count,
        latest_paid_at: (paid > 0).then(|| t(4)),
        latest_paid_source: (paid > 0).then_some(ResultSource::Treasury),
    }
}

struct RefreshRow {
    name: &'static str,
    existing: Option<BillSnapshot>,
    aggregate: BillAggregate,
    /// `Ok((status, payment_diff))` or the skip reason.
    want: Result<(SnapshotStatus, i64), SkipReason>,
}

fn refresh_rows() -> Vec<RefreshRow> {
    use SnapshotStatus as S;
    let row = |name, existing, aggregate, want| RefreshRow {
        name,
        existing,
        aggregate,
        want,
    };
    vec![
        row(
            "EXISTING_ONLY: a missing snapshot is skipped, not created",
            None,
            agg(1, 1_000, 0),
            Err(SkipReason::NoSnapshot),
        ),
        row(
            "a row written by a newer generation is skipped",
            Some(existing(1_000, 9)),
            agg(1, 1_000, 0),
            Err(SkipReason::NewerVersion {
                existing: 9,
                refresh: 5,
            }),
        ),
        row(
            "no current line: no payment",
            Some(existing(1_000, 1)),
            agg(0, 0, 0),
            Ok((S::NoPayment, -1_000)),
        ),
        row(
            "lines, nothing final yet: awaiting payment",
            Some(existing(1_000, 1)),
            agg(1, 0, 0),
            Ok((S::AwaitingPayment, -1_000)),
        ),
        row(
            "paid the planned amount: paid, diff 0",
            Some(existing(1_000, 1)),
            agg(1, 1_000, 0),
            Ok((S::Paid, 0)),
        ),
        row(
            "overpaid: paid, a positive diff",
            Some(existing(1_000, 1)),
            agg(1, 1_200, 0),
            Ok((S::Paid, 200)),
        ),
        row(
            "a partial success beside a failure is partially paid, not failed",
            Some(existing(1_000, 1)),
            agg(2, 400, 1),
            Ok((S::PartiallyPaid, -600)),
        ),
        row(
            "only failures: failed",
            Some(existing(1_000, 1)),
            agg(1, 0, 2),
            Ok((S::Failed, -1_000)),
        ),
        row(
            "a planned amount of 0 with nothing paid is not paid",
            Some(existing(0, 1)),
            agg(1, 0, 0),
            Ok((S::AwaitingPayment, 0)),
        ),
        row(
            "the same generation again updates (a retried round)",
            Some(existing(1_000, 5)),
            agg(1, 1_000, 0),
            Ok((S::Paid, 0)),
        ),
    ]
}

#[test]
fn existing_only_refresh_rules() {
    for r in refresh_rows() {
        let got = refresh_existing(BILL, r.existing.as_ref(), &r.aggregate, 5).unwrap();
        match (got, r.want) {
            (SnapshotRefresh::Updated(s), Ok((status, diff))) => {
                assert_eq!(
                    (s.status, s.payment_diff_minor),
                    (status, diff),
                    "{}",
                    r.name
                );
                assert_eq!(s.refresh_version, 5, "{}", r.name);
                assert_eq!(
                    s.paid_amount_minor, r.aggregate.paid_amount_minor,
                    "{}",
                    r.name
                );
            }
            (SnapshotRefresh::Skipped { bill, reason }, Err(want)) => {
                assert_eq!((bill, reason), (BILL, want), "{}", r.name)
            }
            (got, want) => panic!("{}: got {got:?}, want {want:?}", r.name),
        }
    }
}

#[test]
fn refresh_never_rewrites_the_planned_amount_frozen_at_review() {
    // The lines' planned amounts changed since approval (say, a manual adjustment);
    // the snapshot keeps the frozen 1,000 and measures the diff against it.
    let before = existing(1_000, 1);
    let SnapshotRefresh::Updated(after) =
        refresh_existing(BILL, Some(&before), &agg(1, 700, 0), 2).unwrap()
    else {
        panic!("not updated");
    };
    assert_eq!(after.planned_amount_minor, 1_000);
    assert_eq!(after.payment_diff_minor, -300);
    assert_eq!(
        (after.latest_paid_at, after.source),
        (Some(t(4)), Some(ResultSource::Treasury))
    );
}

#[test]
fn a_snapshot_of_another_bill_is_no_existing_snapshot() {
    let other = BillSnapshot {
        bill: BillKey::Diff(42),
        ..existing(1_000, 1)
    };
    let got = refresh_existing(BILL, Some(&other), &agg(1, 0, 0), 2).unwrap();
    assert_eq!(
        got,
        SnapshotRefresh::Skipped {
            bill: BILL,
            reason: SkipReason::NoSnapshot
        }
    );
}

#[test]
fn an_overflowing_diff_is_an_error() {
    let got = refresh_existing(BILL, Some(&existing(i64::MAX, 1)), &agg(1, -2, 0), 2);
    assert_eq!(
        got,
        Err(SnapshotError::AmountOverflow {
            bill: BILL,
            what: "payment diff"
        })
    );
}

#[test]
fn counts_report_updated_and_skipped() {
    let mut counts = SnapshotCounts::default();
    for r in refresh_rows() {
        counts.add(&refresh_existing(BILL, r.existing.as_ref(), &r.aggregate, 5).unwrap());
    }
    assert_eq!(
        counts,
        SnapshotCounts {
            updated: 8,
            skipped: 2
        }
    );
}

#[test]
fn rounds_take_at_most_100_bills_with_a_cursor() {
    let mut bills: Vec<BillKey> = (1..=250).map(BillKey::Diff).collect();
    bills.extend((1..=250).rev().map(BillKey::Diff)); // duplicates, out of order
    let mut cursor = None;
    let mut sizes = Vec::new();
    let mut seen = Vec::new();
    loop {
        let page = snapshot_page(&bills, cursor);
        sizes.push(page.bills.len());
        seen.extend(page.bills.iter().copied());
        let next = after_round(&page, 3, 3);
        cursor = page.next_cursor;
        match cursor {
            Some(_) => assert_eq!(next, SnapshotJobNext::Pending),
            None => {
                assert_eq!(next, SnapshotJobNext::Success);
                break;
            }
        }
    }
    assert_eq!(sizes, vec![100, 100, 50]);
    assert_eq!(seen, (1..=250).map(BillKey::Diff).collect::<Vec<_>>());
}

#[test]
fn a_newer_generation_sends_the_last_page_back_to_pending() {
    let page = snapshot_page(&[BILL], None);
    assert_eq!(page.next_cursor, None);
    assert_eq!(after_round(&page, 3, 3), SnapshotJobNext::Success);
    assert_eq!(after_round(&page, 3, 4), SnapshotJobNext::Pending);
}

#[test]
fn every_scope_type_refreshes_the_snapshots_of_its_bills() {
    use crate::bill::refresh::Locator;
    let with_diff = StationMonthScope {
        station_month: sm("100:202609"),
        locator: Locator::new("t", None, None, None, Some(41)).unwrap(),
    };
    let plain = StationMonthScope {
        station_month: sm("100:202610"),
        locator: Locator::NONE,
    };
    let scopes = [plain, with_diff, plain];
    assert_eq!(
        snapshot_bills(ScopeType::Diff, &scopes),
        vec![BillKey::Diff(41), BillKey::StationMonth(sm("100:202610"))]
    );
    for t in [
        ScopeType::StationMonth,
        ScopeType::PartnerBill,
        ScopeType::OrderBill,
        ScopeType::AccountScope,
    ] {
        assert_eq!(
            snapshot_bills(t, &scopes),
            vec![
                BillKey::StationMonth(sm("100:202609")),
                BillKey::StationMonth(sm("100:202610"))
            ],
            "{t}"
        );
    }
    assert_eq!(BillKey::Diff(41).to_string(), "DIFF:41");
    assert_eq!(
        BillKey::StationMonth(sm("100:202609")).to_string(),
        "STATION_MONTH:100:202609"
    );
}
