//! The consistent snapshot and its keyset pages: every table read in wallet order, an
//! in-order index range per page on both backends.

use super::report::*;
use super::rows::*;
use crate::infra::db::Db;
use crate::infra::store::StoredEvent;
use factledger_aggregates::wallet::{Movement, WalletEvent, WALLET_AGGREGATE_TYPE};
use factledger_projections::wallet::{self};
use serde::Deserialize;
use sqlx::{MySql, Sqlite, Transaction};
use std::collections::VecDeque;

/// MariaDB: the session runs READ COMMITTED (see `store::mysql`), where a consistent
/// snapshot lasts one statement; this transaction alone runs REPEATABLE READ.
pub(super) const MYSQL_SNAPSHOT: &str = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ; \
     START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY";

// ---------------------------------------------------------------------------------
// The snapshot and its keyset pages.

/// A query parameter.
#[derive(Clone)]
pub(super) enum Arg {
    Text(String),
    Int(i64),
}

/// One read-only transaction: every read of a run sees the same database state.
pub(super) enum Snapshot {
    Mysql(Transaction<'static, MySql>),
    Sqlite(Transaction<'static, Sqlite>),
}

impl Snapshot {
    pub(super) async fn open(db: &Db) -> Result<Snapshot, sqlx::Error> {
        Ok(match db {
            Db::Mysql(p) => Snapshot::Mysql(p.begin_with(MYSQL_SNAPSHOT).await?),
            // Deferred: the first read below pins the WAL snapshot.
            Db::Sqlite(p) => Snapshot::Sqlite(p.begin().await?),
        })
    }

    /// `events`, read along its stream index. MariaDB would rather range-scan the
    /// primary key for `global_position <= ?` and sort every page (EXPLAIN on small
    /// tables shows it); SQLite's planner takes the stream index by itself.
    pub(super) fn events_table(&self) -> &'static str {
        match self {
            Snapshot::Mysql(_) => "events FORCE INDEX (uq_events_stream)",
            Snapshot::Sqlite(_) => "events",
        }
    }

    pub(super) fn after(&self, columns: &[&str], key: Vec<Arg>) -> (String, Vec<Arg>) {
        keyset_after(matches!(self, Snapshot::Sqlite(_)), columns, key)
    }

    /// The type a `CAST` turns a sum into an integer with (MariaDB sums BIGINTs as
    /// DECIMAL).
    pub(super) fn signed(&self) -> &'static str {
        match self {
            Snapshot::Mysql(_) => "SIGNED",
            Snapshot::Sqlite(_) => "INTEGER",
        }
    }

    /// End the snapshot. It wrote nothing, so this is a rollback.
    pub(super) async fn close(self) -> Result<(), sqlx::Error> {
        match self {
            Snapshot::Mysql(tx) => tx.rollback().await,
            Snapshot::Sqlite(tx) => tx.rollback().await,
        }
    }

    /// The position the live wallet rows reflect (0 when the projection never ran):
    /// the checkpoint's, while its generation is the live set's; the set's own
    /// (`wallet_generation`) when a full rebuild renamed a new set in and the checkpoint
    /// has not adopted it yet (see `crate::runtime::rebuild`).
    pub(super) async fn checkpoint(&mut self) -> Result<i64, ReconcileError> {
        let sql = "SELECT c.position, c.generation, g.generation, g.position \
                   FROM projection_checkpoints c, wallet_generation g \
                   WHERE c.name = ? AND g.id = 1";
        let args = [Arg::Text(wallet::NAME.to_owned())];
        let rows = self
            .fetch(sql, &args, |r| {
                Ok((r.int(0)?, r.int(1)?, r.int(2)?, r.int(3)?))
            })
            .await?;
        Ok(match rows.into_iter().next() {
            None => 0,
            Some((position, ours, live, _)) if ours == live => position,
            Some((_, _, _, live_position)) => live_position,
        })
    }

    pub(super) async fn fetch<T>(
        &mut self,
        sql: &str,
        args: &[Arg],
        decode: fn(&dyn Cols) -> Result<T, sqlx::Error>,
    ) -> Result<Vec<T>, sqlx::Error> {
        macro_rules! run {
            ($tx:expr, $text:expr) => {{
                let mut q = sqlx::query(sql);
                for a in args {
                    q = match a {
                        Arg::Text(s) => q.bind($text(s)),
                        Arg::Int(i) => q.bind(*i),
                    };
                }
                q.fetch_all(&mut **$tx)
                    .await?
                    .iter()
                    .map(|r| decode(r))
                    .collect()
            }};
        }
        match self {
            // Text as bytes: MariaDB then compares with the `_bin` columns as they are
            // and walks the index in order; a utf8mb4_unicode_ci string parameter makes
            // it sort every page (EXPLAIN: "Using filesort").
            Snapshot::Mysql(tx) => run!(tx, String::as_bytes),
            // SQLite compares a blob as greater than any text: bind text.
            Snapshot::Sqlite(tx) => run!(tx, String::as_str),
        }
    }
}

/// Keyset paging: "after `key` in the order of `columns`" (an index's columns), and
/// its parameters. Each backend plans a different spelling as an index range: SQLite
/// a row value (an OR of column conditions it scans from the start of the index,
/// every page), MariaDB the OR (a row value it scans from the start).
pub(super) fn keyset_after(row_value: bool, columns: &[&str], key: Vec<Arg>) -> (String, Vec<Arg>) {
    debug_assert_eq!(columns.len(), key.len());
    if row_value {
        let marks = vec!["?"; columns.len()].join(", ");
        return (format!("({}) > ({marks})", columns.join(", ")), key);
    }
    // c1 > ? OR (c1 = ? AND (c2 > ? OR (c2 = ? AND …))), built inside out.
    let mut pairs = columns.iter().zip(key).rev();
    let Some((last, v)) = pairs.next() else {
        return ("TRUE".into(), Vec::new());
    };
    let (mut sql, mut args) = (format!("{last} > ?"), vec![v]);
    for (c, v) in pairs {
        sql = format!("({c} > ? OR ({c} = ? AND {sql}))");
        args.splice(0..0, [v.clone(), v]);
    }
    (sql, args)
}

/// The wallet movements whose ledger key matches `filter` (SQL with `?`, bound to
/// `filter_args`) up to `up_to`, in ledger-key order (the unique ledger index), page
/// by page. An undecodable wallet event is skipped: it is the wallet pass's finding.
pub(super) async fn ledger_movements(
    snap: &mut Snapshot,
    filter: &str,
    filter_args: &[Arg],
    up_to: i64,
    page_rows: i64,
    mut each: impl FnMut(&StoredEvent, &Movement),
) -> Result<(), ReconcileError> {
    const KEY: [&str; 3] = ["ledger_ref_type", "ledger_ref_id", "ledger_entry_type"];
    let page_rows = page_rows.clamp(1, PAGE_ROWS_MAX);
    let mut after: Option<(String, String, String)> = None;
    loop {
        let mut conditions = vec![
            filter.to_owned(),
            "aggregate_type = ?".into(),
            "global_position <= ?".into(),
        ];
        let mut args = filter_args.to_vec();
        args.extend([Arg::Text(WALLET_AGGREGATE_TYPE.to_owned()), Arg::Int(up_to)]);
        if let Some((t, id, entry)) = &after {
            let key = vec![
                Arg::Text(t.clone()),
                Arg::Text(id.clone()),
                Arg::Text(entry.clone()),
            ];
            let (cond, key) = snap.after(&KEY, key);
            conditions.push(cond);
            args.extend(key);
        }
        let sql = page_sql(
            &format!("SELECT {EVENT_COLUMNS} FROM events"),
            &conditions,
            &KEY.join(", "),
            page_rows,
        );
        let rows =
            snap.fetch(&sql, &args, event_row)
                .await
                .map_err(|source| ReconcileError::Row {
                    table: "events",
                    after: format!("{after:?}"),
                    source,
                })?;
        let full = rows.len() as i64 == page_rows;
        for row in rows {
            let Some(key) = row.ledger_ref else {
                continue;
            };
            after = Some(key);
            let Ok((_, payload)) = row.event.current_payload() else {
                continue;
            };
            let Ok(event) = WalletEvent::deserialize(&payload) else {
                continue;
            };
            if let Some(m) = event.as_movement() {
                each(&row.event, m);
            }
        }
        if !full {
            return Ok(());
        }
    }
}

/// `SELECT … WHERE <conditions> ORDER BY … LIMIT <rows>`. The limit is a literal,
/// not a parameter: in a MariaDB prepared statement with `LIMIT ?` (and string
/// parameters) the server read the rest of the range and sorted it for a page
/// (500,000 rows read for a page of 5,000); with the literal it read 5,000.
pub(super) fn page_sql(select: &str, conditions: &[String], order: &str, rows: i64) -> String {
    let filter = if conditions.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", conditions.join(" AND "))
    };
    format!("{select}{filter} ORDER BY {order} LIMIT {rows}")
}

/// A row in a wallet-ordered table.
pub(super) trait Keyed {
    /// Where the next page starts after this row.
    type Key: std::fmt::Debug;
    fn key(&self) -> Self::Key;
    fn wallet(&self) -> &str;
}

impl Keyed for EventRow {
    type Key = (String, i64);
    fn key(&self) -> Self::Key {
        (self.event.aggregate_id.clone(), self.event.sequence)
    }
    fn wallet(&self) -> &str {
        &self.event.aggregate_id
    }
}

impl Keyed for BalanceRecord {
    type Key = String;
    fn key(&self) -> Self::Key {
        self.wallet_id.clone()
    }
    fn wallet(&self) -> &str {
        &self.wallet_id
    }
}

impl Keyed for LedgerRecord {
    type Key = (String, i64);
    fn key(&self) -> Self::Key {
        (self.wallet_id.clone(), self.sequence)
    }
    fn wallet(&self) -> &str {
        &self.wallet_id
    }
}

impl Keyed for BlockRecord {
    type Key = (String, String, String);
    fn key(&self) -> Self::Key {
        (
            self.wallet_id.clone(),
            self.ref_type.clone(),
            self.ref_id.clone(),
        )
    }
    fn wallet(&self) -> &str {
        &self.wallet_id
    }
}

/// The current page of one table, and where the next one starts.
pub(super) struct Page<T: Keyed> {
    pub(super) rows: VecDeque<T>,
    pub(super) after: Option<T::Key>,
    pub(super) done: bool,
}

impl<T: Keyed> Page<T> {
    pub(super) fn new() -> Self {
        Page {
            rows: VecDeque::new(),
            after: None,
            done: false,
        }
    }

    pub(super) fn wants_rows(&self) -> bool {
        self.rows.is_empty() && !self.done
    }

    pub(super) fn refill(&mut self, rows: Vec<T>, page_rows: i64) {
        self.done = (rows.len() as i64) < page_rows;
        if let Some(last) = rows.last() {
            self.after = Some(last.key());
        }
        self.rows.extend(rows);
    }

    pub(super) fn front_wallet(&self) -> Option<&str> {
        self.rows.front().map(Keyed::wallet)
    }

    /// The next row, if it belongs to `wallet`.
    pub(super) fn pop_for(&mut self, wallet: &str) -> Option<T> {
        if self.front_wallet() == Some(wallet) {
            self.rows.pop_front()
        } else {
            None
        }
    }

    pub(super) fn row_error(&self, table: &'static str, source: sqlx::Error) -> ReconcileError {
        ReconcileError::Row {
            table,
            after: format!("{:?}", self.after),
            source,
        }
    }
}

/// The four tables, read side by side in wallet order within one snapshot.
pub(super) struct Pages<'s> {
    pub(super) snap: &'s mut Snapshot,
    /// Only this wallet (the re-check after a repair), or every wallet.
    pub(super) scope: Option<&'s str>,
    pub(super) up_to: i64,
    pub(super) page_rows: i64,
    pub(super) events: Page<EventRow>,
    pub(super) balances: Page<BalanceRecord>,
    pub(super) ledger: Page<LedgerRecord>,
    pub(super) blocks: Page<BlockRecord>,
}

impl<'s> Pages<'s> {
    pub(super) fn new(
        snap: &'s mut Snapshot,
        scope: Option<&'s str>,
        up_to: i64,
        page_rows: i64,
    ) -> Self {
        Pages {
            snap,
            scope,
            up_to,
            page_rows: page_rows.clamp(1, PAGE_ROWS_MAX),
            events: Page::new(),
            balances: Page::new(),
            ledger: Page::new(),
            blocks: Page::new(),
        }
    }

    /// Read the next page of every table whose page is used up. Each query walks its
    /// primary or unique index from where the last page ended.
    pub(super) async fn fill(&mut self) -> Result<(), ReconcileError> {
        if self.events.wants_rows() {
            let mut conditions = vec![
                "aggregate_type = ?".to_owned(),
                "global_position <= ?".into(),
            ];
            let mut args = vec![
                Arg::Text(WALLET_AGGREGATE_TYPE.to_owned()),
                Arg::Int(self.up_to),
            ];
            if let Some(w) = self.scope {
                conditions.push("aggregate_id = ?".into());
                args.push(Arg::Text(w.to_owned()));
            }
            if let Some((id, sequence)) = &self.events.after {
                let key = [Arg::Text(id.clone()), Arg::Int(*sequence)];
                let (after, key) = self.snap.after(&["aggregate_id", "sequence"], key.into());
                conditions.push(after);
                args.extend(key);
            }
            let select = format!("SELECT {EVENT_COLUMNS} FROM {}", self.snap.events_table());
            let order = "aggregate_type, aggregate_id, sequence";
            let sql = page_sql(&select, &conditions, order, self.page_rows);
            let rows = self.snap.fetch(&sql, &args, event_row).await;
            let rows = rows.map_err(|e| self.events.row_error("events", e))?;
            self.events.refill(rows, self.page_rows);
        }
        if self.balances.wants_rows() {
            let (mut conditions, mut args) = scoped(self.scope);
            if let Some(id) = &self.balances.after {
                let (after, key) = self.snap.after(&["wallet_id"], vec![Arg::Text(id.clone())]);
                conditions.push(after);
                args.extend(key);
            }
            let sql = page_sql(BALANCE_SELECT, &conditions, "wallet_id", self.page_rows);
            let rows = self.snap.fetch(&sql, &args, balance_row).await;
            let rows = rows.map_err(|e| self.balances.row_error("wallet_balances", e))?;
            self.balances.refill(rows, self.page_rows);
        }
        if self.ledger.wants_rows() {
            let (mut conditions, mut args) = scoped(self.scope);
            if let Some((id, sequence)) = &self.ledger.after {
                let key = [Arg::Text(id.clone()), Arg::Int(*sequence)];
                let (after, key) = self.snap.after(&["wallet_id", "sequence"], key.into());
                conditions.push(after);
                args.extend(key);
            }
            let sql = page_sql(
                LEDGER_SELECT,
                &conditions,
                "wallet_id, sequence",
                self.page_rows,
            );
            let rows = self.snap.fetch(&sql, &args, ledger_row).await;
            let rows = rows.map_err(|e| self.ledger.row_error("wallet_ledger", e))?;
            self.ledger.refill(rows, self.page_rows);
        }
        if self.blocks.wants_rows() {
            let (mut conditions, mut args) = scoped(self.scope);
            if let Some((id, ref_type, ref_id)) = &self.blocks.after {
                let key = [
                    Arg::Text(id.clone()),
                    Arg::Text(ref_type.clone()),
                    Arg::Text(ref_id.clone()),
                ];
                let columns = ["wallet_id", "ref_type", "ref_id"];
                let (after, key) = self.snap.after(&columns, key.into());
                conditions.push(after);
                args.extend(key);
            }
            let sql = page_sql(
                BLOCK_SELECT,
                &conditions,
                "wallet_id, ref_type, ref_id",
                self.page_rows,
            );
            let rows = self.snap.fetch(&sql, &args, block_row).await;
            let rows = rows.map_err(|e| self.blocks.row_error("wallet_blocks", e))?;
            self.blocks.refill(rows, self.page_rows);
        }
        Ok(())
    }

    /// The lowest wallet id at the front of any table: the next wallet to check.
    pub(super) fn next_wallet(&self) -> Option<String> {
        [
            self.events.front_wallet(),
            self.balances.front_wallet(),
            self.ledger.front_wallet(),
            self.blocks.front_wallet(),
        ]
        .into_iter()
        .flatten()
        .min()
        .map(str::to_owned)
    }
}

/// The condition (and parameter) restricting a projection table to the scope.
pub(super) fn scoped(scope: Option<&str>) -> (Vec<String>, Vec<Arg>) {
    match scope {
        Some(w) => (vec!["wallet_id = ?".into()], vec![Arg::Text(w.to_owned())]),
        None => (Vec::new(), Vec::new()),
    }
}
