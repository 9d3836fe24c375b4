//! A batch of wallet rows written in as few statements as the backend allows: the
//! balance rows coalesced per wallet (the last state of the batch wins), the ledger
//! rows in multi-row INSERTs, the block changes in event order. MariaDB gets one text
//! script per batch ([`write_rows_mysql`]); SQLite, in-process, a statement per
//! coalesced balance row ([`upsert_balance_sqlite`]) and per other row. The live
//! projection and a full rebuild's shadow tables share it (`suffix`).

use crate::infra::store::mysql::lit;
use factledger_aggregates::wallet::Buckets;
use factledger_projections::wallet::{LedgerRow, WalletRow};
use sqlx::{MySqlConnection, SqliteConnection};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Ledger rows per INSERT statement on MariaDB.
pub(crate) const ROWS_PER_INSERT: usize = 1_000;

/// A batch's balance-row changes coalesced per wallet (the last state wins), its
/// ledger rows, and its block changes in event order: what MariaDB writes in
/// multi-row statements.
#[derive(Debug, Default)]
pub(crate) struct Coalesced<'a> {
    pub(crate) balances: BTreeMap<&'a str, BalanceChange<'a>>,
    pub(crate) ledger: Vec<&'a LedgerRow>,
    pub(crate) blocks: Vec<&'a WalletRow>,
}

#[derive(Debug)]
pub(crate) struct BalanceChange<'a> {
    /// `(user_id, currency)` when the wallet was opened in this batch.
    pub(crate) opened: Option<(&'a str, &'a str)>,
    pub(crate) balances: Option<Buckets>,
    pub(crate) version: i64,
    pub(crate) last_position: i64,
}

impl<'a> Coalesced<'a> {
    pub(crate) fn of(rows: &'a [WalletRow]) -> Self {
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

    pub(crate) fn touch(
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

/// MariaDB: a batch's rows as one script of multi-row statements with escaped
/// literals, sent as text in one round trip (no statement to prepare: each is used
/// once), into the live tables (`suffix` "") or a rebuild's shadow tables.
pub(crate) async fn write_rows_mysql(
    c: &mut MySqlConnection,
    rows: &[WalletRow],
    suffix: &str,
) -> Result<(), sqlx::Error> {
    let b = Coalesced::of(rows);
    let mut script = String::with_capacity(b.ledger.len() * 320 + 1024);
    mysql_balances(&mut script, &b, suffix);
    mysql_ledger(&mut script, &b, suffix);
    mysql_blocks(&mut script, &b, suffix);
    if !script.is_empty() {
        run_script(c, &script).await?;
    }
    Ok(())
}

/// The balance rows of a batch: new wallets inserted, moved ones updated, touched
/// ones (a block only) with their version and position.
fn mysql_balances(script: &mut String, b: &Coalesced<'_>, suffix: &str) {
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
    let t = format!("wallet_balances{suffix}");
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
fn mysql_ledger(script: &mut String, b: &Coalesced<'_>, suffix: &str) {
    for chunk in b.ledger.chunks(ROWS_PER_INSERT) {
        let _ = write!(
            script,
            "INSERT INTO wallet_ledger{suffix} ({LEDGER_COLUMNS}) VALUES "
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
fn mysql_blocks(script: &mut String, b: &Coalesced<'_>, suffix: &str) {
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
                    "INSERT INTO wallet_blocks{suffix} (wallet_id, ref_type, ref_id, reason) \
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
                    "DELETE FROM wallet_blocks{suffix} \
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
pub(crate) fn run_script<'c>(
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

pub(crate) const LEDGER_COLUMNS: &str = "wallet_id, sequence, global_position, ref_type, ref_id, \
     entry_type, amount_minor, delta_pending_minor, delta_available_minor, delta_frozen_minor, \
     delta_risk_hold_minor, before_pending_minor, before_available_minor, before_frozen_minor, \
     before_risk_hold_minor, after_pending_minor, after_available_minor, after_frozen_minor, \
     after_risk_hold_minor, recorded_at";

/// Insert or update a balance row (of the live tables, `suffix` "", or a rebuild's)
/// with a batch's last state of the wallet.
pub(crate) async fn upsert_balance_sqlite(
    c: &mut SqliteConnection,
    wallet_id: &str,
    ch: &BalanceChange<'_>,
    suffix: &str,
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
        "INSERT INTO wallet_balances{suffix} (wallet_id, user_id, currency, pending_minor, \
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
