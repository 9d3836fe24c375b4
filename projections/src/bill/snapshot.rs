//! Bill-dimension snapshots (SPEC R-BILL-10; seed 001 §7.4, "S13"): one queryable
//! summary per bill (a diff, or a station-month), aggregating its current payment lines
//! and their results.
//!
//! Pure rules only:
//! - [`aggregate`]: the bill's current payable lines and results → paid and failed
//!   amounts and counts, latest paid time and source;
//! - [`refresh_existing`]: EXISTING_ONLY — an existing snapshot + a new aggregate → the
//!   updated snapshot, or skipped (no snapshot: never created here; an older refresh
//!   version). The planned amount frozen at review approval is never rewritten, and
//!   `payment_diff = latest actual paid − planned`; [`SnapshotCounts`] tallies them;
//! - [`snapshot_page`] and [`after_round`]: at most [`SNAPSHOT_SCOPES_PER_ROUND_MAX`]
//!   bills a round with a cursor; more pages or a newer generation → back to PENDING;
//! - [`snapshot_bills`]: the bills a refresh request's resolved scopes refresh — every
//!   scope type (**[dev]**: the seed submitted none for PARTNER_BILL and ACCOUNT_SCOPE).

use super::order_status::LineResult;
use super::refresh::{ScopeType, StationMonthScope};
use super::{
    BillLine, LineKind, PaymentOrder, ResultSource, ResultStatus, ResultType, StationMonth,
};
use chrono::{DateTime, Utc};
use std::collections::BTreeSet;
use std::fmt;

/// Bills a snapshot refresh round handles at most (seed §7.4 default): bounds one
/// round's transaction time under the lease.
pub const SNAPSHOT_SCOPES_PER_ROUND_MAX: usize = 100;
/// The snapshot job's lease (seed §7.4 default 10 minutes).
pub const SNAPSHOT_LEASE_MS_DEFAULT: i64 = 10 * 60 * 1_000;

/// Which bill a snapshot is of. Ordered: diffs first, by id, then station-months.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BillKey {
    Diff(i64),
    StationMonth(StationMonth),
}

impl fmt::Display for BillKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BillKey::Diff(id) => write!(f, "DIFF:{id}"),
            BillKey::StationMonth(sm) => write!(f, "STATION_MONTH:{sm}"),
        }
    }
}

/// The bills whose snapshots a refresh of these resolved scopes refreshes, sorted and
/// distinct: by diff for a DIFF request (seed §7.4 "传差异 ID 列表"), by station-month
/// for every other scope type (seed: STATION_MONTH, ORDER_BILL; **[dev]** PARTNER_BILL
/// and ACCOUNT_SCOPE too).
pub fn snapshot_bills(scope_type: ScopeType, scopes: &[StationMonthScope]) -> Vec<BillKey> {
    let keys: BTreeSet<BillKey> = scopes
        .iter()
        .map(|s| match (scope_type, s.locator.diff_id()) {
            (ScopeType::Diff, Some(diff_id)) => BillKey::Diff(diff_id),
            _ => BillKey::StationMonth(s.station_month),
        })
        .collect();
    keys.into_iter().collect()
}

/// The bill's current payment, aggregated from its lines and results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BillAggregate {
    /// Current payable lines counted.
    pub line_count: u32,
    /// Successful NORMAL treasury/offline results, not voided (the R-BILL-3 paid).
    pub paid_amount_minor: i64,
    pub paid_count: u32,
    /// Failed results, not voided.
    pub failed_amount_minor: i64,
    pub failed_count: u32,
    /// The latest counted success (by paid time, then result id).
    pub latest_paid_at: Option<DateTime<Utc>>,
    pub latest_paid_source: Option<ResultSource>,
}

/// Aggregate a bill's current payment (R-BILL-10): `lines` and `results` are the bill's;
/// only PAYABLE lines, not deleted, of their published master's current publish
/// identity count, and only their results.
pub fn aggregate(
    bill: BillKey,
    orders: &[PaymentOrder],
    lines: &[BillLine],
    results: &[LineResult],
) -> Result<BillAggregate, SnapshotError> {
    let current: BTreeSet<i64> = lines
        .iter()
        .filter(|l| l.kind == LineKind::Payable && !l.deleted)
        .filter(|l| {
            orders.iter().any(|o| {
                o.id == l.order_id
                    && o.published
                    && (o.publish_version, o.submit_round) == (l.publish_version, l.submit_round)
            })
        })
        .map(|l| l.id)
        .collect();
    let of_current = || {
        results
            .iter()
            .filter(|r| current.contains(&r.line_id) && !r.voided)
    };
    let paid: Vec<&LineResult> = of_current()
        .filter(|r| {
            r.status == ResultStatus::Success
                && r.kind == ResultType::NormalPayment
                && matches!(
                    r.source,
                    ResultSource::Treasury | ResultSource::OfflineImport
                )
        })
        .collect();
    let failed: Vec<&LineResult> = of_current()
        .filter(|r| r.status == ResultStatus::Fail)
        .collect();
    let sum = |rs: &[&LineResult], what| {
        rs.iter()
            .try_fold(0i64, |s, r| s.checked_add(r.amount_minor))
            .ok_or(SnapshotError::AmountOverflow { bill, what })
    };
    let latest = paid.iter().max_by_key(|r| (r.paid_at, r.result_id));
    Ok(BillAggregate {
        line_count: count(current.len()),
        paid_amount_minor: sum(&paid, "paid amount")?,
        paid_count: count(paid.len()),
        failed_amount_minor: sum(&failed, "failed amount")?,
        failed_count: count(failed.len()),
        latest_paid_at: latest.and_then(|r| r.paid_at),
        latest_paid_source: latest.map(|r| r.source),
    })
}

/// Counts of lines and results of one bill stay far below `u32::MAX`; saturate rather
/// than wrap should they not.
fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The snapshot's payment status, against the frozen planned amount.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SnapshotStatus {
    /// No current payable line.
    NoPayment,
    /// Lines, no success, no failure yet.
    AwaitingPayment,
    /// Paid at least the planned amount (and more than 0).
    Paid,
    /// Paid something, less than planned — even with failures beside it.
    PartiallyPaid,
    /// Failures and no success.
    Failed,
}

impl SnapshotStatus {
    fn of(a: &BillAggregate, planned_minor: i64) -> SnapshotStatus {
        if a.line_count == 0 {
            SnapshotStatus::NoPayment
        } else if a.paid_amount_minor > 0 && a.paid_amount_minor >= planned_minor {
            SnapshotStatus::Paid
        } else if a.paid_amount_minor > 0 {
            SnapshotStatus::PartiallyPaid
        } else if a.failed_count > 0 {
            SnapshotStatus::Failed
        } else {
            SnapshotStatus::AwaitingPayment
        }
    }
}

/// One bill's snapshot row (`bill_dimension_snapshot`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BillSnapshot {
    pub bill: BillKey,
    /// Frozen when the review approved the payment; no refresh rewrites it.
    pub planned_amount_minor: i64,
    pub paid_amount_minor: i64,
    pub paid_count: u32,
    pub failed_amount_minor: i64,
    pub failed_count: u32,
    pub status: SnapshotStatus,
    pub latest_paid_at: Option<DateTime<Utc>>,
    pub source: Option<ResultSource>,
    /// The refresh generation that last wrote the row.
    pub refresh_version: i64,
    /// `latest actual paid − planned`: negative while underpaid.
    pub payment_diff_minor: i64,
}

/// Why a bill's snapshot was not updated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SkipReason {
    /// EXISTING_ONLY: a missing snapshot is not created by a refresh.
    NoSnapshot,
    /// The row was written by a newer refresh generation than this one.
    NewerVersion { existing: i64, refresh: i64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotRefresh {
    Updated(BillSnapshot),
    Skipped { bill: BillKey, reason: SkipReason },
}

/// EXISTING_ONLY refresh of one bill's snapshot (seed §7.4 `updateExisting`): update
/// an existing row from `aggregate`, keep its frozen planned amount, stamp
/// `refresh_version`; skip a missing row or a row of a newer version.
pub fn refresh_existing(
    bill: BillKey,
    existing: Option<&BillSnapshot>,
    aggregate: &BillAggregate,
    refresh_version: i64,
) -> Result<SnapshotRefresh, SnapshotError> {
    let Some(existing) = existing.filter(|s| s.bill == bill) else {
        return Ok(SnapshotRefresh::Skipped {
            bill,
            reason: SkipReason::NoSnapshot,
        });
    };
    if existing.refresh_version > refresh_version {
        return Ok(SnapshotRefresh::Skipped {
            bill,
            reason: SkipReason::NewerVersion {
                existing: existing.refresh_version,
                refresh: refresh_version,
            },
        });
    }
    let planned = existing.planned_amount_minor;
    let payment_diff_minor =
        aggregate
            .paid_amount_minor
            .checked_sub(planned)
            .ok_or(SnapshotError::AmountOverflow {
                bill,
                what: "payment diff",
            })?;
    Ok(SnapshotRefresh::Updated(BillSnapshot {
        bill,
        planned_amount_minor: planned,
        paid_amount_minor: aggregate.paid_amount_minor,
        paid_count: aggregate.paid_count,
        failed_amount_minor: aggregate.failed_amount_minor,
        failed_count: aggregate.failed_count,
        status: SnapshotStatus::of(aggregate, planned),
        latest_paid_at: aggregate.latest_paid_at,
        source: aggregate.latest_paid_source,
        refresh_version,
        payment_diff_minor,
    }))
}

/// Updated and skipped snapshots of a round or a job, as its result reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SnapshotCounts {
    pub updated: u32,
    pub skipped: u32,
}

impl SnapshotCounts {
    pub fn add(&mut self, r: &SnapshotRefresh) {
        match r {
            SnapshotRefresh::Updated(_) => self.updated = self.updated.saturating_add(1),
            SnapshotRefresh::Skipped { .. } => self.skipped = self.skipped.saturating_add(1),
        }
    }
}

/// One round's bills.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotPage {
    /// Sorted, distinct, at most [`SNAPSHOT_SCOPES_PER_ROUND_MAX`].
    pub bills: Vec<BillKey>,
    /// Where the next round starts (exclusive), saved with the round's snapshots;
    /// `None` on the last page.
    pub next_cursor: Option<BillKey>,
}

/// The round after `cursor` of the frozen request's bills.
pub fn snapshot_page(bills: &[BillKey], cursor: Option<BillKey>) -> SnapshotPage {
    let rest: BTreeSet<BillKey> = bills
        .iter()
        .copied()
        .filter(|b| match cursor {
            None => true,
            Some(c) => *b > c,
        })
        .collect();
    let page: Vec<BillKey> = rest
        .iter()
        .copied()
        .take(SNAPSHOT_SCOPES_PER_ROUND_MAX)
        .collect();
    let next_cursor = (rest.len() > page.len())
        .then(|| page.last().copied())
        .flatten();
    SnapshotPage {
        bills: page,
        next_cursor,
    }
}

/// Where the snapshot job goes after a successful round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotJobNext {
    /// More pages, or a newer request generation arrived while running: run again.
    Pending,
    Success,
}

/// Seed §7.4: more pages or a newer generation → PENDING, else SUCCESS. (A failure is
/// the job's own FAILED and never turns the refresh job that submitted it into one.)
pub fn after_round(
    page: &SnapshotPage,
    claimed_generation: i64,
    current_generation: i64,
) -> SnapshotJobNext {
    if page.next_cursor.is_some() || current_generation > claimed_generation {
        SnapshotJobNext::Pending
    } else {
        SnapshotJobNext::Success
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    #[error("snapshot of {bill}: the {what} overflows i64 minor units")]
    AmountOverflow { bill: BillKey, what: &'static str },
}

#[cfg(test)]
mod tests;
