//! The journal's runner: the pure journal (`factledger_projections::ledger`) written
//! to `journal`, `account_balances` and `journal_stream_currencies`, with the same
//! guarantees as every runner — events in global order, a batch's rows and the
//! checkpoint (`journal`) in ONE transaction moved by compare-and-set, and an event
//! it cannot apply stops it right before that event.
//!
//! A batch's journal lines go in multi-row inserts and its balance changes are summed
//! per account first and written in multi-row upserts, so a catch-up writes about one
//! statement per [`LINES_PER_INSERT`] lines plus one per [`ACCOUNTS_PER_UPSERT`]
//! accounts touched.
//! The currency of a stream comes from its opening event, kept in
//! `journal_stream_currencies` and cached for the batch.

use crate::infra::db::{Db, Get, Tx};
use crate::infra::store::{time_text, DynStore, StoredEvent};
use crate::runtime::projection::{RunnerError, SharedStatus, StallAlerts};
use factledger_aggregates::ledger::AccountKind;
use factledger_aggregates::ledger::Posting;
use factledger_aggregates::money::Currency;
use factledger_projections::ledger::{
    classify, kind_label, lines, Journaled, Line, MoneyEvent, ACCOUNT_BALANCES, JOURNAL, NAME,
    VERSION,
};
use factledger_projections::table::{Cell, ColType, Column};
use factledger_projections::ProjectionError;
use std::collections::{BTreeMap, HashMap};

/// Events read and applied per transaction (the other runners' batch).
pub const BATCH_EVENTS_MAX: i64 = crate::runtime::projection::BATCH_EVENTS_MAX;

/// Journal lines per multi-row insert.
pub const LINES_PER_INSERT: usize = 2_000;
/// Account balance rows per multi-row upsert.
pub const ACCOUNTS_PER_UPSERT: usize = 500;

/// An event of a batch, classified.
pub(super) type Batch = Vec<(i64, String, Journaled)>;

fn failed(e: &StoredEvent, reason: String) -> ProjectionError {
    ProjectionError {
        projection: NAME,
        global_position: e.global_position,
        reason: format!("{} {reason}", e.event_type),
    }
}

/// Classify the events the journal reads, up to (not including) the first it
/// cannot decode, which is returned beside them.
pub(super) fn classify_all(events: &[StoredEvent]) -> (Batch, Option<ProjectionError>) {
    let mut batch = Vec::new();
    for e in events {
        let outcome = e
            .current_payload()
            .map_err(|err| err.to_string())
            .and_then(|(_, p)| classify(&e.aggregate_type, &e.aggregate_id, &p));
        match outcome {
            Ok(meant) => batch.extend(
                meant
                    .into_iter()
                    .map(|j| (e.global_position, e.aggregate_id.clone(), j)),
            ),
            Err(reason) => return (batch, Some(failed(e, reason))),
        }
    }
    (batch, None)
}

/// What a batch adds to one account.
#[derive(Default)]
pub(super) struct Delta {
    pub(super) currency: Option<Currency>,
    pub(super) debits: i64,
    pub(super) credits: i64,
    pub(super) last_position: i64,
}

/// A stream a batch opens: its type, id and currency.
pub(super) type Opened = (&'static str, String, Currency);

/// Streams' currencies as known so far (`None`: a stream known to name none, such
/// as a campaign counted in orders).
pub(super) type Currencies = HashMap<(&'static str, String), Option<Currency>>;

/// The journal lines of a classified batch, each account's totals added to `deltas`
/// and each stream it opens added to `known` (and returned). A money event of a
/// stream whose currency is not in `known` is an error at its position: callers put
/// every stream the batch moves there first ([`streams_moved`]).
pub(super) fn journal_lines(
    batch: &Batch,
    known: &mut Currencies,
    deltas: &mut BTreeMap<String, Delta>,
) -> Result<(Vec<Line>, Vec<Opened>), WriteError> {
    let mut journal = Vec::new();
    let mut opened = Vec::new();
    for (position, stream_id, j) in batch {
        match j {
            Journaled::Opens {
                stream_type,
                currency,
                accounts,
            } => {
                known.insert((stream_type, stream_id.clone()), Some(*currency));
                opened.push((*stream_type, stream_id.clone(), *currency));
                for a in accounts {
                    let d = deltas.entry(a.clone()).or_default();
                    d.currency = Some(*currency);
                    d.last_position = *position;
                }
            }
            Journaled::Moves(e) => {
                let currency = known
                    .get(&(e.stream_type(), stream_id.clone()))
                    .copied()
                    .flatten();
                let Some(posting) = posting_of(e, *position, stream_id, currency)? else {
                    continue;
                };
                for line in lines(*position, e.stream_type(), stream_id, &posting) {
                    let d = deltas.entry(line.account.clone()).or_default();
                    d.currency = Some(line.currency);
                    d.debits += line.debit_minor;
                    d.credits += line.credit_minor;
                    d.last_position = *position;
                    journal.push(line);
                }
            }
        }
    }
    Ok((journal, opened))
}

/// The streams a batch moves money on that it does not open itself.
fn streams_moved(batch: &Batch) -> Vec<(&'static str, String)> {
    let mut opened = std::collections::HashSet::new();
    let mut moved = Vec::new();
    for (_, stream_id, j) in batch {
        match j {
            Journaled::Opens { stream_type, .. } => {
                opened.insert((*stream_type, stream_id.as_str()));
            }
            Journaled::Moves(e) => {
                let key = (e.stream_type(), stream_id.as_str());
                if !opened.contains(&key)
                    && !moved
                        .iter()
                        .any(|(t, id): &(&str, String)| (*t, id.as_str()) == key)
                {
                    moved.push((e.stream_type(), stream_id.clone()));
                }
            }
        }
    }
    moved
}

/// Write a classified batch inside `tx`; an event that cannot be applied (a money
/// event of a stream whose currency was never named) is an error at its position.
async fn write_in(tx: &mut Tx, batch: &Batch) -> Result<(), WriteError> {
    let mut known = Currencies::new();
    for (stream_type, stream_id) in streams_moved(batch) {
        let c = stream_currency(tx, stream_type, &stream_id).await?;
        known.insert((stream_type, stream_id), c);
    }
    let mut deltas = BTreeMap::new();
    let (journal, opened) = journal_lines(batch, &mut known, &mut deltas)?;
    for (stream_type, stream_id, currency) in opened {
        let sql = "INSERT INTO journal_stream_currencies (stream_type, stream_id, \
                   currency) VALUES (?, ?, ?)";
        let args = [
            Cell::text(stream_type),
            Cell::text(stream_id),
            Cell::text(currency.as_str()),
        ];
        tx.exec(sql, &args).await?;
    }
    insert_lines(tx, &journal).await?;
    add_to_balances(tx, &deltas).await?;
    Ok(())
}

/// The posting of `e` given its stream's currency; a money event of a stream that
/// must have named one and did not is an error at its position.
fn posting_of(
    e: &MoneyEvent,
    position: i64,
    stream_id: &str,
    currency: Option<Currency>,
) -> Result<Option<Posting>, WriteError> {
    match currency {
        Some(c) => Ok(e.posting(stream_id, c)),
        None if e.needs_currency() => Err(WriteError::Event {
            position,
            reason: format!("{} {stream_id}: no currency", e.stream_type()),
        }),
        None => Ok(None),
    }
}

/// Why a batch could not be written.
#[derive(Debug)]
pub(super) enum WriteError {
    Event { position: i64, reason: String },
    Database(sqlx::Error),
}

impl From<sqlx::Error> for WriteError {
    fn from(e: sqlx::Error) -> Self {
        WriteError::Database(e)
    }
}

impl From<WriteError> for RunnerError {
    fn from(e: WriteError) -> Self {
        match e {
            WriteError::Database(e) => RunnerError::Database(e),
            WriteError::Event { position, reason } => RunnerError::Projection(ProjectionError {
                projection: NAME,
                global_position: position,
                reason,
            }),
        }
    }
}

async fn stream_currency(
    tx: &mut Tx,
    stream_type: &str,
    stream_id: &str,
) -> Result<Option<Currency>, sqlx::Error> {
    const CURRENCY: &[Column] = &[Column {
        name: "currency",
        ty: ColType::Text,
    }];
    let sql = "SELECT currency FROM journal_stream_currencies \
               WHERE stream_type = ? AND stream_id = ?";
    let args = [Cell::text(stream_type), Cell::text(stream_id)];
    let rows = tx.fetch(sql, &args, CURRENCY).await?;
    match rows.first() {
        None => Ok(None),
        Some(r) => {
            let text = r.text("currency")?;
            Currency::from_stored(&text)
                .map(Some)
                .map_err(|e| sqlx::Error::Decode(format!("currency {text:?}: {e}").into()))
        }
    }
}

/// Journal lines in multi-row inserts (measured: MariaDB's text protocol with
/// inlined literals is no faster here than bound arguments).
pub(super) async fn insert_lines(tx: &mut Tx, journal: &[Line]) -> Result<(), sqlx::Error> {
    let names: Vec<&str> = JOURNAL.columns.iter().map(|c| c.name).collect();
    let row = format!("({})", vec!["?"; names.len()].join(", "));
    for chunk in journal.chunks(LINES_PER_INSERT) {
        let sql = format!(
            "INSERT INTO journal ({}) VALUES {}",
            names.join(", "),
            vec![row.as_str(); chunk.len()].join(", ")
        );
        let mut args = Vec::with_capacity(chunk.len() * names.len());
        for l in chunk {
            args.extend([
                Cell::Int(l.position),
                Cell::Int(l.leg),
                Cell::text(&l.account),
                Cell::Int(l.debit_minor),
                Cell::Int(l.credit_minor),
                Cell::text(l.currency.as_str()),
                Cell::text(&l.ref_type),
                Cell::text(&l.ref_id),
                Cell::text(&l.entry_type),
                Cell::text(&l.stream_id),
                Cell::text(l.stream_type),
            ]);
        }
        tx.exec(&sql, &args).await?;
    }
    Ok(())
}

/// Add each account's batch totals to its row (created on first sight), in
/// multi-row upserts of [`ACCOUNTS_PER_UPSERT`].
pub(super) async fn add_to_balances(
    tx: &mut Tx,
    deltas: &BTreeMap<String, Delta>,
) -> Result<(), sqlx::Error> {
    let names: Vec<&str> = ACCOUNT_BALANCES.columns.iter().map(|c| c.name).collect();
    let rows: Vec<(&String, &Delta, Currency)> = deltas
        .iter()
        .filter_map(|(a, d)| d.currency.map(|c| (a, d, c)))
        .collect();
    for chunk in rows.chunks(ACCOUNTS_PER_UPSERT) {
        let sql = tx.dialect().upsert_adding_rows(
            ACCOUNT_BALANCES.name,
            &names,
            ACCOUNT_BALANCES.key,
            &["debits_minor", "credits_minor"],
            &["last_position"],
            chunk.len(),
        );
        let mut args = Vec::with_capacity(chunk.len() * names.len());
        for (account, d, currency) in chunk {
            let side = AccountKind::of(account).map_or("DEBIT", |k| k.normal_side().as_str());
            args.extend([
                Cell::text(*account),
                Cell::text(kind_label(account)),
                Cell::text(currency.as_str()),
                Cell::text(side),
                Cell::Int(d.debits),
                Cell::Int(d.credits),
                Cell::Int(d.last_position),
            ]);
        }
        tx.exec(&sql, &args).await?;
    }
    Ok(())
}

/// Apply `batch` (the events after `from` up to `to`) and move the checkpoint.
async fn apply(db: &Db, from: i64, to: i64, batch: &Batch) -> Result<(), RunnerError> {
    let mut tx = Tx::begin(db).await?;
    if !crate::runtime::projector::advance_in(&mut tx, NAME, from, to).await? {
        return Err(RunnerError::CheckpointMoved(NAME));
    }
    // Dropping the transaction on an error rolls the batch back.
    write_in(&mut tx, batch).await?;
    tx.commit().await?;
    Ok(())
}

/// Apply every event after the checkpoint; how many were read.
pub async fn catch_up(store: &DynStore, db: &Db) -> Result<u64, RunnerError> {
    let mut position = db.checkpoint(NAME, VERSION).await?;
    let mut read = 0u64;
    loop {
        let events = store.read_all(position, BATCH_EVENTS_MAX).await?;
        let Some(last) = events.last().map(|e| e.global_position) else {
            return Ok(read);
        };
        let (mut batch, bad) = classify_all(&events);
        let outcome = match bad {
            None => apply(db, position, last, &batch).await,
            Some(err) => Err(RunnerError::Projection(err)),
        };
        match outcome {
            Ok(()) => {
                read += events.len() as u64;
                position = last;
            }
            Err(RunnerError::Projection(err)) => {
                // Apply what comes before the failing event, so the journal stops
                // exactly at it, then report it.
                let before = err.global_position - 1;
                if before > position {
                    batch.retain(|(p, _, _)| *p < err.global_position);
                    apply(db, position, before, &batch).await?;
                }
                return Err(RunnerError::Projection(err));
            }
            Err(e) => return Err(e),
        }
    }
}

/// The journal's runner task (status, metrics and stall alerts like every runner).
pub fn spawn(store: DynStore, db: Db, alerts: Option<StallAlerts>) -> SharedStatus {
    let (s, d) = (store.clone(), db.clone());
    crate::runtime::projection::spawn_runner(store, db, NAME, VERSION, alerts, false, move || {
        let (store, db) = (s.clone(), d.clone());
        async move { catch_up(&store, &db).await }
    })
}

/// Lock the checkpoint row for a rebuild; false when a rebuild holds it.
pub(super) async fn lock_checkpoint(tx: &mut Tx) -> Result<bool, sqlx::Error> {
    let sql = "UPDATE projection_checkpoints SET updated_at = ? WHERE name = ? AND hold IS NULL";
    let args = [Cell::Text(time_text(&chrono::Utc::now())), Cell::text(NAME)];
    Ok(tx.exec(sql, &args).await? == 1)
}

/// A scoped rebuild of one stream's postings: in ONE transaction that locks the
/// checkpoint, its journal lines are replaced by the lines its events make up to the
/// checkpoint, and every account those lines touch (before or after) is summed again
/// from the journal. Returns how many lines it wrote.
pub async fn rebuild_stream(
    store: &DynStore,
    db: &Db,
    stream_type: &str,
    stream_id: &str,
) -> Result<usize, RunnerError> {
    let checkpoint = db.checkpoint(NAME, VERSION).await?;
    let mut tx = Tx::begin(db).await?;
    if !lock_checkpoint(&mut tx).await? {
        return Err(RunnerError::Held(NAME));
    }
    let mut events = Vec::new();
    loop {
        let from = events.len() as i64 + 1;
        let page = store
            .read_stream(stream_type, stream_id, from, BATCH_EVENTS_MAX)
            .await?;
        let done = (page.len() as i64) < BATCH_EVENTS_MAX;
        events.extend(page.into_iter().filter(|e| e.global_position <= checkpoint));
        if done {
            break;
        }
    }
    const ACCOUNT: &[Column] = &[Column {
        name: "account",
        ty: ColType::Text,
    }];
    let old = tx
        .fetch(
            "SELECT DISTINCT account FROM journal WHERE stream_type = ? AND stream_id = ?",
            &[Cell::text(stream_type), Cell::text(stream_id)],
            ACCOUNT,
        )
        .await?;
    let mut touched: Vec<String> = old
        .iter()
        .map(|r| r.text("account"))
        .collect::<Result<_, _>>()?;
    tx.exec(
        "DELETE FROM journal WHERE stream_type = ? AND stream_id = ?",
        &[Cell::text(stream_type), Cell::text(stream_id)],
    )
    .await?;
    tx.exec(
        "DELETE FROM journal_stream_currencies WHERE stream_type = ? AND stream_id = ?",
        &[Cell::text(stream_type), Cell::text(stream_id)],
    )
    .await?;
    let (batch, bad) = classify_all(&events);
    if let Some(err) = bad {
        return Err(RunnerError::Projection(err));
    }
    let written = rewrite_stream(&mut tx, &batch, &mut touched).await?;
    tx.commit().await?;
    Ok(written)
}

/// Write a stream's lines again and set the balances of `touched` accounts (and the
/// ones the new lines touch) to their sums over the journal.
async fn rewrite_stream(
    tx: &mut Tx,
    batch: &Batch,
    touched: &mut Vec<String>,
) -> Result<usize, RunnerError> {
    let mut journal = Vec::new();
    for (position, stream_id, j) in batch {
        match j {
            Journaled::Opens {
                stream_type,
                currency,
                ..
            } => {
                let sql = "INSERT INTO journal_stream_currencies (stream_type, stream_id, \
                           currency) VALUES (?, ?, ?)";
                let args = [
                    Cell::text(*stream_type),
                    Cell::text(stream_id),
                    Cell::text(currency.as_str()),
                ];
                tx.exec(sql, &args).await?;
            }
            Journaled::Moves(e) => {
                let currency = stream_currency(tx, e.stream_type(), stream_id).await?;
                if let Some(p) = posting_of(e, *position, stream_id, currency)? {
                    journal.extend(lines(*position, e.stream_type(), stream_id, &p));
                }
            }
        }
    }
    insert_lines(tx, &journal).await?;
    // Accounts first seen here get their row (adding nothing), then every touched
    // account is summed again.
    let mut seen: BTreeMap<String, Delta> = BTreeMap::new();
    for l in &journal {
        let d = seen.entry(l.account.clone()).or_default();
        d.currency = Some(l.currency);
        d.last_position = d.last_position.max(l.position);
    }
    add_to_balances(tx, &seen).await?;
    touched.extend(journal.iter().map(|l| l.account.clone()));
    touched.sort();
    touched.dedup();
    let sum = "UPDATE account_balances SET \
               debits_minor = (SELECT COALESCE(SUM(debit_minor), 0) FROM journal j WHERE j.account = account_balances.account), \
               credits_minor = (SELECT COALESCE(SUM(credit_minor), 0) FROM journal j WHERE j.account = account_balances.account) \
               WHERE account = ?";
    for a in touched.iter() {
        tx.exec(sum, &[Cell::text(a)]).await?;
    }
    Ok(journal.len())
}
