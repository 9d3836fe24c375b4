//! The simulated App Store's certificates and JWS signing: a chain shaped like
//! Apple's (a P-384 root, a P-384 intermediate carrying Apple's WWDR marker
//! `1.2.840.113635.100.6.2.1`, a P-256 leaf carrying the App Store receipt signing
//! marker `1.2.840.113635.100.6.11.1`), minted fresh by each simulator, and ES256
//! compact JWS signed with the leaf key, `x5c` = `[leaf, intermediate, root]` as
//! standard base64 DER. Options mint the broken chains tests need (no marker, an
//! expired leaf).

use base64::Engine as _;
use p256::ecdsa::signature::Signer as _;
use p256::pkcs8::DecodePrivateKey as _;
use rcgen::{
    BasicConstraints, CertificateParams, CustomExtension, DistinguishedName, DnType, IsCa, KeyPair,
    KeyUsagePurpose, PKCS_ECDSA_P256_SHA256, PKCS_ECDSA_P384_SHA384,
};
use serde_json::{json, Value};
use time::{Duration, OffsetDateTime};

/// Apple's marker on the leaf (App Store receipt signing).
pub const OID_LEAF: &[u64] = &[1, 2, 840, 113635, 100, 6, 11, 1];
/// Apple's marker on the intermediate (Apple WWDR CA).
pub const OID_INTERMEDIATE: &[u64] = &[1, 2, 840, 113635, 100, 6, 2, 1];
/// DER `NULL`: the markers' content, as in Apple's certificates.
const DER_NULL: [u8; 2] = [0x05, 0x00];

/// How to mint a chain (the default is a good one).
#[derive(Debug, Clone)]
pub struct ChainSpec {
    /// Common-name prefix of the three certificates.
    pub name: String,
    pub leaf_marker: bool,
    pub intermediate_marker: bool,
    /// The leaf's validity, relative to now (days; negative is in the past).
    pub leaf_valid_from_days: i64,
    pub leaf_valid_until_days: i64,
}

impl Default for ChainSpec {
    fn default() -> ChainSpec {
        ChainSpec {
            name: "Sim App Store".into(),
            leaf_marker: true,
            intermediate_marker: true,
            leaf_valid_from_days: -1,
            leaf_valid_until_days: 365,
        }
    }
}

/// A minted chain and the leaf's signing key.
pub struct Chain {
    pub root_der: Vec<u8>,
    pub intermediate_der: Vec<u8>,
    pub leaf_der: Vec<u8>,
    leaf_key: p256::ecdsa::SigningKey,
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Chain(leaf key redacted)")
    }
}

/// Why minting failed (rcgen or the key import; not expected with these inputs).
#[derive(Debug, thiserror::Error)]
#[error("minting the App Store test chain: {0}")]
pub struct MintError(String);

fn params(cn: &str, from_days: i64, until_days: i64) -> Result<CertificateParams, MintError> {
    let mut p =
        CertificateParams::new(Vec::<String>::new()).map_err(|e| MintError(e.to_string()))?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    dn.push(DnType::OrganizationName, "factledger payout-sim");
    p.distinguished_name = dn;
    let now = OffsetDateTime::now_utc();
    p.not_before = now + Duration::days(from_days);
    p.not_after = now + Duration::days(until_days);
    Ok(p)
}

fn marker(oid: &[u64]) -> CustomExtension {
    CustomExtension::from_oid_content(oid, DER_NULL.to_vec())
}

impl Chain {
    /// Mint a new chain per `spec`.
    pub fn mint(spec: &ChainSpec) -> Result<Chain, MintError> {
        let e = |e: rcgen::Error| MintError(e.to_string());
        let root_key = KeyPair::generate_for(&PKCS_ECDSA_P384_SHA384).map_err(e)?;
        let mut rp = params(&format!("{} Root CA - G3", spec.name), -3650, 3650)?;
        rp.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        rp.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let root = rp.self_signed(&root_key).map_err(e)?;

        let int_key = KeyPair::generate_for(&PKCS_ECDSA_P384_SHA384).map_err(e)?;
        let mut ip = params(&format!("{} WWDR CA - G6", spec.name), -1825, 1825)?;
        ip.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        ip.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        if spec.intermediate_marker {
            ip.custom_extensions.push(marker(OID_INTERMEDIATE));
        }
        let intermediate = ip.signed_by(&int_key, &root, &root_key).map_err(e)?;

        let leaf_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(e)?;
        let mut lp = params(
            &format!("{} Receipt Signing", spec.name),
            spec.leaf_valid_from_days,
            spec.leaf_valid_until_days,
        )?;
        lp.is_ca = IsCa::ExplicitNoCa;
        lp.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        if spec.leaf_marker {
            lp.custom_extensions.push(marker(OID_LEAF));
        }
        let leaf = lp
            .signed_by(&leaf_key, &intermediate, &int_key)
            .map_err(e)?;
        let signing = p256::ecdsa::SigningKey::from_pkcs8_der(&leaf_key.serialize_der())
            .map_err(|e| MintError(e.to_string()))?;
        Ok(Chain {
            root_der: root.der().to_vec(),
            intermediate_der: intermediate.der().to_vec(),
            leaf_der: leaf.der().to_vec(),
            leaf_key: signing,
        })
    }

    /// `[leaf, intermediate, root]`, standard base64.
    pub fn x5c(&self) -> Vec<String> {
        let b64 = |d: &[u8]| base64::engine::general_purpose::STANDARD.encode(d);
        vec![
            b64(&self.leaf_der),
            b64(&self.intermediate_der),
            b64(&self.root_der),
        ]
    }

    /// A compact JWS of `payload` under this chain (ES256).
    pub fn sign(&self, payload: &Value) -> String {
        self.sign_with_header(
            &json!({"alg": "ES256", "x5c": self.x5c(), "typ": "JWT"}),
            payload,
        )
    }

    /// A compact JWS with this exact header, signed ES256 with the leaf key whatever the
    /// header says (tests forge `alg`, `x5c`).
    pub fn sign_with_header(&self, header: &Value, payload: &Value) -> String {
        let b64 = |v: &Value| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string().as_bytes())
        };
        let input = format!("{}.{}", b64(header), b64(payload));
        let sig: p256::ecdsa::Signature = self.leaf_key.sign(input.as_bytes());
        let sig = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sig.to_bytes());
        format!("{input}.{sig}")
    }
}
