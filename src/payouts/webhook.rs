//! Applying a provider's verified, normalised callback (R-PAY-4). The callback inbox
//! (`crate::callbacks`) has stored it raw and normalised and deduplicated it by the
//! provider's event id; the composition root's adapter parses the provider's body
//! into a [`ProviderPayout`] and calls [`apply_report`].
//!
//! Applying is compare-and-set on the withdrawal's state: the report is folded by
//! `withdrawal::targets` on the status the stream has now, inside a unit that
//! appends at the version it read. A duplicate or a report the withdrawal has
//! already moved past writes nothing; FAILED after PAID is recorded as
//! `ProviderContradicted` and moves no money; and the wallet's pairing rule refuses
//! any second debit or unfreeze even if all of that were wrong.

use super::provider::ProviderPayout;
use super::units::{record_outcome, PayoutUnitError};
use super::worker::status_report;
use crate::infra::store::{DynStore, Fence, Metadata};
use crate::runtime::bus::load;
use factledger_aggregates::withdrawal::{
    withdrawal_of_reference, OutcomeSource, RecordOutcome, Withdrawal, WithdrawalEvent,
};

#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("no withdrawal {0} (reference {1})")]
    UnknownWithdrawal(String, String),
    #[error("the provider reports {reported} for {reference}; the withdrawal is for {ours}")]
    AmountDiffers {
        reference: String,
        reported: i64,
        ours: i64,
    },
    #[error(transparent)]
    Unit(#[from] PayoutUnitError),
}

/// Apply what the provider says about `payout`; the events written (none when the
/// report changes nothing).
pub async fn apply_report(
    store: &DynStore,
    metadata: &Metadata,
    provider: &str,
    payout: &ProviderPayout,
    fence: Option<Fence>,
) -> Result<Vec<WithdrawalEvent>, WebhookError> {
    let id = withdrawal_of_reference(&payout.reference);
    let loaded = load::<Withdrawal>(store, id)
        .await
        .map_err(|e| WebhookError::Unit(PayoutUnitError::from_bus(e)))?;
    let Some(s) = loaded.state.record else {
        return Err(WebhookError::UnknownWithdrawal(
            id.to_owned(),
            payout.reference.clone(),
        ));
    };
    if payout.amount_minor != s.amount_minor {
        return Err(WebhookError::AmountDiffers {
            reference: payout.reference.clone(),
            reported: payout.amount_minor,
            ours: s.amount_minor,
        });
    }
    let outcome = RecordOutcome {
        report: status_report(&payout.status),
        source: OutcomeSource::Webhook,
        attempt: None,
        idempotency_key: payout.reference.clone(),
        provider_payout_id: Some(payout.provider_id.clone()),
        call: None,
        actor: format!("provider:{provider}"),
        now: chrono::Utc::now(),
    };
    Ok(record_outcome(store, metadata, id, outcome, fence)
        .await?
        .value)
}
