//! Commission rule set tests: given these versions, when this command, then these
//! events or this error (cqrs-es `TestFramework`, which calls `handle` → `decide`).

use super::*;
use crate::affiliate::Bps;
use crate::money::BoundedId;
use chrono::TimeZone;
use cqrs_es::test::TestFramework;

fn rules_test() -> TestFramework<CommissionRuleSet> {
    TestFramework::<CommissionRuleSet>::with(())
}

fn at(day: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, day, 0, 0, 0).unwrap()
}

fn bps(v: i64) -> Bps {
    Bps::parse(v).unwrap()
}

fn add(version: u32, effective_from: DateTime<Utc>) -> AddRuleVersion {
    AddRuleVersion {
        rule_set_id: BoundedId::parse("SHOPEE:ID").unwrap(),
        version,
        effective_from,
        cashback_bps: bps(6_000),
        inviter_bps: bps(1_000),
        max_commission_base_bps: bps(800),
        release_delay_days: 14,
        requested_at: at(1),
    }
}

fn added(version: u32, effective_from: DateTime<Utc>) -> RuleSetEvent {
    RuleSetEvent::RuleVersionAdded(RuleSnapshot {
        rule_set_id: "SHOPEE:ID".to_owned(),
        version,
        effective_from,
        cashback_bps: bps(6_000),
        inviter_bps: bps(1_000),
        max_commission_base_bps: bps(800),
        release_delay_days: 14,
    })
}

fn rule_set(events: Vec<RuleSetEvent>) -> CommissionRuleSet {
    let mut r = CommissionRuleSet::default();
    for e in events {
        r.apply(e);
    }
    r
}

#[test]
fn the_first_version_of_a_rule_set_is_added() {
    rules_test()
        .given_no_previous_events()
        .when(RuleSetCommand::AddVersion(add(1, at(2))))
        .then_expect_events(vec![added(1, at(2))]);
}

#[test]
fn a_later_version_is_added_without_touching_earlier_ones() {
    let before = rule_set(vec![added(1, at(2))]);
    rules_test()
        .given(vec![added(1, at(2))])
        .when(RuleSetCommand::AddVersion(add(2, at(10))))
        .then_expect_events(vec![added(2, at(10))]);
    let after = rule_set(vec![added(1, at(2)), added(2, at(10))]);
    assert_eq!(after.versions[0], before.versions[0]);
}

#[test]
fn a_version_may_take_effect_exactly_now() {
    let mut cmd = add(1, at(5));
    cmd.requested_at = at(5);
    rules_test()
        .given_no_previous_events()
        .when(RuleSetCommand::AddVersion(cmd))
        .then_expect_events(vec![added(1, at(5))]);
}

#[test]
fn adding_the_same_version_again_writes_nothing() {
    rules_test()
        .given(vec![added(1, at(2)), added(2, at(10))])
        .when(RuleSetCommand::AddVersion(add(1, at(2))))
        .then_expect_events(vec![]);
}

#[test]
fn an_existing_version_with_other_content_is_refused_as_a_conflict() {
    let mut cmd = add(1, at(2));
    cmd.cashback_bps = bps(7_000);
    let err = RuleSetError::VersionConflict { version: 1 };
    assert_eq!(
        (err.code(), err.field()),
        ("RULE_VERSION_CONFLICT", Some("version"))
    );
    rules_test()
        .given(vec![added(1, at(2))])
        .when(RuleSetCommand::AddVersion(cmd))
        .then_expect_error(err);
}

#[test]
fn a_version_that_skips_a_number_is_refused() {
    let err = RuleSetError::VersionOutOfOrder {
        given: 3,
        expected: 2,
    };
    assert_eq!(err.code(), "RULE_VERSION_OUT_OF_ORDER");
    rules_test()
        .given(vec![added(1, at(2))])
        .when(RuleSetCommand::AddVersion(add(3, at(10))))
        .then_expect_error(err);
    // Version 0 does not exist either.
    rules_test()
        .given_no_previous_events()
        .when(RuleSetCommand::AddVersion(add(0, at(10))))
        .then_expect_error(RuleSetError::VersionOutOfOrder {
            given: 0,
            expected: 1,
        });
}

#[test]
fn a_version_not_effective_after_the_previous_one_is_refused() {
    let err = RuleSetError::EffectiveFromNotAfterPrevious { previous: at(10) };
    assert_eq!(
        (err.code(), err.field()),
        ("EFFECTIVE_FROM_NOT_AFTER_PREVIOUS", Some("effective_from"))
    );
    for effective_from in [at(10), at(9)] {
        rules_test()
            .given(vec![added(1, at(10))])
            .when(RuleSetCommand::AddVersion(add(2, effective_from)))
            .then_expect_error(err.clone());
    }
}

#[test]
fn a_back_dated_version_is_refused_because_it_would_change_history() {
    let mut cmd = add(1, at(2));
    cmd.requested_at = at(3);
    let err = RuleSetError::EffectiveFromInPast {
        effective_from: at(2),
        now: at(3),
    };
    assert_eq!(err.code(), "EFFECTIVE_FROM_IN_PAST");
    rules_test()
        .given_no_previous_events()
        .when(RuleSetCommand::AddVersion(cmd))
        .then_expect_error(err);
}

#[test]
fn rates_that_together_exceed_the_base_are_refused() {
    let mut cmd = add(1, at(2));
    cmd.cashback_bps = bps(9_000);
    cmd.inviter_bps = bps(1_001);
    let err = RuleSetError::RatesExceedBase { total_bps: 10_001 };
    assert_eq!(
        (err.code(), err.field()),
        ("RATES_EXCEED_BASE", Some("inviter_bps"))
    );
    rules_test()
        .given_no_previous_events()
        .when(RuleSetCommand::AddVersion(cmd.clone()))
        .then_expect_error(err);
    cmd.inviter_bps = bps(1_000); // exactly 100 % is allowed
    assert!(rules_test()
        .given_no_previous_events()
        .when(RuleSetCommand::AddVersion(cmd))
        .inspect_result()
        .is_ok());
}

#[test]
fn a_release_delay_over_a_year_is_refused() {
    let mut cmd = add(1, at(2));
    cmd.release_delay_days = RELEASE_DELAY_DAYS_MAX + 1;
    let err = RuleSetError::ReleaseDelayTooLong {
        max: RELEASE_DELAY_DAYS_MAX,
    };
    assert_eq!(err.code(), "RELEASE_DELAY_TOO_LONG");
    rules_test()
        .given_no_previous_events()
        .when(RuleSetCommand::AddVersion(cmd))
        .then_expect_error(err);
}

#[test]
fn a_version_for_another_rule_set_is_refused() {
    let mut cmd = add(2, at(10));
    cmd.rule_set_id = BoundedId::parse("LAZADA:ID").unwrap();
    let err = RuleSetError::RuleSetIdMismatch {
        given: "LAZADA:ID".to_owned(),
        stream: "SHOPEE:ID".to_owned(),
    };
    assert_eq!(err.code(), "RULE_SET_ID_MISMATCH");
    rules_test()
        .given(vec![added(1, at(2))])
        .when(RuleSetCommand::AddVersion(cmd))
        .then_expect_error(err);
}

#[test]
fn a_full_rule_set_refuses_another_version() {
    let start = at(1);
    let events: Vec<RuleSetEvent> = (1..=RULE_VERSIONS_MAX as u32)
        .map(|v| added(v, start + chrono::TimeDelta::minutes(i64::from(v))))
        .collect();
    let next = RULE_VERSIONS_MAX as u32 + 1;
    let err = RuleSetError::TooManyVersions {
        max: RULE_VERSIONS_MAX,
    };
    assert_eq!(err.code(), "RULE_VERSIONS_LIMIT");
    rules_test()
        .given(events)
        .when(RuleSetCommand::AddVersion(add(next, at(20))))
        .then_expect_error(err);
}

#[test]
fn the_version_in_force_is_the_last_one_effective_at_or_before_ordered_at() {
    let rules = rule_set(vec![added(1, at(2)), added(2, at(10)), added(3, at(20))]);
    let second = chrono::TimeDelta::seconds(1);
    let rows = [
        (at(2), 1), // effective exactly at ordered_at: in force
        (at(9), 1),
        (at(10) - second, 1),
        (at(10), 2),
        (at(19), 2),
        (at(20), 3),
        (at(31), 3),
    ];
    for (ordered_at, version) in rows {
        assert_eq!(
            rules.version_at(ordered_at).unwrap().version,
            version,
            "{ordered_at}"
        );
    }
}

#[test]
fn an_order_before_the_first_version_has_no_rule() {
    let rules = rule_set(vec![added(1, at(2))]);
    let ordered_at = at(2) - chrono::TimeDelta::seconds(1);
    let err = rules.version_at(ordered_at).unwrap_err();
    assert_eq!(err, RuleSetError::NoVersionInForce { ordered_at });
    assert_eq!(
        (err.code(), err.field()),
        ("NO_RULE_VERSION_IN_FORCE", Some("ordered_at"))
    );
    assert!(CommissionRuleSet::default().version_at(at(5)).is_err());
}

#[test]
fn adding_a_version_later_never_changes_the_version_an_old_order_gets() {
    let before = rule_set(vec![added(1, at(2))]);
    let after = rule_set(vec![added(1, at(2)), added(2, at(10))]);
    assert_eq!(before.version_at(at(5)), after.version_at(at(5)));
}

#[test]
fn check_refuses_versions_out_of_order_or_overlapping() {
    let r = rule_set(vec![added(1, at(10))]);
    assert!(r.check(&added(2, at(11))).is_ok());
    assert!(r.check(&added(3, at(11))).is_err());
    assert!(r.check(&added(2, at(10))).is_err());
    let RuleSetEvent::RuleVersionAdded(mut v) = added(2, at(11));
    v.cashback_bps = bps(10_000);
    assert!(r.check(&RuleSetEvent::RuleVersionAdded(v)).is_err());
}

#[test]
fn a_rule_version_has_a_stable_stored_shape() {
    let expected = serde_json::json!({
        "type": "RuleVersionAdded",
        "rule_set_id": "SHOPEE:ID",
        "version": 1,
        "effective_from": "2026-01-02T00:00:00Z",
        "cashback_bps": 6000,
        "inviter_bps": 1000,
        "max_commission_base_bps": 800,
        "release_delay_days": 14
    });
    assert_eq!(serde_json::to_value(added(1, at(2))).unwrap(), expected);
    assert_eq!(
        serde_json::from_value::<RuleSetEvent>(expected).unwrap(),
        added(1, at(2))
    );
    assert_eq!(CommissionRuleSet::ledger_ref(&added(1, at(2))), None);
}

#[test]
fn commands_with_rates_out_of_range_or_unknown_fields_do_not_deserialize() {
    let ok = serde_json::json!({
        "type": "AddVersion", "rule_set_id": "SHOPEE:ID", "version": 1,
        "effective_from": "2026-01-02T00:00:00Z", "cashback_bps": 6000, "inviter_bps": 1000,
        "max_commission_base_bps": 800, "release_delay_days": 14,
        "requested_at": "2026-01-01T00:00:00Z"
    });
    assert_eq!(
        serde_json::from_value::<RuleSetCommand>(ok.clone()).unwrap(),
        RuleSetCommand::AddVersion(add(1, at(2)))
    );
    for (field, value) in [
        ("cashback_bps", serde_json::json!(10_001)),
        ("inviter_bps", serde_json::json!(-1)),
        ("max_commission_base_bps", serde_json::json!(8.5)),
        ("rate", serde_json::json!(1)),
    ] {
        let mut bad = ok.clone();
        bad[field] = value;
        assert!(
            serde_json::from_value::<RuleSetCommand>(bad).is_err(),
            "{field}"
        );
    }
}
