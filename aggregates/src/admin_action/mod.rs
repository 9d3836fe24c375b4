//! The admin action log (issue 14 item 6, SPEC R-SEC-5): what operators and admins did
//! that is not itself a business event — API keys created, revoked or bootstrapped
//! (`keys bootstrap`; the very first key of an empty database is no one's action),
//! projection rebuilds and repairing reconciliations started, job retries, pauses,
//! resumes and kicks — recorded in the event store like any fact, hash-chained, with
//! actor, action, target and reason. One stream per target (aggregate type `admin`,
//! stream id the target, e.g. `key:3f2a…`, `projection:wallet`, `jobs`), so a
//! target's history reads in one place and unrelated actions never contend.
//! Attribution corrections and recovery resolutions need no entry here: their own
//! events already carry the actor and the reason.
//!
//! Every command records exactly one event; the only rule is that a stream belongs
//! to one target.

mod commands;
mod events;

pub use commands::{AdminAction, AdminCommand, RecordAdminAction, DETAIL_LEN_MAX};
pub use events::{AdminEvent, ADMIN_EVENT_VERSION};

use crate::decide::{Decide, InvariantViolation, LedgerRef};
use cqrs_es::event_sink::EventSink;
use cqrs_es::Aggregate;
use serde::{Deserialize, Serialize};

/// The stream type of admin actions in the event store.
pub const ADMIN_AGGREGATE_TYPE: &str = "admin";

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct AdminLog {
    /// Empty until the first event.
    pub target: String,
    /// Actions recorded on this target.
    pub actions: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdminError {
    #[error("target {given} does not belong to this stream ({stream})")]
    TargetMismatch { given: String, stream: String },
    #[error("detail is {len} bytes, more than {DETAIL_LEN_MAX}")]
    DetailTooLong { len: usize },
}

impl AdminError {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::TargetMismatch { .. } => "TARGET_MISMATCH",
            Self::DetailTooLong { .. } => "DETAIL_TOO_LONG",
        }
    }

    /// The field the error is about.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            Self::TargetMismatch { .. } => Some("target"),
            Self::DetailTooLong { .. } => Some("detail"),
        }
    }
}

impl Decide for AdminLog {
    const SNAPSHOT_VERSION: i32 = 1;

    fn decide(&self, command: AdminCommand) -> Result<Vec<AdminEvent>, AdminError> {
        let AdminCommand::RecordAdminAction(cmd) = command;
        if !self.target.is_empty() && self.target != cmd.target.as_str() {
            return Err(AdminError::TargetMismatch {
                given: cmd.target.as_str().to_owned(),
                stream: self.target.clone(),
            });
        }
        if let Some(len) = cmd.detail.as_ref().map(String::len) {
            if len > DETAIL_LEN_MAX {
                return Err(AdminError::DetailTooLong { len });
            }
        }
        Ok(vec![AdminEvent::AdminActionRecorded {
            actor: cmd.actor.as_str().to_owned(),
            action: cmd.action,
            target: cmd.target.as_str().to_owned(),
            reason: cmd.reason.map(|r| r.as_str().to_owned()),
            detail: cmd.detail,
            recorded_at: cmd.at,
        }])
    }

    fn check(&self, event: &AdminEvent) -> Result<(), InvariantViolation> {
        let AdminEvent::AdminActionRecorded { target, .. } = event;
        if !self.target.is_empty() && self.target != *target {
            return Err(InvariantViolation(format!(
                "an action on {target} in the stream of {}",
                self.target
            )));
        }
        Ok(())
    }

    /// Admin actions move no money.
    fn ledger_ref(_event: &AdminEvent) -> Option<LedgerRef> {
        None
    }
}

impl Aggregate for AdminLog {
    const TYPE: &'static str = ADMIN_AGGREGATE_TYPE;
    type Command = AdminCommand;
    type Event = AdminEvent;
    type Error = AdminError;
    type Services = ();

    async fn handle(
        &mut self,
        command: AdminCommand,
        _service: &(),
        sink: &EventSink<Self>,
    ) -> Result<(), AdminError> {
        for event in self.decide(command)? {
            sink.write(event, self).await;
        }
        Ok(())
    }

    fn apply(&mut self, event: AdminEvent) {
        debug_assert_eq!(self.check(&event), Ok(()));
        let AdminEvent::AdminActionRecorded { target, .. } = event;
        self.target = target;
        self.actions += 1;
    }
}

#[cfg(test)]
mod tests;
