//! Invite relation events. Payloads are stored forever: changing a shape means a new
//! `event_version` and an upcaster in `crate::upcast`, never a rewrite.

use chrono::{DateTime, Utc};
use cqrs_es::DomainEvent;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum InviteEvent {
    InviterSet {
        user_id: String,
        inviter_user_id: String,
        actor: String,
        set_at: DateTime<Utc>,
    },
    InviterCorrected {
        user_id: String,
        old_inviter_user_id: Option<String>,
        new_inviter_user_id: Option<String>,
        actor: String,
        reason: String,
        corrected_at: DateTime<Utc>,
    },
}

/// Current schema version of every invite relation event.
pub const INVITE_EVENT_VERSION: i32 = 1;

impl InviteEvent {
    pub fn name(&self) -> &'static str {
        match self {
            Self::InviterSet { .. } => "InviterSet",
            Self::InviterCorrected { .. } => "InviterCorrected",
        }
    }
}

impl DomainEvent for InviteEvent {
    fn event_type(&self) -> String {
        self.name().to_owned()
    }

    fn event_version(&self) -> String {
        INVITE_EVENT_VERSION.to_string()
    }
}
