//! The `payout` job kind: one job per withdrawal (business key `withdrawal:<id>`),
//! submitted with the unit that makes the withdrawal payable (`units`) and run by
//! the payout worker (`worker`). Lease 2 min; a round that leaves the withdrawal
//! waiting is retried on [`RETRY_SECONDS`].

use crate::infra::jobs::{Backoff, JobKind};

/// Retry delays of a waiting payout: quick at first (a webhook usually follows the
/// answer within seconds), then every 5 minutes.
pub const RETRY_SECONDS: &[i64] = &[2, 5, 15, 60, 300];
/// Rounds before a payout job gives up and a person looks (about 16 hours).
pub const ROUNDS_MAX: i32 = 200;
pub static PAYOUT: JobKind = JobKind {
    lease_ms: 2 * 60 * 1_000,
    backoff: Backoff::Seconds(RETRY_SECONDS),
    max_retry_count: ROUNDS_MAX,
    cap: Some(50),
    parallelism: 50,
    ..JobKind::new("payout", "PAYOUT")
};

/// The payout kind with another lease (one per process: the first asked for wins).
pub fn kind(lease_ms: Option<i64>) -> &'static JobKind {
    static KIND: std::sync::OnceLock<JobKind> = std::sync::OnceLock::new();
    match lease_ms {
        None => &PAYOUT,
        Some(ms) if ms == PAYOUT.lease_ms => &PAYOUT,
        Some(ms) => KIND.get_or_init(|| JobKind {
            lease_ms: ms,
            ..PAYOUT.clone()
        }),
    }
}

pub fn business_key(withdrawal_id: &str) -> String {
    format!("withdrawal:{withdrawal_id}")
}
