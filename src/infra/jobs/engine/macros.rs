//! Row-decoding and pool-dispatch macros shared by the engine's files.

/// Decode a [`CLAIM_COLUMNS`] row of either backend.
macro_rules! candidate {
    ($r:expr) => {{
        use sqlx::Row;
        let r = $r;
        Ok::<Candidate, sqlx::Error>(Candidate {
            id: r.try_get(0)?,
            code: r.text(1)?,
            business_key: r.text(2)?,
            payload: r.text(3)?,
            retry_count: r.try_get(4)?,
            max_retry_count: r.try_get(5)?,
            running_attempt: r.try_get(6)?,
            request_generation: r.try_get(7)?,
            request_id: r.opt_text(8)?,
            trace_id: r.opt_text(9)?,
            first_failed_at_ms: r.try_get(10)?,
        })
    }};
}

/// Run a query on whichever pool `$db` holds: `both!($db, |p| expr)`.
macro_rules! both {
    ($db:expr, |$p:ident| $body:expr) => {
        match $db {
            Db::Mysql($p) => $body,
            Db::Sqlite($p) => $body,
        }
    };
}
