//! Writing a batch's fact ops with few statements (issue 19 item 6): the `Put`s of
//! one fact table are held back and sent as ONE multi-row
//! `REPLACE INTO t (…) VALUES (…), (…), …`, and the `fi_customer_bill_partner` rows
//! that partner bill puts ensure as ONE multi-row upsert, instead of a statement (or
//! two) per op.
//!
//! The order of effects is the one-op-at-a-time order wherever it can be seen:
//! - rows of one table are sent in op order, and a multi-row `REPLACE` (like the
//!   upsert) applies its rows in order on both backends, so a later row with the same
//!   key wins, as it did statement by statement;
//! - a `Set` first sends the held puts of its table (an `UPDATE` reads and writes only
//!   its own table: the fact tables have no triggers or foreign keys), so it sees every
//!   earlier put;
//! - the caller [`FactWriter::flush`]es everything before any read (touch resolution,
//!   recomputation) and at the end of the batch, so nothing reads a table with rows
//!   held back.
//!
//! Puts into different tables commute, so a run of one table is not cut by puts into
//! another (a batch interleaves small bills, diffs and partner bills station by
//! station). A statement holds at most [`ROWS_MAX`] rows and [`VALUES_MAX`] bound
//! values.
//!
//! Errors: every error that names an event (a row missing a column, a partner bill
//! without its identity, a `Set` without its row) is found per op, with the op's own
//! position, before anything is held back; the held rows are sent first, so a database
//! error of an earlier op still comes first, as it did. A failed multi-row statement
//! is a database error, as a failed single-row one was (the batch rolls back and the
//! runner retries); it is logged with the positions of its rows. It is not re-run row
//! by row: after a deadlock MariaDB has rolled the whole transaction back, and later
//! statements would commit on their own.

use super::{bad, ordered, Step};
use crate::infra::db::Tx;
use factledger_projections::bill::fold::{self, FactOp};
use factledger_projections::bill::tables::{CUSTOMER_BILL_PARTNER, PARTNER_BILLS};
use factledger_projections::table::{Cell, MemRow, TableDef};
use std::collections::HashSet;

/// Bound values per statement at most: SQLite's limit (MariaDB's is 65,535).
pub(super) const VALUES_MAX: usize = 32_766;
/// Rows per multi-row statement at most.
pub(super) const ROWS_MAX: usize = 1_000;

/// Rows of `columns` values one statement holds at most.
pub(super) fn rows_max(columns: usize) -> usize {
    (VALUES_MAX / columns.max(1)).clamp(1, ROWS_MAX)
}

/// `(?, …, ?)` repeated `rows` times.
fn value_lists(columns: usize, rows: usize) -> String {
    let one = format!("({})", vec!["?"; columns].join(", "));
    vec![one; rows].join(", ")
}

/// Held puts of one fact table, values in its column order, row after row.
struct Run {
    table: &'static TableDef,
    values: Vec<Cell>,
    rows: usize,
    /// Positions of its first and last row.
    first: i64,
    last: i64,
}

/// Held `fi_customer_bill_partner` rows: `id` and a partner bill's identity columns.
struct Partners {
    names: Vec<&'static str>,
    rows: Vec<(i64, Vec<Cell>)>,
    first: i64,
    last: i64,
}

/// Writes fact ops, holding back puts until something must see them.
#[derive(Default)]
pub(super) struct FactWriter {
    runs: Vec<Run>,
    partners: Option<Partners>,
    /// Fact ops written.
    pub(super) ops: u64,
    /// Statements sent for them.
    pub(super) statements: u64,
}

impl FactWriter {
    /// Write one fact op of the event at `position` (a put may be held back).
    pub(super) async fn write(
        &mut self,
        tx: &mut Tx,
        op: &FactOp,
        position: i64,
    ) -> Result<(), Step> {
        self.ops += 1;
        match op {
            FactOp::Put { table, row } => {
                let values = match ordered(table, row) {
                    Ok(values) => values,
                    Err(reason) => return self.fail(tx, position, reason).await,
                };
                self.put(tx, table, values, position).await?;
                if table.name == PARTNER_BILLS.name {
                    let row: MemRow = row.iter().cloned().collect();
                    match fold::partner_bill_identity(&row) {
                        Ok((id, identity)) => self.ensure(tx, id, identity, position).await?,
                        Err(reason) => return self.fail(tx, position, reason).await,
                    }
                }
                Ok(())
            }
            FactOp::Set { table, key, set } => {
                self.flush_table(tx, table.name).await?;
                self.statements += 1;
                match update(tx, table, key, set, position).await {
                    Err(Step::Event { position, reason }) => self.fail(tx, position, reason).await,
                    other => other,
                }
            }
        }
    }

    /// Send every held row.
    pub(super) async fn flush(&mut self, tx: &mut Tx) -> Result<(), Step> {
        for run in std::mem::take(&mut self.runs) {
            self.send(tx, run).await?;
        }
        if let Some(partners) = self.partners.take() {
            self.send_partners(tx, partners).await?;
        }
        Ok(())
    }

    /// The error of the event at `position`, after sending what earlier ops hold
    /// back (their database error first, as when each op was its own statement).
    async fn fail(&mut self, tx: &mut Tx, position: i64, reason: String) -> Result<(), Step> {
        self.flush(tx).await?;
        Err(bad(position)(reason))
    }

    async fn put(
        &mut self,
        tx: &mut Tx,
        table: &'static TableDef,
        values: Vec<Cell>,
        position: i64,
    ) -> Result<(), Step> {
        let i = match self.runs.iter().position(|r| r.table.name == table.name) {
            Some(i) => i,
            None => {
                self.runs.push(Run {
                    table,
                    values: Vec::new(),
                    rows: 0,
                    first: position,
                    last: position,
                });
                self.runs.len() - 1
            }
        };
        let run = &mut self.runs[i];
        run.values.extend(values);
        run.rows += 1;
        run.last = position;
        if run.rows >= rows_max(table.columns.len()) {
            let run = self.runs.remove(i);
            self.send(tx, run).await?;
        }
        Ok(())
    }

    /// Send the held rows of `table` (before a statement on it).
    async fn flush_table(&mut self, tx: &mut Tx, table: &str) -> Result<(), Step> {
        if table == CUSTOMER_BILL_PARTNER.name {
            if let Some(partners) = self.partners.take() {
                self.send_partners(tx, partners).await?;
            }
        } else if let Some(i) = self.runs.iter().position(|r| r.table.name == table) {
            let run = self.runs.remove(i);
            self.send(tx, run).await?;
        }
        Ok(())
    }

    async fn send(&mut self, tx: &mut Tx, run: Run) -> Result<(), Step> {
        let names: Vec<&str> = run.table.columns.iter().map(|c| c.name).collect();
        let sql = format!(
            "REPLACE INTO {} ({}) VALUES {}",
            run.table.name,
            names.join(", "),
            value_lists(names.len(), run.rows)
        );
        self.statements += 1;
        if let Err(e) = tx.exec(&sql, &run.values).await {
            tracing::warn!(
                table = run.table.name,
                rows = run.rows,
                first_position = run.first,
                last_position = run.last,
                error = %e,
                "bill facts: a multi-row REPLACE failed"
            );
            return Err(e.into());
        }
        Ok(())
    }

    /// Hold the partner bill's row in `fi_customer_bill_partner`: identity columns
    /// from its fact, inserted with an empty payment projection the first time.
    async fn ensure(
        &mut self,
        tx: &mut Tx,
        id: i64,
        identity: Vec<(&'static str, Cell)>,
        position: i64,
    ) -> Result<(), Step> {
        let mut names = vec!["id"];
        names.extend(identity.iter().map(|(n, _)| *n));
        if self.partners.as_ref().is_some_and(|p| p.names != names) {
            let partners = self.partners.take().expect("held partner rows");
            self.send_partners(tx, partners).await?;
        }
        let mut values = vec![Cell::Int(id)];
        values.extend(identity.into_iter().map(|(_, v)| v));
        let partners = self.partners.get_or_insert_with(|| Partners {
            names,
            rows: Vec::new(),
            first: position,
            last: position,
        });
        partners.rows.push((id, values));
        partners.last = position;
        if partners.rows.len() >= rows_max(partners.names.len()) {
            let partners = self.partners.take().expect("held partner rows");
            self.send_partners(tx, partners).await?;
        }
        Ok(())
    }

    /// One upsert of the held partner rows: a row with the id gets the identity
    /// columns, a new one is inserted with them (what `UPDATE … WHERE id = ?` and, when
    /// it matched nothing, `INSERT` did row by row). Of rows with the same id the last
    /// is sent (the upsert wants distinct keys; the earlier ones are overwritten anyway).
    async fn send_partners(&mut self, tx: &mut Tx, partners: Partners) -> Result<(), Step> {
        let Partners {
            names,
            rows,
            first,
            last,
        } = partners;
        let mut seen = HashSet::new();
        let mut kept: Vec<Vec<Cell>> = rows
            .into_iter()
            .rev()
            .filter(|(id, _)| seen.insert(*id))
            .map(|(_, values)| values)
            .collect();
        kept.reverse();
        let sql = tx.dialect().upsert_adding_rows(
            CUSTOMER_BILL_PARTNER.name,
            &names,
            &["id"],
            &[],
            &names[1..],
            kept.len(),
        );
        let count = kept.len();
        let values: Vec<Cell> = kept.into_iter().flatten().collect();
        self.statements += 1;
        if let Err(e) = tx.exec(&sql, &values).await {
            tracing::warn!(
                table = CUSTOMER_BILL_PARTNER.name,
                rows = count,
                first_position = first,
                last_position = last,
                error = %e,
                "bill facts: a multi-row partner bill upsert failed"
            );
            return Err(e.into());
        }
        Ok(())
    }
}

/// A `Set`: the columns of the recorded row with this key (it must exist).
async fn update(
    tx: &mut Tx,
    table: &TableDef,
    key: &[(&'static str, Cell)],
    set: &[(&'static str, Cell)],
    position: i64,
) -> Result<(), Step> {
    let mut sets = Vec::new();
    let mut values = Vec::new();
    for (n, v) in set {
        sets.push(format!("{n} = ?"));
        values.push(v.clone());
    }
    let mut wheres = Vec::new();
    for (n, v) in key {
        wheres.push(format!("{n} = ?"));
        values.push(v.clone());
    }
    let sql = format!(
        "UPDATE {} SET {} WHERE {}",
        table.name,
        sets.join(", "),
        wheres.join(" AND ")
    );
    // Both backends count matched rows (sqlx asks MariaDB for CLIENT_FOUND_ROWS).
    if tx.exec(&sql, &values).await? != 1 {
        return Err(Step::Event {
            position,
            reason: format!("{sql}: no recorded row to update ({key:?})"),
        });
    }
    Ok(())
}
