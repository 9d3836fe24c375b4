//! The payout worker (R-PAY-3): the `payout` job kind on the job engine, one job per
//! withdrawal (business key `withdrawal:<id>`), lease 2 min, claimed in batches of
//! the engine's run size (50 by default; `FOR UPDATE SKIP LOCKED` on MariaDB).
//!
//! One round walks the withdrawal forward until it waits on someone else:
//!
//! 1. an attempt recorded as started with no outcome (the process died between the
//!    call and its record) counts as unknown: recorded as such, then queried;
//! 2. PROVIDER_UNKNOWN: query by reference first — found → PROCESSING (PAID, FAILED
//!    or FUNDS_HELD as it says), confirmed absent → PAYOUT_PENDING, still unknown →
//!    the round ends and the job retries later; never a blind second create;
//! 3. PAYOUT_PENDING or FUNDS_HELD: record the attempt (its own unit, fenced by the
//!    claim), call `create` outside any transaction with `Idempotency-Key` = the
//!    reference, record the answer in a new unit;
//! 4. PROCESSING: wait for the webhook; a later round queries in case it was lost.
//!
//! A round that leaves the withdrawal waiting fails softly (the engine retries on
//! the [`RETRY_SECONDS`] schedule); a settled withdrawal ends the job.

use super::provider::{CallRecord, CreateOutcome, PayoutProvider, PayoutRequest, QueryOutcome};
use super::units::{record_outcome, start_attempt, PayoutUnitError};
use crate::infra::jobs::{ClaimedJob, JobFailure, JobHandler, RoundReport};
use crate::infra::store::{DynStore, Fence, Metadata};
use crate::runtime::bus::load;
use async_trait::async_trait;
use factledger_aggregates::withdrawal::{
    CallDetail, OutcomeSource, ProviderReport, RecordOutcome, StartAttempt, Withdrawal,
    WithdrawalState, WithdrawalStatus,
};
use serde_json::json;
use std::sync::Arc;

/// Steps one round may take (each a provider call or a record).
const STEPS_MAX: usize = 8;

/// The actor the worker records.
pub const WORKER_ACTOR: &str = "job:payout";

pub struct PayoutHandler {
    store: DynStore,
    provider: Arc<dyn PayoutProvider>,
    metadata: Metadata,
}

impl PayoutHandler {
    pub fn new(store: DynStore, provider: Arc<dyn PayoutProvider>, metadata: Metadata) -> Self {
        PayoutHandler {
            store,
            provider,
            metadata,
        }
    }
}

/// How a step left the withdrawal.
enum Step {
    /// Look again and go on.
    Again,
    /// Settled: the job is done.
    Done(WithdrawalStatus),
    /// Waiting on the provider or a person: retry the job later.
    Wait(String),
}

fn detail(call: CallRecord) -> CallDetail {
    CallDetail {
        operation: call.operation.to_owned(),
        request: call.request,
        http_status: call.http_status,
        response: call.response,
        elapsed_ms: call.elapsed_ms,
    }
}

/// What a create call's answer says, as the aggregate's report.
pub fn create_report(outcome: &CreateOutcome) -> (ProviderReport, Option<String>) {
    match outcome {
        CreateOutcome::Created(p) => (status_report(&p.status), Some(p.provider_id.clone())),
        CreateOutcome::Refused {
            code, recoverable, ..
        } => (
            ProviderReport::Refused {
                code: code.clone(),
                recoverable: *recoverable,
            },
            None,
        ),
        CreateOutcome::Unknown { reason } => (
            ProviderReport::Unknown {
                reason: reason.clone(),
            },
            None,
        ),
    }
}

/// A provider status as the aggregate's report.
pub fn status_report(status: &super::provider::ProviderStatus) -> ProviderReport {
    use super::provider::ProviderStatus as P;
    match status {
        P::Accepted => ProviderReport::Accepted,
        P::Succeeded => ProviderReport::Succeeded,
        P::Failed { code, recoverable } => ProviderReport::Failed {
            code: code.clone(),
            recoverable: *recoverable,
        },
        P::Reversed => ProviderReport::Reversed,
    }
}

impl PayoutHandler {
    fn outcome(
        &self,
        s: &WithdrawalState,
        report: ProviderReport,
        source: OutcomeSource,
        attempt: Option<u32>,
        provider_payout_id: Option<String>,
        call: Option<CallRecord>,
    ) -> RecordOutcome {
        RecordOutcome {
            report,
            source,
            attempt,
            idempotency_key: s.idempotency_key(),
            provider_payout_id,
            call: call.map(detail),
            actor: WORKER_ACTOR.to_owned(),
            now: chrono::Utc::now(),
        }
    }

    async fn record(
        &self,
        id: &str,
        outcome: RecordOutcome,
        fence: Fence,
    ) -> Result<(), PayoutUnitError> {
        record_outcome(&self.store, &self.metadata, id, outcome, Some(fence)).await?;
        Ok(())
    }

    async fn query(
        &self,
        id: &str,
        s: &WithdrawalState,
        fence: Fence,
    ) -> Result<Step, PayoutUnitError> {
        let (answer, call) = self.provider.query(&s.idempotency_key()).await;
        let (report, payout_id) = match &answer {
            QueryOutcome::Found(p) => {
                if p.amount_minor != s.amount_minor {
                    return Ok(Step::Wait(format!(
                        "the provider's payout {} is for {}, the withdrawal for {}: a person must look",
                        p.provider_id, p.amount_minor, s.amount_minor
                    )));
                }
                (status_report(&p.status), Some(p.provider_id.clone()))
            }
            QueryOutcome::Absent => (ProviderReport::Absent, None),
            QueryOutcome::Unknown { reason } => {
                return Ok(Step::Wait(format!("query outcome unknown: {reason}")));
            }
        };
        let outcome = self.outcome(s, report, OutcomeSource::Query, None, payout_id, Some(call));
        self.record(id, outcome, fence).await?;
        Ok(Step::Again)
    }

    async fn pay(
        &self,
        id: &str,
        s: &WithdrawalState,
        fence: Fence,
    ) -> Result<Step, PayoutUnitError> {
        let started = start_attempt(
            &self.store,
            &self.metadata,
            id,
            StartAttempt {
                actor: WORKER_ACTOR.to_owned(),
                now: chrono::Utc::now(),
            },
            Some(fence),
        )
        .await?;
        let attempt = s.attempts + 1;
        if started.events.is_empty() {
            return Ok(Step::Again);
        }
        let request = PayoutRequest {
            reference: s.idempotency_key(),
            amount_minor: s.amount_minor,
            currency: s.currency,
            channel_code: s.destination.channel_code.clone(),
            account_number: s.destination.account_number.clone(),
            account_holder: s.destination.account_holder.clone(),
            description: format!("withdrawal {}", s.withdrawal_id),
        };
        // Outside any transaction (R-INV-6): the attempt is on record already.
        let (answer, call) = self.provider.create(&request).await;
        let (report, payout_id) = create_report(&answer);
        let outcome = self.outcome(
            s,
            report,
            OutcomeSource::Call,
            Some(attempt),
            payout_id,
            Some(call),
        );
        self.record(id, outcome, fence).await?;
        Ok(Step::Again)
    }

    async fn step(&self, id: &str, fence: Fence, first: bool) -> Result<Step, PayoutUnitError> {
        let loaded = load::<Withdrawal>(&self.store, id)
            .await
            .map_err(PayoutUnitError::from_bus)?;
        let Some(s) = loaded.state.record else {
            return Ok(Step::Wait(format!("withdrawal {id} does not exist")));
        };
        if let Some(n) = s.open_attempt {
            let outcome = self.outcome(
                &s,
                ProviderReport::Unknown {
                    reason: format!("attempt {n} recorded no outcome (the worker stopped)"),
                },
                OutcomeSource::Call,
                Some(n),
                None,
                None,
            );
            self.record(id, outcome, fence).await?;
            return Ok(Step::Again);
        }
        use WithdrawalStatus as S;
        match s.status {
            S::Paid | S::Failed | S::Rejected => Ok(Step::Done(s.status)),
            S::Requested => Ok(Step::Done(s.status)),
            S::ProviderUnknown => self.query(id, &s, fence).await,
            // A fresh hold waits for the retry delay; a round that starts held retries.
            S::FundsHeld if !first => Ok(Step::Wait(
                "the provider is holding funds; retry later".into(),
            )),
            S::PayoutPending | S::FundsHeld => self.pay(id, &s, fence).await,
            // A round that starts in PROCESSING asks, in case the webhook was lost.
            S::Processing if first => self.query(id, &s, fence).await,
            S::Processing => Ok(Step::Wait(
                "accepted by the provider; waiting for it to settle".into(),
            )),
        }
    }
}

#[async_trait]
impl JobHandler for PayoutHandler {
    async fn run(&self, job: &ClaimedJob) -> Result<RoundReport, JobFailure> {
        let payload = job.payload_json()?;
        let Some(id) = payload["withdrawal_id"].as_str() else {
            return Err(JobFailure {
                message: "payload has no withdrawal_id".into(),
                exhaust: true,
                fenced: false,
            });
        };
        let fence = job.fence();
        for i in 0..STEPS_MAX {
            if job.claim_lost() {
                return Err(JobFailure {
                    message: "claim lost".into(),
                    exhaust: false,
                    fenced: true,
                });
            }
            let step = self.step(id, fence, i == 0).await.map_err(|e| {
                let fenced = matches!(
                    &e,
                    PayoutUnitError::Store(crate::infra::store::StoreError::Fenced { .. })
                );
                JobFailure {
                    message: e.to_string(),
                    exhaust: false,
                    fenced,
                }
            })?;
            match step {
                Step::Again => {}
                Step::Done(status) => {
                    return Ok(RoundReport::done(
                        json!({"withdrawal_id": id, "status": status.as_str()}),
                    ))
                }
                Step::Wait(why) => return Err(JobFailure::new(why)),
            }
        }
        Err(JobFailure::new(format!(
            "withdrawal {id} still moving after {STEPS_MAX} steps"
        )))
    }
}
