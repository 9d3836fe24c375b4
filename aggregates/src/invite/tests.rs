//! Invite relation tests: given these events, when this command, then these events
//! or this error (cqrs-es `TestFramework`, which calls `handle` → `decide`).

use super::*;
use crate::affiliate::AuditReason;
use chrono::{DateTime, TimeZone, Utc};
use cqrs_es::test::TestFramework;

fn invite_test() -> TestFramework<InviteRelation> {
    TestFramework::<InviteRelation>::with(())
}

fn id(s: &str) -> BoundedId {
    BoundedId::parse(s).unwrap()
}

fn t() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 2, 9, 0, 0).unwrap()
}

fn set(user: &str, inviter: &str) -> InviteCommand {
    InviteCommand::SetInviter(SetInviter {
        user_id: id(user),
        inviter_user_id: id(inviter),
        actor: id("signup"),
        set_at: t(),
    })
}

fn was_set(user: &str, inviter: &str) -> InviteEvent {
    InviteEvent::InviterSet {
        user_id: user.to_owned(),
        inviter_user_id: inviter.to_owned(),
        actor: "signup".to_owned(),
        set_at: t(),
    }
}

fn correct(user: &str, inviter: Option<&str>) -> InviteCommand {
    InviteCommand::CorrectInviter(CorrectInviter {
        user_id: id(user),
        new_inviter_user_id: inviter.map(id),
        actor: id("ops-ana"),
        reason: AuditReason::parse("invite link was shared by u-9").unwrap(),
        corrected_at: t(),
    })
}

fn corrected(user: &str, old: Option<&str>, new: Option<&str>) -> InviteEvent {
    InviteEvent::InviterCorrected {
        user_id: user.to_owned(),
        old_inviter_user_id: old.map(str::to_owned),
        new_inviter_user_id: new.map(str::to_owned),
        actor: "ops-ana".to_owned(),
        reason: "invite link was shared by u-9".to_owned(),
        corrected_at: t(),
    }
}

#[test]
fn a_users_direct_inviter_is_set_once() {
    invite_test()
        .given_no_previous_events()
        .when(set("u-1", "u-0"))
        .then_expect_events(vec![was_set("u-1", "u-0")]);
}

#[test]
fn setting_the_same_inviter_again_writes_nothing() {
    invite_test()
        .given(vec![was_set("u-1", "u-0")])
        .when(set("u-1", "u-0"))
        .then_expect_events(vec![]);
}

#[test]
fn setting_another_inviter_is_refused_once_one_is_set() {
    let err = InviteError::InviterAlreadySet {
        current: "u-0".to_owned(),
    };
    assert_eq!(
        (err.code(), err.field()),
        ("INVITER_ALREADY_SET", Some("inviter_user_id"))
    );
    invite_test()
        .given(vec![was_set("u-1", "u-0")])
        .when(set("u-1", "u-9"))
        .then_expect_error(err);
}

#[test]
fn setting_an_inviter_removed_by_a_correction_is_refused() {
    let result = invite_test()
        .given(vec![
            was_set("u-1", "u-0"),
            corrected("u-1", Some("u-0"), None),
        ])
        .when(set("u-1", "u-0"))
        .inspect_result();
    assert_eq!(result.unwrap_err().code(), "INVITER_ALREADY_SET");
}

#[test]
fn a_user_cannot_invite_themselves() {
    assert_eq!(
        (
            InviteError::SelfInvite.code(),
            InviteError::SelfInvite.field()
        ),
        ("SELF_INVITE", Some("inviter_user_id"))
    );
    invite_test()
        .given_no_previous_events()
        .when(set("u-1", "u-1"))
        .then_expect_error(InviteError::SelfInvite);
    invite_test()
        .given(vec![was_set("u-1", "u-0")])
        .when(correct("u-1", Some("u-1")))
        .then_expect_error(InviteError::SelfInvite);
}

#[test]
fn a_command_for_another_user_is_refused() {
    let err = InviteError::UserMismatch {
        given: "u-2".to_owned(),
        stream: "u-1".to_owned(),
    };
    assert_eq!(
        (err.code(), err.field()),
        ("USER_MISMATCH", Some("user_id"))
    );
    invite_test()
        .given(vec![was_set("u-1", "u-0")])
        .when(set("u-2", "u-0"))
        .then_expect_error(err.clone());
    invite_test()
        .given(vec![was_set("u-1", "u-0")])
        .when(correct("u-2", Some("u-9")))
        .then_expect_error(err);
}

#[test]
fn a_correction_records_old_and_new_inviter_actor_and_reason() {
    invite_test()
        .given(vec![was_set("u-1", "u-0")])
        .when(correct("u-1", Some("u-9")))
        .then_expect_events(vec![corrected("u-1", Some("u-0"), Some("u-9"))]);
}

#[test]
fn a_correction_may_remove_the_inviter_or_set_one_that_was_never_set() {
    invite_test()
        .given(vec![was_set("u-1", "u-0")])
        .when(correct("u-1", None))
        .then_expect_events(vec![corrected("u-1", Some("u-0"), None)]);
    invite_test()
        .given_no_previous_events()
        .when(correct("u-1", Some("u-9")))
        .then_expect_events(vec![corrected("u-1", None, Some("u-9"))]);
}

#[test]
fn a_correction_that_changes_nothing_is_refused() {
    assert_eq!(
        (
            InviteError::InviterUnchanged.code(),
            InviteError::InviterUnchanged.field()
        ),
        ("INVITER_UNCHANGED", Some("new_inviter_user_id"))
    );
    invite_test()
        .given(vec![was_set("u-1", "u-0")])
        .when(correct("u-1", Some("u-0")))
        .then_expect_error(InviteError::InviterUnchanged);
}

#[test]
fn the_inviter_is_read_from_the_state() {
    let mut r = InviteRelation::default();
    assert_eq!(r.inviter(), None);
    r.apply(was_set("u-1", "u-0"));
    assert_eq!(r.inviter(), Some("u-0"));
    r.apply(corrected("u-1", Some("u-0"), Some("u-9")));
    assert_eq!(r.inviter(), Some("u-9"));
}

#[test]
fn check_refuses_events_that_do_not_follow_from_the_relation() {
    let mut r = InviteRelation::default();
    assert!(r.check(&was_set("u-1", "u-1")).is_err(), "self invite");
    r.apply(was_set("u-1", "u-0"));
    assert!(r.check(&was_set("u-1", "u-9")).is_err(), "set twice");
    assert!(
        r.check(&corrected("u-1", Some("u-7"), Some("u-9")))
            .is_err(),
        "wrong old inviter"
    );
    assert!(
        r.check(&corrected("u-2", Some("u-0"), Some("u-9")))
            .is_err(),
        "another user"
    );
    assert_eq!(r.check(&corrected("u-1", Some("u-0"), Some("u-9"))), Ok(()));
    assert_eq!(InviteRelation::ledger_ref(&was_set("u-1", "u-0")), None);
}

#[test]
fn invite_events_have_a_stable_stored_shape() {
    assert_eq!(
        serde_json::to_value(was_set("u-1", "u-0")).unwrap(),
        serde_json::json!({
            "type": "InviterSet", "user_id": "u-1", "inviter_user_id": "u-0",
            "actor": "signup", "set_at": "2026-01-02T09:00:00Z"
        })
    );
    assert!(serde_json::from_str::<InviteCommand>(
        r#"{"type":"CorrectInviter","user_id":"u-1","actor":"ops","reason":"","corrected_at":"2026-01-02T09:00:00Z"}"#
    )
    .is_err());
}
