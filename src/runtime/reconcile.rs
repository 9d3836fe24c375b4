//! Reconciliation as a replay (SPEC R-REC-1, issue 3 item 5): replay the wallet events
//! up to one recorded global position and compare them with what the projection
//! holds, and with the invariants the events themselves must keep.
//!
//! **One consistent cut.** Everything is read on one connection inside one snapshot
//! (MariaDB: a REPEATABLE READ transaction started `WITH CONSISTENT SNAPSHOT`; SQLite:
//! a `BEGIN` whose first read pins the WAL snapshot). In it the wallet projection's
//! checkpoint is read first: the runner writes rows and checkpoint in one transaction,
//! so in the snapshot the rows are exactly the projection of the events up to the
//! checkpoint. That position is `up_to_position` in the report: the run is
//! reproducible.
//!
//! **Streaming.** Wallet events are read in `(aggregate_id, sequence)` order by keyset
//! paging on the stream index, and merged, wallet by wallet, with `wallet_balances`,
//! `wallet_ledger` and `wallet_blocks` read in the same order. Memory is one page per
//! table plus one wallet's block set, however long the log is; no query per event.
//! Every page is an in-order index range read on both backends, which takes care (see
//! `keyset_after`, `page_sql` and `Snapshot::fetch`): 1M events reconcile in about
//! 20 s on MariaDB and 25 s on SQLite (release build, 2 cores).
//!
//! **Classes.** `projection_drift` (a row missing, extra or different from what the
//! pure projector makes of the events) is repaired by a scoped rebuild of the wallet.
//! `event` findings (a broken hash chain, a sequence gap, a payload that does not
//! decode or contradicts its ledger key, a movement that breaks the balance chain,
//! conservation or the no-negative-bucket rule) are never repaired automatically:
//! events are corrected with new events, by people. A wallet with an event finding
//! is not rebuilt either: rebuilding from corrupt events would spread the corruption.
//!
//! "Each wallet's ledger deltas match its balances" (R-INV-2) follows from two checks
//! per movement: the first `before` is zero and each `before` is the previous
//! `after` (the balance chain), and `after = before + delta` (conservation), so the
//! deltas sum to the last `after`; the stored balance and ledger rows are then
//! compared with exactly those values.
//!
//! Unique ledger references (R-INV-1) are covered without a global set: the unique
//! index holds for the `ledger_ref_*` columns, and every payload's reference is checked
//! against its own row's columns.

use crate::infra::db::Db;
use crate::infra::store::{time_text, DynStore, StoredEvent, GENESIS_HASH};
use chrono::{DateTime, NaiveDateTime, Utc};
use factledger_aggregates::wallet::{Buckets, Movement, WalletEvent, WALLET_AGGREGATE_TYPE};
use factledger_projections::wallet::{self, LedgerRow, WalletRow};
use factledger_projections::ProjectedEvent;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::mysql::MySqlRow;
use sqlx::sqlite::SqliteRow;
use sqlx::{MySql, Row, Sqlite, Transaction};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

mod affiliate;
mod log;
mod withdrawal;

/// Rows read per query, per table (default). A page of events is a few MB.
pub const PAGE_ROWS: i64 = 5_000;
/// Largest page a caller may ask for: memory is a page per table.
pub const PAGE_ROWS_MAX: i64 = 50_000;
/// Findings kept in a report; counts stay exact beyond it (`findings_truncated`).
pub const FINDINGS_STORED_MAX: usize = 1_000;
/// A running run renews its heartbeat this often...
pub const RUN_HEARTBEAT_MS: u64 = 1_000;
/// ...and is reported `abandoned` when its heartbeat is older than this.
pub const RUN_HEARTBEAT_TIMEOUT_MS: i64 = 10_000;
/// Wallets one run repairs by scoped rebuild. Drift wider than this is a job for a
/// full rebuild (`factledger rebuild wallet`), which is built for it.
pub const REPAIR_WALLETS_MAX: usize = 10_000;

/// MariaDB: the session runs READ COMMITTED (see `store::mysql`), where a consistent
/// snapshot lasts one statement; this transaction alone runs REPEATABLE READ.
const MYSQL_SNAPSHOT: &str = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ; \
     START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY";

const REPAIR_AUTO: &str = "auto: scoped rebuild of the wallet";
const REFUSED_EVENT: &str =
    "refused: event-level findings are corrected by hand with new events, never repaired";
const REFUSED_WALLET: &str = "refused: wallet has event-level findings";
const REFUSED_TOO_WIDE: &str =
    "refused: too many wallets drifted for scoped repair; rebuild the whole projection";

#[derive(Debug, Clone)]
pub struct ReconcileOptions {
    /// Rebuild the wallets that only drifted, then check them again.
    pub repair: bool,
    /// The anchor file the log is checked against besides the database's anchors.
    pub anchor_file: Option<std::path::PathBuf>,
    /// Rows per query per table, 1 to `PAGE_ROWS_MAX` (tests use tiny pages so that
    /// every wallet crosses page boundaries).
    pub page_rows: i64,
}

impl Default for ReconcileOptions {
    fn default() -> Self {
        ReconcileOptions {
            repair: false,
            anchor_file: None,
            page_rows: PAGE_ROWS,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FindingClass {
    /// A projection row differs from the replay: repairable by a scoped rebuild.
    ProjectionDrift,
    /// The events themselves are wrong: manual, never repaired automatically.
    Event,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    BalanceMissing,
    BalanceExtra,
    BalanceDiffers,
    LedgerMissing,
    LedgerExtra,
    LedgerDiffers,
    BlockMissing,
    BlockExtra,
    BlockDiffers,
    /// The stored hash does not match the event's content and its predecessor.
    HashChainBroken,
    /// A stream's sequence skips (an event is missing) or does not start at 1.
    SequenceGap,
    /// The payload does not parse, upcast or decode as a wallet event.
    PayloadUndecodable,
    /// The payload's `type` is not the row's `event_type`.
    EventTypeMismatch,
    /// The payload's ref (type, id, entry type) is not the row's `ledger_ref_*` key.
    LedgerRefMismatch,
    /// A movement's `before` is not the previous movement's `after`.
    BalanceChainBroken,
    /// A movement's `delta` is not what its entry type and amount move.
    DeltaMismatch,
    /// `before + delta != after`.
    ConservationBroken,
    /// A bucket of `after` is below zero (there is no debt model).
    NegativeBucket,
    /// An event the wallet's state does not allow (before it was opened, opened
    /// twice, a block placed twice or lifted when absent).
    LifecycleBroken,
    /// A row of an affiliate projection the replay makes is not stored.
    RowMissing,
    /// A stored row of an affiliate projection no event accounts for.
    RowExtra,
    /// A stored row of an affiliate projection differs from the replay's.
    RowDiffers,
    /// A commission event that does not decode or that its stream does not allow.
    CommissionEventInvalid,
    /// Σ of a wallet's PENDING and FROZEN commission amounts is not the pending its
    /// commission ledger entries hold (R-REC-1).
    CommissionPendingMismatch,
    /// Σ of a wallet's released commission amounts is not Σ of its `RELEASE_PENDING`
    /// entries with `ref_type COMMISSION`.
    CommissionReleaseMismatch,
    /// A withdrawal released more from frozen than it froze (unfrozen and paid out,
    /// or released without a freeze), or a wallet's withdrawals do not account for
    /// its frozen bucket.
    WithdrawalFrozenMismatch,
    /// The log itself was altered: positions deleted, the tail truncated, or an
    /// anchored event replaced (see `reconcile::log`). Blocks every repair.
    LogIntegrity,
}

impl FindingKind {
    pub fn class(self) -> FindingClass {
        use FindingKind::*;
        match self {
            BalanceMissing | BalanceExtra | BalanceDiffers | LedgerMissing | LedgerExtra
            | LedgerDiffers | BlockMissing | BlockExtra | BlockDiffers | RowMissing | RowExtra
            | RowDiffers => FindingClass::ProjectionDrift,
            HashChainBroken
            | SequenceGap
            | PayloadUndecodable
            | EventTypeMismatch
            | LedgerRefMismatch
            | BalanceChainBroken
            | DeltaMismatch
            | ConservationBroken
            | NegativeBucket
            | LifecycleBroken
            | CommissionEventInvalid
            | CommissionPendingMismatch
            | CommissionReleaseMismatch
            | WithdrawalFrozenMismatch
            | LogIntegrity => FindingClass::Event,
        }
    }
}

/// An event a finding is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EventRef {
    pub global_position: i64,
    /// `TYPE/ID`, e.g. `wallet/w-1`.
    pub stream: String,
    pub sequence: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Finding {
    pub class: FindingClass,
    pub kind: FindingKind,
    /// The wallet the finding is about (empty for a row of an affiliate projection
    /// that names no wallet).
    pub wallet_id: String,
    /// The projection the finding is about, when it is not the wallet's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projection: Option<String>,
    /// `wallet_balances`, `wallet_ledger`, `wallet_blocks` or `events`.
    pub table: String,
    /// The row within the table: `wallet_id=…`, `sequence=…` or `ref=TYPE/ID`.
    pub key: String,
    pub detail: String,
    /// What the replay says the row (or value) should be; null when it should not exist.
    #[schema(value_type = Option<Object>)]
    pub expected: Option<Value>,
    /// What is stored; null when it is missing.
    #[schema(value_type = Option<Object>)]
    pub actual: Option<Value>,
    /// The events involved.
    pub events: Vec<EventRef>,
    /// What a repair does with it (`auto: …`) or why it will not (`refused: …`).
    pub repair: String,
    /// With a repair: whether the re-check after it found the row right.
    pub repaired: Option<bool>,
}

/// Findings per class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Counts {
    pub projection_drift: u64,
    pub event: u64,
}

impl Counts {
    pub fn total(&self) -> u64 {
        self.projection_drift + self.event
    }

    fn add(&mut self, class: FindingClass, n: u64) {
        match class {
            FindingClass::ProjectionDrift => self.projection_drift += n,
            FindingClass::Event => self.event += n,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RepairOutcome {
    /// Wallets rebuilt by scoped rebuild.
    pub wallets_rebuilt: u64,
    /// Wallets whose rebuild failed (their findings say why).
    pub wallets_failed: u64,
    /// The checkpoint the re-check of the rebuilt wallets read at (a fresh snapshot).
    pub recheck_position: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Report {
    /// Events with a global position up to here were replayed (the wallet projection's
    /// checkpoint in the run's snapshot): the run is reproducible.
    pub up_to_position: i64,
    pub repair: bool,
    pub events_checked: u64,
    pub wallets_checked: u64,
    /// Commission streams replayed for the commission checks.
    #[serde(default)]
    pub commissions_checked: u64,
    /// The commission checks replayed commission and wallet events up to here: the
    /// last event the run's snapshot shows (whole units only; the wallet checkpoint
    /// may fall inside a unit and split a commission from its credit).
    #[serde(default)]
    pub commissions_up_to_position: i64,
    /// Withdrawal references (a wallet's `WITHDRAW_*` entries of one ref) checked
    /// against the frozen bucket, at the same cut as the commissions.
    #[serde(default)]
    pub withdrawals_checked: u64,
    /// Each affiliate projection compared with a replay of its events up to its own
    /// checkpoint in the same snapshot: `(name, position)`.
    #[serde(default)]
    pub projections_checked: Vec<ProjectionChecked>,
    pub duration_ms: u64,
    /// Findings per class (exact, even when `findings` is truncated).
    pub counts: Counts,
    /// Findings left after the repair (equal to `counts` without one).
    pub remaining: Counts,
    /// More than `FINDINGS_STORED_MAX` findings: only the first ones are listed.
    pub findings_truncated: bool,
    pub findings: Vec<Finding>,
    pub repair_outcome: Option<RepairOutcome>,
}

/// An affiliate projection a run compared with the events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ProjectionChecked {
    pub name: String,
    /// Its checkpoint in the run's snapshot: events up to here were replayed.
    pub up_to_position: i64,
    pub rows_checked: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("reconciliation database: {0}")]
    Database(#[from] sqlx::Error),
    /// The log check before the replay could not read the log or its anchors.
    #[error("reconciliation log check: {0}")]
    Log(String),
    /// A row could not be read at all (a column of the wrong type, not UTF-8).
    #[error("{table} row after {after}: {source}")]
    Row {
        table: &'static str,
        after: String,
        source: sqlx::Error,
    },
    #[error("reconciliation {id} has an unknown status {status:?}")]
    StoredStatus { id: String, status: String },
    #[error("stored report of reconciliation {id} does not parse: {source}")]
    StoredReport {
        id: String,
        source: serde_json::Error,
    },
}

// ---------------------------------------------------------------------------------
// Rows as read, on both backends.

/// Columns of a row, read the same way on both backends (MariaDB `_bin` text columns
/// arrive as bytes; SQLite stores times as text).
trait Cols {
    fn text(&self, i: usize) -> Result<String, sqlx::Error>;
    fn opt_text(&self, i: usize) -> Result<Option<String>, sqlx::Error>;
    fn int(&self, i: usize) -> Result<i64, sqlx::Error>;
    fn time(&self, i: usize) -> Result<DateTime<Utc>, sqlx::Error>;
}

impl Cols for MySqlRow {
    fn text(&self, i: usize) -> Result<String, sqlx::Error> {
        crate::infra::store::mysql::text(self, i)
    }
    fn opt_text(&self, i: usize) -> Result<Option<String>, sqlx::Error> {
        crate::infra::store::mysql::opt_text(self, i)
    }
    fn int(&self, i: usize) -> Result<i64, sqlx::Error> {
        self.try_get(i)
    }
    fn time(&self, i: usize) -> Result<DateTime<Utc>, sqlx::Error> {
        Ok(self.try_get::<NaiveDateTime, _>(i)?.and_utc())
    }
}

impl Cols for SqliteRow {
    fn text(&self, i: usize) -> Result<String, sqlx::Error> {
        self.try_get(i)
    }
    fn opt_text(&self, i: usize) -> Result<Option<String>, sqlx::Error> {
        self.try_get(i)
    }
    fn int(&self, i: usize) -> Result<i64, sqlx::Error> {
        self.try_get(i)
    }
    fn time(&self, i: usize) -> Result<DateTime<Utc>, sqlx::Error> {
        let s: String = self.try_get(i)?;
        DateTime::parse_from_rfc3339(&s)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|e| sqlx::Error::ColumnDecode {
                index: i.to_string(),
                source: Box::new(e),
            })
    }
}

fn buckets(r: &dyn Cols, first: usize) -> Result<Buckets, sqlx::Error> {
    Ok(Buckets {
        pending_minor: r.int(first)?,
        available_minor: r.int(first + 1)?,
        frozen_minor: r.int(first + 2)?,
        risk_hold_minor: r.int(first + 3)?,
    })
}

/// A wallet event row with the ledger key stored beside it.
struct EventRow {
    event: StoredEvent,
    /// `(ledger_ref_type, ledger_ref_id, ledger_entry_type)` when the row has one.
    ledger_ref: Option<(String, String, String)>,
}

const EVENT_COLUMNS: &str = "global_position, aggregate_id, sequence, event_type, \
     event_version, event_id, payload, metadata, correlation_id, actor, hash, recorded_at, \
     ledger_ref_type, ledger_ref_id, ledger_entry_type, hash_key";

fn event_row(r: &dyn Cols) -> Result<EventRow, sqlx::Error> {
    let event_version = i32::try_from(r.int(4)?).map_err(|e| sqlx::Error::ColumnDecode {
        index: "event_version".into(),
        source: Box::new(e),
    })?;
    let ledger_ref = match (r.opt_text(12)?, r.opt_text(13)?, r.opt_text(14)?) {
        (None, None, None) => None,
        (t, id, e) => Some((
            t.unwrap_or_default(),
            id.unwrap_or_default(),
            e.unwrap_or_default(),
        )),
    };
    Ok(EventRow {
        event: StoredEvent {
            global_position: r.int(0)?,
            aggregate_type: WALLET_AGGREGATE_TYPE.to_owned(),
            aggregate_id: r.text(1)?,
            sequence: r.int(2)?,
            event_type: r.text(3)?,
            event_version,
            event_id: r.text(5)?,
            payload: r.text(6)?,
            metadata: r.text(7)?,
            correlation_id: r.text(8)?,
            actor: r.text(9)?,
            hash: r.text(10)?,
            hash_key: r.text(15)?,
            recorded_at: r.time(11)?,
        },
        ledger_ref,
    })
}

/// A `wallet_balances` row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct BalanceRecord {
    wallet_id: String,
    user_id: String,
    currency: String,
    #[serde(flatten)]
    balances: Buckets,
    version: i64,
    last_position: i64,
}

const BALANCE_SELECT: &str = "SELECT wallet_id, user_id, currency, pending_minor, \
     available_minor, frozen_minor, risk_hold_minor, version, last_position FROM wallet_balances";

fn balance_row(r: &dyn Cols) -> Result<BalanceRecord, sqlx::Error> {
    Ok(BalanceRecord {
        wallet_id: r.text(0)?,
        user_id: r.text(1)?,
        currency: r.text(2)?,
        balances: buckets(r, 3)?,
        version: r.int(7)?,
        last_position: r.int(8)?,
    })
}

/// A `wallet_ledger` row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct LedgerRecord {
    wallet_id: String,
    sequence: i64,
    global_position: i64,
    ref_type: String,
    ref_id: String,
    entry_type: String,
    amount_minor: i64,
    delta: Buckets,
    before: Buckets,
    after: Buckets,
    recorded_at: String,
}

impl From<LedgerRow> for LedgerRecord {
    fn from(l: LedgerRow) -> Self {
        LedgerRecord {
            wallet_id: l.wallet_id,
            sequence: l.sequence,
            global_position: l.global_position,
            ref_type: l.ref_type,
            ref_id: l.ref_id,
            entry_type: l.entry_type.to_owned(),
            amount_minor: l.amount_minor,
            delta: l.delta,
            before: l.before,
            after: l.after,
            recorded_at: l.recorded_at,
        }
    }
}

const LEDGER_SELECT: &str = "SELECT wallet_id, sequence, global_position, ref_type, ref_id, \
     entry_type, amount_minor, delta_pending_minor, delta_available_minor, delta_frozen_minor, \
     delta_risk_hold_minor, before_pending_minor, before_available_minor, before_frozen_minor, \
     before_risk_hold_minor, after_pending_minor, after_available_minor, after_frozen_minor, \
     after_risk_hold_minor, recorded_at FROM wallet_ledger";

fn ledger_row(r: &dyn Cols) -> Result<LedgerRecord, sqlx::Error> {
    Ok(LedgerRecord {
        wallet_id: r.text(0)?,
        sequence: r.int(1)?,
        global_position: r.int(2)?,
        ref_type: r.text(3)?,
        ref_id: r.text(4)?,
        entry_type: r.text(5)?,
        amount_minor: r.int(6)?,
        delta: buckets(r, 7)?,
        before: buckets(r, 11)?,
        after: buckets(r, 15)?,
        recorded_at: r.text(19)?,
    })
}

/// A `wallet_blocks` row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct BlockRecord {
    wallet_id: String,
    ref_type: String,
    ref_id: String,
    reason: Option<String>,
}

const BLOCK_SELECT: &str = "SELECT wallet_id, ref_type, ref_id, reason FROM wallet_blocks";

fn block_row(r: &dyn Cols) -> Result<BlockRecord, sqlx::Error> {
    Ok(BlockRecord {
        wallet_id: r.text(0)?,
        ref_type: r.text(1)?,
        ref_id: r.text(2)?,
        reason: r.opt_text(3)?,
    })
}

// ---------------------------------------------------------------------------------
// The snapshot and its keyset pages.

/// A query parameter.
#[derive(Clone)]
enum Arg {
    Text(String),
    Int(i64),
}

/// One read-only transaction: every read of a run sees the same database state.
enum Snapshot {
    Mysql(Transaction<'static, MySql>),
    Sqlite(Transaction<'static, Sqlite>),
}

impl Snapshot {
    async fn open(db: &Db) -> Result<Snapshot, sqlx::Error> {
        Ok(match db {
            Db::Mysql(p) => Snapshot::Mysql(p.begin_with(MYSQL_SNAPSHOT).await?),
            // Deferred: the first read below pins the WAL snapshot.
            Db::Sqlite(p) => Snapshot::Sqlite(p.begin().await?),
        })
    }

    /// `events`, read along its stream index. MariaDB would rather range-scan the
    /// primary key for `global_position <= ?` and sort every page (EXPLAIN on small
    /// tables shows it); SQLite's planner takes the stream index by itself.
    fn events_table(&self) -> &'static str {
        match self {
            Snapshot::Mysql(_) => "events FORCE INDEX (uq_events_stream)",
            Snapshot::Sqlite(_) => "events",
        }
    }

    fn after(&self, columns: &[&str], key: Vec<Arg>) -> (String, Vec<Arg>) {
        keyset_after(matches!(self, Snapshot::Sqlite(_)), columns, key)
    }

    /// End the snapshot. It wrote nothing, so this is a rollback.
    async fn close(self) -> Result<(), sqlx::Error> {
        match self {
            Snapshot::Mysql(tx) => tx.rollback().await,
            Snapshot::Sqlite(tx) => tx.rollback().await,
        }
    }

    /// The position the live wallet rows reflect (0 when the projection never ran):
    /// the checkpoint's, while its generation is the live set's; the set's own
    /// (`wallet_generation`) when a full rebuild renamed a new set in and the checkpoint
    /// has not adopted it yet (see `crate::runtime::rebuild`).
    async fn checkpoint(&mut self) -> Result<i64, ReconcileError> {
        let sql = "SELECT c.position, c.generation, g.generation, g.position \
                   FROM projection_checkpoints c, wallet_generation g \
                   WHERE c.name = ? AND g.id = 1";
        let args = [Arg::Text(wallet::NAME.to_owned())];
        let rows = self
            .fetch(sql, &args, |r| {
                Ok((r.int(0)?, r.int(1)?, r.int(2)?, r.int(3)?))
            })
            .await?;
        Ok(match rows.into_iter().next() {
            None => 0,
            Some((position, ours, live, _)) if ours == live => position,
            Some((_, _, _, live_position)) => live_position,
        })
    }

    async fn fetch<T>(
        &mut self,
        sql: &str,
        args: &[Arg],
        decode: fn(&dyn Cols) -> Result<T, sqlx::Error>,
    ) -> Result<Vec<T>, sqlx::Error> {
        macro_rules! run {
            ($tx:expr, $text:expr) => {{
                let mut q = sqlx::query(sql);
                for a in args {
                    q = match a {
                        Arg::Text(s) => q.bind($text(s)),
                        Arg::Int(i) => q.bind(*i),
                    };
                }
                q.fetch_all(&mut **$tx)
                    .await?
                    .iter()
                    .map(|r| decode(r))
                    .collect()
            }};
        }
        match self {
            // Text as bytes: MariaDB then compares with the `_bin` columns as they are
            // and walks the index in order; a utf8mb4_unicode_ci string parameter makes
            // it sort every page (EXPLAIN: "Using filesort").
            Snapshot::Mysql(tx) => run!(tx, String::as_bytes),
            // SQLite compares a blob as greater than any text: bind text.
            Snapshot::Sqlite(tx) => run!(tx, String::as_str),
        }
    }
}

/// Keyset paging: "after `key` in the order of `columns`" (an index's columns), and
/// its parameters. Each backend plans a different spelling as an index range: SQLite
/// a row value (an OR of column conditions it scans from the start of the index,
/// every page), MariaDB the OR (a row value it scans from the start).
fn keyset_after(row_value: bool, columns: &[&str], key: Vec<Arg>) -> (String, Vec<Arg>) {
    debug_assert_eq!(columns.len(), key.len());
    if row_value {
        let marks = vec!["?"; columns.len()].join(", ");
        return (format!("({}) > ({marks})", columns.join(", ")), key);
    }
    // c1 > ? OR (c1 = ? AND (c2 > ? OR (c2 = ? AND …))), built inside out.
    let mut pairs = columns.iter().zip(key).rev();
    let Some((last, v)) = pairs.next() else {
        return ("TRUE".into(), Vec::new());
    };
    let (mut sql, mut args) = (format!("{last} > ?"), vec![v]);
    for (c, v) in pairs {
        sql = format!("({c} > ? OR ({c} = ? AND {sql}))");
        args.splice(0..0, [v.clone(), v]);
    }
    (sql, args)
}

/// The wallet movements whose ledger key matches `filter` (SQL with `?`, bound to
/// `filter_args`) up to `up_to`, in ledger-key order (the unique ledger index), page
/// by page. An undecodable wallet event is skipped: it is the wallet pass's finding.
async fn ledger_movements(
    snap: &mut Snapshot,
    filter: &str,
    filter_args: &[Arg],
    up_to: i64,
    page_rows: i64,
    mut each: impl FnMut(&StoredEvent, &Movement),
) -> Result<(), ReconcileError> {
    const KEY: [&str; 3] = ["ledger_ref_type", "ledger_ref_id", "ledger_entry_type"];
    let page_rows = page_rows.clamp(1, PAGE_ROWS_MAX);
    let mut after: Option<(String, String, String)> = None;
    loop {
        let mut conditions = vec![
            filter.to_owned(),
            "aggregate_type = ?".into(),
            "global_position <= ?".into(),
        ];
        let mut args = filter_args.to_vec();
        args.extend([Arg::Text(WALLET_AGGREGATE_TYPE.to_owned()), Arg::Int(up_to)]);
        if let Some((t, id, entry)) = &after {
            let key = vec![
                Arg::Text(t.clone()),
                Arg::Text(id.clone()),
                Arg::Text(entry.clone()),
            ];
            let (cond, key) = snap.after(&KEY, key);
            conditions.push(cond);
            args.extend(key);
        }
        let sql = page_sql(
            &format!("SELECT {EVENT_COLUMNS} FROM events"),
            &conditions,
            &KEY.join(", "),
            page_rows,
        );
        let rows =
            snap.fetch(&sql, &args, event_row)
                .await
                .map_err(|source| ReconcileError::Row {
                    table: "events",
                    after: format!("{after:?}"),
                    source,
                })?;
        let full = rows.len() as i64 == page_rows;
        for row in rows {
            let Some(key) = row.ledger_ref else {
                continue;
            };
            after = Some(key);
            let Ok((_, payload)) = row.event.current_payload() else {
                continue;
            };
            let Ok(event) = WalletEvent::deserialize(&payload) else {
                continue;
            };
            if let Some(m) = event.as_movement() {
                each(&row.event, m);
            }
        }
        if !full {
            return Ok(());
        }
    }
}

/// `SELECT … WHERE <conditions> ORDER BY … LIMIT <rows>`. The limit is a literal,
/// not a parameter: in a MariaDB prepared statement with `LIMIT ?` (and string
/// parameters) the server read the rest of the range and sorted it for a page
/// (500,000 rows read for a page of 5,000); with the literal it read 5,000.
fn page_sql(select: &str, conditions: &[String], order: &str, rows: i64) -> String {
    let filter = if conditions.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", conditions.join(" AND "))
    };
    format!("{select}{filter} ORDER BY {order} LIMIT {rows}")
}

/// A row in a wallet-ordered table.
trait Keyed {
    /// Where the next page starts after this row.
    type Key: std::fmt::Debug;
    fn key(&self) -> Self::Key;
    fn wallet(&self) -> &str;
}

impl Keyed for EventRow {
    type Key = (String, i64);
    fn key(&self) -> Self::Key {
        (self.event.aggregate_id.clone(), self.event.sequence)
    }
    fn wallet(&self) -> &str {
        &self.event.aggregate_id
    }
}

impl Keyed for BalanceRecord {
    type Key = String;
    fn key(&self) -> Self::Key {
        self.wallet_id.clone()
    }
    fn wallet(&self) -> &str {
        &self.wallet_id
    }
}

impl Keyed for LedgerRecord {
    type Key = (String, i64);
    fn key(&self) -> Self::Key {
        (self.wallet_id.clone(), self.sequence)
    }
    fn wallet(&self) -> &str {
        &self.wallet_id
    }
}

impl Keyed for BlockRecord {
    type Key = (String, String, String);
    fn key(&self) -> Self::Key {
        (
            self.wallet_id.clone(),
            self.ref_type.clone(),
            self.ref_id.clone(),
        )
    }
    fn wallet(&self) -> &str {
        &self.wallet_id
    }
}

/// The current page of one table, and where the next one starts.
struct Page<T: Keyed> {
    rows: VecDeque<T>,
    after: Option<T::Key>,
    done: bool,
}

impl<T: Keyed> Page<T> {
    fn new() -> Self {
        Page {
            rows: VecDeque::new(),
            after: None,
            done: false,
        }
    }

    fn wants_rows(&self) -> bool {
        self.rows.is_empty() && !self.done
    }

    fn refill(&mut self, rows: Vec<T>, page_rows: i64) {
        self.done = (rows.len() as i64) < page_rows;
        if let Some(last) = rows.last() {
            self.after = Some(last.key());
        }
        self.rows.extend(rows);
    }

    fn front_wallet(&self) -> Option<&str> {
        self.rows.front().map(Keyed::wallet)
    }

    /// The next row, if it belongs to `wallet`.
    fn pop_for(&mut self, wallet: &str) -> Option<T> {
        if self.front_wallet() == Some(wallet) {
            self.rows.pop_front()
        } else {
            None
        }
    }

    fn row_error(&self, table: &'static str, source: sqlx::Error) -> ReconcileError {
        ReconcileError::Row {
            table,
            after: format!("{:?}", self.after),
            source,
        }
    }
}

/// The four tables, read side by side in wallet order within one snapshot.
struct Pages<'s> {
    snap: &'s mut Snapshot,
    /// Only this wallet (the re-check after a repair), or every wallet.
    scope: Option<&'s str>,
    up_to: i64,
    page_rows: i64,
    events: Page<EventRow>,
    balances: Page<BalanceRecord>,
    ledger: Page<LedgerRecord>,
    blocks: Page<BlockRecord>,
}

impl<'s> Pages<'s> {
    fn new(snap: &'s mut Snapshot, scope: Option<&'s str>, up_to: i64, page_rows: i64) -> Self {
        Pages {
            snap,
            scope,
            up_to,
            page_rows: page_rows.clamp(1, PAGE_ROWS_MAX),
            events: Page::new(),
            balances: Page::new(),
            ledger: Page::new(),
            blocks: Page::new(),
        }
    }

    /// Read the next page of every table whose page is used up. Each query walks its
    /// primary or unique index from where the last page ended.
    async fn fill(&mut self) -> Result<(), ReconcileError> {
        if self.events.wants_rows() {
            let mut conditions = vec![
                "aggregate_type = ?".to_owned(),
                "global_position <= ?".into(),
            ];
            let mut args = vec![
                Arg::Text(WALLET_AGGREGATE_TYPE.to_owned()),
                Arg::Int(self.up_to),
            ];
            if let Some(w) = self.scope {
                conditions.push("aggregate_id = ?".into());
                args.push(Arg::Text(w.to_owned()));
            }
            if let Some((id, sequence)) = &self.events.after {
                let key = [Arg::Text(id.clone()), Arg::Int(*sequence)];
                let (after, key) = self.snap.after(&["aggregate_id", "sequence"], key.into());
                conditions.push(after);
                args.extend(key);
            }
            let select = format!("SELECT {EVENT_COLUMNS} FROM {}", self.snap.events_table());
            let order = "aggregate_type, aggregate_id, sequence";
            let sql = page_sql(&select, &conditions, order, self.page_rows);
            let rows = self.snap.fetch(&sql, &args, event_row).await;
            let rows = rows.map_err(|e| self.events.row_error("events", e))?;
            self.events.refill(rows, self.page_rows);
        }
        if self.balances.wants_rows() {
            let (mut conditions, mut args) = scoped(self.scope);
            if let Some(id) = &self.balances.after {
                let (after, key) = self.snap.after(&["wallet_id"], vec![Arg::Text(id.clone())]);
                conditions.push(after);
                args.extend(key);
            }
            let sql = page_sql(BALANCE_SELECT, &conditions, "wallet_id", self.page_rows);
            let rows = self.snap.fetch(&sql, &args, balance_row).await;
            let rows = rows.map_err(|e| self.balances.row_error("wallet_balances", e))?;
            self.balances.refill(rows, self.page_rows);
        }
        if self.ledger.wants_rows() {
            let (mut conditions, mut args) = scoped(self.scope);
            if let Some((id, sequence)) = &self.ledger.after {
                let key = [Arg::Text(id.clone()), Arg::Int(*sequence)];
                let (after, key) = self.snap.after(&["wallet_id", "sequence"], key.into());
                conditions.push(after);
                args.extend(key);
            }
            let sql = page_sql(
                LEDGER_SELECT,
                &conditions,
                "wallet_id, sequence",
                self.page_rows,
            );
            let rows = self.snap.fetch(&sql, &args, ledger_row).await;
            let rows = rows.map_err(|e| self.ledger.row_error("wallet_ledger", e))?;
            self.ledger.refill(rows, self.page_rows);
        }
        if self.blocks.wants_rows() {
            let (mut conditions, mut args) = scoped(self.scope);
            if let Some((id, ref_type, ref_id)) = &self.blocks.after {
                let key = [
                    Arg::Text(id.clone()),
                    Arg::Text(ref_type.clone()),
                    Arg::Text(ref_id.clone()),
                ];
                let columns = ["wallet_id", "ref_type", "ref_id"];
                let (after, key) = self.snap.after(&columns, key.into());
                conditions.push(after);
                args.extend(key);
            }
            let sql = page_sql(
                BLOCK_SELECT,
                &conditions,
                "wallet_id, ref_type, ref_id",
                self.page_rows,
            );
            let rows = self.snap.fetch(&sql, &args, block_row).await;
            let rows = rows.map_err(|e| self.blocks.row_error("wallet_blocks", e))?;
            self.blocks.refill(rows, self.page_rows);
        }
        Ok(())
    }

    /// The lowest wallet id at the front of any table: the next wallet to check.
    fn next_wallet(&self) -> Option<String> {
        [
            self.events.front_wallet(),
            self.balances.front_wallet(),
            self.ledger.front_wallet(),
            self.blocks.front_wallet(),
        ]
        .into_iter()
        .flatten()
        .min()
        .map(str::to_owned)
    }
}

/// The condition (and parameter) restricting a projection table to the scope.
fn scoped(scope: Option<&str>) -> (Vec<String>, Vec<Arg>) {
    match scope {
        Some(w) => (vec!["wallet_id = ?".into()], vec![Arg::Text(w.to_owned())]),
        None => (Vec::new(), Vec::new()),
    }
}

// ---------------------------------------------------------------------------------
// One wallet: replay its events, check them, and compare with its rows.

/// What the projection should hold for one event's ledger row.
#[derive(Debug, PartialEq)]
enum ExpectedLedger {
    Row(Box<LedgerRecord>),
    Nothing,
    /// The event could not be read: whatever row is there cannot be judged.
    Unknown,
}

fn value<T: Serialize>(v: &T) -> Value {
    // Our rows are structs of strings and integers: serializing them cannot fail,
    // and if it ever did the report shows why instead of a value.
    serde_json::to_value(v).unwrap_or_else(|e| Value::String(format!("unserializable: {e}")))
}

/// "field: expected X, actual Y; …" for every leaf that differs.
fn differences(expected: &Value, actual: &Value) -> String {
    fn walk(path: &str, e: &Value, a: &Value, out: &mut Vec<String>) {
        match (e, a) {
            (Value::Object(eo), Value::Object(ao)) => {
                let keys: BTreeSet<&String> = eo.keys().chain(ao.keys()).collect();
                for k in keys {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    let null = Value::Null;
                    walk(
                        &p,
                        eo.get(k).unwrap_or(&null),
                        ao.get(k).unwrap_or(&null),
                        out,
                    );
                }
            }
            _ if e != a => out.push(format!("{path}: expected {e}, actual {a}")),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk("", expected, actual, &mut out);
    out.join("; ")
}

impl Finding {
    fn new(
        kind: FindingKind,
        wallet_id: &str,
        table: &str,
        key: String,
        detail: impl Into<String>,
    ) -> Finding {
        Finding {
            class: kind.class(),
            kind,
            wallet_id: wallet_id.to_owned(),
            projection: None,
            table: table.to_owned(),
            key,
            detail: detail.into(),
            expected: None,
            actual: None,
            events: Vec::new(),
            repair: match kind.class() {
                FindingClass::ProjectionDrift => REPAIR_AUTO,
                FindingClass::Event => REFUSED_EVENT,
            }
            .to_owned(),
            repaired: None,
        }
    }

    fn values(mut self, expected: Option<Value>, actual: Option<Value>) -> Finding {
        self.expected = expected;
        self.actual = actual;
        self
    }

    fn event(mut self, at: Option<&EventRef>) -> Finding {
        self.events.extend(at.cloned());
        self
    }
}

fn event_ref(e: &StoredEvent) -> EventRef {
    EventRef {
        global_position: e.global_position,
        stream: format!("{}/{}", e.aggregate_type, e.aggregate_id),
        sequence: e.sequence,
    }
}

/// One wallet's replay: its events folded in sequence order into the rows the
/// projection should hold, every event checked on the way. Findings are counted
/// exactly and kept up to `room`.
struct WalletReplay {
    wallet_id: String,
    /// The keys the hash chain is checked with.
    keyring: std::sync::Arc<crate::infra::store::Keyring>,
    next_sequence: i64,
    prev_hash: String,
    opened: bool,
    /// `after` of the last movement; `None` after an event that could not be read
    /// (the next `before` is then not checked against it).
    balances: Option<Buckets>,
    expected_balance: Option<BalanceRecord>,
    expected_blocks: BTreeMap<(String, String), Option<String>>,
    last_event: Option<EventRef>,
    counts: Counts,
    kept: Vec<Finding>,
    room: usize,
    events_checked: u64,
}

impl WalletReplay {
    fn new(
        wallet_id: String,
        room: usize,
        keyring: std::sync::Arc<crate::infra::store::Keyring>,
    ) -> Self {
        WalletReplay {
            wallet_id,
            keyring,
            next_sequence: 1,
            prev_hash: GENESIS_HASH.to_owned(),
            opened: false,
            balances: Some(Buckets::default()),
            expected_balance: None,
            expected_blocks: BTreeMap::new(),
            last_event: None,
            counts: Counts::default(),
            kept: Vec::new(),
            room,
            events_checked: 0,
        }
    }

    fn found(&mut self, f: Finding) {
        self.counts.add(f.class, 1);
        if self.kept.len() < self.room {
            self.kept.push(f);
        }
    }

    fn event_finding(&mut self, kind: FindingKind, at: &EventRef, detail: String) -> Finding {
        Finding::new(
            kind,
            &self.wallet_id,
            "events",
            format!("sequence={}", at.sequence),
            detail,
        )
        .event(Some(at))
    }

    /// Check one event and fold it into the expected rows; returns the ledger row the
    /// projection should hold for it.
    fn event(&mut self, row: &EventRow) -> ExpectedLedger {
        use FindingKind::*;
        let e = &row.event;
        let at = event_ref(e);
        self.events_checked += 1;
        self.last_event = Some(at.clone());
        if e.sequence != self.next_sequence {
            let f = self.event_finding(
                SequenceGap,
                &at,
                format!(
                    "sequence {} follows {}: events are missing",
                    e.sequence,
                    self.next_sequence - 1
                ),
            );
            self.found(f.values(Some(self.next_sequence.into()), Some(e.sequence.into())));
        }
        self.next_sequence = e.sequence + 1;
        let expected_hash = e.recompute_hash(&self.keyring, &self.prev_hash);
        if expected_hash.as_deref() != Some(e.hash.as_str()) {
            let detail = match &expected_hash {
                Some(_) => {
                    "stored hash does not match the event's content and its predecessor".to_owned()
                }
                None => format!(
                    "sealed with chain key {:?}, which the integrity key file does not hold",
                    e.hash_key
                ),
            };
            let f = self.event_finding(HashChainBroken, &at, detail);
            self.found(f.values(expected_hash.map(Into::into), Some(e.hash.clone().into())));
        }
        // Go on from the stored hash: a tampered event breaks its own link only.
        self.prev_hash = e.hash.clone();
        let decoded =
            e.current_payload()
                .map_err(|err| err.to_string())
                .and_then(|(_, payload)| {
                    WalletEvent::deserialize(&payload)
                        .map(|event| (payload, event))
                        .map_err(|err| format!("{} does not decode: {err}", e.event_type))
                });
        let (payload, event) = match decoded {
            Ok(d) => d,
            Err(reason) => {
                let f = self.event_finding(PayloadUndecodable, &at, reason);
                self.found(f.values(None, Some(e.payload.clone().into())));
                self.balances = None;
                return ExpectedLedger::Unknown;
            }
        };
        if event.name() != e.event_type {
            let f = self.event_finding(
                EventTypeMismatch,
                &at,
                "the payload's type is not the row's event_type".into(),
            );
            self.found(f.values(Some(event.name().into()), Some(e.event_type.clone().into())));
        }
        self.check_ledger_ref(&at, &event, &row.ledger_ref);
        self.check_lifecycle(&at, &event);
        if let Some(m) = event.as_movement() {
            self.check_movement(&at, &event, m);
            self.balances = Some(m.after);
        }
        self.expect(e, &payload, &at)
    }

    fn check_ledger_ref(
        &mut self,
        at: &EventRef,
        event: &WalletEvent,
        stored: &Option<(String, String, String)>,
    ) {
        let expected = event.as_movement().map(|m| {
            (
                m.ref_type.clone(),
                m.ref_id.clone(),
                m.entry_type.as_str().to_owned(),
            )
        });
        if &expected != stored {
            let show = |r: &Option<(String, String, String)>| {
                r.as_ref().map(
                    |(t, id, e)| serde_json::json!({"ref_type": t, "ref_id": id, "entry_type": e}),
                )
            };
            let f = self.event_finding(
                FindingKind::LedgerRefMismatch,
                at,
                "the payload's ledger reference is not the one the row is indexed under".into(),
            );
            self.found(f.values(show(&expected), show(stored)));
        }
    }

    fn check_lifecycle(&mut self, at: &EventRef, event: &WalletEvent) {
        let problem = match event {
            WalletEvent::WalletOpened { .. } if self.opened => Some("the wallet is opened twice"),
            WalletEvent::WalletOpened { .. } => None,
            _ if !self.opened => Some("an event before the wallet was opened"),
            WalletEvent::WithdrawalsBlocked {
                ref_type, ref_id, ..
            } if self
                .expected_blocks
                .contains_key(&(ref_type.clone(), ref_id.clone())) =>
            {
                Some("a withdrawal block placed twice")
            }
            WalletEvent::WithdrawalsUnblocked { ref_type, ref_id }
                if !self
                    .expected_blocks
                    .contains_key(&(ref_type.clone(), ref_id.clone())) =>
            {
                Some("a withdrawal block lifted that was never placed")
            }
            _ => None,
        };
        if let Some(p) = problem {
            let f = self.event_finding(
                FindingKind::LifecycleBroken,
                at,
                format!("{}: {p}", event.name()),
            );
            self.found(f);
        }
        if matches!(event, WalletEvent::WalletOpened { .. }) {
            self.opened = true;
        }
    }

    /// R-INV-2 for one movement, the same rules `Wallet::check` enforces on load, each
    /// reported on its own.
    fn check_movement(&mut self, at: &EventRef, event: &WalletEvent, m: &Movement) {
        use FindingKind::*;
        let name = event.name();
        if let Some(previous) = self.balances {
            if m.before != previous {
                let f = self.event_finding(
                    BalanceChainBroken,
                    at,
                    format!("{name}: before is not the previous movement's after"),
                );
                self.found(f.values(Some(value(&previous)), Some(value(&m.before))));
            }
        }
        // Amount first: the delta of a non-positive amount may overflow (i64::MIN).
        let expected_delta = (m.amount_minor > 0).then(|| m.entry_type.delta(m.amount_minor));
        if expected_delta != Some(m.delta) {
            let f = self.event_finding(
                DeltaMismatch,
                at,
                format!(
                    "{name}: delta is not what {} of {} moves",
                    m.entry_type.as_str(),
                    m.amount_minor
                ),
            );
            self.found(f.values(expected_delta.as_ref().map(value), Some(value(&m.delta))));
        }
        let sum = m.before.checked_add(&m.delta);
        if sum != Some(m.after) {
            let f = self.event_finding(
                ConservationBroken,
                at,
                match sum {
                    Some(_) => format!("{name}: after is not before + delta"),
                    None => format!("{name}: before + delta overflows i64"),
                },
            );
            self.found(f.values(sum.as_ref().map(value), Some(value(&m.after))));
        }
        if let Some(bucket) = m.after.first_negative() {
            let f = self.event_finding(
                NegativeBucket,
                at,
                format!("{name}: {} would be {}", bucket.name(), m.after.get(bucket)),
            );
            self.found(f.values(None, Some(value(&m.after))));
        }
    }

    /// Fold the rows the pure projector makes of this event into the expected state,
    /// exactly as the runner writes them (an update of a missing balance row changes
    /// nothing).
    fn expect(&mut self, e: &StoredEvent, payload: &Value, at: &EventRef) -> ExpectedLedger {
        let recorded_at = time_text(&e.recorded_at);
        let rows = match wallet::project(&ProjectedEvent {
            global_position: e.global_position,
            aggregate_type: &e.aggregate_type,
            aggregate_id: &e.aggregate_id,
            sequence: e.sequence,
            event_type: &e.event_type,
            payload,
            recorded_at: &recorded_at,
        }) {
            Ok(rows) => rows,
            Err(err) => {
                let f = self.event_finding(FindingKind::PayloadUndecodable, at, err.to_string());
                self.found(f);
                return ExpectedLedger::Unknown;
            }
        };
        let mut ledger = ExpectedLedger::Nothing;
        for row in rows {
            match row {
                WalletRow::Opened {
                    wallet_id,
                    user_id,
                    currency,
                    version,
                    last_position,
                } => {
                    self.expected_balance = Some(BalanceRecord {
                        wallet_id,
                        user_id,
                        currency,
                        balances: Buckets::default(),
                        version,
                        last_position,
                    });
                }
                WalletRow::Balances {
                    balances,
                    version,
                    last_position,
                    ..
                } => {
                    if let Some(b) = &mut self.expected_balance {
                        b.balances = balances;
                        b.version = version;
                        b.last_position = last_position;
                    }
                }
                WalletRow::Version {
                    version,
                    last_position,
                    ..
                } => {
                    if let Some(b) = &mut self.expected_balance {
                        b.version = version;
                        b.last_position = last_position;
                    }
                }
                WalletRow::Ledger(l) => ledger = ExpectedLedger::Row(Box::new(l.into())),
                WalletRow::Blocked {
                    ref_type,
                    ref_id,
                    reason,
                    ..
                } => {
                    self.expected_blocks.insert((ref_type, ref_id), reason);
                }
                WalletRow::Unblocked {
                    ref_type, ref_id, ..
                } => {
                    self.expected_blocks.remove(&(ref_type, ref_id));
                }
            }
        }
        ledger
    }

    /// Compare the ledger row stored at one sequence with what the events say.
    fn ledger(&mut self, expected: Option<&ExpectedLedger>, actual: Option<&LedgerRecord>) {
        use FindingKind::*;
        let sequence = match (expected, actual) {
            (Some(ExpectedLedger::Row(e)), _) => e.sequence,
            (_, Some(a)) => a.sequence,
            _ => return,
        };
        let key = format!("sequence={sequence}");
        let at = self.last_event.clone();
        let f = match (expected, actual) {
            (Some(ExpectedLedger::Unknown), _) => return,
            (Some(ExpectedLedger::Row(e)), Some(a)) if **e == *a => return,
            (Some(ExpectedLedger::Row(e)), Some(a)) => {
                let (ev, av) = (value(e), value(a));
                Finding::new(
                    LedgerDiffers,
                    &self.wallet_id,
                    "wallet_ledger",
                    key,
                    differences(&ev, &av),
                )
                .values(Some(ev), Some(av))
                .event(at.as_ref())
            }
            (Some(ExpectedLedger::Row(e)), None) => Finding::new(
                LedgerMissing,
                &self.wallet_id,
                "wallet_ledger",
                key,
                "the event's ledger row is missing",
            )
            .values(Some(value(e)), None)
            .event(at.as_ref()),
            (_, Some(a)) => Finding::new(
                LedgerExtra,
                &self.wallet_id,
                "wallet_ledger",
                key,
                "a ledger row no event accounts for",
            )
            .values(None, Some(value(a))),
            (_, None) => return,
        };
        self.found(f);
    }

    fn balance(&mut self, actual: Option<BalanceRecord>) {
        use FindingKind::*;
        let key = format!("wallet_id={}", self.wallet_id);
        let f = match (&self.expected_balance, &actual) {
            (Some(e), Some(a)) if e == a => return,
            (None, None) => return,
            (Some(e), Some(a)) => {
                let (ev, av) = (value(e), value(a));
                Finding::new(
                    BalanceDiffers,
                    &self.wallet_id,
                    "wallet_balances",
                    key,
                    differences(&ev, &av),
                )
                .values(Some(ev), Some(av))
            }
            (Some(e), None) => Finding::new(
                BalanceMissing,
                &self.wallet_id,
                "wallet_balances",
                key,
                "the wallet's balance row is missing",
            )
            .values(Some(value(e)), None),
            (None, Some(a)) => Finding::new(
                BalanceExtra,
                &self.wallet_id,
                "wallet_balances",
                key,
                "a balance row for a wallet no event opened",
            )
            .values(None, Some(value(a))),
        };
        let at = self.last_event.clone();
        self.found(f.event(at.as_ref()));
    }

    fn blocks(&mut self, actual: Vec<BlockRecord>) {
        use FindingKind::*;
        let mut expected = std::mem::take(&mut self.expected_blocks);
        let block = |wallet_id: &str, ref_type: &str, ref_id: &str, reason: &Option<String>| {
            value(&BlockRecord {
                wallet_id: wallet_id.to_owned(),
                ref_type: ref_type.to_owned(),
                ref_id: ref_id.to_owned(),
                reason: reason.clone(),
            })
        };
        for a in actual {
            let key = format!("ref={}/{}", a.ref_type, a.ref_id);
            let f = match expected.remove(&(a.ref_type.clone(), a.ref_id.clone())) {
                Some(reason) if reason == a.reason => continue,
                Some(reason) => {
                    let ev = block(&a.wallet_id, &a.ref_type, &a.ref_id, &reason);
                    let av = value(&a);
                    Finding::new(
                        BlockDiffers,
                        &self.wallet_id,
                        "wallet_blocks",
                        key,
                        differences(&ev, &av),
                    )
                    .values(Some(ev), Some(av))
                }
                None => Finding::new(
                    BlockExtra,
                    &self.wallet_id,
                    "wallet_blocks",
                    key,
                    "a withdrawal block no event placed (or one that was lifted)",
                )
                .values(None, Some(value(&a))),
            };
            self.found(f);
        }
        for ((ref_type, ref_id), reason) in expected {
            let f = Finding::new(
                BlockMissing,
                &self.wallet_id,
                "wallet_blocks",
                format!("ref={ref_type}/{ref_id}"),
                "an active withdrawal block is missing",
            )
            .values(
                Some(block(&self.wallet_id, &ref_type, &ref_id, &reason)),
                None,
            );
            self.found(f);
        }
    }
}

/// What one pass (a snapshot over every wallet, or over a few) found.
struct Pass {
    /// The keys hash chains are checked with.
    keyring: std::sync::Arc<crate::infra::store::Keyring>,
    up_to_position: i64,
    events_checked: u64,
    wallets_checked: u64,
    counts: Counts,
    findings: Vec<Finding>,
    truncated: bool,
    /// Wallets with drift and no event finding (what a repair rebuilds), with their
    /// number of drift findings.
    drifted: Vec<(String, u64)>,
    commissions_checked: u64,
    commissions_up_to_position: i64,
    withdrawals_checked: u64,
    projections_checked: Vec<ProjectionChecked>,
    /// Affiliate projections with drift (what a repair rebuilds in full).
    drifted_projections: Vec<&'static str>,
}

impl Pass {
    fn new(keyring: std::sync::Arc<crate::infra::store::Keyring>, up_to_position: i64) -> Pass {
        Pass {
            keyring,
            up_to_position,
            events_checked: 0,
            wallets_checked: 0,
            counts: Counts::default(),
            findings: Vec::new(),
            truncated: false,
            drifted: Vec::new(),
            commissions_checked: 0,
            commissions_up_to_position: 0,
            withdrawals_checked: 0,
            projections_checked: Vec::new(),
            drifted_projections: Vec::new(),
        }
    }

    /// Take a finished wallet's findings: decide what a repair may do with them.
    fn take(&mut self, w: WalletReplay) {
        self.events_checked += w.events_checked;
        self.wallets_checked += 1;
        let refused = if w.counts.event > 0 {
            Some(REFUSED_WALLET)
        } else if w.counts.projection_drift > 0 && self.drifted.len() >= REPAIR_WALLETS_MAX {
            Some(REFUSED_TOO_WIDE)
        } else {
            None
        };
        if w.counts.projection_drift > 0 && refused.is_none() {
            self.drifted
                .push((w.wallet_id.clone(), w.counts.projection_drift));
        }
        self.counts
            .add(FindingClass::ProjectionDrift, w.counts.projection_drift);
        self.counts.add(FindingClass::Event, w.counts.event);
        if (w.kept.len() as u64) < w.counts.total() {
            self.truncated = true;
        }
        for mut f in w.kept {
            if let (FindingClass::ProjectionDrift, Some(r)) = (f.class, refused) {
                f.repair = r.to_owned();
            }
            self.findings.push(f);
        }
    }
}

/// Check every wallet in scope, in wallet order, within one snapshot.
async fn check_wallets(pages: &mut Pages<'_>, pass: &mut Pass) -> Result<(), ReconcileError> {
    loop {
        pages.fill().await?;
        let Some(wallet_id) = pages.next_wallet() else {
            return Ok(());
        };
        let room = FINDINGS_STORED_MAX.saturating_sub(pass.findings.len());
        let mut w = WalletReplay::new(wallet_id.clone(), room, pass.keyring.clone());
        // Events and ledger rows, merged by sequence: each event's row is compared
        // when the event is replayed, rows no event accounts for are extra.
        loop {
            pages.fill().await?;
            let Some(e) = pages.events.pop_for(&wallet_id) else {
                break;
            };
            let expected = w.event(&e);
            let mut matched = false;
            loop {
                pages.fill().await?;
                match pages.ledger.rows.front() {
                    Some(r) if r.wallet_id == wallet_id && r.sequence <= e.event.sequence => {}
                    _ => break,
                }
                let Some(actual) = pages.ledger.pop_for(&wallet_id) else {
                    break;
                };
                if actual.sequence == e.event.sequence {
                    matched = true;
                    w.ledger(Some(&expected), Some(&actual));
                } else {
                    w.ledger(None, Some(&actual));
                }
            }
            if !matched {
                w.ledger(Some(&expected), None);
            }
        }
        loop {
            pages.fill().await?;
            let Some(actual) = pages.ledger.pop_for(&wallet_id) else {
                break;
            };
            w.ledger(None, Some(&actual));
        }
        pages.fill().await?;
        let balance = pages.balances.pop_for(&wallet_id);
        w.balance(balance);
        let mut blocks = Vec::new();
        loop {
            pages.fill().await?;
            let Some(b) = pages.blocks.pop_for(&wallet_id) else {
                break;
            };
            blocks.push(b);
        }
        w.blocks(blocks);
        pass.take(w);
    }
}

/// Every wallet, at one consistent cut.
async fn check_all(
    db: &Db,
    keyring: std::sync::Arc<crate::infra::store::Keyring>,
    page_rows: i64,
) -> Result<Pass, ReconcileError> {
    let mut snap = Snapshot::open(db).await?;
    let up_to_position = snap.checkpoint().await?;
    let mut pass = Pass::new(keyring, up_to_position);
    let mut pages = Pages::new(&mut snap, None, pass.up_to_position, page_rows);
    check_wallets(&mut pages, &mut pass).await?;
    // Same snapshot, same cut: commissions against wallets, and each affiliate
    // projection against its own events.
    affiliate::check_commissions(&mut snap, &mut pass, page_rows).await?;
    let cut = pass.commissions_up_to_position;
    withdrawal::check_withdrawals(&mut snap, &mut pass, cut, page_rows).await?;
    for projector in crate::runtime::projector::all() {
        affiliate::check_projection(&mut snap, &mut pass, projector.as_ref(), page_rows).await?;
    }
    snap.close().await?;
    Ok(pass)
}

/// A few wallets, each read by its own keyset queries, all in one fresh snapshot.
async fn check_some(
    db: &Db,
    keyring: std::sync::Arc<crate::infra::store::Keyring>,
    wallets: &[String],
    page_rows: i64,
) -> Result<Pass, ReconcileError> {
    let mut snap = Snapshot::open(db).await?;
    let up_to_position = snap.checkpoint().await?;
    let mut pass = Pass::new(keyring, up_to_position);
    for w in wallets {
        let mut pages = Pages::new(&mut snap, Some(w), pass.up_to_position, page_rows);
        check_wallets(&mut pages, &mut pass).await?;
    }
    snap.close().await?;
    Ok(pass)
}

/// Reconcile the wallet projection with the events (see the module docs), and with
/// `repair` rebuild the wallets that only drifted and check them again.
#[tracing::instrument(skip_all, fields(repair = options.repair))]
pub async fn reconcile(
    store: &DynStore,
    db: &Db,
    options: ReconcileOptions,
) -> Result<Report, ReconcileError> {
    let started = std::time::Instant::now();
    let mut pass = check_all(db, store.keyring().clone(), options.page_rows).await?;
    let log_findings = log::check_log(
        store,
        db,
        options.anchor_file.as_deref(),
        pass.up_to_position,
    )
    .await?;
    let log_broken = !log_findings.is_empty();
    if log_broken {
        pass.counts.event += log_findings.len() as u64;
        for f in &mut pass.findings {
            if f.class == FindingClass::ProjectionDrift {
                f.repair = log::REFUSED_LOG.to_owned();
            }
        }
        let room = FINDINGS_STORED_MAX.saturating_sub(log_findings.len());
        pass.truncated |= pass.findings.len() > room;
        pass.findings.truncate(room);
        pass.findings.splice(0..0, log_findings);
        pass.drifted.clear();
        pass.drifted_projections.clear();
        tracing::error!("reconciliation: the event log failed its integrity check; no repair runs");
    }
    let mut report = Report {
        up_to_position: pass.up_to_position,
        repair: options.repair,
        events_checked: pass.events_checked,
        wallets_checked: pass.wallets_checked,
        commissions_checked: pass.commissions_checked,
        commissions_up_to_position: pass.commissions_up_to_position,
        withdrawals_checked: pass.withdrawals_checked,
        projections_checked: pass.projections_checked.clone(),
        duration_ms: 0,
        counts: pass.counts,
        remaining: pass.counts,
        findings_truncated: pass.truncated,
        findings: pass.findings,
        repair_outcome: None,
    };
    if options.repair && !log_broken {
        repair(store, db, &pass.drifted, options.page_rows, &mut report).await?;
        affiliate::repair(
            store,
            db,
            &pass.drifted_projections,
            options.page_rows,
            &mut report,
        )
        .await?;
    }
    report.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    for (class, n) in [
        ("projection_drift", report.remaining.projection_drift),
        ("event", report.remaining.event),
    ] {
        metrics::gauge!("factledger_reconciliation_findings", "class" => class).set(n as f64);
    }
    tracing::info!(
        up_to_position = report.up_to_position,
        events = report.events_checked,
        wallets = report.wallets_checked,
        drift = report.counts.projection_drift,
        event = report.counts.event,
        remaining = report.remaining.total(),
        duration_ms = report.duration_ms,
        "reconciliation done"
    );
    Ok(report)
}

/// Rebuild each drifted wallet (scoped), re-check them all in a fresh snapshot and
/// mark each finding repaired or not. Event findings, and drift in wallets with
/// event findings, were refused when they were found.
async fn repair(
    store: &DynStore,
    db: &Db,
    drifted: &[(String, u64)],
    page_rows: i64,
    report: &mut Report,
) -> Result<(), ReconcileError> {
    let mut failed: BTreeMap<&str, String> = BTreeMap::new();
    for (wallet_id, _) in drifted {
        if let Err(e) = crate::runtime::rebuild::rebuild_wallet_scoped(store, db, wallet_id).await {
            tracing::error!(wallet_id, error = %e, "scoped rebuild failed");
            failed.insert(wallet_id, e.to_string());
        }
    }
    let wallets: Vec<String> = drifted.iter().map(|(w, _)| w.clone()).collect();
    let recheck = check_some(db, store.keyring().clone(), &wallets, page_rows).await?;
    let still: BTreeSet<(&str, &str, &str)> = recheck
        .findings
        .iter()
        .map(|f| (f.wallet_id.as_str(), f.table.as_str(), f.key.as_str()))
        .collect();
    let rebuilt: BTreeSet<&str> = drifted.iter().map(|(w, _)| w.as_str()).collect();
    let mut before: BTreeSet<(String, String, String)> = BTreeSet::new();
    for f in &mut report.findings {
        f.repaired = Some(false);
        if f.class != FindingClass::ProjectionDrift || !rebuilt.contains(f.wallet_id.as_str()) {
            continue;
        }
        before.insert((f.wallet_id.clone(), f.table.clone(), f.key.clone()));
        if let Some(e) = failed.get(f.wallet_id.as_str()) {
            f.repair = format!("failed: {e}");
            continue;
        }
        f.repaired =
            Some(!still.contains(&(f.wallet_id.as_str(), f.table.as_str(), f.key.as_str())));
    }
    // What the re-check found that was not there before (the wallet moved on, or
    // someone changed it meanwhile) is reported too, as not repaired.
    for mut f in recheck.findings {
        let key = (f.wallet_id.clone(), f.table.clone(), f.key.clone());
        if before.contains(&key) || report.findings.len() >= FINDINGS_STORED_MAX {
            continue;
        }
        f.detail = format!("found by the re-check after the repair: {}", f.detail);
        f.repaired = Some(false);
        report.findings.push(f);
    }
    let drift_rebuilt: u64 = drifted.iter().map(|(_, n)| n).sum();
    report.remaining = Counts {
        projection_drift: report.counts.projection_drift - drift_rebuilt
            + recheck.counts.projection_drift,
        event: report.counts.event + recheck.counts.event,
    };
    report.findings_truncated |= recheck.truncated;
    report.repair_outcome = Some(RepairOutcome {
        wallets_rebuilt: (drifted.len() - failed.len()) as u64,
        wallets_failed: failed.len() as u64,
        recheck_position: recheck.up_to_position,
    });
    Ok(())
}

// ---------------------------------------------------------------------------------
// Runs: every reconciliation, from the CLI or the API, recorded with its report.

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Running,
    Succeeded,
    Failed,
    /// Still `running` in its row, but its process stopped renewing the heartbeat
    /// (killed or restarted): it will never finish.
    Abandoned,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Abandoned => "abandoned",
        }
    }

    fn parse(s: &str) -> Option<RunStatus> {
        match s {
            "running" => Some(RunStatus::Running),
            "succeeded" => Some(RunStatus::Succeeded),
            "failed" => Some(RunStatus::Failed),
            _ => None,
        }
    }
}

/// A reconciliation run as stored: while it runs, and its report when done.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Run {
    pub id: String,
    pub status: RunStatus,
    pub repair: bool,
    /// The actor that asked for it (`key:<id>` or `cli`).
    pub requested_by: String,
    pub started_at: String,
    pub finished_at: Option<String>,
    /// Why a failed run failed.
    pub error: Option<String>,
    /// The report, once the run succeeded.
    #[serde(flatten)]
    #[schema(schema_with = report_fields_schema)]
    pub report: Option<Report>,
}

/// `report`'s schema in [`Run`]: the report's fields, flattened into the run and all
/// absent until the run succeeded. utoipa's own schema for a flattened `Option`
/// (`oneOf: [null, Report]` inside `allOf`) matches no run that is still going or
/// failed, as the API fuzzer found (issue 14 item 10).
fn report_fields_schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    use utoipa::openapi::schema::Schema;
    use utoipa::openapi::RefOr;
    let mut schema = <Report as utoipa::PartialSchema>::schema();
    if let RefOr::T(Schema::Object(object)) = &mut schema {
        object.required.clear();
    }
    schema
}

/// Record a new run as `running`.
pub async fn start_run(
    db: &Db,
    options: ReconcileOptions,
    requested_by: &str,
) -> Result<Run, ReconcileError> {
    let run = Run {
        id: uuid::Uuid::new_v4().to_string(),
        status: RunStatus::Running,
        repair: options.repair,
        requested_by: requested_by.to_owned(),
        started_at: time_text(&Utc::now()),
        finished_at: None,
        error: None,
        report: None,
    };
    let sql = "INSERT INTO reconciliations (id, status, repair, requested_by, started_at, \
               heartbeat_at) VALUES (?, ?, ?, ?, ?, ?)";
    macro_rules! insert {
        ($p:expr) => {
            sqlx::query(sql)
                .bind(&run.id)
                .bind(run.status.as_str())
                .bind(run.repair)
                .bind(&run.requested_by)
                .bind(&run.started_at)
                .bind(&run.started_at)
                .execute($p)
                .await?
        };
    }
    match db {
        Db::Mysql(p) => insert!(p).rows_affected(),
        Db::Sqlite(p) => insert!(p).rows_affected(),
    };
    Ok(run)
}

/// Run a recorded reconciliation to its end and record the outcome; returns the run
/// as stored. A failed reconciliation is a failed run, not an error; only failing to
/// record it is.
pub async fn finish_run(
    store: &DynStore,
    db: &Db,
    run: Run,
    anchor_file: Option<std::path::PathBuf>,
) -> Result<Run, ReconcileError> {
    let options = ReconcileOptions {
        repair: run.repair,
        anchor_file,
        ..ReconcileOptions::default()
    };
    // Renew the heartbeat while the replay works (it holds one snapshot on its own
    // connection; the heartbeat uses another).
    let heartbeat = tokio::spawn({
        let (db, id) = (db.clone(), run.id.clone());
        async move {
            let sql = "UPDATE reconciliations SET heartbeat_at = ? WHERE id = ?";
            loop {
                tokio::time::sleep(std::time::Duration::from_millis(RUN_HEARTBEAT_MS)).await;
                let now = time_text(&Utc::now());
                let renewed = match &db {
                    Db::Mysql(p) => sqlx::query(sql)
                        .bind(&now)
                        .bind(&id)
                        .execute(p)
                        .await
                        .map(|_| ()),
                    Db::Sqlite(p) => sqlx::query(sql)
                        .bind(&now)
                        .bind(&id)
                        .execute(p)
                        .await
                        .map(|_| ()),
                };
                if let Err(e) = renewed {
                    tracing::warn!(id = %id, error = %e, "cannot renew the reconciliation heartbeat");
                }
            }
        }
    });
    let outcome = reconcile(store, db, options).await;
    heartbeat.abort();
    let mut run = run;
    run.finished_at = Some(time_text(&Utc::now()));
    match outcome {
        Ok(report) => {
            run.status = RunStatus::Succeeded;
            run.report = Some(report);
        }
        Err(e) => {
            tracing::error!(id = %run.id, error = %e, "reconciliation failed");
            run.status = RunStatus::Failed;
            run.error = Some(e.to_string());
        }
    }
    let report_json = run.report.as_ref().map(|r| value(r).to_string());
    let sql = "UPDATE reconciliations SET status = ?, up_to_position = ?, finished_at = ?, \
               report = ?, error = ? WHERE id = ?";
    macro_rules! update {
        ($p:expr) => {
            sqlx::query(sql)
                .bind(run.status.as_str())
                .bind(run.report.as_ref().map(|r| r.up_to_position))
                .bind(&run.finished_at)
                .bind(&report_json)
                .bind(&run.error)
                .bind(&run.id)
                .execute($p)
                .await?
        };
    }
    match db {
        Db::Mysql(p) => update!(p).rows_affected(),
        Db::Sqlite(p) => update!(p).rows_affected(),
    };
    Ok(run)
}

/// A recorded run by id.
pub async fn find_run(db: &Db, id: &str) -> Result<Option<Run>, ReconcileError> {
    let sql = "SELECT id, status, repair, requested_by, started_at, finished_at, report, error, \
               heartbeat_at FROM reconciliations WHERE id = ?";
    type Stored = (
        String,
        String,
        bool,
        String,
        String,
        Option<String>,
        Option<String>,
        Option<String>,
        String,
    );
    macro_rules! read {
        ($p:expr, $row:ty) => {{
            let row: Option<$row> = sqlx::query(sql).bind(id).fetch_optional($p).await?;
            row.map(|r| -> Result<Stored, sqlx::Error> {
                Ok((
                    r.text(0)?,
                    r.text(1)?,
                    r.try_get(2)?,
                    r.text(3)?,
                    r.text(4)?,
                    r.opt_text(5)?,
                    r.opt_text(6)?,
                    r.opt_text(7)?,
                    r.text(8)?,
                ))
            })
            .transpose()?
        }};
    }
    let stored = match db {
        Db::Mysql(p) => read!(p, MySqlRow),
        Db::Sqlite(p) => read!(p, SqliteRow),
    };
    let Some((id, status, repair, requested_by, started_at, finished_at, report, error, beat)) =
        stored
    else {
        return Ok(None);
    };
    let mut status = RunStatus::parse(&status).ok_or_else(|| ReconcileError::StoredStatus {
        id: id.clone(),
        status,
    })?;
    let stale = crate::infra::store::time_text_ago(RUN_HEARTBEAT_TIMEOUT_MS);
    if status == RunStatus::Running && beat < stale {
        status = RunStatus::Abandoned;
    }
    let report = report
        .map(|r| serde_json::from_str::<Report>(&r))
        .transpose()
        .map_err(|source| ReconcileError::StoredReport {
            id: id.clone(),
            source,
        })?;
    Ok(Some(Run {
        status,
        id,
        repair,
        requested_by,
        started_at,
        finished_at,
        error,
        report,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use factledger_aggregates::wallet::EntryType;
    use serde_json::json;

    fn test_keyring() -> std::sync::Arc<crate::infra::store::Keyring> {
        static RING: std::sync::OnceLock<std::sync::Arc<crate::infra::store::Keyring>> =
            std::sync::OnceLock::new();
        RING.get_or_init(|| std::sync::Arc::new(crate::infra::store::Keyring::generate()))
            .clone()
    }

    fn stored(sequence: i64, prev: &str, payload: Value) -> (EventRow, String) {
        let event_type = payload["type"].as_str().unwrap_or("?").to_owned();
        let mut e = StoredEvent {
            global_position: 100 + sequence,
            aggregate_type: "wallet".into(),
            aggregate_id: "w-1".into(),
            sequence,
            event_type,
            event_version: 2,
            event_id: format!("id-{sequence}"),
            payload: payload.to_string(),
            metadata: "{}".into(),
            correlation_id: "c".into(),
            actor: "a".into(),
            hash: String::new(),
            hash_key: test_keyring().active().id.clone(),
            recorded_at: DateTime::parse_from_rfc3339("2026-12-02T12:00:00Z")
                .unwrap()
                .with_timezone(&Utc),
        };
        e.hash = e.recompute_hash(&test_keyring(), prev).unwrap();
        let ledger_ref = payload.get("ref_id").map(|id| {
            (
                payload["ref_type"].as_str().unwrap().to_owned(),
                id.as_str().unwrap().to_owned(),
                payload["entry_type"].as_str().unwrap().to_owned(),
            )
        });
        let hash = e.hash.clone();
        (
            EventRow {
                event: e,
                ledger_ref,
            },
            hash,
        )
    }

    fn b(pending: i64, available: i64) -> Value {
        json!({"pending_minor": pending, "available_minor": available,
               "frozen_minor": 0, "risk_hold_minor": 0})
    }

    fn credit(id: &str, amount: i64, before: Value, delta: Value, after: Value) -> Value {
        json!({"type": "PendingCredited", "ref_type": "COMMISSION", "ref_id": id,
               "entry_type": "CREDIT_PENDING", "amount_minor": amount,
               "delta": delta, "before": before, "after": after})
    }

    /// Replay `payloads` as a chained stream; the kinds of event findings, in order.
    fn kinds(payloads: Vec<Value>) -> Vec<FindingKind> {
        let mut w = WalletReplay::new("w-1".into(), 100, test_keyring());
        let mut prev = GENESIS_HASH.to_owned();
        for (i, p) in payloads.into_iter().enumerate() {
            let (row, hash) = stored(i as i64 + 1, &prev, p);
            w.event(&row);
            prev = hash;
        }
        w.kept.iter().map(|f| f.kind).collect()
    }

    fn open() -> Value {
        json!({"type": "WalletOpened", "user_id": "u-1", "currency": "IDR"})
    }

    #[test]
    fn a_sound_stream_has_no_findings_and_projects_its_rows() {
        let mut w = WalletReplay::new("w-1".into(), 100, test_keyring());
        let (o, h1) = stored(1, GENESIS_HASH, open());
        let (c, _) = stored(2, &h1, credit("c-1", 500, b(0, 0), b(500, 0), b(500, 0)));
        assert_eq!(w.event(&o), ExpectedLedger::Nothing);
        let ExpectedLedger::Row(row) = w.event(&c) else {
            panic!("a credit has a ledger row")
        };
        assert_eq!((row.sequence, row.amount_minor), (2, 500));
        assert_eq!(row.entry_type, EntryType::CreditPending.as_str());
        assert!(w.kept.is_empty(), "{:?}", w.kept);
        let balance = w.expected_balance.clone().expect("opened");
        assert_eq!((balance.balances.pending_minor, balance.version), (500, 2));
    }

    #[test]
    fn a_before_that_is_not_the_previous_after_breaks_the_balance_chain() {
        let found = kinds(vec![
            open(),
            credit("c-1", 500, b(0, 0), b(500, 0), b(500, 0)),
            credit("c-2", 100, b(400, 0), b(100, 0), b(500, 0)),
        ]);
        assert_eq!(found, vec![FindingKind::BalanceChainBroken]);
    }

    #[test]
    fn after_not_before_plus_delta_breaks_conservation() {
        let found = kinds(vec![
            open(),
            credit("c-1", 500, b(0, 0), b(500, 0), b(600, 0)),
        ]);
        assert_eq!(found, vec![FindingKind::ConservationBroken]);
    }

    #[test]
    fn a_negative_bucket_and_a_delta_that_does_not_match_the_amount_are_found() {
        let found = kinds(vec![
            open(),
            credit("c-1", 500, b(0, 0), b(-500, 0), b(-500, 0)),
        ]);
        assert_eq!(
            found,
            vec![FindingKind::DeltaMismatch, FindingKind::NegativeBucket]
        );
    }

    #[test]
    fn a_tampered_event_breaks_its_own_link_only() {
        let (o, h1) = stored(1, GENESIS_HASH, open());
        let (mut c, h2) = stored(2, &h1, credit("c-1", 500, b(0, 0), b(500, 0), b(500, 0)));
        let (r, _) = stored(3, &h2, credit("c-2", 1, b(500, 0), b(1, 0), b(501, 0)));
        c.event.actor = "someone else".into();
        let mut w = WalletReplay::new("w-1".into(), 100, test_keyring());
        for e in [&o, &c, &r] {
            w.event(e);
        }
        let found: Vec<_> = w.kept.iter().map(|f| (f.kind, f.key.as_str())).collect();
        assert_eq!(found, vec![(FindingKind::HashChainBroken, "sequence=2")]);
        assert_eq!(w.kept[0].events[0].global_position, 102);
    }

    #[test]
    fn a_payload_ref_that_differs_from_its_row_key_and_a_deleted_event_are_found() {
        let (o, h1) = stored(1, GENESIS_HASH, open());
        // Event 2 existed (event 3 is chained to it) and was deleted.
        let (_, h2) = stored(2, &h1, credit("c-0", 5, b(0, 0), b(5, 0), b(5, 0)));
        let (mut c, _) = stored(3, &h2, credit("c-1", 5, b(0, 0), b(5, 0), b(5, 0)));
        c.ledger_ref = Some((
            "COMMISSION".into(),
            "c-OTHER".into(),
            "CREDIT_PENDING".into(),
        ));
        let mut w = WalletReplay::new("w-1".into(), 100, test_keyring());
        w.event(&o);
        w.event(&c);
        let found: Vec<_> = w.kept.iter().map(|f| f.kind).collect();
        assert_eq!(
            found,
            vec![
                FindingKind::SequenceGap,
                FindingKind::HashChainBroken,
                FindingKind::LedgerRefMismatch
            ]
        );
    }

    #[test]
    fn events_on_an_unopened_wallet_and_an_undecodable_payload_are_event_findings() {
        let found = kinds(vec![
            credit("c-1", 5, b(0, 0), b(5, 0), b(5, 0)),
            json!({"type": "PendingCredited", "amount_minor": "lots"}),
        ]);
        assert_eq!(
            found,
            vec![
                FindingKind::LifecycleBroken,
                FindingKind::PayloadUndecodable
            ]
        );
        assert!(found.iter().all(|k| k.class() == FindingClass::Event));
    }

    #[test]
    fn counts_stay_exact_when_findings_are_not_kept() {
        let mut w = WalletReplay::new("w-1".into(), 1, test_keyring());
        w.balance(Some(BalanceRecord {
            wallet_id: "w-1".into(),
            user_id: "u".into(),
            currency: "IDR".into(),
            balances: Buckets::default(),
            version: 1,
            last_position: 1,
        }));
        w.ledger(
            None,
            Some(&LedgerRecord {
                wallet_id: "w-1".into(),
                sequence: 9,
                global_position: 9,
                ref_type: "X".into(),
                ref_id: "y".into(),
                entry_type: "CREDIT_PENDING".into(),
                amount_minor: 1,
                delta: Buckets::default(),
                before: Buckets::default(),
                after: Buckets::default(),
                recorded_at: "t".into(),
            }),
        );
        assert_eq!(w.counts.projection_drift, 2);
        assert_eq!(w.kept.len(), 1);
        let mut pass = Pass::new(test_keyring(), 0);
        pass.take(w);
        assert!(pass.truncated);
        assert_eq!(pass.counts.projection_drift, 2);
    }

    #[test]
    fn keyset_conditions_are_spelled_for_each_backend() {
        let key = || vec![Arg::Text("w".into()), Arg::Text("t".into()), Arg::Int(7)];
        let cols = ["wallet_id", "ref_type", "ref_id"];
        let (sql, args) = keyset_after(true, &cols, key());
        assert_eq!(sql, "(wallet_id, ref_type, ref_id) > (?, ?, ?)");
        assert_eq!(args.len(), 3);
        let (sql, args) = keyset_after(false, &cols, key());
        assert_eq!(
            sql,
            "(wallet_id > ? OR (wallet_id = ? AND (ref_type > ? OR (ref_type = ? AND ref_id > ?))))"
        );
        let shown: Vec<String> = args
            .iter()
            .map(|a| match a {
                Arg::Text(s) => s.clone(),
                Arg::Int(i) => i.to_string(),
            })
            .collect();
        assert_eq!(shown, ["w", "w", "t", "t", "7"]);
        assert_eq!(
            keyset_after(false, &["wallet_id"], vec![Arg::Int(1)]).0,
            "wallet_id > ?"
        );
    }

    #[test]
    fn differences_name_each_differing_field() {
        let d = differences(
            &json!({"a": 1, "b": {"c": 2, "d": 3}}),
            &json!({"a": 1, "b": {"c": 5, "d": 3}}),
        );
        assert_eq!(d, "b.c: expected 2, actual 5");
    }
}
