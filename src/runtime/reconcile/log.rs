//! The log before any repair (issue 14 item 2): reconciliation repairs projection rows
//! only while the events they come from verify. A deleted event looks, to a replay,
//! exactly like a projection row too many — "repairing" it would make money that was
//! frozen or paid available again. So every run first asks the log itself:
//!
//! - positions are dense: as many rows up to the sequence row as it hands out (a hole
//!   is a `gap`, a missing tail `truncated`);
//! - the projection was not built from events that are gone (its checkpoint is not
//!   beyond the last row);
//! - every signed anchor known verifies, the newest is not beyond the last row, and
//!   the event it names still carries the hash it signed (`re_chained` when not).
//!
//! Each failure is a `log_integrity` finding: manual, never repaired, and while one
//! stands no repair runs at all (which streams lost the deleted events is unknowable).
//! The full check is `factledger verify`; this one costs an index count and one row.

use super::report::{Finding, FindingClass, FindingKind, ReconcileError, REFUSED_EVENT};
use crate::infra::db::Db;
use crate::infra::store::integrity::{self, TamperKind};
use crate::infra::store::DynStore;
use std::path::Path;

pub(super) const REFUSED_LOG: &str =
    "refused: the event log failed its integrity check (see the log_integrity findings); \
     run `factledger verify` — nothing is repaired until the log is restored";

fn finding(kind: TamperKind, position: i64, detail: String) -> Finding {
    let kind_text = serde_json::to_value(kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    Finding {
        class: FindingClass::Event,
        kind: FindingKind::LogIntegrity,
        wallet_id: String::new(),
        projection: None,
        table: "events".into(),
        key: format!("global_position={position}"),
        detail: format!("{kind_text}: {detail}"),
        expected: None,
        actual: None,
        events: Vec::new(),
        repair: REFUSED_EVENT.into(),
        repaired: None,
    }
}

/// The log checks of the module docs; `checkpoint` is the wallet projection's position
/// in the run's snapshot.
pub(super) async fn check_log(
    store: &DynStore,
    db: &Db,
    anchor_file: Option<&Path>,
    checkpoint: i64,
) -> Result<Vec<Finding>, ReconcileError> {
    let store_err = |e: crate::infra::store::StoreError| ReconcileError::Log(e.to_string());
    let mut found = Vec::new();
    let sequence_head = store.head_position().await.map_err(store_err)?;
    let (rows, last_row) = store
        .count_positions(sequence_head)
        .await
        .map_err(store_err)?;
    if rows < sequence_head {
        let kind = if last_row < sequence_head {
            TamperKind::Truncated
        } else {
            TamperKind::Gap
        };
        found.push(finding(
            kind,
            last_row.min(rows) + 1,
            format!(
                "{} of the positions 1..={sequence_head} handed out have no row (the log \
                 ends at {last_row}): events were deleted",
                sequence_head - rows
            ),
        ));
    }
    if checkpoint > last_row {
        found.push(finding(
            TamperKind::Truncated,
            last_row + 1,
            format!(
                "the wallet projection was built up to position {checkpoint} but the log \
                 ends at {last_row}"
            ),
        ));
    }
    let anchors = integrity::known_anchors(db, anchor_file)
        .await
        .map_err(|e| ReconcileError::Log(e.to_string()))?;
    let keyring = store.keyring();
    // Every signature is checked (CPU only); the log is read at the newest valid anchor
    // alone — one row, however many anchors the file and the table hold (the full
    // digest walk over every anchor is `verify`'s).
    let mut newest: Option<&integrity::Anchor> = None;
    for a in &anchors {
        if !a.signed_by(keyring) {
            found.push(finding(
                TamperKind::ReChained,
                a.head_position,
                format!("anchor {} does not carry a valid signature", a.anchor_seq),
            ));
        } else if newest.is_none_or(|n| a.head_position > n.head_position) {
            newest = Some(a);
        }
    }
    let Some(a) = newest.filter(|a| a.head_position > 0) else {
        return Ok(found);
    };
    if a.head_position > last_row {
        found.push(finding(
            TamperKind::Truncated,
            last_row + 1,
            format!(
                "signed anchor {} vouches for position {} but the log ends at {last_row}",
                a.anchor_seq, a.head_position
            ),
        ));
        return Ok(found);
    }
    let at = store
        .read_positions(a.head_position, a.head_position)
        .await
        .map_err(store_err)?;
    if at.first().map(|e| e.hash.as_str()) != Some(a.head_hash.as_str()) {
        found.push(finding(
            TamperKind::ReChained,
            a.head_position,
            format!(
                "the event at position {} is not the one signed anchor {} names",
                a.head_position, a.anchor_seq
            ),
        ));
    }
    Ok(found)
}
