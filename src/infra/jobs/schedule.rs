//! What a cron schedule is: a named five-field UTC expression (`CronExpr`), the job
//! kind it submits and the payload of each firing, and which firing times are due
//! (`CronSchedule::due`, with the catch-up bounds). No I/O: the scheduler
//! (`super::cron`) records the firings.

use super::{JobError, JobKind, JobSubmit};
use crate::infra::store::StoreError;
use chrono::{DateTime, TimeZone, Utc};
use serde_json::{json, Value};
use std::collections::VecDeque;

/// Missed firings one schedule catches up at most (the newest ones). 100 covers a
/// takeover of any every-second schedule and 100 minutes of an every-minute one; older
/// missed firings of a scan add nothing the newest one does not do.
pub const CATCH_UP_FIRINGS_MAX: usize = 100;
/// Missed fire times older than this are not even enumerated (an every-second
/// schedule after a month down would otherwise walk 2.6 million times).
pub const CATCH_UP_WINDOW_MS: i64 = 24 * 60 * 60 * 1_000;
/// `[a-z0-9_]`, like job kind names (the name is part of business keys).
pub const SCHEDULE_NAME_CHARS_MAX: usize = 64;
/// Longest expression accepted (the `expression` column).
pub const EXPRESSION_CHARS_MAX: usize = 255;

#[derive(Debug, thiserror::Error)]
pub enum CronError {
    #[error("cron schedule {schedule:?}: expression {expression:?} is invalid: {reason}")]
    Expression {
        schedule: String,
        expression: String,
        reason: String,
    },
    #[error("cron configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Job(#[from] JobError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cron database: {0}")]
    Database(#[from] sqlx::Error),
}

/// Builds the payload of a firing's job from the schedule name and the fire time.
pub type PayloadFn = fn(schedule: &str, fire_at_ms: i64) -> Value;

/// The default payload: which firing this is.
pub fn firing_payload(schedule: &str, fire_at_ms: i64) -> Value {
    json!({"schedule": schedule, "fire_at_ms": fire_at_ms})
}

/// A parsed cron expression (UTC).
#[derive(Clone)]
pub struct CronExpr {
    text: String,
    cron: croner::Cron,
}

impl std::fmt::Debug for CronExpr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("CronExpr").field(&self.text).finish()
    }
}

impl CronExpr {
    /// Five fields (minute hour day-of-month month day-of-week, POSIX/Vixie
    /// semantics) or six with seconds first; `@hourly` and friends.
    pub fn parse(expression: &str) -> Result<CronExpr, String> {
        let text = expression.trim();
        if text.is_empty() || text.chars().count() > EXPRESSION_CHARS_MAX {
            return Err(format!("must be 1 to {EXPRESSION_CHARS_MAX} characters"));
        }
        let cron = croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Optional)
            .year(croner::parser::Year::Disallowed)
            .build()
            .parse(text)
            .map_err(|e| e.to_string())?;
        Ok(CronExpr {
            text: text.to_owned(),
            cron,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The first fire time strictly after `after_ms` (epoch ms, UTC), if any.
    pub fn next_after(&self, after_ms: i64) -> Option<i64> {
        let after: DateTime<Utc> = Utc.timestamp_millis_opt(after_ms).single()?;
        self.cron
            .find_next_occurrence(&after, false)
            .ok()
            .map(|t| t.timestamp_millis())
            // Sub-second parts of `after` must never make a time come back.
            .filter(|&t| t > after_ms)
    }
}

/// A cron schedule: when it fires and what each firing submits.
#[derive(Clone)]
pub struct CronSchedule {
    pub name: String,
    pub expr: CronExpr,
    /// Each firing submits one plain job of this kind (it must be registered in the
    /// engine).
    pub kind: &'static JobKind,
    pub payload: PayloadFn,
}

impl std::fmt::Debug for CronSchedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CronSchedule")
            .field("name", &self.name)
            .field("expression", &self.expr.as_str())
            .field("kind", &self.kind.name)
            .finish()
    }
}

/// Which fire times a tick handles.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Due {
    /// To fire, oldest first (at most [`CATCH_UP_FIRINGS_MAX`]).
    pub fire_at: Vec<i64>,
    /// Missed fire times not fired (beyond the catch-up bounds), with the last of
    /// them: the cursor moves past them. Times before the window are not counted.
    pub skipped: u64,
    pub skipped_up_to: Option<i64>,
}

impl CronSchedule {
    /// A schedule; a bad name or expression is an error naming the schedule.
    pub fn new(
        name: impl Into<String>,
        expression: &str,
        kind: &'static JobKind,
    ) -> Result<CronSchedule, CronError> {
        let name = name.into();
        let name_ok = !name.is_empty()
            && name.len() <= SCHEDULE_NAME_CHARS_MAX
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !name_ok {
            return Err(CronError::Config(format!(
                "cron schedule {name:?}: names are [a-z0-9_]{{1,{SCHEDULE_NAME_CHARS_MAX}}}"
            )));
        }
        let expr = CronExpr::parse(expression).map_err(|reason| CronError::Expression {
            schedule: name.clone(),
            expression: expression.to_owned(),
            reason,
        })?;
        Ok(CronSchedule {
            name,
            expr,
            kind,
            payload: firing_payload,
        })
    }

    pub fn with_payload(mut self, payload: PayloadFn) -> Self {
        self.payload = payload;
        self
    }

    /// The business key of a firing's job: unique per schedule and fire time.
    pub fn business_key(&self, fire_at_ms: i64) -> String {
        format!("cron:{}:{fire_at_ms}", self.name)
    }

    /// The plain job a firing submits, due at once (a caught-up firing runs now).
    pub fn job(&self, fire_at_ms: i64) -> JobSubmit {
        JobSubmit::plain(
            self.kind,
            self.business_key(fire_at_ms),
            (self.payload)(&self.name, fire_at_ms),
        )
    }

    /// The fire times in `(cursor_ms, now_ms]`: the newest [`CATCH_UP_FIRINGS_MAX`],
    /// looked for no further back than [`CATCH_UP_WINDOW_MS`].
    pub fn due(&self, cursor_ms: i64, now_ms: i64) -> Due {
        let mut due = Due::default();
        let window_start = now_ms.saturating_sub(CATCH_UP_WINDOW_MS);
        let mut after = cursor_ms;
        if after < window_start {
            after = window_start;
            due.skipped_up_to = Some(window_start);
        }
        let mut kept: VecDeque<i64> = VecDeque::new();
        while let Some(t) = self.expr.next_after(after).filter(|&t| t <= now_ms) {
            if kept.len() == CATCH_UP_FIRINGS_MAX {
                if let Some(old) = kept.pop_front() {
                    due.skipped += 1;
                    due.skipped_up_to = Some(old);
                }
            }
            kept.push_back(t);
            after = t;
        }
        due.fire_at = kept.into();
        due
    }
}
