//! The per-stream hash chain (SPEC R-ES-8): each event's hash covers its content and
//! its predecessor's hash, so any edit, deletion or reordering breaks the chain from
//! that event on.

use sha2::{Digest, Sha256};

/// The "previous hash" of the first event of every stream.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Everything an event's hash covers: every stored column but the global position
/// (assigned by the database at commit) and the ledger key (derived from the payload).
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

/// SHA-256 over length-prefixed fields, hex encoded. Length prefixes make the
/// encoding unambiguous (no field can bleed into the next).
pub fn event_hash(e: &Hashed) -> String {
    let mut h = Sha256::new();
    let sequence = e.sequence.to_string();
    let event_version = e.event_version.to_string();
    for field in [
        e.prev_hash,
        e.aggregate_type,
        e.aggregate_id,
        &sequence,
        e.event_type,
        &event_version,
        e.event_id,
        e.correlation_id,
        e.actor,
        e.recorded_at,
        e.payload,
        e.metadata,
    ] {
        h.update((field.len() as u64).to_be_bytes());
        h.update(field.as_bytes());
    }
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
        let b = event_hash(&base());
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
            assert_ne!(event_hash(&c), b, "{c:?}");
        }
    }
}
