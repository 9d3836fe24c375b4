//! Settlement (SPEC R-COM-2, seed 003 §7): a due commission is released —
//! PENDING → AVAILABLE with the wallet's `pending → available` and its ledger entry
//! and outbox rows — each commission in its own unit.
//!
//! A scan result grants no right to process: `settle_one` loads the commission and
//! decides `Release { now }` on its current state, which re-checks status and
//! `release_at` (the compare-and-set of the seed), and the append states the stream
//! head it decided on. Two settlers racing on one commission: one appends, the other
//! conflicts, re-decides on the released state and is refused — the wallet changes
//! once. The wallet ledger key `COMMISSION/<id>/RELEASE_PENDING` is the last line of
//! defence (R-INV-1).

use crate::store::{DynStore, Fence, Metadata, StoreError};
use crate::unit::{run_unit, UnitError};
use factledger_aggregates::commission::{
    Commission, CommissionCommand, CommissionError, ReleaseCommission,
};
use factledger_aggregates::wallet::{Wallet, WalletError};
use serde::Serialize;

/// What settling one commission did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Settled {
    /// Released now: the wallet moved pending → available.
    Released,
    /// Not due yet (`release_at` is after now).
    NotDue,
    /// Not PENDING any more (already released by another settler, frozen, invalid…).
    NotPending,
    /// No such commission.
    Unknown,
}

#[derive(Debug, thiserror::Error)]
pub enum SettleError {
    #[error(transparent)]
    Commission(#[from] CommissionError),
    #[error(transparent)]
    Wallet(#[from] WalletError),
    #[error("{0}")]
    Invariant(String),
}

/// Settle one commission at `now` in its own unit (fenced by the job's claim when a
/// job settles). Refusals that mean "someone else got there" are outcomes, not
/// errors.
pub async fn settle_one(
    store: &DynStore,
    metadata: &Metadata,
    commission_id: &str,
    now: chrono::DateTime<chrono::Utc>,
    fence: Option<Fence>,
) -> Result<(Settled, i64), UnitError<SettleError>> {
    let outcome = run_unit(store, metadata, |mut unit| async move {
        if let Some(f) = fence {
            unit.fence(f);
        }
        let mut commission = unit.load::<Commission, SettleError>(commission_id).await?;
        if commission.state.record.is_none() {
            return Ok((Settled::Unknown, unit));
        }
        let release = CommissionCommand::Release(ReleaseCommission { now });
        let events =
            match unit.decide::<Commission, SettleError>(&mut commission, commission_id, release) {
                Ok(events) => events,
                Err(UnitError::Refused(SettleError::Commission(CommissionError::NotDue {
                    ..
                }))) => return Ok((Settled::NotDue, unit)),
                Err(UnitError::Refused(SettleError::Commission(
                    CommissionError::IllegalTransition { .. },
                ))) => return Ok((Settled::NotPending, unit)),
                Err(e) => return Err(e),
            };
        for event in &events {
            let effect = commission
                .state
                .wallet_effect(event)
                .map_err(|v| UnitError::Invariant(v.0))?;
            if let Some(effect) = effect {
                let wid = effect.wallet_id.as_str().to_owned();
                let mut wallet = unit.load::<Wallet, SettleError>(&wid).await?;
                unit.decide::<Wallet, SettleError>(&mut wallet, &wid, effect.command)?;
            }
        }
        Ok((Settled::Released, unit))
    })
    .await?;
    Ok((outcome.value, outcome.position))
}

/// Whether a settle failure is the claim going away (stop the round) rather than
/// this commission's problem (report it, go on).
pub fn is_fenced(e: &UnitError<SettleError>) -> bool {
    matches!(e, UnitError::Store(StoreError::Fenced { .. }))
}
