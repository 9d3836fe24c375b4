//! The engine's public types: settings, limits, claimed jobs, round and run
//! reports, failures, the handler trait, entry points and the manual-retry selector.

use crate::infra::alerts::AlertContext;
use crate::infra::jobs::{JobError, BUSINESS_KEY_CHARS_MAX};
use crate::infra::store::{Fence, StoreError};
use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::watch;

/// R-JOB-5: `max_task_count` missing or ≤ 0 means 100, over 500 means 500.
pub const MAX_TASK_COUNT_DEFAULT: i64 = 100;
pub const MAX_TASK_COUNT_MAX: i64 = 500;
/// R-JOB-5: candidates per automatic run, default 50, at most 200.
pub const AUTO_TARGET_DEFAULT: i64 = 50;
pub const AUTO_TARGET_MAX: i64 = 200;
/// How often the background loop scans each kind when idle.
pub const SCAN_INTERVAL_MS_DEFAULT: u64 = 1_000;
/// Most codes and keys one manual selector or kick may name.
pub const SELECTOR_ENTRIES_MAX: usize = 500;
/// Completions written per transaction by the completer.
pub(super) const COMPLETIONS_PER_TX_MAX: usize = 256;
/// Kicks waiting for the kick task; beyond this a kick is dropped (harmless: the scan
/// is the backstop).
pub(super) const KICK_QUEUE_MAX: usize = 4_096;
/// Scheduler runs kept in `job_runs`; older rows are pruned now and then.
pub(super) const RUNS_KEPT: i64 = 10_000;

/// Engine settings.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// This process's lease owner id.
    pub owner: String,
    /// Running jobs of all capped kinds together (raised to the sum of kind caps).
    pub total_cap: i64,
    /// Candidates per automatic run (clamped to 1 … [`AUTO_TARGET_MAX`]).
    pub auto_target: i64,
    pub scan_interval_ms: u64,
    /// Use `FOR UPDATE SKIP LOCKED` in claims (MariaDB ≥ 10.6 only; a speed-up).
    pub skip_locked: bool,
    pub alerts: AlertContext,
}

impl EngineConfig {
    pub fn new(owner: impl Into<String>) -> Self {
        EngineConfig {
            owner: owner.into(),
            total_cap: crate::infra::jobs::TOTAL_CAP_DEFAULT,
            auto_target: AUTO_TARGET_DEFAULT,
            scan_interval_ms: SCAN_INTERVAL_MS_DEFAULT,
            skip_locked: false,
            alerts: AlertContext::default(),
        }
    }
}

/// A job as its handler sees it, with its claim.
#[derive(Debug)]
pub struct ClaimedJob {
    pub id: i64,
    pub kind: &'static str,
    pub code: String,
    pub business_key: String,
    pub payload: String,
    /// Retries before this round.
    pub retry_count: i32,
    pub max_retry_count: i32,
    /// The fencing token of this round.
    pub running_attempt: i64,
    /// The request generation this round works on.
    pub generation: i64,
    pub request_id: Option<String>,
    pub trace_id: Option<String>,
    pub first_failed_at_ms: Option<i64>,
    pub(super) lost: watch::Receiver<bool>,
}

impl ClaimedJob {
    /// Fence for every unit this round writes (`UnitOfWork::fence`,
    /// `CommandEnvelope::fence`): it commits only while this claim is current.
    pub fn fence(&self) -> Fence {
        Fence {
            job_id: self.id,
            running_attempt: self.running_attempt,
        }
    }

    /// True once the heartbeat found the claim gone (lease recovered, re-claimed).
    /// Handlers may stop early; their writes are refused either way.
    pub fn claim_lost(&self) -> bool {
        *self.lost.borrow()
    }

    pub fn payload_json(&self) -> Result<Value, JobFailure> {
        serde_json::from_str(&self.payload)
            .map_err(|e| JobFailure::new(format!("payload is not JSON: {e}")))
    }
}

/// What a round did, for `GET /v1/jobs/{code}` (R-JOB-10).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RoundReport {
    /// Counts and facts the handler reports ("resolved 0 scopes", "changed 0 rows").
    pub summary: Value,
    /// Level 3: the business data and everything downstream are done (not only this
    /// round's own part).
    pub business_done: bool,
}

impl RoundReport {
    pub fn done(summary: Value) -> Self {
        RoundReport {
            summary,
            business_done: true,
        }
    }
}

/// A failed round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobFailure {
    pub message: String,
    /// Stop automatic retries (retry count set to the limit): the request itself can
    /// never succeed (oversize payload).
    pub exhaust: bool,
    /// The round's business write was refused by its fence.
    pub fenced: bool,
}

impl JobFailure {
    pub fn new(message: impl Into<String>) -> Self {
        JobFailure {
            message: message.into(),
            exhaust: false,
            fenced: false,
        }
    }
}

impl From<StoreError> for JobFailure {
    fn from(e: StoreError) -> Self {
        JobFailure {
            fenced: matches!(e, StoreError::Fenced { .. }),
            message: e.to_string(),
            exhaust: false,
        }
    }
}

/// The business side of a kind: one round of one job.
#[async_trait]
pub trait JobHandler: Send + Sync + 'static {
    async fn run(&self, job: &ClaimedJob) -> Result<RoundReport, JobFailure>;
}

/// Which entry point took the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    Scan,
    Manual,
    Kick,
}

impl Entry {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Entry::Scan => "scan",
            Entry::Manual => "manual",
            Entry::Kick => "kick",
        }
    }
}

/// Level 1 of R-JOB-10: what one scheduler run found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct RunReport {
    pub run_id: i64,
    pub entry: String,
    pub kind: Option<String>,
    /// The run stopped before claiming anything: jobs are paused.
    pub paused: bool,
    pub recovered: u32,
    pub candidates: u32,
    pub claimed: u32,
    /// Candidates not claimed: lost the compare-and-set, no quota, not claimable.
    pub skipped: u32,
    pub succeeded: u32,
    pub failed: u32,
    /// Rounds that ended while a newer request generation was waiting: back to PENDING.
    pub requeued: u32,
    /// Rounds whose claim was stale when they completed (completion refused).
    pub fenced: u32,
    pub codes: Vec<String>,
}

/// A manual retry selector (R-JOB-6): codes OR business keys, merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    pub codes: Vec<String>,
    pub business_keys: Vec<String>,
}

impl Selector {
    /// Parse a selector; a malformed one is an error naming the field, never a silent
    /// fall-back to an automatic scan (seed §3.1).
    pub fn parse(codes: Vec<String>, business_keys: Vec<String>) -> Result<Selector, JobError> {
        if codes.is_empty() && business_keys.is_empty() {
            return Err(JobError::Invalid {
                field: "codes",
                reason: "name at least one job code or business key (an empty selector \
                         never falls back to an automatic scan)"
                    .into(),
            });
        }
        if codes.len() + business_keys.len() > SELECTOR_ENTRIES_MAX {
            return Err(JobError::Invalid {
                field: "codes",
                reason: format!("at most {SELECTOR_ENTRIES_MAX} codes and business keys together"),
            });
        }
        for (i, c) in codes.iter().enumerate() {
            if !is_code(c) {
                return Err(JobError::Invalid {
                    field: "codes",
                    reason: format!(
                        "codes[{i}] = {c:?} is not a job code (<PREFIX>:<32 lowercase hex>)"
                    ),
                });
            }
        }
        for (i, k) in business_keys.iter().enumerate() {
            let n = k.chars().count();
            if k.trim().is_empty() || n > BUSINESS_KEY_CHARS_MAX {
                return Err(JobError::Invalid {
                    field: "business_keys",
                    reason: format!(
                        "business_keys[{i}] must be 1 to {BUSINESS_KEY_CHARS_MAX} characters"
                    ),
                });
            }
        }
        let mut codes = codes;
        codes.sort();
        codes.dedup();
        let mut business_keys = business_keys;
        business_keys.sort();
        business_keys.dedup();
        Ok(Selector {
            codes,
            business_keys,
        })
    }
}

/// `<PREFIX>:<md5 hex>`.
pub fn is_code(c: &str) -> bool {
    match c.split_once(':') {
        Some((p, h)) => {
            !p.is_empty()
                && p.len() <= 16
                && p.bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
                && h.len() == 32
                && h.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        }
        None => false,
    }
}

/// Normalised candidate count of one automatic run (R-JOB-5).
pub fn candidate_count(max_task_count: Option<i64>, auto_target: i64) -> i64 {
    let max = match max_task_count {
        None => MAX_TASK_COUNT_DEFAULT,
        Some(n) if n <= 0 => MAX_TASK_COUNT_DEFAULT,
        Some(n) => n.min(MAX_TASK_COUNT_MAX),
    };
    let target = if auto_target <= 0 {
        AUTO_TARGET_DEFAULT
    } else {
        auto_target.min(AUTO_TARGET_MAX)
    };
    max.min(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_candidate_count_is_the_smaller_of_the_normalised_limits() {
        assert_eq!(candidate_count(None, 50), 50);
        assert_eq!(candidate_count(Some(0), 50), 50);
        assert_eq!(candidate_count(Some(-3), 500), 100);
        assert_eq!(candidate_count(Some(500), 50), 50);
        assert_eq!(candidate_count(Some(900), 1_000), 200);
        assert_eq!(candidate_count(Some(900), 300), 200);
        assert_eq!(candidate_count(Some(30), 50), 30);
        assert_eq!(candidate_count(Some(400), 0), 50);
    }

    #[test]
    fn a_malformed_selector_is_an_error_never_an_automatic_scan() {
        assert!(Selector::parse(vec![], vec![]).is_err());
        assert!(Selector::parse(vec!["nope".into()], vec![]).is_err());
        assert!(Selector::parse(vec!["RIPSR:ABC".into()], vec![]).is_err());
        assert!(Selector::parse(vec![], vec!["  ".into()]).is_err());
        let code = format!("RIPSR:{}", crate::infra::jobs::md5_hex("k"));
        let s = Selector::parse(vec![code.clone(), code.clone()], vec!["k".into()])
            .expect("valid selector");
        assert_eq!(s.codes, vec![code]);
        assert_eq!(s.business_keys, vec!["k".to_owned()]);
    }
}
