//! Affiliate link events. Payloads are stored forever: changing a shape means a new
//! `event_version` and an upcaster in `crate::upcast`, never a rewrite.

use chrono::{DateTime, Utc};
use cqrs_es::DomainEvent;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum LinkEvent {
    LinkRegistered {
        /// `TRACKING_ID`, `CLICK_ID` or `REFERRAL_CODE` (the `Attribution` kind).
        kind: String,
        value: String,
        user_id: String,
        actor: String,
        registered_at: DateTime<Utc>,
    },
    LinkReassigned {
        kind: String,
        value: String,
        old_user_id: String,
        new_user_id: String,
        actor: String,
        reason: String,
        reassigned_at: DateTime<Utc>,
    },
}

/// Current schema version of every affiliate link event.
pub const LINK_EVENT_VERSION: i32 = 1;

impl LinkEvent {
    pub fn name(&self) -> &'static str {
        match self {
            Self::LinkRegistered { .. } => "LinkRegistered",
            Self::LinkReassigned { .. } => "LinkReassigned",
        }
    }
}

impl DomainEvent for LinkEvent {
    fn event_type(&self) -> String {
        self.name().to_owned()
    }

    fn event_version(&self) -> String {
        LINK_EVENT_VERSION.to_string()
    }
}
