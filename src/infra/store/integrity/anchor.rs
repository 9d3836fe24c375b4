//! Signed chain anchors: evidence of the log's head kept OUTSIDE the database.
//!
//! An anchor names the head position, the hash of the event there and a running digest
//! over every `(position, hash key, hash)` from position 1 up to it (so it binds every
//! event to its position, which the per-stream chains do not cover), signed with the
//! keyring's Ed25519 key. Anchors are numbered; each continues the previous one's
//! digest, so making one reads only the events after the last.
//!
//! Each anchor is written three times: the `chain_anchors` table (where the next
//! anchor continues from, and where concurrent anchorers meet: the number is the
//! primary key), the outbox (`chain.anchor`, relayed to NATS and webhooks like any
//! message) and an append-only JSON-lines anchor file on the service host. `verify`
//! compares the log with every anchor it can read: a deleted tail, a truncated table
//! or a history re-hashed end to end no longer matches what was signed before.

use super::keys::Keyring;
use crate::infra::db::{Db, RowText};
use crate::infra::store::{DynStore, OutboxRow, StoreError, UnitOfWork, GENESIS_HASH};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use sqlx::Row;
use std::path::{Path, PathBuf};

/// The digest before position 1.
pub const DIGEST_GENESIS: &str = GENESIS_HASH;
/// The outbox type anchors are published under.
pub const OUTBOX_TYPE: &str = "chain.anchor";
/// Where the anchor file is by default (beside the integrity key file).
pub const ANCHOR_FILE_DEFAULT: &str = "factledger-anchors.jsonl";
/// The environment variable naming the anchor file.
pub const ANCHOR_FILE_ENV: &str = "FACTLEDGER_ANCHOR_FILE";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Anchor {
    pub anchor_seq: i64,
    pub head_position: i64,
    /// The stored hash of the event at `head_position` (the genesis hash at 0).
    pub head_hash: String,
    /// The running digest over positions 1..=head_position (see [`digest_step`]).
    pub chain_digest: String,
    pub signing_key_id: String,
    /// Ed25519 over [`Anchor::message`], hex.
    pub signature: String,
    pub created_at: String,
    pub created_by: String,
    /// The first position sealed with a chain key (0: none up to `head_position`).
    /// Signed, so a log re-sealed as unkeyed "legacy" rows can never pass for the one
    /// anchored. `None` on anchors signed before the floor was (their message is the
    /// version-1 one and still verifies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keyed_floor: Option<i64>,
}

impl Anchor {
    /// The bytes the signature covers.
    pub fn message(&self) -> Vec<u8> {
        let v1 = format!(
            "{}\n{}\n{}\n{}\n{}\n{}\n{}",
            self.anchor_seq,
            self.head_position,
            self.head_hash,
            self.chain_digest,
            self.created_at,
            self.created_by,
            self.signing_key_id
        );
        match self.keyed_floor {
            None => format!("factledger-anchor/1\n{v1}"),
            Some(floor) => format!("factledger-anchor/2\n{v1}\n{floor}"),
        }
        .into_bytes()
    }

    pub fn signed_by(&self, keyring: &Keyring) -> bool {
        keyring.verify_signature(&self.signing_key_id, &self.message(), &self.signature)
    }
}

/// The digest after one more event: SHA-256 over the previous digest, the position,
/// the row's key id and its stored hash, each length-prefixed.
pub fn digest_step(prev: &str, position: i64, hash_key: &str, hash: &str) -> String {
    let mut h = Sha256::new();
    let position = position.to_string();
    for field in [prev, &position, hash_key, hash] {
        h.update((field.len() as u64).to_be_bytes());
        h.update(field.as_bytes());
    }
    hex::encode(h.finalize())
}

#[derive(Debug, thiserror::Error)]
pub enum AnchorError {
    #[error("anchor database: {0}")]
    Database(#[from] sqlx::Error),
    #[error("anchor store: {0}")]
    Store(#[from] StoreError),
    #[error("anchor file {path}: {source}")]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The log or the newest anchor fails a check: nothing was signed.
    #[error("refused to anchor: {0}")]
    Integrity(String),
    /// Another process stored the same anchor number first.
    #[error("another process anchored at the same time (anchor {0}); try again")]
    Raced(i64),
}

macro_rules! on_pool {
    ($db:expr, |$p:ident| $body:expr) => {
        match $db {
            Db::Mysql($p) => $body,
            Db::Sqlite($p) => $body,
        }
    };
}

const ANCHOR_COLUMNS: &str = "anchor_seq, head_position, head_hash, chain_digest, \
     signing_key_id, signature, created_at, created_by, keyed_floor";

fn anchor_from_row<R: Row + RowText>(r: &R) -> Result<Anchor, sqlx::Error>
where
    i64: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    Option<i64>: for<'r> sqlx::Decode<'r, R::Database>,
    usize: sqlx::ColumnIndex<R>,
{
    Ok(Anchor {
        anchor_seq: r.try_get(0)?,
        head_position: r.try_get(1)?,
        head_hash: r.text(2)?,
        chain_digest: r.text(3)?,
        signing_key_id: r.text(4)?,
        signature: r.text(5)?,
        created_at: r.text(6)?,
        created_by: r.text(7)?,
        keyed_floor: r.try_get(8)?,
    })
}

/// Every anchor in the database, in number order.
pub async fn stored(db: &Db) -> Result<Vec<Anchor>, sqlx::Error> {
    let sql = format!("SELECT {ANCHOR_COLUMNS} FROM chain_anchors ORDER BY anchor_seq");
    on_pool!(db, |p| {
        let rows = sqlx::query(&sql).fetch_all(p).await?;
        rows.iter().map(anchor_from_row).collect()
    })
}

async fn newest(db: &Db) -> Result<Option<Anchor>, sqlx::Error> {
    let sql =
        format!("SELECT {ANCHOR_COLUMNS} FROM chain_anchors ORDER BY anchor_seq DESC LIMIT 1");
    on_pool!(db, |p| {
        let row = sqlx::query(&sql).fetch_optional(p).await?;
        row.as_ref().map(anchor_from_row).transpose()
    })
}

/// Returns `false` when the anchor number was taken by another process.
async fn insert(db: &Db, a: &Anchor) -> Result<bool, sqlx::Error> {
    let sql =
        format!("INSERT INTO chain_anchors ({ANCHOR_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
    let done = on_pool!(db, |p| sqlx::query(&sql)
        .bind(a.anchor_seq)
        .bind(a.head_position)
        .bind(&a.head_hash)
        .bind(&a.chain_digest)
        .bind(&a.signing_key_id)
        .bind(&a.signature)
        .bind(&a.created_at)
        .bind(&a.created_by)
        .bind(a.keyed_floor)
        .execute(p)
        .await
        .map(|_| ()));
    match done {
        Ok(()) => Ok(true),
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => Ok(false),
        Err(e) => Err(e),
    }
}

/// Fold the events `(after, head]` into `digest`, refusing a hole. Returns the new
/// digest and the stored hash of the event at `head`.
async fn extend(
    store: &DynStore,
    after: i64,
    head: i64,
    mut digest: String,
) -> Result<(String, Option<String>), AnchorError> {
    let mut next = after + 1;
    let mut last_hash = None;
    while next <= head {
        let page = super::dense_page(store.as_ref(), next, head).await?;
        if page.first().map(|e| e.global_position) != Some(next) {
            return Err(AnchorError::Integrity(format!(
                "position {next} is missing (the log's head is {head})"
            )));
        }
        for e in &page {
            if e.global_position != next {
                return Err(AnchorError::Integrity(format!(
                    "position {next} is missing (the next row is {})",
                    e.global_position
                )));
            }
            digest = digest_step(&digest, e.global_position, &e.hash_key, &e.hash);
            last_hash = Some(e.hash.clone());
            next += 1;
        }
    }
    Ok((digest, last_hash))
}

/// The first position up to `head` sealed with a chain key, or 0 (reads the legacy
/// prefix only: one row when the log was keyed from the start).
pub async fn first_keyed_position(db: &Db, head: i64) -> Result<i64, sqlx::Error> {
    use factledger_projections::table::{Cell, ColType, Column};
    const POSITION: &[Column] = &[Column {
        name: "global_position",
        ty: ColType::Int,
    }];
    let rows = db
        .fetch(
            "SELECT global_position FROM events WHERE hash_key <> '' AND global_position <= ? \
             ORDER BY global_position LIMIT 1",
            &[Cell::Int(head)],
            POSITION,
        )
        .await?;
    Ok(match rows.first().and_then(|r| r.get("global_position")) {
        Some(Cell::Int(p)) => *p,
        _ => 0,
    })
}

/// Where anchors go besides the database.
#[derive(Debug, Clone, Default)]
pub struct AnchorSinks {
    /// The append-only anchor file; `None`: database and outbox only.
    pub file: Option<PathBuf>,
}

impl AnchorSinks {
    /// The anchor file named by the environment, or [`ANCHOR_FILE_DEFAULT`] in `dir`.
    pub fn file_in(dir: &Path) -> PathBuf {
        std::env::var_os(ANCHOR_FILE_ENV)
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| dir.join(ANCHOR_FILE_DEFAULT))
    }
}

/// Sign and publish an anchor at the log's current head. With `only_if_moved`, and
/// when the head is where the newest anchor already is, nothing is made (`None`): the
/// periodic anchorer only signs news.
pub async fn create(
    store: &DynStore,
    db: &Db,
    sinks: &AnchorSinks,
    actor: &str,
    only_if_moved: bool,
) -> Result<Option<Anchor>, AnchorError> {
    let keyring = store.keyring().clone();
    let previous = newest(db).await?;
    if let Some(p) = &previous {
        if !p.signed_by(&keyring) {
            return Err(AnchorError::Integrity(format!(
                "the newest stored anchor ({}) does not carry a valid signature of this \
                 keyring: run `factledger verify`",
                p.anchor_seq
            )));
        }
    }
    let (seq, after, digest, prev_hash) = match &previous {
        Some(p) => (
            p.anchor_seq + 1,
            p.head_position,
            p.chain_digest.clone(),
            p.head_hash.clone(),
        ),
        None => (1, 0, DIGEST_GENESIS.to_owned(), GENESIS_HASH.to_owned()),
    };
    let head = store.head_position().await?;
    if head < after {
        return Err(AnchorError::Integrity(format!(
            "the log's head {head} is below the newest anchor's {after}: it was truncated"
        )));
    }
    if only_if_moved && previous.is_some() && head == after {
        return Ok(None);
    }
    let (chain_digest, head_hash) = extend(store, after, head, digest).await?;
    let keyed_floor = first_keyed_position(db, head).await?;
    let mut anchor = Anchor {
        anchor_seq: seq,
        head_position: head,
        head_hash: head_hash.unwrap_or(prev_hash),
        chain_digest,
        signing_key_id: keyring.signing_key_id().to_owned(),
        signature: String::new(),
        created_at: crate::infra::store::time_text(&chrono::Utc::now()),
        created_by: actor.to_owned(),
        keyed_floor: Some(keyed_floor),
    };
    anchor.signature = keyring.sign(&anchor.message());
    if !insert(db, &anchor).await? {
        return Err(AnchorError::Raced(seq));
    }
    publish(store, sinks, &anchor).await?;
    metrics::gauge!("factledger_chain_anchor_position").set(anchor.head_position as f64);
    tracing::info!(
        anchor_seq = anchor.anchor_seq,
        head_position = anchor.head_position,
        "chain anchor signed"
    );
    Ok(Some(anchor))
}

/// The outbox row and the file line of a stored anchor.
async fn publish(
    store: &DynStore,
    sinks: &AnchorSinks,
    anchor: &Anchor,
) -> Result<(), AnchorError> {
    let payload = serde_json::to_string(anchor)
        .map_err(|e| AnchorError::Integrity(format!("anchor does not serialize: {e}")))?;
    store
        .append(&[UnitOfWork {
            outbox: vec![OutboxRow {
                aggregatetype: "chain".into(),
                aggregateid: "anchors".into(),
                r#type: OUTBOX_TYPE.into(),
                payload: payload.clone(),
            }],
            ..UnitOfWork::default()
        }])
        .await?;
    if let Some(path) = &sinks.file {
        append_line(path, &payload).map_err(|source| AnchorError::File {
            path: path.clone(),
            source,
        })?;
    }
    Ok(())
}

/// Append one line and sync it (the file is created 0600 when missing).
fn append_line(path: &Path, line: &str) -> std::io::Result<()> {
    use std::io::Write;
    #[cfg(unix)]
    use std::os::unix::fs::OpenOptionsExt;
    let mut opts = std::fs::OpenOptions::new();
    opts.append(true).create(true);
    #[cfg(unix)]
    opts.mode(0o600);
    let mut f = opts.open(path)?;
    writeln!(f, "{line}")?;
    f.sync_data()
}

/// The anchors of an anchor file, in file order. A line that does not parse is an
/// error naming its number (the file is evidence: it is not skipped).
pub fn read_file(path: &Path) -> Result<Vec<Anchor>, AnchorError> {
    let text = std::fs::read_to_string(path).map_err(|source| AnchorError::File {
        path: path.to_owned(),
        source,
    })?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| {
                AnchorError::Integrity(format!(
                    "anchor file {} line {}: {e}",
                    path.display(),
                    i + 1
                ))
            })
        })
        .collect()
}

/// Anchor every `every` while the process lives (and the head moved since the last
/// one). Failures are logged and retried at the next tick; a refusal (the log fails a
/// check) is an error-level event, which alerting picks up.
pub fn spawn_periodic(
    store: DynStore,
    db: Db,
    sinks: AnchorSinks,
    every: std::time::Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            match create(&store, &db, &sinks, "system:anchor", true).await {
                Ok(_) | Err(AnchorError::Raced(_)) => {}
                Err(e) => tracing::error!(error = %e, "chain anchor failed"),
            }
        }
    })
}
