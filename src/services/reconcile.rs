//! Candy conservation across streams (issue 18 item 9), a reconciliation check
//! (`runtime::reconcile::ExternalCheck`) the composition root always registers. In
//! ONE statement (one consistent read of the `services` projection, whose rows move
//! with its checkpoint in one transaction) it sums:
//!
//! - issued = Σ candy of delivered recharge orders (the order streams);
//! - holds = Σ price of every booking (each booking holds once, the booking streams);
//! - refunded = Σ candy refunds that succeeded (the refund streams);
//! - open = Σ price of bookings whose hold is open or waiting for its refund;
//!
//! and holds the candy accounts (their own streams) to them:
//! `Σ balance = issued − holds + refunded` and `Σ held = open`. A leg missing or
//! doubled on any one stream breaks one of the two. The projection is itself held to
//! a fresh replay of the same events by the generic projection check, and the journal
//! to a zero trial balance in `ZZC`.

use crate::infra::db::{Db, Get};
use crate::runtime::reconcile::{ExternalCheck, Finding, FindingKind};
use async_trait::async_trait;
use factledger_projections::table::{ColType, Column};
use serde_json::json;

pub struct CandyConservation {
    db: Db,
}

impl CandyConservation {
    pub fn new(db: Db) -> Self {
        CandyConservation { db }
    }
}

/// The sums of one consistent read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct CandyTotals {
    pub issued: i64,
    pub holds: i64,
    pub refunded: i64,
    pub open_holds: i64,
    pub balance: i64,
    pub held: i64,
}

const SQL: &str = "SELECT \
    (SELECT COALESCE(SUM(candy), 0) FROM service_orders WHERE business_type = 'RECHARGE' AND status = 3) AS issued, \
    (SELECT COALESCE(SUM(price_candy), 0) FROM bookings) AS holds, \
    (SELECT COALESCE(SUM(amount), 0) FROM refunds WHERE method = 'CANDY' AND status = 3) AS refunded, \
    (SELECT COALESCE(SUM(price_candy), 0) FROM bookings WHERE hold_state IN ('OPEN', 'REFUND_DUE')) AS open_holds, \
    (SELECT COALESCE(SUM(balance), 0) FROM candy_accounts) AS balance, \
    (SELECT COALESCE(SUM(held), 0) FROM candy_accounts) AS held";

const fn int(name: &'static str) -> Column {
    Column {
        name,
        ty: ColType::Int,
    }
}

/// Read the totals (SUM of BIGINT is DECIMAL on MariaDB: cast back in SQL).
pub async fn totals(db: &Db) -> Result<CandyTotals, sqlx::Error> {
    let sql = match db {
        Db::Mysql(_) => SQL
            .replace("COALESCE(SUM(", "CAST(COALESCE(SUM(")
            .replace("), 0)", "), 0) AS SIGNED)"),
        Db::Sqlite(_) => SQL.to_owned(),
    };
    const COLUMNS: [Column; 6] = [
        int("issued"),
        int("holds"),
        int("refunded"),
        int("open_holds"),
        int("balance"),
        int("held"),
    ];
    let rows = db.fetch(&sql, &[], &COLUMNS).await?;
    let r = rows.first().ok_or(sqlx::Error::RowNotFound)?;
    Ok(CandyTotals {
        issued: r.int("issued")?,
        holds: r.int("holds")?,
        refunded: r.int("refunded")?,
        open_holds: r.int("open_holds")?,
        balance: r.int("balance")?,
        held: r.int("held")?,
    })
}

impl CandyTotals {
    /// What the identities say is wrong (empty when candy adds up).
    pub fn findings(&self) -> Vec<Finding> {
        let mut out = Vec::new();
        let expected_balance = self.issued - self.holds + self.refunded;
        if self.balance != expected_balance {
            out.push(
                Finding::new(
                    FindingKind::CandyMismatch,
                    "",
                    "candy_accounts",
                    "balance".into(),
                    "Σ candy balances ≠ delivered recharges − holds + candy refunds",
                )
                .values(Some(json!(expected_balance)), Some(json!(self.balance))),
            );
        }
        if self.held != self.open_holds {
            out.push(
                Finding::new(
                    FindingKind::CandyMismatch,
                    "",
                    "candy_accounts",
                    "held".into(),
                    "Σ held candy ≠ Σ open holds of bookings",
                )
                .values(Some(json!(self.open_holds)), Some(json!(self.held))),
            );
        }
        out
    }
}

#[async_trait]
impl ExternalCheck for CandyConservation {
    fn name(&self) -> &'static str {
        "candy_conservation"
    }

    async fn findings(&self) -> Result<Vec<Finding>, String> {
        let t = totals(&self.db).await.map_err(|e| e.to_string())?;
        Ok(t.findings())
    }
}

/// Every gateway payment the callback inbox holds is applied (issue 32 item 0): a
/// reconciliation check (`ExternalCheck`) the composition root registers with the
/// gateway. It reads the gateway's verified, normalised callbacks that own their event
/// id (duplicates are the owner's business), keeps those whose payload is a payment
/// notice, and looks each transaction up in `payment_transactions` (a payment on
/// time or late, delivered or refunded, is recorded there). A payment received more
/// than [`PAYMENT_APPLY_GRACE_MS`] ago and recorded nowhere is a
/// `payment_not_applied` finding: money taken at the gateway that the ledger never
/// credited nor refunded can no longer go unnoticed, whatever became of its callback
/// row (failed past its replays, pending after a crash, or wrongly marked handled).
pub struct PaymentsApplied {
    db: Db,
    gateway: std::sync::Arc<dyn crate::services::gateway::PaymentGateway>,
}

/// A payment younger than this may still be in its replay schedule (the replay job's
/// eight rounds end about 26 minutes after delivery; a crash is swept after 10).
pub const PAYMENT_APPLY_GRACE_MS: i64 = 30 * 60 * 1_000;
/// Callbacks read per page.
const PAYMENTS_PAGE_ROWS: i64 = 500;

impl PaymentsApplied {
    pub fn new(
        db: Db,
        gateway: std::sync::Arc<dyn crate::services::gateway::PaymentGateway>,
    ) -> Self {
        PaymentsApplied { db, gateway }
    }

    async fn unapplied(&self, now_ms: i64) -> Result<Vec<Finding>, sqlx::Error> {
        use factledger_projections::table::Cell;
        const CALLBACK: [Column; 4] = [
            int("id"),
            Column {
                name: "payload",
                ty: ColType::Text,
            },
            int("received_at_ms"),
            int("handle_status"),
        ];
        const TXN: [Column; 1] = [Column {
            name: "transaction_no",
            ty: ColType::Text,
        }];
        let mut found = Vec::new();
        let mut after = 0i64;
        loop {
            let page = self
                .db
                .fetch(
                    "SELECT id, normalized_payload, received_at_ms, handle_status \
                     FROM callback_inbox WHERE provider = ? AND id > ? AND verify_status = 1 \
                     AND normalized_payload IS NOT NULL AND duplicate_of IS NULL \
                     AND received_at_ms < ? ORDER BY id LIMIT ?",
                    &[
                        Cell::text(self.gateway.name()),
                        Cell::Int(after),
                        Cell::Int(now_ms - PAYMENT_APPLY_GRACE_MS),
                        Cell::Int(PAYMENTS_PAGE_ROWS),
                    ],
                    &CALLBACK,
                )
                .await?;
            let Some(last) = page.last() else {
                return Ok(found);
            };
            after = last.int("id")?;
            let mut notices = Vec::new();
            for row in &page {
                let payload: crate::callbacks::Normalized =
                    match serde_json::from_str(&row.text("payload")?) {
                        Ok(n) => n,
                        Err(_) => continue,
                    };
                // Not a payment notice (a refund notification, say): not this check's.
                if let Ok(notice) = self.gateway.parse_payment(&payload.data) {
                    notices.push((row.int("id")?, row.int("handle_status")?, notice));
                }
            }
            if notices.is_empty() {
                continue;
            }
            let marks = vec!["?"; notices.len()].join(", ");
            let args: Vec<Cell> = notices
                .iter()
                .map(|(_, _, n)| Cell::text(n.transaction_no.clone()))
                .collect();
            let recorded: std::collections::BTreeSet<String> = self
                .db
                .fetch(
                    &format!(
                        "SELECT transaction_no FROM payment_transactions \
                         WHERE transaction_no IN ({marks})"
                    ),
                    &args,
                    &TXN,
                )
                .await?
                .iter()
                .map(|r| r.text("transaction_no"))
                .collect::<Result<_, _>>()?;
            for (id, status, n) in notices {
                if recorded.contains(&n.transaction_no) {
                    continue;
                }
                let status = crate::callbacks::HandleStatus::from_code(status)
                    .map_or_else(|| status.to_string(), |s| format!("{s:?}").to_uppercase());
                found.push(
                    Finding::new(
                        FindingKind::PaymentNotApplied,
                        "",
                        "callback_inbox",
                        format!("id={id}"),
                        format!(
                            "the gateway's payment {} of {} {} for order {} (callback {id}, \
                             handling {status}) is recorded on no order: the customer paid \
                             and was neither delivered nor refunded; replay the callback \
                             (`factledger callbacks replay-failed --revive`) or refund it",
                            n.transaction_no, n.amount_minor, n.currency, n.order_no
                        ),
                    )
                    .values(
                        Some(json!({"order_no": n.order_no, "transaction_no": n.transaction_no})),
                        None,
                    ),
                );
            }
        }
    }
}

#[async_trait]
impl ExternalCheck for PaymentsApplied {
    fn name(&self) -> &'static str {
        "gateway_payments_applied"
    }

    async fn findings(&self) -> Result<Vec<Finding>, String> {
        self.unapplied(crate::infra::db::now_ms())
            .await
            .map_err(|e| e.to_string())
    }
}
