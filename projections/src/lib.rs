//! factledger-projections: projectors, pure folds from events to rows.
//!
//! **Architecture invariant:** a projector reads only events (and reference data that
//! is itself recorded as events). It never calls a remote service or reads a clock,
//! so replaying the same events always yields the same rows (SPEC R-INV-10). Writing
//! the rows (SQL per backend, checkpoints) is the runner's job in the service.
#![forbid(unsafe_code)]

pub mod affiliate;
pub mod bill;
pub mod ledger;
pub mod services;
pub mod table;
pub mod wallet;
pub mod withdrawals;

use serde_json::Value;

/// An event as a projector sees it: where it is in the log and in its stream, and
/// its payload already upcast to the current shape.
#[derive(Debug, Clone, Copy)]
pub struct ProjectedEvent<'a> {
    pub global_position: i64,
    pub aggregate_type: &'a str,
    pub aggregate_id: &'a str,
    pub sequence: i64,
    pub event_type: &'a str,
    pub payload: &'a Value,
    /// RFC 3339 UTC with microseconds, as stored.
    pub recorded_at: &'a str,
}

/// A projector could not turn an event into rows. The runner stops at that event
/// (money views never skip) and reports this.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("projection {projection} cannot apply event {global_position}: {reason}")]
pub struct ProjectionError {
    pub projection: &'static str,
    pub global_position: i64,
    pub reason: String,
}

impl ProjectedEvent<'_> {
    /// The error that stops `projection` at this event.
    pub fn fail(&self, projection: &'static str, why: String) -> ProjectionError {
        ProjectionError {
            projection,
            global_position: self.global_position,
            reason: format!("{} {}", self.event_type, why),
        }
    }
}
