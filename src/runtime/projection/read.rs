//! Reads of the wallet projection: a wallet's balance and blocks, its ledger, and the
//! bounded wait for a minimum position.

use super::runner::*;
use super::write::*;
use crate::infra::db::Db;
use factledger_projections::wallet::{self};
use sqlx::MySqlPool;

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

pub(super) type BalanceRow = (String, String, i64, i64, i64, i64, i64);
pub(super) type LedgerTuple = (
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
        self.ledger_page(wallet_id, LedgerFrom::After(after_sequence), limit)
            .await
    }

    /// Ledger rows of a wallet, at most `limit`, in sequence order: the first after a
    /// sequence, or the last before one (reading back from the newest).
    pub async fn ledger_page(
        &self,
        wallet_id: &str,
        from: LedgerFrom,
        limit: i64,
    ) -> Result<Vec<LedgerEntry>, RunnerError> {
        use sqlx::Row;
        let (sequence, range) = match from {
            LedgerFrom::After(s) => (s, "sequence > ? ORDER BY sequence"),
            LedgerFrom::Before(s) => (s, "sequence < ? ORDER BY sequence DESC"),
        };
        let sql = format!(
            "SELECT sequence, global_position, ref_type, ref_id, entry_type, amount_minor, \
             delta_pending_minor, delta_available_minor, delta_frozen_minor, \
             delta_risk_hold_minor, after_pending_minor, after_available_minor, \
             after_frozen_minor, after_risk_hold_minor, recorded_at FROM wallet_ledger \
             WHERE wallet_id = ? AND {range} LIMIT ?"
        );
        macro_rules! rows {
            ($p:expr, $text:expr) => {{
                sqlx::query(&sql)
                    .bind(wallet_id)
                    .bind(sequence)
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
        let mut tuples: Vec<LedgerTuple> = match self {
            Db::Mysql(p) => rows!(p, crate::infra::store::mysql::text),
            Db::Sqlite(p) => rows!(p, |r: &sqlx::sqlite::SqliteRow, i: usize| r
                .try_get::<String, _>(i)),
        };
        if matches!(from, LedgerFrom::Before(_)) {
            tuples.reverse();
        }
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

pub(super) async fn fetch_balance_mysql(
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

pub(super) async fn fetch_blocks_mysql(
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

/// Where a page of a wallet's ledger starts (`Db::ledger_page`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LedgerFrom {
    /// The lines with a greater sequence, oldest first.
    After(i64),
    /// The lines with a smaller sequence, the newest of them (still in sequence order).
    Before(i64),
}
