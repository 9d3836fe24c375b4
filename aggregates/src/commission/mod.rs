//! The commission aggregate (SPEC §4): one stream per order × beneficiary role
//! (stream id [`commission_id`]), moving only along the R-COM-1 transition table
//! ([`COMMISSION_EDGES`]), carrying its amount, currency, beneficiary, wallet,
//! `release_at` and the rule snapshot that priced it (R-INV-5).
//!
//! Money moves through the wallet aggregate: [`Commission::wallet_effect`] names the
//! one wallet command each commission event requires (credit, release or reverse
//! pending; block or unblock withdrawals), with `ref_type = COMMISSION` and `ref_id =
//! commission id`, so the wallet's unique ledger key `(ref_type, ref_id,
//! entry_type)` makes each effect happen once (R-INV-1).

mod commands;
mod events;
mod transitions;

pub use crate::affiliate_values::{
    commission_amounts, commission_base_minor, share_minor, AmountError, BeneficiaryRole,
    CommissionAmounts,
};
pub use commands::{
    CommissionCommand, ReactToOrder, RecordCommission, ReleaseCommission, ResolveRecovery,
};
pub use events::{
    CommissionEvent, CommissionRecorded, CommissionReleased, CommissionUnfrozen, OrderReaction,
    RecoveryManuallyResolved, COMMISSION_EVENT_VERSION,
};
pub use transitions::{reaction, CommissionStatus, COMMISSION_EDGES};

use crate::affiliate_values::{OrderSignal, OrderStatus};
use crate::commission_rules::RuleSnapshot;
use crate::decide::{Decide, InvariantViolation, LedgerRef};
use crate::money::{AmountMinor, BoundedId, Currency};
pub use crate::wallet::WalletEffect;
use crate::wallet::{BlockRef, MoveFunds, WalletCommand};
use chrono::{DateTime, TimeDelta, Utc};
use cqrs_es::event_sink::EventSink;
use cqrs_es::Aggregate;
use serde::{Deserialize, Serialize};

/// The stream type of commissions in the event store.
pub const COMMISSION_AGGREGATE_TYPE: &str = "commission";

/// Wallet `ref_type` of a commission's credit, release and reversal.
pub const COMMISSION_REF_TYPE: &str = "COMMISSION";
/// Wallet `ref_type` of a partial reversal when a frozen commission comes back lower.
pub const COMMISSION_ADJUSTMENT_REF_TYPE: &str = "COMMISSION_ADJUSTMENT";
/// Wallet `ref_type` of the withdrawal block a recovery review holds (R-COM-3).
pub const RECOVERY_REVIEW_REF_TYPE: &str = "RECOVERY_REVIEW";

/// The stream id of a commission: `<order stream id>:<ROLE>`, e.g.
/// `SHOPEE:5781234:CASHBACK`. One order × role has one commission, ever.
pub fn commission_id(order_id: &str, role: BeneficiaryRole) -> String {
    format!("{order_id}:{}", role.as_str())
}

/// The state of a commission stream; `record` is `None` until it is recorded.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Commission {
    pub record: Option<CommissionState>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommissionState {
    pub commission_id: String,
    pub order_id: String,
    pub role: BeneficiaryRole,
    pub beneficiary_user_id: String,
    pub wallet_id: String,
    pub currency: Currency,
    pub status: CommissionStatus,
    /// What the wallet holds for it now (pending, or available once released).
    pub amount_minor: i64,
    /// What was first credited; `amount_minor` only ever goes down from it.
    pub recorded_amount_minor: i64,
    pub release_at: DateTime<Utc>,
    pub rules: RuleSnapshot,
    /// The newest order revision applied; signals at or below it are ignored.
    pub last_order_revision: u32,
}

/// Why a commission command was refused. Nothing is written when a command is
/// refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommissionError {
    #[error("commission does not exist; record it first")]
    NotFound,
    #[error("commission id {given} is not {expected} (order × role)")]
    IdMismatch { given: String, expected: String },
    #[error("commission is already recorded for another beneficiary, wallet or order")]
    AlreadyRecorded,
    #[error("order is {status:?}; a void order earns no commission")]
    OrderNotValid { status: OrderStatus },
    #[error("the order yields 0 for this role; there is nothing to credit")]
    NothingToCredit,
    #[error("release time is out of range")]
    ReleaseAtOutOfRange,
    #[error("a commission in {} cannot move to {}", from.as_str(), to.as_str())]
    IllegalTransition {
        from: CommissionStatus,
        to: CommissionStatus,
    },
    #[error("commission is not due before {release_at} (now {now})")]
    NotDue {
        release_at: DateTime<Utc>,
        now: DateTime<Utc>,
    },
    #[error("{0}")]
    Amount(AmountError),
}

impl CommissionError {
    /// Stable machine-readable code for clients.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotFound => "COMMISSION_NOT_FOUND",
            Self::IdMismatch { .. } => "COMMISSION_ID_MISMATCH",
            Self::AlreadyRecorded => "COMMISSION_ALREADY_RECORDED",
            Self::OrderNotValid { .. } => "ORDER_NOT_VALID",
            Self::NothingToCredit => "NOTHING_TO_CREDIT",
            Self::ReleaseAtOutOfRange => "RELEASE_AT_OUT_OF_RANGE",
            Self::IllegalTransition { .. } => "ILLEGAL_COMMISSION_TRANSITION",
            Self::NotDue { .. } => "COMMISSION_NOT_DUE",
            Self::Amount(e) => e.code(),
        }
    }

    /// The request field the error is about, when there is one.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            Self::NotFound | Self::AlreadyRecorded | Self::IllegalTransition { .. } => None,
            Self::IdMismatch { .. } => Some("commission_id"),
            Self::OrderNotValid { .. } => Some("order_status"),
            Self::NothingToCredit => Some("platform_commission_minor"),
            Self::ReleaseAtOutOfRange => Some("ordered_at"),
            Self::NotDue { .. } => Some("now"),
            Self::Amount(e) => Some(e.field()),
        }
    }
}

impl CommissionState {
    fn transition(&self, to: CommissionStatus) -> Result<(), CommissionError> {
        if self.status.can_move_to(to) {
            Ok(())
        } else {
            Err(CommissionError::IllegalTransition {
                from: self.status,
                to,
            })
        }
    }

    fn react(&self, cmd: ReactToOrder) -> Result<Vec<CommissionEvent>, CommissionError> {
        if cmd.order_revision <= self.last_order_revision {
            return Ok(vec![]);
        }
        let Some(to) = reaction(self.status, cmd.signal) else {
            return Ok(vec![]);
        };
        self.transition(to)?;
        let reacted = |amount_minor| OrderReaction {
            order_revision: cmd.order_revision,
            signal: cmd.signal,
            order_updated_at: cmd.order_updated_at,
            amount_minor,
        };
        let event = match to {
            CommissionStatus::Frozen => {
                CommissionEvent::CommissionFrozen(reacted(self.amount_minor))
            }
            CommissionStatus::Invalid => {
                CommissionEvent::CommissionInvalidated(reacted(self.amount_minor))
            }
            CommissionStatus::RecoveryReview => {
                CommissionEvent::RecoveryReviewOpened(reacted(self.amount_minor))
            }
            CommissionStatus::Pending => {
                let amount_minor = self.amount_minor.min(cmd.amount_minor.get());
                if amount_minor == 0 {
                    // Nothing left to earn: the refund took it all.
                    self.transition(CommissionStatus::Invalid)?;
                    CommissionEvent::CommissionInvalidated(reacted(self.amount_minor))
                } else {
                    let reduced_by_minor = self.amount_minor - amount_minor;
                    CommissionEvent::CommissionUnfrozen(CommissionUnfrozen {
                        order_revision: cmd.order_revision,
                        signal: cmd.signal,
                        order_updated_at: cmd.order_updated_at,
                        amount_minor,
                        reduced_by_minor,
                        adjustment_ref_id: (reduced_by_minor > 0)
                            .then(|| adjustment_ref_id(&self.commission_id, cmd.order_revision)),
                    })
                }
            }
            // `reaction` only yields the four targets above.
            other => {
                return Err(CommissionError::IllegalTransition {
                    from: self.status,
                    to: other,
                })
            }
        };
        Ok(vec![event])
    }

    fn release(&self, cmd: ReleaseCommission) -> Result<Vec<CommissionEvent>, CommissionError> {
        // Re-checked here, on the state the append is decided on: the settlement
        // scan's result grants no right to process (R-COM-2).
        self.transition(CommissionStatus::Available)?;
        if self.release_at > cmd.now {
            return Err(CommissionError::NotDue {
                release_at: self.release_at,
                now: cmd.now,
            });
        }
        Ok(vec![CommissionEvent::CommissionReleased(
            CommissionReleased {
                amount_minor: self.amount_minor,
                release_at: self.release_at,
                released_at: cmd.now,
            },
        )])
    }

    fn resolve(&self, cmd: ResolveRecovery) -> Result<Vec<CommissionEvent>, CommissionError> {
        self.transition(CommissionStatus::ManualResolved)?;
        Ok(vec![CommissionEvent::RecoveryManuallyResolved(
            RecoveryManuallyResolved {
                actor: cmd.actor.as_str().to_owned(),
                reason: cmd.reason.as_str().to_owned(),
                resolved_at: cmd.resolved_at,
                amount_minor: self.amount_minor,
            },
        )])
    }
}

/// The ledger `ref_id` of a reduction: unique per commission and order revision.
pub fn adjustment_ref_id(commission_id: &str, order_revision: u32) -> String {
    format!("{commission_id}:ADJ{order_revision}")
}

fn record(cmd: RecordCommission) -> Result<Vec<CommissionEvent>, CommissionError> {
    let expected = commission_id(cmd.order_id.as_str(), cmd.role);
    if cmd.commission_id.as_str() != expected {
        return Err(CommissionError::IdMismatch {
            given: cmd.commission_id.as_str().to_owned(),
            expected,
        });
    }
    if cmd.order_status.is_void() {
        return Err(CommissionError::OrderNotValid {
            status: cmd.order_status,
        });
    }
    let order_amounts = commission_amounts(
        cmd.gmv_minor.get(),
        cmd.platform_commission_minor.get(),
        &cmd.rules,
    )
    .map_err(CommissionError::Amount)?;
    let amount_minor = order_amounts.for_role(cmd.role);
    if amount_minor == 0 {
        return Err(CommissionError::NothingToCredit);
    }
    let release_at = cmd
        .ordered_at
        .checked_add_signed(TimeDelta::days(i64::from(cmd.rules.release_delay_days)))
        .ok_or(CommissionError::ReleaseAtOutOfRange)?;
    let mut events = vec![CommissionEvent::CommissionRecorded(CommissionRecorded {
        commission_id: expected,
        order_id: cmd.order_id.as_str().to_owned(),
        role: cmd.role,
        beneficiary_user_id: cmd.beneficiary_user_id.as_str().to_owned(),
        wallet_id: cmd.wallet_id.as_str().to_owned(),
        currency: cmd.currency,
        amount_minor,
        order_amounts,
        ordered_at: cmd.ordered_at,
        release_at,
        rules: cmd.rules,
        order_revision: cmd.order_revision,
    })];
    // A refund already open when the commission is first recorded: hold it at once.
    let open_refund = match cmd.order_status {
        OrderStatus::Refunding => Some(OrderSignal::RefundStarted),
        OrderStatus::PartiallyRefunded => Some(OrderSignal::PartiallyRefunded),
        _ => None,
    };
    if let Some(signal) = open_refund {
        events.push(CommissionEvent::CommissionFrozen(OrderReaction {
            order_revision: cmd.order_revision,
            signal,
            order_updated_at: cmd.order_updated_at,
            amount_minor,
        }));
    }
    Ok(events)
}

impl Commission {
    /// The wallet command `event` requires, if any, and the wallet it goes to. Call
    /// it with this commission's state (before or after applying `event`: only its
    /// ids are read). The ingest unit and the settlement job append it in the same
    /// unit of work as the commission event.
    ///
    /// | event | wallet command | ledger key |
    /// |---|---|---|
    /// | CommissionRecorded | CreditPending | COMMISSION / id / CREDIT_PENDING |
    /// | CommissionReleased | ReleasePending | COMMISSION / id / RELEASE_PENDING |
    /// | CommissionInvalidated | ReversePending | COMMISSION / id / REVERSE_PENDING |
    /// | CommissionUnfrozen, reduced | ReversePending | COMMISSION_ADJUSTMENT / id:ADJ<rev> / REVERSE_PENDING |
    /// | RecoveryReviewOpened | BlockWithdrawals | RECOVERY_REVIEW / id (no ledger entry) |
    /// | RecoveryManuallyResolved | UnblockWithdrawals | RECOVERY_REVIEW / id |
    /// | CommissionFrozen, unreduced CommissionUnfrozen | none (the money stays in pending) | |
    ///
    /// An error means the event is malformed (a non-positive amount or a bad id).
    pub fn wallet_effect(
        &self,
        event: &CommissionEvent,
    ) -> Result<Option<WalletEffect>, InvariantViolation> {
        let (commission_id, wallet_id, currency) = match (event, &self.record) {
            (CommissionEvent::CommissionRecorded(e), _) => {
                (e.commission_id.as_str(), e.wallet_id.as_str(), e.currency)
            }
            (_, Some(s)) => (s.commission_id.as_str(), s.wallet_id.as_str(), s.currency),
            (_, None) => {
                return Err(InvariantViolation(format!(
                    "{} of a commission that was never recorded",
                    event.name()
                )))
            }
        };
        let id = |s: &str| {
            BoundedId::parse(s).map_err(|e| InvariantViolation(format!("bad id {s}: {e}")))
        };
        let funds = |ref_type: &str, ref_id: &str, amount_minor: i64| {
            Ok::<_, InvariantViolation>(MoveFunds {
                ref_type: id(ref_type)?,
                ref_id: id(ref_id)?,
                amount_minor: AmountMinor::parse(amount_minor).map_err(|e| {
                    InvariantViolation(format!("{} amount {amount_minor}: {e}", event.name()))
                })?,
                currency: Some(currency),
                counterparty: None,
            })
        };
        let block = |reason: Option<String>| {
            Ok::<_, InvariantViolation>(BlockRef {
                ref_type: id(RECOVERY_REVIEW_REF_TYPE)?,
                ref_id: id(commission_id)?,
                reason,
            })
        };
        let command = match event {
            CommissionEvent::CommissionRecorded(e) => WalletCommand::CreditPending(funds(
                COMMISSION_REF_TYPE,
                commission_id,
                e.amount_minor,
            )?),
            CommissionEvent::CommissionReleased(e) => WalletCommand::ReleasePending(funds(
                COMMISSION_REF_TYPE,
                commission_id,
                e.amount_minor,
            )?),
            CommissionEvent::CommissionInvalidated(e) => WalletCommand::ReversePending(funds(
                COMMISSION_REF_TYPE,
                commission_id,
                e.amount_minor,
            )?),
            CommissionEvent::CommissionUnfrozen(e) => match &e.adjustment_ref_id {
                Some(ref_id) if e.reduced_by_minor > 0 => WalletCommand::ReversePending(funds(
                    COMMISSION_ADJUSTMENT_REF_TYPE,
                    ref_id,
                    e.reduced_by_minor,
                )?),
                _ => return Ok(None),
            },
            CommissionEvent::RecoveryReviewOpened(e) => {
                WalletCommand::BlockWithdrawals(block(Some(format!(
                    "commission {commission_id} refunded after release ({:?}); {} at risk",
                    e.signal, e.amount_minor
                )))?)
            }
            CommissionEvent::RecoveryManuallyResolved(_) => {
                WalletCommand::UnblockWithdrawals(block(None)?)
            }
            CommissionEvent::CommissionFrozen(_) => return Ok(None),
        };
        Ok(Some(WalletEffect {
            wallet_id: id(wallet_id)?,
            command,
        }))
    }
}

impl Decide for Commission {
    const SNAPSHOT_VERSION: i32 = 1;
    /// Earnings changes are money facts told to the outside world (R-OUT-1).
    const OUTBOX: bool = true;

    fn decide(&self, command: CommissionCommand) -> Result<Vec<CommissionEvent>, CommissionError> {
        use CommissionCommand as C;
        match (command, &self.record) {
            (C::Record(cmd), None) => record(cmd),
            (C::Record(cmd), Some(s)) => {
                // A replay of the ingest that recorded it writes nothing (R-INV-1).
                let same = cmd.order_id.as_str() == s.order_id
                    && cmd.role == s.role
                    && cmd.beneficiary_user_id.as_str() == s.beneficiary_user_id
                    && cmd.wallet_id.as_str() == s.wallet_id;
                if same {
                    Ok(vec![])
                } else {
                    Err(CommissionError::AlreadyRecorded)
                }
            }
            (_, None) => Err(CommissionError::NotFound),
            (C::ReactToOrder(cmd), Some(s)) => s.react(cmd),
            (C::Release(cmd), Some(s)) => s.release(cmd),
            (C::ResolveRecovery(cmd), Some(s)) => s.resolve(cmd),
        }
    }

    fn check(&self, event: &CommissionEvent) -> Result<(), InvariantViolation> {
        let fail = |why: String| Err(InvariantViolation(format!("{}: {why}", event.name())));
        let s = match (&self.record, event) {
            (None, CommissionEvent::CommissionRecorded(e)) => {
                if e.amount_minor <= 0 {
                    return fail(format!("amount {} is not positive", e.amount_minor));
                }
                return Ok(());
            }
            (Some(_), CommissionEvent::CommissionRecorded(_)) => {
                return fail("commission already recorded".into())
            }
            (None, _) => return fail("commission was never recorded".into()),
            (Some(s), _) => s,
        };
        let to = event.target_status();
        if !s.status.can_move_to(to) {
            return fail(format!(
                "{} → {} is not an edge",
                s.status.as_str(),
                to.as_str()
            ));
        }
        if event
            .order_revision()
            .is_some_and(|r| r < s.last_order_revision)
        {
            return fail("an older order revision than the last applied".into());
        }
        let amount_ok = match event {
            CommissionEvent::CommissionUnfrozen(e) => {
                e.reduced_by_minor >= 0
                    && e.amount_minor > 0
                    && s.amount_minor.checked_sub(e.reduced_by_minor) == Some(e.amount_minor)
                    && e.adjustment_ref_id.is_some() == (e.reduced_by_minor > 0)
            }
            CommissionEvent::CommissionFrozen(e)
            | CommissionEvent::CommissionInvalidated(e)
            | CommissionEvent::RecoveryReviewOpened(e) => e.amount_minor == s.amount_minor,
            CommissionEvent::CommissionReleased(e) => e.amount_minor == s.amount_minor,
            CommissionEvent::RecoveryManuallyResolved(e) => e.amount_minor == s.amount_minor,
            CommissionEvent::CommissionRecorded(_) => false,
        };
        if !amount_ok {
            return fail(format!("amount does not follow from {}", s.amount_minor));
        }
        Ok(())
    }

    /// Commission events are not ledger entries: the wallet events they cause are
    /// (see [`Commission::wallet_effect`]). One commission per stream is guaranteed
    /// by the stream itself (`CommissionRecorded` only on an empty stream).
    fn ledger_ref(_event: &CommissionEvent) -> Option<LedgerRef> {
        None
    }
}

impl Aggregate for Commission {
    const TYPE: &'static str = COMMISSION_AGGREGATE_TYPE;
    type Command = CommissionCommand;
    type Event = CommissionEvent;
    type Error = CommissionError;
    type Services = ();

    async fn handle(
        &mut self,
        command: CommissionCommand,
        _service: &(),
        sink: &EventSink<Self>,
    ) -> Result<(), CommissionError> {
        for event in self.decide(command)? {
            sink.write(event, self).await;
        }
        Ok(())
    }

    fn apply(&mut self, event: CommissionEvent) {
        debug_assert_eq!(self.check(&event), Ok(()));
        let to = event.target_status();
        let revision = event.order_revision();
        match (event, &mut self.record) {
            (CommissionEvent::CommissionRecorded(e), _) => {
                self.record = Some(CommissionState {
                    commission_id: e.commission_id,
                    order_id: e.order_id,
                    role: e.role,
                    beneficiary_user_id: e.beneficiary_user_id,
                    wallet_id: e.wallet_id,
                    currency: e.currency,
                    status: CommissionStatus::Pending,
                    amount_minor: e.amount_minor,
                    recorded_amount_minor: e.amount_minor,
                    release_at: e.release_at,
                    rules: e.rules,
                    last_order_revision: e.order_revision,
                });
            }
            (other, Some(s)) => {
                s.status = to;
                if let Some(r) = revision {
                    s.last_order_revision = s.last_order_revision.max(r);
                }
                if let CommissionEvent::CommissionUnfrozen(e) = other {
                    s.amount_minor = e.amount_minor;
                }
            }
            (_, None) => {}
        }
    }
}

#[cfg(test)]
mod tests;
