//! Issue 14 item 4 at the aggregates: id claims (F2, F12), the partner-bill link rule
//! (F13) and the lock's hold (F14), given/when/then.

use super::claim::{CLAIM_LEDGER_ENTRY_TYPE, CLAIM_LEDGER_REF_TYPE};
use super::lock::{check_held_line, check_hold, LockHold};
use super::*;
use crate::decide::Decide;
use chrono::{DateTime, TimeZone, Utc};
use cqrs_es::test::TestFramework;
use serde_json::json;

fn t() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 9, 1, 9, 0, 0).unwrap()
}

fn claims() -> TestFramework<BillIdClaim> {
    TestFramework::<BillIdClaim>::with(())
}

fn claim(kind: ClaimKind, holder: &str) -> ClaimCommand {
    ClaimCommand::Claim {
        kind,
        id: 7,
        holder: holder.into(),
        at: t(),
    }
}

fn claimed(kind: ClaimKind, holder: &str) -> ClaimEvent {
    ClaimEvent::IdClaimed {
        kind,
        id: 7,
        holder: holder.into(),
        at: t(),
    }
}

fn released(kind: ClaimKind, holder: &str) -> ClaimEvent {
    ClaimEvent::IdReleased {
        kind,
        id: 7,
        holder: holder.into(),
        at: t(),
    }
}

#[test]
fn f2_a_bill_id_is_claimed_once_and_refused_to_another_station_month() {
    claims()
        .given_no_previous_events()
        .when(claim(ClaimKind::SmallBill, "100:202609"))
        .then_expect_events(vec![claimed(ClaimKind::SmallBill, "100:202609")]);
    claims()
        .given(vec![claimed(ClaimKind::SmallBill, "100:202609")])
        .when(claim(ClaimKind::SmallBill, "100:202609"))
        .then_expect_events(vec![]);
    let err = claims()
        .given(vec![claimed(ClaimKind::SmallBill, "100:202609")])
        .when(claim(ClaimKind::SmallBill, "200:202609"))
        .inspect_result()
        .unwrap_err();
    assert_eq!(
        (err.code(), err.field(), err.kind()),
        ("BILL_ID_TAKEN", Some("bill_id"), RefusalKind::Conflict),
        "{err}"
    );
    assert!(err.to_string().contains("100:202609"), "{err}");
}

#[test]
fn f2_each_kind_of_taken_id_has_its_own_code_and_field() {
    for (kind, code, field) in [
        (ClaimKind::Diff, "DIFF_ID_TAKEN", "diff_id"),
        (ClaimKind::Line, "LINE_ID_TAKEN", "line_id"),
        (ClaimKind::Lock, "LOCK_ID_TAKEN", "lock_id"),
        (
            ClaimKind::PartnerBillLink,
            "PARTNER_BILL_ALREADY_LINKED",
            "partner_bill_id",
        ),
    ] {
        let err = claims()
            .given(vec![claimed(kind, "a")])
            .when(claim(kind, "b"))
            .inspect_result()
            .unwrap_err();
        assert_eq!((err.code(), err.field()), (code, Some(field)), "{err}");
    }
}

#[test]
fn f2_permanent_claims_carry_a_unique_ledger_reference_and_links_do_not() {
    let r = BillIdClaim::ledger_ref(&claimed(ClaimKind::SmallBill, "100:202609")).unwrap();
    assert_eq!(
        (
            r.ref_type.as_str(),
            r.ref_id.as_str(),
            r.entry_type.as_str()
        ),
        (
            CLAIM_LEDGER_REF_TYPE,
            "SMALL_BILL:7",
            CLAIM_LEDGER_ENTRY_TYPE
        )
    );
    assert_eq!(
        ClaimKind::parse_stream_id(&r.ref_id),
        Some((ClaimKind::SmallBill, 7))
    );
    assert_eq!(
        BillIdClaim::ledger_ref(&claimed(ClaimKind::PartnerBillLink, "x")),
        None
    );
}

#[test]
fn f12_a_partner_bill_link_is_released_by_its_holder_only_and_then_free() {
    let link = ClaimKind::PartnerBillLink;
    let release = |holder: &str| ClaimCommand::Release {
        kind: link,
        id: 7,
        holder: holder.into(),
        at: t(),
    };
    claims()
        .given(vec![claimed(link, "100:202609")])
        .when(release("200:202609"))
        .then_expect_events(vec![]);
    claims()
        .given(vec![claimed(link, "100:202609")])
        .when(release("100:202609"))
        .then_expect_events(vec![released(link, "100:202609")]);
    claims()
        .given(vec![
            claimed(link, "100:202609"),
            released(link, "100:202609"),
        ])
        .when(claim(link, "200:202609"))
        .then_expect_events(vec![claimed(link, "200:202609")]);
    let err = claims()
        .given(vec![claimed(ClaimKind::SmallBill, "100:202609")])
        .when(ClaimCommand::Release {
            kind: ClaimKind::SmallBill,
            id: 7,
            holder: "100:202609".into(),
            at: t(),
        })
        .inspect_result()
        .unwrap_err();
    assert_eq!(err.code(), "CLAIM_PERMANENT");
}

#[test]
fn f2_a_claim_event_that_does_not_follow_is_an_invariant_violation() {
    let mut state = BillIdClaim::default();
    cqrs_es::Aggregate::apply(&mut state, claimed(ClaimKind::Line, "20"));
    assert!(state.check(&claimed(ClaimKind::Line, "21")).is_err());
    assert!(state.check(&released(ClaimKind::Line, "20")).is_err());
}

fn partner_bill(month: &str) -> PartnerBill {
    let mut bill = PartnerBill::default();
    cqrs_es::Aggregate::apply(
        &mut bill,
        PartnerBillEvent::PartnerBillRecorded {
            partner_bill_id: 9,
            partner_account_id: 1,
            month: month.into(),
            pre_rent_minor: Some(100),
            deduction_minor: 0,
            recorded_at: t(),
        },
    );
    bill
}

#[test]
fn f13_a_diff_links_only_a_recorded_partner_bill_of_its_own_month() {
    let m = |s: &str| YearMonth::parse_bill_month(s).unwrap();
    assert_eq!(partner_bill("202609").linkable_by(9, m("202609")), Ok(()));
    let err = partner_bill("202608")
        .linkable_by(9, m("202609"))
        .unwrap_err();
    assert_eq!(
        (err.code(), err.field(), err.kind()),
        (
            "PARTNER_BILL_MONTH_MISMATCH",
            Some("partner_bill_id"),
            RefusalKind::Invalid
        ),
        "{err}"
    );
    let err = PartnerBill::default()
        .linkable_by(9, m("202609"))
        .unwrap_err();
    assert_eq!(err.code(), "PARTNER_BILL_UNRECORDED");
}

/// Order 20 with line 1 of 100:202609, published (v1) and submitted (v2, round 1).
fn order() -> PaymentOrder {
    let mut order = PaymentOrder::default();
    let cmds = [
        json!({"type": "CreatePaymentOrder", "order_id": 20, "treasury": true,
               "actor": "a", "created_at": t()}),
        json!({"type": "AddLine", "order_id": 20, "line_id": 1, "station_id": 100,
               "month": "202609", "kind": "PAYABLE", "planned_amount_minor": 5, "at": t()}),
        json!({"type": "PublishPaymentOrder", "order_id": 20, "at": t()}),
        json!({"type": "SubmitPaymentOrder", "order_id": 20, "actor": "a", "at": t()}),
    ];
    for c in cmds {
        let c: PaymentOrderCommand = serde_json::from_value(c).unwrap();
        for e in order.decide(c).unwrap() {
            cqrs_es::Aggregate::apply(&mut order, e);
        }
    }
    order
}

fn reserve(station_id: i64, line_id: i64, publish_version: i64, submit_round: i64) -> ReserveLock {
    serde_json::from_value(
        json!({"lock_id": 1, "station_id": station_id, "month": "202609",
        "order_id": 20, "line_id": line_id, "publish_version": publish_version,
        "submit_round": submit_round, "at": t()}),
    )
    .unwrap()
}

#[test]
fn f14_a_lock_holds_a_live_line_of_an_existing_order_at_its_current_publication() {
    let order = order();
    let (v, r) = (order.publish_version, order.submit_round);
    assert_eq!(check_hold(&reserve(100, 1, v, r), &order), Ok(()));
    for (cmd, on, code, field) in [
        (
            reserve(100, 1, v, r),
            PaymentOrder::default(),
            "LOCK_ORDER_NOT_FOUND",
            "order_id",
        ),
        (
            reserve(100, 2, v, r),
            order.clone(),
            "LOCK_LINE_NOT_FOUND",
            "line_id",
        ),
        (
            reserve(101, 1, v, r),
            order.clone(),
            "LOCK_LINE_NOT_FOUND",
            "line_id",
        ),
        (
            reserve(100, 1, v + 1, r),
            order.clone(),
            "LOCK_PUBLISH_MISMATCH",
            "publish_version",
        ),
        (
            reserve(100, 1, v, r + 1),
            order.clone(),
            "LOCK_PUBLISH_MISMATCH",
            "submit_round",
        ),
    ] {
        let err = check_hold(&cmd, &on).unwrap_err();
        assert_eq!(
            (err.code(), err.field(), err.kind()),
            (code, Some(field), RefusalKind::Invalid),
            "{err}"
        );
    }
}

/// `order()` after more commands (each decided on the order as it is).
fn order_after(cmds: &[serde_json::Value]) -> PaymentOrder {
    let mut order = order();
    for c in cmds {
        let c: PaymentOrderCommand = serde_json::from_value(c.clone()).unwrap();
        for e in order.decide(c).unwrap() {
            cqrs_es::Aggregate::apply(&mut order, e);
        }
    }
    order
}

fn void() -> serde_json::Value {
    json!({"type": "VoidPaymentOrder", "order_id": 20, "actor": "a", "reason": "r", "at": t()})
}

#[test]
fn issue32_6_a_lock_is_not_reserved_on_a_line_of_a_voided_or_no_need_pay_order() {
    let nnp = json!({"type": "MarkPaymentOrderNoNeedPay", "order_id": 20, "actor": "a",
                     "reason": "r", "at": t()});
    for closed in [order_after(&[void()]), order_after(&[nnp])] {
        let (v, r) = (closed.publish_version, closed.submit_round);
        let err = check_hold(&reserve(100, 1, v, r), &closed).unwrap_err();
        assert_eq!(
            (err.code(), err.field(), err.kind()),
            ("LOCK_ORDER_CLOSED", Some("order_id"), RefusalKind::Conflict),
            "{err}"
        );
    }
}

#[test]
fn issue32_6_a_lock_whose_line_is_gone_is_not_activated() {
    let hold = |line_id| LockHold {
        order_id: 20,
        line_id,
        publish_version: 2,
        submit_round: 1,
    };
    assert_eq!(check_held_line(5, &hold(1), &order()), Ok(()));
    let reject = json!({"type": "RejectPaymentOrder", "order_id": 20, "actor": "a",
                        "reason": "r", "at": t()});
    let remove = json!({"type": "RemoveLine", "order_id": 20, "line_id": 1, "at": t()});
    for (held, on, says) in [
        (hold(1), order_after(&[reject, remove]), "was removed"),
        (hold(1), order_after(&[void()]), "Void"),
        (hold(2), order(), "is not on the order"),
        (hold(1), PaymentOrder::default(), "does not exist"),
    ] {
        let err = check_held_line(5, &held, &on).unwrap_err();
        assert_eq!(
            (err.code(), err.field(), err.kind()),
            ("LOCK_LINE_GONE", Some("lock_id"), RefusalKind::Conflict),
            "{err}"
        );
        assert!(err.to_string().contains(says), "{err}");
    }
}

#[test]
fn issue32_6_the_live_lock_of_a_line_is_found_and_a_released_one_is_not() {
    let reserved = BillLockEvent::BillLockReserved {
        lock_id: 5,
        station_id: 100,
        month: "202609".into(),
        order_id: 20,
        line_id: 1,
        publish_version: 2,
        submit_round: 1,
        at: t(),
    };
    let mut locks = BillLocks::default();
    cqrs_es::Aggregate::apply(&mut locks, reserved);
    assert_eq!(locks.live_hold_of(20, 1), Some(5));
    assert_eq!(locks.live_hold_of(20, 2), None);
    assert_eq!(locks.live_hold_of(21, 1), None);
    cqrs_es::Aggregate::apply(
        &mut locks,
        BillLockEvent::BillLockActivated {
            lock_id: 5,
            at: t(),
        },
    );
    assert_eq!(locks.live_hold_of(20, 1), Some(5));
    cqrs_es::Aggregate::apply(
        &mut locks,
        BillLockEvent::BillLockReleased {
            lock_id: 5,
            at: t(),
        },
    );
    assert_eq!(locks.live_hold_of(20, 1), None);
}
