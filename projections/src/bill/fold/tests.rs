//! The pure fold: each fact event writes the right fact row and touches the right
//! station-months; `project` turns facts into the three bill rows or a finding.

use super::read::parse_time;
use super::*;
use crate::bill::tables::*;
use crate::bill::*;
use crate::table::{Cell, MemRow};
use serde_json::json;

fn sm(s: &str) -> StationMonth {
    StationMonth::parse(s).expect("station-month")
}

fn folded(aggregate_type: &str, payload: Value) -> Folded {
    fold(aggregate_type, &payload)
        .expect("folds")
        .expect("a bill event")
}

fn cells(op: &FactOp) -> (&'static str, MemRow) {
    match op {
        FactOp::Put { table, row } => (table.name, row.iter().cloned().collect()),
        FactOp::Set { table, key, set } => {
            (table.name, key.iter().chain(set.iter()).cloned().collect())
        }
    }
}

#[test]
fn a_small_bill_puts_its_row_and_touches_its_station_month_and_account() {
    let f = folded(
        STATION_MONTH_AGGREGATE_TYPE,
        json!({"type": "SmallBillRecorded", "station_id": 100, "month": "202609",
               "bill_id": 7, "account_id": 101, "rent_minor": 1000,
               "recorded_at": "2026-10-01T00:00:00Z"}),
    );
    assert_eq!(
        f.touches,
        vec![
            Touch::StationMonth(sm("100:202609")),
            Touch::SmallBillAccount(sm("100:202609"))
        ]
    );
    let (table, row) = cells(&f.ops[0]);
    assert_eq!(table, "bill_fact_small_bills");
    assert_eq!(row["rent"], Cell::Int(1000));
    assert_eq!(row["bill_yearmonth"], Cell::text("202609"));
    assert_eq!(row["fact_at"], Cell::text("2026-10-01T00:00:00.000000Z"));
    // Every column of the table, so the row replaces the old one whole.
    assert_eq!(row.len(), SMALL_BILLS.columns.len());
}

#[test]
fn every_put_holds_every_column_of_its_table() {
    let t = "2026-10-01T00:00:00Z";
    let events = [
        (
            STATION_MONTH_AGGREGATE_TYPE,
            json!({"type": "DiffRecorded", "station_id": 1, "month": "202601", "diff_id": 2, "partner_bill_id": null, "recorded_at": t}),
        ),
        (
            PARTNER_BILL_AGGREGATE_TYPE,
            json!({"type": "PartnerBillRecorded", "partner_bill_id": 1, "partner_account_id": 2, "month": "202601", "pre_rent_minor": null, "deduction_minor": 0, "recorded_at": t}),
        ),
        (
            PARTNER_BILL_AGGREGATE_TYPE,
            json!({"type": "PartnerBillRepushed", "partner_bill_id": 1, "repushed_at": t}),
        ),
        (
            REFERENCE_AGGREGATE_TYPE,
            json!({"type": "CustomerAccountRecorded", "account_id": 1, "income_start_month": "202601", "current_payable_cutoff_month": null, "recorded_at": t}),
        ),
        (
            REFERENCE_AGGREGATE_TYPE,
            json!({"type": "PartnerAccountRecorded", "partner_account_id": 1, "partner_org_id": 2, "platform_station_id": null, "recorded_at": t}),
        ),
        (
            REFERENCE_AGGREGATE_TYPE,
            json!({"type": "PartnerProfileNotConfigured", "partner_org_id": 1, "recorded_at": t}),
        ),
        (
            REFERENCE_AGGREGATE_TYPE,
            json!({"type": "StationFactsRecorded", "station_id": 1, "record_way": "NATURAL_PERSON", "share_rule": {"rent_pay_method": "MONTHLY", "change_type": null, "latest_generated_bill_month": "202601"}, "recorded_at": t}),
        ),
        (
            REFERENCE_AGGREGATE_TYPE,
            json!({"type": "AccountRouteSet", "route": "PLATFORM", "recorded_at": t}),
        ),
        (
            REFERENCE_AGGREGATE_TYPE,
            json!({"type": "OpeningPaidBalanceRecorded", "opening_id": 1, "small_station_id": 2, "platform_station_id": null, "partner_org_id": 3, "opening_paid_minor": 4, "updated_at": t}),
        ),
        (
            REFERENCE_AGGREGATE_TYPE,
            json!({"type": "OpeningDeductionRecorded", "opening_id": 1, "partner_account_id": 2, "effective": true, "amount_minor": 4, "updated_at": t}),
        ),
        (
            PAYMENT_ORDER_AGGREGATE_TYPE,
            json!({"type": "PaymentOrderCreated", "order_id": 1, "treasury": false, "actor": "a", "created_at": t}),
        ),
        (
            PAYMENT_ORDER_AGGREGATE_TYPE,
            json!({"type": "LineAdded", "order_id": 1, "line_id": 2, "station_id": 3, "month": "202601", "kind": "UNQUALIFIED", "planned_amount_minor": 0, "at": t}),
        ),
        (
            BILL_LOCK_AGGREGATE_TYPE,
            json!({"type": "BillLockReserved", "lock_id": 1, "station_id": 2, "month": "202601", "order_id": 3, "line_id": 4, "publish_version": 1, "submit_round": 1, "at": t}),
        ),
        (
            PAYMENT_RESULT_AGGREGATE_TYPE,
            json!({"type": "PaymentResultRecorded", "result_id": 1, "order_id": null, "line_id": null, "small_station_id": 2, "platform_station_id": null, "partner_org_id": null, "month": "202601", "status": "PAY_FAIL", "kind": "OTHER", "source": "FAIL_FALLBACK", "amount_minor": 0, "paid_at": null, "fail_reason": "x", "trigger_source": "MANUAL", "recorded_at": t}),
        ),
    ];
    for (aggregate_type, payload) in events {
        for op in folded(aggregate_type, payload.clone()).ops {
            if let FactOp::Put { table, row } = &op {
                let names: Vec<&str> = row.iter().map(|(n, _)| *n).collect();
                let columns: Vec<&str> = table.columns.iter().map(|c| c.name).collect();
                assert_eq!(names, columns, "{payload}");
            }
        }
    }
}

#[test]
fn publishing_gives_the_master_and_every_listed_line_the_publish_identity() {
    let f = folded(
        PAYMENT_ORDER_AGGREGATE_TYPE,
        json!({"type": "PaymentOrderPublished", "order_id": 5, "publish_version": 2,
               "submit_round": 3, "line_ids": [51, 52], "at": "2026-10-01T00:00:00Z"}),
    );
    assert_eq!(f.touches, vec![Touch::Order(5)]);
    assert_eq!(f.ops.len(), 3);
    let (table, master) = cells(&f.ops[0]);
    assert_eq!(table, "bill_fact_orders");
    assert_eq!(master["published"], Cell::Int(1));
    assert_eq!(master["publish_version"], Cell::Int(2));
    let (table, line) = cells(&f.ops[2]);
    assert_eq!(table, "bill_fact_lines");
    assert_eq!(line["line_id"], Cell::Int(52));
    assert_eq!(line["submit_round"], Cell::Int(3));
}

#[test]
fn a_voided_result_touches_the_result_and_only_flags_its_row() {
    let f = folded(
        PAYMENT_RESULT_AGGREGATE_TYPE,
        json!({"type": "PaymentResultVoided", "result_id": 9, "trigger_source": "PAYMENT_IMPORT_DELETE",
               "voided_at": "2026-10-01T00:00:00Z"}),
    );
    assert_eq!(f.touches, vec![Touch::Result(9)]);
    let (_, row) = cells(&f.ops[0]);
    assert_eq!(row["voided"], Cell::Int(1));
    assert!(matches!(f.ops[0], FactOp::Set { .. }));
}

#[test]
fn other_aggregates_fold_to_nothing_and_bad_payloads_stop_the_projector() {
    assert!(fold("wallet", &json!({"type": "WalletOpened"}))
        .expect("ignored")
        .is_none());
    let bad_month = fold(
        STATION_MONTH_AGGREGATE_TYPE,
        &json!({"type": "DiffRecorded", "station_id": 1, "month": "202613", "diff_id": 2,
                "partner_bill_id": null, "recorded_at": "2026-10-01T00:00:00Z"}),
    );
    assert!(bad_month.is_err());
    let unknown = fold(
        BILL_LOCK_AGGREGATE_TYPE,
        &json!({"type": "BillLockExploded", "lock_id": 1}),
    );
    assert!(unknown
        .expect_err("no such event")
        .contains("does not decode"));
}

fn facts() -> BillFacts {
    let at = parse_time("2026-10-01T00:00:00Z").expect("time");
    BillFacts {
        station_month: sm("100:202609"),
        small_bill: Some(SmallBill {
            id: 1009,
            account_id: 101,
            rent_minor: 1000,
        }),
        small_account: Some(CustomerAccount {
            id: 101,
            income_start_month: YearMonth::parse("202601").expect("month"),
            current_payable_cutoff_month: Some(YearMonth::parse("202612").expect("month")),
        }),
        account_small_bills: vec![SmallBillRent {
            account_id: 101,
            month: YearMonth::parse("202609").expect("month"),
            rent_minor: 1000,
        }],
        partner_bill: Some(PartnerBill {
            id: 401,
            partner_account_id: 201,
            pre_rent_minor: Some(600),
            deduction_minor: 0,
            last_unqualified_order_id: None,
            last_unqualified_at: None,
            repushed_at: None,
        }),
        diff: Some(Diff {
            id: 501,
            partner_bill_id: Some(401),
        }),
        partner_accounts: vec![PartnerAccount {
            id: 201,
            partner_org_id: 301,
            platform_station_id: Some(100),
        }],
        account_partner_bills: vec![],
        partner_profile: PartnerProfile::Unrecorded,
        station: StationFacts::default(),
        account_route: AccountRoute::Default,
        opening_paid_balances: vec![],
        opening_deductions: vec![],
        orders: vec![],
        lines: vec![],
        locks: vec![],
        results: vec![PaymentResult {
            id: 9,
            small_station_id: 100,
            platform_station_id: None,
            partner_org_id: Some(301),
            month: YearMonth::parse("202609").expect("month"),
            status: ResultStatus::Success,
            kind: ResultType::NormalPayment,
            source: ResultSource::OfflineImport,
            amount_minor: 250,
            paid_at: Some(at),
            voided: false,
        }],
        unqualified_conclusions: vec![],
    }
}

#[test]
fn a_failed_decision_is_a_finding_with_null_payment_columns() {
    let p = project(&facts(), None, Some("2026-10-01T00:00:00.000000Z"));
    let finding: MemRow = p.finding.expect("a finding").into_iter().collect();
    assert_eq!(finding["code"], Cell::text("PARTNER_PROFILE_UNRECORDED"));
    assert!(p.decision.is_none());
    assert!(p.partner_bill.is_none(), "the partner row stays cleared");
    let small: MemRow = p.customer_bill.expect("small row").into_iter().collect();
    assert_eq!(small["id"], Cell::Int(1009));
    assert_eq!(small["payment_status"], Cell::Null);
    assert_eq!(small["payment_status_update_time"], Cell::Null);
}

#[test]
fn a_decision_fills_the_three_rows_and_names_its_rules() {
    let mut f = facts();
    f.partner_profile = PartnerProfile::Configured {
        payment_cycle: PaymentCycle::Monthly,
        config_version: 1,
    };
    let t = "2026-10-01T00:00:00.000000Z";
    let p = project(&f, None, Some(t));
    let decision: MemRow = p.decision.expect("decided").into_iter().collect();
    assert_eq!(decision["decided_by"], Cell::text("R8 partial payment"));
    assert_eq!(decision["payment_status"], Cell::Int(60));
    let (id, partner) = p.partner_bill.expect("partner columns");
    assert_eq!(id, 401);
    let partner: MemRow = partner.into_iter().collect();
    assert_eq!(partner["decided_station_month"], Cell::text("100:202609"));
    assert_eq!(partner["current_payment_amount"], Cell::Int(350));
    assert_eq!(partner["payment_status_update_time"], Cell::text(t));
    let diff: MemRow = p.difference.expect("diff row").into_iter().collect();
    assert_eq!(diff["paid_amount"], Cell::Int(250));
    assert_eq!(diff["partner_account_id"], Cell::Int(201));
}

#[test]
fn an_inconsistent_link_is_a_finding_even_when_the_facts_would_decide() {
    let mut f = facts();
    f.partner_profile = PartnerProfile::NotConfigured;
    let linked_twice = Finding::PartnerBillLinkedTwice {
        station_month: f.station_month,
        partner_bill_id: 401,
        others: vec![sm("110:202609")],
    };
    let p = project(&f, Some(linked_twice), None);
    let finding: MemRow = p.finding.expect("a finding").into_iter().collect();
    assert_eq!(finding["code"], Cell::text("PARTNER_BILL_LINKED_TWICE"));
    let Cell::Text(message) = &finding["message"] else {
        panic!("message")
    };
    assert!(message.contains("110:202609"), "{message}");
}
