//! What happens around the units: the steps that follow a commit (deliver after a
//! payment, queue the no-show check after an activation, the finish after a start,
//! the refund after a decision, the membership sync after a grant or expiry) and the
//! gateway calls of a cash refund, made outside any transaction (R-INV-6). Job
//! rounds, cron scans, callbacks and HTTP handlers all go through here, so a step
//! runs the same way whoever triggers it.

use super::ctx::{Ctx, Faults};
use super::gateway::{RefundAnswer, RefundRequest};
use super::jobs;
use super::units::{self, ServiceRefusal, ServiceUnitError};
use crate::infra::jobs::JobFailure;
use crate::infra::store::Fence;
use crate::runtime::bus::load;
use crate::runtime::unit::UnitError;
use chrono::{DateTime, Utc};
use factledger_aggregates::booking::{Booking, BookingCommand, BookingError};
use factledger_aggregates::refund::{Refund, RefundStatus};
use factledger_aggregates::service_order::Payment;
use factledger_aggregates::services::UserId;
use serde_json::{json, Value};

/// A unit's failure as a job round's.
pub fn failure(e: ServiceUnitError) -> JobFailure {
    match e {
        UnitError::Store(s) => s.into(),
        // A refusal will not change by retrying the same round.
        UnitError::Refused(r) => JobFailure {
            exhaust: true,
            ..JobFailure::new(format!("refused: {r}"))
        },
        other => JobFailure::new(other.to_string()),
    }
}

/// A gateway's pay notice: recorded on its order, then the order delivered at once;
/// a late payment's refund is queued.
pub async fn payment_received(
    ctx: &Ctx,
    order_no: &str,
    payment: Payment,
    now: DateTime<Utc>,
    fence: Option<Fence>,
) -> Result<Value, ServiceUnitError> {
    let meta = ctx.metadata("callback:payment");
    let out =
        units::orders::record_payment(&ctx.store, &meta, order_no, payment, now, fence).await?;
    match out.value {
        units::orders::Paid::Late { refund_no } => {
            ctx.enqueue(
                jobs::refund_job(&refund_no),
                &[("order_no", order_no), ("refund_no", &refund_no)],
            )
            .await;
            Ok(json!({ "late": true, "refund_no": refund_no }))
        }
        units::orders::Paid::Paid | units::orders::Paid::Already => {
            let delivered = deliver(ctx, order_no, now, None, true)
                .await
                .unwrap_or_else(|e| json!({ "delivered": false, "error": e.message }));
            Ok(json!({ "late": false, "delivery": delivered }))
        }
    }
}

/// Deliver a paid order. `inline` (right after the payment): a failure queues the
/// single-order compensation job at once and is not an error of the caller's; in a
/// job round a failure fails the round (retried, the every-minute scan behind it).
pub async fn deliver(
    ctx: &Ctx,
    order_no: &str,
    now: DateTime<Utc>,
    fence: Option<Fence>,
    inline: bool,
) -> Result<Value, JobFailure> {
    let result = if Faults::take(&ctx.services.faults.delivery) {
        Err(JobFailure::new("injected delivery failure"))
    } else {
        let meta = ctx.metadata("delivery");
        units::orders::deliver(&ctx.store, &meta, order_no, now, fence)
            .await
            .map_err(failure)
    };
    let delivered = match result {
        Ok(out) => out.value,
        Err(e) if inline => {
            tracing::warn!(
                target: "factledger::services::compensation",
                order_no,
                error = %e.message,
                "delivery failed; queued its compensation"
            );
            ctx.enqueue(jobs::delivery_job(order_no), &[("order_no", order_no)])
                .await;
            return Ok(json!({ "delivered": false, "queued": true, "error": e.message }));
        }
        Err(e) => return Err(e),
    };
    follow_up(ctx, order_no, &delivered).await;
    Ok(json!({ "delivered": format!("{delivered:?}") }))
}

/// The jobs a delivery queues after commit.
async fn follow_up(ctx: &Ctx, order_no: &str, delivered: &units::orders::Delivered) {
    use units::orders::Delivered;
    match delivered {
        Delivered::Subscription {
            artist_id,
            fan_user_id,
        } => {
            let (a, f) = (artist_id.to_string(), fan_user_id.to_string());
            let ids = [
                ("order_no", order_no),
                ("artist_id", &a),
                ("fan_user_id", &f),
            ];
            ctx.enqueue(jobs::im_members_job(*artist_id, Some(*fan_user_id)), &ids)
                .await;
            ctx.enqueue(
                jobs::subscription_message_job(*artist_id, *fan_user_id, order_no),
                &ids,
            )
            .await;
        }
        Delivered::Booking { booking_no } => {
            if let Ok(b) = load::<Booking>(&ctx.store, booking_no).await {
                if let Some(due) = b.state.no_show_due_at() {
                    ctx.enqueue(
                        jobs::no_show_job(booking_no, due.timestamp_millis()),
                        &[("order_no", order_no), ("booking_no", booking_no)],
                    )
                    .await;
                }
            }
        }
        Delivered::Candy { .. } | Delivered::Nothing { .. } => {}
    }
}

/// The no-show rule on one booking; a refund it creates is queued at once.
pub async fn no_show(
    ctx: &Ctx,
    booking_no: &str,
    now: DateTime<Utc>,
    fence: Option<Fence>,
) -> Result<Value, JobFailure> {
    let meta = ctx.metadata("job:video_no_show");
    let out = units::bookings::no_show(&ctx.store, &meta, booking_no, now, fence)
        .await
        .map_err(failure)?;
    let (events, refund) = out.value;
    if let Some(refund_no) = &refund {
        ctx.enqueue(
            jobs::refund_job(refund_no),
            &[("booking_no", booking_no), ("refund_no", refund_no)],
        )
        .await;
    }
    Ok(json!({
        "events": events.iter().map(|e| e.name()).collect::<Vec<_>>(),
        "refund_no": refund,
    }))
}

/// A call started: its finish is queued for when its booked time is up.
pub async fn start_call(
    ctx: &Ctx,
    booking_no: &str,
    now: DateTime<Utc>,
) -> Result<Vec<factledger_aggregates::booking::BookingEvent>, ServiceUnitError> {
    let meta = ctx.metadata("call:start");
    let out = units::booking_step(
        &ctx.store,
        &meta,
        booking_no,
        BookingCommand::Start { at: now },
        None,
    )
    .await?;
    if !out.value.is_empty() {
        if let Ok(b) = load::<Booking>(&ctx.store, booking_no).await {
            if let Some(end) = b.state.ends_at() {
                ctx.enqueue(
                    jobs::call_finish_job(booking_no, end.timestamp_millis()),
                    &[("booking_no", booking_no)],
                )
                .await;
            }
        }
    }
    Ok(out.value)
}

/// Finish a call in progress (status 3 only); a booking no longer in a call is done.
pub async fn finish_call(
    ctx: &Ctx,
    booking_no: &str,
    now: DateTime<Utc>,
    fence: Option<Fence>,
) -> Result<Value, JobFailure> {
    let meta = ctx.metadata("job:video_call_finish");
    match units::booking_step(
        &ctx.store,
        &meta,
        booking_no,
        BookingCommand::Finish { at: now },
        fence,
    )
    .await
    {
        Ok(out) => Ok(json!({ "finished": !out.value.is_empty() })),
        Err(UnitError::Refused(ServiceRefusal::Booking(BookingError::WrongStatus {
            status,
            ..
        }))) => Ok(json!({ "finished": false, "status": status.as_str() })),
        Err(e) => Err(failure(e)),
    }
}

/// Moderation found a violation: flag the call, then abort it (no income). A failed
/// abort is repaired by the moderation scan, which aborts flagged calls still in 3.
pub async fn moderate(
    ctx: &Ctx,
    booking_no: &str,
    reason: &str,
    now: DateTime<Utc>,
) -> Result<Vec<factledger_aggregates::booking::BookingEvent>, ServiceUnitError> {
    let meta = ctx.metadata("callback:moderation");
    let flag = BookingCommand::FlagModeration {
        reason: reason.to_owned(),
        at: now,
    };
    let mut events = units::booking_step(&ctx.store, &meta, booking_no, flag, None)
        .await?
        .value;
    let abort = BookingCommand::AbortForModeration { at: now };
    match units::booking_step(&ctx.store, &meta, booking_no, abort, None).await {
        Ok(out) => events.extend(out.value),
        Err(UnitError::Refused(r)) => return Err(UnitError::Refused(r)),
        Err(e) => tracing::warn!(
            target: "factledger::services::compensation",
            booking_no,
            error = %e,
            "moderation abort failed; the moderation repair scan retries it"
        ),
    }
    Ok(events)
}

/// Log a refund step that did not settle, with every id an operator needs.
fn log_refund(refund: &Refund, refund_no: &str, stage: &str, error: &str) {
    let Some(r) = &refund.request else { return };
    tracing::warn!(
        target: "factledger::services::compensation",
        refund_no,
        order_no = %r.order_no,
        transaction_no = %r.transaction_no,
        payment_method = r.method.as_str(),
        payment_account_id = %r.account_id,
        business_type = r.business.as_str(),
        stage,
        error,
        "refund still REFUNDING; the refund compensation scan asks again"
    );
}

/// Run one refund: a candy refund settles at once; a cash refund is marked REFUNDING,
/// sent once, and afterwards only queried (R-REF-1).
pub async fn run_refund(
    ctx: &Ctx,
    refund_no: &str,
    now: DateTime<Utc>,
    fence: Option<Fence>,
) -> Result<Value, JobFailure> {
    let meta = ctx.metadata("job:service_refund");
    let loaded = load::<Refund>(&ctx.store, refund_no)
        .await
        .map_err(|e| JobFailure::new(e.to_string()))?;
    let refund = loaded.state;
    let Some(req) = refund.request.clone() else {
        return Err(JobFailure {
            exhaust: true,
            ..JobFailure::new(format!("refund {refund_no} does not exist"))
        });
    };
    if refund.status.is_final() {
        return Ok(json!({ "status": refund.status.as_str(), "settled_before": true }));
    }
    if !req.method.is_cash() {
        units::refunds::candy_refund(&ctx.store, &meta, refund_no, now, fence)
            .await
            .map_err(failure)?;
        return Ok(json!({ "status": RefundStatus::Succeeded.as_str() }));
    }
    let Some(gateway) = ctx.services.gateway.clone() else {
        return Err(JobFailure::new("no payment gateway is configured"));
    };
    let method = super::gateway::PayMethod::parse(req.method.as_str())
        .ok_or_else(|| JobFailure::new("not a gateway method"))?;
    let request = RefundRequest {
        refund_no: refund_no.to_owned(),
        order_no: req.order_no.clone(),
        transaction_no: req.transaction_no.clone(),
        method,
        account_id: req.account_id.clone(),
        amount_minor: req.amount,
        currency: req.currency.clone(),
        paid_minor: paid_minor(ctx, &req.order_no, &req.transaction_no).await,
    };
    let (stage, answer) = if refund.status == RefundStatus::Pending {
        units::refunds::submit(&ctx.store, &meta, refund_no, now, fence)
            .await
            .map_err(failure)?;
        ("refund", gateway.refund(&request).await)
    } else {
        match gateway.query_refund_of(&request).await {
            // The gateway never took the create (e.g. a 5xx before accepting): send
            // it again under the same number, which the gateway deduplicates.
            RefundAnswer::Unknown { error }
                if error.starts_with(super::gateway_http::NOT_FOUND_PREFIX) =>
            {
                ("refund-resend", gateway.refund(&request).await)
            }
            answer => ("query", answer),
        }
    };
    let status = units::refunds::record_answer(&ctx.store, &meta, refund_no, &answer, now, fence)
        .await
        .map_err(failure)?
        .value;
    if !status.is_final() {
        let error = match &answer {
            RefundAnswer::Unknown { error } => error.clone(),
            other => other.response(),
        };
        log_refund(&refund, refund_no, stage, &error);
        if matches!(answer, RefundAnswer::Unknown { .. }) {
            return Err(JobFailure::new(format!("{stage}: {error}")));
        }
    }
    Ok(json!({ "status": status.as_str(), "stage": stage }))
}

/// What the refunded transaction paid, as its order recorded it (the payment it
/// keeps, or one owed back); `None` when the order cannot be read or has no such
/// transaction (the gateway then gets the refund amount as the payment's).
async fn paid_minor(ctx: &Ctx, order_no: &str, transaction_no: &str) -> Option<i64> {
    use factledger_aggregates::service_order::ServiceOrder;
    let order = load::<ServiceOrder>(&ctx.store, order_no).await.ok()?.state;
    order
        .payment
        .iter()
        .chain(order.late.values())
        .find(|p| p.transaction_no == transaction_no)
        .map(|p| p.amount_minor)
}

/// A gateway's word about a cash refund that came by notification (WeChat Pay's
/// `REFUND.*`): recorded exactly as a query's answer would be
/// ([`units::refunds::record_answer`]), so a notification and a query of the same
/// outcome settle the refund once, in whichever order they come. A refund already
/// settled is left alone (a contradicting word is logged, not applied: a settled
/// refund never moves again); one not yet submitted is a failure, to be replayed.
pub async fn refund_answered(
    ctx: &Ctx,
    refund_no: &str,
    answer: &RefundAnswer,
    now: DateTime<Utc>,
    fence: Option<Fence>,
) -> Result<RefundStatus, ServiceUnitError> {
    let meta = ctx.metadata("callback:refund");
    let refund = load::<Refund>(&ctx.store, refund_no)
        .await
        .map_err(UnitError::from_bus)?
        .state;
    if refund.request.is_none() {
        return Err(UnitError::Refused(
            factledger_aggregates::refund::RefundError::NotFound.into(),
        ));
    }
    if refund.status.is_final() {
        let agrees = matches!(
            (refund.status, answer),
            (RefundStatus::Succeeded, RefundAnswer::Succeeded { .. })
                | (RefundStatus::Closed, RefundAnswer::Closed { .. })
                | (RefundStatus::Failed, RefundAnswer::Failed { .. })
                | (
                    _,
                    RefundAnswer::Processing { .. } | RefundAnswer::Unknown { .. }
                )
        );
        if !agrees {
            tracing::warn!(
                target: "factledger::services::compensation",
                refund_no,
                status = refund.status.as_str(),
                answer = %answer.response(),
                "a gateway notification contradicts a settled refund; not applied"
            );
        }
        return Ok(refund.status);
    }
    Ok(
        units::refunds::record_answer(&ctx.store, &meta, refund_no, answer, now, fence)
            .await?
            .value,
    )
}

/// Membership sync: targeted (artist + fan) or full (every fan the artist has or had).
pub async fn sync_members(
    ctx: &Ctx,
    artist: UserId,
    fan: Option<UserId>,
    now: DateTime<Utc>,
    fence: Option<Fence>,
) -> Result<Value, JobFailure> {
    let meta = ctx.metadata("job:im_members");
    let fans = match fan {
        Some(f) => vec![f],
        None => fans_of(&ctx.db, artist)
            .await
            .map_err(|e| JobFailure::new(e.to_string()))?,
    };
    let (mut added, mut removed, mut failed) = (0u32, 0u32, Vec::new());
    for f in fans {
        match units::subscriptions::sync_member(&ctx.store, &meta, artist, f, now, fence).await {
            Ok(r) => {
                added += r.added;
                removed += r.removed;
            }
            Err(e) => failed.push(json!({ "fan_user_id": f.get(), "reason": e.to_string() })),
        }
    }
    let summary = json!({ "added": added, "removed": removed, "failed_count": failed.len(), "failed": failed });
    if !failed.is_empty() {
        // A failed member fails the round: it is retried after 10, 30, 60, 300 s.
        return Err(JobFailure::new(summary.to_string()));
    }
    Ok(summary)
}

/// Queue a grant's subscription message (its outbox message).
pub async fn queue_message(
    ctx: &Ctx,
    artist: UserId,
    fan: UserId,
    order_no: &str,
    now: DateTime<Utc>,
) -> Result<Value, JobFailure> {
    let meta = ctx.metadata("job:im_subscription_message");
    let out = units::subscriptions::queue_message(&ctx.store, &meta, artist, fan, order_no, now)
        .await
        .map_err(failure)?;
    Ok(json!({ "queued": !out.value.is_empty() }))
}

/// Every fan an artist has a subscription or a membership row with.
pub async fn fans_of(
    db: &crate::infra::db::Db,
    artist: UserId,
) -> Result<Vec<UserId>, sqlx::Error> {
    use crate::infra::db::Get;
    use factledger_projections::table::{Cell, ColType, Column};
    let a = Cell::Int(i64::try_from(artist.get()).unwrap_or(i64::MAX));
    let rows: Vec<factledger_projections::table::MemRow> = db
        .fetch(
            "SELECT fan_user_id FROM subscriptions WHERE artist_id = ? \
             UNION SELECT fan_user_id FROM im_group_members WHERE artist_id = ?",
            &[a.clone(), a],
            &[Column {
                name: "fan_user_id",
                ty: ColType::Int,
            }],
        )
        .await?;
    let mut out = std::collections::BTreeSet::new();
    for r in rows {
        if let Ok(f) = UserId::parse(r.int("fan_user_id")?) {
            out.insert(f);
        }
    }
    Ok(out.into_iter().collect())
}
