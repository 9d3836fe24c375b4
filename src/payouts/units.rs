//! The units of work that change a withdrawal, each one transaction with the wallet
//! effects its events require (`Withdrawal::wallet_effect`): the request (Tx1 of
//! R-PAY-1: withdrawal + daily count + freeze + payout task), an operator's
//! decision, an attempt recorded before a provider call, and an outcome recorded
//! after one. Lock order (R-WAL-3): the withdrawal, then its day counter, then the
//! wallet.

use crate::infra::jobs::JobSubmit;
use crate::infra::store::{DynStore, Fence, IdempotencyRow, Metadata};
use crate::runtime::unit::{run_unit, UnitBuilder, UnitError, UnitOutcome};
use factledger_aggregates::wallet::{Wallet, WalletError};
use factledger_aggregates::withdrawal::limits::{
    day_stream_id, CountWithdrawal, LimitError, WithdrawalDay,
};
use factledger_aggregates::withdrawal::profile::ProfileError;
use factledger_aggregates::withdrawal::{
    Decision, RecordOutcome, RequestWithdrawal, StartAttempt, Withdrawal, WithdrawalCommand,
    WithdrawalError, WithdrawalEvent,
};
use factledger_aggregates::{AmountMinor, BoundedId};

/// Why a withdrawal unit was refused, by whichever stream refused it.
#[derive(Debug, thiserror::Error)]
pub enum PayoutRefusal {
    #[error(transparent)]
    Withdrawal(#[from] WithdrawalError),
    #[error(transparent)]
    Wallet(#[from] WalletError),
    #[error(transparent)]
    Limit(#[from] LimitError),
    #[error(transparent)]
    Profile(#[from] ProfileError),
}

pub type PayoutUnitError = UnitError<PayoutRefusal>;

/// The daily limits a request is counted against.
#[derive(Debug, Clone, Copy)]
pub struct DailyLimits {
    pub count: u32,
    pub amount_minor: i64,
}

/// The payout job of a withdrawal, committed with the unit that makes it payable.
pub fn payout_job(
    withdrawal_id: &str,
    now_ms: i64,
) -> Result<crate::infra::store::JobRow, PayoutUnitError> {
    JobSubmit::plain(
        &super::job::PAYOUT,
        super::job::business_key(withdrawal_id),
        serde_json::json!({ "withdrawal_id": withdrawal_id }),
    )
    .row(now_ms)
    .map_err(|e| UnitError::Invariant(e.to_string()))
}

/// Decide `command` on withdrawal `id` and append the wallet effect of each event.
async fn decide_with_effects(
    unit: &mut UnitBuilder,
    id: &str,
    command: WithdrawalCommand,
) -> Result<Vec<WithdrawalEvent>, PayoutUnitError> {
    let mut w = unit.load::<Withdrawal, PayoutRefusal>(id).await?;
    let before = w.state.clone();
    let events = unit.decide::<Withdrawal, PayoutRefusal>(&mut w, id, command)?;
    apply_effects(unit, before, &events).await?;
    Ok(events)
}

/// The wallet effect of each of `events`, decided on the wallet in the same unit.
async fn apply_effects(
    unit: &mut UnitBuilder,
    mut state: Withdrawal,
    events: &[WithdrawalEvent],
) -> Result<(), PayoutUnitError> {
    use cqrs_es::Aggregate;
    for e in events {
        let effect = state
            .wallet_effect(e)
            .map_err(|v| UnitError::Invariant(v.0))?;
        if let Some(effect) = effect {
            let wid = effect.wallet_id.as_str().to_owned();
            let mut wallet = unit.load::<Wallet, PayoutRefusal>(&wid).await?;
            unit.decide::<Wallet, PayoutRefusal>(&mut wallet, &wid, effect.command)?;
        }
        state.apply(e.clone());
    }
    Ok(())
}

/// Tx1 of R-PAY-1: the withdrawal (approved in the same decision when the risk rule
/// found nothing), its count against the day, the freeze, and — when approved — the
/// payout job, with the request's idempotency record. A request already made under
/// the same id writes nothing.
pub async fn request(
    store: &DynStore,
    metadata: &Metadata,
    cmd: RequestWithdrawal,
    daily: DailyLimits,
    idempotency: Option<IdempotencyRow>,
) -> Result<UnitOutcome<Vec<WithdrawalEvent>>, PayoutUnitError> {
    run_unit(store, metadata, |mut unit| {
        let cmd = cmd.clone();
        let idempotency = idempotency.clone();
        async move {
            let id = cmd.withdrawal_id.as_str().to_owned();
            let day_id = day_stream_id(
                cmd.user_id.as_str(),
                cmd.currency.as_str(),
                cmd.now.date_naive(),
            );
            let amount = cmd.amount_minor;
            let now_ms = cmd.now.timestamp_millis();
            let mut w = unit.load::<Withdrawal, PayoutRefusal>(&id).await?;
            let before = w.state.clone();
            let events = unit.decide::<Withdrawal, PayoutRefusal>(
                &mut w,
                &id,
                WithdrawalCommand::Request(Box::new(cmd)),
            )?;
            if events.is_empty() {
                return Ok((events, unit));
            }
            let mut day = unit.load::<WithdrawalDay, PayoutRefusal>(&day_id).await?;
            unit.decide::<WithdrawalDay, PayoutRefusal>(
                &mut day,
                &day_id,
                CountWithdrawal {
                    withdrawal_id: BoundedId::parse(&id)
                        .map_err(|e| UnitError::Invariant(e.rule))?,
                    amount_minor: amount,
                    count_limit: daily.count,
                    amount_limit_minor: daily.amount_minor,
                },
            )?;
            apply_effects(&mut unit, before, &events).await?;
            if events
                .iter()
                .any(|e| matches!(e, WithdrawalEvent::WithdrawalApproved(_)))
            {
                unit.job(payout_job(&id, now_ms)?);
            }
            if let Some(row) = idempotency {
                unit.idempotency(row);
            }
            Ok((events, unit))
        }
    })
    .await
}

/// An operator's approval (with the payout job) or rejection (with the unfreeze).
pub async fn review(
    store: &DynStore,
    metadata: &Metadata,
    id: &str,
    approve: bool,
    decision: Decision,
) -> Result<UnitOutcome<Vec<WithdrawalEvent>>, PayoutUnitError> {
    run_unit(store, metadata, |mut unit| {
        let decision = decision.clone();
        async move {
            let now_ms = decision.now.timestamp_millis();
            let command = if approve {
                WithdrawalCommand::Approve(decision)
            } else {
                WithdrawalCommand::Reject(decision)
            };
            let events = decide_with_effects(&mut unit, id, command).await?;
            if approve {
                unit.job(payout_job(id, now_ms)?);
            }
            Ok((events, unit))
        }
    })
    .await
}

/// Record that the worker is about to call the provider (before the call).
pub async fn start_attempt(
    store: &DynStore,
    metadata: &Metadata,
    id: &str,
    start: StartAttempt,
    fence: Option<Fence>,
) -> Result<UnitOutcome<Vec<WithdrawalEvent>>, PayoutUnitError> {
    run_unit(store, metadata, |mut unit| {
        let start = start.clone();
        async move {
            if let Some(f) = fence {
                unit.fence(f);
            }
            let events =
                decide_with_effects(&mut unit, id, WithdrawalCommand::StartAttempt(start)).await?;
            Ok((events, unit))
        }
    })
    .await
}

/// Record what the provider said (a call's answer, a query, a webhook) with the
/// wallet effects of the status it moves to.
pub async fn record_outcome(
    store: &DynStore,
    metadata: &Metadata,
    id: &str,
    outcome: RecordOutcome,
    fence: Option<Fence>,
) -> Result<UnitOutcome<Vec<WithdrawalEvent>>, PayoutUnitError> {
    run_unit(store, metadata, |mut unit| {
        let outcome = outcome.clone();
        async move {
            if let Some(f) = fence {
                unit.fence(f);
            }
            let events = decide_with_effects(
                &mut unit,
                id,
                WithdrawalCommand::RecordOutcome(Box::new(outcome)),
            )
            .await?;
            Ok((events, unit))
        }
    })
    .await
}

/// An amount as the aggregate's type, or an invariant failure naming it.
pub fn amount(minor: i64) -> Result<AmountMinor, PayoutUnitError> {
    AmountMinor::parse(minor)
        .map_err(|e| UnitError::Invariant(format!("amount {minor}: {}", e.rule)))
}
