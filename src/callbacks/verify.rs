//! Verifying that a callback comes from its provider: an HMAC-SHA256 signature over
//! the raw body, or a shared token in a header (Xendit's `x-callback-token`). Both
//! compare in constant time, so response timing tells a forger nothing about how much
//! of a guess was right.
//!
//! Secrets come from the environment only (`FACTLEDGER_CALLBACK_<PROVIDER>_SECRET` or
//! `_TOKEN`): never from the command line, where `ps` and shell history would show
//! them. A provider without one refuses every callback as unverified — failing closed.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// What is stored instead of a token header's value.
pub const TOKEN_STORED_AS: &str = "redacted";
/// An HMAC-SHA256 tag is 32 bytes.
const HMAC_SHA256_BYTES: usize = 32;

/// A shared secret. Its `Debug` never shows it, so it cannot leak into logs.
#[derive(Clone)]
pub struct Secret(Arc<[u8]>);

impl Secret {
    pub fn new(bytes: impl AsRef<[u8]>) -> Secret {
        Secret(Arc::from(bytes.as_ref()))
    }

    fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// A provider's own proof of a delivery, when it is more than one header over the
/// body: WeChat Pay's RSA signature over `timestamp\nnonce\nbody\n` (four headers),
/// Alipay's RSA2 over the sorted form fields (the signature is in the body), Apple's
/// JWS with its x5c chain. The adapter that speaks the provider's protocol implements
/// it; the inbox calls it before anything is stored.
pub trait Authenticator: Send + Sync + 'static {
    /// The header (or body field) a refusal names, and whose value is kept with a
    /// stored callback (a public-key signature is no secret).
    fn header(&self) -> &str;
    /// Check one delivery: `headers` as sent (names lower-case), `body` raw, `now_ms`
    /// the receiving clock (for timestamp windows). Never stores anything.
    fn verify(
        &self,
        headers: &[(String, Vec<u8>)],
        body: &[u8],
        now_ms: i64,
    ) -> Result<(), VerifyError>;
}

/// A [`Verifier::Custom`]'s authenticator (its `Debug` names only the header).
#[derive(Clone)]
pub struct Custom(pub Arc<dyn Authenticator>);

impl std::fmt::Debug for Custom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Custom({})", self.0.header())
    }
}

/// How a provider proves a callback is its own.
#[derive(Debug, Clone)]
pub enum Verifier {
    /// `header` carries HMAC-SHA256(secret, raw body) as hex, optionally `sha256=<hex>`.
    Hmac {
        secret: Option<Secret>,
        header: String,
    },
    /// `header` carries the shared token itself.
    Token {
        token: Option<Secret>,
        header: String,
    },
    /// The provider's own scheme ([`Authenticator`]).
    Custom(Custom),
}

/// Why a callback was not verified. Every variant names the header, so the 401 can.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error(
        "{header}: no {kind} is configured for this provider (set {env}); every callback \
         is refused"
    )]
    NoSecret {
        header: String,
        kind: &'static str,
        env: String,
    },
    #[error("{header}: the header is missing")]
    MissingHeader { header: String },
    #[error("{header}: sent more than once")]
    RepeatedHeader { header: String },
    #[error("{header}: not a hex HMAC-SHA256 signature (64 hex digits, optionally `sha256=`)")]
    Malformed { header: String },
    #[error("{header}: the signature does not match the body")]
    BadSignature { header: String },
    #[error("{header}: the token is wrong")]
    BadToken { header: String },
    /// A provider scheme's refusal: `reason` is the metric label (`bad_signature`,
    /// `stale_timestamp`, `unknown_serial`, `bad_chain` …), `message` says why.
    #[error("{header}: {message}")]
    Rejected {
        header: String,
        reason: &'static str,
        message: String,
    },
}

impl VerifyError {
    /// The `reason` label of `factledger_callbacks_rejected_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            VerifyError::NoSecret { .. } => "no_secret",
            VerifyError::MissingHeader { .. } => "missing_header",
            VerifyError::RepeatedHeader { .. } => "repeated_header",
            VerifyError::Malformed { .. } => "malformed",
            VerifyError::BadSignature { .. } => "bad_signature",
            VerifyError::BadToken { .. } => "bad_token",
            VerifyError::Rejected { reason, .. } => reason,
        }
    }

    /// The header the problem is about.
    pub fn header(&self) -> &str {
        match self {
            VerifyError::NoSecret { header, .. }
            | VerifyError::MissingHeader { header }
            | VerifyError::RepeatedHeader { header }
            | VerifyError::Malformed { header }
            | VerifyError::BadSignature { header }
            | VerifyError::BadToken { header }
            | VerifyError::Rejected { header, .. } => header,
        }
    }
}

/// `FACTLEDGER_CALLBACK_<PROVIDER>_<SUFFIX>`: the provider upper-cased, `-` as `_`.
pub fn env_var_name(provider: &str, suffix: &str) -> String {
    let p: String = provider
        .chars()
        .map(|c| match c {
            '-' => '_',
            c => c.to_ascii_uppercase(),
        })
        .collect();
    format!("FACTLEDGER_CALLBACK_{p}_{suffix}")
}

fn from_lookup(
    provider: &str,
    suffix: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Option<Secret> {
    lookup(&env_var_name(provider, suffix))
        .filter(|s| !s.is_empty())
        .map(Secret::new)
}

impl Verifier {
    pub fn hmac(secret: Option<Secret>, header: impl Into<String>) -> Verifier {
        Verifier::Hmac {
            secret,
            header: header.into().to_ascii_lowercase(),
        }
    }

    pub fn token(token: Option<Secret>, header: impl Into<String>) -> Verifier {
        Verifier::Token {
            token,
            header: header.into().to_ascii_lowercase(),
        }
    }

    /// HMAC with the secret in `FACTLEDGER_CALLBACK_<PROVIDER>_SECRET` (none when it
    /// is unset or empty).
    pub fn hmac_from_env(provider: &str, header: impl Into<String>) -> Verifier {
        Verifier::hmac_from(provider, header, |k| std::env::var(k).ok())
    }

    /// A token from `FACTLEDGER_CALLBACK_<PROVIDER>_TOKEN` (none when unset or empty).
    pub fn token_from_env(provider: &str, header: impl Into<String>) -> Verifier {
        Verifier::token_from(provider, header, |k| std::env::var(k).ok())
    }

    /// [`Verifier::hmac_from_env`] with another source of variables (tests).
    pub fn hmac_from(
        provider: &str,
        header: impl Into<String>,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Verifier {
        Verifier::hmac(from_lookup(provider, "SECRET", lookup), header)
    }

    /// [`Verifier::token_from_env`] with another source of variables (tests).
    pub fn token_from(
        provider: &str,
        header: impl Into<String>,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Verifier {
        Verifier::token(from_lookup(provider, "TOKEN", lookup), header)
    }

    /// A provider's own scheme.
    pub fn custom(authenticator: Arc<dyn Authenticator>) -> Verifier {
        Verifier::Custom(Custom(authenticator))
    }

    /// The (lower-case) header this verifier reads.
    pub fn header(&self) -> &str {
        match self {
            Verifier::Hmac { header, .. } | Verifier::Token { header, .. } => header,
            Verifier::Custom(c) => c.0.header(),
        }
    }

    /// Check one delivery with all its headers (names lower-case): a
    /// [`Verifier::Custom`] sees them all, the others the values of their header.
    pub fn verify_delivery(
        &self,
        provider: &str,
        headers: &[(String, Vec<u8>)],
        body: &[u8],
        now_ms: i64,
    ) -> Result<(), VerifyError> {
        if let Verifier::Custom(c) = self {
            return c.0.verify(headers, body, now_ms);
        }
        let values: Vec<&[u8]> = headers
            .iter()
            .filter(|(n, _)| n == self.header())
            .map(|(_, v)| v.as_slice())
            .collect();
        self.verify(provider, &values, body)
    }

    /// Check one callback: `values` are the values of [`Verifier::header`] as sent.
    /// `provider` only names the variable a missing secret should be set in.
    pub fn verify(&self, provider: &str, values: &[&[u8]], body: &[u8]) -> Result<(), VerifyError> {
        let header = self.header().to_owned();
        let (secret, kind, suffix) = match self {
            Verifier::Hmac { secret, .. } => (secret, "secret", "SECRET"),
            Verifier::Token { token, .. } => (token, "token", "TOKEN"),
            Verifier::Custom(c) => return c.0.verify(&[], body, crate::infra::db::now_ms()),
        };
        let Some(secret) = secret else {
            return Err(VerifyError::NoSecret {
                header,
                kind,
                env: env_var_name(provider, suffix),
            });
        };
        let value = match values {
            [] => return Err(VerifyError::MissingHeader { header }),
            [one] => trim(one),
            _ => return Err(VerifyError::RepeatedHeader { header }),
        };
        if matches!(self, Verifier::Hmac { .. }) {
            let hex_text = strip_sha256_prefix(value);
            let tag = hex::decode(hex_text)
                .ok()
                .filter(|t| t.len() == HMAC_SHA256_BYTES)
                .ok_or_else(|| VerifyError::Malformed {
                    header: header.clone(),
                })?;
            if hmac_matches(secret, body, &tag) {
                Ok(())
            } else {
                Err(VerifyError::BadSignature { header })
            }
        } else if constant_time_eq(value, secret.bytes()) {
            Ok(())
        } else {
            Err(VerifyError::BadToken { header })
        }
    }

    /// What is stored of this verifier's header: an HMAC signature as sent (it is not
    /// secret and lets an auditor re-check the body), a token not at all — not even a
    /// hash of it: the token IS the shared secret, and a short hash of a guessable
    /// token is an offline oracle for it.
    pub fn stored_value(&self, value: &[u8]) -> String {
        match self {
            Verifier::Hmac { .. } | Verifier::Custom(_) => {
                String::from_utf8_lossy(value).into_owned()
            }
            Verifier::Token { .. } => TOKEN_STORED_AS.to_owned(),
        }
    }
}

fn trim(v: &[u8]) -> &[u8] {
    let start = v
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(v.len());
    let end = v
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &v[start..end]
}

fn strip_sha256_prefix(v: &[u8]) -> &[u8] {
    match v.get(..7) {
        Some(p) if p.eq_ignore_ascii_case(b"sha256=") => &v[7..],
        _ => v,
    }
}

/// HMAC-SHA256(secret, body) == tag, compared in constant time (`verify_slice`).
fn hmac_matches(secret: &Secret, body: &[u8], tag: &[u8]) -> bool {
    // `new_from_slice` accepts a key of any length for HMAC: the error arm cannot
    // happen, and refusing is the safe answer if it ever did.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.bytes()) else {
        return false;
    };
    mac.update(body);
    mac.verify_slice(tag).is_ok()
}

/// The HMAC-SHA256 of `body` as lower-case hex (what a provider sends; tests sign
/// with it).
pub fn hmac_sha256_hex(secret: &[u8], body: &[u8]) -> String {
    // Any key length is valid for HMAC (see `hmac_matches`).
    match Hmac::<Sha256>::new_from_slice(secret) {
        Ok(mut mac) => {
            mac.update(body);
            hex::encode(mac.finalize().into_bytes())
        }
        Err(_) => String::new(),
    }
}

/// Equality in time independent of where the inputs differ — and of their lengths:
/// both are hashed first, so a wrong-length guess takes as long as any other.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let (da, db) = (Sha256::digest(a), Sha256::digest(b));
    da.as_slice().ct_eq(db.as_slice()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Accepts a delivery whose `x-a` and `x-b` headers concatenate to the body.
    struct TwoHeaders;

    impl Authenticator for TwoHeaders {
        fn header(&self) -> &str {
            "x-a"
        }

        fn verify(
            &self,
            headers: &[(String, Vec<u8>)],
            body: &[u8],
            now_ms: i64,
        ) -> Result<(), VerifyError> {
            assert!(now_ms > 0);
            let get = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
            let joined = [
                get("x-a").unwrap_or_default(),
                get("x-b").unwrap_or_default(),
            ]
            .concat();
            if joined == body {
                Ok(())
            } else {
                Err(VerifyError::Rejected {
                    header: "x-a".into(),
                    reason: "bad_signature",
                    message: "x-a + x-b is not the body".into(),
                })
            }
        }
    }

    #[test]
    fn a_custom_scheme_sees_every_header_and_its_refusal_names_its_reason() {
        let v = Verifier::custom(Arc::new(TwoHeaders));
        assert_eq!(v.header(), "x-a");
        assert_eq!(format!("{v:?}"), "Custom(Custom(x-a))");
        let headers = vec![
            ("x-a".to_owned(), b"ab".to_vec()),
            ("x-b".to_owned(), b"cd".to_vec()),
        ];
        assert_eq!(v.verify_delivery("p", &headers, b"abcd", 1), Ok(()));
        let e = v.verify_delivery("p", &headers, b"abce", 1).unwrap_err();
        assert_eq!((e.reason(), e.header()), ("bad_signature", "x-a"));
        assert_eq!(e.to_string(), "x-a: x-a + x-b is not the body");
        // A public-key signature is kept as sent (it proves nothing to a forger).
        assert_eq!(v.stored_value(b"sig"), "sig");
    }

    const BODY: &[u8] = br#"{"id":"evt-1"}"#;

    #[test]
    fn an_hmac_signature_is_accepted_as_hex_or_sha256_prefixed_and_refused_when_off() {
        let v = Verifier::hmac(Some(Secret::new("s3cret")), "X-Signature");
        let sig = hmac_sha256_hex(b"s3cret", BODY);
        assert_eq!(v.header(), "x-signature");
        assert_eq!(v.verify("p", &[sig.as_bytes()], BODY), Ok(()));
        let prefixed = format!("sha256={}", sig.to_ascii_uppercase());
        assert_eq!(v.verify("p", &[prefixed.as_bytes()], BODY), Ok(()));
        let other = hmac_sha256_hex(b"other", BODY);
        assert!(matches!(
            v.verify("p", &[other.as_bytes()], BODY),
            Err(VerifyError::BadSignature { .. })
        ));
        assert!(matches!(
            v.verify("p", &[sig.as_bytes()], b"{\"id\":\"evt-2\"}"),
            Err(VerifyError::BadSignature { .. })
        ));
        assert!(matches!(
            v.verify("p", &[b"zz"], BODY),
            Err(VerifyError::Malformed { .. })
        ));
        assert!(matches!(
            v.verify("p", &[], BODY),
            Err(VerifyError::MissingHeader { .. })
        ));
        assert!(matches!(
            v.verify("p", &[sig.as_bytes(), sig.as_bytes()], BODY),
            Err(VerifyError::RepeatedHeader { .. })
        ));
    }

    #[test]
    fn a_provider_without_a_secret_refuses_every_callback_and_names_the_variable() {
        let v = Verifier::hmac_from("acme-pay", "x-sig", |_| None);
        let sig = hmac_sha256_hex(b"", BODY);
        let e = v.verify("acme-pay", &[sig.as_bytes()], BODY).unwrap_err();
        assert!(
            e.to_string()
                .contains("FACTLEDGER_CALLBACK_ACME_PAY_SECRET"),
            "{e}"
        );
        assert_eq!(e.header(), "x-sig");
        let empty = Verifier::token_from("x", "x-callback-token", |_| Some(String::new()));
        assert!(matches!(
            empty.verify("x", &[b""], BODY),
            Err(VerifyError::NoSecret { .. })
        ));
    }

    #[test]
    fn secrets_are_read_from_the_provider_s_variable() {
        let lookup = |k: &str| (k == "FACTLEDGER_CALLBACK_XENDIT_TOKEN").then(|| "tok".to_owned());
        let v = Verifier::token_from("xendit", "x-callback-token", lookup);
        assert_eq!(v.verify("xendit", &[b" tok "], BODY), Ok(()));
        assert!(matches!(
            v.verify("xendit", &[b"tok2"], BODY),
            Err(VerifyError::BadToken { .. })
        ));
        assert_eq!(
            env_var_name("acme-pay", "SECRET"),
            "FACTLEDGER_CALLBACK_ACME_PAY_SECRET"
        );
    }

    #[test]
    fn the_constant_time_compare_is_equality_whatever_the_lengths() {
        assert!(constant_time_eq(b"token", b"token"));
        assert!(!constant_time_eq(b"token", b"tokem"));
        assert!(!constant_time_eq(b"token", b"token-longer"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn a_token_is_never_stored_nor_anything_derived_from_it_and_a_secret_never_prints() {
        let v = Verifier::token(Some(Secret::new("tok")), "x-callback-token");
        // Nothing derived from the token: the same text whatever was sent.
        assert_eq!(v.stored_value(b"tok"), TOKEN_STORED_AS);
        assert_eq!(v.stored_value(b"another"), TOKEN_STORED_AS);
        assert_eq!(format!("{:?}", Secret::new("tok")), "Secret(***)");
        let h = Verifier::hmac(Some(Secret::new("k")), "x-sig");
        assert_eq!(h.stored_value(b"abc"), "abc");
    }
}
