//! Payment passwords (R-PAY-1): an argon2id hash per user in `payment_passwords`,
//! never in an event (the log is forever and copied to every replica), an API
//! response or a log line. Wrong attempts are counted per user; after
//! [`ATTEMPTS_MAX`] in a row the password is locked for [`LOCK_MS`], and while it is
//! locked even the right password is refused (so guessing cannot continue in the
//! background). A right password resets the count.
//!
//! **The lockout is atomic per user** (issue 32 item 4): an attempt is counted as a
//! miss *before* it is checked, by one conditional statement that only succeeds while
//! fewer than [`ATTEMPTS_MAX`] attempts are counted and no lock runs (the statement
//! that counts the last one also starts the lock). So however many attempts arrive
//! at once, at most [`ATTEMPTS_MAX`] are ever checked before the lock; the others are
//! refused `LOCKED` without running argon2. A right password then resets the count,
//! unless a lock has begun meanwhile that it did not start: attempts admitted beside
//! it used up the allowance, and the lock stands. Within one process a user's
//! attempts also take turns ([`Gate`]'s per-user turn): counting before checking
//! would otherwise let five concurrent *right* attempts lock their own user out.
//!
//! **Argon2 work is bounded** ([`Gate`]): every hash and every check holds a permit of
//! one semaphore sized to the cores, for as long as argon2 runs (the permit moves into
//! the blocking task, so a request given up by its client still holds it until its
//! hash is done). Each run needs its `memory_kib`, so the permits bound memory: the
//! 512-thread blocking pool would otherwise run ~100 hashes of 19 MiB at once. Nor is
//! that memory allocated per run: each run takes one of the gate's buffers (at most
//! one per permit, kept for the next run). Allocating 19 MiB per run let glibc keep
//! freed blocks in its per-thread arenas (its mmap threshold rises to the size of a
//! freed block): a burst of 100 left the process at ~700 MB even with two permits.
//! A request that finds no permit within [`GATE_WAIT_MS`] is answered 503 `BUSY`
//! with `Retry-After`.

use crate::infra::db::{now_ms, Db, Get};
use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{
    Decimal, Ident, Output, ParamsString, PasswordHash, PasswordHasher, PasswordVerifier, Salt,
    SaltString,
};
use argon2::{Algorithm, Argon2, Block, Params, Version};
use factledger_projections::table::{Cell, ColType, Column};
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Wrong passwords in a row before the lock.
pub const ATTEMPTS_MAX: i64 = 5;
/// How long a lock lasts.
pub const LOCK_MS: i64 = 15 * 60 * 1_000;
/// Shortest and longest accepted password (bytes).
pub const PASSWORD_LEN_MIN: usize = 6;
pub const PASSWORD_LEN_MAX: usize = 128;
/// How long a request waits for an argon2 permit before it is answered `BUSY`: a few
/// hashes' time (one is ~50 ms at the default cost), so a short burst queues and a
/// flood is turned away instead of piling up behind the permits.
pub const GATE_WAIT_MS: u64 = 2_000;
/// How long an attempt waits for its user's turn (one attempt of a user is checked
/// at a time in a process) before it is answered `BUSY`: long enough for a burst of
/// one user's own requests (16 at once, each a few statements and one hash), well
/// under the 30 s request timeout.
pub const TURN_WAIT_MS: u64 = 10_000;
/// The `Retry-After` of a `BUSY` answer.
pub const BUSY_RETRY_AFTER_S: u64 = 1;

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
    #[error(
        "too many payment passwords are being hashed or checked right now; retry in \
         {BUSY_RETRY_AFTER_S} s"
    )]
    Busy,
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
            Self::Busy => "BUSY",
            Self::Hash(_) | Self::Db(_) => "INTERNAL",
        }
    }
}

/// The answer to [`PasswordError::Busy`]: 503 `BUSY` with `Retry-After`.
pub fn busy_problem(e: &PasswordError) -> crate::runtime::http::Problem {
    crate::runtime::http::Problem::new(
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        e.code(),
        e.to_string(),
    )
    .retry_after(BUSY_RETRY_AFTER_S)
}

/// The bound on argon2 work (see the module doc): a semaphore of one permit per core.
#[derive(Clone, Debug)]
pub struct Gate {
    permits: Arc<Semaphore>,
    wait: Duration,
    /// argon2 memory, one buffer per permit at most, reused run after run.
    buffers: Arc<std::sync::Mutex<Vec<Vec<Block>>>>,
    /// One turn per user with an attempt in progress (removed when its last holder
    /// is done, so the map holds only users being checked now).
    turns: Arc<std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
}

/// A user's turn to have an attempt checked (see [`Gate::turn`]).
struct Turn {
    turns: Arc<std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
    user_id: String,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut turns = self.turns.lock().unwrap_or_else(|p| p.into_inner());
        self.guard = None;
        // Only the map and this turn's clone (now released) held it: nobody waits.
        if turns
            .get(&self.user_id)
            .is_some_and(|m| Arc::strong_count(m) == 1)
        {
            turns.remove(&self.user_id);
        }
    }
}

impl Default for Gate {
    /// One permit per core (`available_parallelism`, 1 when unknown).
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Gate::new(cores, Duration::from_millis(GATE_WAIT_MS))
    }
}

impl Gate {
    /// `permits` argon2 runs at once (at least 1); a request waits `wait` for one.
    pub fn new(permits: usize, wait: Duration) -> Gate {
        Gate {
            permits: Arc::new(Semaphore::new(permits.max(1))),
            wait,
            buffers: Default::default(),
            turns: Default::default(),
        }
    }

    /// Permits free now (tests, metrics).
    pub fn available(&self) -> usize {
        self.permits.available_permits()
    }

    /// Wait (at most [`TURN_WAIT_MS`]) until no other attempt of `user_id` is being
    /// checked in this process.
    async fn turn(&self, user_id: &str) -> Result<Turn, PasswordError> {
        let mutex = {
            let mut turns = self.turns.lock().unwrap_or_else(|p| p.into_inner());
            turns.entry(user_id.to_owned()).or_default().clone()
        };
        let mut turn = Turn {
            turns: self.turns.clone(),
            user_id: user_id.to_owned(),
            guard: None,
        };
        let wait = Duration::from_millis(TURN_WAIT_MS);
        match tokio::time::timeout(wait, mutex.lock_owned()).await {
            Ok(guard) => {
                turn.guard = Some(guard);
                Ok(turn)
            }
            Err(_) => {
                metrics::counter!("factledger_payment_password_busy_total").increment(1);
                Err(PasswordError::Busy)
            }
        }
    }

    async fn permit(&self) -> Result<OwnedSemaphorePermit, PasswordError> {
        match tokio::time::timeout(self.wait, self.permits.clone().acquire_owned()).await {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(_)) | Err(_) => {
                metrics::counter!("factledger_payment_password_busy_total").increment(1);
                Err(PasswordError::Busy)
            }
        }
    }

    /// Run `work` on the blocking pool with a buffer, holding a permit until it ends.
    async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Reused) -> Result<T, PasswordError> + Send + 'static,
    ) -> Result<T, PasswordError> {
        let permit = self.permit().await?;
        let buffers = self.buffers.clone();
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let pool = || buffers.lock().unwrap_or_else(|p| p.into_inner());
            let hasher = Reused(std::cell::RefCell::new(pool().pop().unwrap_or_default()));
            let done = work(&hasher);
            pool().push(hasher.0.into_inner());
            done
        })
        .await
        .map_err(|e| PasswordError::Hash(e.to_string()))?
    }
}

/// argon2 hashing into a buffer it keeps (see the module doc): the same PHC strings
/// and checks as `Argon2`'s own `PasswordHasher`, which allocates per run.
struct Reused(std::cell::RefCell<Vec<Block>>);

impl PasswordHasher for Reused {
    type Params = Params;

    fn hash_password_customized<'a>(
        &self,
        password: &[u8],
        algorithm: Option<Ident<'a>>,
        version: Option<Decimal>,
        params: Params,
        salt: impl Into<Salt<'a>>,
    ) -> argon2::password_hash::Result<PasswordHash<'a>> {
        let algorithm = algorithm
            .map(Algorithm::try_from)
            .transpose()?
            .unwrap_or(Algorithm::Argon2id);
        let version = version
            .map(Version::try_from)
            .transpose()?
            .unwrap_or(Version::V0x13);
        let salt = salt.into();
        let mut salt_arr = [0u8; 64];
        let salt_bytes = salt.decode_b64(&mut salt_arr)?;
        let argon = Argon2::new(algorithm, version, params.clone());
        let mut blocks = self.0.borrow_mut();
        if blocks.len() < params.block_count() {
            blocks.resize(params.block_count(), Block::default());
        }
        let output_len = params.output_len().unwrap_or(Params::DEFAULT_OUTPUT_LEN);
        let output = Output::init_with(output_len, |out| {
            Ok(argon.hash_password_into_with_memory(password, salt_bytes, out, &mut blocks[..])?)
        })?;
        Ok(PasswordHash {
            algorithm: algorithm.ident(),
            version: Some(version.into()),
            params: ParamsString::try_from(&params)?,
            salt: Some(salt),
            hash: Some(output),
        })
    }
}

/// The argon2 parameters of one cost.
fn params(cost: Cost) -> Result<Params, PasswordError> {
    Params::new(cost.memory_kib, cost.iterations, cost.lanes, None)
        .map_err(|e| PasswordError::Hash(e.to_string()))
}

/// The PHC string of `password` with a fresh salt (CPU-bound: run it off the
/// async workers).
pub async fn hash(gate: &Gate, password: &str, cost: Cost) -> Result<String, PasswordError> {
    if !(PASSWORD_LEN_MIN..=PASSWORD_LEN_MAX).contains(&password.len()) {
        return Err(PasswordError::Invalid);
    }
    let password = password.to_owned();
    let params = params(cost)?;
    gate.run(move |hasher| {
        let salt = SaltString::generate(&mut OsRng);
        hasher
            .hash_password_customized(
                password.as_bytes(),
                Some(Algorithm::Argon2id.ident()),
                Some(Version::V0x13.into()),
                params,
                &salt,
            )
            .map(|h| h.to_string())
            .map_err(|e| PasswordError::Hash(e.to_string()))
    })
    .await
}

/// Set (or replace) a user's payment password; clears any lock.
pub async fn set(
    db: &Db,
    gate: &Gate,
    user_id: &str,
    password: &str,
    cost: Cost,
) -> Result<(), PasswordError> {
    let phc = hash(gate, password, cost).await?;
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

/// Check `password` against the user's hash (under a [`Gate`] permit), counting the
/// attempt atomically and locking after [`ATTEMPTS_MAX`] (see the module doc).
pub async fn verify(
    db: &Db,
    gate: &Gate,
    user_id: &str,
    password: &str,
) -> Result<(), PasswordError> {
    let given = password.to_owned();
    let _turn = gate.turn(user_id).await?;
    verify_by(db, user_id, |phc| {
        gate.run(move |hasher| {
            let parsed = PasswordHash::new(&phc).map_err(|e| PasswordError::Hash(e.to_string()))?;
            Ok(hasher.verify_password(given.as_bytes(), &parsed).is_ok())
        })
    })
    .await
}

/// [`verify`] with the check given: `check(phc)` says whether the password matches
/// the stored hash. It runs only for an attempt that was admitted and counted.
pub(crate) async fn verify_by<F, Fut>(db: &Db, user_id: &str, check: F) -> Result<(), PasswordError>
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = Result<bool, PasswordError>>,
{
    let key = Cell::text(user_id);
    let now = now_ms();
    let lock_until = now + LOCK_MS;
    // A lock that has ended starts a fresh count. Only an ended lock matches, so a
    // lock another attempt starts meanwhile (ending after `now`) is left alone.
    db.exec(
        "UPDATE payment_passwords SET failed_attempts = 0, locked_until_ms = 0 \
         WHERE user_id = ? AND locked_until_ms > 0 AND locked_until_ms <= ?",
        &[key.clone(), Cell::Int(now)],
    )
    .await?;
    // Count this attempt as a miss before checking it, only while the allowance
    // lasts; the attempt that uses the last of it starts the lock. (The lock first:
    // MariaDB evaluates SET left to right on the new values.)
    let admitted = db
        .exec(
            "UPDATE payment_passwords SET locked_until_ms = CASE WHEN failed_attempts + 1 >= ? \
             THEN ? ELSE locked_until_ms END, failed_attempts = failed_attempts + 1 \
             WHERE user_id = ? AND failed_attempts < ? AND locked_until_ms <= ?",
            &[
                Cell::Int(ATTEMPTS_MAX),
                Cell::Int(lock_until),
                key.clone(),
                Cell::Int(ATTEMPTS_MAX),
                Cell::Int(now),
            ],
        )
        .await?
        == 1;
    let row = db
        .fetch_optional(
            "SELECT password_hash, failed_attempts, locked_until_ms FROM payment_passwords \
             WHERE user_id = ?",
            std::slice::from_ref(&key),
            ROW,
        )
        .await?
        .ok_or(PasswordError::NotSet)?;
    if !admitted {
        let locked_until = row.int("locked_until_ms")?;
        return Err(PasswordError::Locked {
            retry_after_s: ((locked_until - now + 999) / 1_000).max(1),
        });
    }
    metrics::counter!("factledger_payment_password_checks_total").increment(1);
    if check(row.text("password_hash")?).await? {
        // Take the count back, unless a lock has begun that this attempt did not
        // start (the attempts beside it used up the allowance).
        db.exec(
            "UPDATE payment_passwords SET failed_attempts = 0, locked_until_ms = 0 \
             WHERE user_id = ? AND (locked_until_ms <= ? OR locked_until_ms = ?)",
            &[key, Cell::Int(now), Cell::Int(lock_until)],
        )
        .await?;
        return Ok(());
    }
    let failed = row.int("failed_attempts")?;
    if failed >= ATTEMPTS_MAX {
        return Err(PasswordError::Locked {
            retry_after_s: LOCK_MS / 1_000,
        });
    }
    Err(PasswordError::Wrong {
        remaining: ATTEMPTS_MAX - failed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A private SQLite `payment_passwords` (a file: one connection per task, so the
    /// attempts really run side by side).
    async fn db() -> (Db, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("pw.db").display());
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(8)
            .connect(&url)
            .await
            .unwrap();
        sqlx::query(
            "CREATE TABLE payment_passwords (user_id TEXT NOT NULL PRIMARY KEY, \
             password_hash TEXT NOT NULL, failed_attempts INTEGER NOT NULL, \
             locked_until_ms INTEGER NOT NULL, updated_at_ms INTEGER NOT NULL)",
        )
        .execute(&pool)
        .await
        .unwrap();
        sqlx::query("INSERT INTO payment_passwords VALUES ('u-1', 'phc', 0, 0, 0)")
            .execute(&pool)
            .await
            .unwrap();
        (Db::Sqlite(pool), dir)
    }

    /// 40 attempts at once, 39 wrong and one right (the last to start): at most
    /// ATTEMPTS_MAX of them are ever checked, and the user ends locked.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn forty_concurrent_attempts_check_at_most_five() {
        let (db, _dir) = db().await;
        let checks = Arc::new(AtomicUsize::new(0));
        let tries = (0..40).map(|i| {
            let (db, checks) = (db.clone(), checks.clone());
            tokio::spawn(async move {
                verify_by(&db, "u-1", |_phc| async move {
                    checks.fetch_add(1, Ordering::SeqCst);
                    // Argon2 takes a while: let the other attempts arrive meanwhile.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    Ok(i == 39)
                })
                .await
            })
        });
        let answers = futures::future::join_all(tries).await;
        let checked = checks.load(Ordering::SeqCst);
        assert!(
            checked as i64 <= ATTEMPTS_MAX,
            "{checked} attempts were checked"
        );
        let locked = answers
            .iter()
            .filter(|a| matches!(a.as_ref().unwrap(), Err(PasswordError::Locked { .. })))
            .count();
        assert!(locked >= 40 - ATTEMPTS_MAX as usize, "{locked} locked");
        // The lock holds: the right password is refused unchecked.
        let before = checks.load(Ordering::SeqCst);
        let again = verify_by(&db, "u-1", |_| async { Ok(true) }).await;
        assert!(
            matches!(again, Err(PasswordError::Locked { .. })),
            "{again:?}"
        );
        assert_eq!(checks.load(Ordering::SeqCst), before);
    }

    /// Counting before checking must not lock out a user whose concurrent attempts
    /// are all right: within a process they take turns.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn sixteen_concurrent_right_attempts_all_pass() {
        let (db, _dir) = db().await;
        let gate = Gate::new(2, Duration::from_secs(30));
        let cost = Cost {
            memory_kib: 1024,
            iterations: 1,
            lanes: 1,
        };
        set(&db, &gate, "u-1", "right-one", cost).await.unwrap();
        let tries = (0..16).map(|_| {
            let (db, gate) = (db.clone(), gate.clone());
            tokio::spawn(async move { verify(&db, &gate, "u-1", "right-one").await })
        });
        for answer in futures::future::join_all(tries).await {
            answer.unwrap().unwrap();
        }
        assert!(gate.turns.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_right_password_resets_the_count_and_an_ended_lock_starts_afresh() {
        let (db, _dir) = db().await;
        for remaining in [4, 3] {
            let r = verify_by(&db, "u-1", |_| async { Ok(false) }).await;
            assert!(matches!(r, Err(PasswordError::Wrong { remaining: n }) if n == remaining));
        }
        verify_by(&db, "u-1", |_| async { Ok(true) }).await.unwrap();
        let r = verify_by(&db, "u-1", |_| async { Ok(false) }).await;
        assert!(
            matches!(r, Err(PasswordError::Wrong { remaining: 4 })),
            "{r:?}"
        );
        // A lock that ended: the next attempt is checked with a fresh count.
        db.exec(
            "UPDATE payment_passwords SET failed_attempts = 5, locked_until_ms = 1",
            &[],
        )
        .await
        .unwrap();
        let r = verify_by(&db, "u-1", |_| async { Ok(false) }).await;
        assert!(
            matches!(r, Err(PasswordError::Wrong { remaining: 4 })),
            "{r:?}"
        );
    }

    #[tokio::test]
    async fn a_gate_answers_busy_when_no_permit_frees_in_time() {
        let gate = Gate::new(1, Duration::from_millis(50));
        let (started, release) = (
            Arc::new(tokio::sync::Notify::new()),
            Arc::new(std::sync::Barrier::new(2)),
        );
        let (s, r) = (started.clone(), release.clone());
        let running = tokio::spawn({
            let gate = gate.clone();
            async move {
                gate.run(move |_| {
                    s.notify_one();
                    r.wait();
                    Ok(())
                })
                .await
            }
        });
        started.notified().await;
        assert_eq!(gate.available(), 0);
        let busy = gate.run(|_| Ok(())).await;
        assert!(matches!(busy, Err(PasswordError::Busy)), "{busy:?}");
        release.wait();
        running.await.unwrap().unwrap();
        assert_eq!(gate.available(), 1);
    }

    /// The reused-buffer hasher writes and checks the PHC strings argon2's own does.
    #[tokio::test]
    async fn hashes_round_trip_with_argon2_itself() {
        let gate = Gate::new(1, Duration::from_secs(5));
        let cost = Cost {
            memory_kib: 1024,
            iterations: 1,
            lanes: 1,
        };
        let phc = hash(&gate, "secret-1", cost).await.unwrap();
        let parsed = PasswordHash::new(&phc).unwrap();
        assert!(Argon2::default()
            .verify_password(b"secret-1", &parsed)
            .is_ok());
        assert!(Argon2::default()
            .verify_password(b"secret-2", &parsed)
            .is_err());
        let theirs = Argon2::new(Algorithm::Argon2id, Version::V0x13, params(cost).unwrap())
            .hash_password(b"secret-3", &SaltString::generate(&mut OsRng))
            .unwrap()
            .to_string();
        let ours = gate
            .run(move |h| Ok(h.verify_password(b"secret-3", &PasswordHash::new(&theirs).unwrap())))
            .await
            .unwrap();
        assert!(ours.is_ok());
    }
}
