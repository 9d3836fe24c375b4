//! The background runner: polls the log, applies batches, backs off on errors, resolves
//! the hold of a stopped rebuild, reports its status and lag, and raises a stall alert.

use super::hold::resolve_stale_hold;
use super::wallet::*;
use super::write::*;
use crate::infra::db::Db;
use crate::infra::store::{DynStore, StoredEvent};
use factledger_projections::wallet::{self};

/// How often an idle runner looks for new events (the "within 100 ms" budget) on a
/// store that does not signal its commits.
pub const POLL_IDLE_MS: u64 = 10;
/// How often an idle runner looks for events other processes appended, when the
/// store signals this process's own commits (it then wakes on each of those at once,
/// and no longer asks the database 100 times a second per projector).
pub const POLL_OTHER_WRITERS_MS: u64 = 50;
/// A runner whose last catch-up applied events waits this long after the next wake
/// before it reads again, so under a steady stream of commits it applies them in
/// batches (one transaction and checkpoint per batch) instead of one transaction per
/// commit: with ten projectors on one database those commits outnumbered the
/// appends' own. The first events after an idle spell are applied at once.
pub const BUSY_LINGER_MS: u64 = 10;
/// How often an idle runner (its last catch-up found nothing to apply) refreshes its
/// status (position, head, lag) from the database; a busy or failing one refreshes
/// after every catch-up. Idle, the refresh was half of a projector's polling reads.
pub const REFRESH_IDLE_EVERY_MS: u64 = 1_000;
/// How often a runner whose checkpoint is held by a rebuild tries again.
pub const POLL_HELD_MS: u64 = 50;
/// How often such a runner looks for a hold left by a dead rebuild.
pub const RESOLVE_HOLD_EVERY_MS: u64 = 1_000;
/// Longest pause between retries of a failing projector.
pub const RETRY_BACKOFF_MS_MAX: u64 = 5_000;
/// Longest a read with `min_position` waits for the projection to get there.
pub const MIN_POSITION_WAIT_MS_MAX: u64 = 2_000;

/// What a projector is doing, for `/v1/projections` and `/metrics`.
#[derive(Debug, Clone, Default, serde::Serialize, utoipa::ToSchema)]
pub struct ProjectionStatus {
    pub name: String,
    /// `POST /v1/projections/{name}/rebuild` can rebuild it (the others are rebuilt
    /// with `factledger rebuild <name>`).
    pub rebuildable: bool,
    pub version: i32,
    /// Global position of the last event applied.
    pub position: i64,
    /// Global position of the last event in the log when last looked.
    pub head: i64,
    pub lag_events: i64,
    /// Age of the oldest event not yet applied, in milliseconds (0 when caught up).
    pub lag_ms: i64,
    /// The error that stopped the projector at `error_position`, until it recovers.
    pub last_error: Option<String>,
    pub error_position: Option<i64>,
    /// Consecutive failed attempts.
    pub retries: u64,
    /// When the projector first failed on the event it is stopped at (epoch ms).
    pub failing_since_ms: Option<i64>,
    /// Stopped at one event for at least the stall threshold (`StallAlerts::after_ms`,
    /// default [`STALL_ALERT_AFTER_MS_DEFAULT`]): the same moment its stall alert is
    /// raised. `/health` is `degraded` while any projector is stuck.
    pub stuck: bool,
}

pub type SharedStatus = std::sync::Arc<std::sync::Mutex<ProjectionStatus>>;

pub(super) fn lock(s: &SharedStatus) -> std::sync::MutexGuard<'_, ProjectionStatus> {
    // Status is plain data written whole; a poisoned lock still holds a usable value.
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// A projector failing on the same event this long is stalled and alerted (once per
/// stall). Long enough that a failure the next retry clears (a commit-visibility race,
/// a lost connection) raises nothing; short enough that people hear of a money view
/// that stopped within a minute.
pub const STALL_ALERT_AFTER_MS_DEFAULT: u64 = 30_000;

/// How a running projector tells people it is stalled (SPEC R-MON-1).
#[derive(Debug, Clone)]
pub struct StallAlerts {
    pub context: crate::infra::alerts::AlertContext,
    /// Failing on one event for this long raises the alert.
    pub after_ms: u64,
}

/// Run the wallet projection continuously: catch up, then poll; on failure stop at
/// the failing event, report it and retry with backoff (never skipping it).
pub fn spawn_wallet(store: DynStore, db: Db) -> SharedStatus {
    spawn_wallet_alerting(store, db, None)
}

/// [`spawn_wallet`], raising a `projection.stalled` alert through the outbox when the
/// projector has been failing on one event for `alerts.after_ms` (once per stall: a
/// new alert only after it recovered or moved on to another failing event).
pub fn spawn_wallet_alerting(store: DynStore, db: Db, alerts: Option<StallAlerts>) -> SharedStatus {
    let (s, d) = (store.clone(), db.clone());
    spawn_runner(
        store,
        db,
        wallet::NAME,
        wallet::VERSION,
        alerts,
        true,
        move || {
            let (store, db) = (s.clone(), d.clone());
            async move { catch_up_wallet(&store, &db).await }
        },
    )
}

/// The loop every projector runs in its own task (the wallet's and the generic
/// ones): `catch_up`, then poll; on failure stop at the failing event, report it and
/// retry with backoff, never skipping it. `resolve_holds`: the projector has a
/// shadow-table rebuild whose hold a dead rebuild may leave behind (the wallet's).
pub(crate) fn spawn_runner<F, Fut>(
    store: DynStore,
    db: Db,
    name: &'static str,
    version: i32,
    alerts: Option<StallAlerts>,
    resolve_holds: bool,
    catch_up: F,
) -> SharedStatus
where
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<u64, RunnerError>> + Send,
{
    let status: SharedStatus = std::sync::Arc::new(std::sync::Mutex::new(ProjectionStatus {
        name: name.to_owned(),
        rebuildable: crate::runtime::rebuild::rebuildable(name),
        version,
        ..Default::default()
    }));
    let shared = status.clone();
    let stuck_after_ms = i64::try_from(
        alerts
            .as_ref()
            .map_or(STALL_ALERT_AFTER_MS_DEFAULT, |a| a.after_ms),
    )
    .unwrap_or(i64::MAX);
    let mut head = store.head_watch();
    tokio::spawn(async move {
        let mut backoff_ms = 0u64;
        let mut last_resolve: Option<std::time::Instant> = None;
        let mut stall = Stall::default();
        let mut refreshed: Option<std::time::Instant> = None;
        loop {
            // Seen before the catch-up: a commit during it wakes the next wait at once.
            if let Some(h) = &mut head {
                h.borrow_and_update();
            }
            let outcome = catch_up().await;
            let busy = matches!(outcome, Ok(n) if n > 0);
            let idle = matches!(outcome, Ok(0));
            let held = matches!(outcome, Err(RunnerError::CheckpointMoved(_)));
            // Held by a rebuild, or raced by another runner. A hold whose rebuild died
            // would stop this projection for good: look for a stale one, now and then
            // (a live rebuild releases its own hold).
            if held
                && resolve_holds
                && !last_resolve.is_some_and(|t| {
                    t.elapsed() < std::time::Duration::from_millis(RESOLVE_HOLD_EVERY_MS)
                })
            {
                last_resolve = Some(std::time::Instant::now());
                if let Err(e) = resolve_stale_hold(&db).await {
                    tracing::warn!(projection = name, error = %e, "cannot resolve a stale rebuild hold");
                }
            }
            match outcome {
                Ok(_) | Err(RunnerError::CheckpointMoved(_)) => {
                    backoff_ms = 0;
                    stall = Stall::default();
                    let mut s = lock(&shared);
                    s.last_error = None;
                    s.error_position = None;
                    s.retries = 0;
                    s.failing_since_ms = None;
                    s.stuck = false;
                }
                Err(e) => {
                    backoff_ms = (backoff_ms * 2).clamp(50, RETRY_BACKOFF_MS_MAX);
                    tracing::error!(projection = name, error = %e, "projection stopped at a failing event");
                    let error_position = match &e {
                        RunnerError::Projection(p) => Some(p.global_position),
                        _ => None,
                    };
                    let first_ms = stall.note(error_position);
                    let retries = {
                        let mut s = lock(&shared);
                        s.error_position = error_position;
                        s.last_error = Some(e.to_string());
                        s.retries += 1;
                        s.failing_since_ms = Some(first_ms);
                        s.stuck = crate::infra::db::now_ms() - first_ms >= stuck_after_ms;
                        s.retries
                    };
                    if let Some(alerts) = &alerts {
                        stall
                            .alert(&store, alerts, name, error_position, &e, retries)
                            .await;
                    }
                }
            }
            let every = std::time::Duration::from_millis(REFRESH_IDLE_EVERY_MS);
            if !idle || refreshed.is_none_or(|t| t.elapsed() >= every) {
                refresh(&store, &db, &shared, name, version).await;
                refreshed = Some(std::time::Instant::now());
            }
            // While held, a batch read and projected is thrown away: poll slower.
            let pause = if backoff_ms > 0 {
                backoff_ms
            } else if held {
                POLL_HELD_MS
            } else if let Some(h) = &mut head {
                let other_writers = std::time::Duration::from_millis(POLL_OTHER_WRITERS_MS);
                if tokio::time::timeout(other_writers, h.changed())
                    .await
                    .is_ok()
                    && busy
                {
                    tokio::time::sleep(std::time::Duration::from_millis(BUSY_LINGER_MS)).await;
                }
                continue;
            } else {
                POLL_IDLE_MS
            };
            tokio::time::sleep(std::time::Duration::from_millis(pause)).await;
        }
    });
    status
}

/// The current stall of a running projector: since when it fails, where, and
/// whether people were told.
#[derive(Debug, Default)]
pub(super) struct Stall {
    /// `(error_position, first failure at, epoch ms)` of the failure going on.
    pub(super) since: Option<(Option<i64>, i64)>,
    pub(super) alerted: bool,
}

impl Stall {
    /// Note one more failed attempt at `error_position`; when the stall began.
    pub(super) fn note(&mut self, error_position: Option<i64>) -> i64 {
        match self.since {
            Some((at, first_ms)) if at == error_position => first_ms,
            // A new failing event is a new stall.
            _ => {
                let now = crate::infra::db::now_ms();
                *self = Stall {
                    since: Some((error_position, now)),
                    alerted: false,
                };
                now
            }
        }
    }

    /// Raise the alert once the stall noted is old enough (once per stall).
    pub(super) async fn alert(
        &mut self,
        store: &DynStore,
        alerts: &StallAlerts,
        projection: &'static str,
        error_position: Option<i64>,
        error: &RunnerError,
        retries: u64,
    ) {
        let now = crate::infra::db::now_ms();
        let Some((_, first_ms)) = self.since else {
            return;
        };
        let after_ms = i64::try_from(alerts.after_ms).unwrap_or(i64::MAX);
        if self.alerted || now - first_ms < after_ms {
            return;
        }
        let event = match error_position {
            Some(p) => store
                .read_positions(p, p)
                .await
                .ok()
                .and_then(|mut v| v.pop()),
            None => None,
        };
        let alert = stall_alert(
            projection,
            error_position,
            event.as_ref(),
            error,
            first_ms,
            retries,
        );
        match crate::infra::alerts::raise(store, &alerts.context, &alert).await {
            Ok(()) => self.alerted = true,
            // Not alerted: the next failed attempt tries again.
            Err(e) => {
                tracing::warn!(projection, error = %e, "cannot raise the stall alert")
            }
        }
    }
}

/// The R-MON-1 alert for a projector stopped at an event: the event's stream is the
/// business id, its request and trace ids say which request wrote it, and the link
/// opens that stream's history from the failing event.
pub(super) fn stall_alert(
    projection: &str,
    error_position: Option<i64>,
    event: Option<&StoredEvent>,
    error: &RunnerError,
    first_ms: i64,
    retries: u64,
) -> crate::infra::alerts::Alert {
    let metadata: Option<serde_json::Value> =
        event.and_then(|e| serde_json::from_str(&e.metadata).ok());
    let meta = |name: &str| {
        metadata
            .as_ref()
            .and_then(|m| crate::infra::alerts::payload_field(m, &[name]))
    };
    let at = error_position.map_or_else(
        || "an unknown position".to_owned(),
        |p| format!("event {p}"),
    );
    crate::infra::alerts::Alert {
        kind: crate::infra::alerts::AlertKind::ProjectionStalled,
        subject: projection.to_owned(),
        message: format!("projection {projection} stopped at {at}: {error}"),
        job: None,
        platform: None,
        business_id: event.map(|e| format!("{}/{}", e.aggregate_type, e.aggregate_id)),
        user_affiliate_code: None,
        request_id: meta("request_id"),
        trace_id: meta("trace_id"),
        first_failure_at_ms: Some(first_ms),
        retry_count: Some(i64::try_from(retries).unwrap_or(i64::MAX)),
        audit_path: match event {
            Some(e) => format!(
                "/v1/streams/{}/{}/events?from={}",
                e.aggregate_type, e.aggregate_id, e.sequence
            ),
            None => "/v1/projections".to_owned(),
        },
    }
}

pub(super) async fn refresh(
    store: &DynStore,
    db: &Db,
    status: &SharedStatus,
    name: &'static str,
    version: i32,
) {
    let (Ok(position), Ok(head)) = (
        db.checkpoint(name, version).await,
        store.head_position().await,
    ) else {
        return;
    };
    let lag_ms = if position < head {
        match store.read_positions(position + 1, position + 1).await {
            Ok(events) => events
                .first()
                .map(|e| {
                    (chrono::Utc::now() - e.recorded_at)
                        .num_milliseconds()
                        .max(0)
                })
                .unwrap_or(0),
            Err(_) => 0,
        }
    } else {
        0
    };
    let mut s = lock(status);
    s.position = position;
    s.head = head;
    s.lag_events = head - position;
    s.lag_ms = lag_ms;
    let labels = [("projection", name)];
    metrics::gauge!("factledger_projection_position", &labels).set(position as f64);
    metrics::gauge!("factledger_projection_lag_events", &labels).set((head - position) as f64);
    metrics::gauge!("factledger_projection_lag_seconds", &labels).set(lag_ms as f64 / 1000.0);
}
