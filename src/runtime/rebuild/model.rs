//! What a rebuild is: its error, scope, stored status, options and progress reports,
//! and the batch sizes of a full rebuild.

use crate::infra::store::StoreError;
use crate::runtime::projection::{RunnerError, LEASE_MS};
use std::time::Duration;

/// Events written to the shadow tables per transaction (default).
pub const FLUSH_EVENTS_DEFAULT: usize = 5_000;
/// Batches read ahead of the writer: the reader never holds more than this.
pub(super) const READ_AHEAD_BATCHES: usize = 2;

pub(super) const SHADOW: &str = "__rebuild";

#[derive(Debug, thiserror::Error)]
pub enum RebuildError {
    #[error("projection: unknown projection {0:?} (known: wallet)")]
    UnknownProjection(String),
    #[error("scope: {0:?} is not valid: expected wallet:<wallet id> (1 to 128 characters)")]
    BadScope(String),
    #[error("a full rebuild of {projection} is already running ({id}); wait for it or for its lease to expire ({LEASE_MS} ms without progress)")]
    AlreadyRunning { projection: String, id: String },
    #[error("rebuild {0} lost its lease: it made no progress for {LEASE_MS} ms and another rebuild took over")]
    LeaseLost(String),
    #[error(transparent)]
    Runner(#[from] RunnerError),
}

impl From<sqlx::Error> for RebuildError {
    fn from(e: sqlx::Error) -> Self {
        RebuildError::Runner(e.into())
    }
}

impl From<StoreError> for RebuildError {
    fn from(e: StoreError) -> Self {
        RebuildError::Runner(e.into())
    }
}

/// What a rebuild recomputes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every row, into shadow tables swapped in at the end.
    Full,
    /// Only this wallet's rows, in place.
    Wallet(String),
}

impl Scope {
    /// `None` is a full rebuild; `wallet:<id>` one wallet.
    pub fn parse(scope: Option<&str>) -> Result<Scope, RebuildError> {
        let Some(s) = scope else {
            return Ok(Scope::Full);
        };
        match s.split_once(':') {
            Some(("wallet", id)) if !id.is_empty() && id.chars().count() <= 128 => {
                Ok(Scope::Wallet(id.to_owned()))
            }
            _ => Err(RebuildError::BadScope(s.to_owned())),
        }
    }

    pub fn label(&self) -> Option<String> {
        match self {
            Scope::Full => None,
            Scope::Wallet(id) => Some(format!("wallet:{id}")),
        }
    }
}

/// Progress and outcome of one rebuild, as stored in `projection_rebuilds`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct RebuildStatus {
    pub id: String,
    pub projection: String,
    /// `wallet:<id>` for a scoped rebuild; absent for a full one.
    pub scope: Option<String>,
    pub requested_by: String,
    /// `running`, `succeeded`, `failed`, or `abandoned` (running, but its process
    /// stopped renewing its lease: killed or stalled).
    pub status: String,
    /// `copying` (filling the shadow tables), `waiting` (for running reconciliations
    /// to end before the swap), `catching_up` (live held, shadow reaching the head),
    /// `swapping`, `done`.
    pub stage: String,
    /// The head of the log when the rebuild started (what `copying` reads up to).
    pub target_position: i64,
    /// The last event written so far.
    pub position: i64,
    pub events_applied: i64,
    pub events_per_second: i64,
    pub started_at: String,
    pub updated_at: String,
    pub finished_at: Option<String>,
    pub error: Option<String>,
}

/// Tuning and test hooks.
#[derive(Debug, Clone)]
pub struct RebuildOptions {
    /// Events per shadow-table transaction.
    pub flush_events: usize,
    /// Sleep after each batch (a test hook to make a rebuild slow enough to kill;
    /// keep it well under [`LEASE_MS`]).
    pub pause_between_batches: Option<Duration>,
}

impl Default for RebuildOptions {
    fn default() -> Self {
        Self {
            flush_events: FLUSH_EVENTS_DEFAULT,
            pause_between_batches: None,
        }
    }
}

/// A progress report for a progress bar.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub stage: &'static str,
    pub position: i64,
    pub target_position: i64,
    pub events_applied: i64,
}

/// A rebuild that has been registered (and, if full, holds the lease).
#[derive(Debug, Clone)]
pub struct Rebuild {
    pub id: String,
    pub scope: Scope,
    pub target_position: i64,
}
