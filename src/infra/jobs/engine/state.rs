//! The engine's internal state and the records a claim and a completion pass
//! around: registered kinds, the shared inner state, handles, claim candidates.

use super::types::*;
use crate::infra::db::{Db, Get};
use crate::infra::jobs::JobKind;
use crate::infra::store::DynStore;
use factledger_projections::table::{ColType, Column, MemRow};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

pub(super) struct Registered {
    pub(super) kind: &'static JobKind,
    pub(super) handler: Arc<dyn JobHandler>,
}

pub(super) struct Inner {
    pub(super) db: Db,
    pub(super) store: DynStore,
    pub(super) kinds: BTreeMap<&'static str, Registered>,
    /// Capped kinds, for the total quota.
    pub(super) capped: Vec<&'static str>,
    pub(super) total_cap: i64,
    pub(super) config: EngineConfig,
    pub(super) kicks: mpsc::Sender<Vec<String>>,
    pub(super) kick_rx: std::sync::Mutex<Option<mpsc::Receiver<Vec<String>>>>,
    pub(super) completions: mpsc::Sender<(Completion, oneshot::Sender<Result<Completed, String>>)>,
    /// Kinds whose `job_quota_locks` row this process made sure of (rows are never
    /// deleted): asked once per kind, not once per claim round.
    pub(super) quota_rows: std::sync::Mutex<std::collections::HashSet<&'static str>>,
}

/// The job engine of this process. Cheap to clone.
#[derive(Clone)]
pub struct Engine {
    pub(super) inner: Arc<Inner>,
}

/// A handle on an engine that does not keep it alive: for handlers that use the
/// engine they are registered in (a strong handle there would be a cycle that never
/// drops the pool or the completer).
#[derive(Clone, Default)]
pub struct WeakEngine {
    pub(super) inner: std::sync::Weak<Inner>,
}

impl WeakEngine {
    pub fn upgrade(&self) -> Option<Engine> {
        self.inner.upgrade().map(|inner| Engine { inner })
    }
}

/// Background tasks of a started engine; dropping it stops them (rounds in flight are
/// abandoned like a crash: their leases expire and are recovered).
pub struct Running {
    pub(super) tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Columns of a job read for a claim (the order `claimed_from_row` reads).
pub(super) const CLAIM_COLUMNS: &str = "id, code, business_key, payload, retry_count, \
     max_retry_count, running_attempt, request_generation, request_id, trace_id, \
     first_failed_at_ms";

/// [`CLAIM_COLUMNS`], typed.
pub(super) const CANDIDATE_COLUMNS: &[Column] = &[
    Column {
        name: "id",
        ty: ColType::Int,
    },
    Column {
        name: "code",
        ty: ColType::Text,
    },
    Column {
        name: "business_key",
        ty: ColType::Text,
    },
    Column {
        name: "payload",
        ty: ColType::Text,
    },
    Column {
        name: "retry_count",
        ty: ColType::Int,
    },
    Column {
        name: "max_retry_count",
        ty: ColType::Int,
    },
    Column {
        name: "running_attempt",
        ty: ColType::Int,
    },
    Column {
        name: "request_generation",
        ty: ColType::Int,
    },
    Column {
        name: "request_id",
        ty: ColType::OptText,
    },
    Column {
        name: "trace_id",
        ty: ColType::OptText,
    },
    Column {
        name: "first_failed_at_ms",
        ty: ColType::OptInt,
    },
];

pub(super) struct Candidate {
    pub(super) id: i64,
    pub(super) code: String,
    pub(super) business_key: String,
    pub(super) payload: String,
    pub(super) retry_count: i32,
    pub(super) max_retry_count: i32,
    pub(super) running_attempt: i64,
    pub(super) request_generation: i64,
    pub(super) request_id: Option<String>,
    pub(super) trace_id: Option<String>,
    pub(super) first_failed_at_ms: Option<i64>,
}

impl Candidate {
    /// A [`CANDIDATE_COLUMNS`] row.
    pub(super) fn from_row(r: &MemRow) -> Result<Candidate, sqlx::Error> {
        let small = |name: &str| -> Result<i32, sqlx::Error> {
            let v = r.int(name)?;
            i32::try_from(v).map_err(|e| sqlx::Error::Decode(format!("{name} {v}: {e}").into()))
        };
        Ok(Candidate {
            id: r.int("id")?,
            code: r.text("code")?,
            business_key: r.text("business_key")?,
            payload: r.text("payload")?,
            retry_count: small("retry_count")?,
            max_retry_count: small("max_retry_count")?,
            running_attempt: r.int("running_attempt")?,
            request_generation: r.int("request_generation")?,
            request_id: r.opt_text("request_id")?,
            trace_id: r.opt_text("trace_id")?,
            first_failed_at_ms: r.opt_int("first_failed_at_ms")?,
        })
    }
}

/// How a claim picks and checks its jobs.
#[derive(Debug, Clone)]
pub(super) enum Pick {
    /// The automatic scan's query, at most this many.
    Due(i64),
    /// These job ids; `auto` applies the scan's due-time, retry-limit and quota rules
    /// (kick), without it none of them (manual retry).
    Ids { ids: Vec<i64>, auto: bool },
}

/// What completing a round writes.
#[derive(Debug)]
pub(super) struct Completion {
    pub(super) id: i64,
    pub(super) running_attempt: i64,
    pub(super) generation: i64,
    pub(super) retry_count: i32,
    pub(super) max_retry_count: i32,
    pub(super) backoff: crate::infra::jobs::Backoff,
    pub(super) outcome: Result<RoundReport, JobFailure>,
    pub(super) started_at_ms: i64,
}

/// What completing did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Completed {
    Succeeded,
    Failed {
        exhausted: bool,
    },
    Requeued,
    /// The claim was no longer current: nothing was written.
    Stale,
}
