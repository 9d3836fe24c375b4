//! The affiliate link aggregate: which user owns an attribution (R-ORD-4: "attribution
//! from tracking/click/referral data"). One stream per attribution (stream id
//! `<KIND>:<value>`, e.g. `TRACKING_ID:abc`).
//!
//! Ownership is reference data recorded as events, so the ingest unit resolves an
//! order's attribution from the store and projections and replays never call out.
//! The owner is registered once (the same user again writes nothing, R-INV-1; another
//! user is refused `LINK_ALREADY_REGISTERED`), and only an audited `Reassign` (old
//! user, new user, actor, reason) moves it. Orders already ingested keep their owner.

mod commands;
mod events;

pub use commands::{LinkCommand, Reassign, Register};
pub use events::{LinkEvent, LINK_EVENT_VERSION};

use crate::affiliate_order::Attribution;
use crate::decide::{Decide, InvariantViolation, LedgerRef};
use cqrs_es::event_sink::EventSink;
use cqrs_es::Aggregate;
use serde::{Deserialize, Serialize};

/// The stream type of affiliate links in the event store.
pub const AFFILIATE_LINK_AGGREGATE_TYPE: &str = "affiliate_link";

/// The attribution's kind as on the wire (`TRACKING_ID`, `CLICK_ID`, `REFERRAL_CODE`)
/// and its value.
fn kind_and_value(attribution: &Attribution) -> (&'static str, &str) {
    match attribution {
        Attribution::TrackingId(v) => ("TRACKING_ID", v.as_str()),
        Attribution::ClickId(v) => ("CLICK_ID", v.as_str()),
        Attribution::ReferralCode(v) => ("REFERRAL_CODE", v.as_str()),
    }
}

/// The stream id of an attribution's link: `<KIND>:<value>`, e.g. `TRACKING_ID:abc`.
pub fn link_stream_id(attribution: &Attribution) -> String {
    let (kind, value) = kind_and_value(attribution);
    format!("{kind}:{value}")
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct AffiliateLink {
    /// Empty until the first event.
    pub kind: String,
    /// Empty until the first event.
    pub value: String,
    /// `None` until registered.
    pub user_id: Option<String>,
}

/// Why a link command was refused. Nothing is written when a command is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    #[error("attribution {given} does not belong to this stream ({stream})")]
    LinkMismatch { given: String, stream: String },
    #[error("the attribution already belongs to {current}; reassign it with a reason instead")]
    LinkAlreadyRegistered { current: String },
    #[error("the attribution is not registered to any user")]
    LinkNotFound,
    #[error("the attribution already belongs to that user")]
    LinkUnchanged,
}

impl LinkError {
    /// Stable machine-readable code for clients.
    pub fn code(&self) -> &'static str {
        match self {
            Self::LinkMismatch { .. } => "LINK_MISMATCH",
            Self::LinkAlreadyRegistered { .. } => "LINK_ALREADY_REGISTERED",
            Self::LinkNotFound => "LINK_NOT_FOUND",
            Self::LinkUnchanged => "LINK_UNCHANGED",
        }
    }

    /// The request field the error is about, when there is one.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            Self::LinkMismatch { .. } | Self::LinkNotFound => Some("attribution"),
            Self::LinkAlreadyRegistered { .. } => Some("user_id"),
            Self::LinkUnchanged => Some("new_user_id"),
        }
    }
}

impl AffiliateLink {
    /// The user the attribution resolves to, if registered.
    pub fn owner(&self) -> Option<&str> {
        self.user_id.as_deref()
    }

    fn is_new(&self) -> bool {
        self.kind.is_empty()
    }

    fn same_link(&self, attribution: &Attribution) -> Result<(&'static str, String), LinkError> {
        let (kind, value) = kind_and_value(attribution);
        if !self.is_new() && (self.kind != kind || self.value != value) {
            return Err(LinkError::LinkMismatch {
                given: link_stream_id(attribution),
                stream: format!("{}:{}", self.kind, self.value),
            });
        }
        Ok((kind, value.to_owned()))
    }
}

impl Decide for AffiliateLink {
    const SNAPSHOT_VERSION: i32 = 1;

    fn decide(&self, command: LinkCommand) -> Result<Vec<LinkEvent>, LinkError> {
        match command {
            LinkCommand::Register(cmd) => {
                let (kind, value) = self.same_link(&cmd.attribution)?;
                match &self.user_id {
                    Some(current) if current == cmd.user_id.as_str() => Ok(vec![]),
                    Some(current) => Err(LinkError::LinkAlreadyRegistered {
                        current: current.clone(),
                    }),
                    None => Ok(vec![LinkEvent::LinkRegistered {
                        kind: kind.to_owned(),
                        value,
                        user_id: cmd.user_id.as_str().to_owned(),
                        actor: cmd.actor.as_str().to_owned(),
                        registered_at: cmd.registered_at,
                    }]),
                }
            }
            LinkCommand::Reassign(cmd) => {
                let (kind, value) = self.same_link(&cmd.attribution)?;
                let Some(old) = &self.user_id else {
                    return Err(LinkError::LinkNotFound);
                };
                if old == cmd.new_user_id.as_str() {
                    return Err(LinkError::LinkUnchanged);
                }
                Ok(vec![LinkEvent::LinkReassigned {
                    kind: kind.to_owned(),
                    value,
                    old_user_id: old.clone(),
                    new_user_id: cmd.new_user_id.as_str().to_owned(),
                    actor: cmd.actor.as_str().to_owned(),
                    reason: cmd.reason.as_str().to_owned(),
                    reassigned_at: cmd.reassigned_at,
                }])
            }
        }
    }

    fn check(&self, event: &LinkEvent) -> Result<(), InvariantViolation> {
        let ok = match event {
            LinkEvent::LinkRegistered { kind, value, .. } => {
                self.is_new()
                    && ["TRACKING_ID", "CLICK_ID", "REFERRAL_CODE"].contains(&kind.as_str())
                    && !value.is_empty()
            }
            LinkEvent::LinkReassigned {
                kind,
                value,
                old_user_id,
                new_user_id,
                ..
            } => {
                *kind == self.kind
                    && *value == self.value
                    && self.user_id.as_ref() == Some(old_user_id)
                    && old_user_id != new_user_id
            }
        };
        if !ok {
            return Err(InvariantViolation(format!(
                "{} does not follow from owner {:?} of link {}:{}",
                event.name(),
                self.user_id,
                self.kind,
                self.value
            )));
        }
        Ok(())
    }

    /// Affiliate links move no money.
    fn ledger_ref(_event: &LinkEvent) -> Option<LedgerRef> {
        None
    }
}

impl Aggregate for AffiliateLink {
    const TYPE: &'static str = AFFILIATE_LINK_AGGREGATE_TYPE;
    type Command = LinkCommand;
    type Event = LinkEvent;
    type Error = LinkError;
    type Services = ();

    async fn handle(
        &mut self,
        command: LinkCommand,
        _service: &(),
        sink: &EventSink<Self>,
    ) -> Result<(), LinkError> {
        for event in self.decide(command)? {
            sink.write(event, self).await;
        }
        Ok(())
    }

    fn apply(&mut self, event: LinkEvent) {
        debug_assert_eq!(self.check(&event), Ok(()));
        match event {
            LinkEvent::LinkRegistered {
                kind,
                value,
                user_id,
                ..
            } => {
                self.kind = kind;
                self.value = value;
                self.user_id = Some(user_id);
            }
            LinkEvent::LinkReassigned {
                kind,
                value,
                new_user_id,
                ..
            } => {
                self.kind = kind;
                self.value = value;
                self.user_id = Some(new_user_id);
            }
        }
    }
}

#[cfg(test)]
mod tests;
