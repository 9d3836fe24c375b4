//! The job engine: claim, run, complete (R-JOB-3 … R-JOB-10).
//!
//! Three entry points take work, and every one goes through the same claim:
//! - **scan** (per kind, in the background loop or by hand): recover expired leases
//!   first, then take the due PENDING/FAILED jobs with retries left, ordered by due
//!   time, retries, id; at most `min(max_task_count, auto_target)` candidates
//!   (normalised as R-JOB-5 says), skipped ones never back-filled;
//! - **manual retry** by codes and/or business keys: serial, no quota, ignores due
//!   time and the retry limit, still only PENDING/FAILED;
//! - **kick** after a commit: the named jobs, with the scan's due-time, retry-limit
//!   and quota checks (seed §9.1 fixed: a kick is a faster scan, not a bypass).
//!
//! **The claim** is one transaction: it reads the maintenance pause under a shared
//! lock (a pause waits for claims in flight and every later claim sees it), locks the
//! quota rows of a capped kind and counts live leases (so quotas are exact under
//! concurrency), selects candidates (MariaDB ≥ 10.6: `FOR UPDATE SKIP LOCKED`, a
//! speed-up only) and takes each by compare-and-set on status, `running_attempt` and
//! `request_generation`. Correctness rests on the compare-and-set alone, so the engine
//! is correct without SKIP LOCKED (TiDB); tests run both ways.
//!
//! **A round** runs the kind's handler with a heartbeat that renews the lease every
//! third of it (a lost lease flags the round as lost; its writes are fenced anyway).
//! **Completion** is again a compare-and-set on the claim: a newer request generation
//! sends the job back to PENDING (retries 0, error cleared, due now) instead of
//! SUCCESS or FAILED; a failure adds one retry and sets the due time by the kind's
//! backoff; a stale claim's completion is refused and alerted. Completions of many
//! rounds are written in one transaction by a completer task.

#[macro_use]
mod macros;
mod api;
mod claim;
mod complete;
mod round;
mod state;
mod types;

pub use state::{Engine, Running, WeakEngine};
pub use types::*;
