//! The HTTP plumbing every platform adapter shares: one client with the connect and
//! whole-request timeouts, no redirects, a bounded body read, and transport errors
//! mapped to [`FetchError`] once.

use crate::affiliate::platform::{FetchError, CONNECT_TIMEOUT_MS, RESPONSE_BYTES_MAX};
use factledger_aggregates::affiliate::Platform;
use std::time::Duration;

/// Longest error body quoted in a [`FetchError`] (it ends up in `last_error`).
pub const ERROR_BODY_CHARS_MAX: usize = 300;

/// A platform's HTTP client.
#[derive(Debug, Clone)]
pub struct PlatformHttp {
    pub platform: Platform,
    pub timeout_ms: u64,
    pub client: reqwest::Client,
}

/// A whole answer: status and body (at most [`RESPONSE_BYTES_MAX`] bytes).
pub struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
}

impl Answer {
    /// The body quoted for an error message, cut to [`ERROR_BODY_CHARS_MAX`].
    pub fn quoted(&self) -> String {
        String::from_utf8_lossy(&self.body)
            .chars()
            .take(ERROR_BODY_CHARS_MAX)
            .collect()
    }
}

/// `base_url` must be http(s); returned without its trailing slash.
pub fn check_base_url(platform: Platform, base_url: &str) -> Result<String, FetchError> {
    if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
        return Err(FetchError::Config {
            platform,
            reason: format!("base URL {base_url:?} is not http(s)"),
        });
    }
    Ok(base_url.trim_end_matches('/').to_owned())
}

impl PlatformHttp {
    pub fn new(platform: Platform, timeout_ms: u64) -> Result<Self, FetchError> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_millis(timeout_ms))
            .connect_timeout(Duration::from_millis(CONNECT_TIMEOUT_MS.min(timeout_ms)))
            // An order API has no business redirecting; following one could leak the
            // signed query and the access token to another host.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| FetchError::Config {
                platform,
                reason: e.to_string(),
            })?;
        Ok(PlatformHttp {
            platform,
            timeout_ms,
            client,
        })
    }

    pub fn error(&self, e: reqwest::Error) -> FetchError {
        if e.is_timeout() {
            FetchError::Timeout {
                platform: self.platform,
                timeout_ms: self.timeout_ms,
            }
        } else {
            FetchError::Transport {
                platform: self.platform,
                // The source chain says why (connection refused, reset …).
                message: std::iter::successors(Some(&e as &dyn std::error::Error), |e| e.source())
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>()
                    .join(": "),
            }
        }
    }

    /// Send and read the whole answer, at most [`RESPONSE_BYTES_MAX`] bytes.
    pub async fn send(&self, request: reqwest::RequestBuilder) -> Result<Answer, FetchError> {
        let mut response = request.send().await.map_err(|e| self.error(e))?;
        let status = response.status().as_u16();
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| self.error(e))? {
            if body.len() + chunk.len() > RESPONSE_BYTES_MAX {
                return Err(self.body_error(format!("larger than {RESPONSE_BYTES_MAX} bytes")));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Answer { status, body })
    }

    pub fn body_error(&self, reason: String) -> FetchError {
        FetchError::Body {
            platform: self.platform,
            reason,
        }
    }

    /// A non-2xx answer the platform's own envelope did not explain.
    pub fn status_error(&self, answer: &Answer) -> FetchError {
        FetchError::Status {
            platform: self.platform,
            status: answer.status,
            body: answer.quoted(),
        }
    }
}
