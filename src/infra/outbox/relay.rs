//! One relay per sink: read a batch after the checkpoint, deliver it in id order
//! (passing over the types the sink does not take), move the checkpoint by
//! compare-and-set; on failure record it and pause.
//!
//! Two kinds of failure, two ways to wait:
//! - the sink is down ([`SinkError::Connect`], `Unavailable`, `Timeout`, `Config`):
//!   exponential backoff from [`RETRY_BACKOFF_MS_MIN`] to [`RETRY_BACKOFF_MS_MAX`],
//!   for as long as it takes; nothing is given up, the backlog drains on recovery;
//! - the sink refused the message ([`SinkError::Refused`]): the next pause of the
//!   sink's retry schedule ([`Sink::retry_schedule`], else
//!   [`RelayConfig::retry_schedule`]). The refusals of the message at the head are
//!   counted in `outbox_sinks.refusals`, so the count survives a restart (which
//!   retries at once); the refusal after the last pause writes the message to
//!   `outbox_dead_letters` and moves the checkpoint past it in one transaction
//!   ([`super::dead_letter::bury`]), and later messages flow again.

use super::checkpoint;
use super::{deliver, OutboxMessage, Sink, SinkError, BATCH_ROWS_MAX, RETRY_SCHEDULE_DEFAULT};
use crate::infra::db::Db;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often an idle relay looks for new rows: notifications are not money, a tenth of
/// a second of latency is fine, and each sink polls the database on its own.
pub const POLL_IDLE_MS: u64 = 100;
/// First pause after a failure.
pub const RETRY_BACKOFF_MS_MIN: u64 = 200;
/// Longest pause between retries of a failing sink. Kept well under JetStream's
/// default duplicate window (2 minutes), so a message whose acknowledgement was lost
/// is re-sent while the stream still dedupes it.
pub const RETRY_BACKOFF_MS_MAX: u64 = 30_000;
/// Longest one message may take to be acknowledged before it counts as failed.
pub const DELIVERY_TIMEOUT_MS: u64 = 10_000;
/// How long a missing id above the checkpoint may stay missing before it is reported
/// as an error (MariaDB can show a later id a moment before an earlier one; ids are
/// dense, so a hole that lasts was deleted by hand). It is never skipped either way.
pub const HOLE_WAIT_MS: u64 = 2_000;
/// How often an idle or failing relay refreshes its backlog gauge (two reads): a
/// scrape every few seconds needs no fresher number, and an idle poll stays two
/// reads (checkpoint, rows).
pub const BACKLOG_GAUGE_EVERY_MS: u64 = 1_000;

/// Tunables of a relay; the defaults are the constants above (tests shorten them).
#[derive(Debug, Clone)]
pub struct RelayConfig {
    pub batch_rows: i64,
    pub poll_idle_ms: u64,
    pub backoff_ms_min: u64,
    pub backoff_ms_max: u64,
    pub delivery_timeout_ms: u64,
    pub hole_wait_ms: u64,
    /// The retry schedule of every sink that has none of its own
    /// ([`Sink::retry_schedule`]); default [`RETRY_SCHEDULE_DEFAULT`].
    pub retry_schedule: Vec<Duration>,
}

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            batch_rows: BATCH_ROWS_MAX,
            poll_idle_ms: POLL_IDLE_MS,
            backoff_ms_min: RETRY_BACKOFF_MS_MIN,
            backoff_ms_max: RETRY_BACKOFF_MS_MAX,
            delivery_timeout_ms: DELIVERY_TIMEOUT_MS,
            hole_wait_ms: HOLE_WAIT_MS,
            retry_schedule: RETRY_SCHEDULE_DEFAULT.to_vec(),
        }
    }
}

impl RelayConfig {
    /// The pause after `failures` consecutive failures: doubling from the minimum,
    /// capped at the maximum.
    pub fn backoff_ms(&self, failures: u32) -> u64 {
        let doublings = failures.saturating_sub(1).min(20);
        self.backoff_ms_min
            .saturating_mul(1u64 << doublings)
            .min(self.backoff_ms_max)
    }
}

/// What one pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Nothing after the checkpoint.
    Idle,
    /// Delivered ids `(from, to]` (or passed over those of types the sink does not
    /// take) and moved the checkpoint to `to`.
    Delivered { from: i64, to: i64 },
    /// Delivered or passed `(from, id)`, then wrote `id` to `outbox_dead_letters` (its
    /// retry schedule used up) and moved the checkpoint to `id`.
    DeadLettered { from: i64, id: i64 },
}

#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("outbox database: {0}")]
    Database(#[from] sqlx::Error),
    /// The sink failed at `failed_id`; every id up to `delivered_to` went through
    /// (and the checkpoint moved there). `retry_in`: when a refused message is due
    /// again on the retry schedule; `None` for a sink that is down (backoff).
    #[error("sink {sink} failed at outbox id {failed_id}: {error}")]
    Sink {
        sink: String,
        failed_id: i64,
        delivered_to: i64,
        error: SinkError,
        retry_in: Option<Duration>,
    },
    /// Another relay of the same sink moved the checkpoint first; this one delivered
    /// duplicates (harmless: consumers dedupe by id) and writes nothing.
    #[error("checkpoint of sink {0} moved under this relay")]
    CheckpointMoved(String),
    /// The next id is not there although later ones are: not visible yet, or deleted.
    #[error("outbox id {missing_id} is missing while later ids exist; waiting, never skipping")]
    Hole { missing_id: i64 },
}

/// One pass: read up to a batch after the checkpoint, deliver the contiguous run in
/// order (each acknowledged before the next; types the sink does not take are passed
/// over), move the checkpoint by compare-and-set. A sink failure records the attempt
/// on the checkpoint row; a refusal beyond the retry schedule makes the message a dead
/// letter and moves the checkpoint past it ([`Step::DeadLettered`]).
pub async fn relay_once(
    db: &Db,
    sink: &dyn Sink,
    config: &RelayConfig,
) -> Result<Step, RelayError> {
    let name = sink.name();
    let from = checkpoint::ensure_sink(db, name).await?;
    let batch =
        checkpoint::read_after(db, from, config.batch_rows.clamp(1, BATCH_ROWS_MAX)).await?;
    let run = contiguous_run(from, &batch);
    if run.is_empty() {
        return match batch.first() {
            None => Ok(Step::Idle),
            Some(_) => Err(RelayError::Hole {
                missing_id: from + 1,
            }),
        };
    }
    let mut delivered_to = from;
    let mut delivered = 0u64;
    let mut failure = None;
    for message in run {
        if !sink.takes(&message.r#type) {
            delivered_to = message.id;
            continue;
        }
        match deliver(sink, message, config.delivery_timeout_ms).await {
            Ok(()) => {
                delivered_to = message.id;
                delivered += 1;
            }
            Err(e) => {
                failure = Some((message, e));
                break;
            }
        }
    }
    if delivered_to > from {
        let whole = failure.is_none();
        if !checkpoint::advance(db, name, from, delivered_to, whole).await? {
            return Err(RelayError::CheckpointMoved(name.to_owned()));
        }
        metrics::counter!("factledger_outbox_delivered_total", "sink" => name.to_owned())
            .increment(delivered);
    }
    let Some((message, error)) = failure else {
        return Ok(Step::Delivered {
            from,
            to: delivered_to,
        });
    };
    metrics::counter!("factledger_outbox_failures_total", "sink" => name.to_owned()).increment(1);
    let failed_id = message.id;
    let text = RelayError::sink_text(name, failed_id, &error);
    let mut retry_in = None;
    if error.is_message_specific() {
        let refusals = checkpoint::record_refusal(db, name, &text).await?;
        let schedule = sink.retry_schedule().unwrap_or(&config.retry_schedule);
        match usize::try_from(refusals - 1)
            .ok()
            .and_then(|i| schedule.get(i))
        {
            Some(pause) => retry_in = Some(*pause),
            None => {
                if !super::dead_letter::bury(db, name, message, refusals, &text).await? {
                    return Err(RelayError::CheckpointMoved(name.to_owned()));
                }
                tracing::warn!(sink = %name, outbox_id = failed_id, refusals, error = %error,
                    "outbox message refused past its retry schedule: dead-lettered");
                metrics::counter!("factledger_outbox_dead_letters_total", "sink" => name.to_owned())
                    .increment(1);
                return Ok(Step::DeadLettered {
                    from,
                    id: failed_id,
                });
            }
        }
    } else {
        checkpoint::record_failure(db, name, &text).await?;
    }
    Err(RelayError::Sink {
        sink: name.to_owned(),
        failed_id,
        delivered_to,
        error,
        retry_in,
    })
}

impl RelayError {
    /// The text of [`RelayError::Sink`] (what `last_error` records).
    fn sink_text(sink: &str, failed_id: i64, error: &SinkError) -> String {
        format!("sink {sink} failed at outbox id {failed_id}: {error}")
    }
}

/// The leading rows of `batch` whose ids follow `from` without a gap. Ids are dense, so
/// a gap is a row not visible yet (or deleted): stop before it, never step over it.
fn contiguous_run(from: i64, batch: &[OutboxMessage]) -> &[OutboxMessage] {
    let len = batch
        .iter()
        .zip(from + 1..)
        .take_while(|(m, expected)| m.id == *expected)
        .count();
    &batch[..len]
}

/// The relay tasks of a running service; dropping it stops them.
pub struct Running {
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Start one relay task per sink. They run until the returned [`Running`] is dropped.
pub fn spawn(db: Db, sinks: Vec<Arc<dyn Sink>>, config: RelayConfig) -> Running {
    let tasks = sinks
        .into_iter()
        .map(|sink| {
            let db = db.clone();
            let config = config.clone();
            tokio::spawn(async move { run(db, sink, config).await })
        })
        .collect();
    Running { tasks }
}

/// A relay's loop: drain, poll when idle, back off while failing. Never returns.
async fn run(db: Db, sink: Arc<dyn Sink>, config: RelayConfig) {
    let name = sink.name().to_owned();
    tracing::info!(sink = %name, "outbox relay started");
    let mut failures = 0u32;
    let mut hole_since: Option<Instant> = None;
    let mut gauge_at: Option<Instant> = None;
    loop {
        let outcome = relay_once(&db, sink.as_ref(), &config).await;
        let gauge_due = match gauge_at {
            None => true,
            Some(t) => t.elapsed() >= Duration::from_millis(BACKLOG_GAUGE_EVERY_MS),
        };
        if gauge_due
            || matches!(
                outcome,
                Ok(Step::Delivered { .. } | Step::DeadLettered { .. })
            )
        {
            gauge_at = Some(Instant::now());
            publish_backlog(&db, &name).await;
        }
        let pause_ms = match outcome {
            Ok(Step::Delivered { .. } | Step::DeadLettered { .. }) => {
                failures = 0;
                hole_since = None;
                continue;
            }
            Ok(Step::Idle) => {
                failures = 0;
                hole_since = None;
                config.poll_idle_ms
            }
            // Someone else delivered this batch: read again from where they got to.
            Err(RelayError::CheckpointMoved(_)) => continue,
            Err(RelayError::Hole { missing_id }) => {
                let since = *hole_since.get_or_insert_with(Instant::now);
                if since.elapsed() < Duration::from_millis(config.hole_wait_ms) {
                    config.poll_idle_ms
                } else {
                    failures = failures.saturating_add(1);
                    let e = RelayError::Hole { missing_id };
                    tracing::error!(sink = %name, missing_id, "outbox relay stopped at a missing id");
                    if let Err(db_error) =
                        checkpoint::record_failure(&db, &name, &e.to_string()).await
                    {
                        tracing::warn!(sink = %name, error = %db_error, "cannot record the relay's failure");
                    }
                    config.backoff_ms(failures)
                }
            }
            // A refused message: the next pause of its retry schedule.
            Err(RelayError::Sink {
                retry_in: Some(pause),
                ref error,
                failed_id,
                ..
            }) => {
                let pause_ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX);
                tracing::warn!(sink = %name, outbox_id = failed_id, error = %error, pause_ms, "outbox message refused; retrying on the sink's schedule");
                pause_ms
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                let backoff_ms = config.backoff_ms(failures);
                tracing::warn!(sink = %name, error = %e, attempt = failures, backoff_ms, "outbox delivery failed; retrying");
                backoff_ms
            }
        };
        tokio::time::sleep(Duration::from_millis(pause_ms)).await;
    }
}

/// The backlog gauge of one sink for `/metrics`.
async fn publish_backlog(db: &Db, sink: &str) {
    let (Ok(max), Ok(delivered)) = (
        checkpoint::max_id(db).await,
        checkpoint::ensure_sink(db, sink).await,
    ) else {
        return;
    };
    // A gauge is a float by Prometheus' definition; this is a row count, not money.
    metrics::gauge!("factledger_outbox_backlog", "sink" => sink.to_owned())
        .set((max - delivered).max(0) as f64);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(id: i64) -> OutboxMessage {
        OutboxMessage {
            id,
            aggregatetype: "wallet".into(),
            aggregateid: "w".into(),
            r#type: "wallet.X".into(),
            payload: serde_json::Value::Null,
            created_at: String::new(),
        }
    }

    #[test]
    fn a_run_stops_before_the_first_gap() {
        let batch: Vec<_> = [5, 6, 8, 9].into_iter().map(msg).collect();
        assert_eq!(contiguous_run(4, &batch).len(), 2);
        assert!(contiguous_run(3, &batch).is_empty());
        assert!(contiguous_run(4, &[]).is_empty());
    }

    #[test]
    fn backoff_doubles_from_the_minimum_up_to_the_cap() {
        let c = RelayConfig::default();
        assert_eq!(c.backoff_ms(1), RETRY_BACKOFF_MS_MIN);
        assert_eq!(c.backoff_ms(2), 2 * RETRY_BACKOFF_MS_MIN);
        assert_eq!(c.backoff_ms(3), 4 * RETRY_BACKOFF_MS_MIN);
        assert_eq!(c.backoff_ms(1_000), RETRY_BACKOFF_MS_MAX);
    }
}
