//! HTTP webhook sinks: each message is one `POST` of its JSON body, signed so the
//! receiver can tell it came from us and is fresh:
//!
//! - `x-factledger-outbox-id`: the outbox id (dedupe by it; deliveries repeat),
//! - `x-factledger-timestamp`: Unix seconds when this attempt was signed,
//! - `x-factledger-signature`: lowercase hex `HMAC-SHA256(secret, timestamp + "." + body)`.
//!
//! Signing the timestamp with the body lets a receiver refuse replays of old
//! deliveries. A 2xx answer within [`WEBHOOK_TIMEOUT_MS`] is an acknowledgement;
//! anything else is a failure the relay retries, classified by what it says about the
//! message ([`answer_error`]): only the receiver's own verdict on it (a 4xx other than
//! those below, a 500, 501…) is a refusal, retried on the sink's schedule and then
//! dead-lettered; a receiver that is down (no connection, a dropped one, a timeout, 408,
//! 429, 502, 503, 504) or a webhook that is misconfigured (a redirect, 401, 403, 404,
//! 405) is retried with backoff until it recovers, never dead-lettered.
//!
//! From the environment: `FACTLEDGER_WEBHOOK_<NAME>_URL` and `…_SECRET` (secrets never
//! come from the command line), and optionally `…_TYPES` (comma-separated type
//! prefixes the webhook takes, default every type) and `…_RETRY_SECONDS` (its retry
//! schedule, default the relay's, [`super::RETRY_SCHEDULE_DEFAULT`]).

use super::{ConfigError, OutboxMessage, Sink, SinkError, SinkPolicy, SINK_NAME_LEN_MAX};
use async_trait::async_trait;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::time::Duration;

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
    /// The types it takes and its retry schedule (default: every type, the relay's).
    pub policy: SinkPolicy,
}

impl std::fmt::Debug for WebhookConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        f.debug_struct("WebhookConfig")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("policy", &self.policy)
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
/// its `FACTLEDGER_WEBHOOK_<NAME>_SECRET`, and optionally `…_TYPES` and
/// `…_RETRY_SECONDS` ([`SinkPolicy::parse_types`], [`SinkPolicy::parse_retry_seconds`]).
/// A URL without a secret (or a secret, types or schedule without a URL) is an error,
/// so a typo cannot silently send unsigned, unfiltered or no notifications; so is a
/// malformed value, named by its variable.
pub fn webhooks_from_env(
    vars: impl IntoIterator<Item = (String, String)>,
) -> Result<Vec<WebhookConfig>, ConfigError> {
    const PREFIX: &str = "FACTLEDGER_WEBHOOK_";
    let mut urls = std::collections::BTreeMap::new();
    let mut secrets = std::collections::BTreeMap::new();
    let mut policies: std::collections::BTreeMap<String, SinkPolicy> = Default::default();
    for (key, value) in vars {
        let Some(rest) = key.strip_prefix(PREFIX) else {
            continue;
        };
        if let Some(name) = rest.strip_suffix("_URL") {
            urls.insert(name.to_owned(), value);
        } else if let Some(name) = rest.strip_suffix("_SECRET") {
            secrets.insert(name.to_owned(), value);
        } else if let Some(name) = rest.strip_suffix("_RETRY_SECONDS") {
            let schedule = SinkPolicy::parse_retry_seconds(&key, &value)?;
            policies.entry(name.to_owned()).or_default().retry_schedule = Some(schedule);
        } else if let Some(name) = rest.strip_suffix("_TYPES") {
            let types = SinkPolicy::parse_types(&key, &value)?;
            policies.entry(name.to_owned()).or_default().types = types;
        } else {
            return Err(ConfigError::invalid(
                key.clone(),
                "expected FACTLEDGER_WEBHOOK_<NAME>_URL, _SECRET, _TYPES or _RETRY_SECONDS",
            ));
        }
    }
    if let Some(name) = secrets.keys().find(|n| !urls.contains_key(*n)) {
        return Err(ConfigError::invalid(
            format!("{PREFIX}{name}_URL"),
            "a webhook secret is set but not its URL",
        ));
    }
    if let Some(name) = policies.keys().find(|n| !urls.contains_key(*n)) {
        return Err(ConfigError::invalid(
            format!("{PREFIX}{name}_URL"),
            "a webhook's types or retry schedule are set but not its URL",
        ));
    }
    urls.into_iter()
        .map(|(name, url)| {
            let field = format!("{PREFIX}{name}_SECRET");
            let secret = secrets
                .remove(&name)
                .ok_or_else(|| ConfigError::invalid(&field, "webhook URL set without a secret"))?;
            let policy = policies.remove(&name).unwrap_or_default();
            Ok(WebhookConfig::new(&name, url, secret.into_bytes())?.with_policy(policy))
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
        Ok(WebhookConfig {
            name,
            url,
            secret,
            policy: SinkPolicy::default(),
        })
    }

    /// The same webhook taking only `policy.types`, retried on `policy.retry_schedule`.
    pub fn with_policy(mut self, policy: SinkPolicy) -> Self {
        self.policy = policy;
        self
    }
}

/// A webhook sink.
pub struct WebhookSink {
    sink_name: String,
    url: String,
    secret: Vec<u8>,
    policy: SinkPolicy,
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
            policy: config.policy,
            client,
        })
    }
}

#[async_trait]
impl Sink for WebhookSink {
    fn name(&self) -> &str {
        &self.sink_name
    }

    fn takes(&self, message_type: &str) -> bool {
        self.policy.takes(message_type)
    }

    fn retry_schedule(&self) -> Option<&[Duration]> {
        self.policy.retry_schedule.as_deref()
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
                // No answer is never the receiver's verdict on the message (a
                // dropped connection is a receiver going away): down, not refused.
                let e = e.without_url();
                if e.is_timeout() {
                    SinkError::Timeout(WEBHOOK_TIMEOUT_MS)
                } else {
                    SinkError::Connect(error_chain(&e))
                }
            })?;
        let status = response.status();
        if status.is_success() {
            Ok(())
        } else {
            Err(answer_error(status))
        }
    }
}

/// What a non-2xx answer says: the receiver is down (408 Request Timeout, 429 Too
/// Many Requests, 502/503/504 from its proxy), the webhook is misconfigured (a
/// redirect, which is never followed; 401/403: the signature or credentials; 404/405:
/// the URL), or the receiver refused this message (everything else: 400, 409, 413,
/// 422, 500…), the only case that may end in a dead letter.
pub fn answer_error(status: reqwest::StatusCode) -> SinkError {
    let text = format!("HTTP {status}");
    match status.as_u16() {
        300..=399 | 401 | 403 | 404 | 405 => SinkError::Config(text),
        408 | 429 | 502 | 503 | 504 => SinkError::Unavailable(text),
        _ => SinkError::Refused(text),
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
    fn types_and_retry_seconds_come_from_the_environment_per_webhook() {
        let hooks = webhooks_from_env(vars(&[
            ("FACTLEDGER_WEBHOOK_IM_URL", "https://im.example/hook"),
            ("FACTLEDGER_WEBHOOK_IM_SECRET", "0123456789abcdef0123"),
            ("FACTLEDGER_WEBHOOK_IM_TYPES", "im_member., alert."),
            ("FACTLEDGER_WEBHOOK_IM_RETRY_SECONDS", "10, 30,60,300"),
            ("FACTLEDGER_WEBHOOK_BI_URL", "https://bi.example/hook"),
            ("FACTLEDGER_WEBHOOK_BI_SECRET", "0123456789abcdef0123"),
        ]))
        .expect("valid");
        let (bi, im) = (&hooks[0], &hooks[1]);
        assert_eq!((bi.name.as_str(), im.name.as_str()), ("bi", "im"));
        assert_eq!(bi.policy, SinkPolicy::default());
        assert!(bi.policy.takes("wallet.PendingCredited"));
        assert_eq!(im.policy.types, vec!["im_member.", "alert."]);
        assert!(im.policy.takes("im_member.Joined") && im.policy.takes("alert.x"));
        assert!(!im.policy.takes("wallet.PendingCredited") && !im.policy.takes("im_member"));
        let secs: Vec<u64> = im
            .policy
            .retry_schedule
            .iter()
            .flatten()
            .map(Duration::as_secs)
            .collect();
        assert_eq!(secs, vec![10, 30, 60, 300]);
        let sink = WebhookSink::new(im.clone()).expect("client");
        assert_eq!(sink.retry_schedule().map(<[Duration]>::len), Some(4));
        assert!(!sink.takes("wallet.X"));
    }

    #[test]
    fn malformed_types_or_retry_seconds_are_refused_naming_the_variable_and_the_rule() {
        let base = [
            ("FACTLEDGER_WEBHOOK_IM_URL", "https://im.example/hook"),
            ("FACTLEDGER_WEBHOOK_IM_SECRET", "0123456789abcdef0123"),
        ];
        for (key, value, rule) in [
            (
                "FACTLEDGER_WEBHOOK_IM_RETRY_SECONDS",
                "",
                "comma-separated whole seconds",
            ),
            (
                "FACTLEDGER_WEBHOOK_IM_RETRY_SECONDS",
                "10,,30",
                "1-20 values",
            ),
            (
                "FACTLEDGER_WEBHOOK_IM_RETRY_SECONDS",
                "0,30",
                "each 1-86400",
            ),
            ("FACTLEDGER_WEBHOOK_IM_RETRY_SECONDS", "-5", "each 1-86400"),
            (
                "FACTLEDGER_WEBHOOK_IM_RETRY_SECONDS",
                "1.5",
                "whole seconds",
            ),
            (
                "FACTLEDGER_WEBHOOK_IM_RETRY_SECONDS",
                "10s,30s",
                "e.g. 10,30,60,300",
            ),
            (
                "FACTLEDGER_WEBHOOK_IM_RETRY_SECONDS",
                "86401",
                "each 1-86400",
            ),
            (
                "FACTLEDGER_WEBHOOK_IM_RETRY_SECONDS",
                &"1,".repeat(21)[..41],
                "1-20 values",
            ),
            ("FACTLEDGER_WEBHOOK_IM_TYPES", "", "type prefixes"),
            (
                "FACTLEDGER_WEBHOOK_IM_TYPES",
                "im_member.,,wallet.",
                "each 1-128",
            ),
            (
                "FACTLEDGER_WEBHOOK_IM_TYPES",
                "im member.",
                "without spaces",
            ),
            (
                "FACTLEDGER_WEBHOOK_IM_TYPES",
                &"x".repeat(129),
                "each 1-128",
            ),
        ] {
            let mut env = vars(&base);
            env.push((key.to_owned(), value.to_owned()));
            let e = webhooks_from_env(env).expect_err(value).to_string();
            assert!(e.starts_with(&format!("{key}: ")), "{value:?}: {e}");
            assert!(e.contains(rule), "{value:?}: {e}");
        }
        // Types or a schedule for a webhook that has no URL: a typo, refused.
        let e = webhooks_from_env(vars(&[
            ("FACTLEDGER_WEBHOOK_IN_TYPES", "im_member."),
            ("FACTLEDGER_WEBHOOK_IM_URL", "https://im.example/hook"),
            ("FACTLEDGER_WEBHOOK_IM_SECRET", "0123456789abcdef0123"),
        ]))
        .expect_err("no URL for IN")
        .to_string();
        assert!(e.contains("FACTLEDGER_WEBHOOK_IN_URL"), "{e}");
    }

    #[test]
    fn only_the_receivers_verdict_on_a_message_is_a_refusal() {
        use reqwest::StatusCode as S;
        for status in [
            S::BAD_REQUEST,
            S::CONFLICT,
            S::UNPROCESSABLE_ENTITY,
            S::INTERNAL_SERVER_ERROR,
        ] {
            assert!(answer_error(status).is_message_specific(), "{status}");
        }
        for status in [
            S::REQUEST_TIMEOUT,
            S::TOO_MANY_REQUESTS,
            S::BAD_GATEWAY,
            S::SERVICE_UNAVAILABLE,
            S::GATEWAY_TIMEOUT,
        ] {
            assert!(
                matches!(answer_error(status), SinkError::Unavailable(_)),
                "{status}"
            );
        }
        for status in [
            S::FOUND,
            S::UNAUTHORIZED,
            S::FORBIDDEN,
            S::NOT_FOUND,
            S::METHOD_NOT_ALLOWED,
        ] {
            assert!(
                matches!(answer_error(status), SinkError::Config(_)),
                "{status}"
            );
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
