//! Invite relation commands. Tagged by `"type"` on the wire; unknown fields are
//! refused.

use crate::affiliate::AuditReason;
use crate::money::BoundedId;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Record who invited a user (at sign-up). Once only; a replay with the same inviter
/// writes nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetInviter {
    /// The invited user; also the stream id.
    pub user_id: BoundedId,
    pub inviter_user_id: BoundedId,
    pub actor: BoundedId,
    pub set_at: DateTime<Utc>,
}

/// Change or remove a user's inviter by hand, audited. Rewards already recorded keep
/// the inviter they were recorded with (orders snapshot the inviter at ingest).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CorrectInviter {
    pub user_id: BoundedId,
    /// `None` removes the relation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_inviter_user_id: Option<BoundedId>,
    pub actor: BoundedId,
    pub reason: AuditReason,
    pub corrected_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum InviteCommand {
    SetInviter(SetInviter),
    CorrectInviter(CorrectInviter),
}

impl InviteCommand {
    /// The command's name as it appears in `"type"`, for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Self::SetInviter(_) => "SetInviter",
            Self::CorrectInviter(_) => "CorrectInviter",
        }
    }
}
