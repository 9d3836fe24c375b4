//! Where the two SQL dialects differ, in one place. Everything else is written once
//! as SQL both backends accept (`REPLACE INTO`, `?` placeholders, `LIMIT`).

use chrono::{DateTime, Utc};
use factledger_projections::table::Cell;

/// The SQL dialect of a [`super::Db`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Mysql,
    Sqlite,
}

impl Dialect {
    /// `INSERT INTO table (columns) VALUES (?, …)` that, when a row with the same
    /// `keys` exists, sets only the `updates` columns to the inserted values.
    pub fn upsert(self, table: &str, columns: &[&str], keys: &[&str], updates: &[&str]) -> String {
        let marks = vec!["?"; columns.len()].join(", ");
        let insert = format!(
            "INSERT INTO {table} ({}) VALUES ({marks})",
            columns.join(", ")
        );
        let updated = updates.iter();
        match self {
            Dialect::Mysql => {
                let set: Vec<String> = updated.map(|c| format!("{c} = VALUES({c})")).collect();
                format!("{insert} ON DUPLICATE KEY UPDATE {}", set.join(", "))
            }
            Dialect::Sqlite => {
                let set: Vec<String> = updated.map(|c| format!("{c} = excluded.{c}")).collect();
                format!(
                    "{insert} ON CONFLICT ({}) DO UPDATE SET {}",
                    keys.join(", "),
                    set.join(", ")
                )
            }
        }
    }

    /// Like [`Dialect::upsert`], but an existing row's `adds` columns grow by the
    /// inserted values and its `sets` columns take them.
    pub fn upsert_adding(
        self,
        table: &str,
        columns: &[&str],
        keys: &[&str],
        adds: &[&str],
        sets: &[&str],
    ) -> String {
        self.upsert_adding_rows(table, columns, keys, adds, sets, 1)
    }

    /// [`Dialect::upsert_adding`] of `rows` rows in one statement (their keys must
    /// differ from each other).
    pub fn upsert_adding_rows(
        self,
        table: &str,
        columns: &[&str],
        keys: &[&str],
        adds: &[&str],
        sets: &[&str],
        rows: usize,
    ) -> String {
        let marks = format!("({})", vec!["?"; columns.len()].join(", "));
        let insert = format!(
            "INSERT INTO {table} ({}) VALUES {}",
            columns.join(", "),
            vec![marks.as_str(); rows.max(1)].join(", ")
        );
        let (new, conflict) = match self {
            Dialect::Mysql => ("VALUES", "ON DUPLICATE KEY UPDATE".to_owned()),
            Dialect::Sqlite => (
                "excluded",
                format!("ON CONFLICT ({}) DO UPDATE SET", keys.join(", ")),
            ),
        };
        let value = |c: &str| match self {
            Dialect::Mysql => format!("{new}({c})"),
            Dialect::Sqlite => format!("{new}.{c}"),
        };
        let set: Vec<String> = adds
            .iter()
            .map(|c| format!("{c} = {c} + {}", value(c)))
            .chain(sets.iter().map(|c| format!("{c} = {}", value(c))))
            .collect();
        format!("{insert} {conflict} {}", set.join(", "))
    }

    /// The suffix of a `SELECT` that locks the rows it reads until commit. SQLite
    /// needs none: a write transaction (`BEGIN IMMEDIATE`) holds the database lock.
    pub fn lock_rows(self) -> &'static str {
        match self {
            Dialect::Mysql => " FOR UPDATE",
            Dialect::Sqlite => "",
        }
    }

    /// A `DATETIME(6)` value on MariaDB, RFC 3339 text on SQLite (the two schemas'
    /// timestamp columns outside the event store).
    pub fn datetime(self, t: &DateTime<Utc>) -> Cell {
        match self {
            Dialect::Mysql => Cell::Text(t.naive_utc().format("%Y-%m-%d %H:%M:%S%.6f").to_string()),
            Dialect::Sqlite => Cell::Text(t.to_rfc3339()),
        }
    }

    /// `column` of [`Dialect::datetime`] read back as text either backend returns.
    pub fn datetime_text(self, column: &str) -> String {
        match self {
            Dialect::Mysql => format!("CAST({column} AS CHAR)"),
            Dialect::Sqlite => column.to_owned(),
        }
    }
}

/// A timestamp read through [`Dialect::datetime_text`] as RFC 3339.
pub fn rfc3339_of(text: &str) -> Result<String, String> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc).to_rfc3339());
    }
    chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f")
        .map(|t| t.and_utc().to_rfc3339())
        .map_err(|e| format!("timestamp {text:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upsert_sets_only_the_named_columns_in_each_dialect() {
        let cols = ["a", "b", "c", "d"];
        assert_eq!(
            Dialect::Mysql.upsert("t", &cols, &["a"], &["b", "c"]),
            "INSERT INTO t (a, b, c, d) VALUES (?, ?, ?, ?) ON DUPLICATE KEY UPDATE \
             b = VALUES(b), c = VALUES(c)"
        );
        assert_eq!(
            Dialect::Sqlite.upsert("t", &cols, &["a"], &["b", "c"]),
            "INSERT INTO t (a, b, c, d) VALUES (?, ?, ?, ?) ON CONFLICT (a) DO UPDATE SET \
             b = excluded.b, c = excluded.c"
        );
    }

    #[test]
    fn upsert_adding_grows_the_added_columns_and_sets_the_others() {
        let cols = ["k", "n", "at"];
        assert_eq!(
            Dialect::Mysql.upsert_adding("t", &cols, &["k"], &["n"], &["at"]),
            "INSERT INTO t (k, n, at) VALUES (?, ?, ?) ON DUPLICATE KEY UPDATE \
             n = n + VALUES(n), at = VALUES(at)"
        );
        assert_eq!(
            Dialect::Sqlite.upsert_adding("t", &cols, &["k"], &["n"], &["at"]),
            "INSERT INTO t (k, n, at) VALUES (?, ?, ?) ON CONFLICT (k) DO UPDATE SET \
             n = n + excluded.n, at = excluded.at"
        );
    }

    #[test]
    fn both_timestamp_texts_read_back_as_the_same_rfc3339() {
        let t = DateTime::parse_from_rfc3339("2026-12-04T21:00:00.123456Z")
            .unwrap()
            .with_timezone(&Utc);
        let Cell::Text(mysql) = Dialect::Mysql.datetime(&t) else {
            panic!()
        };
        let Cell::Text(sqlite) = Dialect::Sqlite.datetime(&t) else {
            panic!()
        };
        assert_eq!(rfc3339_of(&mysql).unwrap(), t.to_rfc3339());
        assert_eq!(rfc3339_of(&sqlite).unwrap(), t.to_rfc3339());
        assert!(rfc3339_of("yesterday").is_err());
    }
}
