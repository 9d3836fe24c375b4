//! The invite relation aggregate: a user's direct inviter (seed §6.2 step 4: the
//! inviter reward goes to the owner's *direct* inviter only). One stream per invited
//! user (stream id = user id).
//!
//! The inviter is set once; a different inviter later is refused
//! (`INVITER_ALREADY_SET`), and only an audited `CorrectInviter` (actor, reason)
//! changes or removes it. The seed is silent on corrections; they mirror the
//! attribution corrections of R-ORD-4. Cycles (A invited B, B invited A) cannot be
//! seen from one stream and are harmless: rewards go one level up only.

mod commands;
mod events;

pub use commands::{CorrectInviter, InviteCommand, SetInviter};
pub use events::{InviteEvent, INVITE_EVENT_VERSION};

use crate::decide::{Decide, InvariantViolation, LedgerRef};
use crate::money::BoundedId;
use cqrs_es::event_sink::EventSink;
use cqrs_es::Aggregate;
use serde::{Deserialize, Serialize};

/// The stream type of invite relations in the event store.
pub const INVITE_AGGREGATE_TYPE: &str = "invite_relation";

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct InviteRelation {
    /// Empty until the first event.
    pub user_id: String,
    pub inviter_user_id: Option<String>,
}

/// Why an invite command was refused. Nothing is written when a command is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InviteError {
    #[error("user {given} does not belong to this stream ({stream})")]
    UserMismatch { given: String, stream: String },
    #[error("a user cannot invite themselves")]
    SelfInvite,
    #[error("the user's inviter is already {current}; correct it with a reason instead")]
    InviterAlreadySet { current: String },
    #[error("the user's inviter is already that")]
    InviterUnchanged,
}

impl InviteError {
    /// Stable machine-readable code for clients.
    pub fn code(&self) -> &'static str {
        match self {
            Self::UserMismatch { .. } => "USER_MISMATCH",
            Self::SelfInvite => "SELF_INVITE",
            Self::InviterAlreadySet { .. } => "INVITER_ALREADY_SET",
            Self::InviterUnchanged => "INVITER_UNCHANGED",
        }
    }

    /// The request field the error is about, when there is one.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            Self::UserMismatch { .. } => Some("user_id"),
            Self::SelfInvite | Self::InviterAlreadySet { .. } => Some("inviter_user_id"),
            Self::InviterUnchanged => Some("new_inviter_user_id"),
        }
    }
}

impl InviteRelation {
    /// The user's direct inviter, if any.
    pub fn inviter(&self) -> Option<&str> {
        self.inviter_user_id.as_deref()
    }

    fn same_user(&self, user_id: &BoundedId) -> Result<(), InviteError> {
        if !self.user_id.is_empty() && self.user_id != user_id.as_str() {
            return Err(InviteError::UserMismatch {
                given: user_id.as_str().to_owned(),
                stream: self.user_id.clone(),
            });
        }
        Ok(())
    }
}

impl Decide for InviteRelation {
    const SNAPSHOT_VERSION: i32 = 1;

    fn decide(&self, command: InviteCommand) -> Result<Vec<InviteEvent>, InviteError> {
        match command {
            InviteCommand::SetInviter(cmd) => {
                self.same_user(&cmd.user_id)?;
                if cmd.inviter_user_id == cmd.user_id {
                    return Err(InviteError::SelfInvite);
                }
                match &self.inviter_user_id {
                    Some(current) if current == cmd.inviter_user_id.as_str() => Ok(vec![]),
                    Some(current) => Err(InviteError::InviterAlreadySet {
                        current: current.clone(),
                    }),
                    None if !self.user_id.is_empty() => Err(InviteError::InviterAlreadySet {
                        // Removed by a correction: only another correction sets it.
                        current: "none (removed by a correction)".to_owned(),
                    }),
                    None => Ok(vec![InviteEvent::InviterSet {
                        user_id: cmd.user_id.as_str().to_owned(),
                        inviter_user_id: cmd.inviter_user_id.as_str().to_owned(),
                        actor: cmd.actor.as_str().to_owned(),
                        set_at: cmd.set_at,
                    }]),
                }
            }
            InviteCommand::CorrectInviter(cmd) => {
                self.same_user(&cmd.user_id)?;
                if cmd.new_inviter_user_id.as_ref() == Some(&cmd.user_id) {
                    return Err(InviteError::SelfInvite);
                }
                let new = cmd.new_inviter_user_id.map(|i| i.as_str().to_owned());
                if new == self.inviter_user_id {
                    return Err(InviteError::InviterUnchanged);
                }
                Ok(vec![InviteEvent::InviterCorrected {
                    user_id: cmd.user_id.as_str().to_owned(),
                    old_inviter_user_id: self.inviter_user_id.clone(),
                    new_inviter_user_id: new,
                    actor: cmd.actor.as_str().to_owned(),
                    reason: cmd.reason.as_str().to_owned(),
                    corrected_at: cmd.corrected_at,
                }])
            }
        }
    }

    fn check(&self, event: &InviteEvent) -> Result<(), InvariantViolation> {
        let (user_id, inviter, ok) = match event {
            InviteEvent::InviterSet {
                user_id,
                inviter_user_id,
                ..
            } => (user_id, Some(inviter_user_id), self.user_id.is_empty()),
            InviteEvent::InviterCorrected {
                user_id,
                old_inviter_user_id,
                new_inviter_user_id,
                ..
            } => (
                user_id,
                new_inviter_user_id.as_ref(),
                *old_inviter_user_id == self.inviter_user_id,
            ),
        };
        let same_user = self.user_id.is_empty() || self.user_id == *user_id;
        if !ok || !same_user || inviter == Some(user_id) {
            return Err(InvariantViolation(format!(
                "{} does not follow from inviter {:?} of {}",
                event.name(),
                self.inviter_user_id,
                self.user_id
            )));
        }
        Ok(())
    }

    /// Invite relations move no money.
    fn ledger_ref(_event: &InviteEvent) -> Option<LedgerRef> {
        None
    }
}

impl Aggregate for InviteRelation {
    const TYPE: &'static str = INVITE_AGGREGATE_TYPE;
    type Command = InviteCommand;
    type Event = InviteEvent;
    type Error = InviteError;
    type Services = ();

    async fn handle(
        &mut self,
        command: InviteCommand,
        _service: &(),
        sink: &EventSink<Self>,
    ) -> Result<(), InviteError> {
        for event in self.decide(command)? {
            sink.write(event, self).await;
        }
        Ok(())
    }

    fn apply(&mut self, event: InviteEvent) {
        debug_assert_eq!(self.check(&event), Ok(()));
        match event {
            InviteEvent::InviterSet {
                user_id,
                inviter_user_id,
                ..
            } => {
                self.user_id = user_id;
                self.inviter_user_id = Some(inviter_user_id);
            }
            InviteEvent::InviterCorrected {
                user_id,
                new_inviter_user_id,
                ..
            } => {
                self.user_id = user_id;
                self.inviter_user_id = new_inviter_user_id;
            }
        }
    }
}

#[cfg(test)]
mod tests;
