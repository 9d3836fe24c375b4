//! The NATS JetStream sink: each message is published to `<prefix>.<type>` (e.g.
//! `factledger.wallet.PendingCredited`) with the header `Nats-Msg-Id: <outbox id>` and
//! waited on until JetStream acknowledges that it stored it. JetStream drops a second
//! message with the same id inside the stream's duplicate window (2 minutes by
//! default, longer than the relay's longest backoff), so a re-send after a lost
//! acknowledgement is stored once.
//!
//! One publish is acknowledged before the next is sent: pipelining would let a later
//! message be stored while an earlier one failed, and the retry would then put the
//! earlier one after it — out of order for its aggregate.
//!
//! The sink connects lazily and reconnects after any failure, so a server that is
//! down at start-up or goes away later only delays delivery: a lost connection, a
//! missing acknowledgement, a stream that is full or gone are the server's state, not
//! the message's, and are retried until they pass ([`publish_error`]); only a message
//! JetStream cannot take as such (over its size limit) is a refusal that may end in a
//! dead letter. On connecting it makes sure a stream covers `<prefix>.>` (creating
//! `FACTLEDGER` if missing; an existing stream is left as operations configured it).

use super::{OutboxMessage, Sink, SinkError};
use async_trait::async_trait;
use std::time::Duration;

/// The sink's checkpoint name.
pub const NATS_SINK_NAME: &str = "nats";
/// Default subject prefix: subjects are `<prefix>.<type>`.
pub const SUBJECT_PREFIX_DEFAULT: &str = "factledger";
/// Default stream created (when missing) over `<prefix>.>`.
pub const STREAM_DEFAULT: &str = "FACTLEDGER";
/// Longest wait for a TCP connection and the server's greeting.
pub const NATS_CONNECT_TIMEOUT_MS: u64 = 2_000;
/// Longest wait for JetStream's acknowledgement of one publish (and for stream
/// look-ups).
pub const NATS_ACK_TIMEOUT_MS: u64 = 5_000;

#[derive(Debug, Clone)]
pub struct NatsConfig {
    /// `nats://host:port`; credentials in it come from the environment only.
    pub url: String,
    pub subject_prefix: String,
    /// The stream to create over `<prefix>.>` when none covers it; `None` when
    /// operations manage streams themselves.
    pub stream: Option<String>,
}

impl NatsConfig {
    pub fn new(url: impl Into<String>) -> Self {
        NatsConfig {
            url: url.into(),
            subject_prefix: SUBJECT_PREFIX_DEFAULT.into(),
            stream: Some(STREAM_DEFAULT.into()),
        }
    }

    /// The subject of a message type: `<prefix>.<type>`, with characters NATS gives a
    /// meaning to (space, `*`, `>`) replaced so a type can never become a wildcard.
    pub fn subject(&self, message_type: &str) -> String {
        let clean: String = message_type
            .chars()
            .map(|c| {
                if c.is_whitespace() || c == '*' || c == '>' {
                    '_'
                } else {
                    c
                }
            })
            .collect();
        format!("{}.{clean}", self.subject_prefix)
    }
}

pub struct NatsSink {
    config: NatsConfig,
    /// The JetStream context of the current connection; `None` until connected and
    /// after a failure (the next delivery connects afresh).
    context: tokio::sync::Mutex<Option<async_nats::jetstream::Context>>,
}

impl NatsSink {
    pub fn new(config: NatsConfig) -> Self {
        NatsSink {
            config,
            context: tokio::sync::Mutex::new(None),
        }
    }

    async fn connect(&self) -> Result<async_nats::jetstream::Context, SinkError> {
        let client = async_nats::ConnectOptions::new()
            .connection_timeout(Duration::from_millis(NATS_CONNECT_TIMEOUT_MS))
            .request_timeout(Some(Duration::from_millis(NATS_ACK_TIMEOUT_MS)))
            .connect(self.config.url.as_str())
            .await
            .map_err(|e| SinkError::Connect(e.to_string()))?;
        let js = async_nats::jetstream::new(client);
        if let Some(stream) = &self.config.stream {
            let subjects = vec![format!("{}.>", self.config.subject_prefix)];
            js.get_or_create_stream(async_nats::jetstream::stream::Config {
                name: stream.clone(),
                subjects,
                ..Default::default()
            })
            .await
            .map_err(|e| SinkError::Config(format!("stream {stream}: {e}")))?;
        }
        Ok(js)
    }

    async fn publish(
        js: &async_nats::jetstream::Context,
        subject: String,
        m: &OutboxMessage,
    ) -> Result<(), SinkError> {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(
            async_nats::header::NATS_MESSAGE_ID,
            m.id.to_string().as_str(),
        );
        let ack = js
            .publish_with_headers(subject, headers, m.body().into())
            .await
            .map_err(publish_error)?;
        ack.await.map_err(publish_error)?;
        Ok(())
    }
}

/// What a failed publish says: about this message (too large; the `WrongLast*`
/// expectations are never set here) only when JetStream could not take it as such;
/// otherwise the server or the stream is not there or not taking anything now, which
/// is retried with backoff and never dead-lettered.
fn publish_error(e: async_nats::jetstream::context::PublishError) -> SinkError {
    use async_nats::jetstream::context::PublishErrorKind as Kind;
    let text = e.to_string();
    match e.kind() {
        Kind::TimedOut => SinkError::Timeout(NATS_ACK_TIMEOUT_MS),
        Kind::BrokenPipe => SinkError::Connect(text),
        Kind::StreamNotFound => SinkError::Config(text),
        Kind::MaxPayloadExceeded | Kind::WrongLastMessageId | Kind::WrongLastSequence => {
            SinkError::Refused(text)
        }
        _ => SinkError::Unavailable(text),
    }
}

#[async_trait]
impl Sink for NatsSink {
    fn name(&self) -> &str {
        NATS_SINK_NAME
    }

    async fn deliver(&self, m: &OutboxMessage) -> Result<(), SinkError> {
        let mut guard = self.context.lock().await;
        let js = match guard.as_ref() {
            Some(js) => js.clone(),
            None => {
                let js = self.connect().await?;
                *guard = Some(js.clone());
                js
            }
        };
        let outcome = Self::publish(&js, self.config.subject(&m.r#type), m).await;
        if outcome.is_err() {
            // Start from a fresh connection next time (dropping the client ends its
            // own reconnect loop).
            *guard = None;
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subject_is_the_prefix_and_the_type_and_never_a_wildcard() {
        let c = NatsConfig::new("nats://127.0.0.1:4222");
        assert_eq!(
            c.subject("wallet.PendingCredited"),
            "factledger.wallet.PendingCredited"
        );
        assert_eq!(c.subject("a >b*"), "factledger.a__b_");
    }
}
