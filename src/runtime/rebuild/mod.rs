//! Rebuilding a projection from the log, on demand (issue 3).
//!
//! **Full rebuild.** Shadow tables `<table>__rebuild` are created empty and filled from
//! position 0 in batches while the live tables go on serving reads and the runner goes
//! on advancing them. A reader task streams events through a bounded channel, so memory
//! is a few batches however long the log is. Then:
//! 1. *hold*: the checkpoint row gets `hold = 'catchup'`; the runner's compare-and-set
//!    refuses to advance a held checkpoint, so the live tables stop moving;
//! 2. the shadow tables catch up to the head H as it is now, and the shadow set gets its
//!    generation row: generation g+1 at position H;
//! 3. *swap*: on SQLite, DDL is transactional: dropping the live tables, renaming the
//!    shadow ones and setting the checkpoint to (g+1, H) commit together. On MariaDB,
//!    DDL commits on its own: one `RENAME TABLE` swaps all tables atomically (live →
//!    `__old`, shadow → live), then the checkpoint adopts the set's generation and
//!    position and `__old` is dropped.
//!
//! The runner advances the checkpoint only while its generation is the live set's
//! (`wallet_generation`, swapped with the rows), so no interleaving of a swap with a
//! runner, a crash or a stalled rebuild can put rows of one set under the position of
//! another. A crash before the rename leaves the live tables untouched (the next
//! rebuild drops the shadow); after it, whoever meets the differing generations
//! ([`resolve_stale_hold`], called by the runner and by every full rebuild) makes the
//! checkpoint adopt the set's own position. A hold whose lease expired is cleared.
//!
//! One full rebuild per projection at a time: a lease row renewed in every batch's
//! transaction (a rebuild that lost its lease writes nothing more).
//!
//! **Scoped rebuild** (`wallet:<id>`): one transaction that locks the checkpoint row
//! (the runner waits for it), deletes that wallet's rows and writes them again from
//! its stream up to the checkpoint.
//!
//! Layers, each importing only those above it in this list: `model`, `lease`,
//! `scoped`, `shadow`, `swap`, `full`, `run`. The checkpoint's hold and its lease
//! constants live below all of them, in `crate::runtime::projection`.

mod full;
mod lease;
mod model;
mod run;
mod scoped;
mod shadow;
mod swap;

pub use crate::runtime::projection::{LEASE_MS, WALLET_ROW_TABLES, WALLET_TABLES};
pub use full::RECONCILIATION_WAIT_MS_MAX;
pub use lease::{begin, rebuildable, resolve_stale_hold, status};
pub use model::{
    Progress, Rebuild, RebuildError, RebuildOptions, RebuildStatus, Scope, FLUSH_EVENTS_DEFAULT,
};
pub use run::run;
pub use scoped::rebuild_wallet_scoped;
