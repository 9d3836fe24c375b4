//! Service order tests: given these events, when this command, then these events or
//! this error (cqrs-es `TestFramework`), with R-CB-2's late callback after the close,
//! second payments, their refunds, and the load-time `check`.

use super::*;
use crate::money::Currency;
use crate::refusal::{Refusal, RefusalKind};
use crate::services::UserId;
use chrono::{DateTime, TimeZone, Utc};
use cqrs_es::test::TestFramework;

fn order_test() -> TestFramework<ServiceOrder> {
    TestFramework::<ServiceOrder>::with(())
}

fn t(minute: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 5, 1, 10, minute, 0).unwrap()
}

fn cny() -> Currency {
    Currency::parse("CNY").unwrap()
}

fn user(n: i64) -> UserId {
    UserId::parse(n).unwrap()
}

/// A cash recharge: 6.00 CNY by WeChat for 100 candy, closing unpaid at 10:15.
fn recharge_order() -> CreateOrder {
    CreateOrder {
        order_no: "O1".into(),
        user_id: user(42),
        business: OrderBusiness::Recharge { candy: 10_000 },
        method: PaymentMethod::Wechat,
        amount: 600,
        currency: Some(cny()),
        created_at: t(0),
        timeout_at: t(15),
    }
}

/// A booking paid with 50 candy (its hold).
fn booking_order() -> CreateOrder {
    CreateOrder {
        order_no: "O2".into(),
        user_id: user(42),
        business: OrderBusiness::Booking {
            booking_no: "B1".into(),
            artist_id: user(7),
        },
        method: PaymentMethod::Candy,
        amount: 5_000,
        currency: None,
        created_at: t(0),
        timeout_at: t(15),
    }
}

fn subscription_order() -> CreateOrder {
    CreateOrder {
        order_no: "O3".into(),
        user_id: user(42),
        business: OrderBusiness::Subscription {
            artist_id: user(7),
            days: 30,
        },
        method: PaymentMethod::Alipay,
        amount: 3_000,
        currency: Some(cny()),
        created_at: t(0),
        timeout_at: t(15),
    }
}

fn payment(tx: &str) -> Payment {
    Payment {
        transaction_no: tx.into(),
        method: PaymentMethod::Wechat,
        account_id: "wx-openid-42".into(),
        amount_minor: 600,
        currency: "CNY".into(),
        paid_at: t(5),
    }
}

fn pay(tx: &str, minute: u32) -> OrderCommand {
    OrderCommand::RecordPayment {
        payment: payment(tx),
        at: t(minute),
    }
}

fn pay_with(p: Payment) -> OrderCommand {
    OrderCommand::RecordPayment {
        payment: p,
        at: t(6),
    }
}

fn created() -> OrderEvent {
    OrderEvent::OrderCreated(recharge_order())
}

fn started() -> OrderEvent {
    OrderEvent::PaymentStarted { at: t(1) }
}

fn paid(tx: &str) -> OrderEvent {
    OrderEvent::OrderPaid {
        business: "RECHARGE".into(),
        payment: payment(tx),
    }
}

fn late(tx: &str, reason: LateReason) -> OrderEvent {
    OrderEvent::LatePaymentReceived {
        payment: payment(tx),
        reason,
    }
}

fn delivered() -> OrderEvent {
    OrderEvent::OrderDelivered {
        business: "RECHARGE".into(),
        at: t(7),
    }
}

fn closed() -> OrderEvent {
    OrderEvent::OrderClosed {
        business: "RECHARGE".into(),
        at: t(15),
    }
}

fn record_refund(refund_no: &str, tx: &str, amount_minor: i64) -> OrderCommand {
    OrderCommand::RecordRefund {
        refund_no: refund_no.into(),
        transaction_no: tx.into(),
        amount_minor,
        at: t(30),
    }
}

/// A refund of a payment owed back; `order_refunded`: the order itself ends refunded
/// (it was closed).
fn order_refunded(refund_no: &str, tx: &str, order_refunded: bool) -> OrderEvent {
    OrderEvent::OrderRefunded {
        refund_no: refund_no.into(),
        transaction_no: tx.into(),
        method: PaymentMethod::Wechat,
        amount_minor: 600,
        order_refunded,
        at: t(30),
    }
}

/// Load a stream the way the store does: `check` before every `apply`.
fn fold(events: &[OrderEvent]) -> ServiceOrder {
    let mut o = ServiceOrder::default();
    for e in events {
        o.check(e).unwrap();
        o.apply(e.clone());
    }
    o
}

fn with(events: &[OrderEvent], more: OrderEvent) -> Vec<OrderEvent> {
    let mut all = events.to_vec();
    all.push(more);
    all
}

// ---------------------------------------------------------------------------------
// Create
// ---------------------------------------------------------------------------------

#[test]
fn create_refuses_each_broken_field_rule_naming_its_field() {
    type Edit = fn(&mut CreateOrder);
    let cases: Vec<(CreateOrder, Edit, &str)> = vec![
        (recharge_order(), |o| o.order_no = String::new(), "order_no"),
        (recharge_order(), |o| o.order_no = "O 1".into(), "order_no"),
        (
            recharge_order(),
            |o| o.order_no = "O".repeat(65),
            "order_no",
        ),
        (
            recharge_order(),
            |o| o.timeout_at = o.created_at,
            "timeout_at",
        ),
        (recharge_order(), |o| o.amount = 0, "amount"),
        (recharge_order(), |o| o.amount = -600, "amount"),
        (
            booking_order(),
            |o| o.amount = CANDY_AMOUNT_MAX + 1,
            "amount",
        ),
        (recharge_order(), |o| o.currency = None, "currency"),
        (booking_order(), |o| o.currency = Some(cny()), "currency"),
        (
            recharge_order(),
            |o| {
                o.method = PaymentMethod::Candy;
                o.currency = None;
            },
            "method",
        ),
        (
            subscription_order(),
            |o| {
                o.method = PaymentMethod::Candy;
                o.currency = None;
            },
            "method",
        ),
        (
            booking_order(),
            |o| {
                o.method = PaymentMethod::Alipay;
                o.currency = Some(cny());
            },
            "method",
        ),
        (
            recharge_order(),
            |o| o.business = OrderBusiness::Recharge { candy: 0 },
            "candy",
        ),
        (
            recharge_order(),
            |o| {
                o.business = OrderBusiness::Recharge {
                    candy: CANDY_AMOUNT_MAX + 1,
                }
            },
            "candy",
        ),
        (
            subscription_order(),
            |o| {
                o.business = OrderBusiness::Subscription {
                    artist_id: user(7),
                    days: 0,
                }
            },
            "days",
        ),
        (
            subscription_order(),
            |o| {
                o.business = OrderBusiness::Subscription {
                    artist_id: user(7),
                    days: SUBSCRIPTION_DAYS_MAX + 1,
                }
            },
            "days",
        ),
        (
            booking_order(),
            |o| {
                o.business = OrderBusiness::Booking {
                    booking_no: String::new(),
                    artist_id: user(7),
                }
            },
            "booking_no",
        ),
        (
            booking_order(),
            |o| {
                o.business = OrderBusiness::Booking {
                    booking_no: "B/1".into(),
                    artist_id: user(7),
                }
            },
            "booking_no",
        ),
    ];
    for (mut cmd, edit, field) in cases {
        edit(&mut cmd);
        let err = order_test()
            .given_no_previous_events()
            .when(OrderCommand::Create(cmd.clone()))
            .inspect_result()
            .unwrap_err();
        assert_eq!(
            (err.code(), err.field(), err.kind()),
            ("INVALID_FIELD", Some(field), RefusalKind::Invalid),
            "{cmd:?}: {err}"
        );
    }
    // The limits themselves are accepted.
    let mut longest = subscription_order();
    longest.order_no = "O".repeat(NO_CHARS_MAX);
    longest.business = OrderBusiness::Subscription {
        artist_id: user(7),
        days: SUBSCRIPTION_DAYS_MAX,
    };
    order_test()
        .given_no_previous_events()
        .when(OrderCommand::Create(longest.clone()))
        .then_expect_events(vec![OrderEvent::OrderCreated(longest)]);
}

#[test]
fn a_cash_order_is_created_unpaid() {
    order_test()
        .given_no_previous_events()
        .when(OrderCommand::Create(recharge_order()))
        .then_expect_events(vec![created()]);
    let o = fold(&[created()]);
    assert_eq!((o.status, o.status.code()), (OrderStatus::Created, 0));
    assert!(o.payment.is_none());
}

#[test]
fn a_candy_booking_order_is_created_paid_by_its_hold() {
    let expected_payment = Payment {
        transaction_no: "candy-O2".into(),
        method: PaymentMethod::Candy,
        account_id: "42".into(),
        amount_minor: 5_000,
        currency: "ZZC".into(),
        paid_at: t(0),
    };
    let events = vec![
        OrderEvent::OrderCreated(booking_order()),
        OrderEvent::OrderPaid {
            business: "BOOKING".into(),
            payment: expected_payment.clone(),
        },
    ];
    order_test()
        .given_no_previous_events()
        .when(OrderCommand::Create(booking_order()))
        .then_expect_events(events.clone());
    let o = fold(&events);
    assert_eq!(o.status, OrderStatus::Paid);
    assert_eq!(o.payment, Some(expected_payment));
    // Its payment is the hold, posted on the candy account: no ledger key here.
    assert_eq!(ServiceOrder::ledger_ref(&events[1]), None);
    // It is never closed by the timeout scan, and it is delivered once.
    order_test()
        .given(events.clone())
        .when(OrderCommand::Close { at: t(20) })
        .then_expect_events(vec![]);
    order_test()
        .given(events)
        .when(OrderCommand::Deliver { at: t(1) })
        .then_expect_events(vec![OrderEvent::OrderDelivered {
            business: "BOOKING".into(),
            at: t(1),
        }]);
}

#[test]
fn creating_twice_is_refused_and_any_other_command_first_is_not_found() {
    assert_eq!(OrderError::AlreadyExists.code(), "ORDER_EXISTS");
    order_test()
        .given(vec![created()])
        .when(OrderCommand::Create(recharge_order()))
        .then_expect_error(OrderError::AlreadyExists);
    assert_eq!(OrderError::NotFound.kind(), RefusalKind::NotFound);
    for cmd in [
        pay("tx1", 5),
        OrderCommand::StartPayment { at: t(1) },
        OrderCommand::Deliver { at: t(1) },
        OrderCommand::Close { at: t(20) },
        record_refund("RF1", "tx1", 600),
    ] {
        order_test()
            .given_no_previous_events()
            .when(cmd)
            .then_expect_error(OrderError::NotFound);
    }
}

// ---------------------------------------------------------------------------------
// Paying
// ---------------------------------------------------------------------------------

#[test]
fn starting_payment_moves_a_cash_order_from_0_to_1_once() {
    order_test()
        .given(vec![created()])
        .when(OrderCommand::StartPayment { at: t(1) })
        .then_expect_events(vec![started()]);
    order_test()
        .given(vec![created(), started()])
        .when(OrderCommand::StartPayment { at: t(2) })
        .then_expect_events(vec![]);
    assert_eq!(fold(&[created(), started()]).status.code(), 1);
    order_test()
        .given(vec![created(), paid("tx1")])
        .when(OrderCommand::StartPayment { at: t(2) })
        .then_expect_error(OrderError::WrongStatus {
            status: OrderStatus::Paid,
            rule: "only an unpaid cash order starts paying",
        });
}

#[test]
fn a_pay_callback_moves_an_unpaid_order_from_0_or_1_to_paid() {
    for given in [vec![created()], vec![created(), started()]] {
        order_test()
            .given(given.clone())
            .when(pay("tx1", 5))
            .then_expect_events(vec![paid("tx1")]);
        let o = fold(&with(&given, paid("tx1")));
        assert_eq!((o.status, o.status.code()), (OrderStatus::Paid, 2));
        assert_eq!(o.payment, Some(payment("tx1")));
    }
    // Not yet closed by the scan, an order past its timeout is still paid.
    order_test()
        .given(vec![created()])
        .when(pay("tx1", 40))
        .then_expect_events(vec![paid("tx1")]);
}

#[test]
fn a_duplicate_callback_of_the_same_transaction_decides_nothing() {
    for given in [
        vec![created(), paid("tx1")],
        vec![created(), paid("tx1"), delivered()],
        vec![created(), closed(), late("tx1", LateReason::Closed)],
        vec![created(), paid("tx1"), late("tx2", LateReason::AlreadyPaid)],
    ] {
        let last_tx = match given.last().unwrap() {
            OrderEvent::LatePaymentReceived { payment, .. } => payment.transaction_no.clone(),
            _ => "tx1".to_owned(),
        };
        order_test()
            .given(given)
            .when(pay(&last_tx, 9))
            .then_expect_events(vec![]);
    }
}

#[test]
fn a_callback_that_does_not_match_the_order_is_refused_naming_the_field() {
    let mismatch = |field| OrderError::PaymentMismatch {
        field,
        rule: match field {
            "method" => "must be the order's payment method",
            "amount_minor" => "must equal the order's amount",
            _ => "must equal the order's currency",
        },
    };
    let cases: Vec<(Payment, &str)> = vec![
        (
            Payment {
                amount_minor: 599,
                ..payment("tx1")
            },
            "amount_minor",
        ),
        (
            Payment {
                currency: "USD".into(),
                ..payment("tx1")
            },
            "currency",
        ),
        (
            Payment {
                method: PaymentMethod::Alipay,
                ..payment("tx1")
            },
            "method",
        ),
        (
            Payment {
                method: PaymentMethod::Candy,
                ..payment("tx1")
            },
            "method",
        ),
    ];
    for (p, field) in cases {
        let err = mismatch(field);
        assert_eq!(
            (err.code(), err.field(), err.kind()),
            ("PAYMENT_MISMATCH", Some(field), RefusalKind::Invalid)
        );
        // Refused on an open order and on a closed one alike: not this order's money.
        for given in [vec![created()], vec![created(), closed()]] {
            order_test()
                .given(given)
                .when(pay_with(p.clone()))
                .then_expect_error(err.clone());
        }
    }
    // A cash callback for a candy order is a method mismatch too.
    order_test()
        .given(vec![OrderEvent::OrderCreated(booking_order())])
        .when(pay("tx1", 5))
        .then_expect_error(mismatch("method"));
    order_test()
        .given(vec![created()])
        .when(pay("tx 1", 5))
        .then_expect_error(OrderError::Invalid {
            field: "transaction_no",
            rule: "1 to 64 of A-Z a-z 0-9 _ -",
        });
}

// ---------------------------------------------------------------------------------
// Close and the late callback (R-CB-2)
// ---------------------------------------------------------------------------------

#[test]
fn an_order_closes_only_while_unpaid_and_past_its_timeout() {
    assert_eq!(
        (
            OrderError::NotTimedOut.code(),
            OrderError::NotTimedOut.kind()
        ),
        ("ORDER_NOT_TIMED_OUT", RefusalKind::Conflict)
    );
    order_test()
        .given(vec![created()])
        .when(OrderCommand::Close { at: t(14) })
        .then_expect_error(OrderError::NotTimedOut);
    for given in [vec![created()], vec![created(), started()]] {
        order_test()
            .given(given)
            .when(OrderCommand::Close { at: t(15) })
            .then_expect_events(vec![closed()]);
    }
    assert_eq!(
        fold(&[created(), closed()]).status,
        OrderStatus::Closed,
        "status 4"
    );
    // Paid, delivered or closed since the scan read it: nothing to close.
    for given in [
        vec![created(), paid("tx1")],
        vec![created(), paid("tx1"), delivered()],
        vec![created(), closed()],
    ] {
        order_test()
            .given(given)
            .when(OrderCommand::Close { at: t(20) })
            .then_expect_events(vec![]);
    }
}

#[test]
fn a_callback_after_the_close_is_a_late_payment_and_the_order_stays_closed() {
    let given = vec![created(), closed()];
    order_test()
        .given(given.clone())
        .when(pay("tx1", 16))
        .then_expect_events(vec![late("tx1", LateReason::Closed)]);
    let o = fold(&with(&given, late("tx1", LateReason::Closed)));
    assert_eq!(o.status, OrderStatus::Closed);
    assert_eq!(o.payment, None, "the order keeps no payment");
    assert_eq!(o.late.get("tx1"), Some(&payment("tx1")));
    // The closed recharge is never delivered.
    order_test()
        .given(with(&given, late("tx1", LateReason::Closed)))
        .when(OrderCommand::Deliver { at: t(17) })
        .then_expect_error(OrderError::WrongStatus {
            status: OrderStatus::Closed,
            rule: "only a paid order is delivered",
        });
}

#[test]
fn a_second_transaction_on_a_paid_order_is_owed_back() {
    for given in [
        vec![created(), paid("tx1")],
        vec![created(), paid("tx1"), delivered()],
    ] {
        order_test()
            .given(given.clone())
            .when(pay("tx2", 8))
            .then_expect_events(vec![late("tx2", LateReason::AlreadyPaid)]);
        let o = fold(&with(&given, late("tx2", LateReason::AlreadyPaid)));
        assert_eq!(o.payment, Some(payment("tx1")), "the first payment is kept");
    }
}

#[test]
fn a_callback_on_a_refunded_closed_order_is_still_late_after_its_close() {
    // Only a closed order ends refunded: it was never paid, so another transaction
    // arriving now is a late payment after the close, not a second payment.
    let given = vec![
        created(),
        closed(),
        late("tx1", LateReason::Closed),
        order_refunded("RF1", "tx1", true),
    ];
    assert_eq!(fold(&given).status, OrderStatus::Refunded);
    order_test()
        .given(given)
        .when(pay("tx2", 40))
        .then_expect_events(vec![late("tx2", LateReason::Closed)]);
}

#[test]
fn an_order_records_at_most_its_payment_limit() {
    let mut given = vec![created(), paid("tx0")];
    for n in 1..PAYMENTS_MAX {
        given.push(late(&format!("tx{n}"), LateReason::AlreadyPaid));
    }
    // The kept payment and the late ones: PAYMENTS_MAX in all.
    assert_eq!(fold(&given).late.len() + 1, PAYMENTS_MAX);
    let err = OrderError::TooManyPayments { max: PAYMENTS_MAX };
    assert_eq!(err.code(), "ORDER_PAYMENTS_LIMIT");
    order_test()
        .given(given)
        .when(pay("tx-more", 9))
        .then_expect_error(err);
}

// ---------------------------------------------------------------------------------
// Refunds of payments owed back
// ---------------------------------------------------------------------------------

#[test]
fn refunding_the_late_payment_of_a_closed_order_ends_it_refunded_once() {
    let given = vec![created(), closed(), late("tx1", LateReason::Closed)];
    order_test()
        .given(given.clone())
        .when(record_refund("RF1", "tx1", 600))
        .then_expect_events(vec![order_refunded("RF1", "tx1", true)]);
    let all = with(&given, order_refunded("RF1", "tx1", true));
    let o = fold(&all);
    assert_eq!((o.status, o.status.code()), (OrderStatus::Refunded, 6));
    assert_eq!(o.refunds.get("RF1"), Some(&("tx1".to_owned(), 600)));
    // The same refund told again decides nothing.
    order_test()
        .given(all)
        .when(record_refund("RF1", "tx1", 600))
        .then_expect_events(vec![]);
}

#[test]
fn refunding_a_second_payment_leaves_a_delivered_order_delivered() {
    let given = vec![
        created(),
        paid("tx1"),
        delivered(),
        late("tx2", LateReason::AlreadyPaid),
    ];
    order_test()
        .given(given.clone())
        .when(record_refund("RF2", "tx2", 600))
        .then_expect_events(vec![order_refunded("RF2", "tx2", false)]);
    let o = fold(&with(&given, order_refunded("RF2", "tx2", false)));
    assert_eq!(o.status, OrderStatus::Delivered);
    assert_eq!(o.payment, Some(payment("tx1")));
}

#[test]
fn a_refund_of_another_amount_or_of_a_payment_not_owed_back_is_refused() {
    let given = vec![created(), closed(), late("tx1", LateReason::Closed)];
    let err = OrderError::Invalid {
        field: "amount_minor",
        rule: "must be the whole late payment",
    };
    assert_eq!(err.field(), Some("amount_minor"));
    for amount in [599, 601] {
        order_test()
            .given(given.clone())
            .when(record_refund("RF1", "tx1", amount))
            .then_expect_error(err.clone());
    }
    let not_owed = |tx: &str| OrderError::NoSuchPayment {
        transaction_no: tx.into(),
    };
    assert_eq!(
        (not_owed("tx9").code(), not_owed("tx9").field()),
        ("PAYMENT_NOT_FOUND", Some("transaction_no"))
    );
    order_test()
        .given(given)
        .when(record_refund("RF1", "tx9", 600))
        .then_expect_error(not_owed("tx9"));
    // The payment a paid order keeps is not owed back.
    order_test()
        .given(vec![created(), paid("tx1"), delivered()])
        .when(record_refund("RF1", "tx1", 600))
        .then_expect_error(not_owed("tx1"));
}

// ---------------------------------------------------------------------------------
// Delivery
// ---------------------------------------------------------------------------------

#[test]
fn an_order_is_delivered_only_when_paid_and_once() {
    order_test()
        .given(vec![created(), paid("tx1")])
        .when(OrderCommand::Deliver { at: t(7) })
        .then_expect_events(vec![delivered()]);
    assert_eq!(
        fold(&[created(), paid("tx1"), delivered()]).status.code(),
        3
    );
    order_test()
        .given(vec![created(), paid("tx1"), delivered()])
        .when(OrderCommand::Deliver { at: t(8) })
        .then_expect_events(vec![]);
    for (given, status) in [
        (vec![created()], OrderStatus::Created),
        (vec![created(), started()], OrderStatus::Paying),
        (vec![created(), closed()], OrderStatus::Closed),
    ] {
        order_test()
            .given(given)
            .when(OrderCommand::Deliver { at: t(8) })
            .then_expect_error(OrderError::WrongStatus {
                status,
                rule: "only a paid order is delivered",
            });
    }
}

// ---------------------------------------------------------------------------------
// Load-time check, ledger keys, stored shape
// ---------------------------------------------------------------------------------

#[test]
fn check_refuses_events_that_do_not_follow_from_the_stream() {
    let fresh = ServiceOrder::default();
    assert!(fresh.check(&paid("tx1")).is_err(), "before it exists");
    let open = fold(&[created()]);
    assert!(open.check(&created()).is_err(), "created twice");
    assert!(open.check(&late("tx1", LateReason::Closed)).is_err());
    assert!(open.check(&delivered()).is_err());
    assert!(open.check(&order_refunded("RF1", "tx1", true)).is_err());
    let shut = fold(&[created(), closed()]);
    assert!(shut.check(&paid("tx1")).is_err(), "paid after close");
    assert!(shut.check(&closed()).is_err(), "closed twice");
    assert!(shut.check(&started()).is_err());
    let owed = fold(&[created(), closed(), late("tx1", LateReason::Closed)]);
    assert!(owed.check(&late("tx1", LateReason::Closed)).is_err());
    let mut wrong_amount = order_refunded("RF1", "tx1", true);
    if let OrderEvent::OrderRefunded { amount_minor, .. } = &mut wrong_amount {
        *amount_minor = 1;
    }
    assert!(owed.check(&wrong_amount).is_err());
    assert!(
        owed.check(&order_refunded("RF1", "tx1", false)).is_err(),
        "a closed order ends refunded"
    );
    let second = fold(&[created(), paid("tx1"), late("tx2", LateReason::AlreadyPaid)]);
    assert!(
        second.check(&order_refunded("RF2", "tx2", true)).is_err(),
        "a paid order keeps its status"
    );
    let refunded = fold(&[
        created(),
        closed(),
        late("tx1", LateReason::Closed),
        order_refunded("RF1", "tx1", true),
    ]);
    assert!(refunded.check(&order_refunded("RF1", "tx1", true)).is_err());
}

#[test]
fn money_events_name_their_unique_ledger_key_and_others_none() {
    let key =
        |e: &OrderEvent| ServiceOrder::ledger_ref(e).map(|r| (r.ref_type, r.ref_id, r.entry_type));
    let k = |t: &str, id: &str, entry: &str| Some((t.into(), id.into(), entry.into()));
    assert_eq!(key(&paid("tx1")), k("ORDER", "tx1", "ORDER_PAID"));
    assert_eq!(
        key(&late("tx2", LateReason::AlreadyPaid)),
        k("PAYMENT", "tx2", "LATE_PAYMENT")
    );
    assert_eq!(
        key(&order_refunded("RF1", "tx2", false)),
        k("REFUND", "RF1", "ORDER_REFUNDED")
    );
    for e in [created(), started(), delivered(), closed()] {
        assert_eq!(key(&e), None, "{}", e.name());
    }
}

#[test]
fn order_events_have_a_stable_stored_shape() {
    assert_eq!(
        serde_json::to_value(late("tx1", LateReason::Closed)).unwrap(),
        serde_json::json!({
            "type": "LatePaymentReceived", "reason": "CLOSED",
            "payment": {
                "transaction_no": "tx1", "method": "WECHAT", "account_id": "wx-openid-42",
                "amount_minor": 600, "currency": "CNY", "paid_at": "2026-05-01T10:05:00Z"
            }
        })
    );
    let back: OrderEvent =
        serde_json::from_value(serde_json::to_value(created()).unwrap()).unwrap();
    assert_eq!(back, created());
    assert_eq!(
        serde_json::to_value(created()).unwrap()["business"],
        serde_json::json!({"kind": "RECHARGE", "candy": 10_000})
    );
}
