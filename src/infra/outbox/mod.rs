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
//! - isolation: a sink that is down (no connection, no answer, "unavailable") only
//!   stops its own relay, which retries with exponential backoff, never gives a message
//!   up and records `attempts`, `last_error` and `failing_since_ms`; commands never wait
//!   for a relay and other sinks go on (R-INV-8). A message the sink itself refuses
//!   ([`SinkError::Refused`]) is retried on the sink's retry schedule
//!   ([`Sink::retry_schedule`], default [`RETRY_SCHEDULE_DEFAULT`]) and then written
//!   to `outbox_dead_letters` in the transaction that moves the checkpoint past it, so
//!   one poisoned message cannot hold a sink back for good; operators list and replay
//!   dead letters ([`dead_letter`]);
//! - routing: a sink may take only some types ([`Sink::takes`], e.g. `im_member.`);
//!   its checkpoint moves past the others, which are neither sent nor dead-lettered.
//!
//! **Invariant:** a relay never skips an id. Ids are dense and commit in id order
//! (reserved under the append's sequence lock), so a missing id above the checkpoint
//! is either not visible yet (MariaDB shows a read view a moment late) or was deleted
//! by hand; the relay waits for it and, if it stays missing, reports it and retries,
//! never steps over it. (Passing a type the sink does not take, or a dead letter, is
//! not a skip: the id was read and its fate recorded.)

pub mod checkpoint;
pub mod dead_letter;
pub mod log;
pub mod nats;
pub mod relay;
pub mod webhook;

use async_trait::async_trait;
use serde::Serialize;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

pub use checkpoint::{status, OutboxStatus, SinkStatus};
pub use dead_letter::{DeadLetter, ReplayError};
pub use relay::{relay_once, spawn, RelayConfig, RelayError, Running, Step};

/// Rows read and delivered per checkpoint move: bounds memory and how much a crash
/// re-sends, while one checkpoint write per batch keeps the database quiet.
pub const BATCH_ROWS_MAX: i64 = 100;
/// Longest sink name (`outbox_sinks.name` is `VARCHAR(64)`).
pub const SINK_NAME_LEN_MAX: usize = 64;
/// Longest error text kept in `outbox_sinks.last_error` (`VARCHAR(1000)`).
pub const LAST_ERROR_CHARS_MAX: usize = 1_000;
/// The pauses before the 2nd, 3rd… delivery of a message its sink refused (1 s, 5 s,
/// 30 s, 2 min, 5 min: six attempts over about 7.5 minutes) before it becomes a dead
/// letter. Refusals are the receiver's verdict on this message (a 4xx or 500 answer),
/// so a quick first retry catches a race on its side, and the minutes after it cover a
/// receiver's fix or rollback; a down receiver is not a refusal and never dead-letters.
/// Longer would hold every later message of the sink back for longer, per bad message.
pub const RETRY_SCHEDULE_DEFAULT: [Duration; 5] = [
    Duration::from_secs(1),
    Duration::from_secs(5),
    Duration::from_secs(30),
    Duration::from_secs(120),
    Duration::from_secs(300),
];
/// Most steps a configured retry schedule may have.
pub const RETRY_SCHEDULE_LEN_MAX: usize = 20;
/// Longest single pause of a configured retry schedule: one day.
pub const RETRY_DELAY_S_MAX: u64 = 86_400;
/// Longest type prefix a sink may filter on (`outbox.type` is `VARCHAR(128)`).
pub const TYPE_PREFIX_LEN_MAX: usize = 128;

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

/// Why a sink did not take a message. The relay records it and retries: with backoff,
/// or on the sink's retry schedule for a [`SinkError::Refused`] message.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The sink could not be reached (connection refused or dropped, DNS, TLS…).
    #[error("cannot connect: {0}")]
    Connect(String),
    /// The sink answered and refused THIS message (a webhook's 4xx or 500 answer, a
    /// message over JetStream's size limit): the only failure that counts against the
    /// retry schedule and ends in a dead letter.
    #[error("refused: {0}")]
    Refused(String),
    /// The sink answered but takes nothing now (HTTP 408, 429, 502, 503, 504; a
    /// JetStream stream that is full or gone): it is down, not the message.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// No acknowledgement within the limit.
    #[error("no acknowledgement within {0} ms")]
    Timeout(u64),
    /// The sink is misconfigured (a redirect, 401/403/404/405, no stream): it refuses
    /// every message alike and will not get better by retrying alone.
    #[error("misconfigured: {0}")]
    Config(String),
}

impl SinkError {
    /// Whether the failure is about this message rather than the sink: only then is
    /// it retried on the schedule and, when that is used up, dead-lettered.
    pub fn is_message_specific(&self) -> bool {
        matches!(self, SinkError::Refused(_))
    }
}

/// Somewhere outbox messages go. Implementations deliver ONE message and say whether
/// the destination acknowledged it; the relay owns order, batching, checkpoints and
/// retries, so a sink holds no state beyond its connection.
#[async_trait]
pub trait Sink: Send + Sync + 'static {
    /// The sink's checkpoint name in `outbox_sinks` (`log`, `nats`, `webhook:<name>`);
    /// at most [`SINK_NAME_LEN_MAX`] characters.
    fn name(&self) -> &str;

    /// Whether this sink takes messages of this `type` at all (default: every type).
    /// The relay moves the sink's checkpoint past the others without sending them.
    fn takes(&self, message_type: &str) -> bool {
        let _ = message_type;
        true
    }

    /// The pauses before each retry of a message this sink refused; one refusal more
    /// than it has steps makes the message a dead letter. `None` (the default): the
    /// relay's [`relay::RelayConfig::retry_schedule`].
    fn retry_schedule(&self) -> Option<&[Duration]> {
        None
    }

    /// Deliver one message; `Ok` only once the destination has acknowledged it.
    async fn deliver(&self, message: &OutboxMessage) -> Result<(), SinkError>;
}

/// Which messages a configured sink takes and how often a refused one is retried
/// (`FACTLEDGER_WEBHOOK_<NAME>_TYPES`, `…_RETRY_SECONDS` for webhooks).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SinkPolicy {
    /// Type prefixes taken (`im_member.` takes `im_member.Joined`); empty: every type.
    pub types: Vec<String>,
    /// The sink's own retry schedule; `None`: the relay's.
    pub retry_schedule: Option<Vec<Duration>>,
}

impl SinkPolicy {
    /// Whether a message of `message_type` is taken.
    pub fn takes(&self, message_type: &str) -> bool {
        self.types.is_empty()
            || self
                .types
                .iter()
                .any(|p| message_type.starts_with(p.as_str()))
    }

    /// Type prefixes from a comma-separated list (`field` names the setting in the
    /// error): each 1 to [`TYPE_PREFIX_LEN_MAX`] visible ASCII characters, at least
    /// one.
    pub fn parse_types(field: &str, value: &str) -> Result<Vec<String>, ConfigError> {
        let rule = format!(
            "comma-separated type prefixes (e.g. im_member.,wallet.), each 1-{TYPE_PREFIX_LEN_MAX} \
             visible ASCII characters without spaces"
        );
        let prefixes: Vec<String> = value.split(',').map(|p| p.trim().to_owned()).collect();
        let valid = |p: &String| {
            !p.is_empty()
                && p.len() <= TYPE_PREFIX_LEN_MAX
                && p.bytes().all(|b| b.is_ascii_graphic())
        };
        if prefixes.iter().all(valid) {
            Ok(prefixes)
        } else {
            Err(ConfigError::invalid(field, rule))
        }
    }

    /// A retry schedule from comma-separated seconds (`10,30,60,300`; `field` names
    /// the setting in the error): 1 to [`RETRY_SCHEDULE_LEN_MAX`] integers, each 1 to
    /// [`RETRY_DELAY_S_MAX`].
    pub fn parse_retry_seconds(field: &str, value: &str) -> Result<Vec<Duration>, ConfigError> {
        let rule = format!(
            "comma-separated whole seconds (e.g. 10,30,60,300): 1-{RETRY_SCHEDULE_LEN_MAX} \
             values, each 1-{RETRY_DELAY_S_MAX}"
        );
        let seconds: Option<Vec<u64>> = value
            .split(',')
            .map(|v| v.trim().parse::<u64>().ok())
            .map(|v| v.filter(|s| (1..=RETRY_DELAY_S_MAX).contains(s)))
            .collect();
        match seconds {
            Some(s) if !s.is_empty() && s.len() <= RETRY_SCHEDULE_LEN_MAX => {
                Ok(s.into_iter().map(Duration::from_secs).collect())
            }
            _ => Err(ConfigError::invalid(field, rule)),
        }
    }
}

/// The sinks this process relays to, shared with the operator endpoints that need a
/// live sink (replaying a dead letter); the composition root puts it in the HTTP
/// state's parts.
#[derive(Clone, Default)]
pub struct Sinks(pub Arc<Vec<Arc<dyn Sink>>>);

impl Sinks {
    /// The sink named `name`, if this process has it.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Sink>> {
        self.0.iter().find(|s| s.name() == name)
    }
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

/// One delivery within `timeout_ms` (a sink that does not answer in time failed).
pub(crate) async fn deliver(
    sink: &dyn Sink,
    message: &OutboxMessage,
    timeout_ms: u64,
) -> Result<(), SinkError> {
    let timeout = std::time::Duration::from_millis(timeout_ms);
    match tokio::time::timeout(timeout, sink.deliver(message)).await {
        Ok(outcome) => outcome,
        Err(_) => Err(SinkError::Timeout(timeout_ms)),
    }
}
