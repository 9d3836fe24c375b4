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
