//! The projection runner: reads events in global order in batches, folds them with
//! the pure projectors of `factledger-projections`, and writes the rows and the
//! checkpoint in ONE transaction. The checkpoint advances by compare-and-set on its
//! previous value, so two runners of one projector can never both apply a batch.
//! A projector that fails on an event stops there (money views never skip) and
//! reports the error; the caller retries with backoff.
//!
//! Layers, each importing only those above it in this list: `write` (the error and
//! the shared SQL), `coalesce` (a batch of wallet rows in few statements), `wallet`
//! (checkpoint and batches), `hold` (a stopped rebuild's
//! hold), `runner`, `read`.

pub(crate) mod coalesce;
mod hold;
mod read;
mod runner;
mod wallet;
mod write;

pub(crate) use hold::{lease_cutoff, now, resolve_hold, ADOPT_LIVE_SET, OLD};
pub use hold::{
    resolve_stale_hold, LEASE_MS, RUN_HEARTBEAT_MS, RUN_HEARTBEAT_TIMEOUT_MS, WALLET_ROW_TABLES,
    WALLET_TABLES,
};
pub use read::{LedgerEntry, LedgerFrom, WalletBalance};
pub(crate) use runner::spawn_runner;
pub use runner::{
    spawn_wallet, spawn_wallet_alerting, ProjectionStatus, SharedStatus, StallAlerts,
    MIN_POSITION_WAIT_MS_MAX, POLL_HELD_MS, POLL_IDLE_MS, RESOLVE_HOLD_EVERY_MS,
    RETRY_BACKOFF_MS_MAX, STALL_ALERT_AFTER_MS_DEFAULT,
};
pub use wallet::{catch_up_wallet, project_wallet_event};
pub(crate) use write::{with_tx, write_wallet_rows};
pub use write::{RunnerError, BATCH_EVENTS_MAX};
