//! Generic rows for projectors other than the wallet's: a projector names its tables
//! ([`TableDef`]) and turns each event into [`RowChange`]s on them. One generic writer
//! per backend in the service turns the changes into SQL, and [`MemTables`] applies
//! them in memory (reconciliation's replay, tests), so the rows a replay expects are
//! computed by the very code that writes them.
//!
//! Every change names its row by the table's full key, and an `Update` sets only the
//! columns the event knows: an event projects on its own, with no read of earlier
//! rows, so a batch of changes is written without a round trip per row.

use crate::{ProjectedEvent, ProjectionError};
use serde::Serialize;
use std::collections::BTreeMap;

/// One value of a column. Money is `Int` (minor units), instants are RFC 3339 UTC text
/// with microseconds (they sort in time order), flags are `Int` 0/1.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(untagged)]
pub enum Cell {
    Null,
    Int(i64),
    Text(String),
}

impl Cell {
    pub fn text(s: impl Into<String>) -> Cell {
        Cell::Text(s.into())
    }

    pub fn opt_text(s: Option<impl Into<String>>) -> Cell {
        s.map_or(Cell::Null, |s| Cell::Text(s.into()))
    }
}

/// The SQL type of a column, as the generic writer and reader see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColType {
    Int,
    Text,
    OptInt,
    OptText,
}

#[derive(Debug, Clone, Copy)]
pub struct Column {
    pub name: &'static str,
    pub ty: ColType,
}

/// A projection table: its name, primary key (a prefix of nothing in particular: the
/// columns that name a row) and every column, key included, in storage order.
#[derive(Debug, Clone, Copy)]
pub struct TableDef {
    pub name: &'static str,
    pub key: &'static [&'static str],
    pub columns: &'static [Column],
}

impl TableDef {
    pub fn column(&self, name: &str) -> Option<&Column> {
        self.columns.iter().find(|c| c.name == name)
    }
}

/// `(column, value)` pairs.
pub type Cells = Vec<(&'static str, Cell)>;

/// A change to one row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowChange {
    /// A new row with every column; its key must not exist yet.
    Insert { table: &'static str, row: Cells },
    /// Set some columns of the row with this key; the row must exist. A change that
    /// finds no row stops the projector: the rows are not what the events made.
    Update {
        table: &'static str,
        key: Cells,
        set: Cells,
    },
}

/// A projector writing generic rows (every projector but the wallet's, which has its
/// own tuned writer and shadow-table rebuild).
///
/// **Architecture invariant:** `project` is a pure function of the event: no clock,
/// no network, no read of earlier rows.
pub trait Projector: Send + Sync + 'static {
    /// Name, checkpoint key, `projection` label and `factledger rebuild <name>`.
    fn name(&self) -> &'static str;
    /// Bump when the rows' shape or meaning changes.
    fn version(&self) -> i32;
    /// The aggregate types whose events it reads; others make no rows.
    fn aggregate_types(&self) -> &'static [&'static str];
    /// The tables it owns (and a full rebuild empties).
    fn tables(&self) -> &'static [TableDef];
    /// The row changes one event makes.
    fn project(&self, e: &ProjectedEvent) -> Result<Vec<RowChange>, ProjectionError>;
}

/// A row in memory: column → value.
pub type MemRow = BTreeMap<&'static str, Cell>;

/// A projector's tables in memory: table → key values → row.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemTables {
    pub tables: BTreeMap<&'static str, BTreeMap<Vec<Cell>, MemRow>>,
}

/// The values of `key` columns in `cells`, in key order.
pub fn key_of(key: &[&'static str], cells: &[(&'static str, Cell)]) -> Option<Vec<Cell>> {
    key.iter()
        .map(|k| cells.iter().find(|(c, _)| c == k).map(|(_, v)| v.clone()))
        .collect()
}

impl MemTables {
    /// Apply a change as the database would; an error where the database write would
    /// fail (a duplicate key, a missing row, an unknown table or column).
    pub fn apply(&mut self, defs: &[TableDef], change: &RowChange) -> Result<(), String> {
        let table = match change {
            RowChange::Insert { table, .. } | RowChange::Update { table, .. } => *table,
        };
        let def = defs
            .iter()
            .find(|d| d.name == table)
            .ok_or_else(|| format!("unknown table {table}"))?;
        let rows = self.tables.entry(def.name).or_default();
        match change {
            RowChange::Insert { row, .. } => {
                let key = key_of(def.key, row).ok_or_else(|| format!("{table}: key missing"))?;
                if rows.contains_key(&key) {
                    return Err(format!("{table}: row {key:?} exists already"));
                }
                let mut r = MemRow::new();
                for c in def.columns {
                    let v = row
                        .iter()
                        .find(|(n, _)| *n == c.name)
                        .map(|(_, v)| v.clone())
                        .ok_or_else(|| format!("{table}: column {} missing", c.name))?;
                    r.insert(c.name, v);
                }
                rows.insert(key, r);
            }
            RowChange::Update { key, set, .. } => {
                let key = key_of(def.key, key).ok_or_else(|| format!("{table}: key missing"))?;
                let r = rows
                    .get_mut(&key)
                    .ok_or_else(|| format!("{table}: no row {key:?} to update"))?;
                for (n, v) in set {
                    let c = def
                        .column(n)
                        .ok_or_else(|| format!("{table}: unknown column {n}"))?;
                    r.insert(c.name, v.clone());
                }
            }
        }
        Ok(())
    }
}
