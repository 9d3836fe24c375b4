//! The withdrawal aggregate (SPEC §6): one stream per withdrawal (stream id = the
//! withdrawal id), moving only along the R-PAY-2 table ([`WITHDRAWAL_EDGES`]), with
//! every provider call recorded as an attempt before it is made (R-PAY-3).
//!
//! Money moves through the wallet: [`Withdrawal::wallet_effect`] names the one
//! wallet command each money event requires, always under `ref_type = WITHDRAWAL`,
//! `ref_id = withdrawal id`, so the wallet's pairing rule (an unfreeze or payout
//! names the open freeze of the same reference, for its exact amount, once) and its
//! unique ledger key make a second debit or unfreeze impossible even if this
//! aggregate were wrong.
//!
//! What the provider says is folded by [`targets`]: one report moves the withdrawal
//! along one or two edges (a success learned while PAYOUT_PENDING is accepted and
//! then paid), changes nothing (a stale or repeated report), or contradicts a
//! settled withdrawal (recorded as `ProviderContradicted`, never applied to money).

mod commands;
mod events;
pub mod limits;
pub mod profile;
mod transitions;

pub use commands::{
    Decision, ProviderReport, RecordOutcome, RequestWithdrawal, StartAttempt, WithdrawalCommand,
};
pub use events::{
    CallDetail, Decided, OutcomeSource, PayoutAttemptStarted, PayoutDestination, PayoutOutcome,
    Review, WithdrawalEvent, WithdrawalRequested, WITHDRAWAL_EVENT_VERSION,
};
pub use transitions::{WithdrawalStatus, WITHDRAWAL_EDGES};

use crate::decide::{Decide, InvariantViolation, LedgerRef};
use crate::ledger::WITHDRAWAL_REF_TYPE;
use crate::money::{AmountMinor, BoundedId, Currency};
use crate::wallet::{MoveFunds, WalletCommand, WalletEffect};
use chrono::{DateTime, Utc};
use cqrs_es::event_sink::EventSink;
use cqrs_es::Aggregate;
use serde::{Deserialize, Serialize};

/// The stream type of withdrawals in the event store.
pub const WITHDRAWAL_AGGREGATE_TYPE: &str = "withdrawal";
/// Longest withdrawal id: room is left for the `:r<n>` of a retry's reference.
pub const WITHDRAWAL_ID_LEN_MAX: usize = 96;
/// Calls to the provider one withdrawal may make; past it the worker stops and a
/// person looks (a provider that keeps timing out is not retried forever).
pub const PAYOUT_ATTEMPTS_MAX: u32 = 20;
/// The actor of the risk rule's automatic approval.
pub const RISK_RULE_ACTOR: &str = "system:risk-rule";

/// The state of a withdrawal stream; `record` is `None` until it is requested.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Withdrawal {
    pub record: Option<WithdrawalState>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WithdrawalState {
    pub withdrawal_id: String,
    pub user_id: String,
    pub wallet_id: String,
    pub currency: Currency,
    pub amount_minor: i64,
    pub provider: String,
    pub destination: PayoutDestination,
    pub review: Review,
    pub status: WithdrawalStatus,
    pub requested_at: DateTime<Utc>,
    /// Calls made so far (`PayoutAttemptStarted` count).
    pub attempts: u32,
    /// The attempt recorded as started whose call has not answered yet.
    pub open_attempt: Option<u32>,
    /// How many times the payout went FUNDS_HELD: the reference's `:r<n>`.
    pub round: u32,
    pub provider_payout_id: Option<String>,
    pub contradictions: u32,
}

/// Why a withdrawal command was refused. Nothing is written when a command is
/// refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WithdrawalError {
    #[error("withdrawal does not exist")]
    NotFound,
    #[error("withdrawal id {id} is taken by another request")]
    IdTaken { id: String },
    #[error("withdrawal id is longer than {max} characters")]
    IdTooLong { max: usize },
    #[error("a withdrawal in {} is not waiting for review (only REQUESTED is)", status.as_str())]
    NotReviewable { status: WithdrawalStatus },
    #[error("reason must not be empty")]
    ReasonMissing,
    #[error("a withdrawal in {} cannot be paid now", status.as_str())]
    NotPayable { status: WithdrawalStatus },
    #[error("attempt {attempt} has not answered yet; record its outcome first")]
    AttemptOpen { attempt: u32 },
    #[error("{max} payout attempts made; a person decides what happens next")]
    AttemptsExhausted { max: u32 },
}

impl WithdrawalError {
    /// Stable machine-readable code for clients.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotFound => "WITHDRAWAL_NOT_FOUND",
            Self::IdTaken { .. } => "WITHDRAWAL_ID_TAKEN",
            Self::IdTooLong { .. } => "WITHDRAWAL_ID_TOO_LONG",
            Self::NotReviewable { .. } => "WITHDRAWAL_NOT_REVIEWABLE",
            Self::ReasonMissing => "REASON_MISSING",
            Self::NotPayable { .. } => "WITHDRAWAL_NOT_PAYABLE",
            Self::AttemptOpen { .. } => "PAYOUT_ATTEMPT_OPEN",
            Self::AttemptsExhausted { .. } => "PAYOUT_ATTEMPTS_EXHAUSTED",
        }
    }

    /// The request field the error is about, when there is one.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            Self::IdTaken { .. } | Self::IdTooLong { .. } => Some("withdrawal_id"),
            Self::ReasonMissing => Some("reason"),
            _ => None,
        }
    }
}

/// How one provider report moves a withdrawal in `status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fold {
    /// Along these edges, in order (one or two).
    Move(Vec<WithdrawalStatus>),
    /// Nothing new (stale, repeated, or still unknown).
    Stay,
    /// The provider contradicts what the withdrawal already is.
    Contradiction,
}

/// Where a provider report takes a withdrawal in `status`. Every `Move` is a path
/// of edges of [`WITHDRAWAL_EDGES`] (tested); money never moves on `Unknown`.
pub fn targets(status: WithdrawalStatus, report: &ProviderReport) -> Fold {
    use ProviderReport as R;
    use WithdrawalStatus as S;
    let to = |v: &[S]| Fold::Move(v.to_vec());
    // A reversal the withdrawal learns before it is PAID nets to nothing paid: it
    // settles as a failure for good. After PAID it is a contradiction (below).
    let reversed_as_failure = R::Failed {
        code: "REVERSED".to_owned(),
        recoverable: false,
    };
    let report = match (status, report) {
        (S::Paid, R::Reversed) => return Fold::Contradiction,
        (_, R::Reversed) => &reversed_as_failure,
        _ => report,
    };
    match (status, report) {
        (S::Requested, _) => Fold::Contradiction,
        (S::Rejected, R::Succeeded | R::Accepted) => Fold::Contradiction,
        (S::Rejected, _) => Fold::Stay,

        (S::PayoutPending | S::FundsHeld, R::Accepted) => to(&[S::Processing]),
        (S::PayoutPending | S::FundsHeld, R::Succeeded) => to(&[S::Processing, S::Paid]),
        (S::PayoutPending | S::FundsHeld, R::Unknown { .. }) => to(&[S::ProviderUnknown]),
        (S::PayoutPending | S::FundsHeld, R::Absent) => Fold::Stay,
        (
            S::PayoutPending,
            R::Failed {
                recoverable: true, ..
            },
        ) => to(&[S::Processing, S::FundsHeld]),
        (
            S::PayoutPending,
            R::Refused {
                recoverable: true, ..
            },
        ) => to(&[S::FundsHeld]),
        (
            S::FundsHeld,
            R::Failed {
                recoverable: true, ..
            }
            | R::Refused {
                recoverable: true, ..
            },
        ) => Fold::Stay,
        (
            S::PayoutPending | S::FundsHeld,
            R::Failed {
                recoverable: false, ..
            }
            | R::Refused {
                recoverable: false, ..
            },
        ) => to(&[S::Failed]),

        (S::ProviderUnknown, R::Accepted) => to(&[S::Processing]),
        (S::ProviderUnknown, R::Succeeded) => to(&[S::Processing, S::Paid]),
        (S::ProviderUnknown, R::Failed { recoverable, .. }) => to(&[
            S::Processing,
            if *recoverable {
                S::FundsHeld
            } else {
                S::Failed
            },
        ]),
        (S::ProviderUnknown, R::Absent) => to(&[S::PayoutPending]),
        (S::ProviderUnknown, R::Unknown { .. } | R::Refused { .. }) => Fold::Stay,

        (S::Processing, R::Succeeded) => to(&[S::Paid]),
        (S::Processing, R::Failed { recoverable, .. }) => to(&[if *recoverable {
            S::FundsHeld
        } else {
            S::Failed
        }]),
        (S::Processing, R::Accepted | R::Unknown { .. }) => Fold::Stay,
        (S::Processing, R::Absent | R::Refused { .. }) => Fold::Contradiction,

        (S::Paid, R::Succeeded | R::Accepted | R::Unknown { .. }) => Fold::Stay,
        (S::Paid, R::Failed { .. } | R::Refused { .. } | R::Absent) => Fold::Contradiction,
        (S::Failed, R::Succeeded) => Fold::Contradiction,
        (S::Failed, _) => Fold::Stay,
        // Mapped to a failure or a contradiction above.
        (_, R::Reversed) => Fold::Contradiction,
    }
}

impl WithdrawalState {
    /// The provider's reference (and `Idempotency-Key`) of the current round.
    pub fn idempotency_key(&self) -> String {
        reference(&self.withdrawal_id, self.round)
    }

    fn decided(&self, cmd: Decision) -> Result<Decided, WithdrawalError> {
        if self.status != WithdrawalStatus::Requested {
            return Err(WithdrawalError::NotReviewable {
                status: self.status,
            });
        }
        if cmd.reason.trim().is_empty() {
            return Err(WithdrawalError::ReasonMissing);
        }
        Ok(Decided {
            actor: cmd.actor,
            reason: cmd.reason,
            at: cmd.now,
        })
    }

    fn start_attempt(&self, cmd: StartAttempt) -> Result<Vec<WithdrawalEvent>, WithdrawalError> {
        if !matches!(
            self.status,
            WithdrawalStatus::PayoutPending | WithdrawalStatus::FundsHeld
        ) {
            return Err(WithdrawalError::NotPayable {
                status: self.status,
            });
        }
        if let Some(attempt) = self.open_attempt {
            return Err(WithdrawalError::AttemptOpen { attempt });
        }
        if self.attempts >= PAYOUT_ATTEMPTS_MAX {
            return Err(WithdrawalError::AttemptsExhausted {
                max: PAYOUT_ATTEMPTS_MAX,
            });
        }
        Ok(vec![WithdrawalEvent::PayoutAttemptStarted(
            PayoutAttemptStarted {
                attempt: self.attempts + 1,
                idempotency_key: self.idempotency_key(),
                actor: cmd.actor,
                at: cmd.now,
            },
        )])
    }

    fn record_outcome(&self, cmd: RecordOutcome) -> Result<Vec<WithdrawalEvent>, WithdrawalError> {
        if self.status == WithdrawalStatus::Requested {
            return Err(WithdrawalError::NotPayable {
                status: self.status,
            });
        }
        let closes = match (cmd.source, cmd.attempt) {
            (OutcomeSource::Call, Some(n)) if self.open_attempt == Some(n) => Some(n),
            // The answer of an attempt already closed (recorded as interrupted,
            // say): the status it would report was or will be learned by a query.
            (OutcomeSource::Call, _) => return Ok(vec![]),
            _ => None,
        };
        let current = cmd.idempotency_key == self.idempotency_key();
        let fold = match (current, &cmd.report) {
            (true, report) => targets(self.status, report),
            // A payout under an earlier reference failed for good at the provider;
            // any success reported for it is a contradiction, the rest is history.
            (false, ProviderReport::Succeeded) => Fold::Contradiction,
            (false, _) => Fold::Stay,
        };
        let reason = describe(&cmd.report);
        let mut outcome = PayoutOutcome {
            actor: cmd.actor,
            reason,
            source: cmd.source,
            attempt: closes,
            idempotency_key: cmd.idempotency_key,
            provider_payout_id: cmd.provider_payout_id,
            call: cmd.call,
            at: cmd.now,
        };
        let mut events = Vec::new();
        match fold {
            Fold::Move(path) => {
                for to in path {
                    events.push(moved_to(to, outcome.clone()));
                    // Only the first event closes the attempt and carries the call.
                    outcome.attempt = None;
                    outcome.call = None;
                }
            }
            Fold::Stay if closes.is_some() => {
                events.push(WithdrawalEvent::PayoutAttemptEnded(outcome))
            }
            Fold::Stay => {}
            Fold::Contradiction => events.push(WithdrawalEvent::ProviderContradicted(outcome)),
        }
        Ok(events)
    }
}

fn moved_to(to: WithdrawalStatus, outcome: PayoutOutcome) -> WithdrawalEvent {
    use WithdrawalStatus as S;
    match to {
        S::Processing => WithdrawalEvent::PayoutAccepted(outcome),
        S::ProviderUnknown => WithdrawalEvent::PayoutOutcomeUnknown(outcome),
        S::PayoutPending => WithdrawalEvent::PayoutConfirmedAbsent(outcome),
        S::FundsHeld => WithdrawalEvent::PayoutFundsHeld(outcome),
        S::Paid => WithdrawalEvent::PayoutSucceeded(outcome),
        // `targets` moves to no other status.
        S::Failed | S::Requested | S::Rejected => WithdrawalEvent::PayoutFailed(outcome),
    }
}

/// The reason text of an outcome event.
fn describe(report: &ProviderReport) -> String {
    match report {
        ProviderReport::Accepted => "provider accepted the payout".into(),
        ProviderReport::Succeeded => "provider paid".into(),
        ProviderReport::Failed { code, recoverable } => {
            format!("provider failed the payout: {code} (recoverable: {recoverable})")
        }
        ProviderReport::Refused { code, recoverable } => {
            format!("provider refused the payout: {code} (recoverable: {recoverable})")
        }
        ProviderReport::Absent => "provider has no payout under the reference".into(),
        ProviderReport::Reversed => {
            "provider reversed the payout: the destination bank returned the money to the \
             provider's balance"
                .into()
        }
        ProviderReport::Unknown { reason } => format!("outcome unknown: {reason}"),
    }
}

/// The provider reference of `round`: the withdrawal id, then `<id>:r<round>`.
pub fn reference(withdrawal_id: &str, round: u32) -> String {
    if round == 0 {
        withdrawal_id.to_owned()
    } else {
        format!("{withdrawal_id}:r{round}")
    }
}

/// The withdrawal id a provider reference belongs to.
pub fn withdrawal_of_reference(reference: &str) -> &str {
    match reference.rsplit_once(":r") {
        Some((id, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => id,
        _ => reference,
    }
}

fn request(cmd: RequestWithdrawal) -> Result<Vec<WithdrawalEvent>, WithdrawalError> {
    if cmd.withdrawal_id.as_str().len() > WITHDRAWAL_ID_LEN_MAX {
        return Err(WithdrawalError::IdTooLong {
            max: WITHDRAWAL_ID_LEN_MAX,
        });
    }
    let auto = cmd.review == Review::Auto;
    let mut events = vec![WithdrawalEvent::WithdrawalRequested(WithdrawalRequested {
        withdrawal_id: cmd.withdrawal_id.as_str().to_owned(),
        user_id: cmd.user_id.as_str().to_owned(),
        wallet_id: cmd.wallet_id.as_str().to_owned(),
        currency: cmd.currency,
        amount_minor: cmd.amount_minor.get(),
        provider: cmd.provider.as_str().to_owned(),
        destination: cmd.destination,
        review: cmd.review,
        actor: cmd.actor,
        requested_at: cmd.now,
    })];
    if auto {
        events.push(WithdrawalEvent::WithdrawalApproved(Decided {
            actor: RISK_RULE_ACTOR.to_owned(),
            reason: "auto-approved: the risk rule found nothing to review".to_owned(),
            at: cmd.now,
        }));
    }
    Ok(events)
}

impl Withdrawal {
    /// The wallet command `event` requires, if any, and the wallet it goes to:
    ///
    /// | event | wallet command | ledger key |
    /// |---|---|---|
    /// | WithdrawalRequested | FreezeForWithdrawal | WITHDRAWAL / id / WITHDRAW_FREEZE |
    /// | WithdrawalRejected, PayoutFailed | Unfreeze | WITHDRAWAL / id / WITHDRAW_UNFREEZE |
    /// | PayoutSucceeded | PayOutFrozen to the provider | WITHDRAWAL / id / WITHDRAW_PAYOUT |
    ///
    /// Every other event moves no money. An error means the stream is malformed.
    pub fn wallet_effect(
        &self,
        event: &WithdrawalEvent,
    ) -> Result<Option<WalletEffect>, InvariantViolation> {
        let (id, wallet_id, currency, amount, provider) = match (event, &self.record) {
            (WithdrawalEvent::WithdrawalRequested(e), _) => (
                &e.withdrawal_id,
                &e.wallet_id,
                e.currency,
                e.amount_minor,
                &e.provider,
            ),
            (_, Some(s)) => (
                &s.withdrawal_id,
                &s.wallet_id,
                s.currency,
                s.amount_minor,
                &s.provider,
            ),
            (_, None) => {
                return Err(InvariantViolation(format!(
                    "{} of a withdrawal that was never requested",
                    event.name()
                )))
            }
        };
        let parse = |s: &str| {
            BoundedId::parse(s).map_err(|e| InvariantViolation(format!("bad id {s}: {e}")))
        };
        let funds = |counterparty: Option<BoundedId>| {
            Ok::<_, InvariantViolation>(MoveFunds {
                ref_type: parse(WITHDRAWAL_REF_TYPE)?,
                ref_id: parse(id)?,
                amount_minor: AmountMinor::parse(amount)
                    .map_err(|e| InvariantViolation(format!("amount {amount}: {e}")))?,
                currency: Some(currency),
                counterparty,
            })
        };
        let command = match event {
            WithdrawalEvent::WithdrawalRequested(_) => {
                WalletCommand::FreezeForWithdrawal(funds(None)?)
            }
            WithdrawalEvent::WithdrawalRejected(_) | WithdrawalEvent::PayoutFailed(_) => {
                WalletCommand::Unfreeze(funds(None)?)
            }
            WithdrawalEvent::PayoutSucceeded(_) => {
                WalletCommand::PayOutFrozen(funds(Some(parse(provider)?))?)
            }
            _ => return Ok(None),
        };
        Ok(Some(WalletEffect {
            wallet_id: parse(wallet_id)?,
            command,
        }))
    }
}

impl Decide for Withdrawal {
    const SNAPSHOT_VERSION: i32 = 1;
    /// Withdrawal state changes are money facts told to the outside world (R-OUT-1).
    const OUTBOX: bool = true;

    fn decide(&self, command: WithdrawalCommand) -> Result<Vec<WithdrawalEvent>, WithdrawalError> {
        use WithdrawalCommand as C;
        match (command, &self.record) {
            (C::Request(cmd), None) => request(*cmd),
            (C::Request(cmd), Some(s)) => {
                let same = cmd.user_id.as_str() == s.user_id
                    && cmd.wallet_id.as_str() == s.wallet_id
                    && cmd.amount_minor.get() == s.amount_minor
                    && cmd.currency == s.currency;
                if same {
                    Ok(vec![])
                } else {
                    Err(WithdrawalError::IdTaken {
                        id: s.withdrawal_id.clone(),
                    })
                }
            }
            (_, None) => Err(WithdrawalError::NotFound),
            (C::Approve(cmd), Some(s)) => {
                Ok(vec![WithdrawalEvent::WithdrawalApproved(s.decided(cmd)?)])
            }
            (C::Reject(cmd), Some(s)) => {
                Ok(vec![WithdrawalEvent::WithdrawalRejected(s.decided(cmd)?)])
            }
            (C::StartAttempt(cmd), Some(s)) => s.start_attempt(cmd),
            (C::RecordOutcome(cmd), Some(s)) => s.record_outcome(*cmd),
        }
    }

    fn check(&self, event: &WithdrawalEvent) -> Result<(), InvariantViolation> {
        let fail = |why: String| Err(InvariantViolation(format!("{}: {why}", event.name())));
        let s = match (&self.record, event) {
            (None, WithdrawalEvent::WithdrawalRequested(e)) => {
                if e.amount_minor <= 0 {
                    return fail(format!("amount {} is not positive", e.amount_minor));
                }
                return Ok(());
            }
            (Some(_), WithdrawalEvent::WithdrawalRequested(_)) => {
                return fail("withdrawal already requested".into())
            }
            (None, _) => return fail("withdrawal was never requested".into()),
            (Some(s), _) => s,
        };
        if let Some(to) = event.status_after() {
            if !s.status.can_move_to(to) {
                return fail(format!(
                    "{} → {} is not an edge",
                    s.status.as_str(),
                    to.as_str()
                ));
            }
        }
        match event {
            WithdrawalEvent::PayoutAttemptStarted(e) => {
                if s.open_attempt.is_some() || e.attempt != s.attempts + 1 {
                    return fail(format!(
                        "attempt {} does not follow {}",
                        e.attempt, s.attempts
                    ));
                }
                if e.idempotency_key != s.idempotency_key() {
                    return fail(format!(
                        "reference {} is not the current one",
                        e.idempotency_key
                    ));
                }
            }
            other => {
                if let Some(o) = other.outcome() {
                    if o.attempt.is_some() && o.attempt != s.open_attempt {
                        return fail(format!("attempt {:?} is not open", o.attempt));
                    }
                }
            }
        }
        Ok(())
    }

    /// Withdrawal events are not ledger entries: the wallet events they cause are.
    fn ledger_ref(_event: &WithdrawalEvent) -> Option<LedgerRef> {
        None
    }
}

impl Aggregate for Withdrawal {
    const TYPE: &'static str = WITHDRAWAL_AGGREGATE_TYPE;
    type Command = WithdrawalCommand;
    type Event = WithdrawalEvent;
    type Error = WithdrawalError;
    type Services = ();

    async fn handle(
        &mut self,
        command: WithdrawalCommand,
        _service: &(),
        sink: &EventSink<Self>,
    ) -> Result<(), WithdrawalError> {
        for event in self.decide(command)? {
            sink.write(event, self).await;
        }
        Ok(())
    }

    fn apply(&mut self, event: WithdrawalEvent) {
        debug_assert_eq!(self.check(&event), Ok(()));
        let to = event.status_after();
        match (event, &mut self.record) {
            (WithdrawalEvent::WithdrawalRequested(e), _) => {
                self.record = Some(WithdrawalState {
                    withdrawal_id: e.withdrawal_id,
                    user_id: e.user_id,
                    wallet_id: e.wallet_id,
                    currency: e.currency,
                    amount_minor: e.amount_minor,
                    provider: e.provider,
                    destination: e.destination,
                    review: e.review,
                    status: WithdrawalStatus::Requested,
                    requested_at: e.requested_at,
                    attempts: 0,
                    open_attempt: None,
                    round: 0,
                    provider_payout_id: None,
                    contradictions: 0,
                });
            }
            (WithdrawalEvent::PayoutAttemptStarted(e), Some(s)) => {
                s.attempts = e.attempt;
                s.open_attempt = Some(e.attempt);
            }
            (other, Some(s)) => {
                if let Some(o) = other.outcome() {
                    if o.attempt.is_some() {
                        s.open_attempt = None;
                    }
                    if let Some(id) = &o.provider_payout_id {
                        if !matches!(other, WithdrawalEvent::ProviderContradicted(_)) {
                            s.provider_payout_id = Some(id.clone());
                        }
                    }
                }
                if matches!(other, WithdrawalEvent::ProviderContradicted(_)) {
                    s.contradictions += 1;
                }
                if let Some(to) = to {
                    if to == WithdrawalStatus::FundsHeld {
                        s.round += 1;
                    }
                    s.status = to;
                }
            }
            (_, None) => {}
        }
    }
}

#[cfg(test)]
mod tests;
