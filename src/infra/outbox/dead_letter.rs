//! Dead letters (migration `0024`): outbox messages a sink refused past its retry
//! schedule. The relay writes one here and moves the sink's checkpoint past the
//! message in the same transaction ([`bury`]), so later messages flow and none is
//! lost: the row names the sink, the outbox id (the outbox row itself is kept, it is
//! append-only), the number of refusals and the last one.
//!
//! Operators list them ([`list`]: `GET /v1/outbox/dead-letters`, `factledger outbox
//! dead-letters`) and, once the receiver is fixed, replay one ([`replay`]: `POST
//! /v1/outbox/dead-letters/{id}:replay`, `factledger outbox replay <id>`): its outbox
//! row is delivered to the sink now, out of order (a dead letter is out of order by
//! definition; consumers dedupe by outbox id), and the row is marked replayed, or the
//! failure is recorded in `replay_error` and returned. A replayed dead letter can be
//! replayed again.

use super::checkpoint::{self, ms_text};
use super::{truncate_error, OutboxMessage, Sink, SinkError, Sinks};
use crate::infra::db::{Db, Get, Tx};
use factledger_projections::table::{Cell, ColType, Column, MemRow};
use serde::Serialize;

/// A page of [`list`] when the caller names no limit.
pub const PAGE_DEAD_LETTERS_DEFAULT: i64 = 100;
/// The largest page of [`list`].
pub const PAGE_DEAD_LETTERS_MAX: i64 = 1_000;

/// One dead letter as the operator endpoints show it.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct DeadLetter {
    pub id: i64,
    /// The sink that gave the message up (`webhook:<name>`, `nats`, …).
    pub sink: String,
    /// The outbox row (`outbox.id`), still in the outbox.
    pub outbox_id: i64,
    pub r#type: String,
    pub aggregatetype: String,
    pub aggregateid: String,
    /// Deliveries the sink refused (the retry schedule's steps + 1).
    pub attempts: i64,
    /// The last refusal.
    pub last_error: String,
    /// When it was given up (RFC 3339).
    pub dead_at: String,
    /// When a replay delivered it (RFC 3339); absent until then.
    pub replayed_at: Option<String>,
    /// Who replayed it (`key:<id>`, `cli:<user>`), with the last replay's outcome.
    pub replayed_by: Option<String>,
    /// Why the last replay failed, if it did.
    pub replay_error: Option<String>,
}

const COLUMNS: &[Column] = &[
    col("id", ColType::Int),
    col("sink", ColType::Text),
    col("outbox_id", ColType::Int),
    col("type", ColType::Text),
    col("aggregatetype", ColType::Text),
    col("aggregateid", ColType::Text),
    col("attempts", ColType::Int),
    col("last_error", ColType::Text),
    col("dead_at_ms", ColType::Int),
    col("replayed_at_ms", ColType::OptInt),
    col("replayed_by", ColType::OptText),
    col("replay_error", ColType::OptText),
];

const fn col(name: &'static str, ty: ColType) -> Column {
    Column { name, ty }
}

fn select(tail: &str) -> String {
    let names: Vec<&str> = COLUMNS.iter().map(|c| c.name).collect();
    format!(
        "SELECT {} FROM outbox_dead_letters {tail}",
        names.join(", ")
    )
}

fn dead_letter(r: &MemRow) -> Result<DeadLetter, sqlx::Error> {
    Ok(DeadLetter {
        id: r.int("id")?,
        sink: r.text("sink")?,
        outbox_id: r.int("outbox_id")?,
        r#type: r.text("type")?,
        aggregatetype: r.text("aggregatetype")?,
        aggregateid: r.text("aggregateid")?,
        attempts: r.int("attempts")?,
        last_error: r.text("last_error")?,
        dead_at: ms_text(r.int("dead_at_ms")?),
        replayed_at: r.opt_int("replayed_at_ms")?.map(ms_text),
        replayed_by: r.opt_text("replayed_by")?,
        replay_error: r.opt_text("replay_error")?,
    })
}

/// Give `message` up for `sink` after `attempts` refusals, the last being `error`: in
/// one transaction, move the checkpoint from `message.id - 1` to `message.id` (by
/// compare-and-set, ending the failure streak) and write the dead letter. False, and
/// nothing written, when the checkpoint was no longer just before the message (another
/// relay of the sink moved it). A message dead-lettered before (its checkpoint was
/// moved back by hand) gets its row renewed, unreplayed.
pub async fn bury(
    db: &Db,
    sink: &str,
    message: &OutboxMessage,
    attempts: i64,
    error: &str,
) -> Result<bool, sqlx::Error> {
    let now = crate::infra::db::now_ms();
    let mut tx = Tx::begin_write(db).await?;
    let moved = tx
        .exec(
            "UPDATE outbox_sinks SET delivered_id = ?, updated_at_ms = ?, attempts = 0, \
             refusals = 0, last_error = NULL, failing_since_ms = NULL \
             WHERE name = ? AND delivered_id = ?",
            &[
                Cell::Int(message.id),
                Cell::Int(now),
                Cell::Text(sink.to_owned()),
                Cell::Int(message.id - 1),
            ],
        )
        .await?;
    if moved != 1 {
        tx.rollback().await?;
        return Ok(false);
    }
    let insert = db.dialect().upsert(
        "outbox_dead_letters",
        &[
            "sink",
            "outbox_id",
            "type",
            "aggregatetype",
            "aggregateid",
            "attempts",
            "last_error",
            "dead_at_ms",
            "replayed_at_ms",
            "replayed_by",
            "replay_error",
        ],
        &["sink", "outbox_id"],
        &[
            "attempts",
            "last_error",
            "dead_at_ms",
            "replayed_at_ms",
            "replayed_by",
            "replay_error",
        ],
    );
    tx.exec(
        &insert,
        &[
            Cell::Text(sink.to_owned()),
            Cell::Int(message.id),
            Cell::Text(message.r#type.clone()),
            Cell::Text(message.aggregatetype.clone()),
            Cell::Text(message.aggregateid.clone()),
            Cell::Int(attempts),
            Cell::Text(truncate_error(error)),
            Cell::Int(now),
            Cell::Null,
            Cell::Null,
            Cell::Null,
        ],
    )
    .await?;
    tx.commit().await?;
    Ok(true)
}

/// Dead letters in id order (oldest first): of one sink or every sink, the replayed
/// ones only with `include_replayed`, with an id above `after`, at most `limit`.
pub async fn list(
    db: &Db,
    sink: Option<&str>,
    include_replayed: bool,
    after: i64,
    limit: i64,
) -> Result<Vec<DeadLetter>, sqlx::Error> {
    let mut conditions = vec!["id > ?"];
    let mut args = vec![Cell::Int(after)];
    if let Some(sink) = sink {
        conditions.push("sink = ?");
        args.push(Cell::Text(sink.to_owned()));
    }
    if !include_replayed {
        conditions.push("replayed_at_ms IS NULL");
    }
    args.push(Cell::Int(limit.clamp(1, PAGE_DEAD_LETTERS_MAX)));
    let sql = select(&format!(
        "WHERE {} ORDER BY id LIMIT ?",
        conditions.join(" AND ")
    ));
    db.fetch(&sql, &args, COLUMNS)
        .await?
        .iter()
        .map(dead_letter)
        .collect()
}

/// One dead letter by id.
pub async fn get(db: &Db, id: i64) -> Result<Option<DeadLetter>, sqlx::Error> {
    db.fetch_optional(&select("WHERE id = ?"), &[Cell::Int(id)], COLUMNS)
        .await?
        .as_ref()
        .map(dead_letter)
        .transpose()
}

/// Why a replay did not deliver.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("no dead letter {0}")]
    NotFound(i64),
    /// The sink is not configured in this process (renamed, removed, or the CLI was
    /// started without its settings).
    #[error("dead letter {id} belongs to sink {sink}, which is not configured here")]
    SinkNotConfigured { id: i64, sink: String },
    /// The sink's type filter no longer takes the message's type.
    #[error("sink {sink} no longer takes messages of type {message_type}")]
    NotTaken { sink: String, message_type: String },
    /// The outbox row was deleted by hand.
    #[error("outbox row {0} is gone")]
    OutboxRowMissing(i64),
    /// The sink did not take it (recorded as the dead letter's `replay_error`).
    #[error("sink {sink} did not take outbox id {outbox_id}: {error}")]
    Delivery {
        sink: String,
        outbox_id: i64,
        error: SinkError,
    },
    #[error("outbox database: {0}")]
    Database(#[from] sqlx::Error),
}

/// Deliver dead letter `id`'s outbox message to its sink (one of `sinks`) now, within
/// `timeout_ms`; on success mark it replayed by `actor` and return it as it is now. A
/// failed delivery is recorded (`replay_error`, `replayed_by`) and returned.
pub async fn replay(
    db: &Db,
    sinks: &Sinks,
    id: i64,
    actor: &str,
    timeout_ms: u64,
) -> Result<DeadLetter, ReplayError> {
    let dead = get(db, id).await?.ok_or(ReplayError::NotFound(id))?;
    let sink: &dyn Sink = sinks
        .get(&dead.sink)
        .ok_or_else(|| ReplayError::SinkNotConfigured {
            id,
            sink: dead.sink.clone(),
        })?
        .as_ref();
    if !sink.takes(&dead.r#type) {
        return Err(ReplayError::NotTaken {
            sink: dead.sink,
            message_type: dead.r#type,
        });
    }
    let message = checkpoint::read_after(db, dead.outbox_id - 1, 1)
        .await?
        .into_iter()
        .find(|m| m.id == dead.outbox_id)
        .ok_or(ReplayError::OutboxRowMissing(dead.outbox_id))?;
    let outcome = super::deliver(sink, &message, timeout_ms).await;
    let now = Cell::Int(crate::infra::db::now_ms());
    let (who, row) = (Cell::Text(actor.to_owned()), Cell::Int(id));
    match outcome {
        Ok(()) => {
            db.exec(
                "UPDATE outbox_dead_letters SET replayed_at_ms = ?, replayed_by = ?, \
                 replay_error = NULL WHERE id = ?",
                &[now, who, row],
            )
            .await?;
            tracing::info!(dead_letter = id, sink = %dead.sink, outbox_id = dead.outbox_id, actor, "dead letter replayed");
            get(db, id).await?.ok_or(ReplayError::NotFound(id))
        }
        Err(error) => {
            let text = truncate_error(&error.to_string());
            db.exec(
                "UPDATE outbox_dead_letters SET replayed_by = ?, replay_error = ? WHERE id = ?",
                &[who, Cell::Text(text), row],
            )
            .await?;
            Err(ReplayError::Delivery {
                sink: dead.sink,
                outbox_id: dead.outbox_id,
                error,
            })
        }
    }
}
