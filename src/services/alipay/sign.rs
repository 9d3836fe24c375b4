//! Alipay's RSA2: SHA256withRSA (RSASSA-PKCS1-v1_5 over SHA-256), the signature
//! base64 (standard alphabet, padded), over a **signing string** built from
//! parameters: keep the non-empty ones, leave out the excluded names, sort by name
//! (byte order, as the SDKs' `Collections.sort` on ASCII names), join `name=value`
//! with `&`, the values as they are (URL-decoded, never re-encoded).
//!
//! Which names are left out differs by direction, as Alipay documents it:
//! - a request we send: `sign` only (`sign_type` is signed);
//! - an async notification Alipay sends: `sign` and `sign_type`.
//!
//! An answer to a request is signed differently: over the exact raw text of its
//! `<method>_response` node (see `answer.rs`).
//!
//! Keys: our **app private key** signs requests; the **Alipay public key** (from the
//! open platform's console, per app) verifies notifications and answers. Both are
//! read from PEM (PKCS#8 `PRIVATE KEY` or PKCS#1 `RSA PRIVATE KEY`; SPKI `PUBLIC KEY`
//! or PKCS#1 `RSA PUBLIC KEY`) or from the bare base64 DER the Alipay key tool and
//! console print (PKCS#8 / SPKI). Keys under [`RSA_BITS_MIN`] bits are refused: RSA2
//! keys are 2048-bit. Neither key's `Debug` shows it.

use base64::Engine as _;
use rsa::pkcs1::{DecodeRsaPrivateKey, DecodeRsaPublicKey};
use rsa::pkcs1v15::{Signature, SigningKey, VerifyingKey};
use rsa::pkcs8::{DecodePrivateKey, DecodePublicKey};
use rsa::signature::{SignatureEncoding, Signer, Verifier};
use rsa::traits::PublicKeyParts;
use rsa::{RsaPrivateKey, RsaPublicKey};
use sha2::Sha256;

/// The only `sign_type` accepted: RSA2 (SHA256withRSA). `RSA` (SHA1withRSA) is
/// refused, as Alipay itself advises.
pub const SIGN_TYPE_RSA2: &str = "RSA2";
/// The smallest RSA modulus taken (RSA2 keys are 2048-bit).
pub const RSA_BITS_MIN: usize = 2048;
/// Names a request's signing string leaves out.
pub const REQUEST_UNSIGNED: &[&str] = &["sign"];
/// Names a notification's signing string leaves out.
pub const NOTIFY_UNSIGNED: &[&str] = &["sign", "sign_type"];

/// Why a key could not be read (never quotes the key).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("not an RSA {0} key in PEM (PKCS#8 or PKCS#1) or base64 DER")]
    Unreadable(&'static str),
    #[error("an RSA key of {0} bits; RSA2 needs at least {RSA_BITS_MIN}")]
    TooShort(usize),
}

/// Why a signature was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignError {
    #[error("the signature is not base64")]
    NotBase64,
    #[error("the signature does not match the signed content")]
    Mismatch,
}

/// The signing string of `params` (see the module docs): non-empty values, names in
/// `unsigned` left out, sorted by name, `name=value` joined with `&`.
pub fn signing_string<'a>(
    params: impl IntoIterator<Item = (&'a str, &'a str)>,
    unsigned: &[&str],
) -> String {
    let mut kept: Vec<(&str, &str)> = params
        .into_iter()
        .filter(|(k, v)| !k.is_empty() && !v.is_empty() && !unsigned.contains(k))
        .collect();
    kept.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let mut out = String::new();
    for (i, (k, v)) in kept.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        out.push_str(k);
        out.push('=');
        out.push_str(v);
    }
    out
}

/// PEM text or bare base64 DER, as bytes of DER (PEM armour and whitespace gone).
fn der_of(text: &str) -> Option<Vec<u8>> {
    let body: String = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("-----"))
        .collect();
    base64::engine::general_purpose::STANDARD
        .decode(body.as_bytes())
        .ok()
}

fn check_bits(bits: usize) -> Result<(), KeyError> {
    if bits < RSA_BITS_MIN {
        return Err(KeyError::TooShort(bits));
    }
    Ok(())
}

/// Our app private key: signs requests.
#[derive(Clone)]
pub struct AppPrivateKey(SigningKey<Sha256>);

impl AppPrivateKey {
    /// Reads PKCS#8 or PKCS#1, PEM or bare base64 DER.
    pub fn parse(text: &str) -> Result<AppPrivateKey, KeyError> {
        let text = text.trim();
        let key = RsaPrivateKey::from_pkcs8_pem(text)
            .or_else(|_| RsaPrivateKey::from_pkcs1_pem(text))
            .ok()
            .or_else(|| {
                let der = der_of(text)?;
                RsaPrivateKey::from_pkcs8_der(&der)
                    .or_else(|_| RsaPrivateKey::from_pkcs1_der(&der))
                    .ok()
            })
            .ok_or(KeyError::Unreadable("private"))?;
        AppPrivateKey::from_key(key)
    }

    pub fn from_key(key: RsaPrivateKey) -> Result<AppPrivateKey, KeyError> {
        check_bits(key.size() * 8)?;
        Ok(AppPrivateKey(SigningKey::new(key)))
    }

    /// `base64(SHA256withRSA(content))`. PKCS#1 v1.5 signing is deterministic.
    pub fn sign(&self, content: &str) -> String {
        let signature: Signature = self.0.sign(content.as_bytes());
        base64::engine::general_purpose::STANDARD.encode(signature.to_bytes())
    }

    /// The matching public key (what the app registers with Alipay).
    pub fn public_key(&self) -> RsaPublicKey {
        self.0.as_ref().to_public_key()
    }
}

impl std::fmt::Debug for AppPrivateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AppPrivateKey(<redacted>)")
    }
}

/// The Alipay public key: verifies notifications and answers.
#[derive(Clone)]
pub struct AlipayPublicKey(VerifyingKey<Sha256>);

impl AlipayPublicKey {
    /// Reads SPKI or PKCS#1, PEM or bare base64 DER (as the console shows it).
    pub fn parse(text: &str) -> Result<AlipayPublicKey, KeyError> {
        let text = text.trim();
        let key = RsaPublicKey::from_public_key_pem(text)
            .or_else(|_| RsaPublicKey::from_pkcs1_pem(text))
            .ok()
            .or_else(|| {
                let der = der_of(text)?;
                RsaPublicKey::from_public_key_der(&der)
                    .or_else(|_| RsaPublicKey::from_pkcs1_der(&der))
                    .ok()
            })
            .ok_or(KeyError::Unreadable("public"))?;
        AlipayPublicKey::from_key(key)
    }

    pub fn from_key(key: RsaPublicKey) -> Result<AlipayPublicKey, KeyError> {
        check_bits(key.size() * 8)?;
        Ok(AlipayPublicKey(VerifyingKey::new(key)))
    }

    /// Checks `sign` (base64) over `content`.
    pub fn verify(&self, content: &str, sign: &str) -> Result<(), SignError> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(sign.trim().as_bytes())
            .map_err(|_| SignError::NotBase64)?;
        let signature = Signature::try_from(bytes.as_slice()).map_err(|_| SignError::Mismatch)?;
        self.0
            .verify(content.as_bytes(), &signature)
            .map_err(|_| SignError::Mismatch)
    }
}

impl std::fmt::Debug for AlipayPublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AlipayPublicKey(..)")
    }
}
