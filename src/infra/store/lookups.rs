//! Set-wise reads the command bus makes around a batch, the same SQL on both backends:
//! which idempotency keys of a bulk request were already used (one query per
//! [`LOOKUP_CHUNK`] keys instead of one per key), and which ledger references of a
//! decided batch are already taken (so a duplicate is refused before the append
//! instead of failing the batch's transaction — see `runtime::bus`).

use super::{is_connection_failure, IdempotencyRecord, StoreError};
use crate::infra::db::Db;
use factledger_projections::table::{Cell, ColType, Column};
use std::collections::{HashMap, HashSet};

/// Values bound per lookup query (well below SQLite's 32,766 variables and
/// MariaDB's 65,535 placeholders).
pub const LOOKUP_CHUNK: usize = 500;

/// A ledger reference as stored: (ref_type, ref_id, entry_type).
pub type RefKey = (String, String, String);

fn db_err(e: sqlx::Error) -> StoreError {
    if is_connection_failure(&e) {
        StoreError::Unavailable(e.to_string())
    } else {
        StoreError::Database(e.to_string())
    }
}

fn marks(n: usize) -> String {
    vec!["?"; n].join(", ")
}

fn text(row: &factledger_projections::table::MemRow, column: &str) -> Result<String, StoreError> {
    match row.get(column) {
        Some(Cell::Text(s)) => Ok(s.clone()),
        other => Err(StoreError::Corrupt(format!(
            "lookup column {column} is {other:?}, not text"
        ))),
    }
}

fn int(row: &factledger_projections::table::MemRow, column: &str) -> Result<i64, StoreError> {
    match row.get(column) {
        Some(Cell::Int(v)) => Ok(*v),
        other => Err(StoreError::Corrupt(format!(
            "lookup column {column} is {other:?}, not an integer"
        ))),
    }
}

const RECORD_COLUMNS: &[Column] = &[
    Column {
        name: "idempotency_key",
        ty: ColType::Text,
    },
    Column {
        name: "request_hash",
        ty: ColType::Text,
    },
    Column {
        name: "first_position",
        ty: ColType::Int,
    },
    Column {
        name: "last_position",
        ty: ColType::Int,
    },
];

/// The records of those of `keys` already used in `scope`, by key.
pub async fn find_idempotency_many(
    db: &Db,
    scope: &str,
    keys: &[String],
) -> Result<HashMap<String, IdempotencyRecord>, StoreError> {
    let mut found = HashMap::new();
    for chunk in keys.chunks(LOOKUP_CHUNK) {
        let sql = format!(
            "SELECT idempotency_key, request_hash, first_position, last_position \
             FROM command_log WHERE scope = ? AND idempotency_key IN ({})",
            marks(chunk.len())
        );
        let mut args = Vec::with_capacity(chunk.len() + 1);
        args.push(Cell::Text(scope.to_owned()));
        args.extend(chunk.iter().map(|k| Cell::Text(k.clone())));
        for row in db
            .fetch(&sql, &args, RECORD_COLUMNS)
            .await
            .map_err(db_err)?
        {
            found.insert(
                text(&row, "idempotency_key")?,
                IdempotencyRecord {
                    request_hash: text(&row, "request_hash")?,
                    first_position: int(&row, "first_position")?,
                    last_position: int(&row, "last_position")?,
                },
            );
        }
    }
    Ok(found)
}

const REF_COLUMNS: &[Column] = &[
    Column {
        name: "ledger_ref_type",
        ty: ColType::Text,
    },
    Column {
        name: "ledger_ref_id",
        ty: ColType::Text,
    },
    Column {
        name: "ledger_entry_type",
        ty: ColType::Text,
    },
];

/// Those of `refs` some stored event already holds. Read as `type IN (…) AND id IN
/// (…)`, a range scan of the unique ledger index on both backends, then matched
/// exactly here.
pub async fn existing_ledger_refs(db: &Db, refs: &[RefKey]) -> Result<HashSet<RefKey>, StoreError> {
    let wanted: HashSet<&RefKey> = refs.iter().collect();
    let mut taken = HashSet::new();
    let mut types: Vec<&str> = refs.iter().map(|r| r.0.as_str()).collect();
    types.sort_unstable();
    types.dedup();
    let mut ids: Vec<&str> = refs.iter().map(|r| r.1.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    for chunk in ids.chunks(LOOKUP_CHUNK) {
        let sql = format!(
            "SELECT ledger_ref_type, ledger_ref_id, ledger_entry_type FROM events \
             WHERE ledger_ref_type IN ({}) AND ledger_ref_id IN ({})",
            marks(types.len()),
            marks(chunk.len())
        );
        let args: Vec<Cell> = types
            .iter()
            .chain(chunk.iter())
            .map(|s| Cell::Text((*s).to_owned()))
            .collect();
        for row in db.fetch(&sql, &args, REF_COLUMNS).await.map_err(db_err)? {
            let key = (
                text(&row, "ledger_ref_type")?,
                text(&row, "ledger_ref_id")?,
                text(&row, "ledger_entry_type")?,
            );
            if wanted.contains(&key) {
                taken.insert(key);
            }
        }
    }
    Ok(taken)
}
