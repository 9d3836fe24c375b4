//! API keys and roles. Keys are random 256-bit secrets; only their SHA-256 is stored
//! (a fast hash is right for high-entropy secrets — argon2 is for guessable
//! passwords — and keeps authentication off the hot path's CPU budget).
//!
//! **Roles** (issue 14 F7, SPEC R-SEC-5): `service` sends business commands; operator
//! actions — attribution corrections, recovery resolutions, projection rebuilds,
//! repairing reconciliations, job controls, `UNFINISHED` bill refreshes — need
//! `operator` or `admin` ([`Role::can_operate`]); `auditor` only reads (and verifies).
//!
//! **Key rows are sealed** (issue 32 item 5): every `api_keys` row carries `mac`, an
//! HMAC of its key id, key hash and role under a chain key of the integrity keyring
//! (the key file outside the database: `store::integrity::keys`), and
//! [`KeyStore::authenticate`] refuses a row whose seal is missing or wrong. So write
//! access to the database alone cannot add a key, nor raise a key's role: an
//! inserted or edited row is refused (logged, and counted in
//! `factledger_auth_key_rows_refused_total`). Rows made before the seal existed are
//! sealed once, by the process that applies migration [`KEY_MAC_MIGRATION`]
//! ([`seal_unsealed`]). What a seal does not cover: `revoked_at` (clearing it
//! brings a revoked key back; the revocation's admin-log event still records it)
//! and a row deleted.
//!
//! **The first admin key** (F9): `serve` mints one only on a fresh install: the
//! `api_keys` table has never held a row *and* the log has no event
//! ([`bootstrap_admin`]). Once any key has existed — revoked ones count — or the log
//! has history, it starts without minting and leaves the key file alone, so neither
//! revoking every key nor emptying `api_keys` hands a fresh admin key to whoever
//! restarts the process. Recovering from "no admin left" is the explicit, audited
//! `factledger keys bootstrap` ([`KeyStore::bootstrap`]), which needs database
//! access and the key file, and refuses while an unrevoked (validly sealed) admin
//! key exists.
//!
//! **Cache** (issue 19, item 5): an accepted key is remembered for
//! [`AUTH_CACHE_TTL_MS`], so a busy caller costs one `api_keys` read per second
//! instead of one per request. A revocation through this `KeyStore` drops the key
//! from the cache at once; one made by another process (`factledger keys revoke`, the
//! only way keys are managed) takes effect in a running `serve` within the TTL. Unknown and revoked secrets are never cached
//! (a key created a moment ago works at once), and the cache is bounded
//! ([`AUTH_CACHE_KEYS_MAX`]: emptied when full).

use crate::infra::db::{rfc3339_of, Db, Get};
// The keyring straight from its file: `store` opens the key store (and seals old
// rows), so importing `store` itself would tie the two in a circle.
use crate::infra::store::integrity::keys::Keyring;
use chrono::Utc;
use factledger_projections::table::{Cell, ColType, Column};
use rand::Rng;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The domain of an `api_keys` row's seal (never equal to an event hash's input).
const KEY_ROW_DOMAIN: &str = "factledger-api-key/1";
/// The migration that added `api_keys.mac`: the process that applies it seals the
/// rows that existed before ([`seal_unsealed`]).
pub const KEY_MAC_MIGRATION: i64 = 25;

/// The seal of one key row's fields.
fn seal_fields<'a>(key_id: &'a str, key_hash: &'a str, role: &'a str) -> [&'a str; 3] {
    [key_id, key_hash, role]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Everything, including key management.
    Admin,
    /// Other services sending commands.
    Service,
    /// People operating the ledger: commands and operations.
    Operator,
    /// Read-only: history, state, verification.
    Auditor,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Service => "service",
            Role::Operator => "operator",
            Role::Auditor => "auditor",
        }
    }

    /// May this role change money (send commands)?
    pub fn can_write(self) -> bool {
        !matches!(self, Role::Auditor)
    }

    /// May this role take operator actions (see the module doc)? Not `service`: a
    /// service sends business commands, people operate the ledger.
    pub fn can_operate(self) -> bool {
        matches!(self, Role::Admin | Role::Operator)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "admin" => Ok(Role::Admin),
            "service" => Ok(Role::Service),
            "operator" => Ok(Role::Operator),
            "auditor" => Ok(Role::Auditor),
            other => Err(format!(
                "unknown role {other:?}: expected admin, service, operator or auditor"
            )),
        }
    }
}

/// A caller authenticated by its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub key_id: String,
    pub role: Role,
}

impl Principal {
    /// The actor recorded in event metadata.
    pub fn actor(&self) -> String {
        format!("key:{}", self.key_id)
    }
}

/// A freshly created key: the secret is shown once and never stored.
#[derive(Debug, Clone)]
pub struct NewKey {
    pub key_id: String,
    pub secret: String,
    pub role: Role,
}

pub fn hash_key(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

fn generate(role: Role) -> NewKey {
    let mut rng = rand::rng();
    let mut id = [0u8; 6];
    let mut secret = [0u8; 32];
    rng.fill_bytes(&mut id);
    rng.fill_bytes(&mut secret);
    let key_id = hex::encode(id);
    NewKey {
        secret: format!("flk_{key_id}_{}", hex::encode(secret)),
        key_id,
        role,
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct KeyInfo {
    pub key_id: String,
    pub role: String,
    pub created_at: String,
    pub revoked: bool,
}

/// Where keys live: the `api_keys` table of the same database as the events, through
/// the one handle ([`Db`]).
#[derive(Clone)]
pub struct KeyStore {
    db: Db,
    /// Seals and checks key rows (see the module doc).
    keyring: Arc<Keyring>,
    /// Accepted keys by their hash, with when they were read (see the module doc).
    cache: std::sync::Arc<std::sync::Mutex<HashMap<String, (Principal, Instant)>>>,
}

/// How long an accepted key is served from the cache before it is read again.
pub const AUTH_CACHE_TTL_MS: u64 = 1_000;
/// Keys cached at most; the cache is emptied when it would grow past this.
pub const AUTH_CACHE_KEYS_MAX: usize = 10_000;

/// `SELECT COUNT(*) …` as one integer.
const COUNT_EVER: &str = "SELECT COUNT(*) FROM api_keys";
const COUNT_ACTIVE: &str = "SELECT COUNT(*) FROM api_keys WHERE revoked_at IS NULL";

/// A key row as read for checking its seal.
const SEALED_ROW: &[Column] = &[
    Column {
        name: "key_id",
        ty: ColType::Text,
    },
    Column {
        name: "key_hash",
        ty: ColType::Text,
    },
    Column {
        name: "role",
        ty: ColType::Text,
    },
    Column {
        name: "mac",
        ty: ColType::OptText,
    },
];

impl KeyStore {
    pub fn new(db: Db, keyring: Arc<Keyring>) -> KeyStore {
        KeyStore {
            db,
            keyring,
            cache: Default::default(),
        }
    }

    /// Whether a row read with [`SEALED_ROW`] carries its valid seal; a row that does
    /// not is logged and counted (someone wrote `api_keys` without the key file).
    fn sealed(&self, row: &factledger_projections::table::MemRow) -> anyhow::Result<bool> {
        let (key_id, key_hash, role) = (
            row.text("key_id")?,
            row.text("key_hash")?,
            row.text("role")?,
        );
        let mac = row.opt_text("mac")?.unwrap_or_default();
        let ok = self.keyring.check_record(
            KEY_ROW_DOMAIN,
            &seal_fields(&key_id, &key_hash, &role),
            &mac,
        );
        if !ok {
            tracing::error!(
                key_id = %key_id,
                role = %role,
                "an api_keys row without a valid seal was refused: it was not written by \
                 factledger with this deployment's integrity key file"
            );
            metrics::counter!("factledger_auth_key_rows_refused_total").increment(1);
        }
        Ok(ok)
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Principal, Instant)>> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub async fn create(&self, role: Role) -> anyhow::Result<NewKey> {
        let key = generate(role);
        let key_hash = hash_key(&key.secret);
        let mac = self.keyring.seal_record(
            KEY_ROW_DOMAIN,
            &seal_fields(&key.key_id, &key_hash, role.as_str()),
        );
        let args = [
            Cell::text(&key.key_id),
            Cell::text(key_hash),
            Cell::text(role.as_str()),
            self.db.dialect().datetime(&Utc::now()),
            Cell::text(mac),
        ];
        let sql = "INSERT INTO api_keys (key_id, key_hash, role, created_at, mac) \
                   VALUES (?, ?, ?, ?, ?)";
        self.db.exec(sql, &args).await?;
        Ok(key)
    }

    /// Revoke a key by id; returns whether an active key was revoked.
    pub async fn revoke(&self, key_id: &str) -> anyhow::Result<bool> {
        let sql = "UPDATE api_keys SET revoked_at = ? WHERE key_id = ? AND revoked_at IS NULL";
        let args = [self.db.dialect().datetime(&Utc::now()), Cell::text(key_id)];
        let revoked = self.db.exec(sql, &args).await? == 1;
        self.cache().retain(|_, (p, _)| p.key_id != key_id);
        Ok(revoked)
    }

    /// The active principal a presented secret belongs to, if any: a row with a
    /// valid seal (see the module doc).
    pub async fn authenticate(&self, secret: &str) -> anyhow::Result<Option<Principal>> {
        let hash = hash_key(secret);
        let ttl = Duration::from_millis(AUTH_CACHE_TTL_MS);
        if let Some((p, at)) = self.cache().get(&hash) {
            if at.elapsed() < ttl {
                return Ok(Some(p.clone()));
            }
        }
        let sql = "SELECT key_id, key_hash, role, mac FROM api_keys \
                   WHERE key_hash = ? AND revoked_at IS NULL";
        let args = [Cell::text(hash.clone())];
        let row = match self.db.fetch_optional(sql, &args, SEALED_ROW).await? {
            Some(row) if self.sealed(&row)? => row,
            _ => {
                self.cache().remove(&hash);
                return Ok(None);
            }
        };
        let principal = Principal {
            key_id: row.text("key_id")?,
            role: row.text("role")?.parse().map_err(anyhow::Error::msg)?,
        };
        let mut cache = self.cache();
        if cache.len() >= AUTH_CACHE_KEYS_MAX {
            cache.clear();
        }
        cache.insert(hash, (principal.clone(), Instant::now()));
        Ok(Some(principal))
    }

    /// Every key ever created, revoked ones included.
    pub async fn count_ever(&self) -> anyhow::Result<i64> {
        Ok(self.db.fetch_i64(COUNT_EVER, &[]).await?)
    }

    /// Unrevoked admin keys with a valid seal (an inserted admin row does not
    /// count, so it cannot hold off `keys bootstrap`).
    pub async fn count_active_admins(&self) -> anyhow::Result<i64> {
        let sql = "SELECT key_id, key_hash, role, mac FROM api_keys \
                   WHERE role = 'admin' AND revoked_at IS NULL";
        let mut n = 0;
        for row in self.db.fetch(sql, &[], SEALED_ROW).await? {
            n += i64::from(self.sealed(&row)?);
        }
        Ok(n)
    }

    /// `factledger keys bootstrap`: a new admin key when no unrevoked admin key
    /// exists; `None` (nothing created) while one does.
    pub async fn bootstrap(&self) -> anyhow::Result<Option<NewKey>> {
        if self.count_active_admins().await? > 0 {
            return Ok(None);
        }
        Ok(Some(self.create(Role::Admin).await?))
    }

    pub async fn count_active(&self) -> anyhow::Result<i64> {
        Ok(self.db.fetch_i64(COUNT_ACTIVE, &[]).await?)
    }

    pub async fn list(&self) -> anyhow::Result<Vec<KeyInfo>> {
        const INFO: &[Column] = &[
            Column {
                name: "key_id",
                ty: ColType::Text,
            },
            Column {
                name: "role",
                ty: ColType::Text,
            },
            Column {
                name: "created_at",
                ty: ColType::Text,
            },
            Column {
                name: "revoked",
                ty: ColType::Int,
            },
        ];
        let sql = format!(
            "SELECT key_id, role, {} AS created_at, revoked_at IS NOT NULL AS revoked \
             FROM api_keys ORDER BY created_at",
            self.db.dialect().datetime_text("created_at")
        );
        let rows = self.db.fetch(&sql, &[], INFO).await?;
        rows.iter()
            .map(|r| {
                Ok(KeyInfo {
                    key_id: r.text("key_id")?,
                    role: r.text("role")?,
                    created_at: rfc3339_of(&r.text("created_at")?).map_err(anyhow::Error::msg)?,
                    revoked: r.int("revoked")? != 0,
                })
            })
            .collect()
    }
}

/// File the first admin key is written to (mode 0600), in the working directory.
pub const ADMIN_KEY_FILE: &str = "factledger-admin.key";

/// On a fresh install (the key table has never held a row, revoked keys included,
/// and the log's head is 0: no event) create an admin key, write it to
/// [`ADMIN_KEY_FILE`] with mode 0600 and return it so the caller prints it once.
/// Otherwise create nothing and leave the file alone (F9, issue 32 item 5; see the
/// module doc).
pub async fn bootstrap_admin(
    keys: &KeyStore,
    dir: &std::path::Path,
    log_head: i64,
) -> anyhow::Result<Option<NewKey>> {
    if keys.count_ever().await? > 0 {
        return Ok(None);
    }
    if log_head > 0 {
        tracing::error!(
            log_head,
            "api_keys is empty but the log has history: no admin key is minted; an \
             operator with the database and the integrity key file runs \
             `factledger keys bootstrap` (audited)"
        );
        return Ok(None);
    }
    let key = keys.create(Role::Admin).await?;
    let path = dir.join(ADMIN_KEY_FILE);
    crate::infra::secret_file::write_secret_file(&path, &key.secret)?;
    Ok(Some(key))
}

/// Seal the `api_keys` rows that have no seal yet: only the process that applies
/// migration [`KEY_MAC_MIGRATION`] calls it, right after applying it, so the rows it
/// seals are the ones that existed before seals did. Returns how many it sealed.
pub async fn seal_unsealed(db: &Db, keyring: &Keyring) -> anyhow::Result<u64> {
    let sql = "SELECT key_id, key_hash, role, mac FROM api_keys WHERE mac IS NULL";
    let mut sealed = 0;
    for row in db.fetch(sql, &[], SEALED_ROW).await? {
        let (key_id, key_hash, role) = (
            row.text("key_id")?,
            row.text("key_hash")?,
            row.text("role")?,
        );
        let mac = keyring.seal_record(KEY_ROW_DOMAIN, &seal_fields(&key_id, &key_hash, &role));
        sealed += db
            .exec(
                "UPDATE api_keys SET mac = ? WHERE key_id = ? AND mac IS NULL",
                &[Cell::text(mac), Cell::text(key_id)],
            )
            .await?;
    }
    if sealed > 0 {
        tracing::warn!(
            sealed,
            "sealed the API keys made before key rows were sealed"
        );
    }
    Ok(sealed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key store on a private in-memory SQLite `api_keys`.
    async fn keys() -> KeyStore {
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(1)
            .connect("sqlite::memory:")
            .await
            .unwrap();
        sqlx::query(
            "CREATE TABLE api_keys (key_id TEXT PRIMARY KEY, key_hash TEXT NOT NULL, \
             role TEXT NOT NULL, created_at TEXT NOT NULL, revoked_at TEXT, mac TEXT)",
        )
        .execute(&pool)
        .await
        .unwrap();
        KeyStore::new(Db::Sqlite(pool), Arc::new(Keyring::generate()))
    }

    #[tokio::test]
    async fn an_accepted_key_is_served_from_the_cache_until_its_ttl() {
        let keys = keys().await;
        let key = keys.create(Role::Service).await.unwrap();
        let p = keys.authenticate(&key.secret).await.unwrap().unwrap();
        assert_eq!(
            (p.key_id.as_str(), p.role),
            (key.key_id.as_str(), Role::Service)
        );
        // Gone from the table behind the cache's back: still served from the cache...
        keys.db.exec("DELETE FROM api_keys", &[]).await.unwrap();
        assert_eq!(keys.authenticate(&key.secret).await.unwrap(), Some(p));
        // ...until the TTL has passed.
        tokio::time::sleep(Duration::from_millis(AUTH_CACHE_TTL_MS + 50)).await;
        assert_eq!(keys.authenticate(&key.secret).await.unwrap(), None);
        // A refused secret is not cached: a key created now works at once.
        let later = keys.create(Role::Auditor).await.unwrap();
        assert!(keys.authenticate("nope").await.unwrap().is_none());
        assert!(keys.authenticate(&later.secret).await.unwrap().is_some());
    }

    #[tokio::test]
    async fn a_revocation_here_drops_the_key_from_the_cache_at_once() {
        let keys = keys().await;
        let key = keys.create(Role::Operator).await.unwrap();
        assert!(keys.authenticate(&key.secret).await.unwrap().is_some());
        assert!(keys.revoke(&key.key_id).await.unwrap());
        assert_eq!(keys.authenticate(&key.secret).await.unwrap(), None);
    }
}
