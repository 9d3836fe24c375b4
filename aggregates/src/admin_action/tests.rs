use super::*;
use crate::affiliate::AuditReason;
use crate::money::BoundedId;
use cqrs_es::test::TestFramework;

type Given = TestFramework<AdminLog>;

fn record(target: &str, action: AdminAction) -> AdminCommand {
    AdminCommand::RecordAdminAction(RecordAdminAction {
        actor: BoundedId::parse("key:abc").unwrap(),
        action,
        target: BoundedId::parse(target).unwrap(),
        reason: Some(AuditReason::parse("maintenance window").unwrap()),
        detail: Some("role=service".into()),
        at: "2026-01-01T00:00:00Z".parse().unwrap(),
    })
}

fn recorded(target: &str, action: AdminAction) -> AdminEvent {
    AdminEvent::AdminActionRecorded {
        actor: "key:abc".into(),
        action,
        target: target.into(),
        reason: Some("maintenance window".into()),
        detail: Some("role=service".into()),
        recorded_at: "2026-01-01T00:00:00Z".parse().unwrap(),
    }
}

#[test]
fn every_action_is_recorded_with_actor_target_and_reason() {
    Given::with(())
        .given(vec![recorded("jobs", AdminAction::JobsPaused)])
        .when(record("jobs", AdminAction::JobsResumed))
        .then_expect_events(vec![recorded("jobs", AdminAction::JobsResumed)]);
}

#[test]
fn a_stream_holds_one_target() {
    Given::with(())
        .given(vec![recorded("key:abc", AdminAction::KeyCreated)])
        .when(record("key:def", AdminAction::KeyRevoked))
        .then_expect_error(AdminError::TargetMismatch {
            given: "key:def".into(),
            stream: "key:abc".into(),
        });
}

#[test]
fn action_names_are_stable_snake_case() {
    let json =
        serde_json::to_value(recorded("jobs", AdminAction::ReconciliationRepairStarted)).unwrap();
    assert_eq!(json["action"], "reconciliation_repair_started");
    assert_eq!(json["type"], "AdminActionRecorded");
    assert_eq!(
        AdminAction::ReconciliationRepairStarted.as_str(),
        "reconciliation_repair_started"
    );
}
