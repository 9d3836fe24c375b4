//! WeChat Pay APIv3's cryptography, as its documentation ("签名生成", "签名验证",
//! "证书和回调报文解密") specifies it:
//!
//! - **Requests we send** carry `Authorization: WECHATPAY2-SHA256-RSA2048
//!   mchid="…",nonce_str="…",signature="…",timestamp="…",serial_no="…"`, the signature
//!   being base64 SHA256withRSA (RSASSA-PKCS1-v1_5) under the merchant's private key
//!   over `METHOD\nURL\ntimestamp\nnonce\nbody\n` (URL = path and query, no host; body
//!   empty for a GET, the last `\n` always there) — [`request_message`].
//! - **Answers and notifications WeChat sends** carry `Wechatpay-Timestamp`,
//!   `Wechatpay-Nonce`, `Wechatpay-Signature` (base64 SHA256withRSA over
//!   `timestamp\nnonce\nbody\n`) and `Wechatpay-Serial`, naming which platform key
//!   (certificate serial, or `PUB_KEY_ID_…` of a WeChat Pay public key) signed —
//!   [`PlatformKeys::verify`]. Several keys may be configured at once (rotation); an
//!   unknown serial is refused, and so is a timestamp more than
//!   [`TIMESTAMP_SKEW_S_MAX`] from our clock (a replayed old delivery).
//! - **Notification resources** are AEAD_AES_256_GCM under the merchant's 32-byte
//!   APIv3 key: `ciphertext` is base64 of the encrypted bytes followed by the 16-byte
//!   tag, `nonce` the 12-character IV (its bytes as they are), `associated_data` the
//!   AAD (possibly empty) — [`ApiV3Key::decrypt`].
//!
//! Secrets (the merchant key, the APIv3 key) never appear in `Debug`.

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine as _;
use rsa::pkcs1v15::{Signature, SigningKey, VerifyingKey};
use rsa::pkcs8::{DecodePrivateKey, DecodePublicKey};
use rsa::signature::{SignatureEncoding, Signer, Verifier};
use rsa::{RsaPrivateKey, RsaPublicKey};
use sha2::Sha256;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The only signature scheme APIv3 has (the `Authorization` scheme and the value of
/// `Wechatpay-Signature-Type` when WeChat sends it).
pub const SCHEME: &str = "WECHATPAY2-SHA256-RSA2048";
/// The only resource algorithm of APIv3 notifications.
pub const AEAD_AES_256_GCM: &str = "AEAD_AES_256_GCM";
/// The signed headers of an answer or a notification (lower-case, as received).
pub const TIMESTAMP_HEADER: &str = "wechatpay-timestamp";
pub const NONCE_HEADER: &str = "wechatpay-nonce";
pub const SIGNATURE_HEADER: &str = "wechatpay-signature";
pub const SERIAL_HEADER: &str = "wechatpay-serial";
pub const SIGNATURE_TYPE_HEADER: &str = "wechatpay-signature-type";
/// A timestamp further than this from our clock is refused (the docs' 5 minutes).
pub const TIMESTAMP_SKEW_S_MAX: i64 = 5 * 60;
/// The APIv3 key is 32 bytes (AES-256).
pub const APIV3_KEY_BYTES: usize = 32;
/// The GCM nonce WeChat sends is 12 characters (96 bits).
const GCM_NONCE_BYTES: usize = 12;
/// The GCM tag at the end of the ciphertext.
const GCM_TAG_BYTES: usize = 16;
/// Longest header value read (a 4096-bit signature is 684 base64 characters).
const HEADER_CHARS_MAX: usize = 1_024;

/// Why a signed answer or notification was refused: the header at fault, the
/// metric `reason` label, and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{header}: {message}")]
pub struct SignatureError {
    pub header: &'static str,
    /// `missing_header`, `repeated_header`, `malformed`, `unknown_serial`,
    /// `stale_timestamp` or `bad_signature`.
    pub reason: &'static str,
    pub message: String,
}

fn refused(
    header: &'static str,
    reason: &'static str,
    message: impl Into<String>,
) -> SignatureError {
    SignatureError {
        header,
        reason,
        message: message.into(),
    }
}

/// The four signature headers of one delivery, each present exactly once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedHeaders {
    pub timestamp: String,
    pub nonce: String,
    pub signature: String,
    pub serial: String,
}

impl SignedHeaders {
    /// Picks the headers out of `headers` (names compared case-insensitively).
    pub fn collect<'a>(
        headers: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    ) -> Result<SignedHeaders, SignatureError> {
        let wanted = [
            TIMESTAMP_HEADER,
            NONCE_HEADER,
            SIGNATURE_HEADER,
            SERIAL_HEADER,
            SIGNATURE_TYPE_HEADER,
        ];
        let mut found: [Option<String>; 5] = Default::default();
        for (name, value) in headers {
            let Some(i) = wanted.iter().position(|w| name.eq_ignore_ascii_case(w)) else {
                continue;
            };
            if found[i].is_some() {
                return Err(refused(wanted[i], "repeated_header", "sent more than once"));
            }
            let text = std::str::from_utf8(value)
                .ok()
                .filter(|t| !t.trim().is_empty() && t.len() <= HEADER_CHARS_MAX)
                .ok_or_else(|| {
                    refused(
                        wanted[i],
                        "malformed",
                        format!("not 1 to {HEADER_CHARS_MAX} characters of text"),
                    )
                })?;
            found[i] = Some(text.trim().to_owned());
        }
        let [timestamp, nonce, signature, serial, kind] = found;
        if let Some(kind) = kind.filter(|k| k != SCHEME) {
            return Err(refused(
                SIGNATURE_TYPE_HEADER,
                "malformed",
                format!("signature type {kind:?} is not {SCHEME}"),
            ));
        }
        let need = |v: Option<String>, h: &'static str| {
            v.ok_or_else(|| refused(h, "missing_header", "the header is missing"))
        };
        Ok(SignedHeaders {
            signature: need(signature, SIGNATURE_HEADER)?,
            serial: need(serial, SERIAL_HEADER)?,
            timestamp: need(timestamp, TIMESTAMP_HEADER)?,
            nonce: need(nonce, NONCE_HEADER)?,
        })
    }
}

/// `timestamp\nnonce\nbody\n`: what WeChat signs in an answer or a notification.
pub fn response_message(timestamp: &str, nonce: &str, body: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(timestamp.len() + nonce.len() + body.len() + 3);
    m.extend_from_slice(timestamp.as_bytes());
    m.push(b'\n');
    m.extend_from_slice(nonce.as_bytes());
    m.push(b'\n');
    m.extend_from_slice(body);
    m.push(b'\n');
    m
}

/// `METHOD\nURL\ntimestamp\nnonce\nbody\n`: what we sign in a request (`url` is the
/// path and query, `body` empty for a GET).
pub fn request_message(method: &str, url: &str, timestamp: i64, nonce: &str, body: &str) -> String {
    format!("{method}\n{url}\n{timestamp}\n{nonce}\n{body}\n")
}

/// The merchant's API private key (PKCS#8 PEM, `-----BEGIN PRIVATE KEY-----`).
#[derive(Clone)]
pub struct MerchantKey(Arc<SigningKey<Sha256>>);

impl MerchantKey {
    pub fn from_pem(pem: &str) -> Result<MerchantKey, String> {
        let key = RsaPrivateKey::from_pkcs8_pem(pem.trim())
            .map_err(|e| format!("not a PKCS#8 PEM RSA private key: {e}"))?;
        Ok(MerchantKey::from_key(key))
    }

    pub fn from_key(key: RsaPrivateKey) -> MerchantKey {
        MerchantKey(Arc::new(SigningKey::<Sha256>::new(key)))
    }

    /// base64 SHA256withRSA of `message` (PKCS#1 v1.5 is deterministic: no RNG).
    pub fn sign(&self, message: &[u8]) -> String {
        let signature: Signature = self.0.sign(message);
        base64::engine::general_purpose::STANDARD.encode(signature.to_bytes())
    }
}

impl std::fmt::Debug for MerchantKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MerchantKey(<redacted>)")
    }
}

/// The `Authorization` header value of a request.
pub struct Authorization<'a> {
    pub mchid: &'a str,
    /// The merchant certificate's serial number (`serial_no`).
    pub serial: &'a str,
    pub timestamp: i64,
    pub nonce: &'a str,
}

impl Authorization<'_> {
    /// Signs `method url body` and renders the header.
    pub fn header(&self, key: &MerchantKey, method: &str, url: &str, body: &str) -> String {
        let message = request_message(method, url, self.timestamp, self.nonce, body);
        let signature = key.sign(message.as_bytes());
        format!(
            "{SCHEME} mchid=\"{}\",nonce_str=\"{}\",signature=\"{signature}\",timestamp=\"{}\",serial_no=\"{}\"",
            self.mchid, self.nonce, self.timestamp, self.serial
        )
    }
}

/// A random request nonce: 32 upper-case hex digits (the docs' example shape).
pub fn nonce() -> String {
    let bytes: [u8; 16] = rand::random();
    hex::encode_upper(bytes)
}

/// WeChat Pay's platform public keys by serial (several during a rotation).
#[derive(Clone, Default)]
pub struct PlatformKeys(Arc<BTreeMap<String, VerifyingKey<Sha256>>>);

impl PlatformKeys {
    /// Keys from `(serial, SPKI PEM)` pairs (`-----BEGIN PUBLIC KEY-----`).
    pub fn from_pems<'a>(
        pems: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<PlatformKeys, String> {
        let mut keys = BTreeMap::new();
        for (serial, pem) in pems {
            let serial = serial.trim();
            if serial.is_empty() || serial.len() > 64 {
                return Err(format!(
                    "platform key serial {serial:?}: 1 to 64 characters"
                ));
            }
            let key = RsaPublicKey::from_public_key_pem(pem.trim())
                .map_err(|e| format!("platform key {serial}: not a PEM RSA public key: {e}"))?;
            keys.insert(serial.to_owned(), VerifyingKey::<Sha256>::new(key));
        }
        if keys.is_empty() {
            return Err("no platform public key is configured".into());
        }
        Ok(PlatformKeys(Arc::new(keys)))
    }

    pub fn from_keys(keys: impl IntoIterator<Item = (String, RsaPublicKey)>) -> PlatformKeys {
        PlatformKeys(Arc::new(
            keys.into_iter()
                .map(|(s, k)| (s, VerifyingKey::<Sha256>::new(k)))
                .collect(),
        ))
    }

    pub fn serials(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    /// Checks one signed delivery: a known serial, a timestamp within
    /// [`TIMESTAMP_SKEW_S_MAX`] of `now_ms`, and the signature over
    /// `timestamp\nnonce\nbody\n`.
    pub fn verify(
        &self,
        h: &SignedHeaders,
        body: &[u8],
        now_ms: i64,
    ) -> Result<(), SignatureError> {
        let key = self.0.get(&h.serial).ok_or_else(|| {
            refused(
                SERIAL_HEADER,
                "unknown_serial",
                format!("no platform key has serial {:?}", h.serial),
            )
        })?;
        let at_s: i64 = h.timestamp.parse().map_err(|_| {
            refused(
                TIMESTAMP_HEADER,
                "malformed",
                "not a whole number of epoch seconds",
            )
        })?;
        let skew_s = (now_ms.div_euclid(1_000) - at_s).abs();
        if skew_s > TIMESTAMP_SKEW_S_MAX {
            return Err(refused(
                TIMESTAMP_HEADER,
                "stale_timestamp",
                format!("{skew_s} s from our clock (at most {TIMESTAMP_SKEW_S_MAX} s)"),
            ));
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(h.signature.as_bytes())
            .map_err(|_| refused(SIGNATURE_HEADER, "malformed", "not base64"))?;
        let signature = Signature::try_from(bytes.as_slice())
            .map_err(|_| refused(SIGNATURE_HEADER, "malformed", "not an RSA signature"))?;
        key.verify(&response_message(&h.timestamp, &h.nonce, body), &signature)
            .map_err(|_| {
                refused(
                    SIGNATURE_HEADER,
                    "bad_signature",
                    "the signature does not match the timestamp, nonce and body",
                )
            })
    }
}

impl std::fmt::Debug for PlatformKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.keys()).finish()
    }
}

/// The merchant's APIv3 key: 32 bytes, the AES-256-GCM key of notification resources.
#[derive(Clone)]
pub struct ApiV3Key(Arc<[u8; APIV3_KEY_BYTES]>);

impl ApiV3Key {
    /// The key as configured: exactly 32 bytes of text (WeChat's merchant platform
    /// sets it as 32 printable characters, used as they are).
    pub fn parse(text: &str) -> Result<ApiV3Key, String> {
        let bytes: [u8; APIV3_KEY_BYTES] = text.as_bytes().try_into().map_err(|_| {
            format!(
                "must be exactly {APIV3_KEY_BYTES} bytes, got {}",
                text.len()
            )
        })?;
        Ok(ApiV3Key(Arc::new(bytes)))
    }

    fn cipher(&self) -> Aes256Gcm {
        Aes256Gcm::new(self.0.as_ref().into())
    }

    /// Opens a resource: `ciphertext` base64 of encrypted bytes and tag.
    pub fn decrypt(
        &self,
        ciphertext_b64: &str,
        nonce: &str,
        associated_data: &str,
    ) -> Result<Vec<u8>, String> {
        if nonce.len() != GCM_NONCE_BYTES {
            return Err(format!(
                "resource.nonce: must be {GCM_NONCE_BYTES} bytes, got {}",
                nonce.len()
            ));
        }
        let sealed = base64::engine::general_purpose::STANDARD
            .decode(ciphertext_b64.as_bytes())
            .map_err(|_| "resource.ciphertext: not base64".to_owned())?;
        if sealed.len() < GCM_TAG_BYTES {
            return Err("resource.ciphertext: shorter than the GCM tag".into());
        }
        self.cipher()
            .decrypt(
                Nonce::from_slice(nonce.as_bytes()),
                Payload {
                    msg: &sealed,
                    aad: associated_data.as_bytes(),
                },
            )
            .map_err(|_| {
                "resource: does not decrypt under the APIv3 key (bad tag, nonce, \
                 associated_data or key)"
                    .to_owned()
            })
    }

    /// Seals `plain` as a resource's base64 ciphertext (tests and fixtures).
    pub fn encrypt(
        &self,
        plain: &[u8],
        nonce: &str,
        associated_data: &str,
    ) -> Result<String, String> {
        if nonce.len() != GCM_NONCE_BYTES {
            return Err(format!("nonce: must be {GCM_NONCE_BYTES} bytes"));
        }
        let sealed = self
            .cipher()
            .encrypt(
                Nonce::from_slice(nonce.as_bytes()),
                Payload {
                    msg: plain,
                    aad: associated_data.as_bytes(),
                },
            )
            .map_err(|_| "encryption failed".to_owned())?;
        Ok(base64::engine::general_purpose::STANDARD.encode(sealed))
    }
}

impl std::fmt::Debug for ApiV3Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiV3Key(<redacted>)")
    }
}
