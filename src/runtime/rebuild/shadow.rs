//! Writing a full rebuild's batches into the shadow tables: rows coalesced per batch,
//! one multi-row script on MariaDB, a statement per row on SQLite.

use super::lease::*;
use super::model::*;
use crate::infra::db::Db;
use crate::infra::store::mysql::lit;
use crate::runtime::projection::{now, write_wallet_rows};
use factledger_aggregates::wallet::Buckets;
use factledger_projections::wallet::{self, LedgerRow, WalletRow};
use sqlx::{MySqlConnection, SqliteConnection};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The row changes of a run of events.
#[derive(Debug, Default)]
pub(super) struct ShadowBatch {
    pub(super) events: i64,
    pub(super) last_position: i64,
    pub(super) rows: Vec<WalletRow>,
}

/// A batch's balance-row changes coalesced per wallet (the last state wins), its
/// ledger rows, and its block changes in event order: what MariaDB writes in
/// multi-row statements.
#[derive(Debug, Default)]
pub(super) struct Coalesced<'a> {
    pub(super) balances: BTreeMap<&'a str, BalanceChange<'a>>,
    pub(super) ledger: Vec<&'a LedgerRow>,
    pub(super) blocks: Vec<&'a WalletRow>,
}

#[derive(Debug)]
pub(super) struct BalanceChange<'a> {
    /// `(user_id, currency)` when the wallet was opened in this batch.
    pub(super) opened: Option<(&'a str, &'a str)>,
    pub(super) balances: Option<Buckets>,
    pub(super) version: i64,
    pub(super) last_position: i64,
}

impl<'a> Coalesced<'a> {
    pub(super) fn of(rows: &'a [WalletRow]) -> Self {
        let mut c = Coalesced::default();
        for row in rows {
            match row {
                WalletRow::Opened {
                    wallet_id,
                    user_id,
                    currency,
                    version,
                    last_position,
                } => {
                    c.balances.insert(
                        wallet_id,
                        BalanceChange {
                            opened: Some((user_id, currency)),
                            balances: Some(Buckets::default()),
                            version: *version,
                            last_position: *last_position,
                        },
                    );
                }
                WalletRow::Balances {
                    wallet_id,
                    balances,
                    version,
                    last_position,
                } => {
                    c.touch(wallet_id, *version, *last_position).balances = Some(*balances);
                }
                WalletRow::Version {
                    wallet_id,
                    version,
                    last_position,
                } => {
                    c.touch(wallet_id, *version, *last_position);
                }
                WalletRow::Ledger(l) => c.ledger.push(l),
                b @ (WalletRow::Blocked { .. } | WalletRow::Unblocked { .. }) => c.blocks.push(b),
            }
        }
        c
    }

    pub(super) fn touch(
        &mut self,
        wallet_id: &'a str,
        version: i64,
        last_position: i64,
    ) -> &mut BalanceChange<'a> {
        let c = self.balances.entry(wallet_id).or_insert(BalanceChange {
            opened: None,
            balances: None,
            version,
            last_position,
        });
        c.version = version;
        c.last_position = last_position;
        c
    }
}

/// Write one batch into the shadow tables, renewing the lease, in one transaction.
pub(super) async fn write_shadow(
    db: &Db,
    id: &str,
    stage: &str,
    b: &ShadowBatch,
    applied: i64,
) -> Result<(), RebuildError> {
    match db {
        Db::Mysql(p) => {
            let mut tx = p.begin().await?;
            renew!(tx, id);
            record_progress!(tx, id, stage, b.last_position, applied);
            write_shadow_mysql(&mut tx, b).await?;
            tx.commit().await?;
        }
        Db::Sqlite(p) => {
            let mut tx = p.begin_with("BEGIN IMMEDIATE").await?;
            renew!(tx, id);
            record_progress!(tx, id, stage, b.last_position, applied);
            // In-process, a statement per row costs no round trip; but a balance row
            // is written once per batch (its last state), not once per movement.
            let coalesced = Coalesced::of(&b.rows);
            for (wallet_id, ch) in &coalesced.balances {
                upsert_balance_sqlite(&mut tx, wallet_id, ch).await?;
            }
            let others = b.rows.iter().filter(|r| {
                !matches!(
                    r,
                    WalletRow::Opened { .. }
                        | WalletRow::Balances { .. }
                        | WalletRow::Version { .. }
                )
            });
            write_wallet_rows!(tx, others, SHADOW);
            tx.commit().await?;
        }
    }
    Ok(())
}

/// MariaDB: one script of multi-row statements with escaped literals, sent as text
/// in one round trip (no statement to prepare: each is used once).
pub(super) async fn write_shadow_mysql(
    c: &mut MySqlConnection,
    b: &ShadowBatch,
) -> Result<(), sqlx::Error> {
    let b = Coalesced::of(&b.rows);
    let mut script = String::with_capacity(b.ledger.len() * 320 + 1024);
    mysql_balances(&mut script, &b);
    mysql_ledger(&mut script, &b);
    mysql_blocks(&mut script, &b);
    if !script.is_empty() {
        run_script(c, &script).await?;
    }
    Ok(())
}

/// The balance rows of a batch: new wallets inserted, moved ones updated, touched
/// ones (a block only) with their version and position.
fn mysql_balances(script: &mut String, b: &Coalesced<'_>) {
    let balance_columns = "wallet_id, user_id, currency, pending_minor, available_minor, \
                           frozen_minor, risk_hold_minor, version, last_position";
    let mut opened = String::new();
    let mut moved = String::new();
    let mut touched = String::new();
    for (wallet_id, ch) in &b.balances {
        let z = Buckets::default();
        let v = ch.balances.as_ref().unwrap_or(&z);
        let (user_id, currency) = match &ch.opened {
            Some((u, c)) => (lit(u), lit(c)),
            None => ("''".to_owned(), "''".to_owned()),
        };
        let target = match (&ch.opened, &ch.balances) {
            (Some(_), _) => &mut opened,
            (None, Some(_)) => &mut moved,
            (None, None) => &mut touched,
        };
        if !target.is_empty() {
            target.push(',');
        }
        let _ = write!(
            target,
            "({},{user_id},{currency},{},{},{},{},{},{})",
            lit(wallet_id),
            v.pending_minor,
            v.available_minor,
            v.frozen_minor,
            v.risk_hold_minor,
            ch.version,
            ch.last_position
        );
    }
    let t = format!("wallet_balances{SHADOW}");
    if !opened.is_empty() {
        let _ = writeln!(
            script,
            "INSERT INTO {t} ({balance_columns}) VALUES {opened};"
        );
    }
    // The rows exist (a wallet's first event opens it); the insert half never applies
    // to a well-formed log, only the update half.
    if !moved.is_empty() {
        let _ = writeln!(
            script,
            "INSERT INTO {t} ({balance_columns}) VALUES {moved} ON DUPLICATE KEY UPDATE \
             pending_minor = VALUES(pending_minor), available_minor = VALUES(available_minor), \
             frozen_minor = VALUES(frozen_minor), risk_hold_minor = VALUES(risk_hold_minor), \
             version = VALUES(version), last_position = VALUES(last_position);"
        );
    }
    if !touched.is_empty() {
        let _ = writeln!(
            script,
            "INSERT INTO {t} ({balance_columns}) VALUES {touched} ON DUPLICATE KEY UPDATE \
             version = VALUES(version), last_position = VALUES(last_position);"
        );
    }
}

/// The ledger rows of a batch, in multi-row inserts.
fn mysql_ledger(script: &mut String, b: &Coalesced<'_>) {
    for chunk in b.ledger.chunks(MYSQL_ROWS_PER_INSERT) {
        let _ = write!(
            script,
            "INSERT INTO wallet_ledger{SHADOW} ({LEDGER_COLUMNS}) VALUES "
        );
        for (i, l) in chunk.iter().enumerate() {
            if i > 0 {
                script.push(',');
            }
            let (d, bf, af) = (&l.delta, &l.before, &l.after);
            let _ = write!(
                script,
                "({},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{})",
                lit(&l.wallet_id),
                l.sequence,
                l.global_position,
                lit(&l.ref_type),
                lit(&l.ref_id),
                lit(l.entry_type),
                l.amount_minor,
                d.pending_minor,
                d.available_minor,
                d.frozen_minor,
                d.risk_hold_minor,
                bf.pending_minor,
                bf.available_minor,
                bf.frozen_minor,
                bf.risk_hold_minor,
                af.pending_minor,
                af.available_minor,
                af.frozen_minor,
                af.risk_hold_minor,
                lit(&l.recorded_at)
            );
        }
        script.push_str(";\n");
    }
}

/// The block rows of a batch: inserted and deleted in order.
fn mysql_blocks(script: &mut String, b: &Coalesced<'_>) {
    for row in &b.blocks {
        match row {
            WalletRow::Blocked {
                wallet_id,
                ref_type,
                ref_id,
                reason,
            } => {
                let _ = writeln!(
                    script,
                    "INSERT INTO wallet_blocks{SHADOW} (wallet_id, ref_type, ref_id, reason) \
                     VALUES ({}, {}, {}, {});",
                    lit(wallet_id),
                    lit(ref_type),
                    lit(ref_id),
                    reason.as_deref().map_or_else(|| "NULL".to_owned(), lit)
                );
            }
            WalletRow::Unblocked {
                wallet_id,
                ref_type,
                ref_id,
            } => {
                let _ = writeln!(
                    script,
                    "DELETE FROM wallet_blocks{SHADOW} \
                     WHERE wallet_id = {} AND ref_type = {} AND ref_id = {};",
                    lit(wallet_id),
                    lit(ref_type),
                    lit(ref_id)
                );
            }
            _ => {}
        }
    }
}

/// A text-protocol script on one connection. Boxed: the executor's higher-ranked
/// lifetimes otherwise keep the caller's future from being `Send`.
pub(super) fn run_script<'c>(
    c: &'c mut MySqlConnection,
    script: &'c str,
) -> futures::future::BoxFuture<'c, Result<(), sqlx::Error>> {
    Box::pin(async move {
        use futures::TryStreamExt;
        let mut results = sqlx::raw_sql(script).fetch_many(c);
        while results.try_next().await?.is_some() {}
        Ok(())
    })
}

pub(super) const LEDGER_COLUMNS: &str = "wallet_id, sequence, global_position, ref_type, ref_id, \
     entry_type, amount_minor, delta_pending_minor, delta_available_minor, delta_frozen_minor, \
     delta_risk_hold_minor, before_pending_minor, before_available_minor, before_frozen_minor, \
     before_risk_hold_minor, after_pending_minor, after_available_minor, after_frozen_minor, \
     after_risk_hold_minor, recorded_at";

/// Insert or update a shadow balance row with a batch's last state of the wallet.
pub(super) async fn upsert_balance_sqlite(
    c: &mut SqliteConnection,
    wallet_id: &str,
    ch: &BalanceChange<'_>,
) -> Result<(), sqlx::Error> {
    let z = Buckets::default();
    let v = ch.balances.as_ref().unwrap_or(&z);
    let (user_id, currency) = ch.opened.unwrap_or_default();
    // Only the version moved (a block): keep the stored buckets.
    let set = match (&ch.opened, &ch.balances) {
        (None, None) => "version = excluded.version, last_position = excluded.last_position",
        _ => {
            "pending_minor = excluded.pending_minor, available_minor = excluded.available_minor, \
             frozen_minor = excluded.frozen_minor, risk_hold_minor = excluded.risk_hold_minor, \
             version = excluded.version, last_position = excluded.last_position"
        }
    };
    sqlx::query(&format!(
        "INSERT INTO wallet_balances{SHADOW} (wallet_id, user_id, currency, pending_minor, \
         available_minor, frozen_minor, risk_hold_minor, version, last_position) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (wallet_id) DO UPDATE SET {set}"
    ))
    .bind(wallet_id)
    .bind(user_id)
    .bind(currency)
    .bind(v.pending_minor)
    .bind(v.available_minor)
    .bind(v.frozen_minor)
    .bind(v.risk_hold_minor)
    .bind(ch.version)
    .bind(ch.last_position)
    .execute(&mut *c)
    .await?;
    Ok(())
}
