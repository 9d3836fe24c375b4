//! Payment-order status reconciliation (SPEC R-BILL-9; seed 001 §7.3): after a refresh
//! whose trigger sources include a whitelisted one, re-derive each affected payment
//! order's master status (WAIT_PAY / PAID) from its current published payable lines.
//!
//! Pure rules only — the process manager loads, decides here, and appends events:
//! - [`masters_to_reconcile`]: masters deduplicated from the affected lines; one unit
//!   per master;
//! - [`reconcile`]: for one master with *all* its lines and their results → the import
//!   write-back per line (on `PAYMENT_IMPORT_EFFECTIVE`) and the master decision, which
//!   names the rule that fired and carries a [`CasToken`];
//! - [`after_cas`]: the retry policy — at most [`RECONCILE_ATTEMPTS_MAX`] attempts, then
//!   a conflict error.
//!
//! "PAID" on a master is not "every amount paid" (seed §7.3): a non-treasury order is
//! PAID as soon as one line succeeded, and a treasury order counts partially paid and
//! failed lines as ended. Do not carry the bill status's "paid in full" over here.

use super::{LineKind, LineStatus, OrderStatus, ResultSource, ResultStatus, ResultType};
use chrono::{DateTime, Utc};
use factledger_aggregates::bill::{
    LineStatusCode, OrderStatusCode, PaymentOrderEvent, TriggerSource,
};
use std::collections::BTreeSet;
use std::fmt;

/// Compare-and-set attempts per master before the job fails with a conflict (seed §7.3
/// "最多尝试两轮"). A second attempt re-reads the master and its lines.
pub const RECONCILE_ATTEMPTS_MAX: u32 = 2;

/// A payment order master as reconciliation reads it, with its current publish
/// identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Master {
    pub order_id: i64,
    pub status: OrderStatus,
    /// Paid through the treasury (vs offline).
    pub treasury: bool,
    pub published: bool,
    pub publish_version: i64,
    pub submit_round: i64,
}

/// A payment order line with the publish identity it was listed under and what has
/// been written back to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReconcileLine {
    pub line_id: i64,
    pub order_id: i64,
    pub publish_version: i64,
    pub submit_round: i64,
    pub kind: LineKind,
    pub deleted: bool,
    /// The line's own status, written back from its results.
    pub status: LineStatus,
    pub latest_result_id: Option<i64>,
    /// The paid amount written back so far.
    pub paid_amount_minor: i64,
    /// Frozen at review approval: a write-back at or above it makes the line PAID.
    pub planned_amount_minor: i64,
}

impl ReconcileLine {
    /// A PAYABLE line, not deleted, of the master's current publish identity.
    fn is_current_payable_of(&self, m: &Master) -> bool {
        self.kind == LineKind::Payable
            && !self.deleted
            && self.order_id == m.order_id
            && m.published
            && (self.publish_version, self.submit_round) == (m.publish_version, m.submit_round)
    }

    /// At least part of it was paid.
    fn succeeded(&self) -> bool {
        matches!(self.status, LineStatus::Paid | LineStatus::PartiallyPaid)
    }

    /// It has a settlement outcome (结算终态): paid, partially paid or failed.
    fn ended(&self) -> bool {
        matches!(
            self.status,
            LineStatus::Paid | LineStatus::PartiallyPaid | LineStatus::Failed
        )
    }
}

/// A payment result of a line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineResult {
    pub result_id: i64,
    pub line_id: i64,
    pub status: ResultStatus,
    pub kind: ResultType,
    pub source: ResultSource,
    pub amount_minor: i64,
    pub paid_at: Option<DateTime<Utc>>,
    pub fail_reason: Option<String>,
    pub voided: bool,
}

impl LineResult {
    /// What the import write-back sums (seed §7.3): success, NORMAL_PAYMENT, from the
    /// treasury or an offline import — and, **[dev]** R-BILL-3, not voided.
    fn counts_for_write_back(&self) -> bool {
        self.status == ResultStatus::Success
            && self.kind == ResultType::NormalPayment
            && matches!(
                self.source,
                ResultSource::Treasury | ResultSource::OfflineImport
            )
            && !self.voided
    }
}

/// The masters of the affected lines to reconcile, deduplicated and in id order: only
/// lines that are PAYABLE, not deleted, and of their (published) master's current
/// publish identity count. A line whose master is not in `masters` counts for none.
pub fn masters_to_reconcile(masters: &[Master], affected_lines: &[ReconcileLine]) -> Vec<i64> {
    let ids: BTreeSet<i64> = affected_lines
        .iter()
        .filter(|l| {
            masters
                .iter()
                .any(|m| m.order_id == l.order_id && l.is_current_payable_of(m))
        })
        .map(|l| l.order_id)
        .collect();
    ids.into_iter().collect()
}

/// The import write-back of one line (seed §7.3, on PAYMENT_IMPORT_EFFECTIVE): its
/// latest result, cumulative paid, paid time and fail reason from its successful
/// NORMAL treasury/offline results.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineWriteBack {
    pub order_id: i64,
    pub line_id: i64,
    /// The latest counted result (by paid time, then id).
    pub result_id: i64,
    pub result_status: ResultStatus,
    /// PAID when the sum reaches the planned amount, else PARTIALLY_PAID.
    pub line_status: LineStatus,
    /// Sum of the counted results.
    pub paid_amount_minor: i64,
    pub paid_at: Option<DateTime<Utc>>,
    pub fail_reason: Option<String>,
}

impl LineWriteBack {
    /// The event that records it on the payment order stream.
    pub fn to_event(&self, trigger_source: TriggerSource, at: DateTime<Utc>) -> PaymentOrderEvent {
        PaymentOrderEvent::LineResultWritten {
            order_id: self.order_id,
            line_id: self.line_id,
            result_id: self.result_id,
            line_status: line_status_code(self.line_status),
            paid_amount_minor: self.paid_amount_minor,
            paid_at: self.paid_at,
            fail_reason: self.fail_reason.clone(),
            trigger_source,
            at,
        }
    }
}

fn line_status_code(s: LineStatus) -> LineStatusCode {
    match s {
        LineStatus::Paid => LineStatusCode::Paid,
        LineStatus::PartiallyPaid => LineStatusCode::PartiallyPaid,
        LineStatus::Failed => LineStatusCode::Failed,
        // Unqualified statuses are no payable line's; a write-back never produces them.
        LineStatus::Unpaid
        | LineStatus::UnqualifiedEffective
        | LineStatus::UnqualifiedIneffective => LineStatusCode::Unpaid,
    }
}

fn order_status_code(s: OrderStatus) -> OrderStatusCode {
    match s {
        OrderStatus::Draft => OrderStatusCode::Draft,
        OrderStatus::InReview => OrderStatusCode::InReview,
        OrderStatus::ReviewRejected => OrderStatusCode::ReviewRejected,
        OrderStatus::WaitPay => OrderStatusCode::WaitPay,
        OrderStatus::Paid => OrderStatusCode::Paid,
        OrderStatus::NoNeedPay => OrderStatusCode::NoNeedPay,
        OrderStatus::Void => OrderStatusCode::Void,
    }
}

/// The write-back of one line, `None` when it has no counted result (skip) or the
/// line already holds exactly this write-back (idempotent on a replay).
fn write_back(
    line: &ReconcileLine,
    results: &[LineResult],
) -> Result<Option<LineWriteBack>, OrderStatusError> {
    let counted: Vec<&LineResult> = results
        .iter()
        .filter(|r| r.line_id == line.line_id && r.counts_for_write_back())
        .collect();
    let Some(latest) = counted.iter().max_by_key(|r| (r.paid_at, r.result_id)) else {
        return Ok(None);
    };
    let paid = counted
        .iter()
        .try_fold(0i64, |sum, r| sum.checked_add(r.amount_minor))
        .ok_or(OrderStatusError::PaidAmountOverflow {
            order_id: line.order_id,
            line_id: line.line_id,
        })?;
    let line_status = if paid >= line.planned_amount_minor {
        LineStatus::Paid
    } else {
        LineStatus::PartiallyPaid
    };
    let unchanged = line.latest_result_id == Some(latest.result_id)
        && line.status == line_status
        && line.paid_amount_minor == paid;
    if unchanged {
        return Ok(None);
    }
    Ok(Some(LineWriteBack {
        order_id: line.order_id,
        line_id: line.line_id,
        result_id: latest.result_id,
        result_status: latest.status,
        line_status,
        paid_amount_minor: paid,
        paid_at: latest.paid_at,
        fail_reason: latest.fail_reason.clone(),
    }))
}

/// The rule that decided a master, in table order (seed §7.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReconcileRule {
    /// No trigger source is on the R-BILL-9 whitelist: nothing is reconciled.
    M0NotWhitelisted,
    /// Only published WAIT_PAY and PAID masters are reconciled; review, rejected, void,
    /// no-need-pay (and draft) are protected.
    M1Protected,
    /// No current payable line: nothing to derive a status from (the master is left).
    M2NoCurrentPayableLines,
    /// Non-treasury: any line succeeded → PAID (even with other lines unpaid).
    M3NonTreasuryAnyLineSucceeded,
    /// Non-treasury: every payable line ended (e.g. all failed) → PAID.
    M4NonTreasuryAllLinesEnded,
    /// Non-treasury otherwise → WAIT_PAY (PAID → WAIT_PAY allowed: an import deleted).
    M5NonTreasuryOpen,
    /// Treasury PAID stays PAID.
    M6TreasuryPaidStays,
    /// Treasury WAIT_PAY with no unpaid line → PAID (partial and failed count as ended).
    M7TreasuryNoLineUnpaid,
    /// Treasury WAIT_PAY with an unpaid line stays WAIT_PAY.
    M8TreasuryOpen,
}

impl ReconcileRule {
    pub fn label(self) -> &'static str {
        match self {
            ReconcileRule::M0NotWhitelisted => "M0 no whitelisted trigger source",
            ReconcileRule::M1Protected => "M1 status protected",
            ReconcileRule::M2NoCurrentPayableLines => "M2 no current payable line",
            ReconcileRule::M3NonTreasuryAnyLineSucceeded => "M3 non-treasury, a line succeeded",
            ReconcileRule::M4NonTreasuryAllLinesEnded => "M4 non-treasury, every line ended",
            ReconcileRule::M5NonTreasuryOpen => "M5 non-treasury, still open",
            ReconcileRule::M6TreasuryPaidStays => "M6 treasury PAID stays",
            ReconcileRule::M7TreasuryNoLineUnpaid => "M7 treasury, no line unpaid",
            ReconcileRule::M8TreasuryOpen => "M8 treasury, a line unpaid",
        }
    }
}

impl fmt::Display for ReconcileRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// The compare-and-set guard of a master status write: it applies only if the master
/// still has this id, publish version, submit round and old status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CasToken {
    pub order_id: i64,
    pub publish_version: i64,
    pub submit_round: i64,
    pub old_status: OrderStatus,
}

impl CasToken {
    pub fn of(m: &Master) -> CasToken {
        CasToken {
            order_id: m.order_id,
            publish_version: m.publish_version,
            submit_round: m.submit_round,
            old_status: m.status,
        }
    }

    /// Whether the master as read now still matches: the write may apply.
    pub fn holds_for(&self, now: &Master) -> bool {
        *self == CasToken::of(now)
    }
}

/// The master status decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MasterDecision {
    /// The status stays (protected, already right, or nothing to reconcile).
    Unchanged {
        status: OrderStatus,
        rule: ReconcileRule,
    },
    /// Move the status, guarded by `cas`.
    Move {
        cas: CasToken,
        to: OrderStatus,
        rule: ReconcileRule,
    },
}

impl MasterDecision {
    pub fn rule(&self) -> ReconcileRule {
        match self {
            MasterDecision::Unchanged { rule, .. } | MasterDecision::Move { rule, .. } => *rule,
        }
    }

    /// The status after the decision.
    pub fn status(&self) -> OrderStatus {
        match self {
            MasterDecision::Unchanged { status, .. } => *status,
            MasterDecision::Move { to, .. } => *to,
        }
    }

    /// The event of a move (`None` when unchanged).
    pub fn to_event(
        &self,
        trigger_source: TriggerSource,
        at: DateTime<Utc>,
    ) -> Option<PaymentOrderEvent> {
        match *self {
            MasterDecision::Unchanged { .. } => None,
            MasterDecision::Move { cas, to, .. } => {
                Some(PaymentOrderEvent::PaymentOrderStatusReconciled {
                    order_id: cas.order_id,
                    from: order_status_code(cas.old_status),
                    to: order_status_code(to),
                    publish_version: cas.publish_version,
                    submit_round: cas.submit_round,
                    trigger_source,
                    at,
                })
            }
        }
    }
}

/// One master's reconciliation: the line write-backs to record first, then the master
/// decision (taken on the lines as written back).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reconciliation {
    pub write_backs: Vec<LineWriteBack>,
    pub decision: MasterDecision,
}

/// Reconcile one master (R-BILL-9). `lines` are the master's lines (all of them: the
/// rules read every current payable line, not just the refreshed station-months');
/// `results` their payment results. The import write-back runs only when
/// `PAYMENT_IMPORT_EFFECTIVE` is among `trigger_sources`, and only on lines with a
/// counted result.
pub fn reconcile(
    master: &Master,
    lines: &[ReconcileLine],
    results: &[LineResult],
    trigger_sources: &BTreeSet<TriggerSource>,
) -> Result<Reconciliation, OrderStatusError> {
    let unchanged = |rule| Reconciliation {
        write_backs: vec![],
        decision: MasterDecision::Unchanged {
            status: master.status,
            rule,
        },
    };
    if !trigger_sources.iter().any(|s| s.reconciles_order_status()) {
        return Ok(unchanged(ReconcileRule::M0NotWhitelisted));
    }
    let mut current: Vec<ReconcileLine> = lines
        .iter()
        .filter(|l| l.is_current_payable_of(master))
        .copied()
        .collect();
    let mut write_backs = Vec::new();
    if trigger_sources.contains(&TriggerSource::PaymentImportEffective) {
        for line in &mut current {
            if let Some(wb) = write_back(line, results)? {
                line.status = wb.line_status;
                line.latest_result_id = Some(wb.result_id);
                line.paid_amount_minor = wb.paid_amount_minor;
                write_backs.push(wb);
            }
        }
    }
    let (to, rule) = master_rule(master, &current);
    let decision = if to == master.status {
        MasterDecision::Unchanged { status: to, rule }
    } else {
        MasterDecision::Move {
            cas: CasToken::of(master),
            to,
            rule,
        }
    };
    Ok(Reconciliation {
        write_backs,
        decision,
    })
}

/// The master rule table (seed §7.3), first match wins.
fn master_rule(master: &Master, lines: &[ReconcileLine]) -> (OrderStatus, ReconcileRule) {
    use OrderStatus::{Paid, WaitPay};
    use ReconcileRule as M;
    if !master.published || !matches!(master.status, WaitPay | Paid) {
        return (master.status, M::M1Protected);
    }
    if lines.is_empty() {
        return (master.status, M::M2NoCurrentPayableLines);
    }
    if !master.treasury {
        if lines.iter().any(ReconcileLine::succeeded) {
            return (Paid, M::M3NonTreasuryAnyLineSucceeded);
        }
        if lines.iter().all(ReconcileLine::ended) {
            return (Paid, M::M4NonTreasuryAllLinesEnded);
        }
        return (WaitPay, M::M5NonTreasuryOpen);
    }
    if master.status == Paid {
        return (Paid, M::M6TreasuryPaidStays);
    }
    if lines.iter().all(ReconcileLine::ended) {
        return (Paid, M::M7TreasuryNoLineUnpaid);
    }
    (WaitPay, M::M8TreasuryOpen)
}

/// How a compare-and-set write of a master status went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CasOutcome {
    Applied,
    /// The master changed since it was read (status, publish version or submit round).
    Conflict,
}

/// What to do after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextStep {
    Done,
    /// Re-read the master and its lines, decide again, and write with attempt number
    /// `attempt`.
    Retry {
        attempt: u32,
    },
}

/// The retry policy: `attempt` is 1-based. A conflict on the last allowed attempt is
/// an error: the job fails with a reported conflict (seed §7.3).
pub fn after_cas(
    order_id: i64,
    attempt: u32,
    outcome: CasOutcome,
) -> Result<NextStep, OrderStatusError> {
    if !(1..=RECONCILE_ATTEMPTS_MAX).contains(&attempt) {
        return Err(OrderStatusError::AttemptOutOfRange { order_id, attempt });
    }
    match outcome {
        CasOutcome::Applied => Ok(NextStep::Done),
        CasOutcome::Conflict if attempt < RECONCILE_ATTEMPTS_MAX => Ok(NextStep::Retry {
            attempt: attempt + 1,
        }),
        CasOutcome::Conflict => Err(OrderStatusError::Conflict {
            order_id,
            attempts: attempt,
        }),
    }
}

/// Why a master was not reconciled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OrderStatusError {
    #[error(
        "order_id {order_id}: the master changed under each of {attempts} compare-and-set attempts (R-BILL-9 conflict)"
    )]
    Conflict { order_id: i64, attempts: u32 },
    #[error("order_id {order_id}: attempt {attempt} is outside 1..={RECONCILE_ATTEMPTS_MAX}")]
    AttemptOutOfRange { order_id: i64, attempt: u32 },
    #[error("order_id {order_id}, line_id {line_id}: the paid amount overflows i64 minor units")]
    PaidAmountOverflow { order_id: i64, line_id: i64 },
}

#[cfg(test)]
mod tests;
