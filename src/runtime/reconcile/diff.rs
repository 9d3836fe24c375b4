//! Comparing expected with stored rows: field-by-field differences, and the findings
//! they make.

use super::report::*;
use super::rows::*;
use crate::infra::store::StoredEvent;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeSet;

// ---------------------------------------------------------------------------------
// One wallet: replay its events, check them, and compare with its rows.

/// What the projection should hold for one event's ledger row.
#[derive(Debug, PartialEq)]
pub(super) enum ExpectedLedger {
    Row(Box<LedgerRecord>),
    Nothing,
    /// The event could not be read: whatever row is there cannot be judged.
    Unknown,
}

pub(super) fn value<T: Serialize>(v: &T) -> Value {
    // Our rows are structs of strings and integers: serializing them cannot fail,
    // and if it ever did the report shows why instead of a value.
    serde_json::to_value(v).unwrap_or_else(|e| Value::String(format!("unserializable: {e}")))
}

/// "field: expected X, actual Y; …" for every leaf that differs.
pub(super) fn differences(expected: &Value, actual: &Value) -> String {
    fn walk(path: &str, e: &Value, a: &Value, out: &mut Vec<String>) {
        match (e, a) {
            (Value::Object(eo), Value::Object(ao)) => {
                let keys: BTreeSet<&String> = eo.keys().chain(ao.keys()).collect();
                for k in keys {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    let null = Value::Null;
                    walk(
                        &p,
                        eo.get(k).unwrap_or(&null),
                        ao.get(k).unwrap_or(&null),
                        out,
                    );
                }
            }
            _ if e != a => out.push(format!("{path}: expected {e}, actual {a}")),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk("", expected, actual, &mut out);
    out.join("; ")
}

impl Finding {
    /// An `event`-class finding (or drift, by `kind`) with nothing attached yet.
    pub fn new(
        kind: FindingKind,
        wallet_id: &str,
        table: &str,
        key: String,
        detail: impl Into<String>,
    ) -> Finding {
        Finding {
            class: kind.class(),
            kind,
            wallet_id: wallet_id.to_owned(),
            projection: None,
            table: table.to_owned(),
            key,
            detail: detail.into(),
            expected: None,
            actual: None,
            events: Vec::new(),
            repair: match kind.class() {
                FindingClass::ProjectionDrift => REPAIR_AUTO,
                FindingClass::Event => REFUSED_EVENT,
            }
            .to_owned(),
            repaired: None,
        }
    }

    /// What the check expected and what it found.
    pub fn values(mut self, expected: Option<Value>, actual: Option<Value>) -> Finding {
        self.expected = expected;
        self.actual = actual;
        self
    }

    pub(super) fn event(mut self, at: Option<&EventRef>) -> Finding {
        self.events.extend(at.cloned());
        self
    }
}

pub(super) fn event_ref(e: &StoredEvent) -> EventRef {
    EventRef {
        global_position: e.global_position,
        stream: format!("{}/{}", e.aggregate_type, e.aggregate_id),
        sequence: e.sequence,
    }
}
