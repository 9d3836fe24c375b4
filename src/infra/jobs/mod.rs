//! Durable jobs (issue 4; SPEC R-JOB-1 … R-JOB-10): one engine for every background
//! task — settlement, payouts, order sync, refund queries, bill refresh, snapshot
//! refresh, cron firings.
//!
//! A job is a row of `jobs` (migrations `0006`): kind, business key, code, payload,
//! status, retries, due time, request generation, running attempt, lease. This module
//! holds the vocabulary (kinds, keys, codes, submit validation); `engine.rs` claims,
//! runs and completes jobs; `ops.rs` serves the operator reads.
//!
//! How the seed's defects are avoided (seed 001 §9): a kick obeys due time, retry
//! limit and quotas exactly like the scan, and every entry point stops while paused
//! (§9.1); every business write of a round is fenced by its claim (§9.2, see
//! `store::Fence`); a malformed manual selector is an error, never an automatic scan
//! (§3.1).

pub mod cron;
pub mod cron_status;
pub mod engine;
pub mod ops;
pub mod schedule;

pub use engine::{
    ClaimedJob, Engine, EngineConfig, JobFailure, JobHandler, RoundReport, RunReport, Selector,
};

use crate::infra::store::JobRow;
use serde_json::Value;

/// Largest payload accepted at submit, in UTF-8 bytes (R-BILL-8: bytes, not characters).
pub const PAYLOAD_BYTES_MAX: usize = 16_384;
/// Largest payload accepted at submit, in JSON nodes (every value counts: objects,
/// arrays and scalars).
pub const PAYLOAD_NODES_MAX: usize = 1_200;
/// A business key longer than this is stored as `<PREFIX>_BK:` + MD5 of it.
pub const BUSINESS_KEY_STORED_CHARS_MAX: usize = 128;
/// Longest business key accepted at all (it is hashed, but it is also carried in
/// requests and logs).
pub const BUSINESS_KEY_CHARS_MAX: usize = 4_096;
/// `last_error` keeps this many characters.
pub const LAST_ERROR_CHARS_MAX: usize = 1_000;
/// Default `max_retry_count`: the first run plus 2 retries (seed §8.2).
pub const MAX_RETRY_COUNT_DEFAULT: i32 = 3;
/// Default lease of a long-running kind (R-JOB-3); heartbeats renew it every third.
pub const LEASE_MS_DEFAULT: i64 = 30 * 60 * 1_000;
/// Concurrency quota of a capped kind unless it says otherwise (S11 default 10).
pub const KIND_CAP_DEFAULT: i64 = 10;
/// Running jobs of all capped kinds together (S11 default 14); raised to the sum of
/// the kind caps when configured lower (R-JOB-5).
pub const TOTAL_CAP_DEFAULT: i64 = 14;
/// Handlers of one kind run at once within a scan: default 10, at most 20, never more
/// than the kind's cap (seed §7.1).
pub const PARALLELISM_DEFAULT: usize = 10;
pub const PARALLELISM_MAX: usize = 20;

/// R-JOB-1 statuses, stored as their numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobStatus {
    Pending = 0,
    Running = 1,
    Success = 2,
    Failed = 3,
    Cancelled = 4,
}

impl JobStatus {
    pub fn from_code(code: i64) -> Option<JobStatus> {
        Some(match code {
            0 => JobStatus::Pending,
            1 => JobStatus::Running,
            2 => JobStatus::Success,
            3 => JobStatus::Failed,
            4 => JobStatus::Cancelled,
            _ => return None,
        })
    }

    pub fn parse(s: &str) -> Option<JobStatus> {
        Some(match s.to_ascii_uppercase().as_str() {
            "PENDING" | "0" => JobStatus::Pending,
            "RUNNING" | "1" => JobStatus::Running,
            "SUCCESS" | "2" => JobStatus::Success,
            "FAILED" | "3" => JobStatus::Failed,
            "CANCELLED" | "4" => JobStatus::Cancelled,
            _ => return None,
        })
    }
}

/// When a failed job is due again, from its retry count after the failure (R-JOB-4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backoff {
    /// `min(60, max(1, retry + 1) × 5)` minutes: 10, 15, 20 … 60 (seed §8.2).
    Minutes5,
    /// These many seconds for the 1st, 2nd, … retry, the last one repeating
    /// (`10, 30, 60, 300` in seed 000).
    Seconds(&'static [i64]),
}

/// The seconds schedule of seed 000.
pub const BACKOFF_SECONDS_DEFAULT: &[i64] = &[10, 30, 60, 300];

impl Backoff {
    /// Delay before the next attempt, `retry` being the retry count after the increment.
    pub fn delay_ms(self, retry: i32) -> i64 {
        match self {
            Backoff::Minutes5 => {
                let minutes = (i64::from(retry.max(0)) + 1)
                    .max(1)
                    .saturating_mul(5)
                    .min(60);
                minutes * 60 * 1_000
            }
            Backoff::Seconds(schedule) => {
                let i = usize::try_from(retry.max(1) - 1).unwrap_or(0);
                let s = schedule.get(i).or(schedule.last()).copied().unwrap_or(60);
                s * 1_000
            }
        }
    }
}

/// A kind of job: how its rows are named and how it is run.
#[derive(Debug, Clone)]
pub struct JobKind {
    /// `[a-z0-9_]`, at most 64 characters (the `kind` column).
    pub name: &'static str,
    /// Code prefix, `[A-Z0-9_]`, unique per kind (`RIPSR` for bill refresh).
    pub prefix: &'static str,
    pub lease_ms: i64,
    pub backoff: Backoff,
    pub max_retry_count: i32,
    /// Concurrency quota over live leases; `None` is uncapped (and outside the total).
    pub cap: Option<i64>,
    pub parallelism: usize,
}

impl JobKind {
    /// A kind with the defaults of R-JOB-1/3/4/5.
    pub const fn new(name: &'static str, prefix: &'static str) -> JobKind {
        JobKind {
            name,
            prefix,
            lease_ms: LEASE_MS_DEFAULT,
            backoff: Backoff::Minutes5,
            max_retry_count: MAX_RETRY_COUNT_DEFAULT,
            cap: Some(KIND_CAP_DEFAULT),
            parallelism: PARALLELISM_DEFAULT,
        }
    }

    /// The code of a business key: `<PREFIX>:` + MD5 of the full key.
    pub fn code(&self, business_key: &str) -> String {
        format!("{}:{}", self.prefix, md5_hex(business_key))
    }

    /// The key as stored: itself when at most 128 characters, else
    /// `<PREFIX>_BK:` + MD5 of it.
    pub fn stored_key(&self, business_key: &str) -> String {
        if business_key.chars().count() <= BUSINESS_KEY_STORED_CHARS_MAX {
            business_key.to_owned()
        } else {
            format!("{}_BK:{}", self.prefix, md5_hex(business_key))
        }
    }

    fn check(&self) -> Result<(), JobError> {
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 64
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        let prefix_ok = !self.prefix.is_empty()
            && self.prefix.len() <= 16
            && self
                .prefix
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
        if !name_ok || !prefix_ok {
            return Err(JobError::Config(format!(
                "job kind {:?} / prefix {:?}: names are [a-z0-9_]{{1,64}}, prefixes [A-Z0-9_]{{1,16}}",
                self.name, self.prefix
            )));
        }
        if self.lease_ms < 3 || self.max_retry_count < 1 || self.cap.is_some_and(|c| c < 1) {
            return Err(JobError::Config(format!(
                "job kind {}: lease_ms ≥ 3, max_retry_count ≥ 1 and cap ≥ 1 are required",
                self.name
            )));
        }
        Ok(())
    }
}

pub fn md5_hex(s: &str) -> String {
    use md5::Digest;
    hex::encode(md5::Md5::digest(s.as_bytes()))
}

/// Count the JSON nodes of a value (every object, array and scalar).
pub fn json_nodes(v: &Value) -> usize {
    match v {
        Value::Array(a) => 1 + a.iter().map(json_nodes).sum::<usize>(),
        Value::Object(o) => 1 + o.values().map(json_nodes).sum::<usize>(),
        _ => 1,
    }
}

/// Check a payload against the submit limits; returns its JSON text.
pub fn check_payload(payload: &Value) -> Result<String, JobError> {
    let text = payload.to_string();
    if text.len() > PAYLOAD_BYTES_MAX {
        return Err(JobError::PayloadTooLarge { bytes: text.len() });
    }
    let nodes = json_nodes(payload);
    if nodes > PAYLOAD_NODES_MAX {
        return Err(JobError::PayloadTooManyNodes { nodes });
    }
    Ok(text)
}

/// A job to submit, plain or as a fact change (R-JOB-2).
#[derive(Debug, Clone)]
pub struct JobSubmit {
    pub kind: &'static JobKind,
    /// The full business key (its stored form and the code are derived).
    pub business_key: String,
    pub payload: Value,
    /// A delayed job becomes due then (epoch ms); `None` is now.
    pub due_at_ms: Option<i64>,
    pub fact_change: bool,
    pub request_id: Option<String>,
    pub trace_id: Option<String>,
}

impl JobSubmit {
    pub fn plain(kind: &'static JobKind, business_key: impl Into<String>, payload: Value) -> Self {
        JobSubmit {
            kind,
            business_key: business_key.into(),
            payload,
            due_at_ms: None,
            fact_change: false,
            request_id: None,
            trace_id: None,
        }
    }

    pub fn fact_change(
        kind: &'static JobKind,
        business_key: impl Into<String>,
        payload: Value,
    ) -> Self {
        JobSubmit {
            fact_change: true,
            ..JobSubmit::plain(kind, business_key, payload)
        }
    }

    pub fn due_at_ms(mut self, at_ms: i64) -> Self {
        self.due_at_ms = Some(at_ms);
        self
    }

    /// The row the store writes, after checking the limits; `now_ms` is the submit time.
    pub fn row(&self, now_ms: i64) -> Result<JobRow, JobError> {
        let chars = self.business_key.chars().count();
        if self.business_key.trim().is_empty() || chars > BUSINESS_KEY_CHARS_MAX {
            return Err(JobError::Invalid {
                field: "business_key",
                reason: format!("must be 1 to {BUSINESS_KEY_CHARS_MAX} characters, got {chars}"),
            });
        }
        let payload = check_payload(&self.payload)?;
        Ok(JobRow {
            kind: self.kind.name.to_owned(),
            code: self.kind.code(&self.business_key),
            business_key: self.kind.stored_key(&self.business_key),
            payload,
            max_retry_count: self.kind.max_retry_count,
            due_at_ms: self.due_at_ms.unwrap_or(now_ms),
            fact_change: self.fact_change,
            now_ms,
            request_id: self.request_id.clone(),
            trace_id: self.trace_id.clone(),
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error("payload: {bytes} UTF-8 bytes is over the limit of {PAYLOAD_BYTES_MAX}")]
    PayloadTooLarge { bytes: usize },
    #[error("payload: {nodes} JSON nodes is over the limit of {PAYLOAD_NODES_MAX}")]
    PayloadTooManyNodes { nodes: usize },
    #[error("{field}: {reason}")]
    Invalid { field: &'static str, reason: String },
    #[error("kind: unknown job kind {0:?}")]
    UnknownKind(String),
    #[error("code: no job with code {0:?}")]
    NotFound(String),
    #[error("jobs are paused for maintenance: nothing is claimed until they are resumed")]
    Paused,
    #[error("job configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Store(#[from] crate::infra::store::StoreError),
    #[error("jobs database: {0}")]
    Database(#[from] sqlx::Error),
}

impl JobError {
    /// The request field a client got wrong, if it is a client error.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            JobError::PayloadTooLarge { .. } | JobError::PayloadTooManyNodes { .. } => {
                Some("payload")
            }
            JobError::Invalid { field, .. } => Some(field),
            JobError::UnknownKind(_) => Some("kind"),
            JobError::NotFound(_) => Some("code"),
            _ => None,
        }
    }
}

/// Check a set of kinds: valid names, unique names and prefixes.
pub fn check_kinds<'a>(kinds: impl IntoIterator<Item = &'a JobKind>) -> Result<(), JobError> {
    let mut names = std::collections::HashSet::new();
    let mut prefixes = std::collections::HashSet::new();
    for k in kinds {
        k.check()?;
        if !names.insert(k.name) || !prefixes.insert(k.prefix) {
            return Err(JobError::Config(format!(
                "job kind {} or prefix {} is registered twice",
                k.name, k.prefix
            )));
        }
    }
    Ok(())
}

/// Truncate an error text to [`LAST_ERROR_CHARS_MAX`] characters.
pub fn truncate_error(e: &str) -> String {
    e.chars().take(LAST_ERROR_CHARS_MAX).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const K: JobKind = JobKind::new("bill_refresh", "RIPSR");

    #[test]
    fn the_code_is_the_prefix_and_the_md5_of_the_full_key() {
        let key = "STATION_MONTH:100:202609|MODE=ALL";
        assert_eq!(K.code(key), format!("RIPSR:{}", md5_hex(key)));
        assert_eq!(md5_hex("abc"), "900150983cd24fb0d6963f7d28e17f72");
    }

    #[test]
    fn a_key_over_128_characters_is_stored_hashed_and_the_code_still_hashes_the_full_key() {
        let short = "x".repeat(128);
        assert_eq!(K.stored_key(&short), short);
        let long = "é".repeat(129);
        assert_eq!(K.stored_key(&long), format!("RIPSR_BK:{}", md5_hex(&long)));
        assert_eq!(K.code(&long), format!("RIPSR:{}", md5_hex(&long)));
    }

    #[test]
    fn the_default_backoff_is_ten_fifteen_twenty_minutes_capped_at_sixty() {
        let m = |r| Backoff::Minutes5.delay_ms(r) / 60_000;
        assert_eq!((m(1), m(2), m(3)), (10, 15, 20));
        assert_eq!(m(0), 5);
        assert_eq!(m(11), 60);
        assert_eq!(m(50), 60);
    }

    #[test]
    fn the_seconds_backoff_walks_its_schedule_then_repeats_the_last() {
        let s = |r| Backoff::Seconds(BACKOFF_SECONDS_DEFAULT).delay_ms(r) / 1_000;
        assert_eq!((s(1), s(2), s(3), s(4), s(5)), (10, 30, 60, 300, 300));
    }

    #[test]
    fn payloads_are_limited_in_utf8_bytes_and_in_json_nodes() {
        // 16,384 bytes exactly passes; one more byte fails (bytes, not characters).
        let fits = json!("a".repeat(PAYLOAD_BYTES_MAX - 2));
        assert!(check_payload(&fits).is_ok());
        let over = json!("é".repeat(PAYLOAD_BYTES_MAX / 2));
        assert!(matches!(
            check_payload(&over),
            Err(JobError::PayloadTooLarge { .. })
        ));
        let nodes = json!((0..PAYLOAD_NODES_MAX - 1).collect::<Vec<_>>());
        assert_eq!(json_nodes(&nodes), PAYLOAD_NODES_MAX);
        assert!(check_payload(&nodes).is_ok());
        let too_many = json!((0..PAYLOAD_NODES_MAX).collect::<Vec<_>>());
        assert!(matches!(
            check_payload(&too_many),
            Err(JobError::PayloadTooManyNodes { nodes: 1_201 })
        ));
    }

    #[test]
    fn kinds_must_have_unique_well_formed_names_and_prefixes() {
        static A: JobKind = JobKind::new("a", "A");
        static B: JobKind = JobKind::new("b", "A");
        static BAD: JobKind = JobKind::new("Bad Name", "B");
        assert!(check_kinds([&A]).is_ok());
        assert!(check_kinds([&A, &B]).is_err());
        assert!(check_kinds([&BAD]).is_err());
    }
}
