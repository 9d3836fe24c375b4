//! Row-decoding and pool-dispatch macros shared by the engine's files.

/// Run a query on whichever pool `$db` holds: `both!($db, |p| expr)`.
macro_rules! both {
    ($db:expr, |$p:ident| $body:expr) => {
        match $db {
            Db::Mysql($p) => $body,
            Db::Sqlite($p) => $body,
        }
    };
}
