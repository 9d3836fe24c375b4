//! Upcasters (SPEC R-ES-6): turn a stored event of an old `event_version` into the
//! current shape on read. Stored events are never rewritten.
//!
//! Each upcaster moves one version forward; [`upcast`] chains them until the payload
//! is current, so an event written by any past release can still be read.

use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot upcast {aggregate_type}/{event_type} v{version}: {reason}")]
pub struct UpcastError {
    pub aggregate_type: String,
    pub event_type: String,
    pub version: i32,
    pub reason: String,
}

/// Wallet movement events that carry a `delta` since version 2.
const WALLET_MOVEMENTS: [&str; 8] = [
    "PendingCredited",
    "PendingReleased",
    "PendingReversed",
    "WithdrawalFrozen",
    "WithdrawalUnfrozen",
    "FrozenPaidOut",
    "RiskHoldPlaced",
    "RiskHoldReleased",
];

/// Bring `payload` (stored at `version`) up to the current version of its type.
/// Returns the version it ends at, and the payload.
pub fn upcast(
    aggregate_type: &str,
    event_type: &str,
    mut version: i32,
    mut payload: Value,
) -> Result<(i32, Value), UpcastError> {
    let fail = |version: i32, reason: &str| UpcastError {
        aggregate_type: aggregate_type.to_owned(),
        event_type: event_type.to_owned(),
        version,
        reason: reason.to_owned(),
    };
    loop {
        match (aggregate_type, version) {
            ("wallet", 1) if WALLET_MOVEMENTS.contains(&event_type) => {
                payload = movement_v1_to_v2(payload).map_err(|r| fail(version, r))?;
                version = 2;
            }
            _ => return Ok((version, payload)),
        }
    }
}

/// Version 1 of wallet movement events stored `before` and `after` but no `delta`;
/// version 2 records the delta explicitly so a ledger row can be read on its own.
/// The delta of a v1 event is exactly `after - before`, bucket by bucket.
pub fn movement_v1_to_v2(mut payload: Value) -> Result<Value, &'static str> {
    let obj = payload.as_object_mut().ok_or("payload is not an object")?;
    let (Some(before), Some(after)) = (obj.get("before"), obj.get("after")) else {
        return Err("v1 movement without before/after");
    };
    let mut delta = serde_json::Map::new();
    for bucket in [
        "pending_minor",
        "available_minor",
        "frozen_minor",
        "risk_hold_minor",
    ] {
        let b = before
            .get(bucket)
            .and_then(Value::as_i64)
            .ok_or("bad before")?;
        let a = after
            .get(bucket)
            .and_then(Value::as_i64)
            .ok_or("bad after")?;
        let d = a.checked_sub(b).ok_or("delta overflows i64")?;
        delta.insert(bucket.to_owned(), Value::from(d));
    }
    obj.insert("delta".to_owned(), Value::Object(delta));
    Ok(payload)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wallet::{EntryType, WalletEvent};
    use serde_json::json;

    #[test]
    fn a_v1_credit_gets_its_delta_from_before_and_after() {
        let v1 = json!({
            "type": "PendingCredited", "ref_type": "COMMISSION", "ref_id": "c-1",
            "entry_type": "CREDIT_PENDING", "amount_minor": 1500,
            "before": {"pending_minor": 100, "available_minor": 0, "frozen_minor": 0, "risk_hold_minor": 0},
            "after": {"pending_minor": 1600, "available_minor": 0, "frozen_minor": 0, "risk_hold_minor": 0}
        });
        let (version, v2) = upcast("wallet", "PendingCredited", 1, v1).unwrap();
        assert_eq!(version, 2);
        let event: WalletEvent = serde_json::from_value(v2).unwrap();
        let m = event.as_movement().unwrap();
        assert_eq!(m.entry_type, EntryType::CreditPending);
        assert_eq!(m.delta.pending_minor, 1500);
        assert_eq!(m.delta, EntryType::CreditPending.delta(1500));
    }

    #[test]
    fn current_versions_pass_through_untouched() {
        let p = json!({"type": "WalletOpened", "user_id": "u", "currency": "IDR"});
        assert_eq!(
            upcast("wallet", "WalletOpened", 1, p.clone()).unwrap(),
            (1, p)
        );
    }

    #[test]
    fn a_v1_movement_without_balances_is_an_error() {
        let err = upcast(
            "wallet",
            "PendingCredited",
            1,
            json!({"type": "PendingCredited"}),
        );
        assert!(err.is_err());
    }
}
