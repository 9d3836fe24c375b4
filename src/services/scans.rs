//! The cron scans of seed 000 (R-JOB-9), each a singleton job kind with its schedule,
//! and each also run by hand: `factledger compensate <scan> [--business-id …]
//! [--limit N]`. A scan reads small batches over an index of the `services`
//! projection and re-checks every row on its stream (the projection may lag; the
//! stream decides), so a row found stale decides nothing.
//!
//! | scan                       | every  | takes                                          |
//! |----------------------------|--------|------------------------------------------------|
//! | `order-timeout-close`      | 1 min  | orders in 0/1 past their timeout               |
//! | `payment-delivery`         | 1 min  | paid orders not delivered 30 s after payment   |
//! | `subscription-expiry`      | 1 min  | status 1 and `expires_at <= now`               |
//! | `subscription-message`     | 1 min  | grants whose message was not queued after 30 s |
//! | `video-call-finish`        | 1 min  | calls in 3 past their booked end               |
//! | `video-no-show`            | 5 min  | bookings in 1/2, not started, 10 min past start |
//! | `video-moderation-repair`  | 5 min  | flagged calls still in 3                       |
//! | `refund`                   | 5 min  | refunds PENDING after 30 s, and REFUNDING      |
//! | `im-members`               | hourly | every artist: full membership sync             |
//!
//! Left out on purpose: seed 000's online-status replay (RongCloud online events) and
//! upload-callback replay (Qiniu uploads) — this system receives neither callback, so
//! there is nothing to replay. Failed-callback replay (every 2 min) is the callback
//! inbox's own scan.

use super::ctx::{Ctx, DELIVERY_GRACE_MS, SCAN_LIMIT_MAX};
use super::flow;
use super::jobs;
use super::units;
use crate::infra::db::{Db, Get};
use crate::infra::jobs::cron::{CronError, CronSchedule};
use crate::infra::jobs::{ClaimedJob, JobFailure, JobHandler, JobKind, RoundReport};
use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};
use factledger_aggregates::booking::{BookingCommand, NO_SHOW_AFTER_MINUTES};
use factledger_aggregates::services::{parse_pair_id, UserId};
use factledger_projections::services::{
    ts, BOOKINGS, REFUNDS, SERVICE_ORDERS, SUBSCRIPTIONS, SUBSCRIPTION_GRANTS,
};
use factledger_projections::table::{Cell, ColType, Column};
use serde_json::{json, Value};
use std::collections::BTreeSet;

/// One of the scans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan {
    OrderTimeoutClose,
    PaymentDelivery,
    SubscriptionExpiry,
    SubscriptionMessage,
    CallFinish,
    NoShow,
    ModerationRepair,
    Refund,
    ImMembers,
}

/// A scan round's lease. The engine's heartbeat renews it every third of it while the
/// round runs, however long the batch takes; so it only decides how long a round whose
/// process died keeps its kind blocked (cap 1). Short, so that a restarted or other
/// server runs the next firing within seconds: with every-minute scans a killed round
/// no longer delays the order-timeout close by minutes (it once held it for its 5 min
/// lease, and orders stayed payable past their timeout). Long enough that a few slow
/// heartbeats in a row (a busy database) do not lose it; a round that loses it anyway
/// only overlaps the next one, which re-checks every row on its stream.
pub const SCAN_LEASE_MS: i64 = 10_000;

const fn scan_kind(name: &'static str, prefix: &'static str) -> JobKind {
    // One round per firing, never two at once; the next firing is the retry.
    JobKind {
        lease_ms: SCAN_LEASE_MS,
        max_retry_count: 1,
        cap: Some(1),
        parallelism: 1,
        ..JobKind::new(name, prefix)
    }
}

pub static ORDER_TIMEOUT_CLOSE: JobKind = scan_kind("order_timeout_close", "SCOTC");
pub static PAYMENT_DELIVERY_SCAN: JobKind = scan_kind("payment_delivery_scan", "SCPD");
pub static SUBSCRIPTION_EXPIRY: JobKind = scan_kind("subscription_expiry", "SCSE");
pub static SUBSCRIPTION_MESSAGE_SCAN: JobKind = scan_kind("subscription_message_scan", "SCSM");
pub static CALL_FINISH_SCAN: JobKind = scan_kind("video_call_finish_scan", "SCCF");
pub static NO_SHOW_SCAN: JobKind = scan_kind("video_no_show_scan", "SCNS");
pub static MODERATION_REPAIR: JobKind = scan_kind("video_moderation_repair", "SCMR");
pub static REFUND_COMPENSATION: JobKind = scan_kind("refund_compensation", "SCRF");
pub static IM_MEMBERS_FULL: JobKind = scan_kind("im_members_full", "SCIM");

impl Scan {
    pub const ALL: [Scan; 9] = [
        Scan::OrderTimeoutClose,
        Scan::PaymentDelivery,
        Scan::SubscriptionExpiry,
        Scan::SubscriptionMessage,
        Scan::CallFinish,
        Scan::NoShow,
        Scan::ModerationRepair,
        Scan::Refund,
        Scan::ImMembers,
    ];

    /// The seed's job name (`compensate <name>`).
    pub fn name(self) -> &'static str {
        match self {
            Scan::OrderTimeoutClose => "order-timeout-close",
            Scan::PaymentDelivery => "payment-delivery",
            Scan::SubscriptionExpiry => "subscription-expiry",
            Scan::SubscriptionMessage => "subscription-message",
            Scan::CallFinish => "video-call-finish",
            Scan::NoShow => "video-no-show",
            Scan::ModerationRepair => "video-moderation-repair",
            Scan::Refund => "refund",
            Scan::ImMembers => "im-members",
        }
    }

    pub fn parse(s: &str) -> Option<Scan> {
        Scan::ALL.into_iter().find(|x| x.name() == s)
    }

    pub fn kind(self) -> &'static JobKind {
        match self {
            Scan::OrderTimeoutClose => &ORDER_TIMEOUT_CLOSE,
            Scan::PaymentDelivery => &PAYMENT_DELIVERY_SCAN,
            Scan::SubscriptionExpiry => &SUBSCRIPTION_EXPIRY,
            Scan::SubscriptionMessage => &SUBSCRIPTION_MESSAGE_SCAN,
            Scan::CallFinish => &CALL_FINISH_SCAN,
            Scan::NoShow => &NO_SHOW_SCAN,
            Scan::ModerationRepair => &MODERATION_REPAIR,
            Scan::Refund => &REFUND_COMPENSATION,
            Scan::ImMembers => &IM_MEMBERS_FULL,
        }
    }

    /// Seed 000's default schedule (UTC cron).
    pub fn every(self) -> &'static str {
        match self {
            Scan::OrderTimeoutClose
            | Scan::PaymentDelivery
            | Scan::SubscriptionExpiry
            | Scan::SubscriptionMessage
            | Scan::CallFinish => "* * * * *",
            Scan::NoShow | Scan::ModerationRepair | Scan::Refund => "*/5 * * * *",
            Scan::ImMembers => "0 * * * *",
        }
    }

    /// What `--business-id` names for this scan.
    pub fn business_id_help(self) -> &'static str {
        match self {
            Scan::OrderTimeoutClose | Scan::PaymentDelivery => "an order number",
            Scan::SubscriptionExpiry => "a subscription `artist_id:fan_user_id`",
            Scan::SubscriptionMessage => "an order number (the grant's)",
            Scan::CallFinish | Scan::NoShow | Scan::ModerationRepair => "a booking number",
            Scan::Refund => "a refund number",
            Scan::ImMembers => "an artist id, or `artist_id:fan_user_id` for one fan",
        }
    }
}

/// Every scan's schedule at seed 000's default, or at `every` for all (tests).
pub fn schedules(every: Option<&str>) -> Result<Vec<CronSchedule>, CronError> {
    Scan::ALL
        .into_iter()
        .map(|s| CronSchedule::new(s.kind().name, every.unwrap_or(s.every()), s.kind()))
        .collect()
}

/// What a scan is asked to do.
#[derive(Debug, Clone)]
pub struct ScanOptions {
    /// Only this business id (see [`Scan::business_id_help`]).
    pub business_id: Option<String>,
    /// Rows taken at most (1 to [`SCAN_LIMIT_MAX`]).
    pub limit: i64,
    pub now: DateTime<Utc>,
}

/// What a scan did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ScanReport {
    pub scan: String,
    /// Rows the scan read.
    pub candidates: u32,
    /// Rows whose stream changed (closed, delivered, expired …).
    pub acted: u32,
    /// Rows that failed (logged with their ids; the next firing tries again).
    pub failed: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extra: Option<Value>,
}

fn col(name: &'static str, ty: ColType) -> Column {
    Column { name, ty }
}

async fn ids(
    db: &Db,
    sql: &str,
    args: &[Cell],
    column: &'static str,
) -> Result<Vec<String>, sqlx::Error> {
    let rows = db.fetch(sql, args, &[col(column, ColType::Text)]).await?;
    rows.iter().map(|r| r.text(column)).collect()
}

/// A failure while scanning (the read, or a bad `--business-id`).
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    #[error("business_id: {0}")]
    BusinessId(String),
    #[error("limit: must be 1 to {SCAN_LIMIT_MAX}")]
    Limit,
    #[error("reading the services projection: {0}")]
    Read(#[from] sqlx::Error),
}

/// Run one scan (a cron firing, or `factledger compensate`).
pub async fn run(ctx: &Ctx, scan: Scan, opts: &ScanOptions) -> Result<ScanReport, ScanError> {
    if !(1..=SCAN_LIMIT_MAX).contains(&opts.limit) {
        return Err(ScanError::Limit);
    }
    let mut report = ScanReport {
        scan: scan.name().to_owned(),
        ..ScanReport::default()
    };
    let now = opts.now;
    let limit = Cell::Int(opts.limit);
    let only = opts.business_id.clone();
    let grace = ts(now - Duration::milliseconds(DELIVERY_GRACE_MS));
    match scan {
        Scan::OrderTimeoutClose => {
            let orders = match only {
                Some(id) => vec![id],
                None => ids(&ctx.db, &format!(
                    "SELECT order_no FROM {} WHERE status IN (0, 1) AND timeout_at <= ? ORDER BY timeout_at LIMIT ?",
                    SERVICE_ORDERS.name
                ), &[Cell::text(ts(now)), limit], "order_no").await?,
            };
            let meta = ctx.metadata("cron:order-timeout-close");
            for o in orders {
                report.candidates += 1;
                match units::orders::close(&ctx.store, &meta, &o, now, None).await {
                    Ok(out) if !out.value.is_empty() => report.acted += 1,
                    Ok(_) => {}
                    Err(e) => fail(&mut report, &[("order_no", &o)], &e.to_string()),
                }
            }
        }
        Scan::PaymentDelivery => {
            let orders = match only {
                Some(id) => vec![id],
                None => ids(&ctx.db, &format!(
                    "SELECT order_no FROM {} WHERE status = 2 AND paid_at <= ? ORDER BY paid_at LIMIT ?",
                    SERVICE_ORDERS.name
                ), &[Cell::text(grace), limit], "order_no").await?,
            };
            for o in orders {
                report.candidates += 1;
                match flow::deliver(ctx, &o, now, None, false).await {
                    Ok(_) => report.acted += 1,
                    Err(e) => fail(&mut report, &[("order_no", &o)], &e.message),
                }
            }
        }
        Scan::SubscriptionExpiry => expiry(ctx, only, opts, &mut report).await?,
        Scan::SubscriptionMessage => {
            let grants = match only {
                Some(id) => ctx.db.fetch(
                    &format!("SELECT order_no, artist_id, fan_user_id FROM {} WHERE order_no = ?", SUBSCRIPTION_GRANTS.name),
                    &[Cell::text(id)], GRANT_COLUMNS).await?,
                None => ctx.db.fetch(
                    &format!("SELECT order_no, artist_id, fan_user_id FROM {} WHERE message_queued = 0 AND granted_at <= ? ORDER BY granted_at LIMIT ?", SUBSCRIPTION_GRANTS.name),
                    &[Cell::text(grace), limit], GRANT_COLUMNS).await?,
            };
            for g in grants {
                report.candidates += 1;
                let order_no = g.text("order_no")?;
                let (Ok(a), Ok(f)) = (
                    UserId::parse(g.int("artist_id")?),
                    UserId::parse(g.int("fan_user_id")?),
                ) else {
                    continue;
                };
                match flow::queue_message(ctx, a, f, &order_no, now).await {
                    Ok(v) if v["queued"] == true => report.acted += 1,
                    Ok(_) => {}
                    Err(e) => fail(&mut report, &[("order_no", &order_no)], &e.message),
                }
            }
        }
        Scan::CallFinish => {
            let rows = match only {
                Some(id) => ctx.db.fetch(&format!("SELECT booking_no, started_at, minutes FROM {} WHERE booking_no = ? AND status = 3", BOOKINGS.name), &[Cell::text(id)], CALL_COLUMNS).await?,
                None => ctx.db.fetch(&format!("SELECT booking_no, started_at, minutes FROM {} WHERE status = 3 AND started_at <= ? ORDER BY started_at LIMIT ?", BOOKINGS.name), &[Cell::text(ts(now)), Cell::Int(SCAN_LIMIT_MAX)], CALL_COLUMNS).await?,
            };
            for r in rows {
                let booking_no = r.text("booking_no")?;
                let due = r
                    .opt_text("started_at")?
                    .and_then(|s| DateTime::parse_from_rfc3339(&s).ok())
                    .map(|s| {
                        s.with_timezone(&Utc) + Duration::minutes(r.int("minutes").unwrap_or(0))
                    });
                if due.is_none_or(|d| d > now) || i64::from(report.candidates) >= opts.limit {
                    continue;
                }
                report.candidates += 1;
                match flow::finish_call(ctx, &booking_no, now, None).await {
                    Ok(v) if v["finished"] == true => report.acted += 1,
                    Ok(_) => {}
                    Err(e) => fail(&mut report, &[("booking_no", &booking_no)], &e.message),
                }
            }
        }
        Scan::NoShow => {
            let due = ts(now - Duration::minutes(NO_SHOW_AFTER_MINUTES));
            let bookings = match only {
                Some(id) => vec![id],
                // Stuck in 1/2 whether or not a check was recorded: checked again.
                None => ids(&ctx.db, &format!(
                    "SELECT booking_no FROM {} WHERE status IN (1, 2) AND started_at IS NULL AND start_at <= ? ORDER BY start_at LIMIT ?",
                    BOOKINGS.name
                ), &[Cell::text(due), limit], "booking_no").await?,
            };
            for b in bookings {
                report.candidates += 1;
                match flow::no_show(ctx, &b, now, None).await {
                    Ok(v)
                        if v["events"]
                            .as_array()
                            .is_some_and(|e| e.iter().any(|n| n == "NoShowDecided")) =>
                    {
                        report.acted += 1
                    }
                    Ok(_) => {}
                    Err(e) => fail(&mut report, &[("booking_no", &b)], &e.message),
                }
            }
        }
        Scan::ModerationRepair => {
            let bookings = match only {
                Some(id) => vec![id],
                None => ids(&ctx.db, &format!(
                    "SELECT booking_no FROM {} WHERE status = 3 AND moderation_reason IS NOT NULL ORDER BY start_at LIMIT ?",
                    BOOKINGS.name
                ), &[limit], "booking_no").await?,
            };
            let meta = ctx.metadata("cron:video-moderation-repair");
            for b in bookings {
                report.candidates += 1;
                let abort = BookingCommand::AbortForModeration { at: now };
                match units::booking_step(&ctx.store, &meta, &b, abort, None).await {
                    Ok(out) if !out.value.is_empty() => report.acted += 1,
                    Ok(_) => {}
                    Err(e) => fail(&mut report, &[("booking_no", &b)], &e.to_string()),
                }
            }
        }
        Scan::Refund => {
            let refunds = match only {
                Some(id) => vec![id],
                None => ids(&ctx.db, &format!(
                    "SELECT refund_no FROM {} WHERE (status = 1 AND updated_at <= ?) OR status = 2 ORDER BY updated_at LIMIT ?",
                    REFUNDS.name
                ), &[Cell::text(grace), limit], "refund_no").await?,
            };
            for r in refunds {
                report.candidates += 1;
                match flow::run_refund(ctx, &r, now, None).await {
                    Ok(v) if v["status"] != "REFUNDING" && v["settled_before"] != true => {
                        report.acted += 1
                    }
                    Ok(_) => {}
                    Err(e) => fail(&mut report, &[("refund_no", &r)], &e.message),
                }
            }
        }
        Scan::ImMembers => {
            let targets: Vec<(UserId, Option<UserId>)> = match only {
                Some(id) => vec![parse_member_target(&id)?],
                None => {
                    let rows = ctx.db.fetch(
                        "SELECT artist_id FROM subscriptions UNION SELECT artist_id FROM im_group_members ORDER BY artist_id LIMIT ?",
                        &[limit], &[col("artist_id", ColType::Int)]).await?;
                    rows.iter()
                        .filter_map(|r| r.int("artist_id").ok().and_then(|a| UserId::parse(a).ok()))
                        .map(|a| (a, None))
                        .collect()
                }
            };
            for (artist, fan) in targets {
                report.candidates += 1;
                match flow::sync_members(ctx, artist, fan, now, None).await {
                    Ok(_) => report.acted += 1,
                    Err(e) => fail(
                        &mut report,
                        &[("artist_id", &artist.to_string())],
                        &e.message,
                    ),
                }
            }
        }
    }
    Ok(report)
}

const GRANT_COLUMNS: &[Column] = &[
    Column {
        name: "order_no",
        ty: ColType::Text,
    },
    Column {
        name: "artist_id",
        ty: ColType::Int,
    },
    Column {
        name: "fan_user_id",
        ty: ColType::Int,
    },
];

const CALL_COLUMNS: &[Column] = &[
    Column {
        name: "booking_no",
        ty: ColType::Text,
    },
    Column {
        name: "started_at",
        ty: ColType::OptText,
    },
    Column {
        name: "minutes",
        ty: ColType::Int,
    },
];

/// `artist` or `artist:fan`, both positive integers (seed 000: a fan only with its artist).
pub fn parse_member_target(id: &str) -> Result<(UserId, Option<UserId>), ScanError> {
    let bad = || {
        ScanError::BusinessId(format!(
            "{id:?}: an artist id, or artist_id:fan_user_id, both positive integers"
        ))
    };
    match id.split_once(':') {
        Some(_) => parse_pair_id(id).map(|(a, f)| (a, Some(f))).ok_or_else(bad),
        None => UserId::parse_str(id).map(|a| (a, None)).map_err(|_| bad()),
    }
}

fn fail(report: &mut ScanReport, ids: &[(&str, &str)], error: &str) {
    report.failed += 1;
    let ids = ids
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ");
    tracing::warn!(
        target: "factledger::services::compensation",
        scan = %report.scan,
        ids = %ids,
        error,
        "compensation step failed; the next firing tries again"
    );
}

/// The expiry scan: expire each due subscription on its stream, then (after those
/// commits) queue one membership re-sync per artist + fan of the batch. A failed
/// enqueue is counted and logged; the hourly full sync is the backstop.
async fn expiry(
    ctx: &Ctx,
    only: Option<String>,
    opts: &ScanOptions,
    report: &mut ScanReport,
) -> Result<(), ScanError> {
    let now = opts.now;
    let pairs: Vec<(UserId, UserId)> = match only {
        Some(id) => vec![parse_pair_id(&id).ok_or_else(|| {
            ScanError::BusinessId(format!(
                "{id:?}: artist_id:fan_user_id, both positive integers"
            ))
        })?],
        None => {
            let rows = ctx.db.fetch(
                &format!("SELECT artist_id, fan_user_id FROM {} WHERE status = 1 AND expires_at <= ? ORDER BY expires_at LIMIT ?", SUBSCRIPTIONS.name),
                &[Cell::text(ts(now)), Cell::Int(opts.limit)],
                &[col("artist_id", ColType::Int), col("fan_user_id", ColType::Int)],
            ).await?;
            rows.iter()
                .filter_map(|r| {
                    Some((
                        UserId::parse(r.int("artist_id").ok()?).ok()?,
                        UserId::parse(r.int("fan_user_id").ok()?).ok()?,
                    ))
                })
                .collect()
        }
    };
    let meta = ctx.metadata("cron:subscription-expiry");
    let mut expired = BTreeSet::new();
    for (a, f) in pairs {
        report.candidates += 1;
        match units::subscriptions::expire(&ctx.store, &meta, a, f, now, None).await {
            Ok(out) if !out.value.is_empty() => {
                report.acted += 1;
                expired.insert((a, f));
            }
            Ok(_) => {}
            Err(e) => fail(
                report,
                &[
                    ("artist_id", &a.to_string()),
                    ("fan_user_id", &f.to_string()),
                ],
                &e.to_string(),
            ),
        }
    }
    let (mut ok, mut failed) = (0u32, 0u32);
    for (a, f) in expired {
        let ids = [("artist_id", a.to_string()), ("fan_user_id", f.to_string())];
        let ids: Vec<(&str, &str)> = ids.iter().map(|(k, v)| (*k, v.as_str())).collect();
        if ctx.enqueue(jobs::im_members_job(a, Some(f)), &ids).await {
            ok += 1;
        } else {
            failed += 1;
        }
    }
    report.extra =
        Some(json!({ "im_member_dispatch_ok": ok, "im_member_dispatch_failed": failed }));
    Ok(())
}

/// The cron side of a scan: one firing is one [`run`] of a batch.
pub struct ScanHandler {
    ctx: Ctx,
    scan: Scan,
}

impl ScanHandler {
    pub fn new(ctx: Ctx, scan: Scan) -> ScanHandler {
        ScanHandler { ctx, scan }
    }
}

#[async_trait]
impl JobHandler for ScanHandler {
    async fn run(&self, _job: &ClaimedJob) -> Result<RoundReport, JobFailure> {
        let opts = ScanOptions {
            business_id: None,
            limit: self.ctx.services.scan_batch,
            now: Utc::now(),
        };
        let report = run(&self.ctx, self.scan, &opts)
            .await
            .map_err(|e| JobFailure::new(e.to_string()))?;
        let summary = serde_json::to_value(&report).unwrap_or(Value::Null);
        Ok(RoundReport {
            business_done: report.failed == 0,
            summary,
        })
    }
}
