//! Shared test support: fresh throw-away databases on both backends.
//!
//! MariaDB tests use `FACTLEDGER_TEST_MYSQL_URL` (server URL without a database,
//! default `mysql://root@127.0.0.1:3306`); each test gets its own `fl_test_*`
//! database, dropped when the test's [`TestDb`] is dropped. SQLite tests use a file
//! in a fresh temporary directory.
#![allow(dead_code)]

pub mod app;
pub mod console;
pub mod hooked_store;
pub mod load;
pub mod mariadb;
pub mod serve_child;
pub mod sinks;

use factledger::infra::store::{self, DynStore};
use sqlx::Connection;

/// The integrity key file every store and every `factledger` child process of the
/// test binaries uses (through `FACTLEDGER_INTEGRITY_KEYS`), so that events sealed by
/// one verify in another. Set once, before the first store is opened.
pub fn integrity_keys_path() -> std::path::PathBuf {
    static INIT: std::sync::Once = std::sync::Once::new();
    let path =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("factledger-test-integrity.keys");
    INIT.call_once(|| std::env::set_var(store::integrity::keys::KEY_FILE_ENV, &path));
    path
}

/// The chain key the test stores seal with (for tests that seal events by hand).
pub fn chain_key() -> factledger::infra::store::ChainKey {
    let (ring, _) = factledger::infra::store::Keyring::load_or_create(&integrity_keys_path())
        .expect("test integrity key file");
    ring.active().clone()
}

pub fn mysql_server_url() -> String {
    std::env::var("FACTLEDGER_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306".to_owned())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Mysql,
}

pub struct TestDb {
    pub backend: Backend,
    pub url: String,
    pub store: DynStore,
    mysql_db: Option<String>,
    _dir: Option<tempfile::TempDir>,
}

impl TestDb {
    pub async fn new(backend: Backend) -> TestDb {
        integrity_keys_path();
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("temp dir");
                let url = format!("sqlite://{}", dir.path().join("factledger.db").display());
                let store = store::connect(&url).await.expect("open sqlite store");
                TestDb {
                    backend,
                    url,
                    store,
                    mysql_db: None,
                    _dir: Some(dir),
                }
            }
            Backend::Mysql => {
                let name = format!("fl_test_{}", uuid::Uuid::new_v4().simple());
                let server = mysql_server_url();
                let mut conn = sqlx::MySqlConnection::connect(&server)
                    .await
                    .expect("MariaDB must be running: start it with tools/test.sh");
                sqlx::Executor::execute(&mut conn, format!("CREATE DATABASE {name}").as_str())
                    .await
                    .expect("create test database");
                let _ = conn.close().await;
                let url = format!("{}/{name}", server.trim_end_matches('/'));
                let store = store::connect(&url).await.expect("open mysql store");
                TestDb {
                    backend,
                    url,
                    store,
                    mysql_db: Some(name),
                    _dir: None,
                }
            }
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Some(name) = self.mysql_db.take() {
            let server = mysql_server_url();
            // Drop in a separate thread with its own runtime: Drop cannot await, and
            // the test's runtime may be shutting down.
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build();
                if let Ok(rt) = rt {
                    rt.block_on(async move {
                        if let Ok(mut conn) = sqlx::MySqlConnection::connect(&server).await {
                            drop_database(&mut conn, &name).await;
                        }
                    });
                }
            })
            .join();
        }
    }
}

/// Drop a test database without ever hanging. A background task of the test's
/// service can outlive the test by a moment, holding a transaction (and so a metadata
/// lock) while it waits for a query that queues behind the DROP: neither would ever
/// finish. So the DROP waits at most a few seconds; then every connection still on the
/// database is killed and the DROP tried again.
async fn drop_database(conn: &mut sqlx::MySqlConnection, name: &str) {
    let _ = sqlx::Executor::execute(&mut *conn, "SET SESSION lock_wait_timeout = 5").await;
    for _ in 0..3 {
        let sql = format!("DROP DATABASE IF EXISTS {name}");
        if sqlx::Executor::execute(&mut *conn, sql.as_str())
            .await
            .is_ok()
        {
            return;
        }
        let ids: Vec<i64> = sqlx::query_scalar(
            "SELECT id FROM information_schema.processlist WHERE db = ? AND id <> CONNECTION_ID()",
        )
        .bind(name)
        .fetch_all(&mut *conn)
        .await
        .unwrap_or_default();
        for id in ids {
            let _ = sqlx::Executor::execute(&mut *conn, format!("KILL {id}").as_str()).await;
        }
    }
}

/// Metadata for commands sent by tests.
pub fn meta() -> factledger::infra::store::Metadata {
    factledger::infra::store::Metadata {
        correlation_id: "corr".into(),
        causation_id: None,
        command_id: None,
        actor: "tester".into(),
        request_id: "req".into(),
        trace_id: "trace".into(),
        country_code: "ID".into(),
    }
}

/// Send one wallet command (as JSON) through the bus; it must succeed.
pub async fn run(
    bus: &factledger::runtime::bus::CommandBus<factledger_aggregates::wallet::Wallet>,
    id: &str,
    v: serde_json::Value,
) {
    let command: factledger_aggregates::wallet::WalletCommand =
        serde_json::from_value(v).expect("valid command");
    bus.execute(factledger::runtime::bus::CommandEnvelope {
        aggregate_id: id.to_owned(),
        command,
        metadata: meta(),
        idempotency: None,
        jobs: Vec::new(),
        fence: None,
    })
    .await
    .expect("command succeeds");
}

/// Define one async test per backend: `both_backends!(name, |db| async move { ... })`
/// expands to `mod name { sqlite, mysql }`; `both_backends!(name, body, bound)` adds
/// `mysql_bound`, on MariaDB with every append's events sent as bound prepared
/// INSERTs (`MysqlStore::bind_events_from(0)`), so a store test covers both of its
/// append paths (see [`store_backends!`]).
#[macro_export]
macro_rules! both_backends {
    ($name:ident, $body:expr) => {
        $crate::both_backends!(@ $name, $body);
    };
    ($name:ident, $body:expr, bound) => {
        $crate::both_backends!(@ $name, $body, mysql_bound);
    };
    (@ $name:ident, $body:expr $(, $bound:ident)?) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn sqlite() {
                let db = $crate::common::TestDb::new($crate::common::Backend::Sqlite).await;
                ($body)(db).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn mysql() {
                let db = $crate::common::TestDb::new($crate::common::Backend::Mysql).await;
                ($body)(db).await;
            }

            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $bound() {
                    let db = $crate::common::TestDb::new_bound().await;
                    ($body)(db).await;
                }
            )?
        }
    };
}

/// The store's tests: [`both_backends!`] with `mysql_bound`.
#[macro_export]
macro_rules! store_backends {
    ($name:ident, $body:expr) => {
        $crate::both_backends!($name, $body, bound);
    };
}

impl TestDb {
    /// A MariaDB test database whose store binds the events of every append.
    pub async fn new_bound() -> TestDb {
        let mut db = TestDb::new(Backend::Mysql).await;
        let store = factledger::infra::store::mysql::MysqlStore::connect(
            &db.url,
            db.store.keyring().clone(),
        )
        .await
        .expect("open mysql store")
        .bind_events_from(0);
        db.store = std::sync::Arc::new(store);
        db
    }

    /// Another handle on the same database: the pools the service's parts use.
    pub async fn database(&self) -> factledger::infra::store::Database {
        factledger::infra::store::open(&self.url)
            .await
            .expect("open the test database again")
    }
}

/// One integer from a SQL query, on either backend.
pub async fn scalar(db: &factledger::infra::db::Db, sql: &str) -> i64 {
    match db {
        factledger::infra::db::Db::Mysql(p) => sqlx::query_scalar::<_, i64>(sql)
            .fetch_one(p)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}")),
        factledger::infra::db::Db::Sqlite(p) => sqlx::query_scalar::<_, i64>(sql)
            .fetch_one(p)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}")),
    }
}

/// Run a statement on either backend.
pub async fn exec(db: &factledger::infra::db::Db, sql: &str) -> u64 {
    match db {
        factledger::infra::db::Db::Mysql(p) => sqlx::raw_sql(sql)
            .execute(p)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .rows_affected(),
        factledger::infra::db::Db::Sqlite(p) => sqlx::raw_sql(sql)
            .execute(p)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .rows_affected(),
    }
}

/// Every context field of SPEC R-MON-1 is on the alert (`null` when the subject lacks
/// it, never missing).
pub fn assert_alert_context(alert: &serde_json::Value) {
    for field in [
        "environment",
        "data_centre",
        "job",
        "platform",
        "business_id",
        "user_affiliate_code",
        "request_id",
        "trace_id",
        "first_failure_at",
        "retry_count",
        "audit_link",
    ] {
        assert!(
            alert.get(field).is_some(),
            "alert field {field} missing: {alert}"
        );
    }
}

/// The running service most tests use (see [`app`]): `Server::start(&db)` is the
/// service with default options and no settlement cron.
/// (Not every test binary uses every name.)
#[allow(unused_imports)]
pub use app::{spawn_app, spawn_app_at, App as Server};

/// Affiliate reference data: rules for SHOPEE × ID from 2026-01-01 (M = min(platform
/// commission, 10 % of GMV); cashback 60 % of M, inviter 10 %, released 7 days after
/// the order); tracking id t-1 belongs to u-1, whom u-0 invited.
pub async fn reference_data(db: &TestDb) {
    let m = meta();
    factledger::runtime::unit::run_command::<
        factledger_aggregates::commission_rules::CommissionRuleSet,
    >(
        &db.store,
        &m,
        "SHOPEE:ID",
        serde_json::from_value(
            serde_json::json!({"type": "AddVersion", "rule_set_id": "SHOPEE:ID",
            "version": 1, "effective_from": "2026-01-01T00:00:00Z", "cashback_bps": 6000,
            "inviter_bps": 1000, "max_commission_base_bps": 1000, "release_delay_days": 7,
            "requested_at": "2025-12-31T00:00:00Z"}),
        )
        .unwrap(),
    )
    .await
    .unwrap();
    factledger::runtime::unit::run_command::<factledger_aggregates::affiliate_link::AffiliateLink>(
        &db.store,
        &m,
        "TRACKING_ID:t-1",
        serde_json::from_value(serde_json::json!({"type": "Register",
            "attribution": {"kind": "TRACKING_ID", "value": "t-1"}, "user_id": "u-1",
            "actor": "ops", "registered_at": "2026-01-01T00:00:00Z"}))
        .unwrap(),
    )
    .await
    .unwrap();
    factledger::runtime::unit::run_command::<factledger_aggregates::invite::InviteRelation>(
        &db.store,
        &m,
        "u-1",
        serde_json::from_value(serde_json::json!({"type": "SetInviter", "user_id": "u-1",
            "inviter_user_id": "u-0", "actor": "ops", "set_at": "2026-01-01T00:00:00Z"}))
        .unwrap(),
    )
    .await
    .unwrap();
}

/// The seed of a randomized test: `var` from the environment (to replay a failure),
/// else `default`.
pub fn env_seed(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(default)
}

/// A small deterministic generator for seeded randomized tests (xorshift64*, no
/// dependency): a failing seed replays exactly.
pub struct Rng(pub u64);

impl Rng {
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) % n
    }

    pub fn one<'a>(&mut self, of: &[&'a str]) -> &'a str {
        of[self.below(of.len() as u64) as usize]
    }
}

/// Poll `condition` every 50 ms until it holds (`Ok`) or `within` has passed (`Err`
/// with the time waited): the one way a test waits for something asynchronous.
#[allow(dead_code)]
pub async fn eventually<F, Fut>(
    within: std::time::Duration,
    mut condition: F,
) -> Result<(), std::time::Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = std::time::Instant::now();
    loop {
        if condition().await {
            return Ok(());
        }
        if started.elapsed() > within {
            return Err(started.elapsed());
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
