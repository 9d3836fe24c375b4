//! What a reconciliation reports: options, finding classes and kinds, counts, repair
//! outcomes, the report itself and its error; and the limits and repair labels.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Rows read per query, per table (default). A page of events is a few MB.
pub const PAGE_ROWS: i64 = 5_000;
/// Largest page a caller may ask for: memory is a page per table.
pub const PAGE_ROWS_MAX: i64 = 50_000;
/// Findings kept in a report; counts stay exact beyond it (`findings_truncated`).
pub const FINDINGS_STORED_MAX: usize = 1_000;

/// Wallets one run repairs by scoped rebuild. Drift wider than this is a job for a
/// full rebuild (`factledger rebuild wallet`), which is built for it.
pub const REPAIR_WALLETS_MAX: usize = 10_000;

pub(super) const REPAIR_AUTO: &str = "auto: scoped rebuild of the wallet";
pub(super) const REFUSED_EVENT: &str =
    "refused: event-level findings are corrected by hand with new events, never repaired";
pub(super) const REFUSED_WALLET: &str = "refused: wallet has event-level findings";
pub(super) const REFUSED_CONTRADICTED: &str =
    "refused: other streams contradict it (see the event findings naming it); a rebuild \
     would drop a money movement they still hold";
pub(super) const REFUSED_TOO_WIDE: &str =
    "refused: too many wallets drifted for scoped repair; rebuild the whole projection";

/// A check against something outside the log — a payout provider's report — run
/// after the replay; what it finds is added to the report as `event` findings, never
/// repaired. The composition root hands the checks in (the runtime names no
/// capability). A check that cannot run (the provider is down) reports that as a
/// finding, so a reconciliation never passes by skipping it.
#[async_trait::async_trait]
pub trait ExternalCheck: Send + Sync + 'static {
    fn name(&self) -> &'static str;
    async fn findings(&self) -> Result<Vec<Finding>, String>;
}

/// The external checks of this service (in `AppState::parts`).
#[derive(Clone, Default)]
pub struct ExternalChecks(pub Vec<std::sync::Arc<dyn ExternalCheck>>);

impl std::fmt::Debug for ExternalChecks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|c| c.name()))
            .finish()
    }
}

#[derive(Debug, Clone)]
pub struct ReconcileOptions {
    /// Rebuild the wallets that only drifted, then check them again.
    pub repair: bool,
    /// The anchor file the log is checked against besides the database's anchors.
    pub anchor_file: Option<std::path::PathBuf>,
    /// Rows per query per table, 1 to `PAGE_ROWS_MAX` (tests use tiny pages so that
    /// every wallet crosses page boundaries).
    pub page_rows: i64,
    /// Checks against the outside world (a provider's report).
    pub external: ExternalChecks,
}

impl Default for ReconcileOptions {
    fn default() -> Self {
        ReconcileOptions {
            repair: false,
            anchor_file: None,
            page_rows: PAGE_ROWS,
            external: ExternalChecks::default(),
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
    /// The journal does not balance: a currency's debits and credits differ, an
    /// account's totals are not its lines, or a wallet bucket account is not the
    /// wallet projection's bucket (`reconcile::journal`). Never repaired automatically.
    JournalImbalance,
    /// A withdrawal's ledger entries are not what its stream's status says: frozen
    /// once for its amount, then paid out (PAID) or unfrozen (REJECTED, FAILED) or
    /// still frozen (in flight) — or a wallet's frozen bucket is not the sum of its
    /// withdrawals in flight.
    WithdrawalLedgerMismatch,
    /// Our payouts and the provider's report disagree: missing on either side, or a
    /// different amount or outcome (R-REC-1). For a person; never repaired.
    ProviderReportMismatch,
    /// The provider's report could not be read, so the payouts were not compared.
    ProviderReportUnavailable,
    /// Candy does not add up across streams: the accounts' balances are not what
    /// delivered recharges minus holds plus candy refunds make, or the held candy is
    /// not the bookings' open holds (issue 18). For a person; never repaired.
    CandyMismatch,
    /// A verified payment callback of the gateway is in the callback inbox, but its
    /// payment is not recorded on any order: the customer paid and got nothing yet.
    /// For a person (replay the callback, or refund); never repaired.
    PaymentNotApplied,
    /// A live bill lock holds a line that is gone: removed, not on its order, or on an
    /// order that is missing or closed (issue 32 item 6, `bill::reconcile`). It blocks
    /// its station-month; for a person, never repaired.
    BillLockLineGone,
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
            | LogIntegrity
            | JournalImbalance
            | WithdrawalLedgerMismatch
            | ProviderReportMismatch
            | ProviderReportUnavailable
            | CandyMismatch
            | PaymentNotApplied
            | BillLockLineGone => FindingClass::Event,
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

    pub(super) fn add(&mut self, class: FindingClass, n: u64) {
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
