//! IM group membership (seed 000 `tieup_artist_im_group_member`, issue 18 item 7): one
//! stream per artist × fan (stream id `{artist}:{fan}`) recording whether the fan
//! should be in the artist's group. Every change is an outbox message
//! (`im_member.MemberAdded` / `im_member.MemberRemoved`) that the IM sink delivers at
//! least once, with its own retry schedule and dead-letter state; a sync that finds
//! the membership as it should be decides nothing and sends nothing.

use crate::decide::{Decide, InvariantViolation, LedgerRef};
use crate::services::UserId;
use chrono::{DateTime, Utc};
use cqrs_es::event_sink::EventSink;
use cqrs_es::{Aggregate, DomainEvent};
use serde::{Deserialize, Serialize};

pub const IM_MEMBER_AGGREGATE_TYPE: &str = "im_member";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum ImMemberCommand {
    /// Make the recorded membership `member` (from the fan's subscriptions now).
    Sync {
        artist_id: UserId,
        fan_user_id: UserId,
        member: bool,
        at: DateTime<Utc>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum ImMemberEvent {
    MemberAdded {
        artist_id: UserId,
        fan_user_id: UserId,
        at: DateTime<Utc>,
    },
    MemberRemoved {
        artist_id: UserId,
        fan_user_id: UserId,
        at: DateTime<Utc>,
    },
}

impl ImMemberEvent {
    pub fn name(&self) -> &'static str {
        match self {
            Self::MemberAdded { .. } => "MemberAdded",
            Self::MemberRemoved { .. } => "MemberRemoved",
        }
    }
}

impl DomainEvent for ImMemberEvent {
    fn event_type(&self) -> String {
        self.name().to_owned()
    }

    fn event_version(&self) -> String {
        "1".to_owned()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ImMember {
    pub pair: Option<(UserId, UserId)>,
    pub member: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImMemberError {
    #[error("the command names another artist or fan than the stream's")]
    WrongPair,
}

impl ImMemberError {
    pub fn code(&self) -> &'static str {
        "IM_MEMBER_PAIR_MISMATCH"
    }

    pub fn field(&self) -> Option<&'static str> {
        Some("fan_user_id")
    }
}

impl Decide for ImMember {
    const SNAPSHOT_VERSION: i32 = 1;
    const OUTBOX: bool = true;

    fn decide(&self, command: ImMemberCommand) -> Result<Vec<ImMemberEvent>, ImMemberError> {
        let ImMemberCommand::Sync {
            artist_id,
            fan_user_id,
            member,
            at,
        } = command;
        if self.pair.is_some_and(|p| p != (artist_id, fan_user_id)) {
            return Err(ImMemberError::WrongPair);
        }
        Ok(match (self.member, member) {
            (false, true) => vec![ImMemberEvent::MemberAdded {
                artist_id,
                fan_user_id,
                at,
            }],
            // A fan never added is not removed (nothing to tell the IM service).
            (true, false) => vec![ImMemberEvent::MemberRemoved {
                artist_id,
                fan_user_id,
                at,
            }],
            _ => Vec::new(),
        })
    }

    fn check(&self, event: &ImMemberEvent) -> Result<(), InvariantViolation> {
        let ok = match event {
            ImMemberEvent::MemberAdded { .. } => !self.member,
            ImMemberEvent::MemberRemoved { .. } => self.member,
        };
        if ok {
            Ok(())
        } else {
            Err(InvariantViolation(format!(
                "{}: membership is already so",
                event.name()
            )))
        }
    }

    fn ledger_ref(_event: &ImMemberEvent) -> Option<LedgerRef> {
        None
    }
}

impl Aggregate for ImMember {
    const TYPE: &'static str = IM_MEMBER_AGGREGATE_TYPE;
    type Command = ImMemberCommand;
    type Event = ImMemberEvent;
    type Error = ImMemberError;
    type Services = ();

    async fn handle(
        &mut self,
        command: ImMemberCommand,
        _service: &(),
        sink: &EventSink<Self>,
    ) -> Result<(), ImMemberError> {
        for event in self.decide(command)? {
            sink.write(event, self).await;
        }
        Ok(())
    }

    fn apply(&mut self, event: ImMemberEvent) {
        debug_assert_eq!(self.check(&event), Ok(()));
        match event {
            ImMemberEvent::MemberAdded {
                artist_id,
                fan_user_id,
                ..
            } => {
                self.pair = Some((artist_id, fan_user_id));
                self.member = true;
            }
            ImMemberEvent::MemberRemoved { .. } => self.member = false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cqrs_es::test::TestFramework;

    fn at() -> DateTime<Utc> {
        "2026-05-01T10:00:00Z".parse().unwrap()
    }

    fn sync(member: bool) -> ImMemberCommand {
        ImMemberCommand::Sync {
            artist_id: UserId::parse(7).unwrap(),
            fan_user_id: UserId::parse(9).unwrap(),
            member,
            at: at(),
        }
    }

    fn added() -> ImMemberEvent {
        ImMemberEvent::MemberAdded {
            artist_id: UserId::parse(7).unwrap(),
            fan_user_id: UserId::parse(9).unwrap(),
            at: at(),
        }
    }

    #[test]
    fn a_sync_sends_only_a_change() {
        TestFramework::<ImMember>::with(())
            .given_no_previous_events()
            .when(sync(true))
            .then_expect_events(vec![added()]);
        TestFramework::<ImMember>::with(())
            .given(vec![added()])
            .when(sync(true))
            .then_expect_events(vec![]);
        TestFramework::<ImMember>::with(())
            .given_no_previous_events()
            .when(sync(false))
            .then_expect_events(vec![]);
        TestFramework::<ImMember>::with(())
            .given(vec![added()])
            .when(sync(false))
            .then_expect_events(vec![ImMemberEvent::MemberRemoved {
                artist_id: UserId::parse(7).unwrap(),
                fan_user_id: UserId::parse(9).unwrap(),
                at: at(),
            }]);
    }
}
