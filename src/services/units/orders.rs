//! Order units: create, record a gateway payment (a late one with its refund),
//! deliver what was bought, close on timeout.

use super::{ServiceRefusal, ServiceUnitError};
use crate::infra::store::{DynStore, Fence, IdempotencyRow, Metadata};
use crate::runtime::unit::{run_unit, UnitError, UnitOutcome};
use chrono::{DateTime, Utc};
use factledger_aggregates::booking::{Booking, BookingCommand};
use factledger_aggregates::candy::{CandyAccount, CandyCommand, CreditSource};
use factledger_aggregates::refund::{Refund, RefundBusiness, RefundCommand, RequestRefund};
use factledger_aggregates::service_order::{
    CreateOrder, OrderBusiness, OrderCommand, OrderEvent, OrderStatus, Payment, ServiceOrder,
};
use factledger_aggregates::services::{pair_id, UserId};
use factledger_aggregates::subscription::{Subscription, SubscriptionCommand};

/// A new order (a cash one; a booking's candy order is created by `bookings::book`).
pub async fn create(
    store: &DynStore,
    metadata: &Metadata,
    cmd: CreateOrder,
    idempotency: Option<IdempotencyRow>,
) -> Result<UnitOutcome<Vec<OrderEvent>>, ServiceUnitError> {
    run_unit(store, metadata, |mut unit| {
        let cmd = cmd.clone();
        let idempotency = idempotency.clone();
        async move {
            let id = cmd.order_no.clone();
            let mut o = unit.load::<ServiceOrder, ServiceRefusal>(&id).await?;
            let events = unit.decide::<ServiceOrder, ServiceRefusal>(
                &mut o,
                &id,
                OrderCommand::Create(cmd),
            )?;
            if let Some(row) = idempotency {
                unit.idempotency(row);
            }
            Ok((events, unit))
        }
    })
    .await
}

/// What recording a payment did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Paid {
    /// The order is paid now: deliver it.
    Paid,
    /// It was paid by this transaction before (a duplicate callback): deliver it if
    /// it is not delivered yet.
    Already,
    /// The payment came after the close (or paid twice): refund `refund_no` was
    /// created with it and must run.
    Late { refund_no: String },
}

/// The refund number of a late payment: one per transaction, so a replayed callback
/// names the same refund.
pub fn late_refund_no(transaction_no: &str) -> String {
    let digest = crate::infra::jobs::md5_hex(transaction_no);
    format!("RFL{}", &digest[..24])
}

/// Record a gateway's pay notice on its order. A payment the order does not keep
/// (closed, or paid already) is recorded as owed back, with its full cash refund
/// requested in the same unit (R-CB-2: this system's rule for a late callback).
pub async fn record_payment(
    store: &DynStore,
    metadata: &Metadata,
    order_no: &str,
    payment: Payment,
    now: DateTime<Utc>,
    fence: Option<Fence>,
) -> Result<UnitOutcome<Paid>, ServiceUnitError> {
    run_unit(store, metadata, |mut unit| {
        let payment = payment.clone();
        async move {
            if let Some(f) = fence {
                unit.fence(f);
            }
            let mut o = unit.load::<ServiceOrder, ServiceRefusal>(order_no).await?;
            let events = unit.decide::<ServiceOrder, ServiceRefusal>(
                &mut o,
                order_no,
                OrderCommand::RecordPayment {
                    payment: payment.clone(),
                    at: now,
                },
            )?;
            let outcome = match events.first() {
                None => Paid::Already,
                Some(OrderEvent::LatePaymentReceived { payment: p, .. }) => {
                    let refund_no = late_refund_no(&p.transaction_no);
                    let mut r = unit.load::<Refund, ServiceRefusal>(&refund_no).await?;
                    unit.decide::<Refund, ServiceRefusal>(
                        &mut r,
                        &refund_no,
                        RefundCommand::Request(RequestRefund {
                            refund_no: refund_no.clone(),
                            order_no: order_no.to_owned(),
                            booking_no: None,
                            business: RefundBusiness::LatePayment,
                            method: p.method,
                            transaction_no: p.transaction_no.clone(),
                            account_id: p.account_id.clone(),
                            amount: p.amount_minor,
                            currency: p.currency.clone(),
                            at: now,
                        }),
                    )?;
                    Paid::Late { refund_no }
                }
                Some(_) => Paid::Paid,
            };
            Ok((outcome, unit))
        }
    })
    .await
}

/// What a delivery did, for the side effects that follow it after commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivered {
    /// Nothing to deliver (not paid, or delivered before).
    Nothing {
        status: OrderStatus,
    },
    Candy {
        user_id: UserId,
        candy: i64,
    },
    Subscription {
        artist_id: UserId,
        fan_user_id: UserId,
    },
    Booking {
        booking_no: String,
    },
}

/// Deliver a paid order: candy credited, an entitlement granted or a booking
/// activated, with the order's `OrderDelivered`, in one unit. Idempotent by the
/// order's status and the business streams' own keys: a second run finds the order
/// delivered and writes nothing.
pub async fn deliver(
    store: &DynStore,
    metadata: &Metadata,
    order_no: &str,
    now: DateTime<Utc>,
    fence: Option<Fence>,
) -> Result<UnitOutcome<Delivered>, ServiceUnitError> {
    run_unit(store, metadata, |mut unit| async move {
        if let Some(f) = fence {
            unit.fence(f);
        }
        let mut o = unit.load::<ServiceOrder, ServiceRefusal>(order_no).await?;
        let status = o.state.status;
        let Some(order) = o
            .state
            .order
            .clone()
            .filter(|_| status == OrderStatus::Paid)
        else {
            if o.state.order.is_none() {
                return Err(UnitError::Refused(
                    factledger_aggregates::service_order::OrderError::NotFound.into(),
                ));
            }
            return Ok((Delivered::Nothing { status }, unit));
        };
        unit.decide::<ServiceOrder, ServiceRefusal>(
            &mut o,
            order_no,
            OrderCommand::Deliver { at: now },
        )?;
        let delivered = match &order.business {
            OrderBusiness::Recharge { candy } => {
                let id = order.user_id.to_string();
                let mut a = unit.load::<CandyAccount, ServiceRefusal>(&id).await?;
                unit.decide::<CandyAccount, ServiceRefusal>(
                    &mut a,
                    &id,
                    CandyCommand::Credit {
                        user_id: order.user_id,
                        source: CreditSource::Recharge,
                        order_no: order_no.to_owned(),
                        candy: *candy,
                    },
                )?;
                Delivered::Candy {
                    user_id: order.user_id,
                    candy: *candy,
                }
            }
            OrderBusiness::Subscription { artist_id, days } => {
                let id = pair_id(*artist_id, order.user_id);
                let mut s = unit.load::<Subscription, ServiceRefusal>(&id).await?;
                unit.decide::<Subscription, ServiceRefusal>(
                    &mut s,
                    &id,
                    SubscriptionCommand::Grant {
                        artist_id: *artist_id,
                        fan_user_id: order.user_id,
                        order_no: order_no.to_owned(),
                        days: *days,
                        at: now,
                    },
                )?;
                Delivered::Subscription {
                    artist_id: *artist_id,
                    fan_user_id: order.user_id,
                }
            }
            OrderBusiness::Booking { booking_no, .. } => {
                let mut b = unit.load::<Booking, ServiceRefusal>(booking_no).await?;
                unit.decide::<Booking, ServiceRefusal>(
                    &mut b,
                    booking_no,
                    BookingCommand::Activate { at: now },
                )?;
                Delivered::Booking {
                    booking_no: booking_no.clone(),
                }
            }
        };
        Ok((delivered, unit))
    })
    .await
}

/// The payer went to the gateway: an unpaid cash order moves from 0 to 1 (PAYING).
pub async fn start_payment(
    store: &DynStore,
    metadata: &Metadata,
    order_no: &str,
    now: DateTime<Utc>,
) -> Result<UnitOutcome<Vec<OrderEvent>>, ServiceUnitError> {
    run_unit(store, metadata, |mut unit| async move {
        let mut o = unit.load::<ServiceOrder, ServiceRefusal>(order_no).await?;
        let events = unit.decide::<ServiceOrder, ServiceRefusal>(
            &mut o,
            order_no,
            OrderCommand::StartPayment { at: now },
        )?;
        Ok((events, unit))
    })
    .await
}

/// Close an unpaid order past its timeout (the scan's re-check is the stream's).
pub async fn close(
    store: &DynStore,
    metadata: &Metadata,
    order_no: &str,
    now: DateTime<Utc>,
    fence: Option<Fence>,
) -> Result<UnitOutcome<Vec<OrderEvent>>, ServiceUnitError> {
    run_unit(store, metadata, |mut unit| async move {
        if let Some(f) = fence {
            unit.fence(f);
        }
        let mut o = unit.load::<ServiceOrder, ServiceRefusal>(order_no).await?;
        let events = unit.decide::<ServiceOrder, ServiceRefusal>(
            &mut o,
            order_no,
            OrderCommand::Close { at: now },
        )?;
        Ok((events, unit))
    })
    .await
}
