//! Subscription tests: given these events, when this command, then these events or
//! this error (cqrs-es `TestFramework`): grants, renewals, the expiry scan's re-check
//! and its race with a renewal, and the message of each grant.

use super::*;
use crate::refusal::{Refusal, RefusalKind};
use chrono::TimeZone;
use cqrs_es::test::TestFramework;

fn subscription_test() -> TestFramework<Subscription> {
    TestFramework::<Subscription>::with(())
}

fn day(d: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 5, d, 12, 0, 0).unwrap()
}

fn artist() -> UserId {
    UserId::parse(7).unwrap()
}

fn fan() -> UserId {
    UserId::parse(42).unwrap()
}

fn grant(order_no: &str, days: i64, at: DateTime<Utc>) -> SubscriptionCommand {
    SubscriptionCommand::Grant {
        artist_id: artist(),
        fan_user_id: fan(),
        order_no: order_no.into(),
        days,
        at,
    }
}

fn granted(
    order_no: &str,
    days: i64,
    period_start: DateTime<Utc>,
    renewal: bool,
    at: DateTime<Utc>,
) -> SubscriptionEvent {
    SubscriptionEvent::SubscriptionGranted {
        artist_id: artist(),
        fan_user_id: fan(),
        order_no: order_no.into(),
        days,
        period_start,
        expires_at: period_start + Duration::days(days),
        renewal,
        at,
    }
}

/// The first grant: 10 days from May 1st, running until May 11th.
fn first() -> SubscriptionEvent {
    granted("O1", 10, day(1), false, day(1))
}

fn expired(expires_at: DateTime<Utc>, at: DateTime<Utc>) -> SubscriptionEvent {
    SubscriptionEvent::SubscriptionExpired { expires_at, at }
}

fn queued(order_no: &str, at: DateTime<Utc>) -> SubscriptionEvent {
    SubscriptionEvent::SubscriptionMessageQueued {
        artist_id: artist(),
        fan_user_id: fan(),
        order_no: order_no.into(),
        at,
    }
}

fn fold(events: &[SubscriptionEvent]) -> Subscription {
    let mut s = Subscription::default();
    for e in events {
        s.check(e).unwrap();
        s.apply(e.clone());
    }
    s
}

#[test]
fn a_first_grant_starts_at_the_grant_time() {
    subscription_test()
        .given_no_previous_events()
        .when(grant("O1", 10, day(1)))
        .then_expect_events(vec![first()]);
    let s = fold(&[first()]);
    assert_eq!(s.status.map(SubscriptionStatus::code), Some(1));
    assert_eq!(s.expires_at, Some(day(11)));
    assert!(s.is_active_at(day(10)) && !s.is_active_at(day(11)));
}

#[test]
fn a_grant_while_running_extends_from_the_old_end_as_a_renewal() {
    subscription_test()
        .given(vec![first()])
        .when(grant("O2", 30, day(5)))
        .then_expect_events(vec![granted("O2", 30, day(11), true, day(5))]);
    let s = fold(&[first(), granted("O2", 30, day(11), true, day(5))]);
    assert_eq!(s.expires_at, Some(day(11) + Duration::days(30)));
}

#[test]
fn a_grant_after_the_end_starts_a_new_period_even_before_the_expiry_scan() {
    // Still ACTIVE on the stream (the scan has not run), but past its end.
    for at in [day(11), day(20)] {
        subscription_test()
            .given(vec![first()])
            .when(grant("O2", 10, at))
            .then_expect_events(vec![granted("O2", 10, at, false, at)]);
    }
}

#[test]
fn the_same_order_grants_once() {
    for given in [
        vec![first()],
        vec![first(), granted("O2", 30, day(11), true, day(5))],
        vec![first(), expired(day(11), day(12))],
    ] {
        subscription_test()
            .given(given)
            .when(grant("O1", 10, day(5)))
            .then_expect_events(vec![]);
    }
}

#[test]
fn a_grant_is_refused_for_a_bad_length_or_another_pair() {
    assert_eq!(
        (
            SubscriptionError::InvalidDays.code(),
            SubscriptionError::InvalidDays.field()
        ),
        ("INVALID_FIELD", Some("days"))
    );
    for days in [0, -1, 367] {
        subscription_test()
            .given_no_previous_events()
            .when(grant("O1", days, day(1)))
            .then_expect_error(SubscriptionError::InvalidDays);
    }
    subscription_test()
        .given_no_previous_events()
        .when(grant("O1", 366, day(1)))
        .then_expect_events(vec![granted("O1", 366, day(1), false, day(1))]);
    assert_eq!(
        SubscriptionError::WrongPair.code(),
        "SUBSCRIPTION_PAIR_MISMATCH"
    );
    subscription_test()
        .given(vec![first()])
        .when(SubscriptionCommand::Grant {
            artist_id: artist(),
            fan_user_id: UserId::parse(43).unwrap(),
            order_no: "O2".into(),
            days: 10,
            at: day(2),
        })
        .then_expect_error(SubscriptionError::WrongPair);
}

#[test]
fn expiry_only_when_active_and_its_end_has_passed() {
    subscription_test()
        .given(vec![first()])
        .when(SubscriptionCommand::Expire {
            at: day(11) - Duration::seconds(1),
        })
        .then_expect_events(vec![]);
    for at in [day(11), day(12)] {
        subscription_test()
            .given(vec![first()])
            .when(SubscriptionCommand::Expire { at })
            .then_expect_events(vec![expired(day(11), at)]);
    }
    let s = fold(&[first(), expired(day(11), day(12))]);
    assert_eq!(s.status.map(SubscriptionStatus::code), Some(2));
    // Expired already: the re-check finds nothing to do.
    subscription_test()
        .given(vec![first(), expired(day(11), day(12))])
        .when(SubscriptionCommand::Expire { at: day(13) })
        .then_expect_events(vec![]);
    assert_eq!(SubscriptionError::NotFound.kind(), RefusalKind::NotFound);
    subscription_test()
        .given_no_previous_events()
        .when(SubscriptionCommand::Expire { at: day(13) })
        .then_expect_error(SubscriptionError::NotFound);
}

#[test]
fn an_expiry_that_lost_to_a_renewal_finds_the_end_moved_and_decides_nothing() {
    // The scan read the subscription ending May 11th; a renewal won the stream head
    // first, so the re-decided expiry sees the end on June 10th.
    subscription_test()
        .given(vec![first(), granted("O2", 30, day(11), true, day(10))])
        .when(SubscriptionCommand::Expire { at: day(11) })
        .then_expect_events(vec![]);
}

#[test]
fn a_grant_after_expiry_reactivates_with_a_new_period() {
    let given = vec![first(), expired(day(11), day(11))];
    subscription_test()
        .given(given.clone())
        .when(grant("O2", 10, day(15)))
        .then_expect_events(vec![granted("O2", 10, day(15), false, day(15))]);
    let s = fold(
        &[
            given.clone(),
            vec![granted("O2", 10, day(15), false, day(15))],
        ]
        .concat(),
    );
    assert_eq!(s.status, Some(SubscriptionStatus::Active));
    assert_eq!(s.expires_at, Some(day(25)));
    // A renewal that lost to the expiry is re-decided the same way: a new period.
    subscription_test()
        .given(given)
        .when(grant("O2", 10, day(11)))
        .then_expect_events(vec![granted("O2", 10, day(11), false, day(11))]);
}

#[test]
fn each_grant_queues_its_message_once_and_an_unknown_order_is_refused() {
    subscription_test()
        .given(vec![first()])
        .when(SubscriptionCommand::QueueMessage {
            order_no: "O1".into(),
            at: day(1),
        })
        .then_expect_events(vec![queued("O1", day(1))]);
    subscription_test()
        .given(vec![first(), queued("O1", day(1))])
        .when(SubscriptionCommand::QueueMessage {
            order_no: "O1".into(),
            at: day(2),
        })
        .then_expect_events(vec![]);
    // The second grant has its own message.
    subscription_test()
        .given(vec![
            first(),
            queued("O1", day(1)),
            granted("O2", 30, day(11), true, day(5)),
        ])
        .when(SubscriptionCommand::QueueMessage {
            order_no: "O2".into(),
            at: day(5),
        })
        .then_expect_events(vec![queued("O2", day(5))]);
    let err = SubscriptionError::GrantNotFound {
        order_no: "O9".into(),
    };
    assert_eq!(
        (err.code(), err.field()),
        ("GRANT_NOT_FOUND", Some("order_no"))
    );
    subscription_test()
        .given(vec![first()])
        .when(SubscriptionCommand::QueueMessage {
            order_no: "O9".into(),
            at: day(1),
        })
        .then_expect_error(err);
    subscription_test()
        .given_no_previous_events()
        .when(SubscriptionCommand::QueueMessage {
            order_no: "O1".into(),
            at: day(1),
        })
        .then_expect_error(SubscriptionError::NotFound);
}

#[test]
fn check_refuses_events_that_do_not_follow_from_the_stream() {
    let s = fold(&[first()]);
    assert!(s.check(&first()).is_err(), "granted twice");
    assert!(
        s.check(&granted("O2", 0, day(1), false, day(1))).is_err(),
        "empty period"
    );
    assert!(
        s.check(&expired(day(11), day(10))).is_err(),
        "expired before its end"
    );
    assert!(
        s.check(&expired(day(12), day(12))).is_err(),
        "expired at another end"
    );
    assert!(s.check(&queued("O9", day(1))).is_err(), "no such grant");
    let done = fold(&[first(), expired(day(11), day(12)), queued("O1", day(12))]);
    assert!(done.check(&expired(day(11), day(13))).is_err(), "twice");
    assert!(done.check(&queued("O1", day(13))).is_err(), "queued twice");
    assert_eq!(Subscription::ledger_ref(&first()), None, "no money moves");
}
