//! The payment order aggregate (stream = order id): the master status, its lines
//! (PAYABLE / UNQUALIFIED), their manual adjustments, publish identity, frozen planned
//! amounts, latest results and unqualified conclusions.
//!
//! The master moves only along [`ORDER_TRANSITIONS`]:
//!
//! ```text
//! DRAFT ──submit──▶ IN_REVIEW ──approve──▶ WAIT_PAY ◀─reconcile─▶ PAID
//!   ▲                  │
//!   │                reject
//!   └─(resubmit)── REVIEW_REJECTED
//! DRAFT | IN_REVIEW | REVIEW_REJECTED | WAIT_PAY ──void──▶ VOID (terminal)
//! DRAFT | IN_REVIEW | REVIEW_REJECTED | WAIT_PAY ──no-need-pay──▶ NO_NEED_PAY (terminal)
//! ```
//!
//! Lines are added, removed and adjusted only in [`EDITABLE_STATUSES`] (before review
//! or after a rejection), so what a reviewer approves is what was submitted. `publish`
//! (in an editable status) stamps every live line with a new publish version and the
//! current submit round; `submit` starts a new submit round and publishes in the same
//! decision, so the lines under review carry the master's current identity (R-BILL-2
//! joins locks and lines on it). `approve` freezes `planned + adjustment` of every live
//! payable line. A command whose effect is already the state (a replay) writes nothing.
//! WAIT_PAY ↔ PAID moves only by reconciliation (R-BILL-9, issue 6 item 5), which this
//! aggregate applies but does not decide.

use super::commands::{
    AddLine, AdjustLine, ConcludeUnqualified, OrderAction, PaymentOrderCommand,
    ReasonedOrderAction, RemoveLine, WithdrawUnqualified, WriteLineResult,
};
use super::error::BillError;
use super::events::{
    LineKindCode, LineStatusCode, OrderStatusCode, PaymentOrderEvent, PlannedAmount,
    ResultStatusCode, PAYMENT_ORDER_AGGREGATE_TYPE,
};
use crate::decide::{Decide, InvariantViolation, LedgerRef};
use cqrs_es::event_sink::EventSink;
use cqrs_es::Aggregate;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use OrderStatusCode::{Draft, InReview, NoNeedPay, Paid, ReviewRejected, Void, WaitPay};

/// A move of the master status that a command asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderMove {
    Submit,
    Approve,
    Reject,
    Void,
    MarkNoNeedPay,
}

impl OrderMove {
    pub fn name(self) -> &'static str {
        match self {
            Self::Submit => "submit",
            Self::Approve => "approve",
            Self::Reject => "reject",
            Self::Void => "void",
            Self::MarkNoNeedPay => "be marked no need to pay",
        }
    }
}

/// Every legal move of the master status: `(from, move, to)`. Anything else is
/// `ILLEGAL_TRANSITION`. PAID is reached only by reconciliation and cannot be voided:
/// money has moved.
pub const ORDER_TRANSITIONS: &[(OrderStatusCode, OrderMove, OrderStatusCode)] = &[
    (Draft, OrderMove::Submit, InReview),
    (ReviewRejected, OrderMove::Submit, InReview),
    (InReview, OrderMove::Approve, WaitPay),
    (InReview, OrderMove::Reject, ReviewRejected),
    (Draft, OrderMove::Void, Void),
    (InReview, OrderMove::Void, Void),
    (ReviewRejected, OrderMove::Void, Void),
    (WaitPay, OrderMove::Void, Void),
    (Draft, OrderMove::MarkNoNeedPay, NoNeedPay),
    (InReview, OrderMove::MarkNoNeedPay, NoNeedPay),
    (ReviewRejected, OrderMove::MarkNoNeedPay, NoNeedPay),
    (WaitPay, OrderMove::MarkNoNeedPay, NoNeedPay),
];

/// Statuses in which lines change and the order is published.
pub const EDITABLE_STATUSES: &[OrderStatusCode] = &[Draft, ReviewRejected];

/// Statuses nothing leaves (no transition, no line change, no conclusion).
pub const TERMINAL_STATUSES: &[OrderStatusCode] = &[Void, NoNeedPay];

/// Moves of reconciliation (R-BILL-9): WAIT_PAY ↔ PAID only.
pub const RECONCILE_EDGES: &[(OrderStatusCode, OrderStatusCode)] =
    &[(WaitPay, Paid), (Paid, WaitPay)];

/// Where `mv` leads from `from`, if it is legal.
pub fn transition(from: OrderStatusCode, mv: OrderMove) -> Option<OrderStatusCode> {
    ORDER_TRANSITIONS
        .iter()
        .find(|(f, m, _)| *f == from && *m == mv)
        .map(|(_, _, to)| *to)
}

/// The unqualified conclusion of an UNQUALIFIED line.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Conclusion {
    #[default]
    None,
    /// `UNQUALIFIED_EFFECTIVE`.
    Effective {
        partner_visible: bool,
        reason: String,
    },
    /// `UNQUALIFIED_INEFFECTIVE`.
    Withdrawn,
}

/// A line's latest written-back result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineResult {
    pub result_id: i64,
    pub line_status: LineStatusCode,
    pub paid_amount_minor: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Line {
    pub station_id: i64,
    pub month: String,
    pub kind: LineKindCode,
    pub planned_amount_minor: i64,
    pub manual_adjustment_minor: i64,
    pub removed: bool,
    /// The identity of the last publication that listed the line (0 = never).
    pub publish_version: i64,
    pub submit_round: i64,
    /// `planned + adjustment`, frozen at review approval.
    pub frozen_planned_minor: Option<i64>,
    pub conclusion: Conclusion,
    pub latest_result: Option<LineResult>,
}

impl Line {
    /// The amount to pay: planned plus the manual adjustment (checked ≥ 0 on adjust).
    pub fn adjusted_minor(&self) -> i64 {
        self.planned_amount_minor
            .saturating_add(self.manual_adjustment_minor)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PaymentOrder {
    /// 0 until created.
    pub order_id: i64,
    pub treasury: bool,
    /// `None` until created.
    pub status: Option<OrderStatusCode>,
    pub publish_version: i64,
    pub submit_round: i64,
    pub lines: BTreeMap<i64, Line>,
    /// A line changed since the last publication (a publish then writes a new version).
    pub edited_since_publish: bool,
}

impl PaymentOrder {
    /// Live (not removed) lines, by id.
    pub fn live_lines(&self) -> impl Iterator<Item = (&i64, &Line)> {
        self.lines.iter().filter(|(_, l)| !l.removed)
    }

    fn live_ids(&self) -> Vec<i64> {
        self.live_lines().map(|(id, _)| *id).collect()
    }

    fn same_order(&self, order_id: i64) -> Result<(), BillError> {
        if self.order_id != 0 && self.order_id != order_id {
            return Err(BillError::StreamMismatch {
                field: "order_id",
                given: order_id.to_string(),
                stream: self.order_id.to_string(),
            });
        }
        Ok(())
    }

    fn created(&self, order_id: i64) -> Result<OrderStatusCode, BillError> {
        self.status.ok_or(BillError::OrderNotFound(order_id))
    }

    fn editable(&self, status: OrderStatusCode) -> Result<(), BillError> {
        if EDITABLE_STATUSES.contains(&status) {
            Ok(())
        } else {
            Err(BillError::OrderNotEditable(status))
        }
    }

    fn line(&self, line_id: i64) -> Result<&Line, BillError> {
        self.lines
            .get(&line_id)
            .ok_or(BillError::LineNotFound(line_id))
    }

    fn live_line(&self, line_id: i64) -> Result<&Line, BillError> {
        let line = self.line(line_id)?;
        if line.removed {
            return Err(BillError::LineRemoved(line_id));
        }
        Ok(line)
    }

    fn kind(line_id: i64, line: &Line, needed: LineKindCode) -> Result<(), BillError> {
        if line.kind != needed {
            return Err(BillError::LineKindMismatch {
                line_id,
                actual: line.kind,
                needed: match needed {
                    LineKindCode::Payable => "PAYABLE",
                    LineKindCode::Unqualified => "UNQUALIFIED",
                },
            });
        }
        Ok(())
    }

    fn not_terminal(status: OrderStatusCode, action: &'static str) -> Result<(), BillError> {
        if TERMINAL_STATUSES.contains(&status) {
            return Err(BillError::IllegalTransition {
                from: status,
                action,
            });
        }
        Ok(())
    }

    fn add_line(&self, cmd: AddLine) -> Result<Vec<PaymentOrderEvent>, BillError> {
        let status = self.created(cmd.order_id.get())?;
        let line_id = cmd.line_id.get();
        if let Some(have) = self.lines.get(&line_id) {
            if have.removed {
                return Err(BillError::LineRemoved(line_id));
            }
            let same = have.station_id == cmd.station_id.get()
                && have.month == cmd.month.to_string()
                && have.kind == cmd.kind
                && have.planned_amount_minor == cmd.planned_amount_minor.get();
            return if same {
                Ok(vec![])
            } else {
                Err(BillError::LineAlreadyAdded(line_id))
            };
        }
        self.editable(status)?;
        if let Some((existing, _)) = self.live_lines().find(|(_, l)| {
            l.station_id == cmd.station_id.get()
                && l.month == cmd.month.to_string()
                && l.kind == cmd.kind
        }) {
            return Err(BillError::StationMonthAlreadyOnOrder {
                existing: *existing,
            });
        }
        Ok(vec![PaymentOrderEvent::LineAdded {
            order_id: cmd.order_id.get(),
            line_id,
            station_id: cmd.station_id.get(),
            month: cmd.month.to_string(),
            kind: cmd.kind,
            planned_amount_minor: cmd.planned_amount_minor.get(),
            at: cmd.at,
        }])
    }

    fn remove_line(&self, cmd: RemoveLine) -> Result<Vec<PaymentOrderEvent>, BillError> {
        let status = self.created(cmd.order_id.get())?;
        let line_id = cmd.line_id.get();
        if self.line(line_id)?.removed {
            return Ok(vec![]);
        }
        self.editable(status)?;
        Ok(vec![PaymentOrderEvent::LineRemoved {
            order_id: cmd.order_id.get(),
            line_id,
            at: cmd.at,
        }])
    }

    fn adjust_line(&self, cmd: AdjustLine) -> Result<Vec<PaymentOrderEvent>, BillError> {
        let status = self.created(cmd.order_id.get())?;
        let line_id = cmd.line_id.get();
        let line = self.live_line(line_id)?;
        Self::kind(line_id, line, LineKindCode::Payable)?;
        if line.manual_adjustment_minor == cmd.manual_adjustment_minor {
            return Ok(vec![]);
        }
        self.editable(status)?;
        let adjusted = line
            .planned_amount_minor
            .checked_add(cmd.manual_adjustment_minor);
        if adjusted.is_none_or(|a| a < 0) {
            return Err(BillError::AdjustedAmountInvalid {
                planned: line.planned_amount_minor,
                adjustment: cmd.manual_adjustment_minor,
            });
        }
        Ok(vec![PaymentOrderEvent::LineAdjusted {
            order_id: cmd.order_id.get(),
            line_id,
            manual_adjustment_minor: cmd.manual_adjustment_minor,
            actor: cmd.actor.as_str().to_owned(),
            reason: cmd.reason.as_str().to_owned(),
            at: cmd.at,
        }])
    }

    /// The publication of every live line at the next version and `submit_round`.
    fn publication(
        &self,
        order_id: i64,
        submit_round: i64,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Result<PaymentOrderEvent, BillError> {
        let line_ids = self.live_ids();
        if line_ids.is_empty() {
            return Err(BillError::OrderHasNoLines);
        }
        Ok(PaymentOrderEvent::PaymentOrderPublished {
            order_id,
            publish_version: self.publish_version + 1,
            submit_round,
            line_ids,
            at,
        })
    }

    fn publish(
        &self,
        order_id: i64,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<PaymentOrderEvent>, BillError> {
        let status = self.created(order_id)?;
        if !EDITABLE_STATUSES.contains(&status) {
            return Err(BillError::IllegalTransition {
                from: status,
                action: "publish",
            });
        }
        let current = self.publish_version > 0
            && !self.edited_since_publish
            && self.live_lines().all(|(_, l)| {
                l.publish_version == self.publish_version && l.submit_round == self.submit_round
            });
        if current {
            return Ok(vec![]);
        }
        Ok(vec![self.publication(order_id, self.submit_round, at)?])
    }

    /// The move's target status, `None` when the order is there already (a replay).
    fn moved(&self, order_id: i64, mv: OrderMove) -> Result<Option<OrderStatusCode>, BillError> {
        let status = self.created(order_id)?;
        let target = match mv {
            OrderMove::Submit => InReview,
            OrderMove::Approve => WaitPay,
            OrderMove::Reject => ReviewRejected,
            OrderMove::Void => Void,
            OrderMove::MarkNoNeedPay => NoNeedPay,
        };
        if status == target {
            return Ok(None);
        }
        transition(status, mv)
            .map(Some)
            .ok_or(BillError::IllegalTransition {
                from: status,
                action: mv.name(),
            })
    }

    fn submit(&self, cmd: OrderAction) -> Result<Vec<PaymentOrderEvent>, BillError> {
        let order_id = cmd.order_id.get();
        if self.moved(order_id, OrderMove::Submit)?.is_none() {
            return Ok(vec![]);
        }
        let round = self.submit_round + 1;
        let published = self.publication(order_id, round, cmd.at)?;
        Ok(vec![
            PaymentOrderEvent::PaymentOrderSubmitted {
                order_id,
                submit_round: round,
                actor: cmd.actor.as_str().to_owned(),
                at: cmd.at,
            },
            published,
        ])
    }

    fn approve(&self, cmd: OrderAction) -> Result<Vec<PaymentOrderEvent>, BillError> {
        let order_id = cmd.order_id.get();
        if self.moved(order_id, OrderMove::Approve)?.is_none() {
            return Ok(vec![]);
        }
        let planned = self
            .live_lines()
            .filter(|(_, l)| l.kind == LineKindCode::Payable)
            .map(|(id, l)| PlannedAmount {
                line_id: *id,
                planned_amount_minor: l.adjusted_minor(),
            })
            .collect();
        Ok(vec![PaymentOrderEvent::PaymentOrderApproved {
            order_id,
            planned,
            actor: cmd.actor.as_str().to_owned(),
            at: cmd.at,
        }])
    }

    fn reasoned(
        &self,
        cmd: ReasonedOrderAction,
        mv: OrderMove,
    ) -> Result<Vec<PaymentOrderEvent>, BillError> {
        let order_id = cmd.order_id.get();
        if self.moved(order_id, mv)?.is_none() {
            return Ok(vec![]);
        }
        let (actor, reason, at) = (
            cmd.actor.as_str().to_owned(),
            cmd.reason.as_str().to_owned(),
            cmd.at,
        );
        Ok(vec![match mv {
            OrderMove::Reject => PaymentOrderEvent::PaymentOrderRejected {
                order_id,
                actor,
                reason,
                at,
            },
            OrderMove::Void => PaymentOrderEvent::PaymentOrderVoided {
                order_id,
                actor,
                reason,
                at,
            },
            _ => PaymentOrderEvent::PaymentOrderMarkedNoNeedPay {
                order_id,
                actor,
                reason,
                at,
            },
        }])
    }

    fn conclude(&self, cmd: ConcludeUnqualified) -> Result<Vec<PaymentOrderEvent>, BillError> {
        let status = self.created(cmd.order_id.get())?;
        let line_id = cmd.line_id.get();
        let line = self.live_line(line_id)?;
        Self::kind(line_id, line, LineKindCode::Unqualified)?;
        match &line.conclusion {
            Conclusion::Effective {
                partner_visible,
                reason,
            } if *partner_visible == cmd.partner_visible && reason == cmd.reason.as_str() => {
                return Ok(vec![])
            }
            Conclusion::Effective { .. } => {
                return Err(BillError::UnqualifiedAlreadyConcluded(line_id))
            }
            Conclusion::None | Conclusion::Withdrawn => {}
        }
        Self::not_terminal(status, "conclude an unqualified line")?;
        Ok(vec![PaymentOrderEvent::UnqualifiedConcluded {
            order_id: cmd.order_id.get(),
            line_id,
            partner_visible: cmd.partner_visible,
            reason: cmd.reason.as_str().to_owned(),
            actor: cmd.actor.as_str().to_owned(),
            at: cmd.at,
        }])
    }

    fn withdraw(&self, cmd: WithdrawUnqualified) -> Result<Vec<PaymentOrderEvent>, BillError> {
        let status = self.created(cmd.order_id.get())?;
        let line_id = cmd.line_id.get();
        let line = self.live_line(line_id)?;
        Self::kind(line_id, line, LineKindCode::Unqualified)?;
        match line.conclusion {
            Conclusion::None => return Err(BillError::UnqualifiedNotConcluded(line_id)),
            Conclusion::Withdrawn => return Ok(vec![]),
            Conclusion::Effective { .. } => {}
        }
        Self::not_terminal(status, "withdraw an unqualified conclusion")?;
        Ok(vec![PaymentOrderEvent::UnqualifiedWithdrawn {
            order_id: cmd.order_id.get(),
            line_id,
            actor: cmd.actor.as_str().to_owned(),
            reason: cmd.reason.as_str().to_owned(),
            at: cmd.at,
        }])
    }

    /// A result is money that moved (or failed to): the order's status never refuses
    /// it; only a line that cannot be its line does.
    fn write_line_result(&self, cmd: WriteLineResult) -> Result<Vec<PaymentOrderEvent>, BillError> {
        self.created(cmd.order_id.get())?;
        let line_id = cmd.line_id.get();
        let line = self.live_line(line_id)?;
        Self::kind(line_id, line, LineKindCode::Payable)?;
        if line.station_id != cmd.station_id.get() || line.month != cmd.month.to_string() {
            return Err(BillError::ResultLineMismatch {
                line_id,
                result: format!("{}:{}", cmd.station_id, cmd.month),
                line: format!("{}:{}", line.station_id, line.month),
            });
        }
        let amount = cmd.amount_minor.get();
        let line_status = match cmd.status {
            ResultStatusCode::Paying => LineStatusCode::Unpaid,
            ResultStatusCode::PayFail => LineStatusCode::Failed,
            ResultStatusCode::PaySuccess => {
                let due = line.frozen_planned_minor.unwrap_or(line.adjusted_minor());
                if amount >= due {
                    LineStatusCode::Paid
                } else {
                    LineStatusCode::PartiallyPaid
                }
            }
        };
        let result = LineResult {
            result_id: cmd.result_id.get(),
            line_status,
            paid_amount_minor: amount,
        };
        if line.latest_result.as_ref() == Some(&result) {
            return Ok(vec![]);
        }
        Ok(vec![PaymentOrderEvent::LineResultWritten {
            order_id: cmd.order_id.get(),
            line_id,
            result_id: result.result_id,
            line_status,
            paid_amount_minor: amount,
            paid_at: cmd.paid_at,
            fail_reason: cmd.fail_reason.map(|r| r.as_str().to_owned()),
            trigger_source: cmd.trigger_source,
            at: cmd.at,
        }])
    }

    /// Whether `event` may be applied to this state; the reason when not.
    fn refuses(&self, event: &PaymentOrderEvent) -> Option<&'static str> {
        use PaymentOrderEvent as E;
        let status = match (event, self.status) {
            (E::PaymentOrderCreated { .. }, None) => return None,
            (E::PaymentOrderCreated { .. }, Some(_)) => return Some("created twice"),
            (_, None) => return Some("order not created"),
            (_, Some(s)) => s,
        };
        let line = |id: &i64| self.lines.get(id);
        let live = |id: &i64| line(id).is_some_and(|l| !l.removed);
        let moves = |mv: OrderMove| transition(status, mv).is_some();
        let ok = match event {
            E::PaymentOrderCreated { .. } => true,
            E::LineAdded { line_id, .. } => line(line_id).is_none(),
            E::LineRemoved { line_id, .. } | E::LineAdjusted { line_id, .. } => live(line_id),
            E::PaymentOrderPublished {
                publish_version,
                submit_round,
                line_ids,
                ..
            } => {
                *publish_version == self.publish_version + 1
                    && *submit_round == self.submit_round
                    && line_ids.iter().all(live)
            }
            E::PaymentOrderSubmitted { submit_round, .. } => {
                moves(OrderMove::Submit) && *submit_round == self.submit_round + 1
            }
            E::PaymentOrderApproved { planned, .. } => {
                moves(OrderMove::Approve) && planned.iter().all(|p| live(&p.line_id))
            }
            E::PaymentOrderRejected { .. } => moves(OrderMove::Reject),
            E::PaymentOrderVoided { .. } => moves(OrderMove::Void),
            E::PaymentOrderMarkedNoNeedPay { .. } => moves(OrderMove::MarkNoNeedPay),
            E::PaymentOrderStatusReconciled {
                from,
                to,
                publish_version,
                submit_round,
                ..
            } => {
                *from == status
                    && RECONCILE_EDGES.contains(&(*from, *to))
                    && *publish_version == self.publish_version
                    && *submit_round == self.submit_round
            }
            E::LineResultWritten { line_id, .. }
            | E::UnqualifiedConcluded { line_id, .. }
            | E::UnqualifiedWithdrawn { line_id, .. } => line(line_id).is_some(),
        };
        (!ok).then_some("does not follow from the order's state")
    }
}

impl Decide for PaymentOrder {
    const SNAPSHOT_VERSION: i32 = 1;

    fn decide(&self, command: PaymentOrderCommand) -> Result<Vec<PaymentOrderEvent>, BillError> {
        self.same_order(command.order_id().get())?;
        match command {
            PaymentOrderCommand::CreatePaymentOrder(cmd) => match self.status {
                Some(_) if self.treasury == cmd.treasury => Ok(vec![]),
                Some(_) => Err(BillError::OrderAlreadyCreated {
                    existing: self.treasury,
                }),
                None => Ok(vec![PaymentOrderEvent::PaymentOrderCreated {
                    order_id: cmd.order_id.get(),
                    treasury: cmd.treasury,
                    actor: cmd.actor.as_str().to_owned(),
                    created_at: cmd.created_at,
                }]),
            },
            PaymentOrderCommand::AddLine(cmd) => self.add_line(cmd),
            PaymentOrderCommand::RemoveLine(cmd) => self.remove_line(cmd),
            PaymentOrderCommand::AdjustLine(cmd) => self.adjust_line(cmd),
            PaymentOrderCommand::PublishPaymentOrder(cmd) => {
                self.publish(cmd.order_id.get(), cmd.at)
            }
            PaymentOrderCommand::SubmitPaymentOrder(cmd) => self.submit(cmd),
            PaymentOrderCommand::ApprovePaymentOrder(cmd) => self.approve(cmd),
            PaymentOrderCommand::RejectPaymentOrder(cmd) => self.reasoned(cmd, OrderMove::Reject),
            PaymentOrderCommand::VoidPaymentOrder(cmd) => self.reasoned(cmd, OrderMove::Void),
            PaymentOrderCommand::MarkPaymentOrderNoNeedPay(cmd) => {
                self.reasoned(cmd, OrderMove::MarkNoNeedPay)
            }
            PaymentOrderCommand::ConcludeUnqualified(cmd) => self.conclude(cmd),
            PaymentOrderCommand::WithdrawUnqualified(cmd) => self.withdraw(cmd),
            PaymentOrderCommand::WriteLineResult(cmd) => self.write_line_result(cmd),
        }
    }

    fn check(&self, event: &PaymentOrderEvent) -> Result<(), InvariantViolation> {
        match self.refuses(event) {
            None => Ok(()),
            Some(why) => Err(InvariantViolation(format!(
                "{} on order {} in {:?}: {why}",
                event.name(),
                self.order_id,
                self.status
            ))),
        }
    }

    fn ledger_ref(_event: &PaymentOrderEvent) -> Option<LedgerRef> {
        None
    }
}

impl Aggregate for PaymentOrder {
    const TYPE: &'static str = PAYMENT_ORDER_AGGREGATE_TYPE;
    type Command = PaymentOrderCommand;
    type Event = PaymentOrderEvent;
    type Error = BillError;
    type Services = ();

    async fn handle(
        &mut self,
        command: PaymentOrderCommand,
        _service: &(),
        sink: &EventSink<Self>,
    ) -> Result<(), BillError> {
        for event in self.decide(command)? {
            sink.write(event, self).await;
        }
        Ok(())
    }

    fn apply(&mut self, event: PaymentOrderEvent) {
        debug_assert_eq!(self.check(&event), Ok(()));
        use PaymentOrderEvent as E;
        match event {
            E::PaymentOrderCreated {
                order_id, treasury, ..
            } => {
                self.order_id = order_id;
                self.treasury = treasury;
                self.status = Some(Draft);
            }
            E::LineAdded {
                line_id,
                station_id,
                month,
                kind,
                planned_amount_minor,
                ..
            } => {
                self.lines.insert(
                    line_id,
                    Line {
                        station_id,
                        month,
                        kind,
                        planned_amount_minor,
                        manual_adjustment_minor: 0,
                        removed: false,
                        publish_version: 0,
                        submit_round: 0,
                        frozen_planned_minor: None,
                        conclusion: Conclusion::None,
                        latest_result: None,
                    },
                );
                self.edited_since_publish = true;
            }
            E::LineRemoved { line_id, .. } => {
                if let Some(l) = self.lines.get_mut(&line_id) {
                    l.removed = true;
                }
                self.edited_since_publish = true;
            }
            E::LineAdjusted {
                line_id,
                manual_adjustment_minor,
                ..
            } => {
                if let Some(l) = self.lines.get_mut(&line_id) {
                    l.manual_adjustment_minor = manual_adjustment_minor;
                }
                self.edited_since_publish = true;
            }
            E::PaymentOrderPublished {
                publish_version,
                submit_round,
                line_ids,
                ..
            } => {
                self.publish_version = publish_version;
                self.submit_round = submit_round;
                for id in line_ids {
                    if let Some(l) = self.lines.get_mut(&id) {
                        l.publish_version = publish_version;
                        l.submit_round = submit_round;
                    }
                }
                self.edited_since_publish = false;
            }
            E::PaymentOrderSubmitted { submit_round, .. } => {
                self.submit_round = submit_round;
                self.status = Some(InReview);
            }
            E::PaymentOrderApproved { planned, .. } => {
                for p in planned {
                    if let Some(l) = self.lines.get_mut(&p.line_id) {
                        l.frozen_planned_minor = Some(p.planned_amount_minor);
                    }
                }
                self.status = Some(WaitPay);
            }
            E::PaymentOrderRejected { .. } => self.status = Some(ReviewRejected),
            E::PaymentOrderVoided { .. } => self.status = Some(Void),
            E::PaymentOrderMarkedNoNeedPay { .. } => self.status = Some(NoNeedPay),
            E::PaymentOrderStatusReconciled { to, .. } => self.status = Some(to),
            E::LineResultWritten {
                line_id,
                result_id,
                line_status,
                paid_amount_minor,
                ..
            } => {
                if let Some(l) = self.lines.get_mut(&line_id) {
                    l.latest_result = Some(LineResult {
                        result_id,
                        line_status,
                        paid_amount_minor,
                    });
                }
            }
            E::UnqualifiedConcluded {
                line_id,
                partner_visible,
                reason,
                ..
            } => {
                if let Some(l) = self.lines.get_mut(&line_id) {
                    l.conclusion = Conclusion::Effective {
                        partner_visible,
                        reason,
                    };
                }
            }
            E::UnqualifiedWithdrawn { line_id, .. } => {
                if let Some(l) = self.lines.get_mut(&line_id) {
                    l.conclusion = Conclusion::Withdrawn;
                }
            }
        }
    }
}
