//! The metadata recorded on every event of a unit.

use serde::Serialize;

/// Metadata recorded on every event of a unit (SPEC R-ES-5). `event_id` and
/// `recorded_at` are per event and live on [`super::SealedEvent`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Metadata {
    pub correlation_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub causation_id: Option<String>,
    /// The idempotency key of the command, when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command_id: Option<String>,
    pub actor: String,
    pub request_id: String,
    pub trace_id: String,
    pub country_code: String,
}

impl Metadata {
    /// The metadata of a write the service makes on its own (a job round, a cron
    /// scan, a callback): a fresh correlation id that is also the request and trace id.
    pub fn service(actor: &str, country_code: &str) -> Metadata {
        let correlation_id = uuid::Uuid::new_v4().to_string();
        Metadata {
            correlation_id: correlation_id.clone(),
            causation_id: None,
            command_id: None,
            actor: actor.to_owned(),
            request_id: correlation_id.clone(),
            trace_id: correlation_id,
            country_code: country_code.to_owned(),
        }
    }
}
