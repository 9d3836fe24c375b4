//! The synchronous decision core shared by every aggregate.
//!
//! cqrs-es' `Aggregate::handle` is async and writes to an `EventSink`; the command bus
//! needs a plain function it can call many times per batch without a runtime. Every
//! aggregate implements [`Decide`] and its `handle` delegates to `decide`, so the
//! cqrs-es `TestFramework` exercises exactly the code the service runs.

use cqrs_es::Aggregate;

/// A stored event contradicts the state it is applied to (for a wallet: its
/// `before` is not the current balance, or `after != before + delta`). This means
/// the stream is corrupt or tampered with; the loader refuses to go on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invariant violated: {0}")]
pub struct InvariantViolation(pub String);

/// A business-unique key that may take effect once only (SPEC R-INV-1): a unique index
/// in the database is the last line of defence.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LedgerRef {
    pub ref_type: String,
    pub ref_id: String,
    pub entry_type: String,
}

pub trait Decide: Aggregate {
    /// Decide which events a command produces on the current state; never mutates.
    fn decide(&self, command: Self::Command) -> Result<Vec<Self::Event>, Self::Error>;

    /// Check that an event may be applied to the current state (conservation and
    /// similar invariants). Called for every event before `apply`, both when deciding
    /// and when loading from the store.
    fn check(&self, event: &Self::Event) -> Result<(), InvariantViolation>;

    /// The unique business key of an event, if it is a ledger entry.
    fn ledger_ref(event: &Self::Event) -> Option<LedgerRef>;

    /// Schema version of the snapshot shape; bump it when the aggregate's serialized
    /// state changes so old snapshots are ignored instead of misread.
    const SNAPSHOT_VERSION: i32;

    /// Whether every event of this aggregate also writes an outbox message in its
    /// transaction (SPEC R-OUT-1: money facts are told to the outside world).
    const OUTBOX: bool = false;
}
