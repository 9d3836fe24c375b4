//! Payment passwords (R-PAY-1): an argon2id hash per user in `payment_passwords`,
//! never in an event (the log is forever and copied to every replica), an API
//! response or a log line. Wrong attempts are counted per user; after
//! [`ATTEMPTS_MAX`] in a row the password is locked for [`LOCK_MS`], and while it is
//! locked even the right password is refused (so guessing cannot continue in the
//! background). A right password resets the count.
//!
//! The count is kept with single-statement updates (`failed_attempts =
//! failed_attempts + 1`), so concurrent wrong guesses are all counted.

use crate::infra::db::{now_ms, Db, Get};
use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use factledger_projections::table::{Cell, ColType, Column};

/// Wrong passwords in a row before the lock.
pub const ATTEMPTS_MAX: i64 = 5;
/// How long a lock lasts.
pub const LOCK_MS: i64 = 15 * 60 * 1_000;
/// Shortest and longest accepted password (bytes).
pub const PASSWORD_LEN_MIN: usize = 6;
pub const PASSWORD_LEN_MAX: usize = 128;

/// The argon2id cost: memory in KiB, iterations, lanes. The default is OWASP's
/// minimum for argon2id (19 MiB, 2 iterations, 1 lane).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cost {
    pub memory_kib: u32,
    pub iterations: u32,
    pub lanes: u32,
}

impl Default for Cost {
    fn default() -> Self {
        Cost {
            memory_kib: 19 * 1024,
            iterations: 2,
            lanes: 1,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PasswordError {
    #[error("no payment password is set for this user")]
    NotSet,
    #[error("the payment password is wrong; {remaining} attempts left before it is locked")]
    Wrong { remaining: i64 },
    #[error("too many wrong payment passwords: locked for {retry_after_s} more seconds")]
    Locked { retry_after_s: i64 },
    #[error("the password must be {PASSWORD_LEN_MIN} to {PASSWORD_LEN_MAX} bytes")]
    Invalid,
    #[error("hashing failed: {0}")]
    Hash(String),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

impl PasswordError {
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotSet => "PAYMENT_PASSWORD_NOT_SET",
            Self::Wrong { .. } => "PAYMENT_PASSWORD_WRONG",
            Self::Locked { .. } => "PAYMENT_PASSWORD_LOCKED",
            Self::Invalid => "INVALID_FIELD",
            Self::Hash(_) | Self::Db(_) => "INTERNAL",
        }
    }
}

/// The hasher of one cost.
fn hasher(cost: Cost) -> Result<Argon2<'static>, PasswordError> {
    let params = Params::new(cost.memory_kib, cost.iterations, cost.lanes, None)
        .map_err(|e| PasswordError::Hash(e.to_string()))?;
    Ok(Argon2::new(Algorithm::Argon2id, Version::V0x13, params))
}

/// The PHC string of `password` with a fresh salt (CPU-bound: run it off the
/// async workers).
pub async fn hash(password: &str, cost: Cost) -> Result<String, PasswordError> {
    if !(PASSWORD_LEN_MIN..=PASSWORD_LEN_MAX).contains(&password.len()) {
        return Err(PasswordError::Invalid);
    }
    let password = password.to_owned();
    tokio::task::spawn_blocking(move || {
        let salt = SaltString::generate(&mut OsRng);
        hasher(cost)?
            .hash_password(password.as_bytes(), &salt)
            .map(|h| h.to_string())
            .map_err(|e| PasswordError::Hash(e.to_string()))
    })
    .await
    .map_err(|e| PasswordError::Hash(e.to_string()))?
}

/// Set (or replace) a user's payment password; clears any lock.
pub async fn set(db: &Db, user_id: &str, password: &str, cost: Cost) -> Result<(), PasswordError> {
    let phc = hash(password, cost).await?;
    let sql = db.dialect().upsert(
        "payment_passwords",
        &[
            "user_id",
            "password_hash",
            "failed_attempts",
            "locked_until_ms",
            "updated_at_ms",
        ],
        &["user_id"],
        &[
            "password_hash",
            "failed_attempts",
            "locked_until_ms",
            "updated_at_ms",
        ],
    );
    db.exec(
        &sql,
        &[
            Cell::text(user_id),
            Cell::Text(phc),
            Cell::Int(0),
            Cell::Int(0),
            Cell::Int(now_ms()),
        ],
    )
    .await?;
    Ok(())
}

/// Whether `user_id` has a payment password.
pub async fn is_set(db: &Db, user_id: &str) -> Result<bool, PasswordError> {
    Ok(db
        .fetch_i64(
            "SELECT COUNT(*) FROM payment_passwords WHERE user_id = ?",
            &[Cell::text(user_id)],
        )
        .await?
        > 0)
}

const ROW: &[Column] = &[
    Column {
        name: "password_hash",
        ty: ColType::Text,
    },
    Column {
        name: "failed_attempts",
        ty: ColType::Int,
    },
    Column {
        name: "locked_until_ms",
        ty: ColType::Int,
    },
];

/// Check `password` against the user's hash, counting a wrong one and locking
/// after [`ATTEMPTS_MAX`].
pub async fn verify(db: &Db, user_id: &str, password: &str) -> Result<(), PasswordError> {
    let row = db
        .fetch_optional(
            "SELECT password_hash, failed_attempts, locked_until_ms FROM payment_passwords \
             WHERE user_id = ?",
            &[Cell::text(user_id)],
            ROW,
        )
        .await?
        .ok_or(PasswordError::NotSet)?;
    let now = now_ms();
    let locked_until = row.int("locked_until_ms")?;
    if locked_until > now {
        return Err(PasswordError::Locked {
            retry_after_s: (locked_until - now + 999) / 1_000,
        });
    }
    let phc = row.text("password_hash")?;
    let given = password.to_owned();
    let right = tokio::task::spawn_blocking(move || {
        let parsed = PasswordHash::new(&phc).map_err(|e| PasswordError::Hash(e.to_string()))?;
        Ok::<_, PasswordError>(
            Argon2::default()
                .verify_password(given.as_bytes(), &parsed)
                .is_ok(),
        )
    })
    .await
    .map_err(|e| PasswordError::Hash(e.to_string()))??;
    let key = Cell::text(user_id);
    if right {
        if row.int("failed_attempts")? > 0 {
            db.exec(
                "UPDATE payment_passwords SET failed_attempts = 0, locked_until_ms = 0 \
                 WHERE user_id = ?",
                &[key],
            )
            .await?;
        }
        return Ok(());
    }
    // Count the miss; the statement that reaches the limit also sets the lock.
    db.exec(
        // The lock first: MariaDB evaluates SET left to right on the new values.
        "UPDATE payment_passwords SET locked_until_ms = CASE WHEN failed_attempts + 1 >= ? \
         THEN ? ELSE locked_until_ms END, failed_attempts = failed_attempts + 1 \
         WHERE user_id = ?",
        &[
            Cell::Int(ATTEMPTS_MAX),
            Cell::Int(now + LOCK_MS),
            key.clone(),
        ],
    )
    .await?;
    let failed = db
        .fetch_i64(
            "SELECT failed_attempts FROM payment_passwords WHERE user_id = ?",
            std::slice::from_ref(&key),
        )
        .await?;
    if failed >= ATTEMPTS_MAX {
        // The lock has begun; the next try starts a fresh count once it ends.
        db.exec(
            "UPDATE payment_passwords SET failed_attempts = 0 WHERE user_id = ? \
             AND locked_until_ms > ?",
            &[key, Cell::Int(now)],
        )
        .await?;
        return Err(PasswordError::Locked {
            retry_after_s: LOCK_MS / 1_000,
        });
    }
    Err(PasswordError::Wrong {
        remaining: ATTEMPTS_MAX - failed,
    })
}
