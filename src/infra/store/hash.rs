//! The per-stream hash chain (SPEC R-ES-8), keyed: each event's hash is an
//! HMAC-SHA-256 over its content and its predecessor's hash, under a chain key that
//! lives outside the database ([`super::integrity::Keyring`]). Any edit, deletion or
//! reordering breaks the chain from that event on, and without the key nobody — not a
//! database administrator either — can re-hash an edited event so that it verifies.
//!
//! The key's id is stored on the row (`hash_key`) and is itself covered by the MAC, so
//! keys rotate without rewriting anything. Rows sealed before keyed chains carry the
//! empty key id and a plain SHA-256 ([`LEGACY_KEY_ID`]); verification accepts them only
//! as a prefix of the log.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// The "previous hash" of the first event of every stream.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The key id of rows sealed with plain SHA-256, before chains were keyed.
pub const LEGACY_KEY_ID: &str = "";

/// Everything an event's hash covers: every stored column but the global position
/// (assigned by the database at commit; the anchors' digest binds positions) and the
/// ledger key (derived from the payload).
#[derive(Debug, Clone, Copy)]
pub struct Hashed<'a> {
    pub prev_hash: &'a str,
    pub aggregate_type: &'a str,
    pub aggregate_id: &'a str,
    pub sequence: i64,
    pub event_type: &'a str,
    pub event_version: i32,
    pub event_id: &'a str,
    pub correlation_id: &'a str,
    pub actor: &'a str,
    /// RFC 3339 UTC with microseconds, as stored.
    pub recorded_at: &'a str,
    pub payload: &'a str,
    pub metadata: &'a str,
}

impl Hashed<'_> {
    /// The fields in hashing order, each length-prefixed so the encoding is
    /// unambiguous (no field can bleed into the next).
    fn feed(&self, mut update: impl FnMut(&[u8])) {
        let sequence = self.sequence.to_string();
        let event_version = self.event_version.to_string();
        for field in [
            self.prev_hash,
            self.aggregate_type,
            self.aggregate_id,
            &sequence,
            self.event_type,
            &event_version,
            self.event_id,
            self.correlation_id,
            self.actor,
            self.recorded_at,
            self.payload,
            self.metadata,
        ] {
            update(&(field.len() as u64).to_be_bytes());
            update(field.as_bytes());
        }
    }
}

/// A chain key: a 256-bit HMAC secret and the id stored beside every hash it made.
#[derive(Clone)]
pub struct ChainKey {
    pub id: String,
    secret: [u8; 32],
}

impl std::fmt::Debug for ChainKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        f.debug_struct("ChainKey").field("id", &self.id).finish()
    }
}

impl ChainKey {
    /// A key with its id derived from the secret (`c-` + 8 hex of its SHA-256), so the
    /// same secret always has the same id and two secrets practically never share one.
    pub fn from_secret(secret: [u8; 32]) -> ChainKey {
        let id = format!("c-{}", &hex::encode(Sha256::digest(secret))[..8]);
        ChainKey { id, secret }
    }

    pub fn secret_hex(&self) -> String {
        hex::encode(self.secret)
    }

    /// HMAC-SHA-256 over the key id and the event's fields, hex encoded.
    pub fn hash(&self, e: &Hashed) -> String {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.secret)
            .expect("HMAC takes a key of any length");
        mac.update(&(self.id.len() as u64).to_be_bytes());
        mac.update(self.id.as_bytes());
        e.feed(|b| mac.update(b));
        hex::encode(mac.finalize().into_bytes())
    }
}

impl ChainKey {
    /// HMAC-SHA-256 of a record that is not an event (an `api_keys` row: see
    /// `infra::auth`), hex: over `domain` (so it never equals an event hash) and each
    /// field length-prefixed.
    pub fn mac_record(&self, domain: &str, fields: &[&str]) -> String {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.secret)
            .expect("HMAC takes a key of any length");
        for field in std::iter::once(domain).chain(fields.iter().copied()) {
            mac.update(&(field.len() as u64).to_be_bytes());
            mac.update(field.as_bytes());
        }
        hex::encode(mac.finalize().into_bytes())
    }
}

/// The hash of a row sealed before chains were keyed ([`LEGACY_KEY_ID`]): plain SHA-256
/// over the same fields. Only verification computes it.
pub fn legacy_hash(e: &Hashed) -> String {
    let mut h = Sha256::new();
    e.feed(|b| h.update(b));
    hex::encode(h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Hashed<'static> {
        Hashed {
            prev_hash: GENESIS_HASH,
            aggregate_type: "wallet",
            aggregate_id: "w1",
            sequence: 1,
            event_type: "E",
            event_version: 1,
            event_id: "id-1",
            correlation_id: "c",
            actor: "a",
            recorded_at: "2026-12-02T12:00:00.000000Z",
            payload: "{}",
            metadata: "{}",
        }
    }

    #[test]
    fn any_field_change_changes_the_hash() {
        let key = ChainKey::from_secret([7; 32]);
        let b = key.hash(&base());
        assert_eq!(b.len(), 64);
        let changed = [
            Hashed {
                sequence: 2,
                ..base()
            },
            Hashed {
                payload: "{ }",
                ..base()
            },
            Hashed {
                aggregate_id: "w",
                ..base()
            },
            Hashed {
                event_id: "id-2",
                ..base()
            },
            Hashed {
                correlation_id: "d",
                ..base()
            },
            Hashed {
                actor: "b",
                ..base()
            },
            Hashed {
                recorded_at: "2026-12-02T12:00:00.000001Z",
                ..base()
            },
            Hashed {
                metadata: "{\"x\":1}",
                ..base()
            },
            // Length prefixes: moving a character between fields changes the hash.
            Hashed {
                aggregate_type: "walle",
                aggregate_id: "tw1",
                ..base()
            },
        ];
        for c in changed {
            assert_ne!(key.hash(&c), b, "{c:?}");
        }
    }

    #[test]
    fn the_hash_depends_on_the_key_and_differs_from_plain_sha256() {
        let a = ChainKey::from_secret([1; 32]);
        let b = ChainKey::from_secret([2; 32]);
        assert_ne!(a.id, b.id);
        assert_ne!(a.hash(&base()), b.hash(&base()));
        assert_ne!(a.hash(&base()), legacy_hash(&base()));
        // Same secret, same id and hash: verification after a restart needs nothing
        // but the key file.
        assert_eq!(
            ChainKey::from_secret([1; 32]).hash(&base()),
            a.hash(&base())
        );
        assert!(!format!("{a:?}").contains(&a.secret_hex()));
    }
}
