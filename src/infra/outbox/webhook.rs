//! HTTP webhook sinks: each message is one `POST` of its JSON body, signed so the
//! receiver can tell it came from us and is fresh:
//!
//! - `x-factledger-outbox-id`: the outbox id (dedupe by it; deliveries repeat),
//! - `x-factledger-timestamp`: Unix seconds when this attempt was signed,
//! - `x-factledger-signature`: lowercase hex `HMAC-SHA256(secret, timestamp + "." + body)`.
//!
//! Signing the timestamp with the body lets a receiver refuse replays of old
//! deliveries. A 2xx answer within [`WEBHOOK_TIMEOUT_MS`] is an acknowledgement;
//! anything else (other status, redirect, timeout, refused connection) is a failure the
//! relay retries. Secrets come from the environment only
//! (`FACTLEDGER_WEBHOOK_<NAME>_SECRET`), never from the command line.

use super::{ConfigError, OutboxMessage, Sink, SinkError, SINK_NAME_LEN_MAX};
use async_trait::async_trait;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Longest a receiver may take to answer one delivery.
pub const WEBHOOK_TIMEOUT_MS: u64 = 5_000;
/// Longest time to establish the connection (a down receiver fails fast).
pub const WEBHOOK_CONNECT_TIMEOUT_MS: u64 = 2_000;
/// Shortest secret accepted: 16 bytes, so a signature cannot be forged by guessing it.
pub const WEBHOOK_SECRET_LEN_MIN: usize = 16;
/// Prefix of every webhook's checkpoint name.
pub const WEBHOOK_SINK_PREFIX: &str = "webhook:";

pub const HEADER_OUTBOX_ID: &str = "x-factledger-outbox-id";
pub const HEADER_TIMESTAMP: &str = "x-factledger-timestamp";
pub const HEADER_SIGNATURE: &str = "x-factledger-signature";

/// One configured webhook.
#[derive(Clone)]
pub struct WebhookConfig {
    /// Lower case, `[a-z0-9_-]`: the sink is `webhook:<name>`.
    pub name: String,
    pub url: String,
    pub secret: Vec<u8>,
}

impl std::fmt::Debug for WebhookConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        f.debug_struct("WebhookConfig")
            .field("name", &self.name)
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// The hex HMAC-SHA256 signature of one delivery.
pub fn signature(secret: &[u8], timestamp: &str, body: &[u8]) -> String {
    // HMAC accepts keys of any length; `new_from_slice` cannot fail for it.
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret) {
        Ok(mac) => mac,
        Err(_) => return String::new(),
    };
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// Webhooks configured in the environment: every `FACTLEDGER_WEBHOOK_<NAME>_URL` with
/// its `FACTLEDGER_WEBHOOK_<NAME>_SECRET`. A URL without a secret (or a secret without a
/// URL) is an error, so a typo cannot silently send unsigned or no notifications.
pub fn webhooks_from_env(
    vars: impl IntoIterator<Item = (String, String)>,
) -> Result<Vec<WebhookConfig>, ConfigError> {
    const PREFIX: &str = "FACTLEDGER_WEBHOOK_";
    let mut urls = std::collections::BTreeMap::new();
    let mut secrets = std::collections::BTreeMap::new();
    for (key, value) in vars {
        let Some(rest) = key.strip_prefix(PREFIX) else {
            continue;
        };
        if let Some(name) = rest.strip_suffix("_URL") {
            urls.insert(name.to_owned(), value);
        } else if let Some(name) = rest.strip_suffix("_SECRET") {
            secrets.insert(name.to_owned(), value);
        } else {
            return Err(ConfigError::invalid(
                key.clone(),
                "expected FACTLEDGER_WEBHOOK_<NAME>_URL or FACTLEDGER_WEBHOOK_<NAME>_SECRET",
            ));
        }
    }
    if let Some(name) = secrets.keys().find(|n| !urls.contains_key(*n)) {
        return Err(ConfigError::invalid(
            format!("{PREFIX}{name}_URL"),
            "a webhook secret is set but not its URL",
        ));
    }
    urls.into_iter()
        .map(|(name, url)| {
            let field = format!("{PREFIX}{name}_SECRET");
            let secret = secrets
                .remove(&name)
                .ok_or_else(|| ConfigError::invalid(&field, "webhook URL set without a secret"))?;
            WebhookConfig::new(&name, url, secret.into_bytes())
        })
        .collect()
}

impl WebhookConfig {
    /// Check a webhook's name, URL and secret.
    pub fn new(name: &str, url: String, secret: Vec<u8>) -> Result<Self, ConfigError> {
        let name = name.to_ascii_lowercase().replace('_', "-");
        let field = format!("webhook {name}");
        if name.is_empty()
            || WEBHOOK_SINK_PREFIX.len() + name.len() > SINK_NAME_LEN_MAX
            || !name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return Err(ConfigError::invalid(
                field,
                "name must be 1-56 letters, digits, '_' or '-'",
            ));
        }
        let parsed = reqwest::Url::parse(&url)
            .map_err(|e| ConfigError::invalid(&field, format!("URL: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(ConfigError::invalid(
                &field,
                "URL must be http:// or https://",
            ));
        }
        if secret.len() < WEBHOOK_SECRET_LEN_MIN {
            return Err(ConfigError::invalid(
                &field,
                format!("secret must be at least {WEBHOOK_SECRET_LEN_MIN} bytes"),
            ));
        }
        Ok(WebhookConfig { name, url, secret })
    }
}

/// A webhook sink.
pub struct WebhookSink {
    sink_name: String,
    url: String,
    secret: Vec<u8>,
    client: reqwest::Client,
}

impl WebhookSink {
    pub fn new(config: WebhookConfig) -> Result<Self, ConfigError> {
        let client = reqwest::Client::builder()
            .timeout(std::time::Duration::from_millis(WEBHOOK_TIMEOUT_MS))
            .connect_timeout(std::time::Duration::from_millis(WEBHOOK_CONNECT_TIMEOUT_MS))
            // A signed delivery goes where it was configured to, nowhere else.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| ConfigError::invalid(format!("webhook {}", config.name), e.to_string()))?;
        Ok(WebhookSink {
            sink_name: format!("{WEBHOOK_SINK_PREFIX}{}", config.name),
            url: config.url,
            secret: config.secret,
            client,
        })
    }
}

#[async_trait]
impl Sink for WebhookSink {
    fn name(&self) -> &str {
        &self.sink_name
    }

    async fn deliver(&self, m: &OutboxMessage) -> Result<(), SinkError> {
        let body = m.body();
        let timestamp = chrono::Utc::now().timestamp().to_string();
        let signature = signature(&self.secret, &timestamp, &body);
        let response = self
            .client
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(HEADER_OUTBOX_ID, m.id.to_string())
            .header(HEADER_TIMESTAMP, &timestamp)
            .header(HEADER_SIGNATURE, signature)
            .body(body)
            .send()
            .await
            .map_err(|e| {
                // The URL may carry a token in its query; `last_error` is readable by
                // every role, so it is left out.
                let e = e.without_url();
                if e.is_timeout() {
                    SinkError::Timeout(WEBHOOK_TIMEOUT_MS)
                } else if e.is_connect() {
                    SinkError::Connect(error_chain(&e))
                } else {
                    SinkError::Refused(error_chain(&e))
                }
            })?;
        let status = response.status();
        if status.is_success() {
            Ok(())
        } else {
            Err(SinkError::Refused(format!("HTTP {status}")))
        }
    }
}

/// An error with its causes ("error sending request: connection refused").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn webhooks_come_from_url_and_secret_pairs_in_the_environment() {
        let hooks = webhooks_from_env(vars(&[
            ("FACTLEDGER_WEBHOOK_BI_FEED_URL", "https://bi.example/hook"),
            ("FACTLEDGER_WEBHOOK_BI_FEED_SECRET", "0123456789abcdef0123"),
            ("FACTLEDGER_NATS_URL", "nats://127.0.0.1:4222"),
        ]))
        .expect("valid");
        assert_eq!(hooks.len(), 1);
        assert_eq!(hooks[0].name, "bi-feed");
        assert_eq!(hooks[0].url, "https://bi.example/hook");
        assert!(!format!("{:?}", hooks[0]).contains("0123456789abcdef"));
    }

    #[test]
    fn a_webhook_without_its_secret_or_url_or_with_a_short_secret_is_refused() {
        for bad in [
            vars(&[("FACTLEDGER_WEBHOOK_A_URL", "https://a.example/")]),
            vars(&[("FACTLEDGER_WEBHOOK_A_SECRET", "0123456789abcdef")]),
            vars(&[
                ("FACTLEDGER_WEBHOOK_A_URL", "https://a.example/"),
                ("FACTLEDGER_WEBHOOK_A_SECRET", "short"),
            ]),
            vars(&[
                ("FACTLEDGER_WEBHOOK_A_URL", "ftp://a.example/"),
                ("FACTLEDGER_WEBHOOK_A_SECRET", "0123456789abcdef"),
            ]),
            vars(&[("FACTLEDGER_WEBHOOK_A_TOKEN", "x")]),
        ] {
            assert!(webhooks_from_env(bad.clone()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_signature_covers_timestamp_and_body() {
        let s = signature(b"0123456789abcdef", "1700000000", b"{}");
        assert_eq!(s.len(), 64);
        assert_ne!(s, signature(b"0123456789abcdef", "1700000001", b"{}"));
        assert_ne!(s, signature(b"0123456789abcdef", "1700000000", b"{ }"));
        assert_ne!(s, signature(b"0123456789abcdeF", "1700000000", b"{}"));
    }
}
