//! The one database handle: a pool of one of the two backends. The event store,
//! projections, jobs, outbox, cron, callbacks and API keys all reach their tables
//! through it. Statements that read the same on both backends go through
//! [`Db::exec`] and [`Db::fetch`] with [`Cell`] arguments; the rest of the code
//! matches on the variant only where a backend's own API is needed (the event
//! store's append path, streaming reads, raw multi-statement scripts).

use super::cells::{bind_cells, mysql_cells, select_sql, sqlite_cells};
use super::dialect::Dialect;
use factledger_projections::table::{Cell, Column, MemRow, TableDef};
use sqlx::mysql::MySqlPool;
use sqlx::sqlite::SqlitePool;

#[derive(Clone, Debug)]
pub enum Db {
    Mysql(MySqlPool),
    Sqlite(SqlitePool),
}

impl Db {
    pub fn backend(&self) -> &'static str {
        match self {
            Db::Mysql(_) => "mysql",
            Db::Sqlite(_) => "sqlite",
        }
    }

    pub fn dialect(&self) -> Dialect {
        match self {
            Db::Mysql(_) => Dialect::Mysql,
            Db::Sqlite(_) => Dialect::Sqlite,
        }
    }

    /// Run one statement outside a transaction; the rows it changed.
    pub async fn exec(&self, sql: &str, args: &[Cell]) -> Result<u64, sqlx::Error> {
        Ok(match self {
            Db::Mysql(p) => bind_cells!(sqlx::query(sql), args)
                .execute(p)
                .await?
                .rows_affected(),
            Db::Sqlite(p) => bind_cells!(sqlx::query(sql), args)
                .execute(p)
                .await?
                .rows_affected(),
        })
    }

    /// The rows of one query outside a transaction, decoded by position as `columns`.
    pub async fn fetch(
        &self,
        sql: &str,
        args: &[Cell],
        columns: &[Column],
    ) -> Result<Vec<MemRow>, sqlx::Error> {
        match self {
            Db::Mysql(p) => bind_cells!(sqlx::query(sql), args)
                .fetch_all(p)
                .await?
                .iter()
                .map(|r| mysql_cells(r, columns))
                .collect(),
            Db::Sqlite(p) => bind_cells!(sqlx::query(sql), args)
                .fetch_all(p)
                .await?
                .iter()
                .map(|r| sqlite_cells(r, columns))
                .collect(),
        }
    }

    /// The first row of [`Db::fetch`], if any.
    pub async fn fetch_optional(
        &self,
        sql: &str,
        args: &[Cell],
        columns: &[Column],
    ) -> Result<Option<MemRow>, sqlx::Error> {
        Ok(self.fetch(sql, args, columns).await?.into_iter().next())
    }

    /// The single integer a query returns (`COUNT(*)` and the like).
    pub async fn fetch_i64(&self, sql: &str, args: &[Cell]) -> Result<i64, sqlx::Error> {
        const VALUE: &[Column] = &[Column {
            name: "value",
            ty: factledger_projections::table::ColType::Int,
        }];
        let row = self.fetch_optional(sql, args, VALUE).await?;
        match row.as_ref().and_then(|r| r.get("value")) {
            Some(Cell::Int(v)) => Ok(*v),
            _ => Err(sqlx::Error::RowNotFound),
        }
    }

    /// Every column of `def`'s rows matching `tail` (see [`select_sql`]).
    pub async fn rows(
        &self,
        def: &TableDef,
        tail: &str,
        args: &[Cell],
    ) -> Result<Vec<MemRow>, sqlx::Error> {
        self.fetch(&select_sql(def, tail), args, def.columns).await
    }

    /// The first of [`Self::rows`], if any.
    pub async fn row(
        &self,
        def: &TableDef,
        tail: &str,
        args: &[Cell],
    ) -> Result<Option<MemRow>, sqlx::Error> {
        Ok(self.rows(def, tail, args).await?.into_iter().next())
    }
}
