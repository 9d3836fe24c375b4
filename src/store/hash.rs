//! The per-stream hash chain (SPEC R-ES-8): each event's hash covers its content and
//! its predecessor's hash, so any edit, deletion or reordering breaks the chain from
//! that event on.

use sha2::{Digest, Sha256};

/// The "previous hash" of the first event of every stream.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// SHA-256 over length-prefixed fields, hex encoded. Length prefixes make the
/// encoding unambiguous (no field can bleed into the next). The global position is
/// not covered: it is assigned by the database at commit.
#[allow(clippy::too_many_arguments)]
pub fn event_hash(
    prev_hash: &str,
    aggregate_type: &str,
    aggregate_id: &str,
    sequence: i64,
    event_type: &str,
    event_version: i32,
    payload: &str,
    metadata: &str,
) -> String {
    let mut h = Sha256::new();
    let sequence = sequence.to_string();
    let event_version = event_version.to_string();
    for field in [
        prev_hash,
        aggregate_type,
        aggregate_id,
        &sequence,
        event_type,
        &event_version,
        payload,
        metadata,
    ] {
        h.update((field.len() as u64).to_be_bytes());
        h.update(field.as_bytes());
    }
    hex::encode(h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_field_change_changes_the_hash() {
        let base = event_hash(GENESIS_HASH, "wallet", "w1", 1, "E", 1, "{}", "{}");
        assert_ne!(
            base,
            event_hash(GENESIS_HASH, "wallet", "w1", 2, "E", 1, "{}", "{}")
        );
        assert_ne!(
            base,
            event_hash(GENESIS_HASH, "wallet", "w1", 1, "E", 1, "{ }", "{}")
        );
        assert_ne!(
            base,
            event_hash(GENESIS_HASH, "wallet", "w", 1, "E", 1, "{}", "{}")
        );
        // Length prefixes: moving a character between fields changes the hash.
        assert_ne!(
            event_hash(GENESIS_HASH, "walle", "tw1", 1, "E", 1, "{}", "{}"),
            base
        );
        assert_eq!(base.len(), 64);
    }
}
