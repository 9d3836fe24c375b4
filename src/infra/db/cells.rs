//! Values crossing the database boundary without naming a backend: statement
//! arguments are [`Cell`]s bound in order ([`bind_cells!`]), and result rows are
//! decoded by position into [`MemRow`]s as a list of typed [`Column`]s says. The same
//! SQL and the same cells run on MariaDB and SQLite; only the decoding of text differs
//! (MariaDB reports `_bin` collated columns as binary, see [`mysql_text`]).

use factledger_projections::table::{Cell, ColType, Column, MemRow, TableDef};
use sqlx::mysql::MySqlRow;
use sqlx::sqlite::SqliteRow;
use sqlx::Row;

/// Bind `$args` (an iterator of `&Cell`) to the query `$q`, in order.
macro_rules! bind_cells {
    ($q:expr, $args:expr) => {{
        let mut q = $q;
        for a in $args {
            q = match a {
                factledger_projections::table::Cell::Null => q.bind(None::<String>),
                factledger_projections::table::Cell::Int(i) => q.bind(*i),
                factledger_projections::table::Cell::Text(s) => q.bind(s.as_str()),
            };
        }
        q
    }};
}
pub(crate) use bind_cells;

/// Text of a column. Columns with a `_bin` collation (ids must be case-sensitive)
/// are reported with the binary flag, which sqlx will not decode as `String`; read
/// the bytes and check they are UTF-8.
pub fn mysql_text<I>(r: &MySqlRow, column: I) -> Result<String, sqlx::Error>
where
    I: sqlx::ColumnIndex<MySqlRow> + std::fmt::Display + Copy,
{
    let bytes: Vec<u8> = r.try_get(column)?;
    String::from_utf8(bytes).map_err(|e| sqlx::Error::ColumnDecode {
        index: column.to_string(),
        source: Box::new(e),
    })
}

/// Text of a nullable column (see [`mysql_text`]).
pub fn mysql_opt_text(r: &MySqlRow, column: usize) -> Result<Option<String>, sqlx::Error> {
    let bytes: Option<Vec<u8>> = r.try_get(column)?;
    bytes
        .map(|b| {
            String::from_utf8(b).map_err(|e| sqlx::Error::ColumnDecode {
                index: column.to_string(),
                source: Box::new(e),
            })
        })
        .transpose()
}

/// Reading text columns the same way on both backends. MariaDB reports `_bin`
/// collated columns as binary, which sqlx will not decode as `String` (see
/// [`mysql_text`]).
pub trait RowText {
    fn text(&self, i: usize) -> Result<String, sqlx::Error>;
    fn opt_text(&self, i: usize) -> Result<Option<String>, sqlx::Error>;
}

impl RowText for MySqlRow {
    fn text(&self, i: usize) -> Result<String, sqlx::Error> {
        mysql_text(self, i)
    }
    fn opt_text(&self, i: usize) -> Result<Option<String>, sqlx::Error> {
        mysql_opt_text(self, i)
    }
}

impl RowText for SqliteRow {
    fn text(&self, i: usize) -> Result<String, sqlx::Error> {
        self.try_get(i)
    }
    fn opt_text(&self, i: usize) -> Result<Option<String>, sqlx::Error> {
        self.try_get(i)
    }
}

/// One result row decoded by position as `columns` (either backend).
pub fn cells<R>(r: &R, columns: &[Column]) -> Result<MemRow, sqlx::Error>
where
    R: Row + RowText,
    for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> Option<i64>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    usize: sqlx::ColumnIndex<R>,
{
    let mut row = MemRow::new();
    for (i, c) in columns.iter().enumerate() {
        let v = match c.ty {
            ColType::Int => Cell::Int(r.try_get(i)?),
            ColType::OptInt => r
                .try_get::<Option<i64>, _>(i)?
                .map_or(Cell::Null, Cell::Int),
            ColType::Text => Cell::Text(r.text(i)?),
            ColType::OptText => r.opt_text(i)?.map_or(Cell::Null, Cell::Text),
        };
        row.insert(c.name, v);
    }
    Ok(row)
}

/// [`cells`] on a MariaDB row.
pub fn mysql_cells(r: &MySqlRow, columns: &[Column]) -> Result<MemRow, sqlx::Error> {
    cells(r, columns)
}

/// [`cells`] on a SQLite row.
pub fn sqlite_cells(r: &SqliteRow, columns: &[Column]) -> Result<MemRow, sqlx::Error> {
    cells(r, columns)
}

/// `SELECT <every column of def> FROM <table>` with `tail` (conditions, order, limit:
/// `?` placeholders for the arguments).
pub fn select_sql(def: &TableDef, tail: &str) -> String {
    let names: Vec<&str> = def.columns.iter().map(|c| c.name).collect();
    format!("SELECT {} FROM {} {tail}", names.join(", "), def.name)
}

/// Typed access to a decoded row by column name; a missing column or a value of the
/// wrong kind is a decode error naming the column (never a silent default).
pub trait Get {
    fn int(&self, column: &str) -> Result<i64, sqlx::Error>;
    fn opt_int(&self, column: &str) -> Result<Option<i64>, sqlx::Error>;
    fn text(&self, column: &str) -> Result<String, sqlx::Error>;
    fn opt_text(&self, column: &str) -> Result<Option<String>, sqlx::Error>;
}

fn wrong(column: &str, want: &str, got: Option<&Cell>) -> sqlx::Error {
    sqlx::Error::ColumnDecode {
        index: column.to_owned(),
        source: format!("expected {want}, got {got:?}").into(),
    }
}

impl Get for MemRow {
    fn int(&self, column: &str) -> Result<i64, sqlx::Error> {
        match self.get(column) {
            Some(Cell::Int(v)) => Ok(*v),
            other => Err(wrong(column, "an integer", other)),
        }
    }
    fn opt_int(&self, column: &str) -> Result<Option<i64>, sqlx::Error> {
        match self.get(column) {
            Some(Cell::Int(v)) => Ok(Some(*v)),
            Some(Cell::Null) => Ok(None),
            other => Err(wrong(column, "an integer or NULL", other)),
        }
    }
    fn text(&self, column: &str) -> Result<String, sqlx::Error> {
        match self.get(column) {
            Some(Cell::Text(t)) => Ok(t.clone()),
            other => Err(wrong(column, "text", other)),
        }
    }
    fn opt_text(&self, column: &str) -> Result<Option<String>, sqlx::Error> {
        match self.get(column) {
            Some(Cell::Text(t)) => Ok(Some(t.clone())),
            Some(Cell::Null) => Ok(None),
            other => Err(wrong(column, "text or NULL", other)),
        }
    }
}
