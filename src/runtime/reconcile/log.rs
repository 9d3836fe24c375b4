//! The log before any repair (issue 14 item 2, issue 32 item 1): reconciliation
//! repairs projection rows only while the events they come from verify. A deleted
//! event looks, to a replay, exactly like a projection row too many — "repairing" it
//! would make money that was frozen or paid available again; so would an event moved
//! to another stream, re-typed or re-sequenced. So every run first verifies the whole
//! log, exactly as `factledger verify` does (`infra::store::integrity::verify`): every
//! event's keyed hash in its stream, dense positions, the sequence row, every signed
//! anchor's digest and keyed floor — one sequential pass in global order — and also
//! that the projection was not built from events that are gone (its checkpoint is not
//! beyond the last row).
//!
//! Each failure is a `log_integrity` finding naming its position: manual, never
//! repaired, and while one stands no repair runs at all (which streams lost or gained
//! events is unknowable).

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
    let verified = integrity::verify_log(store, db, anchor_file)
        .await
        .map_err(|e| ReconcileError::Log(e.to_string()))?;
    let mut found: Vec<Finding> = verified
        .findings
        .iter()
        .map(|f| {
            let at = match (&f.stream, f.sequence) {
                (Some(stream), Some(seq)) => format!(" ({stream} sequence {seq})"),
                _ => String::new(),
            };
            finding(f.kind, f.global_position, format!("{}{at}", f.detail))
        })
        .collect();
    if verified.findings_count > verified.findings.len() as u64 {
        found.push(finding(
            TamperKind::Edited,
            verified.first.as_ref().map_or(0, |f| f.global_position),
            format!(
                "{} integrity findings in all; run `factledger verify` for the list",
                verified.findings_count
            ),
        ));
    }
    if checkpoint > verified.highest_position {
        found.push(finding(
            TamperKind::Truncated,
            verified.highest_position + 1,
            format!(
                "the wallet projection was built up to position {checkpoint} but the log \
                 ends at {}",
                verified.highest_position
            ),
        ));
    }
    Ok(found)
}
