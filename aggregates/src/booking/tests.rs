//! Booking tests: given these events, when this command, then these events or this
//! error (cqrs-es `TestFramework`): the no-show rule branch by branch (R-HOLD-1, seed
//! 000), call finish and moderation abort, the candy command each closing event
//! requires, and those commands run against a real candy account.

use super::*;
use crate::candy::{CandyAccount, CreditSource};
use crate::refusal::{Refusal, RefusalKind};
use crate::services::UserId;
use chrono::TimeZone;
use cqrs_es::test::TestFramework;

const PRICE: i64 = 5_000;

fn booking_test() -> TestFramework<Booking> {
    TestFramework::<Booking>::with(())
}

/// Minutes from the booked start (20:00).
fn at(minutes: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 5, 1, 20, 0, 0).unwrap() + Duration::minutes(minutes)
}

fn fan() -> UserId {
    UserId::parse(42).unwrap()
}

fn artist() -> UserId {
    UserId::parse(7).unwrap()
}

fn call() -> BookCall {
    BookCall {
        booking_no: "B1".into(),
        order_no: "O1".into(),
        fan_user_id: fan(),
        artist_id: artist(),
        start_at: at(0),
        minutes: 30,
        price_candy: PRICE,
        at: at(-60),
    }
}

fn requested() -> BookingEvent {
    BookingEvent::BookingRequested(call())
}

fn activated() -> BookingEvent {
    BookingEvent::BookingActivated { at: at(-59) }
}

/// The first of the two to join (the booking moves from 1 to 2).
fn first_in(party: Party, minute: i64) -> BookingEvent {
    BookingEvent::ParticipantJoined {
        party,
        first: true,
        at: at(minute),
    }
}

/// The second of the two to join.
fn second_in(party: Party, minute: i64) -> BookingEvent {
    BookingEvent::ParticipantJoined {
        party,
        first: false,
        at: at(minute),
    }
}

fn started(minute: i64) -> BookingEvent {
    BookingEvent::CallStarted { at: at(minute) }
}

/// Activated, nobody joined yet (status 1).
fn booked() -> Vec<BookingEvent> {
    vec![requested(), activated()]
}

/// Both joined and the call started at 20:02 (status 3).
fn in_call() -> Vec<BookingEvent> {
    vec![
        requested(),
        activated(),
        first_in(Party::Fan, 1),
        second_in(Party::Artist, 2),
        started(2),
    ]
}

fn check(refund_no: &str, minute: i64) -> BookingCommand {
    BookingCommand::CheckNoShow {
        refund_no: refund_no.into(),
        at: at(minute),
    }
}

fn decided(kind: NoShow, refund: bool, minute: i64) -> BookingEvent {
    BookingEvent::NoShowDecided {
        kind,
        refund: refund.then(|| RefundDue {
            refund_no: "RF1".into(),
            candy: PRICE,
        }),
        at: at(minute),
    }
}

fn flagged() -> BookingEvent {
    BookingEvent::ModerationFlagged {
        reason: "nudity".into(),
        at: at(10),
    }
}

fn fold(events: &[BookingEvent]) -> Booking {
    let mut b = Booking::default();
    for e in events {
        b.check(e).unwrap();
        b.apply(e.clone());
    }
    b
}

fn with(events: &[BookingEvent], more: BookingEvent) -> Vec<BookingEvent> {
    let mut all = events.to_vec();
    all.push(more);
    all
}

// ---------------------------------------------------------------------------------
// Booking, activation, joining, starting
// ---------------------------------------------------------------------------------

#[test]
fn a_booking_request_is_validated_field_by_field() {
    type Edit = fn(&mut BookCall);
    let cases: [(Edit, &str); 9] = [
        (|c| c.booking_no = String::new(), "booking_no"),
        (|c| c.booking_no = "B 1".into(), "booking_no"),
        (|c| c.order_no = "O".repeat(65), "order_no"),
        (|c| c.artist_id = c.fan_user_id, "artist_id"),
        (|c| c.minutes = 0, "minutes"),
        (|c| c.minutes = CALL_MINUTES_MAX + 1, "minutes"),
        (|c| c.price_candy = 0, "price_candy"),
        (|c| c.price_candy = CANDY_AMOUNT_MAX + 1, "price_candy"),
        (|c| c.start_at = c.at, "start_at"),
    ];
    for (edit, field) in cases {
        let mut c = call();
        edit(&mut c);
        let err = booking_test()
            .given_no_previous_events()
            .when(BookingCommand::Book(c))
            .inspect_result()
            .unwrap_err();
        assert_eq!(
            (err.code(), err.field(), err.kind()),
            ("INVALID_FIELD", Some(field), RefusalKind::Invalid),
            "{err}"
        );
    }
    booking_test()
        .given_no_previous_events()
        .when(BookingCommand::Book(call()))
        .then_expect_events(vec![requested()]);
    booking_test()
        .given(vec![requested()])
        .when(BookingCommand::Book(call()))
        .then_expect_error(BookingError::AlreadyExists);
    booking_test()
        .given_no_previous_events()
        .when(BookingCommand::Activate { at: at(-59) })
        .then_expect_error(BookingError::NotFound);
}

#[test]
fn a_delivered_order_activates_the_booking_once_then_both_join_and_the_call_starts() {
    booking_test()
        .given(vec![requested()])
        .when(BookingCommand::Activate { at: at(-59) })
        .then_expect_events(vec![activated()]);
    booking_test()
        .given(booked())
        .when(BookingCommand::Activate { at: at(-58) })
        .then_expect_events(vec![]);
    // Not activated yet: nobody joins.
    booking_test()
        .given(vec![requested()])
        .when(BookingCommand::Join {
            party: Party::Fan,
            at: at(1),
        })
        .then_expect_error(BookingError::WrongStatus {
            status: BookingStatus::Pending,
            rule: "only an active booking can be joined",
        });
    booking_test()
        .given(booked())
        .when(BookingCommand::Join {
            party: Party::Fan,
            at: at(1),
        })
        .then_expect_events(vec![first_in(Party::Fan, 1)]);
    let waiting = with(&booked(), first_in(Party::Fan, 1));
    assert_eq!(fold(&waiting).status.code(), 2);
    // Joining again changes nothing; one party alone does not start the call.
    booking_test()
        .given(waiting.clone())
        .when(BookingCommand::Join {
            party: Party::Fan,
            at: at(3),
        })
        .then_expect_events(vec![]);
    booking_test()
        .given(waiting.clone())
        .when(BookingCommand::Start { at: at(2) })
        .then_expect_error(BookingError::WrongStatus {
            status: BookingStatus::Waiting,
            rule: "a call starts once both parties joined",
        });
    // The other party joins second.
    booking_test()
        .given(waiting.clone())
        .when(BookingCommand::Join {
            party: Party::Artist,
            at: at(2),
        })
        .then_expect_events(vec![second_in(Party::Artist, 2)]);
    let both = with(&waiting, second_in(Party::Artist, 2));
    booking_test()
        .given(both.clone())
        .when(BookingCommand::Start { at: at(2) })
        .then_expect_events(vec![started(2)]);
    booking_test()
        .given(in_call())
        .when(BookingCommand::Start { at: at(3) })
        .then_expect_events(vec![]);
    let b = fold(&in_call());
    assert_eq!((b.status.code(), b.started_at), (3, Some(at(2))));
    assert_eq!(b.no_show_due_at(), Some(at(NO_SHOW_AFTER_MINUTES)));
    assert_eq!(b.ends_at(), Some(at(32)));
}

// ---------------------------------------------------------------------------------
// The no-show rule, branch by branch
// ---------------------------------------------------------------------------------

#[test]
fn only_the_fan_joined_is_an_artist_no_show_with_a_full_refund() {
    let given = with(&booked(), first_in(Party::Fan, 1));
    booking_test()
        .given(given.clone())
        .when(check("RF1", 10))
        .then_expect_events(vec![decided(NoShow::Artist, true, 10)]);
    let b = fold(&with(&given, decided(NoShow::Artist, true, 10)));
    assert_eq!(b.status, BookingStatus::ArtistNoShow);
    assert_eq!(
        b.hold,
        HoldState::RefundDue {
            refund_no: "RF1".into()
        }
    );
    assert!(b.hold.is_held(), "held until the refund runs");
}

#[test]
fn only_the_artist_joined_is_a_fan_no_show_without_refund() {
    let given = with(&booked(), first_in(Party::Artist, 1));
    booking_test()
        .given(given.clone())
        .when(check("RF1", 10))
        .then_expect_events(vec![decided(NoShow::Fan, false, 10)]);
    let b = fold(&with(&given, decided(NoShow::Fan, false, 10)));
    assert_eq!(b.status, BookingStatus::FanNoShow);
    assert_eq!(b.hold, HoldState::Settled, "the hold goes to the artist");
}

#[test]
fn neither_joined_is_a_both_no_show_with_a_full_refund() {
    booking_test()
        .given(booked())
        .when(check("RF1", 10))
        .then_expect_events(vec![decided(NoShow::Both, true, 10)]);
    let b = fold(&with(&booked(), decided(NoShow::Both, true, 10)));
    assert_eq!(b.status.as_str(), "BOTH_NO_SHOW");
}

#[test]
fn both_joined_but_never_started_is_a_both_no_show_with_a_full_refund() {
    let given = vec![
        requested(),
        activated(),
        first_in(Party::Fan, 1),
        second_in(Party::Artist, 2),
    ];
    booking_test()
        .given(given)
        .when(check("RF1", 12))
        .then_expect_events(vec![decided(NoShow::Both, true, 12)]);
}

#[test]
fn a_check_before_ten_minutes_after_the_start_is_deferred_and_a_later_check_decides() {
    let given = with(&booked(), first_in(Party::Fan, 1));
    let early = at(10) - Duration::seconds(1);
    booking_test()
        .given(given.clone())
        .when(BookingCommand::CheckNoShow {
            refund_no: "RF1".into(),
            at: early,
        })
        .then_expect_events(vec![BookingEvent::NoShowCheckDeferred { at: early }]);
    let deferred = with(&given, BookingEvent::NoShowCheckDeferred { at: early });
    let b = fold(&deferred);
    assert_eq!(b.status, BookingStatus::Waiting, "still checkable (1/2)");
    assert_eq!(b.no_show_checked_at, Some(early));
    // A booking stuck in 1/2 that carries a check is checked again, and decided.
    booking_test()
        .given(deferred)
        .when(check("RF1", 15))
        .then_expect_events(vec![decided(NoShow::Artist, true, 15)]);
}

#[test]
fn a_booking_in_a_no_show_final_state_is_never_decided_again() {
    for (joined_first, kind, refund) in [
        (Some(Party::Fan), NoShow::Artist, true),
        (Some(Party::Artist), NoShow::Fan, false),
        (None, NoShow::Both, true),
    ] {
        let mut given = booked();
        given.extend(joined_first.map(|p| first_in(p, 1)));
        given.push(decided(kind, refund, 10));
        booking_test()
            .given(given)
            .when(check("RF2", 30))
            .then_expect_events(vec![]);
    }
}

#[test]
fn a_started_call_is_not_a_no_show() {
    let finished = with(
        &in_call(),
        BookingEvent::CallFinished {
            ended_at: at(32),
            duration_s: 1_800,
            income_candy: PRICE,
        },
    );
    for given in [in_call(), finished] {
        booking_test()
            .given(given)
            .when(check("RF1", 15))
            .then_expect_events(vec![]);
    }
}

#[test]
fn a_booking_still_pending_delivery_is_not_decided() {
    booking_test()
        .given(vec![requested()])
        .when(check("RF1", 15))
        .then_expect_events(vec![]);
}

#[test]
fn a_refunding_branch_needs_a_valid_refund_number() {
    booking_test()
        .given(booked())
        .when(check("RF 1", 10))
        .then_expect_error(BookingError::Invalid {
            field: "refund_no",
            rule: "1 to 64 of A-Z a-z 0-9 _ -",
        });
}

// ---------------------------------------------------------------------------------
// Finish and moderation
// ---------------------------------------------------------------------------------

#[test]
fn a_call_finishes_only_in_call_with_its_duration_and_its_income_once() {
    let end = at(32) + Duration::seconds(5);
    let finished = BookingEvent::CallFinished {
        ended_at: end,
        duration_s: 30 * 60 + 5,
        income_candy: PRICE,
    };
    booking_test()
        .given(in_call())
        .when(BookingCommand::Finish { at: end })
        .then_expect_events(vec![finished.clone()]);
    let all = with(&in_call(), finished);
    let b = fold(&all);
    assert_eq!(
        (b.status.code(), b.ended_at, b.hold.clone()),
        (4, Some(end), HoldState::Settled)
    );
    // Two finishers race: the loser is re-decided on a finished booking.
    booking_test()
        .given(all)
        .when(BookingCommand::Finish { at: at(33) })
        .then_expect_events(vec![]);
    for (given, status) in [
        (vec![requested()], BookingStatus::Pending),
        (booked(), BookingStatus::Booked),
        (
            with(&booked(), first_in(Party::Fan, 1)),
            BookingStatus::Waiting,
        ),
        (
            with(&booked(), decided(NoShow::Both, true, 10)),
            BookingStatus::BothNoShow,
        ),
    ] {
        booking_test()
            .given(given)
            .when(BookingCommand::Finish { at: at(32) })
            .then_expect_error(BookingError::WrongStatus {
                status,
                rule: "only a call in progress (status 3) finishes",
            });
    }
}

#[test]
fn a_flagged_call_is_aborted_once_as_completed_abnormally_with_its_duration() {
    booking_test()
        .given(in_call())
        .when(BookingCommand::FlagModeration {
            reason: "nudity".into(),
            at: at(10),
        })
        .then_expect_events(vec![flagged()]);
    let flagged_call = with(&in_call(), flagged());
    // Flagged already: the moderation callback told again decides nothing.
    booking_test()
        .given(flagged_call.clone())
        .when(BookingCommand::FlagModeration {
            reason: "again".into(),
            at: at(11),
        })
        .then_expect_events(vec![]);
    let aborted = BookingEvent::CallAborted {
        ended_at: at(11),
        duration_s: 9 * 60,
        reason: "nudity".into(),
    };
    booking_test()
        .given(flagged_call.clone())
        .when(BookingCommand::AbortForModeration { at: at(11) })
        .then_expect_events(vec![aborted.clone()]);
    let all = with(&flagged_call, aborted);
    let b = fold(&all);
    assert_eq!(
        (b.status, b.hold.clone()),
        (BookingStatus::Completed, HoldState::Forfeited)
    );
    // No second abort, no income after it, no flag on a finished call.
    for cmd in [
        BookingCommand::AbortForModeration { at: at(12) },
        BookingCommand::Finish { at: at(32) },
        BookingCommand::FlagModeration {
            reason: "late".into(),
            at: at(12),
        },
    ] {
        booking_test()
            .given(all.clone())
            .when(cmd)
            .then_expect_events(vec![]);
    }
}

#[test]
fn an_abort_without_a_flag_is_refused() {
    for given in [in_call(), booked()] {
        let status = fold(&given).status;
        let err = booking_test()
            .given(given)
            .when(BookingCommand::AbortForModeration { at: at(11) })
            .inspect_result()
            .unwrap_err();
        assert_eq!(
            err,
            BookingError::WrongStatus {
                status,
                rule: "only a flagged call is aborted",
            }
        );
        assert_eq!(
            (err.code(), err.kind()),
            ("BOOKING_STATUS_CONFLICT", RefusalKind::Conflict)
        );
    }
}

#[test]
fn a_moderation_reason_is_required_and_bounded() {
    for reason in [" ".to_owned(), "x".repeat(REASON_CHARS_MAX + 1)] {
        booking_test()
            .given(in_call())
            .when(BookingCommand::FlagModeration { reason, at: at(10) })
            .then_expect_error(BookingError::Invalid {
                field: "reason",
                rule: "1 to 500 characters",
            });
    }
}

// ---------------------------------------------------------------------------------
// The hold: candy effects and the refund
// ---------------------------------------------------------------------------------

#[test]
fn candy_effect_names_the_candy_command_of_each_closing_event() {
    let b = fold(&in_call());
    assert_eq!(
        b.candy_effect(&requested()),
        Some(CandyCommand::PlaceHold {
            user_id: fan(),
            booking_no: "B1".into(),
            candy: PRICE,
        })
    );
    // The request's effect needs no state: the stream is empty when it is decided.
    assert_eq!(
        Booking::default().candy_effect(&requested()),
        b.candy_effect(&requested())
    );
    let settle = |reason| {
        Some(CandyCommand::SettleHold {
            booking_no: "B1".into(),
            artist_id: artist(),
            reason,
        })
    };
    assert_eq!(
        b.candy_effect(&BookingEvent::CallFinished {
            ended_at: at(32),
            duration_s: 1_800,
            income_candy: PRICE,
        }),
        settle(SettleReason::CallIncome)
    );
    assert_eq!(
        b.candy_effect(&decided(NoShow::Fan, false, 10)),
        settle(SettleReason::FanNoShow)
    );
    assert_eq!(
        b.candy_effect(&BookingEvent::CallAborted {
            ended_at: at(11),
            duration_s: 540,
            reason: "nudity".into(),
        }),
        Some(CandyCommand::ForfeitHold {
            booking_no: "B1".into(),
            reason: MODERATION_FORFEIT.into(),
        })
    );
    assert_eq!(
        b.candy_effect(&BookingEvent::BookingHoldRefunded {
            refund_no: "RF1".into(),
            candy: PRICE,
            at: at(11),
        }),
        Some(CandyCommand::RefundHold {
            booking_no: "B1".into(),
            refund_no: "RF1".into(),
        })
    );
    // A refunding no-show moves nothing yet: its refund record returns the hold.
    for e in [
        decided(NoShow::Artist, true, 10),
        decided(NoShow::Both, true, 10),
        activated(),
        first_in(Party::Fan, 1),
        started(2),
        flagged(),
        BookingEvent::NoShowCheckDeferred { at: at(5) },
    ] {
        assert_eq!(b.candy_effect(&e), None, "{}", e.name());
    }
}

#[test]
fn a_refund_is_recorded_only_for_the_booking_s_due_refund_and_once() {
    let due = with(
        &with(&booked(), first_in(Party::Fan, 1)),
        decided(NoShow::Artist, true, 10),
    );
    let refunded = BookingEvent::BookingHoldRefunded {
        refund_no: "RF1".into(),
        candy: PRICE,
        at: at(11),
    };
    booking_test()
        .given(due.clone())
        .when(BookingCommand::RecordRefund {
            refund_no: "RF1".into(),
            at: at(11),
        })
        .then_expect_events(vec![refunded.clone()]);
    let err = BookingError::RefundMismatch {
        refund_no: "RF2".into(),
    };
    assert_eq!(
        (err.code(), err.field()),
        ("REFUND_MISMATCH", Some("refund_no"))
    );
    booking_test()
        .given(due.clone())
        .when(BookingCommand::RecordRefund {
            refund_no: "RF2".into(),
            at: at(11),
        })
        .then_expect_error(err.clone());
    let all = with(&due, refunded);
    assert_eq!(fold(&all).hold, HoldState::Refunded);
    booking_test()
        .given(all)
        .when(BookingCommand::RecordRefund {
            refund_no: "RF1".into(),
            at: at(12),
        })
        .then_expect_events(vec![]);
    // No refund is due on a fan no-show or a call in progress.
    let fan_no_show = with(
        &with(&booked(), first_in(Party::Artist, 1)),
        decided(NoShow::Fan, false, 10),
    );
    for given in [fan_no_show, in_call()] {
        booking_test()
            .given(given)
            .when(BookingCommand::RecordRefund {
                refund_no: "RF2".into(),
                at: at(11),
            })
            .then_expect_error(err.clone());
    }
}

#[test]
fn check_refuses_events_that_do_not_follow_from_the_stream() {
    assert!(Booking::default().check(&activated()).is_err());
    let b = fold(&booked());
    assert!(b.check(&requested()).is_err(), "requested twice");
    assert!(b.check(&started(2)).is_err(), "started without joining");
    assert!(
        b.check(&second_in(Party::Fan, 1)).is_err(),
        "nobody joined before"
    );
    let one = fold(&with(&booked(), first_in(Party::Fan, 1)));
    assert!(one.check(&first_in(Party::Artist, 2)).is_err(), "not first");
    assert!(b
        .check(&BookingEvent::CallFinished {
            ended_at: at(32),
            duration_s: 0,
            income_candy: PRICE
        })
        .is_err());
    let live = fold(&in_call());
    assert!(live.check(&decided(NoShow::Both, true, 15)).is_err());
    let done = fold(&with(&booked(), decided(NoShow::Both, true, 10)));
    assert!(done.check(&decided(NoShow::Both, true, 30)).is_err());
    assert!(done
        .check(&BookingEvent::BookingHoldRefunded {
            refund_no: "RF2".into(),
            candy: PRICE,
            at: at(11)
        })
        .is_err());
    assert_eq!(Booking::ledger_ref(&requested()), None);
}

/// Run the candy command of each booking event on a real candy account, the way the
/// unit that appends both does.
fn run_on_candy(
    account: &mut CandyAccount,
    booking: &Booking,
    event: &BookingEvent,
) -> Vec<&'static str> {
    let mut names = Vec::new();
    if let Some(cmd) = booking.candy_effect(event) {
        for e in account.decide(cmd).unwrap() {
            account.check(&e).unwrap();
            names.push(e.name());
            account.apply(e);
        }
    }
    names
}

fn funded_fan() -> CandyAccount {
    let mut a = CandyAccount::default();
    for e in a
        .decide(CandyCommand::Credit {
            user_id: fan(),
            source: CreditSource::Recharge,
            order_no: "R1".into(),
            candy: 8_000,
        })
        .unwrap()
    {
        a.apply(e);
    }
    a
}

#[test]
fn on_a_real_candy_account_the_hold_closes_once_whichever_way_the_booking_ends() {
    let refunded = BookingEvent::BookingHoldRefunded {
        refund_no: "RF1".into(),
        candy: PRICE,
        at: at(11),
    };
    let finished = BookingEvent::CallFinished {
        ended_at: at(32),
        duration_s: 1_800,
        income_candy: PRICE,
    };
    let aborted = BookingEvent::CallAborted {
        ended_at: at(11),
        duration_s: 540,
        reason: "nudity".into(),
    };
    // (events after activation, balance and held at the end, closing candy event)
    let endings: [(Vec<BookingEvent>, i64, &str); 4] = [
        (
            vec![
                first_in(Party::Fan, 1),
                decided(NoShow::Artist, true, 10),
                refunded,
            ],
            8_000,
            "HoldRefunded",
        ),
        (
            vec![first_in(Party::Artist, 1), decided(NoShow::Fan, false, 10)],
            3_000,
            "HoldSettled",
        ),
        (
            vec![
                first_in(Party::Fan, 1),
                second_in(Party::Artist, 2),
                started(2),
                finished,
            ],
            3_000,
            "HoldSettled",
        ),
        (
            vec![
                first_in(Party::Fan, 1),
                second_in(Party::Artist, 2),
                started(2),
                flagged(),
                aborted,
            ],
            3_000,
            "HoldForfeited",
        ),
    ];
    for (rest, balance, closing) in endings {
        let mut account = funded_fan();
        let mut booking = Booking::default();
        let mut events = booked();
        events.extend(rest);
        let mut moved = Vec::new();
        for e in &events {
            moved.extend(run_on_candy(&mut account, &booking, e));
            booking.check(e).unwrap();
            booking.apply(e.clone());
        }
        assert_eq!(moved, ["HoldPlaced", closing]);
        assert_eq!((account.balance, account.held), (balance, 0), "{closing}");
        let hold = account.holds["B1"];
        assert!(!hold.open && hold.candy == PRICE, "{closing}");
        // Telling the closing event again moves nothing on the account.
        let last = events.last().unwrap();
        let cmd = booking.candy_effect(last).unwrap();
        assert_eq!(account.decide(cmd), Ok(vec![]), "{closing}");
    }
}
