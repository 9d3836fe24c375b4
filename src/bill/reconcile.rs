//! Bill locks against the lines they hold, a reconciliation check
//! (`runtime::reconcile::ExternalCheck`, issue 32 item 6) the composition root always
//! registers.
//!
//! A live (RESERVED or ACTIVE) lock names a line of a payment order, on another
//! stream. The units that write locks and lines check each other
//! (`bill::commands`: a lock is reserved and activated only on a line that is there;
//! a locked line is not removed, its order not voided or marked no-need-pay), but
//! they read the other stream without writing it, and locks recorded before those
//! checks were never held to them. A live lock whose line is gone holds nothing and
//! still blocks every other lock of its station-month (`LOCK_HELD`), so every one is
//! a finding, for a person: release the lock (`…:release`), after checking no payment
//! went out under it.
//!
//! In ONE statement over the bill projection's fact tables (one consistent read; the
//! projector writes rows and checkpoint in one transaction), it lists the live locks
//! whose order is missing or closed (VOID, NO_NEED_PAY), or whose line is missing,
//! of another order, or removed.

use crate::infra::db::{Db, Get};
use crate::runtime::reconcile::{ExternalCheck, Finding, FindingKind};
use async_trait::async_trait;
use factledger_aggregates::bill::payment_order::TERMINAL_STATUSES;
use factledger_projections::table::{Cell, ColType, Column};
use serde_json::json;

/// Findings listed at most: the report keeps this many in all
/// (`runtime::reconcile::FINDINGS_STORED_MAX`), so more would only be cut there.
pub const LOCK_FINDINGS_MAX: i64 = crate::runtime::reconcile::FINDINGS_STORED_MAX as i64;

/// The check's name in a report (`check=…` when it could not run).
pub const CHECK_NAME: &str = "bill_locks_hold_live_lines";

pub struct LocksHoldLiveLines {
    db: Db,
}

impl LocksHoldLiveLines {
    pub fn new(db: Db) -> Self {
        LocksHoldLiveLines { db }
    }
}

/// One live lock whose line is gone, as the fact tables have it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoneLine {
    pub lock_id: i64,
    pub station_id: i64,
    pub month: String,
    pub lock_status: String,
    pub order_id: i64,
    pub line_id: i64,
    /// `None`: no such order.
    pub order_status: Option<String>,
    /// `None`: no such line on the order.
    pub line_deleted: Option<bool>,
}

impl GoneLine {
    fn why(&self) -> String {
        match (&self.order_status, self.line_deleted) {
            (None, _) => format!("payment order {} does not exist", self.order_id),
            (Some(s), _) if closed_codes().contains(s) => {
                format!("payment order {} is {s}", self.order_id)
            }
            (_, None) => format!(
                "line {} is not on payment order {}",
                self.line_id, self.order_id
            ),
            (_, Some(_)) => format!(
                "line {} of payment order {} was removed",
                self.line_id, self.order_id
            ),
        }
    }

    pub fn finding(&self) -> Finding {
        Finding::new(
            FindingKind::BillLockLineGone,
            "",
            "bill_fact_locks",
            format!("lock_id={}", self.lock_id),
            format!(
                "{} lock {} of {}:{} holds line {} of order {}, but {}; it blocks every other \
                 lock of its station-month: release it after checking no payment went out under it",
                self.lock_status,
                self.lock_id,
                self.station_id,
                self.month,
                self.line_id,
                self.order_id,
                self.why()
            ),
        )
        .values(
            Some(json!({"order_id": self.order_id, "line_id": self.line_id,
                        "order_status": "not closed", "line": "live"})),
            Some(json!({"order_id": self.order_id, "line_id": self.line_id,
                        "order_status": self.order_status, "line_deleted": self.line_deleted})),
        )
    }
}

/// The stored codes of the closed order statuses (`bill_fact_orders.status`).
fn closed_codes() -> Vec<String> {
    TERMINAL_STATUSES
        .iter()
        .filter_map(|s| serde_json::to_value(s).ok())
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect()
}

const COLUMNS: [Column; 8] = [
    Column {
        name: "lock_id",
        ty: ColType::Int,
    },
    Column {
        name: "station_id",
        ty: ColType::Int,
    },
    Column {
        name: "bill_yearmonth",
        ty: ColType::Text,
    },
    Column {
        name: "lock_status",
        ty: ColType::Text,
    },
    Column {
        name: "order_id",
        ty: ColType::Int,
    },
    Column {
        name: "line_id",
        ty: ColType::Int,
    },
    Column {
        name: "order_status",
        ty: ColType::OptText,
    },
    Column {
        name: "line_deleted",
        ty: ColType::OptInt,
    },
];

/// Every live lock whose line is gone, by lock id (at most [`LOCK_FINDINGS_MAX`]).
pub async fn gone_lines(db: &Db) -> Result<Vec<GoneLine>, sqlx::Error> {
    let closed = closed_codes();
    let marks = vec!["?"; closed.len()].join(", ");
    let sql = format!(
        "SELECT k.lock_id, k.station_id, k.bill_yearmonth, k.status AS lock_status, \
         k.order_id, k.line_id, o.status AS order_status, l.deleted AS line_deleted \
         FROM bill_fact_locks k \
         LEFT JOIN bill_fact_orders o ON o.order_id = k.order_id \
         LEFT JOIN bill_fact_lines l ON l.line_id = k.line_id AND l.order_id = k.order_id \
         WHERE k.status IN ('RESERVED', 'ACTIVE') \
         AND (o.order_id IS NULL OR o.status IN ({marks}) OR l.line_id IS NULL OR l.deleted <> 0) \
         ORDER BY k.lock_id LIMIT ?"
    );
    let mut args: Vec<Cell> = closed.into_iter().map(Cell::text).collect();
    args.push(Cell::Int(LOCK_FINDINGS_MAX));
    let rows = db.fetch(&sql, &args, &COLUMNS).await?;
    rows.iter()
        .map(|r| {
            Ok(GoneLine {
                lock_id: r.int("lock_id")?,
                station_id: r.int("station_id")?,
                month: r.text("bill_yearmonth")?,
                lock_status: r.text("lock_status")?,
                order_id: r.int("order_id")?,
                line_id: r.int("line_id")?,
                order_status: r.opt_text("order_status")?,
                line_deleted: r.opt_int("line_deleted")?.map(|d| d != 0),
            })
        })
        .collect()
}

#[async_trait]
impl ExternalCheck for LocksHoldLiveLines {
    fn name(&self) -> &'static str {
        CHECK_NAME
    }

    async fn findings(&self) -> Result<Vec<Finding>, String> {
        let gone = gone_lines(&self.db).await.map_err(|e| e.to_string())?;
        Ok(gone.iter().map(GoneLine::finding).collect())
    }
}
