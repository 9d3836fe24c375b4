//! How the Alipay gateway is configured: every value from the environment (or a
//! file named there), read once at start by the composition root. A missing or
//! malformed value is refused, naming the variable; no key ever appears in a message,
//! in `Debug` or in a log.
//!
//! | variable | value |
//! |----------|-------|
//! | `FACTLEDGER_ALIPAY_APP_ID` | the app id (`2021…`, the open platform's app) |
//! | `FACTLEDGER_ALIPAY_SELLER_ID` | our seller id (`2088…`): notifications for another seller are refused |
//! | `FACTLEDGER_ALIPAY_APP_PRIVATE_KEY` or `…_FILE` | our app private key: PKCS#8 or PKCS#1 PEM, or the key tool's bare base64 |
//! | `FACTLEDGER_ALIPAY_PUBLIC_KEY` or `…_FILE` | the Alipay public key of the app: PEM or the console's bare base64 |
//! | `FACTLEDGER_ALIPAY_GATEWAY_URL` | optional; [`GATEWAY_URL_DEFAULT`] (a simulator's `…/gateway.do` in tests) |
//!
//! A key given both inline and as a file is refused (which one would win is a
//! guess); so is a key file that cannot be read.

use super::notify::NotifyVerifier;
use super::sign::{AlipayPublicKey, AppPrivateKey};
use std::time::Duration;

/// The production gateway.
pub const GATEWAY_URL_DEFAULT: &str = "https://openapi.alipay.com/gateway.do";
/// The gateway's callback provider name unless configured.
pub const NAME_DEFAULT: &str = "alipay";
pub const ENV_APP_ID: &str = "FACTLEDGER_ALIPAY_APP_ID";
pub const ENV_SELLER_ID: &str = "FACTLEDGER_ALIPAY_SELLER_ID";
pub const ENV_APP_PRIVATE_KEY: &str = "FACTLEDGER_ALIPAY_APP_PRIVATE_KEY";
pub const ENV_PUBLIC_KEY: &str = "FACTLEDGER_ALIPAY_PUBLIC_KEY";
pub const ENV_GATEWAY_URL: &str = "FACTLEDGER_ALIPAY_GATEWAY_URL";
/// Longest app or seller id (Alipay: String(32)).
pub const ID_CHARS_MAX: usize = 32;

/// A refused configuration value: which variable, and why (never the value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("alipay config: {variable}: {problem}")]
pub struct AlipayConfigError {
    pub variable: String,
    pub problem: String,
}

fn refuse(variable: &str, problem: impl Into<String>) -> AlipayConfigError {
    AlipayConfigError {
        variable: variable.to_owned(),
        problem: problem.into(),
    }
}

/// Everything the Alipay gateway needs. `Debug` shows no key.
#[derive(Clone)]
pub struct AlipayConfig {
    /// The callback provider name (`/v1/callbacks/{name}`), [`NAME_DEFAULT`].
    pub name: String,
    pub app_id: String,
    pub seller_id: String,
    pub app_private_key: AppPrivateKey,
    pub alipay_public_key: AlipayPublicKey,
    pub gateway_url: String,
    /// One refund or query call's time limit.
    pub timeout: Duration,
}

impl std::fmt::Debug for AlipayConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlipayConfig")
            .field("name", &self.name)
            .field("app_id", &self.app_id)
            .field("seller_id", &self.seller_id)
            .field("app_private_key", &"<redacted>")
            .field("gateway_url", &self.gateway_url)
            .field("timeout", &self.timeout)
            .finish()
    }
}

fn id(variable: &str, value: Option<String>) -> Result<String, AlipayConfigError> {
    let v = value.ok_or_else(|| refuse(variable, "not set"))?;
    let v = v.trim();
    if v.is_empty() || v.len() > ID_CHARS_MAX || !v.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(refuse(
            variable,
            format!("must be 1 to {ID_CHARS_MAX} ASCII letters or digits"),
        ));
    }
    Ok(v.to_owned())
}

/// The text of a key given inline in `variable` or as a file in `variable_FILE`.
fn key_text(
    variable: &str,
    get: &impl Fn(&str) -> Option<String>,
) -> Result<(String, String), AlipayConfigError> {
    let file_variable = format!("{variable}_FILE");
    match (get(variable), get(&file_variable)) {
        (Some(_), Some(_)) => Err(refuse(
            variable,
            format!("set either {variable} or {file_variable}, not both"),
        )),
        (Some(inline), None) => Ok((variable.to_owned(), inline)),
        (None, Some(path)) => std::fs::read_to_string(path.trim())
            .map(|text| (file_variable.clone(), text))
            .map_err(|e| refuse(&file_variable, format!("cannot read the file: {e}"))),
        (None, None) => Err(refuse(variable, format!("not set (nor {file_variable})"))),
    }
}

impl AlipayConfig {
    /// From the process environment (see the module docs).
    pub fn from_env() -> Result<AlipayConfig, AlipayConfigError> {
        AlipayConfig::from_lookup(|k| std::env::var(k).ok())
    }

    /// From `get` (a variable's value, if set): the environment, or a test's map.
    pub fn from_lookup(
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<AlipayConfig, AlipayConfigError> {
        let app_id = id(ENV_APP_ID, get(ENV_APP_ID))?;
        let seller_id = id(ENV_SELLER_ID, get(ENV_SELLER_ID))?;
        let (from, text) = key_text(ENV_APP_PRIVATE_KEY, &get)?;
        let app_private_key =
            AppPrivateKey::parse(&text).map_err(|e| refuse(&from, e.to_string()))?;
        let (from, text) = key_text(ENV_PUBLIC_KEY, &get)?;
        let alipay_public_key =
            AlipayPublicKey::parse(&text).map_err(|e| refuse(&from, e.to_string()))?;
        let gateway_url = get(ENV_GATEWAY_URL).unwrap_or_else(|| GATEWAY_URL_DEFAULT.to_owned());
        let url = reqwest::Url::parse(&gateway_url)
            .map_err(|e| refuse(ENV_GATEWAY_URL, format!("not a URL: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(refuse(ENV_GATEWAY_URL, "must be http(s)"));
        }
        Ok(AlipayConfig {
            name: NAME_DEFAULT.to_owned(),
            app_id,
            seller_id,
            app_private_key,
            alipay_public_key,
            gateway_url,
            timeout: crate::services::gateway_http::TIMEOUT_DEFAULT,
        })
    }

    /// The notification half: what the callback provider verifies with.
    pub fn verifier(&self) -> NotifyVerifier {
        NotifyVerifier {
            app_id: self.app_id.clone(),
            seller_id: self.seller_id.clone(),
            alipay_public_key: self.alipay_public_key.clone(),
        }
    }
}
