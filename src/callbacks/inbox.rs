//! The `callback_inbox` table (migrations `0009`): one row per delivery, written raw
//! first, then filled in by compare-and-set updates — each step only moves a row out
//! of the state the previous step left it in, so a step run twice (a retry, a replay
//! racing a late inline outcome) changes nothing the second time.

use super::{CallbackError, HandleStatus, Normalized, VerifyStatus};
use crate::infra::db::{now_ms, Db, RowText, Tx};
use crate::infra::jobs::truncate_error;
use crate::infra::store::Fence;
use factledger_projections::table::Cell;

/// Run a query on whichever pool `$db` holds.
macro_rules! both {
    ($db:expr, |$p:ident| $body:expr) => {
        match $db {
            Db::Mysql($p) => $body,
            Db::Sqlite($p) => $body,
        }
    };
}

/// A callback as listed (no headers or body).
#[derive(Debug, Clone, PartialEq)]
pub struct CallbackSummary {
    pub id: i64,
    pub provider: String,
    pub provider_event_id: Option<String>,
    pub event_type: Option<String>,
    pub received_at_ms: i64,
    pub verify_status: VerifyStatus,
    pub verify_error: Option<String>,
    pub normalized: bool,
    pub normalize_error: Option<String>,
    pub handle_status: HandleStatus,
    pub handle_attempts: i32,
    pub handle_error: Option<String>,
    pub handled_at_ms: Option<i64>,
    pub duplicate_of: Option<i64>,
    pub updated_at_ms: i64,
}

/// A callback whole.
#[derive(Debug, Clone, PartialEq)]
pub struct CallbackRow {
    pub summary: CallbackSummary,
    /// JSON object of the stored request headers.
    pub headers: String,
    pub raw_body: Vec<u8>,
    /// JSON `{event_id, event_type, data}`.
    pub normalized_payload: Option<String>,
}

const SUMMARY_COLUMNS: &str = "id, provider, provider_event_id, event_type, received_at_ms, \
     verify_status, verify_error, normalized_payload IS NOT NULL, normalize_error, \
     handle_status, handle_attempts, handle_error, handled_at_ms, duplicate_of, updated_at_ms";

/// Decode a [`SUMMARY_COLUMNS`] row of either backend.
macro_rules! summary {
    ($r:expr) => {{
        use sqlx::Row;
        let r = $r;
        let verify: i64 = r.try_get(5)?;
        let normalized: i64 = r.try_get(7)?;
        let handle: i64 = r.try_get(9)?;
        Ok::<CallbackSummary, sqlx::Error>(CallbackSummary {
            id: r.try_get(0)?,
            provider: r.text(1)?,
            provider_event_id: r.opt_text(2)?,
            event_type: r.opt_text(3)?,
            received_at_ms: r.try_get(4)?,
            verify_status: VerifyStatus::from_code(verify)
                .ok_or_else(|| bad_code("verify", verify))?,
            verify_error: r.opt_text(6)?,
            normalized: normalized != 0,
            normalize_error: r.opt_text(8)?,
            handle_status: HandleStatus::from_code(handle)
                .ok_or_else(|| bad_code("handle", handle))?,
            handle_attempts: r.try_get(10)?,
            handle_error: r.opt_text(11)?,
            handled_at_ms: r.try_get(12)?,
            duplicate_of: r.try_get(13)?,
            updated_at_ms: r.try_get(14)?,
        })
    }};
}

fn bad_code(column: &str, code: i64) -> sqlx::Error {
    sqlx::Error::Decode(
        format!("callback_inbox.{column}_status {code} is not a known status").into(),
    )
}

/// Step 1, once verified: the delivery as received. Returns its id.
pub async fn insert_raw(
    db: &Db,
    provider: &str,
    headers_json: &str,
    raw_body: &[u8],
) -> Result<i64, CallbackError> {
    insert(db, provider, headers_json, raw_body, None).await
}

/// The statuses of a row stored already refused.
struct Refused {
    verify_error: String,
    handle_error: &'static str,
}

/// One new row: pending (`refused` = `None`) or refused. Its id.
async fn insert(
    db: &Db,
    provider: &str,
    headers_json: &str,
    body: &[u8],
    refused: Option<&Refused>,
) -> Result<i64, CallbackError> {
    let sql = "INSERT INTO callback_inbox (provider, received_at_ms, headers, raw_body, \
               verify_status, verify_error, handle_status, handle_error, handle_attempts, \
               updated_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?)";
    let now = now_ms();
    let (verify, handle) = match refused {
        None => (VerifyStatus::Pending, HandleStatus::Pending),
        Some(_) => (VerifyStatus::Failed, HandleStatus::Skipped),
    };
    let verify_error = refused.map(|r| r.verify_error.as_str());
    let handle_error = refused.map(|r| r.handle_error);
    macro_rules! run {
        ($p:expr) => {
            sqlx::query(sql)
                .bind(provider)
                .bind(now)
                .bind(headers_json)
                .bind(body)
                .bind(verify as i32)
                .bind(verify_error)
                .bind(handle as i32)
                .bind(handle_error)
                .bind(now)
                .execute($p)
                .await?
        };
    }
    Ok(match db {
        Db::Mysql(p) => run!(p).last_insert_id() as i64,
        Db::Sqlite(p) => run!(p).last_insert_rowid(),
    })
}

/// A refused delivery's forensic sample (`guard`): stored already refused —
/// verify failed, never handled — with its body cut short by the caller. Its id.
pub async fn insert_refused_sample(
    db: &Db,
    provider: &str,
    headers_json: &str,
    body_sample: &[u8],
    error: &str,
) -> Result<i64, CallbackError> {
    let refused = Refused {
        verify_error: truncate_error(error),
        handle_error: "not handled: the callback was not verified",
    };
    insert(db, provider, headers_json, body_sample, Some(&refused)).await
}

/// Delete all but the newest `keep` refused samples of `provider`.
pub async fn prune_refused_samples(
    db: &Db,
    provider: &str,
    keep: i64,
) -> Result<u64, CallbackError> {
    // The id of the oldest sample kept; nothing to prune while there are fewer.
    let oldest_kept = db
        .fetch(
            "SELECT id FROM callback_inbox WHERE provider = ? AND verify_status = 2 \
             ORDER BY id DESC LIMIT 1 OFFSET ?",
            &[Cell::text(provider), Cell::Int(keep - 1)],
            ID_COLUMN,
        )
        .await?;
    let Some(Cell::Int(oldest)) = oldest_kept.first().and_then(|r| r.get("id")).cloned() else {
        return Ok(0);
    };
    Ok(db
        .exec(
            "DELETE FROM callback_inbox WHERE provider = ? AND verify_status = 2 AND id < ?",
            &[Cell::text(provider), Cell::Int(oldest)],
        )
        .await?)
}

const ID_COLUMN: &[factledger_projections::table::Column] =
    &[factledger_projections::table::Column {
        name: "id",
        ty: factledger_projections::table::ColType::Int,
    }];

/// Callbacks of `provider` stored and not handled yet (pending or failed), counted up
/// to `cap` (the count stops there: it is only ever compared with the cap).
pub async fn unprocessed(db: &Db, provider: &str, cap: i64) -> Result<i64, CallbackError> {
    Ok(db
        .fetch_i64(
            "SELECT COUNT(*) FROM (SELECT 1 FROM callback_inbox \
             WHERE handle_status IN (0, 2) AND provider = ? LIMIT ?) t",
            &[Cell::text(provider), Cell::Int(cap)],
        )
        .await?)
}

/// Step 2, refused: verification failed. The callback will never be handled.
pub async fn record_unverified(db: &Db, id: i64, error: &str) -> Result<(), CallbackError> {
    let sql = "UPDATE callback_inbox SET verify_status = 2, verify_error = ?, \
               handle_status = 3, handle_error = ?, updated_at_ms = ? \
               WHERE id = ? AND verify_status = 0";
    let error = truncate_error(error);
    both!(db, |p| sqlx::query(sql)
        .bind(&error)
        .bind("not handled: the callback was not verified")
        .bind(now_ms())
        .bind(id)
        .execute(p)
        .await
        .map(|_| ())?);
    Ok(())
}

/// Step 2, verified but the body could not be normalised: never handled either.
pub async fn record_unnormalised(db: &Db, id: i64, error: &str) -> Result<(), CallbackError> {
    let sql = "UPDATE callback_inbox SET verify_status = 1, normalize_error = ?, \
               handle_status = 3, handle_error = ?, updated_at_ms = ? \
               WHERE id = ? AND verify_status = 0";
    let error = truncate_error(error);
    both!(db, |p| sqlx::query(sql)
        .bind(&error)
        .bind("not handled: the body could not be normalised")
        .bind(now_ms())
        .bind(id)
        .execute(p)
        .await
        .map(|_| ())?);
    Ok(())
}

/// What step 2 found for a verified, normalised callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// This row holds the provider event id: it is to be handled.
    Owner,
    /// Another row holds it: this delivery is a duplicate and is not handled.
    Duplicate { of: i64 },
}

/// Times step 2 looks for the owner again after losing the unique key to a
/// concurrent delivery of the same event (the owner it lost to exists by then).
const CLAIM_TRIES_MAX: usize = 3;

/// Step 2, verified and normalised: take the event id (the unique key dedupes,
/// R-PAY-4) or, when another row has it, mark this one its duplicate. The duplicate
/// keeps its own normalised payload for audit; if it differs from the owner's, the
/// row says so.
pub async fn claim_event(
    db: &Db,
    id: i64,
    provider: &str,
    n: &Normalized,
) -> Result<Claim, CallbackError> {
    let payload = serde_json::to_string(n).map_err(|e| CallbackError::Internal(e.to_string()))?;
    for _ in 0..CLAIM_TRIES_MAX {
        if let Some((owner, owner_payload)) = owner_of(db, provider, &n.event_id).await? {
            mark_duplicate(db, id, n, &payload, owner, owner_payload.as_deref()).await?;
            return Ok(Claim::Duplicate { of: owner });
        }
        let sql = "UPDATE callback_inbox SET verify_status = 1, provider_event_id = ?, \
                   event_type = ?, normalized_payload = ?, updated_at_ms = ? \
                   WHERE id = ? AND verify_status = 0";
        let taken = both!(db, |p| sqlx::query(sql)
            .bind(&n.event_id)
            .bind(&n.event_type)
            .bind(&payload)
            .bind(now_ms())
            .bind(id)
            .execute(p)
            .await
            .map(|_| ()));
        match taken {
            Ok(()) => return Ok(Claim::Owner),
            // A concurrent delivery of the same event took the key first.
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(CallbackError::Internal(format!(
        "callback {id}: could neither take event id {:?} nor find who holds it",
        n.event_id
    )))
}

async fn owner_of(
    db: &Db,
    provider: &str,
    event_id: &str,
) -> Result<Option<(i64, Option<String>)>, CallbackError> {
    let sql = "SELECT id, normalized_payload FROM callback_inbox \
               WHERE provider = ? AND provider_event_id = ?";
    Ok(both!(db, |p| {
        match sqlx::query(sql)
            .bind(provider)
            .bind(event_id)
            .fetch_optional(p)
            .await?
        {
            Some(r) => Some((sqlx::Row::try_get(&r, 0)?, r.opt_text(1)?)),
            None => None,
        }
    }))
}

async fn mark_duplicate(
    db: &Db,
    id: i64,
    n: &Normalized,
    payload: &str,
    owner: i64,
    owner_payload: Option<&str>,
) -> Result<(), CallbackError> {
    let same = owner_payload
        .and_then(|o| serde_json::from_str::<Normalized>(o).ok())
        .is_some_and(|o| &o == n);
    let note = if same {
        format!("duplicate of callback {owner}: not handled again")
    } else {
        format!(
            "duplicate of callback {owner}: not handled again, although its normalised \
             payload differs from the original's"
        )
    };
    let sql = "UPDATE callback_inbox SET verify_status = 1, event_type = ?, \
               normalized_payload = ?, handle_status = 4, duplicate_of = ?, handle_error = ?, \
               updated_at_ms = ? WHERE id = ? AND verify_status = 0";
    both!(db, |p| sqlx::query(sql)
        .bind(&n.event_type)
        .bind(payload)
        .bind(owner)
        .bind(&note)
        .bind(now_ms())
        .bind(id)
        .execute(p)
        .await
        .map(|_| ())?);
    Ok(())
}

/// Step 3, the first (inline) handling: from pending to handled or failed, one
/// attempt more. False when the row was no longer pending (nothing written).
pub async fn record_inline_outcome(
    db: &Db,
    id: i64,
    outcome: Result<(), &str>,
) -> Result<bool, CallbackError> {
    let (status, error, handled_at) = outcome_columns(outcome);
    let sql =
        "UPDATE callback_inbox SET handle_status = ?, handle_attempts = handle_attempts + 1, \
               handle_error = ?, handled_at_ms = ?, updated_at_ms = ? \
               WHERE id = ? AND handle_status = 0";
    let n = both!(db, |p| sqlx::query(sql)
        .bind(status as i32)
        .bind(&error)
        .bind(handled_at)
        .bind(now_ms())
        .bind(id)
        .execute(p)
        .await?
        .rows_affected());
    Ok(n == 1)
}

/// The outcome of handling an unfinished event again because its provider delivered
/// it again (`takeover`): from pending or failed to handled or failed, one attempt
/// more. False when the row was handled meanwhile (nothing written).
pub async fn record_takeover_outcome(
    db: &Db,
    id: i64,
    outcome: Result<(), &str>,
) -> Result<bool, CallbackError> {
    let (status, error, handled_at) = outcome_columns(outcome);
    let n = db
        .exec(
            "UPDATE callback_inbox SET handle_status = ?, handle_attempts = handle_attempts + 1, \
             handle_error = ?, handled_at_ms = ?, updated_at_ms = ? \
             WHERE id = ? AND handle_status IN (0, 2)",
            &[
                Cell::Int(status as i64),
                Cell::opt_text(error),
                handled_at.map_or(Cell::Null, Cell::Int),
                Cell::Int(now_ms()),
                Cell::Int(id),
            ],
        )
        .await?;
    Ok(n == 1)
}

fn outcome_columns(outcome: Result<(), &str>) -> (HandleStatus, Option<String>, Option<i64>) {
    match outcome {
        Ok(()) => (HandleStatus::Handled, None, Some(now_ms())),
        Err(e) => (HandleStatus::Failed, Some(truncate_error(e)), None),
    }
}

/// Step 3 of a replay round: from failed to handled or failed again, one attempt more
/// — only while the round's job claim is current (the job row is locked to the
/// commit, as `store::Fence` does) and the row is still failed. False when fenced or
/// no longer failed (nothing written).
pub async fn record_replay_outcome(
    db: &Db,
    id: i64,
    fence: Fence,
    outcome: Result<(), &str>,
) -> Result<bool, CallbackError> {
    let (status, error, handled_at) = outcome_columns(outcome);
    let update = "UPDATE callback_inbox SET handle_status = ?, \
                  handle_attempts = handle_attempts + 1, handle_error = ?, handled_at_ms = ?, \
                  updated_at_ms = ? WHERE id = ? AND handle_status = 2";
    let Some(mut tx) = Tx::fenced(db, fence).await? else {
        return Ok(false);
    };
    let args = [
        Cell::Int(status as i64),
        Cell::opt_text(error),
        handled_at.map_or(Cell::Null, Cell::Int),
        Cell::Int(now_ms()),
        Cell::Int(id),
    ];
    let n = tx.exec(update, &args).await?;
    tx.commit().await?;
    Ok(n == 1)
}

/// Verified, normalised callbacks still pending after `older_than_ms`: their handling
/// was interrupted (the process died between claiming the event id and recording the
/// outcome) — a handling that failed, so they become failed and replayable.
pub async fn fail_interrupted(db: &Db, older_than_ms: i64) -> Result<u64, CallbackError> {
    let sql = "UPDATE callback_inbox SET handle_status = 2, handle_error = ?, updated_at_ms = ? \
               WHERE handle_status = 0 AND verify_status = 1 \
               AND normalized_payload IS NOT NULL AND received_at_ms < ?";
    let now = now_ms();
    let note = format!(
        "handling was interrupted: no outcome was recorded within {} s",
        older_than_ms / 1_000
    );
    Ok(both!(db, |p| sqlx::query(sql)
        .bind(&note)
        .bind(now)
        .bind(now - older_than_ms)
        .execute(p)
        .await?
        .rows_affected()))
}

/// Ids and providers of the callbacks a replay may handle (R-CB-1: verified, normalised, failed),
/// above `after`, in id order.
pub async fn replayable_ids(
    db: &Db,
    after: i64,
    limit: i64,
) -> Result<Vec<(i64, String)>, CallbackError> {
    let sql = "SELECT id, provider FROM callback_inbox WHERE handle_status = 2 \
               AND verify_status = 1 AND normalized_payload IS NOT NULL AND id > ? \
               ORDER BY id LIMIT ?";
    Ok(both!(db, |p| sqlx::query(sql)
        .bind(after)
        .bind(limit)
        .fetch_all(p)
        .await?
        .iter()
        .map(|r| Ok((sqlx::Row::try_get(r, 0)?, r.text(1)?)))
        .collect::<Result<Vec<_>, sqlx::Error>>()?))
}

/// One callback whole.
pub async fn load(db: &Db, id: i64) -> Result<Option<CallbackRow>, CallbackError> {
    let sql = format!(
        "SELECT {SUMMARY_COLUMNS}, headers, raw_body, normalized_payload \
         FROM callback_inbox WHERE id = ?"
    );
    Ok(both!(db, |p| {
        match sqlx::query(&sql).bind(id).fetch_optional(p).await? {
            None => None,
            Some(r) => Some(CallbackRow {
                summary: summary!(&r)?,
                headers: r.text(15)?,
                raw_body: sqlx::Row::try_get(&r, 16)?,
                normalized_payload: r.opt_text(17)?,
            }),
        }
    }))
}

/// Callbacks with `id > after`, optionally of one provider and handle status.
pub async fn list(
    db: &Db,
    provider: Option<&str>,
    handle_status: Option<HandleStatus>,
    after: i64,
    limit: i64,
) -> Result<Vec<CallbackSummary>, CallbackError> {
    let mut sql = format!("SELECT {SUMMARY_COLUMNS} FROM callback_inbox WHERE id > ?");
    if provider.is_some() {
        sql.push_str(" AND provider = ?");
    }
    if handle_status.is_some() {
        sql.push_str(" AND handle_status = ?");
    }
    sql.push_str(" ORDER BY id LIMIT ?");
    Ok(both!(db, |p| {
        let mut q = sqlx::query(&sql).bind(after);
        if let Some(v) = provider {
            q = q.bind(v);
        }
        if let Some(s) = handle_status {
            q = q.bind(s as i32);
        }
        q.bind(limit)
            .fetch_all(p)
            .await?
            .iter()
            .map(|r| summary!(r))
            .collect::<Result<Vec<_>, sqlx::Error>>()?
    }))
}
