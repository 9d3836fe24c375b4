//! Booking units: book (the booking, its candy order created paid, and the hold, in
//! one unit) and the no-show decision with the refund record it creates.

use super::{booking_with_candy, ServiceRefusal, ServiceUnitError};
use crate::infra::store::{DynStore, Fence, IdempotencyRow, Metadata};
use crate::runtime::unit::{run_unit, UnitOutcome};
use chrono::{DateTime, Utc};
use factledger_aggregates::booking::{BookCall, BookingCommand, BookingEvent};
use factledger_aggregates::refund::{Refund, RefundBusiness, RefundCommand, RequestRefund};
use factledger_aggregates::service_order::{
    CreateOrder, OrderBusiness, OrderCommand, ServiceOrder,
};
use factledger_aggregates::services::{PaymentMethod, CANDY_CURRENCY_CODE};

/// Book a call: the booking (status 0), its candy order (created paid: the hold is
/// its payment) and the hold on the fan's candy, in one unit. A booking made before
/// under the same number writes nothing.
pub async fn book(
    store: &DynStore,
    metadata: &Metadata,
    call: BookCall,
    order_timeout_at: DateTime<Utc>,
    idempotency: Option<IdempotencyRow>,
) -> Result<UnitOutcome<Vec<BookingEvent>>, ServiceUnitError> {
    run_unit(store, metadata, |mut unit| {
        let call = call.clone();
        let idempotency = idempotency.clone();
        async move {
            let booking_no = call.booking_no.clone();
            let order_no = call.order_no.clone();
            let order = CreateOrder {
                order_no: order_no.clone(),
                user_id: call.fan_user_id,
                business: OrderBusiness::Booking {
                    booking_no: booking_no.clone(),
                    artist_id: call.artist_id,
                },
                method: PaymentMethod::Candy,
                amount: call.price_candy,
                currency: None,
                created_at: call.at,
                timeout_at: order_timeout_at,
            };
            let existing = unit
                .load::<factledger_aggregates::booking::Booking, ServiceRefusal>(&booking_no)
                .await?;
            if existing.state.call.is_some() {
                // Booked before under this number: a replay writes nothing.
                return Ok((Vec::new(), unit));
            }
            // The booking (and its hold) first: it is the business root, and its
            // fields are checked before the order that pays it.
            let events =
                booking_with_candy(&mut unit, &booking_no, BookingCommand::Book(call)).await?;
            let mut o = unit.load::<ServiceOrder, ServiceRefusal>(&order_no).await?;
            unit.decide::<ServiceOrder, ServiceRefusal>(
                &mut o,
                &order_no,
                OrderCommand::Create(order),
            )?;
            if let Some(row) = idempotency {
                unit.idempotency(row);
            }
            Ok((events, unit))
        }
    })
    .await
}

/// The refund number of a booking's no-show refund (one per booking).
pub fn no_show_refund_no(booking_no: &str) -> String {
    let digest = crate::infra::jobs::md5_hex(booking_no);
    format!("RFN{}", &digest[..24])
}

/// Apply the no-show rule to a booking: the decision, its candy effect (a fan no-show
/// settles the hold to the artist) and, for a refunding branch, the refund record, in
/// one unit. Returns the refund to run, if one was created.
pub async fn no_show(
    store: &DynStore,
    metadata: &Metadata,
    booking_no: &str,
    now: DateTime<Utc>,
    fence: Option<Fence>,
) -> Result<UnitOutcome<(Vec<BookingEvent>, Option<String>)>, ServiceUnitError> {
    run_unit(store, metadata, |mut unit| async move {
        if let Some(f) = fence {
            unit.fence(f);
        }
        let refund_no = no_show_refund_no(booking_no);
        let events = booking_with_candy(
            &mut unit,
            booking_no,
            BookingCommand::CheckNoShow {
                refund_no: refund_no.clone(),
                at: now,
            },
        )
        .await?;
        let due = events.iter().find_map(|e| match e {
            BookingEvent::NoShowDecided {
                refund: Some(r), ..
            } => Some(r.clone()),
            _ => None,
        });
        let Some(due) = due else {
            return Ok(((events, None), unit));
        };
        let b = unit
            .load::<factledger_aggregates::booking::Booking, ServiceRefusal>(booking_no)
            .await?;
        let order_no = b
            .state
            .call
            .as_ref()
            .map(|c| c.order_no.clone())
            .unwrap_or_default();
        let mut r = unit.load::<Refund, ServiceRefusal>(&due.refund_no).await?;
        unit.decide::<Refund, ServiceRefusal>(
            &mut r,
            &due.refund_no,
            RefundCommand::Request(RequestRefund {
                refund_no: due.refund_no.clone(),
                transaction_no: format!("candy-{order_no}"),
                order_no,
                booking_no: Some(booking_no.to_owned()),
                business: RefundBusiness::BookingNoShow,
                method: PaymentMethod::Candy,
                account_id: String::new(),
                amount: due.candy,
                currency: CANDY_CURRENCY_CODE.to_owned(),
                at: now,
            }),
        )?;
        Ok(((events, Some(due.refund_no)), unit))
    })
    .await
}
