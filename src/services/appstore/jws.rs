//! Compact JWS as Apple signs it (RFC 7515 §7.1): `b64url(header).b64url(payload).
//! b64url(signature)`, header `{"alg":"ES256","x5c":[leaf, intermediate, root]}`, the
//! signature ES256 (RFC 7518 §3.4): ECDSA P-256 over SHA-256 of the ASCII signing input
//! `b64url(header) "." b64url(payload)`, sent as the 64 bytes `r || s`.
//!
//! Only ES256 is accepted: `none`, `HS256` (a key confusion with the leaf's public key)
//! and anything else are refused before a key is even looked at.

use super::Failure;
use base64::Engine as _;
use p256::ecdsa::signature::Verifier as _;
use serde_json::Value;

/// The one algorithm App Store signed data uses.
pub const ALG_ES256: &str = "ES256";
/// Longest compact JWS accepted (a notification with its three certificates is ~5 KiB,
/// its nested transaction and renewal info ~5 KiB each): a limit far above that.
pub const JWS_CHARS_MAX: usize = 64 * 1024;
/// An ES256 signature: `r || s`, 32 bytes each.
const ES256_SIGNATURE_BYTES: usize = 64;

/// A parsed, not yet verified, compact JWS.
#[derive(Debug, Clone)]
pub struct Jws<'a> {
    /// `b64url(header) "." b64url(payload)`: what the signature covers.
    signing_input: &'a str,
    signature: Vec<u8>,
    pub alg: String,
    /// Base64 (standard, padded) DER certificates, leaf first.
    pub x5c: Vec<String>,
    pub payload: Value,
}

fn b64url(part: &str, what: &str) -> Result<Vec<u8>, Failure> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part.trim_end_matches('='))
        .map_err(|e| Failure::Malformed(format!("{what}: not base64url: {e}")))
}

/// Split and decode a compact JWS; refuses anything but three base64url parts with
/// JSON header and payload (no repeated keys).
pub fn parse(compact: &str) -> Result<Jws<'_>, Failure> {
    if compact.len() > JWS_CHARS_MAX {
        return Err(Failure::Malformed(format!(
            "longer than {JWS_CHARS_MAX} characters"
        )));
    }
    let parts: Vec<&str> = compact.split('.').collect();
    let [header_b64, payload_b64, signature_b64] = parts[..] else {
        return Err(Failure::Malformed(format!(
            "a compact JWS has 3 dot-separated parts, this one {}",
            parts.len()
        )));
    };
    let json = |bytes: Vec<u8>, what: &str| {
        crate::infra::json::parse_unique(&bytes)
            .map_err(|e| Failure::Malformed(format!("{what}: {e}")))
    };
    let header = json(b64url(header_b64, "header")?, "header")?;
    let payload = json(b64url(payload_b64, "payload")?, "payload")?;
    let signature = b64url(signature_b64, "signature")?;
    let alg = match header.get("alg") {
        Some(Value::String(a)) => a.clone(),
        _ => return Err(Failure::Algorithm("(missing)".into())),
    };
    let x5c = match header.get("x5c") {
        Some(Value::Array(certs)) => certs
            .iter()
            .map(|c| c.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| Failure::Chain("x5c holds something other than strings".into()))?,
        None => Vec::new(),
        Some(_) => return Err(Failure::Chain("x5c is not an array".into())),
    };
    if !payload.is_object() {
        return Err(Failure::Malformed(
            "the payload is not a JSON object".into(),
        ));
    }
    let signing_input = &compact[..header_b64.len() + 1 + payload_b64.len()];
    Ok(Jws {
        signing_input,
        signature,
        alg,
        x5c,
        payload,
    })
}

impl Jws<'_> {
    /// The ES256 signature checked with `key` (the verified leaf's).
    pub fn verify_es256(&self, key: &p256::ecdsa::VerifyingKey) -> Result<(), Failure> {
        if self.signature.len() != ES256_SIGNATURE_BYTES {
            return Err(Failure::Signature(format!(
                "an ES256 signature is {ES256_SIGNATURE_BYTES} bytes (r || s), this one {}",
                self.signature.len()
            )));
        }
        let sig = p256::ecdsa::Signature::from_slice(&self.signature)
            .map_err(|_| Failure::Signature("r or s is out of range".into()))?;
        key.verify(self.signing_input.as_bytes(), &sig)
            .map_err(|_| {
                Failure::Signature("does not verify with the leaf certificate's key".into())
            })
    }
}
