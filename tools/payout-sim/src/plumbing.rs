//! The plumbing the payouts ([`crate::Sim`]) and the payment gateway
//! ([`crate::gateway`]) share, below both: the API key check, the reset/stop
//! generation that ends background work, scripted sleeps, the callback POST with its
//! retries and its proof of origin ([`Plumbing::post_callback`] with a [`Signing`],
//! the gateway's HMAC being [`signature`]), and the error of a refused control call.
//! It knows neither simulator's state.

use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::time::Duration;
use tokio::sync::watch;

/// Attempts per callback (the first and the retries).
pub const CALLBACK_ATTEMPTS_MAX: u32 = 4;
/// Wait before the first retry; doubled before each further one (50, 100, 200 ms).
pub const CALLBACK_BACKOFF_MS: u64 = 50;
/// One attempt's time limit.
pub const CALLBACK_TIMEOUT_MS: u64 = 5_000;
/// The body of a `garbage_webhook` callback (and of the scripted non-JSON answers).
pub const GARBAGE_BODY: &str = "<html>502 Bad Gateway (upstream says hello)</html>";

/// Why a control call was refused.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    NotFound(String),
}

/// Lower-case hex `HMAC-SHA256(secret, body)`: the pay callback's signature.
pub fn signature(secret: &[u8], body: &[u8]) -> String {
    // HMAC takes a key of any length; the error arm cannot happen.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else {
        return String::new();
    };
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// What both simulators run on: the API key, the HTTP client of callbacks, and the
/// generation that a reset or stop bumps.
#[derive(Debug)]
pub(crate) struct Plumbing {
    /// `Basic base64("<secret>:")`, compared with the `Authorization` header.
    authorization: String,
    http: reqwest::Client,
    /// Bumped by reset and stop: background work of an older generation ends.
    generation: watch::Sender<u64>,
}

impl Plumbing {
    /// Plumbing for API key `secret`, at generation 0.
    pub(crate) fn new(secret: &str) -> Plumbing {
        let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{secret}:"));
        Plumbing {
            authorization: format!("Basic {encoded}"),
            http: reqwest::Client::new(),
            generation: watch::Sender::new(0),
        }
    }

    /// Whether `authorization` (the `Authorization` header) carries the configured
    /// secret: `Basic base64("<secret>:")`.
    pub(crate) fn authorized(&self, authorization: Option<&str>) -> bool {
        authorization == Some(self.authorization.as_str())
    }

    pub(crate) fn generation(&self) -> u64 {
        *self.generation.borrow()
    }

    /// Starts a new generation: background work of the older ones ends. The caller
    /// holds the locks of the state that changed, so work checking the generation
    /// under a lock never acts on the new state.
    pub(crate) fn next_generation(&self) {
        self.generation.send_modify(|g| *g += 1);
    }

    /// Sleeps `ms`; `false` when a reset or stop came first.
    pub(crate) async fn sleep(&self, generation: u64, ms: u64) -> bool {
        let mut rx = self.generation.subscribe();
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(ms)) => true,
            _ = rx.wait_for(|g| *g != generation) => false,
        }
    }

    /// POSTs `body` (JSON, or not: a garbage callback) to `url`, signed per
    /// `signing`; retries a non-2xx answer or a connection error up to
    /// [`CALLBACK_ATTEMPTS_MAX`] attempts in all, [`CALLBACK_BACKOFF_MS`] doubling
    /// between them. `log` sees every attempt. The last attempt, or `None` when a
    /// reset or stop came before the first.
    pub(crate) async fn post_callback(
        &self,
        generation: u64,
        url: &str,
        signing: &Signing,
        body: &str,
        log: impl FnMut(&Delivery),
    ) -> Option<Delivery> {
        self.post_callback_with(generation, url, signing, &[], body, log)
            .await
    }

    /// [`Plumbing::post_callback`] with `extra` headers on every attempt (the payout
    /// webhooks' `webhook-id`).
    pub(crate) async fn post_callback_with(
        &self,
        generation: u64,
        url: &str,
        signing: &Signing,
        extra: &[(&'static str, String)],
        body: &str,
        mut log: impl FnMut(&Delivery),
    ) -> Option<Delivery> {
        let content_type = match signing {
            Signing::Form => "application/x-www-form-urlencoded; charset=utf-8",
            _ => "application/json",
        };
        let mut last = None;
        for attempt in 1..=CALLBACK_ATTEMPTS_MAX {
            if self.generation() != generation {
                return last;
            }
            // Signed per attempt: a scheme with a timestamp (WeChat Pay) re-signs.
            let mut request = self.http.post(url);
            for (header, value) in signing.headers(body) {
                request = request.header(header, value);
            }
            for (name, v) in extra {
                request = request.header(*name, v);
            }
            let sent = request
                .header("content-type", content_type)
                .timeout(Duration::from_millis(CALLBACK_TIMEOUT_MS))
                .body(body.to_owned())
                .send()
                .await;
            let (http_status, error) = match sent {
                Ok(response) => {
                    let status = response.status().as_u16();
                    // Read the answer so the connection can be reused.
                    let _ = response.bytes().await;
                    (Some(status), None)
                }
                Err(e) => (None, Some(e.to_string())),
            };
            let delivered = http_status.is_some_and(|s| (200..300).contains(&s));
            let d = Delivery {
                attempt,
                http_status,
                error,
                delivered,
            };
            log(&d);
            last = Some(d);
            if delivered || attempt == CALLBACK_ATTEMPTS_MAX {
                return last;
            }
            let backoff_ms = CALLBACK_BACKOFF_MS << (attempt - 1);
            if !self.sleep(generation, backoff_ms).await {
                return last;
            }
        }
        last
    }
}

/// How a callback proves it comes from the simulated provider.
#[derive(Debug, Clone)]
pub(crate) enum Signing {
    /// The shared token itself in `header` (the payout callbacks' `x-callback-token`).
    Token { header: &'static str, token: String },
    /// `HMAC-SHA256(secret, raw body)` as lower-case hex in `header` (the gateway's
    /// `x-gateway-signature`).
    Hmac {
        header: &'static str,
        secret: String,
    },
    /// Headers computed from the body at each attempt.
    Headers(HeaderSigner),
    /// An Alipay notification form: its RSA2 `sign` is a field of the body itself.
    Form,
}

/// Signs a body into the headers that carry its proof (WeChat Pay's four
/// `Wechatpay-*` headers, signed at each attempt).
pub(crate) type SignFn = dyn Fn(&str) -> Vec<(String, String)> + Send + Sync;

#[derive(Clone)]
pub(crate) struct HeaderSigner(pub std::sync::Arc<SignFn>);

impl std::fmt::Debug for HeaderSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HeaderSigner")
    }
}

impl Signing {
    fn headers(&self, body: &str) -> Vec<(String, String)> {
        match self {
            Signing::Token { header, token } => vec![((*header).to_owned(), token.clone())],
            Signing::Hmac { header, secret } => vec![(
                (*header).to_owned(),
                signature(secret.as_bytes(), body.as_bytes()),
            )],
            Signing::Headers(signer) => (signer.0)(body),
            Signing::Form => Vec::new(),
        }
    }
}

/// One attempt at delivering a callback, as [`Plumbing::post_callback`] reports it.
#[derive(Debug, Clone)]
pub(crate) struct Delivery {
    /// 1-based.
    pub attempt: u32,
    pub http_status: Option<u16>,
    pub error: Option<String>,
    pub delivered: bool,
}

/// One pay callback to deliver (the gateway keeps it while held).
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub url: String,
    pub signing: Signing,
    pub signed: bool,
    pub body: String,
    pub copies: u32,
    pub event_id: String,
    pub order_no: String,
    pub transaction_no: String,
}
