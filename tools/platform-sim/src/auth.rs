//! The credentials the simulated platforms check, and the checks: TikTok Shop's
//! `sign` (HMAC-SHA256 over secret + path + sorted `{key}{value}` + body + secret) with
//! its `app_key`, `timestamp` window and `x-tts-access-token`; Shopee's
//! `Authorization: SHA256 Credential=…, Timestamp=…, Signature=…` (SHA-256 of AppId +
//! Timestamp + body + Secret) with its 10-minute window. Written from the platforms'
//! documentation, independently of factledger's adapters, so a test through the
//! simulator checks one against the other.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// TikTok accepts a `timestamp` from 5 minutes behind to 30 seconds ahead.
pub const TIKTOK_SKEW_BEHIND_S: i64 = 300;
pub const TIKTOK_SKEW_AHEAD_S: i64 = 30;
/// Shopee: "maximum timestamp difference: 10 minutes".
pub const SHOPEE_SKEW_S: i64 = 600;

/// One Shopee market's affiliate account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShopeeAccount {
    pub country: String,
    pub secret: String,
}

/// What the simulated platforms accept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    pub tiktok_app_key: String,
    pub tiktok_app_secret: String,
    /// Creator access token → the market (country) it belongs to.
    pub tiktok_tokens: BTreeMap<String, String>,
    /// Shopee AppId → its market's account.
    pub shopee_accounts: BTreeMap<String, ShopeeAccount>,
}

impl Default for Credentials {
    fn default() -> Self {
        Credentials::test()
    }
}

/// The countries the test credentials cover.
pub const TEST_COUNTRIES: [&str; 6] = ["ID", "MY", "TH", "VN", "PH", "SG"];
pub const TEST_TIKTOK_APP_KEY: &str = "sim-app-key";
pub const TEST_TIKTOK_APP_SECRET: &str = "sim-app-secret";

/// The test creator token of a market: `sim-token-<COUNTRY>`.
pub fn test_tiktok_token(country: &str) -> String {
    format!("sim-token-{country}")
}

/// The test Shopee AppId of a market: the country letters' ASCII codes (`ID` → `7368`).
pub fn test_shopee_app_id(country: &str) -> String {
    country.bytes().map(|b| b.to_string()).collect()
}

/// The test Shopee secret of a market: `sim-shopee-secret-<COUNTRY>`.
pub fn test_shopee_secret(country: &str) -> String {
    format!("sim-shopee-secret-{country}")
}

impl Credentials {
    /// Fixed, public test credentials (printed by the binary; never real ones).
    pub fn test() -> Self {
        Credentials {
            tiktok_app_key: TEST_TIKTOK_APP_KEY.into(),
            tiktok_app_secret: TEST_TIKTOK_APP_SECRET.into(),
            tiktok_tokens: TEST_COUNTRIES
                .iter()
                .map(|c| (test_tiktok_token(c), (*c).to_owned()))
                .collect(),
            shopee_accounts: TEST_COUNTRIES
                .iter()
                .map(|c| {
                    (
                        test_shopee_app_id(c),
                        ShopeeAccount {
                            country: (*c).to_owned(),
                            secret: test_shopee_secret(c),
                        },
                    )
                })
                .collect(),
        }
    }
}

/// TikTok Shop's documented `sign`.
pub fn tiktok_sign(secret: &str, path: &str, query: &[(String, String)], body: &[u8]) -> String {
    let mut params: Vec<&(String, String)> = query
        .iter()
        .filter(|(k, _)| k != "sign" && k != "access_token")
        .collect();
    params.sort();
    let mut input = Vec::new();
    input.extend_from_slice(secret.as_bytes());
    input.extend_from_slice(path.as_bytes());
    for (k, v) in params {
        input.extend_from_slice(k.as_bytes());
        input.extend_from_slice(v.as_bytes());
    }
    input.extend_from_slice(body);
    input.extend_from_slice(secret.as_bytes());
    // Infallible: HMAC takes a key of any length.
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(&input);
    hex::encode(mac.finalize().into_bytes())
}

/// Shopee's documented signature.
pub fn shopee_signature(app_id: &str, timestamp: &str, body: &[u8], secret: &str) -> String {
    let mut h = Sha256::new();
    h.update(app_id.as_bytes());
    h.update(timestamp.as_bytes());
    h.update(body);
    h.update(secret.as_bytes());
    hex::encode(h.finalize())
}

/// `SHA256 Credential=X, Timestamp=T, Signature=S` → `(X, T, S)`.
pub fn parse_shopee_authorization(header: &str) -> Option<(String, String, String)> {
    let rest = header.strip_prefix("SHA256 ")?;
    let mut parts = BTreeMap::new();
    for part in rest.split(',') {
        let (k, v) = part.trim().split_once('=')?;
        parts.insert(k.trim(), v.trim().to_owned());
    }
    Some((
        parts.remove("Credential")?,
        parts.remove("Timestamp")?,
        parts.remove("Signature")?,
    ))
}

/// Constant-time comparison of two signatures.
pub fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

pub fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
