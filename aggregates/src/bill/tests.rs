//! Bill aggregate tests: given these events, when this command, then these events or
//! this error (cqrs-es `TestFramework`, which calls `handle` → `decide`). Commands are
//! written as the JSON the API builds, so the tests also pin the wire shapes.

use super::payment_order::{transition, OrderMove, ORDER_TRANSITIONS};
use super::*;
use crate::decide::Decide;
use chrono::{DateTime, TimeZone, Utc};
use cqrs_es::test::TestFramework;
use cqrs_es::Aggregate;
use serde_json::{json, Value};

fn t() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 9, 1, 9, 0, 0).unwrap()
}

fn t2() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 9, 2, 9, 0, 0).unwrap()
}

/// A command from JSON: `kind` is its `"type"`, `body` its fields.
fn cmd<C: serde::de::DeserializeOwned>(kind: &str, body: Value) -> C {
    let mut v = body;
    v["type"] = json!(kind);
    serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{v}: {e}"))
}

fn parse_err<C: serde::de::DeserializeOwned + std::fmt::Debug>(kind: &str, body: Value) -> String {
    let mut v = body;
    v["type"] = json!(kind);
    serde_json::from_value::<C>(v).unwrap_err().to_string()
}

#[track_caller]
fn coded(err: &BillError, code: &str, field: Option<&str>, kind: RefusalKind) {
    assert_eq!(
        (err.code(), err.field(), err.kind()),
        (code, field, kind),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------
// Station-month.
// ---------------------------------------------------------------------------------

fn sm() -> TestFramework<StationMonthBills> {
    TestFramework::<StationMonthBills>::with(())
}

fn small(bill_id: i64, rent: i64) -> StationMonthCommand {
    cmd(
        "RecordSmallBill",
        json!({"station_id": 100, "month": "202609", "bill_id": bill_id, "account_id": 7,
               "rent_minor": rent, "recorded_at": t()}),
    )
}

fn small_recorded(bill_id: i64, rent: i64) -> StationMonthEvent {
    StationMonthEvent::SmallBillRecorded {
        station_id: 100,
        month: "202609".into(),
        bill_id,
        account_id: 7,
        rent_minor: rent,
        recorded_at: t(),
    }
}

fn diff(diff_id: i64, partner_bill_id: Option<i64>) -> StationMonthCommand {
    cmd(
        "RecordDiff",
        json!({"station_id": 100, "month": "202609", "diff_id": diff_id,
               "partner_bill_id": partner_bill_id, "recorded_at": t()}),
    )
}

fn diff_recorded(diff_id: i64, partner_bill_id: Option<i64>) -> StationMonthEvent {
    StationMonthEvent::DiffRecorded {
        station_id: 100,
        month: "202609".into(),
        diff_id,
        partner_bill_id,
        recorded_at: t(),
    }
}

#[test]
fn a_small_bill_is_recorded_and_changed_under_its_own_id() {
    sm().given_no_previous_events()
        .when(small(1, 1000))
        .then_expect_events(vec![small_recorded(1, 1000)]);
    sm().given(vec![small_recorded(1, 1000)])
        .when(small(1, 1200))
        .then_expect_events(vec![small_recorded(1, 1200)]);
}

#[test]
fn a_second_small_bill_for_a_station_month_is_refused() {
    let err = BillError::SmallBillAlreadyRecorded { existing: 1 };
    coded(
        &err,
        "SMALL_BILL_ALREADY_RECORDED",
        Some("bill_id"),
        RefusalKind::Conflict,
    );
    sm().given(vec![small_recorded(1, 1000)])
        .when(small(2, 1000))
        .then_expect_error(err);
}

#[test]
fn one_diff_per_station_month_with_or_without_a_partner_bill() {
    sm().given_no_previous_events()
        .when(diff(5, None))
        .then_expect_events(vec![diff_recorded(5, None)]);
    sm().given(vec![diff_recorded(5, None)])
        .when(diff(5, Some(9)))
        .then_expect_events(vec![diff_recorded(5, Some(9))]);
    let err = BillError::DiffAlreadyRecorded { existing: 5 };
    coded(
        &err,
        "DIFF_ALREADY_RECORDED",
        Some("diff_id"),
        RefusalKind::Conflict,
    );
    sm().given(vec![diff_recorded(5, None)])
        .when(diff(6, None))
        .then_expect_error(err);
}

#[test]
fn restating_a_station_month_fact_writes_nothing() {
    sm().given(vec![small_recorded(1, 1000), diff_recorded(5, Some(9))])
        .when(small(1, 1000))
        .then_expect_events(vec![]);
    sm().given(vec![small_recorded(1, 1000), diff_recorded(5, Some(9))])
        .when(diff(5, Some(9)))
        .then_expect_events(vec![]);
}

#[test]
fn a_command_for_another_station_month_is_refused() {
    let other: StationMonthCommand = cmd(
        "RecordSmallBill",
        json!({"station_id": 100, "month": "202610", "bill_id": 1, "account_id": 7,
               "rent_minor": 1, "recorded_at": t()}),
    );
    let result = sm()
        .given(vec![small_recorded(1, 1000)])
        .when(other)
        .inspect_result();
    coded(
        &result.unwrap_err(),
        "STREAM_MISMATCH",
        Some("month"),
        RefusalKind::Invalid,
    );
}

#[test]
fn station_month_inputs_are_parsed_naming_the_rule() {
    let rows = [
        (json!({"station_id": 0}), "positive integer id"),
        (json!({"month": "202613"}), "yyyymm"),
        (json!({"rent_minor": -1}), "non-negative"),
        (json!({"rent_minor": 1.5}), "invalid type"),
        (json!({"extra": 1}), "unknown field"),
    ];
    for (patch, rule) in rows {
        let mut body = json!({"station_id": 100, "month": "202609", "bill_id": 1,
            "account_id": 7, "rent_minor": 1, "recorded_at": t()});
        for (k, v) in patch.as_object().unwrap() {
            body[k] = v.clone();
        }
        let e = parse_err::<StationMonthCommand>("RecordSmallBill", body);
        assert!(e.contains(rule), "{patch}: {e}");
    }
}

// ---------------------------------------------------------------------------------
// Partner bill.
// ---------------------------------------------------------------------------------

fn pb() -> TestFramework<PartnerBill> {
    TestFramework::<PartnerBill>::with(())
}

fn partner_bill(account: i64, month: &str, pre_rent: Option<i64>) -> PartnerBillCommand {
    cmd(
        "RecordPartnerBill",
        json!({"partner_bill_id": 9, "partner_account_id": account, "month": month,
               "pre_rent_minor": pre_rent, "deduction_minor": 50, "recorded_at": t()}),
    )
}

fn partner_recorded(pre_rent: Option<i64>) -> PartnerBillEvent {
    PartnerBillEvent::PartnerBillRecorded {
        partner_bill_id: 9,
        partner_account_id: 201,
        month: "202609".into(),
        pre_rent_minor: pre_rent,
        deduction_minor: 50,
        recorded_at: t(),
    }
}

fn repush(at: DateTime<Utc>) -> PartnerBillCommand {
    cmd(
        "RepushPartnerBill",
        json!({"partner_bill_id": 9, "repushed_at": at}),
    )
}

#[test]
fn a_partner_bill_is_recorded_changed_and_restated() {
    pb().given_no_previous_events()
        .when(partner_bill(201, "202609", Some(1000)))
        .then_expect_events(vec![partner_recorded(Some(1000))]);
    pb().given(vec![partner_recorded(Some(1000))])
        .when(partner_bill(201, "202609", None))
        .then_expect_events(vec![partner_recorded(None)]);
    pb().given(vec![partner_recorded(Some(1000))])
        .when(partner_bill(201, "202609", Some(1000)))
        .then_expect_events(vec![]);
}

#[test]
fn a_partner_bill_keeps_its_account_and_month() {
    let rows = [
        (partner_bill(202, "202609", Some(1)), "partner_account_id"),
        (partner_bill(201, "202610", Some(1)), "month"),
    ];
    for (command, field) in rows {
        let err = pb()
            .given(vec![partner_recorded(Some(1000))])
            .when(command)
            .inspect_result()
            .unwrap_err();
        coded(
            &err,
            "PARTNER_BILL_IDENTITY_CHANGED",
            Some(field),
            RefusalKind::Conflict,
        );
    }
}

#[test]
fn only_a_recorded_partner_bill_is_repushed_and_a_replay_writes_nothing() {
    let err = BillError::PartnerBillNotFound(9);
    coded(
        &err,
        "PARTNER_BILL_NOT_FOUND",
        Some("partner_bill_id"),
        RefusalKind::NotFound,
    );
    pb().given_no_previous_events()
        .when(repush(t()))
        .then_expect_error(err);
    let repushed = PartnerBillEvent::PartnerBillRepushed {
        partner_bill_id: 9,
        repushed_at: t2(),
    };
    pb().given(vec![partner_recorded(Some(1))])
        .when(repush(t2()))
        .then_expect_events(vec![repushed.clone()]);
    pb().given(vec![partner_recorded(Some(1)), repushed.clone()])
        .when(repush(t2()))
        .then_expect_events(vec![]);
    let late = pb()
        .given(vec![partner_recorded(Some(1)), repushed])
        .when(repush(t()))
        .inspect_result()
        .unwrap_err();
    coded(
        &late,
        "REPUSH_OUT_OF_ORDER",
        Some("repushed_at"),
        RefusalKind::Conflict,
    );
}

#[test]
fn partner_bill_amounts_are_non_negative() {
    for field in ["pre_rent_minor", "deduction_minor"] {
        let mut body = json!({"partner_bill_id": 9, "partner_account_id": 201,
            "month": "202609", "pre_rent_minor": 1, "deduction_minor": 0, "recorded_at": t()});
        body[field] = json!(-1);
        let e = parse_err::<PartnerBillCommand>("RecordPartnerBill", body);
        assert!(e.contains("non-negative"), "{field}: {e}");
    }
}

// ---------------------------------------------------------------------------------
// Reference data.
// ---------------------------------------------------------------------------------

fn rf() -> TestFramework<Reference> {
    TestFramework::<Reference>::with(())
}

fn profile(version: i64, cycle: &str) -> ReferenceCommand {
    cmd(
        "ConfigurePartnerProfile",
        json!({"partner_org_id": 31, "payment_cycle": cycle, "config_version": version,
               "recorded_at": t()}),
    )
}

fn profiled(version: i64, cycle: &str) -> ReferenceEvent {
    ReferenceEvent::PartnerProfileConfigured {
        partner_org_id: 31,
        payment_cycle: cycle.into(),
        config_version: version,
        recorded_at: t(),
    }
}

fn not_configured() -> ReferenceEvent {
    ReferenceEvent::PartnerProfileNotConfigured {
        partner_org_id: 31,
        recorded_at: t(),
    }
}

#[test]
fn every_reference_fact_is_recorded_on_its_entity_stream() {
    let rows: Vec<(ReferenceCommand, &str, ReferenceEvent)> = vec![
        (
            cmd(
                "RecordCustomerAccount",
                json!({"account_id": 7, "income_start_month": "202601",
                "current_payable_cutoff_month": null, "recorded_at": t()}),
            ),
            "customer_account:7",
            ReferenceEvent::CustomerAccountRecorded {
                account_id: 7,
                income_start_month: "202601".into(),
                current_payable_cutoff_month: None,
                recorded_at: t(),
            },
        ),
        (
            cmd(
                "RecordPartnerAccount",
                json!({"partner_account_id": 201, "partner_org_id": 31,
                "platform_station_id": 500, "recorded_at": t()}),
            ),
            "partner_account:201",
            ReferenceEvent::PartnerAccountRecorded {
                partner_account_id: 201,
                partner_org_id: 31,
                platform_station_id: Some(500),
                recorded_at: t(),
            },
        ),
        (
            profile(1, "MONTHLY"),
            "partner_profile:31",
            profiled(1, "MONTHLY"),
        ),
        (
            cmd(
                "MarkPartnerProfileNotConfigured",
                json!({"partner_org_id": 31, "recorded_at": t()}),
            ),
            "partner_profile:31",
            not_configured(),
        ),
        (
            cmd(
                "RecordStationFacts",
                json!({"station_id": 100, "record_way": "NATURAL_PERSON",
                "share_rule": {"rent_pay_method": "QUARTERLY", "latest_generated_bill_month": "202606"},
                "recorded_at": t()}),
            ),
            "station:100",
            ReferenceEvent::StationFactsRecorded {
                station_id: 100,
                record_way: Some(RecordWayCode::NaturalPerson),
                share_rule: Some(ShareRuleFact {
                    rent_pay_method: "QUARTERLY".into(),
                    change_type: None,
                    latest_generated_bill_month: Some("202606".into()),
                }),
                recorded_at: t(),
            },
        ),
        (
            cmd(
                "SetAccountRoute",
                json!({"route": "PLATFORM", "recorded_at": t()}),
            ),
            "account_route",
            ReferenceEvent::AccountRouteSet {
                route: AccountRouteCode::Platform,
                recorded_at: t(),
            },
        ),
        (
            cmd(
                "RecordOpeningPaidBalance",
                json!({"opening_id": 3, "small_station_id": 100,
                "partner_org_id": 31, "opening_paid_minor": 0, "updated_at": t()}),
            ),
            "opening_paid:3",
            ReferenceEvent::OpeningPaidBalanceRecorded {
                opening_id: 3,
                small_station_id: 100,
                platform_station_id: None,
                partner_org_id: 31,
                opening_paid_minor: 0,
                updated_at: t(),
            },
        ),
        (
            cmd(
                "RecordOpeningDeduction",
                json!({"opening_id": 4, "partner_account_id": 201,
                "effective": true, "amount_minor": 70, "updated_at": t()}),
            ),
            "opening_deduction:4",
            ReferenceEvent::OpeningDeductionRecorded {
                opening_id: 4,
                partner_account_id: 201,
                effective: true,
                amount_minor: 70,
                updated_at: t(),
            },
        ),
    ];
    for (command, stream, event) in rows {
        assert_eq!(command.stream_id(), stream);
        assert_eq!(reference::reference_stream_id(&event), stream);
        rf().given_no_previous_events()
            .when(command.clone())
            .then_expect_events(vec![event.clone()]);
        // The same value again, at another time, is the same fact.
        let mut later = serde_json::to_value(&command).unwrap();
        for key in ["recorded_at", "updated_at"] {
            if later.get(key).is_some() {
                later[key] = json!(t2());
            }
        }
        rf().given(vec![event])
            .when(serde_json::from_value(later).unwrap())
            .then_expect_events(vec![]);
    }
}

#[test]
fn not_configured_is_recorded_explicitly_and_a_profile_may_follow_it() {
    rf().given(vec![profiled(1, "MONTHLY")])
        .when(cmd(
            "MarkPartnerProfileNotConfigured",
            json!({"partner_org_id": 31, "recorded_at": t()}),
        ))
        .then_expect_events(vec![not_configured()]);
    rf().given(vec![profiled(1, "MONTHLY"), not_configured()])
        .when(profile(2, "QUARTERLY"))
        .then_expect_events(vec![profiled(2, "QUARTERLY")]);
}

#[test]
fn a_profile_version_never_goes_back_nor_changes_its_cycle() {
    let stale = rf()
        .given(vec![profiled(3, "MONTHLY"), not_configured()])
        .when(profile(2, "MONTHLY"))
        .inspect_result()
        .unwrap_err();
    coded(
        &stale,
        "CONFIG_VERSION_STALE",
        Some("config_version"),
        RefusalKind::Conflict,
    );
    let reused = rf()
        .given(vec![profiled(3, "MONTHLY")])
        .when(profile(3, "QUARTERLY"))
        .inspect_result()
        .unwrap_err();
    coded(
        &reused,
        "CONFIG_VERSION_REUSED",
        Some("config_version"),
        RefusalKind::Conflict,
    );
}

#[test]
fn a_reference_command_for_another_entity_is_refused() {
    let err = rf()
        .given(vec![profiled(1, "MONTHLY")])
        .when(cmd(
            "RecordStationFacts",
            json!({"station_id": 100, "recorded_at": t()}),
        ))
        .inspect_result()
        .unwrap_err();
    coded(&err, "STREAM_MISMATCH", Some("id"), RefusalKind::Invalid);
}

#[test]
fn reference_inputs_are_parsed_naming_the_rule() {
    let rows = [
        (
            "ConfigurePartnerProfile",
            json!({"partner_org_id": 31, "payment_cycle": "monthly",
            "config_version": 1, "recorded_at": t()}),
            "A-Z",
        ),
        (
            "RecordOpeningPaidBalance",
            json!({"opening_id": 3, "small_station_id": 100,
            "partner_org_id": 31, "opening_paid_minor": -5, "updated_at": t()}),
            "non-negative",
        ),
        (
            "RecordCustomerAccount",
            json!({"account_id": 7, "income_start_month": "2026-01",
            "recorded_at": t()}),
            "yyyymm",
        ),
        (
            "SetAccountRoute",
            json!({"route": "SIDEWAYS", "recorded_at": t()}),
            "unknown variant",
        ),
    ];
    for (kind, body, rule) in rows {
        let e = parse_err::<ReferenceCommand>(kind, body);
        assert!(e.contains(rule), "{kind}: {e}");
    }
}

// ---------------------------------------------------------------------------------
// Payment orders.
// ---------------------------------------------------------------------------------

fn po() -> TestFramework<PaymentOrder> {
    TestFramework::<PaymentOrder>::with(())
}

fn create(treasury: bool) -> PaymentOrderCommand {
    cmd(
        "CreatePaymentOrder",
        json!({"order_id": 20, "treasury": treasury, "actor": "ops", "created_at": t()}),
    )
}

fn created() -> PaymentOrderEvent {
    PaymentOrderEvent::PaymentOrderCreated {
        order_id: 20,
        treasury: true,
        actor: "ops".into(),
        created_at: t(),
    }
}

fn add(line_id: i64, station_id: i64, kind: &str, planned: i64) -> PaymentOrderCommand {
    cmd(
        "AddLine",
        json!({"order_id": 20, "line_id": line_id, "station_id": station_id, "month": "202609",
               "kind": kind, "planned_amount_minor": planned, "at": t()}),
    )
}

fn added(line_id: i64, station_id: i64, kind: LineKindCode, planned: i64) -> PaymentOrderEvent {
    PaymentOrderEvent::LineAdded {
        order_id: 20,
        line_id,
        station_id,
        month: "202609".into(),
        kind,
        planned_amount_minor: planned,
        at: t(),
    }
}

fn action(kind: &str) -> PaymentOrderCommand {
    match kind {
        "PublishPaymentOrder" => cmd(kind, json!({"order_id": 20, "at": t()})),
        "SubmitPaymentOrder" | "ApprovePaymentOrder" => {
            cmd(kind, json!({"order_id": 20, "actor": "ops", "at": t()}))
        }
        _ => cmd(
            kind,
            json!({"order_id": 20, "actor": "ops", "reason": "checked", "at": t()}),
        ),
    }
}

fn submitted(round: i64) -> PaymentOrderEvent {
    PaymentOrderEvent::PaymentOrderSubmitted {
        order_id: 20,
        submit_round: round,
        actor: "ops".into(),
        at: t(),
    }
}

fn published(version: i64, round: i64, lines: Vec<i64>) -> PaymentOrderEvent {
    PaymentOrderEvent::PaymentOrderPublished {
        order_id: 20,
        publish_version: version,
        submit_round: round,
        line_ids: lines,
        at: t(),
    }
}

fn approved(planned: Vec<(i64, i64)>) -> PaymentOrderEvent {
    PaymentOrderEvent::PaymentOrderApproved {
        order_id: 20,
        planned: planned
            .into_iter()
            .map(|(line_id, planned_amount_minor)| PlannedAmount {
                line_id,
                planned_amount_minor,
            })
            .collect(),
        actor: "ops".into(),
        at: t(),
    }
}

fn rejected() -> PaymentOrderEvent {
    PaymentOrderEvent::PaymentOrderRejected {
        order_id: 20,
        actor: "ops".into(),
        reason: "checked".into(),
        at: t(),
    }
}

fn voided() -> PaymentOrderEvent {
    PaymentOrderEvent::PaymentOrderVoided {
        order_id: 20,
        actor: "ops".into(),
        reason: "checked".into(),
        at: t(),
    }
}

fn no_need_pay() -> PaymentOrderEvent {
    PaymentOrderEvent::PaymentOrderMarkedNoNeedPay {
        order_id: 20,
        actor: "ops".into(),
        reason: "checked".into(),
        at: t(),
    }
}

fn adjusted(line_id: i64, adjustment: i64) -> PaymentOrderEvent {
    PaymentOrderEvent::LineAdjusted {
        order_id: 20,
        line_id,
        manual_adjustment_minor: adjustment,
        actor: "ops".into(),
        reason: "rounding".into(),
        at: t(),
    }
}

fn adjust(line_id: i64, adjustment: i64) -> PaymentOrderCommand {
    cmd(
        "AdjustLine",
        json!({"order_id": 20, "line_id": line_id, "manual_adjustment_minor": adjustment,
               "actor": "ops", "reason": "rounding", "at": t()}),
    )
}

/// A created order with a payable line 1 (station 100, planned 1000) and an
/// unqualified line 2 (station 101).
fn drafted() -> Vec<PaymentOrderEvent> {
    vec![
        created(),
        added(1, 100, LineKindCode::Payable, 1000),
        added(2, 101, LineKindCode::Unqualified, 0),
    ]
}

fn in_review() -> Vec<PaymentOrderEvent> {
    let mut e = drafted();
    e.extend([submitted(1), published(1, 1, vec![1, 2])]);
    e
}

fn review_rejected() -> Vec<PaymentOrderEvent> {
    let mut e = in_review();
    e.push(rejected());
    e
}

fn waiting_to_pay() -> Vec<PaymentOrderEvent> {
    let mut e = in_review();
    e.push(approved(vec![(1, 1000)]));
    e
}

fn paid() -> Vec<PaymentOrderEvent> {
    let mut e = waiting_to_pay();
    e.push(PaymentOrderEvent::PaymentOrderStatusReconciled {
        order_id: 20,
        from: OrderStatusCode::WaitPay,
        to: OrderStatusCode::Paid,
        publish_version: 1,
        submit_round: 1,
        trigger_source: TriggerSource::TreasuryResultWriteback,
        at: t(),
    });
    e
}

fn with(mut given: Vec<PaymentOrderEvent>, more: PaymentOrderEvent) -> Vec<PaymentOrderEvent> {
    given.push(more);
    given
}

#[test]
fn an_order_is_created_once() {
    po().given_no_previous_events()
        .when(create(true))
        .then_expect_events(vec![created()]);
    po().given(vec![created()])
        .when(create(true))
        .then_expect_events(vec![]);
    let err = po()
        .given(vec![created()])
        .when(create(false))
        .inspect_result()
        .unwrap_err();
    coded(
        &err,
        "ORDER_ALREADY_CREATED",
        Some("treasury"),
        RefusalKind::Conflict,
    );
    let err = po()
        .given_no_previous_events()
        .when(action("SubmitPaymentOrder"))
        .inspect_result()
        .unwrap_err();
    coded(
        &err,
        "ORDER_NOT_FOUND",
        Some("order_id"),
        RefusalKind::NotFound,
    );
}

#[test]
fn submit_starts_a_round_and_publishes_the_live_lines_under_its_identity() {
    po().given(drafted())
        .when(action("SubmitPaymentOrder"))
        .then_expect_events(vec![submitted(1), published(1, 1, vec![1, 2])]);
}

#[test]
fn approval_freezes_planned_plus_adjustment_of_every_live_payable_line() {
    let mut given = drafted();
    given.extend([
        added(3, 102, LineKindCode::Payable, 500),
        adjusted(3, -120),
        added(4, 103, LineKindCode::Payable, 700),
        PaymentOrderEvent::LineRemoved {
            order_id: 20,
            line_id: 4,
            at: t(),
        },
        submitted(1),
        published(1, 1, vec![1, 2, 3]),
    ]);
    po().given(given)
        .when(action("ApprovePaymentOrder"))
        .then_expect_events(vec![approved(vec![(1, 1000), (3, 380)])]);
}

#[test]
fn a_rejected_order_is_edited_republished_and_resubmitted_in_a_new_round() {
    let edited = with(review_rejected(), adjusted(1, 10));
    po().given(edited.clone())
        .when(action("PublishPaymentOrder"))
        .then_expect_events(vec![published(2, 1, vec![1, 2])]);
    po().given(edited)
        .when(action("SubmitPaymentOrder"))
        .then_expect_events(vec![submitted(2), published(2, 2, vec![1, 2])]);
}

#[test]
fn publish_writes_nothing_when_the_live_lines_already_carry_the_current_identity() {
    let mut given = drafted();
    given.push(published(1, 0, vec![1, 2]));
    po().given(given.clone())
        .when(action("PublishPaymentOrder"))
        .then_expect_events(vec![]);
    po().given(with(given, added(3, 102, LineKindCode::Payable, 5)))
        .when(action("PublishPaymentOrder"))
        .then_expect_events(vec![published(2, 0, vec![1, 2, 3])]);
}

#[test]
fn an_order_without_live_lines_is_neither_published_nor_submitted() {
    for kind in ["PublishPaymentOrder", "SubmitPaymentOrder"] {
        po().given(vec![created()])
            .when(action(kind))
            .then_expect_error(BillError::OrderHasNoLines);
    }
}

/// The transition table, row by row: every (status, move) pair is either a row of
/// `ORDER_TRANSITIONS`, a replay of the move that led there (nothing written), or
/// refused as `ILLEGAL_TRANSITION`.
#[test]
fn the_master_status_moves_only_along_the_transition_table() {
    use OrderStatusCode::*;
    let states: Vec<(OrderStatusCode, Vec<PaymentOrderEvent>)> = vec![
        (Draft, drafted()),
        (InReview, in_review()),
        (ReviewRejected, review_rejected()),
        (WaitPay, waiting_to_pay()),
        (Paid, paid()),
        (Void, with(drafted(), voided())),
        (NoNeedPay, with(drafted(), no_need_pay())),
    ];
    let moves = [
        (OrderMove::Submit, "SubmitPaymentOrder", InReview),
        (OrderMove::Approve, "ApprovePaymentOrder", WaitPay),
        (OrderMove::Reject, "RejectPaymentOrder", ReviewRejected),
        (OrderMove::Void, "VoidPaymentOrder", Void),
        (
            OrderMove::MarkNoNeedPay,
            "MarkPaymentOrderNoNeedPay",
            NoNeedPay,
        ),
    ];
    let mut legal = 0;
    for (status, given) in &states {
        for (mv, kind, target) in moves {
            let result = po()
                .given(given.clone())
                .when(action(kind))
                .inspect_result();
            match transition(*status, mv) {
                Some(to) => {
                    legal += 1;
                    assert_eq!(to, target);
                    let events = result.unwrap_or_else(|e| panic!("{status:?} {kind}: {e}"));
                    let mut order = PaymentOrder::default();
                    for e in given.iter().chain(&events) {
                        order.apply(e.clone());
                    }
                    assert_eq!(order.status, Some(target), "{status:?} {kind}");
                }
                None if *status == target => {
                    assert_eq!(result, Ok(vec![]), "{status:?} {kind} is a replay");
                }
                None => {
                    let err = result.unwrap_err();
                    assert_eq!(
                        err,
                        BillError::IllegalTransition {
                            from: *status,
                            action: mv.name()
                        },
                        "{status:?} {kind}"
                    );
                    coded(&err, "ILLEGAL_TRANSITION", None, RefusalKind::Conflict);
                }
            }
        }
    }
    assert_eq!(legal, ORDER_TRANSITIONS.len());
}

#[test]
fn lines_change_only_before_review() {
    use OrderStatusCode::*;
    let rows = [
        (InReview, in_review()),
        (WaitPay, waiting_to_pay()),
        (Paid, paid()),
        (Void, with(drafted(), voided())),
    ];
    for (status, given) in rows {
        for command in [
            add(9, 109, "PAYABLE", 5),
            cmd(
                "RemoveLine",
                json!({"order_id": 20, "line_id": 1, "at": t()}),
            ),
            adjust(1, 5),
        ] {
            po().given(given.clone())
                .when(command)
                .then_expect_error(BillError::OrderNotEditable(status));
        }
    }
    let err = BillError::OrderNotEditable(InReview);
    coded(&err, "ORDER_NOT_EDITABLE", None, RefusalKind::Conflict);
}

#[test]
fn line_rules_name_the_line() {
    let rows: Vec<(Vec<PaymentOrderEvent>, PaymentOrderCommand, BillError)> = vec![
        (
            drafted(),
            add(1, 100, "PAYABLE", 999),
            BillError::LineAlreadyAdded(1),
        ),
        (
            drafted(),
            add(5, 100, "PAYABLE", 1),
            BillError::StationMonthAlreadyOnOrder { existing: 1 },
        ),
        (
            with(
                drafted(),
                PaymentOrderEvent::LineRemoved {
                    order_id: 20,
                    line_id: 1,
                    at: t(),
                },
            ),
            add(1, 100, "PAYABLE", 1000),
            BillError::LineRemoved(1),
        ),
        (drafted(), adjust(7, 5), BillError::LineNotFound(7)),
        (
            drafted(),
            adjust(2, 5),
            BillError::LineKindMismatch {
                line_id: 2,
                actual: LineKindCode::Unqualified,
                needed: "PAYABLE",
            },
        ),
        (
            drafted(),
            adjust(1, -1001),
            BillError::AdjustedAmountInvalid {
                planned: 1000,
                adjustment: -1001,
            },
        ),
        (
            drafted(),
            adjust(1, i64::MAX),
            BillError::AdjustedAmountInvalid {
                planned: 1000,
                adjustment: i64::MAX,
            },
        ),
    ];
    for (given, command, err) in rows {
        po().given(given).when(command).then_expect_error(err);
    }
    coded(
        &BillError::LineNotFound(7),
        "LINE_NOT_FOUND",
        Some("line_id"),
        RefusalKind::NotFound,
    );
    coded(
        &BillError::AdjustedAmountInvalid {
            planned: 1,
            adjustment: -2,
        },
        "ADJUSTED_AMOUNT_INVALID",
        Some("manual_adjustment_minor"),
        RefusalKind::Invalid,
    );
}

#[test]
fn a_negative_adjustment_is_legal_and_line_replays_write_nothing() {
    po().given(drafted())
        .when(adjust(1, -1000))
        .then_expect_events(vec![adjusted(1, -1000)]);
    po().given(with(drafted(), adjusted(1, -10)))
        .when(adjust(1, -10))
        .then_expect_events(vec![]);
    po().given(in_review())
        .when(add(1, 100, "PAYABLE", 1000))
        .then_expect_events(vec![]);
    let removed = PaymentOrderEvent::LineRemoved {
        order_id: 20,
        line_id: 1,
        at: t(),
    };
    po().given(drafted())
        .when(cmd(
            "RemoveLine",
            json!({"order_id": 20, "line_id": 1, "at": t()}),
        ))
        .then_expect_events(vec![removed.clone()]);
    po().given(with(drafted(), removed))
        .when(cmd(
            "RemoveLine",
            json!({"order_id": 20, "line_id": 1, "at": t()}),
        ))
        .then_expect_events(vec![]);
}

fn conclude(line_id: i64, visible: bool, reason: &str) -> PaymentOrderCommand {
    cmd(
        "ConcludeUnqualified",
        json!({"order_id": 20, "line_id": line_id, "partner_visible": visible,
               "reason": reason, "actor": "ops", "at": t()}),
    )
}

fn concluded(visible: bool, reason: &str) -> PaymentOrderEvent {
    PaymentOrderEvent::UnqualifiedConcluded {
        order_id: 20,
        line_id: 2,
        partner_visible: visible,
        reason: reason.into(),
        actor: "ops".into(),
        at: t(),
    }
}

fn withdraw() -> PaymentOrderCommand {
    cmd(
        "WithdrawUnqualified",
        json!({"order_id": 20, "line_id": 2, "actor": "ops", "reason": "re-checked", "at": t()}),
    )
}

#[test]
fn unqualified_conclusions_are_concluded_withdrawn_and_concluded_again() {
    po().given(in_review())
        .when(conclude(2, true, "pre_rent below paid"))
        .then_expect_events(vec![concluded(true, "pre_rent below paid")]);
    let given = with(in_review(), concluded(true, "pre_rent below paid"));
    po().given(given.clone())
        .when(conclude(2, true, "pre_rent below paid"))
        .then_expect_events(vec![]);
    po().given(given.clone())
        .when(conclude(2, false, "other"))
        .then_expect_error(BillError::UnqualifiedAlreadyConcluded(2));
    let withdrawn = PaymentOrderEvent::UnqualifiedWithdrawn {
        order_id: 20,
        line_id: 2,
        actor: "ops".into(),
        reason: "re-checked".into(),
        at: t(),
    };
    po().given(given.clone())
        .when(withdraw())
        .then_expect_events(vec![withdrawn.clone()]);
    let given = with(given, withdrawn);
    po().given(given.clone())
        .when(withdraw())
        .then_expect_events(vec![]);
    po().given(given)
        .when(conclude(2, false, "internal"))
        .then_expect_events(vec![concluded(false, "internal")]);
}

#[test]
fn unqualified_rules_refuse_the_wrong_line_or_state() {
    po().given(in_review())
        .when(withdraw())
        .then_expect_error(BillError::UnqualifiedNotConcluded(2));
    po().given(in_review())
        .when(conclude(1, true, "x"))
        .then_expect_error(BillError::LineKindMismatch {
            line_id: 1,
            actual: LineKindCode::Payable,
            needed: "UNQUALIFIED",
        });
    po().given(with(in_review(), voided()))
        .when(conclude(2, true, "x"))
        .then_expect_error(BillError::IllegalTransition {
            from: OrderStatusCode::Void,
            action: "conclude an unqualified line",
        });
}

fn write_result(line_id: i64, status: &str, amount: i64, station_id: i64) -> PaymentOrderCommand {
    cmd(
        "WriteLineResult",
        json!({"order_id": 20, "line_id": line_id, "result_id": 77, "station_id": station_id,
               "month": "202609", "status": status, "amount_minor": amount, "paid_at": t(),
               "trigger_source": "TREASURY_RESULT_WRITEBACK", "at": t()}),
    )
}

fn result_written(status: LineStatusCode, amount: i64) -> PaymentOrderEvent {
    PaymentOrderEvent::LineResultWritten {
        order_id: 20,
        line_id: 1,
        result_id: 77,
        line_status: status,
        paid_amount_minor: amount,
        paid_at: Some(t()),
        fail_reason: None,
        trigger_source: TriggerSource::TreasuryResultWriteback,
        at: t(),
    }
}

#[test]
fn a_result_written_to_a_line_sets_its_status_against_the_frozen_plan() {
    let rows = [
        ("PAY_SUCCESS", 1000, LineStatusCode::Paid),
        ("PAY_SUCCESS", 400, LineStatusCode::PartiallyPaid),
        ("PAY_FAIL", 0, LineStatusCode::Failed),
        ("PAYING", 0, LineStatusCode::Unpaid),
    ];
    for (status, amount, line_status) in rows {
        po().given(waiting_to_pay())
            .when(write_result(1, status, amount, 100))
            .then_expect_events(vec![result_written(line_status, amount)]);
    }
    po().given(with(
        waiting_to_pay(),
        result_written(LineStatusCode::Paid, 1000),
    ))
    .when(write_result(1, "PAY_SUCCESS", 1000, 100))
    .then_expect_events(vec![]);
}

#[test]
fn a_result_is_written_only_to_a_live_payable_line_of_its_station_month() {
    po().given(waiting_to_pay())
        .when(write_result(9, "PAY_SUCCESS", 1, 100))
        .then_expect_error(BillError::LineNotFound(9));
    let err = po()
        .given(waiting_to_pay())
        .when(write_result(1, "PAY_SUCCESS", 1, 555))
        .inspect_result()
        .unwrap_err();
    coded(
        &err,
        "RESULT_LINE_MISMATCH",
        Some("line_id"),
        RefusalKind::Invalid,
    );
}

#[test]
fn check_refuses_order_events_that_do_not_follow() {
    let mut order = PaymentOrder::default();
    assert!(order.check(&submitted(1)).is_err(), "not created");
    for e in drafted() {
        order.apply(e);
    }
    assert!(order.check(&created()).is_err(), "created twice");
    assert!(order.check(&approved(vec![])).is_err(), "approve a draft");
    assert!(order.check(&submitted(2)).is_err(), "skips a round");
    assert!(
        order.check(&published(2, 0, vec![1])).is_err(),
        "skips a version"
    );
    assert_eq!(order.check(&submitted(1)), Ok(()));
}

// ---------------------------------------------------------------------------------
// Locks.
// ---------------------------------------------------------------------------------

fn lk() -> TestFramework<BillLocks> {
    TestFramework::<BillLocks>::with(())
}

fn reserve(lock_id: i64, line_id: i64) -> BillLockCommand {
    cmd(
        "ReserveLock",
        json!({"lock_id": lock_id, "station_id": 100, "month": "202609", "order_id": 20,
               "line_id": line_id, "publish_version": 1, "submit_round": 1, "at": t()}),
    )
}

fn reserved(lock_id: i64, line_id: i64) -> BillLockEvent {
    BillLockEvent::BillLockReserved {
        lock_id,
        station_id: 100,
        month: "202609".into(),
        order_id: 20,
        line_id,
        publish_version: 1,
        submit_round: 1,
        at: t(),
    }
}

fn lock_action(kind: &str, lock_id: i64) -> BillLockCommand {
    cmd(
        kind,
        json!({"station_id": 100, "month": "202609", "lock_id": lock_id, "at": t()}),
    )
}

fn activated(lock_id: i64) -> BillLockEvent {
    BillLockEvent::BillLockActivated { lock_id, at: t() }
}

fn released(lock_id: i64) -> BillLockEvent {
    BillLockEvent::BillLockReleased { lock_id, at: t() }
}

#[test]
fn a_lock_is_reserved_activated_and_released() {
    lk().given_no_previous_events()
        .when(reserve(1, 1))
        .then_expect_events(vec![reserved(1, 1)]);
    lk().given(vec![reserved(1, 1)])
        .when(lock_action("ActivateLock", 1))
        .then_expect_events(vec![activated(1)]);
    lk().given(vec![reserved(1, 1), activated(1)])
        .when(lock_action("ReleaseLock", 1))
        .then_expect_events(vec![released(1)]);
    lk().given(vec![reserved(1, 1)])
        .when(lock_action("ReleaseLock", 1))
        .then_expect_events(vec![released(1)]);
    lk().given(vec![reserved(1, 1), released(1)])
        .when(reserve(2, 1))
        .then_expect_events(vec![reserved(2, 1)]);
}

/// Given these lock events, when this command, then this result.
type LockRow = (
    Vec<BillLockEvent>,
    BillLockCommand,
    Result<Vec<BillLockEvent>, BillError>,
);

#[test]
fn lock_rules_table() {
    let rows: Vec<LockRow> = vec![
        // At most one live lock per station-month.
        (
            vec![reserved(1, 1)],
            reserve(2, 1),
            Err(BillError::LockHeld { live: 1 }),
        ),
        (
            vec![reserved(1, 1), activated(1)],
            reserve(2, 1),
            Err(BillError::LockHeld { live: 1 }),
        ),
        (
            vec![reserved(1, 1)],
            reserve(1, 9),
            Err(BillError::LockIdReused(1)),
        ),
        // Activate only a reserved lock; release only a live one.
        (
            vec![reserved(1, 1), released(1)],
            lock_action("ActivateLock", 1),
            Err(BillError::LockNotReserved(1)),
        ),
        (
            vec![],
            lock_action("ActivateLock", 1),
            Err(BillError::LockNotFound(1)),
        ),
        (
            vec![],
            lock_action("ReleaseLock", 1),
            Err(BillError::LockNotFound(1)),
        ),
        // Replays write nothing.
        (vec![reserved(1, 1)], reserve(1, 1), Ok(vec![])),
        (
            vec![reserved(1, 1), activated(1)],
            lock_action("ActivateLock", 1),
            Ok(vec![]),
        ),
        (
            vec![reserved(1, 1), released(1)],
            lock_action("ReleaseLock", 1),
            Ok(vec![]),
        ),
    ];
    for (given, command, expected) in rows {
        let name = command.name();
        assert_eq!(
            lk().given(given).when(command).inspect_result(),
            expected,
            "{name}"
        );
    }
    coded(
        &BillError::LockHeld { live: 1 },
        "LOCK_HELD",
        Some("lock_id"),
        RefusalKind::Conflict,
    );
    coded(
        &BillError::LockNotReserved(1),
        "LOCK_NOT_RESERVED",
        Some("lock_id"),
        RefusalKind::Conflict,
    );
    coded(
        &BillError::LockNotFound(1),
        "LOCK_NOT_FOUND",
        Some("lock_id"),
        RefusalKind::NotFound,
    );
}

#[test]
fn check_refuses_a_second_live_lock() {
    let mut locks = BillLocks::default();
    locks.apply(reserved(1, 1));
    assert!(locks.check(&reserved(2, 1)).is_err());
    assert!(locks.check(&released(2)).is_err());
    assert_eq!(locks.live().map(|(id, _)| id), Some(1));
    locks.apply(released(1));
    assert_eq!(locks.live(), None);
    assert_eq!(locks.check(&reserved(2, 1)), Ok(()));
}

// ---------------------------------------------------------------------------------
// Payment results.
// ---------------------------------------------------------------------------------

fn pr() -> TestFramework<PaymentResult> {
    TestFramework::<PaymentResult>::with(())
}

fn result_body(amount: i64) -> Value {
    json!({"result_id": 77, "order_id": 20, "line_id": 1, "small_station_id": 100,
           "month": "202609", "status": "PAY_SUCCESS", "kind": "NORMAL_PAYMENT",
           "source": "TREASURY", "amount_minor": amount, "paid_at": t(),
           "trigger_source": "TREASURY_RESULT_WRITEBACK", "recorded_at": t()})
}

fn recorded(amount: i64) -> PaymentResultEvent {
    PaymentResultEvent::PaymentResultRecorded {
        result_id: 77,
        order_id: Some(20),
        line_id: Some(1),
        small_station_id: 100,
        platform_station_id: None,
        partner_org_id: None,
        month: "202609".into(),
        status: ResultStatusCode::PaySuccess,
        kind: ResultTypeCode::NormalPayment,
        source: ResultSourceCode::Treasury,
        amount_minor: amount,
        paid_at: Some(t()),
        fail_reason: None,
        trigger_source: TriggerSource::TreasuryResultWriteback,
        recorded_at: t(),
    }
}

fn void_result() -> PaymentResultCommand {
    cmd(
        "VoidPaymentResult",
        json!({"result_id": 77, "trigger_source": "PAYMENT_IMPORT_DELETE", "voided_at": t2()}),
    )
}

#[test]
fn a_result_is_recorded_once_and_a_replay_writes_nothing() {
    pr().given_no_previous_events()
        .when(cmd("RecordPaymentResult", result_body(1000)))
        .then_expect_events(vec![recorded(1000)]);
    let mut later = result_body(1000);
    later["recorded_at"] = json!(t2());
    later["trigger_source"] = json!("PAYMENT_STATUS_ASYNC_REFRESH");
    pr().given(vec![recorded(1000)])
        .when(cmd("RecordPaymentResult", later))
        .then_expect_events(vec![]);
    let err = pr()
        .given(vec![recorded(1000)])
        .when(cmd("RecordPaymentResult", result_body(999)))
        .inspect_result()
        .unwrap_err();
    coded(
        &err,
        "RESULT_ALREADY_RECORDED",
        Some("result_id"),
        RefusalKind::Conflict,
    );
}

#[test]
fn a_result_is_voided_once() {
    let voided = PaymentResultEvent::PaymentResultVoided {
        result_id: 77,
        trigger_source: TriggerSource::PaymentImportDelete,
        voided_at: t2(),
    };
    pr().given(vec![recorded(1)])
        .when(void_result())
        .then_expect_events(vec![voided.clone()]);
    pr().given(vec![recorded(1), voided])
        .when(void_result())
        .then_expect_events(vec![]);
    let err = pr()
        .given_no_previous_events()
        .when(void_result())
        .inspect_result()
        .unwrap_err();
    coded(
        &err,
        "RESULT_NOT_FOUND",
        Some("result_id"),
        RefusalKind::NotFound,
    );
}

#[test]
fn result_inputs_are_checked_naming_the_field() {
    let mut no_paid_at = result_body(1);
    no_paid_at["paid_at"] = Value::Null;
    pr().given_no_previous_events()
        .when(cmd("RecordPaymentResult", no_paid_at))
        .then_expect_error(BillError::PaidAtRequired);
    let mut no_order = result_body(1);
    no_order["order_id"] = Value::Null;
    pr().given_no_previous_events()
        .when(cmd("RecordPaymentResult", no_order))
        .then_expect_error(BillError::OrderIdRequired);
    let mut negative = result_body(1);
    negative["amount_minor"] = json!(-1);
    let e = parse_err::<PaymentResultCommand>("RecordPaymentResult", negative);
    assert!(e.contains("non-negative"), "{e}");
}

#[test]
fn only_normal_treasury_and_fallback_results_of_a_line_are_written_back() {
    assert!(payment_result::writes_back_to_line(&recorded(1)));
    let with = |f: &dyn Fn(&mut PaymentResultEvent)| {
        let mut e = recorded(1);
        f(&mut e);
        payment_result::writes_back_to_line(&e)
    };
    assert!(with(
        &|e| if let PaymentResultEvent::PaymentResultRecorded { source, .. } = e {
            *source = ResultSourceCode::FailFallback
        }
    ));
    assert!(!with(
        &|e| if let PaymentResultEvent::PaymentResultRecorded { source, .. } = e {
            *source = ResultSourceCode::OfflineImport
        }
    ));
    assert!(!with(
        &|e| if let PaymentResultEvent::PaymentResultRecorded { kind, .. } = e {
            *kind = ResultTypeCode::Other
        }
    ));
    assert!(!with(
        &|e| if let PaymentResultEvent::PaymentResultRecorded { line_id, .. } = e {
            *line_id = None
        }
    ));
}

#[test]
fn bill_aggregates_use_the_contract_stream_types() {
    assert_eq!(StationMonthBills::TYPE, STATION_MONTH_AGGREGATE_TYPE);
    assert_eq!(PartnerBill::TYPE, PARTNER_BILL_AGGREGATE_TYPE);
    assert_eq!(Reference::TYPE, REFERENCE_AGGREGATE_TYPE);
    assert_eq!(PaymentOrder::TYPE, PAYMENT_ORDER_AGGREGATE_TYPE);
    assert_eq!(BillLocks::TYPE, BILL_LOCK_AGGREGATE_TYPE);
    assert_eq!(PaymentResult::TYPE, PAYMENT_RESULT_AGGREGATE_TYPE);
}
