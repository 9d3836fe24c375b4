//! The bill projector (SPEC R-BILL-1 … R-BILL-7, issue 6 items 3 and 8): the runner
//! around the pure fold and decision of `factledger_projections::bill`.
//!
//! Events of [`BILL_AGGREGATE_TYPES`] are read in global order in batches of
//! [`BATCH_EVENTS_MAX`]; in ONE transaction per batch each event is folded into the
//! fact tables (`bill_fact_*`, latest wins), the station-months it affects are
//! resolved against the fact tables before and after its write, and then every
//! affected station-month is recomputed from the fact tables of the same transaction
//! ([`recompute_in`]: assemble [`BillFacts`], `decide`, write the three bill rows and
//! the decision or error finding, mode ALL), and the checkpoint moves by
//! compare-and-set exactly like the generic runner's (`projector::advance!`).
//!
//! Why not a `projector::Projector`: that trait's `project` is a pure function of one
//! event with no read of earlier rows, while a bill decision reads every fact of its
//! station-month and across months (rent, deduction and cumulative paid sums). So the
//! bill projector is a second runner path: its own batch step, the generic runner's
//! checkpoint compare-and-set, and `projection::spawn_runner` for the loop, status,
//! metrics and stall alerts.
//!
//! Recomputing a set of station-months on demand ([`recompute_station_months`]) is
//! the scoped rebuild and what R-BILL-8 refresh requests reuse. Every recomputation
//! runs in chunks of [`RECOMPUTE_CHUNK`] station-months with one read per fact table
//! and one multi-row write per bill table (`assemble`).
//!
//! A backlog is caught up in bulk: a full batch with at least
//! [`CatchUp::bulk_lag`] events after it is only folded into the fact tables, and the
//! same transaction leaves a pending sweep (`bill_projection_sweep`); until the sweep
//! starts, later batches are folded the same way. At the head the
//! projector sweeps every station-month once, [`SWEEP_CHUNK`] per transaction with
//! a cursor, and reads report `sweep_pending` for the station-months it has not
//! reached. Why: a partner bill's deduction counts in every month of its platform
//! station's accounts (R-BILL-4, no month cap), so replaying a log month by month
//! recomputes each earlier month once per later month — quadratic in the months. A
//! full rebuild folds everything and recomputes each station-month once, for the
//! same reason.

use crate::infra::db::{Db, Tx};
use crate::infra::store::{time_text, DynStore, StoredEvent};
use crate::runtime::projection::{RunnerError, SharedStatus, StallAlerts};
use factledger_aggregates::bill::BILL_AGGREGATE_TYPES;
pub use factledger_projections::bill::fold::NAME;
use factledger_projections::bill::fold::{
    self, fact_time_column, Finding, Folded, Projected, Touch, VERSION,
};
use factledger_projections::bill::tables::{
    CUSTOMER_BILL, CUSTOMER_BILL_PARTNER, DECISIONS, DECISION_FINDINGS, DECISION_TABLES,
    FACT_TABLES, MONTHLY_INCOME_DIFFERENCE,
};
use factledger_projections::bill::{BillFacts, StationMonth};
use factledger_projections::table::{Cell, MemRow, TableDef};
use factledger_projections::ProjectionError;
use std::collections::BTreeSet;

mod assemble;
mod facts;
mod pick;
mod sweep;
mod write;
#[cfg(test)]
mod write_tests;
#[allow(unused_imports)]
use facts::*;
#[allow(unused_imports)]
use sweep::*;
pub use sweep::{sweep_chunk, sweep_pending};

/// Events read and applied per transaction (the other runners' batch).
pub const BATCH_EVENTS_MAX: i64 = crate::runtime::projection::BATCH_EVENTS_MAX;

/// Why one step of the bill projector failed.
#[derive(Debug)]
enum Step {
    /// The event at `position` (or, for a recomputation, the last event of its batch)
    /// cannot be applied: the projector stops right before it.
    Event {
        position: i64,
        reason: String,
    },
    Database(sqlx::Error),
}

impl From<sqlx::Error> for Step {
    fn from(e: sqlx::Error) -> Self {
        Step::Database(e)
    }
}

impl Step {
    fn into_runner(self) -> RunnerError {
        match self {
            Step::Database(e) => RunnerError::Database(e),
            Step::Event { position, reason } => RunnerError::Projection(ProjectionError {
                projection: NAME,
                global_position: position,
                reason,
            }),
        }
    }
}

/// Lock the checkpoint row for a rebuild (the runner's compare-and-set waits on it
/// and then finds it moved or not); false when a rebuild holds it.
async fn lock_checkpoint(tx: &mut Tx) -> Result<bool, sqlx::Error> {
    let locked = tx
        .exec(
            "UPDATE projection_checkpoints SET updated_at = ? WHERE name = ? AND hold IS NULL",
            &[Cell::Text(time_text(&chrono::Utc::now())), Cell::text(NAME)],
        )
        .await?;
    Ok(locked == 1)
}

// ---------------------------------------------------------------------------------
// Assembling the facts of one station-month and writing its rows.

/// What the assembler read for one station-month.
struct Assembled {
    facts: BillFacts,
    inconsistent: Option<Finding>,
    /// The newest fact time read: `payment_status_update_time`.
    fact_at: Option<String>,
}

/// Tracks the newest fact time among the rows read.
#[derive(Default)]
struct Newest(Option<String>);

impl Newest {
    fn see_row(&mut self, def: &TableDef, row: &MemRow) {
        if let Some(Cell::Text(t)) = row.get(fact_time_column(def)) {
            if self.0.as_ref().is_none_or(|n| t > n) {
                self.0 = Some(t.clone());
            }
        }
    }
}

fn in_list(n: usize) -> String {
    vec!["?"; n].join(", ")
}

/// The columns of `fi_customer_bill_partner` a decision sets (cleared to NULL when the
/// station-month no longer decides the bill).
const PARTNER_PROJECTION_COLUMNS: &[&str] = &[
    "station_id",
    "decided_station_month",
    "payment_status",
    "paid_amount",
    "cumulative_paid_amount",
    "locked_payment_order_id",
    "locked_order_bill_id",
    "payment_status_update_time",
    "partner_query_status",
    "pre_rent_check_result",
    "pre_rent_check_reason",
    "current_payment_amount",
    "unqualified_flag",
    "unqualified_reason",
    "last_unqualified_order_id",
    "last_unqualified_time",
];

/// Station-months assembled and written with one set of statements.
const RECOMPUTE_CHUNK: usize = 256;

/// `(station_id = ? AND {month} = ?) OR …` over `sms`, with its arguments.
fn at_station_months(month: &str, sms: &[StationMonth]) -> (String, Vec<Cell>) {
    let terms = vec![format!("(station_id = ? AND {month} = ?)"); sms.len()];
    let args = sms
        .iter()
        .flat_map(|sm| [Cell::Int(sm.station_id), Cell::Text(sm.month.to_string())])
        .collect();
    (terms.join(" OR "), args)
}

/// Insert `rows` (values in `def`'s column order) with one multi-row INSERT.
async fn insert_rows(tx: &mut Tx, def: &TableDef, rows: Vec<Vec<Cell>>) -> Result<(), Step> {
    if rows.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = def.columns.iter().map(|c| c.name).collect();
    let one = format!("({})", in_list(names.len()));
    let sql = format!(
        "INSERT INTO {} ({}) VALUES {}",
        def.name,
        names.join(", "),
        vec![one; rows.len()].join(", ")
    );
    let values: Vec<Cell> = rows.into_iter().flatten().collect();
    tx.exec(&sql, &values).await?;
    Ok(())
}

/// Recompute these station-months from the fact tables inside `tx` (mode ALL): clear
/// their rows, then write the three bill rows and the decision or the error finding
/// of each. What the live projector, both rebuilds and R-BILL-8 refreshes run, in
/// chunks of [`RECOMPUTE_CHUNK`] (see `assemble`).
async fn recompute_in(tx: &mut Tx, sms: &BTreeSet<StationMonth>) -> Result<(), Step> {
    let sms: Vec<StationMonth> = sms.iter().copied().collect();
    for chunk in sms.chunks(RECOMPUTE_CHUNK) {
        recompute_chunk(tx, chunk).await?;
    }
    Ok(())
}

async fn recompute_chunk(tx: &mut Tx, sms: &[StationMonth]) -> Result<(), Step> {
    for (table, month) in [
        (DECISIONS.name, "bill_yearmonth"),
        (DECISION_FINDINGS.name, "bill_yearmonth"),
        (CUSTOMER_BILL.name, "bill_yearmonth"),
        (MONTHLY_INCOME_DIFFERENCE.name, "share_month"),
    ] {
        let (condition, args) = at_station_months(month, sms);
        tx.exec(&format!("DELETE FROM {table} WHERE {condition}"), &args)
            .await?;
    }
    let clear: Vec<String> = PARTNER_PROJECTION_COLUMNS
        .iter()
        .map(|c| format!("{c} = NULL"))
        .collect();
    let sql = format!(
        "UPDATE {} SET {} WHERE decided_station_month IN ({})",
        CUSTOMER_BILL_PARTNER.name,
        clear.join(", "),
        in_list(sms.len())
    );
    let keys: Vec<Cell> = sms.iter().map(|sm| Cell::Text(sm.to_string())).collect();
    tx.exec(&sql, &keys).await?;

    let assembled = assemble::assemble_many(tx, sms).await?;
    let (mut bills, mut differences, mut decisions, mut findings) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut partner_bills = Vec::new();
    for (sm, a) in sms.iter().zip(assembled) {
        let Some(a) = a else {
            continue;
        };
        let Projected {
            customer_bill,
            partner_bill,
            difference,
            decision,
            finding,
        } = fold::project(&a.facts, a.inconsistent, a.fact_at.as_deref());
        let add = |def: &TableDef, into: &mut Vec<Vec<Cell>>, row: Option<Vec<_>>| {
            row.map(|row| ordered(def, &row).map(|v| into.push(v)))
                .transpose()
                .map_err(bad(0))
        };
        add(&CUSTOMER_BILL, &mut bills, customer_bill)?;
        add(&MONTHLY_INCOME_DIFFERENCE, &mut differences, difference)?;
        add(&DECISIONS, &mut decisions, decision)?;
        if finding.is_some() {
            tracing::warn!(station_month = %sm, "bill decision failed: an error finding is recorded");
        }
        add(&DECISION_FINDINGS, &mut findings, finding)?;
        if let Some(p) = partner_bill {
            partner_bills.push((*sm, p));
        }
    }
    insert_rows(tx, &CUSTOMER_BILL, bills).await?;
    insert_rows(tx, &MONTHLY_INCOME_DIFFERENCE, differences).await?;
    insert_rows(tx, &DECISIONS, decisions).await?;
    insert_rows(tx, &DECISION_FINDINGS, findings).await?;
    for (sm, (id, set)) in partner_bills {
        let sets: Vec<String> = set.iter().map(|(n, _)| format!("{n} = ?")).collect();
        let mut values: Vec<Cell> = set.into_iter().map(|(_, v)| v).collect();
        values.push(Cell::Int(id));
        let sql = format!(
            "UPDATE {} SET {} WHERE id = ?",
            CUSTOMER_BILL_PARTNER.name,
            sets.join(", ")
        );
        if tx.exec(&sql, &values).await? != 1 {
            return Err(Step::Event {
                position: 0,
                reason: format!("{sm}: partner bill {id} has no row"),
            });
        }
    }
    Ok(())
}

/// Fold a batch of events into the fact tables and recompute every station-month it
/// affects, inside `tx`. Touches are resolved before each event's write (its old
/// readers) and after it (its new readers). Puts are held back and sent in multi-row
/// statements (`write`) until a resolution or the recomputation reads the tables.
async fn apply_in(tx: &mut Tx, batch: &[(i64, Folded)]) -> Result<usize, Step> {
    let mut affected = BTreeSet::new();
    let mut writer = write::FactWriter::default();
    for (position, folded) in batch {
        if !folded.touches.is_empty() {
            writer.flush(tx).await?;
        }
        for touch in &folded.touches {
            resolve(tx, *touch, &mut affected)
                .await
                .map_err(|e| at(e, *position))?;
        }
        for op in &folded.ops {
            writer.write(tx, op, *position).await?;
        }
        if !folded.touches.is_empty() {
            writer.flush(tx).await?;
        }
        for touch in &folded.touches {
            resolve(tx, *touch, &mut affected)
                .await
                .map_err(|e| at(e, *position))?;
        }
    }
    writer.flush(tx).await?;
    written(&writer);
    let last = batch.last().map_or(0, |(p, _)| *p);
    recompute_in(tx, &affected).await.map_err(|e| at(e, last))?;
    Ok(affected.len())
}

/// Attribute a step error without a position to the event at `position`.
fn at(e: Step, position: i64) -> Step {
    match e {
        Step::Event {
            position: 0,
            reason,
        } => Step::Event { position, reason },
        other => other,
    }
}

// ---------------------------------------------------------------------------------
// The runner.

/// The fold of one stored event, `None` for another aggregate type.
fn fold_event(e: &StoredEvent) -> Result<Option<Folded>, ProjectionError> {
    if !BILL_AGGREGATE_TYPES.contains(&e.aggregate_type.as_str()) {
        return Ok(None);
    }
    let fail = |reason: String| ProjectionError {
        projection: NAME,
        global_position: e.global_position,
        reason: format!("{} {reason}", e.event_type),
    };
    let (_, payload) = e.current_payload().map_err(|err| fail(err.to_string()))?;
    fold::fold(&e.aggregate_type, &payload).map_err(fail)
}

/// Write the fact ops of a batch, nothing recomputed: a bulk batch or a full rebuild,
/// which recompute every station-month afterwards.
async fn fold_in(tx: &mut Tx, batch: &[(i64, Folded)]) -> Result<(), Step> {
    let mut writer = write::FactWriter::default();
    for (position, folded) in batch {
        for op in &folded.ops {
            writer.write(tx, op, *position).await?;
        }
    }
    writer.flush(tx).await?;
    written(&writer);
    Ok(())
}

/// Log (debug) how many statements a batch's fact ops took.
fn written(writer: &write::FactWriter) {
    tracing::debug!(
        projection = NAME,
        ops = writer.ops,
        statements = writer.statements,
        "bill facts written"
    );
}

/// Apply a batch and move the checkpoint `from → to` in ONE transaction: recomputing
/// what it affects, or for a `bulk` batch (or while a marked sweep has not started)
/// folding it and marking the sweep. Returns whether it folded in bulk.
async fn apply(
    db: &Db,
    from: i64,
    to: i64,
    batch: &[(i64, Folded)],
    bulk: bool,
) -> Result<bool, RunnerError> {
    let mut tx = Tx::begin(db).await?;
    if !crate::runtime::projector::advance_in(&mut tx, NAME, from, to).await? {
        return Err(RunnerError::CheckpointMoved(NAME));
    }
    // A sweep that has not started recomputes every station-month after this batch
    // anyway: fold it in bulk too, up to the head.
    let bulk = bulk || sweep_cursor(&mut tx).await? == Some(None);
    // Dropping the transaction on an error rolls the batch back.
    if bulk {
        fold_in(&mut tx, batch).await.map_err(Step::into_runner)?;
        mark_sweep(&mut tx, to).await?;
    } else {
        apply_in(&mut tx, batch).await.map_err(Step::into_runner)?;
    }
    tx.commit().await?;
    Ok(bulk)
}

/// Events a catch-up batch must still have after it to be folded in bulk.
pub const BULK_LAG_EVENTS: i64 = 20_000;
/// Station-months one sweep transaction recomputes.
pub const SWEEP_CHUNK: i64 = 1_024;

/// How a catch-up reads and when it folds in bulk. The defaults serve; the tests and
/// the bench shrink or grow them.
#[derive(Debug, Clone, Copy)]
pub struct CatchUp {
    /// Events read (and applied in one transaction) per batch.
    pub batch: i64,
    /// A full batch with at least this many events after it in the log is folded
    /// into the fact tables without recomputing anything; the station-months are
    /// swept once the projector is back at the head (a 1M-event backlog would
    /// otherwise recompute a group's earlier months again for every later month).
    pub bulk_lag: i64,
    /// Station-months recomputed per sweep transaction.
    pub sweep_chunk: i64,
    /// Sweep before returning (false: leave a pending sweep to the running projector
    /// or to [`sweep_chunk`]).
    pub sweep: bool,
}

impl Default for CatchUp {
    fn default() -> Self {
        CatchUp {
            batch: BATCH_EVENTS_MAX,
            bulk_lag: BULK_LAG_EVENTS,
            sweep_chunk: SWEEP_CHUNK,
            sweep: true,
        }
    }
}

/// Bring the bill projection up to the head of the log; returns how many events it
/// read. Stops at (and returns) the first event it cannot apply, with every event
/// before it applied and the checkpoint right before it.
pub async fn catch_up(store: &DynStore, db: &Db) -> Result<u64, RunnerError> {
    catch_up_with(store, db, CatchUp::default()).await
}

/// [`catch_up`] with explicit batch sizes. Returns once the projector is at the head
/// and no sweep is pending.
pub async fn catch_up_with(store: &DynStore, db: &Db, how: CatchUp) -> Result<u64, RunnerError> {
    let mut position = db.checkpoint(NAME, VERSION).await?;
    let mut read = 0u64;
    loop {
        let events = store.read_all(position, how.batch).await?;
        let Some(last) = events.last().map(|e| e.global_position) else {
            if how.sweep && sweep_step(db, position, how.sweep_chunk).await? {
                continue;
            }
            return Ok(read);
        };
        let bulk =
            events.len() as i64 >= how.batch && store.head_position().await? - last >= how.bulk_lag;
        let mut batch = Vec::new();
        let mut failed = None;
        for e in &events {
            match fold_event(e) {
                Ok(Some(folded)) => batch.push((e.global_position, folded)),
                Ok(None) => {}
                Err(err) => {
                    failed = Some(err);
                    break;
                }
            }
        }
        let outcome = match failed {
            None => apply(db, position, last, &batch, bulk).await,
            Some(err) => Err(RunnerError::Projection(err)),
        };
        match outcome {
            Ok(bulk) => {
                read += events.len() as u64;
                position = last;
                // Live batches let a pending sweep advance a chunk each.
                if !bulk && how.sweep {
                    sweep_step(db, position, how.sweep_chunk).await?;
                }
            }
            Err(RunnerError::Projection(err)) => {
                // Apply what comes before the failing event, so the projector stops
                // exactly at it, then report it.
                let before = err.global_position - 1;
                if before > position {
                    batch.retain(|(p, _)| *p < err.global_position);
                    apply(db, position, before, &batch, bulk).await?;
                }
                return Err(RunnerError::Projection(err));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Run the bill projector continuously in its own task (the generic runners' loop:
/// status on `GET /v1/projections`, metrics, backoff, stall alerts).
pub fn spawn(store: DynStore, db: Db, alerts: Option<StallAlerts>) -> SharedStatus {
    let (s, d) = (store.clone(), db.clone());
    crate::runtime::projection::spawn_runner(store, db, NAME, VERSION, alerts, false, move || {
        let (store, db) = (s.clone(), d.clone());
        async move { catch_up(&store, &db).await }
    })
}

// ---------------------------------------------------------------------------------
// Rebuilds and recomputation on demand.

/// Every table the bill projector owns (fact tables first).
pub fn tables() -> impl Iterator<Item = &'static TableDef> {
    FACT_TABLES.iter().chain(DECISION_TABLES.iter())
}

/// Rebuild the bill projection from position 0 in ONE transaction, like
/// `projector::rebuild_full`: lock the checkpoint row, empty every table, replay
/// every event into the fact tables, recompute every station-month once, set the
/// checkpoint to the last event. Readers see the old rows until the commit.
pub async fn rebuild_full(
    store: &DynStore,
    db: &Db,
) -> Result<crate::runtime::projector::RebuildOutcome, RunnerError> {
    db.checkpoint(NAME, VERSION).await?;
    let mut tx = Tx::begin(db).await?;
    if !lock_checkpoint(&mut tx).await? {
        return Err(RunnerError::Held(NAME));
    }
    for def in tables() {
        tx.exec(&format!("DELETE FROM {}", def.name), &[]).await?;
    }
    let (mut position, mut events_read) = (0i64, 0u64);
    loop {
        let events = store.read_all(position, BATCH_EVENTS_MAX).await?;
        let Some(last) = events.last().map(|e| e.global_position) else {
            break;
        };
        let mut batch = Vec::new();
        for e in &events {
            if let Some(folded) = fold_event(e)? {
                batch.push((e.global_position, folded));
            }
        }
        fold_in(&mut tx, &batch).await.map_err(Step::into_runner)?;
        events_read += events.len() as u64;
        position = last;
    }
    // Every station-month once, from the final facts: what recomputing the affected
    // ones after each batch would leave, without recomputing a month per later month.
    let mut all = BTreeSet::new();
    resolve(&mut tx, Touch::Everything, &mut all)
        .await
        .map_err(Step::into_runner)?;
    recompute_in(&mut tx, &all)
        .await
        .map_err(|e| at(e, position))
        .map_err(Step::into_runner)?;
    tx.exec(
        "DELETE FROM bill_projection_sweep WHERE name = ?",
        &[Cell::text(NAME)],
    )
    .await?;
    tx.exec(
        "UPDATE projection_checkpoints SET position = ?, updated_at = ?, \
         last_error = NULL, error_position = NULL WHERE name = ?",
        &[
            Cell::Int(position),
            Cell::Text(time_text(&chrono::Utc::now())),
            Cell::text(NAME),
        ],
    )
    .await?;
    tx.commit().await?;
    tracing::info!(
        projection = NAME,
        events_read,
        position,
        "full rebuild done"
    );
    Ok(crate::runtime::projector::RebuildOutcome {
        projection: NAME,
        events_read,
        position,
    })
}

/// Recompute these station-months from the fact tables, in ONE transaction that
/// locks the checkpoint row (the live runner waits; it never sees half of it).
/// The scoped rebuild, and the unit an R-BILL-8 refresh round commits per
/// station-month. Returns how many it recomputed.
pub async fn recompute_station_months(
    db: &Db,
    station_months: &[StationMonth],
) -> Result<usize, RunnerError> {
    db.checkpoint(NAME, VERSION).await?;
    let mut tx = Tx::begin(db).await?;
    if !lock_checkpoint(&mut tx).await? {
        return Err(RunnerError::Held(NAME));
    }
    let unique: BTreeSet<StationMonth> = station_months.iter().copied().collect();
    recompute_in(&mut tx, &unique)
        .await
        .map_err(Step::into_runner)?;
    tx.commit().await?;
    Ok(unique.len())
}

/// An account whose station-months a scoped rebuild recomputes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Account {
    /// A customer (small) account: the station-months of its small bills.
    Small(i64),
    /// A partner account: every station-month whose partner accounts include it.
    Partner(i64),
}

/// The station-months an account's facts are read by (sorted).
pub async fn station_months_of_account(
    db: &Db,
    account: Account,
) -> Result<Vec<StationMonth>, RunnerError> {
    let mut tx = Tx::begin(db).await?;
    let touch = match account {
        Account::Small(id) => Touch::CustomerAccount(id),
        Account::Partner(id) => Touch::PartnerAccount(id),
    };
    let mut found = BTreeSet::new();
    resolve(&mut tx, touch, &mut found)
        .await
        .map_err(Step::into_runner)?;
    tx.commit().await?;
    Ok(found.into_iter().collect())
}

/// Scoped rebuild of an account: recompute every station-month that reads it.
pub async fn rebuild_account(db: &Db, account: Account) -> Result<usize, RunnerError> {
    let station_months = station_months_of_account(db, account).await?;
    recompute_station_months(db, &station_months).await
}

/// Every row of every bill table, ordered by key: what a rebuild must reproduce.
pub async fn dump(db: &Db) -> Result<Vec<(&'static str, Vec<MemRow>)>, sqlx::Error> {
    let mut out = Vec::new();
    for def in tables() {
        let order = format!("ORDER BY {}", def.key.join(", "));
        out.push((
            def.name,
            crate::runtime::projector::select_rows(db, def, &order, &[]).await?,
        ));
    }
    Ok(out)
}

/// The facts one station-month's decision reads, as the fact tables hold them now
/// (`None` when it has neither a small bill nor a diff). What the R-BILL-11 inspection
/// after a refresh run compares the projected rows with.
pub async fn facts_of(
    db: &Db,
    station_month: StationMonth,
) -> Result<Option<BillFacts>, RunnerError> {
    let mut tx = Tx::begin(db).await?;
    let assembled = assemble::assemble_many(&mut tx, &[station_month])
        .await
        .map_err(Step::into_runner)?;
    tx.commit().await?;
    Ok(assembled.into_iter().next().flatten().map(|a| a.facts))
}

/// Station-months selected by `sql` (two columns: station id, `yyyymm`), in the
/// order it returns them. R-BILL-8 account scopes page through the fact tables with it.
pub async fn select_station_months(
    db: &Db,
    sql: &str,
    args: &[Cell],
) -> Result<Vec<StationMonth>, RunnerError> {
    let mut tx = Tx::begin(db).await?;
    let mut out = Vec::new();
    for row in tx.fetch(sql, args, STATION_MONTH_COLUMNS).await? {
        let station_id = fold::int_of(&row, "station_id")
            .map_err(bad(0))
            .map_err(Step::into_runner)?;
        let month = fold::month_of(&row, "month")
            .map_err(bad(0))
            .map_err(Step::into_runner)?;
        out.push(StationMonth { station_id, month });
    }
    tx.commit().await?;
    Ok(out)
}
