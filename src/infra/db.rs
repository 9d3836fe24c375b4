//! The database as the background machinery sees it (jobs, outbox, cron, callbacks):
//! a pool of one of the two backends. The event store has its own trait
//! (`crate::infra::store::EventStore`); these modules write plain tables next to it.

use sqlx::mysql::{MySqlPool, MySqlRow};
use sqlx::sqlite::{SqlitePool, SqliteRow};
use sqlx::Row;

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
}

/// Reading text columns the same way on both backends. MariaDB reports `_bin`
/// collated columns as binary, which sqlx will not decode as `String` (see
/// `store::mysql::text`).
pub trait RowText {
    fn text(&self, i: usize) -> Result<String, sqlx::Error>;
    fn opt_text(&self, i: usize) -> Result<Option<String>, sqlx::Error>;
}

impl RowText for MySqlRow {
    fn text(&self, i: usize) -> Result<String, sqlx::Error> {
        crate::infra::store::mysql::text(self, i)
    }
    fn opt_text(&self, i: usize) -> Result<Option<String>, sqlx::Error> {
        crate::infra::store::mysql::opt_text(self, i)
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

/// Milliseconds since the Unix epoch, now (the unit of every `*_ms` column).
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Run one text-protocol statement on a MariaDB connection (no prepare round trip for
/// a statement used once) and return the rows it changed. Boxed: the executor's
/// higher-ranked lifetimes otherwise keep the caller's future from being `Send`.
pub fn mysql_execute_text<'c>(
    conn: &'c mut sqlx::MySqlConnection,
    sql: &'c str,
) -> futures::future::BoxFuture<'c, Result<u64, sqlx::Error>> {
    Box::pin(async move {
        use futures::TryStreamExt;
        let mut results = sqlx::raw_sql(sql).fetch_many(conn);
        let mut changed = 0;
        while let Some(r) = results.try_next().await? {
            if let sqlx::Either::Left(done) = r {
                changed += done.rows_affected();
            }
        }
        Ok(changed)
    })
}
