//! The WeChat Pay gateway's configuration, read by the composition root from the
//! environment (each secret from a variable or a file it names). A missing or
//! malformed value is refused at start, naming the variable; no secret is in
//! `Debug` or in an error.
//!
//! | variable | what |
//! |---|---|
//! | `FACTLEDGER_WECHATPAY_MCHID` | the merchant id (`mchid`) |
//! | `FACTLEDGER_WECHATPAY_APPID` | the app id (`appid`) payments are made under |
//! | `FACTLEDGER_WECHATPAY_MERCHANT_SERIAL` | the merchant API certificate's serial (`serial_no`) |
//! | `FACTLEDGER_WECHATPAY_MERCHANT_KEY` or `…_MERCHANT_KEY_FILE` | the merchant API private key, PKCS#8 PEM |
//! | `FACTLEDGER_WECHATPAY_APIV3_KEY` or `…_APIV3_KEY_FILE` | the APIv3 key, 32 bytes |
//! | `FACTLEDGER_WECHATPAY_PLATFORM_KEYS` | `serial=path.pem[,serial=path.pem…]`: WeChat Pay's public keys (SPKI PEM) by serial; several during a rotation |
//! | `FACTLEDGER_WECHATPAY_BASE_URL` | default `https://api.mch.weixin.qq.com` |
//! | `FACTLEDGER_WECHATPAY_REFUND_NOTIFY_URL` | optional: where WeChat sends refund notifications (`notify_url`) |
//!
//! A file's content is used trimmed of surrounding whitespace (a trailing newline).

use super::crypto::{ApiV3Key, MerchantKey, PlatformKeys};
use std::time::Duration;

/// WeChat Pay's API host.
pub const BASE_URL_DEFAULT: &str = "https://api.mch.weixin.qq.com";
/// The gateway's callback provider name unless configured.
pub const NAME_DEFAULT: &str = "wechatpay";
/// A refund or query call's time limit unless configured.
pub const TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);
/// Most platform keys configured at once (a rotation has two).
pub const PLATFORM_KEYS_MAX: usize = 8;

pub const MCHID_VAR: &str = "FACTLEDGER_WECHATPAY_MCHID";
pub const APPID_VAR: &str = "FACTLEDGER_WECHATPAY_APPID";
pub const MERCHANT_SERIAL_VAR: &str = "FACTLEDGER_WECHATPAY_MERCHANT_SERIAL";
pub const MERCHANT_KEY_VAR: &str = "FACTLEDGER_WECHATPAY_MERCHANT_KEY";
pub const APIV3_KEY_VAR: &str = "FACTLEDGER_WECHATPAY_APIV3_KEY";
pub const PLATFORM_KEYS_VAR: &str = "FACTLEDGER_WECHATPAY_PLATFORM_KEYS";
pub const BASE_URL_VAR: &str = "FACTLEDGER_WECHATPAY_BASE_URL";
pub const REFUND_NOTIFY_URL_VAR: &str = "FACTLEDGER_WECHATPAY_REFUND_NOTIFY_URL";

/// Why the configuration was refused: the variable and what is wrong (never the
/// value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("WeChat Pay config: {variable}: {problem}")]
pub struct WechatPayConfigError {
    pub variable: String,
    pub problem: String,
}

fn bad(variable: &str, problem: impl Into<String>) -> WechatPayConfigError {
    WechatPayConfigError {
        variable: variable.to_owned(),
        problem: problem.into(),
    }
}

/// Everything the adapter and its notification checks need.
#[derive(Clone)]
pub struct WechatPayConfig {
    /// The callback provider name (`/v1/callbacks/{name}`).
    pub name: String,
    pub base_url: String,
    pub mchid: String,
    pub appid: String,
    pub merchant_serial: String,
    pub merchant_key: MerchantKey,
    pub apiv3_key: ApiV3Key,
    pub platform_keys: PlatformKeys,
    pub refund_notify_url: Option<String>,
    pub timeout: Duration,
}

impl std::fmt::Debug for WechatPayConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WechatPayConfig")
            .field("name", &self.name)
            .field("base_url", &self.base_url)
            .field("mchid", &self.mchid)
            .field("appid", &self.appid)
            .field("merchant_serial", &self.merchant_serial)
            .field("merchant_key", &self.merchant_key)
            .field("apiv3_key", &self.apiv3_key)
            .field("platform_keys", &self.platform_keys)
            .field("refund_notify_url", &self.refund_notify_url)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl WechatPayConfig {
    /// From the process environment (see the module docs).
    pub fn from_env() -> Result<WechatPayConfig, WechatPayConfigError> {
        WechatPayConfig::from_lookup(|k| std::env::var(k).ok())
    }

    /// From another source of variables (tests); files are read from disk.
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<WechatPayConfig, WechatPayConfigError> {
        let plain = |var: &str| {
            lookup(var)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
                .ok_or_else(|| bad(var, "missing"))
        };
        let mchid = plain(MCHID_VAR)?;
        let appid = plain(APPID_VAR)?;
        let merchant_serial = plain(MERCHANT_SERIAL_VAR)?;
        let key_pem = secret(&lookup, MERCHANT_KEY_VAR)?;
        let merchant_key = MerchantKey::from_pem(&key_pem)
            .map_err(|_| bad(MERCHANT_KEY_VAR, "not a PKCS#8 PEM RSA private key"))?;
        let apiv3_key =
            ApiV3Key::parse(&secret(&lookup, APIV3_KEY_VAR)?).map_err(|e| bad(APIV3_KEY_VAR, e))?;
        let platform_keys = platform_keys(&plain(PLATFORM_KEYS_VAR)?)?;
        let base_url = lookup(BASE_URL_VAR)
            .filter(|v| !v.trim().is_empty())
            .unwrap_or_else(|| BASE_URL_DEFAULT.to_owned());
        let refund_notify_url = lookup(REFUND_NOTIFY_URL_VAR).filter(|v| !v.trim().is_empty());
        if let Some(url) = &refund_notify_url {
            if !url.starts_with("https://") && !url.starts_with("http://") {
                return Err(bad(REFUND_NOTIFY_URL_VAR, "not an http(s) URL"));
            }
        }
        Ok(WechatPayConfig {
            name: NAME_DEFAULT.to_owned(),
            base_url,
            mchid,
            appid,
            merchant_serial,
            merchant_key,
            apiv3_key,
            platform_keys,
            refund_notify_url,
            timeout: TIMEOUT_DEFAULT,
        })
    }
}

/// A secret from `var`, or from the file `var_FILE` names (exactly one of them).
fn secret(
    lookup: &impl Fn(&str) -> Option<String>,
    var: &str,
) -> Result<String, WechatPayConfigError> {
    let file_var = format!("{var}_FILE");
    let direct = lookup(var).filter(|v| !v.trim().is_empty());
    let file = lookup(&file_var).filter(|v| !v.trim().is_empty());
    let text = match (direct, file) {
        (Some(_), Some(_)) => {
            return Err(bad(
                var,
                format!("set either {var} or {file_var}, not both"),
            ))
        }
        (Some(v), None) => v,
        (None, Some(path)) => std::fs::read_to_string(path.trim())
            .map_err(|e| bad(&file_var, format!("cannot read the file: {}", e.kind())))?,
        (None, None) => return Err(bad(var, format!("missing (set {var} or {file_var})"))),
    };
    Ok(text.trim().to_owned())
}

/// `serial=path[,serial=path…]`, each file an SPKI PEM public key.
fn platform_keys(spec: &str) -> Result<PlatformKeys, WechatPayConfigError> {
    let var = PLATFORM_KEYS_VAR;
    let mut pems = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (serial, path) = item
            .split_once('=')
            .ok_or_else(|| bad(var, format!("{item:?} is not serial=path")))?;
        let pem = std::fs::read_to_string(path.trim()).map_err(|e| {
            bad(
                var,
                format!(
                    "platform key {}: cannot read {path:?}: {}",
                    serial.trim(),
                    e.kind()
                ),
            )
        })?;
        pems.push((serial.trim().to_owned(), pem));
    }
    if pems.len() > PLATFORM_KEYS_MAX {
        return Err(bad(var, format!("at most {PLATFORM_KEYS_MAX} keys")));
    }
    PlatformKeys::from_pems(pems.iter().map(|(s, p)| (s.as_str(), p.as_str())))
        .map_err(|e| bad(var, e))
}
