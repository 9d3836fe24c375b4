//! Closing a recovery review by hand (R-COM-1 RECOVERY_REVIEW → MANUAL_RESOLVED,
//! seed 003 case 6): one unit that resolves the commission and applies the wallet
//! effect its event requires (lifting the withdrawal block the review put on its
//! beneficiary's wallet). `POST /v1/commissions/{id}:resolve` parses the request and
//! calls [`resolve_recovery`]; nothing else writes this transition.

use crate::infra::store::{DynStore, Metadata};
use crate::runtime::unit::{run_unit, UnitError, UnitOutcome};
use factledger_aggregates::commission::{Commission, CommissionCommand, CommissionError};
use factledger_aggregates::wallet::{Wallet, WalletError};

/// Why a resolution was refused: by the commission, or by its wallet effect.
#[derive(Debug, thiserror::Error)]
pub enum CommissionOrWallet {
    #[error(transparent)]
    Commission(#[from] CommissionError),
    #[error(transparent)]
    Wallet(#[from] WalletError),
}

/// Resolve commission `id` with `resolve` (a `ResolveRecovery` command) and apply
/// each wallet effect of its events, in one unit.
pub async fn resolve_recovery(
    store: &DynStore,
    metadata: &Metadata,
    id: &str,
    resolve: CommissionCommand,
) -> Result<UnitOutcome<()>, UnitError<CommissionOrWallet>> {
    run_unit(store, metadata, |mut unit| {
        let resolve = resolve.clone();
        let id = id.to_owned();
        async move {
            let mut c = unit.load::<Commission, CommissionOrWallet>(&id).await?;
            if c.state.record.is_none() {
                return Err(UnitError::Refused(CommissionError::NotFound.into()));
            }
            let events = unit.decide::<Commission, CommissionOrWallet>(&mut c, &id, resolve)?;
            for e in &events {
                let effect = c
                    .state
                    .wallet_effect(e)
                    .map_err(|v| UnitError::Invariant(v.0))?;
                if let Some(effect) = effect {
                    let wid = effect.wallet_id.as_str().to_owned();
                    let mut w = unit.load::<Wallet, CommissionOrWallet>(&wid).await?;
                    unit.decide::<Wallet, CommissionOrWallet>(&mut w, &wid, effect.command)?;
                }
            }
            Ok(((), unit))
        }
    })
    .await
}
