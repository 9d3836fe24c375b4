//! The units of work of paid services: each business step is one unit that appends
//! every stream it changes in one transaction — the order with the candy it credits,
//! the booking with the hold it moves, the refund with its order or hold. The streams'
//! own rules decide; nothing here computes money.
//!
//! Lock order (the order a unit loads its streams, R-WAL-3): business root (order or
//! booking or refund), then the entitlement (subscription), then candy accounts.

pub mod bookings;
pub mod orders;
pub mod refunds;
pub mod subscriptions;

use crate::infra::store::{DynStore, Fence, Metadata};
use crate::runtime::unit::{run_unit, UnitBuilder, UnitError, UnitOutcome};
use factledger_aggregates::booking::{Booking, BookingCommand, BookingError, BookingEvent};
use factledger_aggregates::candy::{CandyAccount, CandyError};
use factledger_aggregates::im_member::ImMemberError;
use factledger_aggregates::refund::RefundError;
use factledger_aggregates::service_order::OrderError;
use factledger_aggregates::subscription::SubscriptionError;

/// Why a paid-services unit was refused, by whichever stream refused it.
#[derive(Debug, thiserror::Error)]
pub enum ServiceRefusal {
    #[error(transparent)]
    Order(#[from] OrderError),
    #[error(transparent)]
    Candy(#[from] CandyError),
    #[error(transparent)]
    Booking(#[from] BookingError),
    #[error(transparent)]
    Subscription(#[from] SubscriptionError),
    #[error(transparent)]
    Refund(#[from] RefundError),
    #[error(transparent)]
    ImMember(#[from] ImMemberError),
}

impl factledger_aggregates::Refusal for ServiceRefusal {
    fn code(&self) -> &'static str {
        self.inner().code()
    }
    fn field(&self) -> Option<&'static str> {
        self.inner().field()
    }
    fn kind(&self) -> factledger_aggregates::RefusalKind {
        self.inner().kind()
    }
}

impl ServiceRefusal {
    fn inner(&self) -> &dyn factledger_aggregates::Refusal {
        match self {
            ServiceRefusal::Order(e) => e,
            ServiceRefusal::Candy(e) => e,
            ServiceRefusal::Booking(e) => e,
            ServiceRefusal::Subscription(e) => e,
            ServiceRefusal::Refund(e) => e,
            ServiceRefusal::ImMember(e) => e,
        }
    }
}

pub type ServiceUnitError = UnitError<ServiceRefusal>;

/// Decide `command` on booking `booking_no` and append the candy effect of each event
/// (`Booking::candy_effect`) on the fan's account, in the same unit.
pub(crate) async fn booking_with_candy(
    unit: &mut UnitBuilder,
    booking_no: &str,
    command: BookingCommand,
) -> Result<Vec<BookingEvent>, ServiceUnitError> {
    use cqrs_es::Aggregate;
    let mut b = unit.load::<Booking, ServiceRefusal>(booking_no).await?;
    let mut state = b.state.clone();
    let events = unit.decide::<Booking, ServiceRefusal>(&mut b, booking_no, command)?;
    for e in &events {
        if let Some(candy) = state.candy_effect(e) {
            let fan = match &e {
                BookingEvent::BookingRequested(c) => c.fan_user_id,
                _ => state
                    .call
                    .as_ref()
                    .map(|c| c.fan_user_id)
                    .ok_or_else(|| UnitError::Invariant("booking without a call".into()))?,
            };
            let id = fan.to_string();
            let mut account = unit.load::<CandyAccount, ServiceRefusal>(&id).await?;
            unit.decide::<CandyAccount, ServiceRefusal>(&mut account, &id, candy)?;
        }
        state.apply(e.clone());
    }
    Ok(events)
}

/// One booking command with its candy effect as its own unit (fenced in a job round).
pub async fn booking_step(
    store: &DynStore,
    metadata: &Metadata,
    booking_no: &str,
    command: BookingCommand,
    fence: Option<Fence>,
) -> Result<UnitOutcome<Vec<BookingEvent>>, ServiceUnitError> {
    run_unit(store, metadata, |mut unit| {
        let command = command.clone();
        async move {
            if let Some(f) = fence {
                unit.fence(f);
            }
            let events = booking_with_candy(&mut unit, booking_no, command).await?;
            Ok((events, unit))
        }
    })
    .await
}
