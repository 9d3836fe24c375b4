//! Opening a ledger's database: the store, the API keys and the pool of one
//! database URL (migrated, with the integrity key file), or a read replica's store
//! and pool (read-only, never migrated).

use super::{mysql, sqlite, DynStore, EventStore, Keyring, LEGACY_KEY_ID};
use std::sync::Arc;

/// Open the store named by a database URL (`mysql://…` or `sqlite://…`), creating
/// the SQLite file if missing, and run the migrations.
pub async fn connect(url: &str) -> anyhow::Result<DynStore> {
    Ok(open(url).await?.store)
}

/// Everything that lives in the database: the event store and the API keys.
pub struct Database {
    pub store: DynStore,
    pub keys: crate::infra::auth::KeyStore,
    /// The pool for jobs, outbox, cron and callbacks.
    pub db: crate::infra::db::Db,
}

/// Open a database URL with the integrity key file named by the environment (or the
/// default one in the working directory, created on first use): see [`open_with`].
pub async fn open(url: &str) -> anyhow::Result<Database> {
    let cwd = std::env::current_dir()?;
    let keyring = load_keyring(&Keyring::path_in(&cwd))?;
    open_with(url, keyring).await
}

/// Load the integrity key file, creating it (mode 0600) when it does not exist yet.
pub fn load_keyring(path: &std::path::Path) -> anyhow::Result<Arc<Keyring>> {
    let (keyring, created) = Keyring::load_or_create(path)?;
    if created {
        tracing::warn!(
            path = %path.display(),
            "created the integrity key file: back it up and keep it off the database host"
        );
    }
    Ok(Arc::new(keyring))
}

/// Open a read replica of a MariaDB ledger (`serve --read-database-url`): its store
/// and pool, read-only and never migrated (see `MysqlStore::connect_replica`).
pub async fn open_replica(
    url: &str,
    keyring: Arc<Keyring>,
) -> anyhow::Result<(DynStore, crate::infra::db::Db)> {
    if !(url.starts_with("mysql://") || url.starts_with("mariadb://")) {
        anyhow::bail!("a read replica is a MariaDB/MySQL replica: its URL starts with mysql://");
    }
    let url = url.replacen("mariadb://", "mysql://", 1);
    let s = mysql::MysqlStore::connect_replica(&url, keyring).await?;
    let db = crate::infra::db::Db::Mysql(s.pool().clone());
    Ok((Arc::new(s), db))
}

/// Open a database URL, run migrations, and hand out its parts. Refuses a log whose
/// newest event was sealed with a chain key `keyring` does not hold: the key file is
/// the wrong one (or was lost), and sealing on would fork the evidence.
pub async fn open_with(url: &str, keyring: Arc<Keyring>) -> anyhow::Result<Database> {
    let database = if url.starts_with("mysql://") || url.starts_with("mariadb://") {
        let url = url.replacen("mariadb://", "mysql://", 1);
        let s = mysql::MysqlStore::connect(&url, keyring.clone()).await?;
        let db = crate::infra::db::Db::Mysql(s.pool().clone());
        let keys = crate::infra::auth::KeyStore::new(db.clone(), keyring);
        Database {
            store: Arc::new(s),
            keys,
            db,
        }
    } else if url.starts_with("sqlite:") {
        let s = sqlite::SqliteStore::connect(url, keyring.clone()).await?;
        let db = crate::infra::db::Db::Sqlite(s.pool().clone());
        let keys = crate::infra::auth::KeyStore::new(db.clone(), keyring);
        Database {
            store: Arc::new(s),
            keys,
            db,
        }
    } else {
        anyhow::bail!("database URL must start with mysql:// or sqlite:, got {url:?}")
    };
    check_newest_key(database.store.as_ref()).await?;
    Ok(database)
}

async fn check_newest_key(store: &dyn EventStore) -> anyhow::Result<()> {
    let head = store.head_position().await?;
    let newest = store.read_positions(head, head).await?;
    if let Some(e) = newest.first() {
        let ring = store.keyring();
        if e.hash_key != LEGACY_KEY_ID && !ring.chain_key_ids().contains(&e.hash_key) {
            anyhow::bail!(
                "the newest event (position {head}) was sealed with chain key {:?}, which \
                 the integrity key file does not hold (it holds {:?}): point \
                 FACTLEDGER_INTEGRITY_KEYS at this deployment's key file",
                e.hash_key,
                ring.chain_key_ids()
            );
        }
    }
    Ok(())
}
