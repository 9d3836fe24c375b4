//! A transaction on either backend ([`Tx`]) with the same [`Cell`] statements as
//! [`super::handle::Db`], and the fenced write every job round uses: [`Tx::fenced`]
//! starts a write transaction and locks the job row of a claim, so a round whose
//! lease was recovered by another worker writes nothing (`FOR UPDATE` on MariaDB;
//! SQLite's `BEGIN IMMEDIATE` takes the database lock for the whole transaction).

use super::cells::{bind_cells, mysql_cells, select_sql, sqlite_cells};
use super::dialect::Dialect;
use super::handle::Db;
use factledger_projections::table::{Cell, Column, MemRow, TableDef};

/// The claim a job handler's writes are fenced by (issue 4 item 2, seed §9.2 fixed): a
/// write commits only if, in its own transaction, the job is still RUNNING with this
/// `running_attempt`; the check locks the job row, so the lease cannot be recovered
/// and re-claimed between the check and the commit. Units of work carry it into the
/// event store (`store::UnitOfWork`); plain-table writes use [`Tx::fenced`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence {
    pub job_id: i64,
    pub running_attempt: i64,
}

/// A transaction on either backend; every statement is the same SQL on both.
pub enum Tx {
    Mysql(sqlx::Transaction<'static, sqlx::MySql>),
    Sqlite(sqlx::Transaction<'static, sqlx::Sqlite>),
}

impl Tx {
    /// A transaction (SQLite: deferred, it takes the write lock at its first write).
    pub async fn begin(db: &Db) -> Result<Tx, sqlx::Error> {
        Ok(match db {
            Db::Mysql(p) => Tx::Mysql(p.begin().await?),
            Db::Sqlite(p) => Tx::Sqlite(p.begin().await?),
        })
    }

    /// A transaction that writes: SQLite takes the database lock at `BEGIN`, so rows
    /// it reads stay as read until commit (MariaDB locks what it reads with
    /// [`Dialect::lock_rows`]).
    pub async fn begin_write(db: &Db) -> Result<Tx, sqlx::Error> {
        Ok(match db {
            Db::Mysql(p) => Tx::Mysql(p.begin().await?),
            Db::Sqlite(p) => Tx::Sqlite(p.begin_with("BEGIN IMMEDIATE").await?),
        })
    }

    /// A write transaction that holds `claim`'s job row; `None` (and nothing held)
    /// when the claim is no longer the job's current one.
    pub async fn fenced(db: &Db, claim: Fence) -> Result<Option<Tx>, sqlx::Error> {
        let mut tx = Tx::begin_write(db).await?;
        let sql = format!(
            "SELECT id FROM jobs WHERE id = ? AND status = 1 AND running_attempt = ?{}",
            db.dialect().lock_rows()
        );
        let held = tx
            .exists(
                &sql,
                &[Cell::Int(claim.job_id), Cell::Int(claim.running_attempt)],
            )
            .await?;
        Ok(held.then_some(tx))
    }

    pub fn dialect(&self) -> Dialect {
        match self {
            Tx::Mysql(_) => Dialect::Mysql,
            Tx::Sqlite(_) => Dialect::Sqlite,
        }
    }

    pub async fn commit(self) -> Result<(), sqlx::Error> {
        match self {
            Tx::Mysql(t) => t.commit().await,
            Tx::Sqlite(t) => t.commit().await,
        }
    }

    pub async fn rollback(self) -> Result<(), sqlx::Error> {
        match self {
            Tx::Mysql(t) => t.rollback().await,
            Tx::Sqlite(t) => t.rollback().await,
        }
    }

    /// Commit when `commit`, else roll back.
    pub async fn finish(self, commit: bool) -> Result<(), sqlx::Error> {
        if commit {
            self.commit().await
        } else {
            self.rollback().await
        }
    }

    /// Run one statement; the rows it changed.
    pub async fn exec(&mut self, sql: &str, args: &[Cell]) -> Result<u64, sqlx::Error> {
        Ok(match self {
            Tx::Mysql(t) => bind_cells!(sqlx::query(sql), args)
                .execute(&mut **t)
                .await?
                .rows_affected(),
            Tx::Sqlite(t) => bind_cells!(sqlx::query(sql), args)
                .execute(&mut **t)
                .await?
                .rows_affected(),
        })
    }

    /// Rows of `sql`, decoded by position as `columns`.
    pub async fn fetch(
        &mut self,
        sql: &str,
        args: &[Cell],
        columns: &[Column],
    ) -> Result<Vec<MemRow>, sqlx::Error> {
        match self {
            Tx::Mysql(t) => bind_cells!(sqlx::query(sql), args)
                .fetch_all(&mut **t)
                .await?
                .iter()
                .map(|r| mysql_cells(r, columns))
                .collect(),
            Tx::Sqlite(t) => bind_cells!(sqlx::query(sql), args)
                .fetch_all(&mut **t)
                .await?
                .iter()
                .map(|r| sqlite_cells(r, columns))
                .collect(),
        }
    }

    /// Whether `sql` returns a row.
    pub async fn exists(&mut self, sql: &str, args: &[Cell]) -> Result<bool, sqlx::Error> {
        Ok(!self.fetch(sql, args, &[]).await?.is_empty())
    }

    /// Every column of `def`'s rows matching `tail` (see [`select_sql`]).
    pub async fn rows(
        &mut self,
        def: &TableDef,
        tail: &str,
        args: &[Cell],
    ) -> Result<Vec<MemRow>, sqlx::Error> {
        self.fetch(&select_sql(def, tail), args, def.columns).await
    }

    /// The first of [`Self::rows`], if any.
    pub async fn row(
        &mut self,
        def: &TableDef,
        tail: &str,
        args: &[Cell],
    ) -> Result<Option<MemRow>, sqlx::Error> {
        Ok(self.rows(def, tail, args).await?.into_iter().next())
    }
}
