//! The x5c chain of an App Store JWS, checked as Apple's own libraries do
//! (`SignedDataVerifier` / `ChainVerifier` of app-store-server-library-*), offline:
//!
//! 1. exactly three certificates, `[leaf, intermediate, root]`, standard base64 DER;
//! 2. the chain's root is the pinned root (Apple Root CA - G3 unless configured
//!    otherwise): the same subject and the same public key — the trust anchor of
//!    RFC 5280 path validation, so a re-issue of the same CA matches (Apple's own
//!    test notifications carry one) and any other root is refused. The chain's own
//!    root is never trusted for being there: the intermediate is verified with the
//!    pinned root's key, and validity is the pinned root's;
//! 3. names chain (leaf issuer = intermediate subject, intermediate issuer = root
//!    subject) and each signature verifies with its issuer's key: ECDSA on P-256 or
//!    P-384 with SHA-256 or SHA-384, as the certificate's `signatureAlgorithm` says;
//! 4. the intermediate is a CA (basic constraints);
//! 5. every certificate is valid at the payload's `signedDate` (Apple's offline mode
//!    uses that instant, so a notification re-sent days later still verifies);
//! 6. Apple's marker extensions: the leaf carries `1.2.840.113635.100.6.11.1`
//!    (App Store receipt signing), the intermediate `1.2.840.113635.100.6.2.1`
//!    (Apple Worldwide Developer Relations CA): any other certificate Apple issued under
//!    the same root (a developer's, say) cannot sign a notification;
//! 7. the leaf's key is P-256: it verifies the JWS (ES256).
//!
//! No OCSP: the service never calls out while verifying (the inbox verifies before it
//! stores, and replays never re-verify).

use super::Failure;
use base64::Engine as _;
use der::asn1::ObjectIdentifier;
use der::Decode;
use p256::ecdsa::signature::hazmat::PrehashVerifier as _;
use sha2::{Digest, Sha256, Sha384};
use x509_cert::Certificate;

/// App Store receipt signing: the leaf's marker extension.
pub const OID_APPLE_LEAF: ObjectIdentifier =
    ObjectIdentifier::new_unwrap("1.2.840.113635.100.6.11.1");
/// Apple WWDR intermediate: the intermediate's marker extension.
pub const OID_APPLE_INTERMEDIATE: ObjectIdentifier =
    ObjectIdentifier::new_unwrap("1.2.840.113635.100.6.2.1");
const OID_EC_PUBLIC_KEY: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
const OID_P256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.3.1.7");
const OID_P384: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.132.0.34");
const OID_ECDSA_SHA256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.2");
const OID_ECDSA_SHA384: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.3");
const OID_BASIC_CONSTRAINTS: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.29.19");
/// `[leaf, intermediate, root]`.
pub const CHAIN_LENGTH: usize = 3;
/// Largest certificate accepted (Apple's are under 1.5 KiB).
pub const CERT_BYTES_MAX: usize = 8 * 1024;

/// An ECDSA public key of a certificate.
enum EcKey {
    P256(p256::ecdsa::VerifyingKey),
    P384(p384::ecdsa::VerifyingKey),
}

struct Cert {
    der: Vec<u8>,
    cert: Certificate,
    role: &'static str,
}

fn bad(msg: impl Into<String>) -> Failure {
    Failure::Chain(msg.into())
}

/// The `tbsCertificate` exactly as sent (the signed bytes; never re-encoded).
fn tbs_bytes(der: &[u8]) -> Option<&[u8]> {
    /// (header length, content length) of the DER TLV at the start of `b`.
    fn tlv(b: &[u8]) -> Option<(usize, usize)> {
        let first = *b.get(1)?;
        if first < 0x80 {
            return Some((2, usize::from(first)));
        }
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 {
            return None;
        }
        let len = b
            .get(2..2 + n)?
            .iter()
            .fold(0usize, |acc, x| (acc << 8) | usize::from(*x));
        Some((2 + n, len))
    }
    let (outer_header, _) = tlv(der)?;
    let inner = der.get(outer_header..)?;
    let (h, len) = tlv(inner)?;
    inner.get(..h.checked_add(len)?)
}

impl Cert {
    fn parse(b64: &str, role: &'static str) -> Result<Cert, Failure> {
        let der = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|e| bad(format!("{role}: not base64: {e}")))?;
        if der.len() > CERT_BYTES_MAX {
            return Err(bad(format!("{role}: larger than {CERT_BYTES_MAX} bytes")));
        }
        let cert = Certificate::from_der(&der)
            .map_err(|e| bad(format!("{role}: not an X.509 certificate: {e}")))?;
        Ok(Cert { der, cert, role })
    }

    fn key(&self) -> Result<EcKey, Failure> {
        let spki = &self.cert.tbs_certificate.subject_public_key_info;
        if spki.algorithm.oid != OID_EC_PUBLIC_KEY {
            return Err(bad(format!("{}: not an EC public key", self.role)));
        }
        let curve = spki
            .algorithm
            .parameters
            .as_ref()
            .and_then(|p| p.decode_as::<ObjectIdentifier>().ok())
            .ok_or_else(|| bad(format!("{}: the key names no curve", self.role)))?;
        let point = spki.subject_public_key.raw_bytes();
        let invalid = |_| bad(format!("{}: the public key is not on its curve", self.role));
        match curve {
            OID_P256 => Ok(EcKey::P256(
                p256::ecdsa::VerifyingKey::from_sec1_bytes(point).map_err(invalid)?,
            )),
            OID_P384 => Ok(EcKey::P384(
                p384::ecdsa::VerifyingKey::from_sec1_bytes(point).map_err(invalid)?,
            )),
            other => Err(bad(format!(
                "{}: curve {other} is not P-256 or P-384",
                self.role
            ))),
        }
    }

    /// This certificate's signature, checked with `issuer`'s key.
    fn signed_by(&self, issuer: &Cert) -> Result<(), Failure> {
        if self.cert.tbs_certificate.issuer != issuer.cert.tbs_certificate.subject {
            return Err(bad(format!(
                "{}: its issuer is not the {}'s subject",
                self.role, issuer.role
            )));
        }
        let tbs =
            tbs_bytes(&self.der).ok_or_else(|| bad(format!("{}: unreadable DER", self.role)))?;
        let prehash: Vec<u8> = match self.cert.signature_algorithm.oid {
            OID_ECDSA_SHA256 => Sha256::digest(tbs).to_vec(),
            OID_ECDSA_SHA384 => Sha384::digest(tbs).to_vec(),
            other => {
                return Err(bad(format!(
                    "{}: signature algorithm {other} is not ECDSA with SHA-256 or SHA-384",
                    self.role
                )))
            }
        };
        let sig = self.cert.signature.raw_bytes();
        let verified = match issuer.key()? {
            EcKey::P256(k) => p256::ecdsa::Signature::from_der(sig)
                .is_ok_and(|s| k.verify_prehash(&prehash, &s).is_ok()),
            EcKey::P384(k) => p384::ecdsa::Signature::from_der(sig)
                .is_ok_and(|s| k.verify_prehash(&prehash, &s).is_ok()),
        };
        if verified {
            Ok(())
        } else {
            Err(bad(format!(
                "{}: its signature does not verify with the {}'s key",
                self.role, issuer.role
            )))
        }
    }

    fn extension(&self, oid: ObjectIdentifier) -> Option<&x509_cert::ext::Extension> {
        self.cert
            .tbs_certificate
            .extensions
            .as_ref()?
            .iter()
            .find(|e| e.extn_id == oid)
    }

    fn is_ca(&self) -> bool {
        self.extension(OID_BASIC_CONSTRAINTS)
            .and_then(|e| {
                x509_cert::ext::pkix::BasicConstraints::from_der(e.extn_value.as_bytes()).ok()
            })
            .is_some_and(|bc| bc.ca)
    }

    fn valid_at(&self, at_ms: i64) -> Result<(), Failure> {
        let v = &self.cert.tbs_certificate.validity;
        let ms = |t: x509_cert::time::Time| {
            i64::try_from(t.to_unix_duration().as_millis()).unwrap_or(i64::MAX)
        };
        let (from, until) = (ms(v.not_before), ms(v.not_after));
        if at_ms < from || at_ms > until {
            return Err(Failure::NotValidAt(format!(
                "{} is valid from {from} to {until} (epoch ms), the payload was signed at {at_ms}",
                self.role
            )));
        }
        Ok(())
    }
}

/// The SHA-256 fingerprint of a DER certificate, lower-case hex.
pub fn fingerprint(der: &[u8]) -> String {
    hex::encode(Sha256::digest(der))
}

/// Check `x5c` against `root_der` at `at_ms` (the payload's `signedDate`); the
/// leaf's P-256 key when every step of the module doc holds.
pub fn verify(
    x5c: &[String],
    root_der: &[u8],
    at_ms: i64,
) -> Result<p256::ecdsa::VerifyingKey, Failure> {
    if x5c.len() != CHAIN_LENGTH {
        return Err(bad(format!(
            "the chain has {} certificates; Apple sends {CHAIN_LENGTH} (leaf, intermediate, root)",
            x5c.len()
        )));
    }
    let leaf = Cert::parse(&x5c[0], "leaf")?;
    let intermediate = Cert::parse(&x5c[1], "intermediate")?;
    let root = Cert::parse(&x5c[2], "root")?;
    let pinned = Cert {
        cert: Certificate::from_der(root_der)
            .map_err(|e| bad(format!("the pinned root is not a certificate: {e}")))?,
        der: root_der.to_vec(),
        role: "pinned root",
    };
    let same_ca = root.cert.tbs_certificate.subject == pinned.cert.tbs_certificate.subject
        && root.cert.tbs_certificate.subject_public_key_info
            == pinned.cert.tbs_certificate.subject_public_key_info;
    if !same_ca {
        return Err(Failure::WrongRoot(format!(
            "the chain's root (SHA-256 {}) is not the pinned root's name and key (SHA-256 {})",
            fingerprint(&root.der),
            fingerprint(root_der)
        )));
    }
    intermediate.signed_by(&pinned)?;
    leaf.signed_by(&intermediate)?;
    if !intermediate.is_ca() {
        return Err(bad("intermediate: not a CA (basic constraints)"));
    }
    for c in [&leaf, &intermediate, &pinned] {
        c.valid_at(at_ms)?;
    }
    if leaf.extension(OID_APPLE_LEAF).is_none() {
        return Err(Failure::MissingOid(format!(
            "leaf: no App Store receipt signing extension {OID_APPLE_LEAF}"
        )));
    }
    if intermediate.extension(OID_APPLE_INTERMEDIATE).is_none() {
        return Err(Failure::MissingOid(format!(
            "intermediate: no Apple WWDR extension {OID_APPLE_INTERMEDIATE}"
        )));
    }
    match leaf.key()? {
        EcKey::P256(k) => Ok(k),
        EcKey::P384(_) => Err(bad("leaf: an ES256 signer's key is P-256, this one P-384")),
    }
}

/// Read a root certificate: DER, or PEM text (`-----BEGIN CERTIFICATE-----`).
pub fn root_from_bytes(bytes: &[u8]) -> Result<Vec<u8>, String> {
    let der = match std::str::from_utf8(bytes) {
        Ok(text) if text.contains("-----BEGIN CERTIFICATE-----") => {
            let body: String = text
                .lines()
                .filter(|l| !l.starts_with("-----"))
                .map(str::trim)
                .collect();
            base64::engine::general_purpose::STANDARD
                .decode(body)
                .map_err(|e| format!("PEM body is not base64: {e}"))?
        }
        _ => bytes.to_vec(),
    };
    Certificate::from_der(&der).map_err(|e| format!("not an X.509 certificate: {e}"))?;
    // Canonical DER: what the chain's root is compared with.
    Ok(der)
}
