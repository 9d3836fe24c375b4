//! Admin action commands. Tagged by `"type"` on the wire; unknown fields are refused.

use crate::affiliate::AuditReason;
use crate::money::BoundedId;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// What an operator or admin did. Names are stable: they are stored in events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdminAction {
    /// `factledger keys create`.
    KeyCreated,
    /// `factledger keys revoke`.
    KeyRevoked,
    /// An admin key minted by `factledger keys bootstrap` (no unrevoked admin was
    /// left).
    KeyBootstrapped,
    /// A projection rebuild was started (API or CLI).
    RebuildStarted,
    /// A reconciliation that may repair projection rows was started.
    ReconciliationRepairStarted,
    /// Manual job retry (R-JOB-6).
    JobsRetried,
    /// Job maintenance pause.
    JobsPaused,
    /// End of a maintenance pause.
    JobsResumed,
    /// One job taken now (`:kick`).
    JobKicked,
    /// A bill refresh requested by an operator or admin (a service's refresh is its
    /// business traffic, traced by request id).
    BillRefreshRequested,
}

impl AdminAction {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::KeyCreated => "key_created",
            Self::KeyRevoked => "key_revoked",
            Self::KeyBootstrapped => "key_bootstrapped",
            Self::RebuildStarted => "rebuild_started",
            Self::ReconciliationRepairStarted => "reconciliation_repair_started",
            Self::JobsRetried => "jobs_retried",
            Self::JobsPaused => "jobs_paused",
            Self::JobsResumed => "jobs_resumed",
            Self::JobKicked => "job_kicked",
            Self::BillRefreshRequested => "bill_refresh_requested",
        }
    }
}

/// Record one admin action on the stream of its target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordAdminAction {
    /// Who did it: `key:<id>` or `cli:<user>`.
    pub actor: BoundedId,
    pub action: AdminAction,
    /// What it was done to; also the stream id: `key:<id>`, `projection:wallet`,
    /// `jobs`, `job:<code>`, `reconciliation:<id>`.
    pub target: BoundedId,
    /// Why, when the caller said (pause and resume take one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<AuditReason>,
    /// What else identifies the action (a key's role, a rebuild's scope, retried
    /// codes), at most [`DETAIL_LEN_MAX`] bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    pub at: DateTime<Utc>,
}

/// Longest `detail` kept: enough for a role, a scope or a page of job codes.
pub const DETAIL_LEN_MAX: usize = 2_000;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum AdminCommand {
    RecordAdminAction(RecordAdminAction),
}
