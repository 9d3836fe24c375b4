//! `factledger rebuild journal`: in ONE transaction that locks the checkpoint row,
//! empty the journal's tables, replay every event, set the checkpoint to the last
//! one. Readers see the old rows until the commit.
//!
//! Built for speed beside the catch-up path: a reader task reads and classifies the
//! log in pages while this task writes, each stream's currency and each account's
//! totals are kept in memory for the whole replay (the tables start empty, so nothing
//! is read back), and the balances and stream currencies are written once at the
//! end in multi-row inserts. Memory: a few pages in flight, one entry per stream
//! that names a currency and one per account.

use super::projection::{
    add_to_balances, classify_all, insert_lines, journal_lines, lock_checkpoint, Batch, Currencies,
    Delta, Opened,
};
use crate::infra::db::{Db, Tx};
use crate::infra::store::{time_text, DynStore, READ_LIMIT_MAX};
use crate::runtime::projection::RunnerError;
use factledger_projections::ledger::{Line, NAME, TABLES, VERSION};
use factledger_projections::table::Cell;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Classified pages in flight between the reader and the writer.
const PAGES_IN_FLIGHT: usize = 4;
/// Stream currencies per multi-row insert.
const CURRENCIES_PER_INSERT: usize = 500;

/// What the replay has seen so far.
#[derive(Default)]
struct Replay {
    currencies: Currencies,
    opened: Vec<Opened>,
    deltas: BTreeMap<String, Delta>,
}

impl Replay {
    /// The journal lines of a classified page (the tables started empty: every
    /// stream's currency is known from its opening event, read earlier).
    fn lines(&mut self, batch: &Batch) -> Result<Vec<Line>, super::projection::WriteError> {
        let (journal, opened) = journal_lines(batch, &mut self.currencies, &mut self.deltas)?;
        self.opened.extend(opened);
        Ok(journal)
    }

    /// The stream currencies and account balances, once, at the end.
    async fn finish(self, tx: &mut Tx) -> Result<(), sqlx::Error> {
        for chunk in self.opened.chunks(CURRENCIES_PER_INSERT) {
            let sql = format!(
                "INSERT INTO journal_stream_currencies (stream_type, stream_id, currency) \
                 VALUES {}",
                vec!["(?, ?, ?)"; chunk.len()].join(", ")
            );
            let mut args = Vec::with_capacity(chunk.len() * 3);
            for (stream_type, stream_id, currency) in chunk {
                args.extend([
                    Cell::text(*stream_type),
                    Cell::text(stream_id),
                    Cell::text(currency.as_str()),
                ]);
            }
            tx.exec(&sql, &args).await?;
        }
        add_to_balances(tx, &self.deltas).await
    }
}

/// A page read and classified by the reader: its lines' events, its last position
/// and how many events it held.
type Page = Result<(Batch, i64, usize), RunnerError>;

fn spawn_reader(
    store: DynStore,
) -> (
    tokio::sync::mpsc::Receiver<Page>,
    tokio::task::JoinHandle<Duration>,
) {
    let (send, recv) = tokio::sync::mpsc::channel::<Page>(PAGES_IN_FLIGHT);
    let task = tokio::spawn(async move {
        let started = Instant::now();
        let mut position = 0i64;
        loop {
            let events = match store.read_all(position, READ_LIMIT_MAX).await {
                Ok(events) => events,
                Err(e) => {
                    let _ = send.send(Err(e.into())).await;
                    break;
                }
            };
            let Some(last) = events.last().map(|e| e.global_position) else {
                break;
            };
            let (batch, bad) = classify_all(&events);
            let page = match bad {
                Some(err) => Err(RunnerError::Projection(err)),
                None => Ok((batch, last, events.len())),
            };
            let stop = page.is_err();
            if send.send(page).await.is_err() || stop {
                break;
            }
            position = last;
        }
        started.elapsed()
    });
    (recv, task)
}

pub async fn rebuild_full(
    store: &DynStore,
    db: &Db,
) -> Result<crate::runtime::projector::RebuildOutcome, RunnerError> {
    let started = Instant::now();
    db.checkpoint(NAME, VERSION).await?;
    let mut tx = Tx::begin(db).await?;
    if !lock_checkpoint(&mut tx).await? {
        return Err(RunnerError::Held(NAME));
    }
    for def in TABLES {
        tx.exec(&format!("DELETE FROM {}", def.name), &[]).await?;
    }
    let (mut pages, reader) = spawn_reader(store.clone());
    let mut replay = Replay::default();
    let (mut position, mut events_read) = (0i64, 0u64);
    let mut writing = Duration::ZERO;
    while let Some(page) = pages.recv().await {
        let (batch, last, n) = page?;
        let at = Instant::now();
        let journal = replay.lines(&batch)?;
        insert_lines(&mut tx, &journal).await?;
        writing += at.elapsed();
        events_read += n as u64;
        position = last;
    }
    let reading = reader.await.map_err(|e| {
        RunnerError::Database(sqlx::Error::Protocol(format!("journal reader: {e}")))
    })?;
    let at = Instant::now();
    let accounts = replay.deltas.len();
    replay.finish(&mut tx).await?;
    let finishing = at.elapsed();
    let sql = "UPDATE projection_checkpoints SET position = ?, updated_at = ?, \
               last_error = NULL, error_position = NULL WHERE name = ?";
    let now = Cell::Text(time_text(&chrono::Utc::now()));
    tx.exec(sql, &[Cell::Int(position), now, Cell::text(NAME)])
        .await?;
    let at = Instant::now();
    tx.commit().await?;
    let committing = at.elapsed();
    tracing::info!(
        projection = NAME,
        events_read,
        position,
        reading_ms = reading.as_millis() as u64,
        writing_ms = writing.as_millis() as u64,
        accounts,
        finishing_ms = finishing.as_millis() as u64,
        committing_ms = committing.as_millis() as u64,
        total_ms = started.elapsed().as_millis() as u64,
        "full rebuild done"
    );
    Ok(crate::runtime::projector::RebuildOutcome {
        projection: NAME,
        events_read,
        position,
    })
}
