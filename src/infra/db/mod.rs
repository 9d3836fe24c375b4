//! The one database handle ([`Db`]), its transaction ([`Tx`], fenced by a job claim
//! with [`Tx::fenced`]), backend-neutral statement values ([`cells`]) and the places
//! the two SQL dialects differ ([`Dialect`]). The event store has its own trait
//! (`crate::infra::store::EventStore`) over the same pools.

mod cells;
mod dialect;
mod handle;
mod tx;

pub(crate) use cells::bind_cells;
pub use cells::{
    cells, mysql_cells, mysql_opt_text, mysql_text, select_sql, sqlite_cells, Get, RowText,
};
pub use dialect::{rfc3339_of, Dialect};
pub use handle::Db;
pub use tx::{Fence, Tx};

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
