//! The projection runner: reads events in global order in batches, folds them with
//! the pure projectors of `factledger-projections`, and writes the rows and the
//! checkpoint in ONE transaction. The checkpoint advances by compare-and-set on its
//! previous value, so two runners of one projector can never both apply a batch.
//! A projector that fails on an event stops there (money views never skip) and
//! reports the error; the caller retries with backoff.

use crate::infra::db::Db;
use crate::infra::store::{time_text, DynStore, StoreError, StoredEvent};
use factledger_projections::wallet::{self, LedgerRow, WalletRow};
use factledger_projections::{ProjectedEvent, ProjectionError};
use sqlx::MySqlPool;

/// Events read and applied per transaction.
pub const BATCH_EVENTS_MAX: i64 = 500;

#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Projection(#[from] ProjectionError),
    #[error("projection database: {0}")]
    Database(#[from] sqlx::Error),
    /// Another runner advanced the checkpoint first, or a rebuild holds it while it
    /// swaps tables; nothing of this batch was written.
    #[error("checkpoint of {0} moved under this runner (or a rebuild holds it)")]
    CheckpointMoved(&'static str),
    /// A full rebuild is swapping the projection's tables; retry in a moment.
    #[error("projection {0} is held by a full rebuild swapping its tables; retry shortly")]
    Held(&'static str),
}

/// The same SQL on both backends (plain `?` placeholders, no upserts), expanded once
/// per pool type.
macro_rules! with_tx {
    ($pool:expr, |$tx:ident| $body:block) => {{
        let mut $tx = $pool.begin().await?;
        let out = $body;
        $tx.commit().await?;
        out
    }};
}

/// Move a checkpoint `from → to` by compare-and-set, or fail with
/// `CheckpointMoved`: another runner got there first, a rebuild holds it, or the
/// live tables were swapped for a set of another generation (see `src/rebuild.rs`).
macro_rules! advance_checkpoint {
    ($tx:ident, $name:expr, $from:expr, $to:expr) => {{
        let moved = sqlx::query(
            "UPDATE projection_checkpoints SET position = ?, updated_at = ?, \
             last_error = NULL, error_position = NULL \
             WHERE name = ? AND position = ? AND hold IS NULL \
             AND generation = (SELECT generation FROM wallet_generation WHERE id = 1)",
        )
        .bind($to)
        .bind(time_text(&chrono::Utc::now()))
        .bind($name)
        .bind($from)
        .execute(&mut *$tx)
        .await?
        .rows_affected();
        if moved != 1 {
            return Err(RunnerError::CheckpointMoved($name));
        }
    }};
}

/// Write wallet rows, in order, into the live tables (`$suffix` "") or the shadow tables
/// of a rebuild.
macro_rules! write_wallet_rows {
    ($tx:ident, $rows:expr, $suffix:expr) => {{
        for row in $rows {
            match row {
                WalletRow::Opened {
                    wallet_id,
                    user_id,
                    currency,
                    version,
                    last_position,
                } => {
                    sqlx::query(&format!(
                        "INSERT INTO wallet_balances{suffix} (wallet_id, user_id, currency, \
                         pending_minor, available_minor, frozen_minor, risk_hold_minor, \
                         version, last_position) VALUES (?, ?, ?, 0, 0, 0, 0, ?, ?)",
                        suffix = $suffix
                    ))
                    .bind(wallet_id)
                    .bind(user_id)
                    .bind(currency)
                    .bind(version)
                    .bind(last_position)
                    .execute(&mut *$tx)
                    .await?;
                }
                WalletRow::Balances {
                    wallet_id,
                    balances: b,
                    version,
                    last_position,
                } => {
                    sqlx::query(&format!(
                        "UPDATE wallet_balances{suffix} SET pending_minor = ?, available_minor = ?, \
                         frozen_minor = ?, risk_hold_minor = ?, version = ?, last_position = ? \
                         WHERE wallet_id = ?",
                        suffix = $suffix
                    ))
                    .bind(b.pending_minor)
                    .bind(b.available_minor)
                    .bind(b.frozen_minor)
                    .bind(b.risk_hold_minor)
                    .bind(version)
                    .bind(last_position)
                    .bind(wallet_id)
                    .execute(&mut *$tx)
                    .await?;
                }
                WalletRow::Version {
                    wallet_id,
                    version,
                    last_position,
                } => {
                    sqlx::query(&format!(
                        "UPDATE wallet_balances{suffix} SET version = ?, last_position = ? \
                         WHERE wallet_id = ?",
                        suffix = $suffix
                    ))
                    .bind(version)
                    .bind(last_position)
                    .bind(wallet_id)
                    .execute(&mut *$tx)
                    .await?;
                }
                WalletRow::Blocked {
                    wallet_id,
                    ref_type,
                    ref_id,
                    reason,
                } => {
                    sqlx::query(&format!(
                        "INSERT INTO wallet_blocks{suffix} (wallet_id, ref_type, ref_id, reason) \
                         VALUES (?, ?, ?, ?)",
                        suffix = $suffix
                    ))
                    .bind(wallet_id)
                    .bind(ref_type)
                    .bind(ref_id)
                    .bind(reason)
                    .execute(&mut *$tx)
                    .await?;
                }
                WalletRow::Unblocked {
                    wallet_id,
                    ref_type,
                    ref_id,
                } => {
                    sqlx::query(&format!(
                        "DELETE FROM wallet_blocks{suffix} WHERE wallet_id = ? AND ref_type = ? \
                         AND ref_id = ?",
                        suffix = $suffix
                    ))
                    .bind(wallet_id)
                    .bind(ref_type)
                    .bind(ref_id)
                    .execute(&mut *$tx)
                    .await?;
                }
                WalletRow::Ledger(LedgerRow {
                    wallet_id,
                    sequence,
                    global_position,
                    ref_type,
                    ref_id,
                    entry_type,
                    amount_minor,
                    delta: d,
                    before: b,
                    after: a,
                    recorded_at,
                }) => {
                    sqlx::query(&format!(
                        "INSERT INTO wallet_ledger{suffix} (wallet_id, sequence, global_position, \
                         ref_type, ref_id, entry_type, amount_minor, delta_pending_minor, \
                         delta_available_minor, delta_frozen_minor, delta_risk_hold_minor, \
                         before_pending_minor, before_available_minor, before_frozen_minor, \
                         before_risk_hold_minor, after_pending_minor, after_available_minor, \
                         after_frozen_minor, after_risk_hold_minor, recorded_at) \
                         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        suffix = $suffix
                    ))
                    .bind(wallet_id)
                    .bind(sequence)
                    .bind(global_position)
                    .bind(ref_type)
                    .bind(ref_id)
                    .bind(entry_type)
                    .bind(amount_minor)
                    .bind(d.pending_minor)
                    .bind(d.available_minor)
                    .bind(d.frozen_minor)
                    .bind(d.risk_hold_minor)
                    .bind(b.pending_minor)
                    .bind(b.available_minor)
                    .bind(b.frozen_minor)
                    .bind(b.risk_hold_minor)
                    .bind(a.pending_minor)
                    .bind(a.available_minor)
                    .bind(a.frozen_minor)
                    .bind(a.risk_hold_minor)
                    .bind(recorded_at)
                    .execute(&mut *$tx)
                    .await?;
                }
            }
        }
    }};
}

pub(crate) use {with_tx, write_wallet_rows};

impl Db {
    /// The checkpoint of a projector, created at 0 on first use.
    pub async fn checkpoint(&self, name: &str, version: i32) -> Result<i64, RunnerError> {
        let select = "SELECT position FROM projection_checkpoints WHERE name = ?";
        // Polled every few milliseconds: a plain read, and the insert only once.
        let found: Option<i64> = match self {
            Db::Mysql(p) => {
                sqlx::query_scalar(select)
                    .bind(name)
                    .fetch_optional(p)
                    .await?
            }
            Db::Sqlite(p) => {
                sqlx::query_scalar(select)
                    .bind(name)
                    .fetch_optional(p)
                    .await?
            }
        };
        if let Some(position) = found {
            return Ok(position);
        }
        let now = time_text(&chrono::Utc::now());
        let insert = "INSERT INTO projection_checkpoints (name, version, position, updated_at) \
                      SELECT ?, ?, 0, ? WHERE NOT EXISTS \
                      (SELECT 1 FROM projection_checkpoints WHERE name = ?)";
        macro_rules! create {
            ($p:expr) => {{
                let created = sqlx::query(insert)
                    .bind(name)
                    .bind(version)
                    .bind(&now)
                    .bind(name)
                    .execute($p)
                    .await;
                match created {
                    // Two first uses at once both see no row (MariaDB, READ
                    // COMMITTED); the second insert hits the key: the row is there.
                    Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {}
                    other => {
                        other?;
                    }
                }
                sqlx::query_scalar(select).bind(name).fetch_one($p).await?
            }};
        }
        Ok(match self {
            Db::Mysql(p) => create!(p),
            Db::Sqlite(p) => create!(p),
        })
    }

    /// Write a batch of wallet rows and move the checkpoint `from → to`, atomically.
    async fn apply_wallet(
        &self,
        from: i64,
        to: i64,
        rows: Vec<WalletRow>,
    ) -> Result<(), RunnerError> {
        match self {
            Db::Mysql(p) => with_tx!(p, |tx| {
                advance_checkpoint!(tx, wallet::NAME, from, to);
                write_wallet_rows!(tx, rows, "")
            }),
            Db::Sqlite(p) => with_tx!(p, |tx| {
                advance_checkpoint!(tx, wallet::NAME, from, to);
                write_wallet_rows!(tx, rows, "")
            }),
        }
        Ok(())
    }
}

/// The wallet rows one stored event makes (its payload upcast first).
pub fn project_wallet_event(e: &StoredEvent) -> Result<Vec<WalletRow>, RunnerError> {
    if e.aggregate_type != factledger_aggregates::wallet::WALLET_AGGREGATE_TYPE {
        return Ok(Vec::new());
    }
    let (_, payload) = e.current_payload()?;
    let recorded_at = time_text(&e.recorded_at);
    Ok(wallet::project(&ProjectedEvent {
        global_position: e.global_position,
        aggregate_type: &e.aggregate_type,
        aggregate_id: &e.aggregate_id,
        sequence: e.sequence,
        event_type: &e.event_type,
        payload: &payload,
        recorded_at: &recorded_at,
    })?)
}

/// Bring the wallet projection up to the head of the log. Returns how many events it
/// applied. Stops at (and returns) the first error: an event the projector cannot
/// apply leaves the checkpoint right before it (the events before it in its batch are
/// applied); a failed write leaves nothing of its batch.
pub async fn catch_up_wallet(store: &DynStore, db: &Db) -> Result<u64, RunnerError> {
    let mut position = db.checkpoint(wallet::NAME, wallet::VERSION).await?;
    let mut applied = 0u64;
    loop {
        let events = store.read_all(position, BATCH_EVENTS_MAX).await?;
        let Some(last) = events.last().map(|e| e.global_position) else {
            return Ok(applied);
        };
        let mut rows = Vec::new();
        for (i, e) in events.iter().enumerate() {
            match project_wallet_event(e) {
                Ok(r) => rows.extend(r),
                Err(failed) => {
                    // Apply what comes before the failing event, so the projection
                    // stops exactly at it, then report it.
                    if let Some(before) = i.checked_sub(1).map(|j| events[j].global_position) {
                        db.apply_wallet(position, before, rows).await?;
                    }
                    return Err(failed);
                }
            }
        }
        db.apply_wallet(position, last, rows).await?;
        applied += events.len() as u64;
        position = last;
    }
}

/// How often an idle runner looks for new events (the "within 100 ms" budget).
pub const POLL_IDLE_MS: u64 = 10;
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

fn lock(s: &SharedStatus) -> std::sync::MutexGuard<'_, ProjectionStatus> {
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
    tokio::spawn(async move {
        let mut backoff_ms = 0u64;
        let mut last_resolve: Option<std::time::Instant> = None;
        let mut stall = Stall::default();
        loop {
            let outcome = catch_up().await;
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
                if let Err(e) = crate::runtime::rebuild::resolve_stale_hold(&db).await {
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
            refresh(&store, &db, &shared, name, version).await;
            // While held, a batch read and projected is thrown away: poll slower.
            let pause = if backoff_ms > 0 {
                backoff_ms
            } else if held {
                POLL_HELD_MS
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
struct Stall {
    /// `(error_position, first failure at, epoch ms)` of the failure going on.
    since: Option<(Option<i64>, i64)>,
    alerted: bool,
}

impl Stall {
    /// Note one more failed attempt at `error_position`; when the stall began.
    fn note(&mut self, error_position: Option<i64>) -> i64 {
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
    async fn alert(
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
fn stall_alert(
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

async fn refresh(
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

/// A wallet as the projection shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalletBalance {
    pub user_id: String,
    pub currency: String,
    pub pending_minor: i64,
    pub available_minor: i64,
    pub frozen_minor: i64,
    pub risk_hold_minor: i64,
    pub version: i64,
    /// `(ref_type, ref_id, reason)` of each active withdrawal block.
    pub blocks: Vec<(String, String, Option<String>)>,
}

/// A ledger row as the projection shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct LedgerEntry {
    pub sequence: i64,
    pub global_position: i64,
    pub ref_type: String,
    pub ref_id: String,
    pub entry_type: String,
    pub amount_minor: i64,
    pub delta_pending_minor: i64,
    pub delta_available_minor: i64,
    pub delta_frozen_minor: i64,
    pub delta_risk_hold_minor: i64,
    pub after_pending_minor: i64,
    pub after_available_minor: i64,
    pub after_frozen_minor: i64,
    pub after_risk_hold_minor: i64,
    pub recorded_at: String,
}

type BalanceRow = (String, String, i64, i64, i64, i64, i64);
type LedgerTuple = (
    i64,
    i64,
    String,
    String,
    String,
    i64,
    (i64, i64, i64, i64),
    (i64, i64, i64, i64),
    String,
);

impl Db {
    /// Wait (bounded) until the wallet projection has applied `min_position`; returns
    /// the position it reflects, or `Err(position)` if it did not get there in time.
    pub async fn wait_for(&self, min_position: i64) -> Result<i64, RunnerError> {
        let deadline =
            std::time::Instant::now() + std::time::Duration::from_millis(MIN_POSITION_WAIT_MS_MAX);
        loop {
            let position = self.checkpoint(wallet::NAME, wallet::VERSION).await?;
            if position >= min_position || std::time::Instant::now() >= deadline {
                return Ok(position);
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    }

    pub async fn wallet(&self, wallet_id: &str) -> Result<Option<WalletBalance>, RunnerError> {
        let balance = "SELECT user_id, currency, pending_minor, available_minor, frozen_minor, \
                       risk_hold_minor, version FROM wallet_balances WHERE wallet_id = ?";
        let blocks = "SELECT ref_type, ref_id, reason FROM wallet_blocks WHERE wallet_id = ? \
                      ORDER BY ref_type, ref_id";
        type Block = (String, String, Option<String>);
        let (row, blocks): (Option<BalanceRow>, Vec<Block>) = match self {
            Db::Mysql(p) => (
                fetch_balance_mysql(p, balance, wallet_id).await?,
                fetch_blocks_mysql(p, blocks, wallet_id).await?,
            ),
            Db::Sqlite(p) => (
                sqlx::query_as(balance)
                    .bind(wallet_id)
                    .fetch_optional(p)
                    .await?,
                sqlx::query_as(blocks).bind(wallet_id).fetch_all(p).await?,
            ),
        };
        Ok(row.map(|r| WalletBalance {
            user_id: r.0,
            currency: r.1,
            pending_minor: r.2,
            available_minor: r.3,
            frozen_minor: r.4,
            risk_hold_minor: r.5,
            version: r.6,
            blocks,
        }))
    }

    /// Ledger rows of a wallet with `sequence > after_sequence`, at most `limit`.
    pub async fn ledger(
        &self,
        wallet_id: &str,
        after_sequence: i64,
        limit: i64,
    ) -> Result<Vec<LedgerEntry>, RunnerError> {
        use sqlx::Row;
        let sql = "SELECT sequence, global_position, ref_type, ref_id, entry_type, amount_minor, \
                   delta_pending_minor, delta_available_minor, delta_frozen_minor, \
                   delta_risk_hold_minor, after_pending_minor, after_available_minor, \
                   after_frozen_minor, after_risk_hold_minor, recorded_at FROM wallet_ledger \
                   WHERE wallet_id = ? AND sequence > ? ORDER BY sequence LIMIT ?";
        macro_rules! rows {
            ($p:expr, $text:expr) => {{
                sqlx::query(sql)
                    .bind(wallet_id)
                    .bind(after_sequence)
                    .bind(limit)
                    .fetch_all($p)
                    .await?
                    .iter()
                    .map(|r| -> Result<LedgerTuple, sqlx::Error> {
                        Ok((
                            r.try_get(0)?,
                            r.try_get(1)?,
                            $text(r, 2)?,
                            $text(r, 3)?,
                            $text(r, 4)?,
                            r.try_get(5)?,
                            (r.try_get(6)?, r.try_get(7)?, r.try_get(8)?, r.try_get(9)?),
                            (
                                r.try_get(10)?,
                                r.try_get(11)?,
                                r.try_get(12)?,
                                r.try_get(13)?,
                            ),
                            $text(r, 14)?,
                        ))
                    })
                    .collect::<Result<Vec<_>, sqlx::Error>>()?
            }};
        }
        let tuples: Vec<LedgerTuple> = match self {
            Db::Mysql(p) => rows!(p, crate::infra::store::mysql::text),
            Db::Sqlite(p) => rows!(p, |r: &sqlx::sqlite::SqliteRow, i: usize| r
                .try_get::<String, _>(i)),
        };
        Ok(tuples
            .into_iter()
            .map(|t| LedgerEntry {
                sequence: t.0,
                global_position: t.1,
                ref_type: t.2,
                ref_id: t.3,
                entry_type: t.4,
                amount_minor: t.5,
                delta_pending_minor: t.6 .0,
                delta_available_minor: t.6 .1,
                delta_frozen_minor: t.6 .2,
                delta_risk_hold_minor: t.6 .3,
                after_pending_minor: t.7 .0,
                after_available_minor: t.7 .1,
                after_frozen_minor: t.7 .2,
                after_risk_hold_minor: t.7 .3,
                recorded_at: t.8,
            })
            .collect())
    }
}

async fn fetch_balance_mysql(
    p: &MySqlPool,
    sql: &str,
    wallet_id: &str,
) -> Result<Option<BalanceRow>, sqlx::Error> {
    use sqlx::Row;
    let Some(r) = sqlx::query(sql).bind(wallet_id).fetch_optional(p).await? else {
        return Ok(None);
    };
    Ok(Some((
        crate::infra::store::mysql::text(&r, 0)?,
        crate::infra::store::mysql::text(&r, 1)?,
        r.try_get(2)?,
        r.try_get(3)?,
        r.try_get(4)?,
        r.try_get(5)?,
        r.try_get(6)?,
    )))
}

async fn fetch_blocks_mysql(
    p: &MySqlPool,
    sql: &str,
    wallet_id: &str,
) -> Result<Vec<(String, String, Option<String>)>, sqlx::Error> {
    sqlx::query(sql)
        .bind(wallet_id)
        .fetch_all(p)
        .await?
        .iter()
        .map(|r| {
            Ok((
                crate::infra::store::mysql::text(r, 0)?,
                crate::infra::store::mysql::text(r, 1)?,
                crate::infra::store::mysql::opt_text(r, 2)?,
            ))
        })
        .collect()
}
