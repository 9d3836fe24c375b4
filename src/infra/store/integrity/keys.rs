//! The integrity key file: the chain keys (HMAC-SHA-256, see `store::hash`) and the
//! anchor signing key (Ed25519). It lives OUTSIDE the database — on the service host,
//! in a secrets store, backed up — so that root on the database cannot re-hash an
//! edited event or sign a forged anchor.
//!
//! Format (JSON, mode 0600):
//! `{"format":"factledger-integrity-keys/1","active_chain_key":"c-…",
//!   "chain_keys":[{"id":"c-…","secret":"<64 hex>"}],
//!   "anchor_signing_key":{"id":"a-…","seed":"<64 hex>"}}`
//!
//! Rotation (`factledger integrity rotate-key`) adds a chain key and makes it active;
//! old keys stay so old rows still verify. A key id is derived from its secret, so a
//! mistyped secret is caught on load.

use crate::infra::store::hash::{legacy_hash, ChainKey, Hashed, LEGACY_KEY_ID};
use ed25519_dalek::{Signer, SigningKey, Verifier, VerifyingKey};
use rand::Rng;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where the key file is when neither `--integrity-keys` nor the environment says.
pub const KEY_FILE_DEFAULT: &str = "factledger-integrity.keys";
/// The environment variable naming the key file.
pub const KEY_FILE_ENV: &str = "FACTLEDGER_INTEGRITY_KEYS";
const FORMAT: &str = "factledger-integrity-keys/1";

#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    #[error("integrity key file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("integrity key file {path}: {reason}")]
    Invalid { path: PathBuf, reason: String },
}

#[derive(Serialize, Deserialize)]
struct KeyFile {
    format: String,
    active_chain_key: String,
    chain_keys: Vec<SecretEntry>,
    anchor_signing_key: SigningEntry,
}

#[derive(Serialize, Deserialize)]
struct SecretEntry {
    id: String,
    secret: String,
}

#[derive(Serialize, Deserialize)]
struct SigningEntry {
    id: String,
    seed: String,
}

/// The keys of one deployment: every chain key ever used (by id), the active one new
/// events are sealed with, and the anchor signing key.
#[derive(Clone)]
pub struct Keyring {
    active: ChainKey,
    keys: BTreeMap<String, ChainKey>,
    signing: SigningKey,
    signing_id: String,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyring")
            .field("active", &self.active.id)
            .field("keys", &self.keys.keys().collect::<Vec<_>>())
            .field("signing_id", &self.signing_id)
            .finish()
    }
}

fn random_32() -> [u8; 32] {
    let mut b = [0u8; 32];
    rand::rng().fill_bytes(&mut b);
    b
}

fn signing_id(key: &VerifyingKey) -> String {
    format!("a-{}", &hex::encode(Sha256::digest(key.as_bytes()))[..8])
}

fn parse_32(hex_text: &str, what: &str, path: &Path) -> Result<[u8; 32], KeyFileError> {
    let invalid = |reason: String| KeyFileError::Invalid {
        path: path.to_owned(),
        reason,
    };
    let bytes = hex::decode(hex_text.trim()).map_err(|e| invalid(format!("{what}: {e}")))?;
    bytes
        .try_into()
        .map_err(|_| invalid(format!("{what}: must be 32 bytes (64 hex digits)")))
}

impl Keyring {
    /// A fresh keyring: one random chain key, one random signing key.
    pub fn generate() -> Keyring {
        let active = ChainKey::from_secret(random_32());
        let signing = SigningKey::from_bytes(&random_32());
        Keyring {
            keys: BTreeMap::from([(active.id.clone(), active.clone())]),
            active,
            signing_id: signing_id(&signing.verifying_key()),
            signing,
        }
    }

    /// The key file named by the environment, or [`KEY_FILE_DEFAULT`] in `dir`.
    pub fn path_in(dir: &Path) -> PathBuf {
        std::env::var_os(KEY_FILE_ENV)
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| dir.join(KEY_FILE_DEFAULT))
    }

    /// The key that seals new events.
    pub fn active(&self) -> &ChainKey {
        &self.active
    }

    pub fn chain_key_ids(&self) -> Vec<String> {
        self.keys.keys().cloned().collect()
    }

    /// The hash a row sealed with `key_id` must carry; `None` for a key this keyring
    /// does not hold.
    pub fn hash_with(&self, key_id: &str, e: &Hashed) -> Option<String> {
        if key_id == LEGACY_KEY_ID {
            return Some(legacy_hash(e));
        }
        self.keys.get(key_id).map(|k| k.hash(e))
    }

    /// A record's seal under the active chain key, `<key id>:<hex HMAC>` (see
    /// [`ChainKey::mac_record`]): what `api_keys.mac` holds.
    pub fn seal_record(&self, domain: &str, fields: &[&str]) -> String {
        format!(
            "{}:{}",
            self.active.id,
            self.active.mac_record(domain, fields)
        )
    }

    /// Whether `sealed` is [`Keyring::seal_record`]'s seal of these fields under a key
    /// this keyring holds (any of them: rotation keeps old seals valid). Compared in
    /// constant time.
    pub fn check_record(&self, domain: &str, fields: &[&str], sealed: &str) -> bool {
        use subtle::ConstantTimeEq;
        let Some((id, mac)) = sealed.split_once(':') else {
            return false;
        };
        let Some(key) = self.keys.get(id) else {
            return false;
        };
        let expected = key.mac_record(domain, fields);
        expected.len() == mac.len() && bool::from(expected.as_bytes().ct_eq(mac.as_bytes()))
    }

    pub fn signing_key_id(&self) -> &str {
        &self.signing_id
    }

    /// The anchor verifying key, hex: what an auditor pins to check anchors.
    pub fn public_key_hex(&self) -> String {
        hex::encode(self.signing.verifying_key().as_bytes())
    }

    pub fn sign(&self, message: &[u8]) -> String {
        hex::encode(self.signing.sign(message).to_bytes())
    }

    /// Whether `signature_hex` is this keyring's signature of `message` under `key_id`.
    pub fn verify_signature(&self, key_id: &str, message: &[u8], signature_hex: &str) -> bool {
        if key_id != self.signing_id {
            return false;
        }
        let Ok(bytes) = hex::decode(signature_hex) else {
            return false;
        };
        let Ok(bytes) = <[u8; 64]>::try_from(bytes.as_slice()) else {
            return false;
        };
        let signature = ed25519_dalek::Signature::from_bytes(&bytes);
        self.signing
            .verifying_key()
            .verify(message, &signature)
            .is_ok()
    }

    /// Read a key file.
    pub fn load(path: &Path) -> Result<Keyring, KeyFileError> {
        let io = |source| KeyFileError::Io {
            path: path.to_owned(),
            source,
        };
        let invalid = |reason: String| KeyFileError::Invalid {
            path: path.to_owned(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(io)?;
        let file: KeyFile = serde_json::from_str(&text).map_err(|e| invalid(e.to_string()))?;
        if file.format != FORMAT {
            return Err(invalid(format!("format must be {FORMAT:?}")));
        }
        let mut keys = BTreeMap::new();
        for entry in &file.chain_keys {
            let key = ChainKey::from_secret(parse_32(&entry.secret, &entry.id, path)?);
            if key.id != entry.id {
                return Err(invalid(format!(
                    "chain key {:?}: its secret belongs to id {:?} (mistyped?)",
                    entry.id, key.id
                )));
            }
            keys.insert(key.id.clone(), key);
        }
        let active = keys.get(&file.active_chain_key).cloned().ok_or_else(|| {
            invalid(format!(
                "active_chain_key {:?} is not among chain_keys",
                file.active_chain_key
            ))
        })?;
        let seed = parse_32(&file.anchor_signing_key.seed, "anchor_signing_key", path)?;
        let signing = SigningKey::from_bytes(&seed);
        let id = signing_id(&signing.verifying_key());
        if id != file.anchor_signing_key.id {
            return Err(invalid(format!(
                "anchor_signing_key {:?}: its seed belongs to id {id:?} (mistyped?)",
                file.anchor_signing_key.id
            )));
        }
        Ok(Keyring {
            active,
            keys,
            signing,
            signing_id: id,
        })
    }

    fn to_file(&self) -> KeyFile {
        KeyFile {
            format: FORMAT.to_owned(),
            active_chain_key: self.active.id.clone(),
            chain_keys: self
                .keys
                .values()
                .map(|k| SecretEntry {
                    id: k.id.clone(),
                    secret: k.secret_hex(),
                })
                .collect(),
            anchor_signing_key: SigningEntry {
                id: self.signing_id.clone(),
                seed: hex::encode(self.signing.to_bytes()),
            },
        }
    }

    /// Write this keyring to `path` (mode 0600), atomically: a temporary file beside
    /// it, then a rename (`replace`) or a hard link that fails when the file exists
    /// (not `replace`: two processes creating the first key file never overwrite
    /// each other; the loser reads the winner's).
    fn write(&self, path: &Path, replace: bool) -> Result<bool, KeyFileError> {
        let io = |source| KeyFileError::Io {
            path: path.to_owned(),
            source,
        };
        let text = serde_json::to_string_pretty(&self.to_file())
            .map_err(|e| io(std::io::Error::other(e)))?;
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let tmp = dir.join(format!(
            ".{}.{}.tmp",
            path.file_name().and_then(|n| n.to_str()).unwrap_or("keys"),
            uuid::Uuid::new_v4().simple()
        ));
        crate::infra::secret_file::write_secret_file(&tmp, &text)
            .map_err(|e| io(std::io::Error::other(e)))?;
        let done = if replace {
            std::fs::rename(&tmp, path).map(|()| true)
        } else {
            match std::fs::hard_link(&tmp, path) {
                Ok(()) => Ok(true),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
                Err(e) => Err(e),
            }
        };
        let _ = std::fs::remove_file(&tmp);
        done.map_err(io)
    }

    /// Load `path`, or create it with fresh keys when it does not exist. Returns the
    /// keyring and whether this call created the file.
    pub fn load_or_create(path: &Path) -> Result<(Keyring, bool), KeyFileError> {
        if path.exists() {
            return Ok((Keyring::load(path)?, false));
        }
        let fresh = Keyring::generate();
        if fresh.write(path, false)? {
            Ok((fresh, true))
        } else {
            Ok((Keyring::load(path)?, false))
        }
    }

    /// Add a fresh chain key to the file at `path` and make it the active one; the old
    /// keys stay (old rows verify with them). A running service seals with the new
    /// key after its next start.
    pub fn rotate(path: &Path) -> Result<Keyring, KeyFileError> {
        let mut ring = Keyring::load(path)?;
        let key = ChainKey::from_secret(random_32());
        ring.keys.insert(key.id.clone(), key.clone());
        ring.active = key;
        ring.write(path, true)?;
        Ok(ring)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_file_round_trips_and_rotation_keeps_the_old_keys() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys");
        let (ring, created) = Keyring::load_or_create(&path).unwrap();
        assert!(created);
        let (again, created) = Keyring::load_or_create(&path).unwrap();
        assert!(!created);
        assert_eq!(again.active().id, ring.active().id);
        assert_eq!(again.public_key_hex(), ring.public_key_hex());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let rotated = Keyring::rotate(&path).unwrap();
        assert_ne!(rotated.active().id, ring.active().id);
        assert_eq!(rotated.chain_key_ids().len(), 2);
        let loaded = Keyring::load(&path).unwrap();
        assert_eq!(loaded.active().id, rotated.active().id);
        assert!(loaded.chain_key_ids().contains(&ring.active().id));
    }

    #[test]
    fn a_mistyped_secret_is_refused_on_load() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys");
        Keyring::load_or_create(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let mut file: serde_json::Value = serde_json::from_str(&text).unwrap();
        file["chain_keys"][0]["secret"] = serde_json::json!("00".repeat(32));
        std::fs::write(&path, file.to_string()).unwrap();
        let err = Keyring::load(&path).unwrap_err().to_string();
        assert!(err.contains("mistyped"), "{err}");
    }

    #[test]
    fn a_record_seal_checks_only_with_the_same_fields_and_a_held_key() {
        let a = Keyring::generate();
        let b = Keyring::generate();
        let seal = a.seal_record("d", &["k1", "admin"]);
        assert!(a.check_record("d", &["k1", "admin"], &seal));
        assert!(!a.check_record("d", &["k1", "auditor"], &seal));
        assert!(!a.check_record("e", &["k1", "admin"], &seal));
        // Length prefixes: moving a byte between fields changes the seal.
        assert!(!a.check_record("d", &["k1a", "dmin"], &seal));
        assert!(!b.check_record("d", &["k1", "admin"], &seal));
        assert!(!a.check_record("d", &["k1", "admin"], "garbage"));
    }

    #[test]
    fn signatures_verify_only_with_the_same_key_and_message() {
        let a = Keyring::generate();
        let b = Keyring::generate();
        let sig = a.sign(b"head 7");
        assert!(a.verify_signature(a.signing_key_id(), b"head 7", &sig));
        assert!(!a.verify_signature(a.signing_key_id(), b"head 8", &sig));
        assert!(!b.verify_signature(a.signing_key_id(), b"head 7", &sig));
        assert!(!a.verify_signature(a.signing_key_id(), b"head 7", "zz"));
    }
}
