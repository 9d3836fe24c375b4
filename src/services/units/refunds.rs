//! Refund units (R-REF-1): a candy refund settles at once through the candy account;
//! a cash refund is marked REFUNDING before its gateway is called, keeps each answer,
//! and settles with its order when the gateway confirms.

use super::{booking_with_candy, ServiceRefusal, ServiceUnitError};
use crate::infra::store::{DynStore, Fence, Metadata};
use crate::runtime::unit::{run_unit, UnitError, UnitOutcome};
use crate::services::gateway::RefundAnswer;
use chrono::{DateTime, Utc};
use factledger_aggregates::booking::BookingCommand;
use factledger_aggregates::refund::{
    Refund, RefundCommand, RefundError, RefundEvent, RefundStatus,
};
use factledger_aggregates::service_order::{OrderCommand, ServiceOrder};

/// A candy refund: the refund succeeds and the booking's hold goes back to the fan's
/// balance, in one unit. Idempotent: a refund already done writes nothing.
pub async fn candy_refund(
    store: &DynStore,
    metadata: &Metadata,
    refund_no: &str,
    now: DateTime<Utc>,
    fence: Option<Fence>,
) -> Result<UnitOutcome<Vec<RefundEvent>>, ServiceUnitError> {
    run_unit(store, metadata, |mut unit| async move {
        if let Some(f) = fence {
            unit.fence(f);
        }
        let mut r = unit.load::<Refund, ServiceRefusal>(refund_no).await?;
        let Some(req) = r.state.request.clone() else {
            return Err(UnitError::Refused(RefundError::NotFound.into()));
        };
        let Some(booking_no) = req.booking_no.clone().filter(|_| !req.method.is_cash()) else {
            return Err(UnitError::Invariant(format!(
                "refund {refund_no} is not a booking's candy refund"
            )));
        };
        let events = unit.decide::<Refund, ServiceRefusal>(
            &mut r,
            refund_no,
            RefundCommand::Succeed {
                gateway_refund_id: None,
                response: "candy returned to the balance".into(),
                at: now,
            },
        )?;
        if !events.is_empty() {
            booking_with_candy(
                &mut unit,
                &booking_no,
                BookingCommand::RecordRefund {
                    refund_no: refund_no.to_owned(),
                    at: now,
                },
            )
            .await?;
        }
        Ok((events, unit))
    })
    .await
}

/// One command on a refund alone (submit, keep an answer, fail, close).
async fn refund_alone(
    store: &DynStore,
    metadata: &Metadata,
    refund_no: &str,
    command: RefundCommand,
    fence: Option<Fence>,
) -> Result<UnitOutcome<Vec<RefundEvent>>, ServiceUnitError> {
    run_unit(store, metadata, |mut unit| {
        let command = command.clone();
        async move {
            if let Some(f) = fence {
                unit.fence(f);
            }
            let mut r = unit.load::<Refund, ServiceRefusal>(refund_no).await?;
            let events = unit.decide::<Refund, ServiceRefusal>(&mut r, refund_no, command)?;
            Ok((events, unit))
        }
    })
    .await
}

/// Mark a cash refund REFUNDING before its gateway is called: from here on only
/// queries ask about it.
pub async fn submit(
    store: &DynStore,
    metadata: &Metadata,
    refund_no: &str,
    now: DateTime<Utc>,
    fence: Option<Fence>,
) -> Result<UnitOutcome<Vec<RefundEvent>>, ServiceUnitError> {
    refund_alone(
        store,
        metadata,
        refund_no,
        RefundCommand::Submit { at: now },
        fence,
    )
    .await
}

/// Record a gateway's answer about a REFUNDING refund: success settles the refund
/// together with its order (the order event `OrderRefunded`, its payment transaction
/// updated by the projection); failed or closed settle the refund only; processing
/// or no answer keep it REFUNDING with the answer recorded.
pub async fn record_answer(
    store: &DynStore,
    metadata: &Metadata,
    refund_no: &str,
    answer: &RefundAnswer,
    now: DateTime<Utc>,
    fence: Option<Fence>,
) -> Result<UnitOutcome<RefundStatus>, ServiceUnitError> {
    let answer = answer.clone();
    run_unit(store, metadata, |mut unit| {
        let answer = answer.clone();
        async move {
            if let Some(f) = fence {
                unit.fence(f);
            }
            let mut r = unit.load::<Refund, ServiceRefusal>(refund_no).await?;
            let Some(req) = r.state.request.clone() else {
                return Err(UnitError::Refused(RefundError::NotFound.into()));
            };
            let response = answer.response();
            let command = match &answer {
                RefundAnswer::Succeeded {
                    gateway_refund_id, ..
                } => RefundCommand::Succeed {
                    gateway_refund_id: Some(gateway_refund_id.clone()),
                    response,
                    at: now,
                },
                RefundAnswer::Failed { reason, .. } => RefundCommand::Fail {
                    reason: reason.clone(),
                    response,
                    at: now,
                },
                RefundAnswer::Closed { .. } => RefundCommand::Close { response, at: now },
                RefundAnswer::Processing { .. } | RefundAnswer::Unknown { .. } => {
                    RefundCommand::RecordResponse { response, at: now }
                }
            };
            let events = unit.decide::<Refund, ServiceRefusal>(&mut r, refund_no, command)?;
            let succeeded = events
                .iter()
                .any(|e| matches!(e, RefundEvent::RefundSucceeded { .. }));
            if succeeded {
                let mut o = unit
                    .load::<ServiceOrder, ServiceRefusal>(&req.order_no)
                    .await?;
                unit.decide::<ServiceOrder, ServiceRefusal>(
                    &mut o,
                    &req.order_no,
                    OrderCommand::RecordRefund {
                        refund_no: refund_no.to_owned(),
                        transaction_no: req.transaction_no.clone(),
                        amount_minor: req.amount,
                        at: now,
                    },
                )?;
            }
            let status = match events.last() {
                Some(RefundEvent::RefundSucceeded { .. }) => RefundStatus::Succeeded,
                Some(RefundEvent::RefundFailed { .. }) => RefundStatus::Failed,
                Some(RefundEvent::RefundClosed { .. }) => RefundStatus::Closed,
                _ => r.state.status,
            };
            Ok((status, unit))
        }
    })
    .await
}
