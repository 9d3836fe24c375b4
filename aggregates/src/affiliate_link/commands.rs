//! Affiliate link commands. Tagged by `"type"` on the wire; unknown fields are
//! refused.

use crate::affiliate::AuditReason;
use crate::affiliate_order::Attribution;
use crate::money::BoundedId;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Record which user owns an attribution (a tracking id, click id or referral code).
/// Once only; a replay for the same user writes nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Register {
    /// Also the stream id (`link_stream_id`).
    pub attribution: Attribution,
    pub user_id: BoundedId,
    pub actor: BoundedId,
    pub registered_at: DateTime<Utc>,
}

/// Move a registered attribution to another user by hand, audited. Orders already
/// ingested keep the owner they were recorded with (only `CorrectAttribution` moves
/// them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reassign {
    pub attribution: Attribution,
    pub new_user_id: BoundedId,
    pub actor: BoundedId,
    pub reason: AuditReason,
    pub reassigned_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum LinkCommand {
    Register(Register),
    Reassign(Reassign),
}

impl LinkCommand {
    /// The command's name as it appears in `"type"`, for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Register(_) => "Register",
            Self::Reassign(_) => "Reassign",
        }
    }
}
