//! The log sink: one structured `tracing` line per message (target
//! `factledger::outbox`), for people and log shippers. It cannot fail, so it never
//! holds a backlog; it is off by default (`serve --outbox-log true` turns it on): a line
//! per message with its payload is for development, and under load it cost as much as
//! the commands themselves (issue 19).

use super::{OutboxMessage, Sink, SinkError};
use async_trait::async_trait;

/// The log sink's checkpoint name.
pub const LOG_SINK_NAME: &str = "log";

#[derive(Debug, Default)]
pub struct LogSink;

#[async_trait]
impl Sink for LogSink {
    fn name(&self) -> &str {
        LOG_SINK_NAME
    }

    async fn deliver(&self, m: &OutboxMessage) -> Result<(), SinkError> {
        tracing::info!(
            target: "factledger::outbox",
            outbox_id = m.id,
            aggregatetype = %m.aggregatetype,
            aggregateid = %m.aggregateid,
            outbox_type = %m.r#type,
            created_at = %m.created_at,
            payload = %m.payload,
            "outbox message"
        );
        Ok(())
    }
}
