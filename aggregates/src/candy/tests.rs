//! Candy account tests: given these events, when this command, then these events or
//! this error (cqrs-es `TestFramework`, which calls `handle` → `decide` and applies
//! every event it writes), the load-time `check` against tampered streams, and a long
//! run of mixed commands that never takes a bucket below zero.

use super::*;
use crate::refusal::{Refusal, RefusalKind};
use cqrs_es::test::TestFramework;

const FAN: i64 = 42;
const ARTIST: i64 = 7;

fn candy_test() -> TestFramework<CandyAccount> {
    TestFramework::<CandyAccount>::with(())
}

fn user(n: i64) -> UserId {
    UserId::parse(n).unwrap()
}

fn after(balance: i64, held: i64) -> CandyAfter {
    CandyAfter { balance, held }
}

fn opened() -> CandyEvent {
    CandyEvent::CandyAccountOpened { user_id: user(FAN) }
}

fn credit(order_no: &str, candy: i64) -> CandyCommand {
    CandyCommand::Credit {
        user_id: user(FAN),
        source: CreditSource::Recharge,
        order_no: order_no.to_owned(),
        candy,
    }
}

fn credited(order_no: &str, candy: i64, balance: i64, held: i64) -> CandyEvent {
    CandyEvent::CandyCredited {
        source: CreditSource::Recharge,
        order_no: order_no.to_owned(),
        candy,
        after: after(balance, held),
    }
}

fn hold(booking_no: &str, candy: i64) -> CandyCommand {
    CandyCommand::PlaceHold {
        user_id: user(FAN),
        booking_no: booking_no.to_owned(),
        candy,
    }
}

fn held(booking_no: &str, candy: i64, balance: i64, held: i64) -> CandyEvent {
    CandyEvent::HoldPlaced {
        booking_no: booking_no.to_owned(),
        candy,
        after: after(balance, held),
    }
}

fn settle(booking_no: &str) -> CandyCommand {
    CandyCommand::SettleHold {
        booking_no: booking_no.to_owned(),
        artist_id: user(ARTIST),
        reason: SettleReason::CallIncome,
    }
}

fn settled(booking_no: &str, candy: i64, balance: i64, held: i64) -> CandyEvent {
    CandyEvent::HoldSettled {
        booking_no: booking_no.to_owned(),
        artist_id: user(ARTIST),
        reason: SettleReason::CallIncome,
        candy,
        after: after(balance, held),
    }
}

fn forfeit(booking_no: &str) -> CandyCommand {
    CandyCommand::ForfeitHold {
        booking_no: booking_no.to_owned(),
        reason: "MODERATION".to_owned(),
    }
}

fn forfeited(booking_no: &str, candy: i64, balance: i64, held: i64) -> CandyEvent {
    CandyEvent::HoldForfeited {
        booking_no: booking_no.to_owned(),
        reason: "MODERATION".to_owned(),
        candy,
        after: after(balance, held),
    }
}

fn refund(booking_no: &str) -> CandyCommand {
    CandyCommand::RefundHold {
        booking_no: booking_no.to_owned(),
        refund_no: "RF1".to_owned(),
    }
}

fn refunded(booking_no: &str, candy: i64, balance: i64, held: i64) -> CandyEvent {
    CandyEvent::HoldRefunded {
        booking_no: booking_no.to_owned(),
        refund_no: "RF1".to_owned(),
        candy,
        after: after(balance, held),
    }
}

/// 10 000 candy units credited, then booking B1 holds 3 000 of them.
fn with_open_hold() -> Vec<CandyEvent> {
    vec![
        opened(),
        credited("R1", 10_000, 10_000, 0),
        held("B1", 3_000, 7_000, 3_000),
    ]
}

/// Load a stream the way the store does: `check` before every `apply`.
fn fold(events: &[CandyEvent]) -> CandyAccount {
    let mut a = CandyAccount::default();
    for e in events {
        a.check(e).unwrap();
        a.apply(e.clone());
    }
    a
}

#[test]
fn a_first_credit_opens_the_account_and_issues_the_candy() {
    candy_test()
        .given_no_previous_events()
        .when(credit("R1", 10_000))
        .then_expect_events(vec![opened(), credited("R1", 10_000, 10_000, 0)]);
    // A second order adds to the balance without opening again.
    candy_test()
        .given(vec![opened(), credited("R1", 10_000, 10_000, 0)])
        .when(credit("R2", 600))
        .then_expect_events(vec![credited("R2", 600, 10_600, 0)]);
}

#[test]
fn a_credit_is_once_per_order_and_another_amount_under_the_order_is_refused() {
    let given = vec![opened(), credited("R1", 10_000, 10_000, 0)];
    candy_test()
        .given(given.clone())
        .when(credit("R1", 10_000))
        .then_expect_events(vec![]);
    let err = CandyError::CreditMismatch {
        order_no: "R1".into(),
    };
    assert_eq!(
        (err.code(), err.field()),
        ("CREDIT_MISMATCH", Some("candy"))
    );
    candy_test()
        .given(given)
        .when(credit("R1", 9_999))
        .then_expect_error(err);
}

#[test]
fn a_credit_or_hold_of_no_candy_or_too_much_is_refused() {
    let err = CandyError::InvalidAmount {
        max: CANDY_AMOUNT_MAX,
    };
    assert_eq!(
        (err.code(), err.field(), err.kind()),
        ("INVALID_CANDY_AMOUNT", Some("candy"), RefusalKind::Invalid)
    );
    for candy in [0, -1, CANDY_AMOUNT_MAX + 1] {
        candy_test()
            .given_no_previous_events()
            .when(credit("R1", candy))
            .then_expect_error(err.clone());
        candy_test()
            .given(vec![opened(), credited("R1", 10_000, 10_000, 0)])
            .when(hold("B1", candy))
            .then_expect_error(err.clone());
    }
    candy_test()
        .given_no_previous_events()
        .when(credit("R1", CANDY_AMOUNT_MAX))
        .then_expect_events(vec![
            opened(),
            credited("R1", CANDY_AMOUNT_MAX, CANDY_AMOUNT_MAX, 0),
        ]);
}

#[test]
fn a_command_naming_another_user_is_refused() {
    let err = CandyError::WrongUser {
        given: user(43),
        owner: user(FAN),
    };
    assert_eq!(
        (err.code(), err.field()),
        ("CANDY_ACCOUNT_MISMATCH", Some("user_id"))
    );
    let mut other_credit = credit("R2", 100);
    if let CandyCommand::Credit { user_id, .. } = &mut other_credit {
        *user_id = user(43);
    }
    candy_test()
        .given(vec![opened()])
        .when(other_credit)
        .then_expect_error(err.clone());
    candy_test()
        .given(vec![opened(), credited("R1", 10_000, 10_000, 0)])
        .when(CandyCommand::PlaceHold {
            user_id: user(43),
            booking_no: "B1".into(),
            candy: 100,
        })
        .then_expect_error(err);
}

#[test]
fn a_hold_past_the_balance_is_refused_as_insufficient_candy_and_writes_nothing() {
    let err = CandyError::InsufficientCandy {
        balance: 5_000,
        requested: 5_001,
    };
    assert_eq!(
        (err.code(), err.field(), err.kind()),
        ("INSUFFICIENT_CANDY", None, RefusalKind::Conflict)
    );
    let given = vec![opened(), credited("R1", 5_000, 5_000, 0)];
    candy_test()
        .given(given.clone())
        .when(hold("B1", 5_001))
        .then_expect_error(err);
    // What is held already is not spendable again.
    let mut busy = given.clone();
    busy.push(held("B1", 4_000, 1_000, 4_000));
    candy_test()
        .given(busy)
        .when(hold("B2", 1_001))
        .then_expect_error(CandyError::InsufficientCandy {
            balance: 1_000,
            requested: 1_001,
        });
    // On an account never credited the refusal writes no opening either.
    let fresh = CandyAccount::default();
    assert_eq!(
        fresh.decide(hold("B1", 1)),
        Err(CandyError::InsufficientCandy {
            balance: 0,
            requested: 1
        })
    );
    // Exactly the balance fits.
    candy_test()
        .given(given)
        .when(hold("B1", 5_000))
        .then_expect_events(vec![held("B1", 5_000, 0, 5_000)]);
}

#[test]
fn a_hold_is_once_per_booking_even_after_it_closed() {
    candy_test()
        .given(with_open_hold())
        .when(hold("B1", 3_000))
        .then_expect_events(vec![]);
    let err = CandyError::HoldMismatch {
        booking_no: "B1".into(),
    };
    assert_eq!(
        (err.code(), err.field()),
        ("HOLD_MISMATCH", Some("booking_no"))
    );
    candy_test()
        .given(with_open_hold())
        .when(hold("B1", 3_001))
        .then_expect_error(err);
    // A replayed hold of a booking whose hold was refunded never holds again.
    let mut closed = with_open_hold();
    closed.push(refunded("B1", 3_000, 10_000, 0));
    candy_test()
        .given(closed)
        .when(hold("B1", 3_000))
        .then_expect_events(vec![]);
}

#[test]
fn settle_forfeit_and_refund_each_close_an_open_hold() {
    candy_test()
        .given(with_open_hold())
        .when(settle("B1"))
        .then_expect_events(vec![settled("B1", 3_000, 7_000, 0)]);
    candy_test()
        .given(with_open_hold())
        .when(forfeit("B1"))
        .then_expect_events(vec![forfeited("B1", 3_000, 7_000, 0)]);
    candy_test()
        .given(with_open_hold())
        .when(refund("B1"))
        .then_expect_events(vec![refunded("B1", 3_000, 10_000, 0)]);
}

#[test]
fn a_hold_closes_exactly_once_and_a_second_close_of_any_kind_decides_nothing() {
    let closings = [
        settled("B1", 3_000, 7_000, 0),
        forfeited("B1", 3_000, 7_000, 0),
        refunded("B1", 3_000, 10_000, 0),
    ];
    for closing in closings {
        for again in [settle("B1"), forfeit("B1"), refund("B1")] {
            let mut given = with_open_hold();
            given.push(closing.clone());
            candy_test()
                .given(given)
                .when(again)
                .then_expect_events(vec![]);
        }
    }
}

#[test]
fn closing_a_hold_the_account_never_placed_is_refused() {
    let err = CandyError::HoldNotFound {
        booking_no: "B9".into(),
    };
    assert_eq!(
        (err.code(), err.field(), err.kind()),
        ("HOLD_NOT_FOUND", Some("booking_no"), RefusalKind::NotFound)
    );
    for close in [settle("B9"), forfeit("B9"), refund("B9")] {
        candy_test()
            .given(with_open_hold())
            .when(close.clone())
            .then_expect_error(err.clone());
        candy_test()
            .given_no_previous_events()
            .when(close)
            .then_expect_error(err.clone());
    }
}

#[test]
fn check_refuses_a_stored_event_whose_after_does_not_follow() {
    let a = fold(&with_open_hold());
    assert_eq!((a.balance, a.held), (7_000, 3_000));
    let tampered = [
        // Balance inflated by 1.
        credited("R2", 100, 7_101, 3_000),
        // Held not raised with the hold.
        held("B2", 1_000, 6_000, 3_000),
        // A hold that overdraws the balance, its after consistent with its amount.
        held("B2", 8_000, -1_000, 11_000),
        // Settled, but the candy stays held.
        settled("B1", 3_000, 7_000, 3_000),
        // Refunded without giving the balance back.
        refunded("B1", 3_000, 7_000, 0),
        // Closed for another amount than the hold's.
        forfeited("B1", 2_000, 7_000, 1_000),
        // A movement of nothing.
        credited("R2", 0, 7_000, 3_000),
    ];
    for e in tampered {
        let err = a.check(&e).unwrap_err();
        assert!(err.0.starts_with(e.name()), "{err}");
    }
    // The same events, told right, pass.
    assert_eq!(a.check(&credited("R2", 100, 7_100, 3_000)), Ok(()));
    assert_eq!(a.check(&held("B2", 1_000, 6_000, 4_000)), Ok(()));
    assert_eq!(a.check(&settled("B1", 3_000, 7_000, 0)), Ok(()));
}

#[test]
fn check_refuses_a_double_close_a_double_credit_a_double_hold_and_an_unopened_account() {
    let mut events = with_open_hold();
    events.push(settled("B1", 3_000, 7_000, 0));
    let a = fold(&events);
    assert!(a.check(&settled("B1", 3_000, 7_000, 0)).is_err());
    assert!(a.check(&forfeited("B1", 3_000, 7_000, 0)).is_err());
    assert!(a.check(&refunded("B1", 3_000, 10_000, 0)).is_err());
    assert!(a.check(&credited("R1", 10_000, 17_000, 0)).is_err());
    assert!(a.check(&held("B1", 3_000, 4_000, 3_000)).is_err());
    assert!(a.check(&opened()).is_err(), "opened twice");
    let unopened = CandyAccount::default();
    assert!(unopened.check(&credited("R1", 100, 100, 0)).is_err());
    assert!(unopened.check(&settled("B1", 1, 0, 0)).is_err());
}

#[test]
fn balances_never_go_negative_over_a_long_run_of_mixed_commands() {
    // A small deterministic generator: no extra dependency, the same run every time.
    let mut seed: u64 = 0x5eed_0000_0000_0001;
    let mut next = |n: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % n
    };
    let mut a = CandyAccount::default();
    let (mut issued, mut paid_out) = (0i64, 0i64);
    let (mut refused, mut written) = (0, 0);
    for step in 0..2_000 {
        let booking = format!("B{}", next(60));
        let cmd = match next(6) {
            0 => credit(&format!("R{step}"), 1 + next(5_000) as i64),
            1 | 2 => hold(&booking, 1 + next(4_000) as i64),
            3 => settle(&booking),
            4 => forfeit(&booking),
            _ => refund(&booking),
        };
        match a.decide(cmd) {
            Err(_) => refused += 1,
            Ok(events) => {
                for e in events {
                    a.check(&e).unwrap();
                    match &e {
                        CandyEvent::CandyCredited { candy, .. } => issued += candy,
                        CandyEvent::HoldSettled { candy, .. }
                        | CandyEvent::HoldForfeited { candy, .. } => paid_out += candy,
                        _ => {}
                    }
                    a.apply(e);
                    written += 1;
                }
            }
        }
        assert!(a.balance >= 0 && a.held >= 0, "step {step}: {a:?}");
        // Conservation: what was issued is spendable, held, or gone to its payee.
        assert_eq!(a.balance + a.held, issued - paid_out, "step {step}");
        let open: i64 = a.holds.values().filter(|h| h.open).map(|h| h.candy).sum();
        assert_eq!(a.held, open, "step {step}");
    }
    assert!(refused > 100 && written > 100, "{refused} {written}");
}

#[test]
fn every_movement_names_its_unique_ledger_key() {
    let key =
        |e: &CandyEvent| CandyAccount::ledger_ref(e).map(|r| (r.ref_type, r.ref_id, r.entry_type));
    let k = |t: &str, id: &str, entry: &str| Some((t.into(), id.into(), entry.into()));
    assert_eq!(key(&opened()), None);
    assert_eq!(
        key(&credited("R1", 1, 1, 0)),
        k("RECHARGE", "R1", "CANDY_CREDITED")
    );
    assert_eq!(key(&held("B1", 1, 0, 1)), k("BOOKING", "B1", "HOLD_PLACED"));
    assert_eq!(
        key(&settled("B1", 1, 0, 0)),
        k("BOOKING", "B1", "HOLD_SETTLED")
    );
    assert_eq!(
        key(&forfeited("B1", 1, 0, 0)),
        k("BOOKING", "B1", "HOLD_FORFEITED")
    );
    assert_eq!(
        key(&refunded("B1", 1, 1, 0)),
        k("BOOKING", "B1", "HOLD_REFUNDED")
    );
}

#[test]
fn candy_events_have_a_stable_stored_shape() {
    assert_eq!(
        serde_json::to_value(settled("B1", 3_000, 7_000, 0)).unwrap(),
        serde_json::json!({
            "type": "HoldSettled", "booking_no": "B1", "artist_id": 7,
            "reason": "CALL_INCOME", "candy": 3_000,
            "after": {"balance": 7_000, "held": 0}
        })
    );
    let back: CandyEvent =
        serde_json::from_value(serde_json::to_value(credited("R1", 5, 5, 0)).unwrap()).unwrap();
    assert_eq!(back, credited("R1", 5, 5, 0));
}
