//! The outbox relay (SPEC R-OUT-1, R-INV-7, R-INV-8): outbox rows are written inside
//! the money transaction (see `store`, `bus`, `alerts`); this module tells the outside
//! world about them, after commit, at least once.
//!
//! One relay task per configured [`Sink`] (NATS JetStream, an HTTP webhook, the log).
//! Each reads `outbox` rows with `id > delivered_id` in id order, in batches of at most
//! [`BATCH_ROWS_MAX`], delivers them one after the other (each acknowledged before the
//! next is sent) and then moves that sink's checkpoint (`outbox_sinks.delivered_id`) by
//! compare-and-set on its previous value. So:
//!
//! - order: a sink receives rows in id order, hence every aggregate's rows in the order
//!   they were written, also when a backlog drains after an outage;
//! - at least once: a crash between delivery and checkpoint re-sends; consumers dedupe
//!   by the outbox id (JetStream does it for us through `Nats-Msg-Id`);
//! - isolation: a sink that is down only stops its own relay, which retries with
//!   exponential backoff and records `attempts`, `last_error` and `failing_since_ms`;
//!   commands never wait for a relay and other sinks go on (R-INV-8).
//!
//! **Invariant:** a relay never skips an id. Ids are dense and commit in id order
//! (reserved under the append's sequence lock), so a missing id above the checkpoint
//! is either not visible yet (MariaDB shows a read view a moment late) or was deleted
//! by hand; the relay waits for it and, if it stays missing, reports it and retries,
//! never steps over it.

pub mod checkpoint;
pub mod log;
pub mod nats;
pub mod relay;
pub mod webhook;

use async_trait::async_trait;
use serde::Serialize;
use serde_json::Value;

pub use checkpoint::{status, OutboxStatus, SinkStatus};
pub use relay::{relay_once, spawn, RelayConfig, RelayError, Running, Step};

/// Rows read and delivered per checkpoint move: bounds memory and how much a crash
/// re-sends, while one checkpoint write per batch keeps the database quiet.
pub const BATCH_ROWS_MAX: i64 = 100;
/// Longest sink name (`outbox_sinks.name` is `VARCHAR(64)`).
pub const SINK_NAME_LEN_MAX: usize = 64;
/// Longest error text kept in `outbox_sinks.last_error` (`VARCHAR(1000)`).
pub const LAST_ERROR_CHARS_MAX: usize = 1_000;

/// One outbox row as every sink sends it: the Debezium-style columns, the payload
/// parsed (it is JSON text by contract) and the time it was written.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct OutboxMessage {
    /// Dense, unique and stable: consumers dedupe by it (R-INV-7).
    pub id: i64,
    pub aggregatetype: String,
    pub aggregateid: String,
    /// `<aggregate>.<Event>` or `alert.<kind>`; the NATS subject is built from it.
    pub r#type: String,
    #[schema(value_type = Object)]
    pub payload: Value,
    /// RFC 3339 UTC with milliseconds.
    pub created_at: String,
}

impl OutboxMessage {
    /// The JSON body sent to NATS and webhooks (and signed for webhooks).
    pub fn body(&self) -> Vec<u8> {
        // A struct of strings, integers and a `Value` always serialises.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// Why a sink did not take a message. The relay records it and retries with backoff.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The sink could not be reached (connection refused, DNS, TLS…).
    #[error("cannot connect: {0}")]
    Connect(String),
    /// The sink answered but did not accept the message (non-2xx, a JetStream error).
    #[error("refused: {0}")]
    Refused(String),
    /// No acknowledgement within the limit.
    #[error("no acknowledgement within {0} ms")]
    Timeout(u64),
    /// The sink is misconfigured (it will not get better by retrying alone).
    #[error("misconfigured: {0}")]
    Config(String),
}

/// Somewhere outbox messages go. Implementations deliver ONE message and say whether
/// the destination acknowledged it; the relay owns order, batching, checkpoints and
/// retries, so a sink holds no state beyond its connection.
#[async_trait]
pub trait Sink: Send + Sync + 'static {
    /// The sink's checkpoint name in `outbox_sinks` (`log`, `nats`, `webhook:<name>`);
    /// at most [`SINK_NAME_LEN_MAX`] characters.
    fn name(&self) -> &str;

    /// Deliver one message; `Ok` only once the destination has acknowledged it.
    async fn deliver(&self, message: &OutboxMessage) -> Result<(), SinkError>;
}

/// Errors of the relay's configuration (at start-up, from flags and environment).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
}

impl ConfigError {
    fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Cut an error text to what `last_error` holds, on a character boundary.
pub fn truncate_error(e: &str) -> String {
    e.chars().take(LAST_ERROR_CHARS_MAX).collect()
}
