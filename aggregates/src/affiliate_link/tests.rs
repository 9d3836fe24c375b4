//! Affiliate link tests: given these events, when this command, then these events
//! or this error (cqrs-es `TestFramework`, which calls `handle` → `decide`).

use super::*;
use crate::affiliate::AuditReason;
use crate::money::BoundedId;
use chrono::{DateTime, TimeZone, Utc};
use cqrs_es::test::TestFramework;
use cqrs_es::DomainEvent;

fn link_test() -> TestFramework<AffiliateLink> {
    TestFramework::<AffiliateLink>::with(())
}

fn id(s: &str) -> BoundedId {
    BoundedId::parse(s).unwrap()
}

fn t() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 2, 9, 0, 0).unwrap()
}

fn tracking(value: &str) -> Attribution {
    Attribution::TrackingId(id(value))
}

fn register(attribution: Attribution, user: &str) -> LinkCommand {
    LinkCommand::Register(Register {
        attribution,
        user_id: id(user),
        actor: id("signup"),
        registered_at: t(),
    })
}

fn registered(value: &str, user: &str) -> LinkEvent {
    LinkEvent::LinkRegistered {
        kind: "TRACKING_ID".to_owned(),
        value: value.to_owned(),
        user_id: user.to_owned(),
        actor: "signup".to_owned(),
        registered_at: t(),
    }
}

fn reassign(attribution: Attribution, user: &str) -> LinkCommand {
    LinkCommand::Reassign(Reassign {
        attribution,
        new_user_id: id(user),
        actor: id("ops-ana"),
        reason: AuditReason::parse("tracking id was handed over to u-9").unwrap(),
        reassigned_at: t(),
    })
}

fn reassigned(value: &str, old: &str, new: &str) -> LinkEvent {
    LinkEvent::LinkReassigned {
        kind: "TRACKING_ID".to_owned(),
        value: value.to_owned(),
        old_user_id: old.to_owned(),
        new_user_id: new.to_owned(),
        actor: "ops-ana".to_owned(),
        reason: "tracking id was handed over to u-9".to_owned(),
        reassigned_at: t(),
    }
}

#[test]
fn the_stream_id_is_the_attribution_kind_and_value() {
    assert_eq!(link_stream_id(&tracking("abc")), "TRACKING_ID:abc");
    assert_eq!(
        link_stream_id(&Attribution::ClickId(id("clk-9"))),
        "CLICK_ID:clk-9"
    );
    assert_eq!(
        link_stream_id(&Attribution::ReferralCode(id("ANA10"))),
        "REFERRAL_CODE:ANA10"
    );
    assert_eq!(AffiliateLink::TYPE, "affiliate_link");
}

#[test]
fn the_first_registration_records_the_owner() {
    link_test()
        .given_no_previous_events()
        .when(register(tracking("abc"), "u-1"))
        .then_expect_events(vec![registered("abc", "u-1")]);
}

#[test]
fn every_attribution_kind_is_recorded_with_its_wire_name() {
    link_test()
        .given_no_previous_events()
        .when(register(Attribution::ReferralCode(id("ANA10")), "u-1"))
        .then_expect_events(vec![LinkEvent::LinkRegistered {
            kind: "REFERRAL_CODE".to_owned(),
            value: "ANA10".to_owned(),
            user_id: "u-1".to_owned(),
            actor: "signup".to_owned(),
            registered_at: t(),
        }]);
}

#[test]
fn registering_the_same_user_again_writes_nothing() {
    link_test()
        .given(vec![registered("abc", "u-1")])
        .when(register(tracking("abc"), "u-1"))
        .then_expect_events(vec![]);
    link_test()
        .given(vec![
            registered("abc", "u-1"),
            reassigned("abc", "u-1", "u-9"),
        ])
        .when(register(tracking("abc"), "u-9"))
        .then_expect_events(vec![]);
}

#[test]
fn registering_another_user_is_refused_once_the_link_is_registered() {
    let err = LinkError::LinkAlreadyRegistered {
        current: "u-1".to_owned(),
    };
    assert_eq!(
        (err.code(), err.field()),
        ("LINK_ALREADY_REGISTERED", Some("user_id"))
    );
    link_test()
        .given(vec![registered("abc", "u-1")])
        .when(register(tracking("abc"), "u-2"))
        .then_expect_error(err);
}

#[test]
fn a_reassignment_records_old_and_new_user_actor_and_reason() {
    link_test()
        .given(vec![registered("abc", "u-1")])
        .when(reassign(tracking("abc"), "u-9"))
        .then_expect_events(vec![reassigned("abc", "u-1", "u-9")]);
}

#[test]
fn reassigning_an_unregistered_link_is_refused() {
    assert_eq!(
        (
            LinkError::LinkNotFound.code(),
            LinkError::LinkNotFound.field()
        ),
        ("LINK_NOT_FOUND", Some("attribution"))
    );
    link_test()
        .given_no_previous_events()
        .when(reassign(tracking("abc"), "u-9"))
        .then_expect_error(LinkError::LinkNotFound);
}

#[test]
fn reassigning_to_the_current_owner_is_refused() {
    assert_eq!(
        (
            LinkError::LinkUnchanged.code(),
            LinkError::LinkUnchanged.field()
        ),
        ("LINK_UNCHANGED", Some("new_user_id"))
    );
    link_test()
        .given(vec![registered("abc", "u-1")])
        .when(reassign(tracking("abc"), "u-1"))
        .then_expect_error(LinkError::LinkUnchanged);
}

#[test]
fn a_command_for_another_attribution_is_refused() {
    let err = LinkError::LinkMismatch {
        given: "TRACKING_ID:xyz".to_owned(),
        stream: "TRACKING_ID:abc".to_owned(),
    };
    assert_eq!(
        (err.code(), err.field()),
        ("LINK_MISMATCH", Some("attribution"))
    );
    link_test()
        .given(vec![registered("abc", "u-1")])
        .when(register(tracking("xyz"), "u-1"))
        .then_expect_error(err.clone());
    link_test()
        .given(vec![registered("abc", "u-1")])
        .when(reassign(tracking("xyz"), "u-9"))
        .then_expect_error(err);
    link_test()
        .given(vec![registered("abc", "u-1")])
        .when(register(Attribution::ClickId(id("abc")), "u-1"))
        .then_expect_error(LinkError::LinkMismatch {
            given: "CLICK_ID:abc".to_owned(),
            stream: "TRACKING_ID:abc".to_owned(),
        });
}

#[test]
fn the_owner_is_read_from_the_state() {
    let mut link = AffiliateLink::default();
    assert_eq!(link.owner(), None);
    link.apply(registered("abc", "u-1"));
    assert_eq!(link.owner(), Some("u-1"));
    link.apply(reassigned("abc", "u-1", "u-9"));
    assert_eq!(link.owner(), Some("u-9"));
}

#[test]
fn check_refuses_events_that_do_not_follow_from_the_link() {
    let mut link = AffiliateLink::default();
    assert!(
        link.check(&reassigned("abc", "u-1", "u-9")).is_err(),
        "reassigned before registered"
    );
    let mut bad_kind = registered("abc", "u-1");
    if let LinkEvent::LinkRegistered { kind, .. } = &mut bad_kind {
        *kind = "COUPON".to_owned();
    }
    assert!(link.check(&bad_kind).is_err(), "unknown kind");
    link.apply(registered("abc", "u-1"));
    assert!(
        link.check(&registered("abc", "u-2")).is_err(),
        "registered twice"
    );
    assert!(
        link.check(&reassigned("abc", "u-7", "u-9")).is_err(),
        "wrong old user"
    );
    assert!(
        link.check(&reassigned("xyz", "u-1", "u-9")).is_err(),
        "another attribution"
    );
    assert!(
        link.check(&reassigned("abc", "u-1", "u-1")).is_err(),
        "no change"
    );
    assert_eq!(link.check(&reassigned("abc", "u-1", "u-9")), Ok(()));
    assert_eq!(AffiliateLink::ledger_ref(&registered("abc", "u-1")), None);
    assert_eq!(
        (AffiliateLink::SNAPSHOT_VERSION, AffiliateLink::OUTBOX),
        (1, false)
    );
}

#[test]
fn link_events_have_a_stable_stored_shape() {
    let shapes = [
        (
            registered("abc", "u-1"),
            serde_json::json!({
                "type": "LinkRegistered", "kind": "TRACKING_ID", "value": "abc",
                "user_id": "u-1", "actor": "signup", "registered_at": "2026-01-02T09:00:00Z"
            }),
        ),
        (
            reassigned("abc", "u-1", "u-9"),
            serde_json::json!({
                "type": "LinkReassigned", "kind": "TRACKING_ID", "value": "abc",
                "old_user_id": "u-1", "new_user_id": "u-9", "actor": "ops-ana",
                "reason": "tracking id was handed over to u-9",
                "reassigned_at": "2026-01-02T09:00:00Z"
            }),
        ),
    ];
    for (event, json) in shapes {
        assert_eq!(serde_json::to_value(&event).unwrap(), json);
        assert_eq!(serde_json::from_value::<LinkEvent>(json).unwrap(), event);
        assert_eq!(event.event_version(), "1");
        assert_eq!(event.event_type(), event.name());
    }
}

#[test]
fn link_commands_round_trip_through_their_wire_shape() {
    let shapes = [
        (
            register(tracking("abc"), "u-1"),
            serde_json::json!({
                "type": "Register",
                "attribution": {"kind": "TRACKING_ID", "value": "abc"},
                "user_id": "u-1", "actor": "signup", "registered_at": "2026-01-02T09:00:00Z"
            }),
        ),
        (
            reassign(tracking("abc"), "u-9"),
            serde_json::json!({
                "type": "Reassign",
                "attribution": {"kind": "TRACKING_ID", "value": "abc"},
                "new_user_id": "u-9", "actor": "ops-ana",
                "reason": "tracking id was handed over to u-9",
                "reassigned_at": "2026-01-02T09:00:00Z"
            }),
        ),
    ];
    for (command, json) in shapes {
        assert_eq!(serde_json::to_value(&command).unwrap(), json);
        assert_eq!(
            serde_json::from_value::<LinkCommand>(json).unwrap(),
            command
        );
    }
    assert_eq!(register(tracking("abc"), "u-1").name(), "Register");
    assert_eq!(reassign(tracking("abc"), "u-1").name(), "Reassign");
}

#[test]
fn link_commands_with_unknown_fields_or_a_blank_reason_are_refused() {
    assert!(serde_json::from_str::<LinkCommand>(
        r#"{"type":"Register","attribution":{"kind":"TRACKING_ID","value":"abc"},"user_id":"u-1","actor":"signup","registered_at":"2026-01-02T09:00:00Z","extra":1}"#
    )
    .is_err());
    assert!(serde_json::from_str::<LinkCommand>(
        r#"{"type":"Reassign","attribution":{"kind":"TRACKING_ID","value":"abc"},"new_user_id":"u-9","actor":"ops","reason":" ","reassigned_at":"2026-01-02T09:00:00Z"}"#
    )
    .is_err());
}
