//! Admin action events. Payloads are stored forever: changing a shape means a new
//! `event_version` and an upcaster in `crate::upcast`, never a rewrite.

use super::commands::AdminAction;
use chrono::{DateTime, Utc};
use cqrs_es::DomainEvent;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum AdminEvent {
    AdminActionRecorded {
        actor: String,
        action: AdminAction,
        target: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
        recorded_at: DateTime<Utc>,
    },
}

/// Current schema version of every admin event.
pub const ADMIN_EVENT_VERSION: i32 = 1;

impl AdminEvent {
    pub fn name(&self) -> &'static str {
        match self {
            Self::AdminActionRecorded { .. } => "AdminActionRecorded",
        }
    }
}

impl DomainEvent for AdminEvent {
    fn event_type(&self) -> String {
        self.name().to_owned()
    }

    fn event_version(&self) -> String {
        ADMIN_EVENT_VERSION.to_string()
    }
}
