//! API keys and roles. Keys are random 256-bit secrets; only their SHA-256 is stored
//! (a fast hash is right for high-entropy secrets — argon2 is for guessable
//! passwords — and keeps authentication off the hot path's CPU budget).
//!
//! **Roles** (issue 14 F7, SPEC R-SEC-5): `service` sends business commands; operator
//! actions — attribution corrections, recovery resolutions, projection rebuilds,
//! repairing reconciliations, job controls, `UNFINISHED` bill refreshes — need
//! `operator` or `admin` ([`Role::can_operate`]); `auditor` only reads (and verifies).
//!
//! **The first admin key** (F9): `serve` mints one only while the `api_keys` table has
//! never held a row ([`bootstrap_admin`]); once any key has existed — revoked ones
//! count — it starts without minting and leaves the key file alone, so revoking every
//! key never hands a fresh admin key to whoever restarts the process. Recovering
//! from "no admin left" is the explicit `factledger keys bootstrap`
//! ([`KeyStore::bootstrap`]), which needs database access and refuses while an
//! unrevoked admin key exists.

use chrono::Utc;
use rand::Rng;
use sha2::{Digest, Sha256};
use sqlx::{MySqlPool, Row, SqlitePool};
use std::fmt;
use std::str::FromStr;

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

/// Where keys live: the `api_keys` table of the same database as the events.
#[derive(Clone)]
pub enum KeyStore {
    Mysql(MySqlPool),
    Sqlite(SqlitePool),
}

impl KeyStore {
    pub async fn create(&self, role: Role) -> anyhow::Result<NewKey> {
        let key = generate(role);
        let hash = hash_key(&key.secret);
        let now = Utc::now();
        match self {
            KeyStore::Mysql(p) => {
                sqlx::query(
                    "INSERT INTO api_keys (key_id, key_hash, role, created_at) VALUES (?, ?, ?, ?)",
                )
                .bind(&key.key_id)
                .bind(&hash)
                .bind(role.as_str())
                .bind(now.naive_utc())
                .execute(p)
                .await?;
            }
            KeyStore::Sqlite(p) => {
                sqlx::query(
                    "INSERT INTO api_keys (key_id, key_hash, role, created_at) VALUES (?, ?, ?, ?)",
                )
                .bind(&key.key_id)
                .bind(&hash)
                .bind(role.as_str())
                .bind(now.to_rfc3339())
                .execute(p)
                .await?;
            }
        }
        Ok(key)
    }

    /// Revoke a key by id; returns whether an active key was revoked.
    pub async fn revoke(&self, key_id: &str) -> anyhow::Result<bool> {
        let n = match self {
            KeyStore::Mysql(p) => sqlx::query(
                "UPDATE api_keys SET revoked_at = ? WHERE key_id = ? AND revoked_at IS NULL",
            )
            .bind(Utc::now().naive_utc())
            .bind(key_id)
            .execute(p)
            .await?
            .rows_affected(),
            KeyStore::Sqlite(p) => sqlx::query(
                "UPDATE api_keys SET revoked_at = ? WHERE key_id = ? AND revoked_at IS NULL",
            )
            .bind(Utc::now().to_rfc3339())
            .bind(key_id)
            .execute(p)
            .await?
            .rows_affected(),
        };
        Ok(n == 1)
    }

    /// The active principal a presented secret belongs to, if any.
    pub async fn authenticate(&self, secret: &str) -> anyhow::Result<Option<Principal>> {
        let hash = hash_key(secret);
        let sql = "SELECT key_id, role FROM api_keys WHERE key_hash = ? AND revoked_at IS NULL";
        let row: Option<(String, String)> = match self {
            KeyStore::Mysql(p) => sqlx::query_as(sql).bind(&hash).fetch_optional(p).await?,
            KeyStore::Sqlite(p) => sqlx::query_as(sql).bind(&hash).fetch_optional(p).await?,
        };
        Ok(match row {
            Some((key_id, role)) => Some(Principal {
                key_id,
                role: role.parse().map_err(anyhow::Error::msg)?,
            }),
            None => None,
        })
    }

    /// Every key ever created, revoked ones included.
    pub async fn count_ever(&self) -> anyhow::Result<i64> {
        let sql = "SELECT COUNT(*) FROM api_keys";
        Ok(match self {
            KeyStore::Mysql(p) => sqlx::query_scalar(sql).fetch_one(p).await?,
            KeyStore::Sqlite(p) => sqlx::query_scalar(sql).fetch_one(p).await?,
        })
    }

    /// Unrevoked admin keys.
    pub async fn count_active_admins(&self) -> anyhow::Result<i64> {
        let sql = "SELECT COUNT(*) FROM api_keys WHERE role = 'admin' AND revoked_at IS NULL";
        Ok(match self {
            KeyStore::Mysql(p) => sqlx::query_scalar(sql).fetch_one(p).await?,
            KeyStore::Sqlite(p) => sqlx::query_scalar(sql).fetch_one(p).await?,
        })
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
        let sql = "SELECT COUNT(*) FROM api_keys WHERE revoked_at IS NULL";
        Ok(match self {
            KeyStore::Mysql(p) => sqlx::query_scalar(sql).fetch_one(p).await?,
            KeyStore::Sqlite(p) => sqlx::query_scalar(sql).fetch_one(p).await?,
        })
    }

    pub async fn list(&self) -> anyhow::Result<Vec<KeyInfo>> {
        let sql = "SELECT key_id, role, created_at, revoked_at IS NOT NULL AS revoked \
                   FROM api_keys ORDER BY created_at";
        let out = match self {
            KeyStore::Mysql(p) => sqlx::query(sql)
                .fetch_all(p)
                .await?
                .iter()
                .map(|r| -> anyhow::Result<KeyInfo> {
                    let created: chrono::NaiveDateTime = r.try_get(2)?;
                    Ok(KeyInfo {
                        key_id: r.try_get(0)?,
                        role: r.try_get(1)?,
                        created_at: created.and_utc().to_rfc3339(),
                        revoked: r.try_get::<i64, _>(3)? != 0,
                    })
                })
                .collect::<anyhow::Result<Vec<_>>>()?,
            KeyStore::Sqlite(p) => sqlx::query(sql)
                .fetch_all(p)
                .await?
                .iter()
                .map(|r| -> anyhow::Result<KeyInfo> {
                    Ok(KeyInfo {
                        key_id: r.try_get(0)?,
                        role: r.try_get(1)?,
                        created_at: r.try_get(2)?,
                        revoked: r.try_get::<i64, _>(3)? != 0,
                    })
                })
                .collect::<anyhow::Result<Vec<_>>>()?,
        };
        Ok(out)
    }
}

/// File the first admin key is written to (mode 0600), in the working directory.
pub const ADMIN_KEY_FILE: &str = "factledger-admin.key";

/// On the very first start (the key table has never held a row, revoked keys
/// included) create an admin key, write it to [`ADMIN_KEY_FILE`] with mode 0600 and
/// return it so the caller prints it once. Otherwise create nothing and leave the
/// file alone (F9; see the module doc).
pub async fn bootstrap_admin(
    keys: &KeyStore,
    dir: &std::path::Path,
) -> anyhow::Result<Option<NewKey>> {
    if keys.count_ever().await? > 0 {
        return Ok(None);
    }
    let key = keys.create(Role::Admin).await?;
    let path = dir.join(ADMIN_KEY_FILE);
    write_secret_file(&path, &key.secret)?;
    Ok(Some(key))
}

pub(crate) fn write_secret_file(path: &std::path::Path, secret: &str) -> anyhow::Result<()> {
    use std::io::Write;
    #[cfg(unix)]
    use std::os::unix::fs::OpenOptionsExt;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    opts.mode(0o600);
    let mut f = opts.open(path)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        // The file may have existed with wider permissions: tighten it.
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    writeln!(f, "{secret}")?;
    Ok(())
}
