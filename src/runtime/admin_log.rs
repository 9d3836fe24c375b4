//! Recording admin actions as events (issue 14 item 6; the aggregate is
//! `factledger_aggregates::admin_action`). API handlers and CLI commands call
//! [`record`] once the action has been accepted — the record names what was done,
//! so a refused attempt is not one — through the ordinary unit path
//! (`unit::run_command`): the same transaction, sequence and hash chain as every
//! business event; there is no second way into the event store.
//!
//! The first admin key `serve` mints on an empty key table is the one key not
//! recorded here: no actor took that action (the installation did), and the log of
//! a fresh ledger starts with its first business event; its creation time is in
//! `api_keys`. Every later key — `keys create`, `keys bootstrap` — is recorded.
//!
//! If the record cannot be written the caller fails (500 for the API, an error exit
//! for the CLI) and the log names the action: the action itself has happened, its
//! trail is what is missing. Records are read with `GET /v1/audit/events`
//! (`event_type=AdminActionRecorded`, or `actor=key:<id>`).

use crate::infra::store::{DynStore, Metadata};
use crate::runtime::unit::{run_command, UnitError};
use chrono::Utc;
use factledger_aggregates::admin_action::{
    AdminAction, AdminCommand, AdminError, AdminLog, RecordAdminAction, DETAIL_LEN_MAX,
};
use factledger_aggregates::affiliate::{AuditReason, AUDIT_REASON_LEN_MAX};
use factledger_aggregates::BoundedId;

#[derive(Debug, thiserror::Error)]
pub enum AdminLogError {
    #[error("admin action {action} on {target} cannot be recorded: {field} {rule}")]
    Invalid {
        action: &'static str,
        target: String,
        field: &'static str,
        rule: String,
    },
    #[error("admin action {action} on {target} was not recorded: {source}")]
    NotRecorded {
        action: &'static str,
        target: String,
        source: UnitError<AdminError>,
    },
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character.
fn clip(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Record `action` on `target` by `metadata.actor`; returns the event's position.
/// A blank reason is no reason; reason and detail are clipped to their limits.
pub async fn record(
    store: &DynStore,
    metadata: &Metadata,
    action: AdminAction,
    target: &str,
    reason: Option<&str>,
    detail: Option<String>,
) -> Result<i64, AdminLogError> {
    let invalid = |field: &'static str| {
        move |e: factledger_aggregates::ParseError| AdminLogError::Invalid {
            action: action.as_str(),
            target: target.to_owned(),
            field,
            rule: e.rule,
        }
    };
    let reason = reason
        .filter(|r| !r.trim().is_empty())
        .map(|r| AuditReason::parse(clip(r, AUDIT_REASON_LEN_MAX)))
        .transpose()
        .map_err(invalid("reason"))?;
    let command = AdminCommand::RecordAdminAction(RecordAdminAction {
        actor: BoundedId::parse(&metadata.actor).map_err(invalid("actor"))?,
        action,
        target: BoundedId::parse(target).map_err(invalid("target"))?,
        reason,
        detail: detail.map(|d| clip(&d, DETAIL_LEN_MAX).to_owned()),
        at: Utc::now(),
    });
    let done = run_command::<AdminLog>(store, metadata, target, command)
        .await
        .map_err(|source| {
            tracing::error!(action = action.as_str(), target, error = %source, "admin action not recorded");
            AdminLogError::NotRecorded {
                action: action.as_str(),
                target: target.to_owned(),
                source,
            }
        })?;
    tracing::info!(action = action.as_str(), target, actor = %metadata.actor, position = done.position, "admin action recorded");
    Ok(done.position)
}

/// Metadata for an action taken outside a request: the CLI (`cli:<user>`) or
/// `serve` itself.
pub fn local_metadata(actor: &str) -> Metadata {
    let id = uuid::Uuid::new_v4().to_string();
    Metadata {
        correlation_id: id.clone(),
        causation_id: None,
        command_id: None,
        actor: actor.to_owned(),
        request_id: id.clone(),
        trace_id: id.replace('-', ""),
        country_code: std::env::var("FACTLEDGER_COUNTRY").unwrap_or_else(|_| "ID".into()),
    }
}

/// The CLI's actor: `cli:<login name>` (characters outside ids replaced by `_`).
pub fn cli_actor() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "unknown".into());
    let user: String = clip(&user, 64)
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_.-@".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("cli:{user}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clipping_keeps_whole_characters() {
        assert_eq!(clip("héllo", 2), "h");
        assert_eq!(clip("abc", 10), "abc");
    }
}
